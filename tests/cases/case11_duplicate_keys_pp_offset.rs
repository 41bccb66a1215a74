//! Case 11-duplicate-keys-pp-offset (`../shared/cases/11-duplicate-keys-pp-offset/README.md`).

use super::common::*;

/// Case 11-duplicate-keys-pp-offset: `actdiff compare dup.log one_op.log -o
/// out`: "duplicate key layers.0.attention.wq/op_0_mm at lines 4 and 8";
/// exit 2.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case11_duplicate_key_is_an_input_error() {
    let r = in_case(
        "11-duplicate-keys-pp-offset",
        &["compare", "dup.log", "one_op.log"],
    );
    r.expect(2)
        .stderr_has("duplicate key layers.0.attention.wq/op_0_mm at lines 4 and 8")
        .stderr_has("dup.log");
}

/// Case 11-duplicate-keys-pp-offset: `actdiff compare dup.log one_op.log -o
/// out --allow-duplicates`: both occurrences kept; the first (hash 10) pairs
/// with one_op.log's row and differs (float32 vs bfloat16, hash 10 vs 20),
/// the second (hash 11) is only in run1; exit 1.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case11_allow_duplicates_pairs_by_occurrence() {
    let r = in_case(
        "11-duplicate-keys-pp-offset",
        &["compare", "dup.log", "one_op.log", "--allow-duplicates"],
    );
    r.expect(1);
    let rows = r.rows();
    assert_eq!(rows.len(), 2, "{rows:#?}");
    assert_eq!(rows[0]["status"], "diff");
    assert_eq!(rows[0]["key1"], WQ);
    assert_eq!(rows[0]["key2"], WQ);
    assert_note(&rows[0], "dtype float32 → bfloat16");
    assert_eq!(rows[1]["status"], "only1");
    assert_eq!(rows[1]["key1"], WQ);
    let html = r.html();
    let first = tbody(&html, "rank0-row0").unwrap();
    assert!(
        first.contains("1.000000e+01") && first.contains("2.000000e+01"),
        "{first}"
    );
    let second = tbody(&html, "rank0-row1").unwrap();
    assert!(second.contains("1.100000e+01"), "{second}");
    assert_eq!(
        r.rank(0)["run1"]["duplicate_keys"],
        serde_json::json!([[WQ, [4, 8]]])
    );
}

/// Case 11-duplicate-keys-pp-offset: `actdiff compare
/// run1/rank_0_activations.log run2/rank_1_activations.log -o out
/// --layer-offset run2:1=4`: run2's `layers.0` is read as `layers.4`, the
/// `wo` ops pair exactly and match, both raw keys shown; exit 0.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case11_layer_offset_pairs_pipeline_stage_keys() {
    let r = in_case(
        "11-duplicate-keys-pp-offset",
        &[
            "compare",
            "run1/rank_0_activations.log",
            "run2/rank_1_activations.log",
            "--layer-offset",
            "run2:1=4",
        ],
    );
    r.expect(0);
    let row = r.row_is("layers.4.attention.wo/op_0_mm", "match", Some("exact"));
    assert_eq!(row["key2"], "layers.0.attention.wo/op_0_mm");
    let html = r.tbody("layers.4.attention.wo/op_0_mm");
    assert!(html.contains("layers.4.attention.wo/op_0_mm"), "{html}");
    assert!(html.contains("layers.0.attention.wo/op_0_mm"), "{html}");
}

/// Case 11-duplicate-keys-pp-offset: `actdiff compare
/// run1/rank_0_activations.log run2/rank_1_activations.log -o out`: without
/// the offset the ops pair through the stats pass, with a hint that the keys
/// differ only in the layer index (4 vs 0) suggesting `--layer-offset`; exit 0.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case11_layer_index_hint_without_offset() {
    let r = in_case(
        "11-duplicate-keys-pp-offset",
        &[
            "compare",
            "run1/rank_0_activations.log",
            "run2/rank_1_activations.log",
        ],
    );
    r.expect(0);
    let row = r.row_is("layers.4.attention.wo/op_0_mm", "match", Some("stats"));
    assert_note(&row, "layer index (4 vs 0)");
    assert_note(&row, "--layer-offset");
}
