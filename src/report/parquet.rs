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
//! `phase` utf8, `op` utf8 (op name), `layer` u32 (the layer index, [`crate::parser::layer`]),
//! `diff_shape`, `diff_l2_norm`, `diff_min`, `diff_max`, `diff_mean` f64 (the
//! reference's per-stat relative differences, `rows` JSON `diffs`; 0 when
//! both texts are equal, null when a side lacks the field),
//! `diff_output_hash`, `diff_input_hashes` f64 (largest relative difference
//! of the values; 0 when the texts are equal; null when a side lacks it),
//! `gates` bool (the row fails the run), `cause` utf8 (`origin`, `entry`,
//! `inherited`, `inherited_below_print`, `inherited_untraced`,
//! `via_collective`, `unsynced`, as in `summary.json`; null for rows
//! without a cause class), `step` u64 (the training step of a step
//! series' row, [`crate::run::steps`]; null for a single-step compare).
//! A step series' rows are one file, the steps' files joined in step
//! order ([`concat()`]).

use std::fs::File;
use std::io::BufWriter;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use rayon::prelude::*;

use arrow_array::builder::BinaryBuilder;
use arrow_array::types::{ArrowPrimitiveType, Float64Type, UInt32Type, UInt64Type, UInt8Type};
use arrow_array::{
    ArrayRef, BinaryArray, BooleanArray, DictionaryArray, PrimitiveArray, RecordBatch, StringArray,
    UInt32Array, UInt8Array,
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
use crate::matcher::{MatchRow, Sides, Status, Strategy, ROW_SAME_TEXT};
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

/// The writer's settings: each column's encoding, compression and
/// statistics.
fn writer_properties() -> WriterProperties {
    // Each column in the cheapest encoding that keeps the file small
    // (measured on the 2 x 1 GiB benchmark pair, docs/performance.md):
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
    // Min/max statistics only on `rank` and `rank2` (row groups of one
    // rank's rows can be skipped by `WHERE rank = ...`); on the other
    // columns they cost a comparison a value and prune little in files
    // whose row groups mix ops. The columns of each [`TWINS`] pair have
    // the same settings.
    let mut props = WriterProperties::builder()
        .set_compression(Compression::SNAPPY)
        .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
        .set_dictionary_enabled(false)
        .set_statistics_enabled(EnabledStatistics::None)
        .set_column_statistics_enabled(ColumnPath::from("rank"), EnabledStatistics::Chunk)
        .set_column_statistics_enabled(ColumnPath::from("rank2"), EnabledStatistics::Chunk)
        .set_created_by(format!("actdiff {}", env!("CARGO_PKG_VERSION")));
    for c in DELTA_INTEGERS {
        props = props
            .set_column_encoding(ColumnPath::from(c), Encoding::DELTA_BINARY_PACKED)
            .set_column_compression(ColumnPath::from(c), Compression::UNCOMPRESSED);
    }
    for c in ["key1", "key2"] {
        props = props.set_column_encoding(ColumnPath::from(c), Encoding::DELTA_BYTE_ARRAY);
    }
    props.build()
}

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
    cols.push(f("step", DataType::UInt64, true));
    Arc::new(Schema::new(cols))
}

/// A text column of few distinct values, built as an Arrow dictionary
/// with `key` codes. In the file it is a plain UTF-8 column: readers see
/// text (pyarrow gives it back as a dictionary).
fn text_codes(key: DataType) -> DataType {
    DataType::Dictionary(Box::new(key), Box::new(DataType::Utf8))
}

