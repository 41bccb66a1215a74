//! Sharded compares (`compare --shard`), `actdiff merge`, Parquet rows and
//! the Kubernetes manifest (issue 11), end to end against the binary.
//!
//! The central check: the parts of a 16-rank compare, merged, are the
//! report a single compare writes: every report file byte for byte
//! (index.html, summary.json, rank pages), the JUnit file, the terminal
//! summary and the exit status; with a clean pair of runs (exit 1) and
//! with a rank missing on one side plus an unreadable log (exit 2).
//! The Parquet and YAML checks use Python's duckdb and yaml from the venv
//! `scripts/py-venv.sh` makes under ~/.cache (created on first use; the
//! tests fail, saying so, if it cannot be made). Real Slurm: tests/slurm.rs.

#[path = "shard/common.rs"]
mod common;
#[path = "support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{actdiff, assert_same_report, gen, python, run};
use serde_json::Value;

/// A single compare and a 4-part compare + merge of `run1`/`run2` under
/// `dir`; asserts they agree in every output and returns the merged
/// report folder and the exit status.
fn single_and_merged(dir: &Path, run1: &Path, run2: &Path, extra: &[&str]) -> (PathBuf, i32) {
    let single = dir.join("single");
    let o1 = run(actdiff()
        .args(["compare"])
        .arg(run1)
        .arg(run2)
        .arg("-o")
        .arg(&single)
        .arg("--junit")
        .arg(dir.join("single.xml"))
        .args(extra));
    let mut parts = Vec::new();
    for k in 0..4 {
        let p = dir.join(format!("parts/part-{k}"));
        let o = run(actdiff()
            .args(["compare"])
            .arg(run1)
            .arg(run2)
            .args(["--shard", &format!("{k}/4"), "-q", "-o"])
            .arg(&p)
            .args(extra));
        assert_eq!(
            o.status.code(),
            Some(0),
            "a written part exits 0: {}",
            String::from_utf8_lossy(&o.stderr)
        );
        assert!(p.join("part.json").is_file());
        assert!(
            !p.join("index.html").exists() && !p.join("summary.json").exists(),
            "a part never looks like a whole report"
        );
        parts.push(p);
    }
    let merged = dir.join("merged");
    let o2 = run(actdiff()
        .arg("merge")
        .args(&parts)
        .arg("-o")
        .arg(&merged)
        .arg("--junit")
        .arg(dir.join("merged.xml")));
    assert_eq!(
        o1.status.code(),
        o2.status.code(),
        "exit status; merge stderr: {}",
        String::from_utf8_lossy(&o2.stderr)
    );
    let text = |o: &std::process::Output, d: &Path| {
        String::from_utf8_lossy(&o.stdout).replace(&d.display().to_string(), "REPORT")
    };
    assert_eq!(text(&o1, &single), text(&o2, &merged), "terminal summary");
    assert!(text(&o2, &merged).contains("REPORT/index.html"));
    assert_eq!(
        std::fs::read_to_string(dir.join("single.xml")).unwrap(),
        std::fs::read_to_string(dir.join("merged.xml")).unwrap(),
        "JUnit"
    );
    assert_same_report(&single, &merged);
    // Each rank in exactly one part.
    let mut ranks: Vec<u64> = parts
        .iter()
        .flat_map(|p| {
            let m: Value =
                serde_json::from_slice(&std::fs::read(p.join("part.json")).unwrap()).unwrap();
            m["results"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["rank"].as_u64().unwrap())
                .collect::<Vec<_>>()
        })
        .collect();
    let n = ranks.len();
    ranks.sort();
    ranks.dedup();
    assert_eq!(ranks.len(), n, "a rank in two parts");
    (merged, o2.status.code().unwrap())
}

