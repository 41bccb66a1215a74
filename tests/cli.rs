//! The `actdiff compare` command line, end to end against the built binary:
//! one test per exit status (see `src/exit_codes.rs`) and per kind of bad
//! input, each checking the status *and* what the user is told.
//!
//! Inputs are the real logs in `testdata/` (always in the repository) and
//! small variants of them that each test writes into its own temporary
//! folder. Nothing here needs `../shared`.

#[path = "support/mod.rs"]
mod support;

use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use serde_json::Value;
use support::{counts, gzip, read_testdata, testdata, write, Run};
use tempfile::TempDir;

const BUG_A: &str = "bug_layer2/run_A/rank_0_activations.log";
const BUG_B: &str = "bug_layer2/run_B/rank_0_activations.log";
const MULTI_A: &str = "multirank_fsdp/run_A";
const MULTI_B: &str = "multirank_fsdp/run_B";
/// Ops in each bug_layer2 log.
const BUG_OPS: usize = 265;

/// Runs `actdiff ARGS` ([`Run::args`]); `out` is the report folder the
/// arguments name.
fn actdiff<I, S>(args: I, out: PathBuf) -> Run
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    Run::args(args, out)
}

/// Runs `actdiff compare RUN1 RUN2 -o TMP/out EXTRA...`.
fn compare(tmp: &TempDir, run1: &Path, run2: &Path, extra: &[&str]) -> Run {
    let out = tmp.path().join("out");
    let mut args: Vec<&OsStr> = vec![
        "compare".as_ref(),
        run1.as_os_str(),
        run2.as_os_str(),
        "-o".as_ref(),
        out.as_os_str(),
    ];
    args.extend(extra.iter().map(|s| OsStr::new(*s)));
    actdiff(args, out.clone())
}

/// Reads a `--rows` file: one JSON object per line, each with exactly the
/// documented keys (`notes` only when the row has any).
fn read_rows(p: &Path) -> Vec<Value> {
    support::read_rows(p)
        .into_iter()
        .enumerate()
        .map(|(i, v)| {
            let obj = v.as_object().expect("row is an object");
            let mut keys: Vec<&str> = obj
                .keys()
                .map(|k| k.as_str())
                .filter(|k| *k != "notes" && *k != "hash_diffs")
                .collect();
            keys.sort();
            assert_eq!(
                keys,
                [
                    "diffs",
                    "key1",
                    "key2",
                    "rank",
                    "status",
                    "strategy",
                    "tolerance"
                ],
                "row {}",
                i + 1
            );
            v
        })
        .collect()
}

/// 1-based line and column of byte `pos` in `bytes`.
fn line_col(bytes: &[u8], pos: usize) -> (usize, usize) {
    let before = &bytes[..pos];
    let line = before.iter().filter(|b| **b == b'\n').count() + 1;
    let line_start = before
        .iter()
        .rposition(|b| *b == b'\n')
        .map_or(0, |i| i + 1);
    (line, pos - line_start + 1)
}

fn find(hay: &[u8], needle: &[u8], from: usize) -> usize {
    hay[from..]
        .windows(needle.len())
        .position(|w| w == needle)
        .map(|i| i + from)
        .unwrap_or_else(|| panic!("`{}` not found", String::from_utf8_lossy(needle)))
}

// ---------------------------------------------------------------- exit 0

#[test]
fn identical_logs_exit_0() {
    let tmp = TempDir::new().unwrap();
    let a = testdata(BUG_A);
    let r = compare(&tmp, &a, &a, &[]);
    r.expect(0).stdout_has("no divergence");
    let s = r.summary();
    assert_eq!(s["exit_status"], 0);
    assert_eq!(counts(&s["counts"]), (BUG_OPS as u64, 0, 0, 0));
    assert_eq!(s["counts"]["truncated"], 0);
    assert_eq!(s["ranks"].as_array().unwrap().len(), 1);
    assert!(s["ranks"][0]["first_divergence"].is_null());
    assert_eq!(s["ranks_only1"], serde_json::json!([]));
    assert_eq!(s["ranks_only2"], serde_json::json!([]));
    // The same log given twice is said (a typo a CI gate would not see),
    // under another spelling too; exit 0 stays.
    assert!(
        r.stderr.contains("warning: run1 and run2 are the same:"),
        "{}",
        r.stderr
    );
    let other = a.parent().unwrap().join(".").join(a.file_name().unwrap());
    let tmp2 = TempDir::new().unwrap();
    let r = compare(&tmp2, &a, &other, &[]);
    r.expect(0).stderr_has("every row matches itself");
    let tmp3 = TempDir::new().unwrap();
    let r = compare(&tmp3, &a, &testdata(BUG_B), &[]);
    assert!(!r.stderr.contains("are the same"), "{}", r.stderr);
}

#[test]
fn quiet_prints_nothing_on_stdout() {
    let tmp = TempDir::new().unwrap();
    let a = testdata(BUG_A);
    let r = compare(&tmp, &a, &a, &["-q"]);
    r.expect(0);
    assert_eq!(r.stdout, "", "-q prints no summary");
    assert_eq!(r.summary()["exit_status"], 0);
}

// ---------------------------------------------------------------- exit 1

#[test]
fn bug_layer2_exit_1_first_divergence_counts_and_rows() {
    let tmp = TempDir::new().unwrap();
    let rows = tmp.path().join("rows.jsonl");
    let r = compare(
        &tmp,
        &testdata(BUG_A),
        &testdata(BUG_B),
        &["--rows", rows.to_str().unwrap()],
    );
    r.expect(1)
        .stdout_has("first divergence: layers.2.ffn_norm/op_1_add_")
        .stdout_has("163 match, 102 diff");
    let s = r.summary();
    assert_eq!(s["exit_status"], 1);
    assert_eq!(counts(&s["counts"]), (163, 102, 0, 0));
    let rank = &s["ranks"][0];
    assert_eq!(counts(&rank["counts"]), (163, 102, 0, 0));
    assert_eq!(
        rank["first_divergence"]["key1"],
        "layers.2.ffn_norm/op_1_add_"
    );
    assert_eq!(rank["first_divergence"]["status"], "diff");
    assert_eq!(rank["run1"]["entries"], BUG_OPS);
    assert_eq!(rank["run2"]["entries"], BUG_OPS);

    let rows = read_rows(&rows);
    assert_eq!(rows.len(), BUG_OPS);
    let n = |st: &str| rows.iter().filter(|r| r["status"] == st).count();
    assert_eq!((n("match"), n("diff")), (163, 102));
    assert!(rows
        .iter()
        .all(|r| r["rank"] == 0 && r["strategy"] == "exact"));
    let first = rows.iter().find(|r| r["status"] == "diff").unwrap();
    assert_eq!(first["key1"], "layers.2.ffn_norm/op_1_add_");
    assert_eq!(first["key2"], "layers.2.ffn_norm/op_1_add_");
    // A diff row carries the per-stat differences of stats present on both
    // sides: the hash-only eps add has none; the next row has some.
    let later = rows
        .iter()
        .find(|r| r["key1"] == "layers.2.ffn_norm/op_2_mul")
        .unwrap();
    assert_eq!(later["status"], "diff");
    assert!(!later["diffs"].as_object().unwrap().is_empty(), "{later}");
    // The hash-only row still says by how much its Output hash differs;
    // a match row's hash differences, if any, are within the tolerance.
    let out = first["hash_diffs"]["Output hash"]
        .as_f64()
        .expect("hash_diffs");
    assert!(out > 1e-8 && out < 1e-2, "{first}");
    for r in rows.iter().filter(|r| r["status"] == "match") {
        for d in r
            .get("hash_diffs")
            .and_then(Value::as_object)
            .into_iter()
            .flat_map(|o| o.values())
        {
            assert!(d.as_f64().unwrap() <= 1e-8, "{r}");
        }
    }
}

#[test]
fn bug_layer2_writes_index_html() {
    let tmp = TempDir::new().unwrap();
    let r = compare(&tmp, &testdata(BUG_A), &testdata(BUG_B), &[]);
    r.expect(1);
    let index = r.out.join("index.html");
    assert!(index.is_file(), "{} missing", index.display());
    let html = std::fs::read_to_string(index).unwrap();
    assert!(html.contains("layers.2.ffn_norm/op_1_add_"));
}

#[test]
fn multirank_folders_exit_1_with_per_rank_counts() {
    let tmp = TempDir::new().unwrap();
    let r = compare(&tmp, &testdata(MULTI_A), &testdata(MULTI_B), &[]);
    r.expect(1);
    let s = r.summary();
    assert_eq!(s["exit_status"], 1);
    let ranks = s["ranks"].as_array().unwrap();
    let got: Vec<(u64, (u64, u64, u64, u64))> = ranks
        .iter()
        .map(|r| (r["rank"].as_u64().unwrap(), counts(&r["counts"])))
        .collect();
    assert_eq!(
        got,
        vec![
            (0, (407, 219, 0, 0)),
            (1, (137, 489, 0, 0)),
            (2, (405, 221, 0, 0)),
            (3, (403, 223, 0, 0)),
        ]
    );
    assert_eq!(counts(&s["counts"]), (1352, 1152, 0, 0));
    assert_eq!(s["ranks_only1"], serde_json::json!([]));
    assert_eq!(s["ranks_only2"], serde_json::json!([]));
    for r in ranks {
        assert_eq!(r["run1"]["entries"], 626);
        assert_eq!(r["run2"]["entries"], 626);
    }
    r.stdout_has("rank 1: 626 ops vs 626 ops: 137 match, 489 diff")
        .stdout_has("first divergence: tok_embeddings/op_2_embedding");
}

#[test]
fn rank_on_one_side_only_exit_1_and_others_still_compared() {
    let tmp = TempDir::new().unwrap();
    let (a, b) = (tmp.path().join("A"), tmp.path().join("B"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    // run 1 has ranks {0, 1}, run 2 has ranks {1, 2}.
    for (dir, run, rank) in [
        (&a, MULTI_A, 0),
        (&a, MULTI_A, 1),
        (&b, MULTI_B, 1),
        (&b, MULTI_B, 2),
    ] {
        let name = format!("rank_{rank}_activations.log");
        std::fs::copy(testdata(&format!("{run}/{name}")), dir.join(&name)).unwrap();
    }
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1);
    let s = r.summary();
    assert_eq!(s["exit_status"], 1);
    assert_eq!(s["ranks_only1"], serde_json::json!([0]));
    assert_eq!(s["ranks_only2"], serde_json::json!([2]));
    let ranks = s["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 1, "rank 1 is compared");
    assert_eq!(ranks[0]["rank"], 1);
    assert_eq!(counts(&ranks[0]["counts"]), (137, 489, 0, 0));
    assert!(
        s["verdict"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v.as_str().unwrap().contains("ranks on one side only")),
        "{}",
        s["verdict"]
    );
}

#[test]
fn one_sided_rank_alone_is_exit_1() {
    // Identical shared ranks, but run 1 has an extra rank: still not a pass.
    let tmp = TempDir::new().unwrap();
    let (a, b) = (tmp.path().join("A"), tmp.path().join("B"));
    std::fs::create_dir_all(&a).unwrap();
    std::fs::create_dir_all(&b).unwrap();
    for (dir, rank) in [(&a, 0), (&a, 1), (&b, 0)] {
        let name = format!("rank_{rank}_activations.log");
        std::fs::copy(testdata(&format!("{MULTI_A}/{name}")), dir.join(&name)).unwrap();
    }
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1);
    let s = r.summary();
    assert_eq!(counts(&s["counts"]), (626, 0, 0, 0));
    assert_eq!(s["ranks_only1"], serde_json::json!([1]));
    assert_eq!(s["ranks_only2"], serde_json::json!([]));
}

// ---------------------------------------------------------------- exit 2

#[test]
fn missing_file_exit_2_names_it() {
    let tmp = TempDir::new().unwrap();
    let missing = tmp.path().join("no_such_rank_0_activations.log");
    let r = compare(&tmp, &missing, &testdata(BUG_A), &[]);
    r.expect(2)
        .stderr_has("error:")
        .stderr_has("no_such_rank_0_activations.log");
    // The same on the run-2 side.
    let r = compare(&tmp, &testdata(BUG_A), &missing, &[]);
    r.expect(2).stderr_has("no_such_rank_0_activations.log");
}

#[test]
fn empty_file_exit_2_says_empty() {
    let tmp = TempDir::new().unwrap();
    let empty = write(tmp.path(), "empty.log", b"");
    let r = compare(&tmp, &empty, &testdata(BUG_A), &[]);
    r.expect(2).stderr_has("empty.log").stderr_has("empty");
    assert_eq!(r.summary()["exit_status"], 2);
    // Empty against itself is not a pass either.
    let r = compare(&tmp, &empty, &empty, &[]);
    r.expect(2).stderr_has("empty.log");
}

#[test]
fn header_only_file_exit_2_no_ops() {
    let tmp = TempDir::new().unwrap();
    let log = read_testdata(BUG_A);
    let first_block = find(&log, b"\n[", 0) + 1;
    let header = write(tmp.path(), "header_only.log", &log[..first_block]);
    let r = compare(&tmp, &testdata(BUG_A), &header, &[]);
    r.expect(2)
        .stderr_has("header_only.log")
        .stderr_has("no ops");
    let r = compare(&tmp, &header, &header, &[]);
    r.expect(2).stderr_has("no ops");
}

#[test]
fn random_bytes_exit_2_names_file() {
    let tmp = TempDir::new().unwrap();
    // Deterministic pseudo-random bytes (no `[`, so no line can open a block).
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    let bytes: Vec<u8> = (0..8192)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            match (x >> 24) as u8 {
                b'[' => b'x',
                b => b,
            }
        })
        .collect();
    let first_nul = bytes.iter().position(|b| *b == 0).unwrap();
    assert!(first_nul < 4096, "the bytes hold a NUL near the start");
    let garbage = write(tmp.path(), "garbage.log", &bytes);
    let r = compare(&tmp, &garbage, &testdata(BUG_A), &[]);
    r.expect(2)
        .stderr_has("error:")
        .stderr_has("garbage.log")
        .stderr_has(&format!(
            "run1: no op blocks parsed: binary data (a NUL byte at byte {first_nul}), not an activation log"
        ));
}

#[test]
fn a_binary_file_is_one_error_without_its_lines_echoed() {
    let tmp = TempDir::new().unwrap();
    // The start of an ELF executable given as a log by mistake.
    let mut elf = b"\x7fELF\x02\x01\x01\0\0\0\0\0\0\0\0\0\x03\0>\0".to_vec();
    elf.extend(std::iter::repeat_n(b'@', 300));
    let bin = write(tmp.path(), "rank_0_activations.log", &elf);
    let r = compare(&tmp, &bin, &testdata(BUG_A), &[]);
    r.expect(2).stderr_has(
        "rank_0_activations.log: run1: no op blocks parsed: binary data (a NUL byte at byte 7), not an activation log",
    );
    assert!(
        !r.stderr.contains("warning"),
        "no warnings echo its bytes: {}",
        r.stderr
    );
    assert!(!r.stderr.contains("ELF"), "{}", r.stderr);
}

#[test]
fn non_log_text_exit_2_names_file() {
    let tmp = TempDir::new().unwrap();
    let text = write(
        tmp.path(),
        "notes.log",
        b"loss went down\nstep 2: 8.25\nnothing to see here\n",
    );
    let r = compare(&tmp, &testdata(BUG_A), &text, &[]);
    r.expect(2)
        .stderr_has("notes.log")
        .stderr_has("no op blocks parsed");
}

#[test]
fn folder_without_logs_exit_2() {
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path().join("dump");
    std::fs::create_dir_all(dir.join("numerics")).unwrap();
    write(&dir, "notes.txt", b"not a log\n");
    let r = compare(&tmp, &dir, &testdata(MULTI_B), &[]);
    r.expect(2)
        .stderr_has("dump")
        .stderr_has("no rank_N_activations.log files");
}

#[test]
fn bad_override_json_exit_2() {
    let tmp = TempDir::new().unwrap();
    let a = testdata(BUG_A);
    let broken = write(
        tmp.path(),
        "broken.json",
        b"{\"tok_embeddings/op_0_embedding\": ",
    );
    let r = compare(&tmp, &a, &a, &["--override", broken.to_str().unwrap()]);
    r.expect(2).stderr_has("error:").stderr_has("broken.json");

    let not_strings = write(
        tmp.path(),
        "numbers.json",
        b"{\"tok_embeddings/op_0_embedding\": 1}\n",
    );
    let r = compare(&tmp, &a, &a, &["--override", not_strings.to_str().unwrap()]);
    r.expect(2)
        .stderr_has("numbers.json")
        .stderr_has("not a string");

    let missing = tmp.path().join("no_overrides.txt");
    let r = compare(&tmp, &a, &a, &["--override", missing.to_str().unwrap()]);
    r.expect(2).stderr_has("no_overrides.txt");
}

#[test]
fn a_second_report_in_the_same_folder_leaves_no_pages_of_the_first() {
    let tmp = TempDir::new().unwrap();
    let out = tmp.path().join("out");
    let r = compare(&tmp, &testdata(MULTI_A), &testdata(MULTI_B), &[]);
    r.expect(1);
    assert!(out.join("rank3-page1.html").exists());
    std::fs::write(out.join("notes.txt"), "mine").unwrap();
    // A heatmap page an earlier actdiff wrote goes too.
    std::fs::write(out.join("rank2-overview.html"), "<!DOCTYPE html>").unwrap();
    // One rank now: the pages of ranks 1-3 must go.
    let r = compare(&tmp, &testdata(BUG_A), &testdata(BUG_B), &[]);
    r.expect(1);
    for rank in 1..4 {
        for f in ["page1.html", "overview.html", "keys.js"] {
            let p = out.join(format!("rank{rank}-{f}"));
            assert!(!p.exists(), "{} left from the first report", p.display());
        }
    }
    assert!(out.join("rank0-page1.html").exists());
    assert_eq!(
        std::fs::read_to_string(out.join("notes.txt")).unwrap(),
        "mine"
    );
    // An input error writes summary.json and the index; no old page stays.
    let r = compare(&tmp, &tmp.path().join("nope.log"), &testdata(BUG_B), &[]);
    r.expect(2);
    assert!(!out.join("rank0-page1.html").exists());
    assert!(out.join("summary.json").exists());
}

/// A report written into a folder that holds the previous one writes over
/// its result pages in place (the same file: on ext4 a page removed and
/// created again costs an inode allocation that skips recently freed
/// ones) and removes the pages it does not write, of a page count now
/// smaller too.
#[cfg(unix)]
#[test]
fn a_second_report_writes_over_the_pages_of_the_first_and_removes_the_rest() {
    use std::os::unix::fs::MetadataExt;
    let tmp = TempDir::new().unwrap();
    let out = tmp.path().join("out");
    let (a, b) = (testdata(MULTI_A), testdata(MULTI_B));
    let r = compare(&tmp, &a, &b, &["--page-rows", "100", "--html-rows", "all"]);
    r.expect(1);
    let pages = |out: &std::path::Path| {
        let mut v: Vec<String> = std::fs::read_dir(out)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .filter(|n| n.starts_with("rank") && n.ends_with(".html"))
            .collect();
        v.sort();
        v
    };
    let first = pages(&out);
    assert!(first.contains(&"rank3-page7.html".to_string()), "{first:?}");
    let ino = |name: &str| std::fs::metadata(out.join(name)).unwrap().ino();
    let before = ino("rank0-page1.html");
    let r = compare(&tmp, &a, &b, &["--page-rows", "1000", "--html-rows", "all"]);
    r.expect(1);
    let second = pages(&out);
    assert_eq!(
        second,
        [
            "rank0-page1.html",
            "rank1-page1.html",
            "rank2-page1.html",
            "rank3-page1.html"
        ],
        "pages of 100 rows left beside pages of 1,000"
    );
    assert_eq!(
        ino("rank0-page1.html"),
        before,
        "the page was not written over"
    );
    let page = std::fs::read_to_string(out.join("rank0-page1.html")).unwrap();
    assert!(page.trim_end().ends_with("</html>"), "{page}");
    assert!(!page.contains("rank0-page2.html"), "links a page removed");
    assert!(out.join("index.html").exists() && out.join("summary.json").exists());
    // One rank now: only its page stays.
    let r = compare(&tmp, &testdata(BUG_A), &testdata(BUG_B), &[]);
    r.expect(1);
    assert_eq!(pages(&out), ["rank0-page1.html"]);
}

/// A page of the previous report that is not a file of its own is never
/// written through: one hard-linked elsewhere (an archive made with
/// `cp -al`; a merge links its parts' pages) keeps its bytes there, and a
/// symbolic link is replaced, not followed (trial 62: a re-run changed the
/// archive's page and wrote a page into a file outside the folder).
#[cfg(unix)]
#[test]
fn a_second_report_never_writes_through_a_linked_page() {
    let tmp = TempDir::new().unwrap();
    let out = tmp.path().join("out");
    let (a, b) = (testdata(MULTI_A), testdata(MULTI_B));
    compare(&tmp, &a, &b, &[]).expect(1);
    let archive = tmp.path().join("archive");
    std::fs::create_dir(&archive).unwrap();
    std::fs::hard_link(
        out.join("rank0-page1.html"),
        archive.join("rank0-page1.html"),
    )
    .unwrap();
    let before = std::fs::read(archive.join("rank0-page1.html")).unwrap();
    let outside = tmp.path().join("notes.html");
    std::fs::write(&outside, "my notes").unwrap();
    std::fs::remove_file(out.join("rank1-page1.html")).unwrap();
    std::os::unix::fs::symlink(&outside, out.join("rank1-page1.html")).unwrap();
    // A stale page that is a link goes too, its target stays.
    std::os::unix::fs::symlink(&outside, out.join("rank7-page2.html")).unwrap();
    compare(&tmp, &a, &b, &["--rtol", "1", "--atol", "1"]).expect(0);
    assert_eq!(
        std::fs::read(archive.join("rank0-page1.html")).unwrap(),
        before
    );
    assert_ne!(std::fs::read(out.join("rank0-page1.html")).unwrap(), before);
    assert_eq!(std::fs::read_to_string(&outside).unwrap(), "my notes");
    let page = std::fs::symlink_metadata(out.join("rank1-page1.html")).unwrap();
    assert!(page.is_file(), "the link was written through");
    assert!(std::fs::symlink_metadata(out.join("rank7-page2.html")).is_err());
}

/// A report written into a part's folder makes it no part: the manifests
/// of an earlier part (`part.json`, a step series part's
/// `series-part.json` and `step_S/part.json`) go, so a merge can never
/// take the folder's old part for this report (trial 62: a merge showed an
/// older run's report, exit 0).
#[test]
fn a_report_removes_the_manifests_of_an_earlier_part() {
    let tmp = TempDir::new().unwrap();
    let out = tmp.path().join("out");
    std::fs::create_dir_all(out.join("step_3")).unwrap();
    for f in ["part.json", "series-part.json", "step_3/part.json"] {
        std::fs::write(out.join(f), "{}").unwrap();
    }
    std::fs::write(out.join("notes.json"), "mine").unwrap();
    compare(&tmp, &testdata(BUG_A), &testdata(BUG_B), &[]).expect(1);
    for f in ["part.json", "series-part.json", "step_3"] {
        assert!(!out.join(f).exists(), "{f} left");
    }
    assert!(out.join("notes.json").exists());
}

/// `--rows` or `--junit` naming a file of the report folder is refused
/// before anything is written (trial 62: `--rows r/rank0-page3.html` left
/// a page of JSON Lines linked from the index).
#[test]
fn an_output_file_that_is_a_file_of_the_report_is_refused() {
    let tmp = TempDir::new().unwrap();
    let out = tmp.path().join("out");
    let (a, b) = (testdata(BUG_A), testdata(BUG_B));
    compare(&tmp, &a, &b, &[]).expect(1);
    let index = std::fs::read(out.join("index.html")).unwrap();
    for (option, file) in [
        ("--rows", "rank0-page3.html"),
        ("--rows", "summary.json"),
        ("--junit", "index.html"),
        ("--rows", "step_2/part.json"),
    ] {
        std::fs::create_dir_all(out.join("step_2")).unwrap();
        let path = out.join(file);
        let r = compare(&tmp, &a, &b, &[option, path.to_str().unwrap()]);
        r.expect(2)
            .stderr_has(option)
            .stderr_has("a file of the report");
        assert_eq!(std::fs::read(out.join("index.html")).unwrap(), index);
    }
    // Beside the report, any name is fine.
    let rows = out.join("rows.jsonl");
    compare(&tmp, &a, &b, &["--rows", rows.to_str().unwrap()]).expect(1);
    assert!(rows.is_file());
}

