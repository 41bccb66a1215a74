//! The reductions of one tensor, computed where the tensor lives.
//!
//! What a record needs of a tensor, as the reference tracer defines it
//! (`_compute_stats` and DebugMode's `norm_hash_fn`):
//!
//! - the hash: the L1 norm in float64. Tensors that are neither floating nor
//!   complex are converted to float32 first, complex ones to complex128;
//! - for the primary output: the L2 norm and the mean of the float64
//!   tensor, the min and max of the float32 tensor, and (actdiff's extra)
//!   the number of NaN and of infinite elements.
//!
//! Two ways to get them:
//!
//! - [`Tensor::scalars`]: libtorch ops queued on the tensor's own device (in
//!   the shim), the results one 1-d float64 tensor still on that device
//!   (nothing is copied to the host; the batch concatenates and moves them
//!   at flush). This is the GPU path, and every dtype's fallback.
//! - [`host_stats`] on a CPU tensor: when the tensor is a plain strided
//!   float32/float16/bfloat16 (or integer, bool, float64 for hashes) buffer,
//!   one fused pass over it in Rust — every sum accumulated in float64 in 16
//!   lanes over blocks of 256 elements, blocks combined pairwise (rayon
//!   splits large tensors; the split points depend only on the length, so
//!   the result is the same for any thread count; the AVX2 and AVX-512
//!   builds, chosen at run time, add in the same order as the plain one, so
//!   they give the same bits). The digest's sum of a whole tensor is read in the same pass,
//!   block by block (one read of memory). Min and max are exact; L1 and L2
//!   agree with PyTorch's to about 1e-15 relative, the mean to about 1e-15
//!   of mean(|x|) (both are pairwise float64 sums of the same exact terms,
//!   in different orders).
//!   Otherwise the libtorch ops, read back at once.

use half::{bf16, f16};

use super::digest::{self, Index};
use super::record::Moments;
use super::torch::{Device, Info, Kind, Tensor, TorchError};

/// How a [`StatsBatch`](super::StatsBatch) computes the stats of CPU tensors.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum StatsPath {
    /// CPU tensors: the fused Rust pass ([`host_stats`]), values on the host
    /// at once; other devices: libtorch ops queued on the device.
    #[default]
    Auto,
    /// Every tensor through libtorch ops queued on its device, CPU included:
    /// what a GPU gets (one 1-d tensor per record, one cat and one copy per flush).
    Device,
}

/// Host values of one tensor's reductions.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TensorStats {
    /// The hash: L1 norm in float64.
    pub l1: f64,
    /// The stats of a primary output; `None` when not asked for, or for an
    /// empty tensor (which has no min or max).
    pub moments: Option<Moments>,
    /// The content digest ([`digest`]) when asked for.
    pub digest: Option<u64>,
}

/// Number of scalars [`Tensor::scalars`] gives with moments (before the
/// digest): l1, l2, min, max, mean, NaN count, Inf count.
pub const N_MOMENT_SCALARS: usize = 7;

/// Whether a dtype can be a primary output (the reference captures
/// float32, float16 and bfloat16 results only).
pub fn is_stats_kind(k: Kind) -> bool {
    matches!(k, Kind::Float | Kind::Half | Kind::BFloat16)
}

/// Converts the values of [`Tensor::scalars`] with moments (read back) to [`Moments`].
pub fn moments_from(v: &[f64]) -> Moments {
    Moments {
        l2: v[1],
        min: v[2],
        max: v[3],
        mean: v[4],
        nan_count: v[5] as u64,
        inf_count: v[6] as u64,
    }
}

// ---------------------------------------------------------------------------
// The host path: one fused pass over a CPU buffer.

