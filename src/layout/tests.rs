use super::*;
use crate::capture::record::{Moments, Record, Stats};
use crate::logformat::{BlockLayout, HeaderNotes, Mesh, Precision};
use crate::parser::{parse_bytes, parse_path, Field};

/// The stats a capture writes for `v` (row-major values of `shape`).
fn stats(v: &[f64], shape: &[i64]) -> Stats {
    let n = v.len() as f64;
    Stats {
        shape: shape.to_vec(),
        dtype: "float32".into(),
        moments: Some(Moments {
            l2: v.iter().map(|x| x * x).sum::<f64>().sqrt(),
            min: v.iter().copied().fold(f64::INFINITY, f64::min),
            max: v.iter().copied().fold(f64::NEG_INFINITY, f64::max),
            mean: v.iter().sum::<f64>() / n,
            nan_count: 0,
            inf_count: 0,
        }),
    }
}

fn l1(v: &[f64]) -> f64 {
    v.iter().map(|x| x.abs()).sum()
}

fn layout(stats: Option<&str>, outs: &[&str], ins: &[&str]) -> Option<BlockLayout> {
    Some(BlockLayout {
        stats: stats.map(str::to_string),
        outputs: outs.iter().map(|s| s.to_string()).collect(),
        inputs: ins.iter().map(|s| s.to_string()).collect(),
    })
}

fn log(mesh: Option<Mesh>, records: &[Record]) -> Vec<u8> {
    let mut out = Vec::new();
    let notes = HeaderNotes {
        mesh,
        ..Default::default()
    };
    crate::capture::record::write_header(&mut out, records.len() as u64, &notes, Precision::Full);
    for r in records {
        crate::capture::record::write_block(&mut out, r, Precision::Full);
    }
    out
}

fn tp(rank: u32) -> Option<Mesh> {
    Some(Mesh::parse("tp=2", &format!("tp={rank}")).unwrap())
}

/// A 4×4 tensor's values; column block `c` of width 2 is rank `c`'s shard.
fn whole() -> Vec<f64> {
    (0..16).map(|i| (i as f64 - 6.5) * 0.37).collect()
}

fn shard(c: usize) -> Vec<f64> {
    let w = whole();
    (0..4)
        .flat_map(|r| (0..2).map(move |j| (r, j)))
        .map(|(r, j)| w[r * 4 + c * 2 + j])
        .collect()
}

/// One rank's records: `x` (replicated input, plain) → `fc/op_0_mm` (a
/// column shard), `out/op_0_mm` (a pending sum), its all_reduce and the
/// wrapper holding the reduced value, then `norm/op_0_mul` on the replica.
fn rank_records(rank: usize, replica_scale: f64) -> Vec<Record> {
    let x: Vec<f64> = (0..16).map(|i| i as f64 * 0.1).collect();
    let s = shard(rank);
    // The pending sum: rank r holds the partial products; the reduction is
    // their sum, the same on both ranks.
    let part: Vec<f64> = (0..16)
        .map(|i| (i as f64 + 1.0) * (rank as f64 + 1.0))
        .collect();
    let reduced: Vec<f64> = (0..16).map(|i| (i as f64 + 1.0) * 3.0).collect();
    let norm: Vec<f64> = reduced.iter().map(|v| v * 0.5 * replica_scale).collect();
    vec![
        Record {
            key: "fc/op_0_mm".into(),
            stats: Some(stats(&s, &[4, 2])),
            output_hashes: vec![l1(&s)],
            input_hashes: vec![l1(&x)],
            input_producers: vec![String::new()],
            layout: layout(Some("tp:S(1) [4, 4]"), &["tp:S(1)"], &["-"]),
            ..Default::default()
        },
        Record {
            key: "out/op_0_mm".into(),
            stats: Some(stats(&part, &[4, 4])),
            output_hashes: vec![l1(&part)],
            input_hashes: vec![l1(&s)],
            input_producers: vec!["fc/op_0_mm".into()],
            layout: layout(Some("tp:P [4, 4]"), &["tp:P"], &["tp:S(1)"]),
            ..Default::default()
        },
        Record {
            key: "out/op_1_all_reduce".into(),
            // Recorded before the asynchronous reduction completed.
            stats: Some(stats(&part, &[4, 4])),
            output_hashes: vec![l1(&part)],
            input_hashes: vec![l1(&part)],
            input_producers: vec![String::new()],
            layout: layout(None, &["-"], &["tp:P"]),
            ..Default::default()
        },
        Record {
            key: "out/op_2__wrap_tensor_autograd".into(),
            stats: Some(stats(&reduced, &[4, 4])),
            output_hashes: vec![l1(&reduced)],
            input_hashes: vec![l1(&reduced)],
            input_producers: vec!["out/op_1_all_reduce".into()],
            ..Default::default()
        },
        Record {
            key: "norm/op_0_mul".into(),
            stats: Some(stats(&norm, &[4, 4])),
            output_hashes: vec![l1(&norm)],
            input_hashes: vec![l1(&reduced)],
            input_producers: vec!["out/op_2__wrap_tensor_autograd".into()],
            ..Default::default()
        },
    ]
}

