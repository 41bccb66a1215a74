//! The capture agent against libtorch's own computations, and its log
//! against our parser. Needs feature `capture` (libtorch through tch):
//! `scripts/capture-ci.sh` runs it.
#![cfg(feature = "capture")]

use actdiff::capture::stats::{host_stats, read_back};
use actdiff::capture::{
    Capture, Inputs, OpRecord, Phase, Record, StatsBatch, StatsPath, TensorStats,
};
use actdiff::gen::fmt_e6;
use actdiff::parser::{parse_bytes, Field};
use tch::{Device, Kind, Tensor};

/// What PyTorch computes (the reference tracer's `_compute_stats` and
/// DebugMode's `norm_hash_fn`), through the same libtorch ops torch's
/// Python API calls.
fn torch_reference(t: &Tensor) -> (f64, Option<[f64; 6]>) {
    let _g = tch::no_grad_guard();
    let h = if t.is_complex() {
        t.to_kind(Kind::ComplexDouble).abs().sum(Kind::Double)
    } else if t.is_floating_point() {
        t.to_kind(Kind::Double).abs().sum(Kind::Double)
    } else {
        t.to_kind(Kind::Float)
            .to_kind(Kind::Double)
            .abs()
            .sum(Kind::Double)
    };
    let l1 = h.double_value(&[]);
    if !t.is_floating_point() || t.numel() == 0 {
        return (l1, None);
    }
    let t64 = t.to_kind(Kind::Double);
    let t32 = t.to_kind(Kind::Float);
    (
        l1,
        Some([
            t64.norm().double_value(&[]),
            t32.min().double_value(&[]),
            t32.max().double_value(&[]),
            t64.mean(Kind::Double).double_value(&[]),
            t.isnan().sum(Kind::Int64).int64_value(&[]) as f64,
            t.isinf().sum(Kind::Int64).int64_value(&[]) as f64,
        ]),
    )
}

/// Relative 1e-12 (`scale` widens it for sums with cancellation: the mean
/// is compared relative to mean(|x|)); NaN equals NaN, infinities exactly.
fn close(what: &str, got: f64, want: f64, scale: f64) {
    if want.is_nan() {
        assert!(got.is_nan(), "{what}: got {got}, want nan");
        return;
    }
    if want.is_infinite() || want == 0.0 {
        assert_eq!(got, want, "{what}");
        return;
    }
    let tol = 1e-12 * want.abs().max(scale);
    assert!(
        (got - want).abs() <= tol,
        "{what}: got {got:e}, want {want:e} (diff {:e} > {tol:e})",
        (got - want).abs()
    );
}

fn check(name: &str, t: &Tensor, s: &TensorStats) {
    check_as(name, t, s, true)
}

/// `moments`: whether the stats were asked for (else only the hash is checked).
fn check_as(name: &str, t: &Tensor, s: &TensorStats, moments: bool) {
    let (l1, want) = torch_reference(t);
    let want = want.filter(|_| moments);
    close(&format!("{name} l1"), s.l1, l1, 0.0);
    let n = t.numel().max(1) as f64;
    match (want, s.moments) {
        (Some(w), Some(m)) => {
            close(&format!("{name} l2"), m.l2, w[0], 0.0);
            // min and max exactly (NaN when any element is NaN).
            assert!(
                m.min == w[1] || (m.min.is_nan() && w[1].is_nan()),
                "{name} min {} vs {}",
                m.min,
                w[1]
            );
            assert!(
                m.max == w[2] || (m.max.is_nan() && w[2].is_nan()),
                "{name} max {} vs {}",
                m.max,
                w[2]
            );
            close(&format!("{name} mean"), m.mean, w[3], l1 / n);
            assert_eq!(m.nan_count as f64, w[4], "{name} nan count");
            assert_eq!(m.inf_count as f64, w[5], "{name} inf count");
        }
        (None, None) => {}
        (w, m) => panic!("{name}: moments {m:?}, reference {w:?}"),
    }
}