fn summary(dir: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(dir.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn merged_parts_equal_a_single_compare() {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = gen(t.path(), 16, 1500, 7);
    let (merged, status) = single_and_merged(&t.path().join("clean"), &a, &b, &[]);
    assert_eq!(status, 1, "the generated runs diverge");
    let s = summary(&merged);
    assert_eq!(s["ranks"].as_array().unwrap().len(), 16);
    assert!(!s["groups"].as_array().unwrap().is_empty());

    // A rank only run 1 has, and a rank whose log is empty: exit 2, and the
    // merged report lists both exactly as the single one does.
    std::fs::remove_file(b.join("rank_5_activations.log")).unwrap();
    std::fs::write(a.join("rank_9_activations.log"), b"").unwrap();
    let (merged, status) = single_and_merged(&t.path().join("broken"), &a, &b, &["--rtol", "1e-3"]);
    assert_eq!(status, 2);
    let s = summary(&merged);
    assert_eq!(s["ranks_only1"], serde_json::json!([5]));
    assert_eq!(s["ranks_failed"][0]["rank"], 9);
}

/// The real 4-rank FSDP capture (`testdata/multirank_fsdp`): rank 1's
/// change reaches ranks 0, 2, 3 through a reduce-scatter, so the cross-rank
/// verdicts (the ranks a via-collective rank points to, rank groups, the
/// headline) are computed over parts that each hold one rank.
#[test]
fn merged_parts_of_a_real_capture_keep_the_cross_rank_verdicts() {
    let t = tempfile::tempdir().unwrap();
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/multirank_fsdp");
    let (merged, status) =
        single_and_merged(t.path(), &data.join("run_A"), &data.join("run_B"), &[]);
    assert_eq!(status, 1);
    let s = summary(&merged);
    assert_eq!(s["ranks"].as_array().unwrap().len(), 4);
    let text = s.to_string();
    assert!(
        text.contains("tok_embeddings/op_2_embedding"),
        "rank 1's entry"
    );
    // Ranks 0, 2, 3 (each compared in another part than rank 1) point to rank 1.
    for r in [0, 2, 3] {
        assert_eq!(
            s["ranks"][r]["root_causes"]["see_ranks"],
            serde_json::json!([1]),
            "rank {r}"
        );
    }
    assert_eq!(s["groups"].as_array().unwrap().len(), 2);
}

/// Four parts of a small run under `dir`, with `--rows` Parquet files.
fn parts(dir: &Path, extra: &[&str]) -> Vec<PathBuf> {
    let (a, b) = gen(dir, 8, 600, 3);
    (0..4)
        .map(|k| {
            let p = dir.join(format!("part-{k}"));
            std::fs::create_dir_all(&p).unwrap();
            let o = run(actdiff()
                .args(["compare"])
                .arg(&a)
                .arg(&b)
                .args(["--shard", &format!("{k}/4"), "-q", "-o"])
                .arg(&p)
                .arg("--rows")
                .arg(p.join("rows.parquet"))
                .args(extra));
            assert_eq!(
                o.status.code(),
                Some(0),
                "{}",
                String::from_utf8_lossy(&o.stderr)
            );
            p
        })
        .collect()
}

fn merge(parts: &[&Path], out: &Path) -> std::process::Output {
    run(actdiff().arg("merge").args(parts).arg("-o").arg(out))
}

#[test]
fn merge_refuses_missing_repeated_mismatched_and_unfinished_parts() {
    let t = tempfile::tempdir().unwrap();
    let p = parts(t.path(), &[]);
    let out = t.path().join("report");
    let refused = |o: std::process::Output, want: &[&str]| {
        let err = String::from_utf8_lossy(&o.stderr).into_owned();
        assert_eq!(o.status.code(), Some(2), "{err}");
        for w in want {
            assert!(err.contains(w), "`{w}` not in: {err}");
        }
        assert!(!out.join("summary.json").exists(), "nothing written: {err}");
    };
    refused(
        merge(&[&p[0], &p[1], &p[3]], &out),
        &["part 2/4 missing", "needs all 4 parts"],
    );
    refused(
        merge(&[&p[0], &p[1], &p[2], &p[3], &p[1]], &out),
        &["given twice", &p[1].display().to_string()],
    );
    let copy = t.path().join("copy-of-2");
    std::fs::create_dir_all(&copy).unwrap();
    std::fs::copy(p[2].join("part.json"), copy.join("part.json")).unwrap();
    refused(
        merge(&[&p[0], &p[1], &p[2], &p[3], &copy], &out),
        &["part 2/4 given twice", &copy.display().to_string()],
    );
    refused(
        merge(&[&p[0], &p[1], &p[2], &t.path().join("run1")], &out),
        &["not a part"],
    );

    // Part 3 again, with other options, then with other inputs.
    let (a, b) = (t.path().join("run1"), t.path().join("run2"));
    let other = t.path().join("other-3");
    let redo = |extra: &[&str], run2: &Path| {
        let o = run(actdiff()
            .args(["compare"])
            .arg(&a)
            .arg(run2)
            .args(["--shard", "3/4", "-q", "-o"])
            .arg(&other)
            .args(extra));
        assert_eq!(o.status.code(), Some(0));
    };
    redo(&["--rtol", "1e-3"], &b);
    refused(
        merge(&[&p[0], &p[1], &p[2], &other], &out),
        &["part 0/4", "part 3/4", "different options: rtol"],
    );
    let b2 = t.path().join("run2-changed");
    std::fs::create_dir_all(&b2).unwrap();
    for e in std::fs::read_dir(&b).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), b2.join(e.file_name())).unwrap();
    }
    redo(&[], &b2);
    refused(
        merge(&[&p[0], &p[1], &p[2], &other], &out),
        &["different inputs"],
    );
    // A part of another split.
    let o = run(actdiff()
        .args(["compare"])
        .arg(&a)
        .arg(&b)
        .args(["--shard", "3/5", "-q", "-o"])
        .arg(&other));
    assert_eq!(o.status.code(), Some(0));
    refused(
        merge(&[&p[0], &p[1], &p[2], &other], &out),
        &["different splits"],
    );

    // An interrupted part, and one whose compare failed.
    let m = p[1].join("part.json");
    let good = std::fs::read_to_string(&m).unwrap();
    assert!(good.contains(r#""status":{"state":"done"}"#));
    std::fs::write(
        &m,
        good.replace(r#""state":"done""#, r#""state":"running""#),
    )
    .unwrap();
    refused(
        merge(&[&p[0], &p[1], &p[2], &p[3]], &out),
        &["part 1/4", "did not finish"],
    );
    std::fs::write(
        &m,
        good.replace(
            r#""state":"done""#,
            r#""state":"failed","message":"disk full""#,
        ),
    )
    .unwrap();
    refused(
        merge(&[&p[0], &p[1], &p[2], &p[3]], &out),
        &["part 1/4", "failed: disk full"],
    );
    std::fs::write(&m, &good).unwrap();
    let o = merge(&[&p[3], &p[1], &p[0], &p[2]], &out);
    assert_eq!(
        o.status.code(),
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );
    assert!(out.join("index.html").is_file());
}

#[test]
fn shard_auto_reads_the_schedulers_environment() {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = gen(t.path(), 6, 200, 1);
    let part = |env: &[(&str, &str)], spec: &str, out: &str| {
        let mut c = actdiff();
        for k in [
            "SLURM_ARRAY_TASK_ID",
            "SLURM_ARRAY_TASK_COUNT",
            "SLURM_ARRAY_TASK_MIN",
            "SLURM_ARRAY_TASK_STEP",
            "JOB_COMPLETION_INDEX",
            "ACTDIFF_SHARD_COUNT",
        ] {
            c.env_remove(k);
        }
        c.envs(env.iter().copied());
        let o = run(c
            .args(["compare"])
            .arg(&a)
            .arg(&b)
            .args(["--shard", spec, "-q", "-o"])
            .arg(t.path().join(out)));
        let m: Option<Value> = std::fs::read(t.path().join(out).join("part.json"))
            .ok()
            .map(|b| serde_json::from_slice(&b).unwrap());
        (o, m)
    };
    let (_, m) = part(
        &[
            ("SLURM_ARRAY_TASK_ID", "3"),
            ("SLURM_ARRAY_TASK_COUNT", "3"),
            ("SLURM_ARRAY_TASK_MIN", "1"),
        ],
        "auto",
        "slurm",
    );
    let m = m.expect("a part");
    assert_eq!(m["shard"], serde_json::json!({"index": 2, "count": 3}));
    let (_, m) = part(&[("JOB_COMPLETION_INDEX", "1")], "auto/2", "k8s");
    assert_eq!(
        m.unwrap()["shard"],
        serde_json::json!({"index": 1, "count": 2})
    );
    let (_, m) = part(
        &[("JOB_COMPLETION_INDEX", "0"), ("ACTDIFF_SHARD_COUNT", "2")],
        "auto",
        "k8s-env",
    );
    assert_eq!(
        m.unwrap()["shard"],
        serde_json::json!({"index": 0, "count": 2})
    );
    let (o, m) = part(&[("JOB_COMPLETION_INDEX", "0")], "auto", "k8s-no-count");
    assert_eq!(o.status.code(), Some(2));
    assert!(m.is_none());
    assert!(String::from_utf8_lossy(&o.stderr).contains("ACTDIFF_SHARD_COUNT"));
    let (o, _) = part(&[], "auto", "nothing");
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("SLURM_ARRAY_TASK_ID"));
    let (o, _) = part(&[], "4/4", "bad");
    assert_eq!(o.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&o.stderr).contains("K counts from 0"));
}

