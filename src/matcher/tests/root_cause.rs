//! Root cause ([`crate::matcher::cause`]): origins, entries, inherited rows,
//! print rounding, digests, one-sided ops and the largest difference.

use super::*;

#[test]
fn root_causes_follow_producers() {
    // a: origin (inputs agree, output differs); b consumes a (inherited);
    // c has a differing input with no captured producer after a diverged
    // (inherited through an uncaptured op); g is an unsynced collective and
    // h consumes it (entry via collective); v links to a through its value.
    let a = log(&[
        ("a/op_0_mm", "Output hash: 1.0\nInput hashes: 5.0"),
        (
            "b/op_0_mul",
            "Output hash: 2.0\nInput hashes: 1.0\nInput producers: a/op_0_mm",
        ),
        ("c/op_0_add", "Output hash: 3.0\nInput hashes: 7.0"),
        (
            "g/op_0__allgather_base_",
            "Output hash: nan\nInput hashes: 1.0",
        ),
        (
            "h/op_0_mm",
            "Output hash: 4.0\nInput hashes: 9.0\nInput producers: g/op_0__allgather_base_",
        ),
        ("v/op_0_mm", "Output hash: 6.0\nInput hashes: 1.0"),
    ]);
    let b = log(&[
        ("a/op_0_mm", "Output hash: 1.5\nInput hashes: 5.0"),
        (
            "b/op_0_mul",
            "Output hash: 2.5\nInput hashes: 1.5\nInput producers: a/op_0_mm",
        ),
        ("c/op_0_add", "Output hash: 3.5\nInput hashes: 7.5"),
        (
            "g/op_0__allgather_base_",
            "Output hash: 8.0\nInput hashes: 1.0",
        ),
        (
            "h/op_0_mm",
            "Output hash: 4.5\nInput hashes: 9.5\nInput producers: g/op_0__allgather_base_",
        ),
        ("v/op_0_mm", "Output hash: 6.5\nInput hashes: 1.5"),
    ]);
    let m = match_tables(&a, &b, &MatchOptions::default());
    use cause::CauseKind::*;
    assert_eq!(
        m.cause_kinds,
        vec![
            Some(Origin),
            Some(Inherited),
            Some(Untraced),
            Some(Unsynced),
            Some(ViaCollective),
            Some(Inherited)
        ]
    );
    let c = &m.causes;
    assert_eq!(c.first_cause, Some(0));
    assert_eq!(
        c.cause_count, 1,
        "the via-collective cause is not the rank's own"
    );
    assert_eq!(c.causes[0].inherited, 3);
    assert_eq!(c.causes[0].untraced, 1);
    assert_eq!(c.causes[0].chain, vec![1, 2, 5]);
    assert_eq!(c.causes[1].kind, ViaCollective);
    assert_eq!(c.causes[1].inputs, vec![0]);
    assert_eq!(c.causes[1].collective, Some(3));
    assert!(!c.via_collective_only);
    assert_eq!(c.first_nonfinite1, Some(3));
    assert_eq!(c.first_nonfinite2, None);
    assert_eq!(c.first_nonfinite_one_sided, Some(3));
    assert_eq!(
        c.largest_diff.map(|d| (d.index, d.field)),
        Some((0, "Output hash")),
        "1.0 vs 1.5 is the largest"
    );
    // the unsynced row is a diff but does not gate
    assert!(!m.rows[3].gates());
    assert_eq!(m.counts().unsynced, 1);
    assert_eq!(m.counts().gating, 5);
}

/// Two one-rank logs from `(key, run-1 body, run-2 body)` blocks.
fn pair(blocks: &[(&str, &str, &str)]) -> (OpTable, OpTable) {
    let a: Vec<(&str, &str)> = blocks.iter().map(|(k, x, _)| (*k, *x)).collect();
    let b: Vec<(&str, &str)> = blocks.iter().map(|(k, _, y)| (*k, *y)).collect();
    (log(&a), log(&b))
}

#[test]
fn a_difference_print_rounding_explains_is_no_origin() {
    use cause::CauseKind::*;
    let (a, b) = pair(&[
        // The change: inputs agree, output 1e-3 off.
        (
            "n/op_0_add_",
            "Output hash: 1.178815e+02\nInput hashes: 1.178802e+02",
            "Output hash: 1.180105e+02\nInput hashes: 1.178802e+02",
        ),
        // Inputs print alike, output one printed unit off: below print precision.
        (
            "w3/op_0_mm",
            "Output hash: 8.524768e+03\nInput hashes: 2.662878e+04, 1.000000e+02",
            "Output hash: 8.524767e+03\nInput hashes: 2.662878e+04, 1.000000e+02",
        ),
        // Inputs print alike, output 3e-6 off on a product: more than 4 x
        // the inputs' 4.8e-7 of print uncertainty, an origin.
        (
            "w2/op_0_mm",
            "Output hash: 5.000000e+03\nInput hashes: 2.662878e+04, 5.000000e+02",
            "Output hash: 5.000015e+03\nInput hashes: 2.662878e+04, 5.000000e+02",
        ),
        // An add whose terms cancel: 3 units of 1e-3 absolute on 1.0 is
        // what the terms' print uncertainty (1e-3 each) allows.
        (
            "r/op_0_add",
            "Output hash: 1.000000e+00\nInput hashes: 5.000000e+03, 5.001000e+03",
            "Output hash: 1.003000e+00\nInput hashes: 5.000000e+03, 5.001000e+03",
        ),
    ]);
    let m = match_tables(&a, &b, &MatchOptions::default());
    assert_eq!(
        m.cause_kinds,
        vec![
            Some(Origin),
            Some(BelowPrint),
            Some(Origin),
            Some(BelowPrint)
        ]
    );
    let c = &m.causes;
    assert_eq!(c.cause_count, 2);
    // Each attributed to the latest diverging row before it.
    assert_eq!((c.causes[0].below_print, c.causes[1].below_print), (1, 1));
    assert_eq!(c.kinds.inherited_below_print, 2);
    assert!(!c.causes[0].print_limited);
}

