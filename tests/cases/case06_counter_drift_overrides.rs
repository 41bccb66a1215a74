//! Case 06-counter-drift-overrides (`../shared/cases/06-counter-drift-overrides/README.md`).

use super::common::*;

const W2_OP2: &str = "layers.0.feed_forward.w2/op_2_mm";
const W2_OP3: &str = "layers.0.feed_forward.w2/op_3_mm";
const MUL7: &str = "feed_forward/op_7_mul";

/// The pairs of case 06 that do not depend on overrides: fuzzy, by Shape.
fn case06_mm_pairs(r: &Run) {
    let a = r.row_is(W2_OP2, "match", Some("fuzzy"));
    assert_eq!(a["key2"], "layers.0.feed_forward.w2/op_1_mm");
    let b = r.row_is(W2_OP3, "match", Some("fuzzy"));
    assert_eq!(b["key2"], "layers.0.feed_forward.w2/op_0_mm");
}

/// Case 06-counter-drift-overrides: `actdiff compare run1.log run2.log -o
/// out --override overrides.txt`: `op_2_mm`↔`op_1_mm` and `op_3_mm`↔`op_0_mm`
/// pair fuzzy by Shape and match, the recompute `mul` pairs through the
/// override and matches, the `layers.9` override is an "unused override"
/// warning; exit 0.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case06_shape_tie_break_and_text_overrides() {
    let r = in_case(
        "06-counter-drift-overrides",
        &[
            "compare",
            "run1.log",
            "run2.log",
            "--override",
            "overrides.txt",
        ],
    );
    r.expect(0);
    case06_mm_pairs(&r);
    let mul = r.row_is(MUL7, "match", Some("override"));
    assert_eq!(mul["key2"], "layers.2.feed_forward/op_3_mul");
    assert_eq!(r.rows().len(), 3, "an override consumes both rows");
    r.stderr_has("unused override")
        .stderr_has("layers.9.attention/op_0_mm");
    assert!(!r.stderr.contains("error"), "{}", r.context());
    assert_eq!(
        r.rank(0)["unused_overrides"],
        serde_json::json!([["layers.9.attention/op_0_mm", "layers.9.attention/op_0_mm"]])
    );
}

/// Case 06-counter-drift-overrides: `actdiff compare run1.log run2.log -o
/// out --override overrides.json`: the same result as overrides.txt, or exit
/// 2 naming overrides.json; never read as zero overrides.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case06_json_overrides_same_as_text() {
    let case = "06-counter-drift-overrides";
    let r = in_case(
        case,
        &[
            "compare",
            "run1.log",
            "run2.log",
            "--override",
            "overrides.json",
        ],
    );
    // The case allows refusing the JSON form with exit 2 naming the file;
    // actdiff reads it, so anything but the text form's result fails here.
    r.expect(0);
    let txt = in_case(
        case,
        &[
            "compare",
            "run1.log",
            "run2.log",
            "--override",
            "overrides.txt",
        ],
    );
    txt.expect(0);
    assert_eq!(r.rows(), txt.rows());
    r.row_is(MUL7, "match", Some("override"));
    r.stderr_has("unused override");
    assert_eq!(r.stderr, txt.stderr, "the same warnings as overrides.txt");
    assert_eq!(
        r.rank(0)["unused_overrides"],
        txt.rank(0)["unused_overrides"]
    );
    assert_eq!(r.rank(0)["counts"], txt.rank(0)["counts"]);
    assert_eq!(r.rank(0)["strategy_counts"], txt.rank(0)["strategy_counts"]);
}

/// Case 06-counter-drift-overrides: `actdiff compare run1.log run2.log -o
/// out`: without overrides the `mm` pairs are the same and the `mul` ops
/// pair through the stats pass; exit 0, no unused-override warning.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case06_without_overrides_mul_pairs_by_stats() {
    let r = in_case(
        "06-counter-drift-overrides",
        &["compare", "run1.log", "run2.log"],
    );
    r.expect(0);
    case06_mm_pairs(&r);
    let mul = r.row_is(MUL7, "match", Some("stats"));
    assert_eq!(mul["key2"], "layers.2.feed_forward/op_3_mul");
    assert!(!r.stderr.contains("unused override"), "{}", r.context());
}

/// Case 06-counter-drift-overrides (variants): override files that cannot
/// be read as overrides are input errors naming the file, never zero
/// overrides: truncated JSON, a number or a list as the run-2 key.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case06_bad_override_files_are_input_errors() {
    let case = "06-counter-drift-overrides";
    let tmp = TempDir::new().unwrap();
    write(tmp.path(), "run1.log", &case_file(case, "run1.log"));
    write(tmp.path(), "run2.log", &case_file(case, "run2.log"));
    for (i, body) in [
        "{\"feed_forward/op_7_mul\": ",
        "{\"feed_forward/op_7_mul\": 3}",
        "{\"feed_forward/op_7_mul\": [\"layers.2.feed_forward/op_3_mul\"]}",
    ]
    .iter()
    .enumerate()
    {
        let name = format!("bad{i}.json");
        write(tmp.path(), &name, body.as_bytes());
        let r = actdiff(
            tmp.path(),
            &["compare", "run1.log", "run2.log", "--override", &name],
        );
        r.expect(2).stderr_has(&name);
    }
}
