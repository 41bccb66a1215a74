//! `actdiff merge PART_DIR... -o REPORT_DIR`: joins the parts of a sharded
//! compare into the report a single `actdiff compare` of all ranks writes.
//!
//! The parts are checked first, and any problem is an error naming the
//! parts (exit 2, nothing written; see [`merge`] for what a refused merge
//! leaves): a folder that is not a part, a part given twice, a part
//! missing, parts of different runs, options or tool versions, parts with
//! and without `--rows`, parts that wrote their rows to one file, a part
//! whose compare did not finish or failed, a log whose size changed since
//! the parts compared it, a part whose ranks are not the ones the split
//! gives, and a part lacking a file its ranks' report needs. Then the
//! ranks' pages are linked (or copied) into the report folder, and the per-rank results go through
//! [`assemble`] and [`super::outputs::finish`], the functions `actdiff
//! compare` itself ends with, so the index, `summary.json`, JUnit, terminal
//! summary and exit status are the single compare's.

use std::path::{Path, PathBuf};

use super::pipeline::{assemble, Compared};
use super::shard::{self, Manifest, PartStatus};
use crate::report::messages::Message;
use crate::report::{self, files, ReportOptions};

/// Errors that stop a merge.
#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    /// The parts do not make one whole run (one message per problem).
    #[error("{}", crate::report::messages::join(.0, "\n"))]
    Parts(Vec<Message>),
    /// The report folder could not be written.
    #[error(transparent)]
    Report(#[from] report::ReportError),
}

/// `part 2/4 (parts/p2)`.
fn name(m: &Manifest, dir: &Path) -> String {
    format!("part {} ({})", m.shard, dir.display())
}

/// Top-level keys whose values differ between two JSON objects.
fn differing_keys(a: &serde_json::Value, b: &serde_json::Value) -> Vec<String> {
    let (Some(a), Some(b)) = (a.as_object(), b.as_object()) else {
        return vec!["(options)".into()];
    };
    let mut keys: Vec<String> = a
        .keys()
        .chain(b.keys())
        .filter(|k| a.get(*k) != b.get(*k))
        .cloned()
        .collect();
    keys.sort();
    keys.dedup();
    keys
}

/// What differs between two parts' inputs, in words.
fn inputs_difference(a: &shard::Inputs, b: &shard::Inputs) -> String {
    for (side, x, y) in [("run1", &a.run1, &b.run1), ("run2", &a.run2, &b.run2)] {
        match (x, y) {
            (Some(x), Some(y)) if x != y => {
                if x.path != y.path {
                    return format!(
                        "{side} is {} in one and {} in the other",
                        x.path.display(),
                        y.path.display()
                    );
                }
                for l in &x.logs {
                    match y.logs.iter().find(|m| m.rank == l.rank) {
                        None => return format!("{side} rank {} is in one only", l.rank),
                        Some(m) if m != l => {
                            return format!(
                                "{side} rank {}: {} ({} bytes) against {} ({} bytes)",
                                l.rank,
                                l.file.display(),
                                l.bytes,
                                m.file.display(),
                                m.bytes
                            )
                        }
                        _ => {}
                    }
                }
                return format!("{side}'s logs differ");
            }
            (Some(_), None) | (None, Some(_)) => {
                return format!("{side} was found by one and not by the other")
            }
            _ => {}
        }
    }
    "the inputs differ".into()
}

/// Checks the parts and merges them into `out` (see the module
/// documentation), linking the pages into `out`. Returns the whole run's
/// rank summaries and metadata for [`super::outputs::finish`].
pub fn merge_parts(parts: &[PathBuf], out: &Path) -> Result<Compared, MergeError> {
    merge_parts_split(parts, out, None)
}