#[test]
fn a_first_difference_within_print_precision_stays_an_origin() {
    // Nothing diverges before it: the log cannot say it is inherited.
    let (a, b) = pair(&[(
        "w3/op_0_mm",
        "Output hash: 8.524768e+03\nInput hashes: 2.662878e+04",
        "Output hash: 8.524767e+03\nInput hashes: 2.662878e+04",
    )]);
    let m = match_tables(&a, &b, &MatchOptions::default());
    assert_eq!(m.cause_kinds, vec![Some(cause::CauseKind::Origin)]);
    assert!(m.causes.causes[0].print_limited);
    assert_eq!(m.causes.first_cause, Some(0));
}

#[test]
fn entries_reading_one_changed_input_are_one_cause() {
    use cause::CauseKind::*;
    // A changed parameter (1.5 vs 1.6) read in forward and again in
    // backward; a second row reads a different changed input after the
    // divergence started (attributed to it: no producer links say otherwise).
    let (a, b) = pair(&[
        (
            "w/op_0_mm",
            "Output hash: 2.0\nInput hashes: 9.0, 1.5",
            "Output hash: 2.1\nInput hashes: 9.0, 1.6",
        ),
        (
            "w/op_1_mm",
            "Output hash: 3.0\nInput hashes: 4.0, 1.5\nPhase: backward",
            "Output hash: 3.3\nInput hashes: 4.0, 1.6\nPhase: backward",
        ),
        (
            "x/op_0_mul",
            "Output hash: 5.0\nInput hashes: 7.0",
            "Output hash: 5.5\nInput hashes: 7.7",
        ),
    ]);
    let m = match_tables(&a, &b, &MatchOptions::default());
    assert_eq!(
        m.cause_kinds,
        vec![Some(Entry), Some(Entry), Some(Untraced)]
    );
    let c = &m.causes;
    assert_eq!(c.cause_count, 1);
    assert_eq!(c.causes.len(), 1);
    assert_eq!(c.causes[0].reads, 1);
    assert_eq!(c.causes[0].untraced, 1);
    assert_eq!(c.kinds.entry, 2);
}

#[test]
fn a_rank_whose_change_arrives_through_a_collective() {
    use cause::CauseKind::*;
    // The collective's captured output differs (not gating); the optimizer
    // op reading its result has no captured producer.
    let (a, b) = pair(&[
        (
            "m/op_0__reduce_scatter_base_",
            "Output hash: nan\nInput hashes: 1.0",
            "Output hash: 3.0\nInput hashes: 1.0",
        ),
        (
            "<none>/op_1_lerp_",
            "Output hash: 2.0\nInput hashes: 5.0, 6.0",
            "Output hash: 2.2\nInput hashes: 5.0, 6.6",
        ),
        (
            "<none>/op_2_addcmul_",
            "Output hash: 4.0\nInput hashes: 5.0, 7.0",
            "Output hash: 4.4\nInput hashes: 5.0, 7.7",
        ),
    ]);
    let m = match_tables(&a, &b, &MatchOptions::default());
    assert_eq!(
        m.cause_kinds,
        vec![Some(Unsynced), Some(ViaCollective), Some(Untraced)]
    );
    let c = &m.causes;
    assert!(c.via_collective_only);
    assert_eq!(c.cause_count, 0);
    assert_eq!(c.first_cause, None);
    assert_eq!(c.causes[0].collective, Some(0));
    assert_eq!(m.first_divergence(), Some(1), "the first row that gates");
    assert_eq!(m.first_nongating(), Some(0));
}

