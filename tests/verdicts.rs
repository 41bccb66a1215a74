//! Verdicts on the real captures of `../shared/testdata`: one cause per
//! change (print-precision-aware origins, entries grouped by the input they
//! read), the headline is the first gating row, the source rank is named,
//! and the largest difference names a gating field.
//!
//! Without `../shared` these tests are reported as *ignored* (see build.rs),
//! never as passed.

#[path = "support/mod.rs"]
mod support;

use std::path::PathBuf;

use serde_json::Value;
use support::Run;

fn shared() -> PathBuf {
    PathBuf::from(env!("ACTDIFF_SHARED_DIR"))
}

/// `actdiff compare A B --format json` on a scenario of `shared/testdata`
/// (or any two paths under `shared`): (summary.json, terminal text of a
/// second run without `--format json`).
fn compare(a: &str, b: &str) -> (Value, String) {
    let (a, b) = (shared().join(a), shared().join(b));
    let dir = tempfile::tempdir().unwrap();
    let json = Run::of(
        support::actdiff()
            .args(["compare", "--format", "json", "-o"])
            .arg(dir.path())
            .arg(&a)
            .arg(&b),
        dir.path(),
    );
    let json: Value = serde_json::from_str(&json.stdout).expect("summary.json on stdout");
    let text = Run::of(
        support::actdiff()
            .args(["compare", "-o"])
            .arg(dir.path())
            .arg(&a)
            .arg(&b),
        dir.path(),
    );
    (json, text.stdout)
}

fn scenario(s: &str) -> (Value, String) {
    compare(
        &format!("testdata/{s}/run_A"),
        &format!("testdata/{s}/run_B"),
    )
}

fn key(r: &Value) -> &str {
    r["key1"].as_str().or(r["key2"].as_str()).unwrap_or("")
}

#[test]
#[cfg_attr(
    not(has_shared),
    ignore = "../shared/testdata absent: verdicts not checked"
)]
fn bug_layer2_has_one_origin_the_injected_epsilon() {
    let (s, text) = scenario("bug_layer2");
    let rc = &s["ranks"][0]["root_causes"];
    assert_eq!(
        key(&rc["first_cause"]["row"]),
        "layers.2.ffn_norm/op_1_add_"
    );
    assert_eq!(rc["first_cause"]["kind"], "origin");
    let origins = rc["causes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|c| c["kind"] == "origin")
        .count();
    assert_eq!(origins, 1, "{}", rc["causes"]);
    assert!(
        rc["cause_count"].as_u64().unwrap() <= 3,
        "{}",
        rc["cause_count"]
    );
    // Every diverging row is counted under a cause or is an unsynced collective.
    let k = &rc["kinds"];
    assert!(k["inherited_below_print"].as_u64().unwrap() > 0);
    let counted: u64 = rc["causes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| 1 + c["inherited"].as_u64().unwrap() + c["reads"].as_u64().unwrap())
        .sum();
    assert_eq!(counted, s["ranks"][0]["counts"]["diff"].as_u64().unwrap());
    assert!(text.contains("rank 0 diverges first at `layers.2.ffn_norm/op_1_add_`"));
    assert!(text.contains("first divergence: layers.2.ffn_norm/op_1_add_"));
    // The largest difference is a gating field (hashes by default).
    let f = rc["largest_diff_field"].as_str().unwrap();
    assert!(f == "Output hash" || f == "Input hashes", "{f}");
}

#[test]
#[cfg_attr(
    not(has_shared),
    ignore = "../shared/testdata absent: verdicts not checked"
)]
fn multirank_fsdp_names_the_source_rank() {
    let (s, text) = scenario("multirank_fsdp");
    let ranks = s["ranks"].as_array().unwrap();
    let r1 = &ranks[1]["root_causes"];
    assert_eq!(
        key(&r1["first_cause"]["row"]),
        "tok_embeddings/op_2_embedding"
    );
    assert!(r1["cause_count"].as_u64().unwrap() <= 3);
    assert_eq!(r1["via_collective_only"], false);
    for r in [0, 2, 3] {
        let rc = &ranks[r]["root_causes"];
        assert_eq!(rc["via_collective_only"], true, "rank {r}");
        assert_eq!(rc["see_ranks"], serde_json::json!([1]), "rank {r}");
        assert!(rc["first_cause"].is_null(), "rank {r}");
        // The headline row gates: never the unsynced all-gather.
        let fd = &ranks[r]["first_divergence"];
        assert_eq!(key(fd), "<none>/op_6_lerp_", "rank {r}");
        assert!(key(&ranks[r]["first_nongating_difference"]).contains("_allgather_base_"));
    }
    let groups = s["groups"].as_array().unwrap();
    assert_eq!(groups.len(), 2, "{groups:?}");
    assert_eq!(groups[0]["ranks"], serde_json::json!([0, 2, 3]));
    assert!(text.starts_with("actdiff: "));
    let second = text.lines().nth(1).unwrap();
    assert_eq!(
        second,
        "rank 1 diverges first at `tok_embeddings/op_2_embedding` (a differing input: input 1), \
         and ranks 0, 2 and 3 receive that change through the gradient reduce-scatter."
    );
}

