//! Number formatting of the log format: the reference's `%.6e`
//! ([`fmt_e6`]), the shortest text that round-trips in float64
//! ([`fmt_full`], the `Precision: full` logs), and decimal integers.

use std::io::{self, Write};

const DIGIT_PAIRS: &[u8; 200] = b"0001020304050607080910111213141516171819\
2021222324252627282930313233343536373839\
4041424344454647484950515253545556575859\
6061626364656667686970717273747576777879\
8081828384858687888990919293949596979899";

/// Appends `n` in decimal.
pub fn push_u64(out: &mut Vec<u8>, mut n: u64) {
    let mut tmp = [0u8; 20];
    let mut i = tmp.len();
    while n >= 100 {
        let d = (n % 100) as usize * 2;
        n /= 100;
        i -= 2;
        tmp[i..i + 2].copy_from_slice(&DIGIT_PAIRS[d..d + 2]);
    }
    if n >= 10 {
        let d = n as usize * 2;
        i -= 2;
        tmp[i..i + 2].copy_from_slice(&DIGIT_PAIRS[d..d + 2]);
    } else {
        i -= 1;
        tmp[i] = b'0' + n as u8;
    }
    out.extend_from_slice(&tmp[i..]);
}

/// Powers of ten exactly representable as `f64`.
const POW10: [f64; 23] = [
    1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16,
    1e17, 1e18, 1e19, 1e20, 1e21, 1e22,
];

/// Appends `x` as Python's `'%.6e' % x` does: `1.234568e+02`,
/// `-0.000000e+00`, `1.000000e+100`, `nan`, `inf`, `-inf`. Correctly
/// rounded (ties to even on the exact binary value), like Python.
///
/// A fast path scales by an exact power of ten (one rounding) and takes the
/// digits when the result is clearly away from a rounding tie; otherwise
/// (ties, near-ties, subnormals, exponents outside about ±16) the digits come
/// from the standard library's exact formatting.
pub fn fmt_e6(out: &mut Vec<u8>, x: f64) {
    if x.is_nan() {
        out.extend_from_slice(b"nan");
        return;
    }
    if x.is_sign_negative() {
        out.push(b'-');
    }
    let a = x.abs();
    if a.is_infinite() {
        out.extend_from_slice(b"inf");
        return;
    }
    if a == 0.0 {
        out.extend_from_slice(b"0.000000e+00");
        return;
    }
    let (d, e) = match fast_digits(a) {
        Some(de) => de,
        None => slow_digits(a),
    };
    push_digits(out, d, e);
}

/// Appends `x` as Python's `'%.{d}e' % x` does with `d =
/// significant_digits - 1` (at least one digit): [`fmt_e6`]'s format at
/// any precision (`1.23e+03` for 3 digits). Correctly rounded, through the
/// standard library's exact formatting; [`fmt_e6`] is the fast path for 7.
pub fn fmt_e(out: &mut Vec<u8>, x: f64, significant_digits: u32) {
    if x.is_nan() {
        out.extend_from_slice(b"nan");
        return;
    }
    if x.is_sign_negative() {
        out.push(b'-');
    }
    let a = x.abs();
    if a.is_infinite() {
        out.extend_from_slice(b"inf");
        return;
    }
    let decimals = significant_digits.max(1) as usize - 1;
    let text = format!("{a:.decimals$e}");
    let (mantissa, exp) = text.split_once('e').expect("`{:e}` writes an exponent");
    out.extend_from_slice(mantissa.as_bytes());
    out.push(b'e');
    let (sign, digits) = match exp.strip_prefix('-') {
        Some(d) => (b'-', d),
        None => (b'+', exp),
    };
    out.push(sign);
    if digits.len() < 2 {
        out.push(b'0');
    }
    out.extend_from_slice(digits.as_bytes());
}

/// The seven significant digits (1_000_000..=9_999_999) and decimal exponent
/// of finite, positive `a`, or `None` when the fast path cannot be sure.
fn fast_digits(a: f64) -> Option<(u32, i32)> {
    let biased = ((a.to_bits() >> 52) & 0x7ff) as i32;
    if biased == 0 {
        return None; // subnormal
    }
    let e2 = biased - 1023;
    // floor(e2 × log10 2), or one less than floor(log10 a).
    let mut e10 = (e2 * 78913) >> 18;
    for _ in 0..3 {
        let k = 6 - e10;
        if !(-22..=22).contains(&k) {
            return None;
        }
        // One rounding: |error| ≤ 2^-53 × t < 1.2e-8 for t < 1e8.
        let t = if k >= 0 {
            a * POW10[k as usize]
        } else {
            a / POW10[(-k) as usize]
        };
        let n = t.floor();
        let frac = t - n;
        if (frac - 0.5).abs() < 1e-6 {
            return None; // a tie or too close to one to tell
        }
        if t >= 9_999_999.5 {
            e10 += 1;
            continue;
        }
        if t < 999_999.5 {
            e10 -= 1;
            continue;
        }
        let d = n as u32 + (frac > 0.5) as u32;
        return Some((d, e10));
    }
    None
}

