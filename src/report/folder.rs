//! What a report folder holds before a report is written into it: the
//! files a previous report left are removed ([`clear_previous`]), or, for
//! a comparison that writes result pages, its result pages are kept for
//! this report to write over and the ones it did not write are removed
//! once its pages are written ([`clear_previous_keeping_pages`],
//! [`KeptPages::remove_unwritten`]).
//!
//! Why keep them: ext4 does not reuse the inodes freed in the last minutes
//! (`recently_deleted` in its inode allocator), so a folder's 4,096 result
//! pages removed and created again cost 2.4–3.0 s of system time on this
//! project's 2-vCPU machine, where written over in place (the same names,
//! truncated by the write) they cost 0.5 s (docs/performance.md, "A report
//! written over the previous one").

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::{files, RankSummary, ReportError};

/// Removes the report files ([`files::is_report_file`]) a previous
/// comparison left in `dir`, and those in its `step_S` folders (a previous
/// step series' reports; a folder left empty goes too), so that pages of
/// ranks, pages or steps this run does not write never sit beside its
/// report as if they belonged to it. Other files are left alone. Returns
/// how many were removed. Errors: `dir` or a file in it that cannot be
/// read or removed.
pub fn clear_previous(dir: &Path) -> Result<usize, ReportError> {
    clear(dir, false).map(|(n, _)| n)
}

/// [`clear_previous`], except that the result pages ([`files::is_page`])
/// directly in `dir` stay, for the report about to be written there to
/// write over: the [`KeptPages`] returned names them, and its
/// [`KeptPages::remove_unwritten`] removes those the report did not write.
/// The index and summary go, so that until then the folder holds no
/// report that could be taken for this one. Errors: as [`clear_previous`].
pub fn clear_previous_keeping_pages(dir: &Path) -> Result<KeptPages, ReportError> {
    clear(dir, true).map(|(_, names)| KeptPages {
        dir: dir.to_path_buf(),
        names,
    })
}

/// Result pages a previous report left in a report folder, kept by
/// [`clear_previous_keeping_pages`] for this report to write over.
#[must_use = "the pages this report does not write are removed by `remove_unwritten`"]
#[derive(Debug)]
pub struct KeptPages {
    dir: PathBuf,
    names: Vec<String>,
}

impl KeptPages {
    /// Removes the kept pages that no rank of `written` names among its
    /// pages ([`RankSummary::pages`]): those of ranks or pages this report
    /// does not have. Call it once every rank's pages are written. Returns
    /// how many were removed. Errors: a page that cannot be removed (the
    /// others are still tried; the first error is returned).
    pub fn remove_unwritten<'a>(
        self,
        written: impl IntoIterator<Item = &'a RankSummary>,
    ) -> Result<usize, ReportError> {
        if self.names.is_empty() {
            return Ok(0);
        }
        let written: HashSet<&str> = written
            .into_iter()
            .flat_map(|s| s.pages.iter().map(|p| p.file.as_str()))
            .collect();
        let mut removed = 0;
        let mut first_error = None;
        for name in self.names.iter().filter(|n| !written.contains(n.as_str())) {
            let path = self.dir.join(name);
            match std::fs::remove_file(&path) {
                Ok(()) => removed += 1,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => {
                    first_error.get_or_insert(ReportError::io(&path, e));
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(removed),
        }
    }
}

/// Removes `dir`'s report files (with `keep_pages`, not its result pages,
/// whose names are returned) and its `step_S` folders' (all of them).
fn clear(dir: &Path, keep_pages: bool) -> Result<(usize, Vec<String>), ReportError> {
    let mut n = 0;
    let mut kept = Vec::new();
    let entries = std::fs::read_dir(dir).map_err(|e| ReportError::io(dir, e))?;
    for e in entries {
        let e = e.map_err(|e| ReportError::io(dir, e))?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let kind = e.file_type();
        if kind.as_ref().is_ok_and(|t| t.is_file()) && files::is_report_file(name) {
            if keep_pages && files::is_page(name) {
                kept.push(name.to_string());
                continue;
            }
            std::fs::remove_file(e.path()).map_err(|err| ReportError::io(&e.path(), err))?;
            n += 1;
        } else if kind.is_ok_and(|t| t.is_dir()) && files::step_of_dir_name(name).is_some() {
            n += clear(&e.path(), false)?.0;
            let _ = std::fs::remove_dir(e.path()); // only when empty
        }
    }
    Ok((n, kept))
}
