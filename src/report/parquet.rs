//! `--rows FILE.parquet`: every result row of every rank as one Parquet
//! table with typed columns, for DuckDB, Spark or pandas. The extension
//! chooses it (anything else is JSON Lines, [`super::rows`]).
//!
//! Ranks are compared in parallel; each builds its rows, beside its pages,
//! in batches of [`BATCH_ROWS`] (a window of batches at a time, built on all worker
//! threads) and sends them through a bounded channel to one writer thread,
//! which encodes and compresses the columns in parallel on the rayon pool
//! and writes a row group every [`ROW_GROUP_ROWS`] rows while the ranks go
//! on. Memory stays bounded by a
//! window of batches per rank, [`QUEUE_BATCHES`] in the channel and one row
//! group, whatever the number of rows. Batches of different ranks may interleave in the file:
//! order by `rank, row` for result order. The parts of a sharded compare
//! each write their own file; read them as one table with a glob
//! (`read_parquet('parts/*/rows.parquet')`).
//!
//! Columns (nullable where a side or value can be absent; the text
//! columns of few values, `status` to `op` and `cause`, are Arrow
//! dictionaries in memory and plain UTF-8 in the file):
//! `rank` u32 (run 1's), `rank2` u32, `row` u32 (result row index),
//! `key1`, `key2` utf8, `line1`, `line2` u64 (1-based block lines),
//! `status` utf8 (`match`, `diff`, `only1`, `only2`, `truncated`, `missing`),
//! `pass` utf8 (`override`, `exact`, `fuzzy`, `stats`; null when unpaired),
//! `phase` utf8, `op` utf8 (op name), `layer` u32 (`layers.N`),
//! `diff_shape`, `diff_l2_norm`, `diff_min`, `diff_max`, `diff_mean` f64 (the
//! reference's per-stat relative differences, `rows` JSON `diffs`; 0 when
//! both texts are equal, null when a side lacks the field),
//! `diff_output_hash`, `diff_input_hashes` f64 (largest relative difference
//! of the values; 0 when the texts are equal; null when a side lacks it),
//! `gates` bool (the row fails the run), `cause` utf8 (`origin`, `entry`,
//! `inherited`, `inherited_below_print`, `inherited_untraced`,
//! `via_collective`, `unsynced`, as in `summary.json`; null for rows
//! without a cause class).

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rayon::prelude::*;

use arrow_array::builder::BinaryBuilder;
use arrow_array::types::{ArrowPrimitiveType, UInt32Type, UInt64Type, UInt8Type};
use arrow_array::{
    ArrayRef, BinaryArray, BooleanArray, DictionaryArray, Float64Array, PrimitiveArray,
    RecordBatch, StringArray, UInt32Array, UInt8Array,
};
use arrow_buffer::{BooleanBuffer, NullBuffer, ScalarBuffer};
use arrow_schema::{DataType, Field as Column, Schema, SchemaRef};
use parquet::arrow::arrow_writer::{compute_leaves, ArrowColumnWriter, ArrowRowGroupWriterFactory};
use parquet::arrow::{add_encoded_arrow_schema_to_metadata, ArrowSchemaConverter};
use parquet::basic::{Compression, Encoding};
use parquet::errors::ParquetError;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::ColumnPath;

use super::RankComparison;
use crate::matcher::cause::CauseKind;
use crate::matcher::compare::{field_diff, stat_diffs};
use crate::matcher::{MatchRow, Sides, Status, Strategy, NO_ROW, ROW_SAME_TEXT};
use crate::parser::{Field, OpTable};

/// Rows per record batch handed to the writer.
pub const BATCH_ROWS: usize = 64 * 1024;

/// Rows per Parquet row group.
pub const ROW_GROUP_ROWS: usize = 1024 * 1024;

/// How many rows ahead the batch loop asks for the blocks it will read
/// ([`OpTable::prefetch`]).
const PREFETCH_ROWS: usize = 32;

/// Batches waiting for the writer thread at most.
pub const QUEUE_BATCHES: usize = 8;

/// Whether `path` names a Parquet file (extension `.parquet`, any case).
pub fn is_parquet_path(path: &Path) -> bool {
    path.extension()
        .and_then(|e| e.to_str())
        .is_some_and(|e| e.eq_ignore_ascii_case("parquet"))
}

/// The table's schema (see the module documentation).
pub fn schema() -> SchemaRef {
    let f = |name: &str, t: DataType, nullable: bool| Column::new(name, t, nullable);
    let mut cols = vec![
        f("rank", DataType::UInt32, false),
        f("rank2", DataType::UInt32, false),
        f("row", DataType::UInt32, false),
        f("key1", DataType::Utf8, true),
        f("key2", DataType::Utf8, true),
        f("line1", DataType::UInt64, true),
        f("line2", DataType::UInt64, true),
        f("status", text_codes(DataType::UInt8), false),
        f("pass", text_codes(DataType::UInt8), true),
        f("phase", text_codes(DataType::UInt32), false),
        f("op", text_codes(DataType::UInt32), false),
        f("layer", DataType::UInt32, true),
    ];
    for name in DIFF_COLUMNS {
        cols.push(f(name, DataType::Float64, true));
    }
    cols.push(f("gates", DataType::Boolean, false));
    cols.push(f("cause", text_codes(DataType::UInt8), true));
    Arc::new(Schema::new(cols))
}

