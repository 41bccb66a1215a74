//! The parser stage: `rank_N_activations.log` bytes in, an [`OpTable`] out.
//!
//! A log is memory-mapped ([`LogSource`]), split at block boundaries (a `[`
//! at the start of a line) into chunks that are parsed on rayon threads
//! (`chunk.rs`: one method per kind of line), and the partial tables are
//! joined in dispatch order (`join.rs`). Line ends are found 64 bytes at a
//! time (`scan.rs`). Each line is classified by [`mod@line`]: a
//! hand-written fast path (the text before the first `:` looked up among
//! the labels of [`crate::logformat::field`]) for the lines real writers produce, and the
//! reference's full rules (its stat regex as a nom parser) for the rest;
//! tests check both agree. Header lines are read by
//! [`crate::logformat::Header::read_line`]. Field values are stored as byte
//! ranges into the map, never copied; [`mod@value`] reads them (numbers with
//! Python's float grammar in nom, [`mod@number`]; digests), and the parse
//! warns about values that do not read, with line and column. The format
//! and the reference reader it mirrors are described in
//! `shared/spec/log-format.md`; actdiff's own additions (the `Precision:
//! full` and `Compiled:` header lines, digest lines) in docs/log-format.md.
//!
//! ```no_run
//! let table = actdiff::parser::parse_path(std::path::Path::new("rank_0_activations.log")).unwrap();
//! println!("{} ops, first key {}", table.len(), table.key_str(0));
//! ```

mod chunk;
mod follow;
mod join;
pub mod key;
pub mod layer;
pub mod line;
pub mod number;
mod scan;
pub mod source;
pub mod table;
pub mod value;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use rayon::prelude::*;

pub use crate::logformat::{Field, FieldSet, Phase, Precision, N_FIELDS};
pub use line::trim;
pub use number::py_float;
pub use source::LogSource;
pub use table::{
    Header, OpTable, ParseWarning, Rel, WarningKind, FLAG_BACKWARD, FLAG_MAYBE_NONFINITE,
    FLAG_OPTIMIZER, FLAG_PHASE_LINE, FLAG_TRUNCATED,
};

use chunk::{parse_range, Partial};
use follow::Reference;
use join::join;
pub use join::GZIP_CUT_LABEL;

/// At most this many warnings are stored per file; all are counted.
pub const MAX_STORED_WARNINGS: usize = 100;

/// Chunks smaller than this are not split further.
const MIN_CHUNK: usize = 4 << 20;

/// Errors that stop the parse of one file.
#[derive(Debug, thiserror::Error)]
pub enum ParseError {
    /// The file could not be opened, read or mapped.
    #[error("{}: {message}", path.display())]
    Io {
        /// The file.
        path: PathBuf,
        /// The operating system's message.
        message: String,
    },
    /// The file starts with gzip magic bytes but does not decompress.
    #[error("{}: corrupt gzip data: {message}", path.display())]
    Gzip {
        /// The file.
        path: PathBuf,
        /// The decoder's message.
        message: String,
    },
}

/// Opens and parses the log at `path` (plain text or gzip), in parallel
/// chunks on the current rayon pool.
///
/// Errors: only I/O and corrupt gzip data. Malformed content never fails the
/// parse: it yields [`ParseWarning`]s with line and column.
pub fn parse_path(path: &Path) -> Result<OpTable, ParseError> {
    parse_path_progress(path, &|_| {})
}

