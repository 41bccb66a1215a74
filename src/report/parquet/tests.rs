//! Tests of the Parquet rows writer.

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
    for p in Strategy::PASSES {
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
