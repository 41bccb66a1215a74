//! The parser stage: `rank_N_activations.log` bytes in, an [`OpTable`] out.
//!
//! A log is memory-mapped ([`LogSource`]), split at block boundaries (a `[`
//! at the start of a line) into chunks that are parsed on rayon threads, and
//! the partial tables are joined in dispatch order. Each line is classified
//! by [`mod@line`]: a hand-written fast path (`starts_with` over the labels of
//! [`crate::logformat::field`]) for the lines real writers produce, and the reference's
//! full rules (its stat regex as a nom parser) for the rest; tests check
//! both agree. Field values are stored as byte ranges into the map, never
//! copied; [`mod@value`] reads them (numbers with Python's float grammar in
//! nom, [`mod@number`]; digests), and the parse warns about values that do
//! not read, with line and column. The format and the reference reader it
//! mirrors are described in `shared/spec/log-format.md`; actdiff's own
//! additions (the `Precision: full` and `Compiled:` header lines, digest
//! lines) in the README.
//!
//! ```no_run
//! let table = actdiff::parser::parse_path(std::path::Path::new("rank_0_activations.log")).unwrap();
//! println!("{} ops, first key {}", table.len(), table.key_str(0));
//! ```

pub mod key;
pub mod layer;
pub mod line;
pub mod number;
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

use line::{classify, LineKind};

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
    let source = Arc::new(LogSource::open(path)?);
    let n = rayon::current_num_threads().max(1);
    let len = source.bytes().len();
    let target = (len / (n * 4)).max(MIN_CHUNK);
    let bounds = chunk_bounds(source.bytes(), target);
    Ok(parse_chunks_progress(
        source,
        path.to_path_buf(),
        &bounds,
        progress,
    ))
}

/// Parses bytes held in memory (tests, fuzzing), serially.
pub fn parse_bytes(bytes: Vec<u8>, path: impl Into<PathBuf>) -> OpTable {
    let source = Arc::new(LogSource::Owned(bytes));
    let len = source.bytes().len();
    let part = parse_range(source.bytes(), 0, len);
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
    parse_chunks_progress(source, path, starts, &|_| {})
}

fn parse_chunks_progress(
    source: Arc<LogSource>,
    path: PathBuf,
    starts: &[usize],
    progress: &(dyn Fn(u64) + Sync),
) -> OpTable {
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
            let part = parse_range(data, s, e);
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

/// One chunk's rows. Line numbers are 0-based and relative to the chunk;
/// op types are numbered in the chunk's order of first occurrence.
struct Partial<'a> {
    start: usize,
    header: Option<Header>,
    block_start: Vec<u64>,
    line: Vec<u64>,
    flags: Vec<u8>,
    key_hash: Vec<u64>,
    root_class: RootClass<'a>,
    /// Each row's module: an index into `modules` (the join turns it into
    /// the row's layer).
    module: Vec<u32>,
    module_ids: ahash::AHashMap<&'a [u8], u32>,
    /// The chunk's distinct module FQNs (root class stripped), in the order
    /// they first occur.
    modules: Vec<&'a [u8]>,
    op_type: Vec<u32>,
    op_ids: ahash::AHashMap<&'a [u8], u32>,
    op_names: Vec<&'a [u8]>,
    cols: [table::Spans; table::N_COLUMNS],
    schema: FieldSet,
    warnings: Vec<ParseWarning>,
    counts: ahash::AHashMap<(WarningKind, String), u64>,
    lines: u64,
    crlf_line: Option<(u64, u64)>,
    /// The fields of the chunk's last block (`None`: no block).
    last_fields: Option<u16>,
    /// A headerless log's last block not followed by an empty line, alone
    /// in its chunk: (its last line, its fields), for [`join`] to judge
    /// against the block before it (in the chunk before).
    undecided_cut: Option<(u64, u16)>,
}

impl Partial<'_> {
    fn warn(&mut self, line: u64, column: u64, kind: WarningKind, label: &str, message: String) {
        *self.counts.entry((kind, label.to_string())).or_insert(0) += 1;
        if self.warnings.len() < MAX_STORED_WARNINGS {
            self.warnings.push(ParseWarning {
                line,
                column,
                kind,
                label: label.to_string(),
                message,
            });
        }
    }
}

