//! `--format json`, `summary.json` and `--junit`: snapshot and parse-back
//! tests on the project's own real logs in `testdata/` (always present).

use assert_cmd::Command;
use serde_json::Value;

fn compare_json(run1: &str, run2: &str, extra: &[&str]) -> (i32, Value, tempfile::TempDir) {
    let out = tempfile::tempdir().unwrap();
    let o = Command::cargo_bin("actdiff")
        .unwrap()
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["compare", run1, run2, "--format", "json", "-o"])
        .arg(out.path().join("report"))
        .args(extra)
        .output()
        .unwrap();
    let v: Value = serde_json::from_slice(&o.stdout).expect("stdout is one JSON document");
    let file: Value =
        serde_json::from_slice(&std::fs::read(out.path().join("report/summary.json")).unwrap())
            .unwrap();
    assert_eq!(v, file, "--format json prints exactly summary.json");
    (o.status.code().unwrap(), v, out)
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

/// Reads a JUnit file back: (tests, failures, [(case name, failure message)]).
fn read_junit(path: &std::path::Path) -> (u64, u64, Vec<(String, Option<String>)>) {
    use quick_xml::events::Event;
    let text = std::fs::read_to_string(path).unwrap();
    let mut r = quick_xml::Reader::from_str(&text);
    let (mut tests, mut failures, mut cases) = (0, 0, Vec::new());
    let attr = |e: &quick_xml::events::BytesStart, name: &str| -> String {
        e.attributes()
            .filter_map(|a| a.ok())
            .find(|a| a.key.as_ref() == name.as_bytes())
            .map(|a| {
                a.normalized_value(quick_xml::XmlVersion::Implicit1_0)
                    .unwrap()
                    .into_owned()
            })
            .unwrap_or_default()
    };
    loop {
        match r.read_event().unwrap() {
            Event::Start(e) | Event::Empty(e) => match e.name().as_ref() {
                b"testsuite" => {
                    tests = attr(&e, "tests").parse().unwrap();
                    failures = attr(&e, "failures").parse().unwrap();
                }
                b"testcase" => cases.push((attr(&e, "name"), None)),
                b"failure" => cases.last_mut().unwrap().1 = Some(attr(&e, "message")),
                _ => {}
            },
            Event::Eof => break,
            _ => {}
        }
    }
    (tests, failures, cases)
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
    let (tests, failures, cases) = read_junit(&junit);
    assert_eq!((tests, failures), (4, 4));
    assert_eq!(cases.len(), 4);
    assert_eq!(cases[1].0, "rank 1");
    assert!(cases[1]
        .1
        .as_deref()
        .unwrap()
        .contains("tok_embeddings/op_2_embedding"));

    let junit2 = d.path().join("pass.xml");
    let (code, _, _d2) = compare_json(
        "testdata/bug_layer2/run_A",
        "testdata/bug_layer2/run_A",
        &["--junit", junit2.to_str().unwrap()],
    );
    assert_eq!(code, 0);
    let (tests, failures, cases) = read_junit(&junit2);
    assert_eq!((tests, failures), (1, 0));
    assert_eq!(cases, vec![("rank 0".to_string(), None)]);
}
