//! CI outputs agree (issue 15 item 5): for exits 0, 1, 2 and 3, the JUnit
//! file, `summary.json`, the index and the terminal tell the same story as
//! the exit status, list every rank of both runs, and are written even when
//! an input error stops the comparison before any rank is read. On the
//! project's own logs in `testdata/` (always present).

use std::path::{Path, PathBuf};

use assert_cmd::Command;
use quick_xml::events::Event;
use serde_json::Value;

/// One test case of a JUnit file: its name and, when it did not pass,
/// `("failure" | "error", type, message)`.
type JCase = (String, Option<(String, String, String)>);

/// A JUnit file read back: the suite's (tests, failures, errors) and its cases.
struct Junit {
    tests: u64,
    failures: u64,
    errors: u64,
    cases: Vec<JCase>,
}

fn read_junit(path: &Path) -> Junit {
    let text = std::fs::read_to_string(path)
        .unwrap_or_else(|e| panic!("{}: no JUnit file: {e}", path.display()));
    let mut r = quick_xml::Reader::from_str(&text);
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
    let mut j = Junit {
        tests: 0,
        failures: 0,
        errors: 0,
        cases: Vec::new(),
    };
    loop {
        match r.read_event().unwrap() {
            Event::Start(e) | Event::Empty(e) => match e.name().as_ref() {
                b"testsuite" => {
                    j.tests = attr(&e, "tests").parse().unwrap();
                    j.failures = attr(&e, "failures").parse().unwrap();
                    j.errors = attr(&e, "errors").parse().unwrap();
                }
                b"testcase" => j.cases.push((attr(&e, "name"), None)),
                tag @ (b"failure" | b"error") => {
                    j.cases.last_mut().unwrap().1 = Some((
                        String::from_utf8_lossy(tag).into_owned(),
                        attr(&e, "type"),
                        attr(&e, "message"),
                    ))
                }
                _ => {}
            },
            Event::Eof => break,
            _ => {}
        }
    }
    // The counts are the cases'.
    assert_eq!(j.tests as usize, j.cases.len(), "tests=");
    let n = |k: &str| {
        j.cases
            .iter()
            .filter(|c| c.1.as_ref().is_some_and(|o| o.0 == k))
            .count() as u64
    };
    assert_eq!((j.failures, j.errors), (n("failure"), n("error")));
    j
}

/// What one `actdiff compare` did.
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
    junit: Junit,
    summary: Value,
    index: String,
    _tmp: tempfile::TempDir,
}

fn testdata(p: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(p)
}

/// Runs `actdiff compare ARGS -o TMP/report --junit TMP/junit.xml`.
fn compare(args: &[&std::ffi::OsStr]) -> Run {
    let tmp = tempfile::tempdir().unwrap();
    let report = tmp.path().join("report");
    let junit = tmp.path().join("junit.xml");
    let o = Command::cargo_bin("actdiff")
        .unwrap()
        .arg("compare")
        .args(args)
        .arg("-o")
        .arg(&report)
        .arg("--junit")
        .arg(&junit)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr).into_owned();
    let code = o.status.code().expect("no signal");
    assert!(!stderr.contains("panicked"), "{stderr}");
    let summary = serde_json::from_slice(
        &std::fs::read(report.join("summary.json")).expect("summary.json is written"),
    )
    .unwrap();
    let index = std::fs::read_to_string(report.join("index.html")).expect("index.html is written");
    Run {
        code,
        stdout: String::from_utf8_lossy(&o.stdout).into_owned(),
        stderr,
        junit: read_junit(&junit),
        summary,
        index,
        _tmp: tmp,
    }
}

fn os(s: &Path) -> &std::ffi::OsStr {
    s.as_os_str()
}

impl Run {
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
        self.junit
            .cases
            .iter()
            .find(|c| c.0 == name)
            .unwrap_or_else(|| panic!("no JUnit case {name}: {:?}", self.junit.cases))
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
        let o = Command::cargo_bin("actdiff")
            .unwrap()
            .arg("compare")
            .arg(&a)
            .arg(&a)
            .args(&form)
            .args(["--page-rows", "zero"])
            .output()
            .unwrap();
        assert_eq!(o.status.code(), Some(2));
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
}
