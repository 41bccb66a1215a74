//! The Parquet file writer: a row group at a time, columns encoded in
//! parallel, twin columns written once and copied.

use std::fs::File;
use std::io::BufWriter;
use std::sync::{Arc, Mutex};

use arrow_array::RecordBatch;
use arrow_schema::SchemaRef;
use parquet::arrow::arrow_writer::{compute_leaves, ArrowColumnWriter, ArrowRowGroupWriterFactory};
use parquet::arrow::{add_encoded_arrow_schema_to_metadata, ArrowSchemaConverter};
use parquet::errors::ParquetError;
use parquet::file::properties::WriterProperties;
use parquet::file::writer::SerializedFileWriter;
use rayon::prelude::*;

use super::ROW_GROUP_ROWS;

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
pub(super) struct ColumnsWriter {
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
pub(super) const TWINS: [(&str, &str); 3] =
    [("rank", "rank2"), ("key1", "key2"), ("line1", "line2")];

/// The row group being written.
struct OpenGroup {
    writers: Vec<ArrowColumnWriter>,
    rows: usize,
    /// Per [`TWINS`] pair: the second column is the first's copy (every
    /// batch so far carried one array for both).
    copied: Vec<bool>,
}

impl ColumnsWriter {
    pub(super) fn new(
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
    pub(super) fn write(&mut self, batch: &RecordBatch) -> Result<(), ParquetError> {
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
    pub(super) fn close(mut self) -> Result<(), ParquetError> {
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