/// A CPU buffer the fused pass can read.
#[derive(Clone, Copy)]
enum HostData<'a> {
    F32(&'a [f32]),
    F16(&'a [f16]),
    BF16(&'a [bf16]),
    F64(&'a [f64]),
    I64(&'a [i64]),
    I32(&'a [i32]),
    I16(&'a [i16]),
    I8(&'a [i8]),
    U8(&'a [u8]),
}

/// The buffer of a defined, dense, contiguous CPU tensor of a supported
/// dtype with no lazy negation, or `None`.
fn host_data<'a>(_t: &'a Tensor, i: &Info) -> Option<HostData<'a>> {
    if !i.defined || i.device != Device::Cpu || !i.strided || !i.contiguous || i.is_neg {
        return None;
    }
    let n = i.numel;
    if n == 0 {
        return match i.kind {
            Kind::Float
            | Kind::Half
            | Kind::BFloat16
            | Kind::Double
            | Kind::Int64
            | Kind::Int
            | Kind::Int16
            | Kind::Int8
            | Kind::Uint8
            | Kind::Bool => Some(HostData::F32(&[])),
            _ => None,
        };
    }
    let p = i.data;
    if p.is_null() {
        return None;
    }
    // SAFETY: a defined, contiguous, dense CPU tensor holds `n` elements of
    // its dtype from its data pointer; the slice lives no longer than `&t`
    // (which keeps the storage alive), and the caller holds the GIL / the
    // only use of the tensor while reading.
    unsafe {
        Some(match i.kind {
            Kind::Float => HostData::F32(std::slice::from_raw_parts(p as *const f32, n)),
            Kind::Half => HostData::F16(std::slice::from_raw_parts(p as *const f16, n)),
            Kind::BFloat16 => HostData::BF16(std::slice::from_raw_parts(p as *const bf16, n)),
            Kind::Double => HostData::F64(std::slice::from_raw_parts(p as *const f64, n)),
            Kind::Int64 => HostData::I64(std::slice::from_raw_parts(p as *const i64, n)),
            Kind::Int => HostData::I32(std::slice::from_raw_parts(p as *const i32, n)),
            Kind::Int16 => HostData::I16(std::slice::from_raw_parts(p as *const i16, n)),
            Kind::Int8 => HostData::I8(std::slice::from_raw_parts(p as *const i8, n)),
            // bool is one byte, 0 or 1.
            Kind::Uint8 | Kind::Bool => HostData::U8(std::slice::from_raw_parts(p as *const u8, n)),
            _ => return None,
        })
    }
}

/// An element as the hash sees it: its float64 value after the reference's
/// conversions (integers go through float32).
trait Elem: Copy + Send + Sync {
    fn hv(self) -> f64;
}
/// A floating element of a primary output.
trait FElem: Elem {
    fn f(self) -> f32;
    /// The slice itself when the elements are float32.
    fn as_f32(x: &[Self]) -> Option<&[f32]> {
        let _ = x;
        None
    }
}
impl Elem for f32 {
    #[inline(always)]
    fn hv(self) -> f64 {
        self as f64
    }
}
impl FElem for f32 {
    #[inline(always)]
    fn f(self) -> f32 {
        self
    }
    fn as_f32(x: &[f32]) -> Option<&[f32]> {
        Some(x)
    }
}
/// float16 bits to float32, exactly, without branches the compiler cannot
/// turn into selects (F. Giesen's `half_to_float_fast4`), so blocks of
/// float16 vectorize; `half`'s own conversion checks the CPU per element.
#[inline(always)]
fn f16_bits_to_f32(h: u16) -> f32 {
    const SHIFTED_EXP: u32 = 0x7c00 << 13;
    let magic = f32::from_bits(113 << 23);
    let mut o = ((h & 0x7fff) as u32) << 13;
    let exp = SHIFTED_EXP & o;
    o += (127 - 15) << 23;
    let inf_nan = o + ((128 - 16) << 23);
    let denorm = (f32::from_bits(o + (1 << 23)) - magic).to_bits();
    o = if exp == SHIFTED_EXP {
        inf_nan
    } else if exp == 0 {
        denorm
    } else {
        o
    };
    f32::from_bits(o | (((h & 0x8000) as u32) << 16))
}

impl Elem for f16 {
    #[inline(always)]
    fn hv(self) -> f64 {
        f16_bits_to_f32(self.to_bits()) as f64
    }
}
impl FElem for f16 {
    #[inline(always)]
    fn f(self) -> f32 {
        f16_bits_to_f32(self.to_bits())
    }
}
impl Elem for bf16 {
    #[inline(always)]
    fn hv(self) -> f64 {
        f32::from_bits((self.to_bits() as u32) << 16) as f64
    }
}
impl FElem for bf16 {
    #[inline(always)]
    fn f(self) -> f32 {
        f32::from_bits((self.to_bits() as u32) << 16)
    }
}
impl Elem for f64 {
    #[inline(always)]
    fn hv(self) -> f64 {
        self
    }
}
macro_rules! int_elem {
    ($($t:ty),*) => {$(
        impl Elem for $t {
            #[inline(always)]
            fn hv(self) -> f64 {
                self as f32 as f64
            }
        }
    )*};
}
int_elem!(i64, i32, i16, i8, u8);

const BLOCK: usize = 256;
/// Independent accumulators per statistic: enough to keep float64 adds
/// throughput-bound (not latency-bound) with 4-wide SIMD.
const LANES: usize = 16;
/// Halves at least this long are reduced in parallel.
const PAR_MIN: usize = 1 << 16;

/// Sums of one block or half, and min/max ignoring NaN. NaN and Inf are
/// counted only when the L1 sum says there are any (a float32 value cannot
/// overflow a float64 sum, so an L1 that is finite means none). `dsum` is
/// the digest's wrapping sum of the same elements (0 when no digest is
/// asked for), read in the same pass.
#[derive(Clone, Copy)]
struct Acc {
    l1: f64,
    sq: f64,
    sum: f64,
    min: f32,
    max: f32,
    dsum: u64,
}

impl Acc {
    fn merge(a: Acc, b: Acc) -> Acc {
        Acc {
            l1: a.l1 + b.l1,
            sq: a.sq + b.sq,
            sum: a.sum + b.sum,
            min: if b.min < a.min { b.min } else { a.min },
            max: if b.max > a.max { b.max } else { a.max },
            dsum: a.dsum.wrapping_add(b.dsum),
        }
    }
}

/// The L1 norm and the digest's wrapping sum of a block or half.
type L1Acc = (f64, u64);

fn merge_l1(a: L1Acc, b: L1Acc) -> L1Acc {
    (a.0 + b.0, a.1.wrapping_add(b.1))
}

/// Pairwise sum of the lanes.
#[inline(always)]
fn tree(v: [f64; LANES]) -> f64 {
    let mut w = v;
    let mut n = LANES;
    while n > 1 {
        n /= 2;
        for i in 0..n {
            w[i] = w[2 * i] + w[2 * i + 1];
        }
    }
    w[0]
}

/// Split point of a pairwise reduction: a block boundary near the middle.
#[inline]
fn split(n: usize) -> usize {
    n.div_ceil(BLOCK).div_ceil(2) * BLOCK
}

/// The pairwise reduction of `x` by blocks; `block` gets each block and
/// the index of its first element in the whole buffer (`at` is `x[0]`'s).
fn pairwise<T: Copy + Send + Sync, A: Copy + Send>(
    x: &[T],
    at: usize,
    block: &(impl Fn(&[T], usize) -> A + Sync),
    merge: &(impl Fn(A, A) -> A + Sync),
) -> A {
    if x.len() <= BLOCK {
        return block(x, at);
    }
    let s = split(x.len());
    let (l, r) = x.split_at(s);
    let (a, b) = if x.len() >= PAR_MIN {
        rayon::join(
            || pairwise(l, at, block, merge),
            || pairwise(r, at + s, block, merge),
        )
    } else {
        (
            pairwise(l, at, block, merge),
            pairwise(r, at + s, block, merge),
        )
    };
    merge(a, b)
}

/// One block: the float64 sums in 16 independent lanes (lane `l` adds
/// elements `l`, `l + 16`, ... in order, then the lanes are summed
/// pairwise), min and max over float32. The AVX2 build
/// ([`moments_f32_avx2`]) adds in exactly this order, so both give the same
/// bits: x² of a float32 value is exact in float64, so a fused multiply-add
/// rounds like a multiply then an add. (Min and max ignore NaN here; the
/// caller counts NaN.)
fn moments_f32_plain(f: &[f32]) -> Acc {
    let mut l1 = [0f64; LANES];
    let mut sq = [0f64; LANES];
    let mut sum = [0f64; LANES];
    let mut mn = f32::INFINITY;
    let mut mx = f32::NEG_INFINITY;
    for (i, &v) in f.iter().enumerate() {
        let l = i % LANES;
        let d = v as f64;
        l1[l] += d.abs();
        sq[l] += d * d;
        sum[l] += d;
        mn = if v < mn { v } else { mn };
        mx = if v > mx { v } else { mx };
    }
    Acc {
        l1: tree(l1),
        sq: tree(sq),
        sum: tree(sum),
        min: mn,
        max: mx,
        dsum: 0,
    }
}

/// [`moments_f32_plain`] with AVX2 and FMA: four 4-wide float64
/// accumulators per sum (the 16 lanes), one 8-wide float32 min and max.
/// With `DIGEST`, the same loads also give the digest's sum of the
/// elements' bits, the first at value index `first`
/// (`digest::sum_words_avx2`'s arithmetic: the same wrapping sum, so
/// the same bits as a pass of its own).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma")]
unsafe fn moments_f32_avx2<const DIGEST: bool>(f: &[f32], first: u64) -> Acc {
    use std::arch::x86_64::*;
    let n = f.len();
    let full = n - n % LANES;
    let p = f.as_ptr();
    let abs_mask = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fff_ffff_ffff_ffff));
    let mut l1 = [_mm256_setzero_pd(); 4];
    let mut sq = [_mm256_setzero_pd(); 4];
    let mut sum = [_mm256_setzero_pd(); 4];
    let mut mn = _mm256_set1_ps(f32::INFINITY);
    let mut mx = _mm256_set1_ps(f32::NEG_INFINITY);
    let step = _mm256_set1_epi32(digest::K.wrapping_mul(8) as i32);
    let mut ka = digest::index8_avx2(first);
    let mut kb = _mm256_add_epi32(ka, step);
    let step = _mm256_add_epi32(step, step);
    let mut ds = _mm256_setzero_si256();
    let mut i = 0;
    while i < full {
        // SAFETY: i + 16 <= full <= n elements of `f`.
        let a = _mm256_loadu_ps(p.add(i));
        let b = _mm256_loadu_ps(p.add(i + 8));
        if DIGEST {
            let ta = digest::terms8_avx2(_mm256_castps_si256(a), ka);
            let tb = digest::terms8_avx2(_mm256_castps_si256(b), kb);
            ds = _mm256_add_epi64(ds, _mm256_add_epi64(ta, tb));
            ka = _mm256_add_epi32(ka, step);
            kb = _mm256_add_epi32(kb, step);
        }
        // min(v, m) is `v < m ? v : m`, as the plain loop.
        mn = _mm256_min_ps(a, mn);
        mn = _mm256_min_ps(b, mn);
        mx = _mm256_max_ps(a, mx);
        mx = _mm256_max_ps(b, mx);
        let d = [
            _mm256_cvtps_pd(_mm256_castps256_ps128(a)),
            _mm256_cvtps_pd(_mm256_extractf128_ps(a, 1)),
            _mm256_cvtps_pd(_mm256_castps256_ps128(b)),
            _mm256_cvtps_pd(_mm256_extractf128_ps(b, 1)),
        ];
        for j in 0..4 {
            l1[j] = _mm256_add_pd(l1[j], _mm256_and_pd(d[j], abs_mask));
            sq[j] = _mm256_fmadd_pd(d[j], d[j], sq[j]);
            sum[j] = _mm256_add_pd(sum[j], d[j]);
        }
        i += LANES;
    }
    let mut lanes = Lanes::default();
    for j in 0..4 {
        _mm256_storeu_pd(lanes.l1.as_mut_ptr().add(4 * j), l1[j]);
        _mm256_storeu_pd(lanes.sq.as_mut_ptr().add(4 * j), sq[j]);
        _mm256_storeu_pd(lanes.sum.as_mut_ptr().add(4 * j), sum[j]);
    }
    (lanes.min, lanes.max) = (hmin8(mn), hmax8(mx));
    _mm256_storeu_si256(lanes.dsum.as_mut_ptr() as *mut __m256i, ds);
    lanes.finish::<DIGEST>(f, full, first)
}

/// The least of `v`'s eight lanes, by a tree of `vminps` (three steps,
/// not a chain of eight compares: the chain cost about a tenth of a block).
/// Ignores NaN as [`moments_f32_plain`] does; between `-0.0` and `0.0` it
/// may keep the other one than the plain loop would (both print as zero).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn hmin8(v: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::*;
    // SAFETY: called only from kernels built with AVX2.
    unsafe {
        let a = _mm_min_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let b = _mm_min_ps(a, _mm_movehl_ps(a, a));
        _mm_cvtss_f32(_mm_min_ss(b, _mm_movehdup_ps(b)))
    }
}

/// The greatest of `v`'s eight lanes ([`hmin8`]'s tree with `vmaxps`).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn hmax8(v: std::arch::x86_64::__m256) -> f32 {
    use std::arch::x86_64::*;
    // SAFETY: called only from kernels built with AVX2.
    unsafe {
        let a = _mm_max_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps::<1>(v));
        let b = _mm_max_ps(a, _mm_movehl_ps(a, a));
        _mm_cvtss_f32(_mm_max_ss(b, _mm_movehdup_ps(b)))
    }
}

/// The SIMD kernels' lanes after their last full iteration, stored: 16
/// float64 lanes per sum (lane `l` holds elements `l`, `l + 16`, ...), the
/// min and max of the full iterations ([`hmin8`], [`hmax8`] of their 8
/// lanes), 4 wrapping lanes of the digest's sum.
#[derive(Default)]
struct Lanes {
    l1: [f64; LANES],
    sq: [f64; LANES],
    sum: [f64; LANES],
    min: f32,
    max: f32,
    dsum: [u64; 4],
}

impl Lanes {
    /// Adds the tail `f[full..]` (fewer than 16 elements, the first in lane
    /// 0) as [`moments_f32_plain`] would, and reduces the lanes in its
    /// order: what both SIMD kernels end with, so they give its bits.
    #[inline(always)]
    fn finish<const DIGEST: bool>(mut self, f: &[f32], full: usize, first: u64) -> Acc {
        let (mut m_lo, mut m_hi) = (self.min, self.max);
        for (l, &v) in f[full..].iter().enumerate() {
            let d = v as f64;
            self.l1[l] += d.abs();
            self.sq[l] += d * d;
            self.sum[l] += d;
            m_lo = if v < m_lo { v } else { m_lo };
            m_hi = if v > m_hi { v } else { m_hi };
        }
        let mut dsum = 0u64;
        if DIGEST {
            dsum = self.dsum.iter().fold(0, |a, b| a.wrapping_add(*b));
            for (j, &v) in f[full..].iter().enumerate() {
                dsum = dsum.wrapping_add(digest::term(v.to_bits(), first + (full + j) as u64));
            }
        }
        Acc {
            l1: tree(self.l1),
            sq: tree(self.sq),
            sum: tree(self.sum),
            min: m_lo,
            max: m_hi,
            dsum,
        }
    }
}

/// [`moments_f32_avx2`] with AVX-512: the float64 sums in two 8-wide
/// accumulators each (lanes 0-7 and 8-15: the same 16 lanes, each adding
/// its elements in the same order), min and max as the AVX2 kernel takes
/// them (8-wide, the first eight elements of each sixteen, then the
/// second), the digest's terms of sixteen values at once (a wrapping sum:
/// any grouping gives the same bits). About a third fewer instructions an
/// element than the AVX2 kernel, whose vector ports it is bound by.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma")]
unsafe fn moments_f32_avx512<const DIGEST: bool>(f: &[f32], first: u64) -> Acc {
    use std::arch::x86_64::*;
    let n = f.len();
    let full = n - n % LANES;
    let p = f.as_ptr();
    let mut l1 = [_mm512_setzero_pd(); 2];
    let mut sq = [_mm512_setzero_pd(); 2];
    let mut sum = [_mm512_setzero_pd(); 2];
    let mut mn = _mm256_set1_ps(f32::INFINITY);
    let mut mx = _mm256_set1_ps(f32::NEG_INFINITY);
    let lo = digest::index8_avx2(first);
    let hi = digest::index8_avx2(first + 8);
    let mut kk = _mm512_inserti64x4::<1>(_mm512_castsi256_si512(lo), hi);
    let step = _mm512_set1_epi32(digest::K.wrapping_mul(16) as i32);
    let m = _mm512_set1_epi64(digest::M as i64);
    let mut ds = _mm512_setzero_si512();
    let mut i = 0;
    while i < full {
        // SAFETY: i + 16 <= full <= n elements of `f`.
        let a = _mm256_loadu_ps(p.add(i));
        let b = _mm256_loadu_ps(p.add(i + 8));
        if DIGEST {
            // digest::terms8_avx2's arithmetic on sixteen values.
            let w = _mm512_loadu_si512(p.add(i) as *const __m512i);
            let x = _mm512_xor_si512(w, kk);
            let pe = _mm512_mul_epu32(x, m);
            let po = _mm512_mul_epu32(_mm512_srli_epi64::<32>(x), m);
            let te = _mm512_xor_si512(pe, _mm512_srli_epi64::<32>(pe));
            let to = _mm512_xor_si512(po, _mm512_srli_epi64::<32>(po));
            ds = _mm512_add_epi64(ds, _mm512_add_epi64(te, to));
            kk = _mm512_add_epi32(kk, step);
        }
        mn = _mm256_min_ps(a, mn);
        mn = _mm256_min_ps(b, mn);
        mx = _mm256_max_ps(a, mx);
        mx = _mm256_max_ps(b, mx);
        let d = [_mm512_cvtps_pd(a), _mm512_cvtps_pd(b)];
        for j in 0..2 {
            l1[j] = _mm512_add_pd(l1[j], _mm512_abs_pd(d[j]));
            sq[j] = _mm512_fmadd_pd(d[j], d[j], sq[j]);
            sum[j] = _mm512_add_pd(sum[j], d[j]);
        }
        i += LANES;
    }
    let mut lanes = Lanes::default();
    for j in 0..2 {
        _mm512_storeu_pd(lanes.l1.as_mut_ptr().add(8 * j), l1[j]);
        _mm512_storeu_pd(lanes.sq.as_mut_ptr().add(8 * j), sq[j]);
        _mm512_storeu_pd(lanes.sum.as_mut_ptr().add(8 * j), sum[j]);
    }
    (lanes.min, lanes.max) = (hmin8(mn), hmax8(mx));
    let d4 = _mm256_add_epi64(
        _mm512_castsi512_si256(ds),
        _mm512_extracti64x4_epi64::<1>(ds),
    );
    _mm256_storeu_si256(lanes.dsum.as_mut_ptr() as *mut __m256i, d4);
    lanes.finish::<DIGEST>(f, full, first)
}

/// A block of any float dtype as float32 (no copy for float32).
#[inline(always)]
fn with_f32<T: FElem, R>(x: &[T], k: impl FnOnce(&[f32]) -> R) -> R {
    if let Some(f) = T::as_f32(x) {
        return k(f);
    }
    let mut buf = [0f32; BLOCK];
    for (o, e) in buf.iter_mut().zip(x) {
        *o = e.f();
    }
    k(&buf[..x.len()])
}

/// A block's moments and, with `digest`, its digest sum (the block's
/// first element at element index `at`: it is in cache for the second read).
fn moments_block_body<T: FElem + digest::Words>(x: &[T], at: usize, digest: bool) -> Acc {
    let mut a = with_f32(x, moments_f32_plain);
    if digest {
        a.dsum = digest::sum_at(x, (at * T::N) as u64);
    }
    a
}

/// A block's moments and digest sum through the SIMD kernel `W512`
/// chooses ([`moments_f32_avx512`] or [`moments_f32_avx2`]); inlined into
/// the two builds below, which enable the kernel's features.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn moments_block_simd<T: FElem + digest::Words, const W512: bool>(
    x: &[T],
    at: usize,
    digest: bool,
) -> Acc {
    // SAFETY (every call below): the callers run only where the kernel's
    // features are available.
    let kernel = |f: &[f32], digest: bool, first: u64| unsafe {
        match (W512, digest) {
            (true, true) => moments_f32_avx512::<true>(f, first),
            (true, false) => moments_f32_avx512::<false>(f, 0),
            (false, true) => moments_f32_avx2::<true>(f, first),
            (false, false) => moments_f32_avx2::<false>(f, 0),
        }
    };
    if let Some(f) = T::as_f32(x) {
        return kernel(f, digest, at as u64);
    }
    let mut a = with_f32(x, |f| kernel(f, false, 0));
    if digest {
        a.dsum = digest::sum_at(x, (at * T::N) as u64);
    }
    a
}

