//! Case 09-rank-set-mismatch (`../shared/cases/09-rank-set-mismatch/README.md`).

use super::common::*;

/// Checks the outcome of case 09 without `--rank-map`.
fn case09_check_plain(r: &Run) {
    r.expect(1);
    let s = r.summary();
    let pairs: Vec<(u64, u64)> = s["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| (x["rank"].as_u64().unwrap(), x["rank2"].as_u64().unwrap()))
        .collect();
    assert_eq!(pairs, [(0, 0), (1, 1), (2, 2)]);
    assert_eq!(counts(&s["ranks"][0]["counts"]), (1, 0, 0, 0));
    assert_eq!(counts(&s["ranks"][1]["counts"]), (1, 0, 0, 0));
    assert_eq!(counts(&s["ranks"][2]["counts"]), (0, 1, 0, 0));
    assert_eq!(s["ranks_only1"], serde_json::json!([10]));
    assert_eq!(s["ranks_only2"], serde_json::json!([3]));
    r.stdout_has("ranks only in");
}

/// Checks the outcome of case 09 with `--rank-map 10:3`.
fn case09_check_mapped(r: &Run) {
    r.expect(1);
    let s = r.summary();
    let ranks = s["ranks"].as_array().unwrap();
    let mapped = ranks
        .iter()
        .find(|x| x["rank"] == 10)
        .expect("rank 10 compared");
    assert_eq!(mapped["rank2"], 3);
    assert_eq!(counts(&mapped["counts"]), (1, 0, 0, 0));
    let two = ranks.iter().find(|x| x["rank"] == 2).unwrap();
    assert_eq!(counts(&two["counts"]), (0, 1, 0, 0));
    assert_eq!(s["ranks_only1"], serde_json::json!([]));
    assert_eq!(s["ranks_only2"], serde_json::json!([]));
}

/// Case 09-rank-set-mismatch: `actdiff compare run1 run2 -o out`: ranks pair
/// by number (0, 1, 2), rank 2 differs, rank 10 only in run1, rank 3 only in
/// run2; exit 1.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case09_ranks_pair_by_number() {
    case09_check_plain(&in_case(
        "09-rank-set-mismatch",
        &["compare", "run1", "run2"],
    ));
}

/// Case 09-rank-set-mismatch: `actdiff compare run1 run2 -o out`: the
/// per-rank summary table is ordered 0, 1, 2, 3, 10 (one-sided ranks in it).
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case09_rank_table_is_in_number_order() {
    let r = in_case("09-rank-set-mismatch", &["compare", "run1", "run2"]);
    r.expect(1);
    let index = r.page("index.html");
    let start = index.find("<table class=ranks").expect("a rank table");
    let table = &index[start
        ..index[start..]
            .find("</table>")
            .map_or(index.len(), |e| start + e)];
    let ranks: Vec<u32> = html_cells(table)
        .iter()
        .filter(|c| c.class.as_deref() == Some("rk"))
        .map(|c| c.text.parse().unwrap())
        .collect();
    assert_eq!(ranks, [0, 1, 2, 3, 10]);
}

/// Case 09-rank-set-mismatch: `actdiff compare run1 run2 -o out --rank-map
/// 10:3`: run1's rank 10 is compared with run2's rank 3 (match), no rank is
/// one-sided, rank 2 still differs; exit 1.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case09_rank_map() {
    case09_check_mapped(&in_case(
        "09-rank-set-mismatch",
        &["compare", "run1", "run2", "--rank-map", "10:3"],
    ));
}

/// Case 09-rank-set-mismatch (variants): the same rank sets as a TorchTitan
/// dump folder (`run1/numerics/rank_N_activations.log`) against
/// gzip-compressed ranks (`run2/rank_N_activations.log.gz`), and the other
/// way round: the same results as the case, with and without `--rank-map`.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case09_numerics_subfolder_and_gzip_ranks() {
    let case = "09-rank-set-mismatch";
    let tmp = TempDir::new().unwrap();
    for (run, ranks) in [("run1", [0, 1, 2, 10]), ("run2", [0, 1, 2, 3])] {
        for n in ranks {
            let name = format!("rank_{n}_activations.log");
            let bytes = case_file(case, &format!("{run}/{name}"));
            write(tmp.path(), &format!("{run}_dump/numerics/{name}"), &bytes);
            write(tmp.path(), &format!("{run}_gz/{name}.gz"), &gzip(&bytes));
        }
    }
    for (a, b) in [("run1_dump", "run2_gz"), ("run1_gz", "run2_dump")] {
        case09_check_plain(&actdiff(tmp.path(), &["compare", a, b]));
        case09_check_mapped(&actdiff(
            tmp.path(),
            &["compare", a, b, "--rank-map", "10:3"],
        ));
    }
}