/// A text column of few distinct values, built as an Arrow dictionary
/// with `key` codes. In the file it is a plain UTF-8 column: readers see
/// text (pyarrow gives it back as a dictionary).
fn text_codes(key: DataType) -> DataType {
    DataType::Dictionary(Box::new(key), Box::new(DataType::Utf8))
}

/// The integer columns stored delta-encoded and uncompressed.
const DELTA_INTEGERS: [&str; 6] = ["rank", "rank2", "row", "line1", "line2", "layer"];

/// The difference columns: [`Field::DIFF_STATS`] in order, then the hashes.
const DIFF_COLUMNS: [&str; 7] = [
    "diff_shape",
    "diff_l2_norm",
    "diff_min",
    "diff_max",
    "diff_mean",
    "diff_output_hash",
    "diff_input_hashes",
];

/// One Parquet file of result rows, written by the ranks as they finish.
pub struct ParquetRows {
    path: PathBuf,
    schema: SchemaRef,
    /// To the writer thread (`None` once finished).
    tx: Mutex<Option<crossbeam_channel::Sender<RecordBatch>>>,
    /// The writer thread: the first error, if any.
    thread: std::thread::JoinHandle<Result<(), String>>,
}

impl ParquetRows {
    /// Creates (truncates) `path`.
    pub fn create(path: &Path) -> Result<ParquetRows, ParquetError> {
        let file = File::create(path).map_err(|e| ParquetError::External(e.into()))?;
        let schema = schema();
        // Each column in the cheapest encoding that keeps the file small
        // (measured on the 2 x 1 GiB benchmark pair, README "Performance"):
        // - the integers (`rank`, `rank2`, `row`, `line1`, `line2`, `layer`:
        //   constant, consecutive or slowly growing) delta-encoded and not
        //   compressed: a few bits a value instead of 4 or 8 bytes;
        // - the keys delta-encoded (each key stored as its common prefix with
        //   the previous key, mostly `layers.N.module/op_`, and the rest),
        //   then Snappy: a fifth of the plain keys' bytes for the same CPU;
        // - the rest plain, then Snappy. A dictionary for the few-valued
        //   text columns (status, pass, phase, op, cause) or the mostly-0
        //   differences costs a hash lookup a value: more CPU than Snappy
        //   on the plain values saves.
        // Min/max statistics only on `rank` (row groups of one rank's rows
        // can be skipped by `WHERE rank = ...`); on the other columns they
        // cost a comparison a value and prune little in files whose row
        // groups mix ops.
        let mut props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
            .set_dictionary_enabled(false)
            .set_statistics_enabled(EnabledStatistics::None)
            .set_column_statistics_enabled(ColumnPath::from("rank"), EnabledStatistics::Chunk)
            .set_created_by(format!("actdiff {}", env!("CARGO_PKG_VERSION")));
        for c in DELTA_INTEGERS {
            props = props
                .set_column_encoding(ColumnPath::from(c), Encoding::DELTA_BINARY_PACKED)
                .set_column_compression(ColumnPath::from(c), Compression::UNCOMPRESSED);
        }
        for c in ["key1", "key2"] {
            props = props.set_column_encoding(ColumnPath::from(c), Encoding::DELTA_BYTE_ARRAY);
        }
        let mut writer = ColumnsWriter::new(BufWriter::new(file), schema.clone(), props.build())?;
        let (tx, rx) = crossbeam_channel::bounded::<RecordBatch>(QUEUE_BATCHES);
        let thread = std::thread::spawn(move || {
            let mut err = None;
            // After an error, keep draining so that no sender blocks.
            for batch in rx {
                if err.is_none() {
                    err = writer.write(&batch).err().map(|e| e.to_string());
                }
            }
            match err {
                Some(e) => Err(e),
                None => writer.close().map_err(|e| e.to_string()),
            }
        });
        Ok(ParquetRows {
            path: path.to_path_buf(),
            schema,
            tx: Mutex::new(Some(tx)),
            thread,
        })
    }

    /// The file.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Writes every result row of `rc`: batches of [`BATCH_ROWS`], a window
    /// of one batch per worker thread built in parallel, then sent in order.
    pub fn write_rank(&self, rc: &RankComparison<'_>) -> Result<(), String> {
        let n = rc.matches.rows.len();
        let tx = self
            .tx
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or("the Parquet file is already closed")?;
        let window = BATCH_ROWS * rayon::current_num_threads().max(1);
        for w in (0..n).step_by(window) {
            let starts: Vec<usize> = (w..(w + window).min(n)).step_by(BATCH_ROWS).collect();
            let batches: Vec<_> = starts
                .into_par_iter()
                .map(|s| self.batch(rc, s..(s + BATCH_ROWS).min(n)))
                .collect();
            for b in batches {
                let b = b.map_err(|e| e.to_string())?;
                tx.send(b)
                    .map_err(|_| "the Parquet writer stopped".to_string())?;
            }
        }
        Ok(())
    }

