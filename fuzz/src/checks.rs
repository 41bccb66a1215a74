//! The invariants each fuzz target checks, shared with the regression tests:
//! `tests/properties.rs` includes this file (`#[path]`) and runs every saved
//! input of `tests/fuzz_regressions/` through the same function its target
//! calls, so a crash found by the fuzzer stays a failing test until fixed.
//!
//! Every function takes the raw fuzzer input and panics when an invariant
//! breaks (a panic inside actdiff is a failure too).

use std::path::Path;
use std::sync::Arc;

use actdiff::matcher::policy::{parse_rules_text, Policy};
use actdiff::matcher::{match_tables, MatchOptions, Overrides, Status};
use actdiff::parser::{self, line, Field, LogSource, OpTable, Phase, N_FIELDS};

/// Bytes for a failure message: lossy text, long values cut to their ends.
pub fn short(b: &[u8]) -> String {
    let s = String::from_utf8_lossy(b);
    if s.chars().count() <= 120 {
        return format!("{s:?}");
    }
    let head: String = s.chars().take(50).collect();
    let tail: String = {
        let v: Vec<char> = s.chars().collect();
        v[v.len() - 50..].iter().collect()
    };
    format!("{head:?}..{tail:?} ({} bytes)", b.len())
}

/// `assert_eq!` on byte strings, with [`short`] values in the message.
#[track_caller]
pub fn assert_bytes_eq(got: &[u8], want: &[u8], what: std::fmt::Arguments) {
    if got != want {
        panic!("{what}: got {}, expected {}", short(got), short(want));
    }
}

/// `parse_log` target: parse a whole file, touch every field of every row,
/// list duplicate keys, and match the table against itself: every row must
/// pair with itself and be `Match` (or `Truncated` for a block cut short).
pub fn parse_log(data: &[u8]) {
    let t = parser::parse_bytes(data.to_vec(), "fuzz.log");
    let bytes = t.bytes();
    assert_eq!(bytes, data);
    let mut touched = 0usize;
    let mut prev_line = 0u64;
    for row in 0..t.len() {
        for f in Field::ALL {
            let v = t.field(row, f);
            touched += v.len();
            assert_eq!(t.has(row, f), !v.is_empty());
            let _ = t.text(row, f);
        }
        assert_fields_as_block_reads(&t, row);
        let _ = t.key_str(row);
        let _ = t.phase(row);
        let _ = t.is_backward(row);
        let _ = t.is_truncated(row);
        // A block starts with `[` at the start of a line, lines increase.
        let off = t.block_offset(row) as usize;
        assert_eq!(bytes.get(off), Some(&b'['), "row {row} offset {off}");
        assert!(
            off == 0 || bytes[off - 1] == b'\n',
            "row {row} offset {off}"
        );
        let line = t.line(row);
        assert!(line > prev_line, "row {row}: line {line} after {prev_line}");
        assert!(line <= t.total_lines().max(1));
        prev_line = line;
    }
    std::hint::black_box(touched);
    let _ = (t.header(), t.schema(), t.ends_with_newline());
    assert!(t.warnings().len() <= parser::MAX_STORED_WARNINGS);
    let counted: u64 = t.warning_counts().iter().map(|(_, _, n)| n).sum();
    assert!(counted >= t.warnings().len() as u64);
    assert_eq!(
        t.truncated_rows(),
        (0..t.len()).filter(|r| t.is_truncated(*r)).count()
    );
    for (key, lines) in parser::duplicate_keys(&t) {
        assert!(lines.len() >= 2, "duplicate `{key}` with lines {lines:?}");
        assert!(lines.windows(2).all(|w| w[0] < w[1]));
    }
    let mut l1 = t.clone();
    l1.use_l1_as_output_hash();

    let m = match_tables(&t, &t, &MatchOptions::default());
    assert_eq!(m.rows.len(), t.len(), "self-match has only1/only2 rows");
    for (i, r) in m.rows.iter().enumerate() {
        assert_eq!(
            (r.r1(), r.r2()),
            (Some(i), Some(i)),
            "row {i} {} not paired with itself",
            short(t.key(i))
        );
        let want = if t.is_truncated(i) {
            Status::Truncated
        } else {
            Status::Match
        };
        assert_eq!(r.status, want, "row {i} {} against itself", short(t.key(i)));
    }
}

