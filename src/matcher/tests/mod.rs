//! The matcher's unit tests: pairing passes, statuses, phases, the Shape
//! tie-break and the layer offset here; root cause in `root_cause.rs`, value
//! re-pairing in `re_pairing.rs`. The helpers that build logs are here.

use super::*;
use crate::parser::parse_bytes;

mod re_pairing;
mod root_cause;

fn log(blocks: &[(&str, &str)]) -> OpTable {
    let mut s = format!("Total captured activations: {}\n", blocks.len());
    s.push_str(&"=".repeat(80));
    s.push_str("\n\n");
    for (k, body) in blocks {
        s.push_str(&format!("[{k}]\n"));
        for l in body.lines() {
            s.push_str(&format!("  {l}\n"));
        }
        s.push('\n');
    }
    parse_bytes(s.into_bytes(), "t.log")
}

/// [`log`] of blocks built as owned strings.
fn log_owned(blocks: &[(String, String)]) -> OpTable {
    log(&blocks
        .iter()
        .map(|(k, x)| (k.as_str(), x.as_str()))
        .collect::<Vec<_>>())
}

fn summary(
    m: &MatchTable,
    a: &OpTable,
    b: &OpTable,
) -> Vec<(String, String, &'static str, Option<&'static str>)> {
    m.rows
        .iter()
        .map(|r| {
            (
                r.r1()
                    .map(|i| a.key_str(i).into_owned())
                    .unwrap_or_default(),
                r.r2()
                    .map(|i| b.key_str(i).into_owned())
                    .unwrap_or_default(),
                r.status.as_str(),
                r.strategy.as_str(),
            )
        })
        .collect()
}

#[test]
fn four_passes_in_order_and_first_unclaimed_wins() {
    let a = log(&[
        ("M.w/op_0_mm", "Output hash: 1.0"),
        ("FSDPModel.x/op_0_add", "Output hash: 2.0"),
        ("y/op_1_mul", "Output hash: 3.0"),
        ("y/op_2_mul", "Output hash: 4.0"),
        ("z/op_0_relu", "Shape: torch.Size([2])\nOutput hash: 5.0"),
        ("gone/op_0_mm", "Output hash: 6.0"),
    ]);
    let b = log(&[
        ("x/op_0_add", "Output hash: 2.0"),
        ("y/op_5_mul", "Output hash: 3.0"),
        ("y/op_6_mul", "Output hash: 4.5"),
        ("q/op_9_relu", "Shape: torch.Size([2])\nOutput hash: 5.0"),
        ("M.w/op_0_mm", "Output hash: 1.0"),
        ("new/op_0_mm", "Output hash: 7.0"),
    ]);
    let m = match_tables(&a, &b, &MatchOptions::default());
    let s = summary(&m, &a, &b);
    assert_eq!(
        s,
        vec![
            (
                "M.w/op_0_mm".into(),
                "M.w/op_0_mm".into(),
                "match",
                Some("exact")
            ),
            (
                "FSDPModel.x/op_0_add".into(),
                "x/op_0_add".into(),
                "match",
                Some("exact")
            ),
            (
                "y/op_1_mul".into(),
                "y/op_5_mul".into(),
                "match",
                Some("fuzzy")
            ),
            (
                "y/op_2_mul".into(),
                "y/op_6_mul".into(),
                "diff",
                Some("fuzzy")
            ),
            (
                "z/op_0_relu".into(),
                "q/op_9_relu".into(),
                "match",
                Some("stats")
            ),
            ("gone/op_0_mm".into(), "".into(), "only1", None),
            ("".into(), "new/op_0_mm".into(), "only2", None),
        ]
    );
    assert_eq!(m.counts().matched, 4);
    assert_eq!(m.first_divergence(), Some(3));
    let sc = m.strategy_counts();
    assert_eq!((sc.exact, sc.fuzzy, sc.stats, sc.overridden), (2, 2, 1, 0));
}

#[test]
fn overrides_win_and_unused_ones_are_listed() {
    let a = log(&[
        ("a/op_0_mm", "Output hash: 1.0"),
        ("b/op_0_mm", "Output hash: 1.0"),
    ]);
    let b = log(&[
        ("a/op_0_mm", "Output hash: 1.0"),
        ("c/op_0_mm", "Output hash: 1.0"),
    ]);
    let mut o = Overrides::default();
    o.insert("a/op_0_mm", "c/op_0_mm");
    o.insert("zzz", "a/op_0_mm");
    let m = match_tables(
        &a,
        &b,
        &MatchOptions {
            overrides: o,
            ..Default::default()
        },
    );
    let s = summary(&m, &a, &b);
    assert_eq!(
        s[0],
        (
            "a/op_0_mm".into(),
            "c/op_0_mm".into(),
            "match",
            Some("override")
        )
    );
    assert_eq!(s[1].3, Some("stats"), "b pairs with a in the stats pass");
    assert_eq!(
        m.unused_overrides,
        vec![("zzz".to_string(), "a/op_0_mm".to_string())]
    );
}

