//! The HTML report in a real browser (issue 7): headless Chromium driven
//! over the DevTools protocol by the `headless_chrome` crate (see
//! `browser/chrome.rs`), on
//! reports the `actdiff` binary writes from `testdata/bug_layer2` and
//! `testdata/multirank_fsdp`, opened from `file://`.
//!
//! Checked: the index's counts, first diverging op and first cause per rank,
//! its heatmap and origins table linking to rows; each status checkbox hides
//! exactly its rows; the regex filter (`k / n rows match`, invalid regex
//! message); page links reach every page; hovering one half of a row pair
//! highlights both; a clipped cell expands on click; the key search jumps
//! to the right page and row; log text that tries to become markup (tags
//! and scripts in keys, locations, producers and run names) is drawn by
//! the page script as text, the differing cells coloured; the look (1280 px without horizontal
//! scrolling, sticky headers, right-aligned monospaced numbers, light and
//! dark themes); and on every page visited: no console errors and no
//! request that is not `file:`. Screenshots go to
//! `target/browser-screenshots/` (CI artifacts).
//!
//! Needs Debian's `chromium` (or `ACTDIFF_CHROMIUM` naming the binary);
//! without it every test here fails, saying so.
//! `large_report_sizes_and_index_load_time` (8 ranks, 1 million rows) is
//! ignored by default: `cargo test --release --test browser -- --ignored
//! --nocapture`.

#[path = "browser/chrome.rs"]
mod chrome;
#[path = "support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard, OnceLock};
use std::time::{Duration, Instant};

use chrome::Browser;
use serde_json::{json, Value};
use support::Run;

/// One browser at a time: the machines running this are small.
fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

fn target_dir() -> PathBuf {
    Path::new(env!("CARGO_TARGET_TMPDIR"))
        .parent()
        .expect("target/tmp has a parent")
        .to_path_buf()
}

fn screenshot_dir() -> PathBuf {
    target_dir().join("browser-screenshots")
}

/// A report written by the `actdiff` binary, with its `summary.json` and
/// `--rows` file read back.
struct Report {
    dir: PathBuf,
    summary: Value,
    rows: Vec<Value>,
}

impl Report {
    fn path(&self, file: &str) -> PathBuf {
        self.dir.join(file)
    }
    fn rank(&self, rank: u64) -> &Value {
        self.summary["ranks"]
            .as_array()
            .unwrap()
            .iter()
            .find(|r| r["rank"] == rank)
            .unwrap_or_else(|| panic!("no rank {rank} in summary.json"))
    }
    /// Rows of one rank, in result order.
    fn rank_rows(&self, rank: u64) -> Vec<&Value> {
        self.rows.iter().filter(|r| r["rank"] == rank).collect()
    }
}

/// `actdiff compare testdata/NAME/run_A testdata/NAME/run_B` into
/// `target/tmp/browser/NAME` (written once per test run).
fn compare(name: &str, extra: &[&str]) -> Report {
    let data = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("testdata")
        .join(name);
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("browser")
        .join(name);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let rows = dir.join("rows.jsonl");
    let r = Run::of(
        support::actdiff()
            .arg("compare")
            .arg(data.join("run_A"))
            .arg(data.join("run_B"))
            .arg("-o")
            .arg(&dir)
            .arg("--rows")
            .arg(&rows)
            .arg("-q")
            .args(extra),
        &dir,
    )
    .with_rows(rows);
    r.expect(1);
    Report {
        summary: r.summary(),
        rows: r.rows(),
        dir,
    }
}

/// `bug_layer2` with 100 rows per page (three pages).
fn bug_layer2() -> &'static Report {
    static R: OnceLock<Report> = OnceLock::new();
    R.get_or_init(|| compare("bug_layer2", &["--page-rows", "100"]))
}

/// `multirank_fsdp`: four ranks, one page each.
fn multirank() -> &'static Report {
    static R: OnceLock<Report> = OnceLock::new();
    R.get_or_init(|| compare("multirank_fsdp", &[]))
}

/// The key shown for a row reference of `summary.json` or a `--rows` row.
fn key_of(v: &Value) -> &str {
    v["key1"]
        .as_str()
        .or(v["key2"].as_str())
        .unwrap_or_else(|| panic!("no key in {v}"))
}

/// Asserts that nothing went wrong on the pages visited since the last
/// call: no console message of level SEVERE (script errors, failed loads)
/// and no request for anything but `file:`, `data:` or `about:` URLs (or
/// the browser's own `chrome:` pages).
fn assert_clean(b: &Browser, what: &str) {
    let severe = b.console_errors();
    assert!(severe.is_empty(), "{what}: console errors: {severe:#?}");
    for url in b.requests() {
        assert!(
            url.starts_with("file:")
                || url.starts_with("data:")
                || url.starts_with("about:")
                || url.starts_with("chrome:"),
            "{what}: a network request for {url}"
        );
    }
    let resources = b.js(
        "return performance.getEntriesByType('resource').map(e => e.name)",
        vec![],
    );
    for r in resources.as_array().unwrap() {
        let r = r.as_str().unwrap();
        assert!(r.starts_with("file:"), "{what}: loaded {r}");
    }
}

/// The rank table of the index, as shown.
fn index_table(b: &Browser) -> Vec<Value> {
    b.js(
        r#"return Array.from(document.querySelectorAll('table.ranks > tbody > tr')).map(tr => {
            const rk = tr.querySelector('td.rk');
            const fd = tr.querySelector('td.fdc > a.fdk');
            const fc = tr.querySelector('td.fdc .fc a.fdk');
            return {
              rank: rk ? rk.firstChild.nodeValue.trim() : null,
              nums: Array.from(tr.querySelectorAll('td.num')).map(td => td.textContent.trim()),
              first: fd ? fd.textContent : null,
              first_href: fd ? fd.getAttribute('href') : null,
              cause: fc ? fc.textContent : null,
              cause_href: fc ? fc.getAttribute('href') : null,
              onesided: tr.classList.contains('onesided'),
              text: tr.textContent,
            };
        })"#,
        vec![],
    )
    .as_array()
    .unwrap()
    .clone()
}

