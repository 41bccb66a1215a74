//! One captured op as host values, and its text in the log format
//! (`shared/spec/log-format.md`), byte for byte as TorchTitan's
//! `dump_captures_to_file` writes it.
//!
//! This part needs no libtorch: it is compiled and tested in the default build.

use crate::gen::fmt_e6;

/// The label of the extra line with the number of NaN elements of the
/// primary output (written only when it is not zero). The reference
/// comparator ignores it (it contains none of its labels); actdiff's parser
/// reports it as an unknown field line unless it learns it.
pub const NAN_COUNT_LABEL: &str = "NaN count";
/// The label of the extra line with the number of +inf/-inf elements of the
/// primary output (written only when it is not zero).
pub const INF_COUNT_LABEL: &str = "Inf count";

/// Forward or backward, as the `Phase:` line says (absent means forward).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Phase {
    /// No `Phase:` line.
    #[default]
    Forward,
    /// `Phase: backward`.
    Backward,
}

/// The reductions of one tensor (the primary output of an op).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Moments {
    /// `L2 norm`, reduced in float64.
    pub l2: f64,
    /// `Min`, computed in float32 (exactly representable in f64).
    pub min: f64,
    /// `Max`, computed in float32.
    pub max: f64,
    /// `Mean`, reduced in float64.
    pub mean: f64,
    /// Number of NaN elements.
    pub nan_count: u64,
    /// Number of +inf and -inf elements.
    pub inf_count: u64,
}

/// The stats lines of a record: the `Shape` line and, for a tensor with at
/// least one element, the reductions.
#[derive(Clone, Debug, PartialEq)]
pub struct Stats {
    /// Sizes of the tensor (`torch.Size([...])`); empty for a 0-d tensor.
    pub shape: Vec<i64>,
    /// PyTorch dtype name without `torch.` (`float32`, `bfloat16`, ...).
    pub dtype: String,
    /// `None` for an empty tensor: only the `Shape` line is written (the
    /// reference tracer cannot reduce an empty tensor: `min()` raises).
    pub moments: Option<Moments>,
}

/// One captured op with every value on the host, ready to be written.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Record {
    /// `<module_fqn>/op_<seq>_<op_name>`; `._checkpoint_wrapped_module` is
    /// removed when written.
    pub key: String,
    /// `None` for hash-only records (in-place ops below `min_numel`, ops
    /// returning nothing).
    pub stats: Option<Stats>,
    /// One L1 norm per tensor output; no `Output hash` line when empty.
    pub output_hashes: Vec<f64>,
    /// One L1 norm per tensor input, taken before the op ran; no
    /// `Input hashes` line when empty.
    pub input_hashes: Vec<f64>,
    /// Producing key per input, positionally aligned with `input_hashes`
    /// (empty string: no captured producer). Written `;`-joined when that
    /// text is not empty, as the reference does.
    pub input_producers: Vec<String>,
    /// `<short/path.py>:<line>`.
    pub location: Option<String>,
    /// Forward or backward.
    pub phase: Phase,
}

/// Appends `torch.Size([d0, d1, ...]), Dtype: torch.<dtype>`.
pub fn push_shape(out: &mut Vec<u8>, shape: &[i64], dtype: &str) {
    out.extend_from_slice(b"torch.Size([");
    for (i, d) in shape.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        out.extend_from_slice(d.to_string().as_bytes());
    }
    out.extend_from_slice(b"]), Dtype: torch.");
    out.extend_from_slice(dtype.as_bytes());
}

/// Removes every `._checkpoint_wrapped_module` (the reference's `_clean_fqn`).
pub fn clean_fqn(s: &str) -> std::borrow::Cow<'_, str> {
    const W: &str = "._checkpoint_wrapped_module";
    if s.contains(W) {
        std::borrow::Cow::Owned(s.replace(W, ""))
    } else {
        std::borrow::Cow::Borrowed(s)
    }
}

fn push_list(out: &mut Vec<u8>, vals: &[f64]) {
    for (i, v) in vals.iter().enumerate() {
        if i > 0 {
            out.extend_from_slice(b", ");
        }
        fmt_e6(out, *v);
    }
}

