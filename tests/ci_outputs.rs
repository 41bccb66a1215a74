//! CI outputs agree (issue 15 item 5): for exits 0, 1, 2 and 3, the JUnit
//! file, `summary.json`, the index and the terminal tell the same story as
//! the exit status, list every rank of both runs, and are written even when
//! an input error stops the comparison before any rank is read. On the
//! project's own logs in `testdata/` (always present).

#[path = "support/mod.rs"]
mod support;

use std::ops::Deref;
use std::path::{Path, PathBuf};

use serde_json::Value;
use support::{read_junit, testdata, JCase, Junit, Run};

/// What one `actdiff compare` wrote: its run ([`Run`]), and the JUnit
/// file, `summary.json` and `index.html` it must write whatever the exit
/// status.
struct Ci {
    run: Run,
    junit: Junit,
    summary: Value,
    index: String,
}

impl Deref for Ci {
    type Target = Run;
    fn deref(&self) -> &Run {
        &self.run
    }
}

/// Runs `actdiff compare ARGS -o TMP/report --junit TMP/junit.xml`.
fn compare(args: &[&std::ffi::OsStr]) -> Ci {
    let tmp = tempfile::tempdir().unwrap();
    let report = tmp.path().join("report");
    let junit = tmp.path().join("junit.xml");
    let run = Run::of(
        support::actdiff()
            .arg("compare")
            .args(args)
            .arg("-o")
            .arg(&report)
            .arg("--junit")
            .arg(&junit),
        &report,
    )
    .holding(tmp);
    Ci {
        junit: read_junit(&junit),
        summary: run.summary(),
        index: run.index(),
        run,
    }
}

fn os(s: &Path) -> &std::ffi::OsStr {
    s.as_os_str()
}

impl Ci {
    /// Every output agrees with the exit status.
    fn agrees(&self) {
        assert_eq!(self.summary["exit_status"], self.code, "summary.json");
        assert!(
            self.index
                .contains(&format!("<b>exit status {}</b>", self.code)),
            "index.html"
        );
        assert!(
            self.stdout
                .contains(&format!("(exit status {})", self.code)),
            "terminal: {}",
            self.stdout
        );
        let passed = self.junit.failures == 0 && self.junit.errors == 0;
        assert_eq!(passed, self.code == 0, "JUnit passes exactly on exit 0");
    }
    fn case(&self, name: &str) -> &JCase {
        self.junit.case(name)
    }
}

/// A run folder with ranks 0..n copied from bug_layer2's run (rank 0's
/// log as every rank), into `dir/name`.
fn run_folder(dir: &Path, name: &str, ranks: &[u32], from: &str) -> PathBuf {
    let d = dir.join(name);
    std::fs::create_dir_all(&d).unwrap();
    let log = std::fs::read(testdata(from).join("rank_0_activations.log")).unwrap();
    for r in ranks {
        std::fs::write(d.join(format!("rank_{r}_activations.log")), &log).unwrap();
    }
    d
}

#[test]
fn exit_0_junit_passes_every_rank() {
    let a = testdata("bug_layer2/run_A");
    let r = compare(&[os(&a), os(&a)]);
    assert_eq!(r.code, 0, "{}", r.stderr);
    r.agrees();
    assert_eq!(r.junit.cases, vec![("rank 0".to_string(), None)]);
}

