//! The 64-bit content digest of a tensor (`Output digest:` / `Input
//! digests:` lines): equal for tensors with equal elements in the same
//! logical (row-major) order and the same dtype, whatever their strides,
//! storage offset or device; computed on the tensor's device as a wrapping
//! integer sum, so it needs no host synchronisation and its value does not
//! depend on the order in which a device adds.
//!
//! Algorithm (the shim's `digest_sum` computes steps 1-3 with libtorch
//! integer ops on the device; [`host_sum`] computes them for CPU buffers;
//! [`finish`] is step 4, on the host):
//!
//! 1. The values `u_k`: each element's bit pattern as 32-bit unsigned
//!    values, in logical row-major order: one per element of at most 32
//!    bits (zero-extended: bfloat16 → its 16 bits, bool → 0 or 1), two per
//!    64-bit element (low half, then high half); a complex element gives its
//!    real part's values, then its imaginary part's. `k` counts the values
//!    from 0; every NaN payload and the sign of zero count.
//! 2. `p = (u_k XOR (k·K mod 2^32)) · M` as a full 64-bit product of two
//!    32-bit numbers, and `t_k = p XOR (p >> 32)`. Both maps are injective,
//!    so a change of any one value always changes the sum; the index makes
//!    the sum depend on the order.
//! 3. `S = Σ t_k` modulo 2^64 (an integer sum: any order of addition gives
//!    the same `S`).
//! 4. `digest = mix(S + n·C1)`, `n` the number of values, `mix` SplitMix64's
//!    finaliser: `z = (z ^ z>>30)·C2; z = (z ^ z>>27)·C3; z ^ z>>31`.
//!
//! `K = 0x7F4A7C15`, `M = 0x85EBCA6B`, `C1 = 0x9E3779B97F4A7C15`,
//! `C2 = 0xBF58476D1CE4E5B9`, `C3 = 0x94D049BB133111EB`. One 32×32→64-bit
//! multiply per value keeps the host pass vectorised (AVX2 `vpmuludq`) and
//! about as fast as the statistics pass. It is a checksum, not a
//! cryptographic hash: a permutation or several changes collide with
//! probability about 2^-64.
//!
//! **Shards** (a tensor-parallel run's DTensor shards, [`Index`]): a shard's
//! values are indexed by their element's position in the whole tensor, so
//! `k` is the whole tensor's value index and the shards' sums add up to the
//! whole tensor's `S`. A shard's digest is step 4 over its own sum and its
//! own `n`; since `mix` is invertible and step 4 adds `n·C1`, the whole
//! tensor's digest is `mix(Σ unmix(dᵢ))` over the shards' digests `dᵢ`
//! ([`combine`]): a bitwise check crosses layouts.
//!
//! This part needs no libtorch.

/// The index multiplier of step 2.
pub const K: u32 = 0x7F4A_7C15;
/// The value multiplier of step 2.
pub const M: u32 = 0x85EB_CA6B;
/// The golden-ratio constant of step 4.
pub const C1: u64 = 0x9E37_79B9_7F4A_7C15;
/// The first multiplier of step 4's finaliser.
pub const C2: u64 = 0xBF58_476D_1CE4_E5B9;
/// The second multiplier of step 4's finaliser.
pub const C3: u64 = 0x94D0_49BB_1331_11EB;

/// Step 2 for value `u` at index `k`: its term of the sum.
#[inline(always)]
pub fn term(u: u32, k: u64) -> u64 {
    let p = (u ^ (k as u32).wrapping_mul(K)) as u64 * M as u64;
    p ^ (p >> 32)
}

/// Step 4: the digest from the sum `s` of `n` values.
pub fn finish(s: u64, n: u64) -> u64 {
    mix(s.wrapping_add(n.wrapping_mul(C1)))
}

/// SplitMix64's finaliser (step 4's `mix`).
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(C2);
    z = (z ^ (z >> 27)).wrapping_mul(C3);
    z ^ (z >> 31)
}

/// The inverse of `x ↦ x ^ (x >> s)`.
fn unshift(x: u64, s: u32) -> u64 {
    let mut y = x;
    let mut k = s;
    while k < 64 {
        y = x ^ (y >> s);
        k += s;
    }
    y
}

/// The multiplicative inverse of odd `a` modulo 2^64 (Newton's iteration).
const fn inverse(a: u64) -> u64 {
    let mut x = a; // correct to 3 bits for odd a
    let mut i = 0;
    while i < 5 {
        x = x.wrapping_mul(2u64.wrapping_sub(a.wrapping_mul(x)));
        i += 1;
    }
    x
}

