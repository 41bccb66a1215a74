//! Case 10-empty-or-partial-dump (`../shared/cases/10-empty-or-partial-dump/README.md`).

use super::common::*;

/// Case 10-empty-or-partial-dump: `actdiff compare run1.log run2a.log -o
/// out`: exit 2, "run2 is empty", naming run2a.log.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case10_empty_file_is_an_input_error() {
    let r = in_case(
        "10-empty-or-partial-dump",
        &["compare", "run1.log", "run2a.log"],
    );
    r.expect(2)
        .stderr_has("run2 is empty")
        .stderr_has("run2a.log");
}

/// Case 10-empty-or-partial-dump: `actdiff compare run1.log run2b.log -o
/// out`: a header-only log: exit 2, "run2 has no ops".
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case10_header_only_file_is_an_input_error() {
    let r = in_case(
        "10-empty-or-partial-dump",
        &["compare", "run1.log", "run2b.log"],
    );
    r.expect(2)
        .stderr_has("run2 has no ops")
        .stderr_has("run2b.log");
}

/// Case 10-empty-or-partial-dump: `actdiff compare run1.log run2c.log -o
/// out`: `wq` pairs and matches, `add` and `wo` are only in run1; coverage
/// "paired 1/3 run1 ops (33%)" and 1/1 of run2's; exit 1.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case10_partial_dump_reports_coverage() {
    let r = in_case(
        "10-empty-or-partial-dump",
        &["compare", "run1.log", "run2c.log"],
    );
    r.expect(1);
    r.row_is(WQ, "match", Some("exact"));
    r.row_is(ADD, "only1", None);
    r.row_is(WO, "only1", None);
    r.stdout_has("paired 1/3 run1.log ops (33%)")
        .stdout_has("1/1 run2c.log ops (100%)");
    let rk = r.rank(0);
    assert_eq!(rk["run1"]["paired"], 1);
    assert_eq!(rk["run1"]["entries"], 3);
    assert_eq!(rk["run2"]["paired"], 1);
    assert_eq!(rk["run2"]["entries"], 1);
}

/// Case 10-empty-or-partial-dump: `actdiff compare run2b.log run2b.log -o
/// out`: a header-only log against itself compares nothing: exit 2, never 0.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case10_header_only_against_itself_never_passes() {
    let r = in_case(
        "10-empty-or-partial-dump",
        &["compare", "run2b.log", "run2b.log"],
    );
    r.expect(2).stderr_has("has no ops");
}

/// Case 10-empty-or-partial-dump: `actdiff compare run2b.log run2b.log -o
/// out`: the message says "nothing compared".
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case10_header_only_against_itself_says_nothing_compared() {
    let r = in_case(
        "10-empty-or-partial-dump",
        &["compare", "run2b.log", "run2b.log"],
    );
    r.expect(2).says("nothing compared");
}

/// Case 10-empty-or-partial-dump (variant): a file of only whitespace (as
/// run2, as run1, and against itself) is an input error naming it: exit 2.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case10_whitespace_only_file_is_an_input_error() {
    let tmp = TempDir::new().unwrap();
    write(
        tmp.path(),
        "run1.log",
        &case_file("10-empty-or-partial-dump", "run1.log"),
    );
    for (i, ws) in ["\n", "   \n\n\t\n", " \r\n\r\n  ", "\t"]
        .iter()
        .enumerate()
    {
        let name = format!("ws{i}.log");
        write(tmp.path(), &name, ws.as_bytes());
        for args in [
            ["compare", "run1.log", name.as_str()],
            ["compare", name.as_str(), "run1.log"],
            ["compare", name.as_str(), name.as_str()],
        ] {
            actdiff(tmp.path(), &args).expect(2).stderr_has(&name);
        }
    }
}
