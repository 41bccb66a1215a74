//! Non-seekable inputs (issue 15 item 10): a pipe, `/dev/stdin` and a
//! process substitution are read in full and compared exactly like the
//! file they carry. On the project's own logs in `testdata/`.

#[path = "support/mod.rs"]
mod support;

use std::path::Path;
use std::process::{Command, Stdio};

use support::Run;

fn log(run: &str) -> std::path::PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join(format!("testdata/bug_layer2/{run}/rank_0_activations.log"))
}

/// `summary.json`'s counts of rank 0 and the exit status of a compare.
fn counts(out: &Path, code: Option<i32>) -> (Option<i32>, serde_json::Value) {
    let v: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    (code, v["ranks"][0]["counts"].clone())
}

fn by_file(tmp: &Path) -> (Option<i32>, serde_json::Value) {
    let out = tmp.join("files");
    let r = Run::of(
        support::actdiff()
            .arg("compare")
            .arg(log("run_A"))
            .arg(log("run_B"))
            .arg("-o")
            .arg(&out)
            .arg("-q"),
        &out,
    );
    counts(&out, Some(r.code))
}

#[test]
fn stdin_is_read_in_full() {
    let tmp = tempfile::tempdir().unwrap();
    let expected = by_file(tmp.path());
    assert_eq!(expected.0, Some(1));
    let out = tmp.path().join("stdin");
    // A pipe on stdin (not a file redirect, which would be seekable).
    let mut child = support::actdiff()
        .arg("compare")
        .arg(log("run_A"))
        .arg("/dev/stdin")
        .arg("-o")
        .arg(&out)
        .arg("-q")
        .stdin(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let bytes = std::fs::read(log("run_B")).unwrap();
    let mut stdin = child.stdin.take().unwrap();
    let writer = std::thread::spawn(move || {
        use std::io::Write;
        stdin.write_all(&bytes).unwrap();
    });
    let o = child.wait_with_output().unwrap();
    writer.join().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert!(!stderr.contains("empty"), "{stderr}");
    assert_eq!(counts(&out, o.status.code()), expected, "{stderr}");
}

#[test]
fn process_substitution_of_a_gzip_stream_is_read_in_full() {
    assert!(
        Command::new("bash")
            .arg("-c")
            .arg("zcat --help")
            .output()
            .is_ok_and(|o| o.status.success()),
        "bash and zcat are needed for process substitution"
    );
    let tmp = tempfile::tempdir().unwrap();
    let expected = by_file(tmp.path());
    let gz = tmp.path().join("b.log.gz");
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
    std::io::Write::write_all(&mut e, &std::fs::read(log("run_B")).unwrap()).unwrap();
    std::fs::write(&gz, e.finish().unwrap()).unwrap();
    let out = tmp.path().join("subst");
    // `<(zcat b.log.gz)` as in the issue (plain bytes through a pipe), and
    // `<(cat b.log.gz)` (gzip bytes through a pipe, decompressed by actdiff).
    for inner in ["zcat", "cat"] {
        let o = Command::new("bash")
            .arg("-c")
            .arg(format!(
                "{bin:?} compare {a:?} <({inner} {gz:?}) -o {out:?} -q",
                bin = env!("CARGO_BIN_EXE_actdiff"),
                a = log("run_A"),
            ))
            .output()
            .unwrap();
        let stderr = String::from_utf8_lossy(&o.stderr);
        assert!(!stderr.contains("empty"), "{inner}: {stderr}");
        assert_eq!(counts(&out, o.status.code()), expected, "{inner}: {stderr}");
    }
}

#[test]
fn an_endless_binary_stream_is_refused_from_its_first_block() {
    // `/dev/zero` never ends: read to its end, it filled memory (trial 25).
    // Its first block is binary data, so it is read no further.
    let tmp = tempfile::tempdir().unwrap();
    let out = tmp.path().join("zero");
    let mut child = support::actdiff()
        .arg("compare")
        .arg(log("run_A"))
        .arg("/dev/zero")
        .arg("-o")
        .arg(&out)
        .arg("-q")
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let start = std::time::Instant::now();
    while child.try_wait().unwrap().is_none() {
        if start.elapsed() > std::time::Duration::from_secs(30) {
            child.kill().unwrap();
            panic!("actdiff still reading /dev/zero after 30 s");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let o = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&o.stderr);
    assert_eq!(o.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("/dev/zero: run2: no op blocks parsed: binary data (a NUL byte at byte 0)"),
        "{stderr}"
    );
}