fn cases() -> Vec<(String, Tensor)> {
    tch::manual_seed(7);
    let cpu = (Kind::Float, Device::Cpu);
    let mut v: Vec<(String, Tensor)> = Vec::new();
    for n in [1i64, 7, 8, 255, 256, 257, 4096, 65_537, 1 << 20] {
        v.push((format!("randn[{n}]"), Tensor::randn([n], cpu) * 3.0 + 0.25));
    }
    v.push(("0-d".into(), Tensor::from(-2.5f32)));
    v.push(("0-d nan".into(), Tensor::from(f32::NAN)));
    v.push(("2-d".into(), Tensor::randn([64, 33], cpu)));
    v.push((
        "transposed (non-contiguous)".into(),
        Tensor::randn([300, 17], cpu).tr(),
    ));
    v.push((
        "strided slice".into(),
        Tensor::randn([1000], cpu).slice(0, 1, 1000, 3),
    ));
    let x = Tensor::randn([5000], cpu);
    let _ = x.narrow(0, 10, 3).fill_(f64::NAN);
    let _ = x.narrow(0, 100, 2).fill_(f64::INFINITY);
    let _ = x.narrow(0, 4000, 1).fill_(f64::NEG_INFINITY);
    v.push(("nan+inf".into(), x));
    let y = Tensor::randn([3000], cpu);
    let _ = y.narrow(0, 7, 1).fill_(f64::INFINITY);
    v.push(("+inf only".into(), y));
    let z = Tensor::randn([3000], cpu);
    let _ = z.narrow(0, 7, 5).fill_(f64::NEG_INFINITY);
    v.push(("-inf only".into(), z));
    v.push(("all nan".into(), Tensor::full([2000], f64::NAN, cpu)));
    v.push(("zeros".into(), Tensor::zeros([2048], cpu)));
    v.push(("big values".into(), Tensor::randn([10_000], cpu) * 1e30));
    v.push(("tiny values".into(), Tensor::randn([10_000], cpu) * 1e-40));
    let h = Tensor::randn([70_000], cpu) * 100.0;
    v.push(("float16".into(), h.to_kind(Kind::Half)));
    v.push(("float16 overflow".into(), (h * 1000.0).to_kind(Kind::Half)));
    v.push((
        "bfloat16".into(),
        (Tensor::randn([5, 1000, 3], cpu) * 7.0).to_kind(Kind::BFloat16),
    ));
    v.push((
        "bfloat16 transposed".into(),
        Tensor::randn([40, 50], cpu).to_kind(Kind::BFloat16).tr(),
    ));
    v.push(("empty [0]".into(), Tensor::zeros([0], cpu)));
    v.push(("empty [3, 0, 2]".into(), Tensor::zeros([3, 0, 2], cpu)));
    v.push((
        "empty float16".into(),
        Tensor::zeros([0, 4], (Kind::Half, Device::Cpu)),
    ));
    v
}

fn hash_cases() -> Vec<(String, Tensor)> {
    tch::manual_seed(9);
    vec![
        (
            "int64 tokens".into(),
            Tensor::randint(2000, [2, 64], (Kind::Int64, Device::Cpu)),
        ),
        (
            "int64 beyond 2^24 (through float32)".into(),
            Tensor::from_slice(&[(1i64 << 24) + 1, -(1i64 << 40) - 3, 5]),
        ),
        (
            "int32".into(),
            Tensor::from_slice(&[-3i32, 4, i32::MAX, i32::MIN]),
        ),
        ("bool".into(), Tensor::from_slice(&[true, false, true])),
        ("uint8".into(), Tensor::from_slice(&[255u8, 1, 0])),
        (
            "float64".into(),
            Tensor::randn([3333], (Kind::Double, Device::Cpu)),
        ),
        (
            "complex64".into(),
            Tensor::randn([100, 2], (Kind::Float, Device::Cpu)).view_as_complex(),
        ),
        (
            "int64 transposed".into(),
            Tensor::randint(50, [30, 20], (Kind::Int64, Device::Cpu)).tr(),
        ),
        (
            "empty int".into(),
            Tensor::zeros([0], (Kind::Int64, Device::Cpu)),
        ),
    ]
}

#[test]
fn host_pass_equals_torch() {
    for (name, t) in cases() {
        let s = host_stats(&t, true).unwrap();
        check(&name, &t, &s);
    }
    for (name, t) in hash_cases() {
        let s = host_stats(&t, false).unwrap();
        check_as(&name, &t, &s, false);
        assert!(s.moments.is_none());
    }
}

#[test]
fn device_path_equals_torch() {
    for (name, t) in cases().into_iter().chain(hash_cases()) {
        let s = read_back(&t, t.is_floating_point()).unwrap();
        check(&name, &t, &s);
    }
}

