//! Case 01-unequal-op-streams (`../shared/cases/01-unequal-op-streams/README.md`).

use super::common::*;

/// Case 01-unequal-op-streams: `actdiff compare run1.log run2.log -o out`.
/// run2 lacks the `add` in the middle of run1's stream: `wq` and `wo` pair by
/// exact key and match, the `add` is only in run1, the summary counts run1 3
/// ops, run2 2 ops, 2 paired; exit 1.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case01_unequal_streams_pair_the_rest_and_list_the_extra_op() {
    let r = in_case(
        "01-unequal-op-streams",
        &["compare", "run1.log", "run2.log"],
    );
    r.expect(1);
    r.row_is(WQ, "match", Some("exact"));
    r.row_is(WO, "match", Some("exact"));
    let add = r.row_is(ADD, "only1", None);
    assert!(add["key2"].is_null());
    let rk = r.rank(0);
    assert_eq!(rk["run1"]["entries"], 3);
    assert_eq!(rk["run2"]["entries"], 2);
    assert_eq!(rk["run1"]["paired"], 2);
    assert_eq!(rk["run2"]["paired"], 2);
    assert_eq!(counts(&rk["counts"]), (2, 0, 1, 0));
    r.stdout_has("3 ops vs 2 ops").stdout_has("paired 2/3");
}

/// Case 01-unequal-op-streams: `actdiff compare run1.log run2.log -o out`:
/// the op only in run1 is listed with its position in run1's stream (2 of 3).
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case01_extra_op_listed_with_its_position() {
    let r = in_case(
        "01-unequal-op-streams",
        &["compare", "run1.log", "run2.log"],
    );
    r.expect(1);
    let mut told = notes(&r.row(ADD)).join("\n");
    told += &r.tbody(ADD);
    for l in r.stdout.lines().filter(|l| l.contains(ADD)) {
        told += l;
    }
    assert!(
        told.contains("2 of 3"),
        "the `add` row does not say it is op 2 of 3 of run1:\n{told}"
    );
}
