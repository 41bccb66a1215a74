use super::*;
use crate::matcher::{match_tables, MatchOptions, Status};
use crate::parser::parse_bytes;

fn log(opts: &GenOptions, rank: u32, run: u8) -> Vec<u8> {
    let mut v = Vec::new();
    let s = write_log(&mut v, opts, rank, run).unwrap();
    assert_eq!(s.bytes, v.len() as u64);
    assert_eq!(s.ops, opts.ops);
    v
}

fn opts(ops: u64, ranks: u32, count: Option<u64>) -> GenOptions {
    GenOptions {
        ops,
        ranks,
        seed: 11,
        perturb: 0.01,
        perturb_count: count,
        step: None,
    }
}

#[test]
fn generated_log_parses_cleanly() {
    for (ops, ranks) in [(100_000, 1), (12_000, 4)] {
        let o = opts(ops, ranks, None);
        let bytes = log(&o, 0, 1);
        let avg = bytes.len() as f64 / o.ops as f64;
        assert!((250.0..400.0).contains(&avg), "{avg} bytes per block");
        let text = std::str::from_utf8(&bytes).unwrap();
        for needle in [
            "[tok_embeddings/op_",
            "[layers.31.feed_forward.w1/op_",
            "/op_0__scaled_dot_product_flash_attention_for_cpu]",
            "_fused_adamw_]\n  Input hashes: ",
            "  Phase: backward\n",
            "  Input producers: ;\n",
            "-0.000000e+00",
            "add_]\n  Output hash: ",
        ] {
            assert!(text.contains(needle), "{needle}");
        }
        if ranks == 1 {
            assert!(text.contains(": inf\n"));
            assert!(text.contains(": -inf\n"));
        } else {
            assert!(text.contains("_allgather_base_]"));
            assert!(text.contains("  Mean: nan\n"));
        }
        let t = parse_bytes(bytes, "gen.log");
        assert!(t.warnings().is_empty(), "{:?}", t.warnings());
        assert!(t.warning_counts().is_empty());
        assert_eq!(t.header().total, Some(o.ops));
        assert!(t.header().has_rule);
        assert_eq!(t.len() as u64, o.ops);
        assert!(crate::parser::duplicate_keys(&t).is_empty());
        assert!((0..t.len()).any(|r| t.is_backward(r)));
    }
}

#[test]
fn same_seed_same_bytes() {
    let o = opts(6_000, 2, Some(17));
    assert_eq!(log(&o, 1, 2), log(&o, 1, 2));
    assert_eq!(log(&o, 1, 1), log(&o, 1, 1));
    assert_ne!(log(&o, 0, 1), log(&o, 1, 1));
    let mut other = o.clone();
    other.seed += 1;
    assert_ne!(log(&o, 0, 1), log(&other, 0, 1));
}

#[test]
fn runs_differ_exactly_in_the_perturbed_rows() {
    for (ops, ranks, count) in [(9_000, 1, Some(37)), (5_000, 3, None), (300, 1, Some(300))] {
        let o = opts(ops, ranks, count);
        let want = o.perturbed_rows();
        for rank in 0..ranks {
            let t1 = parse_bytes(log(&o, rank, 1), "run1.log");
            let t2 = parse_bytes(log(&o, rank, 2), "run2.log");
            let m = match_tables(&t1, &t2, &MatchOptions::default());
            let c = m.counts();
            assert_eq!(c.diff, want, "ops {ops} rank {rank}");
            assert_eq!(c.matched, ops - want);
            assert_eq!((c.only1, c.only2, c.truncated), (0, 0, 0));
            assert_eq!(m.strategy_counts().exact, ops);
            assert!(m
                .rows
                .iter()
                .all(|r| r.r1() == r.r2() || r.status != Status::Match));
        }
    }
}

#[test]
fn perturb_fraction_and_stats() {
    let o = GenOptions {
        ops: 1000,
        perturb: 0.0125,
        ..GenOptions::default()
    };
    assert_eq!(o.perturbed_rows(), 13);
    let mut v = Vec::new();
    assert_eq!(write_log(&mut v, &o, 0, 2).unwrap().perturbed, 13);
    assert!(write_log(&mut v, &o, 0, 3).is_err());
    let bad = GenOptions {
        perturb: 1.5,
        ..GenOptions::default()
    };
    assert!(write_log(&mut v, &bad, 0, 1).is_err());
}

#[test]
fn generate_writes_every_rank() {
    let dir = tempfile::tempdir().unwrap();
    let (d1, d2) = (dir.path().join("a"), dir.path().join("b"));
    let o = opts(2_000, 3, Some(5));
    let s = generate(&d1, &d2, &o).unwrap();
    assert_eq!(s.files, 6);
    assert_eq!(s.ops, 6 * 2_000);
    assert_eq!(s.perturbed, 15);
    let mut bytes = 0;
    for r in 0..3 {
        for d in [&d1, &d2] {
            bytes += std::fs::metadata(d.join(log_file_name(r))).unwrap().len();
        }
        let f = std::fs::read(d1.join(log_file_name(r))).unwrap();
        assert_eq!(f, log(&o, r, 1));
    }
    assert_eq!(bytes, s.bytes);
    assert!(generate(&d1, &d1, &o).is_err());
}

#[test]
fn a_folder_holding_other_logs_is_seen_before_a_generation_into_it() {
    let d = tempfile::tempdir().unwrap();
    let dir = d.path();
    assert_eq!(stale_logs(&dir.join("absent"), 2, None), 0);
    for r in 0..3 {
        std::fs::write(dir.join(log_file_name(r)), b"").unwrap();
    }
    std::fs::write(dir.join("notes.txt"), b"").unwrap();
    // The same ranks again: every log is written again.
    assert_eq!(stale_logs(dir, 3, None), 0);
    // Fewer ranks: rank 2's log stays.
    assert_eq!(stale_logs(dir, 2, None), 1);
    // A step series: every top-level log stays, and step folders past it.
    std::fs::create_dir(dir.join("step_9")).unwrap();
    std::fs::create_dir(dir.join("step_1")).unwrap();
    assert_eq!(stale_logs(dir, 3, Some(2)), 4);
    assert_eq!(stale_logs(dir, 3, Some(9)), 3);
}
