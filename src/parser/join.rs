//! Joining the chunks of a log ([`super::chunk::Partial`]s, in file order)
//! into one [`OpTable`]: line numbers made file-wide, op types renumbered,
//! layers given, then the checks only the whole file can make (a cut
//! block, a cut gzip stream, CR LF line ends, the header's op count).

use std::path::PathBuf;

use rayon::prelude::*;
use std::sync::Arc;

use super::chunk::{ends_before, Partial, RootClass, Warnings, HEADERLESS_CUT};
use super::layer;
use super::source::LogSource;
use super::table::{
    self, Field, FieldSet, Header, OpTable, WarningKind, FLAG_BACKWARD, FLAG_OPTIMIZER,
    FLAG_PHASE_LINE, FLAG_TRUNCATED,
};
use super::MAX_STORED_WARNINGS;

/// The label of the [`WarningKind::Truncated`] warning of a gzip file cut
/// short ([`LogSource::GzipCut`]).
pub const GZIP_CUT_LABEL: &str = "gzip";

/// What the join carries from one chunk to the next.
struct Joining<'a> {
    /// The file's op types by name (numbered in first occurrence).
    op_ids: ahash::AHashMap<&'a [u8], u32>,
    /// The file's modules by FQN (numbered in first occurrence).
    module_ids: ahash::AHashMap<&'a [u8], u32>,
    root_class: RootClass<'a>,
    /// The fields of the last block so far.
    last_fields: Option<u16>,
    /// The line of a headerless log's last block judged cut against it.
    late_cut: Option<u64>,
    /// The 1-based line number of the chunk's first line.
    line_base: u64,
    /// The first CR LF line end: (line, column).
    crlf: Option<(u64, u64)>,
    warnings: Warnings,
}

/// Joins partial tables in order, numbering lines, and checks the header.
///
/// The chunks' own facts (header, op types and modules renumbered in file
/// order, warnings, line numbers) are joined in order on this thread; their
/// columns are then copied into the table's, each chunk's into its own rows,
/// in parallel. (A serial copy took 0.27-0.31 s of each 1 GiB log's parse,
/// as long as the whole parse of run 2 against run 1.)
pub(super) fn join(source: Arc<LogSource>, path: PathBuf, mut parts: Vec<Partial<'_>>) -> OpTable {
    let mut t = empty_table(&source, path);
    let mut j = Joining {
        op_ids: Default::default(),
        module_ids: Default::default(),
        root_class: RootClass::NoKeys,
        last_fields: None,
        late_cut: None,
        line_base: 1,
        crlf: None,
        warnings: Warnings::default(),
    };
    let (layer_lists, chunk_layers) = layers_of_chunks(&parts);
    t.layer_lists = layer_lists;
    let numbering: Vec<Numbering> = parts
        .iter_mut()
        .map(|p| {
            debug_assert!(p.start == 0 || source.bytes()[p.start] == b'[');
            j.append_facts(&mut t, p)
        })
        .collect();
    copy_columns(&mut t, parts, &numbering, &chunk_layers);
    t.total_lines = j.line_base - 1;
    t.root_class = match j.root_class {
        RootClass::NoKeys => Some(Box::default()),
        RootClass::One(c) => Some(c.into()),
        RootClass::Mixed => None,
    };
    mark_optimizer_rows(&mut t);
    let mut w = std::mem::take(&mut j.warnings);
    file_warnings(&mut t, &mut w, &source, j.late_cut, j.crlf);
    t.warnings = std::mem::take(&mut w.stored);
    t.warning_counts = w.sorted_counts();
    t
}

/// A table with no rows yet ([`copy_columns`] makes its columns).
fn empty_table(source: &Arc<LogSource>, path: PathBuf) -> OpTable {
    OpTable {
        source: source.clone(),
        path,
        header: Header::default(),
        block_start: Vec::new(),
        line: Vec::new(),
        flags: Vec::new(),
        key_hash: Vec::new(),
        root_class: None,
        layer: Vec::new(),
        layer_lists: Default::default(),
        op_type: Vec::new(),
        module: Vec::new(),
        op_names: Vec::new(),
        cols: Default::default(),
        fields: Vec::new(),
        schema: FieldSet::default(),
        warnings: Vec::new(),
        warning_counts: Vec::new(),
        total_lines: 0,
        ends_with_newline: source.bytes().last() == Some(&b'\n'),
        duplicates: Default::default(),
    }
}

