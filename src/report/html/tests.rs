//! Tests of the HTML pages: result pages, pagination, the heatmap, the key
//! index and the index page, on small fixtures.

use std::path::Path;

use super::parts::thousands;
use super::write_index;
use crate::matcher::{match_tables, MatchOptions, MatchTable};
use crate::parser::{parse_bytes, OpTable};
use crate::report::colour::{diff_colour, light_colour};
use crate::report::reasons::Reason;
use crate::report::summary::PageRef;
use crate::report::{RankComparison, ReportOptions, Summary};
use serde_json::json;

const LOG1: &str = "Total captured activations: 5
Excluded ops dispatched: t, view
================================================================================

[<script>alert(1)</script>/op_0_mm]
  Shape: torch.Size([2, 2]), Dtype: torch.float32
  L2 norm: 1.000000e+00
  Min: -1.000000e+00
  Max: 1.000000e+00
  Mean: 0.000000e+00
  Output hash: 4.000000e+00
  Input hashes: 2.000000e+00, 3.000000e+00
  Input producers: <none>/op_0_embedding;
  Location: \"quotes\"</td>.py:1

[layers.0/op_0_add]
  Shape: torch.Size([2, 2]), Dtype: torch.float32
  L2 norm: 2.000000e+00
  Min: -1.000000e+00
  Max: 1.000000e+00
  Mean: 5.000000e-01
  Output hash: 5.000000e+00
  Input hashes: 4.000000e+00
  Input producers: <script>alert(1)</script>/op_0_mm
  Location: model.py:2

[layers.0/op_1_mul]
  Shape: torch.Size([2, 2]), Dtype: torch.float32
  L2 norm: 3.000000e+00
  Output hash: 6.000000e+00
  Location: model.py:3

[layers.1/op_0_only_a]
  Output hash: 7.000000e+00
  Location: model.py:4

[layers.0/op_2_mm]
  Output hash: 8.000000e+00
  Location: model.py:5
  Phase: backward

";

const LOG2: &str = "Total captured activations: 5
Excluded ops dispatched: (none)
================================================================================

[<script>alert(1)</script>/op_0_mm]
  Shape: torch.Size([2, 2]), Dtype: torch.float32
  L2 norm: 1.000000e+00
  Min: -1.000000e+00
  Max: 1.000000e+00
  Mean: 0.000000e+00
  Output hash: 4.000000e+00
  Input hashes: 2.000000e+00, 3.000000e+00
  Input producers: <none>/op_0_embedding;
  Location: \"quotes\"</td>.py:1

[layers.0/op_0_add]
  Shape: torch.Size([2, 2]), Dtype: torch.float32
  L2 norm: 2.000100e+00
  Min: -1.000000e+00
  Max: 1.000000e+00
  Mean: 5.000000e-01
  Output hash: 5.000100e+00
  Input hashes: 4.000000e+00
  Input producers: <script>alert(1)</script>/op_0_mm
  Location: model.py:2

[layers.0/op_7_mul]
  Shape: torch.Size([2, 2]), Dtype: torch.float32
  L2 norm: 3.000000e+00
  Output hash: 6.000000e+00
  Location: model.py:3

[layers.0/op_2_mm]
  Output hash: 8.000000e+00
  Location: model.py:5
  Phase: backward

[layers.2/op_0_only_b]
  Output hash: 9.000000e+00
  Location: model.py:6

";

struct Fixture {
    t1: OpTable,
    t2: OpTable,
    m: MatchTable,
}

fn fixture(log1: &str, log2: &str) -> Fixture {
    let t1 = parse_bytes(log1.as_bytes().to_vec(), "a/rank_0_activations.log");
    let t2 = parse_bytes(log2.as_bytes().to_vec(), "b/rank_0_activations.log");
    let m = match_tables(&t1, &t2, &MatchOptions::default());
    Fixture { t1, t2, m }
}