#[test]
fn status_rules() {
    let a = log(&[
        (
            "s/op_0_mm",
            "Shape: torch.Size([2]), Dtype: torch.float32\nOutput hash: 1.0",
        ),
        ("i/op_0_mm", "Output hash: 1.0\nInput hashes: 1.0, 2.0"),
        ("h/op_0_add_", "Input hashes: 1.0"),
        ("n/op_0_mm", "Min: 1.0\nOutput hash: 1.0"),
    ]);
    let b = log(&[
        (
            "s/op_0_mm",
            "Shape: torch.Size([2]), Dtype: torch.bfloat16\nOutput hash: 1.0",
        ),
        ("i/op_0_mm", "Output hash: 1.0\nInput hashes: 1.0, 2.1"),
        ("h/op_0_add_", "Input hashes: 1.0"),
        ("n/op_0_mm", "Min: 5.0\nOutput hash: 1.0"),
    ]);
    let m = match_tables(&a, &b, &MatchOptions::default());
    let st: Vec<_> = m.rows.iter().map(|r| r.status).collect();
    assert_eq!(
        st,
        vec![Status::Diff, Status::Diff, Status::Match, Status::Match]
    );
    let d = compare::stat_diffs(&a, 3, &b, 3);
    assert_eq!(d[2], Some(0.8));
    assert_eq!(compare::stat_diffs(&a, 0, &b, 0)[0], Some(1.0));
    // stats gate when asked
    let opts = MatchOptions {
        policy: Policy {
            default: CompareOptions {
                stats: Some(Tolerance {
                    rtol: 1e-3,
                    atol: 0.0,
                    both: false,
                }),
                ..Default::default()
            },
            ..Default::default()
        },
        ..Default::default()
    };
    let m = match_tables(&a, &b, &opts);
    assert_eq!(m.rows[3].status, Status::Diff);
}

#[test]
fn self_compare_all_match_and_swap_mirrors() {
    let a = log(&[
        ("a/op_0_mm", "Output hash: 1.0"),
        ("b/op_0_mm", "Output hash: 2.0"),
    ]);
    let b = log(&[
        ("b/op_0_mm", "Output hash: 2.0"),
        ("c/op_0_mm", "Output hash: 3.0"),
    ]);
    let m = match_tables(&a, &a, &MatchOptions::default());
    assert!(m.rows.iter().all(|r| r.status == Status::Match));
    let ab = match_tables(&a, &b, &MatchOptions::default());
    let ba = match_tables(&b, &a, &MatchOptions::default());
    assert_eq!(ab.counts().only1, ba.counts().only2);
    assert_eq!(ab.counts().only2, ba.counts().only1);
}

#[test]
fn exact_pass_by_index_survives_collisions() {
    // Every key hashes alike: the walk over a hash's rows must still pair by
    // equal keys, first unclaimed run-2 row first, exactly as the plain pass
    // does.
    let k1 = ["a", "b", "a", "c"];
    let k2 = ["b", "a", "x", "a", "a"];
    let index = |n: usize| -> Vec<(u64, u32)> { (0..n as u32).map(|r| (7, r)).collect() };
    let mut p = Pairing::new(k1.len(), k2.len());
    let (paired, _) = p.pass_by_index(
        index(4),
        &index(5),
        |r1, r2| k1[r1] == k2[r2],
        |_, _| false,
        |_, _| {},
    );
    assert_eq!(paired, 3);
    assert_eq!(p.pair1, vec![1, 0, 3, NO_ROW]);
    let mut q = Pairing::new(k1.len(), k2.len());
    q.pass(Strategy::Exact, |r| Some(k1[r]), |r| Some(k2[r]));
    assert_eq!(p.pair1, q.pair1);
    assert_eq!(p.pair2, q.pair2);
}

#[test]
fn exact_pass_by_index_equals_the_plain_pass() {
    // Hashes by first letter (so `ab`/`ax` collide), rows an earlier pass
    // paired are skipped on both sides, and repeated keys pair in order.
    let k1 = ["ab", "c", "ab", "ax", "d", "c", "e"];
    let k2 = ["c", "ax", "ab", "c", "ab", "e", "q", "c"];
    let index = |k: &[&str]| -> Vec<(u64, u32)> {
        let mut v: Vec<(u64, u32)> = k
            .iter()
            .enumerate()
            .map(|(r, s)| (u64::from(s.as_bytes()[0]), r as u32))
            .collect();
        v.sort_unstable();
        v
    };
    let prepaired = |p: &mut Pairing| {
        // An earlier pass paired run 1's row 6 with run 2's row 3.
        p.pair1[6] = 3;
        p.pair2[3] = 6;
    };
    let mut p = Pairing::new(k1.len(), k2.len());
    prepaired(&mut p);
    // Every pair whose run-2 row is odd is marked.
    let (paired, marked) = p.pass_by_index(
        index(&k1),
        &index(&k2),
        |r1, r2| k1[r1] == k2[r2],
        |_, r2| r2 % 2 == 1,
        |_, _| {},
    );
    let mut q = Pairing::new(k1.len(), k2.len());
    prepaired(&mut q);
    let plain = q.pass(Strategy::Exact, |r| Some(k1[r]), |r| Some(k2[r]));
    assert_eq!(paired, plain);
    assert_eq!(p.pair1, q.pair1);
    assert_eq!(p.pair2, q.pair2);
    assert_eq!(p.pair1, vec![2, 0, 4, 1, NO_ROW, 7, 3]);
    // Marked as asked, in run-1 order, row 5's partner (7) included though
    // its candidate (row 0, claimed by row 1) was another row.
    assert_eq!(marked, vec![(3, 1), (5, 7)]);
}

/// A full-precision log with digests (`Precision: full` header).
fn full_log(blocks: &[(&str, &str)]) -> OpTable {
    let mut s = format!(
        "Total captured activations: {}\nExcluded ops dispatched: \nPrecision: full\n",
        blocks.len()
    );
    s.push_str(&"=".repeat(80));
    s.push_str("\n\n");
    for (k, body) in blocks {
        s.push_str(&format!("[{k}]\n"));
        for l in body.lines() {
            s.push_str(&format!("  {l}\n"));
        }
        s.push('\n');
    }
    parse_bytes(s.into_bytes(), "full.log")
}