/// Checks the index's table against `summary.json`.
fn check_index_against_summary(b: &Browser, r: &Report) {
    b.open(&r.path("index.html"));
    let table = index_table(b);
    let ranks = r.summary["ranks"].as_array().unwrap();
    assert_eq!(table.len(), ranks.len(), "{table:#?}");
    for (row, s) in table.iter().zip(ranks) {
        assert_eq!(row["rank"], s["rank"].to_string(), "{row}");
        let c = &s["counts"];
        let mut want = vec![format!(
            "{} / {}",
            s["run1"]["entries"], s["run2"]["entries"]
        )];
        for k in ["match", "diff", "only1", "only2", "missing", "truncated"] {
            want.push(c[k].to_string());
        }
        let got: Vec<String> = row["nums"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap().to_string())
            .collect();
        assert_eq!(got, want, "counts of rank {}", s["rank"]);
        let fd = &s["first_divergence"];
        assert_eq!(
            row["first"],
            key_of(fd),
            "first divergence of rank {}",
            s["rank"]
        );
        assert_eq!(
            row["first_href"],
            format!(
                "{}#{}",
                fd["page"].as_str().unwrap(),
                fd["anchor"].as_str().unwrap()
            )
        );
        // A rank whose change only arrives through collectives has no cause
        // of its own (the headline names the rank that has one).
        let fc = &s["root_causes"]["first_cause"]["row"];
        let want = if fc.is_null() {
            Value::Null
        } else {
            Value::from(key_of(fc))
        };
        assert_eq!(row["cause"], want, "first cause of rank {}", s["rank"]);
    }
    // The totals line.
    let totals = b.js(
        "return Array.from(document.querySelectorAll('.summary .cnt')).map(e => e.textContent)",
        vec![],
    );
    let t = &r.summary["counts"];
    let totals: Vec<&str> = totals
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    assert!(
        totals.contains(&format!("{} match", t["match"]).as_str()),
        "{totals:?}"
    );
    assert!(
        totals.contains(&format!("{} diff", t["diff"]).as_str()),
        "{totals:?}"
    );
    // One heatmap and one origins table per rank, the first origin or entry
    // linking to its row, and outlined in the heatmap.
    for s in ranks {
        let rank = s["rank"].as_u64().unwrap();
        let fc = &s["root_causes"]["first_cause"]["row"];
        if fc.is_null() {
            // No cause of its own (the change arrives through a collective):
            // the rank still has its section and heatmap.
            let found = b.js(
                r#"const sec = document.getElementById('rank-' + arguments[0]);
                   return sec ? (sec.querySelector('svg.heat') ? 'ok' : 'no heatmap') : 'no section';"#,
                vec![json!(rank)],
            );
            assert_eq!(found, "ok", "rank {rank}");
            continue;
        }
        let href = format!(
            "{}#{}",
            fc["page"].as_str().unwrap(),
            fc["anchor"].as_str().unwrap()
        );
        let found = b.js(
            r#"const sec = document.getElementById('rank-' + arguments[0]);
               if (!sec) return 'no section';
               if (!sec.querySelector('svg.heat')) return 'no heatmap';
               const first = sec.querySelector('table.causes tbody tr a.fdk');
               if (!first || first.getAttribute('href') !== arguments[1]) return 'first cause link ' + (first && first.getAttribute('href'));
               const cell = Array.from(sec.querySelectorAll('svg.heat a')).find(a => a.getAttribute('href') === arguments[1]);
               if (!cell) return 'no heatmap cell links to it';
               if (!cell.querySelector('rect').classList.contains('o')) return 'its cell is not outlined';
               return 'ok';"#,
            vec![json!(rank), json!(href)],
        );
        assert_eq!(found, "ok", "rank {rank}: {href}");
    }
    assert_clean(b, "index");
}

#[test]
fn index_shows_counts_and_first_divergence_per_rank() {
    let _g = one_at_a_time();
    let b = Browser::start();
    let r = bug_layer2();
    check_index_against_summary(&b, r);
    // The injected bug: the first origin is the add of layers.2.ffn_norm.
    assert_eq!(
        index_table(&b)[0]["cause"],
        "layers.2.ffn_norm/op_1_add_",
        "bug_layer2's first origin"
    );

    let r = multirank();
    check_index_against_summary(&b, r);
    let t = index_table(&b);
    let causes: Vec<Option<&str>> = t.iter().map(|r| r["cause"].as_str()).collect();
    // Rank 1's input token changed; ranks 0, 2 and 3 receive the change
    // through the gradient reduce-scatter and have no cause of their own.
    assert_eq!(
        causes,
        [None, Some("tok_embeddings/op_2_embedding"), None, None]
    );
    let headline = b.js(
        "const p = document.querySelector('p.headline'); return p ? p.textContent : ''",
        vec![],
    );
    assert_eq!(
        headline,
        "rank 1 diverges first at `tok_embeddings/op_2_embedding` (a differing input: input 1), \
         and ranks 0, 2 and 3 receive that change through the gradient reduce-scatter."
    );
    // A heatmap cell opens its row.
    let fc = &r.rank(1)["root_causes"]["first_cause"]["row"];
    let href = format!(
        "{}#{}",
        fc["page"].as_str().unwrap(),
        fc["anchor"].as_str().unwrap()
    );
    let cell = b.find(&format!("#rank-1 svg.heat a[href=\"{href}\"] rect"));
    b.click(&cell);
    let url = b.url();
    assert!(url.ends_with(&href), "{url}");
    let target = b.wait_for(
        "const t = document.querySelector(':target'); return t ? t.id : ''",
        5,
    );
    assert_eq!(target, fc["anchor"]);
    assert_clean(&b, "heatmap link");
}

/// Ids of the result rows (`<tbody>`) of the page, with their status and
/// whether they are displayed.
fn page_rows(b: &Browser) -> Vec<(String, String, bool)> {
    let v = b.js(
        r#"return Array.from(document.querySelectorAll('table.res tbody[id]')).map(tb =>
             [tb.id, tb.className.split(' ')[0], getComputedStyle(tb).display !== 'none'])"#,
        vec![],
    );
    v.as_array()
        .unwrap()
        .iter()
        .map(|x| {
            (
                x[0].as_str().unwrap().to_string(),
                x[1].as_str().unwrap().to_string(),
                x[2].as_bool().unwrap(),
            )
        })
        .collect()
}

