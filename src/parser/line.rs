//! Classifying one line of a log.
//!
//! Mirrors the reference parser (`parse_log` in TorchTitan's
//! `compare_numerics.py`): a stat line is leading whitespace, one of the six
//! stat names, a colon, whitespace and a value; any other line that contains
//! one of the labels `Location:`, `Phase:`, `Output hash:`, `Input hashes:`,
//! `Input producers:` sets that field to the text after the label. The
//! capture agent's `Output digest:` / `Input digests:` lines are read by the
//! same "contains" rule, after the reference's labels (the reference ignores
//! them). The labels come from [`crate::logformat::field`].
//!
//! Two paths decide a line, and tests check they agree on every line shape:
//! `classify_canonical`, hand-written (`starts_with` over the labels, no
//! backtracking), takes the lines every real writer produces and is the one
//! that runs for nearly every line; [`classify_general`] applies the
//! reference's rules in full, the stat regex as a nom parser
//! (`stat_line`) and the "label anywhere" rule as one scan over the
//! line's colons.

use nom::bytes::complete::{tag, take_while1};
use nom::character::complete::char;
use nom::IResult;

use crate::logformat::field::{Field, CONTAINS_LABELS, EXTRA_LABELS, STAT_FIELDS};
pub use crate::logformat::{is_py_space, trim};

/// What one line of a log is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LineKind {
    /// Empty or whitespace only.
    Blank,
    /// A block header `[key]`: key from byte `start` to `end` of the line.
    /// `closed` is false when the line has no `]` (the key runs to the line end).
    Key {
        /// First byte of the key.
        start: usize,
        /// One past the last byte of the key.
        end: usize,
        /// Whether a closing `]` was found.
        closed: bool,
    },
    /// A field line: the value is bytes `start..end` of the line, trimmed.
    Field {
        /// Which field.
        field: Field,
        /// First byte of the value.
        start: usize,
        /// One past the last byte of the value.
        end: usize,
    },
    /// An extra line of actdiff's capture agent (`NaN count:`, `Inf count:`):
    /// known, not compared, ignored like the reference ignores it.
    Extra,
    /// A non-blank line that is no known field; `label_end` is the position of
    /// its first `:` (or the line length), for grouping warnings.
    Unknown {
        /// End of the label (first `:`), for grouping warnings.
        label_end: usize,
    },
}

/// One of the six stat labels ([`STAT_FIELDS`]), as a nom parser.
fn stat_name(i: &[u8]) -> IResult<&[u8], Field> {
    for f in STAT_FIELDS {
        if let Ok((rest, _)) = tag::<_, _, nom::error::Error<&[u8]>>(f.label())(i) {
            return Ok((rest, f));
        }
    }
    Err(nom::Err::Error(nom::error::Error::new(
        i,
        nom::error::ErrorKind::Tag,
    )))
}

/// `\s+(Shape|L1 norm|L2 norm|Min|Max|Mean):\s+(.+)` — returns the field and the
/// untrimmed rest of the line.
fn stat_line(i: &[u8]) -> IResult<&[u8], Field> {
    let (i, _) = take_while1(is_py_space)(i)?;
    let (i, f) = stat_name(i)?;
    let (i, _) = char(':')(i)?;
    let (i, _) = take_while1(is_py_space)(i)?;
    Ok((i, f))
}

/// Whether `t` starts with `label` and a `:`; the length of both.
#[inline]
fn label_colon(t: &[u8], label: &str) -> Option<usize> {
    let n = label.len();
    (t.len() > n && t[n] == b':' && t.starts_with(label.as_bytes())).then_some(n + 1)
}

fn offset_in(line: &[u8], part: &[u8]) -> usize {
    part.as_ptr() as usize - line.as_ptr() as usize
}

