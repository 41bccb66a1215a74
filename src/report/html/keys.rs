//! The key index of a rank, `rank{N}-keys.js`: the keys of the rows its
//! pages hold, for the index page's search box.

use std::fs::File;
use std::io::{BufWriter, Write};

use crate::matcher::Sides;
use crate::report::{files, PagePlan, RankComparison, ReportError, ReportOptions};

/// Writes rank `rc`'s key index, `rank{N}-keys.js`, which the index's
/// search box loads (a `<script src>`, so it works from `file://`) when a
/// person searches that rank. It calls `actdiffKeys({...})` with:
/// `rank`; `per` (rows per page); `page` (a result page's file name
/// before and after its 1-based number, see [`files::page`]); `anchor` (a row's anchor without its row index, see
/// [`files::anchor_prefix`]); `rows` (`null` when the pages hold every
/// row, else the result row index of each row shown); `keys`, one line per
/// key of each shown row in page order, front-coded: `P:SUFFIX` starts the
/// next row (its key is the first `P` characters of the previous key, then
/// `SUFFIX`), `P;SUFFIX` is another key of the same row (run 2's, when it
/// differs). The keys are JSON strings, so no log text can end the script.
pub(super) fn write(
    rc: &RankComparison<'_>,
    plan: &PagePlan,
    opts: &ReportOptions,
) -> Result<(), ReportError> {
    let path = opts.out_dir.join(files::keys(rc.rank1));
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
    let rows = if plan.is_filtered() {
        serde_json::Value::from((0..plan.len()).map(|k| plan.row(k)).collect::<Vec<_>>())
    } else {
        serde_json::Value::Null
    };
    let data = serde_json::json!({
        "rank": rc.rank1,
        "per": plan.page_rows,
        "page": [files::page_prefix(rc.rank1), files::PAGE_SUFFIX],
        "anchor": files::anchor_prefix(rc.rank1),
        "rows": rows,
        "keys": keys,
    });
    let file = File::create(&path).map_err(|e| ReportError::io(&path, e))?;
    let mut w = BufWriter::with_capacity(1 << 16, file);
    let io = |e| ReportError::io(&path, e);
    w.write_all(b"actdiffKeys(").map_err(io)?;
    serde_json::to_writer(&mut w, &data).map_err(|e| ReportError::io(&path, e.into()))?;
    w.write_all(b");\n").map_err(io)?;
    w.flush().map_err(io)
}
