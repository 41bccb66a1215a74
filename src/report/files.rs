//! The report folder's naming scheme: every file name a report writes, and
//! the test that tells a report file from anything else in the folder.
//!
//! | file | what |
//! | --- | --- |
//! | `index.html` | the comparison's first page ([`INDEX`]) |
//! | `summary.json` | the machine-readable summary ([`SUMMARY`]) |
//! | `rank{N}-page{k}.html` | result page `k` (1-based) of rank `N` ([`page`]) |
//! | `rank{N}-overview.html` | rank `N`'s heatmap ([`overview`]) |
//! | `rank{N}-keys.js` | rank `N`'s key index for the index's search box ([`keys`]) |
//! | `report.css`, `report.js` | the result and overview pages' stylesheet and script, written once per folder ([`STYLESHEET`], [`PAGE_SCRIPT`]) |
//! | `ranks-{K}.js` | part `K` (0-based) of the index's full rank table, written when there are too many ranks to list ([`rank_table`]) |
//!
//! Rows are addressed as `rank{N}-page{k}.html#rank{N}-row{i}` ([`anchor`]).
//! The index's script (`templates/index.js`) builds no name itself: each
//! rank's key index carries its page-name parts ([`page_prefix`],
//! [`PAGE_SUFFIX`]) and anchor prefix ([`anchor_prefix`]), and the index
//! page names each rank's key index.

/// The index page.
pub const INDEX: &str = "index.html";

/// The machine-readable summary.
pub const SUMMARY: &str = "summary.json";

/// The stylesheet the result and overview pages link (written once per
/// report folder, not into every page: at thousands of ranks that copy was
/// about half the folder).
pub const STYLESHEET: &str = "report.css";

/// The script the result pages load (written once per report folder).
pub const PAGE_SCRIPT: &str = "report.js";

/// File name of result page `page` (0-based) of rank `rank`:
/// [`page_prefix`], the 1-based page number, [`PAGE_SUFFIX`].
pub fn page(rank: u32, page: usize) -> String {
    format!("{}{}{PAGE_SUFFIX}", page_prefix(rank), page + 1)
}

/// The part of a result page's file name before its page number: `rank{N}-page`.
pub fn page_prefix(rank: u32) -> String {
    format!("rank{rank}-page")
}

/// The part of a result page's file name after its page number.
pub const PAGE_SUFFIX: &str = ".html";

/// File name of rank `rank`'s overview (the heatmap the index embeds).
pub fn overview(rank: u32) -> String {
    format!("rank{rank}-overview.html")
}

/// File name of rank `rank`'s key index (loaded by the index's search box).
pub fn keys(rank: u32) -> String {
    format!("rank{rank}-keys.js")
}

/// File name of part `part` (0-based) of the index's full rank table.
pub fn rank_table(part: usize) -> String {
    format!("ranks-{part}.js")
}

/// The part of a row anchor before the row index: `rank{N}-row`.
pub fn anchor_prefix(rank: u32) -> String {
    format!("rank{rank}-row")
}

/// Anchor of result row `index` (0-based) of rank `rank`: `rank{N}-row{i}`.
pub fn anchor(rank: u32, index: usize) -> String {
    format!("{}{index}", anchor_prefix(rank))
}

/// The folder name of step `S` in a step series (its dump and its report):
/// `step_S`.
pub const STEP_DIR_PREFIX: &str = "step_";

/// The step number of a folder name `step_<S>` (decimal digits only).
pub fn step_of_dir_name(name: &str) -> Option<u64> {
    let num = name.strip_prefix(STEP_DIR_PREFIX)?;
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    num.parse().ok()
}

/// Whether `name` is a file a report writes: `index.html`, `summary.json`,
/// `rank{N}-page{k}.html`, `rank{N}-overview.html`, `rank{N}-keys.js`,
/// `ranks-{K}.js`, `report.css`, `report.js`.
pub fn is_report_file(name: &str) -> bool {
    if name == INDEX || name == SUMMARY || name == STYLESHEET || name == PAGE_SCRIPT {
        return true;
    }
    if let Some(k) = name
        .strip_prefix("ranks-")
        .and_then(|t| t.strip_suffix(".js"))
    {
        return !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit());
    }
    let Some(rest) = name.strip_prefix("rank") else {
        return false;
    };
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    let Some(tail) = rest[digits..].strip_prefix('-').filter(|_| digits > 0) else {
        return false;
    };
    if tail == "overview.html" || tail == "keys.js" {
        return true;
    }
    tail.strip_prefix("page")
        .and_then(|t| t.strip_suffix(".html"))
        .is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn report_file_names() {
        for yes in [
            "index.html",
            "summary.json",
            "rank0-page1.html",
            "rank12-page300.html",
            "rank3-overview.html",
            "rank7-keys.js",
            "ranks-0.js",
            "ranks-12.js",
            "report.css",
            "report.js",
        ] {
            assert!(is_report_file(yes), "{yes}");
        }
        for no in [
            "notes.html",
            "rank-page1.html",
            "rank0-page.html",
            "rank0-page1.htm",
            "rank0-pagex.html",
            "rankA-keys.js",
            "rows.jsonl",
            "rank0-page1.html.bak",
            "ranks-.js",
            "ranks-x.js",
        ] {
            assert!(!is_report_file(no), "{no}");
        }
    }

    #[test]
    fn every_name_written_is_a_report_file() {
        for name in [
            INDEX.to_string(),
            SUMMARY.to_string(),
            page(0, 0),
            page(12, 299),
            overview(3),
            keys(7),
            rank_table(4),
            STYLESHEET.to_string(),
            PAGE_SCRIPT.to_string(),
        ] {
            assert!(is_report_file(&name), "{name}");
        }
        assert_eq!(page(2, 0), "rank2-page1.html");
        assert_eq!(anchor(2, 5), format!("{}5", anchor_prefix(2)));
        assert_eq!(page(2, 4), format!("{}5{PAGE_SUFFIX}", page_prefix(2)));
    }
}
