//! `--format json`, `summary.json` and `--junit`: snapshot and parse-back
//! tests on the project's own real logs in `testdata/` (always present).

#[path = "support/mod.rs"]
mod support;

use serde_json::Value;
use support::{read_junit, Run};

/// Runs `actdiff compare RUN1 RUN2 --format json -o TMP/report EXTRA...`
/// from the repository's root: (exit status, the JSON printed, the run).
fn compare_json(run1: &str, run2: &str, extra: &[&str]) -> (i32, Value, Run) {
    let tmp = tempfile::tempdir().unwrap();
    let report = tmp.path().join("report");
    let r = Run::of(
        support::actdiff()
            .current_dir(env!("CARGO_MANIFEST_DIR"))
            .args(["compare", run1, run2, "--format", "json", "-o"])
            .arg(&report)
            .args(extra),
        &report,
    )
    .holding(tmp);
    let v: Value = serde_json::from_str(&r.stdout).expect("stdout is one JSON document");
    assert_eq!(v, r.summary(), "--format json prints exactly summary.json");
    (r.code, v, r)
}

/// Drops what legitimately changes between machines and versions.
fn stable(mut v: Value) -> Value {
    v["tool"] = Value::String("actdiff <version>".into());
    v
}

#[test]
fn json_result_of_bug_layer2_snapshot() {
    let (code, v, _d) = compare_json(
        "testdata/bug_layer2/run_A",
        "testdata/bug_layer2/run_B",
        &[],
    );
    assert_eq!(code, 1);
    assert_eq!(v["schema_version"], 1);
    let r = &v["ranks"][0];
    assert_eq!(r["counts"]["match"], 163);
    assert_eq!(r["counts"]["diff"], 102);
    assert_eq!(
        r["root_causes"]["first_cause"]["row"]["key1"],
        "layers.2.ffn_norm/op_1_add_"
    );
    assert_eq!(r["root_causes"]["first_cause"]["kind"], "origin");
    insta::assert_json_snapshot!("bug_layer2_summary", stable(v));
}

#[test]
fn json_result_of_multirank_fsdp_names_causes_per_rank() {
    let (code, v, _d) = compare_json(
        "testdata/multirank_fsdp/run_A",
        "testdata/multirank_fsdp/run_B",
        &[],
    );
    assert_eq!(code, 1);
    let ranks = v["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 4);
    let first = |r: usize| {
        let c = &ranks[r]["root_causes"]["first_cause"];
        (
            c["row"]["key1"].as_str().unwrap().to_string(),
            c["kind"].as_str().unwrap().to_string(),
        )
    };
    assert_eq!(
        first(1),
        ("tok_embeddings/op_2_embedding".into(), "entry".into())
    );
    for r in [0, 2, 3] {
        let rc = &ranks[r]["root_causes"];
        let causes = rc["causes"].as_array().unwrap();
        assert!(
            !causes.iter().any(|c| {
                let k = c["row"]["key1"].as_str().unwrap();
                c["kind"] == "origin"
                    && (k.contains("_allgather_base_") || k.contains("_reduce_scatter_base_"))
            }),
            "rank {r}: an unsynced collective is never an origin"
        );
        // The change arrives from rank 1 through the gradient reduce-scatter:
        // no cause of the rank's own (this pinned 87 'entries' before).
        assert!(rc["first_cause"].is_null(), "rank {r}");
        assert_eq!(rc["via_collective_only"], true, "rank {r}");
        assert_eq!(rc["see_ranks"], serde_json::json!([1]), "rank {r}");
        assert_eq!(causes[0]["kind"], "via_collective", "rank {r}");
        assert_eq!(causes[0]["row"]["key1"], "<none>/op_6_lerp_", "rank {r}");
    }
    // Unsynced collective rows are shown but do not gate.
    assert!(v["counts"]["unsynced"].as_u64().unwrap() > 0);
    insta::assert_json_snapshot!("multirank_fsdp_groups", v["groups"]);
}

#[test]
fn identical_runs_give_exit_0_and_no_causes() {
    let (code, v, _d) = compare_json(
        "testdata/bug_layer2/run_A",
        "testdata/bug_layer2/run_A",
        &[],
    );
    assert_eq!(code, 0);
    assert_eq!(v["exit_status"], 0);
    let rc = &v["ranks"][0]["root_causes"];
    assert!(rc["first_cause"].is_null());
    assert_eq!(rc["cause_count"], 0);
    assert!(v["ranks"][0]["first_divergence"].is_null());
}

#[test]
fn junit_lists_one_case_per_rank_with_origins() {
    let d = tempfile::tempdir().unwrap();
    let junit = d.path().join("junit.xml");
    let (code, _, _d) = compare_json(
        "testdata/multirank_fsdp/run_A",
        "testdata/multirank_fsdp/run_B",
        &["--junit", junit.to_str().unwrap()],
    );
    assert_eq!(code, 1);
    let j = read_junit(&junit);
    assert_eq!((j.tests, j.failures), (4, 4));
    assert_eq!(j.cases.len(), 4);
    assert_eq!(j.cases[1].0, "rank 1");
    let (tag, _, msg) = j.cases[1].1.as_ref().unwrap();
    assert_eq!(tag, "failure");
    assert!(msg.contains("tok_embeddings/op_2_embedding"), "{msg}");

    let junit2 = d.path().join("pass.xml");
    let (code, _, _d2) = compare_json(
        "testdata/bug_layer2/run_A",
        "testdata/bug_layer2/run_A",
        &["--junit", junit2.to_str().unwrap()],
    );
    assert_eq!(code, 0);
    let j = read_junit(&junit2);
    assert_eq!((j.tests, j.failures), (1, 0));
    assert_eq!(j.cases, vec![("rank 0".to_string(), None)]);
}
