//! `actdiff merge PART_DIR... -o REPORT_DIR`: joins the parts of a sharded
//! compare into the report a single `actdiff compare` of all ranks writes.
//!
//! The parts are checked first (the checks and their messages are in
//! [`super::messages`]), and any problem is an error naming the
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

use super::messages::{self, Message, PartName};
use super::pipeline::{assemble, Compared};
use super::shard::{self, Manifest, PartStatus};
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

/// A part a merge read: its manifest, its folder, and the name problems
/// give it.
pub struct ReadPart<'a> {
    /// Its `part.json`.
    pub manifest: Manifest,
    /// Its folder.
    pub dir: &'a Path,
    /// `part 2/4 (parts/p2)`: for a step of a step series, the series
    /// part's folder, so that a problem reads the same at every step.
    pub name: PartName,
}

/// Checks the parts and merges them into `out` (see the module
/// documentation), linking the pages into `out`. Returns the whole run's
/// rank summaries and metadata for [`super::outputs::finish`].
pub fn merge_parts(parts: &[PathBuf], out: &Path) -> Result<Compared, MergeError> {
    merge_parts_split(parts, out, None, parts)
}

/// [`merge_parts`] where the units each part must hold are `split` (one
/// list per part, by index: one step of a sharded step series, whose split
/// is the series', [`shard::series_units_by_part`]), or, for `None`, the
/// split of the parts' own inputs ([`shard::units_by_part`]). Problems
/// name each part by its folder in `names` (by index: a step series'
/// part folders, for the step folders in `parts`).
pub fn merge_parts_split(
    parts: &[PathBuf],
    out: &Path,
    split: Option<Vec<Vec<shard::Unit>>>,
    names: &[PathBuf],
) -> Result<Compared, MergeError> {
    let read = check_parts(parts, out, split, names)?;
    join_parts(read, out, true, None)
}

/// The checks of [`merge_parts_split`]: the parts read, or every problem.
pub fn check_parts<'a>(
    parts: &'a [PathBuf],
    out: &Path,
    split: Option<Vec<Vec<shard::Unit>>>,
    names: &'a [PathBuf],
) -> Result<Vec<ReadPart<'a>>, MergeError> {
    if parts.is_empty() {
        return Err(MergeError::Parts(vec![Message::NoParts]));
    }
    let (read, mut problems) = read_parts(parts, names, out);
    problems.extend(messages::status_problems(&read));
    // A failed part is named above; comparing its inputs and options with
    // the others' would only add noise.
    let sound: Vec<&ReadPart> = read
        .iter()
        .filter(|p| !matches!(p.manifest.status, PartStatus::Failed { .. }))
        .collect();
    if let Some(first) = sound.first().copied().or(read.first()) {
        let mut found = messages::agreement_problems(first, &sound);
        found.extend(messages::coverage_problems(
            first.manifest.shard.count,
            &read,
        ));
        // Every part holds exactly the units the split gives it.
        if problems.is_empty() && found.is_empty() {
            found.extend(messages::split_problems(&first.manifest, split, &read));
        }
        if problems.is_empty() && found.is_empty() {
            found.extend(read.iter().filter_map(messages::missing_files));
        }
        problems.extend(found);
    }
    if problems.is_empty() {
        Ok(read)
    } else {
        Err(MergeError::Parts(problems))
    }
}

/// A run's path as the merged outputs show it: as the compare spelled it
/// when that spelling names the recorded run from the merge's folder too,
/// else the path the part recorded (absolute in a version-2 `part.json`):
/// a merge run from another folder (a Slurm job's) names runs a reader can
/// open from anywhere, not `g1` relative to a folder it does not know.
fn shown_path(spelled: &str, recorded: Option<&super::shard::RunRecord>) -> String {
    match recorded {
        Some(r)
            if r.path.is_absolute()
                && super::shard::recorded_path(Path::new(spelled)) != r.path =>
        {
            r.path.display().to_string()
        }
        _ => spelled.to_string(),
    }
}