use crate::logformat::quote as lossy;

/// Whether `v` holds an `n` or `N` (so may spell a NaN or an infinity).
/// Branch-free over the bytes: these values are short, and a loop without
/// an early exit compiles to a few vector instructions.
#[inline]
fn has_n(v: &[u8]) -> bool {
    v.iter()
        .fold(0u8, |acc, b| acc | u8::from((b | 0x20) == b'n'))
        != 0
}

/// Parses bytes `start..end` of `data`. `start` is 0 or the first byte of a line.
fn parse_range(data: &[u8], start: usize, end: usize) -> Partial<'_> {
    let mut p = Partial {
        start,
        header: if start == 0 {
            Some(Header::default())
        } else {
            None
        },
        block_start: Vec::new(),
        line: Vec::new(),
        flags: Vec::new(),
        key_hash: Vec::new(),
        root_class: RootClass::NoKeys,
        module: Vec::new(),
        module_ids: Default::default(),
        modules: Vec::new(),
        op_type: Vec::new(),
        op_ids: Default::default(),
        op_names: Vec::new(),
        cols: Default::default(),
        schema: FieldSet::default(),
        warnings: Vec::new(),
        counts: Default::default(),
        lines: 0,
        crlf_line: None,
        last_fields: None,
        undecided_cut: None,
    };
    // Rows of this chunk, estimated from its size (blocks of real logs are
    // 150 bytes or more): reserving once saves the growth copies, and pages
    // of a reservation never written are never touched.
    let est = (end - start) / 128 + 16;
    p.block_start.reserve(est);
    p.line.reserve(est);
    p.flags.reserve(est);
    p.key_hash.reserve(est);
    p.module.reserve(est);
    p.op_type.reserve(est);
    for col in p.cols.iter_mut() {
        col.reserve(est);
    }
    let hasher = key::hasher();
    let mut pos = start;
    let mut lineno: u64 = 0; // 0-based within the chunk
    let mut in_block = false;
    let mut last_nonblank_in_block = false;
    // Fields set in the current block, and in the block before it (0
    // before the chunk's second block).
    let mut seen: u16 = 0;
    let mut seen_before: u16 = 0;
    while pos < end {
        let nl = memchr::memchr(b'\n', &data[pos..end]).map(|i| pos + i);
        let line_end = nl.unwrap_or(end);
        let mut line = &data[pos..line_end];
        if line.last() == Some(&b'\r') {
            line = &line[..line.len() - 1];
            if p.crlf_line.is_none() {
                p.crlf_line = Some((lineno, line.len() as u64 + 1));
            }
        }
        match classify(line) {
            LineKind::Key {
                start: ks,
                end: ke,
                closed,
            } => {
                seen_before = seen;
                in_block = true;
                seen = 0;
                p.block_start.push(pos as u64);
                p.line.push(lineno);
                p.flags.push(0);
                for col in p.cols.iter_mut() {
                    col.push(Rel::default());
                }
                let row = p.block_start.len() - 1;
                p.cols[0].set(
                    row,
                    Rel {
                        off: ks as u32,
                        len: (ke - ks) as u32,
                    },
                );
                p.schema.insert(Field::Key);
                if !closed {
                    p.warn(
                        lineno,
                        line.len() as u64 + 1,
                        WarningKind::BadKeyLine,
                        "key",
                        format!("block header `{}` has no closing `]`", lossy(line)),
                    );
                }
                let k = &line[ks..ke];
                let exact = key::strip_root_class(k);
                p.key_hash.push(key::exact_key_hash(&hasher, exact));
                p.root_class.see(&k[..k.len() - exact.len()]);
                let (module, op) = key::module_and_op(exact);
                // Ops of one module come in runs: look the module up only
                // when it changes.
                let id = match p.module.last() {
                    Some(&last) if p.modules[last as usize] == module => last,
                    _ => {
                        let next = p.modules.len() as u32;
                        let id = *p.module_ids.entry(module).or_insert(next);
                        if id == next {
                            p.modules.push(module);
                        }
                        id
                    }
                };
                p.module.push(id);
                let next = p.op_names.len() as u32;
                let id = *p.op_ids.entry(op).or_insert(next);
                if id == next {
                    p.op_names.push(op);
                }
                p.op_type.push(id);
                let utf8 = if k.is_ascii() {
                    Ok("")
                } else {
                    std::str::from_utf8(k)
                };
                if let Err(e) = utf8 {
                    p.warn(
                        lineno,
                        (ks + e.valid_up_to() + 1) as u64,
                        WarningKind::NonUtf8,
                        "key",
                        "key is not valid UTF-8; shown with replacement characters".into(),
                    );
                }
                last_nonblank_in_block = true;
            }
            LineKind::Blank => {
                last_nonblank_in_block = false;
            }
            _ if !in_block => {
                if let Some(mut h) = p.header.take() {
                    header_line(&mut h, line, lineno, &mut p);
                    p.header = Some(h);
                }
                last_nonblank_in_block = false;
            }
            LineKind::Field {
                field,
                start: fs,
                end: fe,
            } => {
                let row = p.block_start.len() - 1;
                let off = pos - p.block_start[row] as usize + fs;
                match (u32::try_from(off), u32::try_from(fe - fs)) {
                    (Ok(off), Ok(len)) => {
                        if seen & (1 << field as u16) != 0 {
                            p.warn(
                                lineno,
                                1,
                                WarningKind::RepeatedField,
                                field.label(),
                                format!("field `{}` given twice in one block; the later value is used, as in the reference", field.label()),
                            );
                        }
                        seen |= 1 << field as u16;
                        if Field::NONFINITE.contains(&field) && has_n(&line[fs..fe]) {
                            p.flags[row] |= FLAG_MAYBE_NONFINITE;
                        }
                        if field.is_numeric() {
                            if let Some((at, bad)) = value::first_unreadable(&line[fs..fe]) {
                                p.warn(
                                    lineno,
                                    (fs + at + 1) as u64,
                                    WarningKind::MalformedNumber,
                                    field.label(),
                                    format!(
                                        "{} value `{}` is not a number; it is not compared",
                                        field.label(),
                                        lossy(bad)
                                    ),
                                );
                            }
                        } else if field.is_digest() {
                            if let Some((at, bad)) = value::first_bad_digest(&line[fs..fe]) {
                                p.warn(
                                    lineno,
                                    (fs + at + 1) as u64,
                                    WarningKind::MalformedDigest,
                                    field.label(),
                                    format!(
                                        "{} value `{}` is not 16 hex digits; that position is not compared",
                                        field.label(),
                                        lossy(bad)
                                    ),
                                );
                            }
                        }
                        if let Some(c) = table::column_of(field) {
                            p.cols[c].set(row, Rel { off, len });
                        } else if field == Field::Phase {
                            // The later Phase line wins, as in the reference.
                            p.flags[row] &= !(FLAG_BACKWARD | FLAG_OPTIMIZER | FLAG_PHASE_LINE);
                            p.flags[row] |= match &line[fs..fe] {
                                b"" => 0,
                                b"backward" => FLAG_BACKWARD,
                                b"optimizer" => FLAG_OPTIMIZER | FLAG_PHASE_LINE,
                                _ => FLAG_PHASE_LINE,
                            };
                        }
                        if len > 0 {
                            p.schema.insert(field);
                        }
                    }
                    _ => p.warn(
                        lineno,
                        1,
                        WarningKind::UnknownField,
                        field.label(),
                        "block larger than 4 GiB; field ignored".into(),
                    ),
                }
                last_nonblank_in_block = true;
            }
            LineKind::Extra => {
                last_nonblank_in_block = true;
            }
            LineKind::Unknown { label_end } => {
                let label = lossy(trim(&line[..label_end]));
                let col = (line.len() - line.trim_ascii_start().len()) as u64 + 1;
                p.warn(
                    lineno,
                    col,
                    WarningKind::UnknownField,
                    &label,
                    format!("unknown field line `{}` ignored", lossy(trim(line))),
                );
                last_nonblank_in_block = true;
            }
        }
        lineno += 1;
        match nl {
            Some(n) => pos = n + 1,
            None => {
                // The file ends without a newline: the last block may be cut short.
                if end == data.len() && in_block && last_nonblank_in_block {
                    if let Some(f) = p.flags.last_mut() {
                        *f |= FLAG_TRUNCATED;
                    }
                    p.warn(
                        lineno - 1,
                        line.len() as u64 + 1,
                        WarningKind::Truncated,
                        "truncated",
                        "last block ends without newline (possibly truncated)".into(),
                    );
                }
                pos = end;
            }
        }
    }
    // A tracer ends every block with an empty line: a log whose header gives
    // a count (so a tracer wrote it) and whose last block is not followed by
    // one was cut right after a newline. Without the header (a log cut at
    // both ends, or written by hand), the last block is taken as cut when
    // the block before it has a field that a writer prints after every
    // field the last block has (fields come in `Field::ALL` order; a block
    // may lack some, so a missing field in between is no evidence).
    let counted = has_count_header(data);
    if end == data.len() && data.last() == Some(&b'\n') && in_block && last_nonblank_in_block {
        // The block before the last one, when this chunk has it.
        let seen_before = (p.block_start.len() >= 2).then_some(seen_before);
        let cut = counted || seen_before.is_some_and(|before| ends_before(seen, before));
        if !counted && seen_before.is_none() {
            p.undecided_cut = Some((lineno, seen));
        }
        if let Some(f) = p
            .flags
            .last_mut()
            .filter(|f| cut && **f & FLAG_TRUNCATED == 0)
        {
            *f |= FLAG_TRUNCATED;
            p.warn(
                lineno,
                1,
                WarningKind::Truncated,
                "truncated",
                if counted {
                    "last block is not followed by an empty line (possibly truncated)".into()
                } else {
                    HEADERLESS_CUT.into()
                },
            );
        }
    }
    p.last_fields = (!p.block_start.is_empty()).then_some(seen);
    p.lines = lineno;
    p
}

