//! Runs and ranks: finding the `rank_N_activations.log` files of a run (one
//! file, or a folder of them) and pairing the ranks of two runs by number.
//!
//! [`pipeline`] drives the stages for every rank pair: parse both logs →
//! match → report, ranks in parallel, then the index and the exit status.
//! [`shard`] splits the ranks into parts (`--shard`) and [`merge`] joins
//! the parts into one report (`actdiff merge`).

pub mod layouts;
pub mod merge;
pub mod messages;
pub mod outputs;
pub mod pipeline;
mod progress;
pub mod shard;
pub mod steps;
mod timer;

use std::path::{Path, PathBuf};

pub use outputs::{finish, RunMeta, RunOutputs, Terminal};
pub use pipeline::{assemble, compare, compare_runs, CompareConfig, Compared, ShardPart};

/// Errors locating the logs of a run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The path does not exist or cannot be read.
    #[error("{}: {message}", path.display())]
    Missing {
        /// The path given.
        path: PathBuf,
        /// What went wrong.
        message: String,
    },
    /// A folder with no `rank_N_activations.log` in it.
    #[error("{}: no rank_N_activations.log files in this folder (nor in its numerics/ subfolder)", path.display())]
    NoLogs {
        /// The folder.
        path: PathBuf,
    },
    /// A bad `--rank-map` entry.
    #[error("--rank-map `{0}`: expected RUN1_RANK:RUN2_RANK, e.g. 10:3")]
    RankMap(String),
    /// Two logs of one rank in one folder (`rank_3_activations.log` and
    /// `rank_3_activations.log.gz`): which one is meant is not known.
    #[error("{}: rank {rank} has two logs, {} and {}; keep one", path.display(), first.display(), second.display())]
    TwoLogs {
        /// The folder.
        path: PathBuf,
        /// The rank.
        rank: u32,
        /// One log.
        first: PathBuf,
        /// The other.
        second: PathBuf,
    },
}

/// One run as given on the command line: its rank logs, by rank number.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RunInput {
    /// The path given (file or folder).
    pub path: PathBuf,
    /// `(rank, log file)`, sorted by rank.
    pub ranks: Vec<(u32, PathBuf)>,
    /// Whether `path` was a folder.
    pub is_dir: bool,
}

/// The rank number in a file name `rank_<N>_activations.log` (optionally
/// ending `.gz`), if it has that form.
pub fn rank_of_file_name(name: &str) -> Option<u32> {
    let rest = name.strip_prefix("rank_")?;
    let (num, tail) = rest.split_once('_')?;
    if tail != "activations.log" && tail != "activations.log.gz" {
        return None;
    }
    if num.is_empty() || !num.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    num.parse().ok()
}

impl RunInput {
    /// Finds the logs of a run: a file is one rank (its number from the file
    /// name, else 0); a folder holds `rank_N_activations.log` files, directly
    /// or in a `numerics/` subfolder (a TorchTitan dump folder).
    pub fn discover(path: &Path) -> Result<RunInput, RunError> {
        let meta = std::fs::metadata(path).map_err(|e| RunError::Missing {
            path: path.to_path_buf(),
            message: if e.kind() == std::io::ErrorKind::NotFound {
                "no such file or folder".into()
            } else {
                e.to_string()
            },
        })?;
        if !meta.is_dir() {
            let rank = path
                .file_name()
                .and_then(|n| n.to_str())
                .and_then(rank_of_file_name)
                .unwrap_or(0);
            return Ok(RunInput {
                path: path.to_path_buf(),
                ranks: vec![(rank, path.to_path_buf())],
                is_dir: false,
            });
        }
        for dir in [path.to_path_buf(), path.join("numerics")] {
            let entries = match std::fs::read_dir(&dir) {
                Ok(entries) => entries,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => continue,
                // An unreadable folder (permission denied) is said as that,
                // not as a folder without logs.
                Err(e) => {
                    return Err(RunError::Missing {
                        path: dir,
                        message: format!("cannot read this folder: {e}"),
                    })
                }
            };
            let mut ranks: Vec<(u32, PathBuf)> = entries
                .filter_map(|e| e.ok())
                .filter_map(|e| {
                    let name = e.file_name();
                    let rank = rank_of_file_name(name.to_str()?)?;
                    Some((rank, e.path()))
                })
                .collect();
            if !ranks.is_empty() {
                ranks.sort();
                if let Some(w) = ranks.windows(2).find(|w| w[0].0 == w[1].0) {
                    return Err(RunError::TwoLogs {
                        path: dir,
                        rank: w[0].0,
                        first: w[0].1.clone(),
                        second: w[1].1.clone(),
                    });
                }
                return Ok(RunInput {
                    path: path.to_path_buf(),
                    ranks,
                    is_dir: true,
                });
            }
        }
        Err(RunError::NoLogs {
            path: path.to_path_buf(),
        })
    }
}

