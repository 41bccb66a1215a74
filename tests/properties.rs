//! Property tests of the parser and the matcher on generated logs.
//!
//! A strategy generates op tables as log text in the writer's exact format
//! (`shared/spec/log-format.md`): the header, then blocks with any subset of
//! the field lines in writer order, keys with odd characters (`[`, `]`,
//! spaces, UTF-8, `<none>`, extra `/`, a CamelCase root class), `%.6e`
//! numbers, `nan`/`inf`/`-inf`, multi-value hash lists, producer lists with
//! empty positions, and sometimes `Phase: backward` and unknown field lines.
//!
//! Properties (case counts in each `proptest!` config):
//! - the parse gives exactly the generated values, and writing the table back
//!   from its fields and parsing again gives an identical table;
//! - the parallel parse equals the serial parse for any split, also with CRLF
//!   line ends and with the file cut at any byte;
//! - run 2's log parsed against run 1's (copying the rows of blocks
//!   byte-identical to run 1's) equals its plain parse, for any split;
//! - a log matched against itself is all `match`;
//! - swapping the runs swaps `only1`/`only2` and mirrors the pairs;
//! - keys and hash lists of 64 KiB or more survive all of the above.
//!
//! The fuzz targets' invariants live in `fuzz/src/checks.rs`; inputs that
//! broke one (found by a fuzzer or a property here) are replayed from
//! `tests/fuzz_regressions/`.

use std::collections::{BTreeSet, HashMap, HashSet};

use actdiff::matcher::{match_tables, MatchOptions, MatchTable, Status};
use actdiff::parser::{chunk_bounds, parse_bytes, Field, OpTable, N_FIELDS};
use proptest::collection::{btree_set, vec};
use proptest::option;
use proptest::prelude::*;
use proptest::sample::Index;

#[allow(dead_code)]
#[path = "../fuzz/src/checks.rs"]
mod checks;

// ---------------------------------------------------------------------------
// The generated model of a log.

/// One op block: key parts and the field values in writer order.
#[derive(Clone)]
struct Block {
    fqn: String,
    seq: u32,
    op: String,
    /// Values of `Field::ALL[1..]` (Shape .. Phase); `None` when the line is absent.
    values: [Option<String>; N_FIELDS - 1],
    /// An unknown field line (`  Call type: ...`) at the end of the block.
    noise: bool,
}

impl Block {
    fn key(&self) -> String {
        format!("{}/op_{}_{}", self.fqn, self.seq, self.op)
    }
}

/// Long keys and values are shown cut to their ends.
impl std::fmt::Debug for Block {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let short = |s: &str| checks::short(s.as_bytes());
        let values: Vec<Option<String>> = self
            .values
            .iter()
            .map(|v| v.as_deref().map(short))
            .collect();
        f.debug_struct("Block")
            .field("key", &short(&self.key()))
            .field("values", &values)
            .field("noise", &self.noise)
            .finish()
    }
}

/// A whole log: header and blocks (keys unique).
#[derive(Clone, Debug)]
struct Log {
    /// `Total captured activations:`; `None` writes the block count.
    total: Option<u64>,
    excluded: Option<BTreeSet<String>>,
    blocks: Vec<Block>,
}

fn value_index(f: Field) -> usize {
    f as usize - 1
}

/// Python's whitespace trim (what the parser applies to values).
fn py_trim(s: &str) -> &str {
    s.trim_matches(|c: char| matches!(c, ' ' | '\t' | '\r' | '\x0b' | '\x0c' | '\x1c'..='\x1f'))
}

impl Log {
    fn render(&self) -> Vec<u8> {
        let mut s = String::new();
        let total = self.total.unwrap_or(self.blocks.len() as u64);
        s.push_str(&format!("Total captured activations: {total}\n"));
        if let Some(ex) = &self.excluded {
            if ex.is_empty() {
                s.push_str("Excluded ops dispatched: (none)\n");
            } else {
                let v: Vec<&str> = ex.iter().map(|x| x.as_str()).collect();
                s.push_str(&format!("Excluded ops dispatched: {}\n", v.join(", ")));
            }
        }
        s.push_str(&"=".repeat(80));
        s.push_str("\n\n");
        for b in &self.blocks {
            s.push_str(&format!("[{}]\n", b.key()));
            for f in &Field::ALL[1..] {
                if let Some(v) = &b.values[value_index(*f)] {
                    s.push_str(&format!("  {}: {v}\n", f.label()));
                }
            }
            if b.noise {
                s.push_str("  Call type: aten.op.default\n");
            }
            s.push('\n');
        }
        s.into_bytes()
    }