/// Joins checked parts ([`check_parts`]) into `out`: prepares the report
/// folder, links the ranks' pages into it (with `pages`; without, the
/// ranks are joined as a compare without result pages writes them,
/// [`crate::report::RankSummary::drop_pages`]: a later step of a step
/// series), and assembles the run.
pub fn join_parts(
    read: Vec<ReadPart>,
    out: &Path,
    pages: bool,
    series_index: Option<String>,
) -> Result<Compared, MergeError> {
    let run = read[0].manifest.run.clone();
    let inputs = &read[0].manifest.inputs;
    let opts = ReportOptions {
        out_dir: out.to_path_buf(),
        name1: run.name1.clone(),
        name2: run.name2.clone(),
        path1: shown_path(&run.path1, inputs.run1.as_ref()),
        path2: shown_path(&run.path2, inputs.run2.as_ref()),
        series_index,
        ..Default::default()
    };
    super::outputs::prepare_report_folder(&opts)?;
    let mut results = Vec::new();
    for mut p in read {
        if pages {
            link_pages(p.dir, out)?;
            key_indexes(&mut p)?;
        }
        results.extend(p.manifest.results);
    }
    if !pages {
        for s in results.iter_mut().filter_map(|r| r.summary.as_mut()) {
            s.drop_pages();
        }
    }
    // Plan order (run-1 rank order), as a single compare lists them.
    let pos = |rank: u32| run.pairs.iter().position(|(a, _)| *a == rank);
    results.sort_by_key(|r| pos(r.rank));
    Ok(assemble(&run, opts, Vec::new(), results, Vec::new()))
}

/// Reads each part's manifest: a folder given twice (under two spellings)
/// or the report folder itself given as a part is a problem, and so is a
/// manifest that does not read. `names` are the folders the parts are
/// named by (by index).
fn read_parts<'a>(
    parts: &'a [PathBuf],
    names: &'a [PathBuf],
    out: &Path,
) -> (Vec<ReadPart<'a>>, Vec<Message>) {
    let mut problems = Vec::new();
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let out_canon = canon(out);
    let mut seen: Vec<(PathBuf, &PathBuf)> = Vec::new();
    let mut read = Vec::new();
    for (i, dir) in parts.iter().enumerate() {
        let shown = names.get(i).unwrap_or(dir);
        let c = canon(dir);
        if c == out_canon {
            problems.push(Message::PartIsReport {
                dir: shown.display().to_string(),
            });
            continue;
        }
        if let Some((_, first)) = seen.iter().find(|(x, _)| *x == c) {
            problems.push(Message::PartTwice {
                dir: shown.display().to_string(),
                first: first.display().to_string(),
            });
            continue;
        }
        seen.push((c, shown));
        match Manifest::read(dir) {
            Ok(manifest) => read.push(ReadPart {
                name: messages::part_name(&manifest, shown),
                manifest,
                dir,
            }),
            Err(e) => problems.push(Message::Text(e)),
        }
    }
    (read, problems)
}

/// `actdiff merge`: [`merge_parts`], then every run-level output
/// ([`super::outputs::finish`]); returns the exit status. A merge that
/// fails removes the report files from `out` (unless `out` is a part),
/// so no earlier report stays there looking current, and with `--junit`
/// writes a JUnit file with an `<error>` naming the problems.
pub fn merge(parts: &[PathBuf], out: &Path, outs: &super::RunOutputs) -> i32 {
    // A part of a step series that failed before it knew its runs were
    // step series has only a part.json: any series part makes the merge
    // the series'.
    if parts.iter().any(|p| super::steps::is_series_part(p)) {
        return super::steps::merge_series(parts, out, outs);
    }
    match merge_parts(parts, out) {
        Ok(c) => super::finish(c.meta, c.ranks, outs),
        Err(e) => {
            let mut problems = problems(e);
            // Step folders of a series' parts hold the series' split's
            // ranks: said once, instead of each part's two rank lists.
            if let Some(p) = step_folders_as_parts(parts) {
                problems.retain(|m| !matches!(m, Message::PartUnits { .. }));
                problems.insert(0, p);
            }
            refuse(out, problems, outs)
        }
    }
}

