//! The key indexes of a report's ranks, for the index page's search box:
//! per rank, the keys of the rows its pages hold ([`line`], made with its
//! pages), written by the index writer into one file per block of
//! [`files::KEYS_PER_FILE`] ranks ([`write_files`], `keys-{B}.js`), and
//! read back from a part's files when a merge joins parts ([`read_file`]).

use std::collections::BTreeMap;
use std::io::Write;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::matcher::Sides;
use crate::report::{files, PagePlan, RankComparison, RankSummary, ReportError};

/// What `actdiffKeys` gets for one rank; serialised with `rank` first,
/// so that a merge reads a line's rank without parsing the rest.
#[derive(Serialize, Deserialize)]
struct KeysCall<'a> {
    rank: u32,
    per: usize,
    #[serde(borrow)]
    page: [&'a str; 2],
    anchor: &'a str,
    rows: Option<Vec<usize>>,
    keys: std::borrow::Cow<'a, str>,
}

impl KeysCall<'_> {
    /// The call as one line of a key-index file (no newline).
    fn line(&self) -> String {
        let json = serde_json::to_string(self).expect("a key index serialises");
        format!("actdiffKeys({json});")
    }
}

/// How every line of a key-index file starts; the rank's number follows.
const LINE_START: &str = "actdiffKeys({\"rank\":";

/// Rank `rc`'s key index: one line, without its newline, of the file that
/// holds it ([`files::keys`]), which the index's search box loads (a
/// `<script src>`, so it works from `file://`) when a person searches
/// that rank. It calls `actdiffKeys({...})` with: `rank`; `per` (rows per
/// page); `page` (a result page's file name before and after its 1-based
/// number, see [`files::page`]); `anchor` (a row's anchor without its row
/// index, see [`files::anchor_prefix`]); `rows` (`null` when the pages hold
/// every row, else the result row index of each row shown); `keys`, one
/// line per key of each shown row in page order, front-coded: `P:SUFFIX`
/// starts the next row (its key is the first `P` characters of the
/// previous key, then `SUFFIX`), `P;SUFFIX` is another key of the same row
/// (run 2's, when it differs). The keys are JSON strings (a newline is
/// written `\n`), so no log text can end the script or the line.
pub(super) fn line(rc: &RankComparison<'_>, plan: &PagePlan) -> String {
    let mut keys = String::with_capacity(plan.len() * 24);
    let mut prev: Vec<u8> = Vec::new();
    let mut push = |key: &[u8], sep: char, keys: &mut String| {
        let common = prev.iter().zip(key).take_while(|(a, b)| a == b).count();
        // Cut at a character boundary of the key.
        let mut p = common;
        while p > 0 && p < key.len() && (key[p] & 0xC0) == 0x80 {
            p -= 1;
        }
        let shared = String::from_utf8_lossy(&key[..p]).encode_utf16().count();
        keys.push_str(&shared.to_string());
        keys.push(sep);
        keys.push_str(&String::from_utf8_lossy(&key[p..]));
        keys.push('\n');
        prev.clear();
        prev.extend_from_slice(key);
    };
    for k in 0..plan.len() {
        let row = &rc.matches.rows[plan.row(k)];
        match row.sides() {
            Sides::Both(i, j) => {
                push(rc.t1.key(i), ':', &mut keys);
                if rc.t1.key(i) != rc.t2.key(j) {
                    push(rc.t2.key(j), ';', &mut keys);
                }
            }
            Sides::Only1(i) => push(rc.t1.key(i), ':', &mut keys),
            Sides::Only2(j) => push(rc.t2.key(j), ':', &mut keys),
        }
    }
    let rows = plan
        .is_filtered()
        .then(|| (0..plan.len()).map(|k| plan.row(k)).collect());
    let prefix = files::page_prefix(rc.rank1);
    let anchor = files::anchor_prefix(rc.rank1);
    let call = KeysCall {
        rank: rc.rank1,
        per: plan.page_rows,
        page: [&prefix, files::PAGE_SUFFIX],
        anchor: &anchor,
        rows,
        keys: std::borrow::Cow::Borrowed(&keys),
    };
    call.line()
}

/// Rank `rank`'s key index read from `path`, a `rank{N}-keys.js` that an
/// earlier actdiff wrote for one rank ([`files::legacy_keys`]: the same
/// call, its fields in another order), as a line of today's files. A file
/// that is not such a call, or is another rank's, is an error naming it.
pub fn read_legacy(path: &Path, rank: u32) -> Result<String, ReportError> {
    let text = std::fs::read_to_string(path).map_err(|e| ReportError::io(path, e))?;
    let bad = |why: String| ReportError::Io {
        path: path.to_path_buf(),
        message: format!("not the key index of rank {rank} written by an actdiff: {why}"),
    };
    let json = text
        .trim_end()
        .strip_prefix("actdiffKeys(")
        .and_then(|t| t.strip_suffix(");"))
        .ok_or_else(|| bad("no actdiffKeys(...); call".into()))?;
    let call: KeysCall<'_> = serde_json::from_str(json).map_err(|e| bad(e.to_string()))?;
    if call.rank != rank {
        return Err(bad(format!("it is rank {}'s", call.rank)));
    }
    Ok(call.line())
}

/// Writes the key-index files of `ranks` into `dir` (the index writer for
/// a report's ranks, a part of a sharded compare for its own): for each
/// block of [`files::KEYS_PER_FILE`] ranks that has a rank with a key
/// index, `keys-{B}.js` ([`files::keys`]), its ranks' lines in rank order.
/// Ranks without one (no pages) are left out.
pub fn write_files<'a>(
    ranks: impl IntoIterator<Item = &'a RankSummary>,
    dir: &Path,
) -> Result<(), ReportError> {
    let mut blocks: BTreeMap<String, Vec<(u32, &str)>> = BTreeMap::new();
    for r in ranks {
        if let Some(l) = &r.key_index.0 {
            blocks
                .entry(files::keys(r.rank))
                .or_default()
                .push((r.rank, l));
        }
    }
    for (name, mut lines) in blocks {
        lines.sort_unstable_by_key(|(rank, _)| *rank);
        let path = dir.join(&name);
        let mut text = Vec::with_capacity(lines.iter().map(|(_, l)| l.len() + 1).sum());
        for (_, l) in lines {
            text.extend_from_slice(l.as_bytes());
            text.push(b'\n');
        }
        let mut f = std::fs::File::create(&path).map_err(|e| ReportError::io(&path, e))?;
        f.write_all(&text).map_err(|e| ReportError::io(&path, e))?;
    }
    Ok(())
}

/// The key indexes in the key-index file `path` (one written by
/// [`write_files`]), by rank. A line that is not one of a key index is an
/// error naming the file and line.
pub fn read_file(path: &Path) -> Result<BTreeMap<u32, String>, ReportError> {
    let text = std::fs::read_to_string(path).map_err(|e| ReportError::io(path, e))?;
    let mut out = BTreeMap::new();
    for (i, l) in text.lines().enumerate() {
        let rank = l
            .strip_prefix(LINE_START)
            .filter(|_| l.ends_with(");"))
            .and_then(|t| {
                let digits = t.bytes().take_while(u8::is_ascii_digit).count();
                t[..digits].parse::<u32>().ok()
            })
            .ok_or_else(|| ReportError::Io {
                path: path.to_path_buf(),
                message: format!("line {}: not a key index written by this actdiff", i + 1),
            })?;
        out.insert(rank, l.to_string());
    }
    Ok(out)
}
