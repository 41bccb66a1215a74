//! The columnar op table: one row per captured op block.
//!
//! Strings are never copied out of the log. The fields that matching reads
//! for every row (key, Shape, the four stats, Output hash, Input hashes and
//! the capture agent's digests) are columns of byte ranges relative to the
//! block start (a `u16` offset and a `u16` length each; a value that starts
//! or runs 64 KiB or more into its block is marked and found by re-reading
//! the block); the others (L1 norm, Input producers, Location, Phase text)
//! are found by re-reading the block when asked for, which only the report
//! and the root-cause analysis do, for the rows they show. A row costs
//! about 69 bytes whatever its text length (29 of row data, 4 per column).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::source::LogSource;
pub use crate::logformat::{Field, FieldSet, Header, Phase, Precision, N_FIELDS};

/// A byte range relative to the start of its block. `len == 0` means the
/// field is absent (the reference treats an absent field and an empty one
/// alike).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Rel {
    /// Offset from the block start, in bytes.
    pub off: u32,
    /// Length in bytes; 0 when absent.
    pub len: u32,
}

/// A problem found while parsing that did not stop the parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParseWarning {
    /// 1-based line number.
    pub line: u64,
    /// 1-based column (in bytes).
    pub column: u64,
    /// What kind of problem, for grouping ("unknown field line", ...).
    pub kind: WarningKind,
    /// The label it is counted under (`Call type` for an unknown field line).
    pub label: String,
    /// Human-readable detail.
    pub message: String,
}

/// Kinds of [`ParseWarning`]. Serialised (in `summary.json`'s
/// `warning_counts`) as the variant's name, `UnknownField`: part of the
/// public schema, so never renamed silently.
#[derive(
    Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, serde::Serialize, serde::Deserialize,
)]
#[serde(rename_all = "PascalCase")]
pub enum WarningKind {
    /// A line inside a block that is no known field (`Call type: ...`).
    UnknownField,
    /// A line before the first block that is no known header line.
    UnknownHeader,
    /// No `Total captured activations` header line.
    MissingHeader,
    /// Bytes that are not UTF-8 in a key or location.
    NonUtf8,
    /// CR LF line ends.
    Crlf,
    /// The file ends without a final newline inside a block.
    Truncated,
    /// The header's op count differs from the blocks parsed.
    CountMismatch,
    /// A `[` line without a closing `]`.
    BadKeyLine,
    /// The same key twice in one file.
    DuplicateKey,
    /// A field given twice in one block (the later one wins, as in the reference).
    RepeatedField,
    /// A `Phase:` value that is none of `forward`, `backward`,
    /// `optimizer` (read as forward with a phase line).
    UnknownPhase,
    /// An `Output digest:` / `Input digests:` value that is not 16 hex digits.
    MalformedDigest,
    /// A number (a stat, an Output hash or Input hashes value) that is not
    /// Python `float()` syntax: two dots, stray letters, an empty value.
    MalformedNumber,
    /// A line inside a block with a stat's label (`Min:`, `Shape:`, ...)
    /// that the reference's rules do not read as that stat (no indentation
    /// before it, or no value after it): the block's stat is lost, so the
    /// log is incomplete, as for a [`WarningKind::MalformedNumber`].
    UnreadableStatLine,
}

/// [`OpTable::layer`]'s "no layer index" (also for one past `u32`).
pub(crate) const NO_LAYER: u32 = u32::MAX;

/// Row flag: the block was cut short (the file ends inside it without a final newline).
pub const FLAG_TRUNCATED: u8 = 1;
/// Row flag: `Phase: backward`.
pub const FLAG_BACKWARD: u8 = 2;
/// Row flag: the row is in the optimizer step: `Phase: optimizer`, or no
/// `Phase:` line after the step's last backward op ([`OpTable::phase_kind`]).
pub const FLAG_OPTIMIZER: u8 = 8;
/// Row flag: the block has a non-empty `Phase:` line other than `backward`.
pub const FLAG_PHASE_LINE: u8 = 16;
/// Row flag: a value that can hold a NaN or an infinity (L1/L2 norm, Min,
/// Max, Mean, Output hash) has an `n` or `N` in it. Without it the row is
/// all finite (`%.6e` numbers have no `n`), so the matcher skips the closer
/// look ([`OpTable::maybe_nonfinite`]).
pub const FLAG_MAYBE_NONFINITE: u8 = 4;

