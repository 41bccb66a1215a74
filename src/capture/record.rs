//! One captured op as host values, and its text in the log format
//! (`shared/spec/log-format.md`), byte for byte as TorchTitan's
//! `dump_captures_to_file` writes it (with [`Precision::PRINTED`] and no
//! digests), through the shared writer [`crate::logformat`].
//!
//! This part needs no libtorch: it is compiled and tested in the default build.

use crate::logformat::{self as lf, write_header as lf_header, Field, HeaderNotes};
pub use crate::logformat::{Phase, Precision};

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
    /// Forward, backward or optimizer (an optimizer phase is written only
    /// as `explicit_phase` says: a reader takes it from the block's
    /// position).
    pub phase: Phase,
    /// Whether the `Phase:` line is written for a forward or optimizer
    /// record too (a forward record after a backward one; an optimizer
    /// record before any backward one: `OpRecord::phase`).
    pub explicit_phase: bool,
    /// Content digest per tensor output ([`crate::capture::digest`]),
    /// aligned with `output_hashes`; empty: no `Output digest` line.
    pub output_digests: Vec<u64>,
    /// Content digest per tensor input, aligned with `input_hashes`; empty:
    /// no `Input digests` line.
    pub input_digests: Vec<u64>,
    /// The layout lines of an op on DTensors or their shards (`None`: a
    /// plain op, no lines).
    pub layout: Option<crate::logformat::BlockLayout>,
    /// The parameters an optimizer-step op reads or writes, `, `-joined
    /// FQNs ([`crate::logformat::PARAMETERS_LABEL`]); empty: no line.
    pub parameters: String,
    /// The parameters of each Output hash value, when they differ from
    /// value to value ([`crate::logformat::OUTPUT_PARAMETERS_LABEL`]);
    /// empty: no line.
    pub output_parameters: Vec<String>,
    /// The parameter at each input of an op outside the optimizer step,
    /// aligned with its inputs (empty entries where an input is none;
    /// [`crate::logformat::INPUT_PARAMETERS_LABEL`]); all empty or none:
    /// no line.
    pub input_parameters: Vec<String>,
}

pub use crate::logformat::push_shape;

/// Removes every `._checkpoint_wrapped_module` (the reference's `_clean_fqn`).
pub fn clean_fqn(s: &str) -> std::borrow::Cow<'_, str> {
    const W: &str = "._checkpoint_wrapped_module";
    if s.contains(W) {
        std::borrow::Cow::Owned(s.replace(W, ""))
    } else {
        std::borrow::Cow::Borrowed(s)
    }
}

/// Appends the header (see [`crate::logformat::write_header`]).
pub fn write_header(out: &mut Vec<u8>, count: u64, notes: &HeaderNotes, precision: Precision) {
    lf_header(out, count, notes, precision)
}

/// Appends one block: the `[key]` line, the field lines in the reference's
/// order with the digest lines after `Input hashes` (docs/log-format.md,
/// "Full-precision logs and digests"), the extra
/// NaN/Inf count lines (only when non-zero) after them, and an empty line.
/// Floats are printed in `precision`.
pub fn write_block(out: &mut Vec<u8>, r: &Record, precision: Precision) {
    lf::key_line(out, clean_fqn(&r.key).as_bytes());
    if let Some(s) = &r.stats {
        lf::shape_line(out, &s.shape, &s.dtype);
        if let Some(m) = &s.moments {
            lf::stat_line(out, Field::L2Norm, m.l2, precision);
            lf::stat_line(out, Field::Min, m.min, precision);
            lf::stat_line(out, Field::Max, m.max, precision);
            lf::stat_line(out, Field::Mean, m.mean, precision);
        }
    }
    lf::list_line(out, Field::OutputHash, &r.output_hashes, precision);
    lf::list_line(out, Field::InputHashes, &r.input_hashes, precision);
    lf::digest_line(out, Field::OutputDigest, &r.output_digests);
    lf::digest_line(out, Field::InputDigests, &r.input_digests);
    if r.input_producers.len() > 1 || r.input_producers.iter().any(|p| !p.is_empty()) {
        lf::producers_line(out, r.input_producers.len(), |out, i| {
            out.extend_from_slice(clean_fqn(&r.input_producers[i]).as_bytes())
        });
    }
    if let Some(loc) = &r.location {
        lf::text_line(out, Field::Location, loc.as_bytes());
    }
    if r.explicit_phase {
        lf::text_line(out, Field::Phase, r.phase.as_str().as_bytes());
    } else {
        lf::phase_line(out, r.phase);
    }
    lf::parameters_line(out, &r.parameters);
    lf::output_parameters_line(out, &r.output_parameters);
    lf::input_parameters_line(out, &r.input_parameters);
    if let Some(l) = &r.layout {
        lf::layout_lines(out, l);
    }
    if let Some(Stats {
        moments: Some(m), ..
    }) = &r.stats
    {
        lf::count_lines(out, m.nan_count, m.inf_count);
    }
    out.push(b'\n');
}

#[cfg(test)]
mod tests {
    use super::*;