#[test]
fn each_status_checkbox_hides_exactly_its_rows() {
    let _g = one_at_a_time();
    let b = Browser::start();
    for (r, page) in [
        (multirank(), "rank1-page1.html"),
        (bug_layer2(), "rank0-page2.html"),
    ] {
        b.open(&r.path(page));
        let rows = page_rows(&b);
        assert!(rows.iter().all(|r| r.2), "all rows shown at first");
        let boxes = b.find_all("#filters input[type=checkbox][data-st]");
        assert!(boxes.len() >= 6, "one checkbox per status");
        let mut seen = 0;
        for cb in &boxes {
            let st = b.js_on(cb, "return this.dataset.st");
            let st = st.as_str().unwrap().to_string();
            b.click(cb);
            let now = page_rows(&b);
            for (id, s, shown) in &now {
                assert_eq!(*shown, *s != st, "{page}: {id} ({s}) with `{st}` unchecked");
            }
            seen += now.iter().filter(|r| r.1 == st).count();
            b.click(cb);
            assert!(
                page_rows(&b).iter().all(|r| r.2),
                "{page}: `{st}` checked again"
            );
        }
        assert_eq!(
            seen,
            rows.len(),
            "{page}: every row has a status with a checkbox"
        );
        assert_clean(&b, page);
    }
}

#[test]
fn regex_filter_hides_non_matching_rows_and_reports_invalid_ones() {
    let _g = one_at_a_time();
    let b = Browser::start();
    let r = bug_layer2();
    b.open(&r.path("rank0-page1.html"));
    let rows = r.rank_rows(0);
    let on_page: Vec<(usize, &Value)> = rows.iter().copied().enumerate().take(100).collect();
    let pattern = r"layers\.2\.(ffn|attention_norm)";
    let re = regex::RegexBuilder::new(pattern)
        .case_insensitive(true)
        .build()
        .unwrap();
    let want: Vec<String> = on_page
        .iter()
        .filter(|(_, row)| {
            [&row["key1"], &row["key2"]]
                .iter()
                .any(|k| k.as_str().is_some_and(|k| re.is_match(k)))
        })
        .map(|(i, _)| format!("rank0-row{i}"))
        .collect();
    assert!(!want.is_empty() && want.len() < on_page.len());
    let boxe = b.find("#re");
    b.type_into(&boxe, pattern);
    let expect = format!("{} / {} rows match", want.len(), on_page.len());
    let status = b.wait_for(
        &format!(
            "const s = document.getElementById('re-status').textContent; return s === {} ? s : ''",
            json!(expect)
        ),
        5,
    );
    assert_eq!(
        status,
        expect,
        "status: {}",
        b.js(
            "return document.getElementById('re-status').textContent",
            vec![]
        )
    );
    let shown: Vec<String> = page_rows(&b)
        .into_iter()
        .filter(|r| r.2)
        .map(|r| r.0)
        .collect();
    assert_eq!(shown, want);
    // An invalid regex: a message, no crash.
    b.clear(&boxe);
    b.type_into(&boxe, "layers[");
    let err = b.wait_for(
        "const s = document.getElementById('re-status'); return s.className === 'err' ? s.textContent : ''",
        5,
    );
    assert!(err.as_str().unwrap().starts_with("invalid regex"), "{err}");
    // Cleared: every row again.
    b.clear(&boxe);
    b.type_into(&boxe, " ");
    b.wait_for(
        "return document.getElementById('re-status').textContent === ''",
        5,
    );
    assert!(page_rows(&b).iter().all(|r| r.2));
    assert_clean(&b, "regex filter");
}