/// How a chunk's rows are numbered in the table: its first line's number
/// and its module and op-type numbers in the file's.
struct Numbering {
    line_base: u64,
    module: Vec<u32>,
    op_type: Vec<u32>,
}

impl<'a> Joining<'a> {
    /// Joins chunk `p`'s facts besides its columns (which [`copy_columns`]
    /// copies): its header, root class, modules and op types numbered in
    /// the file's order of first occurrence, warnings, line ends and cut.
    fn append_facts(&mut self, t: &mut OpTable, p: &mut Partial<'a>) -> Numbering {
        let line_base = self.line_base;
        if let Some(h) = p.header.take() {
            t.header = h;
        }
        self.root_class.join(p.root_class);
        let module = p
            .modules
            .iter()
            .map(|m| {
                let next = self.module_ids.len() as u32;
                *self.module_ids.entry(m).or_insert(next)
            })
            .collect();
        let op_type = p
            .op_names
            .iter()
            .map(|name| {
                let next = t.op_names.len() as u32;
                let id = *self.op_ids.entry(name).or_insert(next);
                if id == next {
                    t.op_names.push(name.to_vec().into_boxed_slice());
                }
                id
            })
            .collect();
        t.schema = t.schema.union(p.schema);
        for mut w in std::mem::take(&mut p.warnings.stored) {
            if self.warnings.stored.len() < MAX_STORED_WARNINGS {
                w.line += line_base;
                self.warnings.stored.push(w);
            }
        }
        for (k, v) in std::mem::take(&mut p.warnings.counts) {
            *self.warnings.counts.entry(k).or_insert(0) += v;
        }
        if self.crlf.is_none() {
            self.crlf = p.crlf_line.map(|(l, c)| (l + line_base, c));
        }
        if let (Some((line, seen)), Some(before)) = (p.undecided_cut, self.last_fields) {
            self.late_cut = ends_before(seen, before).then_some(line + line_base);
        }
        self.last_fields = p.last_fields.or(self.last_fields);
        self.line_base += p.lines;
        Numbering {
            line_base,
            module,
            op_type,
        }
    }
}

/// `s` cut into consecutive slices of the lengths `lens` (which sum to
/// its length).
fn cut<'s, T>(mut s: &'s mut [T], lens: &[usize]) -> Vec<&'s mut [T]> {
    let mut out = Vec::with_capacity(lens.len());
    for &n in lens {
        let (a, b) = std::mem::take(&mut s).split_at_mut(n);
        out.push(a);
        s = b;
    }
    out
}

/// Where one chunk's rows go in the table's columns.
struct Rows<'t> {
    block_start: &'t mut [u64],
    line: &'t mut [u32],
    flags: &'t mut [u8],
    fields: &'t mut [u32],
    key_hash: &'t mut [u64],
    layer: &'t mut [u32],
    module: &'t mut [u32],
    op_type: &'t mut [u32],
    /// Each span column's offsets, then its lengths.
    spans: Vec<&'t mut [u16]>,
}

