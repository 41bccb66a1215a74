//! Case 20-report-size-budget (`../shared/cases/20-report-size-budget/README.md`).

use super::common::*;

/// Case 20's op count (full size: the logs are about 22 MB each).
const CASE20_OPS: u64 = 100_000;

/// Writes case 20's logs with `n` ops, every one bumped in run2.
fn case20_logs(dir: &Path, n: u64) {
    template_file(dir, "run1.log", n, |_| false);
    template_file(dir, "run2.log", n, |_| true);
}

/// Case 20-report-size-budget (generated per its README at full size:
/// 100,000 ops, all bumped in run2): `actdiff compare run1.log run2.log -o
/// out` exits 1 and the machine-readable output (summary.json, --rows)
/// lists all 100,000 differences, the first `layers.0.blk/op_0_mm`. The HTML
/// size and wall time are printed; runtime grows roughly linearly (100,000
/// ops take less than 12 times as long as 20,000).
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case20_machine_readable_output_lists_every_difference() {
    let _ = case_dir("20-report-size-budget");
    let small = TempDir::new().unwrap();
    case20_logs(small.path(), CASE20_OPS / 5);
    let t_small = measured(
        small.path(),
        &["compare", "run1.log", "run2.log", "-o", "out"],
    );
    assert_eq!(t_small.code, 1, "{}", t_small.stderr);
    drop(small);

    let tmp = TempDir::new().unwrap();
    case20_logs(tmp.path(), CASE20_OPS);
    let m = measured(
        tmp.path(),
        &[
            "compare",
            "run1.log",
            "run2.log",
            "-o",
            "out",
            "--rows",
            "rows.jsonl",
        ],
    );
    assert_eq!(m.code, 1, "{}", m.stderr);
    let html: u64 = std::fs::read_dir(tmp.path().join("out"))
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.path().extension().is_some_and(|x| x == "html"))
        .map(|e| e.metadata().unwrap().len())
        .sum();
    eprintln!(
        "case 20: {CASE20_OPS} ops in {:.2?} ({} ops in {:.2?}), HTML {html} bytes, peak RSS {:?}",
        m.wall,
        CASE20_OPS / 5,
        t_small.wall,
        m.peak_rss
    );
    let s: Value = serde_json::from_str(
        &std::fs::read_to_string(tmp.path().join("out/summary.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(counts(&s["counts"]), (0, CASE20_OPS, 0, 0));
    assert_eq!(
        ref_key(&s["ranks"][0]["first_divergence"]),
        "layers.0.blk/op_0_mm"
    );
    let rows = std::fs::read_to_string(tmp.path().join("rows.jsonl")).unwrap();
    let mut n = 0;
    for l in rows.lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        assert_eq!(v["status"], "diff", "{v}");
        n += 1;
    }
    assert_eq!(n, CASE20_OPS);
    assert!(
        m.wall.as_secs_f64() < 12.0 * t_small.wall.as_secs_f64(),
        "runtime not roughly linear: {:.2?} for {CASE20_OPS} ops vs {:.2?} for {}",
        m.wall,
        t_small.wall,
        CASE20_OPS / 5
    );
}

/// Case 20-report-size-budget (generated, full size as above): the HTML
/// stays under the budget (20 MB), a banner reads "100000 differing ops;
/// detailed: first K", and the first-divergence row `layers.0.blk/op_0_mm`
/// is present.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case20_html_budget_and_banner() {
    let tmp = TempDir::new().unwrap();
    case20_logs(tmp.path(), CASE20_OPS);
    // The chosen budget: 20 MB (`--html-budget-mb`; the default is 256 MiB).
    let r = actdiff(
        tmp.path(),
        &["compare", "run1.log", "run2.log", "--html-budget-mb", "19"],
    );
    r.expect(1);
    let size = r.html_bytes();
    eprintln!("case 20: HTML {size} bytes");
    assert!(
        size < HTML_BUDGET,
        "HTML {size} bytes over the budget {HTML_BUDGET}"
    );
    let html = r.html();
    assert!(
        html.contains("100000 differing ops; detailed: first"),
        "no banner"
    );
    // It sends the reader where every row is: --rows (summary.json holds
    // none; a new user followed the banner there).
    assert!(html.contains("every row: --rows (JSON Lines or Parquet)"));
    assert!(html.contains("layers.0.blk/op_0_mm"));
}