/// [`merge_parts`] where the units each part must hold are `split` (one
/// list per part, by index: one step of a sharded step series, whose split
/// is the series', [`shard::series_units_by_part`]), or, for `None`, the
/// split of the parts' own inputs ([`shard::units_by_part`]).
pub fn merge_parts_split(
    parts: &[PathBuf],
    out: &Path,
    split: Option<Vec<Vec<shard::Unit>>>,
) -> Result<Compared, MergeError> {
    if parts.is_empty() {
        return Err(MergeError::Parts(vec![Message::NoParts]));
    }
    let (read, mut problems) = read_parts(parts, out);
    problems.extend(status_problems(&read));
    // A failed part is named above; comparing its inputs and options with
    // the others' would only add noise.
    let sound: Vec<&(Manifest, &PathBuf)> = read
        .iter()
        .filter(|(m, _)| !matches!(m.status, PartStatus::Failed { .. }))
        .collect();
    if let Some((first, fdir)) = sound.first().copied().or(read.first()) {
        // Their words are one-off (`Message::Text`).
        let mut words = agreement_problems(first, fdir, &sound);
        words.extend(coverage_problems(first.shard.count, &read));
        // Every part holds exactly the units the split gives it.
        if problems.is_empty() && words.is_empty() {
            words.extend(split_problems(first, split, &read));
        }
        if problems.is_empty() && words.is_empty() {
            for (m, dir) in &read {
                words.extend(missing_files(m, dir));
            }
        }
        problems.extend(words.into_iter().map(Message::Text));
    }
    if !problems.is_empty() {
        return Err(MergeError::Parts(problems));
    }
    let run = read[0].0.run.clone();
    let opts = ReportOptions {
        out_dir: out.to_path_buf(),
        name1: run.name1.clone(),
        name2: run.name2.clone(),
        path1: run.path1.clone(),
        path2: run.path2.clone(),
        ..Default::default()
    };
    super::outputs::prepare_report_folder(&opts)?;
    let mut results = Vec::new();
    for (m, dir) in read {
        link_pages(dir, out)?;
        results.extend(m.results);
    }
    // Plan order (run-1 rank order), as a single compare lists them.
    let pos = |rank: u32| run.pairs.iter().position(|(a, _)| *a == rank);
    results.sort_by_key(|r| pos(r.rank));
    Ok(assemble(&run, opts, Vec::new(), results, Vec::new()))
}

