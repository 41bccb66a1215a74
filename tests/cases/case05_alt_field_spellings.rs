//! Case 05-alt-field-spellings (`../shared/cases/05-alt-field-spellings/README.md`).

use super::common::*;

const WQ05: &str = "layers.0.attention.wq/op_0_mm";

/// Case 05-alt-field-spellings: `actdiff compare run1.log run2.log -o out`:
/// a warning lists the 3 ignored `Call ...` lines of run2, and run2 has no
/// Shape anywhere, so a schema warning names Shape as run1-only.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case05_unknown_call_lines_and_one_sided_shape_are_warned() {
    let r = in_case(
        "05-alt-field-spellings",
        &["compare", "run1.log", "run2.log"],
    );
    r.stderr_has("run2.log").stderr_has("unknown field");
    for f in ["Call type", "Call index", "Call depth"] {
        r.stderr_has(f);
    }
    r.stderr_has("run1-only: Shape");
    assert_eq!(
        r.rank(0)["run1"]["one_sided_fields"],
        serde_json::json!(["Shape"])
    );
}

/// Case 05-alt-field-spellings: `actdiff compare run1.log run2.log -o out`:
/// both sides parse to Output hash NaN and Input hashes [64, +Inf], the row
/// matches (NaN equals NaN), flagged non-finite; exit 0.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case05_second_writer_spelling_matches_the_main_one() {
    let r = in_case(
        "05-alt-field-spellings",
        &["compare", "run1.log", "run2.log"],
    );
    r.expect(0);
    let row = r.row_is(WQ05, "match", Some("exact"));
    assert_note(&row, "non-finite");
}

/// Case 05-alt-field-spellings: `actdiff compare run2.log run3.log -o out`:
/// run3's Output hash is one 2-component tuple value; NaN against it is a
/// difference; exit 1. Variants: run3 against itself with the tuple's second
/// component changed in its 10th digit (a match: one value within
/// tolerance), and against the same two numbers written as two hashes (a
/// count mismatch, 1 vs 2).
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case05_tuple_hash_is_one_value() {
    let case = "05-alt-field-spellings";
    let r = in_case(case, &["compare", "run2.log", "run3.log"]);
    r.expect(1);
    let row = r.row_is(WQ05, "diff", Some("exact"));
    assert_note(&row, "non-finite in run2.log only");

    let run3 = case_text(case, "run3.log");
    let tmp = TempDir::new().unwrap();
    write(tmp.path(), "run3.log", run3.as_bytes());
    write(
        tmp.path(),
        "close.log",
        run3.replace("3735928559]", "3735928560]").as_bytes(),
    );
    actdiff(tmp.path(), &["compare", "run3.log", "close.log"])
        .expect(0)
        .row_is(WQ05, "match", Some("exact"));
    write(
        tmp.path(),
        "two.log",
        run3.replace(
            "Output hashes: <root>=[1.25e+01, 3735928559]",
            "Output hashes: a=1.25e+01, b=3735928559",
        )
        .as_bytes(),
    );
    let r = actdiff(tmp.path(), &["compare", "run3.log", "two.log"]);
    r.expect(1);
    assert_note(&r.row(WQ05), "output hash count 1 vs 2");
}

/// Case 05-alt-field-spellings: `actdiff compare run1.log
/// run2_calls_only.log -o out`: a block without any comparable field is an
/// input error naming the file ("run2: no comparable fields"); exit 2.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case05_calls_only_block_is_an_input_error() {
    let r = in_case(
        "05-alt-field-spellings",
        &["compare", "run1.log", "run2_calls_only.log"],
    );
    r.expect(2);
    r.stderr_has("run2_calls_only.log")
        .stderr_has("run2: no comparable fields");
}

/// Case 05-alt-field-spellings (variants): other non-finite spellings parse
/// as the same values. In the main spelling (run1.log with its `inf` or
/// `nan` respelled) each variant matches run1.log; `-inf` spellings match
/// each other; `inf` against `-inf` is a difference. In the second writer's
/// spelling (run2.log respelled) each variant matches run2.log.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case05_other_non_finite_spellings() {
    let case = "05-alt-field-spellings";
    let run1 = case_text(case, "run1.log");
    let run2 = case_text(case, "run2.log");
    let tmp = TempDir::new().unwrap();
    write(tmp.path(), "run1.log", run1.as_bytes());
    write(tmp.path(), "run2.log", run2.as_bytes());
    let check = |base: &str, text: String, want: i32, what: &str| {
        write(tmp.path(), "v.log", text.as_bytes());
        let r = actdiff(tmp.path(), &["compare", base, "v.log"]);
        assert_eq!(r.code, want, "{what}:\n{}", r.context());
        let status = if want == 0 { "match" } else { "diff" };
        assert_eq!(r.row(WQ05)["status"], status, "{what}");
    };
    let inputs = "Input hashes: 6.400000e+01, inf";
    for sp in [
        "+inf",
        "Infinity",
        "\"Infinity\"",
        "+Infinity",
        "INF",
        "\"+Infinity\"",
    ] {
        let v = run1.replace(inputs, &format!("Input hashes: 6.400000e+01, {sp}"));
        check("run1.log", v, 0, sp);
    }
    for sp in ["NaN", "\"NaN\"", "NAN", "-nan"] {
        let v = run1.replace("Output hash: nan", &format!("Output hash: {sp}"));
        check("run1.log", v, 0, sp);
    }
    let minus = run1.replace(inputs, "Input hashes: 6.400000e+01, -inf");
    write(tmp.path(), "minus.log", minus.as_bytes());
    for sp in ["-Infinity", "\"-Infinity\"", "-INF"] {
        let v = run1.replace(inputs, &format!("Input hashes: 6.400000e+01, {sp}"));
        check("minus.log", v, 0, sp);
    }
    check("run1.log", minus.clone(), 1, "inf vs -inf");

    let second = "mat2=\"Infinity\"";
    for sp in [
        "mat2=inf",
        "mat2=+inf",
        "mat2=Infinity",
        "mat2=\"+Infinity\"",
    ] {
        check("run2.log", run2.replace(second, sp), 0, sp);
    }
    for sp in ["<root>=nan", "<root>=NaN", "<root>=\"nan\""] {
        check("run2.log", run2.replace("<root>=\"NaN\"", sp), 0, sp);
    }
    check(
        "run2.log",
        run2.replace(second, "mat2=\"-Infinity\""),
        1,
        "+Inf vs -Inf",
    );
}