/// Digits and exponent from the standard library's exact `{:.6e}`
/// (correctly rounded, ties to even), e.g. `9.999889e-321`.
fn slow_digits(a: f64) -> (u32, i32) {
    let mut tmp = [0u8; 40];
    let mut cur = io::Cursor::new(&mut tmp[..]);
    write!(cur, "{a:.6e}").expect("40 bytes hold any {:.6e}");
    let len = cur.position() as usize;
    let s = &tmp[..len];
    let mut d = 0u32;
    let mut i = 0;
    while s[i] != b'e' {
        if s[i].is_ascii_digit() {
            d = d * 10 + (s[i] - b'0') as u32;
        }
        i += 1;
    }
    i += 1;
    let neg = s[i] == b'-';
    if neg {
        i += 1;
    }
    let mut e = 0i32;
    for &c in &s[i..] {
        e = e * 10 + (c - b'0') as i32;
    }
    (d, if neg { -e } else { e })
}

/// Appends `d` (seven digits) as `d.dddddd` and the exponent as `e±XX`.
fn push_digits(out: &mut Vec<u8>, d: u32, e: i32) {
    let hi = d / 1_000_000;
    let lo = d % 1_000_000;
    let mut b = [0u8; 16];
    b[0] = b'0' + hi as u8;
    b[1] = b'.';
    let p0 = (lo / 10_000) as usize * 2;
    let p1 = (lo / 100 % 100) as usize * 2;
    let p2 = (lo % 100) as usize * 2;
    b[2..4].copy_from_slice(&DIGIT_PAIRS[p0..p0 + 2]);
    b[4..6].copy_from_slice(&DIGIT_PAIRS[p1..p1 + 2]);
    b[6..8].copy_from_slice(&DIGIT_PAIRS[p2..p2 + 2]);
    b[8] = b'e';
    b[9] = if e < 0 { b'-' } else { b'+' };
    let ea = e.unsigned_abs() as usize;
    let n = if ea >= 100 {
        b[10] = b'0' + (ea / 100) as u8;
        let p = (ea % 100) * 2;
        b[11..13].copy_from_slice(&DIGIT_PAIRS[p..p + 2]);
        13
    } else {
        b[10..12].copy_from_slice(&DIGIT_PAIRS[ea * 2..ea * 2 + 2]);
        12
    };
    out.extend_from_slice(&b[..n]);
}

/// Appends `x` as the shortest text that reads back (Python `float()`) as
/// exactly `x`: at most 17 significant digits, always in exponent form with
/// a sign and at least two exponent digits, as `%.6e` writes them
/// (`1.2345678901234567e+02`, `1e+00`, `-0e+00`, `5e-324`), and `nan`,
/// `inf`, `-inf`. The digits are the standard library's shortest
/// round-trip digits (Grisu with a Dragon4 fallback).
pub fn fmt_full(out: &mut Vec<u8>, x: f64) {
    if x.is_nan() {
        out.extend_from_slice(b"nan");
        return;
    }
    if x.is_infinite() {
        out.extend_from_slice(if x > 0.0 { b"inf" } else { b"-inf" });
        return;
    }
    let mut tmp = [0u8; 40];
    let mut cur = io::Cursor::new(&mut tmp[..]);
    write!(cur, "{x:e}").expect("40 bytes hold any {:e}");
    let len = cur.position() as usize;
    let s = &tmp[..len];
    let e = s.iter().position(|c| *c == b'e').expect("an exponent");
    out.extend_from_slice(&s[..e]);
    out.push(b'e');
    let (neg, digits) = match s[e + 1] {
        b'-' => (true, &s[e + 2..]),
        _ => (false, &s[e + 1..]),
    };
    out.push(if neg { b'-' } else { b'+' });
    if digits.len() < 2 {
        out.push(b'0');
    }
    out.extend_from_slice(digits);
}

#[cfg(test)]
mod tests {
    use super::*;

    /// xorshift64*, for the randomised checks.
    struct Rng(u64);
    impl Rng {
        fn next_u64(&mut self) -> u64 {
            self.0 ^= self.0 >> 12;
            self.0 ^= self.0 << 25;
            self.0 ^= self.0 >> 27;
            self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
        }
        fn f64(&mut self) -> f64 {
            (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
        }
        fn below(&mut self, n: u64) -> u64 {
            self.next_u64() % n
        }
    }

    fn e6(x: f64) -> String {
        let mut v = Vec::new();
        fmt_e6(&mut v, x);
        String::from_utf8(v).unwrap()
    }

    /// `{:.6e}` from the standard library, with Python's exponent spelling.
    fn reference(x: f64) -> String {
        if x.is_nan() {
            return "nan".into();
        }
        if x.is_infinite() {
            return if x > 0.0 { "inf" } else { "-inf" }.into();
        }
        let s = format!("{x:.6e}");
        let (m, e) = s.split_once('e').unwrap();
        let e: i32 = e.parse().unwrap();
        format!("{m}e{}{:02}", if e < 0 { '-' } else { '+' }, e.abs())
    }

