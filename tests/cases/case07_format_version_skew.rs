//! Case 07-format-version-skew (`../shared/cases/07-format-version-skew/README.md`).

use super::common::*;

/// Case 07-format-version-skew: `actdiff compare run1.log run2.log -o out`:
/// a schema warning "run1-only: L1 norm; run2-only: Mean, Output hash"; the
/// two `add` ops are not stats-paired (run1 has no hash) and are one-sided;
/// exit 1.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case07_one_sided_fields_are_named_and_adds_stay_one_sided() {
    let r = in_case(
        "07-format-version-skew",
        &["compare", "run1.log", "run2.log"],
    );
    r.expect(1);
    r.stderr_has("run1-only: L1 norm; run2-only: Mean, Output hash");
    let wq = r.row(WQ);
    assert_eq!(wq["strategy"], "exact");
    assert_eq!(wq["key2"], WQ);
    r.row_is("<none>/op_5_add", "only1", None);
    r.row_is("layers.3/op_2_add", "only2", None);
    let rk = r.rank(0);
    assert_eq!(
        rk["run1"]["one_sided_fields"],
        serde_json::json!(["L1 norm"])
    );
    assert_eq!(
        rk["run2"]["one_sided_fields"],
        serde_json::json!(["Mean", "Output hash"])
    );
}

/// Case 07-format-version-skew: `actdiff compare run1.log run2.log -o out`:
/// `wq` matches on the common fields (Shape, L2 norm, Min, Max).
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case07_old_writer_row_matches_on_common_fields() {
    let r = in_case(
        "07-format-version-skew",
        &["compare", "run1.log", "run2.log"],
    );
    r.expect(1);
    r.row_is(WQ, "match", Some("exact"));
}

/// Case 07-format-version-skew: `actdiff compare run1.log run2.log -o out
/// --l1-equals-hash`: L1 norm read as the Output hash, `wq` matches; the
/// `add` ops stay one-sided or differ, never match; exit 1.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case07_l1_equals_hash() {
    let r = in_case(
        "07-format-version-skew",
        &["compare", "run1.log", "run2.log", "--l1-equals-hash"],
    );
    r.expect(1);
    r.row_is(WQ, "match", Some("exact"));
    for k in ["<none>/op_5_add", "layers.3/op_2_add"] {
        let row = r.row(k);
        assert_ne!(row["status"], "match", "{row}");
    }
}