#[test]
fn an_optimizer_entry_after_an_agreeing_all_reduce_arrives_through_it() {
    use cause::CauseKind::*;
    // DDP: the all-reduce is hashed as this rank's own bucket (it agrees),
    // and the reduced gradients reach `.grad` through excluded copies, so
    // the optimizer's differing input has no producer; the change arrived
    // through the collective, from another rank.
    let rows = |collective: Option<&'static str>| {
        let mut v = Vec::new();
        if collective == Some("forward") {
            // A loss metric all-reduced in forward: no gradient's way.
            v.push((
                "<none>/op_0_allreduce_",
                "Output hash: 3.0\nInput hashes: 3.0",
                "Output hash: 3.0\nInput hashes: 3.0",
            ));
        }
        v.push((
            "m/op_0_mm",
            "Output hash: 1.0\nInput hashes: 5.0\nPhase: backward",
            "Output hash: 1.0\nInput hashes: 5.0\nPhase: backward",
        ));
        if collective == Some("backward") {
            v.push((
                "m/op_1_allreduce_",
                "Output hash: 3.0\nInput hashes: 3.0\nPhase: backward",
                "Output hash: 3.0\nInput hashes: 3.0\nPhase: backward",
            ));
        }
        v.push((
            "<none>/op_2_lerp_",
            "Output hash: 2.0\nInput hashes: 5.0, 6.0",
            "Output hash: 2.2\nInput hashes: 5.0, 6.6",
        ));
        v
    };
    let (a, b) = pair(&rows(Some("backward")));
    let m = match_tables(&a, &b, &MatchOptions::default());
    assert_eq!(m.cause_kinds, vec![None, None, Some(ViaCollective)]);
    assert!(m.causes.via_collective_only);
    assert_eq!(m.causes.cause_count, 0);
    // Without the collective, or with one outside backward, the
    // optimizer's input changed on this rank.
    let (a, b) = pair(&rows(None));
    let m = match_tables(&a, &b, &MatchOptions::default());
    assert_eq!(m.cause_kinds, vec![None, Some(Entry)]);
    assert!(!m.causes.via_collective_only);
    let (a, b) = pair(&rows(Some("forward")));
    let m = match_tables(&a, &b, &MatchOptions::default());
    assert_eq!(m.cause_kinds, vec![None, None, Some(Entry)]);
}

#[test]
fn the_largest_difference_counts_only_gating_fields() {
    // Mean differs most (rel 0.23) but stats do not gate by default.
    let (a, b) = pair(&[(
        "x/op_0_mm",
        "Mean: -8.5e-13\nOutput hash: 2.000000e+00\nInput hashes: 1.0",
        "Mean: -6.5e-13\nOutput hash: 2.000010e+00\nInput hashes: 1.0",
    )]);
    let m = match_tables(&a, &b, &MatchOptions::default());
    let d = m.causes.largest_diff.unwrap();
    assert_eq!(d.field, "Output hash");
    assert!((d.rel - 5e-6).abs() < 1e-9, "{}", d.rel);
}

/// A row's worst difference, one rule for root cause's largest difference
/// and the heatmap: only fields that gate and disagree count.
#[test]
fn a_rows_worst_difference_counts_only_the_fields_that_gate_it() {
    use compare::{worst_difference, CompareOptions, Tolerance};
    let (a, b) = pair(&[(
        "x/op_0_mm",
        "Mean: -8.5e-13\nOutput hash: 2.000000e+00\nInput hashes: 1.0, 4.0",
        "Mean: -6.5e-13\nOutput hash: 2.000010e+00\nInput hashes: 1.0, 5.0",
    )]);
    let compared = a.schema().intersect(b.schema());
    let worst = |o: &CompareOptions| worst_difference(&a, 0, &b, 0, o, compared).unwrap();
    // By default the Input hashes gate (rel 0.2) and the stats do not.
    let d = worst(&CompareOptions::default());
    assert_eq!((d.field, d.rel), (Field::InputHashes, 0.2));
    // Inputs not gating: the Output hash.
    let no_inputs = CompareOptions {
        gate_inputs: false,
        ..CompareOptions::default()
    };
    let d = worst(&no_inputs);
    assert_eq!(d.field, Field::OutputHash);
    assert!((d.rel - 5e-6).abs() < 1e-9, "{}", d.rel);
    // Stats gating: the Mean (rel 0.235) is the worst.
    let stats = CompareOptions {
        stats: Some(Tolerance::REFERENCE),
        ..no_inputs
    };
    let d = worst(&stats);
    assert_eq!(d.field, Field::Mean);
    assert!((d.rel - 2.0 / 8.5).abs() < 1e-9, "{}", d.rel);
    // Nothing disagrees under a loose tolerance: no worst difference.
    let loose = CompareOptions {
        hash: Tolerance {
            rtol: 1.0,
            atol: 0.0,
            both: false,
        },
        ..CompareOptions::default()
    };
    assert_eq!(worst_difference(&a, 0, &b, 0, &loose, compared), None);
}

