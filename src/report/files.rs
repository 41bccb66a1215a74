//! The report folder's naming scheme: every file name a report writes, and
//! the test that tells a report file from anything else in the folder.
//!
//! | file | what |
//! | --- | --- |
//! | `index.html` | the comparison's first page ([`INDEX`]) |
//! | `summary.json` | the machine-readable summary ([`SUMMARY`]) |
//! | `rank{N}-page{k}.html` | result page `k` (1-based) of rank `N` ([`page`]); the first also shows the rank's heatmap |
//! | `keys-{B}.js` | the key indexes of ranks `64·B` to `64·B + 63` for the index's search box ([`keys`]) |
//! | `report.css`, `report.js` | the result pages' stylesheet and script, written once per folder ([`STYLESHEET`], [`PAGE_SCRIPT`]) |
//! | `ranks-{K}.js` | part `K` (0-based) of the index's full rank table, written when there are too many ranks to list ([`rank_table`]) |
//! | `part.json`, `series-part.json` | a part's manifests (`--shard`), not report files ([`PART_MANIFEST`], [`SERIES_PART_MANIFEST`]) |
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

/// The stylesheet the result pages link (written once per
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

/// Ranks whose key indexes share one file ([`keys`]).
pub const KEYS_PER_FILE: u32 = 64;

/// File name of the file that holds rank `rank`'s key index (loaded by the
/// index's search box): `keys-{B}.js`, `B` = `rank / KEYS_PER_FILE`, one
/// file for each block of [`KEYS_PER_FILE`] ranks, one line per rank with
/// pages.
pub fn keys(rank: u32) -> String {
    format!("keys-{}.js", rank / KEYS_PER_FILE)
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

/// The tail of `rank{N}-overview.html`, the heatmap page of a rank that
/// actdiff wrote up to December 2026 (the heatmap is now on the rank's
/// first result page): still a report file to clear and to link when
/// merging, never written.
pub const LEGACY_OVERVIEW: &str = "overview.html";

/// The tail of `rank{N}-keys.js`, the key index of one rank that actdiff
/// wrote up to December 2026 (now one file per block of ranks, [`keys`]):
/// still a report file to clear and to read in a merge ([`legacy_keys`]),
/// never written.
pub const LEGACY_KEYS: &str = "keys.js";

/// File name of rank `rank`'s key index as actdiff wrote it up to
/// December 2026, `rank{N}-keys.js` ([`LEGACY_KEYS`]): a merge still reads
/// it from parts an earlier actdiff wrote.
pub fn legacy_keys(rank: u32) -> String {
    format!("rank{rank}-{LEGACY_KEYS}")
}

/// Whether `name` is a file of key indexes, `keys-{B}.js` ([`keys`]).
pub fn is_keys_file(name: &str) -> bool {
    name.strip_prefix("keys-")
        .and_then(|t| t.strip_suffix(".js"))
        .is_some_and(|k| !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit()))
}

/// The manifest of a part of a sharded compare (`actdiff compare --shard
/// K/N`), at the part folder's root and in each `step_S/` of a step
/// series' part: what `actdiff merge` reads. Not a report file; a report
/// written into the folder removes it (it would make the folder a part).
pub const PART_MANIFEST: &str = "part.json";

/// The series-level manifest of a part of a sharded step series, at the
/// part folder's root ([`PART_MANIFEST`] is each step's). Removed as
/// [`PART_MANIFEST`] is.
pub const SERIES_PART_MANIFEST: &str = "series-part.json";

