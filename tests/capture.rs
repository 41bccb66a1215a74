//! The capture agent against libtorch's own computations, and its log
//! against our parser. Needs feature `capture` (the libtorch shim, built
//! against the torch of the build's Python): `scripts/capture-ci.sh` runs it
//! under the oldest and the newest supported torch.
//!
//! Tensors are made from host buffers (`Tensor::from_slice`) and viewed with
//! `as_strided`; every statistic is checked against what torch computes one
//! op and one `.item()` at a time (`Tensor::reference_stats`, the reference
//! tracer's way), and every digest against the algorithm's definition
//! applied to the element bits that libtorch reads out in logical order.
#![cfg(feature = "capture")]

use actdiff::capture::digest;
use actdiff::capture::digest::Index;
use actdiff::capture::stats::{host_stats, read_back};
use actdiff::capture::torch::{Kind, Tensor};
use actdiff::capture::{
    Capture, Inputs, OpRecord, Phase, Precision, Record, StatsBatch, StatsPath, TensorStats,
};
use actdiff::logformat::{fmt_e6, fmt_full, CompileBackend};
use actdiff::parser::{parse_bytes, Field};

/// A digest of a whole tensor (its own index).
const WHOLE: Option<Index> = Some(Index::WHOLE);

/// xorshift64* with Box-Muller normals: deterministic test data.
struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn unit(&mut self) -> f64 {
        ((self.next() >> 11) as f64 + 0.5) / (1u64 << 53) as f64
    }
    fn normal(&mut self) -> f32 {
        let (a, b) = (self.unit(), self.unit());
        ((-2.0 * a.ln()).sqrt() * (std::f64::consts::TAU * b).cos()) as f32
    }
    fn randn(&mut self, n: usize) -> Vec<f32> {
        (0..n).map(|_| self.normal()).collect()
    }
}

fn t32(v: &[f32], shape: &[i64]) -> Tensor {
    Tensor::from_slice(v, shape).unwrap()
}

/// The transpose of a contiguous 2-d tensor, as a strided view.
fn transposed(t: &Tensor) -> Tensor {
    let s = t.sizes().unwrap();
    t.as_strided(&[s[1], s[0]], &[1, s[1]], 0).unwrap()
}