fn tables(scale1: f64) -> Vec<(u32, OpTable)> {
    vec![
        (
            0,
            parse_bytes(
                log(tp(0), &rank_records(0, 1.0)),
                "r/rank_0_activations.log",
            ),
        ),
        (
            1,
            parse_bytes(
                log(tp(1), &rank_records(1, scale1)),
                "r/rank_1_activations.log",
            ),
        ),
    ]
}

fn close(a: f64, b: f64) -> bool {
    (a - b).abs() <= 1e-12 * a.abs().max(b.abs()).max(1.0)
}

#[test]
fn tokens_read() {
    assert_eq!(Placement::parse("-").unwrap(), Placement::Plain);
    assert_eq!(Placement::parse("R").unwrap(), Placement::Replicate);
    assert_eq!(Placement::parse("?").unwrap(), Placement::Unknown);
    assert_eq!(
        Placement::parse("dp:R tp:S(1)").unwrap(),
        Placement::Shard(vec![("tp".into(), 1)])
    );
    assert_eq!(
        Placement::parse("tp:P").unwrap(),
        Placement::Partial(vec!["tp".into()])
    );
    assert!(Placement::parse("tp:S(x)").unwrap_err().contains("S(x)"));
    assert!(Placement::parse("S(1)").unwrap_err().contains("MESH_DIM"));
    let l =
        row_layout(b"[a/op_0_mm]\n  Layout: tp:S(1) [4, 4]\n  Input layouts: -; tp:P\n\n").unwrap();
    assert_eq!(
        l.stats,
        Some((Placement::Shard(vec![("tp".into(), 1)]), vec![4, 4]))
    );
    assert_eq!(
        l.inputs,
        vec![Placement::Plain, Placement::Partial(vec!["tp".into()])]
    );
    assert_eq!(l.offset, None);
    let l = row_layout(b"  Layout: tp:S(1) [4, 4] at [0, 2]\n").unwrap();
    assert_eq!(
        l.stats,
        Some((Placement::Shard(vec![("tp".into(), 1)]), vec![4, 4]))
    );
    assert_eq!(l.offset, Some(vec![0, 2]));
    assert!(row_layout(b"  Layout: tp:S(1) [4, x]\n")
        .unwrap_err()
        .contains("shape"));
    assert!(row_layout(b"  Layout: tp:S(1) [4, 4] at [0, y]\n")
        .unwrap_err()
        .contains("offset"));
}

#[test]
fn mesh_lines_round_trip_through_the_parser() {
    let t = parse_bytes(
        log(tp(1), &rank_records(1, 1.0)),
        "r/rank_1_activations.log",
    );
    assert_eq!(t.header().mesh, tp(1));
    assert!(t.warnings().is_empty(), "{:?}", t.warnings());
    let bad = String::from_utf8(log(tp(1), &[]))
        .unwrap()
        .replace("Coords: tp=1", "Coords: tp=7");
    let t = parse_bytes(bad.into_bytes(), "r/rank_1_activations.log");
    assert_eq!(t.header().mesh, None);
    assert!(
        t.warnings()[0].message.contains("outside the mesh"),
        "{:?}",
        t.warnings()
    );
}