#[test]
fn host_pass_is_deterministic_across_thread_counts() {
    tch::manual_seed(3);
    let t = Tensor::randn([3_000_001], (Kind::Float, Device::Cpu));
    let a = host_stats(&t, true).unwrap();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let t2 = t.shallow_clone();
    let b = pool.install(move || host_stats(&t2, true).unwrap());
    assert_eq!(a.l1.to_bits(), b.l1.to_bits());
    let (ma, mb) = (a.moments.unwrap(), b.moments.unwrap());
    assert_eq!(ma.l2.to_bits(), mb.l2.to_bits());
    assert_eq!(ma.mean.to_bits(), mb.mean.to_bits());
}

/// Both paths through a batch: every record's values come back at flush,
/// field for field equal to PyTorch's; the device path makes one cat + copy.
#[test]
fn batch_flush_both_paths() {
    for path in [StatsPath::Auto, StatsPath::Device] {
        let cs = cases();
        let hs = hash_cases();
        let mut b = StatsBatch::new(path);
        for (name, t) in &cs {
            let rec = Record {
                key: name.clone(),
                ..Default::default()
            };
            let ins: Vec<&Tensor> = hs.iter().map(|(_, h)| h).collect();
            b.push(rec, Some(0), &[t, &hs[0].1], Inputs::Tensors(&ins))
                .unwrap();
        }
        if path == StatsPath::Device {
            assert!(b.device_scalars() > 0);
        } else {
            assert_eq!(b.device_scalars(), 0);
        }
        assert_eq!(b.len(), cs.len());
        let recs = b.flush().unwrap();
        assert!(b.is_empty());
        assert_eq!(recs.len(), cs.len());
        for ((name, t), r) in cs.iter().zip(&recs) {
            assert_eq!(&r.key, name);
            let st = r.stats.as_ref().unwrap();
            assert_eq!(st.shape, t.size(), "{name}");
            let s = TensorStats {
                l1: r.output_hashes[0],
                moments: st.moments,
            };
            check(&format!("{path:?} {name}"), t, &s);
            assert_eq!(r.output_hashes.len(), 2);
            close(
                "second output",
                r.output_hashes[1],
                torch_reference(&hs[0].1).0,
                0.0,
            );
            assert_eq!(r.input_hashes.len(), hs.len());
            for ((hn, h), v) in hs.iter().zip(&r.input_hashes) {
                close(
                    &format!("{path:?} input {hn}"),
                    *v,
                    torch_reference(h).0,
                    0.0,
                );
            }
        }
    }
}

/// Input hashes taken before an in-place op see the old values.
#[test]
fn prehashed_inputs_see_values_before_the_op() {
    for path in [StatsPath::Auto, StatsPath::Device] {
        let mut b = StatsBatch::new(path);
        let mut x = Tensor::ones([2000], (Kind::Float, Device::Cpu));
        let pre = b.hash_inputs(&[&x]).unwrap();
        let _ = x.g_add_scalar_(1.0);
        b.push(
            Record {
                key: "m/op_0_add_".into(),
                ..Default::default()
            },
            Some(0),
            &[&x],
            Inputs::Hashed(pre),
        )
        .unwrap();
        let r = b.flush().unwrap().pop().unwrap();
        assert_eq!(r.input_hashes, vec![2000.0], "{path:?}");
        assert_eq!(r.output_hashes, vec![4000.0], "{path:?}");
    }
}

fn e6(x: f64) -> String {
    let mut v = Vec::new();
    fmt_e6(&mut v, x);
    String::from_utf8(v).unwrap()
}