#[test]
fn same_text_flag_marks_pairs_whose_printed_values_are_equal_text() {
    let full = "Shape: torch.Size([2]), Dtype: torch.float32\nL2 norm: 1.0\nMin: 0.5\nMax: 1.5\nMean: 1.0\nOutput hash: 2.0\nInput hashes: 3.0, 4.0";
    // Only the Location differs: still the same printed values.
    let a = log(&[
        ("a/op_0_mm", &format!("{full}\nLocation: m.py:1")),
        ("b/op_0_mm", full),
        ("c/op_0_mm", full),
        ("d/op_0_mm", full),
        ("e/op_0_add_", "Output hash: 1.0"),
    ]);
    let b = log(&[
        ("a/op_0_mm", &format!("{full}\nLocation: m.py:2")),
        // A stat differs: a match (stats do not gate) without the flag.
        ("b/op_0_mm", &full.replace("Mean: 1.0", "Mean: 1.1")),
        // Input hashes on one side only: not the same text.
        ("c/op_0_mm", &full.replace("\nInput hashes: 3.0, 4.0", "")),
        // A differing Input hash: a diff.
        ("d/op_0_mm", &full.replace("4.0", "4.5")),
        // Fields absent on both sides count as equal.
        ("e/op_0_add_", "Output hash: 1.0"),
    ]);
    let m = match_tables(&a, &b, &MatchOptions::default());
    let same: Vec<bool> = m.rows.iter().map(|r| r.has(ROW_SAME_TEXT)).collect();
    assert_eq!(same, vec![true, false, false, false, true]);
    let st: Vec<Status> = m.rows.iter().map(|r| r.status).collect();
    assert_eq!(
        st,
        vec![
            Status::Match,
            Status::Match,
            Status::Diff,
            Status::Diff,
            Status::Match
        ]
    );
    // NaN against NaN under --nan-is-diff: the same text, yet a diff (the
    // fast path is only taken where equal text agrees).
    let nan = log(&[("n/op_0_mm", "Output hash: nan")]);
    let opts = MatchOptions {
        policy: Policy {
            default: CompareOptions {
                nan_equal: false,
                ..CompareOptions::default()
            },
            ..Policy::default()
        },
        ..MatchOptions::default()
    };
    let m = match_tables(&nan, &nan, &opts);
    assert!(m.rows[0].has(ROW_SAME_TEXT));
    assert_eq!(m.rows[0].status, Status::Diff);
}

/// `exact_keys_equal` holds exactly when every exact-pass pair's raw keys
/// are byte-equal, without reading them: no layer offset, the same root
/// class on every key of both tables. Checked against the keys themselves.
#[test]
fn exact_keys_equal_only_where_every_exact_pair_has_equal_raw_keys() {
    // The exact pairs said to have equal raw keys.
    let same_key = |m: &MatchTable| -> Vec<bool> {
        m.rows
            .iter()
            .map(|r| m.exact_keys_equal && r.strategy == Strategy::Exact)
            .collect()
    };
    let keys_equal = |m: &MatchTable, a: &OpTable, b: &OpTable| -> Vec<bool> {
        m.rows
            .iter()
            .map(|r| match r.sides() {
                Sides::Both(x, y) => a.key(x) == b.key(y),
                _ => false,
            })
            .collect()
    };
    let plain = [
        ("layers.0.w/op_0_mm", "Output hash: 1.0"),
        ("layers.1.w/op_1_mm", "Output hash: 2.0"),
        ("y/op_2_mul", "Output hash: 3.0"),
    ];
    let renumbered = [
        ("layers.0.w/op_0_mm", "Output hash: 1.0"),
        ("layers.1.w/op_1_mm", "Output hash: 2.0"),
        // Paired by the fuzzy pass: equal op, other counter.
        ("y/op_7_mul", "Output hash: 3.0"),
    ];
    let (a, b) = (log(&plain), log(&renumbered));
    let m = match_tables(&a, &b, &MatchOptions::default());
    assert_eq!(same_key(&m), vec![true, true, false]);
    assert_eq!(same_key(&m), keys_equal(&m, &a, &b));
    // One root class on every key of both: still byte-equal.
    let wrap = |blocks: &[(&str, &str)], class: &str| {
        let keys: Vec<(String, &str)> = blocks
            .iter()
            .map(|(k, v)| (format!("{class}{k}"), *v))
            .collect();
        let refs: Vec<(&str, &str)> = keys.iter().map(|(k, v)| (k.as_str(), *v)).collect();
        log(&refs)
    };
    let (fa, fb) = (wrap(&plain, "FSDPModel."), wrap(&plain, "FSDPModel."));
    let m = match_tables(&fa, &fb, &MatchOptions::default());
    assert_eq!(same_key(&m), vec![true; 3]);
    // Root classes that differ (FSDP against none): exact pairs whose raw
    // keys differ, not marked.
    let m = match_tables(&fa, &a, &MatchOptions::default());
    assert_eq!(m.strategy_counts().exact, 3);
    assert_eq!(same_key(&m), vec![false; 3]);
    assert_eq!(same_key(&m), keys_equal(&m, &fa, &a));
    // Keys of one table that differ in their root class: not marked.
    let mixed = log(&[
        ("FSDPModel.layers.0.w/op_0_mm", "Output hash: 1.0"),
        ("layers.1.w/op_1_mm", "Output hash: 2.0"),
        ("y/op_2_mul", "Output hash: 3.0"),
    ]);
    let m = match_tables(&mixed, &a, &MatchOptions::default());
    assert_eq!(m.strategy_counts().exact, 3);
    assert_eq!(same_key(&m), vec![false; 3]);
    // A layer offset: exact pairs of renumbered layers, not marked.
    let shifted = log(&[
        ("layers.4.w/op_0_mm", "Output hash: 1.0"),
        ("layers.5.w/op_1_mm", "Output hash: 2.0"),
    ]);
    let opts = MatchOptions {
        layer_offset: [4, 0],
        ..MatchOptions::default()
    };
    let m = match_tables(&a, &shifted, &opts);
    assert_eq!(m.strategy_counts().exact, 2);
    assert!(same_key(&m).iter().all(|s| !s));
}