/// The integer columns stored delta-encoded and uncompressed.
const DELTA_INTEGERS: [&str; 7] = ["rank", "rank2", "row", "line1", "line2", "layer", "step"];

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
        let mut writer =
            ColumnsWriter::new(BufWriter::new(file), schema.clone(), writer_properties())?;
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

    /// Writes every result row of `rc` (of training step `step` in a step
    /// series): batches of [`BATCH_ROWS`], a window of one batch per worker
    /// thread built in parallel, then sent in order.
    pub fn write_rank(&self, rc: &RankComparison<'_>, step: Option<u64>) -> Result<(), String> {
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
                .map(|s| self.batch(rc, s..(s + BATCH_ROWS).min(n), step))
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
        step: Option<u64>,
    ) -> Result<RecordBatch, arrow_schema::ArrowError> {
        let m = rc.matches;
        let (t1, t2) = (rc.t1, rc.t2);
        let rows = &m.rows[range.clone()];
        let len = rows.len();
        let checked = KeysChecked::of(t1, t2);
        // Run 2's key is read only where it may differ from run 1's; where
        // no row's may, run 2's column is run 1's.
        let same_key = |r: &MatchRow| m.exact_keys_equal && r.strategy == Strategy::Exact;
        let all_same = rows.iter().all(same_key);
        let mut key1 = BinaryBuilder::with_capacity(len, len * 48);
        let mut key2 = BinaryBuilder::with_capacity(if all_same { 0 } else { len }, 0);
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
            if !all_same {
                key2.append_option(if same_key(r) {
                    k1
                } else {
                    r.r2().map(|b| t2.key(b))
                });
            }
        }
        let key1: ArrayRef = Arc::new(utf8_column(key1.finish(), checked));
        let key2 = if all_same {
            key1.clone()
        } else {
            twin_of(&key1, Arc::new(utf8_column(key2.finish(), checked)))
        };
        // Run 1's side of a row, else run 2's: its table and row there.
        let first = |r: &MatchRow| match r.sides().first() {
            (0, a) => (t1, a),
            (_, b) => (t2, b),
        };
        let rank: ArrayRef = Arc::new(UInt32Array::from_value(rc.rank1, len));
        let line1: ArrayRef = Arc::new(optional::<UInt64Type>(len, |i| {
            rows[i].r1().map(|a| t1.line(a))
        }));
        let line2 = optional::<UInt64Type>(len, |i| rows[i].r2().map(|b| t2.line(b)));
        let rank2 = twin_of(&rank, Arc::new(UInt32Array::from_value(rc.rank2, len)));
        let line2 = twin_of(&line1, Arc::new(line2));
        let mut cols: Vec<ArrayRef> = vec![
            rank,
            rank2,
            Arc::new(UInt32Array::from_iter_values(
                range.start as u32..range.end as u32,
            )),
            key1,
            key2,
            line1,
            line2,
            Arc::new(coded(
                &STATUS_NAMES,
                UInt8Array::from_iter_values(rows.iter().map(|r| status_code(r.status))),
            )?),
            Arc::new(coded(
                &PASS_NAMES,
                optional::<UInt8Type>(len, |i| pass_code(rows[i].strategy)),
            )?),
            Arc::new(phase_column(rows.iter().map(first))?),
            Arc::new(op_column(t1, t2, rows.iter().map(|r| r.sides().first()))?),
            Arc::new(optional::<UInt32Type>(len, |i| {
                let (t, row) = first(&rows[i]);
                t.layer(row)
            })),
        ];
        cols.extend(diff_columns(t1, t2, rows));
        cols.push(Arc::new(BooleanArray::new(
            BooleanBuffer::collect_bool(len, |i| rows[i].gates()),
            None,
        )));
        cols.push(Arc::new(coded(
            &CAUSE_NAMES,
            optional::<UInt8Type>(len, |i| {
                m.cause_kinds
                    .get(range.start + i)
                    .copied()
                    .flatten()
                    .map(cause_code)
            }),
        )?));
        cols.push(Arc::new(optional::<UInt64Type>(len, |_| step)));
        RecordBatch::try_new(self.schema.clone(), cols)
    }
}

/// Joins row files written by [`ParquetRows`] into one file `out`, in the
/// order given (a step series' steps): their record batches read back and
/// written with the same settings. `out` is written through a temporary
/// file beside it and renamed, so it is never half written. Errors name
/// the file.
pub fn concat(parts: &[PathBuf], out: &Path) -> Result<(), String> {
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    use parquet::arrow::ArrowWriter;
    let tmp = out.with_extension("parquet.tmp");
    let write = || -> Result<(), String> {
        let file = File::create(&tmp).map_err(|e| format!("{}: {e}", tmp.display()))?;
        let mut w = ArrowWriter::try_new(BufWriter::new(file), schema(), Some(writer_properties()))
            .map_err(|e| format!("{}: {e}", tmp.display()))?;
        for p in parts {
            let f = File::open(p).map_err(|e| format!("{}: {e}", p.display()))?;
            let reader = ParquetRecordBatchReaderBuilder::try_new(f)
                .and_then(|b| b.with_batch_size(BATCH_ROWS).build())
                .map_err(|e| format!("{}: {e}", p.display()))?;
            for batch in reader {
                let batch = batch.map_err(|e| format!("{}: {e}", p.display()))?;
                w.write(&batch)
                    .map_err(|e| format!("{}: {e}", tmp.display()))?;
            }
        }
        w.close().map_err(|e| format!("{}: {e}", tmp.display()))?;
        Ok(())
    };
    let res = write()
        .and_then(|()| std::fs::rename(&tmp, out).map_err(|e| format!("{}: {e}", out.display())));
    if res.is_err() {
        let _ = std::fs::remove_file(&tmp);
    }
    res
}