/// A rank that fails after writing some of its pages leaves none of them,
/// in a new folder too (trial 62).
#[cfg(unix)]
#[test]
fn a_rank_that_fails_writing_its_pages_leaves_none() {
    let tmp = TempDir::new().unwrap();
    let out = tmp.path().join("out");
    // A folder where rank 2's third page goes.
    std::fs::create_dir_all(out.join("rank2-page3.html")).unwrap();
    let r = compare(
        &tmp,
        &testdata(MULTI_A),
        &testdata(MULTI_B),
        &["--page-rows", "100", "--html-rows", "all"],
    );
    r.expect(2).stderr_has("rank2-page3.html");
    assert!(out.join("rank1-page3.html").is_file());
    for k in [1, 2, 4] {
        assert!(
            !out.join(format!("rank2-page{k}.html")).exists(),
            "page {k} of the failed rank"
        );
    }
}

/// `actdiff compare ... --format json | head -c 10`: the reader is gone
/// before actdiff writes; it ends like other Unix filters (SIGPIPE), never
/// with a panic about the closed pipe.
#[cfg(unix)]
#[test]
fn closed_stdout_ends_quietly() {
    use std::os::unix::process::ExitStatusExt;
    let tmp = TempDir::new().unwrap();
    let mut child = support::actdiff()
        .arg("compare")
        .arg(testdata(MULTI_A))
        .arg(testdata(MULTI_B))
        .arg("-o")
        .arg(tmp.path().join("out"))
        .args(["--format", "json"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    drop(child.stdout.take()); // the reader goes away at once
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(!stderr.contains("Broken pipe"), "{stderr}");
    assert_eq!(out.status.signal(), Some(13), "{:?}: {stderr}", out.status);
}

#[test]
fn a_rank_with_an_input_error_is_listed_and_the_others_compared() {
    let tmp = TempDir::new().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    for (src, dst) in [(MULTI_A, &a), (MULTI_B, &b)] {
        std::fs::create_dir_all(dst).unwrap();
        for e in std::fs::read_dir(testdata(src)).unwrap() {
            let p = e.unwrap().path();
            std::fs::copy(&p, dst.join(p.file_name().unwrap())).unwrap();
        }
    }
    std::fs::write(a.join("rank_1_activations.log"), b"not a log\n").unwrap();
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(2).stderr_has("rank_1_activations.log");
    let s = r.summary();
    let failed = s["ranks_failed"].as_array().expect("ranks_failed");
    assert_eq!(failed.len(), 1, "{s}");
    assert_eq!(failed[0]["rank"], 1);
    assert!(failed[0]["errors"][0]
        .as_str()
        .unwrap()
        .contains("rank_1_activations.log"));
    let compared: Vec<u64> = s["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["rank"].as_u64().unwrap())
        .collect();
    assert_eq!(compared, [0, 2, 3]);
    let index = std::fs::read_to_string(tmp.path().join("out/index.html")).unwrap();
    assert!(index.contains("input error</b>"), "the index lists rank 1");
}

#[test]
fn options_that_match_nothing_are_warned_about() {
    let tmp = TempDir::new().unwrap();
    let r = compare(
        &tmp,
        &testdata(MULTI_A),
        &testdata(MULTI_B),
        &[
            "--ignore-op",
            "nosuchop",
            "--ignore-op",
            "_allgather_base_",
            "--rank-map",
            "0:7",
            "--layer-offset",
            "run2:9=1",
        ],
    );
    r.stderr_has("--ignore-op nosuchop: no op of that name")
        .stderr_has("--rank-map 0:7 compared nothing")
        .stderr_has("--layer-offset run2:9=1 applies to no compared rank");
    assert!(
        !r.stderr.contains("--ignore-op _allgather_base_"),
        "an op the logs have is not warned about:\n{}",
        r.stderr
    );
}

#[test]
fn filtered_pages_count_their_rows_among_the_shown_ones() {
    let tmp = TempDir::new().unwrap();
    let r = compare(
        &tmp,
        &testdata(BUG_A),
        &testdata(BUG_B),
        &["--html-rows", "10", "--page-rows", "7"],
    );
    r.expect(1);
    let page = std::fs::read_to_string(r.out.join("rank0-page2.html")).unwrap();
    assert!(
        page.contains("diverging rows 8–14 of the 102 shown (265 rows in all)"),
        "page 2 of the diverging rows"
    );
    let index = std::fs::read_to_string(r.out.join("index.html")).unwrap();
    assert!(
        index.contains("title=\"diverging rows 8–14 of the 102 shown\""),
        "the index's link to page 2 says what it holds"
    );
}

#[test]
fn two_logs_of_one_rank_in_a_folder_exit_2_naming_both() {
    let tmp = TempDir::new().unwrap();
    let a = tmp.path().join("a");
    std::fs::create_dir_all(&a).unwrap();
    let log = read_testdata(BUG_A);
    write(&a, "rank_0_activations.log", &log);
    write(&a, "rank_0_activations.log.gz", &gzip(&log));
    let r = compare(&tmp, &a, &testdata("bug_layer2/run_B"), &[]);
    r.expect(2)
        .stderr_has("rank 0 has two logs")
        .stderr_has("rank_0_activations.log.gz");
}

#[test]
fn gen_into_an_unwritable_place_names_it() {
    let tmp = TempDir::new().unwrap();
    let file = write(tmp.path(), "a_file", b"x");
    let (d1, d2) = (file.join("run1"), file.join("run2"));
    let r = actdiff(
        [
            OsStr::new("gen"),
            d1.as_os_str(),
            d2.as_os_str(),
            OsStr::new("--ops"),
            OsStr::new("10"),
        ],
        tmp.path().join("unused"),
    );
    r.expect(2).stderr_has(&d1.display().to_string());
}

#[test]
fn jobs_out_of_range_exit_2_and_in_range_works() {
    let tmp = TempDir::new().unwrap();
    for bad in ["0", "100000"] {
        let r = compare(&tmp, &testdata(BUG_A), &testdata(BUG_B), &["-j", bad]);
        r.expect(2).stderr_has("1..=1024");
    }
    let r = compare(&tmp, &testdata(BUG_A), &testdata(BUG_B), &["-j", "3"]);
    r.expect(1);
}

#[test]
fn duplicate_keys_exit_2_with_both_lines() {
    let tmp = TempDir::new().unwrap();
    let log = read_testdata(BUG_A);
    // Copy the block of `layers.0.attention_norm/op_1_add_` to after the
    // next block, and fix the header count so only the duplicate is wrong.
    let key = b"[layers.0.attention_norm/op_1_add_]";
    let s = find(&log, key, 0);
    let e = find(&log, b"\n[", s) + 1;
    let insert_at = find(&log, b"\n[", e) + 1;
    let mut dup = log[..insert_at].to_vec();
    dup.extend_from_slice(&log[s..e]);
    dup.extend_from_slice(&log[insert_at..]);
    let header = format!("Total captured activations: {BUG_OPS}");
    let fixed = format!("Total captured activations: {}", BUG_OPS + 1);
    let dup = String::from_utf8(dup)
        .unwrap()
        .replacen(&header, &fixed, 1)
        .into_bytes();
    let (l1, _) = line_col(&dup, s);
    let (l2, _) = line_col(&dup, insert_at);
    let path = write(tmp.path(), "dup.log", &dup);

    let r = compare(&tmp, &path, &testdata(BUG_A), &[]);
    r.expect(2)
        .stderr_has("dup.log")
        .stderr_has("layers.0.attention_norm/op_1_add_")
        .stderr_has(&format!("lines {l1} and {l2}"))
        .stderr_has("--allow-duplicates");

    // With --allow-duplicates the comparison runs: the second occurrence
    // has no partner, so the runs differ.
    let r = compare(&tmp, &path, &testdata(BUG_A), &["--allow-duplicates"]);
    r.expect(1);
    assert_eq!(counts(&r.summary()["counts"]), (BUG_OPS as u64, 0, 1, 0));
}

#[test]
fn bad_rank_map_exit_2() {
    let tmp = TempDir::new().unwrap();
    let r = compare(
        &tmp,
        &testdata(MULTI_A),
        &testdata(MULTI_B),
        &["--rank-map", "1-2"],
    );
    r.expect(2).stderr_has("--rank-map").stderr_has("1-2");
    let r = compare(
        &tmp,
        &testdata(MULTI_A),
        &testdata(MULTI_B),
        &["--rank-map", "0:x"],
    );
    r.expect(2).stderr_has("0:x");
}

#[test]
fn unknown_option_exit_2() {
    let a = testdata(BUG_A);
    let r = Run::of(
        support::actdiff()
            .arg("compare")
            .arg(&a)
            .arg(&a)
            .arg("--no-such-option"),
        "out",
    );
    r.expect(2).stderr_has("--no-such-option");
}

#[test]
fn missing_arguments_exit_2() {
    Run::args(["compare"], "out").expect(2).stderr_has("Usage");
}

#[test]
fn help_exit_0() {
    Run::args(["compare", "--help"], "out")
        .expect(0)
        .stdout_has("--allow-incomplete");
}

// ---------------------------------------------------------------- exit 3

/// bug_layer2 run_A cut in the middle of the L2 norm value of a block past
/// the middle of the file, without a final newline. Returns the bytes, the
/// key of the cut block and the number of blocks left.
fn truncated_log() -> (Vec<u8>, String, usize) {
    let log = read_testdata(BUG_A);
    let at = find(&log, b"  L2 norm: ", log.len() / 2);
    let cut = at + b"  L2 norm: 1.2".len();
    let bytes = log[..cut].to_vec();
    let block = bytes
        .windows(2)
        .rposition(|w| w == b"\n[")
        .expect("a block starts before the cut")
        + 2;
    let close = find(&bytes, b"]\n", block);
    let key = String::from_utf8(bytes[block..close].to_vec()).unwrap();
    let blocks = bytes.windows(2).filter(|w| w == b"\n[").count();
    (bytes, key, blocks)
}

#[test]
fn truncated_log_exit_3() {
    let tmp = TempDir::new().unwrap();
    let (bytes, _, blocks) = truncated_log();
    assert_ne!(bytes.last(), Some(&b'\n'));
    let cut = write(tmp.path(), "cut.log", &bytes);
    let r = compare(&tmp, &cut, &testdata(BUG_A), &[]);
    r.expect(3)
        .stderr_has("cut.log")
        .stderr_has("truncated")
        .stderr_has(&format!("declares {BUG_OPS} ops, parsed {blocks}"));
    let s = r.summary();
    assert_eq!(s["exit_status"], 3);
    assert_eq!(s["ranks"][0]["run1"]["truncated_blocks"], 1);
    assert!(
        s["verdict"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v.as_str().unwrap().starts_with("incomplete input")),
        "{}",
        s["verdict"]
    );
}

#[test]
fn truncated_log_allow_incomplete_exit_1_row_truncated() {
    let tmp = TempDir::new().unwrap();
    let (bytes, key, blocks) = truncated_log();
    let cut = write(tmp.path(), "cut.log", &bytes);
    let rows = tmp.path().join("rows.jsonl");
    let r = compare(
        &tmp,
        &cut,
        &testdata(BUG_A),
        &["--allow-incomplete", "--rows", rows.to_str().unwrap()],
    );
    r.expect(1).stderr_has("truncated");
    let rows = read_rows(&rows);
    assert_eq!(rows.len(), BUG_OPS);
    let truncated: Vec<&Value> = rows.iter().filter(|r| r["status"] == "truncated").collect();
    assert_eq!(truncated.len(), 1, "exactly the cut block");
    assert_eq!(truncated[0]["key1"], key.as_str());
    assert_eq!(truncated[0]["key2"], key.as_str());
    let n = |st: &str| rows.iter().filter(|r| r["status"] == st).count();
    // Blocks before the cut match; blocks after it exist in run 2 only.
    assert_eq!(n("match"), blocks - 1);
    assert_eq!(n("only2"), BUG_OPS - blocks);
    assert_eq!(n("diff") + n("only1"), 0);
    let s = r.summary();
    assert_eq!(s["exit_status"], 1);
    assert_eq!(s["counts"]["truncated"], 1);
}

#[test]
fn header_count_mismatch_exit_3() {
    let tmp = TempDir::new().unwrap();
    let log = String::from_utf8(read_testdata(BUG_A)).unwrap();
    let header = format!("Total captured activations: {BUG_OPS}\n");
    assert!(log.starts_with(&header));
    let more = log.replacen(
        &header,
        &format!("Total captured activations: {}\n", BUG_OPS + 1),
        1,
    );
    let path = write(tmp.path(), "count.log", more.as_bytes());
    let r = compare(&tmp, &testdata(BUG_A), &path, &[]);
    r.expect(3)
        .stderr_has("count.log")
        .stderr_has(&format!("declares {} ops, parsed {BUG_OPS}", BUG_OPS + 1));
    assert_eq!(r.summary()["exit_status"], 3);

    // --allow-incomplete lifts exit 3; the summary still says why the input
    // is incomplete.
    let r = compare(&tmp, &testdata(BUG_A), &path, &["--allow-incomplete"]);
    assert_ne!(r.code, 3, "{}", r.stderr);
    assert!(r.code == 0 || r.code == 1, "{}", r.stderr);
    let s = r.summary();
    assert!(
        s["verdict"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v.as_str().unwrap().starts_with("incomplete input")),
        "{}",
        s["verdict"]
    );
}

// ---------------------------------------------------------------- odd but valid input

#[test]
fn crlf_copy_matches_lf_original() {
    let tmp = TempDir::new().unwrap();
    let lf = testdata(BUG_A);
    let log = read_testdata(BUG_A);
    let crlf: Vec<u8> = log
        .iter()
        .flat_map(|b| {
            if *b == b'\n' {
                vec![b'\r', b'\n']
            } else {
                vec![*b]
            }
        })
        .collect();
    let crlf_path = write(tmp.path(), "crlf.log", &crlf);
    let rows = tmp.path().join("rows.jsonl");
    let r = compare(&tmp, &crlf_path, &lf, &["--rows", rows.to_str().unwrap()]);
    r.expect(0).stderr_has("crlf.log");
    let crlf_rows = std::fs::read(&rows).unwrap();
    assert!(!crlf_rows.contains(&b'\r'), "a CR in the --rows file");
    assert_eq!(read_rows(&rows).len(), BUG_OPS);
    assert_eq!(counts(&r.summary()["counts"]), (BUG_OPS as u64, 0, 0, 0));

    // Byte for byte the rows of the LF file compared with itself.
    let tmp2 = TempDir::new().unwrap();
    let rows_lf = tmp2.path().join("rows.jsonl");
    compare(&tmp2, &lf, &lf, &["--rows", rows_lf.to_str().unwrap()]).expect(0);
    assert_eq!(crlf_rows, std::fs::read(&rows_lf).unwrap());
}

#[test]
fn mixed_crlf_and_lf_matches_lf_original() {
    let tmp = TempDir::new().unwrap();
    let log = read_testdata(BUG_A);
    let mut mixed = Vec::with_capacity(log.len() + log.len() / 40);
    for (i, line) in log.split_inclusive(|b| *b == b'\n').enumerate() {
        if i % 2 == 0 && line.ends_with(b"\n") {
            mixed.extend_from_slice(&line[..line.len() - 1]);
            mixed.extend_from_slice(b"\r\n");
        } else {
            mixed.extend_from_slice(line);
        }
    }
    let path = write(tmp.path(), "mixed.log", &mixed);
    let rows = tmp.path().join("rows.jsonl");
    let r = compare(
        &tmp,
        &testdata(BUG_A),
        &path,
        &["--rows", rows.to_str().unwrap()],
    );
    r.expect(0);
    assert_eq!(read_rows(&rows).len(), BUG_OPS);
}

#[test]
fn non_utf8_key_warns_with_position_and_still_compares() {
    let tmp = TempDir::new().unwrap();
    let log = read_testdata(BUG_A);
    let key = b"[layers.0.attention_norm/op_2_mul]";
    let at = find(&log, key, 0);
    let mut bytes = log[..at].to_vec();
    bytes.extend_from_slice(b"[layers.0.attention_norm/op_2_\xff\xfemul]");
    bytes.extend_from_slice(&log[at + key.len()..]);
    let bad = at + b"[layers.0.attention_norm/op_2_".len();
    let (line, col) = line_col(&bytes, bad);
    let path = write(tmp.path(), "latin.log", &bytes);
    let r = compare(&tmp, &path, &path, &[]);
    r.expect(0)
        .stderr_has("warning:")
        .stderr_has(&format!("latin.log:{line}:{col}"))
        .stderr_has("UTF-8");
    assert_eq!(counts(&r.summary()["counts"]), (BUG_OPS as u64, 0, 0, 0));
}

#[test]
fn unknown_field_line_warns_and_still_compares() {
    let tmp = TempDir::new().unwrap();
    let log = read_testdata(BUG_A);
    let block = find(&log, b"[layers.0.attention_norm/op_2_mul]", 0);
    let at = find(&log, b"  Location: ", block);
    let mut bytes = log[..at].to_vec();
    bytes.extend_from_slice(b"  Call type: foo\n");
    bytes.extend_from_slice(&log[at..]);
    let (line, _) = line_col(&bytes, at);
    let path = write(tmp.path(), "extra_field.log", &bytes);
    let r = compare(&tmp, &path, &path, &[]);
    r.expect(0)
        .stderr_has("warning:")
        .stderr_has(&format!("extra_field.log:{line}:"))
        .stderr_has("Call type");
    assert_eq!(counts(&r.summary()["counts"]), (BUG_OPS as u64, 0, 0, 0));
}

#[test]
fn gzip_named_gz_matches_plain_log() {
    let tmp = TempDir::new().unwrap();
    let gz = write(
        tmp.path(),
        "rank_0_activations.log.gz",
        &gzip(&read_testdata(BUG_A)),
    );
    let rows = tmp.path().join("rows.jsonl");
    let r = compare(
        &tmp,
        &gz,
        &testdata(BUG_A),
        &["--rows", rows.to_str().unwrap()],
    );
    r.expect(0)
        .stdout_has(&format!("{BUG_OPS} ops vs {BUG_OPS} ops"));
    assert!(!r.stdout.contains(" 0 ops"), "{}", r.stdout);
    assert_eq!(counts(&r.summary()["counts"]), (BUG_OPS as u64, 0, 0, 0));
    let rows = read_rows(&rows);
    assert_eq!(rows.len(), BUG_OPS);
    assert!(rows.iter().all(|r| r["status"] == "match"));
}

#[test]
fn gzip_disguised_as_log_matches_plain_log() {
    let tmp = TempDir::new().unwrap();
    let disguised = write(tmp.path(), "disguised.log", &gzip(&read_testdata(BUG_A)));
    let rows = tmp.path().join("rows.jsonl");
    let r = compare(
        &tmp,
        &testdata(BUG_A),
        &disguised,
        &["--rows", rows.to_str().unwrap()],
    );
    r.expect(0)
        .stdout_has(&format!("{BUG_OPS} ops vs {BUG_OPS} ops"));
    assert!(!r.stdout.contains(" 0 ops"), "{}", r.stdout);
    assert_eq!(counts(&r.summary()["counts"]), (BUG_OPS as u64, 0, 0, 0));
    assert_eq!(
        read_rows(&rows)
            .iter()
            .filter(|r| r["status"] == "match")
            .count(),
        BUG_OPS
    );
}

#[test]
fn gzip_rank_folder_is_discovered() {
    // A folder of gzip-compressed rank logs compares like the plain folder.
    let tmp = TempDir::new().unwrap();
    let dir = tmp.path().join("gz");
    std::fs::create_dir_all(&dir).unwrap();
    for rank in 0..4 {
        let name = format!("rank_{rank}_activations.log");
        let plain = read_testdata(&format!("{MULTI_B}/{name}"));
        write(&dir, &format!("{name}.gz"), &gzip(&plain));
    }
    let r = compare(&tmp, &testdata(MULTI_B), &dir, &[]);
    r.expect(0);
    let s = r.summary();
    assert_eq!(s["ranks"].as_array().unwrap().len(), 4);
    assert_eq!(counts(&s["counts"]), (4 * 626, 0, 0, 0));
}

#[test]
fn corrupt_gzip_exit_2_names_file() {
    // Corrupt deflate data, and a file cut before any log byte (a cut
    // later is a truncated log: `a_cut_gzip_is_a_truncated_log`).
    let tmp = TempDir::new().unwrap();
    let gz = gzip(&read_testdata(BUG_A));
    let mut flipped = gz.clone();
    for b in &mut flipped[30..60] {
        *b ^= 0xa5;
    }
    let path = write(tmp.path(), "flipped.log.gz", &flipped);
    let r = compare(&tmp, &path, &testdata(BUG_A), &[]);
    r.expect(2).stderr_has("flipped.log.gz").stderr_has("gzip");
    let path = write(tmp.path(), "header.log.gz", &gz[..10]);
    let r = compare(&tmp, &path, &testdata(BUG_A), &[]);
    r.expect(2)
        .stderr_has("header.log.gz")
        .stderr_has("cut before any log data");
}

/// The origin line's count agrees with its verb: "1 diverging row traces
/// back to it", "2 diverging rows trace back to it"; an origin that is the
/// only diverging row says so, not "0 diverging rows trace back to it"
/// (new-user trial 17 L2).
#[test]
fn inherited_count_agrees_with_its_verb() {
    let tmp = TempDir::new().unwrap();
    let block = |key: &str, out: &str, input: &str, producers: &str| {
        format!(
            "[{key}]\n  Shape: torch.Size([2]), Dtype: torch.float32\n  Output hash: {out}\n  Input hashes: {input}\n  Input producers: {producers}\n\n"
        )
    };
    let log = |name: &str, blocks: &[String]| {
        let text = format!(
            "Total captured activations: {}\n\n{}",
            blocks.len(),
            blocks.concat()
        );
        write(tmp.path(), name, text.as_bytes())
    };
    // Run 2 changes op_0's output; op_1 (and op_2) read it.
    let a0 = block("m/op_0_mm", "1.000000e+00", "5.000000e+00", ";");
    let b0 = block("m/op_0_mm", "1.500000e+00", "5.000000e+00", ";");
    let a1 = block("m/op_1_relu", "2.000000e+00", "1.000000e+00", "m/op_0_mm");
    let b1 = block("m/op_1_relu", "2.500000e+00", "1.500000e+00", "m/op_0_mm");
    let a2 = block("m/op_2_relu", "3.000000e+00", "1.000000e+00", "m/op_0_mm");
    let b2 = block("m/op_2_relu", "3.500000e+00", "1.500000e+00", "m/op_0_mm");
    let one = compare(
        &tmp,
        &log("a1.log", &[a0.clone(), a1.clone()]),
        &log("b1.log", &[b0.clone(), b1.clone()]),
        &[],
    );
    one.expect(1)
        .stdout_has("first origin: m/op_0_mm")
        .stdout_has("  1 diverging row traces back to it (");
    let alone = compare(
        &tmp,
        &log("a0.log", std::slice::from_ref(&a0)),
        &log("b0.log", std::slice::from_ref(&b0)),
        &[],
    );
    alone
        .expect(1)
        .stdout_has("first origin: m/op_0_mm")
        .stdout_has("  no other diverging row traces back to it\n");
    assert!(
        !alone.stdout.contains("0 diverging rows"),
        "{}",
        alone.context()
    );
    let two = compare(
        &tmp,
        &log("a2.log", &[a0, a1, a2]),
        &log("b2.log", &[b0, b1, b2]),
        &[],
    );
    two.expect(1)
        .stdout_has("  2 diverging rows trace back to it (");
}

/// `compare` of the bundled bug_layer2 pair with `extra` options.
fn compare_bug(tmp: &TempDir, extra: &[&str]) -> Run {
    compare(tmp, &testdata(BUG_A), &testdata(BUG_B), extra)
}

/// A negative `--layer-offset` that would number layers below 0 leaves
/// those keys as they are, and says so (it did nothing silently).
#[test]
fn a_layer_offset_below_layer_0_is_warned_about() {
    let tmp = TempDir::new().unwrap();
    let r = compare_bug(&tmp, &["--layer-offset", "run2=-2"]);
    r.stderr_has(
        "rank 0: --layer-offset run2=-2 would number run2's layers 0–1 below 0; their 122 ops keep their keys as they are",
    );
    // An offset that keeps every layer at 0 or above is not warned about.
    let ok = compare_bug(&tmp, &["--layer-offset", "run2=2"]);
    assert!(!ok.stderr.contains("below 0"), "{}", ok.stderr);
}

/// A config's `[dtype.X]` that judges no row (a misspelt dtype) is warned
/// about, an error under `--strict`; one that judges rows, and
/// `--dtype-tolerance`'s built-in defaults, are not.
#[test]
fn a_config_dtype_section_that_judges_no_row_is_warned_about() {
    let tmp = TempDir::new().unwrap();
    let cfg = tmp.path().join("actdiff.toml");
    std::fs::write(
        &cfg,
        "[dtype.bfloat17]\nrtol = 1e-2\n\n[dtype.float32]\nrtol = 1e-6\n",
    )
    .unwrap();
    let cfg = cfg.to_str().unwrap();
    let warned = format!(
        "{cfg} [dtype.bfloat17] judged no row (no row has that dtype in its Shape line, or a rule judged each that does)"
    );
    let r = compare_bug(&tmp, &["--config", cfg, "--dtype-tolerance"]);
    r.expect(1).stderr_has(&warned);
    assert!(!r.stderr.contains("[dtype.float32]"), "{}", r.stderr);
    assert!(!r.stderr.contains("[dtype.bfloat16]"), "{}", r.stderr);
    // In the report too: summary.json's warnings and the index.
    let s = r.summary();
    assert!(
        s["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| w.as_str() == Some(warned.as_str())),
        "{s}"
    );
    let index = std::fs::read_to_string(r.out.join("index.html")).unwrap();
    assert!(index.contains("[dtype.bfloat17] judged no row"), "index");
    // --strict: the same message, as an error.
    compare_bug(&tmp, &["--config", cfg, "--strict"])
        .expect(2)
        .stderr_has(&format!("{warned} (--strict)"));
}

/// `--rtol`/`--atol` take what a config's `rtol`/`atol` take: a finite,
/// non-negative number.
#[test]
fn an_infinite_tolerance_is_refused_on_the_command_line_as_in_a_config() {
    let tmp = TempDir::new().unwrap();
    for arg in ["--rtol=inf", "--atol=-1", "--rtol=NaN"] {
        compare_bug(&tmp, &[arg])
            .expect(2)
            .stderr_has("tolerances must be finite, non-negative numbers");
    }
}

/// A config file that cannot be read is named with the OS's reason, not
/// at a line and column of a file that is not there.
#[test]
fn a_missing_config_file_is_named_without_a_position() {
    let tmp = TempDir::new().unwrap();
    let r = compare_bug(&tmp, &["--config", "nonexistent.toml"]);
    r.expect(2)
        .stderr_has("nonexistent.toml: No such file or directory");
    assert!(!r.stderr.contains("nonexistent.toml:1:1"), "{}", r.stderr);
}

// ------------------------------------------- layers, headline, non-finite

/// A log of `blocks` (key, Output hash, Min) in the tracer's format.
fn blocks_log(dir: &Path, name: &str, blocks: &[(&str, &str, &str)]) -> PathBuf {
    let mut text = format!("Total captured activations: {}\n\n", blocks.len());
    for (key, hash, min) in blocks {
        text.push_str(&format!(
            "[{key}]\n  Shape: torch.Size([2]), Dtype: torch.float32\n  Min: {min}\n  Output hash: {hash}\n  Input hashes: 5.000000e+00\n\n"
        ));
    }
    write(dir, name, text.as_bytes())
}

/// The ops of a two-block model named `blocks.N` (not `layers.N`), their
/// Output hashes from `hash(block, op)`.
fn blocks_model(first: u32, hash: impl Fn(u32, u32) -> String) -> Vec<(String, String)> {
    let mut ops = vec![("tok/op_0_embedding".to_string(), "1.000000e+00".to_string())];
    for b in first..first + 2 {
        for (i, m) in ["attn.qkv", "attn.proj", "mlp.fc1"].iter().enumerate() {
            let i = i as u32;
            ops.push((format!("blocks.{b}.{m}/op_{i}_mm"), hash(b - first, i)));
        }
    }
    ops.push(("head/op_0_mm".to_string(), "9.000000e+00".to_string()));
    ops
}

fn write_model(dir: &Path, name: &str, ops: &[(String, String)]) -> PathBuf {
    let blocks: Vec<(&str, &str, &str)> = ops
        .iter()
        .map(|(k, h)| (k.as_str(), h.as_str(), "0.000000e+00"))
        .collect();
    blocks_log(dir, name, &blocks)
}

/// `blocks.N` keys are layers: the Parquet `layer` column holds N (null for
/// the ops outside the blocks) and the heatmap has a column per block.
#[test]
fn blocks_n_keys_fill_the_parquet_layer_and_the_heatmap_columns() {
    use arrow_array::{Array, UInt32Array};
    let tmp = TempDir::new().unwrap();
    let base = |b: u32, i: u32| format!("{}.000000e+00", 2 + b * 3 + i);
    let a = write_model(tmp.path(), "a.log", &blocks_model(0, base));
    // Run 2 differs in block 1's fc1.
    let changed = move |b: u32, i: u32| {
        if (b, i) == (1, 2) {
            "7.500000e+01".to_string()
        } else {
            base(b, i)
        }
    };
    let b = write_model(tmp.path(), "b.log", &blocks_model(0, changed));
    let rows = tmp.path().join("rows.parquet");
    let r = compare(&tmp, &a, &b, &["--rows", rows.to_str().unwrap()]);
    r.expect(1);
    let batches: Vec<arrow_array::RecordBatch> =
        parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
            std::fs::File::open(&rows).unwrap(),
        )
        .unwrap()
        .build()
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    let layers: Vec<Option<u32>> = batches
        .iter()
        .flat_map(|b| {
            let col = b
                .column_by_name("layer")
                .unwrap()
                .as_any()
                .downcast_ref::<UInt32Array>()
                .unwrap()
                .clone();
            (0..col.len())
                .map(|i| col.is_valid(i).then(|| col.value(i)))
                .collect::<Vec<_>>()
        })
        .collect();
    let mut want = vec![None];
    want.extend([Some(0); 3]);
    want.extend([Some(1); 3]);
    want.push(None);
    assert_eq!(layers, want);
    // The heatmap: "no layer" and one column per block.
    let overview = std::fs::read_to_string(r.out.join("rank0-page1.html")).unwrap();
    for col in ["no layer · ", "layer 0 · ", "layer 1 · "] {
        assert!(overview.contains(col), "heatmap lacks `{col}`");
    }
    assert!(
        overview.contains("layer 1 · mm: 1 of 3 rows diverge"),
        "{overview}"
    );
}

/// `--layer-offset` shifts `blocks.N` as it shifts `layers.N`: a pipeline
/// stage's `blocks.0`–`blocks.1` pair by exact key with the whole model's
/// `blocks.2`–`blocks.3`.
#[test]
fn layer_offset_applies_to_blocks_n_keys() {
    let tmp = TempDir::new().unwrap();
    let hash = |b: u32, i: u32| format!("{}.000000e+00", 2 + b * 3 + i);
    let whole = write_model(tmp.path(), "whole.log", &blocks_model(2, hash));
    let stage = write_model(tmp.path(), "stage.log", &blocks_model(0, hash));
    let rows = tmp.path().join("rows.jsonl");
    let r = compare(
        &tmp,
        &whole,
        &stage,
        &["--layer-offset", "run2=2", "--rows", rows.to_str().unwrap()],
    );
    r.expect(0);
    let rows = read_rows(&rows);
    assert_eq!(rows.len(), 8);
    for row in &rows {
        assert_eq!(row["status"], "match", "{row}");
        assert_eq!(row["strategy"], "exact", "{row}");
    }
    let qkv = rows
        .iter()
        .find(|r| r["key1"] == "blocks.2.attn.qkv/op_0_mm")
        .unwrap();
    assert_eq!(qkv["key2"], "blocks.0.attn.qkv/op_0_mm");
    // Without the offset the block ops pair by stats, with the hint.
    let rows2 = tmp.path().join("rows2.jsonl");
    compare(&tmp, &whole, &stage, &["--rows", rows2.to_str().unwrap()]).expect(0);
    let qkv = read_rows(&rows2)
        .into_iter()
        .find(|r| r["key1"] == "blocks.2.attn.qkv/op_0_mm")
        .unwrap();
    assert_ne!(qkv["strategy"], "exact", "{qkv}");
    assert!(
        qkv["notes"]
            .as_array()
            .unwrap()
            .iter()
            .any(|n| n.as_str().unwrap().contains("layer index (2 vs 0)")),
        "{qkv}"
    );
}

/// A causally-masked model's `masked_fill` with `-inf` is non-finite in
/// both runs: no "first non-finite" line names it. The first row whose
/// finiteness differs is named, with the run it is non-finite in.
/// `summary.json` keeps the first non-finite row of each run.
#[test]
fn first_non_finite_is_told_only_where_finiteness_differs() {
    let tmp = TempDir::new().unwrap();
    let ops = |softmax: &'static str| {
        vec![
            ("blocks.0.attn.qkv/op_0_mm", "1.000000e+00", "0.000000e+00"),
            ("blocks.0.attn/op_1_masked_fill", "2.000000e+00", "-inf"),
            ("blocks.0.attn/op_2_softmax", "3.000000e+00", softmax),
            ("blocks.1.attn.qkv/op_0_mm", "4.000000e+00", "0.000000e+00"),
            ("blocks.1.attn/op_1_masked_fill", "5.000000e+00", "-inf"),
        ]
    };
    let a = blocks_log(tmp.path(), "a.log", &ops("0.000000e+00"));
    let b = blocks_log(tmp.path(), "b.log", &ops("nan"));
    // Stats do not gate by default: the pair matches, and is still told.
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(0)
        .stdout_has("first non-finite: b.log blocks.0.attn/op_2_softmax (finite in the other run)");
    assert!(
        !r.stdout.contains("masked_fill"),
        "a row non-finite in both runs is named:\n{}",
        r.stdout
    );
    assert!(
        !r.stdout.contains("first non-finite: a.log"),
        "{}",
        r.stdout
    );
    let rc = &r.summary()["ranks"][0]["root_causes"];
    assert_eq!(
        rc["first_nonfinite1"]["key1"],
        "blocks.0.attn/op_1_masked_fill"
    );
    assert_eq!(
        rc["first_nonfinite2"]["key2"],
        "blocks.0.attn/op_1_masked_fill"
    );
    assert!(rc["first_nonfinite_only1"].is_null(), "{rc}");
    assert_eq!(
        rc["first_nonfinite_only2"]["key2"],
        "blocks.0.attn/op_2_softmax"
    );
    // Non-finite in both runs everywhere: no line at all.
    let c = blocks_log(tmp.path(), "c.log", &ops("0.000000e+00"));
    let same = compare(&tmp, &a, &c, &[]);
    same.expect(0);
    assert!(!same.stdout.contains("non-finite"), "{}", same.stdout);
}

/// An op only in run 1 before the first differing pair: the headline, the
/// rank's `first divergence:` line, `summary.json` and the index all name
/// the one-sided op as the first divergence (the first gating row in
/// dispatch order), and the headline adds the first cause.
#[test]
fn one_headline_and_one_first_divergence_when_an_only1_row_comes_first() {
    let tmp = TempDir::new().unwrap();
    let a = blocks_log(
        tmp.path(),
        "base.log",
        &[
            ("tok/op_0_embedding", "1.000000e+00", "0.000000e+00"),
            ("blocks.0.attn.qkv/op_0_mm", "2.000000e+00", "0.000000e+00"),
            ("blocks.0.attn.proj/op_1_mm", "3.000000e+00", "0.000000e+00"),
        ],
    );
    let b = blocks_log(
        tmp.path(),
        "test.log",
        &[
            ("blocks.0.attn.qkv/op_0_mm", "2.500000e+00", "0.000000e+00"),
            ("blocks.0.attn.proj/op_1_mm", "3.000000e+00", "0.000000e+00"),
        ],
    );
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1);
    let headline = r.stdout.lines().nth(1).unwrap();
    assert_eq!(
        headline,
        "rank 0 diverges first at `tok/op_0_embedding` (only in base.log; first cause \
         `blocks.0.attn.qkv/op_0_mm`, its inputs' hashes agree, the output differs)."
    );
    r.stdout_has("  first divergence: tok/op_0_embedding (only1,");
    assert_eq!(
        r.stdout.matches("diverges first at").count(),
        1,
        "one headline:\n{}",
        r.stdout
    );
    let s = r.summary();
    assert_eq!(
        s["ranks"][0]["first_divergence"]["key1"],
        "tok/op_0_embedding"
    );
    let index = std::fs::read_to_string(r.out.join("index.html")).unwrap();
    assert!(
        index.contains("diverges first at `tok/op_0_embedding` (only in base.log; first cause"),
        "index headline"
    );
}

/// A gzip file cut short is read to the cut, as `zcat` does: incomplete
/// input (exit 3) with a warning naming the file, or compared under
/// `--allow-incomplete` (exit 1: run 2's later ops are only in run 2), the
/// ops before the cut paired and matching.
#[test]
fn a_cut_gzip_is_a_truncated_log() {
    let tmp = TempDir::new().unwrap();
    let plain = read_testdata(BUG_A);
    let gz = gzip(&plain);
    for (i, keep) in [gz.len() / 4, gz.len() / 2, gz.len() * 3 / 4, gz.len() - 4]
        .into_iter()
        .enumerate()
    {
        let name = format!("cut{i}.log.gz");
        let path = write(tmp.path(), &name, &gz[..keep]);
        let r = compare(&tmp, &path, &testdata(BUG_A), &[]);
        r.expect(3)
            .stdout_has(&name)
            .stdout_has("gzip data cut short: read to the cut");
        let s = r.summary();
        let run1 = &s["ranks"][0]["run1"];
        let entries = run1["entries"].as_u64().unwrap();
        assert!(
            entries > 0 && entries as usize <= BUG_OPS,
            "cut at {keep}: {entries} ops"
        );
        assert!(
            run1["incomplete"]
                .as_array()
                .unwrap()
                .iter()
                .any(|x| x.as_str().unwrap().starts_with("gzip data cut short")),
            "{run1}"
        );
        let allowed = compare(&tmp, &path, &testdata(BUG_A), &["--allow-incomplete"]);
        let c = &allowed.summary()["ranks"][0]["counts"];
        // Every op before the last one read matches its twin.
        assert!(c["match"].as_u64().unwrap() + 1 >= entries, "{c}");
        assert_eq!(c["diff"], 0, "{c}");
        if keep < gz.len() - 8 {
            allowed.expect(1);
            assert!(c["only2"].as_u64().unwrap() > 0, "{c}");
        }
    }
}

/// `-o` naming an existing regular file: one error, naming it, and no
/// second one about a file inside it.
#[test]
fn o_naming_a_file_is_one_clear_error() {
    let tmp = TempDir::new().unwrap();
    let afile = write(tmp.path(), "afile", b"not a folder");
    let r = Run::of(
        support::actdiff()
            .arg("compare")
            .arg(testdata(BUG_A))
            .arg(testdata(BUG_B))
            .arg("-o")
            .arg(&afile),
        &afile,
    );
    r.expect(2);
    let stderr = &r.stderr;
    let errors: Vec<&str> = stderr.lines().filter(|l| l.starts_with("error:")).collect();
    assert_eq!(errors.len(), 1, "{stderr}");
    assert!(
        errors[0].contains("afile: exists and is not a folder"),
        "{stderr}"
    );
    assert!(!stderr.contains("summary.json"), "{stderr}");
    let stdout = &r.stdout;
    assert!(
        stdout.contains("report: not written (exit status 2)"),
        "{stdout}"
    );
    assert!(!stdout.contains("afile/"), "{stdout}");
    assert_eq!(
        std::fs::read(&afile).unwrap(),
        b"not a folder",
        "the file is left alone"
    );
}

/// The header of a hand-written log of `n` ops: the count, no excluded
/// op, the `extra` header lines (each ending in a newline), the separator.
fn hand_header(n: usize, extra: &str) -> String {
    format!(
        "Total captured activations: {n}\nExcluded ops dispatched: (none)\n{extra}{}\n\n",
        "=".repeat(80)
    )
}

/// One hand-written op block of Shape [4, 8] with statistics (L2 norm 1,
/// min -1, max 1, mean 0), the given Output hash, Input hashes and Input
/// producers.
fn stats_block(key: &str, hash: &str, inputs: &str, producers: &str) -> String {
    format!(
        "[{key}]\n  Shape: torch.Size([4, 8]), Dtype: torch.float32\n  L2 norm: 1.0\n  Min: -1.0\n  Max: 1.0\n  Mean: 0.0\n  Output hash: {hash}\n  Input hashes: {inputs}\n  Input producers: {producers}\n\n"
    )
}

/// One hand-written op block (`Phase: backward` when `backward`).
fn op_block(
    key: &str,
    shape: &str,
    out: &str,
    inputs: &str,
    producers: &str,
    backward: bool,
) -> String {
    format!(
        "[{key}]\n  Shape: torch.Size([{shape}]), Dtype: torch.float32\n  Output hash: {out}\n  \
         Input hashes: {inputs}\n  Input producers: {producers}\n{}\n",
        if backward { "  Phase: backward\n" } else { "" }
    )
}

/// A hand-written training step of a 2-layer pre-LN transformer's first
/// block (`blocks.N.*` module names), written as `run_A` (no dropout) and
/// `run_B` (dropout after the attention projection: `bernoulli_`, `div_`,
/// `mul` in `blocks.0.attn`, run B only). Run B's extra forward ops and its
/// dropout backward `mul` shift `blocks.0.attn`'s backward op counters by
/// 4, so its backward `op_9_bmm` / `op_10_bmm` are other ops than run A's.
/// Returns the two run folders.
fn dropout_runs(dir: &Path) -> (PathBuf, PathBuf) {
    let f = |k: &str, s: &str, o: &str, i: &str, p: &str| op_block(k, s, o, i, p, false);
    let b = |k: &str, s: &str, o: &str, i: &str, p: &str| op_block(k, s, o, i, p, true);
    let (pp, pv, qk) = ("4, 32, 32", "4, 32, 16", "4, 16, 32");
    let common = [
        f(
            "blocks.0.ln1/op_0_native_layer_norm",
            "32, 64",
            "1.000000e+01",
            "2.000000e+01",
            "",
        ),
        f(
            "blocks.0.attn.qkv/op_0_mm",
            "32, 192",
            "3.000000e+01",
            "1.000000e+01",
            "blocks.0.ln1/op_0_native_layer_norm",
        ),
        f(
            "blocks.0.attn/op_0_bmm",
            pp,
            "5.000000e+01",
            "3.000000e+01, 3.000000e+01",
            "blocks.0.attn.qkv/op_0_mm;blocks.0.attn.qkv/op_0_mm",
        ),
        f(
            "blocks.0.attn/op_1_div",
            pp,
            "5.100000e+01",
            "5.000000e+01",
            "blocks.0.attn/op_0_bmm",
        ),
        f(
            "blocks.0.attn/op_2__softmax",
            pp,
            "6.000000e+01",
            "5.100000e+01",
            "blocks.0.attn/op_1_div",
        ),
        f(
            "blocks.0.attn/op_3_bmm",
            pv,
            "7.000000e+01",
            "6.000000e+01, 3.000000e+01",
            "blocks.0.attn/op_2__softmax;blocks.0.attn.qkv/op_0_mm",
        ),
        f(
            "blocks.0.attn/op_4_view",
            "32, 64",
            "7.000000e+01",
            "7.000000e+01",
            "blocks.0.attn/op_3_bmm",
        ),
        f(
            "blocks.0.attn.proj/op_0_mm",
            "32, 64",
            "8.000000e+01",
            "7.000000e+01",
            "blocks.0.attn/op_4_view",
        ),
    ]
    .concat();
    let dropout = [
        f(
            "blocks.0.attn/op_5_bernoulli_",
            "32, 64",
            "1.024000e+03",
            "0.000000e+00",
            "",
        ),
        f(
            "blocks.0.attn/op_6_div_",
            "32, 64",
            "1.280000e+03",
            "1.024000e+03",
            "blocks.0.attn/op_5_bernoulli_",
        ),
        f(
            "blocks.0.attn/op_7_mul",
            "32, 64",
            "7.900000e+01",
            "8.000000e+01, 1.280000e+03",
            "blocks.0.attn.proj/op_0_mm;blocks.0.attn/op_6_div_",
        ),
    ]
    .concat();
    // The rest of the step: (key, shape, run A's output, inputs, producers;
    // run B's output, inputs, producers), run B's values changed by the dropout.
    let rest_a = [
        f(
            "blocks.0/op_0_add",
            "32, 64",
            "9.000000e+01",
            "2.000000e+01, 8.000000e+01",
            ";blocks.0.attn.proj/op_0_mm",
        ),
        f(
            "blocks.0.mlp.fc/op_0_mm",
            "32, 256",
            "1.100000e+02",
            "9.000000e+01",
            "blocks.0/op_0_add",
        ),
        f(
            "blocks.0/op_1_add",
            "32, 64",
            "1.200000e+02",
            "9.000000e+01, 1.100000e+02",
            "blocks.0/op_0_add;blocks.0.mlp.fc/op_0_mm",
        ),
        b(
            "blocks.0.attn.proj/op_1_mm",
            "32, 64",
            "2.100000e+01",
            "1.500000e+01",
            "",
        ),
        b(
            "blocks.0.attn/op_5_bmm",
            pp,
            "3.100000e+01",
            "2.100000e+01",
            "blocks.0.attn.proj/op_1_mm",
        ),
        b(
            "blocks.0.attn/op_6_bmm",
            pv,
            "3.200000e+01",
            "2.100000e+01",
            "blocks.0.attn.proj/op_1_mm",
        ),
        b(
            "blocks.0.attn/op_7__softmax_backward_data",
            pp,
            "3.300000e+01",
            "3.100000e+01, 6.000000e+01",
            "blocks.0.attn/op_5_bmm;blocks.0.attn/op_2__softmax",
        ),
        b(
            "blocks.0.attn/op_8_div",
            pp,
            "3.400000e+01",
            "3.300000e+01",
            "blocks.0.attn/op_7__softmax_backward_data",
        ),
        b(
            "blocks.0.attn/op_9_bmm",
            pv,
            "3.500000e+01",
            "3.400000e+01",
            "blocks.0.attn/op_8_div",
        ),
        b(
            "blocks.0.attn/op_10_bmm",
            qk,
            "3.600000e+01",
            "3.400000e+01",
            "blocks.0.attn/op_8_div",
        ),
    ]
    .concat();
    let rest_b = [
        f(
            "blocks.0/op_0_add",
            "32, 64",
            "8.900000e+01",
            "2.000000e+01, 7.900000e+01",
            ";blocks.0.attn/op_7_mul",
        ),
        f(
            "blocks.0.mlp.fc/op_0_mm",
            "32, 256",
            "1.090000e+02",
            "8.900000e+01",
            "blocks.0/op_0_add",
        ),
        f(
            "blocks.0/op_1_add",
            "32, 64",
            "1.190000e+02",
            "8.900000e+01, 1.090000e+02",
            "blocks.0/op_0_add;blocks.0.mlp.fc/op_0_mm",
        ),
        b(
            "blocks.0.attn/op_8_mul",
            "32, 64",
            "1.450000e+01",
            "1.500000e+01, 1.280000e+03",
            ";blocks.0.attn/op_6_div_",
        ),
        b(
            "blocks.0.attn.proj/op_1_mm",
            "32, 64",
            "2.000000e+01",
            "1.450000e+01",
            "blocks.0.attn/op_8_mul",
        ),
        b(
            "blocks.0.attn/op_9_bmm",
            pp,
            "3.000000e+01",
            "2.000000e+01",
            "blocks.0.attn.proj/op_1_mm",
        ),
        b(
            "blocks.0.attn/op_10_bmm",
            pv,
            "3.150000e+01",
            "2.000000e+01",
            "blocks.0.attn.proj/op_1_mm",
        ),
        b(
            "blocks.0.attn/op_11__softmax_backward_data",
            pp,
            "3.250000e+01",
            "3.000000e+01, 6.000000e+01",
            "blocks.0.attn/op_9_bmm;blocks.0.attn/op_2__softmax",
        ),
        b(
            "blocks.0.attn/op_12_div",
            pp,
            "3.350000e+01",
            "3.250000e+01",
            "blocks.0.attn/op_11__softmax_backward_data",
        ),
        b(
            "blocks.0.attn/op_13_bmm",
            pv,
            "3.450000e+01",
            "3.350000e+01",
            "blocks.0.attn/op_12_div",
        ),
        b(
            "blocks.0.attn/op_14_bmm",
            qk,
            "3.550000e+01",
            "3.350000e+01",
            "blocks.0.attn/op_12_div",
        ),
    ]
    .concat();
    let write_run = |name: &str, body: String| {
        let n = body.matches("\n[").count() + 1;
        let text = format!(
            "Total captured activations: {n}\n{}\n\n{body}",
            "=".repeat(80)
        );
        let run = dir.join(name);
        std::fs::create_dir_all(&run).unwrap();
        write(&run, "rank_0_activations.log", text.as_bytes());
        run
    };
    (
        write_run("run_A", common.clone() + &rest_a),
        write_run("run_B", common + &dropout + &rest_b),
    )
}

/// Dropout in run B only (issue 23): the first cause is run B's one-sided
/// dropout op that feeds the residual add, named in the terminal,
/// summary.json, JUnit, the rows and the index; and the backward ops whose
/// counters the extra ops shifted pair with their own ops (no Shape
/// mismatches).
#[test]
fn a_dropout_in_one_run_only_is_named_as_the_cause() {
    let tmp = TempDir::new().unwrap();
    let (a, b) = dropout_runs(tmp.path());
    let junit = tmp.path().join("junit.xml");
    let rows = tmp.path().join("rows.jsonl");
    let r = compare(
        &tmp,
        &a,
        &b,
        &[
            "--junit",
            junit.to_str().unwrap(),
            "--rows",
            rows.to_str().unwrap(),
        ],
    );
    let said = "blocks.0.attn/op_5_bernoulli_… (only in run_B) feeds blocks.0/op_0_add";
    r.expect(1)
        .stdout_has(&format!("rank 0: first one-sided op: {said} (log line "))
        .stdout_has("1 more fed by the same one-sided op");
    let s = r.summary();
    let rank = &s["ranks"][0];
    let first = &rank["root_causes"]["first_cause"];
    assert_eq!(first["kind"], "one_sided");
    assert_eq!(first["row"]["key1"], "blocks.0/op_0_add");
    assert_eq!(first["inputs"], serde_json::json!([1]));
    let chain: Vec<&str> = first["one_sided"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["key2"].as_str().unwrap())
        .collect();
    assert_eq!(
        chain,
        [
            "blocks.0.attn/op_5_bernoulli_",
            "blocks.0.attn/op_6_div_",
            "blocks.0.attn/op_7_mul"
        ]
    );
    assert!(first["one_sided"]
        .as_array()
        .unwrap()
        .iter()
        .all(|x| x["status"] == "only2" && x["key1"].is_null()));
    assert_eq!(
        first["reads"], 1,
        "the dropout's backward mul feeds proj/op_1_mm"
    );
    assert_eq!(rank["root_causes"]["cause_count"], 1);
    assert_eq!(rank["root_causes"]["kinds"]["one_sided"], 2);
    assert_eq!(rank["root_causes"]["kinds"]["entry"], 0);
    // The drifted backward counters: every bmm pairs with its own op.
    assert!(
        rank["shape_mismatches"].is_null(),
        "{}",
        rank["shape_mismatches"]
    );
    assert_eq!(rank["counts"]["only1"], 0);
    assert_eq!(
        rank["counts"]["only2"], 4,
        "bernoulli_, div_, mul and the backward mul"
    );
    let pairs: Vec<(String, String)> = read_rows(&rows)
        .iter()
        .filter(|x| x["status"] != "only2")
        .map(|x| {
            (
                x["key1"].as_str().unwrap().to_string(),
                x["key2"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    for (k1, k2) in [
        ("blocks.0.attn/op_5_bmm", "blocks.0.attn/op_9_bmm"),
        ("blocks.0.attn/op_6_bmm", "blocks.0.attn/op_10_bmm"),
        ("blocks.0.attn/op_9_bmm", "blocks.0.attn/op_13_bmm"),
        ("blocks.0.attn/op_10_bmm", "blocks.0.attn/op_14_bmm"),
    ] {
        assert!(
            pairs.contains(&(k1.into(), k2.into())),
            "{k1} ↔ {k2} in {pairs:?}"
        );
    }
    let add = read_rows(&rows)
        .into_iter()
        .find(|x| x["key1"] == "blocks.0/op_0_add")
        .unwrap();
    let notes = add["notes"].to_string();
    assert!(notes.contains("one-sided op"), "{notes}");
    assert!(
        notes.contains("fed by blocks.0.attn/op_5_bernoulli_ (only in run_B)"),
        "{notes}"
    );
    let junit = std::fs::read_to_string(&junit).unwrap();
    assert!(
        junit.contains(&format!("first one-sided op: {said}")),
        "{junit}"
    );
    let index = std::fs::read_to_string(r.out.join("index.html")).unwrap();
    assert!(index.contains("one-sided op"));
    assert!(index.contains("blocks.0.attn/op_5_bernoulli_"));
}

/// A value that is no number is not compared, so the run never passes on it:
/// exit 3 with the value's file:line:column in the terminal, summary.json
/// and JUnit `<error>`; under `--allow-incomplete` the rest is judged (1).
#[test]
fn an_unreadable_value_is_incomplete_input() {
    let tmp = TempDir::new().unwrap();
    let plain = String::from_utf8(read_testdata(BUG_A)).unwrap();
    let at = plain.find("  L2 norm: ").unwrap() + "  L2 norm: ".len();
    let end = at + plain[at..].find('\n').unwrap();
    let line = plain[..at].matches('\n').count() + 1;
    let bad = format!("{}2.5..53e+04{}", &plain[..at], &plain[end..]);
    let path = write(tmp.path(), "bad.log", bad.as_bytes());
    let junit = tmp.path().join("j.xml");
    let r = compare(
        &tmp,
        &testdata(BUG_A),
        &path,
        &["--junit", junit.to_str().unwrap()],
    );
    let place = format!("bad.log:{line}:12: L2 norm value `2.5..53e+04` is not a number");
    r.expect(3)
        .stdout_has("incomplete input: rank 0 run2")
        .stdout_has(&place);
    let s = r.summary();
    let why = s["ranks"][0]["run2"]["incomplete"][0]
        .as_str()
        .unwrap()
        .to_string();
    assert!(
        why.starts_with("1 unreadable value; the first at ") && why.contains(&place),
        "{why}"
    );
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains("type=\"IncompleteInput\"") && xml.contains(&place),
        "{xml}"
    );
    // Every other row of the log is read: the rest matches.
    let allowed = compare(&tmp, &testdata(BUG_A), &path, &["--allow-incomplete"]);
    allowed.expect(1);
    let c = &allowed.summary()["ranks"][0]["counts"];
    assert_eq!(c["match"].as_u64().unwrap() as usize, BUG_OPS, "{c}");
}

/// An emptied `Output hash:` line: the reference reads it as absent, so
/// the row is `missing`; it was that with no warning and exit 1 (trial
/// 25), as if the numerics diverged. It is an unreadable value now:
/// exit 3, naming file:line:column.
#[test]
fn an_empty_hash_value_is_incomplete_input() {
    let tmp = TempDir::new().unwrap();
    let plain = String::from_utf8(read_testdata(BUG_A)).unwrap();
    let at = plain.find("  Output hash: ").unwrap() + "  Output hash: ".len();
    let end = at + plain[at..].find('\n').unwrap();
    let line = plain[..at].matches('\n').count() + 1;
    let bad = format!("{}{}", &plain[..at], &plain[end..]);
    let path = write(tmp.path(), "empty.log", bad.as_bytes());
    let r = compare(&tmp, &testdata(BUG_A), &path, &[]);
    let place = format!(
        "empty.log:{line}:16: Output hash has no value; read as absent, as the reference does"
    );
    r.expect(3)
        .stdout_has("incomplete input: rank 0 run2")
        .stdout_has(&place);
    let warned = format!("empty.log:{line}:16: run2: Output hash has no value");
    assert!(r.stderr.contains(&warned), "{}", r.stderr);
}

// ------------------------------------------------------- compiled runs

/// A one-rank log with `header` lines after the count: an attention
/// projection, an RMS norm's ops and a residual add, then the output
/// projection; `fused` drops the ops inductor fuses into generated kernels
/// (they dispatch no op).
fn step_log(header: &str, fused: bool) -> String {
    let blocks: Vec<(&str, &str)> = [
        ("layers.0.attention.wq/op_0_mm", "1.000000e+00"),
        ("layers.0.ffn_norm/op_0_pow", "2.000000e+00"),
        ("layers.0.ffn_norm/op_1_mean", "3.000000e+00"),
        ("layers.0/op_0_add", "4.000000e+00"),
        ("layers.0.feed_forward.w2/op_0_mm", "5.000000e+00"),
    ]
    .into_iter()
    .filter(|(k, _)| !fused || k.ends_with("_mm"))
    .collect();
    let mut s = format!(
        "Total captured activations: {}\nExcluded ops dispatched: t, view\n{header}{}\n\n",
        blocks.len(),
        "=".repeat(80)
    );
    for (k, h) in blocks {
        s.push_str(&format!(
            "[{k}]\n  Shape: torch.Size([2, 4]), Dtype: torch.float32\n  Output hash: {h}\n\n"
        ));
    }
    s
}

#[test]
fn ops_fused_away_by_a_compiled_run_2_exit_0_and_are_counted() {
    let tmp = TempDir::new().unwrap();
    for d in ["eager", "inductor"] {
        std::fs::create_dir(tmp.path().join(d)).unwrap();
    }
    let eager = write(
        &tmp.path().join("eager"),
        "rank_0_activations.log",
        step_log("", false).as_bytes(),
    );
    let compiled = write(
        &tmp.path().join("inductor"),
        "rank_0_activations.log",
        step_log("Compiled: inductor\n", true).as_bytes(),
    );
    let rows = tmp.path().join("rows.jsonl");
    let junit = tmp.path().join("junit.xml");
    let run = compare(
        &tmp,
        eager.parent().unwrap(),
        compiled.parent().unwrap(),
        &[
            "--rows",
            rows.to_str().unwrap(),
            "--junit",
            junit.to_str().unwrap(),
        ],
    );
    run.expect(0)
        .stdout_has(
            "3 only in eager, 0 only in inductor (3 ops fused away by the compiler, not gating)",
        )
        .stdout_has("3 ops fused away by inductor (rows only in one run; shown, not gating)");
    let s = run.summary();
    assert_eq!(counts(&s["counts"]), (2, 0, 3, 0));
    assert_eq!(s["counts"]["fused"], 3);
    assert_eq!(s["counts"]["gating"], 0);
    assert_eq!(s["ranks"][0]["counts"]["fused"], 3);
    assert_eq!(s["ranks"][0]["run1"]["compiled"], Value::Null);
    assert_eq!(s["ranks"][0]["run2"]["compiled"], "inductor");
    assert_eq!(s["ranks"][0]["first_divergence"], Value::Null);
    assert_eq!(s["exit_status"], 0);
    let fused_note = "fused away by inductor's compiler (inductor): shown, not gating";
    let rows = read_rows(&rows);
    assert_eq!(rows.len(), 5);
    for r in &rows {
        let has = r["notes"]
            .as_array()
            .is_some_and(|n| n.iter().any(|x| x == fused_note));
        assert_eq!(has, r["status"] == "only1", "{r}");
    }
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains("failures=\"0\"") && xml.contains("errors=\"0\""),
        "{xml}"
    );
    let index = std::fs::read_to_string(run.out.join("index.html")).unwrap();
    assert!(index.contains("3 ops fused away by inductor"), "{index}");

    // Without the header line the same rows gate, as before.
    let plain = write(
        &tmp.path().join("inductor"),
        "rank_0_activations.log",
        step_log("", true).as_bytes(),
    );
    let run = compare(&tmp, eager.parent().unwrap(), plain.parent().unwrap(), &[]);
    run.expect(1)
        .stdout_has("diverged: 0 diff, 3 only in eager");
    assert!(!run.stdout.contains("fused away"), "{}", run.stdout);
    let s = run.summary();
    assert_eq!(
        (
            s["counts"]["fused"].as_u64(),
            s["counts"]["gating"].as_u64()
        ),
        (Some(0), Some(3))
    );
}

/// `actdiff gen TMP/a TMP/b ARGS...` (must succeed); returns the two runs.
fn gen_runs(tmp: &TempDir, args: &[&str]) -> (PathBuf, PathBuf) {
    let (d1, d2) = (tmp.path().join("a"), tmp.path().join("b"));
    let mut gen: Vec<&OsStr> = vec!["gen".as_ref(), d1.as_os_str(), d2.as_os_str()];
    gen.extend(args.iter().map(OsStr::new));
    actdiff(gen, tmp.path().join("unused")).expect(0);
    (d1, d2)
}

/// Issue 26: at many ranks with many verdicts, the opening sentence stays
/// one short sentence: the first clause, the largest groups (at most three
/// clauses), then the other groups counted; the index opens with the same.
#[test]
fn the_opening_sentence_stays_short_with_many_rank_groups() {
    let tmp = TempDir::new().unwrap();
    let (d1, d2) = gen_runs(
        &tmp,
        &[
            "--ops",
            "60",
            "--ranks",
            "40",
            "--perturb",
            "0.05",
            "--seed",
            "3",
        ],
    );
    let r = compare(&tmp, &d1, &d2, &[]);
    r.expect(1);
    let groups = r.summary()["groups"].as_array().unwrap().len();
    assert!(
        groups > 3,
        "{groups} groups: the test needs more than three"
    );
    let line = r.stdout.lines().nth(1).unwrap();
    assert_eq!(line.matches(" first at ").count(), 3, "{line}");
    let rest = format!("and {} more groups that diverge (", groups - 3);
    assert!(
        line.contains(&rest) && line.ends_with("summary.json `groups`)."),
        "{line}"
    );
    let index = std::fs::read_to_string(r.out.join("index.html")).unwrap();
    assert!(
        index.contains(&rest),
        "the index opens with the same sentence"
    );
    // Ranks without a gating difference are counted apart, so that the
    // sentence's counts add up to the ranks compared (trial 18 L1).
    let tmp = TempDir::new().unwrap();
    let (d1, d2) = gen_runs(
        &tmp,
        &[
            "--ops",
            "300",
            "--ranks",
            "100",
            "--perturb-count",
            "1",
            "--seed",
            "2",
        ],
    );
    let r = compare(&tmp, &d1, &d2, &[]);
    r.expect(1);
    let s = r.summary();
    let quiet = s["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["counts"]["gating"] == 0)
        .count();
    assert!(quiet > 0, "the test needs ranks that do not diverge");
    let line = r.stdout.lines().nth(1).unwrap();
    assert!(
        line.ends_with(&format!("summary.json `groups`); {quiet} ranks do not.")),
        "{line}"
    );
    let counted: usize = line
        .split(" more groups that diverge (")
        .nth(1)
        .and_then(|t| t.split(' ').next())
        .and_then(|n| n.parse().ok())
        .unwrap();
    // The named clauses' ranks: `ranks 34, 42 and 47 diverge first at`.
    let named: usize = line
        .split(" first at ")
        .map(|piece| piece.rsplit("), ").next().unwrap_or(piece))
        .filter_map(|c| c.strip_suffix(" diverges").or(c.strip_suffix(" diverge")))
        .map(|c| c.replace(" and ", ", ").split(", ").count())
        .sum();
    assert_eq!(named + counted + quiet, 100, "{line}");
}

/// Issue 26: the HTML budget is the report's, shared out over its ranks:
/// over a rank's share its pages hold the diverging rows with two rows of
/// context each, the folder stays within the budget (summary.json apart,
/// which stays complete) and the index says what was left out.
#[test]
fn the_html_budget_is_shared_over_the_ranks_with_context_rows() {
    let tmp = TempDir::new().unwrap();
    let (d1, d2) = gen_runs(
        &tmp,
        &[
            "--ops",
            "300",
            "--ranks",
            "200",
            "--perturb-count",
            "3",
            "--seed",
            "5",
        ],
    );
    let r = compare(&tmp, &d1, &d2, &["--html-budget-mb", "8"]);
    r.expect(1);
    let mut html = 0;
    for e in std::fs::read_dir(&r.out).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().unwrap() != "summary.json" {
            html += std::fs::metadata(&p).unwrap().len();
        }
    }
    assert!(html <= 8 << 20, "{html} bytes of HTML over an 8 MiB budget");
    let s = r.summary();
    let rank = &s["ranks"][7];
    assert_eq!(rank["html_filtered"], true);
    let shown = rank["html_rows"].as_u64().unwrap();
    assert!(
        (4..=15).contains(&shown),
        "3 diverging rows and their context: {shown}"
    );
    let index = std::fs::read_to_string(r.out.join("index.html")).unwrap();
    assert!(
        index.contains("with 2 rows of context each"),
        "the index says so"
    );
    assert!(index.contains("--html-rows all"));
    // The terminal says it too: the report is not complete HTML.
    assert!(
        r.stdout.contains(
            "The pages of 200 of 200 ranks hold only their diverging rows (200 with 2 rows of context each)"
        ),
        "{}",
        r.stdout
    );
    let page = std::fs::read_to_string(r.out.join("rank7-page1.html")).unwrap();
    assert!(page.contains("the diverging ones with 2 rows of context each"));
    // The default budget (256 MiB) holds every row of this report.
    let tmp2 = TempDir::new().unwrap();
    let r = compare(&tmp2, &d1, &d2, &[]);
    r.expect(1);
    assert_eq!(r.summary()["ranks"][7]["html_filtered"], false);
    assert!(!r.stdout.contains("The pages of"), "{}", r.stdout);
    assert!(
        std::fs::read_to_string(r.out.join("rank7-page1.html"))
            .unwrap()
            .len()
            > 100_000
    );
}

/// Trial 29: with one diverging rank among many, the equal share of the
/// HTML budget cut that rank's pages to a few rows while the matching
/// ranks left theirs unused. What they leave goes to the ranks it cut: the
/// diverging rank's pages hold every row, the matching ranks' none, the
/// banner says which is which, the report stays within the budget, and
/// the rows file holds each row once (the rank compared again for its
/// pages writes no rows).
#[test]
fn the_html_budget_the_matching_ranks_leave_goes_to_the_diverging_rank() {
    let tmp = TempDir::new().unwrap();
    let (d1, d2) = gen_runs(
        &tmp,
        &[
            "--ops",
            "200",
            "--ranks",
            "40",
            "--perturb-count",
            "0",
            "--seed",
            "4",
        ],
    );
    // One value of rank 13 changed.
    let p = d2.join("rank_13_activations.log");
    let log = std::fs::read_to_string(&p).unwrap();
    // The third digit of the first Output hash that is a number (`4.677963e+05`).
    let at = log
        .match_indices("  Output hash: ")
        .map(|(i, m)| i + m.len())
        .find(|&i| log.as_bytes()[i].is_ascii_digit())
        .unwrap()
        + 3;
    let digit = if &log[at..at + 1] == "1" { "2" } else { "1" };
    let edited = format!("{}{digit}{}", &log[..at], &log[at + 1..]);
    std::fs::write(&p, edited).unwrap();
    let rows = tmp.path().join("rows.jsonl");
    // 4 MiB: a 104 KB share, less than a rank's every row.
    let r = compare(
        &tmp,
        &d1,
        &d2,
        &["--html-budget-mb", "4", "--rows", rows.to_str().unwrap()],
    );
    r.expect(1);
    let s = r.summary();
    for rank in s["ranks"].as_array().unwrap() {
        let n = rank["rank"].as_u64().unwrap();
        let expected = if n == 13 { (200, false) } else { (0, true) };
        assert_eq!(
            (
                rank["html_rows"].as_u64().unwrap(),
                rank["html_filtered"].as_bool().unwrap()
            ),
            expected,
            "rank {n}"
        );
    }
    let html: u64 = std::fs::read_dir(&r.out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap() != "summary.json")
        .map(|p| std::fs::metadata(p).unwrap().len())
        .sum();
    assert!(html <= 4 << 20, "{html} bytes of HTML over a 4 MiB budget");
    let page = std::fs::read_to_string(r.out.join("rank13-page1.html")).unwrap();
    assert!(
        page.contains("rank13-row199"),
        "every row of rank 13 is on its page"
    );
    assert!(
        r.stdout.contains(
            "The pages of the 39 ranks whose rows all match hold none of them, because of the report's size budget"
        ),
        "{}",
        r.stdout
    );
    let text = std::fs::read_to_string(&rows).unwrap();
    let of_13 = text.lines().filter(|l| l.contains("\"rank\":13,")).count();
    assert_eq!(of_13, 200, "rank 13's rows once each in the rows file");
}

/// Issue 26: above 64 ranks the terminal stays short, as the index does:
/// the lines of one rank per group for the first 8 groups (those with a
/// gating difference first, the largest first), then at most 20 groups,
/// one line each with their ranks shortened, and the rest counted. At 100
/// ranks of one perturbed row each, every rank's lines were printed (about
/// 7 lines a rank) and every group listed every one of its ranks.
#[test]
fn a_compare_of_many_ranks_prints_a_line_per_group_not_per_rank() {
    let tmp = TempDir::new().unwrap();
    let (d1, d2) = gen_runs(
        &tmp,
        &[
            "--ops",
            "40",
            "--ranks",
            "100",
            "--perturb-count",
            "1",
            "--seed",
            "4",
        ],
    );
    let r = compare(&tmp, &d1, &d2, &[]);
    r.expect(1);
    let out = &r.stdout;
    let s = r.summary();
    let groups = s["groups"].as_array().unwrap();
    assert!(groups.len() > 20, "enough groups to cut: {}", groups.len());
    assert!(out.contains(&format!(
        "100 ranks in {} groups by verdict: the first rank of the first 8 groups listed",
        groups.len()
    )));
    let rank_blocks = out
        .lines()
        .filter(|l| l.starts_with("rank ") && l.contains(" ops vs "))
        .count();
    assert_eq!(rank_blocks, 8, "{out}");
    let group_lines: Vec<&str> = out
        .lines()
        .filter(|l| l.contains(" ranks (") || l.contains(" rank ("))
        .collect();
    assert_eq!(group_lines.len(), 20, "{out}");
    // Gating groups first, the largest first.
    let sizes: Vec<usize> = group_lines
        .iter()
        .map(|l| l.split(' ').next().unwrap().parse().unwrap())
        .collect();
    assert!(sizes.windows(2).all(|w| w[0] >= w[1]), "{sizes:?}");
    assert!(group_lines[0].contains(": first divergence "), "{out}");
    let listed: usize = sizes.iter().sum();
    assert!(out.contains(&format!(
        "… and {} more groups ({} ranks): summary.json `groups`, the index",
        groups.len() - 20,
        100 - listed
    )));
    assert!(out.lines().count() < 100, "{} lines", out.lines().count());
}

/// Per-op logs captured with different `min_numel` (or `op_filter`,
/// `excluded_ops`) number their ops differently: a new user's two
/// identical trainings, one captured with `min_numel=1`, were reported
/// as diverging at step 1 (a step-count `add_` paired with another op).
/// Their `Capture filter:` lines differ: an input error naming both
/// logs and both filters. The same filter, or a log without the line (the
/// reference's), compares as before.
#[test]
fn logs_captured_with_different_filters_are_not_compared() {
    let tmp = TempDir::new().unwrap();
    let log = read_testdata(BUG_A);
    let first_line = find(&log, b"\n", 0) + 1;
    let with = |name: &str, filter: &str| {
        let mut v = log[..first_line].to_vec();
        v.extend_from_slice(format!("Capture filter: {filter}\n").as_bytes());
        v.extend_from_slice(&log[first_line..]);
        write(tmp.path(), &format!("{name}/rank_0_activations.log"), &v)
    };
    let a = with("a", "min_numel=1000");
    let b = with("b", "min_numel=1");
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(2)
        .stderr_has("`min_numel=1000`")
        .stderr_has("`min_numel=1`")
        .stderr_has("capture both runs with the same min_numel");
    assert_eq!(r.summary()["exit_status"], 2);
    let c = with("c", "min_numel=1000");
    compare(&tmp, &a, &c, &[]).expect(0);
    compare(&tmp, &a, &testdata(BUG_A), &[]).expect(0);
}

/// An entry cause (a differing input with no captured producer) between
/// per-op logs of which one ran compiled by a fusing backend: the input
/// may come from an op the compiler fused away, which no log records. A
/// new user's trial changed a LayerNorm eps that inductor fused, and the
/// compare named only "a differing input" at the next matmul. The
/// headline and the terminal now say what may be missing, as for ops
/// below `min_numel`; without a `Compiled:` line they do not.
#[test]
fn an_entry_beside_a_fusing_compiler_says_fused_ops_were_not_captured() {
    let tmp = TempDir::new().unwrap();
    let log = |name: &str, header: &str, input: &str, output: &str| {
        let text = format!(
            "Total captured activations: 2\n{header}{sep}\n\n\
             [m.up/op_0_addmm]\n  Shape: torch.Size([4, 8]), Dtype: torch.float32\n  Output hash: {output}\n  Input hashes: {input}, 3.0\n  Input producers: ;\n\n\
             [m.down/op_0_addmm]\n  Shape: torch.Size([4, 8]), Dtype: torch.float32\n  Output hash: 7{output}\n  Input hashes: {output}\n  Input producers: m.up/op_0_addmm\n\n",
            sep = "=".repeat(80)
        );
        write(
            tmp.path(),
            &format!("{name}/rank_0_activations.log"),
            text.as_bytes(),
        )
    };
    let words =
        "inductor fuses ops into generated kernels that dispatch none, so they were not captured";
    let a = log("a", "Compiled: inductor\n", "1.0", "2.0");
    let b = log("b", "Compiled: inductor\n", "1.5", "2.5");
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1)
        .stdout_has(&format!("(a differing input: input 0; {words}"))
        .stdout_has(&format!(
            "its differing input has no captured producer that diverges; {words}"
        ));
    let c = log("c", "", "1.0", "2.0");
    let d = log("d", "", "1.5", "2.5");
    let r = compare(&tmp, &c, &d, &[]);
    r.expect(1).stdout_has("(a differing input: input 0)");
    assert!(!r.stdout.contains("fuses ops"), "{}", r.stdout);
}

/// A module-level log (`Level: modules`): one module's forward output, its
/// weight's gradient (backward) and the weight after the optimizer, with
/// the given Output hashes.
fn modules_log(output: &str, grad: &str, weight: &str) -> String {
    support::modules_log("", output, grad, weight)
}

/// An op of one run only that changes a parameter in place (an edit after
/// the optimizer step: its `Input parameters:` line names it) says which
/// parameter (trial 29: `<none>/op_51_add_ (only in B)` and no name).
#[test]
fn a_one_sided_in_place_op_on_a_parameter_names_it() {
    let tmp = TempDir::new().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let base = stats_block("fc/op_0_mm", "4.0", "1.0", "");
    let edit = stats_block("<none>/op_0_add_", "5.0", "4.5", "").replace(
        "  Input producers: \n",
        "  Input producers: \n  Input parameters: fc.weight\n",
    );
    write(
        &a,
        "rank_0_activations.log",
        (hand_header(1, "") + &base).as_bytes(),
    );
    write(
        &b,
        "rank_0_activations.log",
        (hand_header(2, "") + &base + &edit).as_bytes(),
    );
    compare(&tmp, &a, &b, &[]).expect(1).stdout_has(
        "rank 0 diverges first at `<none>/op_0_add_` (only in b; it changes the parameter fc.weight in place).",
    );
}

/// Runs of different world sizes (4 DDP ranks against 2) are said to be
/// so, on stderr and in summary.json: every gradient is averaged over the
/// world size (trial 29: DDP's gradient `mul` was named an origin, the
/// world sizes nowhere). Runs of one world size are not.
#[test]
fn runs_of_different_world_sizes_are_said_so() {
    let tmp = TempDir::new().unwrap();
    let log = |world: u32, grad: &str| {
        hand_header(2, &format!("World size: {world}\n"))
            + &stats_block("fc/op_0_mm", "4.0", "1.0", "")
            + &stats_block("fc/op_1_mul", grad, "4.0", "fc/op_0_mm")
    };
    let (a, b) = (tmp.path().join("w4"), tmp.path().join("w2"));
    for rank in 0..4 {
        write(
            &a,
            &format!("rank_{rank}_activations.log"),
            log(4, "1.0").as_bytes(),
        );
    }
    for rank in 0..2 {
        write(
            &b,
            &format!("rank_{rank}_activations.log"),
            log(2, "2.0").as_bytes(),
        );
    }
    let words = "w4 and w2 ran with different world sizes (4 and 2 ranks): with data parallelism each gradient is averaged over the world size";
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1);
    assert!(
        r.stderr.contains(&format!("warning: {words}")),
        "{}",
        r.stderr
    );
    let summary = std::fs::read_to_string(tmp.path().join("out/summary.json")).unwrap();
    assert!(summary.contains(words), "{summary}");
    let c = tmp.path().join("w2b");
    for rank in 0..2 {
        write(
            &c,
            &format!("rank_{rank}_activations.log"),
            log(2, "3.0").as_bytes(),
        );
    }
    let r = compare(&tmp, &b, &c, &[]);
    r.expect(1);
    assert!(!r.stderr.contains("different world sizes"), "{}", r.stderr);
}

/// Every paired row agrees and only ops of one run gate (eager against
/// sdpa attention): a line names those ops by name and count (trial 28
/// W1: the verdict named a mask helper, and the sdpa kernel nowhere).
#[test]
fn ops_of_one_run_only_are_named_when_every_pair_agrees() {
    let tmp = TempDir::new().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let q = stats_block("attn.q/op_0_mm", "4.0", "1.0", "");
    let o = |p: &str| stats_block("attn.o/op_0_mm", "6.0", "5.0", p);
    let eager = hand_header(5, "")
        + &q
        + &stats_block("attn/op_0_bmm", "7.0", "4.0", "attn.q/op_0_mm")
        + &stats_block("attn/op_1__softmax", "8.0", "7.0", "attn/op_0_bmm")
        + &stats_block("attn/op_2_bmm", "5.0", "8.0", "attn/op_1__softmax")
        + &o("attn/op_2_bmm");
    let sdpa = hand_header(3, "")
        + &q
        + &stats_block("attn/op_0_sdpa", "5.0", "4.0", "attn.q/op_0_mm")
        + &o("attn/op_0_sdpa");
    write(&a, "rank_0_activations.log", eager.as_bytes());
    write(&b, "rank_0_activations.log", sdpa.as_bytes());
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1).stdout_has(
        "  every paired row agrees; the runs ran other ops: only in a (3): bmm ×2, _softmax ×1; only in b (1): sdpa ×1\n",
    );
    // The opening sentence says it too, which a step series repeats
    // (trial 66: a clipping threshold never reached read "diverges first
    // at `…_foreach_norm` (only in clipbig)" at every step).
    let opening = r
        .stdout
        .lines()
        .find(|l| l.starts_with("rank 0 diverges first at "));
    assert!(
        opening.is_some_and(|l| l.contains("every paired row agrees; the runs ran other ops")),
        "{}",
        r.stdout
    );
    let summary: Value =
        serde_json::from_slice(&std::fs::read(tmp.path().join("out/summary.json")).unwrap())
            .unwrap();
    let o = &summary["ranks"][0]["one_sided_ops"];
    assert_eq!(
        o["only1"],
        serde_json::json!([[["bmm", 2], ["_softmax", 1]], 3]),
        "{o}"
    );
    // A pair that differs: no such line.
    write(
        &b,
        "rank_0_activations.log",
        sdpa.replace("6.0", "6.5").as_bytes(),
    );
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1);
    assert!(
        !r.stdout.contains("every paired row agrees"),
        "{}",
        r.stdout
    );
}