#[test]
fn page_links_reach_every_page() {
    let _g = one_at_a_time();
    let b = Browser::start();
    let r = bug_layer2();
    let pages: Vec<String> = r.rank(0)["pages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| p["file"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(pages.len(), 3, "265 rows at 100 per page");
    // From the index, each page link.
    for (k, file) in pages.iter().enumerate() {
        b.open(&r.path("index.html"));
        let link = b.find(&format!("table.ranks td.pg a[href=\"{file}\"]"));
        b.click(&link);
        assert!(b.url().ends_with(file.as_str()), "{}", b.url());
        let sub = b.js("return document.querySelector('.sub').textContent", vec![]);
        assert!(
            sub.as_str()
                .unwrap()
                .contains(&format!("page {} of 3", k + 1)),
            "{sub}"
        );
        let ids: Vec<String> = page_rows(&b).into_iter().map(|r| r.0).collect();
        let first = k * 100;
        let last = ((k + 1) * 100).min(265) - 1;
        assert_eq!(ids.first().unwrap(), &format!("rank0-row{first}"));
        assert_eq!(ids.last().unwrap(), &format!("rank0-row{last}"));
        assert_eq!(ids.len(), last - first + 1);
    }
    // From page 1, "next" to the last page, then "previous" back, then the index.
    b.open(&r.path(&pages[0]));
    let mut walked = vec![b.url()];
    while let Some(next) = b.find_all("header nav.pager a[rel=next]").first() {
        b.click(next);
        walked.push(b.url());
    }
    assert_eq!(walked.len(), 3, "{walked:?}");
    for (u, f) in walked.iter().zip(&pages) {
        assert!(u.ends_with(f.as_str()), "{u}");
    }
    b.click(&b.find("header nav.pager a[rel=prev]"));
    assert!(b.url().ends_with(pages[1].as_str()));
    b.click(&b.find("header nav.pager a[href=\"index.html\"]"));
    assert!(b.url().ends_with("index.html"));
    assert_clean(&b, "page links");
}

#[test]
fn hovering_one_half_of_a_row_pair_highlights_both() {
    let _g = one_at_a_time();
    let b = Browser::start();
    let r = bug_layer2();
    b.open(&r.path("rank0-page1.html"));
    let hover = b.js(
        "const d = document.createElement('div'); d.style.background = 'var(--hover)'; document.body.appendChild(d);
         const c = getComputedStyle(d).backgroundColor; d.remove(); return c",
        vec![],
    );
    // The side-label cells: second of row 1, first of row 2.
    let bg = |id: &str| -> (String, String) {
        let v = b.js(
            "const tb = document.getElementById(arguments[0]); const tr = tb.querySelectorAll('tr');
             return [getComputedStyle(tr[0].children[1]).backgroundColor, getComputedStyle(tr[1].children[0]).backgroundColor]",
            vec![json!(id)],
        );
        (v[0].as_str().unwrap().into(), v[1].as_str().unwrap().into())
    };
    for (half, sel) in [
        ("run 2's half", "#rank0-row5 tr + tr > td:first-child"),
        (
            "run 1's half",
            "#rank0-row5 tr:first-child > td:nth-child(2)",
        ),
    ] {
        b.hover(&b.find(sel));
        let (a, c) = bg("rank0-row5");
        assert_eq!(a, hover, "{half}: run 1's row");
        assert_eq!(c, hover, "{half}: run 2's row");
        let (x, y) = bg("rank0-row7");
        assert!(x != hover && y != hover, "another row is highlighted too");
    }
    assert_clean(&b, "hover");
}

#[test]
fn clipped_cell_expands_and_collapses_on_click() {
    let _g = one_at_a_time();
    let b = Browser::start();
    let r = multirank();
    b.open(&r.path("rank0-page1.html"));
    let cell = b.find("table.res div.c");
    let size = |b: &Browser| -> (f64, f64, bool) {
        let v = b.js(
            "const c = document.querySelector('table.res div.c'); return [c.clientHeight, c.scrollHeight, c.classList.contains('open')]",
            vec![],
        );
        (
            v[0].as_f64().unwrap(),
            v[1].as_f64().unwrap(),
            v[2].as_bool().unwrap(),
        )
    };
    let (h0, full, open) = size(&b);
    assert!(!open && h0 < full, "clipped at first: {h0} of {full}");
    b.click(&cell);
    let (h1, full1, open) = size(&b);
    assert!(open && h1 >= full1 && h1 > h0, "expanded: {h1} of {full1}");
    b.click(&cell);
    let (h2, _, open) = size(&b);
    assert!(!open && h2 == h0, "collapsed again");
    assert_clean(&b, "clipped cell");
}

/// Types `key` into the index's search box for `rank`, presses Enter and
/// waits for the row's page.
fn search_and_jump(b: &Browser, r: &Report, rank: u64, key: &str) -> String {
    b.open(&r.path("index.html"));
    let scripts = b.js(
        "return document.querySelectorAll('script[src]').length",
        vec![],
    );
    assert_eq!(scripts, 0, "no key index is loaded before the box is used");
    b.click(&b.find(&format!("#find-rank option[value=\"{rank}\"]")));
    let boxe = b.find("#find-key");
    b.type_into(&boxe, key);
    let first = b.wait_for(
        "const a = document.querySelector('#find-results a'); return a ? a.textContent : ''",
        10,
    );
    assert_eq!(first, key, "first result");
    let loaded = b.js(
        "return Array.from(document.querySelectorAll('script[src]')).map(s => s.getAttribute('src'))",
        vec![],
    );
    assert_eq!(loaded, json!([format!("keys-{}.js", rank / 64)]));
    let index_url = b.url();
    b.type_into(&boxe, "\u{E007}");
    let t0 = Instant::now();
    while b.url() == index_url && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    b.wait_for("return document.readyState === 'complete'", 10);
    b.url()
}

#[test]
fn key_search_jumps_to_the_right_page_and_row() {
    let _g = one_at_a_time();
    let b = Browser::start();
    let r = bug_layer2();
    let rows = r.rank_rows(0);
    for i in [250usize, 52, 0] {
        let key = key_of(rows[i]);
        let url = search_and_jump(&b, r, 0, key);
        let page = i / 100 + 1;
        assert!(
            url.ends_with(&format!("rank0-page{page}.html#rank0-row{i}")),
            "{key}: {url}"
        );
        let v = b.wait_for(
            "const t = document.querySelector(':target'); if (!t) return '';
             const r = t.getBoundingClientRect();
             return r.top >= 0 && r.top < innerHeight ? t.id : 'off screen: ' + r.top",
            5,
        );
        assert_eq!(v, format!("rank0-row{i}"), "{key}");
        assert_clean(&b, "key search");
    }
    // Another rank of a multi-rank report.
    let r = multirank();
    let fc = &r.rank(1)["root_causes"]["first_cause"]["row"];
    let url = search_and_jump(&b, r, 1, key_of(fc));
    assert!(
        url.ends_with(&format!(
            "{}#{}",
            fc["page"].as_str().unwrap(),
            fc["anchor"].as_str().unwrap()
        )),
        "{url}"
    );
    assert_clean(&b, "key search, rank 1");
}

#[test]
fn every_page_loads_without_errors_or_network() {
    let _g = one_at_a_time();
    let b = Browser::start();
    for r in [bug_layer2(), multirank()] {
        let mut files: Vec<PathBuf> = std::fs::read_dir(&r.dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "html"))
            .collect();
        files.sort();
        assert!(files.len() >= 4);
        for f in &files {
            b.open(f);
            let title = b.js("return document.title", vec![]);
            assert!(title.as_str().unwrap().starts_with("Numerics Comparison"));
            assert_clean(&b, &f.display().to_string());
        }
    }
}

/// Two logs whose text tries to become markup: a key with an `<img
/// onerror>`, a Location closing its cell, a `<none>` producer, run names
/// with tags. The page script draws the rows from JSON; every string must
/// arrive as text.
fn hostile_report() -> PathBuf {
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("browser")
        .join("hostile");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let block = |out: &str, l2: &str| {
        format!(
            "[<img src=x onerror=\"window.__pwned=1\">/op_0_mm]\n  Shape: torch.Size([2]), Dtype: torch.float32\n  L2 norm: {l2}\n  Output hash: {out}\n  Input hashes: 2.000000e+00, 3.000000e+00\n  Input producers: <none>/op_0_embedding;\n  Location: \"q\"</td><script>window.__pwned=2</script>.py:1\n\n"
        )
    };
    for (name, out, l2) in [
        ("a.log", "5.000000e+00", "2.000000e+00"),
        ("b.log", "5.000100e+00", "2.000100e+00"),
    ] {
        let text = format!(
            "Total captured activations: 1\n{}\n\n{}",
            "=".repeat(80),
            block(out, l2)
        );
        std::fs::write(dir.join(name), text).unwrap();
    }
    Run::of(
        support::actdiff().current_dir(&dir).args([
            "compare",
            "a.log",
            "b.log",
            "-o",
            "out",
            "-q",
            "--name1",
            "<b>one</b>",
            "--name2",
            "two'\"",
        ]),
        dir.join("out"),
    )
    .expect(1);
    dir.join("out")
}

