//! The runs' display names when none is given (`--name1`, `--name2`): the
//! folder's name, told apart by the folders above when both are the same.

use std::path::Path;

/// Default display name of a run: the folder name, or for a single
/// `rank_N_activations.log` file, the name of the folder holding it.
pub fn default_name(path: &Path) -> String {
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_else(|| path.display().to_string());
    if crate::run::rank_of_file_name(&name).is_some() {
        if let Some(parent) = path.parent().and_then(|p| p.file_name()) {
            return parent.to_string_lossy().into_owned();
        }
    }
    name
}

/// Default display names of two runs: each [`default_name`]; when the two
/// are the same (`baseline/numerics` and `current/numerics`), the names of
/// the folders above instead, as far up as it takes to tell them apart
/// (three levels at most; else they stay the same).
pub fn default_names(run1: &Path, run2: &Path) -> (String, String) {
    let mut names = (default_name(run1), default_name(run2));
    // The folder the name came from, for each run.
    let named = |p: &Path| -> Option<std::path::PathBuf> {
        let abs = std::path::absolute(p).ok()?;
        let is_log = abs
            .file_name()
            .and_then(|n| n.to_str())
            .is_some_and(|n| crate::run::rank_of_file_name(n).is_some());
        Some(if is_log {
            abs.parent()?.to_path_buf()
        } else {
            abs
        })
    };
    let (Some(mut a), Some(mut b)) = (named(run1), named(run2)) else {
        return names;
    };
    for _ in 0..3 {
        if names.0 != names.1 {
            break;
        }
        let (Some(pa), Some(pb)) = (a.parent(), b.parent()) else {
            break;
        };
        let (Some(na), Some(nb)) = (pa.file_name(), pb.file_name()) else {
            break;
        };
        if na == nb {
            (a, b) = (pa.to_path_buf(), pb.to_path_buf());
            continue;
        }
        names = (
            na.to_string_lossy().into_owned(),
            nb.to_string_lossy().into_owned(),
        );
    }
    names
}