/// What PyTorch computes: (l1, [l2, min, max, mean, nan, inf]).
fn torch_reference(t: &Tensor) -> (f64, Option<[f64; 6]>) {
    let i = t.info().unwrap();
    let moments = i.floating && i.numel > 0;
    let v = t.reference_stats(moments).unwrap();
    (v[0], moments.then(|| [v[1], v[2], v[3], v[4], v[5], v[6]]))
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
    let n = t.info().unwrap().numel.max(1) as f64;
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

/// The digest by its definition, from the 32-bit values libtorch reads out
/// in logical order.
fn digest_by_definition(t: &Tensor) -> u64 {
    digest::digest_of_words(&t.digest_words().unwrap())
}

fn finished(t: &Tensor, s: &TensorStats) -> u64 {
    let n = t.info().unwrap().digest_len();
    digest::finish(s.digest.expect("a digest"), n as u64)
}

fn cases() -> Vec<(String, Tensor)> {
    let mut r = Rng(7);
    let mut v: Vec<(String, Tensor)> = Vec::new();
    for n in [1usize, 7, 8, 255, 256, 257, 4096, 65_537, 1 << 20] {
        let x: Vec<f32> = r.randn(n).iter().map(|x| x * 3.0 + 0.25).collect();
        v.push((format!("randn[{n}]"), t32(&x, &[n as i64])));
    }
    v.push(("0-d".into(), t32(&[-2.5], &[])));
    v.push(("0-d nan".into(), t32(&[f32::NAN], &[])));
    v.push(("2-d".into(), t32(&r.randn(64 * 33), &[64, 33])));
    v.push((
        "transposed (non-contiguous)".into(),
        transposed(&t32(&r.randn(300 * 17), &[300, 17])),
    ));
    let base = t32(&r.randn(1000), &[1000]);
    v.push((
        "strided slice".into(),
        base.as_strided(&[333], &[3], 1).unwrap(),
    ));
    let mut x = r.randn(5000);
    x[10..13].fill(f32::NAN);
    x[100..102].fill(f32::INFINITY);
    x[4000] = f32::NEG_INFINITY;
    v.push(("nan+inf".into(), t32(&x, &[5000])));
    let mut y = r.randn(3000);
    y[7] = f32::INFINITY;
    v.push(("+inf only".into(), t32(&y, &[3000])));
    let mut z = r.randn(3000);
    z[7..12].fill(f32::NEG_INFINITY);
    v.push(("-inf only".into(), t32(&z, &[3000])));
    v.push(("all nan".into(), t32(&[f32::NAN; 2000], &[2000])));
    v.push(("zeros".into(), t32(&[0.0; 2048], &[2048])));
    let big: Vec<f32> = r.randn(10_000).iter().map(|x| x * 1e30).collect();
    v.push(("big values".into(), t32(&big, &[10_000])));
    let tiny: Vec<f32> = r.randn(10_000).iter().map(|x| x * 1e-40).collect();
    v.push(("tiny values".into(), t32(&tiny, &[10_000])));
    let h: Vec<f32> = r.randn(70_000).iter().map(|x| x * 100.0).collect();
    v.push((
        "float16".into(),
        t32(&h, &[70_000]).to_kind(Kind::Half).unwrap(),
    ));
    let h2: Vec<f32> = h.iter().map(|x| x * 1000.0).collect();
    v.push((
        "float16 overflow".into(),
        t32(&h2, &[70_000]).to_kind(Kind::Half).unwrap(),
    ));
    let b: Vec<f32> = r.randn(15_000).iter().map(|x| x * 7.0).collect();
    v.push((
        "bfloat16".into(),
        t32(&b, &[5, 1000, 3]).to_kind(Kind::BFloat16).unwrap(),
    ));
    v.push((
        "bfloat16 transposed".into(),
        transposed(
            &t32(&r.randn(2000), &[40, 50])
                .to_kind(Kind::BFloat16)
                .unwrap(),
        ),
    ));
    v.push(("empty [0]".into(), t32(&[], &[0])));
    v.push(("empty [3, 0, 2]".into(), t32(&[], &[3, 0, 2])));
    v.push((
        "empty float16".into(),
        t32(&[], &[0, 4]).to_kind(Kind::Half).unwrap(),
    ));
    v
}

fn hash_cases() -> Vec<(String, Tensor)> {
    let mut r = Rng(9);
    let tokens: Vec<i64> = (0..128).map(|_| (r.next() % 2000) as i64).collect();
    let grid: Vec<i64> = (0..600).map(|_| (r.next() % 50) as i64).collect();
    let f64s: Vec<f64> = (0..3333).map(|_| r.normal() as f64 * 1.5).collect();
    let pairs = r.randn(200);
    vec![
        (
            "int64 tokens".into(),
            Tensor::from_slice(&tokens, &[2, 64]).unwrap(),
        ),
        (
            "int64 beyond 2^24 (through float32)".into(),
            Tensor::from_slice(&[(1i64 << 24) + 1, -(1i64 << 40) - 3, 5], &[3]).unwrap(),
        ),
        (
            "int32".into(),
            Tensor::from_slice(&[-3i32, 4, i32::MAX, i32::MIN], &[4]).unwrap(),
        ),
        (
            "int16".into(),
            Tensor::from_slice(&[-3i16, 4, i16::MIN], &[3]).unwrap(),
        ),
        (
            "int8".into(),
            Tensor::from_slice(&[-3i8, 4, i8::MIN], &[3]).unwrap(),
        ),
        (
            "bool".into(),
            Tensor::from_slice(&[true, false, true], &[3]).unwrap(),
        ),
        (
            "uint8".into(),
            Tensor::from_slice(&[255u8, 1, 0], &[3]).unwrap(),
        ),
        (
            "float64".into(),
            Tensor::from_slice(&f64s, &[3333]).unwrap(),
        ),
        (
            "complex64".into(),
            t32(&pairs, &[100, 2]).to_kind(Kind::ComplexFloat).unwrap(),
        ),
        (
            "int64 transposed".into(),
            transposed(&Tensor::from_slice(&grid, &[30, 20]).unwrap()),
        ),
        (
            "empty int".into(),
            Tensor::from_slice::<i64>(&[], &[0]).unwrap(),
        ),
    ]
}

#[test]
fn host_pass_equals_torch() {
    for (name, t) in cases() {
        let s = host_stats(&t, true, None).unwrap();
        check(&name, &t, &s);
        assert!(s.digest.is_none());
    }
    for (name, t) in hash_cases() {
        let s = host_stats(&t, false, None).unwrap();
        check_as(&name, &t, &s, false);
        assert!(s.moments.is_none());
    }
}

#[test]
fn device_path_equals_torch() {
    for (name, t) in cases().into_iter().chain(hash_cases()) {
        let floating = t.info().unwrap().floating;
        let s = read_back(&t, floating, None).unwrap();
        check(&name, &t, &s);
    }
}

/// The host pass and the device ops give the same digest, and it is the
/// algorithm's definition over the bits libtorch reads in logical order.
#[test]
fn digests_equal_the_definition_on_both_paths() {
    for (name, t) in cases().into_iter().chain(hash_cases()) {
        let want = digest_by_definition(&t);
        let floating = t.info().unwrap().floating;
        let h = host_stats(&t, floating, WHOLE).unwrap();
        let d = read_back(&t, floating, WHOLE).unwrap();
        assert_eq!(finished(&t, &h), want, "{name}: host pass");
        assert_eq!(finished(&t, &d), want, "{name}: device ops");
        // The digest does not change the stats.
        check_as(&name, &t, &h, floating);
    }
    // The bits libtorch reads are the elements' own (contiguous float32).
    let x: Vec<f32> = Rng(3).randn(1000);
    let want = digest::digest(&x);
    assert_eq!(digest_by_definition(&t32(&x, &[1000])), want);
}

/// A DTensor shard's digest indexes its elements by their position in the
/// whole tensor, the same on the host pass and the device ops, so the
/// shards' digests combine to the whole tensor's (`digest::combine`):
/// float32 and float64, column shards of a strided view included.
#[test]
fn shard_digests_combine_on_both_paths() {
    let x = Rng(5).randn(6 * 10 * 4);
    let whole = t32(&x, &[6, 10, 4]);
    let want = digest::digest(&x);
    for dim in 0..3 {
        let len = [6i64, 10, 4][dim];
        for path in [false, true] {
            let mut ds = Vec::new();
            for (lo, hi) in [(0, len / 2), (len / 2, len)] {
                let part = narrow(&whole, &[6, 10, 4], dim, lo, hi - lo);
                let sizes = part.sizes().unwrap();
                let at = Some(Index::shard(&sizes, dim, len as u64, lo as u64));
                let s = if path {
                    read_back(&part, true, at).unwrap()
                } else {
                    host_stats(&part, true, at).unwrap()
                };
                ds.push(finished(&part, &s));
            }
            assert_eq!(digest::combine(ds), want, "dim {dim}, device ops: {path}");
        }
    }
    // float64: two 32-bit values per element, both at whole-tensor indexes.
    let y: Vec<f64> = (0..48).map(|i| i as f64 / 7.0).collect();
    let t = Tensor::from_slice(&y, &[8, 6]).unwrap();
    for path in [false, true] {
        let ds: Vec<u64> = [(0, 2), (2, 6)]
            .into_iter()
            .map(|(lo, hi)| {
                let part = narrow(&t, &[8, 6], 1, lo, hi - lo);
                let at = Some(Index::shard(&[8, hi - lo], 1, 6, lo as u64));
                let s = if path {
                    read_back(&part, false, at).unwrap()
                } else {
                    host_stats(&part, false, at).unwrap()
                };
                finished(&part, &s)
            })
            .collect();
        assert_eq!(
            digest::combine(ds),
            digest::digest(&y),
            "float64, device ops: {path}"
        );
    }
}

/// Elements `lo..lo + len` of dimension `dim` of contiguous `t` of shape
/// `shape`: a strided view.
fn narrow(t: &Tensor, shape: &[i64], dim: usize, lo: i64, len: i64) -> Tensor {
    let mut strides = vec![1i64; shape.len()];
    for d in (0..shape.len() - 1).rev() {
        strides[d] = strides[d + 1] * shape[d + 1];
    }
    let mut sizes = shape.to_vec();
    sizes[dim] = len;
    t.as_strided(&sizes, &strides, lo * strides[dim]).unwrap()
}

/// Equal for a contiguous tensor and a strided, offset view with the same
/// logical contents; different for a one-ulp change and a permutation.
#[test]
fn digest_is_independent_of_layout_and_sensitive_to_contents() {
    let mut r = Rng(11);
    let x = r.randn(24 * 10);
    let dense = t32(&x, &[24, 10]);
    // The same 24x10 values at stride (30, 2), offset 7, in a bigger buffer.
    let mut buf = vec![f32::NAN; 7 + 23 * 30 + 9 * 2 + 1];
    for i in 0..24 {
        for j in 0..10 {
            buf[7 + i * 30 + j * 2] = x[i * 10 + j];
        }
    }
    let n = buf.len() as i64;
    let view = t32(&buf, &[n]).as_strided(&[24, 10], &[30, 2], 7).unwrap();
    // A column-major copy viewed row-major (a transpose of the transpose).
    let mut cm = vec![0f32; 240];
    for i in 0..24 {
        for j in 0..10 {
            cm[j * 24 + i] = x[i * 10 + j];
        }
    }
    let tt = transposed(&t32(&cm, &[10, 24]));
    let d = |t: &Tensor, path: bool| {
        let s = if path {
            read_back(t, true, WHOLE).unwrap()
        } else {
            host_stats(t, true, WHOLE).unwrap()
        };
        finished(t, &s)
    };
    for path in [false, true] {
        let want = d(&dense, path);
        assert_eq!(
            d(&view, path),
            want,
            "strided, offset view (device ops: {path})"
        );
        assert_eq!(d(&tt, path), want, "transposed copy (device ops: {path})");
        let mut y = x.clone();
        y[123] = f32::from_bits(y[123].to_bits() + 1);
        assert_ne!(d(&t32(&y, &[24, 10]), path), want, "one ulp");
        let mut y = x.clone();
        y.swap(5, 200);
        assert_ne!(d(&t32(&y, &[24, 10]), path), want, "a permutation");
        // Same elements, other shape: the same logical sequence, same digest.
        assert_eq!(d(&t32(&x, &[240]), path), want, "a reshape keeps the order");
    }
}

#[test]
fn host_pass_is_deterministic_across_thread_counts() {
    let x = Rng(3).randn(3_000_001);
    let t = t32(&x, &[3_000_001]);
    let a = host_stats(&t, true, WHOLE).unwrap();
    let pool = rayon::ThreadPoolBuilder::new()
        .num_threads(1)
        .build()
        .unwrap();
    let t2 = t.clone();
    let b = pool.install(move || host_stats(&t2, true, WHOLE).unwrap());
    assert_eq!(a.l1.to_bits(), b.l1.to_bits());
    assert_eq!(a.digest, b.digest);
    let (ma, mb) = (a.moments.unwrap(), b.moments.unwrap());
    assert_eq!(ma.l2.to_bits(), mb.l2.to_bits());
    assert_eq!(ma.mean.to_bits(), mb.mean.to_bits());
}

/// Both paths through a batch: every record's values come back at flush,
/// field for field equal to PyTorch's; the device path makes one cat + copy.
#[test]
fn batch_flush_both_paths() {
    for digests in [false, true] {
        for path in [StatsPath::Auto, StatsPath::Device] {
            let cs = cases();
            let hs = hash_cases();
            let mut b = StatsBatch::new(path, digests);
            for (name, t) in &cs {
                let rec = Record {
                    key: name.clone(),
                    ..Default::default()
                };
                let ins: Vec<&Tensor> = hs.iter().map(|(_, h)| h).collect();
                b.push(
                    rec,
                    Some(0),
                    &[t, &hs[0].1],
                    Inputs::Tensors(&ins),
                    &Default::default(),
                )
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
                let what = format!("{path:?} digests {digests} {name}");
                assert_eq!(&r.key, name);
                let st = r.stats.as_ref().unwrap();
                assert_eq!(st.shape, t.sizes().unwrap(), "{what}");
                let s = TensorStats {
                    l1: r.output_hashes[0],
                    moments: st.moments,
                    digest: None,
                };
                check(&what, t, &s);
                assert_eq!(r.output_hashes.len(), 2);
                close(
                    "second output",
                    r.output_hashes[1],
                    torch_reference(&hs[0].1).0,
                    0.0,
                );
                assert_eq!(r.input_hashes.len(), hs.len());
                for ((hn, h), v) in hs.iter().zip(&r.input_hashes) {
                    close(&format!("{what} input {hn}"), *v, torch_reference(h).0, 0.0);
                }
                if digests {
                    assert_eq!(
                        r.output_digests,
                        vec![digest_by_definition(t), digest_by_definition(&hs[0].1)],
                        "{what}"
                    );
                    let want: Vec<u64> = hs.iter().map(|(_, h)| digest_by_definition(h)).collect();
                    assert_eq!(r.input_digests, want, "{what}");
                } else {
                    assert!(r.output_digests.is_empty() && r.input_digests.is_empty());
                }
            }
        }
    }
}

/// Input hashes (and digests) taken before an in-place op see the old values.
#[test]
fn prehashed_inputs_see_values_before_the_op() {
    for path in [StatsPath::Auto, StatsPath::Device] {
        let mut b = StatsBatch::new(path, true);
        let mut x = t32(&[1.0; 2000], &[2000]);
        let before = digest::digest(&[1.0f32; 2000]);
        let pre = b.hash_inputs(&[&x], &[]).unwrap();
        x.add_scalar_(1.0).unwrap();
        b.push(
            Record {
                key: "m/op_0_add_".into(),
                ..Default::default()
            },
            Some(0),
            &[&x],
            Inputs::Hashed(pre),
            &Default::default(),
        )
        .unwrap();
        let r = b.flush().unwrap().pop().unwrap();
        assert_eq!(r.input_hashes, vec![2000.0], "{path:?}");
        assert_eq!(r.output_hashes, vec![4000.0], "{path:?}");
        assert_eq!(r.input_digests, vec![before], "{path:?}");
        assert_eq!(r.output_digests, vec![digest::digest(&[2.0f32; 2000])]);
    }
}

fn e6(x: f64) -> String {
    let mut v = Vec::new();
    fmt_e6(&mut v, x);
    String::from_utf8(v).unwrap()
}

fn full(x: f64) -> String {
    let mut v = Vec::new();
    fmt_full(&mut v, x);
    String::from_utf8(v).unwrap()
}

/// x @ w for row-major host buffers (float32 products, float32 sums: only
/// used as data; the stats are checked against libtorch on the result).
fn matmul(x: &[f32], w: &[f32], n: usize, k: usize, m: usize) -> Vec<f32> {
    let mut y = vec![0f32; n * m];
    for i in 0..n {
        for j in 0..m {
            y[i * m + j] = (0..k).map(|l| x[i * k + l] * w[l * m + j]).sum();
        }
    }
    y
}

/// A capture written by the writer thread and read back by our parser,
/// field for field, at both precisions.
#[test]
fn capture_log_parses_back_field_for_field() {
    for precision in [Precision::PRINTED, Precision::Full] {
        for path in [StatsPath::Auto, StatsPath::Device] {
            capture_log_case(path, precision);
        }
    }
}

fn capture_log_case(path: StatsPath, precision: Precision) {
    let digests = precision == Precision::Full;
    let fmt = |x: f64| match precision {
        Precision::Printed { .. } => e6(x),
        Precision::Full => full(x),
    };
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("numerics/rank_0_activations.log");
    let mut cap = Capture::with_options(&log, path, precision, digests).unwrap();
    cap.flush_every = 3; // several flushes
    let mut r = Rng(1);
    let (xv, wv) = (r.randn(32 * 64), r.randn(64 * 48));
    let x = t32(&xv, &[32, 64]);
    let w = t32(&wv, &[64, 48]);
    let yv = matmul(&xv, &wv, 32, 64, 48);
    let y = t32(&yv, &[32, 48]);
    let k1 = cap
        .record(
            OpRecord {
                fqn: Some("layers.0._checkpoint_wrapped_module.wq"),
                op: "mm",
                phase: Phase::Forward,
                location: Some("llama3/model.py:10".into()),
                layout: None,
                digest_index: Default::default(),
                parameters: String::new(),
                output_parameters: Vec::new(),
                input_parameters: Vec::new(),
            },
            Some(0),
            &[&y],
            Inputs::Tensors(&[&x, &w]),
            &[1, 2],
            &[3],
        )
        .unwrap();
    assert_eq!(k1, "layers.0.wq/op_0_mm");
    let mut nanv: Vec<f32> = yv.iter().map(|v| v.max(0.0)).collect();
    nanv[..48].fill(f32::NAN);
    let nan = t32(&nanv, &[32, 48]);
    let k2 = cap
        .record(
            OpRecord {
                fqn: Some("layers.0.wq"),
                op: "relu",
                phase: Phase::Forward,
                location: None,
                layout: None,
                digest_index: Default::default(),
                parameters: String::new(),
                output_parameters: Vec::new(),
                input_parameters: Vec::new(),
            },
            Some(0),
            &[&nan],
            Inputs::Tensors(&[&y]),
            &[3],
            &[4],
        )
        .unwrap();
    assert_eq!(k2, "layers.0.wq/op_1_relu");
    let mut small = t32(&[1.0; 128], &[2, 64, 1]);
    let pre = cap.hash_inputs(&[&small], &[]).unwrap();
    small.add_scalar_(1e-5).unwrap();
    let k3 = cap
        .record(
            OpRecord {
                fqn: None,
                op: "add_",
                phase: Phase::Backward,
                location: None,
                layout: None,
                digest_index: Default::default(),
                parameters: String::new(),
                output_parameters: Vec::new(),
                input_parameters: Vec::new(),
            },
            None,
            &[&small],
            Inputs::Hashed(pre),
            &[5],
            &[5],
        )
        .unwrap();
    assert_eq!(k3, "<none>/op_0_add_");
    let s = t32(&[3.5], &[]).to_kind(Kind::BFloat16).unwrap();
    let k4 = cap
        .record(
            OpRecord {
                fqn: Some("layers.0.wq"),
                op: "sum",
                phase: Phase::Backward,
                location: Some("a/b.py:1".into()),
                layout: None,
                digest_index: Default::default(),
                parameters: String::new(),
                output_parameters: Vec::new(),
                input_parameters: Vec::new(),
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
    // A compiled run's header names its backend (the full-precision case
    // here); a later note replaces an earlier one.
    let compiled = (precision == Precision::Full).then_some(CompileBackend::Inductor);
    if compiled.is_some() {
        cap.note_compiled(CompileBackend::AotEager);
        cap.note_compiled(CompileBackend::Inductor);
    }
    let n = cap.finish().unwrap();
    assert_eq!(n, 4);

    let bytes = std::fs::read(&log).unwrap();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    assert_eq!(
        text.contains("\nPrecision: full\n"),
        precision == Precision::Full,
        "the precision header line"
    );
    assert_eq!(
        text.contains("Excluded ops dispatched: t, view\nCompiled: inductor\nPrecision: full\n"),
        compiled.is_some(),
        "the compiled header line, between the excluded ops and the precision"
    );
    let t = parse_bytes(bytes, &log);
    assert_eq!(t.len(), 4);
    assert_eq!(t.header().total, Some(4));
    assert_eq!(t.header().excluded, Some(vec!["t".into(), "view".into()]));
    assert_eq!(t.header().compiled, compiled);
    // The extra `NaN count:` line of the relu row is known to the parser:
    // no warning at all; the line is in the log.
    assert!(t.warnings().is_empty(), "{:?}", t.warnings());
    assert!(
        text.contains("  NaN count: 48\n"),
        "the NaN count line is written"
    );

    let keys: Vec<String> = (0..4).map(|r| t.key_str(r).into_owned()).collect();
    assert_eq!(keys, [k1.clone(), k2.clone(), k3, k4]);
    // The parser reads the precision and the digests back (contract 2).
    assert_eq!(t.precision(), precision);
    if digests {
        let got: Vec<Option<u64>> = t.digests(0, Field::InputDigests).collect();
        assert_eq!(
            got,
            vec![Some(digest::digest(&xv)), Some(digest::digest(&wv))]
        );
        let got: Vec<Option<u64>> = t.digests(0, Field::OutputDigest).collect();
        assert_eq!(got, vec![Some(digest::digest(&yv))]);
    }

    let (l1y, wy) = torch_reference(&y);
    let wy = wy.unwrap();
    assert_eq!(
        t.text(0, Field::Shape),
        "torch.Size([32, 48]), Dtype: torch.float32"
    );
    if precision == Precision::PRINTED {
        // Printed digits equal torch's values printed.
        assert_eq!(t.text(0, Field::L2Norm), e6(wy[0]));
        assert_eq!(t.text(0, Field::Mean), e6(wy[3]));
        assert_eq!(t.text(0, Field::OutputHash), e6(l1y));
        let hx = torch_reference(&x).0;
        let hw = torch_reference(&w).0;
        assert_eq!(
            t.text(0, Field::InputHashes),
            format!("{}, {}", e6(hx), e6(hw))
        );
    } else {
        // Full precision: the printed text reads back within the sums'
        // reduction-order noise of torch's value.
        let num = |f| t.text(0, f).parse::<f64>().unwrap();
        close("full l2", num(Field::L2Norm), wy[0], 0.0);
        close("full mean", num(Field::Mean), wy[3], l1y / (32.0 * 48.0));
        close("full hash", num(Field::OutputHash), l1y, 0.0);
    }
    // Min and max are exact in float32: equal text at either precision.
    assert_eq!(t.text(0, Field::Min), fmt(wy[1]));
    assert_eq!(t.text(0, Field::Max), fmt(wy[2]));
    // Two inputs without a captured producer: the separator only.
    assert_eq!(t.text(0, Field::InputProducers), ";");
    assert_eq!(t.text(0, Field::Location), "llama3/model.py:10");
    assert!(!t.is_backward(0));

    assert_eq!(t.text(1, Field::Min), "nan");
    assert_eq!(t.text(1, Field::InputProducers), k1);
    assert!(!t.has(1, Field::Location));

    assert!(!t.has(2, Field::Shape));
    assert!(!t.has(2, Field::L2Norm));
    assert_eq!(t.text(2, Field::InputHashes), fmt(128.0));
    assert_eq!(
        t.text(2, Field::OutputHash),
        fmt(128.0 * (1.0 + 1e-5f32) as f64)
    );
    assert!(t.is_backward(2));

    assert_eq!(
        t.text(3, Field::Shape),
        "torch.Size([]), Dtype: torch.bfloat16"
    );
    assert_eq!(t.text(3, Field::Mean), fmt(3.5));
    assert_eq!(t.text(3, Field::InputProducers), format!("{k2};"));
    assert_eq!(t.text(3, Field::Phase), "backward");

    // The digest lines (contract 1), right after Input hashes.
    let hx = |v: u64| format!("{v:016x}");
    let block0 = text.split("\n\n").nth(1).unwrap();
    if digests {
        let od = format!("  Output digest: {}\n", hx(digest::digest(&yv)));
        let id = format!(
            "  Input digests: {}, {}\n",
            hx(digest::digest(&xv)),
            hx(digest::digest(&wv))
        );
        let want = format!("{od}{id}  Input producers:");
        assert!(block0.contains(&want), "{block0}");
        let after_hashes = block0.split("  Input hashes: ").nth(1).unwrap();
        assert!(after_hashes
            .split_once('\n')
            .unwrap()
            .1
            .starts_with("  Output digest: "));
        let block2 = text.split("\n\n").nth(3).unwrap();
        assert!(
            block2.contains(&format!(
                "  Output digest: {}\n  Input digests: {}\n",
                hx(digest::digest(&[1.0f32 + 1e-5; 128])),
                hx(digest::digest(&[1.0f32; 128]))
            )),
            "{block2}"
        );
    } else {
        assert!(!text.contains("digest"), "no digest lines by default");
    }
}

/// Records one 2048-element tensor per `(module, op, phase)` of `steps`
/// into a fresh log; returns its text and its parsed table.
fn phase_log(steps: &[(Option<&str>, &str, Phase)]) -> (String, actdiff::parser::OpTable) {
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("rank_0_activations.log");
    let mut cap = Capture::create(&log, StatsPath::Auto).unwrap();
    let x = t32(&[1.5; 2048], &[2048]);
    for (i, &(fqn, op, phase)) in steps.iter().enumerate() {
        let meta = OpRecord {
            fqn,
            op,
            phase,
            location: None,
            layout: None,
            digest_index: Default::default(),
            parameters: String::new(),
            output_parameters: Vec::new(),
            input_parameters: Vec::new(),
        };
        let id = i as u64 + 1;
        cap.record(meta, Some(0), &[&x], Inputs::Tensors(&[]), &[], &[id])
            .unwrap();
    }
    cap.finish().unwrap();
    let bytes = std::fs::read(&log).unwrap();
    let text = String::from_utf8_lossy(&bytes).into_owned();
    (text, parse_bytes(bytes, &log))
}

/// The phase of every row of `t`.
fn phases(t: &actdiff::parser::OpTable) -> Vec<String> {
    (0..t.len()).map(|r| t.phase(r).into_owned()).collect()
}

/// A forward record after a backward one (an eval forward after the
/// optimizer step, in a module or its loss outside any) gets its `Phase:
/// forward` line, so a reader does not take it as the optimizer's; an
/// optimizer record after a backward one keeps the reference's absent
/// line, read as the optimizer's by position; a forward record before any
/// backward one writes no line.
#[test]
fn a_forward_record_after_backward_says_its_phase() {
    let (text, t) = phase_log(&[
        (Some("fc"), "addmm", Phase::Forward),
        (Some("fc"), "mm", Phase::Backward),
        (None, "add_", Phase::Optimizer),
        (Some("fc"), "addmm", Phase::Forward),
        (None, "mse_loss", Phase::Forward),
    ]);
    assert_eq!(text.matches("  Phase: forward\n").count(), 2, "{text}");
    assert!(!text.contains("Phase: optimizer"), "{text}");
    assert_eq!(
        phases(&t),
        ["forward", "backward", "optimizer", "forward", "forward"]
    );
}

/// An optimizer record (clipping, the step) before any backward record
/// (every backward op under `min_numel`) says its phase: no backward block
/// tells a reader where the optimizer's part starts. After a backward
/// record it keeps the reference's absent line (trial 15 F2).
#[test]
fn an_optimizer_record_before_any_backward_one_says_its_phase() {
    for with_backward in [false, true] {
        let mut steps = vec![(Some("fc"), "addmm", Phase::Forward)];
        if with_backward {
            steps.push((Some("fc"), "mm", Phase::Backward));
        }
        steps.push((None, "_foreach_mul_", Phase::Optimizer));
        steps.push((None, "lerp_", Phase::Optimizer));
        // An eval batch drawn after the step: forward, said so.
        steps.push((None, "randn", Phase::Forward));
        let (text, t) = phase_log(&steps);
        let lines = text.matches("  Phase: optimizer\n").count();
        assert_eq!(lines, if with_backward { 0 } else { 2 }, "{text}");
        assert_eq!(text.matches("  Phase: forward\n").count(), 1, "{text}");
        let phases = phases(&t);
        let n = phases.len();
        assert_eq!(
            phases[n - 3..],
            ["optimizer", "optimizer", "forward"],
            "{text}"
        );
        assert_eq!(phases[0], "forward");
    }
}
