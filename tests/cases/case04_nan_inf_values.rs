//! Case 04-nan-inf-values (`../shared/cases/04-nan-inf-values/README.md`).

use super::common::*;

const SOFTMAX1: &str = "layers.1.attention/op_0_softmax";
const WO1: &str = "layers.1.attention.wo/op_0_mm";
const W1_1: &str = "layers.1.feed_forward.w1/op_0_mm";
const W2_1: &str = "layers.1.feed_forward.w2/op_0_mm";

/// Case 04-nan-inf-values: `actdiff compare run1.log run2.log -o out`.
/// softmax (NaN in run1, finite in run2) is a difference "non-finite in run1
/// only", the first non-finite op of run1 and the first one-sided one;
/// run2's first non-finite op is `wo`; `wo` (inf/inf), `w1` (-inf/-inf) and
/// `w2` (NaN/NaN) match, flagged non-finite in both; renders; exit 1.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case04_nan_and_inf_compared_by_kind() {
    let r = in_case("04-nan-inf-values", &["compare", "run1.log", "run2.log"]);
    r.expect(1);
    let sm = r.row_is(SOFTMAX1, "diff", Some("exact"));
    assert!(
        notes(&sm)
            .iter()
            .any(|n| n.starts_with("non-finite in run1") && n.ends_with("only")),
        "{sm}"
    );
    for k in [WO1, W1_1, W2_1] {
        let row = r.row_is(k, "match", Some("exact"));
        assert_note(&row, "non-finite in both runs");
    }
    let rc = &r.rank(0)["root_causes"];
    assert_eq!(ref_key(&rc["first_nonfinite1"]), SOFTMAX1);
    assert_eq!(ref_key(&rc["first_nonfinite2"]), WO1);
    assert_eq!(ref_key(&rc["first_nonfinite_one_sided"]), SOFTMAX1);
    r.stdout_has(&format!("first non-finite: run1.log {SOFTMAX1}"));
    assert!(r.page("rank0-page1.html").contains(SOFTMAX1));
}

/// Case 04-nan-inf-values: `actdiff compare run1.log run2.log -o out
/// --nan-is-diff`: `w2` (NaN vs NaN) becomes a difference too; exit 1.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case04_nan_is_diff_makes_nan_vs_nan_a_difference() {
    let r = in_case(
        "04-nan-inf-values",
        &["compare", "run1.log", "run2.log", "--nan-is-diff"],
    );
    r.expect(1);
    r.row_is(SOFTMAX1, "diff", Some("exact"));
    r.row_is(W2_1, "diff", Some("exact"));
    r.row_is(WO1, "match", Some("exact"));
    r.row_is(W1_1, "match", Some("exact"));
}

/// Case 04-nan-inf-values: `actdiff compare run1.log run2.log -o out`:
/// NaN/Inf cells have a style of their own in the HTML.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case04_non_finite_cells_have_their_own_style() {
    let r = in_case("04-nan-inf-values", &["compare", "run1.log", "run2.log"]);
    r.expect(1);
    let page = r.page("rank0-page1.html");
    let cs = cells(&page);
    let finite: BTreeSet<&str> = cs
        .iter()
        .filter(|c| !is_nonfinite_text(&c.text) && c.text.parse::<f64>().is_ok())
        .filter_map(|c| c.class.as_deref())
        .collect();
    let nonfinite: Vec<&Cell> = cs.iter().filter(|c| is_nonfinite_text(&c.text)).collect();
    assert!(!nonfinite.is_empty());
    for c in nonfinite {
        let class = c
            .class
            .as_deref()
            .unwrap_or_else(|| panic!("a `{}` cell has no style: {c:?}", c.text));
        assert!(
            !finite.contains(class),
            "a `{}` cell has the class `{class}` of finite cells",
            c.text
        );
    }
}