/// [`moments_block_simd`] with the AVX2 kernel.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn moments_block_avx2<T: FElem + digest::Words>(x: &[T], at: usize, digest: bool) -> Acc {
    // SAFETY: this function runs only where AVX2, FMA and F16C are available.
    unsafe { moments_block_simd::<T, false>(x, at, digest) }
}

/// [`moments_block_simd`] with the AVX-512 kernel.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f,avx2,fma,f16c")]
unsafe fn moments_block_avx512<T: FElem + digest::Words>(x: &[T], at: usize, digest: bool) -> Acc {
    // SAFETY: this function runs only where AVX-512F, AVX2, FMA and F16C are available.
    unsafe { moments_block_simd::<T, true>(x, at, digest) }
}

/// Whether the AVX-512 build of the moments kernel can run (checked once,
/// and [`simd`] too; `ACTDIFF_NO_AVX512=1` turns it off, to compare the
/// two). It gives the same bits as the AVX2 and plain builds.
fn simd512() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::sync::OnceLock;
        static SIMD512: OnceLock<bool> = OnceLock::new();
        *SIMD512.get_or_init(|| {
            simd()
                && std::arch::is_x86_feature_detected!("avx512f")
                && std::env::var_os("ACTDIFF_NO_AVX512").is_none_or(|v| v.is_empty())
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

/// Whether the AVX2 build of the block kernels can run (checked once; it
/// gives the same bits as the plain build).
fn simd() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        use std::sync::OnceLock;
        static SIMD: OnceLock<bool> = OnceLock::new();
        *SIMD.get_or_init(|| {
            use std::arch::is_x86_feature_detected as has;
            has!("avx2") && has!("fma") && has!("f16c")
        })
    }
    #[cfg(not(target_arch = "x86_64"))]
    false
}

