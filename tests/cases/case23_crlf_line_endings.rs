//! Case 23-crlf-line-endings (`../shared/cases/23-crlf-line-endings/README.md`).

use super::common::*;

const CRLF_KEYS: [&str; 3] = [
    "layers.0.feed_forward.w2/op_2_mm",
    "layers.0.feed_forward.w2/op_3_mm",
    "feed_forward/op_7_mul",
];

/// Checks a CRLF (or mixed) variant of case 23's log compared with the LF
/// original: exit 0; 3 exact matches; header count 3 parsed; all three in
/// the Backward section; no CR in the JSON outputs.
fn case23_check(r: &Run) {
    r.expect(0);
    let rows = r.rows();
    assert_eq!(rows.len(), 3, "{}", r.context());
    for (row, k) in rows.iter().zip(CRLF_KEYS) {
        assert_eq!(row["key1"], k, "{}", r.context());
        assert_eq!(row["status"], "match", "{}", r.context());
        assert_eq!(row["strategy"], "exact", "{}", r.context());
    }
    let rk = r.rank(0);
    assert_eq!(rk["run1"]["declared"], 3, "{}", r.context());
    assert_eq!(rk["run1"]["entries"], 3);
    let page = r.page("rank0-page1.html");
    assert!(page.contains("id=\"backward\""), "a Backward section");
    let shown = page_rows(&page);
    for i in 0..3 {
        let id = format!("rank0-row{i}");
        assert!(
            shown
                .iter()
                .any(|(sec, row)| sec == "backward" && row["id"] == id),
            "row {i} is not in the Backward section"
        );
    }
}

/// Case 23-crlf-line-endings: `actdiff compare run1_crlf.log run1.log -o out`.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case23_crlf_file_matches_lf_original() {
    case23_check(&in_case(
        "23-crlf-line-endings",
        &["compare", "run1_crlf.log", "run1.log"],
    ));
}

/// Case 23-crlf-line-endings: `actdiff compare run1_mixed.log run1.log -o out`.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case23_mixed_file_matches_lf_original() {
    case23_check(&in_case(
        "23-crlf-line-endings",
        &["compare", "run1_mixed.log", "run1.log"],
    ));
}

/// Case 23-crlf-line-endings (variants of run1.log, each compared with the
/// LF original as in the case): CRLF on a single line (every line in turn),
/// CRLF up to a line and LF after it and the reverse (every switch point),
/// CRLF on the second block only; each behaves as the LF file. Also a
/// template log of 40,000 blocks (about 9 MB, parsed in several chunks) in
/// CRLF and in CRLF/LF alternating by block against its LF original: all
/// match, header count parsed.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case23_crlf_at_every_position() {
    let lf = case_text("23-crlf-line-endings", "run1.log");
    let lines: Vec<&str> = lf.split_inclusive('\n').collect();
    let join = |crlf: &dyn Fn(usize) -> bool| -> String {
        lines
            .iter()
            .enumerate()
            .map(|(i, l)| {
                if crlf(i) {
                    format!("{}\r\n", l.strip_suffix('\n').unwrap_or(l))
                } else {
                    l.to_string()
                }
            })
            .collect()
    };
    let tmp = TempDir::new().unwrap();
    write(tmp.path(), "run1.log", lf.as_bytes());
    let mut variants: Vec<(String, String)> = Vec::new();
    for k in 0..lines.len() {
        variants.push((format!("line {k} only"), join(&|i| i == k)));
    }
    for k in 0..=lines.len() {
        variants.push((format!("CRLF before line {k}"), join(&|i| i < k)));
        variants.push((format!("CRLF from line {k}"), join(&|i| i >= k)));
    }
    let b2 = lines
        .iter()
        .position(|l| l.starts_with(&format!("[{}]", CRLF_KEYS[1])))
        .unwrap();
    variants.push(("block 2 only".into(), join(&|i| (b2..b2 + 6).contains(&i))));
    for (what, text) in &variants {
        write(tmp.path(), "v.log", text.as_bytes());
        let r = actdiff(tmp.path(), &["compare", "v.log", "run1.log"]);
        assert!(r.code == 0, "{what}: exit {}\n{}", r.code, r.context());
        case23_check(&r);
    }

    let n = 40_000;
    let mut big = Vec::new();
    template_log(&mut big, n, |_| false).unwrap();
    write(tmp.path(), "big.log", &big);
    let text = String::from_utf8(big).unwrap();
    let all_crlf = text.replace('\n', "\r\n");
    let mut alternating = String::with_capacity(all_crlf.len());
    for (i, block) in text.split_inclusive("\n\n").enumerate() {
        if i % 2 == 1 {
            alternating += &block.replace('\n', "\r\n");
        } else {
            alternating += block;
        }
    }
    for (what, t) in [("all CRLF", all_crlf), ("alternating", alternating)] {
        write(tmp.path(), "bigv.log", t.as_bytes());
        let r = actdiff(
            tmp.path(),
            &["compare", "bigv.log", "big.log", "--page-rows", "100000"],
        );
        assert_eq!(r.code, 0, "{what}: {}", r.context());
        let rk = r.rank(0);
        assert_eq!(rk["run1"]["declared"], n, "{what}");
        assert_eq!(counts(&rk["counts"]), (n, 0, 0, 0), "{what}");
    }
}