/// A module that returns two tensors in one run and one in the other
/// (HF's eager attention returns its weights too, sdpa `None`): the
/// sentence says so, and the largest difference is no "rel 1.0" (trial 28
/// F5: the only word of why was in `--rows`).
#[test]
fn a_module_returning_another_number_of_tensors_is_said_so() {
    let tmp = TempDir::new().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    write(
        &a,
        "rank_0_activations.log",
        modules_log("1.0, 8.0", "2.0", "3.0").as_bytes(),
    );
    write(
        &b,
        "rank_0_activations.log",
        modules_log("1.0", "2.0", "3.0").as_bytes(),
    );
    let r = compare(&tmp, &a, &b, &["--rtol", "1e-4"]);
    r.expect(1)
        .stdout_has("rank 0 diverges first at `lin/op_0_output` (the first differing record; it returned 2 output tensors in a and 1 in b; inputs are not recorded at level=modules; every gradient and optimizer record agrees, so this difference does not reach training")
        .stdout_has("  largest diff: lin/op_0_output (output tensors: 2 in a and 1 in b)\n");
    assert!(!r.stdout.contains("rel 1.000e0"), "{}", r.stdout);
    let summary: Value =
        serde_json::from_slice(&std::fs::read(tmp.path().join("out/summary.json")).unwrap())
            .unwrap();
    let f = &summary["ranks"][0]["root_causes"]["first_cause"]["row"];
    assert_eq!(f["output_tensors"], serde_json::json!([2, 1]), "{f}");
}