fn rc(f: &Fixture) -> RankComparison<'_> {
    RankComparison {
        rank1: 0,
        rank2: 0,
        t1: &f.t1,
        t2: &f.t2,
        matches: &f.m,
    }
}

fn options(dir: &Path, page_rows: usize) -> ReportOptions {
    ReportOptions {
        out_dir: dir.to_path_buf(),
        name1: "run<A>".into(),
        name2: "run_B".into(),
        path1: "a/".into(),
        path2: "b/".into(),
        page_rows,
        html_rows: Some(crate::report::DEFAULT_HTML_ROWS),
        ..ReportOptions::default()
    }
}

fn read(dir: &Path, file: &str) -> String {
    std::fs::read_to_string(dir.join(file)).unwrap()
}

/// The JSON rows a page carries for its script: `{"n", "forward",
/// "backward"}`.
fn page_rows(html: &str) -> serde_json::Value {
    let open = "<script type=\"application/json\" id=rows>";
    let a = html.find(open).expect("the page carries its rows") + open.len();
    let b = a + html[a..].find("</script>").unwrap();
    serde_json::from_str(&html[a..b]).expect("the rows are JSON")
}

/// The ids of a page's rows, forward, backward, then optimizer.
fn row_ids(rows: &serde_json::Value) -> Vec<String> {
    ["forward", "backward", "optimizer"]
        .iter()
        .flat_map(|s| rows[s].as_array().unwrap())
        .map(|r| r["id"].as_str().unwrap().to_string())
        .collect()
}

/// Writes the fixture's pages and index; returns the summary.
fn write_all(f: &Fixture, opts: &ReportOptions) -> Summary {
    let rc = rc(f);
    let s = crate::report::write_rank(&rc, opts).unwrap();
    let groups = Summary::group_ranks(std::slice::from_ref(&s));
    let summary = Summary {
        schema_version: crate::report::summary::SCHEMA_VERSION,
        tool: "actdiff test".into(),
        name1: opts.name1.clone(),
        name2: opts.name2.clone(),
        path1: opts.path1.clone(),
        path2: opts.path2.clone(),
        counts: s.counts,
        ranks: vec![s],
        ranks_only1: vec![3],
        ranks_only2: vec![],
        ranks_failed: vec![],
        input_errors: vec![],
        warnings: vec![],
        groups,
        exit_status: 1,
        verdict: vec![Reason::Read("rank 0 diverges at <script>".into())],
        series: None,
        layouts: Vec::new(),
    };
    write_index(&summary, opts).unwrap();
    summary
}

#[test]
fn thousands_separators() {
    assert_eq!(thousands(0), "0");
    assert_eq!(thousands(999), "999");
    assert_eq!(thousands(3_264_458), "3,264,458");
}

