//! Parsing one chunk of a log into a [`Partial`] table: the per-line loop
//! ([`parse_range`]) and one method per kind of line ([`LineKind`]): a
//! block's key line, a field line, a line no field knows, a header line
//! before the first block; then the checks at the chunk's end (a last
//! block cut short). [`fn@super::join`] joins the chunks in order.

use super::follow::{parse_flags, Copied, Follow, Reference};
use super::line::{classify, trim, LineKind};
use super::scan::LineEnds;
use super::table::{self, Field, FieldSet, Header, ParseWarning, Rel, WarningKind};
use super::table::{OpTable, FLAG_TRUNCATED};
use super::table::{FLAG_BACKWARD, FLAG_MAYBE_NONFINITE, FLAG_OPTIMIZER, FLAG_PHASE_LINE};
use super::{key, value, MAX_STORED_WARNINGS};
use crate::logformat::{quote as lossy, Phase};

/// Warnings as they are found: the first [`MAX_STORED_WARNINGS`] stored,
/// every one counted by kind and label. A chunk and the join of the
/// chunks each collect theirs in one.
#[derive(Default)]
pub(super) struct Warnings {
    /// The stored warnings, in order.
    pub(super) stored: Vec<ParseWarning>,
    /// How many of each (kind, label).
    pub(super) counts: ahash::AHashMap<(WarningKind, String), u64>,
}

impl Warnings {
    /// Counts a warning, and stores it while fewer than
    /// [`MAX_STORED_WARNINGS`] are.
    pub(super) fn warn(
        &mut self,
        line: u64,
        column: u64,
        kind: WarningKind,
        label: &str,
        message: String,
    ) {
        *self.counts.entry((kind, label.to_string())).or_insert(0) += 1;
        if self.stored.len() < MAX_STORED_WARNINGS {
            self.stored.push(ParseWarning {
                line,
                column,
                kind,
                label: label.to_string(),
                message,
            });
        }
    }

    /// The counts, sorted by kind, then label.
    pub(super) fn sorted_counts(self) -> Vec<(WarningKind, String, u64)> {
        let mut c: Vec<(WarningKind, String, u64)> = self
            .counts
            .into_iter()
            .map(|((k, l), n)| (k, l, n))
            .collect();
        c.sort();
        c
    }
}