/// At `level=modules` no random op is recorded: the logs' `RNG state:`
/// lines say whether randomness can explain a first differing record
/// whose records before agree (trial 63: a dropout seed changed read as
/// any change to the computation). Different states at the step's start
/// and a step that draws: randomness named; the same start and different
/// ends: the runs draw differently; no draws in either run: not
/// randomness, unless they start in different states (another seed); no
/// line: nothing said. A first differing record that is the
/// step's first (nothing before it agrees: a step after a diverged one, a
/// resumed job's) is not blamed on randomness (trial 64: an embedding's
/// output). `summary.json` keeps the digests.
#[test]
fn module_level_first_records_say_what_the_rng_state_tells() {
    let rng = |start: &str, end: &str| format!("RNG state: start={start} end={end}\n");
    let (s1, s2, e1, e2) = (
        "00000000000000a1",
        "00000000000000b2",
        "00000000000000c3",
        "00000000000000d4",
    );
    // (run 1's header, run 2's, the first differing record is the step's
    // first, the words wanted)
    let cases: [(String, String, bool, Option<&str>); 7] = [
        (
            rng(s1, e1),
            rng(s2, e2),
            false,
            Some("the records before it agree, and the runs' random state (torch's generators, the logs' `RNG state:`) differs when the step starts and the step draws random numbers: most likely a random op (dropout) in this module draws differently"),
        ),
        (
            rng(s1, e1),
            rng(s1, e2),
            false,
            Some("the records before it agree, and the runs start the step with the same random state (the logs' `RNG state:`) and end it with different ones: they draw random numbers differently"),
        ),
        (
            rng(s1, s1),
            rng(s1, s1),
            false,
            Some("no random numbers are drawn from torch's generators in the step (the logs' `RNG state:`): not randomness"),
        ),
        // Another seed, and no draws in the step (trial 71 F8: "not
        // randomness" for another torch.manual_seed).
        (
            rng(s1, s1),
            rng(s2, s2),
            false,
            Some("no random numbers are drawn from torch's generators in the step, but the runs start it in different random states (the logs' `RNG state:`): they were seeded differently"),
        ),
        (String::new(), String::new(), false, None),
        (rng(s1, e1), rng(s2, e2), true, None),
        (
            rng(s1, s1),
            rng(s2, s2),
            true,
            Some("no random numbers are drawn from torch's generators in the step"),
        ),
    ];
    for (i, (h1, h2, first, want)) in cases.iter().enumerate() {
        let tmp = TempDir::new().unwrap();
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        let output2 = if *first { "1.5" } else { "1.0" };
        write(
            &a,
            "rank_0_activations.log",
            support::modules_log(h1, "1.0", "2.0", "3.0").as_bytes(),
        );
        write(
            &b,
            "rank_0_activations.log",
            support::modules_log(h2, output2, "2.5", "3.5").as_bytes(),
        );
        let r = compare(&tmp, &a, &b, &[]);
        let key = if *first {
            "lin/op_0_output"
        } else {
            "lin/op_1_weight_grad"
        };
        r.expect(1).stdout_has(&format!(
            "rank 0 diverges first at `{key}` (the first differing record; inputs are not recorded at level=modules"
        ));
        match want {
            Some(w) => assert!(r.stdout.contains(w), "case {i}: {}", r.stdout),
            None => assert!(!r.stdout.contains("random"), "case {i}: {}", r.stdout),
        }
        let summary: Value =
            serde_json::from_slice(&std::fs::read(tmp.path().join("out/summary.json")).unwrap())
                .unwrap();
        let side = &summary["ranks"][0]["run1"];
        if h1.is_empty() {
            assert!(side.get("rng_state").is_none(), "{side}");
        } else {
            assert_eq!(side["rng_state"]["start"], s1, "{side}");
        }
    }
}