/// Reads a `--rows` file written by [`measured`] runs: (diff rows, all rows).
fn diff_rows(path: &Path) -> (Vec<String>, u64) {
    let text = std::fs::read_to_string(path).unwrap();
    assert!(!text.contains('\r'));
    let mut diff = Vec::new();
    let mut n = 0;
    for l in text.lines() {
        let v: Value = serde_json::from_str(l).unwrap();
        if v["status"] == "diff" {
            diff.push(ref_key(&v).to_string());
        }
        n += 1;
    }
    (diff, n)
}

/// Case 19-huge-log-streaming, with `actdiff::gen`'s realistic logs instead
/// of the README's template (Llama-style blocks with hashes, producers,
/// hash-only and non-finite rows): 200,000 ops per log, exactly 10 rows
/// perturbed in run 2. `actdiff compare run1 run2 -o out` finds exactly
/// those 10 (the generator's count) and matches the rest; exit 1.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case19_realistic_generated_logs_exactly_ten_differ() {
    let _ = case_dir("19-huge-log-streaming");
    let tmp = TempDir::new().unwrap();
    let opts = actdiff::gen::GenOptions {
        ops: 200_000,
        ranks: 1,
        seed: 19,
        perturb: 0.0,
        perturb_count: Some(10),
        step: None,
    };
    let st =
        actdiff::gen::generate(&tmp.path().join("run1"), &tmp.path().join("run2"), &opts).unwrap();
    assert_eq!(st.perturbed, 10);
    let m = measured(
        tmp.path(),
        &[
            "compare",
            "run1",
            "run2",
            "-o",
            "out",
            "--rows",
            "rows.jsonl",
        ],
    );
    eprintln!(
        "case 19 (gen, {} ops, {} bytes): wall {:.2?}, peak RSS {:?} bytes",
        st.ops, st.bytes, m.wall, m.peak_rss
    );
    assert_eq!(m.code, 1, "{}", m.stderr);
    let (diff, n) = diff_rows(&tmp.path().join("rows.jsonl"));
    assert_eq!(n, opts.ops);
    assert_eq!(diff.len(), 10, "{diff:?}");
    let s: Value = serde_json::from_str(
        &std::fs::read_to_string(tmp.path().join("out/summary.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(counts(&s["counts"]), (opts.ops - 10, 10, 0, 0));
}

/// Case 20-report-size-budget, with `actdiff::gen`'s realistic logs: 20,000
/// ops per log, every row perturbed in run 2. The rows file and
/// summary.json list every perturbed row (the generator's count) as a
/// difference; exit 1.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case20_realistic_generated_logs_all_differ() {
    let _ = case_dir("20-report-size-budget");
    let tmp = TempDir::new().unwrap();
    let opts = actdiff::gen::GenOptions {
        ops: 20_000,
        ranks: 1,
        seed: 20,
        perturb: 1.0,
        perturb_count: None,
        step: None,
    };
    let st =
        actdiff::gen::generate(&tmp.path().join("run1"), &tmp.path().join("run2"), &opts).unwrap();
    let m = measured(
        tmp.path(),
        &[
            "compare",
            "run1",
            "run2",
            "-o",
            "out",
            "--rows",
            "rows.jsonl",
        ],
    );
    assert_eq!(m.code, 1, "{}", m.stderr);
    let (diff, n) = diff_rows(&tmp.path().join("rows.jsonl"));
    assert_eq!(n, opts.ops);
    assert_eq!(diff.len() as u64, st.perturbed);
    assert!(
        st.perturbed * 100 >= opts.ops * 99,
        "{} of {} perturbed",
        st.perturbed,
        opts.ops
    );
    let s: Value = serde_json::from_str(
        &std::fs::read_to_string(tmp.path().join("out/summary.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(s["counts"]["diff"], st.perturbed);
}
