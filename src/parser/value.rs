//! Reading the values of a field: the tokens of a number field (a stat, an
//! Output hash or Input hashes list, with a second writer's spellings) and
//! the capture agent's 64-bit digests (`Output digest:` / `Input digests:`,
//! 16 hex digits each). One number's syntax is [`super::number`]. The
//! matcher compares what these functions read; a token they cannot read
//! is [`Token::Unreadable`], which the parser warns about at its line and
//! column.

use super::line::trim;
use super::number::py_float;

/// Digits of one digest.
pub const DIGEST_DIGITS: usize = 16;

/// Parses one digest token: exactly 16 hex digits (the writer prints
/// lowercase; uppercase is accepted), surrounding whitespace ignored.
/// `None` for anything else.
pub fn parse_digest(tok: &[u8]) -> Option<u64> {
    let t = trim(tok);
    if t.len() != DIGEST_DIGITS || !t.iter().all(u8::is_ascii_hexdigit) {
        return None;
    }
    // 16 ASCII hex digits: always valid UTF-8 and always fits a u64.
    u64::from_str_radix(std::str::from_utf8(t).ok()?, 16).ok()
}

/// The digests of a digest line's value, in order: `Some(d)` for a
/// well-formed value, `None` for a malformed one (the parser warned about
/// it). An empty value gives no items.
pub fn digests(list: &[u8]) -> impl Iterator<Item = Option<u64>> + '_ {
    let list = trim(list);
    let mut parts = (!list.is_empty()).then(|| list.split(|b| *b == b','));
    std::iter::from_fn(move || parts.as_mut()?.next().map(parse_digest))
}

/// The first malformed value of a digest list: its byte offset in `list`
/// and its trimmed text; `None` when every value is 16 hex digits (or the
/// list is empty).
pub fn first_bad_digest(list: &[u8]) -> Option<(usize, &[u8])> {
    if trim(list).is_empty() {
        return None;
    }
    let mut off = 0;
    for part in list.split(|b| *b == b',') {
        if parse_digest(part).is_none() {
            let t = trim(part);
            let lead = if t.is_empty() {
                0
            } else {
                t.as_ptr() as usize - part.as_ptr() as usize
            };
            return Some((off + lead, t));
        }
        off += part.len() + 1;
    }
    None
}

/// One value of a number field (L1/L2 norm, Min, Max, Mean, an Output hash
/// or Input hashes position), as actdiff reads it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Token<'a> {
    /// A number: Python `float()` syntax, or a second writer's `name=value`
    /// or quoted `"NaN"` spelling (cases/05).
    Number(f64),
    /// A tuple-valued hash (`[1.0, 2]`, `name=[...]`): its bracketed body,
    /// itself a list.
    List(&'a [u8]),
    /// Anything else (`2.55.3141e+04`, `1.2x`, an empty position): the
    /// parser warned about it with its line and column; the matcher does
    /// not compare it (never a difference, never an origin).
    Unreadable,
}

/// Reads one trimmed value token ([`Token`]).
pub fn read_token(tok: &[u8]) -> Token<'_> {
    if let Some(v) = token_number(tok) {
        return Token::Number(v);
    }
    match token_list(tok) {
        Some(l) => Token::List(l),
        None => Token::Unreadable,
    }
}

/// Whether `tok` is no number and no tuple ([`Token::Unreadable`]).
pub fn is_unreadable(tok: &[u8]) -> bool {
    read_token(tok) == Token::Unreadable
}

/// A number token after accepting a second writer's spellings: `name=value`
/// leaves and `"NaN"` / `"Infinity"` quoted values (cases/05).
pub fn token_number(tok: &[u8]) -> Option<f64> {
    if let Some(v) = py_float(tok) {
        return Some(v);
    }
    let mut t = trim(tok);
    if let Some(eq) = memchr::memchr(b'=', t) {
        let name = &t[..eq];
        if !name.is_empty() && !name.iter().any(|b| b.is_ascii_whitespace()) {
            t = trim(&t[eq + 1..]);
        }
    }
    if t.len() >= 2 && t[0] == b'"' && t[t.len() - 1] == b'"' {
        t = &t[1..t.len() - 1];
    }
    py_float(t)
}

/// The bracketed body of a tuple-valued hash token (`name=[1.0, 2]`), if any.
pub fn token_list(tok: &[u8]) -> Option<&[u8]> {
    let mut t = trim(tok);
    if let Some(eq) = memchr::memchr(b'=', t) {
        if eq < t.len() && t[eq + 1..].trim_ascii_start().first() == Some(&b'[') {
            t = trim(&t[eq + 1..]);
        }
    }
    if t.len() >= 2 && t[0] == b'[' && t[t.len() - 1] == b']' {
        Some(&t[1..t.len() - 1])
    } else {
        None
    }
}

