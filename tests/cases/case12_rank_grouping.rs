//! Case 12-rank-grouping (`../shared/cases/12-rank-grouping/README.md`).

use super::common::*;

/// All files of a report folder and the rows file, by relative name.
fn report_files(r: &Run) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<(String, Vec<u8>)> = std::fs::read_dir(&r.out)
        .unwrap()
        .map(|e| e.unwrap().path())
        .map(|p| {
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    v.push((
        "rows.jsonl".into(),
        std::fs::read(r.rows_file.as_ref().unwrap()).unwrap(),
    ));
    v.sort();
    v
}

/// Case 12-rank-grouping: `actdiff compare run1 run2 -o out`: two groups,
/// "ranks {0,2}: all matched" and "ranks {1,3}: first divergence
/// layers.1.attention/op_0_softmax (1 differing op)"; exit 1; run twice
/// (into two folders) the HTML, JSON and rows are byte-identical.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case12_groups_and_byte_identical_rerun() {
    let case = "12-rank-grouping";
    let r = in_case(case, &["compare", "run1", "run2"]);
    r.expect(1)
        .stdout_has("ranks {0,2}: all matched")
        .stdout_has(
            "ranks {1,3}: first divergence layers.1.attention/op_0_softmax (1 differing op)",
        );
    assert_eq!(
        r.summary()["groups"],
        serde_json::json!([
            {"ranks": [0, 2], "diverging": 0, "first_divergence": null, "verdict": "no divergence"},
            {"ranks": [1, 3], "diverging": 1, "first_divergence": "layers.1.attention/op_0_softmax",
             "verdict": "first origin layers.1.attention/op_0_softmax"},
        ])
    );
    let again = in_case(case, &["compare", "run1", "run2"]);
    again.expect(1);
    let (a, b) = (report_files(&r), report_files(&again));
    assert_eq!(
        a.iter().map(|x| &x.0).collect::<Vec<_>>(),
        b.iter().map(|x| &x.0).collect::<Vec<_>>()
    );
    assert!(a.iter().any(|x| x.0.ends_with(".html")));
    for ((name, x), (_, y)) in a.iter().zip(&b) {
        assert!(x == y, "{name} differs between two runs");
    }
}
