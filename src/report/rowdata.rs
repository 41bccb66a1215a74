//! The rows of a result page as data: for each result row, its keys,
//! status, match method, chips, notes and the cells of each side (the
//! columns of [`COLUMNS`], the one list of them), with differing cells
//! coloured and values the parser could not read marked. A page carries them as JSON in a
//! `<script type="application/json" id="rows">` element and its script
//! (`templates/report.js`, which reads that element) draws the tables from them: writing
//! JSON with serde is much faster than rendering every cell through tera
//! (`docs/performance.md`).
//!
//! JSON shape ([`write_page_json`]): `{"n": [name1, name2], "forward":
//! [row, ...], "backward": [row, ...], "optimizer": [row, ...]}`; a row is [`RowData`] with empty fields left
//! out; a cell is a string (plain text) or an object (`t` text, `v` input
//! hashes `[{"h", "p"}]`, `m` absent, `c` clipped, `x` colour class, `k`
//! other class, `d` title, `u` holds a value the parser could not read). The JSON is written so that it cannot end its
//! `<script>` element: every `<` is `\u003c`. The page
//! script escapes every string it puts into markup.

use std::borrow::Cow;

use serde::Serialize;

use super::colour::Palette;
use super::RankComparison;
use crate::matcher::cause::CauseKind;
use crate::matcher::compare::{field_diff, holds_nonfinite, split_tokens, stat_diffs};
use crate::matcher::notes::{self, dims_difference, NoteKind};
use crate::matcher::policy::dtype_of;
use crate::matcher::{MatchRow, Policy, Sides, Source, Status};
use crate::parser::value::first_unreadable;
use crate::parser::{Field, OpTable};

/// A displayed cell longer than this (in bytes) is clipped to about three
/// lines and expands on click.
const CLIP_LEN: usize = 64;

/// One input hash value and the key of the op that produced it ("" when
/// unknown).
#[derive(Serialize)]
struct HashVal<'a> {
    h: Cow<'a, str>,
    #[serde(skip_serializing_if = "str::is_empty")]
    p: Cow<'a, str>,
}

/// One data cell of one side. Most cells are [`Cell::Plain`]: a bare JSON
/// string, drawn as `<td>text`.
#[derive(Serialize)]
#[serde(untagged)]
enum Cell<'a> {
    /// A present field, not coloured, not clipped, without producers.
    Plain(Cow<'a, str>),
    /// Anything else.
    Rich(Box<Rich<'a>>),
}

/// A cell with attributes or structure.
#[derive(Serialize, Default)]
struct Rich<'a> {
    /// Text (unused when `v` is set).
    #[serde(skip_serializing_if = "str::is_empty")]
    t: Cow<'a, str>,
    /// Input hash values with their producers (Input hashes only).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    v: Vec<HashVal<'a>>,
    /// The field is absent: show "—".
    #[serde(skip_serializing_if = "is_false")]
    m: bool,
    /// Clip to about three lines.
    #[serde(skip_serializing_if = "is_false")]
    c: bool,
    /// Colour class `x{n}` of a differing cell; 0 when not coloured.
    #[serde(skip_serializing_if = "is_zero")]
    x: u32,
    /// Another class when `x` is 0: `m` (absent), `nf` (holds NaN or Inf),
    /// `nfx` (holds NaN or Inf and differs), `nfd` (finite, differs from a
    /// NaN or Inf); "" for none.
    #[serde(skip_serializing_if = "str::is_empty")]
    k: &'static str,
    /// Title of a differing cell (run 2's side only; "" otherwise).
    #[serde(skip_serializing_if = "str::is_empty")]
    d: String,
    /// The field holds a value the parser could not read
    /// ([`crate::parser::value::Token::Unreadable`]), which is not
    /// compared: the page script marks the cell (class `unreadable`).
    #[serde(skip_serializing_if = "is_false")]
    u: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

fn is_zero(x: &u32) -> bool {
    *x == 0
}

/// Log bytes as text: borrowed when valid UTF-8 (checked by the fast
/// validator), else with replacement characters.
fn text(b: &[u8]) -> Cow<'_, str> {
    match std::str::from_utf8(b) {
        Ok(s) => Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(b),
    }
}