/// One chunk's rows. Line numbers are 0-based and relative to the chunk;
/// op types are numbered in the chunk's order of first occurrence.
pub(super) struct Partial<'a> {
    pub(super) start: usize,
    pub(super) header: Option<Header>,
    pub(super) block_start: Vec<u64>,
    pub(super) line: Vec<u64>,
    pub(super) flags: Vec<u8>,
    pub(super) key_hash: Vec<u64>,
    pub(super) root_class: RootClass<'a>,
    /// Each row's module: an index into `modules` (the join turns it into
    /// the row's layer).
    pub(super) module: Vec<u32>,
    module_ids: ahash::AHashMap<&'a [u8], u32>,
    /// The chunk's distinct module FQNs (root class stripped), in the order
    /// they first occur.
    pub(super) modules: Vec<&'a [u8]>,
    pub(super) op_type: Vec<u32>,
    op_ids: ahash::AHashMap<&'a [u8], u32>,
    /// Op types seen lately, by [`op_slot`]: (name, its number in
    /// `op_ids`), checked before the map is.
    op_cache: [(&'a [u8], u32); OP_SLOTS],
    pub(super) op_names: Vec<&'a [u8]>,
    pub(super) cols: [table::Spans; table::N_COLUMNS],
    /// Each row's fields ([`table::OpTable`]'s `fields`), written when
    /// the block after it starts and at the chunk's end.
    pub(super) fields: Vec<u32>,
    /// For copied blocks ([`Follow`]): the chunk's number of each module
    /// and op type of the reference, by the reference's number
    /// ([`NOT_SEEN`]: none yet).
    ref_modules: Vec<u32>,
    ref_ops: Vec<u32>,
    pub(super) schema: FieldSet,
    pub(super) warnings: Warnings,
    pub(super) lines: u64,
    pub(super) crlf_line: Option<(u64, u64)>,
    /// The fields of the chunk's last block (`None`: no block).
    pub(super) last_fields: Option<u16>,
    /// A headerless log's last block not followed by an empty line, alone
    /// in its chunk: (its last line, its fields), for [`fn@super::join`] to
    /// judge against the block before it (in the chunk before).
    pub(super) undecided_cut: Option<(u64, u16)>,
}

/// The per-line state of [`parse_range`] besides the rows.
struct Cursor {
    /// The line's number, 0-based within the chunk.
    lineno: u64,
    /// Whether a block has begun (lines before the first are the header).
    in_block: bool,
    /// Whether the last line was a non-blank line of a block.
    last_nonblank_in_block: bool,
    /// Fields set in the current block (bits by [`Field`] number).
    seen: u16,
    /// Fields with a value in the current block (bits by [`Field`] number;
    /// the key's included).
    valued: u16,
    /// Fields set in the block before it (0 before the chunk's second block).
    seen_before: u16,
}

impl<'a> Partial<'a> {
    /// An empty chunk starting at byte `start`, with room for `est` rows.
    fn new(start: usize, est: usize) -> Partial<'a> {
        let mut p = Partial {
            start,
            header: if start == 0 {
                Some(Header::default())
            } else {
                None
            },
            block_start: Vec::with_capacity(est),
            line: Vec::with_capacity(est),
            flags: Vec::with_capacity(est),
            key_hash: Vec::with_capacity(est),
            root_class: RootClass::NoKeys,
            module: Vec::with_capacity(est),
            module_ids: Default::default(),
            modules: Vec::new(),
            op_type: Vec::with_capacity(est),
            op_ids: Default::default(),
            op_cache: [(&[], u32::MAX); OP_SLOTS],
            op_names: Vec::new(),
            cols: Default::default(),
            fields: Vec::with_capacity(est),
            ref_modules: Vec::new(),
            ref_ops: Vec::new(),
            schema: FieldSet::default(),
            warnings: Warnings::default(),
            lines: 0,
            crlf_line: None,
            last_fields: None,
            undecided_cut: None,
        };
        for col in p.cols.iter_mut() {
            col.reserve(est);
        }
        p
    }

    fn warn(&mut self, line: u64, column: u64, kind: WarningKind, label: &str, message: String) {
        self.warnings.warn(line, column, kind, label, message);
    }

    /// A block's `[key]` line at byte `pos` (the key is `line[ks..ke]`):
    /// a new row, its key hash, module and op type.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn key_line(
        &mut self,
        hasher: &ahash::RandomState,
        pos: usize,
        lineno: u64,
        line: &'a [u8],
        ks: usize,
        ke: usize,
        closed: bool,
    ) {
        self.block_start.push(pos as u64);
        self.line.push(lineno);
        self.flags.push(0);
        for col in self.cols.iter_mut() {
            col.push(Rel::default());
        }
        let row = self.block_start.len() - 1;
        self.cols[0].set(
            row,
            Rel {
                off: ks as u32,
                len: (ke - ks) as u32,
            },
        );
        self.schema.insert(Field::Key);
        if !closed {
            self.warn(
                lineno,
                line.len() as u64 + 1,
                WarningKind::BadKeyLine,
                "key",
                format!("block header `{}` has no closing `]`", lossy(line)),
            );
        }
        let k = &line[ks..ke];
        let exact = self.see_key(k);
        self.key_hash.push(key::exact_key_hash(hasher, exact));
        if !k.is_ascii() {
            if let Err(e) = std::str::from_utf8(k) {
                self.warn(
                    lineno,
                    (ks + e.valid_up_to() + 1) as u64,
                    WarningKind::NonUtf8,
                    "key",
                    "key is not valid UTF-8; shown with replacement characters".into(),
                );
            }
        }
    }

    /// Notes the new row's key `k`: its root class, module and op type.
    /// Returns the key without its root class.
    #[inline]
    fn see_key(&mut self, k: &'a [u8]) -> &'a [u8] {
        let exact = key::strip_root_class(k);
        self.root_class.see(&k[..k.len() - exact.len()]);
        let (module, op) = key::module_and_op(exact);
        self.see_module_and_op(module, op);
        exact
    }

    /// A block at byte `pos` that copies a reference row
    /// ([`Follow::copy`]; its key line is `line`): the row's columns,
    /// key hash, fields and flags are the reference row's.
    #[inline]
    fn copied_block(&mut self, pos: usize, lineno: u64, line: &'a [u8], c: &Copied<'_>) {
        let (t, row) = (c.table, c.row);
        self.block_start.push(pos as u64);
        self.line.push(lineno);
        self.flags.push(c.flags);
        for (dst, src) in self.cols.iter_mut().zip(t.cols.iter()) {
            dst.off.push(src.off[row]);
            dst.len.push(src.len[row]);
        }
        self.key_hash.push(t.key_hash[row]);
        self.fields.push(c.fields);
        self.schema = self
            .schema
            .union(FieldSet::from_bits((c.fields >> 16) as u16));
        // The module and op type by the reference's numbers; the key is
        // read only for one the chunk has not numbered yet, or when the
        // reference's keys differ in their root class.
        let (m, o) = (t.module[row] as usize, t.op_type[row] as usize);
        let known = |ids: &[u32], i: usize| ids.get(i).copied().filter(|&id| id != NOT_SEEN);
        match (
            &t.root_class,
            known(&self.ref_modules, m),
            known(&self.ref_ops, o),
        ) {
            (Some(class), Some(module), Some(op)) => {
                self.root_class.see(&line[1..1 + class.len()]);
                self.module.push(module);
                self.op_type.push(op);
            }
            _ => {
                // (`line` starts with `[`: always a key line.)
                let (start, end) = match classify(line) {
                    LineKind::Key { start, end, .. } => (start, end),
                    _ => (1, line.len()),
                };
                self.see_key(&line[start..end]);
                let (module, op) = (self.module[row_here(self)], self.op_type[row_here(self)]);
                remember(&mut self.ref_modules, m, module);
                remember(&mut self.ref_ops, o, op);
            }
        }
    }

    /// Whether the block copying `c` can join a [`CopyRun`]: the chunk has
    /// numbered the reference row's module and op type already and the
    /// reference's keys share one root class, so that nothing of its key
    /// line needs reading ([`Partial::copied_run`]).
    #[inline]
    fn can_run(&self, c: &Copied<'_>) -> bool {
        let (t, row) = (c.table, c.row);
        let known = |ids: &[u32], i: u32| ids.get(i as usize).is_some_and(|&id| id != NOT_SEEN);
        t.root_class.is_some()
            && known(&self.ref_modules, t.module[row])
            && known(&self.ref_ops, t.op_type[row])
    }

    /// The blocks of `run` (consecutive blocks copying consecutive rows of
    /// `t`, each of which [`Partial::can_run`] took): what
    /// [`Partial::copied_block`] writes for each, one column at a time
    /// (a copy of each column's slice, where a block at a time touches
    /// two dozen columns a row).
    fn copied_run(&mut self, t: &OpTable, run: &CopyRun, data: &'a [u8]) {
        let rows = run.first..run.first + run.n;
        let (start0, line0) = (t.block_start[run.first], u64::from(t.line[run.first]));
        let pos = run.pos as u64;
        self.block_start.extend(
            t.block_start[rows.clone()]
                .iter()
                .map(|&s| pos + (s - start0)),
        );
        self.line.extend(
            t.line[rows.clone()]
                .iter()
                .map(|&l| run.lineno + (u64::from(l) - line0)),
        );
        self.flags
            .extend(t.flags[rows.clone()].iter().map(|&f| parse_flags(f)));
        for (dst, src) in self.cols.iter_mut().zip(t.cols.iter()) {
            dst.off.extend_from_slice(&src.off[rows.clone()]);
            dst.len.extend_from_slice(&src.len[rows.clone()]);
        }
        self.key_hash.extend_from_slice(&t.key_hash[rows.clone()]);
        let fields = &t.fields[rows.clone()];
        self.fields.extend_from_slice(fields);
        let valued = fields.iter().fold(0u32, |a, &f| a | f);
        self.schema = self
            .schema
            .union(FieldSet::from_bits((valued >> 16) as u16));
        let (ref_modules, ref_ops) = (&self.ref_modules, &self.ref_ops);
        self.module.extend(
            t.module[rows.clone()]
                .iter()
                .map(|&m| ref_modules[m as usize]),
        );
        self.op_type
            .extend(t.op_type[rows].iter().map(|&o| ref_ops[o as usize]));
        if let Some(class) = &t.root_class {
            // (The block starts with `[`, then the key.)
            self.root_class
                .see(&data[run.pos + 1..run.pos + 1 + class.len()]);
        }
    }

    /// Numbers the new row's module and op type (in the chunk's order of
    /// first occurrence).
    #[inline]
    fn see_module_and_op(&mut self, module: &'a [u8], op: &'a [u8]) {
        // Ops of one module come in runs: look the module up only when it
        // changes.
        let id = match self.module.last() {
            Some(&last) if self.modules[last as usize] == module => last,
            _ => {
                let next = self.modules.len() as u32;
                let id = *self.module_ids.entry(module).or_insert(next);
                if id == next {
                    self.modules.push(module);
                }
                id
            }
        };
        self.module.push(id);
        // A model has a few dozen op types, cycling: most are found in
        // the cache by one compare, without hashing the name.
        let slot = &mut self.op_cache[op_slot(op)];
        if slot.1 != u32::MAX && slot.0 == op {
            self.op_type.push(slot.1);
            return;
        }
        let next = self.op_names.len() as u32;
        let id = *self.op_ids.entry(op).or_insert(next);
        if id == next {
            self.op_names.push(op);
        }
        *slot = (op, id);
        self.op_type.push(id);
    }

    /// A field line of the current block at byte `pos`, its value
    /// `line[fs..fe]`: the row's column (or flags) set, the value checked.
    #[inline]
    #[allow(clippy::too_many_arguments)]
    fn field_line(
        &mut self,
        pos: usize,
        lineno: u64,
        line: &[u8],
        field: Field,
        fs: usize,
        fe: usize,
        seen: &mut u16,
        valued: &mut u16,
    ) {
        let row = self.block_start.len() - 1;
        let off = pos - self.block_start[row] as usize + fs;
        let (Ok(off), Ok(len)) = (u32::try_from(off), u32::try_from(fe - fs)) else {
            self.warn(
                lineno,
                1,
                WarningKind::UnknownField,
                field.label(),
                "block larger than 4 GiB; field ignored".into(),
            );
            return;
        };
        if *seen & (1 << field as u16) != 0 {
            self.warn(
                lineno,
                1,
                WarningKind::RepeatedField,
                field.label(),
                format!("field `{}` given twice in one block; the later value is used, as in the reference", field.label()),
            );
        }
        *seen |= 1 << field as u16;
        let v = &line[fs..fe];
        if NONFINITE_BITS & (1 << field as u16) != 0 && has_n(v) {
            self.flags[row] |= FLAG_MAYBE_NONFINITE;
        }
        self.check_value(lineno, field, fs, v);
        if let Some(c) = table::column_of(field) {
            self.cols[c].set(row, Rel { off, len });
        } else if field == Field::Phase {
            // The later Phase line wins, as in the reference.
            self.flags[row] &= !(FLAG_BACKWARD | FLAG_OPTIMIZER | FLAG_PHASE_LINE);
            let phase = Phase::from_name(v);
            self.flags[row] |= phase_flags(v, phase);
            if !v.is_empty() && phase.is_none() {
                // Trial 25: `Phase: sideways` split a row with no word.
                self.warn(
                    lineno,
                    (fs + 1) as u64,
                    WarningKind::UnknownPhase,
                    field.label(),
                    format!(
                        "Phase value `{}` is none of forward, backward, optimizer; read as forward",
                        lossy(v)
                    ),
                );
            }
        }
        if len > 0 {
            self.schema.insert(field);
            *valued |= field.bit();
        }
    }

    /// Warns about a number or digest value `v` (at column `fs` of its
    /// line) that does not read.
    #[inline]
    fn check_value(&mut self, lineno: u64, field: Field, fs: usize, v: &[u8]) {
        if field.is_numeric() {
            if v.is_empty() {
                // The reference reads it as absent; no writer leaves it
                // empty (trial 25: an emptied Output hash became a
                // `missing` row, exit 1, with no warning).
                self.warn(
                    lineno,
                    (fs + 1) as u64,
                    WarningKind::MalformedNumber,
                    field.label(),
                    format!(
                        "{} has no value; read as absent, as the reference does",
                        field.label()
                    ),
                );
            } else if let Some((at, bad)) = value::first_unreadable(v) {
                self.warn(
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
            if let Some((at, bad)) = value::first_bad_digest(v) {
                self.warn(
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
    }

    /// A line inside a block that is no field (its label ends at
    /// `label_end`).
    fn unknown_line(&mut self, lineno: u64, line: &[u8], label_end: usize) {
        let label = lossy(trim(&line[..label_end]));
        let col = (line.len() - line.trim_ascii_start().len()) as u64 + 1;
        // A stat's own label the reference's rule (`\s+Min:\s+value`)
        // does not read: a damaged line, whose stat the block then lacks
        // (trial 19 F4: `Min: 3.2.1 @@garbage` unindented passed, exit 0).
        if let Some(f) = crate::logformat::field::STAT_FIELDS
            .iter()
            .find(|f| f.label() == label && label_end < line.len())
        {
            self.warn(
                lineno,
                col,
                WarningKind::UnreadableStatLine,
                f.label(),
                format!(
                    "`{}` line not read as the block's {}: a stat line is indented and has a value (`  {}: <value>`)",
                    lossy(trim(line)),
                    f.label(),
                    f.label()
                ),
            );
            return;
        }
        self.warn(
            lineno,
            col,
            WarningKind::UnknownField,
            &label,
            format!("unknown field line `{}` ignored", lossy(trim(line))),
        );
    }

    /// A line before the first block (of the chunk that starts the log):
    /// read into the header ([`Header::read_line`]), warning about one
    /// that does not read.
    fn header_line(&mut self, lineno: u64, line: &[u8]) {
        let Some(h) = self.header.as_mut() else {
            return;
        };
        if let Err(e) = h.read_line(line) {
            self.warn(
                lineno,
                e.column,
                WarningKind::UnknownHeader,
                "header",
                e.message,
            );
        }
    }

    /// The log ends without a newline inside a block (its last line,
    /// number `lineno`, is `line`): the last block may be cut short.
    fn ends_without_newline(&mut self, lineno: u64, line: &[u8]) {
        if let Some(f) = self.flags.last_mut() {
            *f |= FLAG_TRUNCATED;
        }
        self.warn(
            lineno,
            line.len() as u64 + 1,
            WarningKind::Truncated,
            "truncated",
            "last block ends without newline (possibly truncated)".into(),
        );
    }

    /// The log ends with a newline right after a block's last non-blank
    /// line, with no empty line after it (line `lineno` is the one after
    /// the file's last). A tracer ends every block with an empty line: a
    /// log whose header gives a count (so a tracer wrote it) was cut right
    /// after a newline. Without the header (a log cut at both ends, or
    /// written by hand), the last block is taken as cut when the block
    /// before it has a field that a writer prints after every field the
    /// last block has (fields come in `Field::ALL` order; a block may lack
    /// some, so a missing field in between is no evidence).
    fn ends_without_empty_line(&mut self, data: &[u8], lineno: u64, c: &Cursor) {
        let counted = has_count_header(data);
        // The block before the last one, when this chunk has it.
        let seen_before = (self.block_start.len() >= 2).then_some(c.seen_before);
        let cut = counted || seen_before.is_some_and(|before| ends_before(c.seen, before));
        if !counted && seen_before.is_none() {
            self.undecided_cut = Some((lineno, c.seen));
        }
        if let Some(f) = self
            .flags
            .last_mut()
            .filter(|f| cut && **f & FLAG_TRUNCATED == 0)
        {
            *f |= FLAG_TRUNCATED;
            self.warn(
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
}

/// The row flags a `Phase:` value `v` (read as `phase`) sets: none for an
/// empty value, the phase's flag and [`FLAG_PHASE_LINE`] for one that
/// names a phase (`backward` alone: the reference's only phase line), and
/// [`FLAG_PHASE_LINE`] for any other text (read as forward).
#[inline]
fn phase_flags(v: &[u8], phase: Option<Phase>) -> u8 {
    match phase {
        _ if v.is_empty() => 0,
        Some(Phase::Backward) => FLAG_BACKWARD,
        Some(Phase::Optimizer) => FLAG_OPTIMIZER | FLAG_PHASE_LINE,
        Some(Phase::Forward) | None => FLAG_PHASE_LINE,
    }
}

/// [`Partial`]'s `ref_modules` and `ref_ops`: no number yet.
const NOT_SEEN: u32 = u32::MAX;

/// The index of the chunk's last row.
fn row_here(p: &Partial<'_>) -> usize {
    p.block_start.len() - 1
}

/// Notes that the reference's number `i` is the chunk's `id`.
fn remember(ids: &mut Vec<u32>, i: usize, id: u32) {
    if ids.len() <= i {
        ids.resize(i + 1, NOT_SEEN);
    }
    ids[i] = id;
}

/// Slots of [`Partial`]'s cache of op types.
const OP_SLOTS: usize = 32;

/// An op type's slot in that cache: from its length and last two bytes
/// (`mm`, `bmm`, `add`, `add_`, `mul` fall in different slots).
#[inline]
fn op_slot(op: &[u8]) -> usize {
    let [a, b] = match op {
        [.., a, b] => [*a, *b],
        [b] => [0, *b],
        [] => [0, 0],
    };
    (op.len() ^ usize::from(a).wrapping_mul(5) ^ usize::from(b).wrapping_mul(3)) % OP_SLOTS
}

/// [`Field::NONFINITE`] as bits by field number (one test per field line
/// instead of a search of the list).
const NONFINITE_BITS: u16 = {
    let mut bits = 0u16;
    let mut i = 0;
    while i < Field::NONFINITE.len() {
        bits |= 1 << Field::NONFINITE[i] as u16;
        i += 1;
    }
    bits
};

/// Whether `v` holds an `n` or `N` (so may spell a NaN or an infinity).
/// Branch-free over the bytes: these values are short, and a loop without
/// an early exit compiles to a few vector instructions.
#[inline]
fn has_n(v: &[u8]) -> bool {
    v.iter()
        .fold(0u8, |acc, b| acc | u8::from((b | 0x20) == b'n'))
        != 0
}

/// Parses bytes `start..end` of `data`. `start` is 0 or the first byte of a
/// line. With a `reference` (the other run's log of the pair, parsed), a
/// block that is byte-identical to one of its blocks copies that row
/// ([`Follow`]); the result is the same.
pub(super) fn parse_range<'a>(
    data: &'a [u8],
    start: usize,
    end: usize,
    reference: Option<&Reference<'_>>,
) -> Partial<'a> {
    // Rows of this chunk, estimated from its size (blocks of real logs are
    // 150 bytes or more): reserving once saves the growth copies, and pages
    // of a reservation never written are never touched.
    let mut p = Partial::new(start, (end - start) / 128 + 16);
    let hasher = key::hasher();
    let mut pos = start;
    let mut c = Cursor {
        lineno: 0,
        in_block: false,
        last_nonblank_in_block: false,
        seen: 0,
        valued: 0,
        seen_before: 0,
    };
    let mut follow = reference.map(Follow::new);
    // Copied blocks not yet written to `p` (written before anything else
    // reads or writes its rows).
    let mut run: Option<CopyRun> = None;
    let mut line_ends = LineEnds::new(data, start, end);
    while pos < end {
        let nl = line_ends.next();
        let line_end = nl.unwrap_or(end);
        let mut line = &data[pos..line_end];
        if line.last() == Some(&b'\r') {
            line = &line[..line.len() - 1];
            if p.crlf_line.is_none() {
                p.crlf_line = Some((c.lineno, line.len() as u64 + 1));
            }
        }
        if let (Some(f), Some(b'[')) = (follow.as_mut(), line.first()) {
            if let Some(copied) = f.copy(data, pos, end, line) {
                match &mut run {
                    // The row before is a copied one: its fields are set.
                    Some(r) if r.first + r.n == copied.row && p.can_run(&copied) => r.n += 1,
                    _ => {
                        if let Some(r) = run.take() {
                            p.copied_run(copied.table, &r, data);
                        } else {
                            c.end_row(&mut p);
                        }
                        if p.can_run(&copied) {
                            run = Some(CopyRun {
                                first: copied.row,
                                n: 1,
                                pos,
                                lineno: c.lineno,
                            });
                        } else {
                            p.copied_block(pos, c.lineno, line, &copied);
                        }
                    }
                }
                c.seen_before = c.seen;
                c.in_block = true;
                (c.seen, c.valued) = (copied.fields as u16, (copied.fields >> 16) as u16);
                c.last_nonblank_in_block = true;
                c.lineno += copied.lines;
                pos += copied.len;
                line_ends = LineEnds::new(data, pos, end);
                continue;
            }
        }
        if let (Some(r), Some(f)) = (run.take(), &follow) {
            p.copied_run(f.table(), &r, data);
        }
        c.last_nonblank_in_block = match classify(line) {
            LineKind::Key {
                start: ks,
                end: ke,
                closed,
            } => {
                c.end_row(&mut p);
                c.seen_before = c.seen;
                c.in_block = true;
                c.seen = 0;
                c.valued = Field::Key.bit();
                p.key_line(&hasher, pos, c.lineno, line, ks, ke, closed);
                p.fields.push(0);
                true
            }
            LineKind::Blank => false,
            _ if !c.in_block => {
                p.header_line(c.lineno, line);
                false
            }
            LineKind::Field {
                field,
                start: fs,
                end: fe,
            } => {
                p.field_line(
                    pos,
                    c.lineno,
                    line,
                    field,
                    fs,
                    fe,
                    &mut c.seen,
                    &mut c.valued,
                );
                true
            }
            LineKind::Extra => true,
            LineKind::Unknown { label_end } => {
                p.unknown_line(c.lineno, line, label_end);
                true
            }
        };
        c.lineno += 1;
        match nl {
            Some(n) => pos = n + 1,
            None => {
                if end == data.len() && c.in_block && c.last_nonblank_in_block {
                    p.ends_without_newline(c.lineno - 1, line);
                }
                pos = end;
            }
        }
    }
    if let (Some(r), Some(f)) = (run.take(), &follow) {
        p.copied_run(f.table(), &r, data);
    }
    if end == data.len() && data.last() == Some(&b'\n') && c.in_block && c.last_nonblank_in_block {
        p.ends_without_empty_line(data, c.lineno, &c);
    }
    c.end_row(&mut p);
    p.last_fields = (!p.block_start.is_empty()).then_some(c.seen);
    p.lines = c.lineno;
    p
}

/// Consecutive blocks of a chunk that copy consecutive reference rows
/// `first..first + n` ([`Follow::copy`]), not yet written to its rows
/// ([`Partial::copied_run`]): the first at byte `pos` of the log, on line
/// `lineno` of the chunk. Blocks that agree come in long runs, so
/// their rows are written a column at a time.
struct CopyRun {
    first: usize,
    n: usize,
    pos: usize,
    lineno: u64,
}

impl Cursor {
    /// Writes the current block's fields to its row (the chunk's last
    /// row), when the next block starts or the chunk ends.
    #[inline]
    fn end_row(&self, p: &mut Partial<'_>) {
        if let Some(f) = p.fields.last_mut() {
            *f = u32::from(self.seen) | u32::from(self.valued) << 16;
        }
    }
}

/// The warning for a headerless log's last block taken as cut.
pub(super) const HEADERLESS_CUT: &str = "last block is not followed by an empty line and ends before fields the block before it has (possibly truncated)";

/// Whether a block with fields `last` (bits by [`Field`] number) ends
/// before a field that a block with fields `before` has: a writer prints
/// fields in [`Field::ALL`] order, so a block lacking the later ones was
/// cut (one lacking fields in between may just not have them).
pub(super) fn ends_before(last: u16, before: u16) -> bool {
    before.checked_shr(16 - last.leading_zeros()).unwrap_or(0) != 0
}

/// Whether the log starts with a `Total captured ...: N` line.
fn has_count_header(data: &[u8]) -> bool {
    crate::logformat::is_count_line(&data[..memchr::memchr(b'\n', data).unwrap_or(data.len())])
}

/// The root-class segments ([`key::strip_root_class`]) of the keys seen so
/// far: whether every key has the same one (`""` for keys without one).
#[derive(Clone, Copy)]
pub(super) enum RootClass<'a> {
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
    pub(super) fn join(&mut self, later: RootClass<'a>) {
        match later {
            RootClass::NoKeys => {}
            RootClass::One(c) => self.see(c),
            RootClass::Mixed => *self = RootClass::Mixed,
        }
    }
}