/// The documented DuckDB queries (the `sql` block of the section "Parquet
/// rows and DuckDB" of `docs/scale-out.md`, which the README links to),
/// each without its `-- ` comment line, with `ROWS` for the glob: the
/// queries run here are the ones the docs print.
fn readme_queries() -> Vec<String> {
    let page =
        std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/scale-out.md"))
            .expect("docs/scale-out.md");
    let section = page
        .split_once("## Parquet rows and DuckDB")
        .expect("the Parquet section of docs/scale-out.md")
        .1;
    let block = section
        .split_once("```sql\n")
        .and_then(|(_, rest)| rest.split_once("```"))
        .expect("an sql block in the Parquet section")
        .0;
    let mut queries: Vec<String> = Vec::new();
    for line in block.lines() {
        if line.starts_with("-- ") {
            queries.push(String::new());
        } else if let Some(q) = queries.last_mut() {
            q.push_str(line);
            q.push('\n');
        }
    }
    queries
        .into_iter()
        .map(|q| {
            q.trim()
                .trim_end_matches(';')
                .replace("'parts/*/rows.parquet'", "ROWS")
        })
        .filter(|q| !q.is_empty())
        .collect()
}

#[test]
fn parquet_parts_read_as_one_table_by_duckdb_match_the_summary() {
    let py = python();
    let t = tempfile::tempdir().unwrap();
    let p = parts(t.path(), &[]);
    let out = t.path().join("report");
    let o = merge(&p.iter().map(|p| p.as_path()).collect::<Vec<_>>(), &out);
    assert_eq!(o.status.code(), Some(1));
    let s = summary(&out);
    let glob = format!("{}/part-*/rows.parquet", t.path().display());
    let queries = readme_queries();
    assert_eq!(queries.len(), 3, "the docs' three queries: {queries:?}");
    for q in &queries {
        assert!(q.contains("read_parquet(ROWS)"), "{q}");
    }
    let script = format!(
        r#"
import duckdb, json
con = duckdb.connect()
rows = {glob:?}
def q(sql):
    return con.execute(sql.replace("ROWS", repr(rows))).fetchall()
out = {{}}
out["status"] = dict(q("SELECT status, count(*) FROM read_parquet(ROWS) GROUP BY status"))
out["gating"] = q("SELECT count(*) FROM read_parquet(ROWS) WHERE gates")[0][0]
out["per_rank"] = {{str(r): n for r, n in q("SELECT rank, count(*) FROM read_parquet(ROWS) GROUP BY rank")}}
out["types"] = {{n: t for n, t, *_ in q("DESCRIBE SELECT * FROM read_parquet(ROWS)")}}
out["worst"] = q({worst:?})
out["first_cause"] = q({first:?})
out["over"] = len(q({over:?}))
out["over_check"] = q("SELECT count(*) FROM read_parquet(ROWS) WHERE diff_output_hash > 1e-4 OR diff_input_hashes > 1e-4 OR diff_l2_norm > 1e-4 OR diff_min > 1e-4 OR diff_max > 1e-4 OR diff_mean > 1e-4")[0][0]
out["first_per_rank"] = {{str(r): k for r, k in q("SELECT rank, arg_min(coalesce(key1, key2), row) FROM read_parquet(ROWS) WHERE cause IN ('origin', 'entry') GROUP BY rank")}}
print(json.dumps(out))
"#,
        worst = queries[0],
        first = queries[1],
        over = queries[2]
    );
    let o = run(Command::new(&py).arg("-c").arg(&script));
    assert!(
        o.status.success(),
        "duckdb: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let d: Value = serde_json::from_slice(&o.stdout).unwrap();
    for st in ["match", "diff", "only1", "only2", "truncated", "missing"] {
        assert_eq!(
            d["status"][st].as_u64().unwrap_or(0),
            s["counts"][st].as_u64().unwrap(),
            "{st} rows"
        );
    }
    assert_eq!(d["gating"], s["counts"]["gating"]);
    for r in s["ranks"].as_array().unwrap() {
        let total: u64 = ["match", "diff", "only1", "only2", "truncated", "missing"]
            .iter()
            .map(|k| r["counts"][k].as_u64().unwrap())
            .sum();
        assert_eq!(d["per_rank"][r["rank"].to_string()].as_u64(), Some(total));
        // The first cause per rank is summary.json's.
        if let Some(key) = r["root_causes"]["first_cause"]["row"]["key1"].as_str() {
            assert_eq!(
                d["first_per_rank"][r["rank"].to_string()],
                key,
                "rank {}",
                r["rank"]
            );
        }
    }
    for (col, ty) in [
        ("rank", "UINTEGER"),
        ("line1", "UBIGINT"),
        ("key1", "VARCHAR"),
        ("diff_l2_norm", "DOUBLE"),
        ("gates", "BOOLEAN"),
        ("cause", "VARCHAR"),
        // Arrow dictionaries in the writer, plain text in the file.
        ("status", "VARCHAR"),
        ("pass", "VARCHAR"),
        ("phase", "VARCHAR"),
        ("op", "VARCHAR"),
    ] {
        assert_eq!(d["types"][col], ty, "{col}");
    }
    assert!(!d["worst"].as_array().unwrap().is_empty());
    assert_eq!(d["over"], d["over_check"]);
    assert!(d["over"].as_u64().unwrap() > 0);
    // Each rank the second query lists has that first cause in
    // summary.json (its row's key, or the one-sided op's).
    let listed = d["first_cause"].as_array().unwrap();
    assert!(!listed.is_empty());
    for l in listed {
        assert_first_cause(&s, l, None);
    }
}

/// A line `[rank, step, key]` of the documented first-cause query names
/// that rank's first cause in `s` (summary.json), at `step` when given:
/// its row's key or its one-sided op's, of either run.
fn assert_first_cause(s: &Value, l: &Value, step: Option<u64>) {
    let r = s["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rank"] == l[0] && step.is_none_or(|st| r["step"] == st))
        .unwrap_or_else(|| panic!("rank of {l} in summary.json"));
    let f = &r["root_causes"]["first_cause"];
    let keys: Vec<&Value> = [&f["row"], &f["one_sided"][0]]
        .into_iter()
        .flat_map(|x| [&x["key1"], &x["key2"]])
        .collect();
    assert!(keys.contains(&&l[2]), "rank {}: {l} against {f}", l[0]);
}