    fn text(r: &Record) -> String {
        let mut v = Vec::new();
        write_block(&mut v, r, Precision::PRINTED);
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
            output_digests: Vec::new(),
            input_digests: Vec::new(),
            input_producers: vec!["tok_embeddings/op_0_embedding".into(), String::new()],
            location: Some("llama3/model.py:152".into()),
            phase: Phase::Forward,
            explicit_phase: false,
            layout: None,
            parameters: String::new(),
            output_parameters: Vec::new(),
            input_parameters: Vec::new(),
        };
        assert_eq!(
            text(&r),
            "[layers.0.attention_norm/op_2_mul]\n  Shape: torch.Size([2, 64, 256]), Dtype: torch.float32\n  L2 norm: 1.810183e+02\n  Min: -2.287835e+00\n  Max: 2.287835e+00\n  Mean: 2.222862e-03\n  Output hash: 2.663224e+04\n  Input hashes: 2.553141e+04, 1.337287e+02\n  Input producers: tok_embeddings/op_0_embedding;\n  Location: llama3/model.py:152\n\n"
        );
    }

    #[test]
    fn parameters_line_follows_the_location_and_reads_back() {
        let r = Record {
            key: "<none>/op_3_lerp_".into(),
            input_hashes: vec![1.0],
            location: Some("optim/adam.py:420".into()),
            parameters: "l1.weight, l2.bias".into(),
            ..Default::default()
        };
        let block = text(&r);
        assert_eq!(
            block,
            "[<none>/op_3_lerp_]\n  Input hashes: 1.000000e+00\n  Location: optim/adam.py:420\n  Parameters: l1.weight, l2.bias\n\n"
        );
        let log = format!("Total captured activations: 1\n\n{block}");
        let t = crate::parser::parse_bytes(log.into_bytes(), "p.log");
        assert_eq!(t.parameters(0), "l1.weight, l2.bias");
        assert!(t.warnings().is_empty(), "{:?}", t.warnings());
        // A foreach op's outputs, one parameter each: the line after it.
        let r = Record {
            output_hashes: vec![1.0, 2.0],
            output_parameters: vec!["l1.weight".into(), "l2.bias".into()],
            ..r
        };
        assert!(text(&r).ends_with(
            "  Parameters: l1.weight, l2.bias\n  Output parameters: l1.weight; l2.bias\n\n"
        ));
        // No names: no line.
        let r = Record {
            parameters: String::new(),
            output_parameters: Vec::new(),
            ..r
        };
        assert!(!text(&r).contains("Parameters"));
        // A forward op reading a parameter: its place among the inputs,
        // read back as an extra line (no warning).
        let r = Record {
            key: "blocks.1.fc1/op_0_mm".into(),
            input_hashes: vec![1.0, 2.0],
            location: None,
            input_parameters: vec![String::new(), "blocks.1.fc1.lora_A".into()],
            ..Default::default()
        };
        let block = text(&r);
        assert!(
            block.ends_with("  Input parameters: ;blocks.1.fc1.lora_A\n\n"),
            "{block}"
        );
        let log = format!("Total captured activations: 1\n\n{block}");
        let t = crate::parser::parse_bytes(log.into_bytes(), "p.log");
        assert!(t.warnings().is_empty(), "{:?}", t.warnings());
        assert_eq!(t.input_parameters(0), ";blocks.1.fc1.lora_A");
        // No input a parameter: no line.
        let r = Record {
            input_parameters: vec![String::new(), String::new()],
            ..r
        };
        assert!(!text(&r).contains("Input parameters"));
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
        let notes = HeaderNotes {
            excluded: Some(vec!["view".into(), "t".into(), "_to_copy".into()]),
            ..HeaderNotes::default()
        };
        write_header(&mut v, 3, &notes, Precision::PRINTED);
        let s = String::from_utf8(v).unwrap();
        assert_eq!(
            s,
            format!(
                "Total captured activations: 3\nExcluded ops dispatched: _to_copy, t, view\n{}\n\n",
                "=".repeat(80)
            )
        );
        let mut v = Vec::new();
        let notes = HeaderNotes {
            excluded: Some(vec![]),
            ..HeaderNotes::default()
        };
        write_header(&mut v, 0, &notes, Precision::PRINTED);
        assert!(String::from_utf8(v)
            .unwrap()
            .starts_with("Total captured activations: 0\nExcluded ops dispatched: (none)\n"));
        let mut v = Vec::new();
        write_header(&mut v, 0, &HeaderNotes::default(), Precision::PRINTED);
        assert_eq!(v.iter().filter(|b| **b == b'\n').count(), 3);
    }

    #[test]
    fn full_precision_and_digest_lines() {
        let r = Record {
            key: "a/op_0_add".into(),
            stats: Some(Stats {
                shape: vec![3],
                dtype: "float32".into(),
                moments: Some(Moments {
                    l2: 0.1,
                    min: -0.0,
                    max: 1.0,
                    mean: 1.0 / 3.0,
                    nan_count: 0,
                    inf_count: 0,
                }),
            }),
            output_hashes: vec![2.5],
            input_hashes: vec![1.0, f64::NAN],
            input_producers: vec!["x/op_0_mm".into(), String::new()],
            output_digests: vec![0x0123_4567_89ab_cdef],
            input_digests: vec![1, u64::MAX],
            ..Default::default()
        };
        let mut v = Vec::new();
        write_block(&mut v, &r, Precision::Full);
        assert_eq!(
            String::from_utf8(v).unwrap(),
            "[a/op_0_add]\n  Shape: torch.Size([3]), Dtype: torch.float32\n  L2 norm: 1e-01\n  Min: -0e+00\n  Max: 1e+00\n  Mean: 3.333333333333333e-01\n  Output hash: 2.5e+00\n  Input hashes: 1e+00, nan\n  Output digest: 0123456789abcdef\n  Input digests: 0000000000000001, ffffffffffffffff\n  Input producers: x/op_0_mm;\n\n"
        );
    }
}