/// At `level=modules` a differing record is no origin (inputs are not
/// recorded): `summary.json` and the index say "record", not "origin"
/// (trial 10 F1). In a DDP job, a rank whose records differ only after
/// the optimizer (its forward and its own gradients agree) while another
/// rank's forward differs receives the change through the gradient
/// collective, which module-level logs do not record: it is named so,
/// after the rank with the change (trial 10 F2); alone, such a rank keeps
/// its first differing record (a learning rate changed).
#[test]
fn module_level_records_are_no_origins_and_optimizer_only_ranks_receive_the_change() {
    let tmp = TempDir::new().unwrap();
    let same = modules_log("1.0", "2.0", "3.0");
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    for rank in 0..2 {
        write(&a, &format!("rank_{rank}_activations.log"), same.as_bytes());
    }
    write(
        &b,
        "rank_0_activations.log",
        modules_log("1.0", "2.0", "3.5").as_bytes(),
    );
    write(
        &b,
        "rank_1_activations.log",
        modules_log("1.5", "2.5", "3.5").as_bytes(),
    );
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1);
    let s = r.summary();
    let rank = |n: usize| &s["ranks"][n]["root_causes"];
    assert_eq!(rank(1)["first_cause"]["kind"], "record", "{s:#}");
    assert_eq!(rank(1)["kinds"]["record"], 3);
    assert_eq!(rank(1)["kinds"]["origin"], 0);
    assert_eq!(rank(0)["via_collective_only"], true, "{s:#}");
    assert_eq!(rank(0)["see_ranks"], serde_json::json!([1]));
    assert!(rank(0)["first_cause"].is_null());
    assert!(
        r.stdout.contains("rank 1 diverges first at `lin/op_0_output` (the first differing record; inputs are not recorded at level=modules), and rank 0 receives that change through a collective."),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("rank 0: its forward outputs and its own gradients (recorded before the gradient collective) match, only its parameters after the optimizer differ"),
        "{}",
        r.stdout
    );
    let index = std::fs::read_to_string(tmp.path().join("out/index.html")).unwrap();
    assert!(index.contains(r#"<b class="bd cause">differing record</b>"#));
    assert!(!index.contains(r#"<b class="bd cause">origin</b>"#));
    // No replicas (two processes without a gradient collective: run 1's
    // ranks hold other parameters), or a rank 0 whose update in run 2 is
    // not rank 1's (its own learning rate): rank 0 keeps its own record
    // (trial 11).
    for (a1, b0) in [("3.1", "3.6"), ("3.0", "3.7")] {
        let (a2, b2) = (
            tmp.path().join(format!("a{a1}{b0}")),
            tmp.path().join(format!("b{a1}{b0}")),
        );
        write(
            &a2,
            "rank_0_activations.log",
            modules_log("1.0", "2.0", a1).as_bytes(),
        );
        write(&a2, "rank_1_activations.log", same.as_bytes());
        write(
            &b2,
            "rank_0_activations.log",
            modules_log("1.0", "2.0", b0).as_bytes(),
        );
        write(
            &b2,
            "rank_1_activations.log",
            modules_log("1.5", "2.5", "3.5").as_bytes(),
        );
        let r = compare(&tmp, &a2, &b2, &[]);
        r.expect(1);
        let s = r.summary();
        let rc = &s["ranks"][0]["root_causes"];
        assert_eq!(rc["via_collective_only"], false, "{a1} {b0}: {s:#}");
        assert_eq!(rc["first_cause"]["kind"], "record");
        assert!(!r.stdout.contains("receives"), "{}", r.stdout);
    }
    // Rank 0 alone: its first differing record, after the optimizer.
    let (a0, b0) = (tmp.path().join("a0"), tmp.path().join("b0"));
    write(&a0, "rank_0_activations.log", same.as_bytes());
    write(
        &b0,
        "rank_0_activations.log",
        modules_log("1.0", "2.0", "3.5").as_bytes(),
    );
    let r = compare(&tmp, &a0, &b0, &[]);
    r.expect(1);
    let s = r.summary();
    assert_eq!(
        s["ranks"][0]["root_causes"]["first_cause"]["kind"], "record",
        "{s:#}"
    );
    assert_eq!(s["ranks"][0]["root_causes"]["via_collective_only"], false);
}

/// Many replicas: each optimizer-only rank names the ranks with a change of
/// their own, the first 16 of them and their count (not the whole list:
/// `summary.json` would grow with the square of the rank count), and the
/// terminal says how many there are.
#[test]
fn optimizer_only_ranks_name_at_most_sixteen_replicas_and_count_them_all() {
    let tmp = TempDir::new().unwrap();
    let same = modules_log("1.0", "2.0", "3.0");
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    for rank in 0..40 {
        write(&a, &format!("rank_{rank}_activations.log"), same.as_bytes());
        let changed = if rank < 20 {
            modules_log("1.0", "2.0", "3.5")
        } else {
            modules_log("1.5", "2.5", "3.5")
        };
        write(
            &b,
            &format!("rank_{rank}_activations.log"),
            changed.as_bytes(),
        );
    }
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1);
    let s = r.summary();
    for n in 0..20 {
        let rc = &s["ranks"][n]["root_causes"];
        assert_eq!(rc["via_collective_only"], true, "rank {n}: {s:#}");
        let want: Vec<u32> = (20..36).collect();
        assert_eq!(rc["see_ranks"], serde_json::json!(want), "rank {n}");
        assert_eq!(rc["see_ranks_total"], 20, "rank {n}");
    }
    assert_eq!(s["ranks"][20]["root_causes"]["see_ranks_total"], 0);
    assert!(
        r.stdout.contains(
            "rank 0: its forward outputs and its own gradients (recorded before the gradient collective) match, only its parameters after the optimizer differ; the change arrives through a collective; see ranks 20–35, … (20 ranks)"
        ),
        "{}",
        r.stdout
    );
}

/// An op of one run only that feeds the first diverging row: the headline
/// names that row, as the `first divergence:` line and `summary.json` do,
/// with the one-sided op as its first cause (trial 10 F5: the headline
/// said "diverges first at `<none>/op_0_add_`" while `first divergence:`
/// said `lin/op_0_mm`).
#[test]
fn the_headline_names_the_first_divergence_a_one_sided_op_feeds() {
    let tmp = TempDir::new().unwrap();
    let block = stats_block;
    let header = |n: usize| hand_header(n, "");
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let log1 = header(2)
        + &block("lin/op_0_mm", "5.0", "2.0, 3.0", ";")
        + &block("lin/op_1_relu", "4.0", "5.0", "lin/op_0_mm");
    let log2 = header(3)
        + &block("<none>/op_0_add_", "3.5", "3.0", "")
        + &block("lin/op_0_mm", "5.5", "2.0, 3.5", ";<none>/op_0_add_")
        + &block("lin/op_1_relu", "4.5", "5.5", "lin/op_0_mm");
    write(&a, "rank_0_activations.log", log1.as_bytes());
    write(&b, "rank_0_activations.log", log2.as_bytes());
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1);
    assert!(
        r.stdout.contains("rank 0 diverges first at `lin/op_0_mm` (differs; first cause `<none>/op_0_add_`, an op only in b that feeds it)."),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("first divergence: lin/op_0_mm"),
        "{}",
        r.stdout
    );
    // The same with no producer named (an excluded view between the
    // one-sided op and the row: `Input producers` empty there): the
    // one-sided op whose Output hash is the input's value (trial 11: an
    // extra dropout was not named, the row was "a differing input").
    let log2 = header(3)
        + &block("<none>/op_0_add_", "3.5", "3.0", "")
        + &block("lin/op_0_mm", "5.5", "2.0, 3.5", ";")
        + &block("lin/op_1_relu", "4.5", "5.5", "lin/op_0_mm");
    write(&b, "rank_0_activations.log", log2.as_bytes());
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1);
    assert!(
        r.stdout.contains("rank 0 diverges first at `lin/op_0_mm` (differs; first cause `<none>/op_0_add_`, an op only in b that feeds it)."),
        "{}",
        r.stdout
    );
}

/// A one-sided cause whose place the other run filled with another op
/// (run b ran `leaky_relu_` where run a ran `relu_`: the same module FQN
/// and op counter) names both ops, in the headline, the cause line, the
/// index's cause and `summary.json` (trial 24 F5: only a's `relu_` was
/// named). An op only added, with nothing at its place in the other run,
/// names no replacement.
#[test]
fn a_replaced_op_names_the_op_the_other_run_ran_in_its_place() {
    let tmp = TempDir::new().unwrap();
    let block = stats_block;
    let header = |n: usize| hand_header(n, "");
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let log = |op: &str, out: &str| {
        header(3)
            + &block("act/op_0_mm", "5.0", "2.0, 3.0", ";")
            + &block(&format!("act/op_1_{op}"), out, "5.0", "act/op_0_mm")
            + &block(
                "act/op_2_add",
                &format!("1{out}"),
                out,
                &format!("act/op_1_{op}"),
            )
    };
    write(&a, "rank_0_activations.log", log("relu_", "4.0").as_bytes());
    write(
        &b,
        "rank_0_activations.log",
        log("leaky_relu_", "4.5").as_bytes(),
    );
    let out = tmp.path().join("out");
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1);
    assert!(
        r.stdout.contains("rank 0 diverges first at `act/op_1_relu_` (an op only in a, feeding `act/op_2_add`; b ran `act/op_1_leaky_relu_` in its place)."),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout.contains("first one-sided op: act/op_1_relu_ (only in a; b ran act/op_1_leaky_relu_ in its place) feeds act/op_2_add"),
        "{}",
        r.stdout
    );
    let summary: serde_json::Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let first = &summary["ranks"][0]["root_causes"]["first_cause"];
    assert_eq!(
        first["in_its_place"]["key2"], "act/op_1_leaky_relu_",
        "{first}"
    );
    assert_eq!(first["in_its_place"]["status"], "only2", "{first}");
    let index = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(
        index.contains("(b ran</span> <a class=fdk"),
        "no replacement in the index"
    );
    // An op b adds, with no op of a at its place (another module): no
    // replacement named.
    let added = header(4)
        + &block("pre/op_0_mul_", "3.5", "3.0", "")
        + &block("act/op_0_mm", "5.5", "2.0, 3.5", ";pre/op_0_mul_")
        + &block("act/op_1_relu_", "4.5", "5.5", "act/op_0_mm")
        + &block("act/op_2_add", "14.5", "4.5", "act/op_1_relu_");
    write(&a, "rank_0_activations.log", log("relu_", "4.0").as_bytes());
    write(&b, "rank_0_activations.log", added.as_bytes());
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1);
    assert!(
        r.stdout
            .contains("pre/op_0_mul_ (only in b) feeds act/op_0_mm"),
        "{}",
        r.stdout
    );
    assert!(!r.stdout.contains("in its place"), "{}", r.stdout);
}