#[test]
fn a_malformed_digest_equals_only_the_same_text() {
    let body = |od: &str| format!("Output hash: 2.5\nOutput digest: {od}");
    let a = full_log(&[
        ("x/op_0_mm", &body("6.400000e+01, inf")),
        ("y/op_0_mm", &body("zz, 00000000000000aa")),
        ("z/op_0_mm", &body("zz, 00000000000000aa")),
    ]);
    let b = full_log(&[
        ("x/op_0_mm", &body("6.400000e+01, inf")),
        ("y/op_0_mm", &body("zy, 00000000000000aa")),
        ("z/op_0_mm", &body("zz, 00000000000000ab")),
    ]);
    // Each log against itself: every row bitwise identical, none differs.
    for t in [&a, &b] {
        let m = match_tables(t, t, &MatchOptions::default());
        assert!(
            m.rows.iter().all(|r| r.status == Status::Match),
            "{:?}",
            m.rows
        );
        for r in 0..t.len() {
            assert_eq!(
                compare::digest_differences(t, r, t, r, Field::OutputDigest),
                Some(vec![])
            );
        }
    }
    // Across: the malformed value differs where its text does, a valid one
    // where its number does.
    let d = |r| compare::digest_differences(&a, r, &b, r, Field::OutputDigest);
    assert_eq!(d(0), Some(vec![]));
    assert_eq!(d(1), Some(vec![0]));
    assert_eq!(d(2), Some(vec![1]));
}

/// Options with the Shape tie-break on or off and a layer offset (a
/// non-zero offset runs the exact pass as a plain hash pass instead of
/// over the key indexes).
fn opts_with(shape_tie_break: bool, layer_offset: [i64; 2]) -> MatchOptions {
    MatchOptions {
        shape_tie_break,
        layer_offset,
        ..MatchOptions::default()
    }
}

/// Eager (run 1) against `aot_eager` compiled while armed (run 2): the
/// compiled forward's keys are `<none>/op_N_*`, its backward keeps module
/// names and restarts the module's counter, so run 2's backward
/// `qkv/op_0_mm` has the key of run 1's forward `qkv/op_0_mm`.
fn eager_and_compiled(phase_lines_in_2: bool) -> (OpTable, OpTable) {
    let fwd = "Shape: torch.Size([128, 192]), Dtype: torch.float32\nOutput hash: 1.0";
    let bwd =
        "Shape: torch.Size([192, 64]), Dtype: torch.float32\nOutput hash: 2.0\nPhase: backward";
    let a = log(&[
        ("blocks.0.attn.qkv/op_0_mm", fwd),
        ("blocks.0.attn.qkv/op_1_mm", bwd),
    ]);
    let bwd2 = if phase_lines_in_2 {
        bwd.to_string()
    } else {
        bwd.replace("\nPhase: backward", "")
    };
    let b = log(&[
        ("<none>/op_0_mm", fwd),
        ("blocks.0.attn.qkv/op_0_mm", &bwd2),
    ]);
    (a, b)
}

#[test]
fn a_forward_row_and_a_backward_row_of_one_key_never_pair() {
    let (a, b) = eager_and_compiled(true);
    for tie_break in [true, false] {
        for offset in [[0, 0], [1, 1]] {
            let m = match_tables(&a, &b, &opts_with(tie_break, offset));
            assert_eq!(
                summary(&m, &a, &b),
                vec![
                    // Forward with forward: same op type, Shape and Output hash.
                    (
                        "blocks.0.attn.qkv/op_0_mm".into(),
                        "<none>/op_0_mm".into(),
                        "match",
                        Some("stats")
                    ),
                    // Backward with backward, counters differing.
                    (
                        "blocks.0.attn.qkv/op_1_mm".into(),
                        "blocks.0.attn.qkv/op_0_mm".into(),
                        "match",
                        Some("fuzzy")
                    ),
                ],
                "tie-break {tie_break}, offset {offset:?}"
            );
            assert_eq!(m.counts().diff, 0);
        }
    }
    // Where only the phase differs, nothing pairs in any pass.
    // (`Phase: forward` says so as well as no line does.)
    let f = log(&[(
        "m/op_0_mm",
        "Shape: torch.Size([2])\nOutput hash: 1.0\nPhase: forward",
    )]);
    let g = log(&[(
        "m/op_0_mm",
        "Shape: torch.Size([2])\nOutput hash: 1.0\nPhase: backward",
    )]);
    let m = match_tables(&f, &g, &MatchOptions::default());
    assert_eq!((m.counts().only1, m.counts().only2), (1, 1));
}

/// Run 2 adds one root-scope `add_` before the forward (a logging
/// counter): every later root-scope op's counter shifts, and the fuzzy
/// pass gave run 1's optimizer `add_` (AdamW's step counter) the new
/// forward `add_`, naming an origin in an optimizer that is bitwise equal
/// (new-user trial 6, F4). Forward and optimizer rows no longer pair: the
/// optimizer's `add_`s pair with each other and the new op is run 2's
/// only.
#[test]
fn a_forward_row_and_an_optimizer_row_never_pair() {
    let fwd = "Shape: torch.Size([4])\nOutput hash: 1.0";
    let bwd = "Shape: torch.Size([4])\nOutput hash: 2.0\nPhase: backward";
    let step = |v: &str| format!("Shape: torch.Size([])\nOutput hash: {v}");
    let (s1, s2) = (step("1.0"), step("2.0"));
    let a = log(&[
        ("m/op_0_mm", fwd),
        ("m/op_1_mm", bwd),
        ("<none>/op_0_add_", &s1),
        ("<none>/op_1_add_", &s2),
    ]);
    let b = log(&[
        (
            "<none>/op_0_add_",
            "Shape: torch.Size([])\nOutput hash: 32.0",
        ),
        ("m/op_0_mm", fwd),
        ("m/op_1_mm", bwd),
        ("<none>/op_1_add_", &s1),
        ("<none>/op_2_add_", &s2),
    ]);
    assert_eq!(a.phase_kind(2), crate::logformat::Phase::Optimizer);
    assert_eq!(b.phase_kind(0), crate::logformat::Phase::Forward);
    let m = match_tables(&a, &b, &MatchOptions::default());
    let s = summary(&m, &a, &b);
    assert_eq!(
        s[2..],
        [
            (
                "<none>/op_0_add_".into(),
                "<none>/op_1_add_".into(),
                "match",
                Some("fuzzy")
            ),
            (
                "<none>/op_1_add_".into(),
                "<none>/op_2_add_".into(),
                "match",
                Some("fuzzy")
            ),
            ("".into(), "<none>/op_0_add_".into(), "only2", None),
        ],
        "{s:?}"
    );
    assert_eq!(m.counts().diff, 0);
}