impl<'a> Cell<'a> {
    /// A field's cell: absent, clipped or plain; a value holding NaN or Inf
    /// gets the class `nf`.
    fn text(b: &'a [u8]) -> Cell<'a> {
        if b.is_empty() {
            Cell::Rich(Box::new(Rich {
                m: true,
                k: "m",
                ..Rich::default()
            }))
        } else if b.len() > CLIP_LEN || holds_nonfinite(b) {
            Cell::Rich(Box::new(Rich {
                t: text(b),
                c: b.len() > CLIP_LEN,
                k: if holds_nonfinite(b) { "nf" } else { "" },
                ..Rich::default()
            }))
        } else {
            Cell::Plain(text(b))
        }
    }
    /// The Input hashes cell: each value with its producer, when any is known.
    fn inputs(hashes: &'a [u8], producers: &'a [u8]) -> Cell<'a> {
        if hashes.is_empty()
            || producers
                .iter()
                .all(|b| *b == b';' || b.is_ascii_whitespace())
        {
            return Cell::text(hashes);
        }
        let mut prod = producers.split(|b| *b == b';');
        let v = split_tokens(hashes)
            .map(|h| HashVal {
                h: text(h),
                p: text(prod.next().map(|p| p.trim_ascii()).unwrap_or_default()),
            })
            .collect();
        Cell::Rich(Box::new(Rich {
            v,
            c: hashes.len() > CLIP_LEN,
            k: if holds_nonfinite(hashes) { "nf" } else { "" },
            ..Rich::default()
        }))
    }
    /// The cell's attributes, made rich first if needed.
    fn rich(&mut self) -> &mut Rich<'a> {
        if let Cell::Plain(t) = self {
            *self = Cell::Rich(Box::new(Rich {
                t: std::mem::take(t),
                ..Rich::default()
            }));
        }
        match self {
            Cell::Rich(r) => r,
            Cell::Plain(_) => unreachable!(),
        }
    }
    /// Marks the cell of a number field when its text holds a value the
    /// parser could not read (and warned about).
    fn unreadable(mut self, field: Field, b: &[u8]) -> Cell<'a> {
        if field.is_numeric() && first_unreadable(b).is_some() {
            self.rich().u = true;
        }
        self
    }
    /// Whether the cell holds a NaN or an infinity.
    fn nonfinite(&self) -> bool {
        matches!(self, Cell::Rich(r) if r.k == "nf")
    }
    /// Colours the cell with class `x` (and `title`, if not empty).
    fn colour(&mut self, x: u32, title: String) {
        let rich = self.rich();
        rich.x = x;
        rich.d = title;
    }
    /// Marks the cell as part of a difference involving NaN or Inf.
    fn colour_nonfinite(&mut self, title: &str) {
        let rich = self.rich();
        rich.k = if rich.k == "nf" { "nfx" } else { "nfd" };
        rich.d = title.to_string();
    }
}

/// The data columns of a side, in order: the result pages' column heads
/// (`src/report/html/page.rs` writes them from this list, the page script
/// counts them from it; `report.css` sizes them by position from the end).
pub(super) const COLUMNS: [&str; 9] = [
    "Output hash",
    "Input hashes",
    "Location",
    "Shape",
    "Phase",
    "L2 norm",
    "Min",
    "Max",
    "Mean",
];

/// Indices of the cells of a side, in column order ([`COLUMNS`]).
const C_OUT: usize = 0;
const C_IN: usize = 1;
const C_SHAPE: usize = 3;
const C_L2: usize = 5;
/// Location's column (the page script keeps its line number whole).
pub(super) const C_LOC: usize = 2;

/// The nine data cells of one side ([`COLUMNS`]); a number field holding
/// a value that does not read is marked ([`Cell::unreadable`]).
fn side_cells(t: &OpTable, r: usize) -> Vec<Cell<'_>> {
    let f = t.fields(r);
    let at = |field: Field| f[field as usize];
    let num = |field: Field| Cell::text(at(field)).unreadable(field, at(field));
    vec![
        num(Field::OutputHash),
        Cell::inputs(at(Field::InputHashes), at(Field::InputProducers))
            .unreadable(Field::InputHashes, at(Field::InputHashes)),
        Cell::text(at(Field::Location)),
        Cell::text(at(Field::Shape)),
        Cell::Plain(t.phase(r)),
        num(Field::L2Norm),
        num(Field::Min),
        num(Field::Max),
        num(Field::Mean),
    ]
}