#[test]
fn shards_combine_into_the_whole_tensor() {
    let logs = tables(1.0);
    let mesh = mesh_of(&logs).unwrap().unwrap();
    let dims = sharding_dims(&logs, &mesh).unwrap();
    assert_eq!(dims, vec!["tp".to_string()]);
    let dir = tempfile::tempdir().unwrap();
    let c = combine(2, &logs, &mesh, &dims, dir.path()).unwrap();
    assert_eq!(
        c.ranks,
        vec![CombinedRank {
            rank: 0,
            name: String::new(),
            ranks: vec![0, 1]
        }]
    );
    assert_eq!(
        (c.mismatch_count, c.not_comparable, c.communication_left_out),
        (0, 0, 2)
    );
    assert_eq!(
        c.describe(),
        vec!["ranks 0–1 combined as tp=2 (rank 0)".to_string()]
    );
    let t = parse_path(&dir.path().join("rank_0_activations.log")).unwrap();
    let keys: Vec<String> = (0..t.len()).map(|r| t.key_str(r).into_owned()).collect();
    assert_eq!(keys, ["fc/op_0_mm", "out/op_0_mm", "norm/op_0_mul"]);
    // The sharded result: the whole tensor's stats, exactly (full precision).
    let w = whole();
    let s = stats(&w, &[4, 4]).moments.unwrap();
    let f = |row: usize, field: Field| t.text(row, field).parse::<f64>().unwrap();
    assert_eq!(
        t.text(0, Field::Shape),
        "torch.Size([4, 4]), Dtype: torch.float32"
    );
    assert!(close(f(0, Field::L2Norm), s.l2));
    assert!(close(f(0, Field::Min), s.min) && close(f(0, Field::Max), s.max));
    assert!(close(f(0, Field::Mean), s.mean));
    assert!(close(f(0, Field::OutputHash), l1(&w)));
    // The pending sum holds its reduction's value; the reduction's
    // consumer reads from the op that made the sum.
    let reduced: Vec<f64> = (0..16).map(|i| (i as f64 + 1.0) * 3.0).collect();
    assert!(close(f(1, Field::OutputHash), l1(&reduced)));
    assert!(
        close(f(1, Field::InputHashes), l1(&w)),
        "the sharded input's whole L1"
    );
    assert_eq!(t.text(2, Field::InputProducers), "out/op_0_mm");
}

#[test]
fn a_replica_that_differs_names_its_rank() {
    let logs = tables(1.001);
    let mesh = mesh_of(&logs).unwrap().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let c = combine(2, &logs, &mesh, &["tp".into()], dir.path()).unwrap();
    assert!(c.mismatch_count > 0);
    let m = &c.mismatches[0];
    assert_eq!((m.rank, m.against, m.key.as_str()), (1, 0, "norm/op_0_mul"));
    assert_eq!(m.path, std::path::Path::new("r/rank_1_activations.log"));
    let lines = c.lines("tp2");
    assert!(
        lines
            .iter()
            .any(|l| l.contains("rank 1's replica of `norm/op_0_mul` differs from rank 0's")),
        "{lines:?}"
    );
}

#[test]
fn ranks_that_record_different_ops_are_not_combined() {
    let mut r1 = rank_records(1, 1.0);
    r1[1].key = "out/op_0_addmm".into();
    let logs = vec![
        (
            0,
            parse_bytes(
                log(tp(0), &rank_records(0, 1.0)),
                "r/rank_0_activations.log",
            ),
        ),
        (1, parse_bytes(log(tp(1), &r1), "r/rank_1_activations.log")),
    ];
    let mesh = mesh_of(&logs).unwrap().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let e = combine(2, &logs, &mesh, &["tp".into()], dir.path()).unwrap_err();
    assert!(e.starts_with("r/rank_1_activations.log:"), "{e}");
    assert!(
        e.contains("`out/op_0_addmm`") && e.contains("ran different ops"),
        "{e}"
    );
    // A log without the mesh line beside ones with it is an error too.
    let logs = vec![
        (
            0,
            parse_bytes(
                log(tp(0), &rank_records(0, 1.0)),
                "r/rank_0_activations.log",
            ),
        ),
        (
            1,
            parse_bytes(log(None, &rank_records(1, 1.0)), "r/rank_1_activations.log"),
        ),
    ];
    assert!(mesh_of(&logs)
        .unwrap_err()
        .contains("rank_1_activations.log: no `Mesh:`"));
}

