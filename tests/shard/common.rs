//! Helpers shared by tests/shard.rs and tests/slurm.rs (over the helpers of
//! every test crate, tests/support/): generated runs, running any command,
//! and comparing two report folders file by file.

#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use crate::support::Run;

/// The `actdiff` binary under test (tests/support/, which the crate
/// including this file also includes).
pub use crate::support::actdiff;

/// Runs `cmd`, returning its output (panics only if it cannot start).
pub fn run(cmd: &mut Command) -> Output {
    cmd.output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"))
}

/// `actdiff gen DIR/run1 DIR/run2` with `ranks` ranks of `ops` ops.
pub fn gen(dir: &Path, ranks: u32, ops: u64, seed: u64) -> (PathBuf, PathBuf) {
    let (a, b) = (dir.join("run1"), dir.join("run2"));
    Run::of(
        actdiff()
            .args(["gen"])
            .arg(&a)
            .arg(&b)
            .args(["--ops", &ops.to_string(), "--ranks", &ranks.to_string()])
            .args(["--seed", &seed.to_string(), "--perturb", "0.01"]),
        "",
    )
    .expect(0);
    (a, b)
}

/// Regular files of a folder (not recursive), by name, sorted.
pub fn files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .filter_map(|e| e.ok())
        .filter(|e| e.file_type().is_ok_and(|t| t.is_file()))
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

/// Asserts that the report folder `merged` holds exactly the report files
/// of `single` (index.html, summary.json, every rank page and key
/// index), byte for byte. Whole files are compared, so the check holds
/// whatever fields other changes add. Files named in `extra` (e.g. a JUnit
/// file written into the folder) are compared too when present in both.
pub fn assert_same_report(single: &Path, merged: &Path) {
    let report = |d: &Path| -> Vec<String> {
        files(d)
            .into_iter()
            .filter(|n| actdiff::report::files::is_report_file(n))
            .collect()
    };
    let (a, b) = (report(single), report(merged));
    assert_eq!(a, b, "the two reports hold different files");
    assert!(a.contains(&"index.html".to_string()) && a.contains(&"summary.json".to_string()));
    for n in &a {
        let (x, y) = (
            std::fs::read(single.join(n)).unwrap(),
            std::fs::read(merged.join(n)).unwrap(),
        );
        if x != y {
            let (x, y) = (String::from_utf8_lossy(&x), String::from_utf8_lossy(&y));
            let line = x
                .lines()
                .zip(y.lines())
                .position(|(p, q)| p != q)
                .unwrap_or(0);
            panic!(
                "{n} differs (first at line {}):\n  single: {}\n  merged: {}",
                line + 1,
                x.lines().nth(line).unwrap_or(""),
                y.lines().nth(line).unwrap_or("")
            );
        }
    }
}

/// The python of the DuckDB/PyYAML venv (`scripts/py-venv.sh` creates it
/// on first use). Panics, saying why, when it cannot be made.
pub fn python() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/py-venv.sh");
    let o = run(Command::new("bash").arg(&script));
    assert!(
        o.status.success(),
        "scripts/py-venv.sh could not make the DuckDB/PyYAML venv (needs python3 -m venv and PyPI): {}",
        String::from_utf8_lossy(&o.stderr)
    );
    PathBuf::from(String::from_utf8_lossy(&o.stdout).trim())
}
