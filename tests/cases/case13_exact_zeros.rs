//! Case 13-exact-zeros (`../shared/cases/13-exact-zeros/README.md`).

use super::common::*;

const EXPERT: &str = "layers.7.moe.experts.3.w1/op_0_mm";

/// Case 13-exact-zeros: `actdiff compare run1.log run2.log -o out`: `-0`
/// and `0` are equal; the row matches, every relative difference is 0 (never
/// NaN or 1), no cell is highlighted; exit 0.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case13_signed_zeros_match() {
    let r = in_case("13-exact-zeros", &["compare", "run1.log", "run2.log"]);
    r.expect(0);
    let row = r.row_is(EXPERT, "match", Some("exact"));
    for (k, v) in row["diffs"].as_object().unwrap() {
        assert_eq!(v.as_f64(), Some(0.0), "relative difference of {k}: {v}");
    }
    let page = r.page("rank0-page1.html");
    no_highlighted_cell(&page, &r.tbody(EXPERT));
    for c in cells(&r.tbody(EXPERT)) {
        assert!(!c.text.contains("NaN"), "{c:?}");
    }
}

/// Case 13-exact-zeros: `actdiff compare run1.log run2.log -o out --rtol 0
/// --atol 0`: -0 equals 0 in exact mode too; exit 0.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case13_signed_zeros_match_in_exact_mode() {
    let r = in_case(
        "13-exact-zeros",
        &[
            "compare", "run1.log", "run2.log", "--rtol", "0", "--atol", "0",
        ],
    );
    r.expect(0);
    r.row_is(EXPERT, "match", Some("exact"));
}