#[test]
fn rank_pages_rows_chips_colours_escaping() {
    let f = fixture(LOG1, LOG2);
    let dir = tempfile::tempdir().unwrap();
    let opts = options(dir.path(), 2000);
    let summary = write_all(&f, &opts);
    let pages = &summary.ranks[0].pages;
    assert_eq!(
        pages,
        &vec![PageRef {
            file: "rank0-page1.html".into(),
            first_row: 0,
            end_row: f.m.rows.len(),
        }]
    );
    let html = read(dir.path(), "rank0-page1.html");
    let data = page_rows(&html);
    assert_eq!(data["n"], json!(["run<A>", "run_B"]));
    // Every result row once, with its anchor id, in result order within
    // its section; the backward row in the Backward section, the rows after
    // it (no Phase line) in the Optimizer section.
    let rows = &f.m.rows;
    let phase = |r: &crate::matcher::MatchRow| match r.sides().first() {
        (0, i) => f.t1.phase_kind(i),
        (_, j) => f.t2.phase_kind(j),
    };
    let ids: Vec<String> = crate::parser::Phase::ALL
        .iter()
        .flat_map(|p| {
            (0..rows.len())
                .filter(move |i| phase(&rows[*i]) == *p)
                .map(|i| format!("rank0-row{i}"))
        })
        .collect();
    assert_eq!(row_ids(&data), ids);
    assert_eq!(data["backward"].as_array().unwrap().len(), 1);
    assert!(!data["optimizer"].as_array().unwrap().is_empty());
    let all: Vec<&serde_json::Value> = ["forward", "backward", "optimizer"]
        .iter()
        .flat_map(|s| data[s].as_array().unwrap())
        .collect();
    let by_key = |k: &str| {
        *all.iter()
            .find(|r| r["k1"] == k)
            .unwrap_or_else(|| panic!("no row {k}"))
    };
    // A one-sided row has no cells on its missing side.
    let only2 = all.iter().find(|r| r["st"] == "only2").unwrap();
    assert_eq!(only2["s"][0], json!(null));
    assert_eq!(only2["s"][1].as_array().unwrap().len(), 9);
    assert!(only2.get("chip").is_none(), "no match chip when unpaired");
    assert!(all.iter().any(|r| r["st"] == "only1"));
    assert!(all.iter().any(|r| r["st"] == "match"));
    assert!(all
        .iter()
        .any(|r| r["chip"] == "same op key" && r["sg"] == "exact"));
    assert!(html.contains("Numerics Comparison: run&lt;A&gt; vs run_B"));
    assert!(html.contains("page 1 of 1"));
    assert!(html.contains("href=\"index.html\""));
    // The differing Output hash and L2 norm cells are coloured on both
    // sides, the relative difference in run 2's title, the colours in the
    // page's rules.
    let add = by_key("layers.0/op_0_add");
    assert_eq!(add["st"], "diff");
    assert_eq!(add["s"][0][0], json!({"t": "5.000000e+00", "x": 1}));
    assert_eq!(
        add["s"][1][0],
        json!({"t": "5.000100e+00", "x": 1, "d": "rel. diff 2.00e-5"})
    );
    assert_eq!(
        add["s"][1][5],
        json!({"t": "2.000100e+00", "x": 2, "d": "rel. diff 5.00e-5"}),
        "L2 norm differs too"
    );
    let (c, bg) = diff_colour(2e-5);
    let light = light_colour(2e-5);
    assert!(html.contains(&format!(".x1{{color:{light};background:{bg} }}")));
    assert!(html.contains(&format!(".x1{{color:{c} }}")));
    // Fuzzy pair: both keys, and its chip.
    let fuzzy = by_key("layers.0/op_1_mul");
    assert_eq!(fuzzy["k2"], "layers.0/op_7_mul");
    assert_eq!(
        (&fuzzy["chip"], &fuzzy["sg"]),
        (&json!("fuzzy op key"), &json!("fuzzy"))
    );
    // Producers as tooltips; absent fields as absent, never zeros.
    let first = by_key("<script>alert(1)</script>/op_0_mm");
    assert_eq!(
        first["s"][0][1],
        json!({"v": [{"h": "2.000000e+00", "p": "<none>/op_0_embedding"}, {"h": "3.000000e+00"}]})
    );
    assert_eq!(first["s"][0][2], "\"quotes\"</td>.py:1");
    assert!(all
        .iter()
        .flat_map(|r| r["s"].as_array().unwrap())
        .filter_map(|s| s.as_array())
        .flatten()
        .any(|c| *c == json!({"m": true, "k": "m"})));
    // Escaping: log text never appears raw; in the JSON every `<` is
    // `\u003c`, so nothing can end the data's script element.
    assert!(!html.contains("<script>alert"));
    assert!(html.contains("\\u003cscript>alert(1)\\u003c/script>/op_0_mm"));
    assert!(!html.contains("<none>"));
    assert!(!html.contains("</td>.py"));
    assert_eq!(
        html.matches("<script").count(),
        2,
        "the page's data and its own script"
    );
    assert_eq!(html.matches("</script").count(), 2);
    // Each row names the tolerance that judged it: in the key cell's
    // title, and as a chip on diverging rows judged by a rule.
    assert_eq!(first["title"], "lines 5 / 5 · default: hashes rel <= 1e-8");
    assert!(
        all.iter().all(|r| r.get("tol").is_none()),
        "the default is in the title only"
    );
    // Root cause: the add's inputs agree but its output differs.
    assert_eq!(add["notes"], json!([["nt origin", "origin"]]));
    assert!(html.contains("First cause:</span> <b class=\"bd cause\">origin</b>"));
    // Excluded-op chips.
    // Excluded-op chips: run 1's ops are missing from run 2's list.
    assert!(html.contains("<span class=\"xchip xo\" title=\"only in run&lt;A&gt;\">view</span>"));
    assert!(html.contains("<span class=xchip>(none)</span>"));
    assert!(html.contains("the two runs' sets differ"));
    assert!(html.contains("only in run&lt;A&gt;: t, view"));
}