    /// Waits for the writer thread to write the last row group and the footer.
    pub fn finish(self) -> Result<(), String> {
        drop(self.tx.lock().unwrap_or_else(|e| e.into_inner()).take());
        self.thread
            .join()
            .map_err(|_| "the Parquet writer thread panicked".to_string())?
    }

    /// Rows `range` of `rc` as one record batch. The keys are the only
    /// values read from the logs, in one pass over the rows that asks for
    /// each block some rows ahead ([`OpTable::prefetch`]), run 2's only
    /// where it may differ from run 1's
    /// ([`crate::matcher::MatchTable::exact_keys_equal`]); every other
    /// column is built column-wise from the match table and the parsed
    /// columns, its validity 64 rows at a time.
    fn batch(
        &self,
        rc: &RankComparison<'_>,
        range: std::ops::Range<usize>,
    ) -> Result<RecordBatch, arrow_schema::ArrowError> {
        let m = rc.matches;
        let (t1, t2) = (rc.t1, rc.t2);
        let rows = &m.rows[range.clone()];
        let len = rows.len();
        let mut key1 = BinaryBuilder::with_capacity(len, len * 48);
        let mut key2 = BinaryBuilder::with_capacity(len, len * 48);
        let checked = KeysChecked::of(t1, t2);
        // Run 2's key is read only where it may differ from run 1's.
        let same_key = |r: &MatchRow| m.exact_keys_equal && r.strategy == Strategy::Exact;
        for (i, r) in rows.iter().enumerate() {
            if let Some(ahead) = rows.get(i + PREFETCH_ROWS) {
                // A missing side ([`NO_ROW`]) is past the end: no hint.
                t1.prefetch(ahead.row1 as usize);
                if !same_key(ahead) {
                    t2.prefetch(ahead.row2 as usize);
                }
            }
            let k1 = r.r1().map(|a| t1.key(a));
            key1.append_option(k1);
            key2.append_option(if same_key(r) {
                k1
            } else {
                r.r2().map(|b| t2.key(b))
            });
        }
        // Run 1's side of a row, else run 2's: its table and row there.
        let first = |r: &MatchRow| match r.sides().first() {
            (0, a) => (t1, a),
            (_, b) => (t2, b),
        };
        let has1 = |i: usize| rows[i].row1 != NO_ROW;
        let has2 = |i: usize| rows[i].row2 != NO_ROW;
        let pass = |i: usize| pass_code(rows[i].strategy);
        let layer = |i: usize| {
            let (t, row) = first(&rows[i]);
            t.layer(row)
        };
        let cause = |i: usize| {
            m.cause_kinds
                .get(range.start + i)
                .copied()
                .flatten()
                .map(cause_code)
        };
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(UInt32Array::from_value(rc.rank1, len)),
            Arc::new(UInt32Array::from_value(rc.rank2, len)),
            Arc::new(UInt32Array::from_iter_values(
                range.start as u32..range.end as u32,
            )),
            Arc::new(utf8_column(key1.finish(), checked)),
            Arc::new(utf8_column(key2.finish(), checked)),
            Arc::new(nullable::<UInt64Type>(len, has1, |i| {
                t1.line(rows[i].row1 as usize)
            })),
            Arc::new(nullable::<UInt64Type>(len, has2, |i| {
                t2.line(rows[i].row2 as usize)
            })),
            Arc::new(coded(
                &STATUS_NAMES,
                UInt8Array::from_iter_values(rows.iter().map(|r| status_code(r.status))),
            )?),
            Arc::new(coded(
                &PASS_NAMES,
                nullable::<UInt8Type>(len, |i| pass(i).is_some(), |i| pass(i).unwrap_or(0)),
            )?),
            Arc::new(phase_column(rows.iter().map(first))?),
            Arc::new(op_column(t1, t2, rows.iter().map(|r| r.sides().first()))?),
            Arc::new(nullable::<UInt32Type>(
                len,
                |i| layer(i).is_some(),
                |i| layer(i).unwrap_or(0),
            )),
        ];
        cols.extend(diff_columns(t1, t2, rows));
        cols.push(Arc::new(BooleanArray::new(
            BooleanBuffer::collect_bool(len, |i| rows[i].gates()),
            None,
        )));
        cols.push(Arc::new(coded(
            &CAUSE_NAMES,
            nullable::<UInt8Type>(len, |i| cause(i).is_some(), |i| cause(i).unwrap_or(0)),
        )?));
        RecordBatch::try_new(self.schema.clone(), cols)
    }
}

/// A column of `len` values, `value(i)` where `valid(i)` and null
/// elsewhere: the values in one pass, the validity bits 64 at a time (no
/// null buffer when none is null).
fn nullable<T: ArrowPrimitiveType>(
    len: usize,
    valid: impl Fn(usize) -> bool,
    value: impl Fn(usize) -> T::Native,
) -> PrimitiveArray<T> {
    let values: ScalarBuffer<T::Native> = (0..len)
        .map(|i| {
            if valid(i) {
                value(i)
            } else {
                T::Native::default()
            }
        })
        .collect();
    let nulls = NullBuffer::new(BooleanBuffer::collect_bool(len, valid));
    PrimitiveArray::new(values, Some(nulls).filter(|n| n.null_count() > 0))
}