/// The docs' second query on a step series' Parquet: `row` counts from 0
/// in each step, and the query ordered by `row` alone mixed steps (trial
/// 29: it listed nothing). Each rank's answer is its first cause at the
/// first diverging step, as summary.json says.
#[test]
fn the_documented_first_cause_query_reads_a_step_series() {
    let py = python();
    let t = tempfile::tempdir().unwrap();
    let (a, b) = (t.path().join("a"), t.path().join("b"));
    support::Run::of(
        actdiff()
            .arg("gen")
            .arg(&a)
            .arg(&b)
            .args([
                "--ops",
                "200",
                "--ranks",
                "4",
                "--seed",
                "3",
                "--perturb",
                "0.01",
            ])
            .args(["--steps", "4", "--diverge-at", "3"]),
        "",
    )
    .expect(0);
    let out = t.path().join("rep");
    let rows = t.path().join("rows.parquet");
    support::Run::of(
        actdiff()
            .arg("compare")
            .arg(&a)
            .arg(&b)
            .arg("-o")
            .arg(&out)
            .arg("-q")
            .arg("--rows")
            .arg(&rows),
        "",
    )
    .expect(1);
    let s = summary(&out);
    assert_eq!(s["first_diverging_step"], 3);
    let script = format!(
        "import duckdb, json\nprint(json.dumps(duckdb.connect().execute({q:?}.replace('ROWS', {r:?})).fetchall()))",
        q = readme_queries()[1],
        r = format!("'{}'", rows.display()),
    );
    let o = run(Command::new(&py).arg("-c").arg(&script));
    assert!(
        o.status.success(),
        "duckdb: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let d: Value = serde_json::from_slice(&o.stdout).unwrap();
    let listed = d.as_array().unwrap();
    assert_eq!(listed.len(), 4, "{d}");
    for l in listed {
        assert_eq!(l[1], 3, "{l}");
        assert_first_cause(&s, l, Some(3));
    }
}

#[test]
fn kubernetes_manifest_is_an_indexed_job_with_a_merge() {
    let py = python();
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/k8s-indexed-job.yaml");
    let o = run(Command::new(&py)
        .arg("-c")
        .arg("import sys, yaml, json; print(json.dumps(list(yaml.safe_load_all(open(sys.argv[1])))))")
        .arg(&path));
    assert!(
        o.status.success(),
        "{}: {}",
        path.display(),
        String::from_utf8_lossy(&o.stderr)
    );
    let docs: Value = serde_json::from_slice(&o.stdout).unwrap();
    let docs = docs.as_array().unwrap();
    assert_eq!(docs.len(), 2, "the compare Job and the merge Job");
    let job = &docs[0];
    assert_eq!(
        (job["apiVersion"].as_str(), job["kind"].as_str()),
        (Some("batch/v1"), Some("Job"))
    );
    let spec = &job["spec"];
    assert_eq!(spec["completionMode"], "Indexed");
    let n = spec["completions"].as_u64().expect("completions");
    assert!(spec["parallelism"].as_u64().expect("parallelism") <= n);
    let c = &spec["template"]["spec"]["containers"][0];
    let env_n = c["env"]
        .as_array()
        .unwrap()
        .iter()
        .find(|e| e["name"] == "ACTDIFF_SHARD_COUNT")
        .expect("ACTDIFF_SHARD_COUNT")["value"]
        .as_str()
        .unwrap()
        .parse::<u64>()
        .unwrap();
    assert_eq!(env_n, n, "ACTDIFF_SHARD_COUNT = completions");
    let cmd = c["args"].to_string();
    assert!(
        cmd.contains("--shard auto") && cmd.contains("JOB_COMPLETION_INDEX"),
        "{cmd}"
    );
    // Parts under a folder of this run, each cleared first.
    assert!(
        cmd.contains("/data/parts/$RUN_ID/part-$JOB_COMPLETION_INDEX") && cmd.contains("rm -rf"),
        "{cmd}"
    );
    let run_id = |c: &Value| {
        c["env"]
            .as_array()
            .unwrap()
            .iter()
            .find(|e| e["name"] == "RUN_ID")
            .map(|e| e["value"].clone())
    };
    let m = &docs[1];
    assert_eq!(m["kind"], "Job");
    let mc = &m["spec"]["template"]["spec"]["containers"][0];
    let cmd = mc["args"].to_string();
    assert!(
        cmd.contains("actdiff merge") && cmd.contains("part-*"),
        "{cmd}"
    );
    assert!(
        run_id(c).is_some() && run_id(c) == run_id(mc),
        "one RUN_ID in both Jobs"
    );
    assert!(
        cmd.contains("parts=/data/parts/$RUN_ID") && cmd.contains("$parts/part-*"),
        "{cmd}"
    );
    // The wait for the parts gives up (a killed pod's part stays running).
    assert!(
        cmd.contains("WAIT_SECONDS") && cmd.contains("deadline"),
        "{cmd}"
    );
    // It counts a part as finished when its part.json says done or
    // failed, or (a step series' part) its series-part.json exists: the
    // series' part.json files are in its step folders.
    let script = mc["args"][0].as_str().unwrap();
    let from = script.find("finished() {").expect("the finished() count");
    let to = from + script[from..].find("; };").expect("its end") + 4;
    let tmp = tempfile::TempDir::new().unwrap();
    let parts = tmp.path();
    for (part, file, text) in [
        ("part-0", "series-part.json", "{}"),
        ("part-1", "part.json", r#"{"state":"done"}"#),
        ("part-2", "part.json", r#"{"state":"failed"}"#),
        ("part-3", "part.json", r#"{"state":"running"}"#),
        ("part-4", "other.json", "{}"),
    ] {
        std::fs::create_dir_all(parts.join(part)).unwrap();
        std::fs::write(parts.join(part).join(file), text).unwrap();
    }
    let o = run(Command::new("sh")
        .arg("-c")
        .arg(format!("{} finished", &script[from..to]))
        .env("parts", parts));
    assert_eq!(String::from_utf8_lossy(&o.stdout).trim(), "3", "{script}");
}

/// The Slurm job script: the merge runs after the array whatever its tasks
/// exited (a failed part exits 2; the merge names it), and each task clears
/// its own part folder.
#[test]
fn slurm_script_merges_after_any_task_and_clears_its_part() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let script = std::fs::read_to_string(root.join("docs/slurm/actdiff.sbatch")).unwrap();
    let page = std::fs::read_to_string(root.join("docs/scale-out.md")).unwrap();
    for (name, text) in [("actdiff.sbatch", &script), ("docs/scale-out.md", &page)] {
        assert!(
            text.contains("--dependency=afterany:$jid") && !text.contains("--dependency=afterok"),
            "{name}"
        );
        assert!(
            text.contains("/fs/parts/$RUN_ID"),
            "{name}: a parts folder per run"
        );
    }
    let rm = script
        .find(r#"rm -rf -- "$part""#)
        .expect("the task clears its part");
    assert!(rm < script.find("exec \"$ACTDIFF\" compare").unwrap());
}

/// `actdiff compare RUN1 RUN2 --shard K/4 -q -o OUT EXTRA...` in `cwd`.
fn part_in(
    cwd: &Path,
    runs: (&Path, &Path),
    k: u32,
    out: &Path,
    extra: &[&str],
) -> std::process::Output {
    run(actdiff()
        .current_dir(cwd)
        .args(["compare"])
        .arg(runs.0)
        .arg(runs.1)
        .args(["--shard", &format!("{k}/4"), "-q", "-o"])
        .arg(out)
        .args(extra))
}

fn stderr(o: &std::process::Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A part stopped by a bad option file (rules, config, override, a bad
/// `./actdiff.toml`) is a failed part, even over an earlier part's folder:
/// part.json says failed with the message, no report files and no earlier
/// rows file stay, and the merge names it (and only it).
#[test]
fn a_part_failing_on_an_input_error_is_a_failed_part() {
    let t = tempfile::tempdir().unwrap();
    let p = parts(t.path(), &[]);
    let (a, b) = (t.path().join("run1"), t.path().join("run2"));
    let runs = (a.as_path(), b.as_path());
    std::fs::write(t.path().join("bad.rules"), "foo bar\n").unwrap();
    let bad_toml = t.path().join("cwd");
    std::fs::create_dir_all(&bad_toml).unwrap();
    std::fs::write(bad_toml.join("actdiff.toml"), "garbage [[\n").unwrap();
    let cases: [(&Path, &[&str], &str); 4] = [
        (t.path(), &["--rules", "bad.rules"], "bad.rules"),
        (t.path(), &["--config", "nonexist.toml"], "nonexist.toml"),
        (t.path(), &["--override", "nonexist.txt"], "nonexist.txt"),
        (&bad_toml, &[], "actdiff.toml"),
    ];
    for (cwd, extra, file) in cases {
        // Over a done part with a rows file each time.
        let o = part_in(
            t.path(),
            runs,
            1,
            &p[1],
            &["--rows", &p[1].join("rows.parquet").display().to_string()],
        );
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
        assert!(p[1].join("rows.parquet").is_file());
        let o = part_in(cwd, runs, 1, &p[1], extra);
        assert_eq!(o.status.code(), Some(2), "{extra:?}");
        assert!(stderr(&o).contains(file), "{extra:?}: {}", stderr(&o));
        let m: Value =
            serde_json::from_slice(&std::fs::read(p[1].join("part.json")).unwrap()).unwrap();
        assert_eq!(m["status"]["state"], "failed", "{extra:?}");
        assert!(m["status"]["message"].as_str().unwrap().contains(file));
        assert_eq!(
            common::files(&p[1]),
            vec!["part.json".to_string()],
            "{extra:?}: only part.json stays"
        );
        let out = t.path().join("report");
        let o = merge(&[&p[0], &p[1], &p[2], &p[3]], &out);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{err}");
        assert!(
            err.contains(&format!(
                "part 1/4 ({}): its compare failed: ",
                p[1].display()
            )) && err.contains(file),
            "{err}"
        );
        assert!(
            !err.contains("different") && !err.contains("not a part"),
            "no noise: {err}"
        );
        assert!(!out.join("summary.json").exists());
    }
}

/// The merge checks each part's rank files before writing anything: a
/// missing result page or key index is exit 2 naming the part and the file,
/// and no summary.json is written.
#[test]
fn merge_checks_every_rank_file_before_writing() {
    let t = tempfile::tempdir().unwrap();
    let p = parts(t.path(), &[]);
    let all: Vec<&Path> = p.iter().map(|p| p.as_path()).collect();
    for file in ["rank1-page1.html", "rank0-page1.html", "keys-0.js"] {
        let holder = p.iter().find(|d| d.join(file).is_file()).expect(file);
        let k = p.iter().position(|d| d == holder).unwrap();
        let kept = t.path().join("kept");
        std::fs::rename(holder.join(file), &kept).unwrap();
        let out = t.path().join(format!("out-{file}"));
        let o = merge(&all, &out);
        let err = stderr(&o);
        assert_eq!(o.status.code(), Some(2), "{file}: {err}");
        assert!(
            err.contains(&format!("part {k}/4 ({})", holder.display())) && err.contains(file),
            "{err}"
        );
        assert!(!out.join("summary.json").exists() && !out.join("index.html").exists());
        std::fs::rename(&kept, holder.join(file)).unwrap();
    }
    let o = merge(&all, &t.path().join("whole"));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
}

/// A failed merge into the folder of an earlier green merge leaves no
/// report there, and its JUnit file has an error naming the problem.
#[test]
fn a_failed_merge_removes_the_earlier_report_and_writes_a_junit_error() {
    let t = tempfile::tempdir().unwrap();
    let p = parts(t.path(), &[]);
    let out = t.path().join("gm2");
    let junit = out.join("junit.xml");
    let merge_junit = |parts: &[&PathBuf]| {
        run(actdiff()
            .arg("merge")
            .args(parts)
            .arg("-o")
            .arg(&out)
            .arg("--junit")
            .arg(&junit)
            .arg("-q"))
    };
    let o = merge_junit(&[&p[0], &p[1], &p[2], &p[3]]);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    assert!(out.join("index.html").is_file() && out.join("rank0-page1.html").exists());
    std::fs::write(out.join("notes.txt"), "mine").unwrap();
    let o = merge_junit(&[&p[0], &p[1], &p[3]]);
    assert_eq!(o.status.code(), Some(2));
    for f in common::files(&out) {
        assert!(
            !actdiff::report::files::is_report_file(&f),
            "{f} stayed after a failed merge"
        );
    }
    assert!(out.join("notes.txt").is_file(), "other files stay");
    let x = std::fs::read_to_string(&junit).unwrap();
    assert!(
        x.contains("<error") && x.contains("part 2/4 missing") && !x.contains("<failure"),
        "{x}"
    );
}

/// A merge of parts whose logs changed since (a log grown or removed) is
/// exit 2 naming the part, the file and both sizes.
#[test]
fn merge_refuses_parts_of_logs_that_changed_since() {
    let t = tempfile::tempdir().unwrap();
    let p = parts(t.path(), &[]);
    let all: Vec<&Path> = p.iter().map(|p| p.as_path()).collect();
    let log = t.path().join("run2/rank_3_activations.log");
    let bytes = std::fs::metadata(&log).unwrap().len();
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    std::io::Write::write_all(&mut f, b"\n\n").unwrap();
    let o = merge(&all, &t.path().join("out"));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("the logs changed since part 0/4")
            && err.contains(&format!(
                "{} (recorded {bytes} bytes, now {} bytes)",
                log.display(),
                bytes + 2
            )),
        "{err}"
    );
    std::fs::remove_file(t.path().join("run1/rank_0_activations.log")).unwrap();
    let err = stderr(&merge(&all, &t.path().join("out")));
    assert!(
        err.contains("rank_0_activations.log (recorded") && err.contains("now missing"),
        "{err}"
    );
}

/// A log written again with the same size (7 printed digits print alike
/// from run to run) is a changed log too: by its modification time, after
/// every part (the logs on disk are not those compared) and between
/// parts (the parts compared different logs). Trial 21 H3: the merge took
/// such parts, exit 1, with an answer no input gives.
#[test]
fn merge_refuses_parts_of_logs_written_again_with_the_same_size() {
    let t = tempfile::tempdir().unwrap();
    let p = parts(t.path(), &[]);
    let all: Vec<&Path> = p.iter().map(|p| p.as_path()).collect();
    let log = t.path().join("run2/rank_3_activations.log");
    let then = std::fs::metadata(&log).unwrap().modified().unwrap();
    let rewrite = |when: std::time::SystemTime| {
        let f = std::fs::OpenOptions::new().write(true).open(&log).unwrap();
        f.set_modified(when).unwrap();
    };
    rewrite(then - std::time::Duration::from_secs(60));
    let o = merge(&all, &t.path().join("out"));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("the logs changed since part 0/4")
            && err.contains("the same size, but written again since)"),
        "{err}"
    );
    // Part 3 again, on the log as it is now: the parts disagree.
    let o = run(actdiff()
        .args(["compare"])
        .arg(t.path().join("run1"))
        .arg(t.path().join("run2"))
        .args(["--shard", "3/4", "-q", "-o"])
        .arg(&p[3])
        .arg("--rows")
        .arg(p[3].join("rows.parquet")));
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    rewrite(then);
    let err = stderr(&merge(&all, &t.path().join("out")));
    assert!(
        err.contains(
            "was written again between the parts (the same size, another modification time)"
        ),
        "{err}"
    );
}

/// A part rerun without `--rows` removes the rows file its folder's
/// earlier part recorded (and no other file), and a merge of parts with
/// and without rows is exit 2 naming them.
#[test]
fn parts_with_and_without_rows_do_not_merge() {
    let t = tempfile::tempdir().unwrap();
    let p = parts(t.path(), &[]);
    let (a, b) = (t.path().join("run1"), t.path().join("run2"));
    let m: Value = serde_json::from_slice(&std::fs::read(p[2].join("part.json")).unwrap()).unwrap();
    assert_eq!(
        m["rows"].as_str().map(PathBuf::from),
        Some(std::path::absolute(p[2].join("rows.parquet")).unwrap())
    );
    std::fs::write(p[2].join("other.parquet"), "mine").unwrap();
    let o = part_in(t.path(), (&a, &b), 2, &p[2], &[]);
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(
        !p[2].join("rows.parquet").exists(),
        "the stale rows file is gone"
    );
    assert!(p[2].join("other.parquet").is_file(), "other files stay");
    let o = merge(
        &p.iter().map(|p| p.as_path()).collect::<Vec<_>>(),
        &t.path().join("out"),
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(
        err.contains("with and without --rows")
            && err.contains(&format!("part 2/4 ({}) did not", p[2].display())),
        "{err}"
    );
}

/// `--rank-map` and `--layer-offset` are judged over the whole run: a part
/// not holding those ranks does not warn that they did nothing.
#[test]
fn parts_judge_rank_options_over_the_whole_run() {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = gen(t.path(), 8, 200, 5);
    let opts = ["--rank-map", "0:1,1:0", "--layer-offset", "run2:1=4"];
    for k in 0..4 {
        let o = part_in(
            t.path(),
            (&a, &b),
            k,
            &t.path().join(format!("p{k}")),
            &opts,
        );
        assert_eq!(o.status.code(), Some(0));
        let err = stderr(&o);
        assert!(
            !err.contains("compared nothing") && !err.contains("applies to no compared rank"),
            "part {k}: {err}"
        );
    }
    // A map that pairs nothing still warns, in every part.
    let o = part_in(
        t.path(),
        (&a, &b),
        0,
        &t.path().join("p0"),
        &["--rank-map", "0:99"],
    );
    assert!(
        stderr(&o).contains("--rank-map 0:99 compared nothing"),
        "{}",
        stderr(&o)
    );
}

/// Two runs without a rank in common: exit 2 with a line on stderr saying
/// so, even with -q.
#[test]
fn no_rank_in_both_runs_says_so() {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = gen(t.path(), 2, 50, 1);
    std::fs::remove_file(a.join("rank_1_activations.log")).unwrap();
    std::fs::remove_file(b.join("rank_0_activations.log")).unwrap();
    let junit = t.path().join("j.xml");
    let o = run(actdiff()
        .args(["compare"])
        .arg(&a)
        .arg(&b)
        .arg("-o")
        .arg(t.path().join("rep"))
        .arg("--junit")
        .arg(&junit)
        .arg("-q"));
    assert_eq!(o.status.code(), Some(2));
    let err = stderr(&o);
    assert!(
        err.contains("no rank is in both runs") && err.contains("--rank-map"),
        "{err}"
    );
    // JUnit has the input error as an <error>, beside the one-sided
    // ranks' failures (it had failures only: a CI reading errors saw none).
    let x = std::fs::read_to_string(&junit).unwrap();
    assert!(x.contains("errors=\"1\""), "{x}");
    assert!(
        x.contains(
            "<error message=\"exit status 2: nothing compared: no rank is present in both runs\""
        ),
        "{x}"
    );
}

/// When writing the merged index fails half-way (a part's first result
/// page, whose heatmap the index embeds, is there but is not one: the checks before writing see a file), no
/// summary.json claiming the earlier verdict and no index.html are left:
/// summary.json says the error, with exit status 2.
#[test]
fn a_merge_failing_while_writing_leaves_no_green_summary() {
    let t = tempfile::tempdir().unwrap();
    let p = parts(t.path(), &[]);
    let holder = p
        .iter()
        .find(|d| d.join("rank1-page1.html").is_file())
        .unwrap();
    std::fs::write(holder.join("rank1-page1.html"), "not a result page").unwrap();
    let out = t.path().join("out");
    let o = merge(&p.iter().map(|p| p.as_path()).collect::<Vec<_>>(), &out);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains("rank1-page1.html"), "{err}");
    assert!(!out.join("index.html").exists());
    let s = summary(&out);
    assert_eq!(s["exit_status"], 2);
    assert!(s["input_errors"].to_string().contains("rank1-page1.html"));
}

/// Parts given one `--rows` file (a relative `--rows rows.parquet` run
/// from one folder) overwrite each other's rows: the merge is exit 2
/// naming the parts and the file, never green with rows missing.
#[test]
fn parts_sharing_one_rows_file_do_not_merge() {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = gen(t.path(), 8, 200, 5);
    let p: Vec<PathBuf> = (0..4).map(|k| t.path().join(format!("part-{k}"))).collect();
    for (k, part) in p.iter().enumerate() {
        let o = part_in(
            t.path(),
            (&a, &b),
            k as u32,
            part,
            &["--rows", "rows.parquet"],
        );
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    let o = merge(
        &p.iter().map(|p| p.as_path()).collect::<Vec<_>>(),
        &t.path().join("out"),
    );
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    let shared = std::path::absolute(t.path().join("rows.parquet")).unwrap();
    assert!(
        err.contains(&format!("part 0/4 ({})", p[0].display()))
            && err.contains(&format!(
                "all wrote their rows to {}: each part overwrote the one before",
                shared.display()
            )),
        "{err}"
    );
    assert!(
        !t.path().join("out/summary.json").exists() || {
            let s: Value =
                serde_json::from_slice(&std::fs::read(t.path().join("out/summary.json")).unwrap())
                    .unwrap();
            s["exit_status"] == 2
        }
    );
}

/// Parts compared with relative paths merge from any folder (a Slurm or
/// Kubernetes merge job starting elsewhere): `part.json` records the
/// inputs absolute. A version-1 `part.json` (relative paths, an older
/// actdiff) whose logs are missing from the merge's folder says so.
#[test]
fn parts_with_relative_inputs_merge_from_another_folder() {
    let t = tempfile::tempdir().unwrap();
    let (x, deep) = (t.path().join("x"), t.path().join("y/z"));
    std::fs::create_dir_all(&x).unwrap();
    std::fs::create_dir_all(&deep).unwrap();
    gen(t.path(), 3, 200, 5);
    let runs = (Path::new("../run1"), Path::new("../run2"));
    for k in 0..4 {
        let o = part_in(&x, runs, k, Path::new(&format!("p{k}")), &[]);
        assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    }
    let parts: Vec<String> = (0..4).map(|k| format!("../../x/p{k}")).collect();
    let merge_in = |cwd: &Path| {
        run(actdiff()
            .current_dir(cwd)
            .arg("merge")
            .args(&parts)
            .args(["-o", "out", "-q"]))
    };
    let o = merge_in(&deep);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    let merged = summary(&deep.join("out"));
    assert_eq!(merged["ranks"].as_array().unwrap().len(), 3);
    // The runs are named so that they open from the merge's folder: the
    // compare's `../run1` is another folder from `y/z`.
    let run1 = std::fs::canonicalize(t.path().join("run1")).unwrap();
    assert_eq!(merged["path1"].as_str().unwrap(), run1.to_str().unwrap());
    let m: Value = serde_json::from_slice(&std::fs::read(x.join("p0/part.json")).unwrap()).unwrap();
    let path = m["inputs"]["run1"]["path"].as_str().unwrap();
    assert!(
        Path::new(path).is_absolute() && !path.contains(".."),
        "{path}"
    );
    // The same parts as an older actdiff wrote them: version 1, paths as
    // given.
    let make_v1 = |k: usize| {
        let file = x.join(format!("p{k}/part.json"));
        let mut m: Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
        m["version"] = 1.into();
        for side in ["run1", "run2"] {
            let r = &mut m["inputs"][side];
            r["path"] = format!("../{side}").into();
            for l in r["logs"].as_array_mut().unwrap() {
                let name = Path::new(l["file"].as_str().unwrap()).file_name().unwrap();
                l["file"] = format!("../{side}/{}", name.to_str().unwrap()).into();
            }
        }
        std::fs::write(&file, serde_json::to_vec(&m).unwrap()).unwrap();
    };
    // One version-1 part among version-2 ones: from its compare's folder
    // they are the same inputs (it was refused as "different inputs:
    // run1 is /…/run1 in one and ../run1 in the other"); from another
    // folder the refusal says the older part may be why.
    make_v1(3);
    let mixed = run(actdiff()
        .current_dir(&x)
        .arg("merge")
        .args((0..4).map(|k| format!("p{k}")))
        .args(["-o", "mixed", "-q"]));
    assert_eq!(mixed.status.code(), Some(1), "{}", stderr(&mixed));
    let err = stderr(&merge_in(&deep));
    assert!(
        err.contains("different inputs") && err.contains("its part.json is from an older actdiff"),
        "{err}"
    );
    for k in 0..3 {
        make_v1(k);
    }
    let err = stderr(&merge_in(&deep));
    assert!(
        err.contains("now missing") && err.contains("its part.json is from an older actdiff"),
        "{err}"
    );
    // From the folder its compare ran in, a version-1 part still merges.
    let o = run(actdiff()
        .current_dir(&x)
        .arg("merge")
        .args((0..4).map(|k| format!("p{k}")))
        .args(["-o", "out", "-q"]));
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    // Where the compare's spelling holds, it is kept, as a compare says it.
    assert_eq!(summary(&x.join("out"))["path1"], "../run1");
}

/// A part whose run is not found fails: exit 2, `part.json` says failed
/// with the reason, said once on stderr; the merge names the part's own
/// error. A new user's `actdiff compare A NOPE --shard 1/3` exited 0 with
/// a "done" part of nothing compared (green in a Slurm array), and the
/// merge blamed "different inputs".
#[test]
fn a_part_whose_run_is_missing_fails() {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = gen(t.path(), 2, 40, 3);
    let missing = t.path().join("nope");
    let p0 = t.path().join("p0");
    let o = run(actdiff()
        .arg("compare")
        .arg(&a)
        .arg(&missing)
        .args(["--shard", "0/2", "-q", "-o"])
        .arg(&p0));
    assert_eq!(o.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(
        stderr.matches("no such file or folder").count(),
        1,
        "{stderr}"
    );
    let m: Value = serde_json::from_slice(&std::fs::read(p0.join("part.json")).unwrap()).unwrap();
    assert_eq!(m["status"]["state"], "failed", "{m}");
    assert!(
        m["status"]["message"]
            .as_str()
            .unwrap()
            .contains("no such file or folder"),
        "{m}"
    );
    let p1 = t.path().join("p1");
    let o = run(actdiff()
        .arg("compare")
        .arg(&a)
        .arg(&b)
        .args(["--shard", "1/2", "-q", "-o"])
        .arg(&p1));
    assert_eq!(o.status.code(), Some(0));
    let o = run(actdiff()
        .arg("merge")
        .arg(&p0)
        .arg(&p1)
        .arg("-o")
        .arg(t.path().join("m")));
    assert_eq!(o.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(stderr.contains("its compare failed"), "{stderr}");
}

/// Parts an earlier actdiff wrote (a rank's key index in its own
/// `rank{N}-keys.js`, its fields in another order; its heatmap on a page of
/// its own, `rank{N}-overview.html`) merge as today's do: the merged key
/// indexes, index and summary are those of today's parts.
#[test]
fn parts_an_earlier_actdiff_wrote_merge_as_todays() {
    let t = tempfile::tempdir().unwrap();
    let p = parts(t.path(), &[]);
    let all: Vec<&Path> = p.iter().map(|p| p.as_path()).collect();
    let today = t.path().join("today");
    assert_eq!(merge(&all, &today).status.code(), Some(1));
    // Part 1 as an earlier actdiff wrote it.
    let old = &p[1];
    let mut converted = 0;
    for e in std::fs::read_dir(old).unwrap() {
        let path = e.unwrap().path();
        let name = path.file_name().unwrap().to_str().unwrap().to_string();
        if name.starts_with("keys-") {
            for line in std::fs::read_to_string(&path).unwrap().lines() {
                let json = &line["actdiffKeys(".len()..line.len() - 2];
                // serde_json's map: the fields in alphabetical order, as
                // the earlier writer's `json!` gave them.
                let v: Value = serde_json::from_str(json).unwrap();
                let rank = v["rank"].as_u64().unwrap();
                assert!(!serde_json::to_string(&v).unwrap().starts_with("{\"rank\""));
                std::fs::write(
                    old.join(format!("rank{rank}-keys.js")),
                    format!("actdiffKeys({v});\n"),
                )
                .unwrap();
                converted += 1;
            }
            std::fs::remove_file(&path).unwrap();
        } else if let Some(rank) = name
            .strip_prefix("rank")
            .and_then(|n| n.strip_suffix("-page1.html"))
        {
            let page = std::fs::read_to_string(&path).unwrap();
            let (before, rest) = page.split_once("<!--actdiff:heatmap-->").unwrap();
            let (heat, after) = rest.split_once("<!--/actdiff:heatmap-->").unwrap();
            std::fs::write(&path, format!("{before}{after}")).unwrap();
            std::fs::write(
                old.join(format!("rank{rank}-overview.html")),
                format!("<!DOCTYPE html>\n<!--actdiff:heatmap-->{heat}<!--/actdiff:heatmap-->\n"),
            )
            .unwrap();
        }
    }
    assert!(converted > 0, "part 1 holds ranks with pages");
    let mixed = t.path().join("mixed");
    let o = merge(&all, &mixed);
    assert_eq!(o.status.code(), Some(1), "{}", stderr(&o));
    for name in common::files(&today) {
        if name.starts_with("keys-") || name == "index.html" || name == "summary.json" {
            assert_eq!(
                std::fs::read(today.join(&name)).unwrap(),
                std::fs::read(mixed.join(&name)).unwrap(),
                "{name}"
            );
        }
    }
    assert!(!common::files(&mixed)
        .iter()
        .any(|n| n.ends_with("-keys.js") && n.starts_with("rank")));
    // A legacy key index of another rank: an error naming it.
    let k = common::files(old)
        .into_iter()
        .find(|n| n.ends_with("-keys.js"))
        .unwrap();
    let other = serde_json::json!({
        "rank": 999, "per": 500, "page": ["a", "b"], "anchor": "x", "rows": null, "keys": ""
    });
    std::fs::write(old.join(&k), format!("actdiffKeys({other});\n")).unwrap();
    let o = merge(&all, &t.path().join("bad"));
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{err}");
    assert!(err.contains(&k) && err.contains("rank 999's"), "{err}");
}