#[test]
fn digests_decide_bitwise_identity_and_exact_origins() {
    use cause::CauseKind::*;
    let body = |out: &str, od: &str, inp: &str, id: &str| {
        format!("Output hash: {out}\nOutput digest: {od}\nInput hashes: {inp}\nInput digests: {id}")
    };
    let a0 = body("2.5", "00000000000000aa", "1.25", "00000000000000bb");
    // Same printed values, another output digest: a diff only digests show;
    // its inputs' digests agree, so it is an exact origin.
    let a1 = body("3.5", "00000000000000cc", "2.5", "00000000000000aa");
    let b1 = body("3.5", "00000000000000cd", "2.5", "00000000000000aa");
    // A 2e-7 output difference, inputs bitwise equal: the digests show it
    // is the row's own (no print allowance).
    let a2 = body("1.0000001", "00000000000000d0", "4.0", "00000000000000e0");
    let b2 = body("1.0000003", "00000000000000d1", "4.0", "00000000000000e0");
    let a = full_log(&[("x/op_0_mm", &a0), ("y/op_0_mul", &a1), ("z/op_0_mm", &a2)]);
    let b = full_log(&[("x/op_0_mm", &a0), ("y/op_0_mul", &b1), ("z/op_0_mm", &b2)]);
    assert_eq!(a.precision(), crate::parser::Precision::Full);
    let m = match_tables(&a, &b, &MatchOptions::default());
    let st: Vec<Status> = m.rows.iter().map(|r| r.status).collect();
    assert_eq!(st, vec![Status::Match, Status::Diff, Status::Diff]);
    assert!(m.rows[0].has(ROW_BITWISE));
    assert!(
        m.rows[1].has(ROW_DIGEST_ONLY),
        "printed values agree, digests do not"
    );
    assert!(!m.rows[2].has(ROW_DIGEST_ONLY));
    assert_eq!(m.cause_kinds[1], Some(Origin));
    assert_eq!(m.cause_kinds[2], Some(Origin));
    assert_eq!(m.bitwise_counts(&a, &b), Some((1, 3)));
    let notes = notes::row_notes(&a, &b, &m, 1, ("a", "b"));
    assert!(
        notes.iter().any(|n| n.starts_with("digests differ")),
        "{notes:?}"
    );
    // Identical runs: every row bitwise identical, also under --bitwise.
    let mut opts = MatchOptions::default();
    opts.policy.default.hash = Tolerance {
        rtol: 0.0,
        atol: 0.0,
        both: false,
    };
    opts.policy.default.stats = Some(opts.policy.default.hash);
    let same = match_tables(&a, &a, &opts);
    assert_eq!(same.counts().diff, 0);
    assert_eq!(same.bitwise_counts(&a, &a), Some((3, 3)));
    // Equal digests with a statistic one ulp apart (a whole-tensor L2 norm
    // combined from shards): bitwise equal tensors match, also under
    // --bitwise; another Shape with the same digests does not.
    let l2 =
        |v: &str| format!("{a0}\nShape: torch.Size([2, 2]), Dtype: torch.float32\nL2 norm: {v}");
    let c = full_log(&[("x/op_0_mm", &l2("1.2345678901234944e+01"))]);
    let d = full_log(&[("x/op_0_mm", &l2("1.2345678901234943e+01"))]);
    let m = match_tables(&c, &d, &opts);
    assert_eq!(m.rows[0].status, Status::Match);
    assert!(m.rows[0].has(ROW_BITWISE) && !m.rows[0].has(ROW_OUT_DIFF));
    let e = full_log(&[(
        "x/op_0_mm",
        &l2("1.2345678901234944e+01").replace("[2, 2]", "[4]"),
    )]);
    assert_eq!(match_tables(&c, &e, &opts).rows[0].status, Status::Diff);
}

#[test]
fn full_precision_shrinks_the_print_allowance() {
    // One printed unit of `%.6e` on the output is noise at 7 digits, but a
    // real difference when the log prints every float in full.
    let blocks = |out: &str| {
        vec![
            (
                "n/op_0_add_",
                "Output hash: 1.0\nInput hashes: 1.0".to_string(),
            ),
            (
                "w3/op_0_mm",
                format!("Output hash: {out}\nInput hashes: 2.662878e+04"),
            ),
        ]
    };
    let mk = |full: bool, out: &str| {
        let b = blocks(out);
        let v: Vec<(&str, &str)> = b.iter().map(|(k, x)| (*k, x.as_str())).collect();
        if full {
            full_log(&v)
        } else {
            log(&v)
        }
    };
    // Run 2's first row differs so that something diverges before w3.
    let first2 = |t: bool| {
        let v = vec![
            ("n/op_0_add_", "Output hash: 1.5\nInput hashes: 1.0"),
            (
                "w3/op_0_mm",
                "Output hash: 8.524767e+03\nInput hashes: 2.662878e+04",
            ),
        ];
        if t {
            full_log(&v)
        } else {
            log(&v)
        }
    };
    for (full, kind) in [
        (false, cause::CauseKind::BelowPrint),
        (true, cause::CauseKind::Origin),
    ] {
        let (a, b) = (mk(full, "8.524768e+03"), first2(full));
        let m = match_tables(&a, &b, &MatchOptions::default());
        assert_eq!(m.cause_kinds[1], Some(kind), "full precision: {full}");
    }
}