/// The suffixes of the files the capture agent writes a rank log through
/// (`rank_0_activations.log.body.tmp`, then `….log.tmp`, renamed to the
/// log when it finishes).
const CAPTURE_TMP_SUFFIXES: [&str; 2] = [".body.tmp", ".tmp"];

/// The capture agent's files in run folder `path` (or its `numerics/`):
/// a rank whose capture did not finish (the process was stopped before it
/// wrote its log), each with whether its rank log is there too, older
/// than it (an earlier capture's; a temporary file older than the log is
/// stale and not returned). Empty for a file, or a folder that cannot be
/// read.
pub fn unfinished_captures(path: &Path) -> Vec<(PathBuf, bool)> {
    let mut out = Vec::new();
    for dir in [path.to_path_buf(), path.join("numerics")] {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for e in entries.filter_map(|e| e.ok()) {
            let name = e.file_name();
            let Some(name) = name.to_str() else { continue };
            let log = CAPTURE_TMP_SUFFIXES
                .iter()
                .find_map(|s| name.strip_suffix(s))
                .filter(|log| rank_of_file_name(log).is_some());
            if let Some(log) = log {
                let modified = |p: &Path| std::fs::metadata(p).and_then(|m| m.modified()).ok();
                match modified(&dir.join(log)) {
                    None => out.push((e.path(), false)),
                    // Newer than the log beside it: a later capture that
                    // did not finish (an older one is stale, and said not).
                    Some(t) if modified(&e.path()).is_some_and(|m| m > t) => {
                        out.push((e.path(), true))
                    }
                    Some(_) => {}
                }
            }
        }
    }
    out.sort();
    out
}

/// How the ranks of two runs meet.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RankPlan {
    /// `(run-1 rank, run-1 log, run-2 rank, run-2 log)` in run-1 rank order.
    pub pairs: Vec<(u32, PathBuf, u32, PathBuf)>,
    /// Ranks only run 1 has.
    pub only1: Vec<u32>,
    /// Ranks only run 2 has.
    pub only2: Vec<u32>,
}

/// Parses `--ranks` (`0`, `0,2-5`): inclusive ranges of run-1 ranks.
/// Errors name the part that is no rank or range.
pub fn parse_rank_list(s: &str) -> Result<Vec<(u32, u32)>, String> {
    let mut out = Vec::new();
    for part in s.split(',').map(str::trim) {
        let num = |t: &str| {
            t.trim()
                .parse::<u32>()
                .map_err(|_| format!("--ranks: `{part}` is no rank or range (`0`, `2-5`)"))
        };
        let (a, b) = match part.split_once('-') {
            Some((a, b)) => (num(a)?, num(b)?),
            None => (num(part)?, num(part)?),
        };
        if a > b {
            return Err(format!("--ranks: `{part}` runs backwards"));
        }
        out.push((a, b));
    }
    Ok(out)
}

/// Parses `--rank-map` entries `A:B` (run-1 rank A compares with run-2 rank B).
pub fn parse_rank_map(entries: &[String]) -> Result<Vec<(u32, u32)>, RunError> {
    entries
        .iter()
        .flat_map(|e| e.split(','))
        .filter(|e| !e.trim().is_empty())
        .map(|e| {
            let (a, b) = e
                .split_once(':')
                .ok_or_else(|| RunError::RankMap(e.to_string()))?;
            let a = a
                .trim()
                .parse()
                .map_err(|_| RunError::RankMap(e.to_string()))?;
            let b = b
                .trim()
                .parse()
                .map_err(|_| RunError::RankMap(e.to_string()))?;
            Ok((a, b))
        })
        .collect()
}