/// Fields kept as columns, in column order; the rest are re-read from the block.
pub(crate) const COLUMNS: [Field; 10] = [
    Field::Key,
    Field::Shape,
    Field::L2Norm,
    Field::Min,
    Field::Max,
    Field::Mean,
    Field::OutputHash,
    Field::InputHashes,
    Field::OutputDigest,
    Field::InputDigests,
];

/// The most bytes of a block [`OpTable::prefetch_block`] asks for (a
/// generated op block is about 340 bytes).
pub const PREFETCH_BLOCK_BYTES: usize = 512;

/// Column index of `f`, if it is a column.
#[inline]
pub(crate) fn column_of(f: Field) -> Option<usize> {
    match f {
        Field::Key => Some(0),
        Field::Shape => Some(1),
        Field::L2Norm => Some(2),
        Field::Min => Some(3),
        Field::Max => Some(4),
        Field::Mean => Some(5),
        Field::OutputHash => Some(6),
        Field::InputHashes => Some(7),
        Field::OutputDigest => Some(8),
        Field::InputDigests => Some(9),
        _ => None,
    }
}

/// Number of columns.
pub(crate) const N_COLUMNS: usize = COLUMNS.len();

/// Length marker: the value is at least this long; its end is found by
/// reading to the end of its line.
pub(crate) const LONG: u16 = u16::MAX;

/// Offset marker: the value starts 64 KiB or more into its block; it is
/// found by reading the block again.
pub(crate) const FAR: u16 = u16::MAX;

/// One column of byte ranges, relative to each row's block start: 4 bytes
/// a row (values that start or run past 64 KiB are marked and re-read).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Spans {
    pub(crate) off: Vec<u16>,
    pub(crate) len: Vec<u16>,
}

impl Spans {
    pub(crate) fn push(&mut self, r: Rel) {
        self.off.push(r.off.min(FAR as u32) as u16);
        self.len.push(r.len.min(LONG as u32) as u16);
    }
    pub(crate) fn set(&mut self, row: usize, r: Rel) {
        self.off[row] = r.off.min(FAR as u32) as u16;
        self.len[row] = r.len.min(LONG as u32) as u16;
    }
    pub(crate) fn reserve(&mut self, n: usize) {
        self.off.reserve_exact(n);
        self.len.reserve_exact(n);
    }
}

/// Columns of one parsed log. Built by [`crate::parser::parse_bytes`] or
/// [`crate::parser::parse_path`]; read by the matcher and the report.
///
/// Row `i` is the `i`-th block in dispatch (file) order.
#[derive(Clone)]
pub struct OpTable {
    pub(crate) source: Arc<LogSource>,
    pub(crate) path: PathBuf,
    pub(crate) header: Header,
    pub(crate) block_start: Vec<u64>,
    pub(crate) line: Vec<u32>,
    pub(crate) flags: Vec<u8>,
    /// Each row's key hash ([`super::key::key_hash`]), computed while
    /// parsing.
    pub(crate) key_hash: Vec<u64>,
    /// The root-class segment every key starts with (with its `.`; empty
    /// when no key has one), or `None` when the keys differ in it.
    pub(crate) root_class: Option<Box<[u8]>>,
    /// Each row's layer index ([`super::layer::LayerLists::layer_of`];
    /// [`NO_LAYER`]: none).
    pub(crate) layer: Vec<u32>,
    /// The lists whose items are this log's layers, found from its keys.
    pub(crate) layer_lists: super::layer::LayerLists,
    /// Each row's op type: an index into `op_names`.
    pub(crate) op_type: Vec<u32>,
    /// Each row's module FQN (root class stripped), numbered in the
    /// order the log first names it: rows of one module share the number.
    /// A parse against this table copies it instead of reading a copied
    /// block's key again; value re-pairing finds fuzzy keys by it.
    pub(crate) module: Vec<u32>,
    /// The op names of the table ([`super::key::module_and_op`]), in the
    /// order they first occur.
    pub(crate) op_names: Vec<Box<[u8]>>,
    pub(crate) cols: [Spans; N_COLUMNS],
    /// Each row's fields as its block gives them: bit `i` of the low 16
    /// bits set when a line of field number `i` is in the block, of the
    /// high 16 when one has a value (the block's share of `schema`).
    /// What a parse against this table ([`crate::parser::parse_path_against`])
    /// copies for a block it finds byte-identical.
    pub(crate) fields: Vec<u32>,
    pub(crate) schema: FieldSet,
    pub(crate) warnings: Vec<ParseWarning>,
    pub(crate) warning_counts: Vec<(WarningKind, String, u64)>,
    pub(crate) total_lines: u64,
    pub(crate) ends_with_newline: bool,
    /// Cache of [`crate::parser::duplicate_keys`].
    pub(crate) duplicates: std::sync::OnceLock<Vec<(String, Vec<u64>)>>,
}

