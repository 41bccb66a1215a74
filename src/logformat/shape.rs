//! The Shape field's text: `torch.Size([d0, d1, ...]), Dtype:
//! torch.<dtype>`, as the tracer prints a tensor's sizes and dtype. Written
//! by [`push_shape`] / [`shape_line`], read by [`read_shape`] (the
//! matcher's notes and tolerance rules take the dims and the dtype from
//! it).

use super::number::push_u64;
use super::{text_line, Field};

/// Appends `torch.Size([d0, d1, ...]), Dtype: torch.<dtype>` (no label).
pub fn push_shape(out: &mut Vec<u8>, shape: &[i64], dtype: &str) {
    out.extend_from_slice(b"torch.Size([");
    for (i, d) in shape.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        if *d < 0 {
            out.push(b'-');
        }
        push_u64(out, d.unsigned_abs());
    }
    out.extend_from_slice(b"]), Dtype: torch.");
    out.extend_from_slice(dtype.as_bytes());
}

/// Appends `  Shape: torch.Size([...]), Dtype: torch.<dtype>` and a newline.
pub fn shape_line(out: &mut Vec<u8>, shape: &[i64], dtype: &str) {
    let mut v = Vec::with_capacity(48);
    push_shape(&mut v, shape, dtype);
    text_line(out, Field::Shape, &v);
}

/// A Shape value as read by [`read_shape`]: the text inside `Size([...])`
/// and the dtype name. Either is missing when the text does not hold it
/// (the value is kept as text, never rejected).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ShapeText<'a> {
    /// The text between `Size([` and `])`, if both occur (and the value is
    /// UTF-8).
    size: Option<&'a str>,
    /// The dtype name without `torch.` (`bfloat16`); `""` when the value
    /// has no `Dtype:` (or is no UTF-8).
    dtype: &'a str,
}

/// Reads a Shape value (`torch.Size([2, 64]), Dtype: torch.bfloat16`):
/// the dims are the text between the first `Size([` and the `])` after it,
/// the dtype the text after the last `Dtype:`, trimmed, without `torch.`.
pub fn read_shape(text: &[u8]) -> ShapeText<'_> {
    let Ok(s) = std::str::from_utf8(text) else {
        return ShapeText {
            size: None,
            dtype: "",
        };
    };
    let size = s.find("Size([").and_then(|a| {
        let a = a + 6;
        let b = a + s[a..].find("])")?;
        Some(&s[a..b])
    });
    let dtype = match s.rfind("Dtype:") {
        Some(i) => {
            let d = s[i + 6..].trim();
            d.strip_prefix("torch.").unwrap_or(d)
        }
        None => "",
    };
    ShapeText { size, dtype }
}

impl<'a> ShapeText<'a> {
    /// Whether `self` and `other` have the same dims text (both read),
    /// whatever their dtypes: `Size([2, 64])` in float32 and in bfloat16.
    pub fn same_size(&self, other: &ShapeText<'_>) -> bool {
        self.size.is_some() && self.size == other.size
    }

    /// The dims (`[2, 64]`; `[]` for a 0-d tensor), or `None` when they do
    /// not read as integers.
    pub fn dims(&self) -> Option<Vec<i64>> {
        let inner = self.size?.trim();
        if inner.is_empty() {
            return Some(Vec::new());
        }
        inner.split(',').map(|d| d.trim().parse().ok()).collect()
    }

    /// Whether the value reads as a shape and a dtype, as every writer
    /// prints it (`torch.Size([2, 64]), Dtype: torch.bfloat16`): integer
    /// dims, and a dtype name of letters, digits and `_`.
    pub fn reads(&self) -> bool {
        self.dims().is_some()
            && !self.dtype.is_empty()
            && self
                .dtype
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'_')
    }

    /// The dtype name without `torch.` (`bfloat16`), `""` when absent.
    pub fn dtype(&self) -> &'a str {
        self.dtype
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_only_a_shape_and_a_dtype() {
        for ok in [
            "torch.Size([2, 64]), Dtype: torch.bfloat16",
            "torch.Size([]), Dtype: torch.float32",
            "torch.Size([3]), Dtype: torch.float8_e4m3fn",
        ] {
            assert!(read_shape(ok.as_bytes()).reads(), "{ok}");
        }
        for bad in [
            "torch.Size([4, 1x6]), Dtype: torch.float32",
            "torch.Size([4, 16]), Dtype: ???",
            "torch.Size([4, 16])",
            "[4, 16], Dtype: torch.float32",
        ] {
            assert!(!read_shape(bad.as_bytes()).reads(), "{bad}");
        }
    }

    #[test]
    fn written_shapes_read_back() {
        for (dims, dtype) in [
            (vec![2i64, 64, 256], "float32"),
            (vec![], "bfloat16"),
            (vec![0, 4], "float16"),
            (vec![-1], "int64"),
        ] {
            let mut v = Vec::new();
            push_shape(&mut v, &dims, dtype);
            let s = read_shape(&v);
            assert_eq!(s.dims(), Some(dims));
            assert_eq!(s.dtype(), dtype);
        }
    }

    #[test]
    fn odd_shape_texts() {
        assert_eq!(read_shape(b"torch.Size([2, x])").dims(), None);
        assert_eq!(read_shape(b"torch.Size([2, x])").dtype(), "");
        assert_eq!(read_shape(b"Size([3]").dims(), None);
        assert_eq!(read_shape(b"Dtype: float8").dtype(), "float8");
        assert_eq!(read_shape(b"\xff Dtype: torch.float32").dtype(), "");
        assert_eq!(
            read_shape(b"torch.Size([ ]), Dtype: torch.f").dims(),
            Some(vec![])
        );
    }
}