#[test]
fn log_text_is_drawn_as_text() {
    let _g = one_at_a_time();
    let b = Browser::start();
    let out = hostile_report();
    b.open(&out.join("rank0-page1.html"));
    let got = b.js(
        r#"const tb = document.querySelector('table.res tbody[id]');
           const rows = tb.querySelectorAll('tr');
           const side = i => Array.from(rows[i].children).filter(td => !td.classList.contains('k'));
           return {
             pwned: window.__pwned === undefined ? null : window.__pwned,
             markup: document.querySelectorAll('table.res img, table.res script, table.res b:not([class])').length,
             id: tb.id,
             status: tb.className,
             key: tb.querySelector('td.k').firstChild.nodeValue,
             labels: [side(0)[0].textContent, side(1)[0].textContent],
             location: side(0)[3].textContent,
             producer: side(0)[2].querySelector('span').title,
             inputs: side(0)[2].textContent,
             out1: [side(0)[1].className, side(0)[1].textContent, side(0)[1].title],
             out2: [side(1)[1].className, side(1)[1].textContent, side(1)[1].title],
             cells: [side(0).length, side(1).length],
           };"#,
        vec![],
    );
    assert_eq!(got["pwned"], Value::Null, "a log's script ran: {got}");
    assert_eq!(got["markup"], 0, "log text became elements: {got}");
    assert_eq!(got["id"], "rank0-row0");
    assert_eq!(got["status"], "diff");
    assert_eq!(
        got["key"],
        "<img src=x onerror=\"window.__pwned=1\">/op_0_mm"
    );
    assert_eq!(got["labels"], json!(["<b>one</b>", "two'\""]));
    assert_eq!(
        got["location"],
        "\"q\"</td><script>window.__pwned=2</script>.py:1"
    );
    assert_eq!(got["producer"], "produced by <none>/op_0_embedding");
    assert_eq!(got["inputs"], "2.000000e+00, 3.000000e+00");
    assert_eq!(got["out1"], json!(["x1", "5.000000e+00", ""]));
    assert_eq!(
        got["out2"],
        json!(["x1", "5.000100e+00", "rel. diff 2.00e-5"])
    );
    assert_eq!(
        got["cells"],
        json!([10, 10]),
        "side label and nine cells a side"
    );
    assert_clean(&b, "hostile page");
}

/// A differing cell shows its colour on every result, the zebra-striped
/// (even) ones included: each colour class has one background.
#[test]
fn differing_cells_keep_their_colour_on_striped_results() {
    let _g = one_at_a_time();
    let b = Browser::start();
    b.open(&bug_layer2().path("rank0-page1.html"));
    let got = b.js(
        r#"const by = {};
           let even = 0;
           document.querySelectorAll('table.res tbody').forEach((tb, i) => {
             tb.querySelectorAll('td[class^=x]').forEach(td => {
               if (i % 2 === 1) even += 1;
               (by[td.className] = by[td.className] || new Set()).add(getComputedStyle(td).backgroundColor);
             });
           });
           return { even, mixed: Object.entries(by).filter(([, v]) => v.size > 1).map(([k, v]) => k + ': ' + [...v].join(' | ')) };"#,
        vec![],
    );
    assert!(
        got["even"].as_u64().unwrap() > 0,
        "no coloured cell on a striped result: {got}"
    );
    assert_eq!(
        got["mixed"],
        json!([]),
        "a colour class with two backgrounds"
    );
    assert_clean(&b, "colours");
}

#[test]
fn looks_themes_and_screenshots() {
    let _g = one_at_a_time();
    let b = Browser::start();
    let r = bug_layer2();
    let shots = screenshot_dir();
    b.window_size(1280, 900);
    let mut backgrounds = Vec::new();
    for scheme in ["light", "dark"] {
        b.color_scheme(scheme);
        b.open(&r.path("index.html"));
        let fits = b.js(
            "return [document.documentElement.scrollWidth, innerWidth]",
            vec![],
        );
        assert!(
            fits[0].as_f64() <= fits[1].as_f64(),
            "index at 1280 px scrolls sideways: {fits}"
        );
        b.screenshot(&shots.join(format!("index-{scheme}.png")));
        b.open(&r.path("rank0-page1.html"));
        let fits = b.js(
            "return [document.documentElement.scrollWidth, innerWidth]",
            vec![],
        );
        assert!(
            fits[0].as_f64() <= fits[1].as_f64(),
            "page at 1280 px scrolls sideways: {fits}"
        );
        backgrounds.push(b.js(
            "return getComputedStyle(document.body).backgroundColor",
            vec![],
        ));
        // Numbers: right-aligned, monospaced.
        let num = b.js(
            "const td = document.querySelector('#rank0-row1 tr:first-child > td:nth-last-child(4)');
             const s = getComputedStyle(td); return [s.textAlign, s.fontFamily]",
            vec![],
        );
        assert_eq!(num[0], "right", "{num}");
        assert!(num[1].as_str().unwrap().contains("monospace"), "{num}");
        b.screenshot(&shots.join(format!("page-{scheme}.png")));
        // Column headers stay visible while scrolling.
        let top = b.js(
            "const t = document.querySelector('table.res'); window.scrollTo(0, t.offsetTop + t.offsetHeight / 2);
             return document.querySelector('table.res th').getBoundingClientRect().top",
            vec![],
        );
        let top = top.as_f64().unwrap();
        assert!(
            (-1.0..=2.0).contains(&top),
            "header at {top} px after scrolling"
        );
        b.screenshot(&shots.join(format!("page-scrolled-{scheme}.png")));
        assert_clean(&b, scheme);
    }
    assert_ne!(backgrounds[0], backgrounds[1], "a dark theme");
    for f in [
        "index-light.png",
        "index-dark.png",
        "page-light.png",
        "page-dark.png",
    ] {
        let p = shots.join(f);
        let n = std::fs::metadata(&p).map(|m| m.len()).unwrap_or(0);
        assert!(n > 10_000, "{}: {n} bytes", p.display());
    }
    eprintln!("screenshots in {}", shots.display());
}