/// Pairs ranks by number, after applying `rank_map` (run-1 rank → run-2
/// rank). Two single files always pair, whatever their rank numbers.
pub fn plan(
    r1: &RunInput,
    r2: &RunInput,
    rank_map: &[(u32, u32)],
    ranks: Option<&[(u32, u32)]>,
) -> RankPlan {
    let mut p = RankPlan::default();
    if !r1.is_dir && !r2.is_dir {
        let (a, pa) = r1.ranks[0].clone();
        let (b, pb) = r2.ranks[0].clone();
        p.pairs.push((a, pa, b, pb));
        return p;
    }
    let map = |a: u32| {
        rank_map
            .iter()
            .find(|(x, _)| *x == a)
            .map(|(_, y)| *y)
            .unwrap_or(a)
    };
    let selected = |a: u32| ranks.is_none_or(|v| v.iter().any(|&(x, y)| (x..=y).contains(&a)));
    // `--ranks`: the run-2 ranks the selected run-1 ranks pair with; the
    // others of either run are left out (not one-sided).
    let wanted2: Option<Vec<u32>> = ranks.map(|_| {
        r1.ranks
            .iter()
            .filter(|(a, _)| selected(*a))
            .map(|(a, _)| map(*a))
            .collect()
    });
    let mut used2: Vec<bool> = r2
        .ranks
        .iter()
        .map(|(b, _)| wanted2.as_ref().is_some_and(|w| !w.contains(b)))
        .collect();
    for (a, pa) in r1.ranks.iter().filter(|(a, _)| selected(*a)) {
        let want = map(*a);
        match r2.ranks.iter().position(|(b, _)| *b == want) {
            Some(i) if !used2[i] => {
                used2[i] = true;
                p.pairs.push((*a, pa.clone(), want, r2.ranks[i].1.clone()));
            }
            _ => p.only1.push(*a),
        }
    }
    for (i, (b, _)) in r2.ranks.iter().enumerate() {
        if !used2[i] {
            p.only2.push(*b);
        }
    }
    p
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rank_file_names() {
        assert_eq!(rank_of_file_name("rank_0_activations.log"), Some(0));
        assert_eq!(rank_of_file_name("rank_10_activations.log.gz"), Some(10));
        assert_eq!(rank_of_file_name("rank_x_activations.log"), None);
        assert_eq!(rank_of_file_name("rank_1_activations.txt"), None);
    }

    fn run(ranks: &[u32]) -> RunInput {
        RunInput {
            path: "r".into(),
            ranks: ranks
                .iter()
                .map(|r| (*r, PathBuf::from(format!("rank_{r}_activations.log"))))
                .collect(),
            is_dir: true,
        }
    }

    #[test]
    fn ranks_pair_by_number_and_map() {
        let p = plan(&run(&[0, 1, 2, 10]), &run(&[0, 1, 2, 3]), &[], None);
        assert_eq!(
            p.pairs.iter().map(|x| x.0).collect::<Vec<_>>(),
            vec![0, 1, 2]
        );
        assert_eq!((p.only1.clone(), p.only2.clone()), (vec![10], vec![3]));
        let m = parse_rank_map(&["10:3".into()]).unwrap();
        let p = plan(&run(&[0, 1, 2, 10]), &run(&[0, 1, 2, 3]), &m, None);
        assert_eq!(p.pairs.len(), 4);
        assert_eq!((p.pairs[3].0, p.pairs[3].2), (10, 3));
        assert!(p.only1.is_empty() && p.only2.is_empty());
        assert!(parse_rank_map(&["x".into()]).is_err());
    }

    /// `--ranks`: only the listed run-1 ranks and the run-2 ranks they pair
    /// with; the others of either run are left out, not one-sided (one
    /// process against a data-parallel run: trial 22 M1, "rank 1 only in
    /// fsdp" made every step diverge). A listed rank run 2 lacks is still
    /// one-sided.
    #[test]
    fn ranks_compares_only_the_listed_ranks() {
        let sel = parse_rank_list("0").unwrap();
        let p = plan(&run(&[0]), &run(&[0, 1]), &[], Some(&sel));
        assert_eq!(
            p.pairs.iter().map(|x| (x.0, x.2)).collect::<Vec<_>>(),
            vec![(0, 0)]
        );
        assert!(p.only1.is_empty() && p.only2.is_empty());
        let sel = parse_rank_list("1-2, 7").unwrap();
        assert_eq!(sel, vec![(1, 2), (7, 7)]);
        let m = parse_rank_map(&["2:5".into()]).unwrap();
        let p = plan(&run(&[0, 1, 2, 7]), &run(&[0, 1, 5, 6]), &m, Some(&sel));
        assert_eq!(
            p.pairs.iter().map(|x| (x.0, x.2)).collect::<Vec<_>>(),
            vec![(1, 1), (2, 5)]
        );
        assert_eq!((p.only1.clone(), p.only2.clone()), (vec![7], vec![]));
        for bad in ["x", "3-1", "1-", ""] {
            assert!(parse_rank_list(bad).is_err(), "{bad}");
        }
    }
}