    /// Rebuilds keys after edits: drops blocks whose key repeats an earlier one.
    fn dedup(&mut self) {
        let mut seen = HashSet::new();
        self.blocks.retain(|b| seen.insert(b.key()));
    }
}

// ---------------------------------------------------------------------------
// Strategies.

/// Python's `%.6e`: `1.234568e+02`, `-0.000000e+00`.
fn py_e6(x: f64) -> String {
    let s = format!("{x:.6e}");
    let (mant, exp) = s.split_once('e').unwrap();
    let exp: i32 = exp.parse().unwrap();
    format!("{mant}e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs())
}

fn finite() -> impl Strategy<Value = f64> {
    prop_oneof![
        -1e6f64..1e6,
        -1e-30f64..1e-30,
        (-1e300f64..1e300),
        Just(0.0),
        Just(-0.0),
    ]
}

/// A stat value: `%.6e` or `nan`, `inf`, `-inf`.
fn float_tok() -> impl Strategy<Value = String> {
    prop_oneof![
        12 => finite().prop_map(py_e6),
        1 => Just("nan".to_string()),
        1 => Just("inf".to_string()),
        1 => Just("-inf".to_string()),
    ]
}

/// A hash value: a float, or an integer printed with `str()`.
fn hash_tok() -> impl Strategy<Value = String> {
    prop_oneof![
        6 => float_tok(),
        1 => any::<u64>().prop_map(|v| v.to_string()),
    ]
}

/// A value or key segment of 64 KiB or more (the table stores lengths
/// below 64 KiB inline and re-reads longer ones from the block).
fn long_text(unit: &'static str) -> impl Strategy<Value = String> {
    (65_530usize..66_000).prop_map(move |n| unit.repeat(n / unit.len()))
}

/// A comma-separated hash list; with `long`, sometimes one of 64 KiB or more.
fn hash_list(max: usize, long: bool) -> BoxedStrategy<String> {
    let normal = vec(hash_tok(), 1..max).prop_map(|v| v.join(", "));
    if long {
        prop_oneof![
            8 => normal,
            1 => long_text("1.000000e+00, ").prop_map(|s| format!("{s}2")),
        ]
        .boxed()
    } else {
        normal.boxed()
    }
}

/// A module path segment; with `long`, sometimes one of 64 KiB or more.
fn segment(long: bool) -> BoxedStrategy<String> {
    let normal = prop_oneof![
        4 => "[a-z_]{1,8}",
        2 => "[0-9]{1,2}",
        1 => Just("layers[0]".to_string()),
        1 => Just("_checkpoint_wrapped".to_string()),
        2 => "[a-zA-Z0-9_ \\[\\]<>/é中🙂.-]{1,10}",
    ];
    if long {
        prop_oneof![20 => normal, 1 => long_text("w]")].boxed()
    } else {
        normal.boxed()
    }
}

fn fqn(long: bool) -> impl Strategy<Value = String> {
    prop_oneof![
        1 => Just("<none>".to_string()),
        6 => (
            option::weighted(
                0.2,
                prop_oneof![
                    Just("FSDPLlama3Model"),
                    Just("Linear"),
                    Just("TransformerBlock")
                ]
            ),
            vec(segment(long), 1..4),
            option::weighted(0.2, "[a-z]{1,4}"),
        )
            .prop_map(|(root, segs, slash)| {
                let mut s = String::new();
                if let Some(r) = root {
                    s.push_str(r);
                    s.push('.');
                }
                s.push_str(&segs.join("."));
                if let Some(x) = slash {
                    s.push('/');
                    s.push_str(&x);
                }
                s
            }),
    ]
}

fn op_name() -> impl Strategy<Value = String> {
    "_?[a-z]{1,8}(_[a-z]{1,5})?_?"
}

fn shape() -> impl Strategy<Value = String> {
    (
        vec(1u32..4096, 0..4),
        prop_oneof![
            Just("float32"),
            Just("bfloat16"),
            Just("float16"),
            Just("int64"),
            Just("bool")
        ],
    )
        .prop_map(|(dims, dt)| {
            let d: Vec<String> = dims.iter().map(|x| x.to_string()).collect();
            format!("torch.Size([{}]), Dtype: torch.{dt}", d.join(", "))
        })
}

fn location() -> impl Strategy<Value = String> {
    ("[a-z_]{1,10}(/[a-z_]{1,10}){0,2}", 1u32..2000).prop_map(|(p, l)| format!("{p}.py:{l}"))
}

/// A block before its counter and producers are assigned: producers are
/// indices into the blocks before it (`None`: an empty position).
#[derive(Clone, Debug)]
struct RawBlock {
    fqn: String,
    op: String,
    values: [Option<String>; N_FIELDS - 1],
    producers: Option<Vec<Option<Index>>>,
    noise: bool,
    /// Take the module of an earlier block instead (so counters go past 0).
    reuse_fqn: Option<Index>,
}

fn raw_block(long: bool) -> impl Strategy<Value = RawBlock> {
    let stats = (
        option::of(shape()),
        option::weighted(0.15, float_tok()),
        option::of(float_tok()),
        option::of(float_tok()),
        option::of(float_tok()),
        option::of(float_tok()),
        option::of(hash_list(4, long)),
        option::of(hash_list(6, long)),
    );
    let rest = (
        option::of(vec(option::of(any::<Index>()), 1..5)),
        option::of(location()),
        option::weighted(0.3, Just("backward".to_string())),
        option::weighted(0.1, Just(())),
    );
    (
        (fqn(long), op_name(), option::weighted(0.6, any::<Index>())),
        stats,
        rest,
    )
        .prop_map(
            |(
                (fqn, op, reuse_fqn),
                (sh, l1, l2, mn, mx, mean, out, inp),
                (producers, loc, phase, noise),
            )| {
                let mut values: [Option<String>; N_FIELDS - 1] = Default::default();
                values[value_index(Field::Shape)] = sh;
                values[value_index(Field::L1Norm)] = l1;
                values[value_index(Field::L2Norm)] = l2;
                values[value_index(Field::Min)] = mn;
                values[value_index(Field::Max)] = mx;
                values[value_index(Field::Mean)] = mean;
                values[value_index(Field::OutputHash)] = out;
                values[value_index(Field::InputHashes)] = inp;
                values[value_index(Field::Location)] = loc;
                values[value_index(Field::Phase)] = phase;
                RawBlock {
                    fqn,
                    op,
                    values,
                    producers,
                    noise: noise.is_some(),
                    reuse_fqn,
                }
            },
        )
}

/// Assigns per-module counters, resolves producers, drops repeated keys.
fn assemble(raw: Vec<RawBlock>) -> Vec<Block> {
    let mut counters: HashMap<String, u32> = HashMap::new();
    let mut blocks: Vec<Block> = Vec::new();
    for r in raw {
        let fqn = match r.reuse_fqn {
            Some(i) if !blocks.is_empty() => blocks[i.index(blocks.len())].fqn.clone(),
            _ => r.fqn,
        };
        let mut values = r.values;
        values[value_index(Field::InputProducers)] = r.producers.map(|p| {
            let keys: Vec<String> = p
                .iter()
                .map(|i| match i {
                    Some(i) if !blocks.is_empty() => blocks[i.index(blocks.len())].key(),
                    _ => String::new(),
                })
                .collect();
            keys.join(";")
        });
        let c = counters.entry(fqn.clone()).or_insert(0);
        let seq = *c;
        *c += 1;
        blocks.push(Block {
            fqn,
            seq,
            op: r.op,
            values,
            noise: r.noise,
        });
    }
    let mut seen = HashSet::new();
    blocks.retain(|b| seen.insert(b.key()));
    blocks
}

fn log_strategy() -> impl Strategy<Value = Log> {
    log_strategy_with(false)
}

/// Logs; with `long`, keys and hash lists of 64 KiB or more occur.
fn log_strategy_with(long: bool) -> impl Strategy<Value = Log> {
    (
        vec(raw_block(long), 0..24),
        option::weighted(0.1, 0u64..100),
        option::of(btree_set("[a-z_]{1,12}", 0..5)),
    )
        .prop_map(|(raw, total, excluded)| Log {
            total,
            excluded,
            blocks: assemble(raw),
        })
}

// ---------------------------------------------------------------------------
// Helpers.

fn parse(bytes: Vec<u8>) -> OpTable {
    parse_bytes(bytes, "prop.log")
}

/// Writes a table back in the log format from its fields alone.
fn write_back(t: &OpTable) -> Vec<u8> {
    let mut out: Vec<u8> = Vec::new();
    let h = t.header();
    if let Some(n) = h.total {
        out.extend_from_slice(format!("Total captured activations: {n}\n").as_bytes());
    }
    if let Some(ex) = &h.excluded {
        let v = if ex.is_empty() {
            "(none)".to_string()
        } else {
            ex.join(", ")
        };
        out.extend_from_slice(format!("Excluded ops dispatched: {v}\n").as_bytes());
    }
    if h.has_rule {
        out.extend_from_slice("=".repeat(80).as_bytes());
        out.push(b'\n');
    }
    out.push(b'\n');
    for row in 0..t.len() {
        out.push(b'[');
        out.extend_from_slice(t.key(row));
        out.extend_from_slice(b"]\n");
        for f in &Field::ALL[1..] {
            if t.has(row, *f) {
                out.extend_from_slice(format!("  {}: ", f.label()).as_bytes());
                out.extend_from_slice(t.field(row, *f));
                out.push(b'\n');
            }
        }
        out.push(b'\n');
    }
    out
}

/// Same rows and header, field for field (not positions).
fn assert_same_fields(a: &OpTable, b: &OpTable) {
    assert_eq!(a.len(), b.len(), "row count");
    assert_eq!(a.header(), b.header(), "header");
    for row in 0..a.len() {
        for f in Field::ALL {
            checks::assert_bytes_eq(
                a.field(row, f),
                b.field(row, f),
                format_args!("row {row} field {}", f.label()),
            );
        }
        assert_eq!(a.is_truncated(row), b.is_truncated(row), "row {row}");
        // What the parser derives from the key: equal across the two
        // parses (op types are numbered in file order either way), and
        // what the key functions give.
        assert_eq!(a.key_hash(row), b.key_hash(row), "row {row} key hash");
        assert_eq!(a.op_type(row), b.op_type(row), "row {row} op type");
        assert_eq!(a.layer(row), b.layer(row), "row {row} layer");
        let key = a.key(row);
        checks::assert_bytes_eq(
            a.op_name(a.op_type(row)),
            actdiff::parser::key::module_and_op(key).1,
            format_args!("row {row} op name"),
        );
        assert_eq!(
            a.layer(row).map(u64::from),
            a.layer_lists()
                .layer_of_key(key)
                .map(|(_, l)| l)
                .filter(|l| *l < u64::from(u32::MAX)),
            "row {row} layer"
        );
        assert_eq!(
            a.key_hash(row),
            actdiff::parser::key::key_hash(&actdiff::parser::key::hasher(), key),
            "row {row} key hash"
        );
    }
    assert_eq!(a.op_types(), b.op_types(), "op types");
    assert_eq!(a.layer_lists(), b.layer_lists(), "layer lists");
    assert_eq!(a.schema(), b.schema(), "schema");
}

/// The parsed table holds exactly the generated values.
fn assert_matches_model(t: &OpTable, log: &Log) {
    assert_eq!(t.len(), log.blocks.len(), "row count");
    let h = t.header();
    assert_eq!(h.total, Some(log.total.unwrap_or(log.blocks.len() as u64)));
    assert_eq!(
        h.excluded,
        log.excluded
            .as_ref()
            .map(|e| e.iter().cloned().collect::<Vec<_>>())
    );
    assert!(h.has_rule);
    for (row, b) in log.blocks.iter().enumerate() {
        checks::assert_bytes_eq(
            t.key(row),
            b.key().as_bytes(),
            format_args!("row {row} key"),
        );
        for f in &Field::ALL[1..] {
            let want = b.values[value_index(*f)]
                .as_deref()
                .map(py_trim)
                .unwrap_or("");
            checks::assert_bytes_eq(
                t.field(row, *f),
                want.as_bytes(),
                format_args!(
                    "row {row} {} field {}",
                    checks::short(b.key().as_bytes()),
                    f.label()
                ),
            );
        }
        assert!(!t.is_truncated(row));
        assert_eq!(
            t.is_backward(row),
            b.values[value_index(Field::Phase)].is_some()
        );
    }
}

fn to_crlf(bytes: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(bytes.len() * 2);
    for &b in bytes {
        if b == b'\n' {
            out.push(b'\r');
        }
        out.push(b);
    }
    out
}

// ---------------------------------------------------------------------------
// Properties.

proptest! {
    #![proptest_config(ProptestConfig::with_cases(128))]

    /// The parse reads exactly the generated values; written back from its
    /// fields and parsed again, the table is identical, and writing is
    /// idempotent.
    #[test]
    fn write_back_round_trip(log in log_strategy()) {
        round_trip(&log);
    }

    /// For any chunk split (from `chunk_bounds` with random targets, or any
    /// subset of the valid block starts), the parallel parse equals the serial
    /// one, warnings and line numbers included; also with CRLF line ends and
    /// with the file cut at a random byte.
    #[test]
    fn parallel_parse_equals_serial(
        log in log_strategy(),
        targets in vec(1usize..2048, 1..4),
        crlf in any::<bool>(),
        cut in option::of(any::<Index>()),
        subset in vec(any::<bool>(), 1..32),
    ) {
        let lf = log.render();
        let mut bytes = if crlf { to_crlf(&lf) } else { lf.clone() };
        if let Some(c) = cut {
            bytes.truncate(c.index(bytes.len() + 1));
        }
        for t in targets {
            let bounds = chunk_bounds(&bytes, t);
            checks::parallel_equals_serial(&bytes, &bounds);
        }
        let all = chunk_bounds(&bytes, 1);
        let chosen: Vec<usize> = std::iter::once(0)
            .chain(all[1..].iter().zip(subset.iter().cycle()).filter(|(_, k)| **k).map(|(b, _)| *b))
            .collect();
        checks::parallel_equals_serial(&bytes, &chosen);
        if crlf && cut.is_none() {
            // CR LF gives the same values as LF, plus one CRLF warning.
            let a = parse(lf);
            let b = parse(bytes);
            assert_same_fields(&a, &b);
            prop_assert_eq!(b.warnings().len(), a.warnings().len() + 1);
        }
    }

    /// Run 2's log parsed against run 1's (blocks byte-identical to run
    /// 1's copy their rows, in runs) equals its plain parse, for any chunk
    /// split: on edited pairs, a log against itself, and with the file cut
    /// at a random byte.
    #[test]
    fn parse_against_a_reference_equals_the_plain_parse(
        (log1, log2) in edited_pair(),
        target in 1usize..2048,
        cut in option::of(any::<Index>()),
    ) {
        // Each log's blocks twice over as well: modules and ops that
        // repeat, as a model's layers do (a chunk copies a run of blocks
        // a column at a time once it has seen their module and op).
        let twice = |l: &Log| {
            let mut t = l.clone();
            t.blocks.extend(l.blocks.iter().cloned());
            t
        };
        for (l1, l2) in [(log1.clone(), log2.clone()), (twice(&log1), twice(&log2))] {
            let (a, mut b) = (l1.render(), l2.render());
            if let Some(c) = cut {
                b.truncate(c.index(b.len() + 1));
            }
            checks::against_equals_plain(&a, &b, &chunk_bounds(&b, target));
            checks::against_equals_plain(&a, &a, &chunk_bounds(&a, target));
            checks::against_equals_plain(&b, &a, &chunk_bounds(&a, 1));
        }
    }

    /// Every row of a log matched against itself pairs with itself and is `match`.
    #[test]
    fn self_match_is_all_match(log in log_strategy()) {
        let t = parse(log.render());
        let m = match_tables(&t, &t, &MatchOptions::default());
        prop_assert_eq!(m.rows.len(), t.len());
        for (i, r) in m.rows.iter().enumerate() {
            prop_assert_eq!((r.r1(), r.r2()), (Some(i), Some(i)), "row {}", i);
            prop_assert_eq!(r.status, Status::Match, "row {} {}", i, checks::short(t.key(i)));
        }
        prop_assert_eq!(m.counts().matched, t.len() as u64);
        prop_assert_eq!(m.first_divergence(), None);
    }

    /// Swapping the runs swaps the `only1`/`only2` counts and mirrors the
    /// pairs; each pair keeps its status and pass.
    #[test]
    fn swapping_runs_mirrors_pairs((log1, log2) in edited_pair()) {
        let t1 = parse(log1.render());
        let t2 = parse(log2.render());
        let opts = MatchOptions::default();
        let m12 = match_tables(&t1, &t2, &opts);
        let m21 = match_tables(&t2, &t1, &opts);
        let (c12, c21) = (m12.counts(), m21.counts());
        prop_assert_eq!(c12.only1, c21.only2);
        prop_assert_eq!(c12.only2, c21.only1);
        // Every other count is the same.
        let mut swapped = c21;
        std::mem::swap(&mut swapped.only1, &mut swapped.only2);
        prop_assert_eq!(c12, swapped);
        prop_assert_eq!(m12.strategy_counts(), m21.strategy_counts());
        let p12 = pairs(&m12, &t1, &t2, false);
        let p21 = pairs(&m21, &t2, &t1, true);
        if p12 != p21 {
            let i = (0..p12.len().max(p21.len())).find(|i| p12.get(*i) != p21.get(*i)).unwrap();
            let show = |p: Option<&Pair>| p.map(|(a, b, s, m)| format!("({}, {}, {s:?}, {m})", checks::short(a.as_bytes()), checks::short(b.as_bytes())));
            panic!("pair {i}: 1 vs 2 {:?}, 2 vs 1 mirrored {:?}", show(p12.get(i)), show(p21.get(i)));
        }
        // Every row appears exactly once on each side.
        prop_assert_eq!(m12.rows.len() as u64, c12.total());
        prop_assert_eq!(c12.total() - c12.only2, t1.len() as u64);
        prop_assert_eq!(c12.total() - c12.only1, t2.len() as u64);
    }
}

/// The write-back round trip of one generated log (see `write_back_round_trip`).
fn round_trip(log: &Log) {
    let t1 = parse(log.render());
    assert_matches_model(&t1, log);
    let text1 = write_back(&t1);
    let t2 = parse(text1.clone());
    assert_same_fields(&t1, &t2);
    assert!(write_back(&t2) == text1, "writing back is not idempotent");
    let mismatch = log.total.is_some_and(|n| n != log.blocks.len() as u64);
    assert_eq!(t2.warnings().len(), usize::from(mismatch));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(32))]

    /// Keys and hash lists of 64 KiB or more: the model, the write-back round
    /// trip, the block re-read, self-match and the parallel parse (a key of
    /// 64 KiB or more once kept its closing `]`: `parse_log-1.bin`).
    #[test]
    fn long_values_round_trip(log in log_strategy_with(true)) {
        round_trip(&log);
        let bytes = log.render();
        checks::parse_log(&bytes);
        checks::parallel_equals_serial(&bytes, &chunk_bounds(&bytes, 4096));
    }
}