/// An 8-rank comparison of about a million rows: no page over 2 MB, and the
/// index and the largest result page (its 500 rows drawn) load in under a
/// second.
#[test]
#[ignore = "large: generates 8 × 125,000 ops (about 700 MB of logs) and compares them; minutes on a small machine"]
fn large_report_sizes_and_index_load_time() {
    let _g = one_at_a_time();
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("browser-large");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let (a, c, out) = (root.join("a"), root.join("b"), root.join("report"));
    let t0 = Instant::now();
    let st = Run::of(
        support::actdiff().args(["gen"]).arg(&a).arg(&c).args([
            "--ops",
            "125000",
            "--ranks",
            "8",
            "--perturb",
            "0.01",
        ]),
        "",
    );
    st.expect(0);
    let gen = t0.elapsed();
    let t0 = Instant::now();
    let st = Run::of(
        support::actdiff()
            .arg("compare")
            .arg(&a)
            .arg(&c)
            .arg("-o")
            .arg(&out)
            .arg("-q"),
        &out,
    );
    st.expect(1);
    let cmp = t0.elapsed();
    let _ = std::fs::remove_dir_all(&a);
    let _ = std::fs::remove_dir_all(&c);
    let summary: Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let rows: u64 = summary["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            let c = &r["counts"];
            ["match", "diff", "only1", "only2", "missing", "truncated"]
                .iter()
                .map(|k| c[k].as_u64().unwrap())
                .sum::<u64>()
        })
        .sum();
    let mut largest = (0u64, String::new());
    let mut largest_page = (0u64, String::new());
    let (mut html, mut pages, mut keys) = (0u64, 0u64, 0u64);
    for e in std::fs::read_dir(&out).unwrap() {
        let p = e.unwrap().path();
        let n = std::fs::metadata(&p).unwrap().len();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with(".html") {
            html += n;
            pages += 1;
            if name.contains("-page") && n > largest_page.0 {
                largest_page = (n, name.clone());
            }
            if n > largest.0 {
                largest = (n, name);
            }
        } else if name.starts_with("keys-") {
            keys = keys.max(n);
        }
    }
    let index = std::fs::metadata(out.join("index.html")).unwrap().len();
    let b = Browser::start();
    let mut loads = Vec::new();
    for _ in 0..3 {
        let t = Instant::now();
        b.open(&out.join("index.html"));
        let wall = t.elapsed().as_secs_f64();
        let nav = b.js(
            "const n = performance.getEntriesByType('navigation')[0]; return n.loadEventEnd - n.startTime",
            vec![],
        );
        loads.push((wall, nav.as_f64().unwrap() / 1000.0));
    }
    assert_clean(&b, "large index");
    // The largest result page, its rows drawn by its script by the load
    // event.
    let mut page_loads = Vec::new();
    for _ in 0..3 {
        b.open(&out.join(&largest_page.1));
        let nav = b.js(
            "const n = performance.getEntriesByType('navigation')[0]; return [n.loadEventEnd - n.startTime, document.querySelectorAll('table.res tbody[id]').length]",
            vec![],
        );
        assert_eq!(
            nav[1],
            actdiff::report::DEFAULT_PAGE_ROWS,
            "{}: rows drawn",
            largest_page.1
        );
        page_loads.push(nav[0].as_f64().unwrap() / 1000.0);
    }
    assert_clean(&b, "large result page");
    let best_page = page_loads.iter().copied().fold(f64::MAX, f64::min);
    // The key search on one rank of 125,000 rows, from the index.
    b.open(&out.join("index.html"));
    let t = Instant::now();
    let boxe = b.find("#find-key");
    b.type_into(&boxe, "layers.31.feed_forward.w2/op_");
    b.wait_for(
        "return document.querySelectorAll('#find-results a').length > 0",
        30,
    );
    let search = t.elapsed().as_secs_f64();
    assert_clean(&b, "large key search");
    let best = loads.iter().map(|l| l.1).fold(f64::MAX, f64::min);
    eprintln!(
        "large: {} ranks, {rows} rows; gen {:.1} s, compare {:.1} s; {pages} HTML files, {html} bytes; \
         largest page {} ({} bytes); index {index} bytes; largest key index {keys} bytes; \
         index load (wall, load event) {loads:.3?} s; largest result page {} ({} bytes) load event {page_loads:.3?} s; \
         key search (load + first results) {search:.2} s",
        summary["ranks"].as_array().unwrap().len(),
        gen.as_secs_f64(),
        cmp.as_secs_f64(),
        largest.1,
        largest.0,
        largest_page.1,
        largest_page.0,
    );
    assert!(rows >= 1_000_000, "{rows} rows");
    assert!(
        largest.0 < 2_000_000,
        "{} is {} bytes",
        largest.1,
        largest.0
    );
    assert!(best < 1.0, "the index loads in {best:.3} s");
    assert!(
        best_page < 1.0,
        "{} loads in {best_page:.3} s",
        largest_page.1
    );
    let _ = std::fs::remove_dir_all(&root);
}