/// Checks every field of `row` against a plain re-read of its block's lines:
/// the key is the text between the `[` and the last `]` of the first line
/// (the trimmed rest of the line when there is no `]`), and each field is the
/// value of the last line of the block that `classify` gives that field.
pub fn assert_fields_as_block_reads(t: &OpTable, row: usize) {
    let data = t.bytes();
    let start = t.block_offset(row) as usize;
    let end = if row + 1 < t.len() {
        t.block_offset(row + 1) as usize
    } else {
        data.len()
    };
    let mut lines = data[start..end]
        .split(|b| *b == b'\n')
        .map(|l| l.strip_suffix(b"\r").unwrap_or(l));
    let first = lines.next().unwrap_or_default();
    let key: &[u8] = match first.iter().rposition(|b| *b == b']') {
        Some(e) => &first[1..e],
        None => line::trim(&first[1..]),
    };
    assert_bytes_eq(
        t.key(row),
        key,
        format_args!("row {row}: key of {}", short(first)),
    );
    let mut want: [&[u8]; N_FIELDS] = [&[]; N_FIELDS];
    for l in lines {
        if let line::LineKind::Field { field, start, end } = line::classify(l) {
            want[field as usize] = &l[start..end];
        }
    }
    for f in &Field::ALL[1..] {
        assert_bytes_eq(
            t.field(row, *f),
            want[*f as usize],
            format_args!("row {row} {} field {}", short(t.key(row)), f.label()),
        );
    }
    assert_eq!(
        t.is_backward(row),
        want[Field::Phase as usize] == b"backward",
        "row {row} phase"
    );
}

/// Asserts that two tables parsed from the same bytes are identical: header,
/// rows, every field, line numbers, offsets, flags, schema, warnings and
/// warning counts.
pub fn assert_same_table(a: &OpTable, b: &OpTable) {
    assert_eq!(a.len(), b.len(), "row count");
    assert_eq!(a.header(), b.header(), "header");
    for row in 0..a.len() {
        for f in Field::ALL {
            assert_bytes_eq(
                a.field(row, f),
                b.field(row, f),
                format_args!("row {row} field {}", f.label()),
            );
        }
        assert_eq!(a.line(row), b.line(row), "row {row} line");
        assert_eq!(a.block_offset(row), b.block_offset(row), "row {row} offset");
        assert_eq!(
            a.is_truncated(row),
            b.is_truncated(row),
            "row {row} truncated"
        );
    }
    assert_eq!(a.schema(), b.schema(), "schema");
    assert_eq!(a.warnings(), b.warnings(), "warnings");
    assert_eq!(a.warning_counts(), b.warning_counts(), "warning counts");
    assert_eq!(a.total_lines(), b.total_lines(), "total lines");
    assert_eq!(
        a.ends_with_newline(),
        b.ends_with_newline(),
        "final newline"
    );
}

/// Checks that `parse_chunks` over `bounds` gives exactly `parse_bytes`.
pub fn parallel_equals_serial(log: &[u8], bounds: &[usize]) {
    let serial = parser::parse_bytes(log.to_vec(), "fuzz.log");
    let par = parser::parse_chunks(
        Arc::new(LogSource::Owned(log.to_vec())),
        "fuzz.log".into(),
        bounds,
    );
    assert_same_table(&serial, &par);
}

/// Run 2's log parsed against run 1's (`parse_chunks_against`, as a
/// compare parses it: blocks byte-identical to one of run 1's copy its
/// row) equals its plain parse, for the chunk starts `bounds` of `log2`.
pub fn against_equals_plain(log1: &[u8], log2: &[u8], bounds: &[usize]) {
    let reference = parser::parse_bytes(log1.to_vec(), "run1.log");
    let plain = parser::parse_bytes(log2.to_vec(), "fuzz.log");
    let against = parser::parse_chunks_against(
        Arc::new(LogSource::Owned(log2.to_vec())),
        "fuzz.log".into(),
        bounds,
        &reference,
    );
    assert_same_table(&plain, &against);
}

