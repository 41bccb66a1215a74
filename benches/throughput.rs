//! Parser and matcher throughput on generated logs (`actdiff::gen`).
//!
//! ```text
//! cargo bench --bench throughput
//! ACTDIFF_BENCH_OPS=400000 cargo bench --bench throughput -- parse
//! ```
//!
//! One rank, two runs of `ACTDIFF_BENCH_OPS` ops (default 200,000, about
//! 68 MB per log), 1% of the rows perturbed in run 2:
//!
//! - `parse/parse_bytes_serial`: one thread, bytes in memory (MB/s).
//! - `parse/parse_chunks_parallel`: the same bytes split with `chunk_bounds`
//!   into 4 chunks per rayon thread (at least 4 MiB each), parsed on the pool.
//! - `parse/parse_path_mmap`: `parse_path` on the log written to a temp file
//!   (page cache warm: this measures parsing, not the disk).
//! - `match/match_tables`: pairing and judging the two tables (rows/s).

use std::hint::black_box;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use actdiff::gen::{write_log, GenOptions};
use actdiff::matcher::{match_tables, MatchOptions};
use actdiff::parser::{chunk_bounds, parse_bytes, parse_chunks, parse_path, LogSource};
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, SamplingMode, Throughput};

fn ops() -> u64 {
    std::env::var("ACTDIFF_BENCH_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(200_000)
}

fn log(opts: &GenOptions, run: u8) -> Vec<u8> {
    let mut v = Vec::new();
    write_log(&mut v, opts, 0, run).expect("writing to memory");
    v
}

fn benches(c: &mut Criterion) {
    let opts = GenOptions {
        ops: ops(),
        ranks: 1,
        seed: 1,
        perturb: 0.01,
        perturb_count: None,
        step: None,
    };
    let run1 = log(&opts, 1);
    let run2 = log(&opts, 2);
    let len = run1.len();
    let dir = tempfile::tempdir().expect("temp dir");
    let file = dir.path().join("rank_0_activations.log");
    std::fs::write(&file, &run1).expect("writing the temp log");
    eprintln!(
        "throughput: {} ops, {:.1} MB per log, {} rayon threads",
        opts.ops,
        len as f64 / 1e6,
        rayon::current_num_threads()
    );

    let mut g = c.benchmark_group("parse");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(4))
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Bytes(len as u64));
    g.bench_function("parse_bytes_serial", |b| {
        b.iter_batched(
            || run1.clone(),
            |bytes| parse_bytes(bytes, "run1.log"),
            BatchSize::LargeInput,
        )
    });
    let source = Arc::new(LogSource::Owned(run1.clone()));
    let target = (len / (4 * rayon::current_num_threads().max(1))).max(4 << 20);
    let bounds = chunk_bounds(source.bytes(), target);
    g.bench_function("parse_chunks_parallel", |b| {
        b.iter(|| {
            parse_chunks(
                source.clone(),
                PathBuf::from("run1.log"),
                black_box(&bounds),
            )
        })
    });
    g.bench_function("parse_path_mmap", |b| {
        b.iter(|| parse_path(black_box(&file)).expect("parsing the temp log"))
    });
    g.finish();

    let t1 = parse_bytes(run1, "run1.log");
    let t2 = parse_bytes(run2, "run2.log");
    let mopts = MatchOptions::default();
    let m = match_tables(&t1, &t2, &mopts);
    assert_eq!(m.counts().diff, opts.perturbed_rows());
    let mut g = c.benchmark_group("match");
    g.sample_size(10)
        .warm_up_time(Duration::from_millis(500))
        .measurement_time(Duration::from_secs(4))
        .sampling_mode(SamplingMode::Flat)
        .throughput(Throughput::Elements(opts.ops));
    g.bench_function("match_tables", |b| {
        b.iter(|| match_tables(black_box(&t1), black_box(&t2), &mopts))
    });
    g.finish();
}

criterion_group!(throughput, benches);
criterion_main!(throughput);