    #[test]
    fn formatter_matches_python() {
        // Each right-hand side printed by CPython 3: `'%.6e' % x`.
        let cases: &[(f64, &str)] = &[
            (1.0, "1.000000e+00"),
            (123.45678, "1.234568e+02"),
            (0.0, "0.000000e+00"),
            (-0.0, "-0.000000e+00"),
            (1e-320, "9.999889e-321"),
            (1e100, "1.000000e+100"),
            // Not 1.000000e+01: the double nearest 9.9999995 lies below the tie.
            (9.9999995, "9.999999e+00"),
            (9.99999951, "1.000000e+01"),
            (f64::NAN, "nan"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
            (1234567.5, "1.234568e+06"),
            (1234568.5, "1.234568e+06"),
            (0.125, "1.250000e-01"),
            (-2.5e-7, "-2.500000e-07"),
            (5e-324, "4.940656e-324"),
            (1.7976931348623157e308, "1.797693e+308"),
            (2.2250738585072014e-308, "2.225074e-308"),
            (999999.5, "9.999995e+05"),
            (9999999.5, "1.000000e+07"),
            (0.1, "1.000000e-01"),
            (1e-5, "1.000000e-05"),
            (4.56789123, "4.567891e+00"),
            (-1e22, "-1.000000e+22"),
            (1e23, "1.000000e+23"),
            (1e-16, "1.000000e-16"),
            (1e-17, "1.000000e-17"),
            (123456789012345.0, "1.234568e+14"),
            (0.00012345675, "1.234567e-04"),
            (6.02214076e23, "6.022141e+23"),
        ];
        for &(x, want) in cases {
            assert_eq!(e6(x), want, "{x:e}");
        }
    }

    #[test]
    fn fast_path_agrees_with_exact_formatting() {
        let mut r = Rng(42);
        let check = |x: f64| assert_eq!(e6(x), reference(x), "{x:e} bits {:#x}", x.to_bits());
        for _ in 0..300_000 {
            // Any bit pattern.
            check(f64::from_bits(r.next_u64()));
            // Log-uniform over the fast path's range and beyond.
            let x = 10f64.powf(r.f64() * 60.0 - 25.0);
            check(x);
            check(-x);
            // Ties and near-ties: (n + 0.5) × 10^k and its neighbours.
            let n = 1_000_000 + r.below(9_000_000);
            let k = r.below(30) as i32 - 15;
            let t = (n as f64 + 0.5) * 10f64.powi(k - 6);
            check(t);
            check(f64::from_bits(t.to_bits() + 1));
            check(f64::from_bits(t.to_bits() - 1));
            // Values near a power of ten.
            let p = 10f64.powi(k);
            check(p);
            check(f64::from_bits(p.to_bits() + 1));
            check(f64::from_bits(p.to_bits() - 1));
        }
    }

    #[test]
    fn integers_print() {
        for n in [0u64, 7, 10, 99, 100, 12345, u64::MAX] {
            let mut v = Vec::new();
            push_u64(&mut v, n);
            assert_eq!(String::from_utf8(v).unwrap(), n.to_string());
        }
    }

    fn full(x: f64) -> String {
        let mut v = Vec::new();
        fmt_full(&mut v, x);
        String::from_utf8(v).unwrap()
    }

    #[test]
    fn full_precision_spelling() {
        // Python: float(s) == x for each, repr's digits, %e's exponent style.
        let cases: &[(f64, &str)] = &[
            (123.45678901234567, "1.2345678901234567e+02"), // repr: 123.45678901234567
            (1.0, "1e+00"),
            (-0.0, "-0e+00"),
            (0.0, "0e+00"),
            (0.1, "1e-01"),
            (5e-324, "5e-324"),
            (1.7976931348623157e308, "1.7976931348623157e+308"),
            (-2.5e-7, "-2.5e-07"),
            (1e100, "1e+100"),
            (f64::NAN, "nan"),
            (f64::INFINITY, "inf"),
            (f64::NEG_INFINITY, "-inf"),
        ];
        for &(x, want) in cases {
            assert_eq!(full(x), want, "{x:e}");
        }
    }

    #[test]
    fn full_precision_round_trips_in_at_most_17_digits() {
        let mut r = Rng(7);
        for _ in 0..200_000 {
            let x = f64::from_bits(r.next_u64());
            let s = full(x);
            if x.is_nan() {
                assert_eq!(s, "nan");
                continue;
            }
            let back: f64 = s.parse().unwrap();
            assert_eq!(back.to_bits(), x.to_bits(), "{s}");
            let mant = s.split('e').next().unwrap();
            let digits = mant.bytes().filter(|c| c.is_ascii_digit()).count();
            assert!(digits <= 17, "{s}");
            assert!(s.contains("e+") || s.contains("e-"), "{s}");
        }
    }
}