/// Residual add `blocks.0/op_0_add` whose second input comes, in one run
/// only, through a dropout (`bernoulli_` → `div_` → `mul`) the other run
/// lacks. Returns (without dropout, with dropout).
fn with_and_without_dropout() -> (OpTable, OpTable) {
    let proj = (
        "blocks.0.attn.proj/op_0_mm",
        "Output hash: 8.0\nInput hashes: 7.0\nInput producers: ",
    );
    let plain = log(&[
        proj,
        (
            "blocks.0/op_0_add",
            "Output hash: 9.0\nInput hashes: 2.0, 8.0\nInput producers: ;blocks.0.attn.proj/op_0_mm",
        ),
        (
            "blocks.0.mlp/op_0_mm",
            "Output hash: 11.0\nInput hashes: 9.0\nInput producers: blocks.0/op_0_add",
        ),
    ]);
    let dropout = log(&[
        proj,
        (
            "blocks.0.attn/op_5_bernoulli_",
            "Output hash: 0.5\nInput hashes: 0.0\nInput producers: ",
        ),
        (
            "blocks.0.attn/op_6_div_",
            "Output hash: 1.0\nInput hashes: 0.5\nInput producers: blocks.0.attn/op_5_bernoulli_",
        ),
        (
            "blocks.0.attn/op_7_mul",
            "Output hash: 7.5\nInput hashes: 8.0, 1.0\nInput producers: blocks.0.attn.proj/op_0_mm;blocks.0.attn/op_6_div_",
        ),
        (
            "blocks.0/op_0_add",
            "Output hash: 9.5\nInput hashes: 2.0, 7.5\nInput producers: ;blocks.0.attn/op_7_mul",
        ),
        (
            "blocks.0.mlp/op_0_mm",
            "Output hash: 11.5\nInput hashes: 9.5\nInput producers: blocks.0/op_0_add",
        ),
    ]);
    (plain, dropout)
}

#[test]
fn an_op_of_one_run_only_feeding_a_differing_input_is_the_cause() {
    use cause::CauseKind;
    let (plain, dropout) = with_and_without_dropout();
    let key = |m: &MatchTable, i: usize| match m.rows[i].sides() {
        Sides::Only2(b) => dropout.key_str(b).into_owned(),
        Sides::Only1(a) | Sides::Both(a, _) => plain.key_str(a).into_owned(),
    };
    let m = match_tables(&plain, &dropout, &MatchOptions::default());
    // Rows: proj (match), add (diff), mlp (diff), then run 2's three ops.
    assert_eq!(m.cause_kinds[1], Some(CauseKind::OneSided));
    assert_eq!(m.cause_kinds[2], Some(CauseKind::Inherited));
    let c = &m.causes;
    assert_eq!(c.first_cause, Some(1));
    assert_eq!(c.cause_count, 1);
    assert_eq!(c.kinds.one_sided, 1);
    assert_eq!(c.kinds.entry, 0, "no longer called an entry");
    let first = &c.causes[0];
    assert_eq!(first.kind, CauseKind::OneSided);
    assert_eq!(first.inputs, vec![1]);
    assert_eq!(first.inherited, 1);
    let chain: Vec<String> = first.one_sided.iter().map(|&i| key(&m, i)).collect();
    assert_eq!(
        chain,
        vec![
            "blocks.0.attn/op_5_bernoulli_",
            "blocks.0.attn/op_6_div_",
            "blocks.0.attn/op_7_mul"
        ],
        "earliest one-sided op first, back from the add's own producer"
    );
    assert!(first
        .one_sided
        .iter()
        .all(|&i| m.rows[i].status == Status::Only2));
    let notes: Vec<String> = notes::row_notes_with_kind(&plain, &dropout, &m, 1, ("a", "b"))
        .into_iter()
        .map(|n| n.text)
        .collect();
    assert!(
        notes.contains(&"fed by blocks.0.attn/op_5_bernoulli_ (only in b)".to_string()),
        "{notes:?}"
    );

    // The other way round: the dropout is run 1's, named from run 1's own
    // producers, as only1 rows.
    let m = match_tables(&dropout, &plain, &MatchOptions::default());
    let add = (0..m.rows.len())
        .find(|&i| m.cause_kinds.get(i).copied().flatten() == Some(CauseKind::OneSided))
        .expect("a one-sided cause");
    assert_eq!(m.causes.first_cause, Some(add));
    let chain: Vec<String> = m.causes.causes[0]
        .one_sided
        .iter()
        .map(|&i| dropout.key_str(m.rows[i].r1().unwrap()).into_owned())
        .collect();
    assert_eq!(chain[0], "blocks.0.attn/op_5_bernoulli_");
    assert_eq!(chain.len(), 3);
}

#[test]
fn without_a_one_sided_producer_a_differing_input_is_still_an_entry() {
    use cause::CauseKind;
    // The same add, its changed input from outside the capture in both runs.
    let a = log(&[(
        "blocks.0/op_0_add",
        "Output hash: 9.0\nInput hashes: 2.0, 8.0\nInput producers: ;",
    )]);
    let b = log(&[
        (
            "blocks.0/op_0_add",
            "Output hash: 9.5\nInput hashes: 2.0, 7.5\nInput producers: ;",
        ),
        // One-sided, but it feeds nothing.
        ("blocks.0.attn/op_5_bernoulli_", "Output hash: 0.5"),
    ]);
    let m = match_tables(&a, &b, &MatchOptions::default());
    assert_eq!(m.cause_kinds[0], Some(CauseKind::Entry));
    assert!(m.causes.causes[0].one_sided.is_empty());
}