#[test]
fn rows_pair_as_the_reference_where_a_log_records_no_phase() {
    // Run 2 has no Phase line at all: its rows' phases are unknown, so the
    // exact pass pairs the equal keys as the reference does (a Shape diff).
    // (With the Shape tie-break that pair is released: run 1 has more
    // `qkv` mms, and run 2's has a candidate of its Shape there.)
    let (a, b) = eager_and_compiled(false);
    for offset in [[0, 0], [1, 1]] {
        let m = match_tables(&a, &b, &opts_with(true, offset));
        assert_eq!(m.counts().diff, 0, "offset {offset:?}");
        let m = match_tables(&a, &b, &opts_with(false, offset));
        let s = summary(&m, &a, &b);
        assert_eq!(
            s[0],
            (
                "blocks.0.attn.qkv/op_0_mm".into(),
                "blocks.0.attn.qkv/op_0_mm".into(),
                "diff",
                Some("exact")
            ),
            "offset {offset:?}"
        );
    }
    // A block cut short by the end of its file may have lost its Phase
    // line: its phase is unknown, and it pairs with the backward row of
    // its key (status truncated), in every pass.
    let full = log(&[
        ("m/op_0_mm", "Shape: torch.Size([2])\nOutput hash: 1.0"),
        (
            "m/op_1_mm",
            "Shape: torch.Size([2])\nOutput hash: 2.0\nPhase: backward",
        ),
        (
            "m/op_2_mm",
            "Shape: torch.Size([4])\nOutput hash: 3.0\nPhase: backward",
        ),
    ]);
    let text = "Total captured activations: 3\n\n[m/op_0_mm]\n  Shape: torch.Size([2])\n  \
                Output hash: 1.0\n\n[m/op_1_mm]\n  Shape: torch.Size([2])\n  Output hash: 2.0\n  \
                Phase: backward\n\n[m/op_9_mm]\n  Shape: torch.Size([4])\n  Output hash: 3.0";
    let cut = crate::parser::parse_bytes(text.as_bytes().to_vec(), "cut.log");
    assert!(cut.is_truncated(2) && !cut.is_backward(2));
    for offset in [[0, 0], [1, 1]] {
        for (x, y, first) in [(&cut, &full, true), (&full, &cut, false)] {
            let m = match_tables(x, y, &opts_with(true, offset));
            let truncated: Vec<Strategy> = m
                .rows
                .iter()
                .filter(|r| r.status == Status::Truncated)
                .map(|r| r.strategy)
                .collect();
            assert_eq!(
                truncated,
                vec![Strategy::Fuzzy],
                "offset {offset:?}, cut first {first}"
            );
            assert_eq!(m.counts().matched, 2);
        }
    }
    // Neither log records phases: unchanged too.
    let f = log(&[("m/op_0_mm", "Output hash: 1.0")]);
    let g = log(&[("m/op_0_mm", "Output hash: 1.0")]);
    let m = match_tables(&f, &g, &MatchOptions::default());
    assert_eq!(m.counts().matched, 1);
}

