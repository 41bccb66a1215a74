//! `--rows FILE.parquet`: every result row of every rank as one Parquet
//! table with typed columns, for DuckDB, Spark or pandas. The extension
//! chooses it (anything else is JSON Lines, [`super::rows`]).
//!
//! Ranks are compared in parallel; each builds its rows in batches of
//! [`BATCH_ROWS`] (a window of batches at a time, built on all worker
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
//! Columns (nullable where a side or value can be absent):
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

use arrow_array::builder::{
    BinaryBuilder, BooleanBuilder, Float64Builder, StringBuilder, UInt32Builder, UInt64Builder,
};
use arrow_array::{ArrayRef, BinaryArray, RecordBatch, StringArray};
use arrow_schema::{DataType, Field as Column, Schema, SchemaRef};
use parquet::arrow::arrow_writer::{compute_leaves, ArrowColumnWriter, ArrowRowGroupWriterFactory};
use parquet::arrow::{add_encoded_arrow_schema_to_metadata, ArrowSchemaConverter};
use parquet::basic::Compression;
use parquet::errors::ParquetError;
use parquet::file::properties::{EnabledStatistics, WriterProperties};
use parquet::file::writer::SerializedFileWriter;
use parquet::schema::types::ColumnPath;

use super::RankComparison;
use crate::matcher::compare::{field_diff, stat_diffs};
use crate::matcher::Sides;
use crate::parser::Field;

/// Rows per record batch handed to the writer.
pub const BATCH_ROWS: usize = 64 * 1024;

