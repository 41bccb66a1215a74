//! Value re-pairing ([`crate::matcher::repair`]): ops a compiler reordered.

use super::*;

/// Backward `bmm`s of one attention module, all of Shape [8, 16, 16]:
/// `(key, Output hash)` per row.
fn backward_bmms(rows: &[(&str, &str)]) -> OpTable {
    let bodies: Vec<(String, String)> = rows
        .iter()
        .map(|(k, h)| {
            let body = format!(
                "Shape: torch.Size([8, 16, 16]), Dtype: torch.float32\nL2 norm: {h}\n\
                 Output hash: {h}\nPhase: backward"
            );
            (format!("blocks.1.attn/{k}"), body)
        })
        .collect();
    let v: Vec<(&str, &str)> = bodies
        .iter()
        .map(|(k, b)| (k.as_str(), b.as_str()))
        .collect();
    log(&v)
}

/// The (run-1 key, run-2 key, status, strategy) of every row of `m`,
/// without the module path.
fn short_summary(m: &MatchTable, a: &OpTable, b: &OpTable) -> Vec<(String, String, &'static str)> {
    let short = |k: String| k.rsplit('/').next().unwrap_or_default().to_string();
    summary(m, a, b)
        .into_iter()
        .map(|(k1, k2, s, st)| (short(k1), short(k2), s, st.unwrap_or("-")))
        .map(|(k1, k2, s, st)| (format!("{k1}:{st}"), k2, s))
        .collect()
}

#[test]
fn ops_a_compiler_reordered_are_re_paired_by_value() {
    // Eager against inductor: the four backward bmm's of attention, the
    // compiled log's counters restarted, so the exact pass pairs op_5 with
    // run 2's op_5 (run 1's op_11) and the fuzzy pass the rest in order.
    let a = backward_bmms(&[
        ("op_5_bmm", "1.0"),
        ("op_6_bmm", "2.0"),
        ("op_10_bmm", "3.0"),
        ("op_11_bmm", "4.0"),
    ]);
    let b = backward_bmms(&[
        ("op_2_bmm", "1.0"),
        ("op_3_bmm", "2.0"),
        ("op_4_bmm", "3.0"),
        ("op_5_bmm", "4.0"),
    ]);
    // The reference's rules: every pair differs.
    let plain = match_tables(&a, &b, &opts_with(false, [0, 0]));
    assert_eq!(plain.counts().diff, 4);
    assert_eq!(plain.strategy_counts().exact, 1);
    assert!(plain.repaired.is_empty());
    for offset in [[0, 0], [1, 1]] {
        let m = match_tables(&a, &b, &opts_with(true, offset));
        assert_eq!(
            short_summary(&m, &a, &b),
            vec![
                ("op_5_bmm:fuzzy".into(), "op_2_bmm".into(), "match"),
                ("op_6_bmm:fuzzy".into(), "op_3_bmm".into(), "match"),
                ("op_10_bmm:fuzzy".into(), "op_4_bmm".into(), "match"),
                ("op_11_bmm:fuzzy".into(), "op_5_bmm".into(), "match"),
            ],
            "offset {offset:?}"
        );
        let st = m.strategy_counts();
        assert_eq!((st.exact, st.fuzzy), (0, 4), "the exact pair moved");
        assert_eq!(m.repaired, vec![0, 1, 2, 3]);
        let notes = notes::row_notes(&a, &b, &m, 0, ("a", "b"));
        assert!(
            notes.contains(&"re-paired by value".to_string()),
            "{notes:?}"
        );
    }
    // Without a reordering nothing moves and no row says so.
    let m = match_tables(&a, &a, &MatchOptions::default());
    assert_eq!(m.counts().matched, 4);
    assert!(m.repaired.is_empty());
    assert!(!notes::row_notes(&a, &a, &m, 0, ("a", "b")).contains(&"re-paired by value".into()));
}