/// Splits a hash list at top-level commas (a `[...]` tuple stays one token),
/// each token trimmed.
pub fn split_tokens(list: &[u8]) -> impl Iterator<Item = &[u8]> {
    let mut depth = 0i32;
    let mut start = 0usize;
    let mut i = 0usize;
    let mut done = false;
    std::iter::from_fn(move || {
        if done {
            return None;
        }
        while i < list.len() {
            match list[i] {
                b'[' => depth += 1,
                b']' => depth -= 1,
                b',' if depth <= 0 => {
                    let tok = trim(&list[start..i]);
                    i += 1;
                    start = i;
                    return Some(tok);
                }
                _ => {}
            }
            i += 1;
        }
        done = true;
        Some(trim(&list[start..]))
    })
}

/// Whether `t` is `%.6e` text as the reference tracer prints it
/// (`-1.234568e+02`): the shape nearly every value has, checked without a
/// branch per byte, so the parse can skip the full grammar for it.
#[inline(always)]
fn is_e6(t: &[u8]) -> bool {
    let t = match t.first() {
        Some(b'-') => &t[1..],
        _ => t,
    };
    let Ok(t) = <&[u8; 12]>::try_from(t) else {
        return false;
    };
    // `d.dddddd` as one word: byte 1 must be `.`; with a `0` put in its
    // place every byte must be an ASCII digit (high nibble 3, and adding 6
    // to the low nibble does not carry into the high one).
    const THREES: u64 = 0x3030_3030_3030_3030;
    const HIGH: u64 = 0xf0f0_f0f0_f0f0_f0f0;
    let w = u64::from_le_bytes([t[0], t[1], t[2], t[3], t[4], t[5], t[6], t[7]]);
    let digits = (w & !0xff00) | 0x3000;
    let mantissa = (w >> 8) as u8 == b'.'
        && digits & HIGH == THREES
        && digits.wrapping_add(0x0606_0606_0606_0606) & HIGH == THREES;
    let digit = |b: u8| b.wrapping_sub(b'0') < 10;
    mantissa & (t[8] == b'e') & ((t[9] == b'+') | (t[9] == b'-')) & digit(t[10]) & digit(t[11])
}

/// The first unreadable value of a number field's text ([`Token`]; a
/// tuple's values are read too, up to 8 levels deep): its byte offset in
/// `list` and its trimmed text; `None` when every value reads (or the text
/// is empty, which the reference treats as absent).
#[inline(always)]
pub fn first_unreadable(list: &[u8]) -> Option<(usize, &[u8])> {
    // The parse calls this for every number field: the common case (every
    // value `%.6e`, no tuple) is decided inline by one pass over the bytes,
    // and a lone value (a stat, most Output hashes) without a call.
    if (list.len() <= 13 && is_e6(list)) || all_e6(list) {
        None
    } else {
        first_unreadable_search(list)
    }
}

/// [`first_unreadable`] for a text that is not all `%.6e`: rare, kept out
/// of line.
#[cold]
#[inline(never)]
fn first_unreadable_search(list: &[u8]) -> Option<(usize, &[u8])> {
    let base = list.as_ptr() as usize;
    first_bad(list, 0).map(|t| (t.as_ptr() as usize - base, t))
}

/// Whether every comma-separated value of `list` is `%.6e` text ([`is_e6`]),
/// Python whitespace around the values allowed. One pass over the bytes,
/// no search call per value: the parse runs it on every number field.
#[inline(never)]
fn all_e6(list: &[u8]) -> bool {
    use super::line::is_py_space;
    // One value, as the parse hands it over (trimmed): no loop.
    if list.len() <= 13 {
        return is_e6(list);
    }
    if e6_list_as_written(list) {
        return true;
    }
    let n = list.len();
    let mut i = 0;
    loop {
        while i < n && is_py_space(list[i]) {
            i += 1;
        }
        let start = i;
        if i < n && list[i] == b'-' {
            i += 1;
        }
        if n - i < 12 || !is_e6(&list[start..i + 12]) {
            return false;
        }
        i += 12;
        while i < n && is_py_space(list[i]) {
            i += 1;
        }
        if i == n {
            return true;
        }
        if list[i] != b',' {
            return false;
        }
        i += 1;
    }
}

/// Whether `list` is `%.6e` values joined by `, ` exactly, as a writer
/// prints a list: a fixed stride per value, no whitespace loops. Says yes
/// only where [`all_e6`]'s general loop does (a subset of its texts).
#[inline(always)]
fn e6_list_as_written(list: &[u8]) -> bool {
    let mut rest = list;
    loop {
        let n = 12 + usize::from(rest.first() == Some(&b'-'));
        match rest.get(..n) {
            Some(v) if is_e6(v) => rest = &rest[n..],
            _ => return false,
        }
        match rest {
            [] => return true,
            [b',', b' ', tail @ ..] => rest = tail,
            _ => return false,
        }
    }
}

