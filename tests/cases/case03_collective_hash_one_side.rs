//! Case 03-collective-hash-one-side (`../shared/cases/03-collective-hash-one-side/README.md`).

use super::common::*;

const ALL_GATHER: &str = "layers.0.attention/op_0_all_gather_into_tensor";

/// Case 03-collective-hash-one-side: `actdiff compare run1.log run2.log -o
/// out`. The all-gather's Output hash is in run1 only: the row says "output
/// hash missing in run2", is shown and does not gate (unsynced collective);
/// `wq` matches; excluded ops: run1 the empty set, run2 two ops; exit 0.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case03_one_sided_collective_hash_is_shown_not_gating() {
    let r = in_case(
        "03-collective-hash-one-side",
        &["compare", "run1.log", "run2.log"],
    );
    r.expect(0);
    let ag = r.row(ALL_GATHER);
    assert_ne!(ag["status"], "match", "{ag}");
    assert_note(&ag, "output hash missing in run2");
    assert_note(&ag, "unsynced");
    r.row_is(WQ, "match", Some("exact"));
    let rk = r.rank(0);
    assert_eq!(rk["counts"]["gating"], 0);
    assert_eq!(rk["run1"]["excluded_ops"], serde_json::json!([]));
    assert_eq!(
        rk["run2"]["excluded_ops"],
        serde_json::json!(["_pre_bucket_all_gather", "wait_tensor"])
    );
}

/// Case 03-collective-hash-one-side: `actdiff compare run1.log run2.log -o
/// out`: "output hash missing in run2" is a status of its own, neither
/// "match" nor a numeric difference.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case03_missing_hash_is_a_status_of_its_own() {
    let r = in_case(
        "03-collective-hash-one-side",
        &["compare", "run1.log", "run2.log"],
    );
    r.expect(0);
    let ag = r.row(ALL_GATHER);
    assert!(
        ag["status"] != "match" && ag["status"] != "diff",
        "status is `{}`: {ag}",
        ag["status"]
    );
    // The terminal summary counts it, and says it does not gate; both
    // rows count as paired.
    r.stdout_has("1 missing (Output hash in one run only)");
    r.stdout_has("differences, none gating: 0 diff, 1 missing");
    r.stdout_has("paired 2/2");
    let largest = &r.rank(0)["root_causes"]["largest_diff"];
    assert!(
        largest.is_null() || ref_key(largest) != ALL_GATHER,
        "a missing hash is counted as a numeric difference: {largest}"
    );
}

/// Case 03-collective-hash-one-side: `actdiff compare run1.log run2.log -o
/// out`: the excluded-ops panel highlights that the two sets differ.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case03_excluded_ops_difference_is_highlighted() {
    let r = in_case(
        "03-collective-hash-one-side",
        &["compare", "run1.log", "run2.log"],
    );
    r.expect(0);
    let page = r.page("rank0-page1.html");
    let start = page.find("Excluded ops").expect("an excluded-ops panel");
    let panel = &page[start..];
    let panel = &panel[..panel.find("</details>").unwrap_or(panel.len().min(2000))];
    assert!(panel.contains("wait_tensor"), "{panel}");
    let low = panel.to_lowercase();
    assert!(
        low.contains("differ") || low.contains("only") || low.contains("changed"),
        "the panel does not mark the difference:\n{panel}"
    );
}

/// Case 03-collective-hash-one-side: `actdiff compare run1.log run2.log -o
/// out --ignore-op all_gather_into_tensor`: exit 0, the all-gather row is
/// still shown with the same status and listed as ignored.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case03_ignored_collective_row_is_still_listed() {
    let case = "03-collective-hash-one-side";
    let plain = in_case(case, &["compare", "run1.log", "run2.log"]);
    let r = in_case(
        case,
        &[
            "compare",
            "run1.log",
            "run2.log",
            "--ignore-op",
            "all_gather_into_tensor",
        ],
    );
    r.expect(0);
    let ag = r.row(ALL_GATHER);
    assert_eq!(ag["status"], plain.row(ALL_GATHER)["status"]);
    assert_note(&ag, "ignored");
    assert_note(&ag, "output hash missing in run2");
    r.stdout_has("ignored");
}

/// Case 03-collective-hash-one-side (Notes): with the all-gather taken out
/// of the unsynced-collective rules (`[collectives] unsynced = []` in a
/// `--config` file) the one-sided hash gates: exit 1.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case03_collective_rules_off_gate() {
    let tmp = TempDir::new().unwrap();
    let cfg = write(
        tmp.path(),
        "actdiff.toml",
        b"[collectives]\nunsynced = []\n",
    );
    let r = in_case(
        "03-collective-hash-one-side",
        &[
            "compare",
            "run1.log",
            "run2.log",
            "--config",
            cfg.to_str().unwrap(),
        ],
    );
    r.expect(1);
    assert!(!has_note(&r.row(ALL_GATHER), "unsynced"));
}
