//! Tests of the host pass: the AVX2 and plain blocks agree bit for bit, the
//! one pass (statistics and digest together) equals the two apart, exact
//! half conversions, small values.

use super::*;

#[test]
fn split_points_are_block_aligned_and_proper() {
    for n in [BLOCK + 1, 2 * BLOCK, 2 * BLOCK + 1, 1000, 1 << 20] {
        let s = split(n);
        assert!(s > 0 && s < n && s.is_multiple_of(BLOCK), "{n} {s}");
    }
}

#[test]
fn half_conversions_are_exact() {
    for b in 0..=u16::MAX {
        let want = f16::from_bits(b).to_f32();
        let got = f16_bits_to_f32(b);
        assert!(
            got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
            "f16 {b:#06x}: {got} vs {want}"
        );
        let want = bf16::from_bits(b).to_f32();
        let got = bf16::from_bits(b).f();
        assert!(
            got.to_bits() == want.to_bits() || (got.is_nan() && want.is_nan()),
            "bf16 {b:#06x}"
        );
    }
}

/// The SIMD build of a block adds in the same order as the plain one.
#[test]
fn simd_and_plain_blocks_agree_bitwise() {
    let mut r = 0x2545_f491_4f6c_dd1du64;
    let mut next = || {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        ((r >> 11) as f64 / (1u64 << 53) as f64 - 0.5) as f32 * 1e3
    };
    let x: Vec<f32> = (0..BLOCK - 3).map(|_| next()).collect();
    let h: Vec<f16> = x.iter().map(|v| f16::from_f32(*v)).collect();
    let b: Vec<bf16> = x.iter().map(|v| bf16::from_f32(*v)).collect();
    fn same(a: Acc, b: Acc) {
        assert_eq!(
            (a.l1.to_bits(), a.sq.to_bits(), a.sum.to_bits()),
            (b.l1.to_bits(), b.sq.to_bits(), b.sum.to_bits())
        );
        assert_eq!((a.min, a.max, a.dsum), (b.min, b.max, b.dsum));
    }
    if !simd() {
        return;
    }
    // SAFETY: simd() checked the CPU features.
    unsafe {
        // Each SIMD build against the plain one, on every dtype it reads
        // and on lengths around its 16-element iteration.
        fn check<T: FElem + digest::Words>(
            simd: unsafe fn(&[T], usize, bool) -> Acc,
            x: &[T],
            at: usize,
            dg: bool,
        ) {
            for n in [x.len(), 31, 17, 16, 15, 0] {
                // SAFETY: the caller checked the CPU features.
                same(
                    unsafe { simd(&x[..n], at, dg) },
                    moments_block_body(&x[..n], at, dg),
                );
            }
        }
        for (at, dg) in [(0, false), (0, true), (1 << 20, true)] {
            check(moments_block_avx2, &x, at, dg);
            check(moments_block_avx2, &h, at, dg);
            check(moments_block_avx2, &b, at, dg);
            if simd512() {
                check(moments_block_avx512, &x, at, dg);
                check(moments_block_avx512, &h, at, dg);
                check(moments_block_avx512, &b, at, dg);
            }
        }
        assert_eq!(l1_block_avx2(&x).to_bits(), l1_block_body(&x).to_bits());
        assert_eq!(l1_block_avx2(&h).to_bits(), l1_block_body(&h).to_bits());
        assert_eq!(l1_f32_avx2(&x).to_bits(), l1_block_body(&x).to_bits());
        assert_eq!(l1_float_block(&b).to_bits(), l1_block_body(&b).to_bits());
    }
}

#[test]
fn small_fused_values() {
    let x: Vec<f32> = vec![1.0, -2.0, 3.0, f32::INFINITY];
    let s = fused_moments(&x, false);
    assert_eq!(s.l1, f64::INFINITY);
    let m = s.moments.unwrap();
    assert_eq!(
        (m.min, m.max, m.inf_count, m.nan_count),
        (-2.0, f64::INFINITY, 1, 0)
    );
    let x: Vec<f32> = vec![1.0, f32::NAN, -4.0];
    let m = fused_moments(&x, false).moments.unwrap();
    assert!(m.min.is_nan() && m.max.is_nan() && m.mean.is_nan() && m.l2.is_nan());
    assert_eq!(m.nan_count, 1);
    assert_eq!(fused_l1(&[-3i64, 4], false).0, 7.0);
    // Integers go through float32, as the reference's `t.float()`.
    assert_eq!(fused_l1(&[(1i64 << 24) + 1], false).0, (1u64 << 24) as f64);
}