/// `parse_against` target: bytes 0–1 (little-endian, plus 1) are the chunk
/// target, bytes 2–3 (little-endian) cut the rest into run 1's and run 2's
/// log; an empty run 2 log is run 1's. Run 2's parse against run 1's
/// equals its plain parse ([`against_equals_plain`]).
pub fn parse_against(data: &[u8]) {
    if data.len() < 4 {
        return;
    }
    let target = u16::from_le_bytes([data[0], data[1]]) as usize + 1;
    let rest = &data[4..];
    let cut = (u16::from_le_bytes([data[2], data[3]]) as usize).min(rest.len());
    let (log1, log2) = rest.split_at(cut);
    let log2 = if log2.is_empty() { log1 } else { log2 };
    let bounds = parser::chunk_bounds(log2, target);
    against_equals_plain(log1, log2, &bounds);
}

/// `parse_chunks` target: the first two bytes (little-endian, plus 1) are the
/// chunk target, the rest is the log. The chunk starts of `chunk_bounds` must
/// be valid, and the parallel parse must equal the serial one.
pub fn parse_chunks(data: &[u8]) {
    if data.len() < 2 {
        return;
    }
    let target = u16::from_le_bytes([data[0], data[1]]) as usize + 1;
    let log = &data[2..];
    let bounds = parser::chunk_bounds(log, target);
    assert_eq!(bounds.first(), Some(&0));
    assert!(bounds.windows(2).all(|w| w[0] < w[1]), "{bounds:?}");
    for &b in &bounds[1..] {
        assert!(b < log.len() && log[b] == b'[' && log[b - 1] == b'\n');
    }
    parallel_equals_serial(log, &bounds);
}

/// `overrides` target: the input as override text (JSON when it starts with
/// `{`). Never panics; errors name the file with a 1-based position; a parsed
/// text file gives the same pairs when written back as a JSON object.
pub fn overrides(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let path = Path::new("fuzz_overrides.txt");
    match Overrides::parse(&text, path) {
        Ok(o) => {
            let pairs: Vec<(Vec<u8>, Vec<u8>)> =
                o.pairs().map(|(k, v)| (k.to_vec(), v.to_vec())).collect();
            assert_eq!(pairs.len(), o.len());
            assert_eq!(o.is_empty(), pairs.is_empty());
            for (k, v) in &pairs {
                assert_eq!(o.get(k), Some(v.as_slice()));
            }
            // Written back as JSON, the same map.
            let mut obj = serde_json::Map::new();
            for (k, v) in &pairs {
                obj.insert(
                    String::from_utf8(k.clone()).unwrap(),
                    serde_json::Value::String(String::from_utf8(v.clone()).unwrap()),
                );
            }
            let json = serde_json::Value::Object(obj).to_string();
            let back = Overrides::parse(&json, Path::new("back.json"))
                .unwrap_or_else(|e| panic!("JSON written back does not parse: {e}\n{json}"));
            // Keys and values are trimmed on reading: written back, they stay.
            assert_eq!(back.len(), o.len(), "{json}");
            for (k, v) in &pairs {
                assert_eq!(back.get(k), Some(v.as_slice()), "{json}");
            }
        }
        Err(e) => {
            let s = e.to_string();
            assert!(s.starts_with("fuzz_overrides.txt"), "{s}");
        }
    }
}

/// `config` target: the input as an `actdiff.toml` and as a rules text file.
/// Never panics; errors carry the file name and a 1-based line and column;
/// parsed policies can judge rows.
pub fn config(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    match Policy::from_toml(&text, "fuzz.toml") {
        Ok(p) => {
            for (key, op, phase, dtype) in [
                (
                    &b"layers.0.w/op_0_mm"[..],
                    &b"mm"[..],
                    Phase::Forward,
                    "float32",
                ),
                (
                    b"<none>/op_3__fused_adamw_",
                    b"_fused_adamw_",
                    Phase::Optimizer,
                    "bfloat16",
                ),
                (b"", b"", Phase::Backward, ""),
            ] {
                let rp = p.for_row(key, op, phase, dtype);
                let _ = p.describe(rp.source);
            }
            for r in &p.rules {
                let _ = r.describe();
            }
        }
        Err(e) => {
            assert_eq!(e.file, "fuzz.toml");
            assert!(e.line >= 1 && e.column >= 1, "{e}");
            let _ = e.to_string();
        }
    }
    match parse_rules_text(&text, "fuzz.rules") {
        Ok(rules) => {
            for r in &rules {
                let _ = r.describe();
                let t = r.tol.expect("a rules-text rule always has a tolerance");
                assert!(t.rtol >= 0.0 && t.atol >= 0.0, "{t:?}");
                if let Some(k) = &r.key {
                    let _ = k.is_match(b"layers.0.w/op_0_mm");
                }
            }
        }
        Err(e) => {
            assert_eq!(e.file, "fuzz.rules");
            assert!(e.line >= 1 && e.column >= 1, "{e}");
            let _ = e.to_string();
        }
    }
}