impl std::fmt::Debug for OpTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OpTable")
            .field("path", &self.path)
            .field("rows", &self.len())
            .field("header", &self.header)
            .finish()
    }
}

impl OpTable {
    /// Number of op rows (blocks).
    pub fn len(&self) -> usize {
        self.block_start.len()
    }
    /// Whether the log had no blocks.
    pub fn is_empty(&self) -> bool {
        self.block_start.is_empty()
    }
    /// About how many bytes of heap the table holds: its columns, and
    /// the log's bytes when they are in memory (gzip, a pipe) rather than
    /// mapped. An estimate for keeping tables within a memory bound (a
    /// step series keeps the first diverging step's, `run::steps`).
    pub fn heap_bytes(&self) -> usize {
        fn v<T>(x: &Vec<T>) -> usize {
            x.capacity() * std::mem::size_of::<T>()
        }
        let cols: usize = self.cols.iter().map(|c| v(&c.off) + v(&c.len)).sum();
        let owned = if self.source.is_owned() {
            self.source.bytes().len()
        } else {
            0
        };
        v(&self.block_start)
            + v(&self.line)
            + v(&self.flags)
            + v(&self.key_hash)
            + v(&self.layer)
            + v(&self.op_type)
            + v(&self.fields)
            + v(&self.module)
            + cols
            + owned
    }
    /// Frees the column only a parse against this table reads (each
    /// row's fields, 4 bytes a row), once the other log of its pair is
    /// parsed ([`crate::parser::parse_path_against`]); a later parse
    /// against it copies no block.
    pub fn drop_reference_columns(&mut self) {
        self.fields = Vec::new();
    }
    /// Each row's module number (rows of one module FQN, root class
    /// stripped, share it; numbered in the order the log first names
    /// them): one `u32` a row.
    pub(crate) fn row_modules(&self) -> &[u32] {
        &self.module
    }
    /// Each row's op type ([`OpTable::op_type`]): one `u32` a row.
    pub(crate) fn row_op_types(&self) -> &[u32] {
        &self.op_type
    }
    /// The file this table was read from.
    pub fn path(&self) -> &Path {
        &self.path
    }
    /// The header lines.
    pub fn header(&self) -> &Header {
        &self.header
    }
    /// All bytes of the (decompressed) log.
    pub fn bytes(&self) -> &[u8] {
        self.source.bytes()
    }
    /// The bytes of row `row`'s block: from its `[` to the next block (or the end).
    #[inline]
    pub fn block(&self, row: usize) -> &[u8] {
        let data = self.source.bytes();
        let start = self.block_start[row] as usize;
        let end = self
            .block_start
            .get(row + 1)
            .map_or(data.len(), |e| *e as usize);
        &data[start..end]
    }
    /// The bytes of row `row`'s block after its key line: its field lines,
    /// to the next block (or the end). Every field is read from these
    /// bytes alone, so two rows whose field lines are the same bytes have
    /// the same text in every field (the matcher's fast path for pairs
    /// that agree).
    #[inline]
    pub fn block_fields(&self, row: usize) -> &[u8] {
        let b = self.block(row);
        memchr::memchr(b'\n', b).map_or(&[], |i| &b[i + 1..])
    }
    /// The text of `field` in row `row`, trimmed; empty when absent.
    #[inline]
    pub fn field(&self, row: usize, field: Field) -> &[u8] {
        let (bytes, start) = (self.source.bytes(), self.block_start[row] as usize);
        column_of(field)
            .and_then(|c| self.column_value(bytes, start, row, c))
            .unwrap_or_else(|| self.field_outlying(row, field))
    }
    /// [`OpTable::field`] of several fields of one row at once (the block
    /// found once): `fields_of(row, [Field::Min, Field::Max])`.
    #[inline]
    pub fn fields_of<const N: usize>(&self, row: usize, fields: [Field; N]) -> [&[u8]; N] {
        let (bytes, start) = (self.source.bytes(), self.block_start[row] as usize);
        fields.map(|f| {
            column_of(f)
                .and_then(|c| self.column_value(bytes, start, row, c))
                .unwrap_or_else(|| self.field_outlying(row, f))
        })
    }
    /// The common case of [`OpTable::field`], inline: column `c`'s value of
    /// row `row` (its block at `start` of `bytes`) when it is empty, or under
    /// 64 KiB and starting in the first 64 KiB of its block (a slice of the
    /// log); `None` when it must be re-read.
    #[inline(always)]
    fn column_value<'a>(
        &self,
        bytes: &'a [u8],
        start: usize,
        row: usize,
        c: usize,
    ) -> Option<&'a [u8]> {
        let col = &self.cols[c];
        let (off, len) = (col.off[row], col.len[row]);
        if len == 0 {
            return Some(&[]);
        }
        (off != FAR && len != LONG).then(|| &bytes[start + off as usize..][..len as usize])
    }
    /// [`OpTable::field`] for a non-column field, or a column value far
    /// into its block or 64 KiB long: re-read from the log.
    #[inline(never)]
    fn field_outlying(&self, row: usize, field: Field) -> &[u8] {
        match column_of(field) {
            Some(c) => {
                let col = &self.cols[c];
                let len = col.len[row];
                if len == 0 {
                    return &[];
                }
                let off = col.off[row];
                if off == FAR {
                    // 64 KiB or more into the block (never the key, at 1).
                    let all = self.scan_all(row);
                    let v = all[field as usize];
                    // A present Output hash column without an Output hash
                    // line holds the L1 norm (`use_l1_as_output_hash`).
                    return if v.is_empty() && field == Field::OutputHash {
                        all[Field::L1Norm as usize]
                    } else {
                        v
                    };
                }
                let s = (self.block_start[row] + off as u64) as usize;
                let data = self.source.bytes();
                if len == LONG {
                    // 64 KiB or more: classify its line again for the exact span.
                    let start = memchr::memrchr(b'\n', &data[..s]).map_or(0, |i| i + 1);
                    let end = memchr::memchr(b'\n', &data[s..]).map_or(data.len(), |i| s + i);
                    let mut line = &data[start..end];
                    if line.last() == Some(&b'\r') {
                        line = &line[..line.len() - 1];
                    }
                    return match super::line::classify(line) {
                        super::line::LineKind::Key {
                            start: a, end: b, ..
                        }
                        | super::line::LineKind::Field {
                            start: a, end: b, ..
                        } => &line[a..b],
                        _ => &[],
                    };
                }
                &data[s..s + len as usize]
            }
            None => self.scan_block(row, field),
        }
    }
    /// A non-column field of row `row` (the Location, the Phase) read from
    /// the block's last line backwards: the first such line found is the
    /// last occurrence, which wins, as in the parse. Cheap for the fields
    /// that end a block, also where a long Input hashes line (a fused
    /// optimizer op's) comes before them; the same value as
    /// [`OpTable::field`].
    pub fn trailing_field(&self, row: usize, field: Field) -> &[u8] {
        if column_of(field).is_some() {
            return self.field(row, field);
        }
        let body = self.block_fields(row);
        let mut end = body.len();
        while end > 0 {
            let start = memchr::memrchr(b'\n', &body[..end]).map_or(0, |i| i + 1);
            let raw = &body[start..end];
            let line = raw.strip_suffix(b"\r").unwrap_or(raw);
            if line.first() == Some(&b'[') {
                // A line the parse stops at: its rules, from the start.
                return self.scan_block(row, field);
            }
            if let super::line::LineKind::Field {
                field: f,
                start: a,
                end: b,
            } = super::line::classify(line)
            {
                if f == field {
                    return &line[a..b];
                }
            }
            end = start.saturating_sub(1);
        }
        &[]
    }
    /// The trimmed text of row `row`'s capture-agent line labelled `label`
    /// (one of [`crate::logformat::EXTRA_LABELS`]: `Parameters`, `Layout`,
    /// …), read from the block; the last occurrence wins, as for a field.
    /// Empty when the block has no such line.
    pub fn extra_field(&self, row: usize, label: &str) -> &[u8] {
        let body = self.block_fields(row);
        let mut found: &[u8] = &[];
        // Most blocks have no such line: one SIMD search says so.
        if memchr::memmem::find(body, label.as_bytes()).is_none() {
            return found;
        }
        for raw in body.split(|b| *b == b'\n') {
            let line = raw.strip_suffix(b"\r").unwrap_or(raw);
            if line.first() == Some(&b'[') {
                break;
            }
            if super::line::classify(line) == super::line::LineKind::Extra {
                if let Some(v) = crate::logformat::labelled(crate::logformat::trim(line), label) {
                    found = v;
                }
            }
        }
        found
    }
    /// The FQNs of row `row`'s `Parameters:` line (the parameters an
    /// optimizer-step op of the capture agent reads or writes,
    /// [`crate::logformat::PARAMETERS_LABEL`]), `, `-joined as written;
    /// empty when the block has none.
    pub fn parameters(&self, row: usize) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(self.extra_field(row, crate::logformat::PARAMETERS_LABEL))
    }
    /// The row's `Input parameters:` line as written (the capture agent's
    /// parameter FQN at each input, `;`-separated, empty entries where an
    /// input is none; [`crate::logformat::INPUT_PARAMETERS_LABEL`]), or
    /// "" without one.
    pub fn input_parameters(&self, row: usize) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(self.extra_field(row, crate::logformat::INPUT_PARAMETERS_LABEL))
    }
    /// Finds a non-column field by re-reading the block, with the parser's
    /// rules (the last occurrence wins).
    fn scan_block(&self, row: usize, field: Field) -> &[u8] {
        self.scan_all(row)[field as usize]
    }
    /// Every field line of row `row`'s block, by [`Field`] index ("" when
    /// absent), in one pass; the last occurrence wins, as in the parse.
    fn scan_all(&self, row: usize) -> [&[u8]; N_FIELDS] {
        let block = self.block(row);
        let mut found: [&[u8]; N_FIELDS] = [&[]; N_FIELDS];
        let mut lines = block.split(|b| *b == b'\n');
        lines.next(); // the `[key]` line
        for line in lines {
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            if line.first() == Some(&b'[') {
                break;
            }
            if let super::line::LineKind::Field {
                field: f,
                start,
                end,
            } = super::line::classify(line)
            {
                found[f as usize] = &line[start..end];
            }
        }
        found
    }
    /// Every field of row `row`, by [`Field`] index ("" when absent):
    /// the columns as [`OpTable::field`] gives them, the rest from one pass
    /// over the block (cheaper than one [`OpTable::field`] call per
    /// non-column field).
    pub fn fields(&self, row: usize) -> [&[u8]; N_FIELDS] {
        let mut all = self.scan_all(row);
        for f in Field::ALL {
            if column_of(f).is_some() {
                all[f as usize] = self.field(row, f);
            }
        }
        all
    }
    /// Bytes of text of row `row`'s column fields (key, Shape, L2 norm,
    /// Min, Max, Mean, Output hash, Input hashes, digests), from the
    /// columns alone: a cheap estimate of the row's size (a value of 64 KiB
    /// or more counts as 64 KiB).
    pub fn column_text_len(&self, row: usize) -> u64 {
        self.cols.iter().map(|c| u64::from(c.len[row])).sum()
    }
    /// Whether `field` is present in row `row`.
    #[inline]
    pub fn has(&self, row: usize, field: Field) -> bool {
        match column_of(field) {
            Some(c) => self.cols[c].len[row] != 0,
            None => !self.scan_block(row, field).is_empty(),
        }
    }
    /// [`OpTable::has`] for every row of one field, the field's column
    /// looked up once: `let has_l2 = t.presence(Field::L2Norm); has_l2(row)`.
    pub fn presence(&self, field: Field) -> impl Fn(usize) -> bool + '_ {
        let lens = column_of(field).map(|c| &self.cols[c].len[..]);
        move |row| match lens {
            Some(lens) => lens[row] != 0,
            None => self.has(row, field),
        }
    }
    /// `field` as UTF-8 text (lossy for invalid bytes).
    pub fn text(&self, row: usize, field: Field) -> std::borrow::Cow<'_, str> {
        String::from_utf8_lossy(self.field(row, field))
    }
    /// The raw key of row `row`.
    #[inline]
    pub fn key(&self, row: usize) -> &[u8] {
        // Column 0 (`COLUMNS[0]` is the key), inline: the Parquet
        // writer reads it in its per-row loop.
        let (bytes, start) = (self.source.bytes(), self.block_start[row] as usize);
        self.column_value(bytes, start, row, 0)
            .unwrap_or_else(|| self.field_outlying(row, Field::Key))
    }
    /// Hints the CPU to bring the start of row `row`'s block (its key line)
    /// into cache; does nothing for a row past the end, or off x86-64. A
    /// pass that reads the keys of rows in order, long after the parse
    /// (`--rows`), calls it some rows ahead: the blocks' irregular lengths
    /// defeat the hardware prefetcher, and each key read would otherwise
    /// wait on memory.
    #[inline]
    pub fn prefetch(&self, row: usize) {
        #[cfg(target_arch = "x86_64")]
        if let Some(&start) = self.block_start.get(row) {
            let bytes = self.source.bytes();
            if let Some(b) = bytes.get(start as usize) {
                // SAFETY: a prefetch hint never faults and reads nothing
                // the program sees; the pointer is into the mapped log.
                unsafe {
                    std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                        (b as *const u8).cast::<i8>(),
                    )
                }
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = row;
    }
    /// Hints the CPU to bring row `row`'s whole block (its first
    /// [`PREFETCH_BLOCK_BYTES`] bytes) into cache, a cache line at a time;
    /// does nothing for a row past the end, or off x86-64. A pass that
    /// judges or scans every row's fields in order calls it some rows
    /// ahead ([`OpTable::prefetch`] says why the hardware does not).
    #[inline]
    pub fn prefetch_block(&self, row: usize) {
        #[cfg(target_arch = "x86_64")]
        if let Some(&start) = self.block_start.get(row) {
            let bytes = self.source.bytes();
            let start = (start as usize).min(bytes.len());
            let end = self
                .block_start
                .get(row + 1)
                .map_or(bytes.len(), |e| (*e as usize).min(bytes.len()));
            let len = end.saturating_sub(start).min(PREFETCH_BLOCK_BYTES);
            // Plain address arithmetic (no bounds check per line): every
            // address is within `bytes`, and a hint would not fault anyway.
            let base = bytes.as_ptr().wrapping_add(start);
            let mut at = 0;
            while at < len {
                // SAFETY: a prefetch hint never faults and reads nothing
                // the program sees.
                unsafe {
                    std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(
                        base.wrapping_add(at).cast::<i8>(),
                    )
                }
                at += 64;
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = row;
    }
    /// The raw key as text (lossy).
    pub fn key_str(&self, row: usize) -> std::borrow::Cow<'_, str> {
        self.text(row, Field::Key)
    }
    /// 1-based line number of the block's `[key]` line.
    pub fn line(&self, row: usize) -> u64 {
        self.line[row] as u64
    }
    /// Byte offset of the block's `[` in the file.
    pub fn block_offset(&self, row: usize) -> u64 {
        self.block_start[row]
    }
    /// Every row's `(key hash, row)`, sorted: rows of one key are
    /// consecutive, in file order ([`super::key`]). Built on each call (a
    /// bucket sort of the hashes the parser computed; 16 bytes per row):
    /// build it once and pass it on ([`crate::parser::duplicate_keys_from`],
    /// [`crate::matcher::match_tables_indexed`]).
    pub fn key_index(&self) -> super::key::KeyIndex {
        super::key::sorted_index(&self.key_hash)
    }
    /// Row `row`'s key hash ([`super::key::key_hash`]): equal keys
    /// (without their root class) hash alike; compare the keys to be sure.
    #[inline]
    pub fn key_hash(&self, row: usize) -> u64 {
        self.key_hash[row]
    }
    /// The root-class segment ([`super::key::strip_root_class`]) that
    /// every key of the table starts with, `.` included (`FSDPLlama3Model.`,
    /// or empty when no key has one); `None` when the keys differ in it.
    /// Two tables with the same one have equal raw keys wherever their
    /// exact keys are equal.
    pub fn root_class(&self) -> Option<&[u8]> {
        self.root_class.as_deref()
    }
    /// Whether every key of the table is valid UTF-8 (no
    /// [`WarningKind::NonUtf8`] warning on a key).
    pub fn keys_are_utf8(&self) -> bool {
        !self
            .warning_counts
            .iter()
            .any(|(kind, label, n)| *kind == WarningKind::NonUtf8 && label == "key" && *n > 0)
    }
    /// Row `row`'s layer index, if any: the item index after the outermost
    /// repeated block list on its module FQN (`blocks.<N>`, `layers.<N>`,
    /// `h.<N>`; [`super::layer`]).
    #[inline]
    pub fn layer(&self, row: usize) -> Option<u32> {
        Some(self.layer[row]).filter(|l| *l != NO_LAYER)
    }
    /// The lists whose items are this log's layers ([`super::layer`]),
    /// found once from its distinct module FQNs.
    pub fn layer_lists(&self) -> &super::layer::LayerLists {
        &self.layer_lists
    }
    /// Row `row`'s op type: an id for its op name (the key after
    /// `/op_<seq>_`), numbered from 0 in the order names first occur in the
    /// log; [`OpTable::op_name`] gives the name.
    #[inline]
    pub fn op_type(&self, row: usize) -> u32 {
        self.op_type[row]
    }
    /// The op name of op type `id` (`mm`, `add_`; empty for keys without an
    /// `/op_<seq>_` segment).
    pub fn op_name(&self, id: u32) -> &[u8] {
        &self.op_names[id as usize]
    }
    /// Number of op types (distinct op names) of the table.
    pub fn op_types(&self) -> usize {
        self.op_names.len()
    }
    /// Whether the log is a gzip file cut short, read to the cut
    /// ([`LogSource::GzipCut`]): incomplete input, its last row truncated.
    pub fn gzip_cut(&self) -> bool {
        self.source.is_gzip_cut()
    }
    /// Whether the block was cut short by the end of the file.
    pub fn is_truncated(&self, row: usize) -> bool {
        self.flags[row] & FLAG_TRUNCATED != 0
    }
    /// Whether one of the row's L1/L2 norm, Min, Max, Mean or Output hash
    /// values has an `n` or `N` in it (so may hold a NaN or an infinity).
    /// `false` means none of them does.
    pub fn maybe_nonfinite(&self, row: usize) -> bool {
        self.flags[row] & FLAG_MAYBE_NONFINITE != 0
    }
    /// The log's float precision (the `Precision:` header line).
    pub fn precision(&self) -> Precision {
        self.header.precision
    }
    /// Whether any block has an `Output digest:` or `Input digests:` line.
    pub fn has_digests(&self) -> bool {
        self.schema.contains(Field::OutputDigest) || self.schema.contains(Field::InputDigests)
    }
    /// Row `row`'s digests in `field` ([`Field::OutputDigest`] or
    /// [`Field::InputDigests`]), one per value, aligned with the Output hash
    /// / Input hashes values: `None` for a malformed one (warned at parse
    /// with its line and column). No items when the line is absent.
    pub fn digests(&self, row: usize, field: Field) -> impl Iterator<Item = Option<u64>> + '_ {
        debug_assert!(field.is_digest());
        super::value::digests(self.field(row, field))
    }
    /// Whether the row is in the backward phase (`Phase: backward`).
    pub fn is_backward(&self, row: usize) -> bool {
        self.flags[row] & FLAG_BACKWARD != 0
    }
    /// Row `row`'s phase: `backward` for `Phase: backward`, `optimizer`
    /// for `Phase: optimizer` and for a row without a Phase line after the
    /// step's last backward op, else `forward` (the reference's default;
    /// also for a Phase text actdiff does not know, which
    /// [`OpTable::phase`] shows as written).
    #[inline]
    pub fn phase_kind(&self, row: usize) -> Phase {
        let f = self.flags[row];
        if f & FLAG_BACKWARD != 0 {
            Phase::Backward
        } else if f & FLAG_OPTIMIZER != 0 {
            Phase::Optimizer
        } else {
            Phase::Forward
        }
    }
    /// The phase as text: the Phase line's text when the block has one,
    /// else `optimizer` or `forward` as [`OpTable::phase_kind`] says.
    pub fn phase(&self, row: usize) -> std::borrow::Cow<'_, str> {
        if self.is_backward(row) {
            return std::borrow::Cow::Borrowed("backward");
        }
        if self.flags[row] & FLAG_PHASE_LINE == 0 {
            return std::borrow::Cow::Borrowed(self.phase_kind(row).as_str());
        }
        if !self.schema.contains(Field::Phase) {
            return std::borrow::Cow::Borrowed("forward");
        }
        match self.scan_block(row, Field::Phase) {
            b"" => std::borrow::Cow::Borrowed("forward"),
            t => String::from_utf8_lossy(t),
        }
    }
    /// Which fields occur in at least one block.
    pub fn schema(&self) -> FieldSet {
        self.schema
    }
    /// Warnings, at most [`super::MAX_STORED_WARNINGS`] stored; see
    /// [`OpTable::warning_counts`] for totals.
    pub fn warnings(&self) -> &[ParseWarning] {
        &self.warnings
    }
    /// Every warning counted by kind and label (e.g. `(UnknownField, "Call type", 3)`).
    pub fn warning_counts(&self) -> &[(WarningKind, String, u64)] {
        &self.warning_counts
    }
    /// Number of lines in the file.
    pub fn total_lines(&self) -> u64 {
        self.total_lines
    }
    /// Whether the file's last byte is a newline.
    pub fn ends_with_newline(&self) -> bool {
        self.ends_with_newline
    }
    /// Treats `L1 norm` as the Output hash in blocks that have no Output
    /// hash (old writers logged the L1 norm, which is what the hash is;
    /// `--l1-equals-hash`). Returns the number of rows changed.
    pub fn use_l1_as_output_hash(&mut self) -> usize {
        if !self.schema.contains(Field::L1Norm) {
            return 0;
        }
        let out = column_of(Field::OutputHash).expect("a column");
        let mut n = 0;
        for row in 0..self.len() {
            if self.has(row, Field::OutputHash) {
                continue;
            }
            let l1 = self.field(row, Field::L1Norm);
            if !l1.is_empty() {
                let off = (l1.as_ptr() as usize - self.source.bytes().as_ptr() as usize) as u64
                    - self.block_start[row];
                let rel = Rel {
                    off: off as u32,
                    len: l1.len() as u32,
                };
                self.cols[out].set(row, rel);
                n += 1;
            }
        }
        if n > 0 {
            self.schema.insert(Field::OutputHash);
        }
        n
    }

    /// Number of rows flagged truncated.
    pub fn truncated_rows(&self) -> usize {
        self.flags
            .iter()
            .filter(|f| **f & FLAG_TRUNCATED != 0)
            .count()
    }
}