/// Backward `bmm`s of an attention block, run 2's counters shifted by 4
/// (ops of run 2 only), so two exact keys name ops of other Shapes.
fn drifted_backward() -> (OpTable, OpTable) {
    let row = |shape: &str, hash: &str| {
        format!("Shape: torch.Size([{shape}]), Dtype: torch.float32\nOutput hash: {hash}\nPhase: backward")
    };
    let (pp, pv, qk) = ("4, 32, 32", "4, 32, 16", "4, 16, 32");
    let a_rows = [
        ("a/op_5_bmm", row(pp, "1.0")),
        ("a/op_6_bmm", row(pv, "2.0")),
        ("a/op_7__softmax_backward_data", row(pp, "3.0")),
        ("a/op_8_div", row(pp, "4.0")),
        ("a/op_9_bmm", row(pv, "5.0")),
        ("a/op_10_bmm", row(qk, "6.0")),
    ];
    let b_rows = [
        ("a/op_8_mul", row("32, 64", "9.0")),
        ("a/op_9_bmm", row(pp, "1.0")),
        ("a/op_10_bmm", row(pv, "2.0")),
        ("a/op_11__softmax_backward_data", row(pp, "3.0")),
        ("a/op_12_div", row(pp, "4.0")),
        ("a/op_13_bmm", row(pv, "5.0")),
        ("a/op_14_bmm", row(qk, "6.0")),
    ];
    let refs = |r: &[(&'static str, String)]| -> OpTable {
        let v: Vec<(&str, &str)> = r.iter().map(|(k, b)| (*k, b.as_str())).collect();
        log(&v)
    };
    (refs(&a_rows), refs(&b_rows))
}

#[test]
fn exact_pairs_made_by_counter_drift_are_left_to_the_fuzzy_pass() {
    let (a, b) = drifted_backward();
    let shape_diffs = |m: &MatchTable| m.rows.iter().filter(|r| r.has(ROW_SHAPE_TEXT_DIFF)).count();
    // The reference's rules: op_9 and op_10 pair with run 2's op_9 and
    // op_10 (other ops), op_5 and op_6 with the first of what is left:
    // four Shape diffs.
    let plain = match_tables(&a, &b, &opts_with(false, [0, 0]));
    assert_eq!(shape_diffs(&plain), 4);
    assert_eq!(plain.strategy_counts().exact, 2);
    for offset in [[0, 0], [1, 1]] {
        let m = match_tables(&a, &b, &opts_with(true, offset));
        assert_eq!(shape_diffs(&m), 0, "offset {offset:?}");
        assert_eq!(m.counts().diff, 0, "every op pairs with its own");
        assert_eq!(m.counts().matched, 6);
        assert_eq!(m.counts().only2, 1, "run 2's extra mul");
        let st = m.strategy_counts();
        assert_eq!((st.exact, st.fuzzy), (0, 6));
        let pairs: Vec<(String, String)> = summary(&m, &a, &b)
            .into_iter()
            .take(6)
            .map(|(k1, k2, _, _)| (k1, k2))
            .collect();
        assert_eq!(pairs[4], ("a/op_9_bmm".into(), "a/op_13_bmm".into()));
        assert_eq!(pairs[5], ("a/op_10_bmm".into(), "a/op_14_bmm".into()));
    }
    // A genuine Shape change (no same-Shape candidate on the other side)
    // stays an exact pair and a Shape diff.
    let f = log(&[
        ("m/op_0_mm", "Shape: torch.Size([4, 8])\nOutput hash: 1.0"),
        ("m/op_1_mm", "Shape: torch.Size([8, 8])\nOutput hash: 2.0"),
    ]);
    let g = log(&[
        ("m/op_0_mm", "Shape: torch.Size([4, 16])\nOutput hash: 1.0"),
        ("m/op_1_mm", "Shape: torch.Size([8, 8])\nOutput hash: 2.0"),
    ]);
    let m = match_tables(&f, &g, &MatchOptions::default());
    assert_eq!(m.strategy_counts().exact, 2);
    assert_eq!(shape_diffs(&m), 1);
}

/// Run 1's fc1 is frozen: fc2's backward computes only its weight
/// gradient (`fc2/op_1_mm`, [32, 64]). Run 2's fc1 trains: fc2's backward
/// first computes its input gradient (`fc2/op_1_mm`, [24, 64]), then the
/// weight gradient (`fc2/op_2_mm`). The exact pass paired the two
/// `op_1_mm`s ('a differing input' at two different matmuls); run 2's row
/// has no candidate of its Shape in run 1, but run 2 has more rows of
/// that key, so it is its extra op (new-user trial 6, F6).
#[test]
fn an_extra_op_of_one_run_releases_the_pair_its_counter_made() {
    let mm = |shape: &str, h: &str| {
        format!(
            "Shape: torch.Size([{shape}]), Dtype: torch.float32\nOutput hash: {h}\nPhase: backward"
        )
    };
    let fwd = "Shape: torch.Size([24, 32])\nOutput hash: 1.0";
    let a = log(&[
        ("fc2/op_0_addmm", fwd),
        ("fc2/op_1_mm", &mm("32, 64", "5.0")),
    ]);
    let b = log(&[
        ("fc2/op_0_addmm", fwd),
        ("fc2/op_1_mm", &mm("24, 64", "7.0")),
        ("fc2/op_2_mm", &mm("32, 64", "5.0")),
    ]);
    let m = match_tables(&a, &b, &MatchOptions::default());
    let s = summary(&m, &a, &b);
    assert_eq!(
        s[1],
        (
            "fc2/op_1_mm".into(),
            "fc2/op_2_mm".into(),
            "match",
            Some("fuzzy")
        ),
        "{s:?}"
    );
    assert_eq!((m.counts().diff, m.counts().only2), (0, 1));
    // Equal row counts: a genuine Shape change stays paired (the test
    // above), also when only one side has a candidate.
    let c = log(&[
        ("fc2/op_1_mm", &mm("32, 64", "5.0")),
        ("fc2/op_2_mm", &mm("24, 64", "7.0")),
    ]);
    let d = log(&[
        ("fc2/op_1_mm", &mm("24, 64", "5.0")),
        ("fc2/op_2_mm", &mm("24, 64", "7.0")),
    ]);
    let m = match_tables(&c, &d, &MatchOptions::default());
    assert_eq!(m.strategy_counts().exact, 2);
}

#[test]
fn a_frozen_parameter_leaves_each_update_paired_with_its_own_parameter() {
    // Optimizer updates (after the backward row) of a.weight [8, 8],
    // a.bias [8] and b.weight [8, 8]; run 2 froze a.weight, so it has one
    // `add_` fewer and every later counter moves by one. The exact pairs
    // (shapes differ) are released, and among the same-shaped candidates
    // the update that read the same tensors is the same parameter's: by
    // order alone, a.weight's update would pair with b.weight's (a diff),
    // and b.weight's would be left only in run 1.
    let add = |shape: &str, ins: &str, h: &str| {
        format!("Shape: torch.Size([{shape}])\nOutput hash: {h}\nInput hashes: {ins}")
    };
    let bwd = "Shape: torch.Size([8, 8])\nOutput hash: 9.0\nPhase: backward";
    let a = log(&[
        ("b/op_0_mm", bwd),
        ("<none>/op_0_add_", &add("8, 8", "1.0, 2.0", "1.5")),
        ("<none>/op_1_add_", &add("8", "5.0, 6.0", "5.5")),
        ("<none>/op_2_add_", &add("8, 8", "3.0, 4.0", "3.5")),
    ]);
    let b = log(&[
        ("b/op_0_mm", bwd),
        ("<none>/op_0_add_", &add("8", "5.0, 6.0", "5.5")),
        ("<none>/op_1_add_", &add("8, 8", "3.0, 4.0", "3.5")),
    ]);
    let m = match_tables(&a, &b, &MatchOptions::default());
    let s = summary(&m, &a, &b);
    assert!(
        s.contains(&(
            "<none>/op_2_add_".into(),
            "<none>/op_1_add_".into(),
            "match",
            Some("fuzzy")
        )),
        "{s:?}"
    );
    assert!(
        s.contains(&(
            "<none>/op_1_add_".into(),
            "<none>/op_0_add_".into(),
            "match",
            Some("fuzzy")
        )),
        "{s:?}"
    );
    assert_eq!(
        (m.counts().diff, m.counts().only1, m.counts().only2),
        (0, 1, 0)
    );
}

#[test]
fn a_frozen_parameter_among_same_shaped_ones_leaves_the_others_paired() {
    // Four same-shaped parameters' updates; run 2 froze the second, so its
    // updates of the third and fourth carry the counters of run 1's second
    // and third: same key, same Shape, other inputs. The update that read
    // the same tensors is the same parameter's.
    let bwd = "Shape: torch.Size([8, 8])\nOutput hash: 9.0\nPhase: backward";
    let add = |i: usize| {
        format!("Shape: torch.Size([8, 8])\nOutput hash: {i}.5\nInput hashes: {i}.0, 1{i}.0")
    };
    let mut a = vec![("b/op_0_mm".to_string(), bwd.to_string())];
    let mut b = a.clone();
    for i in 0..4 {
        a.push((format!("<none>/op_{i}_add_"), add(i)));
    }
    for (n, i) in [0, 2, 3].into_iter().enumerate() {
        b.push((format!("<none>/op_{n}_add_"), add(i)));
    }
    let (a, b) = (log_owned(&a), log_owned(&b));
    let m = match_tables(&a, &b, &MatchOptions::default());
    let s = summary(&m, &a, &b);
    let c = m.counts();
    assert_eq!((c.diff, c.only1, c.only2), (0, 1, 0), "{s:?}");
    assert!(
        s.contains(&("<none>/op_1_add_".into(), String::new(), "only1", None)),
        "{s:?}"
    );
    assert!(
        s.contains(&(
            "<none>/op_3_add_".into(),
            "<none>/op_2_add_".into(),
            "match",
            Some("fuzzy")
        )),
        "{s:?}"
    );
}

#[test]
fn one_root_op_more_does_not_pair_each_parameter_update_with_another() {
    // An optimizer's per-parameter loop over 20 same-shaped parameters;
    // run 2 has one root-scope op more (a logging metric) before it, so
    // each `mul_` has the key of run 1's previous parameter's update. The
    // group (20 pairs, above the 16 of other phases) is re-paired by value.
    let bwd = "Shape: torch.Size([8, 8])\nOutput hash: 9.0\nPhase: backward";
    let mul =
        |i: usize| format!("Shape: torch.Size([32])\nOutput hash: {i}.5\nInput hashes: {i}.0");
    let mut a = vec![("b/op_0_mm".to_string(), bwd.to_string())];
    let mut b = a.clone();
    b.push((
        "<none>/op_0_mul".into(),
        "Shape: torch.Size([4])\nOutput hash: 99.0".into(),
    ));
    for i in 0..20 {
        a.push((format!("<none>/op_{i}_mul_"), mul(i)));
        b.push((format!("<none>/op_{}_mul_", i + 1), mul(i)));
    }
    let (a, b) = (log_owned(&a), log_owned(&b));
    let m = match_tables(&a, &b, &MatchOptions::default());
    let c = m.counts();
    assert_eq!(
        (c.diff, c.only1, c.only2),
        (0, 0, 1),
        "{:?}",
        summary(&m, &a, &b)
    );
    assert_eq!(m.first_divergence().and_then(|i| m.rows[i].r2()), Some(1));
}

#[test]
fn the_layer_offset_shifts_the_detected_layer_only() {
    // Run 1: the last pipeline stage (global layers 2 and 3, numbered 0
    // and 1) with the model's heads; run 2: the whole model. `heads.0`
    // is no layer list (one item beside the repeated `blocks.N`): the
    // offset leaves it alone, so it pairs by its exact key.
    let mm = |h: &str| format!("Shape: torch.Size([4, 4])\nOutput hash: {h}");
    let a = log(&[
        ("blocks.0.mlp/op_0_mm", &mm("3.0")),
        ("blocks.1.mlp/op_0_mm", &mm("4.0")),
        ("heads.0.proj/op_0_mm", &mm("5.0")),
    ]);
    let b = log(&[
        ("blocks.0.mlp/op_0_mm", &mm("1.0")),
        ("blocks.1.mlp/op_0_mm", &mm("2.0")),
        ("blocks.2.mlp/op_0_mm", &mm("3.0")),
        ("blocks.3.mlp/op_0_mm", &mm("4.0")),
        ("heads.0.proj/op_0_mm", &mm("5.1")),
    ]);
    for tie_break in [true, false] {
        let m = match_tables(&a, &b, &opts_with(tie_break, [2, 0]));
        let s = summary(&m, &a, &b);
        assert_eq!(
            s[..3],
            [
                (
                    "blocks.0.mlp/op_0_mm".into(),
                    "blocks.2.mlp/op_0_mm".into(),
                    "match",
                    Some("exact")
                ),
                (
                    "blocks.1.mlp/op_0_mm".into(),
                    "blocks.3.mlp/op_0_mm".into(),
                    "match",
                    Some("exact")
                ),
                (
                    "heads.0.proj/op_0_mm".into(),
                    "heads.0.proj/op_0_mm".into(),
                    "diff",
                    Some("exact")
                ),
            ],
            "tie-break {tie_break}"
        );
        assert_eq!(m.counts().only2, 2, "run 2's blocks 0 and 1");
    }
}

/// An in-place op in one run and its functional form in the other (eager
/// `mul_` against `aot_eager`'s functionalized `mul`, or a refactor), with
/// the same Shape and Output hash: paired by the stats pass's second round
/// (a new user's trial: bitwise-identical runs exited 1 on them). A
/// different value, or a different op, stays one-sided.
#[test]
fn an_in_place_op_pairs_with_its_functional_form_by_value() {
    let shape = "Shape: torch.Size([4]), Dtype: torch.float32";
    let a = log(&[
        ("m/op_0_addmm", &format!("{shape}\nOutput hash: 1.0")),
        ("m/op_1_mul_", &format!("{shape}\nOutput hash: 2.0")),
        ("m/op_2_relu_", &format!("{shape}\nOutput hash: 3.0")),
    ]);
    let b = log(&[
        ("m/op_0_addmm", &format!("{shape}\nOutput hash: 1.0")),
        ("m/op_1_mul", &format!("{shape}\nOutput hash: 2.0")),
        ("m/op_2_relu", &format!("{shape}\nOutput hash: 3.5")),
    ]);
    let m = match_tables(&a, &b, &MatchOptions::default());
    let c = m.counts();
    assert_eq!((c.matched, c.only1, c.only2), (2, 1, 1), "{c:?}");
    assert_eq!(m.strategy_counts().stats, 1);
    let r = m.rows.iter().find(|r| r.row1 == 1).unwrap();
    assert_eq!(
        (r.row2, r.strategy, r.status),
        (1, Strategy::Stats, Status::Match)
    );
    // `add_` against `mul` of the same value: other ops, not paired.
    let b = log(&[
        ("m/op_0_addmm", &format!("{shape}\nOutput hash: 1.0")),
        ("m/op_1_add", &format!("{shape}\nOutput hash: 2.0")),
        ("m/op_2_relu", &format!("{shape}\nOutput hash: 3.5")),
    ]);
    let m = match_tables(&a, &b, &MatchOptions::default());
    assert_eq!((m.counts().only1, m.counts().only2), (2, 2));
    // `h.mul_(2)` against `h * -2` (a new user's trial): the Output hash,
    // an L1 norm, is blind to the sign, the Mean is not: not paired.
    let signed =
        |op: &str, mean: &str| log(&[(op, &format!("{shape}\nMean: {mean}\nOutput hash: 2.0"))]);
    let m = match_tables(
        &signed("m/op_1_mul_", "0.5"),
        &signed("m/op_1_mul", "-0.5"),
        &MatchOptions::default(),
    );
    assert_eq!((m.counts().only1, m.counts().only2), (1, 1));
    let m = match_tables(
        &signed("m/op_1_mul_", "0.5"),
        &signed("m/op_1_mul", "0.5"),
        &MatchOptions::default(),
    );
    assert_eq!(m.counts().matched, 1);
}

/// Under per-dtype defaults, a float32 row whose inputs derive from a
/// bfloat16 op (by `Input producers`, or by value where none is named) is
/// judged at bfloat16's default; a float32 row that reads nothing of it
/// keeps float32's (shared/cases/15). Trial 27: the residual add after an
/// autocast Linear gated at 1e-8 on the very tensor that agreed as the
/// Linear's output.
#[test]
fn per_dtype_defaults_carry_through_the_data_flow() {
    let block = |shape: &str, out: f64, ins: &str, prods: &str| {
        format!(
            "Shape: torch.Size([4]), Dtype: torch.{shape}\nOutput hash: {out:e}\nInput hashes: {ins}\nInput producers: {prods}"
        )
    };
    // Run 2 is run 1 with every value 3e-3 larger: bfloat16 noise.
    let run = |f: f64| {
        log_owned(&[
            (
                "lin/op_0_mm".into(),
                block("bfloat16", 100.0 * f, "5.0", ""),
            ),
            (
                "blk/op_0_add".into(),
                block(
                    "float32",
                    200.0 * f,
                    &format!("{:e}, 7.0", 100.0 * f),
                    "lin/op_0_mm; ",
                ),
            ),
            // Its input is the add's output, no producer named (a view
            // the capture leaves out between them).
            (
                "blk/op_1_mul".into(),
                block("float32", 300.0 * f, &format!("{:e}", 200.0 * f), ""),
            ),
            (
                "other/op_0_mul".into(),
                block("float32", 400.0 * f, "9.0", ""),
            ),
        ])
    };
    let (a, b) = (run(1.0), run(1.003));
    let mut opts = MatchOptions::default();
    policy::add_dtype_defaults(&mut opts.policy, None);
    let m = match_tables(&a, &b, &opts);
    let got: Vec<(&str, String)> = m
        .rows
        .iter()
        .map(|r| (r.status.as_str(), m.policy.describe(r.source)))
        .collect();
    assert_eq!(got[0].0, "match", "{got:?}");
    assert!(got[0].1.starts_with("bfloat16 default: "), "{got:?}");
    for g in &got[1..3] {
        assert_eq!(g.0, "match", "{got:?}");
        assert!(
            g.1.starts_with("bfloat16 default (its inputs derive from bfloat16 ops): rel <= 1e-2"),
            "{got:?}"
        );
    }
    assert_eq!(
        got[3],
        ("diff", m.policy.describe(policy::Source::Default)),
        "{got:?}"
    );
    // Without per-dtype defaults nothing is carried.
    let plain = match_tables(&a, &b, &MatchOptions::default());
    assert!(plain.rows.iter().all(|r| r.status.as_str() == "diff"));
}
