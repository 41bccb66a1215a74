//! Case 25-exit-status-contract (`../shared/cases/25-exit-status-contract/README.md`).

use super::common::*;

/// Case 25-exit-status-contract (a): `actdiff compare run1.log run1.log -o
/// out`: exit 0.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case25_a_self_compare_exit_0() {
    let r = in_case(
        "25-exit-status-contract",
        &["compare", "run1.log", "run1.log"],
    );
    r.expect(0);
    assert_eq!(counts(&r.rank(0)["counts"]), (3, 0, 0, 0));
}

/// Case 25-exit-status-contract (b): `actdiff compare run1.log
/// run1_changed.log -o out`: `wq`'s Output hash changed: exit 1.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case25_b_changed_hash_exit_1() {
    let r = in_case(
        "25-exit-status-contract",
        &["compare", "run1.log", "run1_changed.log"],
    );
    r.expect(1);
    r.row_is(WQ, "diff", Some("exact"));
    assert_eq!(counts(&r.rank(0)["counts"]), (2, 1, 0, 0));
}

/// Case 25-exit-status-contract (c): `actdiff compare run1.log missing.log
/// -o out`: exit 2, the message naming missing.log.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case25_c_missing_file_exit_2() {
    let r = in_case(
        "25-exit-status-contract",
        &["compare", "run1.log", "missing.log"],
    );
    r.expect(2).stderr_has("missing.log");
}

/// Case 25-exit-status-contract (c, Notes: "every run prints a one-line
/// summary on stdout and writes a JSON summary"): `actdiff compare run1.log
/// missing.log -o out` still prints its summary and writes summary.json.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case25_c_missing_file_is_still_summarised() {
    let r = in_case(
        "25-exit-status-contract",
        &["compare", "run1.log", "missing.log"],
    );
    r.expect(2).stdout_has("exit status 2");
    assert_eq!(r.summary()["exit_status"], 2);
}

/// Case 25-exit-status-contract (d): `actdiff compare run1.log garbage.log
/// -o out`: 4096 random bytes: exit 2, no blocks parsed, naming garbage.log.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case25_d_random_bytes_exit_2() {
    let r = in_case(
        "25-exit-status-contract",
        &["compare", "run1.log", "garbage.log"],
    );
    r.expect(2)
        .stderr_has("garbage.log")
        .stderr_has("blocks parsed");
}

/// Case 25-exit-status-contract (e): `actdiff compare run1.log
/// run1_changed.log -o out --ignore-op mm`: exit 0; the summary says "1
/// ignored difference" and the row is still listed.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case25_e_ignored_difference_exit_0() {
    let r = in_case(
        "25-exit-status-contract",
        &[
            "compare",
            "run1.log",
            "run1_changed.log",
            "--ignore-op",
            "mm",
        ],
    );
    r.expect(0).stdout_has("1 ignored difference");
    let wq = r.row_is(WQ, "diff", Some("exact"));
    assert_note(&wq, "ignored");
    assert_eq!(r.summary()["counts"]["ignored"], 1);
}

/// Case 25-exit-status-contract (Notes): every run of (a), (b), (d) and (e)
/// prints a summary on stdout naming its exit status and writes
/// summary.json with that status; `--format json` and `-q` give the same
/// status (and `--format json` the same document on stdout).
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case25_summary_and_status_on_every_run() {
    let case = "25-exit-status-contract";
    for (args, code) in [
        (vec!["compare", "run1.log", "run1.log"], 0),
        (vec!["compare", "run1.log", "run1_changed.log"], 1),
        (vec!["compare", "run1.log", "garbage.log"], 2),
        (
            vec![
                "compare",
                "run1.log",
                "run1_changed.log",
                "--ignore-op",
                "mm",
            ],
            0,
        ),
    ] {
        let r = in_case(case, &args);
        r.expect(code).stdout_has(&format!("exit status {code}"));
        assert_eq!(r.summary()["exit_status"], code);
        let mut json_args = args.clone();
        json_args.extend(["--format", "json"]);
        let j = in_case(case, &json_args);
        j.expect(code);
        let doc: Value = serde_json::from_str(&j.stdout)
            .unwrap_or_else(|e| panic!("--format json stdout: {e}\n{}", j.context()));
        assert_eq!(doc["exit_status"], code);
        assert_eq!(doc, j.summary());
        let mut quiet = args.clone();
        quiet.push("-q");
        let q = in_case(case, &quiet);
        q.expect(code);
        assert!(q.stdout.is_empty(), "{}", q.context());
    }
}

/// Case 25-exit-status-contract (variants of (d)): random bytes of
/// different sizes (1 byte to 1 MiB, some starting with the gzip magic), as
/// run2, as run1 and against themselves: exit 2 naming the file, no panic.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case25_random_bytes_of_different_sizes() {
    let tmp = TempDir::new().unwrap();
    write(
        tmp.path(),
        "run1.log",
        &case_file("25-exit-status-contract", "run1.log"),
    );
    for (i, len) in [1usize, 2, 3, 17, 100, 1000, 4096, 65_537, 1 << 20]
        .iter()
        .enumerate()
    {
        let mut bytes = random_bytes(*len, i as u64 + 1);
        if i % 3 == 2 && bytes.len() >= 2 {
            bytes[0] = 0x1f;
            bytes[1] = 0x8b;
        }
        let name = format!("random{len}.log");
        write(tmp.path(), &name, &bytes);
        for args in [
            ["compare", "run1.log", name.as_str()],
            ["compare", name.as_str(), "run1.log"],
            ["compare", name.as_str(), name.as_str()],
        ] {
            actdiff(tmp.path(), &args).expect(2).stderr_has(&name);
        }
    }
}