/// The seven difference columns of `rows` ([`DIFF_FIELDS`]' order). A pair
/// the judge found with the same printed text on both sides
/// ([`ROW_SAME_TEXT`]: nearly every row of runs that agree) has 0 for each
/// field both sides have, from the parsed columns alone; the other pairs
/// (few) have [`pair_diffs`]; a one-sided row has nulls.
fn diff_columns<'a>(
    t1: &'a OpTable,
    t2: &'a OpTable,
    rows: &'a [MatchRow],
) -> impl Iterator<Item = ArrayRef> + 'a {
    // Per row: run 1's row of a same-text pair, else ONE_SIDED or DIFFERING.
    const ONE_SIDED: u32 = u32::MAX;
    const DIFFERING: u32 = u32::MAX - 1;
    let mut differing: Vec<(usize, [Option<f64>; 7])> = Vec::new();
    let same: Vec<u32> = rows
        .iter()
        .enumerate()
        .map(|(i, r)| match r.sides() {
            Sides::Both(a, _) if r.has(ROW_SAME_TEXT) => a as u32,
            Sides::Both(a, b) => {
                differing.push((i, pair_diffs(t1, a, t2, b)));
                DIFFERING
            }
            _ => ONE_SIDED,
        })
        .collect();
    (0..DIFF_FIELDS.len()).map(move |k| {
        let has1 = t1.presence(DIFF_FIELDS[k]);
        let valid = |i: usize| match same[i] {
            ONE_SIDED => false,
            DIFFERING => {
                let at = differing.partition_point(|(j, _)| *j < i);
                differing[at].1[k].is_some()
            }
            a => has1(a as usize),
        };
        let mut values = vec![0.0f64; rows.len()];
        for (i, d) in &differing {
            values[*i] = d[k].unwrap_or(0.0);
        }
        let nulls = NullBuffer::new(BooleanBuffer::collect_bool(rows.len(), valid));
        Arc::new(Float64Array::new(
            values.into(),
            Some(nulls).filter(|n| n.null_count() > 0),
        )) as ArrayRef
    })
}

/// The differences of a pair whose printed texts differ somewhere: the
/// stats' ([`Field::DIFF_STATS`]), then the Output and Input hashes'; 0 for
/// a field with the same text on both sides, the reference's difference
/// ([`field_diff`], [`stat_diffs`]) where the texts differ, `None` where a
/// side lacks the field.
fn pair_diffs(t1: &OpTable, a: usize, t2: &OpTable, b: usize) -> [Option<f64>; 7] {
    let (x, y) = (t1.fields_of(a, DIFF_FIELDS), t2.fields_of(b, DIFF_FIELDS));
    let mut out = [None; 7];
    let mut stats_differ = false;
    for k in 0..Field::DIFF_STATS.len() {
        if !x[k].is_empty() && !y[k].is_empty() {
            if x[k] == y[k] {
                out[k] = Some(0.0);
            } else {
                stats_differ = true;
            }
        }
    }
    if stats_differ {
        for (o, d) in out.iter_mut().zip(stat_diffs(t1, a, t2, b)) {
            if o.is_none() {
                *o = d;
            }
        }
    }
    for k in Field::DIFF_STATS.len()..7 {
        out[k] = if !x[k].is_empty() && x[k] == y[k] {
            Some(0.0)
        } else {
            field_diff(t1, a, t2, b, DIFF_FIELDS[k])
        };
    }
    out
}

/// The fields of the difference columns, in [`DIFF_COLUMNS`]' order:
/// [`Field::DIFF_STATS`], then the hashes.
const DIFF_FIELDS: [Field; 7] = Field::PRINTED;

/// A text column of few values: `codes` index `names` (null: no value).
fn coded(
    names: &[&str],
    codes: UInt8Array,
) -> Result<DictionaryArray<UInt8Type>, arrow_schema::ArrowError> {
    DictionaryArray::try_new(codes, Arc::new(StringArray::from(names.to_vec())))
}

/// The `phase` column: each row's phase text (nearly always `forward`,
/// `backward` or `optimizer`), each distinct text stored once.
fn phase_column<'t>(
    rows: impl Iterator<Item = (&'t OpTable, usize)>,
) -> Result<DictionaryArray<UInt32Type>, arrow_schema::ArrowError> {
    let mut texts: Vec<std::borrow::Cow<'t, str>> = Vec::new();
    let mut last = 0u32;
    let keys: UInt32Array = rows
        .map(|(t, row)| {
            let p = t.phase(row);
            if texts.get(last as usize) != Some(&p) {
                last = match texts.iter().position(|q| *q == p) {
                    Some(i) => i as u32,
                    None => {
                        texts.push(p);
                        (texts.len() - 1) as u32
                    }
                };
            }
            last
        })
        .collect();
    let values: StringArray = texts.iter().map(|t| Some(t.as_ref())).collect();
    DictionaryArray::try_new(keys, Arc::new(values))
}