/// A value the parser could not read (it warns; not compared) is marked on
/// the result page: class `unreadable`, a title saying so and a visible
/// marker; the other run's readable cell of that column is not. The row's
/// status badge is the one `src/report/html/markup.rs` writes.
#[test]
fn unreadable_values_are_marked() {
    let _g = one_at_a_time();
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
        .join("browser")
        .join("unreadable");
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    for (name, out, mean) in [
        ("a.log", "5.000000e+00", "1.000000e+00"),
        ("b.log", "6.000000e+00", "1.2x"),
    ] {
        let text = format!(
            "Total captured activations: 1\n\n[layers.0/op_0_mm]\n  Shape: torch.Size([2]), Dtype: torch.float32\n  L2 norm: 2.000000e+00\n  Min: -1.000000e+00\n  Max: 1.000000e+00\n  Mean: {mean}\n  Output hash: {out}\n  Location: model.py:1\n\n"
        );
        std::fs::write(dir.join(name), text).unwrap();
    }
    let r = Run::of(
        support::actdiff()
            .current_dir(&dir)
            .args(["compare", "a.log", "b.log", "-o", "out", "-q"]),
        dir.join("out"),
    );
    // A value that is no number is not compared: the input is incomplete
    // (exit 3), and the pages still show the row; the parser warns.
    r.expect(3).stderr_has("not a number");
    let b = Browser::start();
    b.open(&dir.join("out/rank0-page1.html"));
    let got = b.js(
        r#"const tb = document.querySelector('table.res tbody[id]');
           const rows = tb.querySelectorAll('tr');
           const mean = i => rows[i].lastElementChild;
           const badge = tb.querySelector('td.k > b');
           return {
             badge: [badge.className, badge.textContent],
             mean1: [mean(0).className, mean(0).textContent, mean(0).title],
             mean2: [mean(1).className, mean(1).textContent, mean(1).title],
             marker: getComputedStyle(mean(1), '::after').content,
             unmarked: getComputedStyle(mean(0), '::after').content,
             marked: document.querySelectorAll('table.res td.unreadable').length,
           };"#,
        vec![],
    );
    assert_eq!(got["badge"], json!(["bd diff", "diff"]), "{got}");
    assert_eq!(got["mean1"], json!(["", "1.000000e+00", ""]), "{got}");
    assert_eq!(
        got["mean2"],
        json!(["unreadable", "1.2x", "unreadable value: not compared"]),
        "{got}"
    );
    assert!(
        got["marker"].as_str().unwrap().contains('\u{2047}'),
        "{got}"
    );
    assert_eq!(got["unmarked"], "none", "{got}");
    assert_eq!(got["marked"], 1, "{got}");
    assert_clean(&b, "unreadable page");
}

/// Issue 26: at many ranks the index lists rank groups, not ranks, and
/// loads the table of every rank part by part: its size follows the
/// groups, it loads fast, and any rank can be found by number.
#[test]
fn many_ranks_index_lists_groups_and_finds_any_rank() {
    let _g = one_at_a_time();
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("browser-many-ranks");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let (a, c, out) = (root.join("a"), root.join("b"), root.join("report"));
    Run::of(
        support::actdiff().arg("gen").arg(&a).arg(&c).args([
            "--ops",
            "150",
            "--ranks",
            "600",
            "--perturb-count",
            "1",
            "--seed",
            "4",
        ]),
        "",
    )
    .expect(0);
    let st = Run::of(
        support::actdiff()
            .arg("compare")
            .arg(&a)
            .arg(&c)
            .arg("-o")
            .arg(&out)
            .arg("-q"),
        &out,
    );
    st.expect(1);
    let summary: Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let groups = summary["groups"].as_array().unwrap().len();
    assert!(groups > 40, "{groups} groups: more than the index lists");
    // 600 ranks inlined took about 11 KB each; the groups' lines and eight
    // sections stay far below that.
    let index = std::fs::metadata(out.join("index.html")).unwrap().len();
    assert!(index < 600_000, "index.html: {index} bytes");
    assert!(out.join("ranks-0.js").is_file() && out.join("ranks-1.js").is_file());
    assert!(!out.join("ranks-2.js").exists(), "512 ranks a part");

    let b = Browser::start();
    let t0 = Instant::now();
    b.open(&out.join("index.html"));
    b.wait_for("return document.readyState === 'complete'", 10);
    let status = b.wait_for(
        "const s = document.getElementById('rk-status').textContent; return s.includes('part 1 of 2') ? s : ''",
        10,
    );
    let load = t0.elapsed();
    assert!(
        load < Duration::from_secs(2),
        "index and part 1 in {load:?}"
    );
    assert_eq!(status, "ranks 0–511 (part 1 of 2)");
    let listed = b.js(
        "return document.querySelectorAll('table.ranks')[0].tBodies[0].rows.length",
        vec![],
    );
    assert_eq!(listed, json!(40), "40 groups listed");
    let shown = b.js(
        "return document.getElementById('rk-body').rows.length",
        vec![],
    );
    assert_eq!(shown, json!(512));
    // Rank 550 by number: part 2 is loaded, the rank's row marked, its
    // first diverging row linked to its page and anchor.
    let go = b.find("#rk-go");
    b.type_into(&go, "550\u{E007}");
    b.wait_for(
        "return document.getElementById('rk-status').textContent.includes('part 2 of 2')",
        10,
    );
    let row = b.js(
        "const tr = document.getElementById('rk-550'); const a = tr && tr.querySelector('td.fdc a');
         return tr ? [tr.className, a ? a.getAttribute('href') : ''] : null",
        vec![],
    );
    let fd = &summary["ranks"].as_array().unwrap()[550]["first_divergence"];
    assert_eq!(summary["ranks"][550]["rank"], 550);
    let href = format!(
        "{}#{}",
        fd["page"].as_str().unwrap(),
        fd["anchor"].as_str().unwrap()
    );
    assert_eq!(row, json!(["diverged hit", href]));
    let scripts = b.js(
        "return Array.from(document.querySelectorAll('script[src]')).map(s => s.getAttribute('src'))",
        vec![],
    );
    assert_eq!(scripts, json!(["ranks-0.js", "ranks-1.js"]));
    assert_clean(&b, "many-rank index");

    // The key search offers the listed groups' ranks; rank 550, in none of
    // them, is typed by number: its block's file (ranks 512–575) is
    // loaded, and its first diverging row found and opened.
    let offered = b.js(
        "return Array.from(document.querySelectorAll('#find-rank option')).map(o => o.value)",
        vec![],
    );
    assert!(
        !offered.as_array().unwrap().contains(&json!("550")),
        "{offered}"
    );
    let key = fd["key2"].as_str().unwrap();
    let any = b.find("#find-any");
    let boxe = b.find("#find-key");
    // A rank the run does not have: said, nothing loaded.
    b.type_into(&any, "9999");
    b.type_into(&boxe, key);
    let status = b.wait_for(
        "const s = document.getElementById('find-status').textContent; return s.includes('9999') ? s : ''",
        10,
    );
    assert!(
        status.as_str().unwrap().contains("has no key index"),
        "{status}"
    );
    let scripts = b.js(
        "return document.querySelectorAll('script[src]').length",
        vec![],
    );
    assert_eq!(scripts, json!(2), "no key index loaded");
    // Not a rank number: said, not rounded to rank 2.
    b.clear(&any);
    b.type_into(&any, "2.5");
    let status = b.wait_for(
        "const s = document.getElementById('find-status').textContent; return s.includes('2.5') ? s : ''",
        10,
    );
    assert!(
        status.as_str().unwrap().contains("is not a rank number"),
        "{status}"
    );
    b.clear(&any);
    b.type_into(&any, "550");
    // Cleared, the box searched the listed groups' ranks (rank 0's row is
    // shown) until rank 550's block is loaded: wait for rank 550's own row
    // (a CI run on a loaded host read rank 0's).
    let first = b.wait_for(
        "const a = document.querySelector('#find-results a'); return a && a.getAttribute('href').startsWith('rank550-') ? [a.textContent, a.getAttribute('href')] : ''",
        10,
    );
    assert_eq!(first, json!([key, href]));
    let scripts = b.js(
        "return Array.from(document.querySelectorAll('script[src]')).map(s => s.getAttribute('src'))",
        vec![],
    );
    assert!(
        scripts.as_array().unwrap().contains(&json!("keys-8.js")),
        "{scripts}"
    );
    let loaded = scripts.as_array().unwrap().len();
    // A rank of that block, loaded with it, needs no other file.
    b.clear(&any);
    b.type_into(&any, "575");
    let found = b.wait_for(
        "const a = document.querySelector('#find-results a'); return a && a.getAttribute('href').startsWith('rank575-page') ? a.getAttribute('href') : ''",
        10,
    );
    assert!(found.as_str().unwrap().contains("#rank575-row"), "{found}");
    let scripts = b.js(
        "return document.querySelectorAll('script[src]').length",
        vec![],
    );
    assert_eq!(scripts, json!(loaded));
    assert_clean(&b, "key search by rank number");
    // Enter opens rank 550's row.
    b.clear(&any);
    b.type_into(&any, "550");
    b.wait_for(
        "const a = document.querySelector('#find-results a'); return a && a.getAttribute('href').startsWith('rank550-page')",
        10,
    );
    let index_url = b.url();
    b.type_into(&boxe, "\u{E007}");
    let t0 = Instant::now();
    while b.url() == index_url && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(b.url().ends_with(&href), "{} {href}", b.url());
}

