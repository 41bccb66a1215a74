//! Case 21-low-precision-dtypes (`../shared/cases/21-low-precision-dtypes/README.md`).

use super::common::*;

const W1_21: &str = "layers.0.feed_forward.w1/op_0_mm";
const ADDS21: [&str; 3] = [
    "layers.0.attention/op_0_add",
    "layers.1.attention/op_0_add",
    "layers.2.attention/op_0_add",
];

/// Case 21-low-precision-dtypes: `actdiff compare run1.log run2.log -o out`:
/// `w1` differs in dtype (bfloat16 → float8_e4m3fn) with its stats still
/// compared, not counted as a shape mismatch; the three adds differ in
/// shape, summarised "3 of 3 shape mismatches share dim0 6 vs 5"; no parse
/// errors on the fp8 token; exit 1.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case21_dtype_change_and_shared_shape_offset() {
    let r = in_case(
        "21-low-precision-dtypes",
        &["compare", "run1.log", "run2.log"],
    );
    r.expect(1);
    let w1 = r.row(W1_21);
    assert_note(&w1, "dtype bfloat16 → float8_e4m3fn");
    assert!(
        w1["diffs"].get("L2 norm").is_some(),
        "stats not compared: {w1}"
    );
    assert!(
        !has_note(&w1, "shape ["),
        "a dtype change shown as a shape change: {w1}"
    );
    for k in ADDS21 {
        let row = r.row_is(k, "diff", Some("exact"));
        assert_note(&row, "shape [6, 64] → [5, 64]");
    }
    r.stdout_has("3 of 3 shape mismatches share dim0 6 vs 5");
    let rk = r.rank(0);
    assert_eq!(
        rk["shape_mismatches"],
        serde_json::json!({"count": 3, "common": "dim0 6 vs 5", "common_count": 3})
    );
    // The dtype change is summarised beside the shapes (an autocast run
    // against an fp32 one said no word of dtype in the terminal).
    r.stdout_has("dtype changed in 1 paired row: bfloat16 → float8_e4m3fn");
    assert_eq!(
        rk["dtype_changes"],
        serde_json::json!({"count": 1, "common": "bfloat16 → float8_e4m3fn", "common_count": 1})
    );
    assert_eq!(rk["run2"]["warnings"], serde_json::json!([]));
}

/// Case 21-low-precision-dtypes: `actdiff compare run1.log run2.log -o out`:
/// row 1 has the status "dtype differs (bfloat16 → float8_e4m3fn)" and the
/// adds "shape differs".
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case21_dtype_and_shape_changes_have_their_own_status() {
    let r = in_case(
        "21-low-precision-dtypes",
        &["compare", "run1.log", "run2.log"],
    );
    r.expect(1);
    let told = |k: &str| format!("{}\n{}", r.row(k)["status"], r.tbody(k));
    assert!(told(W1_21).contains("dtype differs"), "{}", told(W1_21));
    for k in ADDS21 {
        assert!(told(k).contains("shape differs"), "{}", told(k));
    }
}

/// Case 21-low-precision-dtypes: `actdiff compare run1.log run2.log -o out
/// --dtype-tolerance`: w1's stats are compared under the looser of the two
/// dtypes' tolerances (float8_e4m3fn's, not bfloat16's).
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case21_dtype_change_uses_the_looser_tolerance() {
    let r = in_case(
        "21-low-precision-dtypes",
        &["compare", "run1.log", "run2.log", "--dtype-tolerance"],
    );
    r.expect(1);
    let tol = r.row(W1_21)["tolerance"].as_str().unwrap().to_string();
    assert!(
        tol.contains("float8_e4m3fn") || tol.contains("1.25e-1"),
        "{tol}"
    );
}

/// Case 21-low-precision-dtypes (Notes, variants): the other low-precision
/// dtype tokens `float8_e5m2`, `float8_e4m3fnuz`, `float4_e2m1fn_x2` in
/// run2's `w1` parse the same way: no warning, a dtype note; exit 1.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case21_other_low_precision_dtype_tokens() {
    let case = "21-low-precision-dtypes";
    let tmp = TempDir::new().unwrap();
    write(tmp.path(), "run1.log", &case_file(case, "run1.log"));
    let run2 = case_text(case, "run2.log");
    for tok in ["float8_e5m2", "float8_e4m3fnuz", "float4_e2m1fn_x2"] {
        write(
            tmp.path(),
            "v.log",
            run2.replace("torch.float8_e4m3fn", &format!("torch.{tok}"))
                .as_bytes(),
        );
        let r = actdiff(tmp.path(), &["compare", "run1.log", "v.log"]);
        r.expect(1);
        assert_note(&r.row(W1_21), &format!("dtype bfloat16 → {tok}"));
        assert_eq!(
            r.rank(0)["run2"]["warnings"],
            serde_json::json!([]),
            "{tok}"
        );
        assert_eq!(r.rank(0)["shape_mismatches"]["count"], 3, "{tok}");
    }
}