/// The first divergence of the backward phase whose outputs agree (only
/// an input differs, as BatchNorm's backward is passed the running
/// statistics, which it does not read in training) says so on its phase
/// line and in `summary.json`, rather than reading as "the gradients
/// diverge" (trial 24 F4). A backward row whose output differs does not.
#[test]
fn a_phase_line_says_when_only_the_inputs_of_its_row_differ() {
    let tmp = TempDir::new().unwrap();
    let header = |n: usize| hand_header(n, "");
    let log = |stat: &str, grad: &str| {
        header(3)
            + &op_block("bn/op_0_batch_norm", "4, 8", "5.0", "2.0", "", false)
            + &op_block(
                "bn/op_1_running_mean",
                "8",
                stat,
                "5.0",
                "bn/op_0_batch_norm",
                false,
            )
            + &op_block(
                "bn/op_2_batch_norm_backward",
                "4, 8",
                grad,
                &format!("1.0, {stat}"),
                ";bn/op_1_running_mean",
                true,
            )
    };
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    write(&a, "rank_0_activations.log", log("0.5", "7.0").as_bytes());
    write(&b, "rank_0_activations.log", log("0.7", "7.0").as_bytes());
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1).stdout_has(
        "first divergence (backward): bn/op_2_batch_norm_backward (only its inputs differ; its outputs agree)",
    );
    let summary: Value =
        serde_json::from_slice(&std::fs::read(tmp.path().join("out/summary.json")).unwrap())
            .unwrap();
    let f = &summary["ranks"][0]["root_causes"]["first_divergence_backward"];
    assert_eq!(f["only_inputs_differ"], true, "{f}");
    // The gradient differs too: a plain phase line.
    write(&b, "rank_0_activations.log", log("0.7", "7.5").as_bytes());
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1)
        .stdout_has("first divergence (backward): bn/op_2_batch_norm_backward\n");
    // Its Output hash agrees but its Output digests differ: another tensor
    // of the same sum (trial 28: a loss gradient moved to another class
    // column), not an output that agrees.
    let full = |stat: &str, digest: &str| {
        log(stat, "7.0")
            .replace(
                "Excluded ops dispatched: (none)\n",
                "Excluded ops dispatched: (none)\nPrecision: full\n",
            )
            .replace(
                "  Output hash: 7.0\n",
                &format!("  Output hash: 7.0\n  Output digest: {digest}\n"),
            )
    };
    write(
        &a,
        "rank_0_activations.log",
        full("0.5", "0000000000000001").as_bytes(),
    );
    write(
        &b,
        "rank_0_activations.log",
        full("0.7", "0000000000000002").as_bytes(),
    );
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1)
        .stdout_has("first divergence (backward): bn/op_2_batch_norm_backward\n");
    assert!(!r.stdout.contains("its outputs agree"), "{}", r.stdout);
}

/// The cause line and the phase lines say where in the training code the
/// op ran: its block's `Location:` line (trial 26 F7: a changed
/// `clip_grad_norm_` limit was `<none>/op_10_mul`, with no source line
/// though the log has one). A block without the line says nothing more.
#[test]
fn the_cause_and_phase_lines_name_the_source_line() {
    let tmp = TempDir::new().unwrap();
    let header = hand_header(2, "");
    let log = |clip: &str, located: bool| {
        let loc = if located {
            "  Location: train.py:164\n"
        } else {
            ""
        };
        format!(
            "{header}[lin/op_0_mm]\n  Shape: torch.Size([4, 8]), Dtype: torch.float32\n  Output hash: 5.0\n  Input hashes: 2.0\n\n\
             [<none>/op_0_mul]\n  Shape: torch.Size([4, 8]), Dtype: torch.float32\n  Output hash: {clip}\n  Input hashes: 5.0\n  Input producers: lin/op_0_mm\n{loc}\n"
        )
    };
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    write(&a, "rank_0_activations.log", log("1.0", true).as_bytes());
    write(&b, "rank_0_activations.log", log("2.0", true).as_bytes());
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1)
        .stdout_has("first origin: <none>/op_0_mul (log line 10, at train.py:164)")
        .stdout_has("first divergence (forward): <none>/op_0_mul (at train.py:164)\n");
    write(&a, "rank_0_activations.log", log("1.0", false).as_bytes());
    write(&b, "rank_0_activations.log", log("2.0", false).as_bytes());
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1)
        .stdout_has("first origin: <none>/op_0_mul (log line 10)")
        .stdout_has("first divergence (forward): <none>/op_0_mul\n");
}

/// One process against DDP: every paired row agrees, and the only rows of
/// one run are DDP's backward scaling of each gradient before its
/// all-reduce, in a run of several ranks (against one process, or FSDP2
/// over as many ranks). The verdict says what they most likely are (trial
/// 27 F3: "diverges first at `head/op_4_mul` (only in ddp)" and no word
/// why). A `mul` only in the forward, or in a run of one rank, is not
/// said to be one.
#[test]
fn ddp_gradient_scaling_rows_are_said_to_be_likely_that() {
    let tmp = TempDir::new().unwrap();
    let header = hand_header;
    let fwd = op_block("lin/op_0_mm", "4, 8", "5.0", "2.0", "", false);
    let grad = op_block("lin/op_1_mm", "8, 8", "3.0", "1.0", "", true);
    let scale = op_block("lin/op_2_mul", "8, 8", "1.5", "3.0", "lin/op_1_mm", true);
    // DDP's all-reduce of the bucket, only in DDP too.
    let reduce = op_block(
        "lin/op_3_allreduce_",
        "8, 8",
        "1.5",
        "1.5",
        "lin/op_2_mul",
        true,
    );
    let (a, b) = (tmp.path().join("a"), tmp.path().join("ddp"));
    write(
        &a,
        "rank_0_activations.log",
        (header(2, "") + &fwd + &grad).as_bytes(),
    );
    let ddp = header(4, "World size: 2\n") + &fwd + &grad + &scale + &reduce;
    for rank in 0..2 {
        write(&b, &format!("rank_{rank}_activations.log"), ddp.as_bytes());
    }
    let r = compare(&tmp, &a, &b, &["--ranks", "0"]);
    r.expect(1).stdout_has(
        "rank 0 diverges first at `lin/op_2_mul` (only in ddp; the rows only in ddp are 1 backward mul or div op and 1 collective of its 2 ranks, and every paired row agrees: DDP scaling each gradient by the world size before its all-reduce? (--ignore-op mul leaves them out of the verdict))",
    );
    assert_eq!(r.summary()["ranks"][0]["gradient_scaling"]["rows"], 1);
    // Against a run of as many ranks without them (FSDP2, whose
    // reduce-scatter divides on its own: trial 71 F7), the same guess.
    let fsdp = header(2, "World size: 2\n") + &fwd + &grad;
    for rank in 0..2 {
        write(&a, &format!("rank_{rank}_activations.log"), fsdp.as_bytes());
    }
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1).stdout_has(
        "ranks 0 and 1 diverge first at `lin/op_2_mul` (only in ddp; the rows only in ddp are 1 backward mul or div op and 1 collective of its 2 ranks, and every paired row agrees: DDP scaling each gradient by the world size before its all-reduce?",
    );
    std::fs::remove_file(a.join("rank_1_activations.log")).unwrap();
    write(
        &a,
        "rank_0_activations.log",
        (header(2, "") + &fwd + &grad).as_bytes(),
    );
    // The same rows in a run of one rank: no such guess.
    let one = header(3, "") + &fwd + &grad + &scale;
    write(&b, "rank_0_activations.log", one.as_bytes());
    std::fs::remove_file(b.join("rank_1_activations.log")).unwrap();
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1)
        .stdout_has("rank 0 diverges first at `lin/op_2_mul` (only in ddp; every paired row agrees; the runs ran other ops: only in ddp (1): mul ×1).");
    assert!(r.summary()["ranks"][0].get("gradient_scaling").is_none());
}

/// At level=modules, a gradient that differs first while every forward
/// record agrees gets a hint: the loss (the batch's targets: trial 70,
/// a label changed alone) or the backward changed, or a parameter did
/// before the step in a way the module outputs do not show (trial 26 F4:
/// a LoRA adapter initialised differently, its partner B = 0, named as
/// `lora_B`'s gradient with no word of a parameter). A forward record that
/// differs first gets no such hint.
#[test]
fn a_module_level_gradient_first_says_what_the_forward_cannot_show() {
    let tmp = TempDir::new().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    write(
        &a,
        "rank_0_activations.log",
        modules_log("1.0", "2.0", "3.0").as_bytes(),
    );
    write(
        &b,
        "rank_0_activations.log",
        modules_log("1.0", "2.5", "3.5").as_bytes(),
    );
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1).stdout_has(
        "rank 0 diverges first at `lin/op_1_weight_grad` (the first differing record; inputs are not recorded at level=modules; every forward record agrees: a change to the loss (the batch's targets or labels, the loss function) or the backward, or a parameter changed before this step",
    );
    write(
        &b,
        "rank_0_activations.log",
        modules_log("1.5", "2.5", "3.5").as_bytes(),
    );
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1).stdout_has(
        "rank 0 diverges first at `lin/op_0_output` (the first differing record; inputs are not recorded at level=modules).",
    );
}

/// A `--junit` file that cannot be written (a folder) is an input error,
/// exit 2, and `summary.json` and the terminal say so, naming `--junit`
/// (trial 25 #6: `error: adir: Is a directory`, exit 2, while
/// summary.json, written before, still said exit 1, "diverged").
#[test]
fn an_unwritable_junit_file_is_an_input_error_the_summary_says() {
    let tmp = TempDir::new().unwrap();
    let (a, b) = (testdata(BUG_A), testdata(BUG_B));
    let folder = tmp.path().join("adir");
    std::fs::create_dir(&folder).unwrap();
    let r = compare(&tmp, &a, &b, &["--junit", folder.to_str().unwrap()]);
    r.expect(2)
        .stderr_has(&format!("error: --junit {}: ", folder.display()));
    let s = r.summary();
    assert_eq!(s["exit_status"], 2, "{}", s["verdict"]);
    assert!(
        s["input_errors"][0]
            .as_str()
            .unwrap()
            .starts_with("--junit "),
        "{}",
        s["input_errors"]
    );
    assert!(r.stdout.contains("(exit status 2)"), "{}", r.stdout);
}

/// An empty log against a module-level one is the empty log's error only,
/// not also "a level=modules capture and a level=ops one" (trial 11: an
/// empty, binary or text file was taken for a per-op capture).
#[test]
fn an_empty_log_is_not_said_to_be_of_another_level() {
    let tmp = TempDir::new().unwrap();
    let a = write(
        tmp.path(),
        "a/rank_0_activations.log",
        modules_log("1.0", "2.0", "3.0").as_bytes(),
    );
    let b = write(tmp.path(), "b/rank_0_activations.log", b"");
    let r = compare(&tmp, &a, &b, &[]);
    assert_ne!(r.code, 0, "{}", r.stderr);
    assert!(
        !r.stderr.contains("capture both runs at one level"),
        "{}",
        r.stderr
    );
}

/// A log cut short lacks the fields its lost rows held (the backward's
/// `Phase` lines): they are not named as fields only the other log has
/// (trial 11: a truncated step warned "run1-only: Phase"); its incomplete
/// input says what is missing.
#[test]
fn a_cut_log_names_no_fields_only_the_other_has() {
    let tmp = TempDir::new().unwrap();
    let text = modules_log("1.0", "2.0", "3.0");
    let a = write(tmp.path(), "a/rank_0_activations.log", text.as_bytes());
    // Cut inside the gradient's block, before its Phase line.
    let cut = text.find("  Output hash: 2.0").unwrap();
    let b = write(
        tmp.path(),
        "cut/rank_0_activations.log",
        &text.as_bytes()[..cut],
    );
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(3);
    assert!(
        !r.stderr.contains("fields not on both sides"),
        "{}",
        r.stderr
    );
    assert!(r.stdout.contains("incomplete input"), "{}", r.stdout);
}

/// At `level=modules`, a module only run 2 runs before the first differing
/// record (result order lists run 2's one-sided rows after run 1's, as the
/// reference does) is named in the headline and in `summary.json`
/// (`first_only2_before`; trial 11: an extra `nn.Dropout` module was not
/// mentioned).
#[test]
fn a_module_only_run_2_runs_before_the_first_differing_record_is_named() {
    let tmp = TempDir::new().unwrap();
    let a = write(
        tmp.path(),
        "a/rank_0_activations.log",
        modules_log("1.0", "2.0", "3.0").as_bytes(),
    );
    let extra = "[drop/op_0_output]\n  Shape: torch.Size([4, 8]), Dtype: torch.float32\n  L2 norm: 1.0\n  Min: -1.0\n  Max: 1.0\n  Mean: 0.0\n  Output hash: 0.5\n\n";
    let text = modules_log("1.5", "2.0", "3.0")
        .replace(
            "Total captured activations: 3",
            "Total captured activations: 4",
        )
        .replace("[lin/op_0_output]", &format!("{extra}[lin/op_0_output]"));
    let b = write(tmp.path(), "b/rank_0_activations.log", text.as_bytes());
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1);
    assert!(
        r.stdout
            .contains("before it, `drop/op_0_output` is only in b"),
        "{}",
        r.stdout
    );
    let s = r.summary();
    assert_eq!(
        s["ranks"][0]["root_causes"]["first_only2_before"]["key2"], "drop/op_0_output",
        "{s:#}"
    );
}

/// An autocast (bfloat16) run against a float32 one: a pair whose Shape
/// line differs only in its dtype agrees under `--dtype-tolerance` when
/// its values are within run 2's dtype's default (the dtype change is
/// expected; its note still says it); without the option the Shape text
/// differs, as in the reference (trial 12: every such row gated on Shape
/// whatever the tolerance).
#[test]
fn dtype_tolerance_lets_a_dtype_change_pass_within_the_dtype_default() {
    let tmp = TempDir::new().unwrap();
    let log = |dtype: &str, hash: &str| {
        format!(
            "Total captured activations: 1\nExcluded ops dispatched: (none)\n{}\n\n[lin/op_0_mm]\n  Shape: torch.Size([4, 8]), Dtype: torch.{dtype}\n  L2 norm: 1.0\n  Min: -1.0\n  Max: 1.0\n  Mean: 0.5\n  Output hash: {hash}\n  Input hashes: 2.0\n\n",
            "=".repeat(80)
        )
    };
    let a = write(
        tmp.path(),
        "a/rank_0_activations.log",
        log("float32", "5.0").as_bytes(),
    );
    let b = write(
        tmp.path(),
        "b/rank_0_activations.log",
        log("bfloat16", "5.01").as_bytes(),
    );
    compare(&tmp, &a, &b, &[]).expect(1);
    let r = compare(&tmp, &a, &b, &["--dtype-tolerance"]);
    r.expect(0);
    assert!(r.stdout.contains("float32 → bfloat16"), "{}", r.stdout);
    // Another size is still a difference.
    let c = log("bfloat16", "5.01").replace("Size([4, 8])", "Size([8, 4])");
    let c = write(tmp.path(), "c/rank_0_activations.log", c.as_bytes());
    compare(&tmp, &a, &c, &["--dtype-tolerance"]).expect(1);
}

/// A row whose inputs 0 and 2 differ: its note names both and the largest
/// relative difference, not only the first (a small one) (trial 13 F5: a
/// `topk` whose indices changed read "output 0 of 2 differs").
#[test]
fn a_note_names_every_differing_value_and_the_largest() {
    let tmp = TempDir::new().unwrap();
    let log = |name: &str, inputs: &str, outputs: &str| {
        let text = format!(
            "Total captured activations: 1\nExcluded ops dispatched: (none)\n{}\n\n\
             [moe/op_0_index]\n  Shape: torch.Size([4, 8]), Dtype: torch.float32\n  Output hash: {outputs}\n  Input hashes: {inputs}\n\n",
            "=".repeat(80)
        );
        write(
            tmp.path(),
            &format!("{name}/rank_0_activations.log"),
            text.as_bytes(),
        )
    };
    let a = log("a", "32.0, 191.0, 9.0", "21.7, 100.0");
    let b = log("b", "32.1, 191.0, 8.0", "21.5, 99.0");
    let rows = tmp.path().join("rows.jsonl");
    let r = compare(&tmp, &a, &b, &["--rows", rows.to_str().unwrap()]);
    r.expect(1);
    let notes = read_rows(&rows)[0]["notes"].to_string();
    assert!(
        notes.contains("inputs 0 and 2 of 3 differ (largest rel 1.1e-1, input 2)"),
        "{notes}"
    );
    assert!(
        notes.contains("outputs 0 and 1 of 2 differ (largest rel 1.0e-2, output 1)"),
        "{notes}"
    );
}

/// FSDP at module level: each rank's gradient record holds the whole
/// parameter ([4, 8]) and its parameter record the rank's shard ([2, 8]):
/// no replicas, but each shard's update reads every rank's gradient, so a
/// rank whose records differ only after the optimizer receives the change
/// of the rank whose forward differs (trial 13 F2: it was named as
/// diverging first on its own).
#[test]
fn an_fsdp_rank_whose_shard_alone_differs_receives_the_change() {
    let tmp = TempDir::new().unwrap();
    let log = |output: &str, weight: &str, rank: u32| {
        let block = |key: &str, shape: &str, hash: &str, phase: &str| {
            format!(
                "[{key}]\n  Shape: torch.Size([{shape}]), Dtype: torch.float32\n  L2 norm: 1.0\n  Min: -1.0\n  Max: 1.0\n  Mean: 0.0\n  Output hash: {hash}\n{phase}\n"
            )
        };
        format!(
            "Total captured activations: 3\nExcluded ops dispatched: (none)\nLevel: modules\n{}\n\n{}\n{}\n{}",
            "=".repeat(80),
            block("lin/op_0_output", "4, 8", output, ""),
            block("lin/op_1_weight_grad", "4, 8", "2.0", "  Phase: backward\n"),
            block("lin/op_2_weight", "2, 8", &format!("{weight}{rank}"), ""),
        )
    };
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    for rank in 0..2 {
        write(
            &a,
            &format!("rank_{rank}_activations.log"),
            log("1.0", "3.", rank).as_bytes(),
        );
    }
    write(&b, "rank_0_activations.log", log("1.0", "4.", 0).as_bytes());
    write(&b, "rank_1_activations.log", log("1.5", "4.", 1).as_bytes());
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1);
    let s = r.summary();
    let rc = |n: usize| &s["ranks"][n]["root_causes"];
    assert_eq!(s["ranks"][0]["run1"]["parameters_sharded"], true, "{s:#}");
    assert_eq!(rc(0)["via_collective_only"], true, "{s:#}");
    assert_eq!(rc(0)["see_ranks"], serde_json::json!([1]));
    assert!(
        r.stdout
            .contains("rank 1 diverges first at `lin/op_0_output`"),
        "{}",
        r.stdout
    );
}

/// A rank with several causes names the ones after the first in the
/// terminal (at most three, then "…"): "1 more cause" alone read as the
/// whole story (new-user trial 14).
#[test]
fn the_terminal_names_a_ranks_other_causes() {
    let tmp = TempDir::new().unwrap();
    let log = |name: &str, outs: &[&str]| {
        let mut text = format!(
            "Total captured activations: {}\nExcluded ops dispatched: (none)\n{}\n\n",
            outs.len(),
            "=".repeat(80)
        );
        for (i, o) in outs.iter().enumerate() {
            text.push_str(&format!(
                "[m{i}/op_0_mm]\n  Shape: torch.Size([4, 8]), Dtype: torch.float32\n  Output hash: {o}\n  Input hashes: 5.0\n\n"
            ));
        }
        write(
            tmp.path(),
            &format!("{name}/rank_0_activations.log"),
            text.as_bytes(),
        )
    };
    let a = log("a", &["1.0", "2.0", "3.0", "4.0", "5.0", "6.0"]);
    let b = log("b", &["1.0", "2.5", "3.0", "4.5", "5.0", "6.0"]);
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1);
    assert!(
        r.stdout.contains(
            "first origin: m1/op_0_mm (log line 10), 1 more cause: m3/op_0_mm (origin)\n"
        ),
        "{}",
        r.stdout
    );
    // Five independent origins: three named after the first, then "…".
    let c = log("c", &["1.5", "2.5", "3.5", "4.5", "5.5", "6.0"]);
    let r = compare(&tmp, &a, &c, &[]);
    assert!(
        r.stdout.contains(
            "4 more causes: m1/op_0_mm (origin), m2/op_0_mm (origin), m3/op_0_mm (origin), …\n"
        ),
        "{}",
        r.stdout
    ); // One one-sided op of one name per module, all in one run (a
       // `zero_grad` between micro-batches leaves out every gradient
       // accumulation `add_`): one group (trial 26 F6).
    let (mut acc, mut plain) = (hand_header(10, ""), hand_header(5, ""));
    for i in 0..5 {
        let add = format!("p{i}/op_0_add_");
        acc += &stats_block(&add, &format!("{}.5", i + 2), "1.0, 1.0", "");
        acc += &stats_block(
            &format!("p{i}/op_1_mm"),
            "9.0",
            &format!("{}.5", i + 2),
            &add,
        );
        plain += &stats_block(&format!("p{i}/op_0_mm"), "8.0", "1.0", "");
    }
    let (d, e) = (tmp.path().join("d"), tmp.path().join("e"));
    write(&d, "rank_0_activations.log", acc.as_bytes());
    write(&e, "rank_0_activations.log", plain.as_bytes());
    let r = compare(&tmp, &d, &e, &[]);
    r.expect(1).stdout_has(
        "4 more causes, all add_ ops only in d: p1/op_0_add_, p2/op_0_add_, p3/op_0_add_, …\n",
    );
}

#[test]
fn optimizer_rows_name_the_parameters_their_parameters_lines_give() {
    // The capture agent's `Parameters:` line on the ops of
    // `optimizer.step()` (trial 14 F6: a per-op optimizer row's key names
    // no module, so a changed parameter group was not named).
    let tmp = TempDir::new().unwrap();
    let log = |name: &str, muls: [&str; 2]| {
        let opt = |i: usize, out: &str, params: &str| {
            format!(
                "[<none>/op_{i}_mul_]\n  Shape: torch.Size([4, 8]), Dtype: torch.float32\n  Output hash: {out}\n  Input hashes: 5.0\n  Location: optim/adam.py:40{i}\n  Parameters: {params}\n\n"
            )
        };
        let text = format!(
            "Total captured activations: 5\nExcluded ops dispatched: (none)\n{}\n\n\
             [lin/op_0_mm]\n  Shape: torch.Size([4, 8]), Dtype: torch.float32\n  Output hash: 1.0\n  Input hashes: 5.0\n\n\
             [lin/op_1_mm]\n  Shape: torch.Size([4, 8]), Dtype: torch.float32\n  Output hash: 2.0\n  Input hashes: 5.0\n  Phase: backward\n\n{}{}{}",
            "=".repeat(80),
            opt(0, "3.0", "lin.weight"),
            opt(1, muls[0], "head.weight, head.bias"),
            opt(2, muls[1], "head.bias"),
        );
        write(
            tmp.path(),
            &format!("{name}/rank_0_activations.log"),
            text.as_bytes(),
        )
    };
    let a = log("a", ["4.0", "6.0"]);
    let b = log("b", ["4.5", "6.5"]);
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1);
    // A known line: no warning.
    assert!(!r.stderr.contains("warning"), "{}", r.stderr);
    r.stdout_has("rank 0 diverges first at `<none>/op_1_mul_` (its inputs' hashes agree, the output differs; parameters head.weight and head.bias).");
    r.stdout_has("only the optimizer step differs, whose updates are computed apart, so one changed setting (a learning rate, weight decay, clipping) is a cause in each; the updates of parameters head.weight and head.bias differ\n");
    r.stdout_has(
        "first divergence (optimizer): <none>/op_1_mul_ (parameters head.weight and head.bias; at optim/adam.py:401)\n",
    );
    let s = r.summary();
    let rc = &s["ranks"][0]["root_causes"];
    assert_eq!(
        rc["first_divergence_optimizer"]["parameters"],
        "head.weight, head.bias"
    );
    assert_eq!(rc["causes"][1]["row"]["parameters"], "head.bias");
    assert_eq!(
        s["ranks"][0]["first_divergence"]["parameters"],
        "head.weight, head.bias"
    );
    assert!(rc["first_divergence_forward"].is_null());
    let page = std::fs::read_to_string(tmp.path().join("out/rank0-page1.html")).unwrap();
    assert!(
        page.contains("parameters head.weight and head.bias"),
        "the row's notes name them"
    );
}