/// One result row (drawn as a `<tbody>` of two table rows). Empty fields
/// are left out of the JSON.
#[derive(Serialize)]
struct RowData<'a> {
    /// Anchor id.
    id: String,
    /// Status class.
    st: &'static str,
    /// Match-method chip text ("" when unpaired).
    #[serde(skip_serializing_if = "str::is_empty")]
    chip: &'static str,
    /// Strategy class of the chip ("" when unpaired).
    #[serde(skip_serializing_if = "str::is_empty")]
    sg: &'static str,
    /// The key shown first (run 1's, else run 2's).
    k1: Cow<'a, str>,
    /// Run 2's key when it differs from run 1's ("" otherwise).
    #[serde(skip_serializing_if = "str::is_empty")]
    k2: Cow<'a, str>,
    /// Title of the key cell: log line numbers of the blocks and the
    /// tolerance or rule applied (`lines 12 / 14 · default: hashes rel <= 1e-8`).
    title: String,
    /// The tolerance or rule applied, shown as a chip on diverging rows
    /// judged by a rule or a per-dtype default ("" on the others, where it
    /// is in the title only).
    #[serde(skip_serializing_if = "str::is_empty")]
    tol: String,
    /// Chips: (class, text), e.g. `("nt origin", "origin")`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    notes: Vec<(&'static str, String)>,
    /// The row's notes not shown as chips, joined with ` · `.
    #[serde(skip_serializing_if = "str::is_empty")]
    nx: String,
    /// The cells of run 1's and run 2's side (`null` for a missing side).
    s: [Option<Vec<Cell<'a>>>; 2],
}