/// A capture written by the writer thread and read back by our parser,
/// field for field.
#[test]
fn capture_log_parses_back_field_for_field() {
    for path in [StatsPath::Auto, StatsPath::Device] {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("numerics/rank_0_activations.log");
        let mut cap = Capture::create(&log, path).unwrap();
        cap.flush_every = 3; // several flushes
        tch::manual_seed(1);
        let cpu = (Kind::Float, Device::Cpu);
        let x = Tensor::randn([32, 64], cpu);
        let w = Tensor::randn([64, 48], cpu);
        let y = x.mm(&w);
        let k1 = cap
            .record(
                OpRecord {
                    fqn: Some("layers.0._checkpoint_wrapped_module.wq"),
                    op: "mm",
                    phase: Phase::Forward,
                    location: Some("llama3/model.py:10".into()),
                },
                Some(0),
                &[&y],
                Inputs::Tensors(&[&x, &w]),
                &[1, 2],
                &[3],
            )
            .unwrap();
        assert_eq!(k1, "layers.0.wq/op_0_mm");
        let nan = y.relu();
        let _ = nan.narrow(0, 0, 1).fill_(f64::NAN);
        let k2 = cap
            .record(
                OpRecord {
                    fqn: Some("layers.0.wq"),
                    op: "relu",
                    phase: Phase::Forward,
                    location: None,
                },
                Some(0),
                &[&nan],
                Inputs::Tensors(&[&y]),
                &[3],
                &[4],
            )
            .unwrap();
        assert_eq!(k2, "layers.0.wq/op_1_relu");
        let mut small = Tensor::ones([2, 64, 1], cpu);
        let pre = cap.hash_inputs(&[&small]).unwrap();
        let _ = small.g_add_scalar_(1e-5);
        let k3 = cap
            .record(
                OpRecord {
                    fqn: None,
                    op: "add_",
                    phase: Phase::Backward,
                    location: None,
                },
                None,
                &[&small],
                Inputs::Hashed(pre),
                &[5],
                &[5],
            )
            .unwrap();
        assert_eq!(k3, "<none>/op_0_add_");
        let s = Tensor::from(3.5f32).to_kind(Kind::BFloat16);
        let k4 = cap
            .record(
                OpRecord {
                    fqn: Some("layers.0.wq"),
                    op: "sum",
                    phase: Phase::Backward,
                    location: Some("a/b.py:1".into()),
                },
                Some(0),
                &[&s],
                Inputs::Tensors(&[&nan, &x]),
                &[4, 1],
                &[6],
            )
            .unwrap();
        assert_eq!(k4, "layers.0.wq/op_2_sum");
        cap.note_excluded("view");
        cap.note_excluded("t");
        cap.note_excluded("view");
        let n = cap.finish().unwrap();
        assert_eq!(n, 4);

        let bytes = std::fs::read(&log).unwrap();
        let t = parse_bytes(bytes, &log);
        assert_eq!(t.len(), 4);
        assert_eq!(t.header().total, Some(4));
        assert_eq!(t.header().excluded, Some(vec!["t".into(), "view".into()]));
        // The extra `NaN count:` line of the relu row is known to the parser:
        // no warning at all; the line is in the log.
        assert!(t.warnings().is_empty(), "{:?}", t.warnings());
        assert!(
            String::from_utf8_lossy(t.bytes()).contains("  NaN count: 48\n"),
            "the NaN count line is written"
        );

        let keys: Vec<String> = (0..4).map(|r| t.key_str(r).into_owned()).collect();
        assert_eq!(keys, [k1.clone(), k2.clone(), k3, k4]);

        let (l1y, wy) = torch_reference(&y);
        let wy = wy.unwrap();
        assert_eq!(
            t.text(0, Field::Shape),
            "torch.Size([32, 48]), Dtype: torch.float32"
        );
        assert_eq!(t.text(0, Field::L2Norm), e6(wy[0]));
        assert_eq!(t.text(0, Field::Min), e6(wy[1]));
        assert_eq!(t.text(0, Field::Max), e6(wy[2]));
        assert_eq!(t.text(0, Field::Mean), e6(wy[3]));
        assert_eq!(t.text(0, Field::OutputHash), e6(l1y));
        let hx = torch_reference(&x).0;
        let hw = torch_reference(&w).0;
        assert_eq!(
            t.text(0, Field::InputHashes),
            format!("{}, {}", e6(hx), e6(hw))
        );
        // Two inputs without a captured producer: the separator only.
        assert_eq!(t.text(0, Field::InputProducers), ";");
        assert_eq!(t.text(0, Field::Location), "llama3/model.py:10");
        assert!(!t.is_backward(0));

        assert_eq!(t.text(1, Field::Min), "nan");
        assert_eq!(t.text(1, Field::InputProducers), k1);
        assert!(!t.has(1, Field::Location));

        assert!(!t.has(2, Field::Shape));
        assert!(!t.has(2, Field::L2Norm));
        assert_eq!(t.text(2, Field::InputHashes), e6(128.0));
        assert_eq!(
            t.text(2, Field::OutputHash),
            e6(128.0 * (1.0 + 1e-5f32) as f64)
        );
        assert!(t.is_backward(2));

        assert_eq!(
            t.text(3, Field::Shape),
            "torch.Size([]), Dtype: torch.bfloat16"
        );
        assert_eq!(t.text(3, Field::Mean), e6(3.5));
        assert_eq!(t.text(3, Field::InputProducers), format!("{k2};"));
        assert_eq!(t.text(3, Field::Phase), "backward");
    }
}