/// Reads each part's manifest: a folder given twice (under two spellings)
/// or the report folder itself given as a part is a problem, and so is a
/// manifest that does not read.
fn read_parts<'a>(
    parts: &'a [PathBuf],
    out: &Path,
) -> (Vec<(Manifest, &'a PathBuf)>, Vec<Message>) {
    let mut problems = Vec::new();
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let out_canon = canon(out);
    let mut seen: Vec<(PathBuf, &PathBuf)> = Vec::new();
    let mut read = Vec::new();
    for dir in parts {
        let c = canon(dir);
        if c == out_canon {
            problems.push(Message::PartIsReport {
                dir: dir.display().to_string(),
            });
            continue;
        }
        if let Some((_, first)) = seen.iter().find(|(x, _)| *x == c) {
            problems.push(Message::PartTwice {
                dir: dir.display().to_string(),
                first: first.display().to_string(),
            });
            continue;
        }
        seen.push((c, dir));
        match Manifest::read(dir) {
            Ok(m) => read.push((m, dir)),
            Err(e) => problems.push(Message::Text(e)),
        }
    }
    (read, problems)
}

/// Parts whose compare did not finish or failed, and parts written by
/// another version.
fn status_problems(read: &[(Manifest, &PathBuf)]) -> Vec<Message> {
    let tool = format!("actdiff {}", env!("CARGO_PKG_VERSION"));
    let mut problems = Vec::new();
    for (m, dir) in read {
        match &m.status {
            PartStatus::Done => {}
            PartStatus::Running => problems.push(Message::PartUnfinished { part: name(m, dir) }),
            PartStatus::Failed { message } => problems.push(Message::PartFailed {
                part: name(m, dir),
                message: message.clone(),
            }),
        }
        if m.tool != tool {
            problems.push(Message::PartVersion {
                part: name(m, dir),
                tool: m.tool.clone(),
                this: tool.clone(),
            });
        }
    }
    problems
}

/// Sound parts that disagree with `first`: another split, other inputs,
/// other options; rows written by some parts only or to one file; logs
/// changed since the parts compared them.
fn agreement_problems(
    first: &Manifest,
    fdir: &Path,
    sound: &[&(Manifest, &PathBuf)],
) -> Vec<String> {
    let mut problems = Vec::new();
    for (m, dir) in sound.iter().skip(1).copied() {
        if m.shard.count != first.shard.count {
            problems.push(format!(
                "{} and {}: parts of different splits ({} and {} parts)",
                name(first, fdir),
                name(m, dir),
                first.shard.count,
                m.shard.count
            ));
        }
        if m.inputs != first.inputs {
            problems.push(format!(
                "{} and {}: different inputs: {}",
                name(first, fdir),
                name(m, dir),
                inputs_difference(&first.inputs, &m.inputs)
            ));
        } else if m.options != first.options || m.run != first.run {
            let mut keys = differing_keys(&first.options, &m.options);
            if keys.is_empty() {
                keys.push("run metadata".into());
            }
            problems.push(format!(
                "{} and {}: different options: {}",
                name(first, fdir),
                name(m, dir),
                keys.join(", ")
            ));
        }
    }
    problems.extend(rows_disagree(sound));
    problems.extend(rows_shared(sound));
    if !sound.is_empty() {
        problems.extend(logs_changed(first, fdir));
    }
    problems
}

/// Parts given twice and parts missing among the `count` of the split.
fn coverage_problems(count: u32, read: &[(Manifest, &PathBuf)]) -> Vec<String> {
    let mut problems = Vec::new();
    let mut by_index: Vec<Option<&PathBuf>> = vec![None; count as usize];
    for (m, dir) in read {
        let Some(slot) = by_index.get_mut(m.shard.index as usize) else {
            continue;
        };
        match slot {
            Some(other) => problems.push(format!(
                "part {} given twice: {} and {}",
                m.shard,
                other.display(),
                dir.display()
            )),
            None => *slot = Some(dir),
        }
    }
    let missing: Vec<String> = by_index
        .iter()
        .enumerate()
        .filter(|(_, d)| d.is_none())
        .map(|(k, _)| format!("{k}/{count}"))
        .collect();
    if !missing.is_empty() {
        problems.push(format!(
            "part{} {} missing: a merge needs all {count} parts (given: {})",
            if missing.len() == 1 { "" } else { "s" },
            missing.join(", "),
            read.iter()
                .map(|(m, d)| format!("{} = {}", m.shard, d.display()))
                .collect::<Vec<_>>()
                .join(", ")
        ));
    }
    problems
}

/// Parts that do not hold the units the split gives them: `split`, or the
/// split of `first`'s recorded inputs (every part has the count of the
/// first).
fn split_problems(
    first: &Manifest,
    split: Option<Vec<Vec<shard::Unit>>>,
    read: &[(Manifest, &PathBuf)],
) -> Vec<String> {
    let by_part = split.unwrap_or_else(|| {
        let runs = (first.inputs.run1.as_ref(), first.inputs.run2.as_ref());
        let plan = match runs {
            (Some(a), Some(b)) => super::plan(&a.input(), &b.input(), &first.run.rank_map),
            _ => super::RankPlan::default(),
        };
        let sizes = first.inputs.sizes();
        let size = |p: &Path| sizes.get(p).copied().unwrap_or(0);
        shard::units_by_part(&plan, first.shard.count, &size)
    });
    let mut problems = Vec::new();
    for (m, dir) in read {
        let want = by_part
            .get(m.shard.index as usize)
            .cloned()
            .unwrap_or_default();
        let got: Vec<u32> = m.results.iter().map(|r| r.rank).collect();
        let want_pairs: Vec<u32> = want
            .iter()
            .filter_map(|u| match u {
                shard::Unit::Pair(a) => Some(*a),
                _ => None,
            })
            .collect();
        if m.units != want || got != want_pairs {
            problems.push(format!(
                "{}: holds ranks {:?}, but the split of these inputs gives it {:?}",
                name(m, dir),
                got,
                want_pairs
            ));
        }
    }
    problems
}

/// Most files named per part in one problem line.
const NAMED: usize = 10;

/// `a, b, c` of the first [`NAMED`] of `items`, then `and N more`.
fn list(items: &[String]) -> String {
    let mut s = items
        .iter()
        .take(NAMED)
        .cloned()
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > NAMED {
        s += &format!(" and {} more", items.len() - NAMED);
    }
    s
}

/// Parts with a `--rows` file and parts without one cannot be merged: the
/// rows read by glob would miss some ranks. One problem naming both sets.
fn rows_disagree(parts: &[&(Manifest, &PathBuf)]) -> Option<String> {
    let (with, without): (Vec<_>, Vec<_>) = parts.iter().partition(|(m, _)| m.rows.is_some());
    if with.is_empty() || without.is_empty() {
        return None;
    }
    let names = |v: &[&&(Manifest, &PathBuf)]| -> Vec<String> {
        v.iter().map(|(m, d)| name(m, d)).collect()
    };
    Some(format!(
        "parts with and without --rows: {} wrote rows, {} did not; run every part with --rows or none",
        list(&names(&with)),
        list(&names(&without))
    ))
}

/// Parts that wrote their rows to the same file (a relative `--rows
/// rows.parquet` run from one folder): each overwrote the one before, so
/// the file holds the last part's ranks only. One problem per file.
fn rows_shared(parts: &[&(Manifest, &PathBuf)]) -> Vec<String> {
    let mut by_file: std::collections::BTreeMap<&Path, Vec<String>> = Default::default();
    for (m, d) in parts {
        if let Some(rows) = &m.rows {
            by_file.entry(rows.as_path()).or_default().push(name(m, d));
        }
    }
    by_file
        .into_iter()
        .filter(|(_, names)| names.len() > 1)
        .map(|(file, names)| {
            format!(
                "{} all wrote their rows to {}: each part overwrote the one before, so it holds one part's ranks only; give each part its own file (--rows PART_DIR/rows.parquet)",
                list(&names),
                file.display()
            )
        })
        .collect()
}

/// The logs recorded in part `m` whose size is not the recorded one (or
/// that are gone): the parts compared other bytes than are there now, so a
/// merge could pass with parts of an older run.
fn logs_changed(m: &Manifest, dir: &Path) -> Option<String> {
    let changed: Vec<String> = [&m.inputs.run1, &m.inputs.run2]
        .into_iter()
        .flatten()
        .flat_map(|r| &r.logs)
        .filter_map(|l| {
            let now = match std::fs::metadata(&l.file) {
                Ok(meta) if meta.len() == l.bytes => return None,
                Ok(meta) => format!("{} bytes", meta.len()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => "missing".into(),
                Err(e) => e.to_string(),
            };
            Some(format!(
                "{} (recorded {} bytes, now {now})",
                l.file.display(),
                l.bytes
            ))
        })
        .collect();
    (!changed.is_empty()).then(|| {
        format!(
            "the logs changed since {} compared them: {}",
            name(m, dir),
            list(&changed)
        )
    })
}

/// The report files part `m`'s ranks need that its folder lacks: each
/// compared rank's result pages (as its summary lists them), overview and
/// key index. A rank without pages (a step of a series without full
/// pages, [`crate::report::ReportOptions::rank_files`]) has none of them.
fn missing_files(m: &Manifest, dir: &Path) -> Option<String> {
    let missing: Vec<String> = m
        .results
        .iter()
        .filter_map(|r| r.summary.as_ref())
        .flat_map(|s| {
            let own = if s.pages.is_empty() {
                Vec::new()
            } else {
                vec![files::overview(s.rank), files::keys(s.rank)]
            };
            s.pages.iter().map(|p| p.file.clone()).chain(own)
        })
        .filter(|f| !dir.join(f).is_file())
        .collect();
    (!missing.is_empty()).then(|| {
        format!(
            "{}: missing {} of its ranks' report files: {}",
            name(m, dir),
            missing.len(),
            list(&missing)
        )
    })
}

/// `actdiff merge`: [`merge_parts`], then every run-level output
/// ([`super::outputs::finish`]); returns the exit status. A merge that
/// fails removes the report files from `out` (unless `out` is a part),
/// so no earlier report stays there looking current, and with `--junit`
/// writes a JUnit file with an `<error>` naming the problems.
pub fn merge(parts: &[PathBuf], out: &Path, outs: &super::RunOutputs) -> i32 {
    if parts
        .first()
        .is_some_and(|p| super::steps::is_series_part(p))
    {
        return super::steps::merge_series(parts, out, outs);
    }
    match merge_parts(parts, out) {
        Ok(c) => super::finish(c.meta, c.ranks, outs),
        Err(e) => refuse(out, problems(e), outs),
    }
}

/// A merge error as one line per problem.
pub fn problems(e: MergeError) -> Vec<Message> {
    match e {
        MergeError::Parts(p) => p,
        e => vec![Message::Text(e.to_string())],
    }
}

/// A refused merge: the problems on stderr, the report files removed from
/// `out` (unless `out` is a part), the JUnit `<error>`; returns 2.
pub fn refuse(out: &Path, problems: Vec<Message>, outs: &super::RunOutputs) -> i32 {
    for p in &problems {
        eprintln!("error: {p}");
    }
    let is_part = out.join(shard::MANIFEST).exists();
    let cleared = if out.is_dir() && !is_part {
        match report::clear_previous(out) {
            Ok(_) => true,
            Err(e) => {
                eprintln!("error: {e}");
                false
            }
        }
    } else {
        !out.exists()
    };
    if cleared {
        eprintln!("error: nothing merged: {} holds no report", out.display());
    } else {
        eprintln!("error: nothing merged");
    }
    if let Some(j) = &outs.junit {
        if let Some(dir) = j.parent().filter(|d| !d.as_os_str().is_empty()) {
            let _ = std::fs::create_dir_all(dir);
        }
        if let Err(e) = super::outputs::error_junit(j, problems) {
            eprintln!("error: {}: {e}", j.display());
        }
    }
    crate::exit_codes::INPUT_ERROR
}

/// Hard-links (or, across file systems, copies) a part's rank pages into
/// the report folder.
fn link_pages(part: &Path, out: &Path) -> Result<(), report::ReportError> {
    let entries = std::fs::read_dir(part).map_err(|e| report::ReportError::io(part, e))?;
    for e in entries {
        let e = e.map_err(|e| report::ReportError::io(part, e))?;
        let file = e.file_name();
        let Some(n) = file.to_str() else { continue };
        if n == files::INDEX || n == files::SUMMARY || !files::is_report_file(n) {
            continue;
        }
        let to = out.join(n);
        if std::fs::hard_link(e.path(), &to).is_err() {
            std::fs::copy(e.path(), &to).map_err(|err| report::ReportError::io(&to, err))?;
        }
    }
    Ok(())
}