fn push_stat(out: &mut Vec<u8>, label: &str, v: f64) {
    out.extend_from_slice(b"  ");
    out.extend_from_slice(label.as_bytes());
    out.extend_from_slice(b": ");
    fmt_e6(out, v);
    out.push(b'\n');
}

/// Appends the header: `Total captured activations: N`, the
/// `Excluded ops dispatched:` line (sorted, `, `-joined, `(none)` when empty;
/// no line when `excluded` is `None`), 80 `=` and an empty line.
pub fn write_header(out: &mut Vec<u8>, count: u64, excluded: Option<&[String]>) {
    out.extend_from_slice(b"Total captured activations: ");
    out.extend_from_slice(count.to_string().as_bytes());
    out.push(b'\n');
    if let Some(ex) = excluded {
        let mut ops: Vec<&str> = ex.iter().map(|s| s.as_str()).collect();
        ops.sort_unstable();
        ops.dedup();
        out.extend_from_slice(b"Excluded ops dispatched: ");
        if ops.is_empty() {
            out.extend_from_slice(b"(none)");
        } else {
            out.extend_from_slice(ops.join(", ").as_bytes());
        }
        out.push(b'\n');
    }
    out.extend_from_slice(&[b'='; 80]);
    out.extend_from_slice(b"\n\n");
}