/// [`parse_path`], calling `progress(bytes)` as each chunk of that many
/// bytes is parsed (for progress bars; called from worker threads).
pub fn parse_path_progress(
    path: &Path,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<OpTable, ParseError> {
    parse_path_against(path, None, progress)
}

/// [`parse_path_progress`] against `reference`, the other log of a pair
/// (run 1's log of the same rank), already parsed: a block whose bytes
/// are those of a block of the reference is not read line by line, its
/// row is copied (`follow.rs`). The table is the one [`parse_path`]
/// gives; two logs that agree cost about one `memcmp` a block for the
/// second. `None`: no reference.
///
/// Errors: as [`parse_path`]'s.
pub fn parse_path_against(
    path: &Path,
    reference: Option<&OpTable>,
    progress: &(dyn Fn(u64) + Sync),
) -> Result<OpTable, ParseError> {
    let source = Arc::new(LogSource::open(path)?);
    let n = rayon::current_num_threads().max(1);
    let len = source.bytes().len();
    let target = (len / (n * 4)).max(MIN_CHUNK);
    let bounds = chunk_bounds(source.bytes(), target);
    Ok(parse_chunks_progress(
        source,
        path.to_path_buf(),
        &bounds,
        reference,
        progress,
    ))
}

/// The header of the log at `path` (plain text or gzip): its lines before
/// the first block, read as the parse reads them (a line that does not
/// read is skipped). Reads no block: for a log that is not compared (a
/// step one run only has, whose `Loss:` the series' loss curve draws).
///
/// Errors: as [`parse_path`]'s.
pub fn read_header(path: &Path) -> Result<crate::logformat::Header, ParseError> {
    let source = LogSource::open(path)?;
    let mut header = crate::logformat::Header::default();
    for line in source.bytes().split(|b| *b == b'\n') {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.first() == Some(&b'[') {
            break;
        }
        let _ = header.read_line(line);
    }
    Ok(header)
}

/// Parses bytes held in memory (tests, fuzzing), serially.
pub fn parse_bytes(bytes: Vec<u8>, path: impl Into<PathBuf>) -> OpTable {
    let source = Arc::new(LogSource::Owned(bytes));
    let len = source.bytes().len();
    let part = parse_range(source.bytes(), 0, len, None);
    join(source.clone(), path.into(), vec![part])
}

/// Parses `source` in chunks of about `len / (4 × threads)` bytes, at least 4 MiB.
pub fn parse_source(source: Arc<LogSource>, path: PathBuf) -> OpTable {
    let n = rayon::current_num_threads().max(1);
    let len = source.bytes().len();
    let target = (len / (n * 4)).max(MIN_CHUNK);
    let bounds = chunk_bounds(source.bytes(), target);
    parse_chunks(source, path, &bounds)
}

/// Parses `source` split at the given chunk starts (each must be 0 or the
/// position of a `[` right after a `\n`; see [`chunk_bounds`]). The result is
/// identical for any valid split.
pub fn parse_chunks(source: Arc<LogSource>, path: PathBuf, starts: &[usize]) -> OpTable {
    parse_chunks_progress(source, path, starts, None, &|_| {})
}

/// [`parse_chunks`] against `reference` ([`parse_path_against`]).
pub fn parse_chunks_against(
    source: Arc<LogSource>,
    path: PathBuf,
    starts: &[usize],
    reference: &OpTable,
) -> OpTable {
    parse_chunks_progress(source, path, starts, Some(reference), &|_| {})
}

fn parse_chunks_progress(
    source: Arc<LogSource>,
    path: PathBuf,
    starts: &[usize],
    reference: Option<&OpTable>,
    progress: &(dyn Fn(u64) + Sync),
) -> OpTable {
    let reference = reference.and_then(Reference::new);
    let data = source.bytes();
    let mut ranges = Vec::with_capacity(starts.len());
    for (i, &s) in starts.iter().enumerate() {
        let e = starts.get(i + 1).copied().unwrap_or(data.len());
        ranges.push((s, e));
    }
    if ranges.is_empty() {
        ranges.push((0, data.len()));
    }
    let parts: Vec<Partial<'_>> = ranges
        .par_iter()
        .map(|&(s, e)| {
            let part = parse_range(data, s, e, reference.as_ref());
            progress((e - s) as u64);
            part
        })
        .collect();
    join(source.clone(), path, parts)
}

/// Chunk start offsets for `data`: 0, then for every multiple of `target`
/// the next `[` that follows a `\n`.
pub fn chunk_bounds(data: &[u8], target: usize) -> Vec<usize> {
    let mut out = vec![0];
    let target = target.max(1);
    let mut pos = target;
    let finder = memchr::memmem::Finder::new(b"\n[");
    while pos < data.len() {
        match finder.find(&data[pos - 1..]) {
            Some(i) => {
                let b = pos - 1 + i + 1;
                if b > *out.last().unwrap() {
                    out.push(b);
                }
                pos = b + target;
            }
            None => break,
        }
    }
    out
}

/// Keys that occur more than once in one table, each with the 1-based line
/// numbers of its blocks, in first-occurrence order. Computed once per
/// table (from a key index built for it, unless [`duplicate_keys_from`]
/// gave one), then cached.
pub fn duplicate_keys(t: &OpTable) -> &[(String, Vec<u64>)] {
    if let Some(d) = t.duplicates.get() {
        return d;
    }
    duplicate_keys_from(t, &t.key_index())
}

/// [`duplicate_keys`], computed from `index`, `t`'s key index
/// ([`OpTable::key_index`]), unless already known.
pub fn duplicate_keys_from<'t>(t: &'t OpTable, index: &[(u64, u32)]) -> &'t [(String, Vec<u64>)] {
    t.duplicates.get_or_init(|| {
        // Runs of equal hashes: group rows by key bytes (a true hash
        // collision between different keys, or keys equal only without
        // their root class, is not a duplicate).
        let mut groups: Vec<Vec<u32>> = Vec::new();
        for g in key::groups(index).filter(|g| g.len() > 1) {
            let mut run: Vec<u32> = index[g].iter().map(|x| x.1).collect();
            while let Some(first) = run.first().copied() {
                let (same, rest): (Vec<u32>, Vec<u32>) = run
                    .iter()
                    .partition(|r| t.key(**r as usize) == t.key(first as usize));
                if same.len() > 1 {
                    groups.push(same);
                }
                run = rest;
            }
        }
        groups.sort_by_key(|g| g[0]);
        groups
            .into_iter()
            .map(|g| {
                (
                    t.key_str(g[0] as usize).into_owned(),
                    g.iter().map(|r| t.line(*r as usize)).collect(),
                )
            })
            .collect()
    })
}

#[cfg(test)]
mod tests;