#[test]
fn re_pairing_never_hides_a_genuine_difference() {
    let a = backward_bmms(&[("op_5_bmm", "1.0"), ("op_6_bmm", "2.0")]);
    // Swapped, and op_6 truly changed: the best assignment pairs op_5 with
    // its own and leaves op_6 a diff.
    let b = backward_bmms(&[("op_2_bmm", "2.5"), ("op_3_bmm", "1.0")]);
    let m = match_tables(&a, &b, &MatchOptions::default());
    assert_eq!(
        short_summary(&m, &a, &b),
        vec![
            ("op_5_bmm:fuzzy".into(), "op_3_bmm".into(), "match"),
            ("op_6_bmm:fuzzy".into(), "op_2_bmm".into(), "diff"),
        ]
    );
    // One changed, not swapped: no assignment agrees more, the exact pairs stay.
    let b = backward_bmms(&[("op_5_bmm", "1.0"), ("op_6_bmm", "2.5")]);
    let m = match_tables(&a, &b, &MatchOptions::default());
    assert_eq!(
        short_summary(&m, &a, &b),
        vec![
            ("op_5_bmm:exact".into(), "op_5_bmm".into(), "match"),
            ("op_6_bmm:exact".into(), "op_6_bmm".into(), "diff"),
        ]
    );
    assert!(m.repaired.is_empty());
    // Both changed: nothing agrees, the pairs stay in file order.
    let b = backward_bmms(&[("op_2_bmm", "2.5"), ("op_3_bmm", "1.5")]);
    let m = match_tables(&a, &b, &MatchOptions::default());
    assert_eq!(
        short_summary(&m, &a, &b),
        vec![
            ("op_5_bmm:fuzzy".into(), "op_2_bmm".into(), "diff"),
            ("op_6_bmm:fuzzy".into(), "op_3_bmm".into(), "diff"),
        ]
    );
    assert!(m.repaired.is_empty());
}

#[test]
fn override_pairs_other_shapes_and_large_groups_are_not_re_paired() {
    let a = backward_bmms(&[
        ("op_5_bmm", "1.0"),
        ("op_6_bmm", "2.0"),
        ("op_7_bmm", "3.0"),
    ]);
    let b = backward_bmms(&[
        ("op_2_bmm", "2.0"),
        ("op_3_bmm", "1.0"),
        ("op_4_bmm", "3.0"),
    ]);
    // An override pair never moves: op_5 stays with op_2 (a diff), and
    // op_6 with op_3 (the only other pair of the group, a diff too).
    let opts = MatchOptions {
        overrides: Overrides::parse(
            "blocks.1.attn/op_5_bmm, blocks.1.attn/op_2_bmm\n",
            std::path::Path::new("o.txt"),
        )
        .unwrap(),
        ..MatchOptions::default()
    };
    let m = match_tables(&a, &b, &opts);
    assert_eq!(
        short_summary(&m, &a, &b),
        vec![
            ("op_5_bmm:override".into(), "op_2_bmm".into(), "diff"),
            ("op_6_bmm:fuzzy".into(), "op_3_bmm".into(), "diff"),
            ("op_7_bmm:fuzzy".into(), "op_4_bmm".into(), "match"),
        ]
    );
    // Rows of another Shape are another group.
    let other = log(&[
        (
            "blocks.1.attn/op_5_bmm",
            "Shape: torch.Size([8, 16, 32])\nOutput hash: 1.0\nPhase: backward",
        ),
        (
            "blocks.1.attn/op_6_bmm",
            "Shape: torch.Size([8, 16, 16])\nOutput hash: 2.0\nPhase: backward",
        ),
    ]);
    let swapped = log(&[
        (
            "blocks.1.attn/op_5_bmm",
            "Shape: torch.Size([8, 16, 32])\nOutput hash: 2.0\nPhase: backward",
        ),
        (
            "blocks.1.attn/op_6_bmm",
            "Shape: torch.Size([8, 16, 16])\nOutput hash: 1.0\nPhase: backward",
        ),
    ]);
    let m = match_tables(&other, &swapped, &MatchOptions::default());
    assert_eq!(m.counts().diff, 2);
    assert!(m.repaired.is_empty());
    // A group of more than MAX_GROUP pairs is left as the passes paired it.
    let n = repair::MAX_GROUP + 1;
    let keys1: Vec<String> = (0..n).map(|i| format!("op_{i}_bmm")).collect();
    let keys2: Vec<String> = (0..n).map(|i| format!("op_{}_bmm", i + 100)).collect();
    let hashes: Vec<String> = (0..n).map(|i| format!("{}.0", i + 1)).collect();
    let rows1: Vec<(&str, &str)> = keys1
        .iter()
        .zip(&hashes)
        .map(|(k, h)| (k.as_str(), h.as_str()))
        .collect();
    let rows2: Vec<(&str, &str)> = keys2
        .iter()
        .zip(hashes.iter().rev())
        .map(|(k, h)| (k.as_str(), h.as_str()))
        .collect();
    let big = match_tables(
        &backward_bmms(&rows1),
        &backward_bmms(&rows2),
        &MatchOptions::default(),
    );
    assert_eq!(big.counts().diff, n as u64 - 1, "the middle pair agrees");
    assert!(big.repaired.is_empty());
    // One pair fewer is re-paired.
    let (r1, r2) = (&rows1[1..], &rows2[..n - 1]);
    let small = match_tables(
        &backward_bmms(r1),
        &backward_bmms(r2),
        &MatchOptions::default(),
    );
    assert_eq!(small.counts().diff, 0);
}

