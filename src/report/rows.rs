//! `--rows FILE`: every result row as one JSON object per line, in the
//! matcher's output order:
//! `{"rank": 0, "key1": "..."|null, "key2": "..."|null, "status": "match"|"diff"|"only1"|"only2"|"truncated"|"missing",
//!   "strategy": "override"|"exact"|"fuzzy"|"stats"|null, "diffs": {"L2 norm": 1.2e-6, ...}}`.
//! `diffs` holds the reference's per-stat differences (`_compute_diffs`);
//! `hash_diffs` (when any) the Output hash and Input hashes differences;
//! `bitwise` (when both rows carry digests) whether every Output digest and
//! Input digest is equal.

use std::io::Write;

use serde::Serialize;

use super::RankComparison;
use crate::matcher::compare::{bitwise_identical, field_diff, stat_diffs};
use crate::matcher::notes::row_notes;
use crate::matcher::{Sides, Status, Strategy};
use crate::parser::Field;

#[derive(Serialize)]
struct Row<'a> {
    /// The training step of a step series' row; omitted otherwise.
    #[serde(skip_serializing_if = "Option::is_none")]
    step: Option<u64>,
    rank: u32,
    key1: Option<std::borrow::Cow<'a, str>>,
    key2: Option<std::borrow::Cow<'a, str>>,
    status: Status,
    strategy: Strategy,
    diffs: serde_json::Map<String, serde_json::Value>,
    /// Output hash and Input hashes relative differences (the largest over
    /// the values) where the texts differ; omitted when none.
    #[serde(skip_serializing_if = "serde_json::Map::is_empty")]
    hash_diffs: serde_json::Map<String, serde_json::Value>,
    /// Both rows carry digests: whether they are all equal (bitwise
    /// identical); omitted when a side has none.
    #[serde(skip_serializing_if = "Option::is_none")]
    bitwise: Option<bool>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    notes: Vec<String>,
    tolerance: String,
}

/// Writes every result row of `rc` to `w`, one JSON object per line.
/// Besides the fields above, `notes` (when any) explains the row,
/// `tolerance` names the rule or default that judged it, and `step` (first,
/// only in a step series) the training step the row is of.
pub fn write_rows(
    rc: &RankComparison<'_>,
    names: (&str, &str),
    step: Option<u64>,
    w: &mut impl Write,
) -> std::io::Result<()> {
    let m = rc.matches;
    for (i, r) in m.rows.iter().enumerate() {
        let mut diffs = serde_json::Map::new();
        let mut hash_diffs = serde_json::Map::new();
        let mut bitwise = None;
        if let Sides::Both(a, b) = r.sides() {
            bitwise = bitwise_identical(rc.t1, a, rc.t2, b);
            for (f, d) in Field::DIFF_STATS.iter().zip(stat_diffs(rc.t1, a, rc.t2, b)) {
                if let Some(d) = d {
                    diffs.insert(f.label().to_string(), serde_json::json!(d));
                }
            }
            for f in [Field::OutputHash, Field::InputHashes] {
                if let Some(d) = field_diff(rc.t1, a, rc.t2, b, f) {
                    hash_diffs.insert(f.label().to_string(), serde_json::json!(d));
                }
            }
        }
        let row = Row {
            step,
            rank: rc.rank1,
            key1: r.r1().map(|i| rc.t1.key_str(i)),
            key2: r.r2().map(|i| rc.t2.key_str(i)),
            status: r.status,
            strategy: r.strategy,
            diffs,
            hash_diffs,
            bitwise,
            notes: row_notes(rc.t1, rc.t2, m, i, names),
            tolerance: m.policy.describe(r.source),
        };
        serde_json::to_writer(&mut *w, &row)?;
        w.write_all(b"\n")?;
    }
    Ok(())
}