/// The `op` column: the op name of each row's first side (`(0, row)`: run
/// 1's, `(1, row)`: run 2's); both tables' op names are the dictionary.
fn op_column(
    t1: &OpTable,
    t2: &OpTable,
    sides: impl Iterator<Item = (usize, usize)>,
) -> Result<DictionaryArray<UInt32Type>, arrow_schema::ArrowError> {
    let n1 = t1.op_types() as u32;
    let keys: UInt32Array = sides
        .map(|s| match s {
            (0, a) => t1.op_type(a),
            (_, b) => n1 + t2.op_type(b),
        })
        .collect();
    let names = (0..t1.op_types())
        .map(|i| text(t1.op_name(i as u32)))
        .chain((0..t2.op_types()).map(|i| text(t2.op_name(i as u32))));
    let values: StringArray = names.map(Some).collect();
    DictionaryArray::try_new(keys, Arc::new(values))
}

/// The `status` column's texts, in [`status_code`]'s order.
const STATUS_NAMES: [&str; 6] = ["match", "diff", "only1", "only2", "truncated", "missing"];

fn status_code(s: Status) -> u8 {
    match s {
        Status::Match => 0,
        Status::Diff => 1,
        Status::Only1 => 2,
        Status::Only2 => 3,
        Status::Truncated => 4,
        Status::Missing => 5,
    }
}

/// The `pass` column's texts, in [`pass_code`]'s order.
const PASS_NAMES: [&str; 4] = ["override", "exact", "fuzzy", "stats"];

fn pass_code(s: Strategy) -> Option<u8> {
    match s {
        Strategy::None => None,
        Strategy::Override => Some(0),
        Strategy::Exact => Some(1),
        Strategy::Fuzzy => Some(2),
        Strategy::Stats => Some(3),
    }
}

/// The `cause` column's texts (as in `summary.json`), in [`cause_code`]'s
/// order.
const CAUSE_NAMES: [&str; 7] = [
    "origin",
    "entry",
    "inherited",
    "inherited_below_print",
    "inherited_untraced",
    "via_collective",
    "unsynced",
];

fn cause_code(k: CauseKind) -> u8 {
    match k {
        CauseKind::Origin => 0,
        CauseKind::Entry => 1,
        CauseKind::Inherited => 2,
        CauseKind::BelowPrint => 3,
        CauseKind::Untraced => 4,
        CauseKind::ViaCollective => 5,
        CauseKind::Unsynced => 6,
    }
}

/// A Parquet file written a row group at a time with its columns encoded
/// in parallel: arrow-rs's [`ArrowColumnWriter`] per column, made by an
/// [`ArrowRowGroupWriterFactory`] (the parquet crate's documented way to
/// encode columns on several threads). A rank's rows are written after it
/// is matched, so one thread encoding every column (`ArrowWriter`) was the
/// end of a one-rank run's critical path. The columns are encoded on a
/// pool of the writer's own (one thread per core): the compare's workers
/// block on the bounded channel while the writer catches up, so the writer
/// must never wait for them.
struct ColumnsWriter {
    pool: rayon::ThreadPool,
    file: SerializedFileWriter<BufWriter<File>>,
    factory: ArrowRowGroupWriterFactory,
    schema: SchemaRef,
    /// The open row group's column writers and its row count.
    open: Option<(Vec<ArrowColumnWriter>, usize)>,
    groups: usize,
}

impl ColumnsWriter {
    fn new(
        out: BufWriter<File>,
        schema: SchemaRef,
        mut props: WriterProperties,
    ) -> Result<ColumnsWriter, ParquetError> {
        // As `ArrowWriter` does: the Arrow schema in the file's metadata, so
        // that readers get the Arrow types back (u32, not i64).
        add_encoded_arrow_schema_to_metadata(&schema, &mut props);
        let parquet_schema = ArrowSchemaConverter::new()
            .with_coerce_types(props.coerce_types())
            .convert(&schema)?;
        let file =
            SerializedFileWriter::new(out, parquet_schema.root_schema_ptr(), Arc::new(props))?;
        let factory = ArrowRowGroupWriterFactory::new(&file, schema.clone());
        let pool = rayon::ThreadPoolBuilder::new()
            .thread_name(|i| format!("parquet-{i}"))
            .build()
            .map_err(|e| ParquetError::External(e.into()))?;
        Ok(ColumnsWriter {
            pool,
            file,
            factory,
            schema,
            open: None,
            groups: 0,
        })
    }

    /// Encodes `batch` into the open row group (opening one when none is),
    /// closing it at [`ROW_GROUP_ROWS`] rows.
    fn write(&mut self, batch: &RecordBatch) -> Result<(), ParquetError> {
        let mut batch = batch.clone();
        while batch.num_rows() > 0 {
            if self.open.is_none() {
                let writers = self.factory.create_column_writers(self.groups)?;
                self.open = Some((writers, 0));
            }
            let (writers, rows) = self.open.as_mut().expect("a row group is open");
            let take = batch.num_rows().min(ROW_GROUP_ROWS - *rows);
            let part = batch.slice(0, take);
            batch = batch.slice(take, batch.num_rows() - take);
            let mut leaves = Vec::with_capacity(writers.len());
            for (field, column) in self.schema.fields().iter().zip(part.columns()) {
                leaves.extend(compute_leaves(field, column)?);
            }
            self.pool.install(|| {
                writers
                    .par_iter_mut()
                    .zip(leaves)
                    .try_for_each(|(w, leaf)| w.write(&leaf))
            })?;
            *rows += take;
            if *rows >= ROW_GROUP_ROWS {
                self.close_group()?;
            }
        }
        Ok(())
    }