/// Classifies one line (without its `\n`; a trailing `\r` is allowed).
pub fn classify(line: &[u8]) -> LineKind {
    if line.first() == Some(&b'[') {
        return match memchr::memrchr(b']', line) {
            Some(end) => LineKind::Key {
                start: 1,
                end,
                closed: true,
            },
            None => {
                let t = trim(&line[1..]);
                let start = if t.is_empty() { 1 } else { offset_in(line, t) };
                LineKind::Key {
                    start,
                    end: start + t.len(),
                    closed: false,
                }
            }
        };
    }
    let t = trim(line);
    if t.is_empty() {
        return LineKind::Blank;
    }
    if let Some(k) = classify_canonical(line, t) {
        return k;
    }
    classify_general(line)
}

/// The fast path for the lines every real writer produces: indented
/// `Label: value` where the label starts the trimmed line. It returns
/// `None` whenever the general rules could decide differently (no
/// indentation, no space after a stat label, an empty stat value, or a
/// further `:` in a label line's value that might hold an earlier label),
/// and [`classify_general`] decides. Tests check both agree.
fn classify_canonical(line: &[u8], t: &[u8]) -> Option<LineKind> {
    if !line.first().is_some_and(|b| is_py_space(*b)) {
        return None;
    }
    // (field, label and colon length, stat rule, rank in the reference's
    // order of "contains" checks)
    let (field, n, stat, rank) = STAT_FIELDS
        .iter()
        .find_map(|f| Some((*f, label_colon(t, f.label())?, true, 0)))
        .or_else(|| {
            CONTAINS_LABELS
                .iter()
                .enumerate()
                .find_map(|(rank, (l, f))| Some((*f, label_colon(t, l)?, false, rank)))
        })?;
    let rest = &t[n..];
    if stat && !rest.first().is_some_and(|b| is_py_space(*b)) {
        return None;
    }
    let v = trim(rest);
    if stat && v.is_empty() {
        return None;
    }
    if !stat && rank > 0 && memchr::memchr(b':', rest).is_some() {
        return None;
    }
    let start = if v.is_empty() {
        line.len()
    } else {
        offset_in(line, v)
    };
    Some(LineKind::Field {
        field,
        start,
        end: start + v.len(),
    })
}