/// The index of a step series at many ranks (issues 24 × 26): the strip
/// shows blocks of ranks, the strip of every rank loads part by part, and
/// a block's label or a rank number shows that rank's row, each cell
/// linking to its step's report.
#[test]
fn many_rank_series_index_shows_blocks_and_finds_any_rank() {
    let _g = one_at_a_time();
    let root = Path::new(env!("CARGO_TARGET_TMPDIR")).join("browser-many-rank-series");
    let _ = std::fs::remove_dir_all(&root);
    std::fs::create_dir_all(&root).unwrap();
    let (a, c, out) = (root.join("a"), root.join("b"), root.join("report"));
    Run::of(
        support::actdiff().arg("gen").arg(&a).arg(&c).args([
            "--ops",
            "12",
            "--ranks",
            "600",
            "--steps",
            "2",
            "--perturb-count",
            "2",
            "--seed",
            "4",
        ]),
        "",
    )
    .expect(0);
    Run::of(
        support::actdiff()
            .arg("compare")
            .arg(&a)
            .arg(&c)
            .arg("-o")
            .arg(&out)
            .arg("-q"),
        &out,
    )
    .expect(1);
    let b = Browser::start();
    b.open(&out.join("index.html"));
    b.wait_for("return document.readyState === 'complete'", 10);
    let status = b.wait_for(
        "const s = document.getElementById('rk-status').textContent; return s.includes('part 1 of 2') ? s : ''",
        10,
    );
    assert_eq!(status, "ranks 0–511 (part 1 of 2)");
    let blocks = b.js(
        "return document.getElementById('strip').tBodies[0].rows.length",
        vec![],
    );
    assert_eq!(blocks, json!(60), "600 ranks in blocks of 10");
    let shown = b.js(
        "return document.getElementById('rk-body').rows.length",
        vec![],
    );
    assert_eq!(shown, json!(512));
    // The block of ranks 550–559: part 2 is loaded, rank 550's row marked,
    // a cell per step linking to that step's report.
    b.click(&b.find("a.blk[data-rank=\"550\"]"));
    b.wait_for(
        "return document.getElementById('rk-status').textContent.includes('part 2 of 2')",
        10,
    );
    let row = b.js(
        "const tr = document.getElementById('rk-550');
         return tr ? [tr.className, Array.from(tr.querySelectorAll('td a')).map(a => [a.getAttribute('href'), a.title.split(':')[0]])] : null",
        vec![],
    );
    // A cell of the first diverging step leads to the rank's first
    // divergence (or first page) there, as on a strip of one row a rank;
    // the other step's cell to that step's report.
    let series: Value =
        serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap();
    let first = series["first_diverging_step"].as_u64().unwrap();
    let step_dir = out.join(format!("step_{first}"));
    let step: Value =
        serde_json::from_slice(&std::fs::read(step_dir.join("summary.json")).unwrap()).unwrap();
    let r550 = step["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["rank"] == 550)
        .unwrap();
    let fd = &r550["first_divergence"];
    let target = if fd.is_object() {
        format!(
            "{}#{}",
            fd["page"].as_str().unwrap(),
            fd["anchor"].as_str().unwrap()
        )
    } else {
        r550["pages"][0]["file"].as_str().unwrap().to_string()
    };
    let link = |s: u64| {
        if s == first {
            format!("step_{s}/{target}")
        } else {
            format!("step_{s}/index.html")
        }
    };
    assert_eq!(
        row,
        json!([
            "hit",
            [[link(1), "step 1, rank 550"], [link(2), "step 2, rank 550"]]
        ])
    );
    assert!(
        step_dir.join(target.split('#').next().unwrap()).is_file(),
        "{target}"
    );
    // And by number, back in part 1.
    let go = b.find("#rk-go");
    b.js("document.getElementById('rk-go').value = ''", vec![]);
    b.type_into(&go, "7\u{E007}");
    b.wait_for(
        "return document.getElementById('rk-status').textContent.includes('part 1 of 2')",
        10,
    );
    let hit = b.js(
        "const tr = document.getElementById('rk-7'); return tr ? tr.className : null",
        vec![],
    );
    assert_eq!(hit, json!("hit"));
    assert_clean(&b, "many-rank series index");
}