/// The problem of step folders of a step series' parts (`p0/step_1`)
/// given as parts: their ranks are the series' split's, not their own
/// inputs' (unless the series has one step), so a merge of them is
/// refused for each part's ranks; said once, naming the parts to merge
/// instead.
fn step_folders_as_parts(parts: &[PathBuf]) -> Option<Message> {
    let mut dirs = Vec::new();
    let mut series: Vec<String> = Vec::new();
    for p in parts {
        let step = p
            .file_name()
            .and_then(|n| n.to_str())
            .and_then(files::step_of_dir_name);
        let Some(parent) = p
            .parent()
            .filter(|d| step.is_some() && super::steps::is_series_part(d))
        else {
            continue;
        };
        dirs.push(p.display().to_string());
        let parent = parent.display().to_string();
        if !series.contains(&parent) {
            series.push(parent);
        }
    }
    (!dirs.is_empty()).then_some(Message::StepFoldersAsParts {
        dirs,
        parts: series,
    })
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
    // A part's folder (of a single step or of a step series) is never
    // cleared.
    let is_part = out.join(shard::MANIFEST).exists() || super::steps::is_series_part(out);
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

/// Gives each rank of part `p` with pages its key index, read from the
/// part's key-index files (`keys-{B}.js`, [`files::keys`]), which the
/// merged index writes again by blocks of the whole run's ranks (a block
/// may hold ranks of several parts); from a part an earlier actdiff wrote,
/// from the rank's own `rank{N}-keys.js` ([`files::legacy_keys`]). A rank
/// with pages whose key index the part's files lack is an error naming the
/// file.
fn key_indexes(p: &mut ReadPart) -> Result<(), report::ReportError> {
    let mut lines = std::collections::BTreeMap::new();
    let mut read: Vec<String> = Vec::new();
    for s in p
        .manifest
        .results
        .iter_mut()
        .filter_map(|r| r.summary.as_mut())
    {
        if s.pages.is_empty() {
            continue;
        }
        let name = files::keys(s.rank);
        let legacy = p.dir.join(files::legacy_keys(s.rank));
        if !p.dir.join(&name).is_file() && legacy.is_file() {
            let line = report::html::read_legacy_keys_file(&legacy, s.rank)?;
            s.key_index = report::summary::KeyIndex(Some(line));
            continue;
        }
        if !read.contains(&name) {
            lines.append(&mut report::html::read_keys_file(&p.dir.join(&name))?);
            read.push(name.clone());
        }
        let line = lines
            .remove(&s.rank)
            .ok_or_else(|| report::ReportError::Io {
                path: p.dir.join(&name),
                message: format!("no key index of rank {}", s.rank),
            })?;
        s.key_index = report::summary::KeyIndex(Some(line));
    }
    Ok(())
}

/// Hard-links (or, across file systems, copies) a part's rank pages into
/// the report folder; its key-index files are not linked, since the
/// merged index writes them again ([`key_indexes`]).
fn link_pages(part: &Path, out: &Path) -> Result<(), report::ReportError> {
    let entries = std::fs::read_dir(part).map_err(|e| report::ReportError::io(part, e))?;
    for e in entries {
        let e = e.map_err(|e| report::ReportError::io(part, e))?;
        let file = e.file_name();
        let Some(n) = file.to_str() else { continue };
        if n == files::INDEX
            || n == files::SUMMARY
            || files::is_keys_file(n)
            || files::is_legacy_keys(n)
            || !files::is_report_file(n)
        {
            continue;
        }
        let to = out.join(n);
        if std::fs::hard_link(e.path(), &to).is_err() {
            std::fs::copy(e.path(), &to).map_err(|err| report::ReportError::io(&to, err))?;
        }
    }
    Ok(())
}