#[test]
fn a_foreach_row_names_the_parameters_whose_outputs_differ() {
    // A foreach op's list (trial 16 F1): its `Output parameters:` line
    // gives each Output hash value's parameter, so a change in one
    // parameter's update names that one, not the whole list.
    let tmp = TempDir::new().unwrap();
    let log = |name: &str, outs: &str| {
        let text = format!(
            "Total captured activations: 2\nExcluded ops dispatched: (none)\n{}\n\n\
             [lin/op_0_mm]\n  Shape: torch.Size([4, 8]), Dtype: torch.float32\n  Output hash: 1.0\n  Input hashes: 5.0\n  Phase: backward\n\n\
             [<none>/op_0__foreach_lerp_]\n  Output hash: {outs}\n  Input hashes: 1.0, 2.0, 3.0\n  Location: optim/adam.py:420\n  \
             Parameters: lin.weight, lin.bias, head.weight\n  Output parameters: lin.weight; lin.bias; head.weight\n\n",
            "=".repeat(80)
        );
        write(
            tmp.path(),
            &format!("{name}/rank_0_activations.log"),
            text.as_bytes(),
        )
    };
    let a = log("a", "1.0, 2.0, 3.0");
    let b = log("b", "1.0, 2.5, 3.0");
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1);
    assert!(!r.stderr.contains("warning"), "{}", r.stderr);
    r.stdout_has("first divergence (optimizer): <none>/op_0__foreach_lerp_ (parameter lin.bias, 1 of the op's 3; at optim/adam.py:420)\n");
    let s = r.summary();
    let f = &s["ranks"][0]["first_divergence"];
    assert_eq!(f["parameters"], "lin.weight, lin.bias, head.weight");
    assert_eq!(f["parameters_changed"], "lin.bias");
    // Every value differs: the whole list, no subset.
    let c = log("c", "1.5, 2.5, 3.5");
    let r = compare(&tmp, &a, &c, &[]);
    let f = &r.summary()["ranks"][0]["first_divergence"];
    assert!(f.get("parameters_changed").is_none(), "{f}");
    r.stdout_has("(parameters lin.weight, lin.bias and head.weight; at optim/adam.py:420)");
}

/// A log cut at a block boundary: the rows past its end are only in the
/// other run, and the opening sentence says the log is incomplete instead
/// of naming the first of them as a plain divergence (new-user trial 18
/// M4: "rank 1 diverges first at `2/op_4_mul` (only in a)").
#[test]
fn a_cut_logs_first_missing_row_is_said_to_be_past_its_end() {
    let tmp = TempDir::new().unwrap();
    let (d1, d2) = gen_runs(&tmp, &["--ops", "40", "--ranks", "2", "--seed", "4"]);
    let log = d2.join("rank_1_activations.log");
    let text = std::fs::read_to_string(&log).unwrap();
    let cut = text.match_indices("\n\n[").nth(20).unwrap().0 + 2;
    std::fs::write(&log, &text[..cut]).unwrap();
    let r = compare(&tmp, &d1, &d2, &[]);
    r.expect(3);
    let line = r.stdout.lines().nth(1).unwrap();
    assert!(
        line.starts_with("rank 1 diverges first at `")
            && line.ends_with("(only in a; b's log is incomplete: cut short?)."),
        "{line}"
    );
}

/// A rank one run lacks below the `World size:` its logs declare is a
/// missing log: incomplete input (exit 3), not a divergence (trial 18 L5:
/// a crashed DDP rank exited 1, "ranks only in ddp1: [1]"). A run whose
/// world size is smaller is a run of fewer ranks: one-sided ranks, exit 1.
#[test]
fn a_rank_missing_below_the_declared_world_size_is_incomplete_input() {
    let tmp = TempDir::new().unwrap();
    let log = |world: u32| {
        format!(
            "Total captured activations: 1\nExcluded ops dispatched: (none)\nWorld size: {world}\n{}\n\n[lin/op_0_mm]\n  Shape: torch.Size([4, 8]), Dtype: torch.float32\n  Output hash: 1.0\n  Input hashes: 5.0\n\n",
            "=".repeat(80)
        )
    };
    let run = |name: &str, ranks: &[u32], world: u32| {
        for r in ranks {
            write(
                tmp.path(),
                &format!("{name}/rank_{r}_activations.log"),
                log(world).as_bytes(),
            );
        }
        tmp.path().join(name)
    };
    let (full, cut, fewer) = (
        run("full", &[0, 1], 2),
        run("cut", &[0], 2),
        run("one", &[0], 1),
    );
    let junit = tmp.path().join("j.xml");
    let words = "incomplete input: cut has no log of rank 1, though its logs say `World size: 2`";
    compare(&tmp, &full, &cut, &["--junit", junit.to_str().unwrap()])
        .expect(3)
        .stdout_has(words);
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(
        xml.contains("type=\"IncompleteInput\"") && xml.contains(words),
        "{xml}"
    );
    assert!(!xml.contains("OneSidedRank"), "{xml}");
    compare(&tmp, &cut, &full, &["--allow-incomplete"])
        .expect(1)
        .stdout_has(words);
    let r = compare(&tmp, &full, &fewer, &["--junit", junit.to_str().unwrap()]);
    r.expect(1);
    assert!(!r.stdout.contains("incomplete input"), "{}", r.stdout);
    let xml = std::fs::read_to_string(&junit).unwrap();
    assert!(xml.contains("OneSidedRank"), "{xml}");
}

/// A stat line whose indentation was lost (`Min: 3.2.1` at column 1) is
/// not read by the reference's rule, so its block lacks the stat: the
/// input is incomplete (exit 3) at that file:line:column, not a pass
/// (trial 19 F4: "unknown field `Min` ignored", exit 0).
#[test]
fn an_unindented_stat_line_is_incomplete_input() {
    let tmp = TempDir::new().unwrap();
    let plain = String::from_utf8(read_testdata(BUG_A)).unwrap();
    let at = plain.find("  Min: ").unwrap();
    let line = plain[..at].matches('\n').count() + 1;
    let bad = format!("{}{}", &plain[..at], &plain[at + 2..]);
    let path = write(tmp.path(), "bad.log", bad.as_bytes());
    let r = compare(&tmp, &testdata(BUG_A), &path, &[]);
    r.expect(3)
        .stdout_has("incomplete input: rank 0 run2")
        .stdout_has(&format!("bad.log:{line}:1: `Min: "));
}

/// A Shape value that does not read as a shape and a dtype, where the
/// pair's Shape texts differ, is an unreadable value: incomplete input
/// (exit 3) named at its file, line and column (trial 19 F5: the row was
/// the first origin, "inputs agree, the output differs", exit 1, with no
/// warning).
#[test]
fn an_unreadable_shape_is_incomplete_input() {
    let tmp = TempDir::new().unwrap();
    let plain = String::from_utf8(read_testdata(BUG_A)).unwrap();
    let at = plain.find("  Shape: ").unwrap() + "  Shape: ".len();
    let end = at + plain[at..].find('\n').unwrap();
    let line = plain[..at].matches('\n').count() + 1;
    let bad = format!(
        "{}torch.Size([4, 1x6]), Dtype: ???{}",
        &plain[..at],
        &plain[end..]
    );
    let path = write(tmp.path(), "bad.log", bad.as_bytes());
    compare(&tmp, &testdata(BUG_A), &path, &[])
        .expect(3)
        .stdout_has("incomplete input: rank 0 run2")
        .stdout_has(&format!(
            "bad.log:{line}:10: Shape value `torch.Size([4, 1x6]), Dtype: ???` does not read"
        ));
    // Said on stderr too, as a value that is no number is, so that `-q`
    // says why it exits 3 (trial 25: nothing on stderr).
    compare(&tmp, &testdata(BUG_A), &path, &["-q"])
        .expect(3)
        .stderr_has(&format!(
            "bad.log:{line}:10: run2: Shape value `torch.Size([4, 1x6]), Dtype: ???` does not read"
        ));
    // The same text on both sides decides nothing: no word of it.
    let r = compare(&tmp, &path, &path, &[]);
    r.expect(0);
}

/// An origin at a random op (inputs agree, the draw differs) says so:
/// the runs' RNG seed or state differs (trial 19 L2: a reseeded dropout
/// was named without a word of what it is), or, where the logs' RNG state
/// lines agree, that the op's own arguments differ (trial 70 F1). Another
/// origin does not.
#[test]
fn an_origin_at_a_random_op_names_the_rng() {
    let tmp = TempDir::new().unwrap();
    let log_rng = |name: &str, op: &str, out: &str, rng: &str| {
        let text = format!(
            "Total captured activations: 1\nExcluded ops dispatched: (none)\n{rng}{}\n\n[drop/op_0_{op}]\n  Shape: torch.Size([4, 8]), Dtype: torch.float32\n  Output hash: {out}\n  Input hashes: 5.0\n\n",
            "=".repeat(80)
        );
        write(
            tmp.path(),
            &format!("{name}/rank_0_activations.log"),
            text.as_bytes(),
        )
    };
    let log = |name: &str, op: &str, out: &str| log_rng(name, op, out, "");
    let (a, b) = (
        log("a", "bernoulli_", "16.0"),
        log("b", "bernoulli_", "15.0"),
    );
    // With the capture agent's RNG state lines: equal at the step's start
    // and end, the seed is not it (trial 70 F1: a changed dropout
    // probability was called a differing seed); different at the start,
    // the states differ.
    let same = "RNG state: start=5459f90d655530d7 end=498c9e3a7be41ccd\n";
    let r = compare(
        &tmp,
        &log_rng("ra", "bernoulli_", "16.0", same),
        &log_rng("rb", "bernoulli_", "15.0", same),
        &[],
    );
    r.expect(1).stdout_has(
        "a random op, but the runs' random states agree at the step's start and end (the RNG state lines), so not the seed: the op's own arguments differ (a dropout probability",
    );
    assert!(
        !r.stdout.contains("RNG seed or state differs"),
        "{}",
        r.stdout
    );
    let other = "RNG state: start=1111f90d655530d7 end=498c9e3a7be41ccd\n";
    let r = compare(
        &tmp,
        &log_rng("rc", "bernoulli_", "16.0", same),
        &log_rng("rd", "bernoulli_", "15.0", other),
        &[],
    );
    r.expect(1)
        .stdout_has("a random op, and the runs start the step in different random states");
    let hint = "no digests, so rows were judged by their hashes (L1 norms), as the reference judges them, with the printed statistics shown but not judged: a reordering of the same values";
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1).stdout_has(
        "rank 0 diverges first at `drop/op_0_bernoulli_` (inputs agree, the output differs: a random op, so the runs' RNG seed or state differs).",
    );
    assert!(!r.stdout.contains(hint), "{}", r.stdout);
    // Logs without digests: "agree" is the hashes' word, and a hash is
    // blind to a reordering (trial 28: two swapped tokens).
    let (a, b) = (log("c", "mul", "16.0"), log("d", "mul", "15.0"));
    compare(&tmp, &a, &b, &[])
        .expect(1)
        .stdout_has("rank 0 diverges first at `drop/op_0_mul` (its inputs' hashes agree, the output differs).")
        .stdout_has(&format!("\nthe logs have {hint} (a permuted batch, swapped tokens), a change of sign that keeps every magnitude, or a change below the printed digits is not seen; give --rtol/--atol to judge the statistics too, or capture both runs with precision=\"full\" to compare digests (bitwise)\n"));
    // With digests, equal input digests are the same tensors: "agree".
    let full = |name: &str, out: &str, digest: &str| {
        let text = format!(
            "Total captured activations: 1\nExcluded ops dispatched: (none)\nPrecision: full\n{}\n\n[drop/op_0_mul]\n  Shape: torch.Size([4, 8]), Dtype: torch.float32\n  Output hash: {out}\n  Output digest: {digest}\n  Input hashes: 5.0\n  Input digests: 00000000000000aa\n\n",
            "=".repeat(80)
        );
        write(
            tmp.path(),
            &format!("{name}/rank_0_activations.log"),
            text.as_bytes(),
        )
    };
    let (a, b) = (
        full("e", "16.0", "0000000000000001"),
        full("f", "15.0", "0000000000000002"),
    );
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1)
        .stdout_has("rank 0 diverges first at `drop/op_0_mul` (inputs agree, the output differs).");
    assert!(!r.stdout.contains(hint), "{}", r.stdout);
}

/// An op of the eager run that the compiled run's compiler fused away is
/// no op that run lacks: it is never a cause, even where its Output hash
/// is the value a diverging row reads (trial 21 H2: eager's
/// `native_layer_norm`, "fused away ... not gating", was named "an op
/// only in eager_ops" feeding the first divergence).
#[test]
fn an_op_fused_away_by_the_other_runs_compiler_is_never_a_cause() {
    let tmp = TempDir::new().unwrap();
    let up = |input: &str, output: &str| {
        format!(
            "[m.up/op_0_addmm]\n  Shape: torch.Size([4, 8]), Dtype: torch.float32\n  Output hash: {output}\n  Input hashes: {input}, 3.0\n  Input producers: ;\n\n"
        )
    };
    let norm = "[m.norm/op_0_native_layer_norm]\n  Shape: torch.Size([4, 8]), Dtype: torch.float32\n  Output hash: 5.0\n  Input hashes: 1.0\n\n";
    let log = |name: &str, header: &str, blocks: &str, n: usize| {
        let text = format!(
            "Total captured activations: {n}\n{header}{}\n\n{blocks}",
            "=".repeat(80)
        );
        write(
            tmp.path(),
            &format!("{name}/rank_0_activations.log"),
            text.as_bytes(),
        )
    };
    let a = log("eager", "", &format!("{norm}{}", up("5.0", "2.0")), 2);
    let b = log("compiled", "Compiled: inductor\n", &up("5.5", "2.5"), 1);
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1).stdout_has(
        "rank 0 diverges first at `m.up/op_0_addmm` (a differing input: input 0; inductor fuses ops",
    );
    assert!(!r.stdout.contains("an op only in"), "{}", r.stdout);
}

/// `--dtype-tolerance` beside `--rtol`/`--atol`: a per-dtype default is
/// never tighter than what they ask (trial 21: `--atol 1e-3` was dropped
/// for bfloat16 rows, whose default has no absolute floor, so a mean near
/// zero could never agree).
#[test]
fn dtype_defaults_are_no_tighter_than_the_tolerances_given_beside_them() {
    let tmp = TempDir::new().unwrap();
    let log = |name: &str, mean: &str| {
        let text = format!(
            "Total captured activations: 1\n{}\n\n[norm/op_0_native_layer_norm]\n  Shape: torch.Size([4, 8]), Dtype: torch.bfloat16\n  L2 norm: 5.0\n  Min: -1.0\n  Max: 1.0\n  Mean: {mean}\n  Output hash: 16.0\n  Input hashes: 5.0\n\n",
            "=".repeat(80)
        );
        write(
            tmp.path(),
            &format!("{name}/rank_0_activations.log"),
            text.as_bytes(),
        )
    };
    let (a, b) = (log("a", "1.0e-05"), log("b", "2.0e-05"));
    compare(
        &tmp,
        &a,
        &b,
        &["--dtype-tolerance", "--rtol", "1e-2", "--atol", "1e-3"],
    )
    .expect(0);
    compare(&tmp, &a, &b, &["--dtype-tolerance", "--rtol", "1e-2"])
        .expect(1)
        .stdout_has("diverges first at `norm/op_0_native_layer_norm`");
}

/// Module-level logs of a compiled forward: the first differing record
/// says that the compiled modules' outputs are not recorded and that
/// their gradients come in the compiled backward's order (trial 21:
/// `inp`'s gradient was named first under `torch.compile(model)`).
#[test]
fn a_module_level_headline_says_when_modules_ran_compiled() {
    let tmp = TempDir::new().unwrap();
    let compiled = |text: String| {
        text.replace(
            "Level: modules\n",
            "Compiled: torch.compile\nCompiled modules: <none>\nLevel: modules\n",
        )
    };
    let a = write(
        tmp.path(),
        "a/rank_0_activations.log",
        compiled(modules_log("1.0", "2.0", "3.0")).as_bytes(),
    );
    let b = write(
        tmp.path(),
        "b/rank_0_activations.log",
        compiled(modules_log("1.0", "2.5", "3.5")).as_bytes(),
    );
    compare(&tmp, &a, &b, &[])
        .expect(1)
        .stdout_has("(the first differing record; inputs are not recorded at level=modules; modules ran compiled: their outputs are not recorded");
    let (c, d) = (
        write(
            tmp.path(),
            "c/rank_0_activations.log",
            modules_log("1.0", "2.0", "3.0").as_bytes(),
        ),
        write(
            tmp.path(),
            "d/rank_0_activations.log",
            modules_log("1.0", "2.5", "3.5").as_bytes(),
        ),
    );
    let r = compare(&tmp, &c, &d, &[]);
    r.expect(1);
    assert!(!r.stdout.contains("ran compiled"), "{}", r.stdout);
}

/// Full-precision logs whose row differs only in its digests (every
/// printed value equal): a `diff` at the reference's tolerance, within a
/// looser one, with a note (trial 22 H1: under --layouts such a row gated
/// and was named the cause while rows 1e-7 off passed, and the op that
/// made the change was not named).
#[test]
fn a_digest_only_difference_is_within_a_loosened_tolerance() {
    let tmp = TempDir::new().unwrap();
    let log = |name: &str, digest: &str| {
        let text = format!(
            "Total captured activations: 1\nPrecision: full\n{}\n\n[m/op_0_nll_loss_forward]\n  Shape: torch.Size([]), Dtype: torch.float32\n  L2 norm: 1.5e+00\n  Min: 1.5e+00\n  Max: 1.5e+00\n  Mean: 1.5e+00\n  Output hash: 1.5e+00\n  Input hashes: 2.5e+00\n  Output digest: 00000000000000aa\n  Input digests: {digest}\n\n",
            "=".repeat(80)
        );
        write(
            tmp.path(),
            &format!("{name}/rank_0_activations.log"),
            text.as_bytes(),
        )
    };
    let (a, b) = (log("a", "00000000000000bb"), log("b", "00000000000000cc"));
    compare(&tmp, &a, &b, &[]).expect(1);
    let rows = tmp.path().join("rows.jsonl");
    compare(
        &tmp,
        &a,
        &b,
        &[
            "--rtol",
            "1e-4",
            "--atol",
            "1e-6",
            "--rows",
            rows.to_str().unwrap(),
        ],
    )
    .expect(0);
    let row = &support::read_rows(&rows)[0];
    assert_eq!(
        (&row["status"], &row["bitwise"]),
        (&serde_json::json!("match"), &serde_json::json!(false)),
        "{row}"
    );
}

/// `--ranks` is refused with `--shard` (a part's ranks are the split's),
/// and a list that does not read names its part.
#[test]
fn ranks_is_refused_with_shard_and_checked() {
    let tmp = TempDir::new().unwrap();
    let a = testdata(BUG_A);
    let r = compare(&tmp, &a, &a, &["--ranks", "0", "--shard", "0/2"]);
    r.expect(2);
    assert!(
        r.stderr.contains("--ranks cannot be given with --shard"),
        "{}",
        r.stderr
    );
    let r = compare(&tmp, &a, &a, &["--ranks", "0-x"]);
    r.expect(2);
    assert!(
        r.stderr.contains("--ranks: `0-x` is no rank or range"),
        "{}",
        r.stderr
    );
}

/// Asserts that the `summary.json` of `compare`'s report folder (`out`)
/// has `said` as one of its verdict lines.
fn assert_verdict_has(tmp: &TempDir, said: &str) {
    let s: Value =
        serde_json::from_slice(&std::fs::read(tmp.path().join("out/summary.json")).unwrap())
            .unwrap();
    assert!(
        s["verdict"].as_array().unwrap().iter().any(|v| v == said),
        "{s}"
    );
}

/// Writes `{dir}/{name}/rank_0_activations.log`: one `m/op_0_addmm` block
/// (Output hash 2.0, Input hashes 1.0, then `digest`'s lines before the
/// input lines) under the header lines `header`. Returns the log's path.
fn addmm_log(dir: &Path, name: &str, header: &str, digest: &str) -> std::path::PathBuf {
    let text = format!(
        "Total captured activations: 1\n{header}{sep}\n\n\
         [m/op_0_addmm]\n  Shape: torch.Size([4, 8]), Dtype: torch.float32\n  Output hash: 2.0\n{digest}  Input hashes: 1.0\n  Input producers: \n\n",
        sep = "=".repeat(80)
    );
    write(
        dir,
        &format!("{name}/rank_0_activations.log"),
        text.as_bytes(),
    )
}

/// An agreeing compare of logs that left ops out by `min_numel` says so
/// beside its verdict (trial 24 F2: a small model's BatchNorm momentum
/// changed, 7 ops captured and 22 left out, "no divergence beyond
/// tolerance: 7 rows match", exit 0, and nothing said the rest was not
/// compared). Logs that left none out add nothing.
#[test]
fn an_agreeing_compare_says_how_many_ops_min_numel_left_out() {
    let tmp = TempDir::new().unwrap();
    let log = |name: &str, header: &str| addmm_log(tmp.path(), name, header, "");
    let a = log(
        "a",
        "Capture filter: min_numel=1000\nOps below min numel: 22\n",
    );
    let b = log(
        "b",
        "Capture filter: min_numel=1000\nOps below min numel: 21\n",
    );
    let said = "but 22 ops smaller than min_numel=1000 elements were not captured in a log that captured 1, so they were not compared (min_numel=0 captures every op)";
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(0).stdout_has(said);
    assert_verdict_has(&tmp, said);
    let c = log(
        "c",
        "Capture filter: min_numel=1000\nOps below min numel: 0\n",
    );
    let r = compare(&tmp, &c, &c, &[]);
    r.expect(0);
    assert!(!r.stdout.contains("not captured"), "{}", r.stdout);
}

/// An entry beside rows whose dtype changed between the runs says its
/// inputs may be casts, which the capture leaves out (trial 24 F3:
/// autocast in one run read "differing inputs: 0, 1 and 2", as if the
/// batch or the weights had changed).
#[test]
fn an_entry_beside_a_dtype_change_says_its_inputs_may_be_casts() {
    let tmp = TempDir::new().unwrap();
    let log = |name: &str, dtype: &str, input: &str| {
        let text = format!(
            "Total captured activations: 1\n{sep}\n\n\
             [m/op_0_addmm]\n  Shape: torch.Size([4, 8]), Dtype: torch.{dtype}\n  Output hash: 2.0\n  Input hashes: {input}, 3.0\n  Input producers: ;\n\n",
            sep = "=".repeat(80)
        );
        write(
            tmp.path(),
            &format!("{name}/rank_0_activations.log"),
            text.as_bytes(),
        )
    };
    let a = log("a", "float32", "1.0");
    let b = log("b", "bfloat16", "1.5");
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1).stdout_has(
        "(a differing input: input 0; dtype changed in 1 paired row: float32 → bfloat16, and a cast (_to_copy) is an op the capture leaves out, so its inputs may be casts",
    );
    let c = log("c", "float32", "1.5");
    let r = compare(&tmp, &a, &c, &[]);
    r.expect(1).stdout_has("(a differing input: input 0)");
}

