//! Case 15-dtype-tolerance (`../shared/cases/15-dtype-tolerance/README.md`).

use super::common::*;

const MM15: &str = "layers.0.attention.wq/op_0_mm";
const MUL15: &str = "layers.0.attention_norm/op_0_mul";

/// Case 15-dtype-tolerance: `actdiff compare run1.log run2.log -o out
/// --dtype-tolerance`. actdiff's per-dtype defaults are opt-in
/// (`--dtype-tolerance`: bfloat16 rel 1e-2, float16 1e-3); by default it
/// keeps the reference's rel 1e-8 for every dtype, so both rows would fail.
/// With them the bfloat16 row passes (3e-3 < 1e-2), the float32 row fails;
/// each row shows the tolerance applied; exit 1.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case15_per_dtype_defaults() {
    let r = in_case(
        "15-dtype-tolerance",
        &["compare", "run1.log", "run2.log", "--dtype-tolerance"],
    );
    r.expect(1);
    let bf = r.row_is(MM15, "match", Some("exact"));
    let f32 = r.row_is(MUL15, "diff", Some("exact"));
    let tol = |v: &Value| v["tolerance"].as_str().unwrap().to_string();
    assert!(
        tol(&bf).contains("bfloat16") && tol(&bf).contains("1e-2"),
        "{bf}"
    );
    assert!(tol(&f32).starts_with("default"), "{f32}");
}

/// Case 15-dtype-tolerance: `actdiff compare run1.log run2.log -o out
/// --bitwise`: both rows fail; exit 1.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case15_bitwise_fails_both() {
    let r = in_case(
        "15-dtype-tolerance",
        &["compare", "run1.log", "run2.log", "--bitwise"],
    );
    r.expect(1);
    for k in [MM15, MUL15] {
        let row = r.row_is(k, "diff", Some("exact"));
        assert!(
            row["tolerance"].as_str().unwrap().contains("rel <= 0"),
            "{row}"
        );
    }
}

/// Case 15-dtype-tolerance: `actdiff compare run1.log run2.log -o out
/// --dtype-tolerance`: each row of the report shows the tolerance applied
/// (the `--rows` file does; this checks the HTML rows).
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case15_html_rows_show_the_applied_tolerance() {
    let r = in_case(
        "15-dtype-tolerance",
        &["compare", "run1.log", "run2.log", "--dtype-tolerance"],
    );
    r.expect(1);
    assert!(r.tbody(MM15).contains("1e-2"));
    assert!(r.tbody(MUL15).contains("1e-8"));
}