/// Whether `name` is a part's manifest ([`PART_MANIFEST`],
/// [`SERIES_PART_MANIFEST`]).
pub fn is_part_manifest(name: &str) -> bool {
    name == PART_MANIFEST || name == SERIES_PART_MANIFEST
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
/// `rank{N}-page{k}.html`, `keys-{B}.js`, `ranks-{K}.js`, `report.css`,
/// `report.js`; or `rank{N}-overview.html` and `rank{N}-keys.js`, a rank's
/// heatmap page and key index that earlier versions wrote
/// ([`LEGACY_OVERVIEW`], [`LEGACY_KEYS`]), so that a report written into a
/// folder an older report used leaves none of those beside it.
pub fn is_report_file(name: &str) -> bool {
    if name == INDEX || name == SUMMARY || name == STYLESHEET || name == PAGE_SCRIPT {
        return true;
    }
    if is_keys_file(name) {
        return true;
    }
    if let Some(k) = name
        .strip_prefix("ranks-")
        .and_then(|t| t.strip_suffix(".js"))
    {
        return !k.is_empty() && k.bytes().all(|b| b.is_ascii_digit());
    }
    match rank_file_tail(name) {
        Some(tail) => tail == LEGACY_OVERVIEW || tail == LEGACY_KEYS || is_page_tail(tail),
        None => false,
    }
}

/// Whether `name` is `rank{N}-keys.js`, a rank's key index as earlier
/// versions wrote it ([`LEGACY_KEYS`]): a merge reads it, never links it.
pub fn is_legacy_keys(name: &str) -> bool {
    rank_file_tail(name) == Some(LEGACY_KEYS)
}

/// Whether `name` is a result page, `rank{N}-page{k}.html` ([`page`]).
pub fn is_page(name: &str) -> bool {
    rank_file_tail(name).is_some_and(is_page_tail)
}

/// What follows `rank{N}-` in `name` (`N` decimal digits), if it starts so.
fn rank_file_tail(name: &str) -> Option<&str> {
    let rest = name.strip_prefix("rank")?;
    let digits = rest.bytes().take_while(u8::is_ascii_digit).count();
    rest[digits..].strip_prefix('-').filter(|_| digits > 0)
}

/// Whether `tail` (of [`rank_file_tail`]) is `page{k}.html`.
fn is_page_tail(tail: &str) -> bool {
    tail.strip_prefix("page")
        .and_then(|t| t.strip_suffix(PAGE_SUFFIX))
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
            "keys-0.js",
            "keys-63.js",
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
            "keys-.js",
            "keys-1a.js",
            "rank0-keys.json",
        ] {
            assert!(!is_report_file(no), "{no}");
        }
        assert!(is_page("rank0-page1.html") && is_page(&page(4095, 2)));
        for no in [
            "rank3-overview.html",
            "rank7-keys.js",
            "index.html",
            "rank0-page.html",
        ] {
            assert!(!is_page(no), "{no}");
        }
        assert!(is_legacy_keys("rank7-keys.js") && is_legacy_keys(&legacy_keys(4095)));
        for no in [
            "keys-0.js",
            "rankA-keys.js",
            "rank-keys.js",
            "xrank7-keys.js",
        ] {
            assert!(!is_legacy_keys(no), "{no}");
        }
    }

    #[test]
    fn every_name_written_is_a_report_file() {
        for name in [
            INDEX.to_string(),
            SUMMARY.to_string(),
            page(0, 0),
            page(12, 299),
            format!("rank3-{LEGACY_OVERVIEW}"),
            keys(7),
            rank_table(4),
            STYLESHEET.to_string(),
            PAGE_SCRIPT.to_string(),
        ] {
            assert!(is_report_file(&name), "{name}");
        }
        assert_eq!(page(2, 0), "rank2-page1.html");
        assert_eq!(keys(0), "keys-0.js");
        assert_eq!(keys(63), "keys-0.js");
        assert_eq!(keys(64), "keys-1.js");
        assert!(is_keys_file(&keys(4095)) && !is_keys_file("rank3-keys.js"));
        assert_eq!(anchor(2, 5), format!("{}5", anchor_prefix(2)));
        assert_eq!(page(2, 4), format!("{}5{PAGE_SUFFIX}", page_prefix(2)));
    }
}