    /// Finishes the open row group: the columns closed in parallel, then
    /// appended in schema order.
    fn close_group(&mut self) -> Result<(), ParquetError> {
        let Some((writers, _)) = self.open.take() else {
            return Ok(());
        };
        let chunks = self.pool.install(|| {
            writers
                .into_par_iter()
                .map(|w| w.close())
                .collect::<Result<Vec<_>, _>>()
        })?;
        let mut group = self.file.next_row_group()?;
        for chunk in chunks {
            chunk.append_to_row_group(&mut group)?;
        }
        group.close()?;
        self.groups += 1;
        Ok(())
    }

    /// Writes the last row group and the footer.
    fn close(mut self) -> Result<(), ParquetError> {
        self.close_group()?;
        self.file.close()?;
        Ok(())
    }
}

/// Whether the keys of a key column are known to be UTF-8.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum KeysChecked {
    /// The parser checked every key of both tables and found each UTF-8
    /// ([`OpTable::keys_are_utf8`]).
    ByParser,
    /// Not known: to be checked here.
    No,
}

impl KeysChecked {
    fn of(t1: &OpTable, t2: &OpTable) -> KeysChecked {
        if t1.keys_are_utf8() && t2.keys_are_utf8() {
            KeysChecked::ByParser
        } else {
            KeysChecked::No
        }
    }
}

/// A key column as text. Keys the parser found UTF-8 are not checked again
/// (about a tenth of the writer's work on the keys); others are checked in
/// one pass (keys nearly always are UTF-8), else each value converted,
/// invalid bytes replaced (the parser warned about such a key).
fn utf8_column(keys: BinaryArray, checked: KeysChecked) -> StringArray {
    if checked == KeysChecked::ByParser {
        let (offsets, values, nulls) = keys.into_parts();
        // SAFETY: each value is one whole key, `OpTable::key`'s slice of
        // the log, which is the slice the parser checked as UTF-8 while
        // parsing (`parser::parse_range`, counting a `NonUtf8` warning
        // for each key that is not); `ByParser` is only given when
        // neither table counted one. Whole UTF-8 strings end to end keep
        // every offset on a character boundary.
        return unsafe { StringArray::new_unchecked(offsets, values, nulls) };
    }
    StringArray::try_from_binary(keys.clone()).unwrap_or_else(|_| {
        keys.iter()
            .map(|k| k.map(|k| String::from_utf8_lossy(k).into_owned()))
            .collect()
    })
}

