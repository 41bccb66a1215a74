//! Real Slurm (issue 11): the job script in docs/slurm/ run as a 4-task job
//! array (`sbatch --array=0-3`) on a generated 16-rank pair of runs, plus
//! the merge job (`--dependency=afterany:<array job>`); the merged report
//! must be the one a single-process compare writes (every report file, the
//! JUnit file, the exit status).
//!
//! The test starts a one-node cluster with `scripts/slurm-up.sh` (installs
//! Debian's slurm-wlm and munge when missing; needs root) unless one
//! answers already, and stops the daemons it started
//! (`scripts/slurm-down.sh`). It is `#[ignore]`d by default, since it
//! installs packages and starts daemons: run it with
//! `cargo test --release --test slurm -- --ignored`; `.ci/run` does, and
//! there (CI=true) a cluster that cannot be started fails the run, saying why.

#[path = "shard/common.rs"]
mod common;
#[path = "support/mod.rs"]
mod support;

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use common::{actdiff, assert_same_report, gen, run};

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// Stops, on drop, the daemons `slurm-up.sh` started for this test.
struct Cluster {
    started: bool,
}

impl Drop for Cluster {
    fn drop(&mut self) {
        if self.started {
            let _ = Command::new("bash")
                .arg(root().join("scripts/slurm-down.sh"))
                .status();
        }
    }
}

fn start() -> Cluster {
    let o = run(Command::new("bash").arg(root().join("scripts/slurm-up.sh")));
    let out = String::from_utf8_lossy(&o.stdout);
    assert!(
        o.status.success(),
        "no Slurm cluster: scripts/slurm-up.sh failed{} (it needs root and Debian's slurm-wlm and munge packages):\n{}",
        if std::env::var("CI").as_deref() == Ok("true") { " in CI" } else { "" },
        String::from_utf8_lossy(&o.stderr)
    );
    Cluster {
        started: out.contains("slurm: started"),
    }
}

/// `sbatch --parsable ARGS`: the job id.
fn sbatch(args: &[&str], env: &[(&str, &Path)]) -> String {
    let mut c = Command::new("sbatch");
    c.arg("--parsable").args(args);
    for (k, v) in env {
        c.env(k, v);
    }
    let o = run(&mut c);
    assert!(
        o.status.success(),
        "sbatch {args:?}: {}",
        String::from_utf8_lossy(&o.stderr)
    );
    let id = String::from_utf8_lossy(&o.stdout).trim().to_string();
    id.split(';').next().unwrap().to_string()
}

/// Waits until no job of `ids` is pending or running, then returns each
/// job's (and array task's) state and exit code from `sacct`-less
/// `scontrol show job`.
fn wait(ids: &[&str], timeout: Duration) -> Vec<String> {
    let t0 = Instant::now();
    loop {
        let o = run(Command::new("squeue").args(["-h", "-o", "%i %T %r", "-j", &ids.join(",")]));
        let q = String::from_utf8_lossy(&o.stdout).to_string();
        if q.trim().is_empty() {
            break;
        }
        assert!(
            t0.elapsed() < timeout,
            "Slurm jobs still queued after {timeout:?}:\n{q}"
        );
        std::thread::sleep(Duration::from_millis(500));
    }
    ids.iter()
        .map(|id| {
            let o = run(Command::new("scontrol").args(["show", "job", id]));
            String::from_utf8_lossy(&o.stdout).to_string()
        })
        .collect()
}

#[test]
#[ignore = "starts a Slurm cluster (needs root): cargo test --release --test slurm -- --ignored (CI runs it)"]
fn job_array_parts_merged_by_a_dependent_job_equal_a_single_compare() {
    let _cluster = start();
    // Job output and the data go where slurmd (root, same machine) can write.
    let t = tempfile::tempdir().unwrap();
    let dir = t.path();
    let (a, b) = gen(dir, 16, 1500, 11);
    let single = dir.join("single");
    let o = run(actdiff()
        .arg("compare")
        .arg(&a)
        .arg(&b)
        .arg("-q")
        .arg("-o")
        .arg(&single)
        .arg("--junit")
        .arg(single.join("junit.xml")));
    let single_status = o.status.code();
    assert_eq!(
        single_status,
        Some(1),
        "{}",
        String::from_utf8_lossy(&o.stderr)
    );

    let script = root().join("docs/slurm/actdiff.sbatch");
    let script = script.to_str().unwrap();
    let parts = dir.join("parts");
    let report = dir.join("report");
    let bin = Path::new(env!("CARGO_BIN_EXE_actdiff"));
    let env = [("ACTDIFF", bin)];
    let logs = dir.display().to_string();
    // The script asks for 8 cores and 16G: this node has fewer.
    let small = ["-c", "1", "--mem=500M"];
    let array_out = format!("--output={logs}/part-%a.out");
    let mut args = vec!["--array=0-3", array_out.as_str()];
    args.extend(small);
    let (a_s, b_s, p_s) = (
        a.display().to_string(),
        b.display().to_string(),
        parts.display().to_string(),
    );
    args.extend([script, "compare", a_s.as_str(), b_s.as_str(), p_s.as_str()]);
    let array = sbatch(&args, &env);
    let dep = format!("--dependency=afterany:{array}");
    let merge_out = format!("--output={logs}/merge.out");
    let r_s = report.display().to_string();
    let mut args = vec![dep.as_str(), merge_out.as_str()];
    args.extend(small);
    args.extend([script, "merge", p_s.as_str(), r_s.as_str()]);
    let merge = sbatch(&args, &env);
    let states = wait(&[&array, &merge], Duration::from_secs(300));
    let log = |name: &str| std::fs::read_to_string(dir.join(name)).unwrap_or_default();
    let all_logs = || {
        let mut s = String::new();
        for k in 0..4 {
            s += &format!("--- part-{k}.out\n{}", log(&format!("part-{k}.out")));
        }
        s + &format!(
            "--- merge.out\n{}\n--- scontrol\n{}",
            log("merge.out"),
            states.join("\n")
        )
    };
    // The merge job ran (afterany: after all four tasks) and exited 1,
    // as the single compare did.
    assert!(
        states[1].contains("JobState=FAILED") && states[1].contains("ExitCode=1:0"),
        "merge job state:\n{}",
        all_logs()
    );
    for k in 0..4 {
        assert!(
            parts.join(format!("part-{k}/part.json")).is_file(),
            "{}",
            all_logs()
        );
    }
    assert_same_report(&single, &report);
    assert_eq!(
        std::fs::read_to_string(single.join("junit.xml")).unwrap(),
        std::fs::read_to_string(report.join("junit.xml")).unwrap(),
        "JUnit"
    );
    assert!(log("merge.out").contains("index.html"), "{}", all_logs());
}