#[test]
fn heatmap_on_the_first_page_and_key_index_are_written_with_the_pages() {
    let f = fixture(LOG1, LOG2);
    let dir = tempfile::tempdir().unwrap();
    // Two rows a page: the rank has several pages, and only the first
    // carries the heatmap.
    let opts = options(dir.path(), 2);
    write_all(&f, &opts);
    let first = read(dir.path(), "rank0-page1.html");
    let second = read(dir.path(), "rank0-page2.html");
    assert!(!second.contains("<svg class=heat"), "{second}");
    // Later pages link to it.
    assert!(
        second.contains(
            "<span class=fdlabel>Heatmap:</span> <a href=\"rank0-page1.html#heat-0\">on page 1</a>"
        ),
        "{second}"
    );
    assert!(!first.contains("fdlabel>Heatmap:"), "{first}");
    assert!(!second.contains("actdiff:heatmap"), "{second}");
    // One file a page: no page of its own for the heatmap, and the key
    // index in the file of its block of ranks.
    let mut names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .filter(|n| n.starts_with("rank0-"))
        .collect();
    names.sort();
    let pages = names.iter().filter(|n| n.starts_with("rank0-page")).count();
    assert!(pages >= 2, "{names:?}");
    assert_eq!(names.len(), pages, "{names:?}");
    // The heatmap sits under the first divergence and cause, above the
    // excluded ops and filters, between the markers the index cuts it out
    // by; its byte writer escapes as the templates do.
    let heat = first
        .split_once("<!--actdiff:heatmap-->\n<figure class=heatmap id=\"heat-0\">")
        .and_then(|(before, rest)| {
            assert!(before.contains("First divergence:"), "{before}");
            rest.split_once("</figure>\n<!--/actdiff:heatmap-->")
        })
        .map(|(heat, after)| {
            assert!(after.contains("<details class=excluded"), "{after}");
            heat
        })
        .expect("the heatmap between its markers on the first page");
    assert_eq!(first.matches("<svg class=heat").count(), 1);
    assert!(
        heat.contains("<rect x=") && heat.ends_with("</figcaption>"),
        "{heat}"
    );
    // Its cells link to rows on any of the rank's pages.
    assert!(heat.contains("href=\"rank0-page"), "{heat}");
    assert!(!heat.contains("<script"));
    let keys = read(dir.path(), "keys-0.js");
    assert!(keys.starts_with("actdiffKeys({\"rank\":0,"), "{keys}");
    assert_eq!(keys.lines().count(), 1, "{keys}");
    // Keys are JSON strings in a script file of their own.
    assert!(keys.contains("\"keys\":\"0:<script>alert(1)</script>/op_0_mm\\n"));
    assert!(
        keys.contains(";layers.0/op_7_mul") || keys.contains(";7_mul"),
        "{keys}"
    );
}