/// The warning for a headerless log's last block taken as cut.
const HEADERLESS_CUT: &str = "last block is not followed by an empty line and ends before fields the block before it has (possibly truncated)";

/// Whether a block with fields `last` (bits by [`Field`] number) ends
/// before a field that a block with fields `before` has: a writer prints
/// fields in [`Field::ALL`] order, so a block lacking the later ones was
/// cut (one lacking fields in between may just not have them).
fn ends_before(last: u16, before: u16) -> bool {
    before.checked_shr(16 - last.leading_zeros()).unwrap_or(0) != 0
}

/// Whether the log starts with a `Total captured ...: N` line.
fn has_count_header(data: &[u8]) -> bool {
    crate::logformat::is_count_line(&data[..memchr::memchr(b'\n', data).unwrap_or(data.len())])
}

/// Reads a line before the first block into `h` ([`Header::read_line`]),
/// warning about one that does not read.
fn header_line(h: &mut Header, line: &[u8], lineno: u64, p: &mut Partial<'_>) {
    if let Err(e) = h.read_line(line) {
        p.warn(
            lineno,
            e.column,
            WarningKind::UnknownHeader,
            "header",
            e.message,
        );
    }
}

/// The root-class segments ([`key::strip_root_class`]) of the keys seen so
/// far: whether every key has the same one (`""` for keys without one).
#[derive(Clone, Copy)]
enum RootClass<'a> {
    NoKeys,
    One(&'a [u8]),
    Mixed,
}