#[test]
#[cfg_attr(
    not(has_shared),
    ignore = "../shared/testdata absent: verdicts not checked"
)]
fn other_single_changes_give_few_causes() {
    // optimizer: lr 1e-3 vs 2e-3 at the captured step; the weight-decay
    // multiply of each parameter group's first update is an origin.
    // Several causes, all in the optimizer step: the terminal says why.
    let (s, text) = scenario("optimizer");
    let rc = &s["ranks"][0]["root_causes"];
    assert_eq!(key(&rc["first_cause"]["row"]), "<none>/op_6_mul_");
    assert!(rc["cause_count"].as_u64().unwrap() <= 3);
    assert!(rc["cause_count"].as_u64().unwrap() > 1);
    assert!(
        text.contains("the forward and backward agree; only the optimizer step differs"),
        "{text}"
    );
    // dtype_shape_variety: run B overflows float16 in the probe.
    let (s, text) = scenario("dtype_shape_variety");
    assert!(!text.contains("only the optimizer step differs"), "{text}");
    let rc = &s["ranks"][0]["root_causes"];
    assert_eq!(key(&rc["first_cause"]["row"]), "probe/op_0_mul");
    assert!(rc["cause_count"].as_u64().unwrap() <= 3);
    // No change: no cause, no first divergence line.
    for (a, b) in [
        ("testdata/identical/run_A", "testdata/identical/run_B"),
        (
            "capture/ref/torch-2.13.0/eager",
            "capture/ref/torch-2.15.0/eager",
        ),
        (
            "capture/ref/torch-2.13.0/adamw",
            "capture/ref/torch-2.15.0/adamw",
        ),
    ] {
        let (s, text) = compare(a, b);
        assert_eq!(s["ranks"][0]["root_causes"]["cause_count"], 0, "{a}");
        assert!(!text.contains("first divergence"), "{a}: {text}");
    }
}

/// ac_vs_noac: run B checkpoints every block, and its 80 rows only in B
/// are the backward pass's recomputation of each block's forward under
/// short module names. Their statuses stay the reference's (80 traced-only
/// rows, the conformance suite checks them), but they do not gate: every
/// row both runs have matches, so checkpointing changed nothing numeric
/// and the compare exits 0, saying why in a warning, the terminal and the
/// counts (`recomputed`). No other scenario has it.
#[test]
#[cfg_attr(
    not(has_shared),
    ignore = "../shared/testdata absent: verdicts not checked"
)]
fn activation_checkpointing_in_one_run_is_named_and_does_not_gate() {
    let (s, text) = scenario("ac_vs_noac");
    assert_eq!(s["exit_status"], 0, "{text}");
    let c = &s["ranks"][0]["counts"];
    assert_eq!(
        (&c["only2"], &c["recomputed"], &c["gating"]),
        (&80.into(), &80.into(), &0.into()),
        "{c}"
    );
    let warnings: Vec<&str> = s["warnings"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|w| w.as_str())
        .collect();
    assert!(
        warnings.iter().any(|w| w.starts_with(
            "rank 0: 80 rows only run2 has repeat its forward ops in the backward phase"
        ) && w
            .contains("activation checkpointing's recomputation in run2 only; shown, not gating")),
        "{warnings:?}"
    );
    assert!(
        text.contains(
            "80 rows recomputed in backward in one run only, by activation checkpointing or a layout gathering parameters again (shown, not gating)"
        ),
        "{text}"
    );
    for other in [
        "bug_layer2",
        "optimizer",
        "multirank_fsdp",
        "dtype_shape_variety",
    ] {
        let (s, _) = scenario(other);
        let text = s["warnings"].to_string();
        assert!(!text.contains("recomputation"), "{other}: {text}");
    }
}
