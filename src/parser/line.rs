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
//! `classify_canonical`, hand-written (the text before the line's first
//! `:` looked up among the labels by length, no backtracking), takes the lines every real writer produces and is the one
//! that runs for nearly every line; [`classify_general`] applies the
//! reference's rules in full, the stat regex as a nom parser
//! (`stat_line`) and the "label anywhere" rule as one scan over the
//! line's colons.

use nom::bytes::complete::{tag, take_while1};
use nom::character::complete::char;
use nom::IResult;

use super::scan::{first_colon, has_colon};
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

fn offset_in(line: &[u8], part: &[u8]) -> usize {
    part.as_ptr() as usize - line.as_ptr() as usize
}

/// Classifies one line (without its `\n`; a trailing `\r` is allowed).
///
/// Inlined into the parse's per-line loop: a call per line, with its
/// saved registers and the [`LineKind`] returned through memory, cost a
/// fifth of the line's instructions.
#[inline(always)]
pub fn classify(line: &[u8]) -> LineKind {
    if line.first() == Some(&b'[') {
        // The last `]` is nearly always the line's last byte.
        let close = match line.last() {
            Some(b']') => Some(line.len() - 1),
            _ => memchr::memrchr(b']', line),
        };
        return match close {
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
    // Only the start is trimmed here: the value's end is trimmed once, by
    // the fast path.
    let lead = leading_space(line);
    let u = &line[lead..];
    if u.is_empty() {
        return LineKind::Blank;
    }
    if lead > 0 {
        if let Some(k) = classify_canonical(line, u) {
            return k;
        }
    }
    classify_general(line)
}

/// The fast path for the lines every real writer produces: indented
/// `Label: value` where the label starts the line after its indentation
/// (`u`: the line without its leading whitespace, of which there is
/// some). It returns `None` whenever the general rules could decide
/// differently (no space after a stat label, an empty stat value, or a
/// further `:` in a label line's value that might hold an earlier label),
/// and [`classify_general`] decides. Tests check both agree.
///
/// No label holds a `:`, so a line starts with `label:` exactly when its
/// text before the first `:` is that label: one search for the colon
/// ([`first_colon`]) and one lookup by length ([`LABELS_BY_LEN`]) instead
/// of a `starts_with` per label. Inlined (through [`classify`]) into the
/// parse's per-line loop, as the one path nearly every line takes.
#[inline(always)]
fn classify_canonical(line: &[u8], u: &[u8]) -> Option<LineKind> {
    let colon = first_colon(u)?;
    let (field, stat, rank) = label_field(&u[..colon])?;
    let rest = &u[colon + 1..];
    if stat && !rest.first().is_some_and(|b| is_py_space(*b)) {
        return None;
    }
    // `leading_space` took every leading whitespace byte: only the end is
    // left to trim.
    let v = &rest[leading_space(rest)..];
    let v = &v[..v.len() - trailing_space(v)];
    if stat && v.is_empty() {
        return None;
    }
    if !stat && rank > 0 && has_colon(rest) {
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

/// How many whitespace bytes ([`is_py_space`]) `s` starts with. A
/// writer indents by two spaces and puts one after a label's `:`: those
/// are decided by one compare of two bytes, other runs byte by byte.
#[inline(always)]
fn leading_space(s: &[u8]) -> usize {
    match s {
        [b' ', b' ', c, ..] if !is_py_space(*c) => 2,
        [b' ', c, ..] if !is_py_space(*c) => 1,
        _ => s.iter().take_while(|b| is_py_space(**b)).count(),
    }
}

/// How many whitespace bytes ([`is_py_space`]) `s` ends with: a writer's
/// line ends with its value, so nearly always one test.
#[inline(always)]
fn trailing_space(s: &[u8]) -> usize {
    match s.last() {
        Some(b) if is_py_space(*b) => s.iter().rev().take_while(|b| is_py_space(**b)).count(),
        _ => 0,
    }
}

/// A label of the fast path: the field, whether the stat rule reads it
/// (a [`STAT_FIELDS`] label), and its rank in the reference's order of
/// "contains" checks ([`CONTAINS_LABELS`]; 0 for a stat).
type LabelEntry = (Field, bool, u8);

/// Longest label the fast path knows, plus one (the `:` must lie within
/// [`first_colon`]'s 16 bytes).
const LABEL_SLOTS: usize = 17;

/// Every label of [`STAT_FIELDS`] and [`CONTAINS_LABELS`], by length: at
/// most three share one.
const LABELS_BY_LEN: [[Option<(&str, LabelEntry)>; 3]; LABEL_SLOTS] = {
    let mut t: [[Option<(&str, LabelEntry)>; 3]; LABEL_SLOTS] = [[None; 3]; LABEL_SLOTS];
    let mut i = 0;
    while i < STAT_FIELDS.len() + CONTAINS_LABELS.len() {
        let (label, entry) = if i < STAT_FIELDS.len() {
            (STAT_FIELDS[i].label(), (STAT_FIELDS[i], true, 0))
        } else {
            let rank = i - STAT_FIELDS.len();
            let (label, field) = CONTAINS_LABELS[rank];
            (label, (field, false, rank as u8))
        };
        assert!(label.len() < 16, "a label's `:` must lie within 16 bytes");
        let slot = &mut t[label.len()];
        let mut j = 0;
        while slot[j].is_some() {
            j += 1;
        }
        slot[j] = Some((label, entry));
        i += 1;
    }
    t
};

/// The fast path's label that is exactly `label`, if any.
#[inline]
fn label_field(label: &[u8]) -> Option<(Field, bool, usize)> {
    let slot = LABELS_BY_LEN.get(label.len())?;
    slot.iter()
        .map_while(|e| *e)
        .find(|(l, _)| short_eq(l.as_bytes(), label))
        .map(|(_, (f, stat, rank))| (f, stat, rank as usize))
}

/// `a == b` for two slices of the same length, 3 to 16 bytes: two
/// overlapping word compares, no `memcmp` call.
#[inline]
fn short_eq(a: &[u8], b: &[u8]) -> bool {
    let n = a.len();
    debug_assert_eq!(n, b.len());
    let word = |s: &[u8], at: usize| u64::from_le_bytes(s[at..at + 8].try_into().expect("8"));
    let half = |s: &[u8], at: usize| u32::from_le_bytes(s[at..at + 4].try_into().expect("4"));
    match n {
        8.. => word(a, 0) == word(b, 0) && word(a, n - 8) == word(b, n - 8),
        4.. => half(a, 0) == half(b, 0) && half(a, n - 4) == half(b, n - 4),
        _ => a == b,
    }
}

/// The reference's rules, in full (see the module doc). Rare in real logs:
/// kept out of line.
#[inline(never)]
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
    fn leading_space_counts_every_whitespace_byte() {
        for s in [
            &b""[..],
            b" ",
            b"  ",
            b"   ",
            b" \t",
            b"  \tx",
            b"  x",
            b" x",
            b"x ",
            b"\x1f\x0b y",
            b"  \r",
        ] {
            let want = s.iter().take_while(|b| is_py_space(**b)).count();
            assert_eq!(leading_space(s), want, "{s:?}");
        }
    }

    #[test]
    fn trailing_space_counts_every_whitespace_byte() {
        for s in [&b""[..], b" ", b"x", b"x ", b"x \t\r", b" \x0c", b"\x1fx"] {
            let want = s.iter().rev().take_while(|b| is_py_space(**b)).count();
            assert_eq!(trailing_space(s), want, "{s:?}");
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