#[test]
fn pagination() {
    let f = fixture(LOG1, LOG2);
    assert_eq!(f.m.rows.len(), 6);
    let dir = tempfile::tempdir().unwrap();
    let opts = options(dir.path(), 2);
    // Drop the last row so there are 5: 2 + 2 + 1.
    let mut m = f.m.clone();
    m.rows.truncate(5);
    let f = Fixture { m, ..f };
    let rc = rc(&f);
    let s = crate::report::write_rank(&rc, &opts).unwrap();
    let pages = s.pages.clone();
    let firsts: Vec<(usize, usize)> = pages.iter().map(|p| (p.first_row, p.end_row)).collect();
    assert_eq!(firsts, vec![(0, 2), (2, 4), (4, 5)]);
    let p1 = read(dir.path(), "rank0-page1.html");
    let p2 = read(dir.path(), "rank0-page2.html");
    let p3 = read(dir.path(), "rank0-page3.html");
    assert!(p1.contains("page 1 of 3"));
    assert!(p1.contains("href=\"rank0-page2.html\" rel=next"));
    assert!(!p1.contains("rel=prev"));
    assert!(p2.contains("href=\"rank0-page1.html\" rel=prev"));
    assert!(p2.contains("href=\"rank0-page3.html\" rel=next"));
    assert!(p3.contains("href=\"rank0-page2.html\" rel=prev"));
    assert!(!p3.contains("rel=next"));
    assert_eq!(row_ids(&page_rows(&p1)), ["rank0-row0", "rank0-row1"]);
    assert_eq!(row_ids(&page_rows(&p2)), ["rank0-row2", "rank0-row3"]);
    assert_eq!(row_ids(&page_rows(&p3)), ["rank0-row4"]);
}

#[test]
fn empty_rank_gets_one_page() {
    let f = fixture("", "");
    let dir = tempfile::tempdir().unwrap();
    let opts = options(dir.path(), 2000);
    let rc = rc(&f);
    let s = crate::report::write_rank(&rc, &opts).unwrap();
    let pages = s.pages.clone();
    assert_eq!(
        pages,
        vec![PageRef {
            file: "rank0-page1.html".into(),
            first_row: 0,
            end_row: 0
        }]
    );
    let html = read(dir.path(), "rank0-page1.html");
    assert!(html.contains("no rows"));
    assert!(row_ids(&page_rows(&html)).is_empty());
    assert!(!html.contains("<table class=res>"), "no empty tables");
}

#[test]
fn index_page() {
    let f = fixture(LOG1, LOG2);
    let dir = tempfile::tempdir().unwrap();
    let opts = options(dir.path(), 2);
    let summary = write_all(&f, &opts);
    let html = read(dir.path(), "index.html");
    let fd = summary.ranks[0].first_divergence.as_ref().unwrap();
    assert!(html.contains(&format!("href=\"{}#{}\"", fd.page, fd.anchor)));
    assert!(html.contains("Numerics Comparison: run&lt;A&gt; vs run_B"));
    assert!(html.contains("exit status 1"));
    assert!(html.contains("rank 0 diverges at &lt;script&gt;"));
    assert!(html.contains("<b class=\"bd cause\">origin</b>"));
    // The index's own script (the key search) is its only one; no log
    // text is in it.
    assert_eq!(html.matches("<script").count(), 1);
    assert!(!html.contains("<script>alert"));
    assert!(html.contains("id=find-key"));
    for k in 1..=3 {
        assert!(html.contains(&format!("href=\"rank0-page{k}.html\"")));
    }
    assert!(html.contains("ranks only in run&lt;A&gt;: 3"));
    assert!(html.contains(
        "<span class=\"xchip xo\" title=\"only in run&lt;A&gt;\">t</span><span class=\"xchip xo\" title=\"only in run&lt;A&gt;\">view</span>"
    ));
    // The one-sided rank 3 is in the rank table, after rank 0.
    let table = &html[html.find("<table class=ranks>").unwrap()..];
    let table = &table[..table.find("</table>").unwrap()];
    assert!(table.contains("<td class=rk>3 <b class=\"bd only1\">only in run&lt;A&gt;</b>"));
    assert!(table.find("<td class=rk>0").unwrap() < table.find("<td class=rk>3").unwrap());
    // Rank 0's section: heatmap and origins/entries, linking to rows.
    assert!(html.contains("<section class=\"panel rankd\" id=\"rank-0\">"));
    assert!(html.contains("<svg class=heat"));
    assert!(html.contains("<table class=causes>"));
    assert!(html.contains("<span class=xchip>(none)</span>"));
    // The first divergence comes before the excluded ops and warnings.
    assert!(html.find(&fd.anchor).unwrap() < html.find("Excluded ops dispatched").unwrap());
    assert!(html.contains("exit status"));
}