#[test]
fn cause_kind_all_lists_every_kind_once_in_order() {
    use cause::CauseKind as K;
    // Exhaustive: a new kind does not compile here until ALL lists it.
    let ordinal = |k: K| match k {
        K::Origin => 0,
        K::Entry => 1,
        K::OneSided => 2,
        K::Inherited => 3,
        K::BelowPrint => 4,
        K::Untraced => 5,
        K::ViaCollective => 6,
        K::Unsynced => 7,
        K::Record => 8,
    };
    for (n, k) in K::ALL.iter().enumerate() {
        assert_eq!(ordinal(*k), n, "{k:?}");
        assert_eq!(
            serde_json::to_string(k).unwrap(),
            format!("\"{}\"", k.json_name())
        );
    }
}

/// A router's softmax and the topk that reads it (new-user trial 13 F5):
/// `softmax`'s L1 norm is its row count whatever its values, so its Output
/// hash agrees while its statistics differ, and topk's Input hash agrees.
/// `stats` gives the softmax's statistics in run 2.
fn softmax_topk(stats: &str) -> (OpTable, OpTable) {
    let rows = |router: &str, stats: &str, topk: &str| {
        log_owned(&[
            ("moe.router/op_0_mm".into(), format!("Output hash: {router}\nInput hashes: 5.0")),
            (
                "moe/op_0__softmax".into(),
                format!(
                    "Shape: torch.Size([4, 6]), Dtype: torch.float32\n{stats}\nOutput hash: 4.0\nInput hashes: {router}\nInput producers: moe.router/op_0_mm"
                ),
            ),
            (
                "moe/op_1_topk".into(),
                format!("Output hash: {topk}\nInput hashes: 4.0\nInput producers: moe/op_0__softmax"),
            ),
        ])
    };
    (
        rows("3.0", "L2 norm: 1.0\nMin: 0.1\nMax: 0.5", "2.0, 9.0"),
        rows("3.5", stats, "2.5, 9.5"),
    )
}

#[test]
fn an_input_whose_hash_cannot_see_the_change_is_known_by_its_producer() {
    use cause::CauseKind::*;
    let (a, b) = softmax_topk("L2 norm: 1.2\nMin: 0.05\nMax: 0.6");
    let m = match_tables(&a, &b, &MatchOptions::default());
    // The softmax's statistics see the change its hash cannot.
    assert!(m.rows[1].has(ROW_STATS_DIFF) && !m.rows[1].has(ROW_OUT_DIFF));
    // topk inherits it: one cause, the router's matmul.
    assert_eq!(
        m.cause_kinds,
        vec![Some(Origin), Some(Inherited), Some(Inherited)]
    );
    assert_eq!(m.causes.cause_count, 1);
    // Statistics that agree: nothing says topk's input differs, and its
    // own output does: an origin.
    let (a, b) = softmax_topk("L2 norm: 1.0\nMin: 0.1\nMax: 0.5");
    let m = match_tables(&a, &b, &MatchOptions::default());
    assert!(!m.rows[1].has(ROW_STATS_DIFF));
    assert_eq!(m.cause_kinds[2], Some(Origin));
}

/// Run 1 runs one more iteration of a module's loop (an MoE expert that
/// only its routing reached): its extra `moe/op_1_<op>` reads the
/// diverging `x` and feeds `y`. The one-sided op carries on `x`'s
/// divergence when run 2 runs that op in that module too (`index`), and
/// is a change of its own when run 2 never does (`clamp`, as a dropout
/// one run adds).
#[test]
fn a_one_sided_op_repeating_the_other_runs_op_carries_on_the_divergence_it_reads() {
    use cause::CauseKind::*;
    let runs = |extra: &str, swap: bool| {
        let a = log_owned(&[
            ("x/op_0_mm".into(), "Output hash: 1.0\nInput hashes: 5.0".into()),
            ("moe/op_0_index".into(), "Output hash: 2.0\nInput hashes: 1.0\nInput producers: x/op_0_mm".into()),
            // No producer named (a view between them): found by its value.
            (format!("moe/op_1_{extra}"), "Output hash: 3.0\nInput hashes: 1.0\nInput producers: ".into()),
            ("w/op_0_mm".into(), "Output hash: 7.0\nInput hashes: 6.0".into()),
            (
                "y/op_0_add".into(),
                format!("Output hash: 10.0\nInput hashes: 7.0, 3.0\nInput producers: w/op_0_mm;moe/op_1_{extra}"),
            ),
        ]);
        let b = log(&[
            ("x/op_0_mm", "Output hash: 1.5\nInput hashes: 5.0"),
            (
                "moe/op_0_index",
                "Output hash: 2.5\nInput hashes: 1.5\nInput producers: x/op_0_mm",
            ),
            ("w/op_0_mm", "Output hash: 7.0\nInput hashes: 6.0"),
            (
                "y/op_0_add",
                "Output hash: 7.0\nInput hashes: 7.0, 0.0\nInput producers: w/op_0_mm;",
            ),
        ]);
        let (a, b) = if swap { (b, a) } else { (a, b) };
        let m = match_tables(&a, &b, &MatchOptions::default());
        let y = m
            .rows
            .iter()
            .position(|r| r.r1().is_some_and(|r1| a.key(r1) == b"y/op_0_add"))
            .unwrap();
        (m.cause_kinds[y], m.causes.cause_count)
    };
    assert_eq!(runs("index", false), (Some(Inherited), 1));
    assert_eq!(runs("clamp", false), (Some(OneSided), 2));
    // The run with the extra iteration as run 2 (new-user trial 14 F2):
    // its op's producer is found in its own log (run 1's `x` has another
    // value), then by its pair.
    assert_eq!(runs("index", true), (Some(Inherited), 1));
    assert_eq!(runs("clamp", true), (Some(OneSided), 2));
}

