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
//! `one_sided`, `inherited`, `inherited_below_print`, `inherited_untraced`,
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
use parquet::basic::{Compression, Encoding};
use parquet::errors::ParquetError;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::schema::types::ColumnPath;

mod writer;

use super::RankComparison;
use crate::matcher::cause::CauseKind;
use crate::matcher::compare::{field_diff, stat_diffs};
use crate::matcher::{MatchRow, Sides, Status, Strategy, ROW_SAME_TEXT};
use crate::parser::{Field, OpTable};
use writer::ColumnsWriter;
#[cfg(test)]
use writer::TWINS;

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

/// The `status` column's texts ([`Status::as_str`]), in [`Status::ALL`]'s
/// order.
const STATUS_NAMES: [&str; Status::ALL.len()] = {
    let mut names = [""; Status::ALL.len()];
    let mut k = 0;
    while k < names.len() {
        names[k] = Status::ALL[k].as_str();
        k += 1;
    }
    names
};

/// The `pass` column's texts ([`Strategy::as_str`]), in
/// [`Strategy::PASSES`]' order.
const PASS_NAMES: [&str; Strategy::PASSES.len()] = {
    let mut names = [""; Strategy::PASSES.len()];
    let mut k = 0;
    while k < names.len() {
        names[k] = match Strategy::PASSES[k].as_str() {
            Some(n) => n,
            None => "",
        };
        k += 1;
    }
    names
};

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

/// `x`'s position in `all` (its code in a dictionary column), if there.
fn code<T: PartialEq>(all: &[T], x: T) -> Option<u8> {
    all.iter().position(|c| *c == x).map(|i| i as u8)
}

/// `s`'s position in [`STATUS_NAMES`].
fn status_code(s: Status) -> u8 {
    code(&Status::ALL, s).unwrap_or(0)
}

/// `s`'s position in [`PASS_NAMES`]; `None` when unpaired.
fn pass_code(s: Strategy) -> Option<u8> {
    code(&Strategy::PASSES, s)
}

/// `k`'s position in [`CAUSE_NAMES`].
fn cause_code(k: CauseKind) -> u8 {
    code(&CauseKind::ALL, k).unwrap_or(0)
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
mod tests;