#[inline(always)]
fn l1_block_body<T: Elem>(x: &[T]) -> f64 {
    let mut l1 = [0f64; LANES];
    let mut it = x.chunks_exact(LANES);
    for c in &mut it {
        for l in 0..LANES {
            l1[l] += c[l].hv().abs();
        }
    }
    for (l, e) in it.remainder().iter().enumerate() {
        l1[l] += e.hv().abs();
    }
    tree(l1)
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,fma,f16c")]
unsafe fn l1_block_avx2<T: Elem>(x: &[T]) -> f64 {
    l1_block_body(x)
}

/// The L1 norm of a float32 block with AVX2: [`l1_block_body`]'s order
/// (16 lanes, four 4-wide float64 accumulators), so the same bits.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn l1_f32_avx2(f: &[f32]) -> f64 {
    use std::arch::x86_64::*;
    let n = f.len();
    let full = n - n % LANES;
    let p = f.as_ptr();
    let abs_mask = _mm256_castsi256_pd(_mm256_set1_epi64x(0x7fff_ffff_ffff_ffff));
    let mut acc = [_mm256_setzero_pd(); 4];
    let mut i = 0;
    while i < full {
        for (j, a) in acc.iter_mut().enumerate() {
            // SAFETY: i + 16 <= full <= n elements of `f`.
            let d = _mm256_cvtps_pd(_mm_loadu_ps(p.add(i + 4 * j)));
            *a = _mm256_add_pd(*a, _mm256_and_pd(d, abs_mask));
        }
        i += LANES;
    }
    let mut l1 = [0f64; LANES];
    for (j, a) in acc.iter().enumerate() {
        _mm256_storeu_pd(l1.as_mut_ptr().add(4 * j), *a);
    }
    for (l, &v) in f[full..].iter().enumerate() {
        l1[l] += (v as f64).abs();
    }
    tree(l1)
}