/// A pair as (run-1 key, run-2 key, status, pass).
type Pair = (String, String, Status, &'static str);

/// The pairs of a match, sorted; `mirror` swaps the keys (for the swapped
/// comparison).
fn pairs(m: &MatchTable, a: &OpTable, b: &OpTable, mirror: bool) -> Vec<Pair> {
    let mut v: Vec<_> = m
        .rows
        .iter()
        .filter_map(|r| {
            let (x, y) = (r.r1()?, r.r2()?);
            let (k1, k2) = (a.key_str(x).into_owned(), b.key_str(y).into_owned());
            let (k1, k2) = if mirror { (k2, k1) } else { (k1, k2) };
            Some((k1, k2, r.status, r.strategy.as_str().unwrap_or("")))
        })
        .collect();
    v.sort_by(|p, q| (&p.0, &p.1).cmp(&(&q.0, &q.1)));
    v
}

/// One edit of a block of run 1 to make run 2.
#[derive(Clone, Debug)]
enum Edit {
    Keep,
    Drop,
    OutputHash(String),
    InputHashes(String),
    Shape(String),
    Counter(u32),
    OpName(String),
    Module(String),
}

fn edit() -> impl Strategy<Value = Edit> {
    prop_oneof![
        8 => Just(Edit::Keep),
        2 => Just(Edit::Drop),
        2 => hash_list(4, false).prop_map(Edit::OutputHash),
        1 => hash_list(4, false).prop_map(Edit::InputHashes),
        1 => shape().prop_map(Edit::Shape),
        2 => (0u32..8).prop_map(Edit::Counter),
        1 => op_name().prop_map(Edit::OpName),
        1 => fqn(false).prop_map(Edit::Module),
    ]
}

/// A log and a random edit of it: blocks dropped, hashes and shapes changed,
/// counters renamed, op names and modules changed, new blocks inserted.
fn edited_pair() -> impl Strategy<Value = (Log, Log)> {
    log_strategy().prop_flat_map(|log| {
        let n = log.blocks.len();
        (
            Just(log),
            vec(edit(), n),
            vec((any::<Index>(), raw_block(false)), 0..4),
        )
            .prop_map(|(log, edits, inserts)| {
                let mut log2 = log.clone();
                log2.blocks = log
                    .blocks
                    .iter()
                    .zip(edits)
                    .filter_map(|(b, e)| {
                        let mut b = b.clone();
                        match e {
                            Edit::Keep => {}
                            Edit::Drop => return None,
                            Edit::OutputHash(h) => {
                                b.values[value_index(Field::OutputHash)] = Some(h)
                            }
                            Edit::InputHashes(h) => {
                                b.values[value_index(Field::InputHashes)] = Some(h)
                            }
                            Edit::Shape(s) => b.values[value_index(Field::Shape)] = Some(s),
                            Edit::Counter(c) => b.seq = c,
                            Edit::OpName(o) => b.op = o,
                            Edit::Module(m) => b.fqn = m,
                        }
                        Some(b)
                    })
                    .collect();
                let new = assemble(inserts.iter().map(|(_, r)| r.clone()).collect());
                for ((at, _), b) in inserts.iter().zip(new) {
                    let i = at.index(log2.blocks.len() + 1);
                    log2.blocks.insert(i, b);
                }
                log2.dedup();
                log2.total = None;
                (log, log2)
            })
    })
}

// ---------------------------------------------------------------------------
// Fixed cases.

#[test]
fn py_e6_matches_python() {
    assert_eq!(py_e6(123.45678), "1.234568e+02");
    assert_eq!(py_e6(-0.0), "-0.000000e+00");
    assert_eq!(py_e6(1e-300), "1.000000e-300");
    assert_eq!(py_e6(0.001), "1.000000e-03");
}

#[test]
fn shipped_logs_round_trip_and_self_match() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata");
    for log in [
        "bug_layer2/run_A/rank_0_activations.log",
        "bug_layer2/run_B/rank_0_activations.log",
    ] {
        let bytes = std::fs::read(root.join(log)).unwrap();
        let t1 = parse(bytes.clone());
        let t2 = parse(write_back(&t1));
        assert_same_fields(&t1, &t2);
        checks::parse_log(&bytes);
        for target in [1, 7, 1000, 50_000] {
            checks::parallel_equals_serial(&bytes, &chunk_bounds(&bytes, target));
        }
    }
}