/// A log's bytes as text: borrowed when UTF-8 (nearly always), else lossy.
fn text(b: &[u8]) -> std::borrow::Cow<'_, str> {
    match std::str::from_utf8(b) {
        Ok(s) => std::borrow::Cow::Borrowed(s),
        Err(_) => String::from_utf8_lossy(b),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matcher::{match_tables, MatchOptions};
    use crate::parser::parse_bytes;

    #[test]
    fn key_columns_are_text_even_with_invalid_bytes() {
        use arrow_array::Array;
        let keys = BinaryArray::from_opt_vec(vec![
            Some(b"layers.0/op_1_mm".as_slice()),
            None,
            Some("é/op_2".as_bytes()),
        ]);
        let ok = utf8_column(keys.clone(), KeysChecked::No);
        // Keys the parser checked: the same column, not checked again.
        assert_eq!(utf8_column(keys, KeysChecked::ByParser), ok);
        assert_eq!(ok.value(0), "layers.0/op_1_mm");
        assert!(ok.is_null(1));
        assert_eq!(ok.value(2), "é/op_2");
        // One invalid key: that key is converted with replacement
        // characters, the others and the nulls stay as they are.
        let bad = utf8_column(
            BinaryArray::from_opt_vec(vec![
                Some(b"a".as_slice()),
                Some(b"b\xff/op".as_slice()),
                None,
            ]),
            KeysChecked::No,
        );
        assert_eq!(bad.value(0), "a");
        assert_eq!(bad.value(1), "b\u{fffd}/op");
        assert!(bad.is_null(2));
    }

    #[test]
    fn parquet_extension_chooses_the_format() {
        assert!(is_parquet_path(Path::new("rows.parquet")));
        assert!(is_parquet_path(Path::new("a/b.PARQUET")));
        assert!(!is_parquet_path(Path::new("rows.jsonl")));
        assert!(!is_parquet_path(Path::new("parquet")));
    }

    /// A column's values as text: a dictionary column's by its codes.
    fn texts(batch: &RecordBatch, name: &str) -> Vec<Option<String>> {
        use arrow_array::cast::AsArray;
        use arrow_array::Array;
        let col = batch.column_by_name(name).unwrap();
        let (keys, values): (Vec<Option<usize>>, &StringArray) = match col.data_type() {
            DataType::Dictionary(k, _) if **k == DataType::UInt8 => {
                let d = col.as_dictionary::<UInt8Type>();
                let keys = d.keys().iter().map(|k| k.map(usize::from)).collect();
                (keys, d.values().as_string::<i32>())
            }
            DataType::Dictionary(_, _) => {
                let d = col.as_dictionary::<UInt32Type>();
                let keys = d.keys().iter().map(|k| k.map(|k| k as usize)).collect();
                (keys, d.values().as_string::<i32>())
            }
            _ => {
                let s = col.as_string::<i32>();
                (
                    (0..s.len()).map(|i| s.is_valid(i).then_some(i)).collect(),
                    s,
                )
            }
        };
        keys.into_iter()
            .map(|k| k.map(|k| values.value(k).to_string()))
            .collect()
    }

    fn diffs(batch: &RecordBatch, name: &str) -> Vec<Option<f64>> {
        use arrow_array::cast::AsArray;
        let col = batch.column_by_name(name).unwrap();
        let f = col.as_primitive::<arrow_array::types::Float64Type>();
        f.iter().collect()
    }

    /// The keys the writer does not read or check itself: run 2's key of an
    /// exact pair is run 1's only where the root classes allow it, and a
    /// key that is not UTF-8 is still checked and written lossy.
    #[test]
    fn keys_are_each_side_s_own_and_text() {
        let log = |blocks: &[&[u8]]| {
            let mut s = format!("Total captured activations: {}\n", blocks.len()).into_bytes();
            for b in blocks {
                s.extend_from_slice(b);
                s.extend_from_slice(b"\n  Output hash: 1\n\n");
            }
            parse_bytes(s, "t.log")
        };
        let batch = |a: &OpTable, b: &OpTable| {
            let m = match_tables(a, b, &MatchOptions::default());
            let rc = RankComparison {
                rank1: 0,
                rank2: 0,
                t1: a,
                t2: b,
                matches: &m,
            };
            let dir = tempfile::tempdir().unwrap();
            let w = ParquetRows::create(&dir.path().join("r.parquet")).unwrap();
            let out = w.batch(&rc, 0..m.rows.len()).unwrap();
            (out, m.exact_keys_equal, KeysChecked::of(a, b))
        };
        let plain = log(&[b"[layers.0.m/op_0_mm]", b"[norm/op_1_add]"]);
        let fsdp = log(&[
            b"[FSDPModel.layers.0.m/op_0_mm]",
            b"[FSDPModel.norm/op_1_add]",
        ]);
        // Root classes that differ: exact pairs, each key its own side's.
        let (b, equal, checked) = batch(&plain, &fsdp);
        assert!(!equal);
        assert_eq!(checked, KeysChecked::ByParser);
        assert_eq!(
            texts(&b, "key2"),
            vec![
                Some("FSDPModel.layers.0.m/op_0_mm".to_string()),
                Some("FSDPModel.norm/op_1_add".to_string())
            ]
        );
        assert_eq!(texts(&b, "key1")[0].as_deref(), Some("layers.0.m/op_0_mm"));
        // A key that is not UTF-8: checked, and written with a
        // replacement character.
        let bad = log(&[b"[layers.0.m/op_0_mm]", b"[no\xffrm/op_1_add]"]);
        assert!(!bad.keys_are_utf8() && plain.keys_are_utf8());
        let (b, equal, checked) = batch(&bad, &bad);
        assert!(equal);
        assert_eq!(checked, KeysChecked::No);
        for k in ["key1", "key2"] {
            assert_eq!(texts(&b, k)[1].as_deref(), Some("no\u{fffd}rm/op_1_add"));
        }
    }

    #[test]
    fn writes_every_row_and_reads_back_as_text_and_numbers() {
        let log = |blocks: &[&str]| {
            let mut s = format!("Total captured activations: {}\n", blocks.len());
            for b in blocks {
                s.push_str(b);
                s.push_str("\n\n");
            }
            parse_bytes(s.into_bytes(), "t.log")
        };
        let a = log(&[
            "[layers.0.m/op_0_mm]\n  Output hash: 1\n  L2 norm: 1\n  Phase: backward",
            // After the last backward op: the optimizer phase.
            "[layers.1.m/op_1_mm]\n  Output hash: 2\n  L2 norm: 2",
            "[layers.2.m/op_2_add]\n  Output hash: 3\n  L2 norm: 3",
        ]);
        let b = log(&[
            // The same block text: every difference 0.
            "[layers.0.m/op_0_mm]\n  Output hash: 1\n  L2 norm: 1\n  Phase: backward",
            "[layers.1.m/op_1_mm]\n  Output hash: 2.5\n  L2 norm: 2.5",
            // No L2 norm line in run 2: that difference is null.
            "[layers.2.m/op_2_add]\n  Output hash: 3",
            "[norm/op_3_rsqrt]\n  Output hash: 4\n  L2 norm: 4",
        ]);
        let m = match_tables(&a, &b, &MatchOptions::default());
        let rc = RankComparison {
            rank1: 7,
            rank2: 7,
            t1: &a,
            t2: &b,
            matches: &m,
        };
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("rows.parquet");
        let w = ParquetRows::create(&p).unwrap();
        let built = w.batch(&rc, 0..m.rows.len()).unwrap();
        w.write_rank(&rc).unwrap();
        w.finish().unwrap();
        // The same-text flag and the equal exact keys only spare reading
        // the logs: without them (the slow path, every field and both keys
        // read) the batch is the same.
        let mut unflagged = m.clone();
        for r in &mut unflagged.rows {
            r.flags &= !ROW_SAME_TEXT;
        }
        unflagged.exact_keys_equal = false;
        assert!(m.rows[0].has(ROW_SAME_TEXT) && m.exact_keys_equal);
        let slow = RankComparison {
            matches: &unflagged,
            ..rc
        };
        let dir2 = tempfile::tempdir().unwrap();
        let w2 = ParquetRows::create(&dir2.path().join("slow.parquet")).unwrap();
        assert_eq!(w2.batch(&slow, 0..m.rows.len()).unwrap(), built);
        drop(w2);
        let read: Vec<RecordBatch> =
            parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder::try_new(
                File::open(&p).unwrap(),
            )
            .unwrap()
            .build()
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(read.len(), 1);
        for batch in [&built, &read[0]] {
            assert_eq!(batch.num_rows(), 4);
            let t = |name| texts(batch, name);
            let s = |v: &[Option<&str>]| v.iter().map(|x| x.map(String::from)).collect::<Vec<_>>();
            assert_eq!(
                t("status"),
                s(&[Some("match"), Some("diff"), Some("match"), Some("only2")])
            );
            assert_eq!(
                t("pass"),
                s(&[Some("exact"), Some("exact"), Some("exact"), None])
            );
            assert_eq!(
                t("op"),
                s(&[Some("mm"), Some("mm"), Some("add"), Some("rsqrt")])
            );
            assert_eq!(
                t("phase"),
                s(&[
                    Some("backward"),
                    Some("optimizer"),
                    Some("optimizer"),
                    Some("optimizer")
                ])
            );
            assert_eq!(
                t("key2"),
                s(&[
                    Some("layers.0.m/op_0_mm"),
                    Some("layers.1.m/op_1_mm"),
                    Some("layers.2.m/op_2_add"),
                    Some("norm/op_3_rsqrt")
                ])
            );
            assert_eq!(t("key1")[3], None);
            let l2 = diffs(batch, "diff_l2_norm");
            assert_eq!(l2[0], Some(0.0));
            assert!((l2[1].unwrap() - 0.2).abs() < 1e-12, "{l2:?}");
            assert_eq!((l2[2], l2[3]), (None, None));
            let out = diffs(batch, "diff_output_hash");
            assert_eq!((out[0], out[2], out[3]), (Some(0.0), Some(0.0), None));
            assert!(out[1].unwrap() > 0.0, "{out:?}");
            // Fields neither side has: null, also for equal blocks.
            assert_eq!(diffs(batch, "diff_min"), vec![None; 4]);
        }
    }

    #[test]
    fn text_codes_cover_every_value() {
        use crate::matcher::cause::CauseKind as K;
        for s in [
            Status::Match,
            Status::Diff,
            Status::Only1,
            Status::Only2,
            Status::Truncated,
            Status::Missing,
        ] {
            assert_eq!(STATUS_NAMES[status_code(s) as usize], s.as_str());
        }
        for p in [
            Strategy::Override,
            Strategy::Exact,
            Strategy::Fuzzy,
            Strategy::Stats,
        ] {
            assert_eq!(Some(PASS_NAMES[pass_code(p).unwrap() as usize]), p.as_str());
        }
        assert_eq!(pass_code(Strategy::None), None);
        // The cause names are summary.json's (serde) names.
        for k in [
            K::Origin,
            K::Entry,
            K::Inherited,
            K::BelowPrint,
            K::Untraced,
            K::ViaCollective,
            K::Unsynced,
        ] {
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("\"{}\"", CAUSE_NAMES[cause_code(k) as usize]));
        }
    }

    #[test]
    fn integers_and_keys_are_delta_encoded() {
        use parquet::file::reader::{FileReader, SerializedFileReader};
        let a = parse_bytes(
            b"[layers.0.m/op_0_mm]\n  Output hash: 1\n\n[layers.0.m/op_1_add]\n  Output hash: 2\n"
                .to_vec(),
            "a.log",
        );
        let m = match_tables(&a, &a, &MatchOptions::default());
        let rc = RankComparison {
            rank1: 3,
            rank2: 3,
            t1: &a,
            t2: &a,
            matches: &m,
        };
        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("rows.parquet");
        let w = ParquetRows::create(&p).unwrap();
        w.write_rank(&rc).unwrap();
        w.finish().unwrap();
        let reader = SerializedFileReader::new(File::open(&p).unwrap()).unwrap();
        let group = reader.metadata().row_group(0);
        let column = |name: &str| {
            (0..group.num_columns())
                .map(|i| group.column(i))
                .find(|c| c.column_path().string() == name)
                .unwrap()
        };
        for name in DELTA_INTEGERS {
            let c = column(name);
            assert!(
                c.encodings().any(|e| e == Encoding::DELTA_BINARY_PACKED),
                "{name}"
            );
            assert_eq!(c.compression(), Compression::UNCOMPRESSED, "{name}");
        }
        for name in ["key1", "key2"] {
            let c = column(name);
            assert!(
                c.encodings().any(|e| e == Encoding::DELTA_BYTE_ARRAY),
                "{name}"
            );
            assert_eq!(c.compression(), Compression::SNAPPY, "{name}");
        }
        assert!(column("diff_l2_norm")
            .encodings()
            .all(|e| e != Encoding::PLAIN_DICTIONARY && e != Encoding::RLE_DICTIONARY));
    }
}