/// The L1 norm of a block of a float dtype (through float32).
fn l1_float_block<T: FElem>(x: &[T]) -> f64 {
    #[cfg(target_arch = "x86_64")]
    if simd() {
        // SAFETY: simd() checked the CPU has AVX2.
        return with_f32(x, |f| unsafe { l1_f32_avx2(f) });
    }
    with_f32(x, l1_block_body::<f32>)
}

/// NaN and Inf counts (the rare path: only when the L1 is not finite).
fn count_nonfinite<T: FElem>(x: &[T]) -> (u64, u64) {
    let f = |c: &[T]| {
        c.iter().fold((0u64, 0u64), |(n, i), e| {
            let v = e.f();
            (n + v.is_nan() as u64, i + v.is_infinite() as u64)
        })
    };
    if x.len() >= PAR_MIN {
        use rayon::prelude::*;
        x.par_chunks(PAR_MIN)
            .map(f)
            .reduce(|| (0, 0), |a, b| (a.0 + b.0, a.1 + b.1))
    } else {
        f(x)
    }
}

/// The moments of `x` and, with `digest`, the digest's sum of its values
/// indexed from 0 (a whole tensor), in one pass: each block of 256
/// elements is read once from memory for both.
fn fused_moments<T: FElem + digest::Words>(x: &[T], digest: bool) -> TensorStats {
    #[cfg(target_arch = "x86_64")]
    let a = if simd512() {
        // SAFETY: simd512() checked the CPU has the features the kernel uses.
        let block = |b: &[T], at| unsafe { moments_block_avx512(b, at, digest) };
        pairwise(x, 0, &block, &Acc::merge)
    } else if simd() {
        // SAFETY: simd() checked the CPU has the features the kernel uses.
        let block = |b: &[T], at| unsafe { moments_block_avx2(b, at, digest) };
        pairwise(x, 0, &block, &Acc::merge)
    } else {
        let block = |b: &[T], at| moments_block_body(b, at, digest);
        pairwise(x, 0, &block, &Acc::merge)
    };
    #[cfg(not(target_arch = "x86_64"))]
    let a = pairwise(
        x,
        0,
        &|b, at| moments_block_body(b, at, digest),
        &Acc::merge,
    );
    let n = x.len() as f64;
    let (nan, inf) = if a.l1.is_finite() {
        (0, 0)
    } else {
        count_nonfinite(x)
    };
    let (min, max) = if nan > 0 {
        (f64::NAN, f64::NAN)
    } else {
        (a.min as f64, a.max as f64)
    };
    TensorStats {
        l1: a.l1,
        digest: digest.then_some(a.dsum),
        moments: Some(Moments {
            l2: a.sq.sqrt(),
            min,
            max,
            mean: a.sum / n,
            nan_count: nan,
            inf_count: inf,
        }),
    }
}

