//! What a report folder holds before a report is written into it: the
//! files a previous report left are removed ([`clear_previous`]), or, for
//! a comparison that writes result pages, its result pages are kept for
//! this report to write over and the ones it did not write are removed
//! once its pages are written ([`clear_previous_keeping_pages`],
//! [`KeptPages::remove_unwritten`]).
//!
//! Why keep them: ext4 does not reuse the inodes freed in the last minutes
//! (`recently_deleted` in its inode allocator), so a folder's 4,096 result
//! pages removed and created again cost 1.3–2.5 s, with 2.4–4.9 s of
//! system time, on this project's 2-vCPU machine, where written over in
//! place (the same names, truncated by the write) they cost 0.5 s
//! (docs/performance.md, "A report written over the previous one"). Only a
//! page that is a file of its own is kept: one with other hard links (a
//! merge links its parts' pages; `cp -al` keeps an archive) or a symbolic
//! link is removed first, so that writing this report never changes a
//! file outside it.

use std::collections::HashSet;
use std::path::{Path, PathBuf};

use super::{files, RankSummary, ReportError};

/// Removes the files a previous comparison left in `dir`: its report files
/// ([`files::is_report_file`]) and a part's manifests
/// ([`files::is_part_manifest`]: a report written here makes the folder no
/// part), and those in its `step_S` folders (a previous step series'
/// reports; a folder left empty goes too), so that pages of ranks, pages
/// or steps this run does not write never sit beside its report as if they
/// belonged to it. A symbolic link of such a name is removed, not followed.
/// Other files are left alone. Returns how many were removed. Errors:
/// `dir` or a file in it that cannot be read or removed.
pub fn clear_previous(dir: &Path) -> Result<usize, ReportError> {
    clear(dir, false)
}

/// [`clear_previous`], except that the result pages ([`files::is_page`])
/// directly in `dir` that are files of their own (no other hard link)
/// stay, for the report about to be written there to write over; call
/// [`KeptPages::remove_unwritten`] once its pages are written. The index
/// and summary go, so that until then the folder holds no report that
/// could be taken for this one. Errors: as [`clear_previous`].
pub fn clear_previous_keeping_pages(dir: &Path) -> Result<KeptPages, ReportError> {
    clear(dir, true)?;
    Ok(KeptPages {
        dir: dir.to_path_buf(),
    })
}

/// A report folder whose previous result pages
/// [`clear_previous_keeping_pages`] kept for the report being written to
/// write over.
#[must_use = "the pages this report does not write are removed by `remove_unwritten`"]
#[derive(Debug)]
pub struct KeptPages {
    dir: PathBuf,
}

impl KeptPages {
    /// Removes the result pages in the folder that no rank of `written`
    /// names among its pages ([`RankSummary::pages`]): those a previous
    /// report left, of ranks or pages this one does not have, and those of
    /// a rank of this one that failed after writing some. Call it once
    /// every rank's pages are written. Returns how many were removed.
    /// Errors: the folder cannot be read or a page cannot be removed (the
    /// others are still tried; the first error is returned).
    pub fn remove_unwritten<'a>(
        self,
        written: impl IntoIterator<Item = &'a RankSummary>,
    ) -> Result<usize, ReportError> {
        let written: HashSet<&str> = written
            .into_iter()
            .flat_map(|s| s.pages.iter().map(|p| p.file.as_str()))
            .collect();
        let entries = std::fs::read_dir(&self.dir).map_err(|e| ReportError::io(&self.dir, e))?;
        let mut removed = 0;
        let mut first_error = None;
        for e in entries {
            let e = match e {
                Ok(e) => e,
                Err(err) => {
                    first_error.get_or_insert(ReportError::io(&self.dir, err));
                    continue;
                }
            };
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            if !files::is_page(name) || written.contains(name) || !is_file_or_link(&e) {
                continue;
            }
            match std::fs::remove_file(e.path()) {
                Ok(()) => removed += 1,
                Err(err) if err.kind() == std::io::ErrorKind::NotFound => {}
                Err(err) => {
                    first_error.get_or_insert(ReportError::io(&e.path(), err));
                }
            }
        }
        match first_error {
            Some(e) => Err(e),
            None => Ok(removed),
        }
    }
}

/// Whether the entry is a file or a symbolic link (not followed).
fn is_file_or_link(e: &std::fs::DirEntry) -> bool {
    e.file_type().is_ok_and(|t| t.is_file() || t.is_symlink())
}

/// Whether the file `e` (not followed) may be written over in place: a
/// regular file with no other hard link.
fn writable_in_place(e: &std::fs::DirEntry) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::fs::MetadataExt;
        e.metadata().is_ok_and(|m| m.is_file() && m.nlink() == 1)
    }
    #[cfg(not(unix))]
    {
        let _ = e;
        false
    }
}

/// Removes `dir`'s report files and part manifests (with `keep_pages`,
/// not the result pages [`writable_in_place`]) and its `step_S` folders'
/// (all of them); returns how many were removed.
fn clear(dir: &Path, keep_pages: bool) -> Result<usize, ReportError> {
    let mut n = 0;
    let entries = std::fs::read_dir(dir).map_err(|e| ReportError::io(dir, e))?;
    for e in entries {
        let e = e.map_err(|e| ReportError::io(dir, e))?;
        let name = e.file_name();
        let Some(name) = name.to_str() else { continue };
        let ours = files::is_report_file(name) || files::is_part_manifest(name);
        if ours && is_file_or_link(&e) {
            if keep_pages && files::is_page(name) && writable_in_place(&e) {
                continue;
            }
            std::fs::remove_file(e.path()).map_err(|err| ReportError::io(&e.path(), err))?;
            n += 1;
        } else if e.file_type().is_ok_and(|t| t.is_dir()) && files::step_of_dir_name(name).is_some()
        {
            n += clear(&e.path(), false)?;
            let _ = std::fs::remove_dir(e.path()); // only when empty
        }
    }
    Ok(n)
}