/// The one pass (statistics and digest sum together, block by block)
/// gives bit for bit what the statistics' pass and the digest's own
/// pass give apart, for every dtype it reads, at lengths around the
/// block, the 16-element iteration and the parallel split.
#[test]
fn one_pass_equals_the_statistics_and_the_digest_apart() {
    let mut r = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = || {
        r ^= r << 13;
        r ^= r >> 7;
        r ^= r << 17;
        ((r >> 11) as f64 / (1u64 << 53) as f64 - 0.5) as f32 * 100.0
    };
    let x: Vec<f32> = (0..3 * PAR_MIN + 37).map(|_| next()).collect();
    for n in [
        0,
        1,
        15,
        16,
        17,
        BLOCK - 1,
        BLOCK + 5,
        4099,
        PAR_MIN * 2 + 1,
        x.len(),
    ] {
        let f = &x[..n];
        let h: Vec<f16> = f.iter().map(|v| f16::from_f32(*v)).collect();
        let b: Vec<bf16> = f.iter().map(|v| bf16::from_f32(*v)).collect();
        let i: Vec<i32> = f.iter().map(|v| (*v * 1e3) as i32).collect();
        let d: Vec<f64> = f.iter().map(|v| *v as f64 * 1.1).collect();
        fn check<T: FElem + digest::Words>(x: &[T], n: usize) {
            let one = fused_moments(x, true);
            let apart = fused_moments(x, false);
            assert_eq!(one.digest, Some(digest::host_sum(x)), "n {n}");
            assert_eq!(one.l1.to_bits(), apart.l1.to_bits(), "n {n}");
            let (a, b) = (one.moments.unwrap(), apart.moments.unwrap());
            assert_eq!(
                (
                    a.l2.to_bits(),
                    a.mean.to_bits(),
                    a.min.to_bits(),
                    a.max.to_bits()
                ),
                (
                    b.l2.to_bits(),
                    b.mean.to_bits(),
                    b.min.to_bits(),
                    b.max.to_bits()
                ),
                "n {n}"
            );
            let (l1, s) = fused_l1_float(x, true);
            assert_eq!((l1.to_bits(), s), (one.l1.to_bits(), digest::host_sum(x)));
        }
        if n > 0 {
            check(f, n);
            check(&h, n);
            check(&b, n);
        }
        let (l1, s) = fused_l1(&i, true);
        assert_eq!(
            (l1.to_bits(), s),
            (fused_l1(&i, false).0.to_bits(), digest::host_sum(&i))
        );
        let (l1, s) = fused_l1(&d, true);
        assert_eq!(
            (l1.to_bits(), s),
            (fused_l1(&d, false).0.to_bits(), digest::host_sum(&d))
        );
    }
}

/// Throughput of the moments-and-digest pass, one thread, per kernel
/// (plain, AVX2, AVX-512 where the CPU has them) on float32 buffers of 16 K
/// to 4 M elements: the best of 60 alternating rounds, in ns an element.
/// A benchmark, not a test of speed: run it with
/// `RAYON_NUM_THREADS=1 cargo test --release --features capture --lib
/// microbench_moments -- --ignored --nocapture` (benches/README.md). It
/// checks that the kernels agree on its input.
#[test]
#[ignore]
fn microbench_moments() {
    type Kernel = fn(&[f32], usize) -> Acc;
    let mut kernels: Vec<(&str, Kernel)> = vec![("plain", |b, at| moments_block_body(b, at, true))];
    if simd() {
        // SAFETY: simd() checked the CPU features.
        kernels.push(("avx2", |b, at| unsafe { moments_block_avx2(b, at, true) }));
    }
    if simd512() {
        // SAFETY: simd512() checked the CPU features.
        kernels.push(("avx512", |b, at| unsafe {
            moments_block_avx512(b, at, true)
        }));
    }
    for n in [1usize << 14, 1 << 16, 1 << 20, 1 << 22] {
        let x: Vec<f32> = (0..n)
            .map(|i| ((i * 7919) % 1000) as f32 * 0.001 - 0.5)
            .collect();
        let reps = ((1usize << 22) / n).max(1);
        let mut best = vec![f64::MAX; kernels.len()];
        let mut sums = vec![0u64; kernels.len()];
        for _ in 0..60 {
            for (k, (_, kernel)) in kernels.iter().enumerate() {
                let t = std::time::Instant::now();
                for _ in 0..reps {
                    let a = pairwise(std::hint::black_box(&x[..]), 0, kernel, &Acc::merge);
                    sums[k] = a.dsum ^ a.l1.to_bits() ^ a.sq.to_bits() ^ a.sum.to_bits();
                }
                best[k] = best[k].min(t.elapsed().as_secs_f64());
            }
        }
        assert!(sums.iter().all(|s| *s == sums[0]), "the kernels disagree");
        let line: Vec<String> = kernels
            .iter()
            .zip(&best)
            .map(|((name, _), b)| format!("{name} {:.3}", b * 1e9 / (reps * n) as f64))
            .collect();
        eprintln!("{n} elements, ns an element: {}", line.join(", "));
    }
}