/// `second`, or `first` itself where the two hold the same values (and
/// nulls): one array for both tells the writer to encode the column once
/// ([`ColumnsWriter`]).
fn twin_of(first: &ArrayRef, second: ArrayRef) -> ArrayRef {
    if first.as_ref() == second.as_ref() {
        first.clone()
    } else {
        second
    }
}

/// A column of `len` values, `value(i)` or null where it is `None`: each
/// row's value computed once, the values and the validity bits built in
/// one pass, 64 rows to a word (no null buffer when none is null).
fn optional<T: ArrowPrimitiveType>(
    len: usize,
    value: impl Fn(usize) -> Option<T::Native>,
) -> PrimitiveArray<T> {
    let mut values = Vec::with_capacity(len);
    let mut words = Vec::with_capacity(len.div_ceil(64));
    let mut nulls = 0;
    for start in (0..len).step_by(64) {
        let mut word = 0u64;
        for (bit, i) in (start..(start + 64).min(len)).enumerate() {
            let v = value(i);
            word |= u64::from(v.is_some()) << bit;
            values.push(v.unwrap_or_default());
        }
        nulls += (start + 64).min(len) - start - word.count_ones() as usize;
        words.push(word);
    }
    let nulls = (nulls > 0).then(|| {
        NullBuffer::new(BooleanBuffer::new(
            arrow_buffer::Buffer::from_vec(words),
            0,
            len,
        ))
    });
    PrimitiveArray::new(ScalarBuffer::from(values), nulls)
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
        Arc::new(optional::<Float64Type>(rows.len(), |i| match same[i] {
            ONE_SIDED => None,
            DIFFERING => {
                let at = differing.partition_point(|(j, _)| *j < i);
                differing[at].1[k]
            }
            a => has1(a as usize).then_some(0.0),
        })) as ArrayRef
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

/// The `cause` column's texts (as in `summary.json`:
/// [`CauseKind::json_name`]), in [`CauseKind::ALL`]'s order.
const CAUSE_NAMES: [&str; CauseKind::ALL.len()] = {
    let mut names = [""; CauseKind::ALL.len()];
    let mut k = 0;
    while k < names.len() {
        names[k] = CauseKind::ALL[k].json_name();
        k += 1;
    }
    names
};

/// `k`'s position in [`CAUSE_NAMES`].
fn cause_code(k: CauseKind) -> u8 {
    CauseKind::ALL.iter().position(|c| *c == k).unwrap_or(0) as u8
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
///
/// Run 2's columns are often run 1's values again (the same keys, the same
/// rank, the same block lines when both logs have the same layout): a
/// batch then carries one array for both ([`TWINS`], `Arc::ptr_eq`). A row
/// group whose every batch does that encodes the pair's first column only
/// and writes its encoded pages a second time as the other's column chunk
/// (the same values, encoding and compression: the bytes the second
/// column's own writer would have made). A batch that breaks the pattern
/// closes the row group first, so row groups can be shorter than
/// [`ROW_GROUP_ROWS`], never longer.
struct ColumnsWriter {
    pool: rayon::ThreadPool,
    file: SerializedFileWriter<BufWriter<File>>,
    factory: ArrowRowGroupWriterFactory,
    schema: SchemaRef,
    /// Each leaf column's descriptor, in schema order.
    columns: Vec<parquet::schema::types::ColumnDescPtr>,
    /// [`TWINS`] as column indexes: (first, second).
    twins: Vec<(usize, usize)>,
    /// The encoded pages of each twin pair's first column in the open row
    /// group.
    pages: PageRecorder,
    open: Option<OpenGroup>,
    groups: usize,
}

/// Column pairs with the same type and writer settings whose second
/// column repeats the first's values in most compares.
const TWINS: [(&str, &str); 3] = [("rank", "rank2"), ("key1", "key2"), ("line1", "line2")];

/// The row group being written.
struct OpenGroup {
    writers: Vec<ArrowColumnWriter>,
    rows: usize,
    /// Per [`TWINS`] pair: the second column is the first's copy (every
    /// batch so far carried one array for both).
    copied: Vec<bool>,
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
        let index = |name: &str| {
            schema
                .index_of(name)
                .map_err(|e| ParquetError::External(e.into()))
        };
        let twins = TWINS
            .iter()
            .map(|(a, b)| Ok((index(a)?, index(b)?)))
            .collect::<Result<Vec<_>, ParquetError>>()?;
        let pages = PageRecorder::new(twins.iter().map(|t| t.0).collect());
        let factory = ArrowRowGroupWriterFactory::new(&file, schema.clone())
            .with_page_store_factory(Arc::new(pages.clone()));
        let columns = parquet_schema.columns().to_vec();
        let pool = rayon::ThreadPoolBuilder::new()
            .thread_name(|i| format!("parquet-{i}"))
            .build()
            .map_err(|e| ParquetError::External(e.into()))?;
        Ok(ColumnsWriter {
            pool,
            file,
            factory,
            schema,
            columns,
            twins,
            pages,
            open: None,
            groups: 0,
        })
    }

    /// Encodes `batch` into the open row group (opening one when none is),
    /// closing it at [`ROW_GROUP_ROWS`] rows, or first when the batch
    /// breaks a twin pair the group copies.
    fn write(&mut self, batch: &RecordBatch) -> Result<(), ParquetError> {
        let same: Vec<bool> = self
            .twins
            .iter()
            .map(|&(a, b)| Arc::ptr_eq(batch.column(a), batch.column(b)))
            .collect();
        let breaks = |g: &OpenGroup| g.copied.iter().zip(&same).any(|(c, s)| *c && !*s);
        if self.open.as_ref().is_some_and(breaks) {
            self.close_group()?;
        }
        let mut batch = batch.clone();
        while batch.num_rows() > 0 {
            if self.open.is_none() {
                self.open = Some(OpenGroup {
                    writers: self.factory.create_column_writers(self.groups)?,
                    rows: 0,
                    copied: same.clone(),
                });
            }
            let g = self.open.as_mut().expect("a row group is open");
            let take = batch.num_rows().min(ROW_GROUP_ROWS - g.rows);
            let part = batch.slice(0, take);
            batch = batch.slice(take, batch.num_rows() - take);
            let skip = copies(&self.twins, &g.copied, self.columns.len());
            // Each column's levels and values on the pool, beside the
            // others'; a copied twin's not at all.
            let fields = self.schema.fields();
            self.pool.install(|| {
                g.writers
                    .par_iter_mut()
                    .zip(fields.par_iter().zip(part.columns()).zip(skip))
                    .filter(|(_, (_, skip))| !skip)
                    .try_for_each(|(w, ((field, column), _))| {
                        compute_leaves(field, column)?
                            .iter()
                            .try_for_each(|leaf| w.write(leaf))
                    })
            })?;
            g.rows += take;
            if g.rows >= ROW_GROUP_ROWS {
                self.close_group()?;
            }
        }
        Ok(())
    }

    /// Finishes the open row group: the columns closed in parallel, then
    /// appended in schema order, a copied twin as its first column's pages.
    fn close_group(&mut self) -> Result<(), ParquetError> {
        let Some(g) = self.open.take() else {
            return Ok(());
        };
        let skip = copies(&self.twins, &g.copied, self.columns.len());
        let chunks = self.pool.install(|| {
            g.writers
                .into_par_iter()
                .zip(skip)
                .map(|(w, skip)| if skip { Ok(None) } else { w.close().map(Some) })
                .collect::<Result<Vec<_>, _>>()
        })?;
        let mut firsts = vec![None; self.columns.len()];
        let mut group = self.file.next_row_group()?;
        for (i, chunk) in chunks.into_iter().enumerate() {
            match chunk {
                Some(chunk) => {
                    if self.twins.iter().any(|t| t.0 == i) {
                        firsts[i] = Some(chunk.close().clone());
                    }
                    chunk.append_to_row_group(&mut group)?;
                }
                None => {
                    let first = self
                        .twins
                        .iter()
                        .find(|t| t.1 == i)
                        .map(|t| t.0)
                        .expect("only a twin's second column is skipped");
                    let close = firsts[first].take().ok_or_else(|| {
                        ParquetError::General("a twin's first column is missing".into())
                    })?;
                    let close = for_column(close, self.columns[i].clone())?;
                    group.append_column(&self.pages.take(first), close)?;
                }
            }
        }
        group.close()?;
        self.pages.clear();
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

/// Per column of `n`: whether it is the second of a twin pair the row
/// group copies (`copied`, in `twins`' order), so is not encoded.
fn copies(twins: &[(usize, usize)], copied: &[bool], n: usize) -> Vec<bool> {
    let mut skip = vec![false; n];
    for (t, c) in twins.iter().zip(copied) {
        skip[t.1] = *c;
    }
    skip
}

/// `close` (a column chunk's result) for the chunk of the same bytes under
/// `column`: the metadata rebuilt for that column, with the fields that
/// `SerializedRowGroupWriter::append_column` keeps.
fn for_column(
    mut close: parquet::column::writer::ColumnCloseResult,
    column: parquet::schema::types::ColumnDescPtr,
) -> Result<parquet::column::writer::ColumnCloseResult, ParquetError> {
    let m = &close.metadata;
    if m.dictionary_page_offset().is_some() {
        // The recorded pages are in write order; a dictionary page would
        // have to move first. No twin column is dictionary-encoded.
        return Err(ParquetError::General(format!(
            "column {} has a dictionary page: it cannot be copied",
            m.column_path()
        )));
    }
    let mut b = parquet::file::metadata::ColumnChunkMetaData::builder(column)
        .set_compression_codec(m.compression_codec())
        .set_encodings_mask(*m.encodings_mask())
        .set_total_compressed_size(m.compressed_size())
        .set_total_uncompressed_size(m.uncompressed_size())
        .set_num_values(m.num_values())
        .set_data_page_offset(m.data_page_offset())
        .set_unencoded_byte_array_data_bytes(m.unencoded_byte_array_data_bytes())
        .set_repetition_level_histogram(m.repetition_level_histogram().cloned())
        .set_definition_level_histogram(m.definition_level_histogram().cloned());
    if let Some(s) = m.statistics() {
        b = b.set_statistics(s.clone());
    }
    if let Some(s) = m.page_encoding_stats() {
        b = b.set_page_encoding_stats(s.clone());
    }
    if let Some(s) = m.page_encoding_stats_mask() {
        b = b.set_page_encoding_stats_mask(*s);
    }
    close.metadata = b.build()?;
    Ok(close)
}

/// The page store of every column: the parquet crate's in-memory store,
/// which for the first column of each twin pair also keeps its pages (each
/// page's header and compressed data, in write order: the column chunk's
/// bytes) for the row group's copy.
#[derive(Clone, Debug)]
struct PageRecorder {
    /// Per recorded column: its index and its pages in the open row group.
    recorded: Arc<Vec<(usize, Mutex<Vec<bytes::Bytes>>)>>,
}

impl PageRecorder {
    fn new(columns: Vec<usize>) -> PageRecorder {
        PageRecorder {
            recorded: Arc::new(
                columns
                    .into_iter()
                    .map(|c| (c, Mutex::new(Vec::new())))
                    .collect(),
            ),
        }
    }

    fn slot(&self, column: usize) -> Option<&Mutex<Vec<bytes::Bytes>>> {
        self.recorded.iter().find(|r| r.0 == column).map(|r| &r.1)
    }

    /// Column `column`'s pages in the open row group, as one buffer.
    fn take(&self, column: usize) -> bytes::Bytes {
        let pages = self
            .slot(column)
            .map(|s| std::mem::take(&mut *s.lock().unwrap_or_else(|e| e.into_inner())))
            .unwrap_or_default();
        pages.concat().into()
    }

    /// Forgets every recorded page.
    fn clear(&self) {
        for (_, s) in self.recorded.iter() {
            s.lock().unwrap_or_else(|e| e.into_inner()).clear();
        }
    }
}

impl parquet::arrow::arrow_writer::PageStoreFactory for PageRecorder {
    fn create(
        &self,
        args: &parquet::arrow::arrow_writer::PageStoreArgs<'_>,
    ) -> Result<Box<dyn parquet::arrow::arrow_writer::PageStore>, ParquetError> {
        let store = parquet::arrow::arrow_writer::InMemoryPageStore::default();
        Ok(match self.slot(args.column_index()) {
            Some(_) => Box::new(RecordingStore {
                store,
                recorder: self.clone(),
                column: args.column_index(),
            }),
            None => Box::new(store),
        })
    }
}

/// [`PageRecorder`]'s store for a recorded column.
struct RecordingStore {
    store: parquet::arrow::arrow_writer::InMemoryPageStore,
    recorder: PageRecorder,
    column: usize,
}

impl parquet::arrow::arrow_writer::PageStore for RecordingStore {
    fn put(
        &mut self,
        value: bytes::Bytes,
    ) -> Result<parquet::arrow::arrow_writer::PageKey, ParquetError> {
        if let Some(s) = self.recorder.slot(self.column) {
            s.lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(value.clone());
        }
        self.store.put(value)
    }
    fn take(
        &mut self,
        key: parquet::arrow::arrow_writer::PageKey,
    ) -> Result<bytes::Bytes, ParquetError> {
        self.store.take(key)
    }
    fn memory_size(&self) -> usize {
        self.store.memory_size()
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

    /// A log of `blocks` (each a key line), each block given an `Output
    /// hash: 1` line.
    fn hashed_log(blocks: &[&[u8]]) -> OpTable {
        let mut s = format!("Total captured activations: {}\n", blocks.len()).into_bytes();
        for b in blocks {
            s.extend_from_slice(b);
            s.extend_from_slice(b"\n  Output hash: 1\n\n");
        }
        parse_bytes(s, "t.log")
    }

    /// Every result row of rank 0 of `a` against `b` as one batch, and
    /// whether the match table found the exact pairs' keys equal.
    fn batch_of(a: &OpTable, b: &OpTable) -> (RecordBatch, bool) {
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
        let out = w.batch(&rc, 0..m.rows.len(), None).unwrap();
        (out, m.exact_keys_equal)
    }

    /// The keys the writer does not read or check itself: run 2's key of an
    /// exact pair is run 1's only where the root classes allow it, and a
    /// key that is not UTF-8 is still checked and written lossy.
    #[test]
    fn keys_are_each_side_s_own_and_text() {
        let log = hashed_log;
        let batch = |a: &OpTable, b: &OpTable| {
            let (out, equal) = batch_of(a, b);
            (out, equal, KeysChecked::of(a, b))
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
        let built = w.batch(&rc, 0..m.rows.len(), None).unwrap();
        w.write_rank(&rc, None).unwrap();
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
        assert_eq!(w2.batch(&slow, 0..m.rows.len(), None).unwrap(), built);
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

    /// A column's values as text, whatever its type.
    fn cells(batch: &RecordBatch, name: &str) -> Vec<Option<String>> {
        use arrow_array::cast::AsArray;
        let col = batch.column_by_name(name).unwrap();
        match col.data_type() {
            DataType::UInt32 => col
                .as_primitive::<UInt32Type>()
                .iter()
                .map(|v| v.map(|v| v.to_string()))
                .collect(),
            DataType::UInt64 => col
                .as_primitive::<UInt64Type>()
                .iter()
                .map(|v| v.map(|v| v.to_string()))
                .collect(),
            _ => texts(batch, name),
        }
    }

    /// Run 2's column that repeats run 1's values is written as a copy of
    /// run 1's encoded column chunk (the same bytes twice in the file) and
    /// reads back as its own column; a batch whose run 2 column differs
    /// closes the row group that copies it first.
    #[test]
    fn a_column_repeating_its_twin_is_written_as_a_copy() {
        use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
        use parquet::file::reader::{FileReader, SerializedFileReader};
        let plain = hashed_log(&[b"[layers.0.m/op_0_mm]", b"[norm/op_1_add]"]);
        let fsdp = hashed_log(&[
            b"[FSDPModel.layers.0.m/op_0_mm]",
            b"[FSDPModel.norm/op_1_add]",
        ]);
        let batch = |a: &OpTable, b: &OpTable| batch_of(a, b).0;
        let same = batch(&plain, &plain);
        let own = batch(&plain, &fsdp);
        let col = |b: &RecordBatch, name: &str| b.column_by_name(name).unwrap().clone();
        for (a, b) in TWINS {
            assert!(Arc::ptr_eq(&col(&same, a), &col(&same, b)), "{b}");
        }
        // Other keys, the same ranks and block lines.
        assert!(!Arc::ptr_eq(&col(&own, "key1"), &col(&own, "key2")));
        assert!(Arc::ptr_eq(&col(&own, "line1"), &col(&own, "line2")));
        assert!(Arc::ptr_eq(&col(&own, "rank"), &col(&own, "rank2")));

        let dir = tempfile::tempdir().unwrap();
        let p = dir.path().join("rows.parquet");
        let out = BufWriter::new(File::create(&p).unwrap());
        let mut w = ColumnsWriter::new(out, schema(), writer_properties()).unwrap();
        for b in [&same, &own, &same] {
            w.write(b).unwrap();
        }
        w.close().unwrap();

        let bytes = std::fs::read(&p).unwrap();
        let reader = SerializedFileReader::new(File::open(&p).unwrap()).unwrap();
        let meta = reader.metadata();
        // `own` broke the first group's copied keys: it starts the second.
        assert_eq!(meta.num_row_groups(), 2);
        assert_eq!(meta.row_group(0).num_rows(), 2);
        assert_eq!(meta.row_group(1).num_rows(), 4);
        let chunk = |g: usize, name: &str| {
            let group = meta.row_group(g);
            let c = (0..group.num_columns())
                .map(|i| group.column(i))
                .find(|c| c.column_path().string() == name)
                .unwrap();
            let start = c.data_page_offset() as usize;
            bytes[start..start + c.compressed_size() as usize].to_vec()
        };
        for (a, b) in TWINS {
            assert_eq!(chunk(0, a), chunk(0, b), "{b} is {a}'s copy");
        }
        assert_eq!(chunk(1, "line1"), chunk(1, "line2"));
        assert_ne!(chunk(1, "key1"), chunk(1, "key2"));
        // Each group reads back as the batches written into it.
        for (g, written) in [(0, vec![&same]), (1, vec![&own, &same])] {
            let read: Vec<RecordBatch> =
                ParquetRecordBatchReaderBuilder::try_new(File::open(&p).unwrap())
                    .unwrap()
                    .with_row_groups(vec![g])
                    .build()
                    .unwrap()
                    .collect::<Result<_, _>>()
                    .unwrap();
            for name in ["rank", "rank2", "key1", "key2", "line1", "line2", "status"] {
                let got: Vec<_> = read.iter().flat_map(|b| cells(b, name)).collect();
                let want: Vec<_> = written.iter().flat_map(|b| cells(b, name)).collect();
                assert_eq!(got, want, "row group {g}, {name}");
            }
        }
        assert_eq!(
            cells(&own, "key2"),
            vec![
                Some("FSDPModel.layers.0.m/op_0_mm".to_string()),
                Some("FSDPModel.norm/op_1_add".to_string())
            ]
        );
    }

    /// The columns of a twin pair are written with the same settings, so
    /// that one's encoded pages are the other's.
    #[test]
    fn twin_columns_have_the_same_settings() {
        let props = writer_properties();
        for (a, b) in TWINS {
            let (a, b) = (ColumnPath::from(a), ColumnPath::from(b));
            assert_eq!(props.encoding(&a), props.encoding(&b));
            assert_eq!(props.compression(&a), props.compression(&b));
            assert_eq!(props.dictionary_enabled(&a), props.dictionary_enabled(&b));
            assert_eq!(props.statistics_enabled(&a), props.statistics_enabled(&b));
            let s = schema();
            let (fa, fb) = (
                s.field_with_name(&a.string()).unwrap(),
                s.field_with_name(&b.string()).unwrap(),
            );
            assert_eq!(
                (fa.data_type(), fa.is_nullable()),
                (fb.data_type(), fb.is_nullable())
            );
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
        // The cause names are summary.json's (serde) names, one per kind.
        for k in K::ALL {
            let json = serde_json::to_string(&k).unwrap();
            assert_eq!(json, format!("\"{}\"", CAUSE_NAMES[cause_code(k) as usize]));
        }
        let distinct: std::collections::BTreeSet<&str> = CAUSE_NAMES.iter().copied().collect();
        assert_eq!(distinct.len(), CAUSE_NAMES.len());
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
        w.write_rank(&rc, None).unwrap();
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