/// The reference's rules, in full (see the module doc).
pub fn classify_general(line: &[u8]) -> LineKind {
    if let Ok((rest, field)) = stat_line(line) {
        let v = trim(rest);
        if !v.is_empty() {
            let start = offset_in(line, v);
            return LineKind::Field {
                field,
                start,
                end: start + v.len(),
            };
        }
    }
    // Which labels occur anywhere in the line: every label ends in `:`, so
    // one pass over the line's colons finds them all; the first in the
    // reference's order of checks wins.
    // (label index, end of its first occurrence)
    let mut found: Option<(usize, usize)> = None;
    for colon in memchr::memchr_iter(b':', line) {
        let head = &line[..colon];
        for (i, (label, _)) in CONTAINS_LABELS.iter().enumerate() {
            if found.is_some_and(|(f, _)| f <= i) {
                break;
            }
            if head.ends_with(label.as_bytes()) {
                found = Some((i, colon + 1));
                break;
            }
        }
        if found.is_some_and(|(f, _)| f == 0) {
            break;
        }
    }
    if let Some((i, end)) = found {
        let field = CONTAINS_LABELS[i].1;
        // The reference takes the text after the label's first occurrence.
        let after = &line[end..];
        let v = trim(after);
        let start = if v.is_empty() {
            line.len()
        } else {
            offset_in(line, v)
        };
        return LineKind::Field {
            field,
            start,
            end: start + v.len(),
        };
    }
    let t = trim(line);
    if EXTRA_LABELS
        .iter()
        .any(|l| crate::logformat::labelled(t, l).is_some())
    {
        return LineKind::Extra;
    }
    let label_end = memchr::memchr(b':', line).unwrap_or(line.len());
    LineKind::Unknown { label_end }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn field(line: &str) -> Option<(Field, String)> {
        match classify(line.as_bytes()) {
            LineKind::Field { field, start, end } => Some((field, line[start..end].to_string())),
            _ => None,
        }
    }

    #[test]
    fn stat_lines_need_leading_space_and_value() {
        assert_eq!(
            field("  L2 norm: 1.234568e+02"),
            Some((Field::L2Norm, "1.234568e+02".into()))
        );
        assert_eq!(
            field("  L1 norm:  1.066932e+03\r"),
            Some((Field::L1Norm, "1.066932e+03".into()))
        );
        assert_eq!(
            field("  Shape: torch.Size([2, 3]), Dtype: torch.float32"),
            Some((
                Field::Shape,
                "torch.Size([2, 3]), Dtype: torch.float32".into()
            ))
        );
        assert_eq!(field("Min: 1.0"), None, "no leading whitespace");
        assert_eq!(field("  Mean:"), None);
    }

    #[test]
    fn labels_anywhere_in_the_line() {
        assert_eq!(
            field("  Location: common/attention.py:534"),
            Some((Field::Location, "common/attention.py:534".into()))
        );
        assert_eq!(
            field("  Input producers: ;;"),
            Some((Field::InputProducers, ";;".into()))
        );
        assert_eq!(
            field("  Phase: backward"),
            Some((Field::Phase, "backward".into()))
        );
        assert_eq!(
            field("xx Output hash: 1, 2"),
            Some((Field::OutputHash, "1, 2".into()))
        );
        assert_eq!(
            field("  Input hashes:"),
            Some((Field::InputHashes, "".into()))
        );
    }

    #[test]
    fn keys_use_first_open_and_last_close_bracket() {
        let l = "[model.layers[0].mlp/op_0_mm]";
        match classify(l.as_bytes()) {
            LineKind::Key { start, end, closed } => {
                assert!(closed);
                assert_eq!(&l[start..end], "model.layers[0].mlp/op_0_mm");
            }
            k => panic!("{k:?}"),
        }
        match classify(b"[layers.0.att") {
            LineKind::Key { start, end, closed } => {
                assert!(!closed);
                assert_eq!((start, end), (1, 13));
            }
            k => panic!("{k:?}"),
        }
    }

    #[test]
    fn canonical_fast_path_agrees_with_the_general_rules() {
        let values = [
            "",
            " ",
            "1.0",
            "nan",
            "a:b",
            "Location: x",
            "Phase: backward",
            ";;",
            " 2 ",
        ];
        let labels = [
            "Shape:",
            "L1 norm:",
            "L2 norm:",
            "Min:",
            "Max:",
            "Mean:",
            "Location:",
            "Phase:",
            "Output hash:",
            "Input hashes:",
            "Input producers:",
            "Output hashes:",
            "Output digest:",
            "Input digests:",
            "Min",
            "Call type:",
        ];
        for indent in ["", "  ", "\t", " "] {
            for label in labels {
                for sep in ["", " ", "  ", "\t"] {
                    for v in values {
                        for end in ["", "\r"] {
                            let line = format!("{indent}{label}{sep}{v}{end}");
                            let b = line.as_bytes();
                            let t = trim(b);
                            if t.is_empty() || b[0] == b'[' {
                                continue;
                            }
                            assert_eq!(classify(b), classify_general(b), "{line:?}");
                        }
                    }
                }
            }
        }
    }

    #[test]
    fn capture_agent_extra_lines_are_known() {
        assert_eq!(classify(b"  NaN count: 3"), LineKind::Extra);
        assert_eq!(classify(b"  Inf count: 1\r"), LineKind::Extra);
        assert_eq!(classify(b"  Layout: tp:S(1) [4, 8]"), LineKind::Extra);
        assert_eq!(classify(b"  Input layouts: R; -"), LineKind::Extra);
    }

    #[test]
    fn unknown_and_blank() {
        assert_eq!(classify(b"   \r"), LineKind::Blank);
        assert_eq!(
            classify(b"  Call type: foo"),
            LineKind::Unknown { label_end: 11 }
        );
    }
}
