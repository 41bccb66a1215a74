//! Case 16-subnormal-vs-zero (`../shared/cases/16-subnormal-vs-zero/README.md`).

use super::common::*;

const SILU: &str = "layers.3.feed_forward/op_0_silu";

/// Case 16-subnormal-vs-zero: `actdiff compare run1.log run2.log -o out`:
/// the subnormals parse exactly (no warning, no clamping), the row matches
/// under the default absolute floor, annotated "subnormal vs zero"; exit 0.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case16_subnormal_vs_zero_matches() {
    let case = "16-subnormal-vs-zero";
    let r = in_case(case, &["compare", "run1.log", "run2.log"]);
    r.expect(0);
    let row = r.row_is(SILU, "match", Some("exact"));
    assert_note(&row, "subnormal vs zero");
    assert_eq!(r.rank(0)["run1"]["warnings"], serde_json::json!([]));

    use actdiff::parser::Field;
    let t = actdiff::parser::parse_path(&case_dir(case).join("run1.log")).unwrap();
    assert!(t.warnings().is_empty(), "{:?}", t.warnings());
    let num = |f| actdiff::matcher::compare::token_number(t.field(0, f)).unwrap();
    assert_eq!(num(Field::Min), "1.401298e-45".parse::<f64>().unwrap());
    assert_eq!(num(Field::Mean), "4.940656e-324".parse::<f64>().unwrap());
    assert!(num(Field::Mean) > 0.0, "clamped to zero");
}

/// Case 16-subnormal-vs-zero: `actdiff compare run1.log run2.log -o out
/// --rtol 0 --atol 0`: the row is a difference; exit 1.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case16_exact_mode_is_a_difference() {
    let r = in_case(
        "16-subnormal-vs-zero",
        &[
            "compare", "run1.log", "run2.log", "--rtol", "0", "--atol", "0",
        ],
    );
    r.expect(1);
    r.row_is(SILU, "diff", Some("exact"));
}