/// The inverse of `mix`: `unmix(mix(z)) == z`.
fn unmix(d: u64) -> u64 {
    let mut z = unshift(d, 31);
    z = unshift(z.wrapping_mul(inverse(C3)), 27);
    unshift(z.wrapping_mul(inverse(C2)), 30)
}

/// The digest of a whole tensor from the digests of its shards (each
/// computed with an [`Index`] of that whole tensor; the shards disjoint and
/// covering it, in any order): `mix(Σ unmix(dᵢ))`.
pub fn combine(shards: impl IntoIterator<Item = u64>) -> u64 {
    mix(shards
        .into_iter()
        .fold(0u64, |a, d| a.wrapping_add(unmix(d))))
}

/// Where a tensor's elements sit in the whole tensor its digest indexes
/// (step 1's `k`): [`Index::WHOLE`] (the tensor is the whole: its own
/// row-major order), or a shard along one dimension: its elements, in its
/// own row-major order, form runs of `run` elements, run `r` starting at
/// element `r·stride + offset` of the whole tensor (all in elements, not
/// 32-bit values).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Index {
    /// Elements per run (0: [`Index::WHOLE`]).
    pub run: u64,
    /// The whole tensor's elements from one run's start to the next's.
    pub stride: u64,
    /// The whole tensor's element at which run 0 starts.
    pub offset: u64,
}

impl Index {
    /// The tensor is the whole tensor.
    pub const WHOLE: Index = Index {
        run: 0,
        stride: 0,
        offset: 0,
    };

    /// The shard of local shape `local` that holds elements
    /// `start..start + local[dim]` of the whole tensor's dimension `dim`,
    /// of length `whole_len` (every other dimension whole).
    pub fn shard(local: &[i64], dim: usize, whole_len: u64, start: u64) -> Index {
        let inner: u64 = local[dim + 1..].iter().map(|&d| d.max(0) as u64).product();
        Index {
            run: local[dim].max(0) as u64 * inner,
            stride: whole_len * inner,
            offset: start * inner,
        }
    }

    /// Whether the tensor is the whole tensor.
    pub fn is_whole(&self) -> bool {
        self.run == 0
    }

    /// The whole tensor's element index of the tensor's element `e`.
    #[inline]
    pub fn element(&self, e: u64) -> u64 {
        match e.checked_div(self.run) {
            None => e,
            Some(r) => r * self.stride + self.offset + e % self.run,
        }
    }
}

/// An element's 32-bit values (step 1).
pub trait Words: Copy + Send + Sync {
    /// Values per element: 1 or 2.
    const N: usize;
    /// Value `j` (< `N`) of the element.
    fn word(self, j: usize) -> u32;
    /// The buffer as its 32-bit values when each element is one 32-bit
    /// value of its own bits (float32, int32, uint32): the AVX2 kernel of
    /// 32-bit values reads those.
    fn as_words(x: &[Self]) -> Option<&[u32]> {
        let _ = x;
        None
    }
}
macro_rules! words1 {
    ($($t:ty => |$v:ident| $e:expr),* $(,)?) => {$(
        impl Words for $t {
            const N: usize = 1;
            #[inline(always)]
            fn word(self, _: usize) -> u32 {
                let $v = self;
                $e
            }
        }
    )*};
}
words1!(
    i16 => |v| v as u16 as u32,
    i8 => |v| v as u8 as u32,
    u8 => |v| v as u32,
);
macro_rules! words_own_bits {
    ($($t:ty => |$v:ident| $e:expr),* $(,)?) => {$(
        impl Words for $t {
            const N: usize = 1;
            #[inline(always)]
            fn word(self, _: usize) -> u32 {
                let $v = self;
                $e
            }
            fn as_words(x: &[$t]) -> Option<&[u32]> {
                // SAFETY: a 4-byte element of the same alignment as u32
                // whose word is its bits: the same memory read as u32.
                Some(unsafe { std::slice::from_raw_parts(x.as_ptr() as *const u32, x.len()) })
            }
        }
    )*};
}
words_own_bits!(
    f32 => |v| v.to_bits(),
    i32 => |v| v as u32,
    u32 => |v| v,
);
#[cfg(feature = "capture")]
words1!(
    half::f16 => |v| v.to_bits() as u32,
    half::bf16 => |v| v.to_bits() as u32,
);
macro_rules! words2 {
    ($($t:ty => |$v:ident| $e:expr),* $(,)?) => {$(
        impl Words for $t {
            const N: usize = 2;
            #[inline(always)]
            fn word(self, j: usize) -> u32 {
                let $v = self;
                let b: u64 = $e;
                (b >> (32 * j)) as u32
            }
        }
    )*};
}
words2!(f64 => |v| v.to_bits(), i64 => |v| v as u64, u64 => |v| v);