/// The digest's sum of a block whose first element is element `at` of a
/// whole tensor, when `digest` (read while the block is in cache).
#[inline(always)]
fn block_dsum<T: digest::Words>(b: &[T], at: usize, digest: bool) -> u64 {
    if digest {
        digest::sum_at(b, (at * T::N) as u64)
    } else {
        0
    }
}

/// The L1 norm of a float buffer and, with `digest`, its digest's sum
/// (values indexed from 0), in one pass.
fn fused_l1_float<T: FElem + digest::Words>(x: &[T], digest: bool) -> L1Acc {
    let block = |b: &[T], at| (l1_float_block(b), block_dsum(b, at, digest));
    pairwise(x, 0, &block, &merge_l1)
}

/// [`fused_l1_float`] for any element type the hash reads.
fn fused_l1<T: Elem + digest::Words>(x: &[T], digest: bool) -> L1Acc {
    #[cfg(target_arch = "x86_64")]
    if simd() {
        // SAFETY: simd() checked the CPU has the features the kernel uses.
        let block = |b: &[T], at| (unsafe { l1_block_avx2(b) }, block_dsum(b, at, digest));
        return pairwise(x, 0, &block, &merge_l1);
    }
    let block = |b: &[T], at| (l1_block_body(b), block_dsum(b, at, digest));
    pairwise(x, 0, &block, &merge_l1)
}