#[test]
fn a_small_group_beside_a_large_one_is_re_paired_alone() {
    // Two classes concerned in one table: MAX_GROUP + 1 `bmm`s in reversed
    // order (too large, left alone), then three `mm`s of which two are
    // swapped (re-paired). Each class is counted on its own.
    let n = repair::MAX_GROUP + 1;
    let mut rows1: Vec<(String, String)> = (0..n)
        .map(|i| (format!("op_{i}_bmm"), format!("{}.0", i + 1)))
        .collect();
    let mut rows2: Vec<(String, String)> = (0..n)
        .map(|i| (format!("op_{}_bmm", i + 100), format!("{}.0", n - i)))
        .collect();
    for (j, (h1, h2)) in [("1.5", "2.5"), ("2.5", "1.5"), ("3.5", "3.5")]
        .into_iter()
        .enumerate()
    {
        rows1.push((format!("op_{}_mm", 200 + j), h1.to_string()));
        rows2.push((format!("op_{}_mm", 300 + j), h2.to_string()));
    }
    let as_refs = |rows: &[(String, String)]| {
        backward_bmms(
            &rows
                .iter()
                .map(|(k, h)| (k.as_str(), h.as_str()))
                .collect::<Vec<_>>(),
        )
    };
    let (a, b) = (as_refs(&rows1), as_refs(&rows2));
    let m = match_tables(&a, &b, &MatchOptions::default());
    assert_eq!(
        m.counts().diff,
        n as u64 - 1,
        "only the large group differs"
    );
    assert_eq!(m.repaired, vec![n as u32, n as u32 + 1]);
    let s = short_summary(&m, &a, &b);
    assert_eq!(
        s[n],
        ("op_200_mm:fuzzy".into(), "op_301_mm".into(), "match")
    );
    assert_eq!(
        s[n + 1],
        ("op_201_mm:fuzzy".into(), "op_300_mm".into(), "match")
    );
}

/// An MoE layer whose router sends no token to expert 2 in run 2: the
/// loop skips it, and `moe`'s later counters shift by one. Every
/// `moe/op_N_index` reads the same input (`x`), so neither value, Shape
/// nor producer tells them apart; the experts that read them do
/// (`moe.experts.N.w`, a module whose counters did not drift). Expert 3's
/// `index` is `op_2` in run 1 and `op_1` in run 2 (new-user trial 13 F3:
/// the exact pass paired expert 2's with expert 3's).
fn moe_runs() -> (OpTable, OpTable) {
    let row = |key: &str, out: &str, input: &str, prod: &str| {
        (
            key.to_string(),
            format!(
                "Shape: torch.Size([2, 8]), Dtype: torch.float32\nOutput hash: {out}\nInput hashes: {input}\nInput producers: {prod}"
            ),
        )
    };
    let x = row("x/op_0_mm", "10.0", "1.0", "");
    let a = log_owned(&[
        x.clone(),
        row("moe/op_0_index", "1.0", "10.0", "x/op_0_mm"),
        row("moe.experts.1.w/op_0_mm", "2.0", "1.0", "moe/op_0_index"),
        row("moe/op_1_index", "3.0", "10.0", "x/op_0_mm"),
        row("moe.experts.2.w/op_0_mm", "4.0", "3.0", "moe/op_1_index"),
        row("moe/op_2_index", "5.0", "10.0", "x/op_0_mm"),
        row("moe.experts.3.w/op_0_mm", "6.0", "5.0", "moe/op_2_index"),
    ]);
    let b = log_owned(&[
        x,
        row("moe/op_0_index", "1.0", "10.0", "x/op_0_mm"),
        row("moe.experts.1.w/op_0_mm", "2.0", "1.0", "moe/op_0_index"),
        // Expert 3 got the token expert 2 had: other values.
        row("moe/op_1_index", "5.5", "10.0", "x/op_0_mm"),
        row("moe.experts.3.w/op_0_mm", "6.5", "5.5", "moe/op_1_index"),
    ]);
    (a, b)
}