#[test]
fn a_pending_sum_without_its_reduction_is_paired_not_compared() {
    let recs: Vec<Vec<Record>> = (0..2)
        .map(|r| {
            let mut v = rank_records(r, 1.0);
            v.truncate(2);
            v
        })
        .collect();
    let logs = vec![
        (
            0,
            parse_bytes(log(tp(0), &recs[0]), "r/rank_0_activations.log"),
        ),
        (
            1,
            parse_bytes(log(tp(1), &recs[1]), "r/rank_1_activations.log"),
        ),
    ];
    let mesh = mesh_of(&logs).unwrap().unwrap();
    let dir = tempfile::tempdir().unwrap();
    let c = combine(2, &logs, &mesh, &["tp".into()], dir.path()).unwrap();
    assert_eq!(c.not_comparable, 1);
    let t = parse_path(&dir.path().join("rank_0_activations.log")).unwrap();
    assert_eq!(t.key_str(1), "out/op_0_mm");
    assert!(!t.has(1, Field::L2Norm) && !t.has(1, Field::OutputHash));
}

/// A column shard's digest (indexed by its elements' places in the whole
/// tensor, as the capture writes it) combines into the whole tensor's
/// digest; a replica's digest is kept; a pending sum gets none.
#[test]
fn shard_digests_combine_into_the_whole_tensors_digest() {
    use crate::capture::digest::{self, Index};
    let f32s = |v: &[f64]| v.iter().map(|x| *x as f32).collect::<Vec<f32>>();
    let x: Vec<f32> = (0..16).map(|i| i as f32 * 0.1).collect();
    let replica = digest::digest(&[1.5f32, 2.5]);
    let logs: Vec<(u32, OpTable)> = (0..2usize)
        .map(|r| {
            let mut recs = rank_records(r, 1.0);
            let s = f32s(&shard(r));
            let at = Index::shard(&[4, 2], 1, 4, 2 * r as u64);
            recs[0].output_digests = vec![digest::finish(digest::host_sum_at(&s, at), 8)];
            recs[0].input_digests = vec![digest::digest(&x)];
            recs[1].output_digests = vec![digest::digest(&[r as f32])];
            recs[1].input_digests = recs[0].output_digests.clone();
            // The reduction's result (whole on both ranks) and its wrapper.
            recs[3].output_digests = vec![replica];
            recs[3].input_digests = vec![replica];
            recs[4].output_digests = vec![replica];
            recs[4].input_digests = vec![replica];
            let path = format!("r/rank_{r}_activations.log");
            (r as u32, parse_bytes(log(tp(r as u32), &recs), &path))
        })
        .collect();
    let mesh = mesh_of(&logs).unwrap().unwrap();
    let dir = tempfile::tempdir().unwrap();
    combine(2, &logs, &mesh, &["tp".into()], dir.path()).unwrap();
    let t = parse_path(&dir.path().join("rank_0_activations.log")).unwrap();
    let d = |row: usize, f: Field| t.digests(row, f).collect::<Vec<_>>();
    let whole_digest = digest::digest(&f32s(&whole()));
    assert_eq!(t.key_str(0), "fc/op_0_mm");
    assert_eq!(d(0, Field::OutputDigest), vec![Some(whole_digest)]);
    assert_eq!(d(0, Field::InputDigests), vec![Some(digest::digest(&x))]);
    // The pending sum takes its reduction's digest, and its input (the
    // shard) the combined one.
    assert_eq!(d(1, Field::OutputDigest), vec![Some(replica)]);
    assert_eq!(d(1, Field::InputDigests), d(0, Field::OutputDigest));
    assert_eq!(t.key_str(2), "norm/op_0_mul");
    assert_eq!(d(2, Field::OutputDigest), vec![Some(replica)]);
    // Shard digests by their own indexes would not give the whole's.
    let own: Vec<u64> = (0..2).map(|r| digest::digest(&f32s(&shard(r)))).collect();
    assert_ne!(digest::combine(own), whole_digest);
}

#[test]
fn a_shard_over_dimensions_not_combined_is_the_same_on_every_rank_of_a_group() {
    let tp = ["tp".to_string()];
    let p = |t: &str| Placement::parse(t).unwrap();
    assert!(p("-").is_same_over(&tp) && p("R").is_same_over(&tp));
    assert!(
        p("dp:S(0)").is_same_over(&tp),
        "an FSDP shard in a tp group"
    );
    assert!(p("dp:S(0)").is_same_over(&[]), "nothing combined");
    assert!(!p("tp:S(1)").is_same_over(&tp));
    assert!(!p("dp:S(0) tp:S(1)").is_same_over(&tp));
    assert!(!p("dp:P").is_same_over(&tp) && !p("?").is_same_over(&tp));
}

