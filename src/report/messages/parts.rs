//! The parts a [`super::Message`] carries: a merge's part, how two parts'
//! inputs differ, a changed log, an unreadable value, a log's warning.

use std::fmt;

use super::Side;
use crate::run::shard::Shard;

/// A part of a sharded compare as a merge names it: `part 2/4 (parts/p2)`.
#[derive(Clone, Debug, PartialEq)]
pub struct PartName {
    /// Which part.
    pub shard: Shard,
    /// Its folder as given (for a step-series part: the part's folder,
    /// not its step's).
    pub dir: String,
}

impl fmt::Display for PartName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "part {} ({})", self.shard, self.dir)
    }
}

/// The first difference between two parts' recorded inputs
/// ([`super::Message::PartsOfOtherInputs`]).
#[derive(Clone, Debug, PartialEq)]
pub enum InputsDifference {
    /// A run is another folder.
    Folder {
        /// The run.
        side: Side,
        /// The first part's folder.
        first: String,
        /// The other's.
        other: String,
    },
    /// A rank one part found and the other did not.
    RankInOne {
        /// The run.
        side: Side,
        /// The rank.
        rank: u32,
    },
    /// A rank whose log differs (its file or size).
    RankLog {
        /// The run.
        side: Side,
        /// The rank.
        rank: u32,
        /// The first part's log and its size.
        first: (String, u64),
        /// The other's.
        other: (String, u64),
    },
    /// A rank's log, the same file and size, written again between the
    /// parts (another modification time).
    RankLogRewritten {
        /// The run.
        side: Side,
        /// The rank.
        rank: u32,
        /// The file.
        file: String,
    },
    /// A run's logs differ otherwise.
    Logs {
        /// The run.
        side: Side,
    },
    /// A run one part found and the other did not.
    FoundByOne {
        /// The run.
        side: Side,
    },
    /// The inputs differ otherwise.
    Other,
}

impl fmt::Display for InputsDifference {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            InputsDifference::Folder { side, first, other } => {
                write!(f, "{side} is {first} in one and {other} in the other")
            }
            InputsDifference::RankInOne { side, rank } => {
                write!(f, "{side} rank {rank} is in one only")
            }
            InputsDifference::RankLog {
                side,
                rank,
                first,
                other,
            } => write!(
                f,
                "{side} rank {rank}: {} ({} bytes) against {} ({} bytes)",
                first.0, first.1, other.0, other.1
            ),
            InputsDifference::RankLogRewritten { side, rank, file } => write!(
                f,
                "{side} rank {rank}: {file} was written again between the parts (the same size, another modification time)"
            ),
            InputsDifference::Logs { side } => write!(f, "{side}'s logs differ"),
            InputsDifference::FoundByOne { side } => {
                write!(f, "{side} was found by one and not by the other")
            }
            InputsDifference::Other => f.write_str("the inputs differ"),
        }
    }
}

/// A log whose size is not the one a part recorded ([`super::Message::LogsChanged`]).
#[derive(Clone, Debug, PartialEq)]
pub struct ChangedLog {
    /// The log.
    pub file: String,
    /// The size the part recorded.
    pub recorded: u64,
    /// What it is now.
    pub now: LogNow,
}

/// What a changed log is now ([`ChangedLog`]).
#[derive(Clone, Debug, PartialEq)]
pub enum LogNow {
    /// Of this size.
    Bytes(u64),
    /// Gone.
    Missing,
    /// It cannot be read: the system's words.
    Unreadable(String),
    /// Of the recorded size, written again since (another modification
    /// time).
    Rewritten,
}

impl fmt::Display for ChangedLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} (recorded {} bytes, now ", self.file, self.recorded)?;
        match &self.now {
            LogNow::Bytes(n) => write!(f, "{n} bytes)"),
            LogNow::Missing => f.write_str("missing)"),
            LogNow::Unreadable(e) => write!(f, "{e})"),
            LogNow::Rewritten => f.write_str("the same size, but written again since)"),
        }
    }
}

/// Most items (parts, files) named in one merge problem; the rest are
/// counted (`and 3 more`).
pub const NAMED: usize = 10;

/// `a, b, c` of the first [`NAMED`] of `items`, then `and N more`.
pub(super) fn named<T: fmt::Display>(items: &[T]) -> String {
    let mut s = items
        .iter()
        .take(NAMED)
        .map(|x| x.to_string())
        .collect::<Vec<_>>()
        .join(", ");
    if items.len() > NAMED {
        s += &format!(" and {} more", items.len() - NAMED);
    }
    s
}

/// Where the first unreadable value is ([`super::Message::UnreadableValues`]).
#[derive(Clone, Debug, PartialEq)]
pub struct UnreadableValue {
    /// The log.
    pub path: String,
    /// 1-based line.
    pub line: u64,
    /// 1-based column.
    pub column: u64,
    /// The parser's words.
    pub message: String,
}

/// What one line of a log's parse warnings counts ([`super::Message::LogWarning`]).
#[derive(Clone, Debug, PartialEq)]
pub enum LogWarning {
    /// Lines of an unknown field label, ignored.
    UnknownField {
        /// The label.
        label: String,
        /// How many.
        count: u64,
    },
    /// The parser's message, `count` times (1: said once).
    Said {
        /// The first occurrence's message.
        message: String,
        /// How many.
        count: u64,
    },
    /// Warnings past those kept with their positions.
    Uncounted {
        /// Their label.
        label: String,
        /// How many.
        count: u64,
    },
}

impl fmt::Display for LogWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogWarning::UnknownField { label, count } => {
                write!(f, "{count} unknown field line(s) `{label}` ignored")
            }
            LogWarning::Said { message, count } if *count > 1 => {
                write!(f, "{message} ({count} times)")
            }
            LogWarning::Said { message, .. } => f.write_str(message),
            LogWarning::Uncounted { label, count } => {
                write!(f, "{count} more warning(s) of kind `{label}`")
            }
        }
    }
}
