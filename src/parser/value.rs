//! Reading the values of a field: the capture agent's 64-bit digests
//! (`Output digest:` / `Input digests:`, 16 hex digits each) and the
//! comma-separated lists they come in. Numbers are [`super::number`].

use super::line::trim;

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

#[cfg(test)]
mod tests {
    use super::*;

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
