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
//! 1. `w_i`: the bit pattern of element `i` (logical row-major index, from 0)
//!    as an unsigned integer of the element's width, zero-extended to 64
//!    bits (float32 → its 32 bits, bfloat16 → 16 bits, bool → 0 or 1;
//!    complex: the real and imaginary parts as two elements, `i` counting
//!    both). Every NaN payload and the sign of zero count.
//! 2. `x = (w_i XOR i·C1) · C2;  x ^= x >> 31;  x = x · C3;  x ^= x >> 29`
//!    (64-bit wrapping multiplies, logical shifts: the finaliser of
//!    SplitMix64, a bijection, so a change of any one element always
//!    changes the sum, and the index makes the sum depend on the order).
//! 3. `S = Σ x` modulo 2^64.
//! 4. `digest = mix(S + n·C1)`, `n` the number of values `w_i` (a complex
//!    element counts as two), `mix` the same
//!    finaliser as step 2 with shifts 30, 27 and 31.
//!
//! `C1 = 0x9E3779B97F4A7C15`, `C2 = 0xBF58476D1CE4E5B9`,
//! `C3 = 0x94D049BB133111EB`. It is a checksum, not a cryptographic hash:
//! two different tensors collide with probability about 2^-64.
//!
//! This part needs no libtorch.

/// The golden-ratio constant of step 2 and 4.
pub const C1: u64 = 0x9E37_79B9_7F4A_7C15;
/// The first multiplier of the mix.
pub const C2: u64 = 0xBF58_476D_1CE4_E5B9;
/// The second multiplier of the mix.
pub const C3: u64 = 0x94D0_49BB_1331_11EB;

/// Step 2 for one element: its term of the sum.
#[inline(always)]
pub fn term(w: u64, i: u64) -> u64 {
    let mut x = (w ^ i.wrapping_mul(C1)).wrapping_mul(C2);
    x ^= x >> 31;
    x = x.wrapping_mul(C3);
    x ^ (x >> 29)
}

/// Step 4: the digest from the device sum `s` and the element count `n`.
pub fn finish(s: u64, n: u64) -> u64 {
    let mut z = s.wrapping_add(n.wrapping_mul(C1));
    z = (z ^ (z >> 30)).wrapping_mul(C2);
    z = (z ^ (z >> 27)).wrapping_mul(C3);
    z ^ (z >> 31)
}

/// An element's bit pattern, zero-extended (step 1).
pub trait Bits: Copy + Send + Sync {
    /// The bits as an unsigned 64-bit integer.
    fn bits(self) -> u64;
}
macro_rules! bits {
    ($($t:ty => |$v:ident| $e:expr),* $(,)?) => {$(
        impl Bits for $t {
            #[inline(always)]
            fn bits(self) -> u64 {
                let $v = self;
                $e
            }
        }
    )*};
}
bits!(
    f32 => |v| v.to_bits() as u64,
    f64 => |v| v.to_bits(),
    i64 => |v| v as u64,
    i32 => |v| v as u32 as u64,
    i16 => |v| v as u16 as u64,
    i8 => |v| v as u8 as u64,
    u8 => |v| v as u64,
    u64 => |v| v,
);

#[cfg(feature = "capture")]
bits!(
    half::f16 => |v| v.to_bits() as u64,
    half::bf16 => |v| v.to_bits() as u64,
);

#[inline(always)]
fn sum_body<T: Bits>(x: &[T], first: u64) -> u64 {
    // Four independent sums keep the multiplies pipelined (the sum is
    // associative: any grouping gives the same value).
    let mut s = [0u64; 4];
    let mut c = x.chunks_exact(4);
    let mut i = first;
    for q in &mut c {
        for l in 0..4 {
            s[l] = s[l].wrapping_add(term(q[l].bits(), i + l as u64));
        }
        i += 4;
    }
    for (k, e) in c.remainder().iter().enumerate() {
        s[k] = s[k].wrapping_add(term(e.bits(), i + k as u64));
    }
    s[0].wrapping_add(s[1])
        .wrapping_add(s[2])
        .wrapping_add(s[3])
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sum_avx2<T: Bits>(x: &[T], first: u64) -> u64 {
    sum_body(x, first)
}

fn sum_at<T: Bits>(x: &[T], first: u64) -> u64 {
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
pub fn host_sum<T: Bits>(x: &[T]) -> u64 {
    const CHUNK: usize = 1 << 16;
    if x.len() < 2 * CHUNK {
        return sum_at(x, 0);
    }
    use rayon::prelude::*;
    x.par_chunks(CHUNK)
        .enumerate()
        .map(|(k, c)| sum_at(c, (k * CHUNK) as u64))
        .reduce(|| 0, u64::wrapping_add)
}

/// The digest of a contiguous buffer (steps 1-4).
pub fn digest<T: Bits>(x: &[T]) -> u64 {
    finish(host_sum(x), x.len() as u64)
}

/// The digest as written in the log: 16 lowercase hex digits.
pub fn hex(d: u64) -> String {
    format!("{d:016x}")
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The definition, one element at a time.
    fn reference(x: &[u64]) -> u64 {
        let s = x
            .iter()
            .enumerate()
            .fold(0u64, |s, (i, w)| s.wrapping_add(term(*w, i as u64)));
        finish(s, x.len() as u64)
    }

    #[test]
    fn chunked_and_parallel_sums_equal_the_definition() {
        let x: Vec<f32> = (0..300_001).map(|i| (i as f32).sin()).collect();
        let w: Vec<u64> = x.iter().map(|v| v.to_bits() as u64).collect();
        assert_eq!(digest(&x), reference(&w));
        assert_eq!(digest(&x[..7]), reference(&w[..7]));
        assert_eq!(digest::<f32>(&[]), reference(&[]));
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
        // Zero-extension: int8 -1 is 0xff, not 64 ones.
        assert_eq!(digest(&[-1i8]), digest(&[255u8]));
        assert_ne!(digest(&[-1i8]), digest(&[-1i64]));
        assert_eq!(hex(0xab), "00000000000000ab");
    }
}