/// The fused pass, when `t`'s buffer allows it.
fn fused(t: &Tensor, i: &Info, moments: bool, digest: Option<Index>) -> Option<TensorStats> {
    let d = host_data(t, i)?;
    let dg = |d: &HostData<'_>| -> Option<u64> {
        let at = digest?;
        let s = match *d {
            HostData::F32(x) => digest::host_sum_at(x, at),
            HostData::F16(x) => digest::host_sum_at(x, at),
            HostData::BF16(x) => digest::host_sum_at(x, at),
            HostData::F64(x) => digest::host_sum_at(x, at),
            HostData::I64(x) => digest::host_sum_at(x, at),
            HostData::I32(x) => digest::host_sum_at(x, at),
            HostData::I16(x) => digest::host_sum_at(x, at),
            HostData::I8(x) => digest::host_sum_at(x, at),
            HostData::U8(x) => digest::host_sum_at(x, at),
        };
        Some(s)
    };
    // A whole tensor's digest is summed in the statistics' pass; a shard's
    // (values indexed by their place in the whole tensor) in a pass of its own.
    let one_pass = digest.is_some_and(|at| at.is_whole());
    if moments && i.numel > 0 {
        let mut s = match d {
            HostData::F32(x) => fused_moments(x, one_pass),
            HostData::F16(x) => fused_moments(x, one_pass),
            HostData::BF16(x) => fused_moments(x, one_pass),
            _ => return None,
        };
        if !one_pass {
            s.digest = dg(&d);
        }
        return Some(s);
    }
    let (l1, dsum) = match d {
        HostData::F32(x) => fused_l1_float(x, one_pass),
        HostData::F16(x) => fused_l1_float(x, one_pass),
        HostData::BF16(x) => fused_l1_float(x, one_pass),
        HostData::F64(x) => fused_l1(x, one_pass),
        HostData::I64(x) => fused_l1(x, one_pass),
        HostData::I32(x) => fused_l1(x, one_pass),
        HostData::I16(x) => fused_l1(x, one_pass),
        HostData::I8(x) => fused_l1(x, one_pass),
        HostData::U8(x) => fused_l1(x, one_pass),
    };
    Some(TensorStats {
        l1,
        moments: None,
        digest: if one_pass { Some(dsum) } else { dg(&d) },
    })
}