/// Ranks that could not be compared: the index lists the first 50, with
/// why, and counts the rest (summary.json has every one).
#[test]
fn index_lists_failed_ranks_up_to_a_cap() {
    let f = fixture(LOG1, LOG2);
    let dir = tempfile::tempdir().unwrap();
    let opts = options(dir.path(), 2);
    let mut summary = write_all(&f, &opts);
    summary.ranks_failed = (1..=70)
        .map(|rank| crate::report::summary::FailedRank {
            step: None,
            rank,
            errors: vec![crate::report::messages::Message::Text(format!(
                "r/rank_{rank}_activations.log:1:1: unreadable"
            ))],
        })
        .collect();
    write_index(&summary, &opts).unwrap();
    let html = read(dir.path(), "index.html");
    assert_eq!(html.matches("<tr class=\"failed\">").count(), 50);
    assert!(html.contains("rank_50_activations.log") && !html.contains("rank_51_activations.log"));
    assert!(html.contains("… 20 more ranks could not be compared (see summary.json)"));
}

#[test]
fn index_not_recorded_and_warnings() {
    let log =
        "[x/op_0_mm]\n  Output hash: 1.0\n  Call type: foo\n\n[x/op_0_mm]\n  Output hash: 1.0";
    let f = fixture(log, log);
    let dir = tempfile::tempdir().unwrap();
    let opts = options(dir.path(), 2000);
    write_all(&f, &opts);
    let html = read(dir.path(), "index.html");
    assert!(html.contains("not recorded"));
    assert!(html.contains("1 duplicate key: x/op_0_mm (lines 1, 5)"));
    assert!(html.contains("1 × unknown field: Call type"));
    assert!(html.contains("incomplete"));
}

/// 2,000 rows of typical data stay well under 2 MB.
#[test]
fn page_size_is_bounded() {
    let mut a = String::from("Total captured activations: 2000\n");
    let mut b = a.clone();
    for i in 0..2000 {
        let block = |h: f64| {
            format!(
                "[layers.{l}.feed_forward.w{w}/op_{i}_mm]\n  Shape: torch.Size([2, 64, 256]), Dtype: torch.float32\n  L2 norm: 1.810183e+02\n  Min: -2.287835e+00\n  Max: 2.287835e+00\n  Mean: 2.222862e-03\n  Output hash: {h:.6e}\n  Input hashes: 2.553141e+04, 1.337287e+02\n  Input producers: layers.{l}.attention_norm/op_{i}_mul;\n  Location: llama3/model.py:152\n\n",
                l = i / 100,
                w = i % 3
            )
        };
        a.push_str(&block(2.663224e4));
        b.push_str(&block(if i % 2 == 0 { 2.663224e4 } else { 2.663225e4 }));
    }
    let f = fixture(&a, &b);
    let dir = tempfile::tempdir().unwrap();
    let opts = options(dir.path(), 2000);
    let rc = rc(&f);
    let t0 = std::time::Instant::now();
    crate::report::write_rank(&rc, &opts).unwrap();
    let size = std::fs::metadata(dir.path().join("rank0-page1.html"))
        .unwrap()
        .len();
    eprintln!("2000-row page: {size} bytes in {:?}", t0.elapsed());
    assert!(size < 2_000_000, "{size} bytes");
}