#[test]
fn ops_of_a_module_whose_counters_drifted_pair_by_the_ops_that_read_them() {
    let (a, b) = moe_runs();
    let m = match_tables(&a, &b, &MatchOptions::default());
    let s = summary(&m, &a, &b);
    assert_eq!(
        s,
        vec![
            (
                "x/op_0_mm".into(),
                "x/op_0_mm".into(),
                "match",
                Some("exact")
            ),
            (
                "moe/op_0_index".into(),
                "moe/op_0_index".into(),
                "match",
                Some("exact")
            ),
            (
                "moe.experts.1.w/op_0_mm".into(),
                "moe.experts.1.w/op_0_mm".into(),
                "match",
                Some("exact")
            ),
            ("moe/op_1_index".into(), "".into(), "only1", None),
            ("moe.experts.2.w/op_0_mm".into(), "".into(), "only1", None),
            (
                "moe/op_2_index".into(),
                "moe/op_1_index".into(),
                "diff",
                Some("fuzzy")
            ),
            (
                "moe.experts.3.w/op_0_mm".into(),
                "moe.experts.3.w/op_0_mm".into(),
                "diff",
                Some("exact")
            ),
        ]
    );
    assert_eq!(m.relinked, vec![5]);
    assert!(notes::row_notes(&a, &b, &m, 5, ("a", "b"))
        .contains(&"re-paired by the ops that read it".to_string()));
    // The counts of pairs per pass follow the new pairs.
    assert_eq!(
        (m.strategy_counts().exact, m.strategy_counts().fuzzy),
        (4, 1)
    );
    // The reference's rule (no Shape tie-break): the counters pair them.
    let plain = match_tables(
        &a,
        &b,
        &MatchOptions {
            shape_tie_break: false,
            ..Default::default()
        },
    );
    assert!(plain.relinked.is_empty());
    assert_eq!(summary(&plain, &a, &b)[3].1, "moe/op_1_index");
}

/// Run 2 edits its input in place (`x = x.clone(); x[0, 0] += 0.5`): one
/// `add_` of its own, whose input came through `clone` (not captured, so
/// no producer), shifts `<none>`'s later counters, and the model reads the
/// edit instead of the `randn`. The `randn`, equal in both runs, is still
/// a pair: that the partner of its reader reads an op of one run whose
/// lineage is unknown is no evidence against it (new-user trial 17 H1:
/// the `randn` was decided one-sided and named as the cause).
#[test]
fn an_op_of_one_run_between_a_pair_and_its_reader_does_not_unpair_it() {
    let row = |key: &str, shape: &str, out: &str, input: &str, prod: &str| {
        let mut body =
            format!("Shape: torch.Size([{shape}]), Dtype: torch.float32\nOutput hash: {out}");
        if !input.is_empty() {
            body += &format!("\nInput hashes: {input}\nInput producers: {prod}");
        }
        (key.to_string(), body)
    };
    let a = log_owned(&[
        row("<none>/op_0_randn", "8, 8", "49.1", "", ""),
        row("<none>/op_1_randn", "8, 1", "5.2", "", ""),
        row(
            "0/op_0_addmm",
            "8, 16",
            "61.2",
            "2.3, 49.1",
            ";<none>/op_0_randn",
        ),
        row(
            "<none>/op_2_mse_loss",
            "",
            "1.5",
            "61.2, 5.2",
            "0/op_0_addmm;<none>/op_1_randn",
        ),
    ]);
    let b = log_owned(&[
        row("<none>/op_0_randn", "8, 8", "49.1", "", ""),
        row("<none>/op_1_randn", "8, 1", "5.2", "", ""),
        row("<none>/op_2_add_", "", "1.02", "1.52", ""),
        row(
            "0/op_0_addmm",
            "8, 16",
            "60.7",
            "2.3, 48.6",
            ";<none>/op_2_add_",
        ),
        row(
            "<none>/op_3_mse_loss",
            "",
            "1.4",
            "60.7, 5.2",
            "0/op_0_addmm;<none>/op_1_randn",
        ),
    ]);
    let m = match_tables(&a, &b, &MatchOptions::default());
    let s = summary(&m, &a, &b);
    let row_of = |k: &str| s.iter().find(|r| r.0 == k || r.1 == k).cloned().unwrap();
    assert_eq!(
        row_of("<none>/op_0_randn"),
        (
            "<none>/op_0_randn".into(),
            "<none>/op_0_randn".into(),
            "match",
            Some("exact")
        ),
        "{s:?}"
    );
    assert_eq!(row_of("<none>/op_2_add_").2, "only2", "{s:?}");
    assert_eq!(s.iter().filter(|r| r.2 == "only1").count(), 0, "{s:?}");
}

