//! Numbers as the reference reads them: Python's `float()` on trimmed text,
//! parsed without allocating.
//!
//! Accepted: optional sign, decimal or exponent forms (`1.5`, `.5`, `5.`,
//! `1e-3`), underscores between digits (`1_000`), and `inf`, `infinity`,
//! `nan` in any letter case. Anything else is not a number.

use super::line::trim;

/// Parses `text` as Python's `float(text)` would; `None` when Python would
/// raise `ValueError`.
pub fn py_float(text: &[u8]) -> Option<f64> {
    let t = trim(text);
    let (neg, body) = match t.first() {
        Some(b'-') => (true, &t[1..]),
        Some(b'+') => (false, &t[1..]),
        _ => (false, t),
    };
    if body.is_empty() {
        return None;
    }
    if body[0].is_ascii_alphabetic() {
        let v = if body.eq_ignore_ascii_case(b"inf") || body.eq_ignore_ascii_case(b"infinity") {
            f64::INFINITY
        } else if body.eq_ignore_ascii_case(b"nan") {
            f64::NAN
        } else {
            return None;
        };
        return Some(if neg { -v } else { v });
    }
    // Validate Python's grammar: digitpart ("." digitpart?)? | "." digitpart, then exponent.
    let mut i = 0;
    let mut digits = 0;
    let mut underscores = false;
    let digitpart = |i: &mut usize, digits: &mut usize, us: &mut bool| -> bool {
        let start = *i;
        while *i < body.len() {
            let b = body[*i];
            if b.is_ascii_digit() {
                *digits += 1;
                *i += 1;
            } else if b == b'_'
                && *i > start
                && body[*i - 1].is_ascii_digit()
                && body.get(*i + 1).is_some_and(|c| c.is_ascii_digit())
            {
                *us = true;
                *i += 1;
            } else {
                break;
            }
        }
        *i > start
    };
    let int_part = digitpart(&mut i, &mut digits, &mut underscores);
    let mut frac_part = false;
    if i < body.len() && body[i] == b'.' {
        i += 1;
        frac_part = digitpart(&mut i, &mut digits, &mut underscores);
    }
    if !int_part && !frac_part {
        return None;
    }
    if i < body.len() && (body[i] == b'e' || body[i] == b'E') {
        i += 1;
        if i < body.len() && (body[i] == b'+' || body[i] == b'-') {
            i += 1;
        }
        let mut d = 0;
        if !digitpart(&mut i, &mut d, &mut underscores) {
            return None;
        }
    }
    if i != body.len() {
        return None;
    }
    let v = if underscores {
        let mut buf = [0u8; 64];
        let mut n = 0;
        for &b in body {
            if b != b'_' {
                if n == buf.len() {
                    // Very long literals: rare enough to allocate.
                    let s: String = body
                        .iter()
                        .filter(|b| **b != b'_')
                        .map(|b| *b as char)
                        .collect();
                    return s.parse::<f64>().ok().map(|v| if neg { -v } else { v });
                }
                buf[n] = b;
                n += 1;
            }
        }
        std::str::from_utf8(&buf[..n]).ok()?.parse::<f64>().ok()?
    } else {
        // SAFETY-free: validated ASCII above.
        std::str::from_utf8(body).ok()?.parse::<f64>().ok()?
    };
    Some(if neg { -v } else { v })
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
        ] {
            assert_eq!(py_float(bad), None, "{:?}", String::from_utf8_lossy(bad));
        }
    }
}