/// A value the parser could not read (it warns; the matcher does not
/// compare it) is marked on the result page: the cell carries `u`, which
/// the page script draws as class `unreadable` with a title and a marker.
/// Its readable neighbours and the other run's cell are not marked.
#[test]
fn unreadable_values_are_marked() {
    let block = |mean: &str, hashes: &str, out: &str| {
        format!(
            "Total captured activations: 1\n\n[layers.0/op_0_mm]\n  Shape: torch.Size([2, 2]), Dtype: torch.float32\n  L2 norm: 1.000000e+00\n  Min: -1.000000e+00\n  Max: 1.000000e+00\n  Mean: {mean}\n  Output hash: {out}\n  Input hashes: {hashes}\n  Location: model.py:1\n\n"
        )
    };
    // The Output hash differs, so the row diverges and is on the page.
    let a = block("0.000000e+00", "2.000000e+00, 3.000000e+00", "4.000000e+00");
    let b = block("1.2x", "2.000000e+00, 2.55.3141e+04", "4.500000e+00");
    let f = fixture(&a, &b);
    assert!(
        f.t2.warnings().iter().any(|w| w.message.contains("1.2x")),
        "{:?}",
        f.t2.warnings()
    );
    let dir = tempfile::tempdir().unwrap();
    let opts = options(dir.path(), 2000);
    crate::report::write_rank(&rc(&f), &opts).unwrap();
    let html = read(dir.path(), "rank0-page1.html");
    let data = page_rows(&html);
    let row = &data["forward"][0];
    assert_eq!(row["st"], "diff");
    let col = |name: &str| {
        crate::report::rowdata::COLUMNS
            .iter()
            .position(|c| *c == name)
            .unwrap()
    };
    let (mean, inputs, out) = (col("Mean"), col("Input hashes"), col("Output hash"));
    assert_eq!(row["s"][1][mean], json!({"t": "1.2x", "u": true}));
    assert_eq!(row["s"][1][inputs]["u"], json!(true));
    assert_eq!(row["s"][0][mean], json!("0.000000e+00"));
    assert!(row["s"][0][inputs].get("u").is_none());
    assert!(row["s"][1][out].get("u").is_none());
    assert!(
        row["s"][1][out]["x"].as_u64().is_some(),
        "the differing hash is coloured"
    );
    assert!(row["s"][1][col("Min")].is_string());
    // The page script (report.js, written beside the page once) draws the
    // mark and its title, and report.css its marker.
    assert!(html.contains("<script src=\"report.js\"></script>"));
    let js = read(dir.path(), "report.js");
    assert!(js.contains("cls ? cls + \" unreadable\" : \"unreadable\""));
    assert!(js.contains("\"unreadable value: not compared\""));
    assert!(read(dir.path(), "report.css").contains("td.unreadable::after"));
}

