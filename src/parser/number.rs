//! Numbers as the reference reads them: Python's `float()` on trimmed text,
//! parsed without allocating.
//!
//! Accepted: optional sign, decimal or exponent forms (`1.5`, `.5`, `5.`,
//! `1e-3`), underscores between digits (`1_000`), and `inf`, `infinity`,
//! `nan` in any letter case. Anything else is not a number. The grammar is
//! Python's (`floatnumber` of the language reference, as `float()` reads
//! it), written as nom combinators; the digits are then converted by Rust's
//! `str::parse::<f64>`, which rounds correctly, so the shortest round-trip
//! text of a float64 (a full-precision log) reads back to the same bits.

use nom::branch::alt;
use nom::bytes::complete::tag_no_case;
use nom::character::complete::{char, digit1, one_of};
use nom::combinator::{all_consuming, opt, recognize, value};
use nom::multi::many0_count;
use nom::sequence::{pair, preceded, tuple};
use nom::IResult;

use super::line::trim;

/// `digitpart ::= digit (["_"] digit)*`
fn digitpart(i: &[u8]) -> IResult<&[u8], &[u8]> {
    recognize(pair(digit1, many0_count(preceded(char('_'), digit1))))(i)
}

/// `digitpart ["." [digitpart]] | "." digitpart`, then
/// `[("e" | "E") ["+" | "-"] digitpart]`.
fn finite(i: &[u8]) -> IResult<&[u8], &[u8]> {
    let mantissa = alt((
        recognize(pair(digitpart, opt(pair(char('.'), opt(digitpart))))),
        recognize(pair(char('.'), digitpart)),
    ));
    let exponent = tuple((one_of("eE"), opt(one_of("+-")), digitpart));
    recognize(pair(mantissa, opt(exponent)))(i)
}

/// `inf`, `infinity` or `nan`, any letter case.
fn special(i: &[u8]) -> IResult<&[u8], f64> {
    alt((
        value(f64::INFINITY, tag_no_case("infinity")),
        value(f64::INFINITY, tag_no_case("inf")),
        value(f64::NAN, tag_no_case("nan")),
    ))(i)
}

/// Parses `text` as Python's `float(text)` would; `None` when Python would
/// raise `ValueError`.
pub fn py_float(text: &[u8]) -> Option<f64> {
    let t = trim(text);
    let (neg, body) = match t.first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    let v = if body.first().is_some_and(u8::is_ascii_alphabetic) {
        all_consuming(special)(body).ok()?.1
    } else {
        let digits = all_consuming(finite)(body).ok()?.1;
        parse_digits(digits)?
    };
    Some(if neg { -v } else { v })
}

/// Converts validated `finite` text (ASCII digits, `.`, `e`, sign,
/// underscores) to the nearest float64.
fn parse_digits(digits: &[u8]) -> Option<f64> {
    if memchr::memchr(b'_', digits).is_none() {
        return std::str::from_utf8(digits).ok()?.parse::<f64>().ok();
    }
    let mut buf = [0u8; 64];
    let mut n = 0;
    for &b in digits.iter().filter(|b| **b != b'_') {
        if n == buf.len() {
            // Very long literals: rare enough to allocate.
            let s: String = digits
                .iter()
                .filter(|b| **b != b'_')
                .map(|b| *b as char)
                .collect();
            return s.parse::<f64>().ok();
        }
        buf[n] = b;
        n += 1;
    }
    std::str::from_utf8(&buf[..n]).ok()?.parse::<f64>().ok()
}

#[cfg(test)]
mod tests {
    use super::py_float;

    #[test]
    fn accepts_python_float_syntax() {
        assert_eq!(py_float(b"1.234568e+02"), Some(123.4568));
        assert_eq!(py_float(b"  -0.000000e+00 "), Some(-0.0));
        assert!(py_float(b"-0.000000e+00").unwrap().is_sign_negative());
        assert_eq!(py_float(b"1_000"), Some(1000.0));
        assert_eq!(py_float(b"1_0.2_5e1_0"), Some(10.25e10));
        assert_eq!(py_float(b".5"), Some(0.5));
        assert_eq!(py_float(b"5."), Some(5.0));
        assert_eq!(py_float(b"+3"), Some(3.0));
        assert_eq!(py_float(b"3735928559"), Some(3735928559.0));
        assert_eq!(py_float(b"inf"), Some(f64::INFINITY));
        assert_eq!(py_float(b"-Infinity"), Some(f64::NEG_INFINITY));
        assert!(py_float(b"NaN").unwrap().is_nan());
        assert!(py_float(b"-nan").unwrap().is_nan());
        assert_eq!(py_float(b"1e-320"), Some(1e-320));
        assert_eq!(py_float(b"4.940656e-324"), Some(5e-324));
    }

    #[test]
    fn rejects_what_python_rejects() {
        for bad in [
            &b""[..],
            b"   ",
            b"_1",
            b"1_",
            b"1__0",
            b"1._5",
            b".",
            b"e5",
            b"1e",
            b"1e+",
            b"0x10",
            b"1.2.3",
            b"infx",
            b"\"NaN\"",
            b"torch.Size([2])",
            b"1,2",
            b"--1",
            b"2.55.3141e+04",
            b"1e5.0",
            b"1_e5",
            b"1e_5",
            b"infinit",
            b"nan1",
            b"1 2",
            b"+",
            b"-",
            b"e",
        ] {
            assert_eq!(py_float(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