#[test]
fn exit_1_junit_fails_diverging_and_one_sided_ranks() {
    let tmp = tempfile::tempdir().unwrap();
    let a = run_folder(tmp.path(), "a", &[0, 1, 2], "bug_layer2/run_A");
    let b = run_folder(tmp.path(), "b", &[0, 1, 3], "bug_layer2/run_B");
    let r = compare(&[os(&a), os(&b)]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    r.agrees();
    let names: Vec<&str> = r.junit.cases.iter().map(|c| c.0.as_str()).collect();
    assert_eq!(
        names,
        ["rank 0", "rank 1", "rank 2", "rank 3"],
        "every rank of both runs"
    );
    let (tag, ty, msg) = r.case("rank 0").1.clone().unwrap();
    assert_eq!(
        (tag.as_str(), ty.as_str()),
        ("failure", "NumericDivergence")
    );
    assert!(msg.contains("layers.2.ffn_norm/op_1_add_"), "{msg}");
    let (tag, ty, msg) = r.case("rank 3").1.clone().unwrap();
    assert_eq!((tag.as_str(), ty.as_str()), ("failure", "OneSidedRank"));
    assert!(msg.contains("only in b"), "{msg}");
    assert_eq!(r.summary["ranks_only1"], serde_json::json!([2]));
    assert_eq!(r.summary["ranks_only2"], serde_json::json!([3]));
}

#[test]
fn exit_2_an_empty_rank_log_is_an_error_case_with_the_reason() {
    let tmp = tempfile::tempdir().unwrap();
    let a = run_folder(tmp.path(), "a", &[0, 1, 2], "bug_layer2/run_A");
    let b = run_folder(tmp.path(), "b", &[0, 1, 2], "bug_layer2/run_A");
    std::fs::write(b.join("rank_1_activations.log"), b"").unwrap();
    let r = compare(&[os(&a), os(&b)]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    r.agrees();
    assert_eq!(r.junit.tests, 3);
    assert_eq!(r.junit.errors, 1, "{:?}", r.junit.cases);
    let (tag, ty, msg) = r.case("rank 1").1.clone().unwrap();
    assert_eq!((tag.as_str(), ty.as_str()), ("error", "InputError"));
    assert!(msg.contains("run2 is empty (0 bytes)"), "{msg}");
    assert!(r.case("rank 0").1.is_none() && r.case("rank 2").1.is_none());
    assert_eq!(r.summary["ranks_failed"][0]["rank"], 1);
    assert!(r.index.contains("input error"));
    assert!(r.stdout.contains("rank 1: not compared:"), "{}", r.stdout);
}

#[test]
fn exit_2_a_missing_run_still_writes_junit_with_one_error() {
    let tmp = tempfile::tempdir().unwrap();
    let a = testdata("bug_layer2/run_A");
    let missing = tmp.path().join("no-such-run");
    let r = compare(&[os(&a), os(&missing)]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    r.agrees();
    assert_eq!((r.junit.tests, r.junit.errors), (1, 1));
    let (tag, _, msg) = r.case("input").1.clone().unwrap();
    assert_eq!(tag, "error");
    assert!(msg.contains("no-such-run"), "{msg}");
    assert!(r.summary["input_errors"][0]
        .as_str()
        .unwrap()
        .contains("no-such-run"));
}

#[test]
fn exit_2_bad_option_files_still_write_junit_with_one_error() {
    let tmp = tempfile::tempdir().unwrap();
    let a = testdata("bug_layer2/run_A");
    let b = testdata("bug_layer2/run_B");
    let rules = tmp.path().join("rules.txt");
    std::fs::write(&rules, ".* rel <== 1e-3\n").unwrap();
    let config = tmp.path().join("actdiff.toml");
    std::fs::write(&config, "[defaults]\nrtol = \"x\"\n").unwrap();
    let missing = tmp.path().join("no-overrides.txt");
    for (flag, file) in [
        ("--rules", &rules),
        ("--config", &config),
        ("--override", &missing),
    ] {
        let r = compare(&[os(&a), os(&b), flag.as_ref(), os(file)]);
        assert_eq!(r.code, 2, "{flag}: {}", r.stderr);
        r.agrees();
        assert_eq!((r.junit.tests, r.junit.errors), (1, 1), "{flag}");
        let (_, _, msg) = r.case("input").1.clone().unwrap();
        let name = file.file_name().unwrap().to_str().unwrap();
        assert!(msg.contains(name), "{flag}: {msg}");
        assert_eq!(r.summary["ranks"], serde_json::json!([]));
    }
    // A bad option value too.
    let r = compare(&[os(&a), os(&b), "--rtol=-1".as_ref()]);
    assert_eq!(r.code, 2, "{}", r.stderr);
    r.agrees();
    assert!(r.case("input").1.as_ref().unwrap().2.contains("--rtol"));
}

#[test]
fn exit_2_an_option_clap_rejects_still_writes_junit_with_one_error() {
    let tmp = tempfile::tempdir().unwrap();
    let junit = tmp.path().join("junit.xml");
    let a = testdata("bug_layer2/run_A");
    for form in [
        vec!["--junit".to_string(), junit.display().to_string()],
        vec![format!("--junit={}", junit.display())],
    ] {
        Run::of(
            support::actdiff()
                .arg("compare")
                .arg(&a)
                .arg(&a)
                .args(&form)
                .args(["--page-rows", "zero"]),
            "report",
        )
        .expect(2);
        let j = read_junit(&junit);
        assert_eq!((j.tests, j.errors), (1, 1), "{form:?}");
        let (tag, ty, msg) = j.cases[0].1.clone().unwrap();
        assert_eq!((tag.as_str(), ty.as_str()), ("error", "InputError"));
        assert!(msg.contains("--page-rows"), "{msg}");
        std::fs::remove_file(&junit).unwrap();
    }
}

#[test]
fn exit_3_a_truncated_log_is_an_error_case_and_a_failure_when_allowed() {
    let tmp = tempfile::tempdir().unwrap();
    let a = run_folder(tmp.path(), "a", &[0, 1], "bug_layer2/run_A");
    let b = run_folder(tmp.path(), "b", &[0, 1], "bug_layer2/run_A");
    let log = std::fs::read(b.join("rank_1_activations.log")).unwrap();
    // Cut inside a block's field line, well into the log.
    let cut = log.len() / 2;
    let cut = cut + log[cut..].iter().position(|&c| c == b':').unwrap();
    std::fs::write(b.join("rank_1_activations.log"), &log[..cut]).unwrap();
    let r = compare(&[os(&a), os(&b)]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    r.agrees();
    let (tag, ty, _) = r.case("rank 1").1.clone().unwrap();
    assert_eq!((tag.as_str(), ty.as_str()), ("error", "IncompleteInput"));
    assert!(r.case("rank 0").1.is_none());
    let r = compare(&[os(&a), os(&b), "--allow-incomplete".as_ref()]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    r.agrees();
    let (tag, ty, _) = r.case("rank 1").1.clone().unwrap();
    assert_eq!((tag.as_str(), ty.as_str()), ("failure", "IncompleteInput"));
    // A rank's log missing below the `World size:` the logs declare: the
    // same rule (trial 29: it stayed an `<error>` under --allow-incomplete,
    // against the docs).
    let world = |name: &str, ranks: &[u32]| {
        let d = run_folder(tmp.path(), name, ranks, "bug_layer2/run_A");
        for r in ranks {
            let f = d.join(format!("rank_{r}_activations.log"));
            let text = std::fs::read_to_string(&f).unwrap();
            let (first, rest) = text.split_once('\n').unwrap();
            std::fs::write(&f, format!("{first}\nWorld size: 2\n{rest}")).unwrap();
        }
        d
    };
    let (c, d) = (world("c", &[0, 1]), world("d", &[0]));
    let r = compare(&[os(&c), os(&d)]);
    assert_eq!(r.code, 3, "{}", r.stderr);
    r.agrees();
    let (tag, ty, _) = r.case("rank 1").1.clone().unwrap();
    assert_eq!((tag.as_str(), ty.as_str()), ("error", "IncompleteInput"));
    let r = compare(&[os(&c), os(&d), "--allow-incomplete".as_ref()]);
    assert_eq!(r.code, 1, "{}", r.stderr);
    r.agrees();
    let (tag, ty, _) = r.case("rank 1").1.clone().unwrap();
    assert_eq!((tag.as_str(), ty.as_str()), ("failure", "IncompleteInput"));
}

/// Each input error of a compare is printed once, on stderr: the terminal
/// summary on stdout counts it ("input error: 1 error, printed on
/// stderr") instead of repeating it (a new user found each error on
/// stderr and again, twice, on stdout); summary.json and JUnit keep it.
/// For a missing run, a rank that could not be compared, and a step of a
/// step series.
#[test]
fn input_errors_are_printed_once_on_stderr() {
    let tmp = tempfile::tempdir().unwrap();
    let a = run_folder(tmp.path(), "a", &[0, 1], "bug_layer2/run_A");
    let b = run_folder(tmp.path(), "b", &[0, 1], "bug_layer2/run_A");
    std::fs::write(b.join("rank_1_activations.log"), b"").unwrap();
    let missing = tmp.path().join("no-such-run");
    let sa = tmp.path().join("sa");
    let sb = tmp.path().join("sb");
    for (from, to) in [(&a, &sa), (&b, &sb)] {
        std::fs::create_dir_all(to).unwrap();
        std::fs::rename(from, to.join("step_4")).unwrap();
    }
    let cases = [
        (
            sa.join("step_4"),
            missing.clone(),
            "no-such-run: no such file or folder",
        ),
        (
            sa.join("step_4"),
            sb.join("step_4"),
            "run2 is empty (0 bytes)",
        ),
        (sa.clone(), sb.clone(), "run2 is empty (0 bytes)"),
    ];
    for (run1, run2, error) in cases {
        let r = compare(&[os(&run1), os(&run2)]);
        assert_eq!(r.code, 2, "{}", r.stderr);
        assert_eq!(r.stderr.matches(error).count(), 1, "{}", r.stderr);
        assert!(!r.stdout.contains(error), "{}", r.stdout);
        assert!(
            r.stdout.contains("input error: 1 error, printed on stderr"),
            "{}",
            r.stdout
        );
        assert!(r.summary["input_errors"][0]
            .as_str()
            .unwrap()
            .contains(error));
    }
}
