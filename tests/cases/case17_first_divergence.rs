//! Case 17-first-divergence (`../shared/cases/17-first-divergence/README.md`).

use super::common::*;

/// Checks case 17's summary: first divergence per phase, first non-finite
/// per run, largest difference.
fn case17_check(r: &Run, forward: &str) {
    r.expect(1);
    let rc = &r.rank(0)["root_causes"];
    assert_eq!(ref_key(&rc["first_divergence_forward"]), forward);
    assert_eq!(ref_key(&rc["first_divergence_backward"]), "output/op_1_mm");
    assert!(
        rc["first_nonfinite1"].is_null(),
        "{}",
        rc["first_nonfinite1"]
    );
    assert_eq!(
        ref_key(&rc["first_nonfinite2"]),
        "layers.0.attention/op_0_softmax"
    );
    assert_eq!(ref_key(&rc["largest_diff"]), "output/op_0_mm");
    r.stdout_has(&format!("first divergence (forward): {forward}"))
        .stdout_has("first non-finite: run2.log layers.0.attention/op_0_softmax")
        .stdout_has("largest diff: output/op_0_mm")
        .stdout_has("first divergence (backward): output/op_1_mm");
}

/// Case 17-first-divergence: `actdiff compare run1.log run2.log -o out
/// --bitwise`: first divergence (forward) `wq/op_0_mm`, (backward)
/// `output/op_1_mm`; first non-finite run2 softmax; largest diff
/// `output/op_0_mm`; exit 1.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case17_first_divergence_bitwise() {
    let r = in_case(
        "17-first-divergence",
        &["compare", "run1.log", "run2.log", "--bitwise"],
    );
    case17_check(&r, "layers.0.attention.wq/op_0_mm");
}

/// Case 17-first-divergence: `actdiff compare run1.log run2.log -o out
/// --rtol 1e-6`: the forward first divergence becomes the softmax (wq's
/// 1e-7 is within tolerance); the rest is unchanged; exit 1.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case17_first_divergence_is_tolerance_aware() {
    let r = in_case(
        "17-first-divergence",
        &["compare", "run1.log", "run2.log", "--rtol", "1e-6"],
    );
    case17_check(&r, "layers.0.attention/op_0_softmax");
}