/// Steps 2-3 over elements whose first value has index `first`.
#[inline(always)]
fn sum_body<T: Words>(x: &[T], first: u64) -> u64 {
    // Eight independent sums: LLVM vectorises the lanes (the sum is
    // associative, so any grouping gives the same value).
    const L: usize = 8;
    let mut s = [0u64; L];
    let mut c = x.chunks_exact(L);
    let mut k = first;
    for q in &mut c {
        for j in 0..T::N {
            for l in 0..L {
                let idx = k + (l * T::N + j) as u64;
                s[l] = s[l].wrapping_add(term(q[l].word(j), idx));
            }
        }
        k += (L * T::N) as u64;
    }
    let mut t = 0u64;
    for e in c.remainder() {
        for j in 0..T::N {
            t = t.wrapping_add(term(e.word(j), k));
            k += 1;
        }
    }
    s.iter().fold(t, |a, b| a.wrapping_add(*b))
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sum_avx2<T: Words>(x: &[T], first: u64) -> u64 {
    if let Some(w) = T::as_words(x) {
        return sum_words_avx2(w, first);
    }
    sum_body(x, first)
}

/// The terms of eight consecutive 32-bit values `w` whose indexes times
/// [`K`] (mod 2^32) are `kk`, as four 64-bit sums (AVX2: two 32×32→64-bit
/// multiplies of four lanes each; steps 2-3).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) unsafe fn terms8_avx2(
    w: std::arch::x86_64::__m256i,
    kk: std::arch::x86_64::__m256i,
) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    let m = _mm256_set1_epi64x(M as i64);
    let x = _mm256_xor_si256(w, kk);
    // _mm256_mul_epu32 multiplies the low 32 bits of each 64-bit lane: the
    // even values, then (shifted down) the odd ones.
    let pe = _mm256_mul_epu32(x, m);
    let po = _mm256_mul_epu32(_mm256_srli_epi64(x, 32), m);
    let te = _mm256_xor_si256(pe, _mm256_srli_epi64(pe, 32));
    let to = _mm256_xor_si256(po, _mm256_srli_epi64(po, 32));
    _mm256_add_epi64(te, to)
}

/// `k·K mod 2^32` for the eight indexes `first..first + 8` (the first
/// argument of [`terms8_avx2`]); adding `8·K` to each lane moves it on by eight.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
#[inline]
pub(crate) unsafe fn index8_avx2(first: u64) -> std::arch::x86_64::__m256i {
    use std::arch::x86_64::*;
    let k0 = (first as u32).wrapping_mul(K);
    let l = |j: u32| k0.wrapping_add(j.wrapping_mul(K)) as i32;
    _mm256_setr_epi32(l(0), l(1), l(2), l(3), l(4), l(5), l(6), l(7))
}

/// Steps 2-3 over 32-bit values with AVX2, the first at index `first`:
/// the index products moved on by an add (not a multiply per value), 16
/// values an iteration in two independent sums. The same wrapping sum as
/// [`sum_body`], so the same bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
pub(crate) unsafe fn sum_words_avx2(w: &[u32], first: u64) -> u64 {
    use std::arch::x86_64::*;
    let n = w.len();
    let full = n - n % 16;
    let p = w.as_ptr();
    let step = _mm256_set1_epi32(K.wrapping_mul(8) as i32);
    let mut ka = index8_avx2(first);
    let mut kb = _mm256_add_epi32(ka, step);
    let step = _mm256_add_epi32(step, step);
    let mut sa = _mm256_setzero_si256();
    let mut sb = _mm256_setzero_si256();
    let mut i = 0;
    while i < full {
        // SAFETY: i + 16 <= full <= n values of `w`.
        let a = _mm256_loadu_si256(p.add(i) as *const __m256i);
        let b = _mm256_loadu_si256(p.add(i + 8) as *const __m256i);
        sa = _mm256_add_epi64(sa, terms8_avx2(a, ka));
        sb = _mm256_add_epi64(sb, terms8_avx2(b, kb));
        ka = _mm256_add_epi32(ka, step);
        kb = _mm256_add_epi32(kb, step);
        i += 16;
    }
    let mut lanes = [0u64; 4];
    _mm256_storeu_si256(lanes.as_mut_ptr() as *mut __m256i, _mm256_add_epi64(sa, sb));
    let mut s = lanes.iter().fold(0u64, |a, b| a.wrapping_add(*b));
    for (j, &v) in w[full..].iter().enumerate() {
        s = s.wrapping_add(term(v, first + (full + j) as u64));
    }
    s
}