/// Copies the chunks' columns into `t`'s, each chunk's into its own rows,
/// in parallel (the columns are made zeroed, untouched until written:
/// each thread faults in the pages it writes), renumbering lines, modules,
/// op types and layers; the chunks are dropped as they are copied.
fn copy_columns(
    t: &mut OpTable,
    parts: Vec<Partial<'_>>,
    numbering: &[Numbering],
    layers: &[Vec<u32>],
) {
    let lens: Vec<usize> = parts.iter().map(|p| p.block_start.len()).collect();
    let rows: usize = lens.iter().sum();
    t.block_start = vec![0; rows];
    t.line = vec![0; rows];
    t.flags = vec![0; rows];
    t.fields = vec![0; rows];
    t.key_hash = vec![0; rows];
    t.layer = vec![0; rows];
    t.module = vec![0; rows];
    t.op_type = vec![0; rows];
    for col in t.cols.iter_mut() {
        col.off = vec![0; rows];
        col.len = vec![0; rows];
    }
    let mut spans: Vec<Vec<&mut [u16]>> = (0..lens.len()).map(|_| Vec::new()).collect();
    for col in t.cols.iter_mut() {
        for column in [&mut col.off, &mut col.len] {
            for (k, s) in cut(column, &lens).into_iter().enumerate() {
                spans[k].push(s);
            }
        }
    }
    let mut columns = (
        cut(&mut t.block_start, &lens).into_iter(),
        cut(&mut t.line, &lens).into_iter(),
        cut(&mut t.flags, &lens).into_iter(),
        cut(&mut t.fields, &lens).into_iter(),
        cut(&mut t.key_hash, &lens).into_iter(),
        cut(&mut t.layer, &lens).into_iter(),
        cut(&mut t.module, &lens).into_iter(),
        cut(&mut t.op_type, &lens).into_iter(),
    );
    let dest: Vec<Rows<'_>> = spans
        .into_iter()
        .filter_map(|spans| {
            Some(Rows {
                block_start: columns.0.next()?,
                line: columns.1.next()?,
                flags: columns.2.next()?,
                fields: columns.3.next()?,
                key_hash: columns.4.next()?,
                layer: columns.5.next()?,
                module: columns.6.next()?,
                op_type: columns.7.next()?,
                spans,
            })
        })
        .collect();
    parts
        .into_par_iter()
        .zip(dest)
        .zip(numbering)
        .zip(layers)
        .for_each(|(((p, d), n), layer_of)| {
            d.block_start.copy_from_slice(&p.block_start);
            for (dst, l) in d.line.iter_mut().zip(&p.line) {
                *dst = u32::try_from(l + n.line_base).unwrap_or(u32::MAX);
            }
            d.flags.copy_from_slice(&p.flags);
            d.fields.copy_from_slice(&p.fields);
            d.key_hash.copy_from_slice(&p.key_hash);
            for ((layer, module), id) in d.layer.iter_mut().zip(d.module.iter_mut()).zip(&p.module)
            {
                *layer = layer_of[*id as usize];
                *module = n.module[*id as usize];
            }
            for (dst, local) in d.op_type.iter_mut().zip(&p.op_type) {
                *dst = n.op_type[*local as usize];
            }
            let mut spans = d.spans.into_iter();
            for col in &p.cols {
                for src in [&col.off, &col.len] {
                    if let Some(dst) = spans.next() {
                        dst.copy_from_slice(src);
                    }
                }
            }
        });
}