/// Run 2 adds one op to an MoE router (`logits + bias` before the
/// softmax's `div`): `moe`'s later counters shift by one, so every router
/// op of run 1 meets run 2's op of the same name one counter later. The
/// added op reads what run 1's `div` reads, and run 2's `div` reads the
/// added op: once the added op is known to be of run 2 only, the `div`s
/// are the same lineage, and so the ops after them (new-user trial 26
/// F1: the whole router chain was left one-sided on both sides, and the
/// cause named an expert's `index`, not the added op).
#[test]
fn an_op_one_run_inserts_does_not_unpair_the_ops_after_it() {
    let row = |key: &str, out: &str, input: &str, prod: &str| {
        (
            key.to_string(),
            format!(
                "Shape: torch.Size([4, 4]), Dtype: torch.float32\nOutput hash: {out}\nInput hashes: {input}\nInput producers: {prod}"
            ),
        )
    };
    let a = log_owned(&[
        row("moe.router/op_0_mm", "10.0", "1.0", ""),
        row("moe/op_0_div", "5.0", "10.0", "moe.router/op_0_mm"),
        row("moe/op_1__softmax", "4.0", "5.0", "moe/op_0_div"),
        row("moe/op_2_topk", "3.0", "4.0", "moe/op_1__softmax"),
        row("moe.experts.0.w/op_0_mm", "2.0", "3.0", "moe/op_2_topk"),
    ]);
    let b = log_owned(&[
        row("moe.router/op_0_mm", "10.0", "1.0", ""),
        row("moe/op_0_add", "10.5", "10.0", "moe.router/op_0_mm"),
        row("moe/op_1_div", "5.25", "10.5", "moe/op_0_add"),
        row("moe/op_2__softmax", "4.5", "5.25", "moe/op_1_div"),
        row("moe/op_3_topk", "3.5", "4.5", "moe/op_2__softmax"),
        row("moe.experts.0.w/op_0_mm", "2.5", "3.5", "moe/op_3_topk"),
    ]);
    let m = match_tables(&a, &b, &MatchOptions::default());
    let s = summary(&m, &a, &b);
    let pairs: Vec<(&str, &str)> = s.iter().map(|r| (r.0.as_str(), r.1.as_str())).collect();
    assert_eq!(
        pairs,
        vec![
            ("moe.router/op_0_mm", "moe.router/op_0_mm"),
            ("moe/op_0_div", "moe/op_1_div"),
            ("moe/op_1__softmax", "moe/op_2__softmax"),
            ("moe/op_2_topk", "moe/op_3_topk"),
            ("moe.experts.0.w/op_0_mm", "moe.experts.0.w/op_0_mm"),
            ("", "moe/op_0_add"),
        ],
        "{s:?}"
    );
    // The added op is the cause.
    let c = &m.causes;
    let first = c
        .first_cause
        .and_then(|i| c.causes.iter().find(|e| e.index == i));
    assert_eq!(first.map(|e| e.one_sided.clone()), Some(vec![5]), "{c:?}");
}