/// Full precision: a parameter updated with a doubled learning rate
/// (new-user trial 14 F4). Its digests differ and its min moved by 2e-2,
/// while its Output hash (an L1 norm: the ± updates cancel in it) moved
/// by 7e-9, under the 1e-8 tolerance. It was a match; it is a diff. The
/// same statistics within the tolerance (another summation order) stay a
/// match, and without digests the reference's rule (hashes only) holds.
#[test]
fn differing_digests_and_statistics_are_a_diff_whatever_the_hash_says() {
    let body = |min: &str, od: &str| {
        format!(
            "Shape: torch.Size([64]), Dtype: torch.float32\nL2 norm: 1.0\nMin: {min}\nMax: 0.5\nOutput hash: 4.0\nOutput digest: {od}"
        )
    };
    let hash = |min: &str, h: &str| {
        format!("Shape: torch.Size([64]), Dtype: torch.float32\nL2 norm: 1.0\nMin: {min}\nMax: 0.5\nOutput hash: {h}")
    };
    let run = |a: String, b: String, full: bool| {
        let (a, b) = if full {
            (
                full_log(&[("<none>/op_53_addcdiv_", &a)]),
                full_log(&[("<none>/op_53_addcdiv_", &b)]),
            )
        } else {
            (
                log(&[("<none>/op_53_addcdiv_", &a)]),
                log(&[("<none>/op_53_addcdiv_", &b)]),
            )
        };
        match_tables(&a, &b, &MatchOptions::default()).rows[0].status
    };
    assert_eq!(
        run(
            body("-0.25", "00000000000000aa"),
            body("-0.2551", "00000000000000ab"),
            true
        ),
        Status::Diff
    );
    assert_eq!(
        run(
            body("-0.25", "00000000000000aa"),
            body("-0.250000000001", "00000000000000ab"),
            true
        ),
        Status::Match
    );
    assert_eq!(
        run(hash("-0.25", "4.0"), hash("-0.2551", "4.00000002"), false),
        Status::Match
    );
}

/// Default precision, a LayerNorm eps change (new-user trial 14 F3): an
/// Adam moment (`lerp_`) moves by 1e-6 in its mean and by less than the
/// 1e-8 tolerance in its hash (a `match`), and the `addcdiv_` reading it
/// (AdamW's first update, about lr * sign(g)) differs by far more: it was
/// a second origin in the optimizer. Its input's statistics moved, so it
/// carries on the earlier divergence below print precision. With nothing
/// diverging before it, it stays an origin.
#[test]
fn a_row_reading_a_producer_whose_statistics_moved_within_the_hash_tolerance_is_no_origin() {
    use cause::CauseKind::*;
    let runs = |first: bool| {
        let rows = |mm: &str, mean: &str, h: &str, out: &str| {
            let mut v: Vec<(String, String)> = Vec::new();
            if first {
                v.push((
                    "a/op_0_mm".into(),
                    format!("Output hash: {mm}\nInput hashes: 5.0"),
                ));
            }
            v.push((
                "<none>/op_1_lerp_".into(),
                format!(
                    "Shape: torch.Size([64]), Dtype: torch.float32\nMean: {mean}\nOutput hash: {h}\nInput hashes: 0.0, 9.0"
                ),
            ));
            v.push((
                "<none>/op_2_addcdiv_".into(),
                format!("Output hash: {out}\nInput hashes: 7.0, {h}\nInput producers: ;<none>/op_1_lerp_"),
            ));
            log_owned(&v)
        };
        let a = rows("1.0", "1.000000e-01", "2.0", "3.0");
        let b = rows("1.5", "1.000012e-01", "2.00000001", "3.5");
        match_tables(&a, &b, &MatchOptions::default())
    };
    let m = runs(true);
    assert!(m.rows[1].status == Status::Match && m.rows[1].has(ROW_STATS_DIFF));
    assert_eq!(m.cause_kinds[2], Some(BelowPrint));
    assert_eq!(m.causes.cause_count, 1);
    let m = runs(false);
    assert_eq!(m.cause_kinds[1], Some(Origin));
}

