//! Tests of the step series' helpers and of the tables it keeps.

use super::keep::kept_bytes;
use super::*;
use crate::report::messages::fmt_steps;

#[test]
fn step_folder_names() {
    assert_eq!(step_of_dir_name("step_12"), Some(12));
    assert_eq!(step_of_dir_name("step_0"), Some(0));
    for bad in ["step_", "step_1a", "step-1", "steps_1", "step_+1", "rank_1"] {
        assert_eq!(step_of_dir_name(bad), None, "{bad}");
    }
}

#[test]
fn step_selection() {
    assert_eq!(StepSelection::parse("all"), Ok(StepSelection::All));
    let s = StepSelection::parse("3, 5-9").unwrap();
    assert_eq!(s, StepSelection::Only(vec![(3, 3), (5, 9)]));
    assert!(s.includes(3) && s.includes(5) && s.includes(9));
    assert!(!s.includes(4) && !s.includes(10) && !s.includes(1));
    assert!(StepSelection::First.includes(77));
    for bad in ["", "x", "9-5", "3,", "1-2-3"] {
        let e = StepSelection::parse(bad).unwrap_err();
        assert!(e.contains("--steps"), "{bad}: {e}");
    }
}

#[test]
fn step_lists() {
    assert_eq!(fmt_steps(&[1, 2, 3, 5, 7, 8]), "1-3, 5, 7-8");
    assert_eq!(fmt_steps(&[]), "none");
    assert_eq!(fmt_steps(&[4]), "4");
}

/// A rank of empty logs, compared.
fn kept_rank(rank: u32) -> KeptRank {
    let t = || crate::parser::parse_bytes(Vec::new(), "rank_0_activations.log");
    let (t1, t2) = (t(), t());
    let m = crate::matcher::match_tables(&t1, &t2, &Default::default());
    KeptRank {
        rank1: rank,
        rank2: rank,
        tables: (t1, t2, m),
        report: ReportOptions::default(),
    }
}

#[test]
fn only_the_earliest_diverging_steps_tables_are_kept() {
    let k = Kept::default();
    // Steps 2 and 4 in flight; 4 diverges first, then 2 does.
    k.offer(2, kept_rank(0));
    k.offer(4, kept_rank(0));
    k.offer(4, kept_rank(1));
    k.step_done(4, true);
    k.offer(2, kept_rank(1));
    // A step later than the earliest diverging one is not kept.
    k.offer(5, kept_rank(0));
    assert_eq!(k.lock().steps.keys().collect::<Vec<_>>(), [&2, &4]);
    k.step_done(2, true);
    assert_eq!(k.lock().steps.keys().collect::<Vec<_>>(), [&2]);
    // A step that does not diverge drops its own.
    k.offer(1, kept_rank(0));
    k.step_done(1, false);
    k.step_done(5, true);
    assert_eq!(k.lock().steps.keys().collect::<Vec<_>>(), [&2]);
    assert!(k.take(2, 3).is_none(), "not every rank with a summary kept");
    assert_eq!(k.lock().bytes, 0);
    let k = Kept::default();
    k.offer(3, kept_rank(0));
    k.offer(3, kept_rank(1));
    k.step_done(3, true);
    let ranks = k.take(3, 2).expect("kept");
    assert_eq!(ranks.iter().map(|r| r.rank1).collect::<Vec<_>>(), [0, 1]);
}

#[test]
fn past_the_bound_a_step_is_compared_again() {
    let one = kept_bytes(&kept_rank(0));
    let k = Kept {
        cap: one,
        ..Kept::default()
    };
    k.offer(1, kept_rank(0));
    k.offer(1, kept_rank(1));
    k.step_done(1, true);
    assert_eq!(k.lock().bytes, one);
    assert!(k.take(1, 2).is_none(), "rank 1 was over the bound");
    assert_eq!(k.lock().bytes, 0);
}

#[test]
fn worse_orders_statuses() {
    use exit_codes::*;
    assert_eq!(worse(OK, DIVERGED), DIVERGED);
    assert_eq!(worse(DIVERGED, INCOMPLETE), INCOMPLETE);
    assert_eq!(worse(INPUT_ERROR, INCOMPLETE), INPUT_ERROR);
    assert_eq!(worse(DIVERGED, OK), DIVERGED);
}

#[test]
fn steps_in_neither_run_are_ranges_of_any_length() {
    let present: BTreeSet<u64> = (1..=8).collect();
    assert_eq!(
        absent_ranges(&[(1, 99_999_999_999)], &present),
        [(9, 99_999_999_999)]
    );
    assert_eq!(absent_ranges(&[(100, 200)], &present), [(100, 200)]);
    assert_eq!(absent_ranges(&[(2, 6)], &present), []);
    let gaps: BTreeSet<u64> = [3, 5, u64::MAX].into_iter().collect();
    assert_eq!(
        absent_ranges(&[(1, 6), (5, 9), (u64::MAX - 1, u64::MAX)], &gaps),
        [(1, 2), (4, 4), (6, 9), (u64::MAX - 1, u64::MAX - 1)]
    );
}

/// `--steps` on steps neither run has: a range's gaps between the runs'
/// first and last step (a sparse schedule) are a warning; a step named
/// alone, or steps outside that span, are refused (trial 19 F3).
#[test]
fn steps_named_alone_or_beyond_the_runs_are_refused() {
    let every_10: BTreeSet<u64> = [10, 20, 30].into_iter().collect();
    // `1-30`: 1-9 before the first step; 11-19, 21-29 gaps.
    assert_eq!(
        split_absent(&[(1, 30)], &every_10),
        (vec![(11, 19), (21, 29)], vec![(1, 9)])
    );
    assert_eq!(
        split_absent(&[(10, 1000)], &every_10),
        (vec![(11, 19), (21, 29)], vec![(31, 1000)])
    );
    // `10-30,15`: 15 named alone is refused, the rest of its gap is not.
    assert_eq!(
        split_absent(&[(10, 30), (15, 15)], &every_10),
        (vec![(11, 14), (16, 19), (21, 29)], vec![(15, 15)])
    );
    let six: BTreeSet<u64> = (1..=6).collect();
    assert_eq!(
        split_absent(&[(1, 3), (9, 9)], &six),
        (vec![], vec![(9, 9)])
    );
    assert_eq!(split_absent(&[(2, 5)], &six), (vec![], vec![]));
}