impl<'a> RootClass<'a> {
    /// Notes one key's root-class segment (with its `.`; empty when none).
    #[inline]
    fn see(&mut self, class: &'a [u8]) {
        // Nearly always both empty: no call to compare bytes.
        *self = match *self {
            RootClass::One(c) if c.len() == class.len() && (c.is_empty() || c == class) => return,
            RootClass::NoKeys => RootClass::One(class),
            _ => RootClass::Mixed,
        };
    }
    /// Adds a later chunk's keys.
    fn join(&mut self, later: RootClass<'a>) {
        match later {
            RootClass::NoKeys => {}
            RootClass::One(c) => self.see(c),
            RootClass::Mixed => *self = RootClass::Mixed,
        }
    }
}

/// The layer lists of a log ([`layer::LayerLists::detect`] on the distinct
/// module FQNs of all its chunks), and for each chunk the layer of each of
/// its modules ([`table::NO_LAYER`]: none), by the chunk's module index.
fn layers_of_chunks(parts: &[Partial<'_>]) -> (layer::LayerLists, Vec<Vec<u32>>) {
    let mut distinct: ahash::AHashMap<&[u8], u32> = Default::default();
    for p in parts {
        for m in &p.modules {
            distinct.insert(m, table::NO_LAYER);
        }
    }
    let lists = layer::LayerLists::detect(distinct.keys().copied());
    if !lists.is_empty() {
        for (m, l) in distinct.iter_mut() {
            *l = lists
                .layer_of(m)
                .and_then(|(_, n)| u32::try_from(n).ok())
                .unwrap_or(table::NO_LAYER);
        }
    }
    let chunks = parts
        .iter()
        .map(|p| {
            p.modules
                .iter()
                .map(|m| distinct.get(m).copied().unwrap_or(table::NO_LAYER))
                .collect()
        })
        .collect();
    (lists, chunks)
}

/// The label of the [`WarningKind::Truncated`] warning of a gzip file cut
/// short ([`LogSource::GzipCut`]).
pub const GZIP_CUT_LABEL: &str = "gzip";

/// Joins partial tables in order, numbering lines, and checks the header.
fn join(source: Arc<LogSource>, path: PathBuf, parts: Vec<Partial<'_>>) -> OpTable {
    let rows: usize = parts.iter().map(|p| p.block_start.len()).sum();
    let mut t = OpTable {
        source: source.clone(),
        path,
        header: Header::default(),
        block_start: Vec::with_capacity(rows),
        line: Vec::with_capacity(rows),
        flags: Vec::with_capacity(rows),
        key_hash: Vec::with_capacity(rows),
        root_class: None,
        layer: Vec::with_capacity(rows),
        layer_lists: Default::default(),
        op_type: Vec::with_capacity(rows),
        op_names: Vec::new(),
        cols: Default::default(),
        schema: FieldSet::default(),
        warnings: Vec::new(),
        warning_counts: Vec::new(),
        total_lines: 0,
        ends_with_newline: source.bytes().last() == Some(&b'\n'),
        duplicates: Default::default(),
    };
    for col in t.cols.iter_mut() {
        col.reserve(rows);
    }
    let mut counts: ahash::AHashMap<(WarningKind, String), u64> = Default::default();
    let mut op_ids: ahash::AHashMap<&[u8], u32> = Default::default();
    let mut root_class = RootClass::NoKeys;
    // The fields of the last block so far, and the line of a headerless
    // log's last block judged cut against it.
    let mut last_fields: Option<u16> = None;
    let mut late_cut: Option<u64> = None;
    let mut line_base = 1u64; // 1-based
    let mut crlf: Option<(u64, u64)> = None;
    let (layer_lists, chunk_layers) = layers_of_chunks(&parts);
    t.layer_lists = layer_lists;
    for (mut p, layer_of) in parts.into_iter().zip(chunk_layers) {
        debug_assert!(p.start == 0 || source.bytes()[p.start] == b'[');
        if let Some(h) = p.header.take() {
            t.header = h;
        }
        t.block_start.extend_from_slice(&p.block_start);
        t.line.extend(
            p.line
                .iter()
                .map(|l| u32::try_from(l + line_base).unwrap_or(u32::MAX)),
        );
        t.flags.extend_from_slice(&p.flags);
        t.key_hash.extend_from_slice(&p.key_hash);
        root_class.join(p.root_class);
        t.layer
            .extend(p.module.iter().map(|id| layer_of[*id as usize]));
        // The chunk's op types, renumbered in the file's order of first
        // occurrence.
        let global: Vec<u32> = p
            .op_names
            .iter()
            .map(|name| {
                let next = t.op_names.len() as u32;
                let id = *op_ids.entry(name).or_insert(next);
                if id == next {
                    t.op_names.push(name.to_vec().into_boxed_slice());
                }
                id
            })
            .collect();
        t.op_type
            .extend(p.op_type.iter().map(|local| global[*local as usize]));
        for (dst, src) in t.cols.iter_mut().zip(p.cols.iter()) {
            dst.extend(src);
        }
        t.schema = t.schema.union(p.schema);
        for mut w in p.warnings {
            if t.warnings.len() < MAX_STORED_WARNINGS {
                w.line += line_base;
                t.warnings.push(w);
            }
        }
        for (k, v) in p.counts {
            *counts.entry(k).or_insert(0) += v;
        }
        if crlf.is_none() {
            crlf = p.crlf_line.map(|(l, c)| (l + line_base, c));
        }
        if let (Some((line, seen)), Some(before)) = (p.undecided_cut, last_fields) {
            late_cut = ends_before(seen, before).then_some(line + line_base);
        }
        last_fields = p.last_fields.or(last_fields);
        line_base += p.lines;
    }
    t.total_lines = line_base - 1;
    t.root_class = match root_class {
        RootClass::NoKeys => Some(Box::default()),
        RootClass::One(c) => Some(c.into()),
        RootClass::Mixed => None,
    };
    mark_optimizer_rows(&mut t.flags);
    let mut push = |t: &mut OpTable, line: u64, column: u64, kind, label: &str, message| {
        *counts.entry((kind, label.to_string())).or_insert(0) += 1;
        if t.warnings.len() < MAX_STORED_WARNINGS {
            t.warnings.push(ParseWarning {
                line,
                column,
                kind,
                label: label.to_string(),
                message,
            });
        }
    };
    if let Some(line) = late_cut {
        if let Some(f) = t.flags.last_mut() {
            *f |= FLAG_TRUNCATED;
        }
        push(
            &mut t,
            line,
            1,
            WarningKind::Truncated,
            "truncated",
            HEADERLESS_CUT.into(),
        );
    }
    if source.is_gzip_cut() {
        // The stream ends early: whatever the last block looks like, more
        // may have followed it.
        if let Some(f) = t.flags.last_mut() {
            *f |= FLAG_TRUNCATED;
        }
        let line = t.total_lines.max(1);
        let n = source.bytes().len();
        push(
            &mut t,
            line,
            1,
            WarningKind::Truncated,
            GZIP_CUT_LABEL,
            format!("gzip data cut short: read to the cut ({n} bytes of log); the last block may be incomplete"),
        );
    }
    if let Some((line, column)) = crlf {
        push(
            &mut t,
            line,
            column,
            WarningKind::Crlf,
            "crlf",
            "CR LF line ends; the CR is ignored".into(),
        );
    }
    if t.header.total.is_none() && !source.bytes().is_empty() {
        push(
            &mut t,
            1,
            1,
            WarningKind::MissingHeader,
            "header",
            "no `Total captured activations:` header line".into(),
        );
    }
    if let Some(n) = t.header.total {
        let parsed = t.len();
        if n != parsed as u64 {
            push(
                &mut t,
                1,
                1,
                WarningKind::CountMismatch,
                "count",
                format!("header declares {n} ops, parsed {parsed}"),
            );
        }
    }
    let mut c: Vec<(WarningKind, String, u64)> =
        counts.into_iter().map(|((k, l), n)| (k, l, n)).collect();
    c.sort();
    t.warning_counts = c;
    t
}

/// Flags the rows after the step's last backward op that have no `Phase:`
/// line as [`FLAG_OPTIMIZER`]: the tracer writes no Phase line for the
/// optimizer step, which runs after backward. A log without backward ops
/// keeps the reference's `forward` for every row without the line.
fn mark_optimizer_rows(flags: &mut [u8]) {
    let Some(last) = flags.iter().rposition(|f| f & FLAG_BACKWARD != 0) else {
        return;
    };
    for f in &mut flags[last + 1..] {
        if *f & FLAG_PHASE_LINE == 0 {
            *f |= FLAG_OPTIMIZER;
        }
    }
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