/// An input whose digests differ while its hash agrees within the row's
/// tolerance (a loosened one, `--layouts`, `--rtol`, or the reference's),
/// made by a producer whose row agrees, is no differing input: the row
/// whose own output changes is the origin (trial 27 F2: TP=2's `norm`,
/// its input 4.5e-10 off after the row-parallel sum, was named an entry,
/// "a differing input: input 0"). The same small input difference from a
/// diverging producer still carries the divergence.
#[test]
fn an_input_within_a_loosened_tolerance_from_an_agreeing_producer_agrees() {
    use cause::CauseKind::*;
    let body = |out: &str, od: &str, inp: &str, id: &str, prod: &str| {
        format!(
            "Output hash: {out}\nOutput digest: {od}\nInput hashes: {inp}\nInput digests: {id}\nInput producers: {prod}"
        )
    };
    // The sum: 4.5e-10 off (another order of addition), its input equal.
    let a0 = body("2.0", "00000000000000a0", "1.0", "00000000000000b0", "");
    let b0 = body(
        "2.0000000009",
        "00000000000000a1",
        "1.0",
        "00000000000000b0",
        "",
    );
    // The norm reads it and changes its own output by 5 %.
    let a1 = body(
        "3.0",
        "00000000000000c0",
        "2.0",
        "00000000000000a0",
        "x/op_0_add",
    );
    let b1 = body(
        "3.15",
        "00000000000000c1",
        "2.0000000009",
        "00000000000000a1",
        "x/op_0_add",
    );
    let a = full_log(&[("x/op_0_add", &a0), ("norm/op_0_layer_norm", &a1)]);
    let b = full_log(&[("x/op_0_add", &b0), ("norm/op_0_layer_norm", &b1)]);
    let mut loose = MatchOptions::default();
    loose.policy.default.hash = Tolerance {
        rtol: 1e-4,
        atol: 0.0,
        both: false,
    };
    let m = match_tables(&a, &b, &loose);
    let st: Vec<Status> = m.rows.iter().map(|r| r.status).collect();
    assert_eq!(st, vec![Status::Match, Status::Diff]);
    assert_eq!(m.cause_kinds[1], Some(Origin));
    let c = &m.causes.causes[0];
    assert_eq!((c.kind, c.inputs.clone()), (Origin, vec![]));
    // The producer diverges beyond the tolerance (in another output): the
    // same small input difference is inherited from it.
    let two = |out: &str| {
        format!(
            "Output hash: {out}\nOutput digest: 00000000000000a1, 00000000000000a2\nInput hashes: 1.0\nInput digests: 00000000000000b0"
        )
    };
    let a = full_log(&[
        ("x/op_0_add", &two("2.0, 7.0").replace("a1, ", "a0, ")),
        ("norm/op_0_layer_norm", &a1),
    ]);
    let b = full_log(&[
        ("x/op_0_add", &two("2.0000000009, 7.5")),
        ("norm/op_0_layer_norm", &b1),
    ]);
    let m = match_tables(&a, &b, &loose);
    let st: Vec<Status> = m.rows.iter().map(|r| r.status).collect();
    assert_eq!(st, vec![Status::Diff, Status::Diff]);
    assert_eq!(m.cause_kinds[1], Some(Inherited));
    let a = full_log(&[("x/op_0_add", &a0), ("norm/op_0_layer_norm", &a1)]);
    // At the reference's tolerance too, the 4.5e-10 of the sum is within
    // it: the sum matches and the norm is the origin.
    let b0 = body(
        "2.0000000009",
        "00000000000000a1",
        "1.0",
        "00000000000000b0",
        "",
    );
    let b = full_log(&[("x/op_0_add", &b0), ("norm/op_0_layer_norm", &b1)]);
    let m = match_tables(&a, &b, &MatchOptions::default());
    let st: Vec<Status> = m.rows.iter().map(|r| r.status).collect();
    assert_eq!(st, vec![Status::Match, Status::Diff]);
    assert_eq!(m.cause_kinds[1], Some(Origin));
    // A reader whose output moved less than that input (rel 1.5e-10
    // against 4.5e-10) carries the input's difference on: the input does
    // not agree, and the row is an entry, not an origin with "inputs
    // agree" (trial 28: Llama's residual add after eager against sdpa
    // attention).
    // Its Mean, near zero, moves beyond the tolerance: a `diff`.
    let b1 = body(
        "3.00000000045",
        "00000000000000c1",
        "2.0000000009",
        "00000000000000a1",
        "x/op_0_add",
    ) + "\nMean: 1.1e-9";
    let a = full_log(&[
        ("x/op_0_add", &a0),
        ("norm/op_0_layer_norm", &(a1 + "\nMean: 1.0e-9")),
    ]);
    let b = full_log(&[("x/op_0_add", &b0), ("norm/op_0_layer_norm", &b1)]);
    let m = match_tables(&a, &b, &MatchOptions::default());
    let st: Vec<Status> = m.rows.iter().map(|r| r.status).collect();
    assert_eq!(st, vec![Status::Match, Status::Diff]);
    assert_eq!(m.cause_kinds[1], Some(Entry));
    assert_eq!(m.causes.causes[0].inputs, vec![0]);
}
