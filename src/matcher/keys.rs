//! Key normalisation, as in the reference comparator (`shared/spec/matching.md`):
//! the root-class strip, the fuzzy key and the op type.

use crate::parser::key::op_counter_at;
pub use crate::parser::key::{module_and_op, strip_root_class};

/// The fuzzy key: every `/op_<digits>_` replaced with `/` (left to right, not
/// overlapping, like Python's `re.sub`), then [`strip_root_class`].
///
/// `layers.0.w2/op_3_mm` → `layers.0.w2/mm`.
pub fn fuzzy_key(key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len());
    let mut i = 0;
    while i < key.len() {
        if key[i] == b'/' {
            if let Some(n) = op_counter_at(key, i) {
                out.push(b'/');
                i += n;
                continue;
            }
        }
        out.push(key[i]);
        i += 1;
    }
    let stripped = strip_root_class(&out).len();
    out.drain(..out.len() - stripped);
    out
}

/// The op type: the part of the fuzzy key after its last `/`.
pub fn op_type(fuzzy: &[u8]) -> &[u8] {
    match memchr::memrchr(b'/', fuzzy) {
        Some(i) => &fuzzy[i + 1..],
        None => fuzzy,
    }
}

/// Adds `offset` to the layer index of a key: its outermost numeric
/// segment ([`crate::parser::layer::outermost_index`]: `layers.<N>`,
/// `blocks.<N>`, `model.layers.<N>`; pipeline stage `k` of a model numbers
/// its layers from 0; global index = N + offset). Keys without a numeric
/// segment, or whose index would go negative, are returned unchanged.
pub fn with_layer_offset(key: &[u8], offset: i64) -> std::borrow::Cow<'_, [u8]> {
    use std::borrow::Cow;
    if offset == 0 {
        return Cow::Borrowed(key);
    }
    let Some((p, idx)) = crate::parser::layer::outermost_index(key) else {
        return Cow::Borrowed(key);
    };
    let Some(shifted) = i64::try_from(idx)
        .ok()
        .and_then(|i| i.checked_add(offset))
        .filter(|i| *i >= 0)
    else {
        return Cow::Borrowed(key);
    };
    let n = key[p..].iter().take_while(|b| b.is_ascii_digit()).count();
    let mut out = key[..p].to_vec();
    out.extend_from_slice(shifted.to_string().as_bytes());
    out.extend_from_slice(&key[p + n..]);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    #[test]
    fn layer_offsets() {
        assert_eq!(
            &*super::with_layer_offset(b"layers.0.attention.wo/op_0_mm", 4),
            b"layers.4.attention.wo/op_0_mm"
        );
        assert_eq!(
            &*super::with_layer_offset(b"norm/op_0_mul", 4),
            b"norm/op_0_mul"
        );
        assert_eq!(&*super::with_layer_offset(b"layers.1.x", -3), b"layers.1.x");
        // Any block list: the outermost numeric segment.
        assert_eq!(
            &*super::with_layer_offset(b"blocks.1.mlp.experts.3/op_0_mm", 4),
            b"blocks.5.mlp.experts.3/op_0_mm"
        );
        assert_eq!(
            &*super::with_layer_offset(b"Model.h.2/op_1_add", -2),
            b"Model.h.0/op_1_add"
        );
        assert_eq!(
            &*super::with_layer_offset(b"norm.w/op_12_mm", 4),
            b"norm.w/op_12_mm",
            "the op counter is no layer"
        );
    }

    use super::*;

    fn s(b: &[u8]) -> &str {
        std::str::from_utf8(b).unwrap()
    }

    #[test]
    fn root_class_strip() {
        assert_eq!(
            s(strip_root_class(b"FSDPLlama3Model.layers.0.wq/op_0_mm")),
            "layers.0.wq/op_0_mm"
        );
        assert_eq!(
            s(strip_root_class(b"layers.0.wq/op_0_mm")),
            "layers.0.wq/op_0_mm"
        );
        assert_eq!(s(strip_root_class(b"Linear.x")), "Linear.x");
        assert_eq!(s(strip_root_class(b"MyModel")), "MyModel");
        assert_eq!(s(strip_root_class(b"My-Model.x")), "My-Model.x");
        assert_eq!(s(strip_root_class(b"AB/op_0_mm.x")), "AB/op_0_mm.x");
        assert_eq!(s(strip_root_class(b"AB.CD.x")), "CD.x");
    }

    #[test]
    fn fuzzy_keys_and_op_types() {
        assert_eq!(s(&fuzzy_key(b"layers.0.w2/op_3_mm")), "layers.0.w2/mm");
        assert_eq!(
            s(&fuzzy_key(
                b"FSDPLlama3Model.layers.0/op_12__allgather_base_"
            )),
            "layers.0/_allgather_base_"
        );
        assert_eq!(s(&fuzzy_key(b"a/op_1_/op_2_x")), "a//x");
        assert_eq!(s(&fuzzy_key(b"a/op_x_mm")), "a/op_x_mm");
        assert_eq!(s(op_type(&fuzzy_key(b"<none>/op_6_lerp_"))), "lerp_");
        assert_eq!(s(op_type(b"nofuzzy")), "nofuzzy");
    }

    #[test]
    fn module_and_op_split() {
        let (m, o) = module_and_op(b"enc/blk.0/attn/op_0_index_put_");
        assert_eq!((s(m), s(o)), ("enc/blk.0/attn", "index_put_"));
        let (m, o) = module_and_op(b"<none>/op_0__fused_adamw_");
        assert_eq!((s(m), s(o)), ("<none>", "_fused_adamw_"));
    }
}