/// The index embeds a rank's heatmap cut out of its first result page; a
/// part an earlier actdiff wrote kept it in `rank{N}-overview.html`, which
/// the index reads where the first page has none; a first page without it
/// and no such page is an error naming the first page.
#[test]
fn index_embeds_the_heatmap_of_the_first_page_or_of_an_earlier_overview_page() {
    let f = fixture(LOG1, LOG2);
    let dir = tempfile::tempdir().unwrap();
    let opts = options(dir.path(), 2000);
    let summary = write_all(&f, &opts);
    let first = read(dir.path(), "rank0-page1.html");
    let (before, rest) = first.split_once("<!--actdiff:heatmap-->").unwrap();
    let (heat, after) = rest.split_once("<!--/actdiff:heatmap-->").unwrap();
    let index = read(dir.path(), "index.html");
    assert!(
        index.contains(heat.trim()),
        "the index lacks the page's heatmap"
    );
    // The heatmap only in an earlier version's overview page, marked
    // differently so that the index shows which one it read.
    let older = heat.replace("rows diverge", "rows diverge (older)");
    std::fs::write(
        dir.path().join("rank0-page1.html"),
        format!("{before}{after}"),
    )
    .unwrap();
    std::fs::write(
        dir.path().join("rank0-overview.html"),
        format!("<!DOCTYPE html>\n<h1>rank 0</h1>\n<!--actdiff:heatmap-->{older}<!--/actdiff:heatmap-->\n"),
    )
    .unwrap();
    write_index(&summary, &opts).unwrap();
    let index = read(dir.path(), "index.html");
    assert!(index.contains("rows diverge (older)"), "{index}");
    assert_eq!(index.matches("<svg class=heat").count(), 1);
    // Neither: an error naming the first page.
    std::fs::remove_file(dir.path().join("rank0-overview.html")).unwrap();
    let e = write_index(&summary, &opts).unwrap_err().to_string();
    assert!(
        e.contains("rank0-page1.html") && e.contains("no heatmap"),
        "{e}"
    );
}

/// Key indexes go into one file per block of 64 ranks, in rank order
/// whatever order the ranks were written in; a merge reads them back by
/// rank; a line that is not a key index is an error naming file and line.
#[test]
fn key_indexes_share_a_file_per_block_of_ranks() {
    let f = fixture(LOG1, LOG2);
    let dir = tempfile::tempdir().unwrap();
    let opts = options(dir.path(), 2000);
    let mut summary = write_all(&f, &opts);
    let mut ranks = Vec::new();
    for rank in [70, 1, 65, 0] {
        let rc = RankComparison {
            rank1: rank,
            rank2: rank,
            ..rc(&f)
        };
        ranks.push(crate::report::write_rank(&rc, &opts).unwrap());
    }
    // A rank without pages has no key index.
    ranks[3].drop_pages();
    summary.ranks = ranks;
    write_index(&summary, &opts).unwrap();
    let ranks_of = |name: &str| -> Vec<u32> {
        super::read_keys_file(&dir.path().join(name))
            .unwrap()
            .into_keys()
            .collect()
    };
    assert_eq!(ranks_of("keys-0.js"), vec![1]);
    assert_eq!(ranks_of("keys-1.js"), vec![65, 70]);
    let block1 = read(dir.path(), "keys-1.js");
    let lines: Vec<&str> = block1.lines().collect();
    assert!(
        lines[0].starts_with("actdiffKeys({\"rank\":65,"),
        "{block1}"
    );
    assert!(
        lines[1].starts_with("actdiffKeys({\"rank\":70,"),
        "{block1}"
    );
    assert!(
        lines[1].contains("\"page\":[\"rank70-page\",\".html\"]"),
        "{block1}"
    );
    let lines_read = super::read_keys_file(&dir.path().join("keys-1.js")).unwrap();
    assert_eq!(lines_read[&70], lines[1]);
    // The index offers each rank with pages its block's file.
    let index = read(dir.path(), "index.html");
    assert!(
        index.contains("<option value=\"70\" data-keys=\"keys-1.js\""),
        "{index}"
    );
    assert!(
        index.contains("<option value=\"1\" data-keys=\"keys-0.js\""),
        "{index}"
    );
    assert!(!index.contains("<option value=\"0\""), "{index}");
    // Not a key index: an error naming the file and line.
    std::fs::write(
        dir.path().join("keys-1.js"),
        format!("{}\nalert(1);\n", lines[0]),
    )
    .unwrap();
    let e = super::read_keys_file(&dir.path().join("keys-1.js"))
        .unwrap_err()
        .to_string();
    assert!(e.contains("keys-1.js") && e.contains("line 2"), "{e}");
}