/// The warnings about the whole file, after its rows: a headerless log's
/// last block cut (`late_cut`, judged across chunks), a gzip stream cut
/// short, CR LF line ends (the first at `crlf`), a missing header, and an
/// op count that differs from the rows parsed.
fn file_warnings(
    t: &mut OpTable,
    w: &mut Warnings,
    source: &LogSource,
    late_cut: Option<u64>,
    crlf: Option<(u64, u64)>,
) {
    if let Some(line) = late_cut {
        if let Some(f) = t.flags.last_mut() {
            *f |= FLAG_TRUNCATED;
        }
        w.warn(
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
        w.warn(
            line,
            1,
            WarningKind::Truncated,
            GZIP_CUT_LABEL,
            format!("gzip data cut short: read to the cut ({n} bytes of log); the last block may be incomplete"),
        );
    }
    if let Some((line, column)) = crlf {
        w.warn(
            line,
            column,
            WarningKind::Crlf,
            "crlf",
            "CR LF line ends; the CR is ignored".into(),
        );
    }
    if t.header.total.is_none() && !source.bytes().is_empty() {
        w.warn(
            1,
            1,
            WarningKind::MissingHeader,
            "header",
            format!("no `{}:` header line", crate::logformat::TOTAL_LABELS[0]),
        );
    }
    if let Some(n) = t.header.total {
        let parsed = t.len();
        if n != parsed as u64 {
            w.warn(
                1,
                1,
                WarningKind::CountMismatch,
                "count",
                format!("header declares {n} ops, parsed {parsed}"),
            );
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

/// Flags the rows without a `Phase:` line that are the optimizer step's
/// as [`FLAG_OPTIMIZER`] (the tracer writes no Phase line for the
/// optimizer step, which runs after backward):
///
/// - every row after the step's last backward op;
/// - a row after the first backward op whose Location is in torch's
///   optimizers, gradient clipping or `GradScaler` ([`is_optimizer_location`]),
///   in a run of rows without a Phase line that starts with such a row: a
///   backward after `optimizer.step()` (a logging metric's
///   `torch.autograd.grad`) leaves the step before the last backward op.
///   Only a run's first row is looked up otherwise (a row between backward
///   ops is usually a recomputed forward or an FSDP gather).
///
/// A log without backward ops (a small model whose backward ops all fall
/// under the capture's `min_numel`) has its optimizer step found by
/// Location alone: from the first row without a Phase line whose Location
/// is torch's optimizers', clipping or loss scaling's, every later row
/// without the line. A log without such a row (a forward-only capture)
/// keeps the reference's `forward` for every row without the line.
pub(super) fn mark_optimizer_rows(t: &mut OpTable) {
    let flags = &t.flags;
    let Some(last) = flags.iter().rposition(|f| f & FLAG_BACKWARD != 0) else {
        if let Some(start) = first_optimizer_row(t) {
            mark_unlined_from(&mut t.flags, start);
        }
        return;
    };
    let first = flags
        .iter()
        .position(|f| f & FLAG_BACKWARD != 0)
        .unwrap_or(last);
    let unmarked = |r: usize| flags[r] & (FLAG_PHASE_LINE | FLAG_BACKWARD) == 0;
    let mut before_last = Vec::new();
    let mut r = first + 1;
    while r < last {
        if !unmarked(r) {
            r += 1;
            continue;
        }
        // A run of rows without a Phase line: looked into only when its
        // first row is the optimizer's.
        let opt = is_optimizer_location(t.trailing_field(r, Field::Location));
        while r < last && unmarked(r) {
            if opt && is_optimizer_location(t.trailing_field(r, Field::Location)) {
                before_last.push(r);
            }
            r += 1;
        }
    }
    for r in before_last {
        t.flags[r] |= FLAG_OPTIMIZER;
    }
    mark_unlined_from(&mut t.flags, last + 1);
}

/// The first row without a `Phase:` line whose Location is an optimizer's
/// ([`is_optimizer_location`]), or `None`. Only rows keyed `<none>/…`
/// are looked at: `optimizer.step()` runs outside every module's forward,
/// and a log without backward ops is most often a forward whose rows all
/// name modules, whose Locations are then not read one by one.
fn first_optimizer_row(t: &OpTable) -> Option<usize> {
    (0..t.len()).find(|&r| {
        t.flags[r] & FLAG_PHASE_LINE == 0
            && t.key(r).starts_with(b"<none>/")
            && is_optimizer_location(t.trailing_field(r, Field::Location))
    })
}

/// Flags as [`FLAG_OPTIMIZER`] every row from `start` on that has no
/// `Phase:` line.
fn mark_unlined_from(flags: &mut [u8], start: usize) {
    for f in &mut flags[start..] {
        if *f & FLAG_PHASE_LINE == 0 {
            *f |= FLAG_OPTIMIZER;
        }
    }
}

/// The files of `torch/optim/` whose ops are an optimizer step's.
const TORCH_OPTIM_FILES: &[&[u8]] = &[
    b"optimizer.py",
    b"_functional.py",
    b"_adafactor.py",
    b"_muon.py",
    b"adadelta.py",
    b"adagrad.py",
    b"adam.py",
    b"adamax.py",
    b"adamw.py",
    b"asgd.py",
    b"lbfgs.py",
    b"nadam.py",
    b"radam.py",
    b"rmsprop.py",
    b"rprop.py",
    b"sgd.py",
    b"sparse_adam.py",
    b"swa_utils.py",
];

/// Whether a Location (`optim/adamw.py:254`, as the tracer shortens a
/// path to its last two parts, or a longer path) is in torch's optimizers
/// (a file of `torch/optim/` by name, [`TORCH_OPTIM_FILES`]: a project's
/// own `optim/lossfn.py` is not), gradient clipping
/// (`torch/nn/utils/clip_grad.py`) or loss scaling's unscale and step
/// (`torch/amp/grad_scaler.py`).
pub(super) fn is_optimizer_location(loc: &[u8]) -> bool {
    let path = match loc.iter().rposition(|&b| b == b':') {
        Some(i) => &loc[..i],
        None => loc,
    };
    if path.ends_with(b"utils/clip_grad.py") || path.ends_with(b"amp/grad_scaler.py") {
        return true;
    }
    // The folder holding the file is `optim`, and the file is torch's.
    let Some(slash) = path.iter().rposition(|&b| b == b'/') else {
        return false;
    };
    let (dir, file) = (&path[..slash], &path[slash + 1..]);
    (dir == b"optim" || dir.ends_with(b"/optim")) && TORCH_OPTIM_FILES.contains(&file)
}