/// The log of a rank only one run has is read as any log: an empty one
/// is an input error (exit 2), a cut one incomplete input (exit 3), each
/// naming the file; a complete one is an ordinary one-sided rank (exit
/// 1). Trial 25: all were "rank 1 is only in R", exit 1, never read.
#[test]
fn a_one_sided_rank_s_log_is_read() {
    let tmp = TempDir::new().unwrap();
    let log = read_testdata(BUG_A);
    write(tmp.path(), "b/rank_0_activations.log", &log);
    let run = |name: &str, rank1: &[u8]| {
        write(tmp.path(), &format!("{name}/rank_0_activations.log"), &log);
        let p = write(tmp.path(), &format!("{name}/rank_1_activations.log"), rank1);
        (p.parent().unwrap().to_path_buf(), p)
    };
    let b = tmp.path().join("b");
    let (empty, path) = run("empty", b"");
    compare(&tmp, &empty, &b, &[])
        .expect(2)
        .stderr_has(&format!(
            "rank 1 is only in run1, and its log cannot be used: {}: run1 is empty (0 bytes)",
            path.display()
        ));
    let (cut, path) = run("cut", &log[..log.len() / 3]);
    compare(&tmp, &cut, &b, &[]).expect(3).stderr_has(&format!(
        "rank 1 is only in run1, and its log {} is incomplete: declares",
        path.display()
    ));
    let (whole, _) = run("whole", &log);
    let r = compare(&tmp, &whole, &b, &[]);
    r.expect(1);
    assert!(!r.stderr.contains("rank 1 is only in"), "{}", r.stderr);
}

/// A `Phase:` value that is no phase is warned about at its line and
/// column (trial 25: `Phase: sideways` split a row with no word).
#[test]
fn an_unknown_phase_value_is_warned_about() {
    let tmp = TempDir::new().unwrap();
    let plain = String::from_utf8(read_testdata(BUG_A)).unwrap();
    let at = plain.find("  Phase: backward").unwrap() + "  Phase: ".len();
    let line = plain[..at].matches('\n').count() + 1;
    let bad = format!(
        "{}sideways{}",
        &plain[..at],
        &plain[at + "backward".len()..]
    );
    let path = write(tmp.path(), "phase.log", bad.as_bytes());
    compare(&tmp, &testdata(BUG_A), &path, &[])
        .expect(1)
        .stderr_has(&format!(
            "phase.log:{line}:10: run2: Phase value `sideways` is none of forward, backward, optimizer; read as forward"
        ));
}

/// `--junit` or `--rows` naming one of the runs' logs is refused before
/// anything is written (trial 25: `--junit a.log --rows b.log` overwrote
/// both logs, exit 1, no word). A new file beside them is written.
#[test]
fn an_output_file_that_is_an_input_log_is_refused() {
    let tmp = TempDir::new().unwrap();
    let log = read_testdata(BUG_A);
    let a = write(tmp.path(), "a.log", &log);
    let b_log = write(tmp.path(), "b/rank_0_activations.log", &log);
    let b = b_log.parent().unwrap().to_path_buf();
    let r = compare(&tmp, &a, &b, &["--junit", a.to_str().unwrap()]);
    r.expect(2).stderr_has("--junit");
    assert!(
        r.stderr.contains("writing it would overwrite the input"),
        "{}",
        r.stderr
    );
    let r = compare(&tmp, &a, &b, &["--rows", b_log.to_str().unwrap()]);
    r.expect(2).stderr_has("--rows");
    assert_eq!(std::fs::read(&a).unwrap(), log);
    assert_eq!(std::fs::read(&b_log).unwrap(), log);
    let junit = tmp.path().join("j.xml");
    compare(&tmp, &a, &b, &["--junit", junit.to_str().unwrap()]).expect(0);
    assert!(junit.is_file());
}

/// An agreeing compare of logs without digests says what it could not see
/// (trial 63: only an origin's words said that a hash is blind to a
/// reordering; "no divergence" said nothing, so two runs whose batches
/// were permuted read as agreeing at the default precision). Logs with
/// digests add nothing.
#[test]
fn an_agreeing_compare_without_digests_says_what_hashes_do_not_see() {
    let tmp = TempDir::new().unwrap();
    let log = |name: &str, digest: &str| addmm_log(tmp.path(), name, "", digest);
    let (a, b) = (log("a", ""), log("b", ""));
    let said = "the logs have no digests, so rows were judged by their hashes (L1 norms), as the reference judges them, with the printed statistics shown but not judged: a reordering of the same values (a permuted batch, swapped tokens), a change of sign that keeps every magnitude, or a change below the printed digits is not seen; give --rtol/--atol to judge the statistics too, or capture both runs with precision=\"full\" to compare digests (bitwise)";
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(0).stdout_has(said);
    assert_verdict_has(&tmp, said);
    let digest = "  Output digest: 0123456789abcdef\n";
    let (c, d) = (log("c", digest), log("d", digest));
    let r = compare(&tmp, &c, &d, &[]);
    r.expect(0);
    assert!(!r.stdout.contains("no digests"), "{}", r.stdout);
    // One run's logs have them: that run is not said to lack them
    // (trial 64).
    let r = compare(&tmp, &c, &a, &[]);
    r.expect(0)
        .stdout_has("\na's logs have no digests, so rows were judged by their hashes");
}

/// Two logs whose `Step:` lines name different steps (a slip of the paths:
/// `a/step_3` against `b/step_4`) are compared with a warning naming both
/// steps (trial 65 F4: a plain divergence, and not a word of the steps).
#[test]
fn logs_of_different_steps_are_compared_with_a_warning() {
    let tmp = TempDir::new().unwrap();
    let (a, b, c) = (
        tmp.path().join("a"),
        tmp.path().join("b"),
        tmp.path().join("c"),
    );
    let log = |step: u64, weight: &str| {
        support::modules_log(&format!("Step: {step}\n"), "1.0", "2.0", weight)
    };
    write(&a, "rank_0_activations.log", log(3, "3.0").as_bytes());
    write(&b, "rank_0_activations.log", log(4, "3.5").as_bytes());
    write(&c, "rank_0_activations.log", log(3, "3.0").as_bytes());
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1);
    let said = format!(
        "warning: {} is step 3 and {} is step 4 (their Step: lines): different steps of training are compared",
        a.join("rank_0_activations.log").display(),
        b.join("rank_0_activations.log").display()
    );
    assert!(r.stderr.contains(&said), "{}", r.stderr);
    // The same step: nothing said.
    let r = compare(&tmp, &a, &c, &[]);
    r.expect(0);
    assert!(!r.stderr.contains("different steps"), "{}", r.stderr);
}

/// Two logs whose values are NaN in both runs (two identical runs that
/// both went NaN): NaN agrees with NaN by default; `--nan-is-diff` makes
/// the row a `diff` at full precision as at the reference's (bitwise-equal
/// digests included) and says that only NaN against NaN differs there,
/// not "a change to the forward computation" (trial 65 F1).
#[test]
fn nan_in_both_runs_is_said_under_nan_is_diff_at_both_precisions() {
    let tmp = TempDir::new().unwrap();
    for (precision, digest) in [
        ("", ""),
        ("Precision: full\n", "  Output digest: 0123456789abcdef\n"),
    ] {
        let log = format!(
            "Total captured activations: 2\nLevel: modules\n{precision}{}\n\n[lin/op_0_output]\n  Shape: torch.Size([4]), Dtype: torch.float32\n  L2 norm: 2.0\n  Output hash: 4.0\n{digest}\n[lin/op_1_output]\n  Shape: torch.Size([4]), Dtype: torch.float32\n  L2 norm: nan\n  Output hash: nan\n{digest}\n",
            "=".repeat(80)
        );
        let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
        write(&a, "rank_0_activations.log", log.as_bytes());
        write(&b, "rank_0_activations.log", log.as_bytes());
        // NaN agrees with NaN, and the verdict says where both runs went
        // NaN (trial 66: "no divergence" and not a word of NaN).
        compare(&tmp, &a, &b, &[]).expect(0).stdout_has(
            "both runs' values are NaN from `lin/op_1_output` on (rank 0): NaN agrees with NaN",
        );
        let r = compare(&tmp, &a, &b, &["--nan-is-diff"]);
        r.expect(1).stdout_has(
            "rank 0 diverges first at `lin/op_1_output` (its values are NaN in both runs and nothing else differs there: --nan-is-diff counts NaN against NaN as a difference",
        );
        assert!(
            !r.stdout.contains("inputs are not recorded"),
            "{precision}: {}",
            r.stdout
        );
        assert!(
            !r.stdout.contains("both runs' values are NaN from"),
            "{precision}: {}",
            r.stdout
        );
    }
    // A collective's NaN alone (FSDP's all-gather buffer hashed before it
    // was filled) with a finite loss after it is no news.
    let log = format!(
        "Total captured activations: 2\n{}\n\n[fsdp/op_0__allgather_base_]\n  Shape: torch.Size([4]), Dtype: torch.float32\n  L2 norm: nan\n  Output hash: nan\n\n[lin/op_1_output]\n  Shape: torch.Size([4]), Dtype: torch.float32\n  L2 norm: 2.0\n  Output hash: 4.0\n\n",
        "=".repeat(80)
    );
    let (a, b) = (tmp.path().join("c"), tmp.path().join("d"));
    write(&a, "rank_0_activations.log", log.as_bytes());
    write(&b, "rank_0_activations.log", log.as_bytes());
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(0);
    assert!(!r.stdout.contains("NaN from"), "{}", r.stdout);
    // Both runs went NaN, and FSDP2's copy-in buffer (one of the layout's
    // communication ops) is NaN before the first op that computed NaN:
    // the op named is that op, not the buffer.
    let log = format!(
        "Total captured activations: 2\n{}\n\n[fsdp/op_0_all_gather_copy_in]\n  Shape: torch.Size([4]), Dtype: torch.float32\n  L2 norm: nan\n  Output hash: nan\n\n[lin/op_1_output]\n  Shape: torch.Size([4]), Dtype: torch.float32\n  L2 norm: nan\n  Output hash: nan\n\n",
        "=".repeat(80)
    );
    let (a, b) = (tmp.path().join("e"), tmp.path().join("f"));
    write(&a, "rank_0_activations.log", log.as_bytes());
    write(&b, "rank_0_activations.log", log.as_bytes());
    compare(&tmp, &a, &b, &[])
        .expect(0)
        .stdout_has("both runs' values are NaN from `lin/op_1_output` on (rank 0)");
}

/// A module-level run that accumulates gradients over two micro-batches
/// against one that does not: the first differing record is a partial
/// gradient, and the verdict says why, and that the parameters after the
/// optimizer step agree (trial 65 F2).
#[test]
fn micro_batches_at_level_modules_are_said() {
    let tmp = TempDir::new().unwrap();
    let block = |key: &str, hash: &str, phase: &str| {
        format!("[{key}]\n  Shape: torch.Size([4, 8]), Dtype: torch.float32\n  Output hash: {hash}\n{phase}\n")
    };
    let log = |blocks: &[String]| {
        format!(
            "Total captured activations: {}\nLevel: modules\n{}\n\n{}",
            blocks.len(),
            "=".repeat(80),
            blocks.concat()
        )
    };
    let back = "  Phase: backward\n";
    let one = log(&[
        block("lin/op_0_output", "8.0", ""),
        block("lin/op_1_weight_grad", "2.0", back),
        block("lin/op_2_weight", "3.0", ""),
    ]);
    let two = log(&[
        block("lin/op_0_output", "8.0", ""),
        block("lin/op_1_weight_grad", "1.0", back),
        block("lin/op_2_output", "8.0", ""),
        block("lin/op_3_weight_grad", "2.0", back),
        block("lin/op_4_weight", "3.0", ""),
    ]);
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    write(&a, "rank_0_activations.log", one.as_bytes());
    write(&b, "rank_0_activations.log", two.as_bytes());
    compare(&tmp, &a, &b, &[]).expect(1).stdout_has(
        "a records 1 forward output of `lin` a step and b 2: the runs split the step into other numbers of forward passes (micro-batches of gradient accumulation), so a gradient record of the run of more passes is a partial sum, paired by position with the other run's; the parameters after the optimizer step agree",
    );
    // The parameters after the optimizer step differ by rounding: said
    // with the size (trial 66: "differ too", and no size).
    let d = tmp.path().join("d");
    write(
        &d,
        "rank_0_activations.log",
        two.replace("[lin/op_4_weight]\n  Shape: torch.Size([4, 8]), Dtype: torch.float32\n  Output hash: 3.0", "[lin/op_4_weight]\n  Shape: torch.Size([4, 8]), Dtype: torch.float32\n  Output hash: 3.0000003")
            .as_bytes(),
    );
    compare(&tmp, &a, &d, &[]).expect(1).stdout_has(
        "; the parameters after the optimizer step differ too, by at most a relative 1.0e-7 (float rounding: the micro-batches' gradients summed in another order",
    );
    // The same number of passes, one gradient changed: not said.
    let c = tmp.path().join("c");
    write(
        &c,
        "rank_0_activations.log",
        two.replace("  Output hash: 1.0", "  Output hash: 1.5")
            .as_bytes(),
    );
    let r = compare(&tmp, &b, &c, &[]);
    r.expect(1);
    assert!(!r.stdout.contains("forward passes"), "{}", r.stdout);
}

/// Full-precision logs of an op whose input's printed hash is the same in
/// both runs while its digest differs, and whose output differs: the
/// hash (an L1 norm: fractions that sum to 1) cannot see the change, so
/// the input differs, and the verdict names it, at the reference's
/// tolerance and under --bitwise (trial 69 F1: a stale buffer read after
/// an `out=` op wrote another one read as "inputs agree, the output
/// differs").
#[test]
fn an_input_whose_digest_alone_differs_is_a_differing_input() {
    let tmp = TempDir::new().unwrap();
    // Run 1's input 0 is the output of `moe/op_0_div` (alike in both
    // runs); run 2's comes from no captured op (another buffer).
    let log = |name: &str, digest: &str, out: &str, out_digest: &str, producer: &str| {
        let text = format!(
            "Total captured activations: 2\nPrecision: full\n{}\n\n[moe/op_0_div]\n  Shape: torch.Size([4]), Dtype: torch.float32\n  Output hash: 1e+00\n  Output digest: 00000000000000bb\n\n[moe/op_1_mul]\n  Shape: torch.Size([4]), Dtype: torch.float32\n  Output hash: {out}\n  Output digest: {out_digest}\n  Input hashes: 1e+00, 2.5e+00\n  Input digests: {digest}, 00000000000000dd\n  Input producers: {producer};\n\n",
            "=".repeat(80)
        );
        write(
            tmp.path(),
            &format!("{name}/rank_0_activations.log"),
            text.as_bytes(),
        )
    };
    let a = log(
        "a",
        "00000000000000bb",
        "2.5e+00",
        "00000000000000a1",
        "moe/op_0_div",
    );
    let b = log("b", "00000000000000cc", "2.6e+00", "00000000000000a2", "");
    for flags in [&[][..], &["--bitwise"][..]] {
        let r = compare(&tmp, &a, &b, flags);
        r.expect(1)
            .stdout_has("rank 0 diverges first at `moe/op_1_mul` (a differing input: input 0; input 0 is the output of `moe/op_0_div` in a and of no captured op in b");
        assert!(
            !r.stdout.contains("inputs agree"),
            "{flags:?}: {}",
            r.stdout
        );
    }
}

/// A one-sided backward op whose output equals a forward op's of its run
/// but whose inputs differ is no recomputation (a backward `div` of
/// another tensor): it gates, and nothing says "activation checkpointing"
/// (trial 69 F3); with the forward op's inputs too, it is one.
#[test]
fn a_backward_op_equal_to_a_forward_one_from_other_inputs_is_no_recomputation() {
    let tmp = TempDir::new().unwrap();
    let block = |key: &str, inputs: &str, phase: &str| {
        format!("[{key}]\n  Shape: torch.Size([4]), Dtype: torch.float32\n  Output hash: 1.0\n  Input hashes: {inputs}\n{phase}\n")
    };
    let log = |name: &str, extra: &str| {
        let text = format!(
            "Total captured activations: {}\n{}\n\n{}{}{extra}",
            2 + usize::from(!extra.is_empty()),
            "=".repeat(80),
            block("moe/op_0_div", "2.0, 2.0", ""),
            block("moe/op_1_mul", "3.0", "  Phase: backward\n"),
        );
        write(
            tmp.path(),
            &format!("{name}/rank_0_activations.log"),
            text.as_bytes(),
        )
    };
    let a = log(
        "a",
        &block("moe/op_2_div", "5.0, 5.0", "  Phase: backward\n"),
    );
    let b = log("b", "");
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1);
    assert!(
        !r.stderr.contains("activation checkpointing"),
        "{}",
        r.stderr
    );
    assert!(!r.stdout.contains("recomputed"), "{}", r.stdout);
    let a = log(
        "c",
        &block("moe/op_2_div", "2.0, 2.0", "  Phase: backward\n"),
    );
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(0);
    assert!(
        r.stderr.contains("activation checkpointing"),
        "{}",
        r.stderr
    );
}

/// A log whose every module FQN starts with `module.` (the profiler given
/// DDP's wrapper) against one without: a warning names the run and the
/// fix (new-user trial 70 F3: step 1 read as diverging, and nothing said
/// why). Both runs with the prefix, or neither, say nothing.
#[test]
fn a_ddp_wrapper_prefix_in_one_run_is_said() {
    let tmp = TempDir::new().unwrap();
    let log = |name: &str, prefix: &str, root: &str| {
        let text = format!(
            "Total captured activations: 2\n{}\n\n[{prefix}tok/op_0_embedding]\n  Shape: torch.Size([4, 8]), Dtype: torch.float32\n  Output hash: 1.0\n\n[{root}/op_1_add]\n  Shape: torch.Size([4, 8]), Dtype: torch.float32\n  Output hash: 2.0\n\n",
            "=".repeat(80)
        );
        write(
            tmp.path(),
            &format!("{name}/rank_0_activations.log"),
            text.as_bytes(),
        )
    };
    let plain = log("plain", "", "<none>");
    let wrapped = log("wrapped", "module.", "module");
    let r = compare(&tmp, &plain, &wrapped, &[]);
    r.stderr_has(
        "rank 0: every module FQN of the run2 log starts with `module.` and none of the other's does: that run's profiler was given a DistributedDataParallel (or DataParallel) wrapper",
    );
    let r = compare(&tmp, &wrapped, &wrapped, &[]);
    assert!(!r.stderr.contains("module FQN of the"), "{}", r.stderr);
    let r = compare(&tmp, &plain, &plain, &[]);
    assert!(!r.stderr.contains("module FQN of the"), "{}", r.stderr);
}

/// One op's output with other dims in run 2, its values (hash, digest)
/// the same: FSDP1's flattened parameter against FSDP2's (trial 71 F4,
/// where the verdict said only "inputs agree, the output differs"). The
/// cause names the two shapes.
#[test]
fn a_cause_whose_shape_differs_names_both_shapes() {
    let tmp = TempDir::new().unwrap();
    let log = |shape: &str| {
        format!(
            "Total captured activations: 2\n{}\n\n[<none>/op_0_mul_]\n  Shape: torch.Size({shape}), Dtype: torch.float32\n  L2 norm: 1.000000e+00\n  Output hash: 4.000000e+00\n  Output digest: 00000000000000ab\n  Input hashes: 4.000000e+00, 1.000000e+00\n  Input digests: 00000000000000ab, 0000000000000001\n  Parameters: tok.weight\n  Phase: optimizer\n\n[<none>/op_1_add_]\n  Shape: torch.Size([2]), Dtype: torch.float32\n  L2 norm: 1.000000e+00\n  Output hash: 2.000000e+00\n  Output digest: 0000000000000002\n  Input hashes: 2.000000e+00\n  Input digests: 0000000000000002\n\n",
            "=".repeat(80)
        )
    };
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    for (dir, shape) in [(&a, "[64, 32]"), (&b, "[2048]")] {
        std::fs::create_dir_all(dir).unwrap();
        std::fs::write(dir.join("rank_0_activations.log"), log(shape)).unwrap();
    }
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1).stdout_has("`<none>/op_0_mul_`").stdout_has(
        "its shape differs ([64, 32] → [2048]: a tensor held in another layout in one run",
    );
}

/// At level=modules, two forward records that agree only when paired out
/// of their order (re-paired by value: two micro-batches swapped, trial
/// 72 F2) are said to be that, not "every forward record agrees: a change
/// to the loss ... or the backward".
#[test]
fn module_level_forward_records_agreeing_only_out_of_order_are_said_so() {
    let tmp = TempDir::new().unwrap();
    let block = |key: &str, hash: &str, phase: &str| {
        format!(
            "[{key}]\n  Shape: torch.Size([4, 8]), Dtype: torch.float32\n  L2 norm: {hash}\n  Output hash: {hash}\n{phase}\n"
        )
    };
    let log = |first: &str, second: &str, grad: &str| {
        format!(
            "Total captured activations: 3\nExcluded ops dispatched: (none)\nLevel: modules\n{}\n\n{}\n{}\n{}",
            "=".repeat(80),
            block("lin/op_0_output", first, ""),
            block("lin/op_1_output", second, ""),
            block("lin/op_2_weight_grad", grad, "  Phase: backward\n"),
        )
    };
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    write(
        &a,
        "rank_0_activations.log",
        log("1.0", "2.0", "3.0").as_bytes(),
    );
    write(
        &b,
        "rank_0_activations.log",
        log("2.0", "1.0", "3.5").as_bytes(),
    );
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1).stdout_has(
        "every forward record agrees only with 2 of them paired out of their order (re-paired by value, `fuzzy`): the same forward computations in another order, so most likely the micro-batches or the batch's samples were reordered",
    );
    assert!(
        !r.stdout
            .contains("every forward record agrees: a change to the loss"),
        "{}",
        r.stdout
    );
    assert_eq!(r.summary()["ranks"][0]["forward_repaired"], 2);
}

/// A forward record that differs while every gradient and parameter
/// record agrees is said not to reach training (trial 72 F3: an attention
/// mask dropped, or a padding id changed, at positions the loss ignores,
/// read as any divergence). The exit status still says it diverges.
#[test]
fn a_difference_in_the_forward_alone_is_said_not_to_reach_training() {
    let tmp = TempDir::new().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    write(
        &a,
        "rank_0_activations.log",
        support::modules_log("", "1.0", "2.0", "3.0").as_bytes(),
    );
    write(
        &b,
        "rank_0_activations.log",
        support::modules_log("", "1.5", "2.0", "3.0").as_bytes(),
    );
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1).stdout_has("every gradient and optimizer record agrees, so this difference does not reach training (positions that a mask or the loss ignores, such as padding?)");
    assert_eq!(r.summary()["ranks"][0]["forward_only"], true);
    // A gradient that differs too: nothing of the kind.
    write(
        &b,
        "rank_0_activations.log",
        support::modules_log("", "1.5", "2.5", "3.0").as_bytes(),
    );
    let r = compare(&tmp, &a, &b, &[]);
    assert!(
        !r.expect(1).stdout.contains("does not reach training"),
        "{}",
        r.stdout
    );
}

/// At level=modules the model's own records are `<none>`'s: the sentence
/// says that `<none>` is the model (trial 72 F4: the model's output
/// tuple, logits and loss, named only `<none>/op_0_output`).
#[test]
fn the_models_own_record_is_said_to_be_the_model() {
    let tmp = TempDir::new().unwrap();
    let (a, b) = (tmp.path().join("a"), tmp.path().join("b"));
    let log = |out: &str, grad: &str| {
        support::modules_log("", out, grad, "3.0").replace("lin/op_0_output", "<none>/op_0_output")
    };
    write(&a, "rank_0_activations.log", log("1.0", "2.0").as_bytes());
    write(&b, "rank_0_activations.log", log("1.5", "2.5").as_bytes());
    let r = compare(&tmp, &a, &b, &[]);
    r.expect(1).stdout_has("rank 0 diverges first at `<none>/op_0_output` (the first differing record, the model's own (`<none>` is the model given to the profiler); inputs are not recorded at level=modules");
}