/// Steps 2-3 over `x`, its first value at index `first` (the AVX2 build
/// where the CPU has it; both give the same sum).
pub(crate) fn sum_at<T: Words>(x: &[T], first: u64) -> u64 {
    #[cfg(target_arch = "x86_64")]
    if std::arch::is_x86_feature_detected!("avx2") {
        // SAFETY: the CPU has AVX2.
        return unsafe { sum_avx2(x, first) };
    }
    sum_body(x, first)
}

/// Steps 1-3 over a contiguous buffer in logical order: the wrapping sum of
/// the terms (large buffers are split across rayon's threads; the sum is
/// the same for any split).
pub fn host_sum<T: Words>(x: &[T]) -> u64 {
    const CHUNK: usize = 1 << 16;
    if x.len() < 2 * CHUNK {
        return sum_at(x, 0);
    }
    use rayon::prelude::*;
    x.par_chunks(CHUNK)
        .enumerate()
        .map(|(i, c)| sum_at(c, (i * CHUNK * T::N) as u64))
        .reduce(|| 0, u64::wrapping_add)
}

/// [`host_sum`] with the values indexed by `index` (a shard's elements by
/// their position in the whole tensor).
pub fn host_sum_at<T: Words>(x: &[T], index: Index) -> u64 {
    if index.is_whole() || x.is_empty() {
        return host_sum(x);
    }
    let run = index.run as usize;
    let at = |(r, c): (usize, &[T])| sum_at(c, index.element((r * run) as u64) * T::N as u64);
    if x.len() < 1 << 17 {
        return x.chunks(run).enumerate().map(at).fold(0, u64::wrapping_add);
    }
    use rayon::prelude::*;
    x.par_chunks(run)
        .enumerate()
        .map(at)
        .reduce(|| 0, u64::wrapping_add)
}

/// The digest of a contiguous buffer (steps 1-4).
pub fn digest<T: Words>(x: &[T]) -> u64 {
    finish(host_sum(x), (x.len() * T::N) as u64)
}

/// The digest of 32-bit values by the definition, one at a time (tests).
pub fn digest_of_words(u: &[u32]) -> u64 {
    let s = u
        .iter()
        .enumerate()
        .fold(0u64, |s, (k, w)| s.wrapping_add(term(*w, k as u64)));
    finish(s, u.len() as u64)
}