/// Rows per Parquet row group.
pub const ROW_GROUP_ROWS: usize = 1024 * 1024;

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
        f("status", DataType::Utf8, false),
        f("pass", DataType::Utf8, true),
        f("phase", DataType::Utf8, false),
        f("op", DataType::Utf8, false),
        f("layer", DataType::UInt32, true),
    ];
    for name in DIFF_COLUMNS {
        cols.push(f(name, DataType::Float64, true));
    }
    cols.push(f("gates", DataType::Boolean, false));
    cols.push(f("cause", DataType::Utf8, true));
    Arc::new(Schema::new(cols))
}

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
        // Plain encoding throughout: a dictionary for the few-valued text
        // columns (status, pass, phase, op, cause) saved 6 % of the file
        // and cost 14 % of the writer's time. Min/max statistics only on
        // `rank` (row groups of one rank's rows can be skipped by
        // `WHERE rank = ...`); on the other columns they cost a comparison
        // per value and prune little in files whose row groups mix ops.
        let props = WriterProperties::builder()
            .set_compression(Compression::SNAPPY)
            .set_max_row_group_row_count(Some(ROW_GROUP_ROWS))
            .set_dictionary_enabled(false)
            .set_statistics_enabled(EnabledStatistics::None)
            .set_column_statistics_enabled(ColumnPath::from("rank"), EnabledStatistics::Chunk)
            .set_created_by(format!("actdiff {}", env!("CARGO_PKG_VERSION")));
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

    fn batch(
        &self,
        rc: &RankComparison<'_>,
        range: std::ops::Range<usize>,
    ) -> Result<RecordBatch, arrow_schema::ArrowError> {
        let m = rc.matches;
        let len = range.len();
        let mut rank = UInt32Builder::with_capacity(len);
        let mut rank2 = UInt32Builder::with_capacity(len);
        let mut row = UInt32Builder::with_capacity(len);
        // Keys as bytes, checked as UTF-8 once per column (`utf8_column`).
        let mut key1 = BinaryBuilder::with_capacity(len, len * 64);
        let mut key2 = BinaryBuilder::with_capacity(len, len * 64);
        let mut line1 = UInt64Builder::with_capacity(len);
        let mut line2 = UInt64Builder::with_capacity(len);
        let mut status = StringBuilder::with_capacity(len, len * 5);
        let mut pass = StringBuilder::with_capacity(len, len * 5);
        let mut phase = StringBuilder::with_capacity(len, len * 8);
        let mut op = StringBuilder::with_capacity(len, len * 8);
        let mut layer = UInt32Builder::with_capacity(len);
        let mut diffs: Vec<Float64Builder> = (0..DIFF_COLUMNS.len())
            .map(|_| Float64Builder::with_capacity(len))
            .collect();
        let mut gates = BooleanBuilder::with_capacity(len);
        let mut cause = StringBuilder::with_capacity(len, len);
        for i in range {
            let r = &m.rows[i];
            rank.append_value(rc.rank1);
            rank2.append_value(rc.rank2);
            row.append_value(i as u32);
            key1.append_option(r.r1().map(|a| rc.t1.key(a)));
            key2.append_option(r.r2().map(|b| rc.t2.key(b)));
            line1.append_option(r.r1().map(|a| rc.t1.line(a)));
            line2.append_option(r.r2().map(|b| rc.t2.line(b)));
            status.append_value(r.status.as_str());
            pass.append_option(r.strategy.as_str());
            // Run 1's side, else run 2's.
            let (t, side) = match r.sides().first() {
                (0, a) => (rc.t1, a),
                (_, b) => (rc.t2, b),
            };
            phase.append_value(t.phase(side));
            op.append_value(text(t.op_name(t.op_type(side))));
            layer.append_option(t.layer(side));
            match r.sides() {
                Sides::Both(a, b) => {
                    // Equal texts on both sides: 0; the reference's
                    // differences only when some text differs (rare).
                    let mut out = [None; 5];
                    let mut differ = false;
                    for (k, f) in Field::DIFF_STATS.iter().enumerate() {
                        let (x, y) = (rc.t1.field(a, *f), rc.t2.field(b, *f));
                        if !x.is_empty() && !y.is_empty() {
                            if x == y {
                                out[k] = Some(0.0);
                            } else {
                                differ = true;
                            }
                        }
                    }
                    if differ {
                        for (o, d) in out.iter_mut().zip(stat_diffs(rc.t1, a, rc.t2, b)) {
                            if o.is_none() {
                                *o = d;
                            }
                        }
                    }
                    for (k, d) in out.iter().enumerate() {
                        diffs[k].append_option(*d);
                    }
                    for (k, f) in [Field::OutputHash, Field::InputHashes].iter().enumerate() {
                        let (x, y) = (rc.t1.field(a, *f), rc.t2.field(b, *f));
                        let d = if !x.is_empty() && x == y {
                            Some(0.0)
                        } else {
                            field_diff(rc.t1, a, rc.t2, b, *f)
                        };
                        diffs[Field::DIFF_STATS.len() + k].append_option(d);
                    }
                }
                Sides::Only1(_) | Sides::Only2(_) => diffs.iter_mut().for_each(|d| d.append_null()),
            }
            gates.append_value(r.gates());
            cause.append_option(m.cause_kinds.get(i).copied().flatten().map(cause_name));
        }
        let mut cols: Vec<ArrayRef> = vec![
            Arc::new(rank.finish()),
            Arc::new(rank2.finish()),
            Arc::new(row.finish()),
            Arc::new(utf8_column(key1.finish())),
            Arc::new(utf8_column(key2.finish())),
            Arc::new(line1.finish()),
            Arc::new(line2.finish()),
            Arc::new(status.finish()),
            Arc::new(pass.finish()),
            Arc::new(phase.finish()),
            Arc::new(op.finish()),
            Arc::new(layer.finish()),
        ];
        cols.extend(diffs.iter_mut().map(|d| Arc::new(d.finish()) as ArrayRef));
        cols.push(Arc::new(gates.finish()));
        cols.push(Arc::new(cause.finish()));
        RecordBatch::try_new(self.schema.clone(), cols)
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

/// A key column as text: the bytes checked as UTF-8 in one pass (keys
/// nearly always are); else each value converted, invalid bytes replaced
/// (the parser warned about such a key).
fn utf8_column(keys: BinaryArray) -> StringArray {
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

/// The `cause` column's name of a cause class (as in `summary.json`).
fn cause_name(k: crate::matcher::cause::CauseKind) -> &'static str {
    use crate::matcher::cause::CauseKind as K;
    match k {
        K::Origin => "origin",
        K::Entry => "entry",
        K::Inherited => "inherited",
        K::BelowPrint => "inherited_below_print",
        K::Untraced => "inherited_untraced",
        K::ViaCollective => "via_collective",
        K::Unsynced => "unsynced",
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
        let ok = utf8_column(BinaryArray::from_opt_vec(vec![
            Some(b"layers.0/op_1_mm".as_slice()),
            None,
            Some("é/op_2".as_bytes()),
        ]));
        assert_eq!(ok.value(0), "layers.0/op_1_mm");
        assert!(ok.is_null(1));
        assert_eq!(ok.value(2), "é/op_2");
        // One invalid key: that key is converted with replacement
        // characters, the others and the nulls stay as they are.
        let bad = utf8_column(BinaryArray::from_opt_vec(vec![
            Some(b"a".as_slice()),
            Some(b"b\xff/op".as_slice()),
            None,
        ]));
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

    #[test]
    fn writes_a_valid_file_with_every_row() {
        let log = |h: &[&str]| {
            let mut s = format!("Total captured activations: {}\n", h.len());
            for (i, v) in h.iter().enumerate() {
                s.push_str(&format!(
                    "[layers.{i}.m/op_{i}_mm]\n  Output hash: {v}\n  L2 norm: {v}\n\n"
                ));
            }
            parse_bytes(s.into_bytes(), "t.log")
        };
        let a = log(&["1", "2", "3"]);
        let b = log(&["1", "2.5", "3"]);
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
        let batch = w.batch(&rc, 0..3).unwrap();
        assert_eq!(batch.num_rows(), 3);
        let status = batch
            .column_by_name("status")
            .unwrap()
            .as_any()
            .downcast_ref::<arrow_array::StringArray>()
            .unwrap();
        assert_eq!(
            (status.value(0), status.value(1), status.value(2)),
            ("match", "diff", "match")
        );
        let l2 = batch
            .column_by_name("diff_l2_norm")
            .unwrap()
            .as_any()
            .downcast_ref::<arrow_array::Float64Array>()
            .unwrap();
        assert!((l2.value(1) - 0.2).abs() < 1e-12, "{}", l2.value(1));
        let layer = batch
            .column_by_name("layer")
            .unwrap()
            .as_any()
            .downcast_ref::<arrow_array::UInt32Array>()
            .unwrap();
        assert_eq!(layer.value(2), 2);
        w.write_rank(&rc).unwrap();
        w.finish().unwrap();
        let bytes = std::fs::read(&p).unwrap();
        assert_eq!(&bytes[..4], b"PAR1");
        assert_eq!(&bytes[bytes.len() - 4..], b"PAR1");
    }
}