/// Lineage re-pairing decides the same pairs whichever run is run 1
/// (found by `tests/properties.rs::swapping_runs_mirrors_pairs`). Run 2's
/// `m/op_1_relu` is read (by value, three times) by an op whose partner
/// reads another op of known lineage: it scores run 1's namesake −1, while
/// run 1's row, read by none, scores run 2's +2 (the same producer, the
/// same Input hashes). The run listed first decided first: one order
/// paired them, the other left both one-sided. The two rows' scores of
/// each other now add up (+1: a pair) in either order.
#[test]
fn lineage_pairs_the_same_whichever_run_is_run_1() {
    let row = |key: &str, body: &str| (key.to_string(), body.to_string());
    let a = log_owned(&[
        row("x/op_0_mm", "Output hash: 1.0"),
        row(
            "m/op_1_relu",
            "Input hashes: 1.0\nInput producers: x/op_0_mm\nPhase: backward",
        ),
        row(
            "n/op_0_exp",
            "Input hashes: 1.0\nInput producers: x/op_0_mm\nOutput hash: 7.0",
        ),
        row(
            "y/op_0_sum",
            "Input hashes: 7.0, 7.0, 7.0\nInput producers: ;;\nOutput hash: 3.0",
        ),
        row("m/op_2_abs", "Output hash: 4.0"),
    ]);
    let b = log_owned(&[
        row("x/op_0_mm", "Output hash: 1.0"),
        row(
            "m/op_1_relu",
            "Input hashes: 1.0\nInput producers: x/op_0_mm\nOutput hash: 7.0\nPhase: backward",
        ),
        row(
            "y/op_0_sum",
            "Input hashes: 7.0, 7.0, 7.0\nInput producers: ;;\nOutput hash: 3.0",
        ),
    ]);
    let pairs = |m: &MatchTable, a: &OpTable, b: &OpTable| -> Vec<(String, String)> {
        let mut v: Vec<(String, String)> =
            summary(m, a, b).into_iter().map(|r| (r.0, r.1)).collect();
        v.sort();
        v
    };
    let ab = match_tables(&a, &b, &MatchOptions::default());
    let ba = match_tables(&b, &a, &MatchOptions::default());
    let mirrored: Vec<(String, String)> = {
        let mut v: Vec<(String, String)> = pairs(&ba, &b, &a)
            .into_iter()
            .map(|(x, y)| (y, x))
            .collect();
        v.sort();
        v
    };
    assert_eq!(pairs(&ab, &a, &b), mirrored);
    assert!(
        pairs(&ab, &a, &b).contains(&("m/op_1_relu".into(), "m/op_1_relu".into())),
        "{:?}",
        pairs(&ab, &a, &b)
    );
}

/// The one row of its fuzzy key and phase in each run (a clipping's
/// `_foreach_norm`) is paired, whatever its lineage scores: under inductor
/// with gradient accumulation the gradients' last `add_` is `<none>`'s in
/// the compiled run and a module's in eager, so each norm's producers are
/// of one run only, and at -1 an input both norms (and the whole AdamW
/// step after them) were of their run only (trial 72 F1: eager against
/// compiled "diverged" at every step in an optimizer that was not
/// compiled).
#[test]
fn the_one_row_of_its_key_in_each_drifted_run_is_paired() {
    let a = log(&[
        ("p/op_0_add_", "Output hash: 1.0\nPhase: backward"),
        ("<none>/op_0_loss", "Output hash: 5.0"),
        ("<none>/op_1_sum", "Output hash: 9.0"),
        (
            "<none>/op_2__foreach_norm",
            "Output hash: 2.0\nInput hashes: 1.0\nInput producers: p/op_0_add_\nPhase: optimizer",
        ),
    ]);
    let b = log(&[
        ("<none>/op_0_add_", "Output hash: 1.0000001\nPhase: backward"),
        (
            "<none>/op_1__foreach_norm",
            "Output hash: 2.0\nInput hashes: 1.0000001\nInput producers: <none>/op_0_add_\nPhase: optimizer",
        ),
    ]);
    let m = match_tables(&a, &b, &MatchOptions::default());
    let s = summary(&m, &a, &b);
    assert!(
        s.iter()
            .any(|r| r.0 == "<none>/op_2__foreach_norm" && r.1 == "<none>/op_1__foreach_norm"),
        "{s:?}"
    );
}