/// FSDP alone (`Mesh: dp=2`, nothing combined): each rank keeps its own
/// forward and backward, and its optimizer rows are combined from both
/// ranks' shards of the parameter (`dp:S(0)`): whole values on both
/// combined ranks. When the ranks' optimizer steps ran different ops, the
/// shards stay as they are and the layout's lines say why.
#[test]
fn fsdp_optimizer_rows_combine_from_every_ranks_shard() {
    let dp = |rank: u32| Some(Mesh::parse("dp=2", &format!("dp={rank}")).unwrap());
    let w = whole();
    let rows_of = |rank: usize| -> Vec<f64> { w[rank * 8..rank * 8 + 8].to_vec() };
    let records = |rank: usize, with_update: bool| {
        let own: Vec<f64> = (0..4).map(|i| (i + rank) as f64).collect();
        let s = rows_of(rank);
        let mut v = vec![
            Record {
                key: "fc/op_0_mm".into(),
                stats: Some(stats(&own, &[4])),
                output_hashes: vec![l1(&own)],
                input_hashes: vec![1.0],
                ..Default::default()
            },
            Record {
                key: "fc/op_1_mm".into(),
                stats: Some(stats(&own, &[4])),
                output_hashes: vec![l1(&own)],
                input_hashes: vec![1.0],
                phase: crate::parser::Phase::Backward,
                ..Default::default()
            },
        ];
        if with_update {
            v.push(Record {
                key: "<none>/op_0_add_".into(),
                stats: Some(stats(&s, &[2, 4])),
                output_hashes: vec![l1(&s)],
                input_hashes: vec![l1(&s)],
                parameters: "fc.weight".into(),
                layout: layout(
                    Some(&format!("dp:S(0) [4, 4] at [{}, 0]", 2 * rank)),
                    &["dp:S(0)"],
                    &["dp:S(0)"],
                ),
                ..Default::default()
            });
        }
        v
    };
    let logs = |update1: bool| {
        vec![
            (
                0,
                parse_bytes(log(dp(0), &records(0, true)), "r/rank_0_activations.log"),
            ),
            (
                1,
                parse_bytes(log(dp(1), &records(1, update1)), "r/rank_1_activations.log"),
            ),
        ]
    };
    let dir = tempfile::tempdir().unwrap();
    let l = logs(true);
    let mesh = mesh_of(&l).unwrap().unwrap();
    assert_eq!(sharding_dims(&l, &mesh).unwrap(), Vec::<String>::new());
    let c = combine(2, &l, &mesh, &[], dir.path()).unwrap();
    assert_eq!((c.combined.as_str(), c.parameters.as_str()), ("", "dp=2"));
    for rank in 0..2 {
        let t = parse_path(&dir.path().join(format!("rank_{rank}_activations.log"))).unwrap();
        let num = |row: usize, field: Field| t.text(row, field).parse::<f64>().unwrap();
        assert_eq!(t.len(), 3);
        // Its own forward, the whole parameter's update.
        let own: Vec<f64> = (0..4).map(|i| (i + rank) as f64).collect();
        assert!(close(num(0, Field::OutputHash), l1(&own)));
        assert_eq!(
            t.text(2, Field::Shape),
            "torch.Size([4, 4]), Dtype: torch.float32"
        );
        assert!(close(num(2, Field::OutputHash), l1(&w)));
        assert!(close(
            num(2, Field::L2Norm),
            stats(&w, &[4, 4]).moments.unwrap().l2
        ));
        assert_eq!(t.parameters(2), "fc.weight");
    }
    // Rank 1's step lacks the update: its shards are kept, and said.
    let l = logs(false);
    let dir = tempfile::tempdir().unwrap();
    let c = combine(2, &l, &mesh, &[], dir.path()).unwrap();
    assert!(c.parameters.is_empty(), "{c:?}");
    assert!(
        c.lines("b")
            .iter()
            .any(|x| x.contains("the optimizer's parameter shards not combined")),
        "{:?}",
        c.lines("b")
    );
}