/// `part_manifest` target: the input as a part's `part.json` (the file
/// `actdiff merge` reads). Never panics; errors name the file (malformed
/// JSON with a line and column); a manifest that reads writes back to JSON
/// that reads to the same manifest.
pub fn part_manifest(data: &[u8]) {
    use actdiff::run::shard::Manifest;
    let path = Path::new("parts/0/part.json");
    match Manifest::from_bytes(data, path) {
        Ok(m) => {
            let json = serde_json::to_vec(&m).expect("a manifest serialises");
            let back = Manifest::from_bytes(&json, path)
                .unwrap_or_else(|e| panic!("written back, it does not read: {e}"));
            assert_eq!(back, m);
        }
        Err(e) => assert!(e.starts_with("parts/0/part.json"), "{e}"),
    }
}

/// `outputs` target: bytes 0-1 (little-endian) split the rest into two
/// logs, compared as two runs of one rank; the `--rows` JSON Lines and the
/// rank's summary are written. Never panics; every rows line is a JSON
/// object with the documented keys and a known status; there is one line
/// per result row; the summary's counts add up to the rows and the summary
/// reads back (as `actdiff merge` reads the parts') to a summary that
/// writes the same JSON.
pub fn outputs(data: &[u8]) {
    use actdiff::report::{summary::RankSummary, PagePlan, RankComparison, ReportOptions};
    if data.len() < 2 {
        return;
    }
    let log = &data[2..];
    let cut = (u16::from_le_bytes([data[0], data[1]]) as usize).min(log.len());
    let a = parser::parse_bytes(log[..cut].to_vec(), "a/rank_0_activations.log");
    let b = parser::parse_bytes(log[cut..].to_vec(), "b/rank_0_activations.log");
    let m = match_tables(&a, &b, &MatchOptions::default());
    let rc = RankComparison {
        rank1: 0,
        rank2: 0,
        t1: &a,
        t2: &b,
        matches: &m,
    };
    let mut rows = Vec::new();
    actdiff::report::rows::write_rows(&rc, ("a", "b"), Some(3), &mut rows).unwrap();
    let text = String::from_utf8(rows).expect("rows are UTF-8");
    let mut n = 0;
    for line in text.lines() {
        let v: serde_json::Value =
            serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
        assert_eq!(v["step"], 3);
        assert_eq!(v["rank"], 0);
        let st = v["status"].as_str().unwrap();
        assert!(
            ["match", "diff", "only1", "only2", "truncated", "missing"].contains(&st),
            "{st}"
        );
        assert!(
            v["diffs"].is_object() && v["tolerance"].is_string(),
            "{line}"
        );
        n += 1;
    }
    assert_eq!(n, m.rows.len());
    let plan = PagePlan::new(&rc, &ReportOptions::default());
    let s = RankSummary::build(&rc, &plan);
    assert_eq!(s.counts.total() as usize, m.rows.len());
    let json = serde_json::to_vec(&s).expect("a rank summary serialises");
    let back: RankSummary = serde_json::from_slice(&json)
        .unwrap_or_else(|e| panic!("the summary does not read back: {e}"));
    // Compared as written: a typed message reads back as its text
    // (`Message::Read`), so the values differ in kind but must write the
    // same JSON; a field lost or changed on the way shows here.
    let written = serde_json::to_value(&s).expect("a rank summary serialises");
    let again = serde_json::to_value(&back).expect("a read-back summary serialises");
    assert_eq!(again, written, "the summary reads back to other JSON");
}
