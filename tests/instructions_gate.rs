//! The instruction-count gate (`benches/instructions.sh`, issue 26 "keep it
//! fast") can fail: its comparison (`--compare FIGURES MEASURED`, which
//! needs no valgrind) is run on the committed figures file against measured
//! files made from it with given numbers. Growth of more than 3 % fails,
//! 3 % or less passes, a drop of more than 3 % passes with a note, and
//! counts from a host with another CPU-feature key, a changed case command
//! or a missing case fail.

use std::path::{Path, PathBuf};
use std::process::Command;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn committed() -> String {
    std::fs::read_to_string(root().join("benches/instructions.txt"))
        .expect("benches/instructions.txt")
}

/// The committed count of `case`.
fn count_of(figures: &str, case: &str) -> u64 {
    figures
        .lines()
        .find_map(|l| {
            let mut f = l.split_whitespace();
            (f.next() == Some(case)).then(|| f.next().unwrap().parse().unwrap())
        })
        .unwrap_or_else(|| panic!("no case {case} in benches/instructions.txt"))
}

/// `figures` with `edit` applied to every line.
fn edited(figures: &str, edit: impl Fn(&str) -> Option<String>) -> String {
    figures.lines().filter_map(edit).map(|l| l + "\n").collect()
}

/// `figures` with `case`'s count set to `count`.
fn with_count(figures: &str, case: &str, count: u64) -> String {
    edited(figures, |l| {
        let mut f: Vec<&str> = l.split(' ').collect();
        if f[0] == case {
            let c = count.to_string();
            f[1] = &c;
            return Some(f.join(" "));
        }
        Some(l.to_string())
    })
}

/// Runs `benches/instructions.sh --compare` on the committed figures and
/// `measured`; returns the exit status and stdout + stderr.
fn gate(dir: &Path, measured: &str) -> (i32, String) {
    let m = dir.join("measured.txt");
    std::fs::write(&m, measured).unwrap();
    let out = Command::new("bash")
        .arg(root().join("benches/instructions.sh"))
        .arg("--compare")
        .arg(root().join("benches/instructions.txt"))
        .arg(&m)
        .env_remove("MAX_GROWTH_PCT")
        .output()
        .expect("bash benches/instructions.sh");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.code().expect("an exit status"), text)
}

fn scaled(n: u64, factor: f64) -> u64 {
    (n as f64 * factor).round() as u64
}

#[test]
fn the_committed_figures_pass_against_themselves() {
    let fig = committed();
    assert!(
        fig.lines().any(|l| l == "key: x86_64 avx2"),
        "the figures name the CI machines' key:\n{fig}"
    );
    for case in ["large", "many"] {
        assert!(count_of(&fig, case) > 100_000_000, "{case}");
    }
    let dir = tempfile::tempdir().unwrap();
    let (code, text) = gate(dir.path(), &fig);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("instructions: ok"), "{text}");
}

#[test]
fn growth_of_3_1_percent_fails_and_2_9_percent_passes() {
    let fig = committed();
    let dir = tempfile::tempdir().unwrap();
    for case in ["large", "many"] {
        let n = count_of(&fig, case);
        let (code, text) = gate(dir.path(), &with_count(&fig, case, scaled(n, 1.031)));
        assert_eq!(code, 1, "+3.1 % on {case} must fail:\n{text}");
        assert!(text.contains("+3.10%"), "{text}");
        assert!(text.contains("FAIL: grew more than 3 %"), "{text}");
        assert!(
            text.contains("benches/instructions.sh --update"),
            "the message says how to update the figures:\n{text}"
        );

        let (code, text) = gate(dir.path(), &with_count(&fig, case, scaled(n, 1.029)));
        assert_eq!(code, 0, "+2.9 % on {case} must pass:\n{text}");
        assert!(text.contains("+2.90%"), "{text}");
    }
}

#[test]
fn a_drop_of_more_than_3_percent_passes_with_a_note() {
    let fig = committed();
    let n = count_of(&fig, "many");
    let dir = tempfile::tempdir().unwrap();
    let (code, text) = gate(dir.path(), &with_count(&fig, "many", scaled(n, 0.96)));
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("-4.00%"), "{text}");
    assert!(
        text.contains("please update the committed figure"),
        "{text}"
    );
}

#[test]
fn another_cpu_feature_key_fails() {
    let fig = committed();
    let dir = tempfile::tempdir().unwrap();
    let measured = edited(&fig, |l| {
        Some(if l.starts_with("key:") {
            "key: x86_64 avx".to_string()
        } else {
            l.to_string()
        })
    });
    let (code, text) = gate(dir.path(), &measured);
    assert_eq!(code, 1, "{text}");
    assert!(
        text.contains("\"x86_64 avx2\"") && text.contains("this host is \"x86_64 avx\""),
        "{text}"
    );
}

#[test]
fn a_changed_command_or_a_missing_case_fails() {
    let fig = committed();
    let dir = tempfile::tempdir().unwrap();
    let changed = edited(&fig, |l| Some(l.replace("--seed 5", "--seed 6")));
    let (code, text) = gate(dir.path(), &changed);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("FAIL: the case's command changed"), "{text}");

    let missing = edited(&fig, |l| (!l.starts_with("many ")).then(|| l.to_string()));
    let (code, text) = gate(dir.path(), &missing);
    assert_eq!(code, 1, "{text}");
    assert!(text.contains("FAIL: committed but not measured"), "{text}");
}