/// Chips and notes of a row. Chips show what the row's status alone does
/// not tell, at a glance: where a divergence starts or enters (root cause),
/// a dtype or shape change, rows that do not gate the exit status, values
/// non-finite in one run only. The row's other notes
/// ([`crate::matcher::notes::row_notes`]: which input differs, a one-sided
/// row's position, a missing hash, a normalised key, ...) are returned as
/// text.
fn row_chips(
    rc: &RankComparison<'_>,
    index: usize,
    row: &MatchRow,
    names: (&str, &str),
) -> (Vec<(&'static str, String)>, String) {
    let mut chips = Vec::new();
    let cause = rc.matches.cause_kinds.get(index).copied().flatten();
    match cause {
        Some(k @ CauseKind::Origin) => chips.push(("nt origin", k.as_str().to_string())),
        Some(k @ (CauseKind::Entry | CauseKind::OneSided | CauseKind::ViaCollective)) => {
            chips.push(("nt entry", k.as_str().to_string()))
        }
        _ => {}
    }
    let cause_chip = !chips.is_empty();
    let mut dtype_chip = false;
    if let Sides::Both(i, j) = row.sides() {
        let (s1, s2) = (rc.t1.field(i, Field::Shape), rc.t2.field(j, Field::Shape));
        if !s1.is_empty() && !s2.is_empty() && s1 != s2 {
            let (d1, d2) = (dtype_of(s1), dtype_of(s2));
            if d1 != d2 {
                chips.push(("nt lbl", format!("dtype differs ({d1} → {d2})")));
                dtype_chip = true;
            }
            if dims_difference(s1, s2).is_some() {
                chips.push(("nt lbl", "shape differs".to_string()));
            }
        }
    }
    let mut text: Vec<String> = Vec::new();
    // An optimizer-step op's parameters (its `Parameters:` line; looked
    // for in optimizer-phase rows only, where the capture agent writes it).
    let (t, r) = match row.sides().first() {
        (0, i) => (rc.t1, i),
        (_, j) => (rc.t2, j),
    };
    if t.phase_kind(r) == crate::logformat::Phase::Optimizer {
        let p = t.parameters(r);
        if !p.is_empty() {
            text.push(crate::report::summary::parameter_words(
                &p.split(", ").collect::<Vec<_>>(),
            ));
        }
    }
    for n in notes::row_notes_with_kind(rc.t1, rc.t2, rc.matches, index, names) {
        match note_place(n.kind, cause_chip, dtype_chip) {
            NotePlace::Said => {}
            NotePlace::Chip(class) => chips.push((class, n.text)),
            NotePlace::Text => text.push(n.text),
        }
    }
    (chips, text.join(" · "))
}

/// Where a row note goes on the result page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum NotePlace {
    /// Nowhere: a chip already says it.
    Said,
    /// A chip of this class.
    Chip(&'static str),
    /// The row's note text.
    Text,
}

/// Where a note of `kind` goes, given whether the row has a root-cause
/// chip and a dtype chip: not gating (unsynced, ignored, fused away,
/// recomputed) and bitwise identical are quiet chips, digests differing a
/// label, non-finite values their own; the cause and dtype notes are said
/// by their chips; the rest is text.
fn note_place(kind: NoteKind, cause_chip: bool, dtype_chip: bool) -> NotePlace {
    match kind {
        NoteKind::Cause(_) if cause_chip => NotePlace::Said,
        NoteKind::Dtype if dtype_chip => NotePlace::Said,
        // An unsynced collective's own cause class ("unsynced collective")
        // is a quiet chip beside its not-gating one.
        NoteKind::Unsynced
        | NoteKind::Ignored
        | NoteKind::Fused
        | NoteKind::Recomputed
        | NoteKind::Bitwise
        | NoteKind::Cause(CauseKind::Unsynced) => NotePlace::Chip("nt quiet"),
        NoteKind::DigestsDiffer => NotePlace::Chip("nt lbl"),
        NoteKind::NonFinite => NotePlace::Chip("nt nonfinite"),
        _ => NotePlace::Text,
    }
}

/// Descriptions of the tolerance sources of one page, each built once.
#[derive(Default)]
struct Tolerances {
    seen: Vec<(Source, String)>,
}

impl Tolerances {
    /// `policy.describe(source)`, cached.
    fn describe(&mut self, policy: &Policy, source: Source) -> &str {
        let i = match self.seen.iter().position(|(s, _)| *s == source) {
            Some(i) => i,
            None => {
                self.seen.push((source, policy.describe(source)));
                self.seen.len() - 1
            }
        };
        &self.seen[i].1
    }
}

/// The row data of result row `index` (`row`), its differing cells
/// coloured with classes from `palette`.
fn row_data<'a>(
    rc: &RankComparison<'a>,
    index: usize,
    row: &MatchRow,
    palette: &mut Palette,
    tolerances: &mut Tolerances,
    names: (&str, &str),
) -> RowData<'a> {
    let (t1, t2) = (rc.t1, rc.t2);
    let mut a = row.r1().map(|i| side_cells(t1, i));
    let mut b = row.r2().map(|j| side_cells(t2, j));
    if let (Sides::Both(i, j), Some(sa), Some(sb)) = (row.sides(), a.as_mut(), b.as_mut()) {
        let mut mark = |col: usize, rd: f64| {
            if sa[col].nonfinite() || sb[col].nonfinite() {
                // A NaN or an infinity on either side: the non-finite
                // colour, never the top of the finite scale.
                sa[col].colour_nonfinite("non-finite difference");
                sb[col].colour_nonfinite("non-finite difference");
                return;
            }
            // The title goes on run 2's cell only (the page script copies it
            // to run 1's on hover): most cells of a diverging page are
            // coloured, and this keeps even 2,000-row pages under 2 MB.
            let x = palette.class(rd);
            sa[col].colour(x, String::new());
            sb[col].colour(x, format!("rel. diff {rd:.2e}"));
        };
        for (col, field) in [(C_OUT, Field::OutputHash), (C_IN, Field::InputHashes)] {
            // A field in one run only is not a numeric difference
            // (`field_diff` gives none): its "—" and the row's notes
            // (status `missing`) say so.
            if let Some(rd) = field_diff(t1, i, t2, j, field) {
                mark(col, rd);
            }
        }
        for (k, rd) in stat_diffs(t1, i, t2, j).into_iter().enumerate() {
            if let Some(rd) = rd {
                mark(if k == 0 { C_SHAPE } else { C_L2 + k - 1 }, rd);
            }
        }
    }
    let k1 = match row.sides() {
        Sides::Both(i, _) | Sides::Only1(i) => t1.key_str(i),
        Sides::Only2(j) => t2.key_str(j),
    };
    let k2 = match row.sides() {
        Sides::Both(i, j) if t1.key(i) != t2.key(j) => t2.key_str(j),
        _ => Cow::Borrowed(""),
    };
    let lines = match row.sides() {
        Sides::Both(i, j) => format!("lines {} / {}", t1.line(i), t2.line(j)),
        Sides::Only1(i) => format!("line {}", t1.line(i)),
        Sides::Only2(j) => format!("line {}", t2.line(j)),
    };
    let tol = tolerances.describe(&rc.matches.policy, row.source);
    let (notes, nx) = row_chips(rc, index, row, names);
    RowData {
        id: super::files::anchor(rc.rank1, index),
        title: format!("{lines} · {tol}"),
        tol: if matches!(row.status, Status::Diff | Status::Missing)
            && row.source != Source::Default
        {
            tol.to_string()
        } else {
            String::new()
        },
        notes,
        nx,
        st: row.status.as_str(),
        chip: row.strategy.chip(),
        sg: if row.strategy.chip().is_empty() {
            ""
        } else {
            row.strategy.as_str().unwrap_or("")
        },
        k1,
        k2,
        s: [a, b],
    }
}