/// The `outputs` and `part_manifest` targets' checks on the shipped logs
/// (bug_layer2's two runs, as the target splits its input) and on
/// manifests that read and that do not.
#[test]
fn shipped_logs_write_rows_and_summaries_that_read_back() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/bug_layer2");
    let a = std::fs::read(root.join("run_A/rank_0_activations.log")).unwrap();
    let b = std::fs::read(root.join("run_B/rank_0_activations.log")).unwrap();
    // The cut is a u16: the first 60,000 bytes of run A against all of run B.
    let cut = a.len().min(60_000);
    let mut data = (cut as u16).to_le_bytes().to_vec();
    data.extend_from_slice(&a[..cut]);
    data.extend_from_slice(&b);
    checks::outputs(&data);
    checks::outputs(&[0, 0]);
    // A manifest `actdiff compare --shard 0/2` wrote (the fuzz seed).
    let seed = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("fuzz/seeds/part.json");
    let real = std::fs::read(&seed).unwrap();
    actdiff::run::shard::Manifest::from_bytes(&real, &seed).expect("the seed reads");
    checks::part_manifest(&real);
    checks::part_manifest(b"{");
    checks::part_manifest(br#"{"format": "actdiff-part", "version": 1}"#);
    checks::part_manifest(br#"{"format": "actdiff-part", "version": 99}"#);
}

// ---------------------------------------------------------------------------
// Inputs the fuzzers found (`tests/fuzz_regressions/<target>-<n>.bin`), each
// replayed through its target's checks (`fuzz/src/checks.rs`).

fn regression(name: &str) {
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fuzz_regressions")
        .join(name);
    let data = std::fs::read(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let target = name.rsplit_once('-').map(|(t, _)| t).unwrap_or(name);
    match target {
        "parse_log" => checks::parse_log(&data),
        "parse_chunks" => checks::parse_chunks(&data),
        "parse_against" => checks::parse_against(&data),
        "overrides" => checks::overrides(&data),
        "config" => checks::config(&data),
        "part_manifest" => checks::part_manifest(&data),
        "outputs" => checks::outputs(&data),
        _ => panic!("{name}: unknown fuzz target `{target}`"),
    }
}

/// Every saved input has its own test below, and every test below names a
/// saved input. A folder that cannot be read, or holds no input, fails.
#[test]
fn every_fuzz_regression_has_a_test() {
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fuzz_regressions");
    let src = include_str!("properties.rs");
    let rd = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    let mut saved = BTreeSet::new();
    for e in rd {
        let e = e.unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".bin") {
            assert!(
                src.contains(&format!("regression(\"{name}\")")),
                "{name} has no test in tests/properties.rs"
            );
            saved.insert(name);
        }
    }
    assert!(!saved.is_empty(), "{}: no saved input", dir.display());
    let open = "regression(\"";
    let named: BTreeSet<&str> = src
        .match_indices(open)
        .map(|(i, _)| &src[i + open.len()..])
        .filter_map(|rest| rest.split_once('"').map(|(name, _)| name))
        .filter(|name| name.ends_with(".bin"))
        .collect();
    for name in &named {
        assert!(
            saved.contains(*name),
            "tests/properties.rs replays {name}, which is not in {}",
            dir.display()
        );
    }
    assert_eq!(named.len(), saved.len());
}

/// A key of 64 KiB or more kept its closing `]` (fixed in f318411; found
/// by `long_values_round_trip`, checked by the `parse_log` target's key re-read).
#[test]
fn fuzz_parse_log_1() {
    regression("parse_log-1.bin");
}

/// A log compared with itself: every row `match` (`../shared/fuzz/self-match/crash-4626ac68…`,
/// found by the `parse_log` target's self-match check; each has a digest line
/// such as `Output digest: 6.400000e+01, inf` under a repeated `Output hash: nan`).
#[test]
fn fuzz_parse_log_2() {
    regression("parse_log-2.bin");
}

/// A log compared with itself: every row `match` (`../shared/fuzz/self-match/crash-498f9418…`,
/// found by the `parse_log` target's self-match check; each has a digest line
/// such as `Output digest: 6.400000e+01, inf` under a repeated `Output hash: nan`).
#[test]
fn fuzz_parse_log_3() {
    regression("parse_log-3.bin");
}

/// A log compared with itself: every row `match` (`../shared/fuzz/self-match/crash-55290dd0…`,
/// found by the `parse_log` target's self-match check; each has a digest line
/// such as `Output digest: 6.400000e+01, inf` under a repeated `Output hash: nan`).
#[test]
fn fuzz_parse_log_4() {
    regression("parse_log-4.bin");
}

/// A log compared with itself: every row `match` (`../shared/fuzz/self-match/crash-a2ee83e4…`,
/// found by the `parse_log` target's self-match check; each has a digest line
/// such as `Output digest: 6.400000e+01, inf` under a repeated `Output hash: nan`).
#[test]
fn fuzz_parse_log_5() {
    regression("parse_log-5.bin");
}

/// A log compared with itself: every row `match` (`../shared/fuzz/self-match/crash-acd8426c…`,
/// found by the `parse_log` target's self-match check; each has a digest line
/// such as `Output digest: 6.400000e+01, inf` under a repeated `Output hash: nan`).
#[test]
fn fuzz_parse_log_6() {
    regression("parse_log-6.bin");
}

/// A log compared with itself: every row `match` (`../shared/fuzz/self-match/crash-ae2455de…`,
/// found by the `parse_log` target's self-match check; each has a digest line
/// such as `Output digest: 6.400000e+01, inf` under a repeated `Output hash: nan`).
#[test]
fn fuzz_parse_log_7() {
    regression("parse_log-7.bin");
}

/// A log compared with itself: every row `match` (`../shared/fuzz/self-match/crash-c158ab20…`,
/// found by the `parse_log` target's self-match check; each has a digest line
/// such as `Output digest: 6.400000e+01, inf` under a repeated `Output hash: nan`).
#[test]
fn fuzz_parse_log_8() {
    regression("parse_log-8.bin");
}

/// A log compared with itself: every row `match` (`../shared/fuzz/self-match/crash-d0cbac8b…`,
/// found by the `parse_log` target's self-match check; each has a digest line
/// such as `Output digest: 6.400000e+01, inf` under a repeated `Output hash: nan`).
#[test]
fn fuzz_parse_log_9() {
    regression("parse_log-9.bin");
}