/// The digest as written in the log: 16 lowercase hex digits.
pub fn hex(d: u64) -> String {
    format!("{d:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunked_and_parallel_sums_equal_the_definition() {
        let x: Vec<f32> = (0..300_001).map(|i| (i as f32).sin()).collect();
        let w: Vec<u32> = x.iter().map(|v| v.to_bits()).collect();
        assert_eq!(digest(&x), digest_of_words(&w));
        assert_eq!(digest(&x[..7]), digest_of_words(&w[..7]));
        assert_eq!(digest::<f32>(&[]), digest_of_words(&[]));
        let y: Vec<f64> = (0..200_003).map(|i| (i as f64).cos()).collect();
        let w: Vec<u32> = y
            .iter()
            .flat_map(|v| [v.to_bits() as u32, (v.to_bits() >> 32) as u32])
            .collect();
        assert_eq!(digest(&y), digest_of_words(&w));
        assert_eq!(digest(&y[..13]), digest_of_words(&w[..26]));
    }

    /// The AVX2 kernel of 32-bit values gives the definition's sum for
    /// every length around its 16-value iterations and any first index
    /// (the index products wrap mod 2^32).
    #[test]
    fn word_kernel_equals_the_definition_at_any_first_index() {
        let w: Vec<u32> = (0..100u32)
            .map(|i| i.wrapping_mul(0x9E37_79B9) ^ 0x5555)
            .collect();
        for first in [0u64, 1, 7, 1 << 31, (1 << 32) - 3, (1 << 40) + 5] {
            for n in [0usize, 1, 8, 15, 16, 17, 31, 32, 33, 100] {
                let want = w[..n]
                    .iter()
                    .enumerate()
                    .fold(0u64, |s, (j, v)| s.wrapping_add(term(*v, first + j as u64)));
                assert_eq!(
                    sum_body(&w[..n], first),
                    want,
                    "plain, first {first}, n {n}"
                );
                assert_eq!(sum_at(&w[..n], first), want, "first {first}, n {n}");
                let f: Vec<f32> = w[..n].iter().map(|v| f32::from_bits(*v)).collect();
                assert_eq!(sum_at(&f, first), want, "float32, first {first}, n {n}");
            }
        }
    }

    #[test]
    fn order_ulp_sign_and_length_change_the_digest() {
        let x: Vec<f32> = (0..1000).map(|i| i as f32 * 0.5 - 3.0).collect();
        let d = digest(&x);
        let mut y = x.clone();
        y.swap(10, 500);
        assert_ne!(digest(&y), d, "a permutation");
        let mut y = x.clone();
        y[999] = f32::from_bits(y[999].to_bits() + 1);
        assert_ne!(digest(&y), d, "one ulp");
        assert_ne!(digest(&[0.0f32]), digest(&[-0.0f32]), "the sign of zero");
        assert_ne!(digest(&[0.0f32]), digest(&[0.0f32, 0.0]), "the length");
        assert_ne!(digest(&[0.0f32]), digest::<f32>(&[]));
        // Zero-extension: int8 -1 is 0xff, not 32 ones.
        assert_eq!(digest(&[-1i8]), digest(&[255u8]));
        assert_ne!(digest(&[-1i8]), digest(&[-1i32]));
        // A 64-bit element is its two halves.
        assert_eq!(digest(&[5u64 | (7 << 32)]), digest(&[5u32, 7]));
        assert_eq!(hex(0xab), "00000000000000ab");
    }

    #[test]
    fn unmix_inverts_mix() {
        for z in [0u64, 1, 42, u64::MAX, 0x0123_4567_89ab_cdef, C1, C2] {
            assert_eq!(unmix(mix(z)), z, "{z:#x}");
        }
        assert_eq!(inverse(C2).wrapping_mul(C2), 1);
    }

    /// Shards along each dimension of a 3-d tensor, digested by their
    /// whole-tensor index, combine to the whole tensor's digest; a shard
    /// digested by its own index does not.
    #[test]
    fn shard_digests_combine_to_the_whole_digest() {
        let shape = [3usize, 8, 5];
        let x: Vec<f32> = (0..120).map(|i| (i as f32 * 0.37).sin()).collect();
        let whole = digest(&x);
        for dim in 0..3 {
            for parts in [2usize, 3] {
                let len = shape[dim];
                let chunk = len.div_ceil(parts);
                let mut ds = Vec::new();
                let mut local_digests = Vec::new();
                for p in 0..parts {
                    let (lo, hi) = ((p * chunk).min(len), ((p + 1) * chunk).min(len));
                    let mut local = shape;
                    local[dim] = hi - lo;
                    // The shard's elements in its own row-major order.
                    let mut v = Vec::new();
                    for a in 0..local[0] {
                        for b in 0..local[1] {
                            for c in 0..local[2] {
                                let mut g = [a, b, c];
                                g[dim] += lo;
                                v.push(x[(g[0] * 8 + g[1]) * 5 + g[2]]);
                            }
                        }
                    }
                    let l: Vec<i64> = local.iter().map(|&d| d as i64).collect();
                    let idx = Index::shard(&l, dim, len as u64, lo as u64);
                    ds.push(finish(host_sum_at(&v, idx), v.len() as u64));
                    local_digests.push(digest(&v));
                }
                assert_eq!(
                    combine(ds.iter().copied()),
                    whole,
                    "dim {dim}, {parts} parts"
                );
                assert_eq!(combine(ds.iter().rev().copied()), whole, "any order");
                if dim > 0 {
                    assert_ne!(combine(local_digests), whole, "own indexes do not combine");
                }
                assert_ne!(combine(ds[1..].iter().copied()), whole, "a shard left out");
            }
        }
        // A whole tensor is its own single shard; 64-bit elements index
        // their two values.
        assert_eq!(combine([whole]), whole);
        let y: Vec<f64> = (0..40).map(|i| i as f64 * 1.5).collect();
        let (a, b) = y.split_at(24);
        let da = finish(host_sum_at(a, Index::shard(&[3, 8], 0, 5, 0)), 48);
        let db = finish(host_sum_at(b, Index::shard(&[2, 8], 0, 5, 3)), 32);
        assert_eq!(combine([da, db]), digest(&y));
    }
}
