//! The report's layout in headless Chromium (issue 15 item 9), next to
//! `tests/browser.rs` and with its Chromium driver (`browser/chrome.rs`): long run names and keys
//! never push a column off screen at 1280 px (they are clipped, the full
//! text on hover), Location never breaks inside its line number, and every
//! HTML file of the report folder is a page that works on its own.
//!
//! Needs Debian's `chromium` (or `ACTDIFF_CHROMIUM` naming the binary);
//! without it every test here fails, saying so.

// The Chromium driver of tests/browser.rs; this file uses part of it.
#[path = "browser/chrome.rs"]
#[allow(dead_code)]
mod chrome;
#[path = "support/mod.rs"]
mod support;

use std::path::{Path, PathBuf};
use std::sync::{Mutex, MutexGuard};

use chrome::Browser;
use serde_json::Value;
use support::Run;

fn one_at_a_time() -> MutexGuard<'static, ()> {
    static LOCK: Mutex<()> = Mutex::new(());
    LOCK.lock().unwrap_or_else(|e| e.into_inner())
}

const NAME1: &str = "main@3f9a2c1-nightly-baseline-8xH100";
const NAME2: &str = "pr-4821-fused-rmsnorm@7b8e0d1";

/// `bug_layer2` compared with long run names into `target/tmp/NAME`.
fn report(name: &str) -> PathBuf {
    let data = Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/bug_layer2");
    let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(name);
    let _ = std::fs::remove_dir_all(&dir);
    Run::of(
        support::actdiff()
            .arg("compare")
            .arg(data.join("run_A"))
            .arg(data.join("run_B"))
            .args(["--name1", NAME1, "--name2", NAME2, "-q", "-o"])
            .arg(&dir),
        &dir,
    )
    .expect(1);
    dir
}

/// Asserts the page fits 1280 px and every element matching `css` ends
/// inside the window.
fn fits(b: &Browser, what: &str, css: &str) {
    let w = b.js(
        "return [document.documentElement.scrollWidth, innerWidth]",
        vec![],
    );
    assert!(
        w[0].as_f64() <= w[1].as_f64(),
        "{what} at 1280 px scrolls sideways: {w}"
    );
    let over = b.js(
        "return [...document.querySelectorAll(arguments[0])]
           .map(e => [e.className || e.tagName, Math.round(e.getBoundingClientRect().right)])
           .filter(x => x[1] > innerWidth + 1)",
        vec![Value::from(css)],
    );
    assert_eq!(
        over,
        Value::Array(vec![]),
        "{what}: `{css}` past the window's edge"
    );
}

#[test]
fn long_names_never_push_a_column_off_screen_at_1280_px() {
    let _g = one_at_a_time();
    let dir = report("layout-long-names");
    let b = Browser::start();
    b.window_size(1280, 900);
    b.open(&dir.join("index.html"));
    fits(
        &b,
        "index",
        "table.ranks td, table.ranks th, table.ranks td.fdc *",
    );
    // The run names are clipped where they would not fit, the full text on
    // hover.
    let clipped = b.js(
        "return [...document.querySelectorAll('.clip')].map(e => [e.textContent, e.title])",
        vec![],
    );
    let clipped = clipped.as_array().unwrap();
    assert!(!clipped.is_empty(), "no clipped text on the index");
    assert!(
        clipped.iter().all(|c| c[0] == c[1]),
        "a clipped text's title is the full text: {clipped:?}"
    );
    b.open(&dir.join("rank0-page1.html"));
    fits(
        &b,
        "result page",
        "table.res th, table.res tbody:first-of-type td",
    );
    let names = b.js(
        "return [...document.querySelectorAll('table.res tbody span.kn')].slice(0, 2).map(e => [e.textContent, e.title])",
        vec![],
    );
    for n in names.as_array().unwrap() {
        assert_eq!(n[0], n[1], "the run name's full text on hover: {n}");
    }
}

#[test]
fn location_never_breaks_inside_its_line_number() {
    let _g = one_at_a_time();
    let dir = report("layout-location");
    let b = Browser::start();
    // At 1280 px, and narrower, where more Location cells wrap.
    for width in [1280, 800] {
        b.window_size(width, 900);
        b.open(&dir.join("rank0-page1.html"));
        // For each Location cell: the text from its last `:` to its end,
        // as a DOM range; its boxes must all be on one line.
        let broken = b.js(
            "function at(td, k) {
               const w = document.createTreeWalker(td, NodeFilter.SHOW_TEXT);
               let seen = 0;
               while (w.nextNode()) {
                 const n = w.currentNode;
                 if (seen + n.length >= k) return [n, k - seen];
                 seen += n.length;
               }
               return null;
             }
             const cells = [...document.querySelectorAll('table.res td.loc')];
             const out = [];
             for (const td of cells) {
               const t = td.textContent, i = t.lastIndexOf(':');
               if (i < 0) continue;
               const r = document.createRange();
               r.setStart(...at(td, i));
               r.setEnd(...at(td, t.length));
               const tops = new Set([...r.getClientRects()].filter(x => x.width > 0).map(x => Math.round(x.top)));
               if (tops.size > 1) out.push(t);
             }
             return [cells.length, out]",
            vec![],
        );
        assert!(
            broken[0].as_u64().unwrap() > 100,
            "Location cells: {broken}"
        );
        assert_eq!(
            broken[1],
            Value::Array(vec![]),
            "at {width} px, broken inside `:N`"
        );
    }
}

#[test]
fn every_html_file_of_the_report_is_a_page_of_its_own() {
    let _g = one_at_a_time();
    let dir = report("layout-standalone");
    let b = Browser::start();
    b.window_size(1280, 900);
    let mut n = 0;
    for e in std::fs::read_dir(&dir).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_none_or(|x| x != "html") {
            continue;
        }
        n += 1;
        let text = std::fs::read_to_string(&p).unwrap();
        assert!(text.starts_with("<!DOCTYPE html>"), "{}", p.display());
        b.open(&p);
        let v = b.js(
            "return [document.title, document.styleSheets.length,
                     !!document.querySelector('a[href=\"index.html\"]') || location.pathname.endsWith('/index.html'),
                     getComputedStyle(document.body).fontFamily]",
            vec![],
        );
        assert!(
            !v[0].as_str().unwrap().is_empty(),
            "{}: no title",
            p.display()
        );
        assert!(v[1].as_u64().unwrap() >= 1, "{}: unstyled", p.display());
        assert_eq!(v[2], true, "{}: no way back to the index", p.display());
        let severe = b.console_errors();
        assert!(severe.is_empty(), "{}: {severe:?}", p.display());
    }
    assert!(n >= 2, "index and a result page: {n} pages");
    let first = std::fs::read_to_string(dir.join("rank0-page1.html")).unwrap();
    assert_eq!(first.matches("<svg class=heat").count(), 1);
    // The index embeds the heatmap, not the first page's document.
    let index = std::fs::read_to_string(dir.join("index.html")).unwrap();
    assert_eq!(index.matches("<!DOCTYPE").count(), 1);
    assert_eq!(index.matches("<svg class=heat").count(), 1);
}