/// The hash, (with `moments`, for a non-empty floating tensor) the stats,
/// and (with `digest`, its values indexed by that [`Index`]) the digest's
/// sum ([`digest::host_sum_at`], not yet [`digest::finish`]ed) of a CPU
/// tensor, on the host now: the fused pass
/// where the buffer allows it (a non-contiguous tensor of a dtype the pass
/// reads is made contiguous first), else the libtorch ops read back at once.
pub fn host_stats(
    t: &Tensor,
    moments: bool,
    digest: Option<Index>,
) -> Result<TensorStats, TorchError> {
    let i = t.info()?;
    if let Some(s) = fused(t, &i, moments, digest) {
        return Ok(s);
    }
    if i.device == Device::Cpu && i.strided && (!i.contiguous || i.is_neg) {
        let c = t.contiguous()?;
        let ci = c.info()?;
        if let Some(s) = fused(&c, &ci, moments, digest) {
            return Ok(s);
        }
    }
    read_back(t, moments, digest)
}

/// The device path, read back at once (one sync per tensor: for the host
/// fallback and for tests). The digest is the device sum, as
/// [`host_stats`] gives it.
pub fn read_back(
    t: &Tensor,
    moments: bool,
    digest: Option<Index>,
) -> Result<TensorStats, TorchError> {
    let i = t.info()?;
    let moments = moments && i.numel > 0 && i.floating;
    let n = if moments { N_MOMENT_SCALARS } else { 1 } + digest.is_some() as usize;
    let mut v = vec![0f64; n];
    t.scalars(moments, digest)?.copy_to_host(&mut v)?;
    Ok(TensorStats {
        l1: v[0],
        moments: moments.then(|| moments_from(&v)),
        digest: digest.map(|_| v[n - 1].to_bits()),
    })
}

#[cfg(test)]
mod tests;