/// Writes the rows `sections` (result row indexes: forward, backward, then
/// optimizer) of one page as JSON into `out`: `{"n": [name1, name2],
/// "forward": [...], "backward": [...], "optimizer": [...]}`, every `<` (only ever inside a JSON string)
/// written `\u003c`, so no log text can close the `<script>` element the
/// JSON sits in or open an HTML comment. Each row is built, written and
/// dropped in turn; differing cells get classes from `palette`.
pub(crate) fn write_page_json(
    out: &mut Vec<u8>,
    rc: &RankComparison<'_>,
    sections: [&[usize]; 3],
    names: (&str, &str),
    palette: &mut Palette,
) {
    // Serialising these types into memory cannot fail.
    const OK: &str = "row data serialises";
    let mut tolerances = Tolerances::default();
    let start = out.len();
    out.extend_from_slice(b"{\"n\":");
    serde_json::to_writer(&mut *out, &[names.0, names.1]).expect(OK);
    no_lt(out, start);
    for (name, rows) in [
        ("forward", sections[0]),
        ("backward", sections[1]),
        ("optimizer", sections[2]),
    ] {
        out.extend_from_slice(format!(",\"{name}\":[").as_bytes());
        for (k, &index) in rows.iter().enumerate() {
            if k > 0 {
                out.push(b',');
            }
            let row = &rc.matches.rows[index];
            let data = row_data(rc, index, row, palette, &mut tolerances, names);
            let start = out.len();
            serde_json::to_writer(&mut *out, &data).expect(OK);
            no_lt(out, start);
        }
        out.push(b']');
    }
    out.push(b'}');
}

/// Rewrites every `<` of `out[start..]` as `\u003c` (one look over the
/// bytes; most rows have none).
fn no_lt(out: &mut Vec<u8>, start: usize) {
    if memchr::memchr(b'<', &out[start..]).is_none() {
        return;
    }
    let tail = out.split_off(start);
    let mut rest = &tail[..];
    while let Some(i) = memchr::memchr(b'<', rest) {
        out.extend_from_slice(&rest[..i]);
        out.extend_from_slice(b"\\u003c");
        rest = &rest[i + 1..];
    }
    out.extend_from_slice(rest);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matcher::{match_tables, MatchOptions};
    use crate::parser::parse_bytes;

    #[test]
    fn notes_are_placed_by_kind() {
        use NotePlace::{Chip, Said, Text};
        let place = |k| note_place(k, false, false);
        assert_eq!(place(NoteKind::Unsynced), Chip("nt quiet"));
        assert_eq!(place(NoteKind::Ignored), Chip("nt quiet"));
        assert_eq!(place(NoteKind::Bitwise), Chip("nt quiet"));
        assert_eq!(place(NoteKind::DigestsDiffer), Chip("nt lbl"));
        assert_eq!(place(NoteKind::NonFinite), Chip("nt nonfinite"));
        assert_eq!(place(NoteKind::Truncated), Text);
        assert_eq!(place(NoteKind::OnlyIn), Text);
        assert_eq!(place(NoteKind::Dtype), Text, "no dtype chip");
        assert_eq!(note_place(NoteKind::Dtype, false, true), Said);
        assert_eq!(place(NoteKind::Cause(CauseKind::Inherited)), Text);
        assert_eq!(
            note_place(NoteKind::Cause(CauseKind::Origin), true, false),
            Said
        );
    }

    #[test]
    fn a_run_name_never_moves_a_note_into_a_chip() {
        // Run 1's block is cut short: its note names run 1. Named like the
        // not-gating and non-finite notes begin, the note still is text
        // (chips were once picked by the note's first words).
        let t1 = parse_bytes(b"[x/op_0_mm]\n  Output hash: 1.0".to_vec(), "a.log");
        let t2 = parse_bytes(b"[x/op_0_mm]\n  Output hash: 1.0\n\n".to_vec(), "b.log");
        let m = match_tables(&t1, &t2, &MatchOptions::default());
        assert_eq!(m.rows[0].status, Status::Truncated);
        let rc = RankComparison {
            rank1: 0,
            rank2: 0,
            t1: &t1,
            t2: &t2,
            matches: &m,
        };
        for name in ["ignored baseline", "non-finite run", "digests differ"] {
            let (chips, text) = row_chips(&rc, 0, &m.rows[0], (name, "b"));
            assert!(chips.is_empty(), "{name}: {chips:?}");
            assert_eq!(text, format!("{name} block truncated: no verdict"));
        }
    }
}