/// [`first_unreadable`]'s search; every slice it returns lies in `list`.
fn first_bad(list: &[u8], depth: u32) -> Option<&[u8]> {
    if trim(list).is_empty() {
        return None;
    }
    for tok in split_tokens(list) {
        if is_e6(tok) {
            continue;
        }
        match read_token(tok) {
            Token::Number(_) => {}
            Token::List(_) if depth >= 8 => return Some(tok),
            Token::List(inner) => {
                if let Some(bad) = first_bad(inner, depth + 1) {
                    return Some(bad);
                }
            }
            Token::Unreadable => return Some(tok),
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn is_e6_is_the_printf_shape_exactly() {
        // A byte-by-byte statement of `%.6e`, against the word-wise check,
        // for every byte value at every position of a valid value.
        fn slow(t: &[u8]) -> bool {
            let t = t.strip_prefix(b"-").unwrap_or(t);
            let d = |b: u8| b.is_ascii_digit();
            t.len() == 12
                && d(t[0])
                && t[1] == b'.'
                && t[2..8].iter().all(|b| d(*b))
                && t[8] == b'e'
                && (t[9] == b'+' || t[9] == b'-')
                && d(t[10])
                && d(t[11])
        }
        for base in [&b"1.234568e+02"[..], b"-9.000000e-99"] {
            assert!(is_e6(base));
            for pos in 0..base.len() {
                for byte in 0..=255u8 {
                    let mut t = base.to_vec();
                    t[pos] = byte;
                    assert_eq!(is_e6(&t), slow(&t), "{:?}", String::from_utf8_lossy(&t));
                }
            }
        }
        for t in [&b""[..], b"-", b"1.234568e+0", b"1.234568e+023"] {
            assert!(!is_e6(t));
        }
    }

    #[test]
    fn the_e6_fast_path_agrees_with_the_grammar() {
        // `all_e6` may only say yes where the full search finds nothing.
        for t in [
            &b"1.234568e+02"[..],
            b"-1.234568e+02",
            b" 1.234568e+02 ,\t-2.000000e-05 ",
            b"1.234568e+02,",
            b",1.234568e+02",
            b"1.234568e+02,,2.000000e+00",
            b"1.234568e+2",
            b"1.2345678e+02",
            b"--1.234568e+02",
            b"1.234568e+02 2.000000e+00",
            b"1.234568e+02x",
            b"+1.234568e+02",
            b"",
            b"   ",
            b"inf, 1.000000e+00",
            b"[1.000000e+00, 2.000000e+00]",
            b"2.55.3141e+04",
            b"1.234568e+02, -2.000000e-05, 3.000000e+00",
            b"1.234568e+02, -2.000000e-05, ",
            b"1.234568e+02,  2.000000e+00",
            b"1.234568e+02 , 2.000000e+00",
        ] {
            let fast = all_e6(t);
            if e6_list_as_written(t) {
                assert!(fast, "{:?}", String::from_utf8_lossy(t));
            }
            let full = first_bad(t, 0);
            if fast {
                assert_eq!(full, None, "{:?}", String::from_utf8_lossy(t));
            }
            let expect_fast =
                !trim(t).is_empty() && t.split(|b| *b == b',').all(|v| is_e6(trim(v)));
            assert_eq!(fast, expect_fast, "{:?}", String::from_utf8_lossy(t));
        }
        assert_eq!(
            first_unreadable(b"1.000000e+00, 1.2x"),
            Some((14, &b"1.2x"[..]))
        );
        assert_eq!(first_unreadable(b" -1.000000e+00 , 2.000000e+00"), None);
    }

    #[test]
    fn digests_are_sixteen_hex_digits() {
        assert_eq!(parse_digest(b"00000000000000ff"), Some(255));
        assert_eq!(parse_digest(b" ffffffffffffffff "), Some(u64::MAX));
        assert_eq!(
            parse_digest(b"DEADBEEFdeadbeef"),
            Some(0xdead_beef_dead_beef)
        );
        for bad in [
            &b""[..],
            b"ff",
            b"00000000000000fff",
            b"000000000000000g",
            b"0x00000000000000",
            b"-000000000000001",
        ] {
            assert_eq!(
                parse_digest(bad),
                None,
                "{:?}",
                String::from_utf8_lossy(bad)
            );
        }
    }

    #[test]
    fn lists_keep_their_positions() {
        let v: Vec<_> = digests(b"0000000000000001, zz, 0000000000000003").collect();
        assert_eq!(v, vec![Some(1), None, Some(3)]);
        assert_eq!(digests(b"").count(), 0);
        assert_eq!(
            first_bad_digest(b"0000000000000001,  zz, 0000000000000003"),
            Some((19, &b"zz"[..]))
        );
        assert_eq!(
            first_bad_digest(b"0000000000000001, "),
            Some((17, &b""[..]))
        );
        assert_eq!(first_bad_digest(b"0000000000000001"), None);
    }
}