/// Appends one block: the `[key]` line, the field lines in the reference's
/// order, the extra NaN/Inf count lines (only when non-zero) after them, and
/// an empty line.
pub fn write_block(out: &mut Vec<u8>, r: &Record) {
    out.push(b'[');
    out.extend_from_slice(clean_fqn(&r.key).as_bytes());
    out.extend_from_slice(b"]\n");
    if let Some(s) = &r.stats {
        out.extend_from_slice(b"  Shape: ");
        push_shape(out, &s.shape, &s.dtype);
        out.push(b'\n');
        if let Some(m) = &s.moments {
            push_stat(out, "L2 norm", m.l2);
            push_stat(out, "Min", m.min);
            push_stat(out, "Max", m.max);
            push_stat(out, "Mean", m.mean);
        }
    }
    if !r.output_hashes.is_empty() {
        out.extend_from_slice(b"  Output hash: ");
        push_list(out, &r.output_hashes);
        out.push(b'\n');
    }
    if !r.input_hashes.is_empty() {
        out.extend_from_slice(b"  Input hashes: ");
        push_list(out, &r.input_hashes);
        out.push(b'\n');
    }
    let producers_len: usize = r.input_producers.iter().map(|p| p.len()).sum::<usize>()
        + r.input_producers.len().saturating_sub(1);
    if producers_len > 0 {
        out.extend_from_slice(b"  Input producers: ");
        for (i, p) in r.input_producers.iter().enumerate() {
            if i > 0 {
                out.push(b';');
            }
            out.extend_from_slice(clean_fqn(p).as_bytes());
        }
        out.push(b'\n');
    }
    if let Some(loc) = &r.location {
        out.extend_from_slice(b"  Location: ");
        out.extend_from_slice(loc.as_bytes());
        out.push(b'\n');
    }
    if r.phase == Phase::Backward {
        out.extend_from_slice(b"  Phase: backward\n");
    }
    if let Some(Stats {
        moments: Some(m), ..
    }) = &r.stats
    {
        for (label, n) in [
            (NAN_COUNT_LABEL, m.nan_count),
            (INF_COUNT_LABEL, m.inf_count),
        ] {
            if n > 0 {
                out.extend_from_slice(b"  ");
                out.extend_from_slice(label.as_bytes());
                out.extend_from_slice(b": ");
                out.extend_from_slice(n.to_string().as_bytes());
                out.push(b'\n');
            }
        }
    }
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(r: &Record) -> String {
        let mut v = Vec::new();
        write_block(&mut v, r);
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn full_block_in_reference_order() {
        let r = Record {
            key: "layers.0.attention_norm/op_2_mul".into(),
            stats: Some(Stats {
                shape: vec![2, 64, 256],
                dtype: "float32".into(),
                moments: Some(Moments {
                    l2: 181.0183,
                    min: -2.287835,
                    max: 2.287835,
                    mean: 2.222862e-3,
                    nan_count: 0,
                    inf_count: 0,
                }),
            }),
            output_hashes: vec![26632.24],
            input_hashes: vec![25531.41, 133.7287],
            input_producers: vec!["tok_embeddings/op_0_embedding".into(), String::new()],
            location: Some("llama3/model.py:152".into()),
            phase: Phase::Forward,
        };
        assert_eq!(
            text(&r),
            "[layers.0.attention_norm/op_2_mul]\n  Shape: torch.Size([2, 64, 256]), Dtype: torch.float32\n  L2 norm: 1.810183e+02\n  Min: -2.287835e+00\n  Max: 2.287835e+00\n  Mean: 2.222862e-03\n  Output hash: 2.663224e+04\n  Input hashes: 2.553141e+04, 1.337287e+02\n  Input producers: tok_embeddings/op_0_embedding;\n  Location: llama3/model.py:152\n\n"
        );
    }

    #[test]
    fn hash_only_backward_nonfinite_and_producers() {
        let r = Record {
            key: "layers.0._checkpoint_wrapped_module.ffn_norm/op_1_add_".into(),
            input_hashes: vec![f64::NAN, f64::INFINITY, f64::NEG_INFINITY],
            input_producers: vec![String::new(); 3],
            phase: Phase::Backward,
            ..Default::default()
        };
        assert_eq!(
            text(&r),
            "[layers.0.ffn_norm/op_1_add_]\n  Input hashes: nan, inf, -inf\n  Input producers: ;;\n  Phase: backward\n\n"
        );
        // A single input without producer: no producers line.
        let r = Record {
            key: "<none>/op_0_x".into(),
            input_hashes: vec![1.0],
            input_producers: vec![String::new()],
            ..Default::default()
        };
        assert_eq!(
            text(&r),
            "[<none>/op_0_x]\n  Input hashes: 1.000000e+00\n\n"
        );
    }

    #[test]
    fn zero_d_empty_and_counts() {
        let r = Record {
            key: "a/op_0_sum".into(),
            stats: Some(Stats {
                shape: vec![],
                dtype: "bfloat16".into(),
                moments: Some(Moments {
                    l2: f64::INFINITY,
                    min: f64::NAN,
                    max: f64::NAN,
                    mean: f64::NAN,
                    nan_count: 3,
                    inf_count: 1,
                }),
            }),
            output_hashes: vec![-0.0],
            ..Default::default()
        };
        assert_eq!(
            text(&r),
            "[a/op_0_sum]\n  Shape: torch.Size([]), Dtype: torch.bfloat16\n  L2 norm: inf\n  Min: nan\n  Max: nan\n  Mean: nan\n  Output hash: -0.000000e+00\n  NaN count: 3\n  Inf count: 1\n\n"
        );
        let r = Record {
            key: "a/op_1_mm".into(),
            stats: Some(Stats {
                shape: vec![0, 4],
                dtype: "float16".into(),
                moments: None,
            }),
            output_hashes: vec![0.0],
            ..Default::default()
        };
        assert_eq!(
            text(&r),
            "[a/op_1_mm]\n  Shape: torch.Size([0, 4]), Dtype: torch.float16\n  Output hash: 0.000000e+00\n\n"
        );
    }

    #[test]
    fn header() {
        let mut v = Vec::new();
        write_header(
            &mut v,
            3,
            Some(&["view".into(), "t".into(), "_to_copy".into()]),
        );
        let s = String::from_utf8(v).unwrap();
        assert_eq!(
            s,
            format!(
                "Total captured activations: 3\nExcluded ops dispatched: _to_copy, t, view\n{}\n\n",
                "=".repeat(80)
            )
        );
        let mut v = Vec::new();
        write_header(&mut v, 0, Some(&[]));
        assert!(String::from_utf8(v)
            .unwrap()
            .starts_with("Total captured activations: 0\nExcluded ops dispatched: (none)\n"));
        let mut v = Vec::new();
        write_header(&mut v, 0, None);
        assert_eq!(v.iter().filter(|b| **b == b'\n').count(), 3);
    }
}
