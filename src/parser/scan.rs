//! Byte scanning for the parse's per-line loop: the line ends of a chunk
//! found 64 bytes at a time ([`LineEnds`]: one bit mask of the `\n` bytes
//! per 64-byte block, by SSE2 compares on x86-64 and word tricks
//! elsewhere), and the first `:` among a line's first 16 bytes
//! ([`first_colon`]), where every field label ends. A log line is about
//! 30 bytes: a search call per line costs more than the line's bytes, a
//! bit mask costs a few instructions per line and well under one per byte.

/// The positions of the `\n` bytes of `data[start..end]`, in order.
pub(super) struct LineEnds<'a> {
    data: &'a [u8],
    end: usize,
    /// Start of the 64-byte block that `mask` covers.
    block: usize,
    /// Bit `i`: byte `block + i` is a `\n` not yet returned.
    mask: u64,
}

impl<'a> LineEnds<'a> {
    /// The line ends of `data[start..end]` (`start <= end <= data.len()`).
    pub(super) fn new(data: &'a [u8], start: usize, end: usize) -> LineEnds<'a> {
        LineEnds {
            data,
            end,
            block: start,
            mask: newline_mask(data, start, end),
        }
    }
}

impl Iterator for LineEnds<'_> {
    type Item = usize;

    #[inline]
    fn next(&mut self) -> Option<usize> {
        while self.mask == 0 {
            self.block += 64;
            if self.block >= self.end {
                return None;
            }
            self.mask = newline_mask(self.data, self.block, self.end);
        }
        let i = self.mask.trailing_zeros() as usize;
        self.mask &= self.mask - 1;
        Some(self.block + i)
    }
}

/// The `\n` bytes of `data[at..end.min(at + 64)]` as a bit mask (bit `i`:
/// byte `at + i`).
#[inline]
fn newline_mask(data: &[u8], at: usize, end: usize) -> u64 {
    match data.get(at..at + 64) {
        Some(b) if at + 64 <= end => block_mask(b.try_into().expect("64 bytes")),
        _ => {
            // The chunk's last, partial block: a copy padded with zeros.
            let mut b = [0u8; 64];
            let n = end.saturating_sub(at).min(64);
            b[..n].copy_from_slice(&data[at..at + n]);
            block_mask(&b)
        }
    }
}

/// The `\n` bytes of a 64-byte block as a bit mask: four SSE2 compares.
#[cfg(target_arch = "x86_64")]
#[inline]
fn block_mask(b: &[u8; 64]) -> u64 {
    use std::arch::x86_64::_mm_set1_epi8;
    use std::arch::x86_64::{__m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8};
    let mut mask = 0u64;
    for (i, part) in b.chunks_exact(16).enumerate() {
        // SAFETY: `part` is 16 readable bytes and `_mm_loadu_si128` has no
        // alignment requirement; SSE2, which these intrinsics need, is
        // part of the x86-64 baseline (every x86-64 CPU has it).
        let m = unsafe {
            let v = _mm_loadu_si128(part.as_ptr().cast::<__m128i>());
            _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(b'\n' as i8)))
        } as u16;
        mask |= u64::from(m) << (16 * i);
    }
    mask
}

/// The `\n` bytes of a 64-byte block as a bit mask, eight bytes at a time.
#[cfg(not(target_arch = "x86_64"))]
#[inline]
fn block_mask(b: &[u8; 64]) -> u64 {
    block_mask_words(b)
}

/// [`block_mask`] by word tricks (the build for other targets; tested on
/// every target against a byte loop).
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
#[inline]
fn block_mask_words(b: &[u8; 64]) -> u64 {
    let mut mask = 0u64;
    for (i, w) in b.chunks_exact(8).enumerate() {
        let w = u64::from_le_bytes(w.try_into().expect("8 bytes"));
        // The high bit of each byte that equals `\n`, then those eight
        // bits gathered into the top byte by one multiplication.
        let high = byte_eq(w, b'\n');
        mask |= ((high >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56) << (8 * i);
    }
    mask
}

/// The high bit of every byte of `w` that equals `b`, exactly (no carry
/// from a lower byte sets a bit).
#[inline]
fn byte_eq(w: u64, b: u8) -> u64 {
    const LOW7: u64 = 0x7f7f_7f7f_7f7f_7f7f;
    let x = w ^ (u64::from(b) * 0x0101_0101_0101_0101);
    !(((x & LOW7) + LOW7) | x | LOW7)
}

/// Bit `i` set when byte `i` of `b16` equals `b`: one SSE2 compare on
/// x86-64, two word compares elsewhere.
#[inline]
fn mask16(b16: &[u8; 16], b: u8) -> u32 {
    #[cfg(target_arch = "x86_64")]
    {
        use std::arch::x86_64::_mm_set1_epi8;
        use std::arch::x86_64::{__m128i, _mm_cmpeq_epi8, _mm_loadu_si128, _mm_movemask_epi8};
        // SAFETY: as in `block_mask`: 16 readable bytes, an unaligned
        // load, SSE2 in the x86-64 baseline.
        unsafe {
            let v = _mm_loadu_si128(b16.as_ptr().cast::<__m128i>());
            _mm_movemask_epi8(_mm_cmpeq_epi8(v, _mm_set1_epi8(b as i8))) as u16 as u32
        }
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        mask16_words(b16, b)
    }
}

/// [`mask16`] by word tricks (the build for other targets; tested on
/// every target).
#[cfg_attr(target_arch = "x86_64", allow(dead_code))]
#[inline]
fn mask16_words(b16: &[u8; 16], b: u8) -> u32 {
    let gather = |w: &[u8]| {
        let high = byte_eq(u64::from_le_bytes(w.try_into().expect("8 bytes")), b);
        ((high >> 7).wrapping_mul(0x0102_0408_1020_4080) >> 56) as u32
    };
    gather(&b16[..8]) | (gather(&b16[8..]) << 8)
}

/// The position of the first `:` in `t[..16]` (or in `t` when shorter):
/// one 16-byte compare for a line of 16 bytes or more.
#[inline]
pub(super) fn first_colon(t: &[u8]) -> Option<usize> {
    match t.first_chunk::<16>() {
        Some(head) => {
            let m = mask16(head, b':');
            (m != 0).then(|| m.trailing_zeros() as usize)
        }
        None => t.iter().position(|&b| b == b':'),
    }
}

/// Whether `s` holds a `:`: 16 bytes a compare, and for a value shorter
/// than 16 bytes two overlapping word compares (a field's value is short:
/// a search call costs more than its bytes).
#[inline]
pub(super) fn has_colon(s: &[u8]) -> bool {
    let n = s.len();
    let word = |at: usize| u64::from_le_bytes(s[at..at + 8].try_into().expect("8 bytes"));
    let half = |at: usize| u64::from(u32::from_le_bytes(s[at..at + 4].try_into().expect("4")));
    match n {
        16.. => {
            // 16-byte steps, the last one ending at the end (overlapping).
            let mut at = 0;
            loop {
                let c = s[at..at + 16].try_into().expect("16 bytes");
                if mask16(c, b':') != 0 {
                    return true;
                }
                if at + 16 == n {
                    return false;
                }
                at = (at + 16).min(n - 16);
            }
        }
        8.. => (byte_eq(word(0), b':') | byte_eq(word(n - 8), b':')) != 0,
        // Two 4-byte halves in one word.
        4.. => byte_eq(half(0) | (half(n - 4) << 32), b':') != 0,
        _ => s.contains(&b':'),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slow(data: &[u8], start: usize, end: usize) -> Vec<usize> {
        (start..end).filter(|&i| data[i] == b'\n').collect()
    }

    #[test]
    fn line_ends_are_every_newline_of_the_range() {
        // Newlines at every distance, around every block edge, with bytes
        // next to `\n` in value (`\t`, `\x0b`) and high bytes.
        let mut data = Vec::new();
        for n in 0..200usize {
            data.extend(std::iter::repeat_n(b"a\t\x0b\xff\x8a"[n % 5], n % 70));
            data.push(b'\n');
        }
        data.extend_from_slice(b"tail without newline");
        for (start, end) in [
            (0, data.len()),
            (3, data.len() - 5),
            (64, 128),
            (10, 10),
            (0, 63),
            (65, 65 + 64 * 3 + 7),
        ] {
            let got: Vec<usize> = LineEnds::new(&data, start, end).collect();
            assert_eq!(got, slow(&data, start, end), "{start}..{end}");
        }
    }

    #[test]
    fn word_masks_agree_with_a_byte_loop() {
        let mut b = [0u8; 64];
        for seed in 0..2000u32 {
            for (i, x) in b.iter_mut().enumerate() {
                let r = (seed.wrapping_mul(2_654_435_761) ^ (i as u32 * 40_503)) >> 7;
                *x = [b'\n', b'\x0b', b'\t', 0x8a, 0, 0xff, b'a', r as u8][(r % 8) as usize];
            }
            let want = b
                .iter()
                .enumerate()
                .fold(0u64, |m, (i, &x)| m | (u64::from(x == b'\n') << i));
            assert_eq!(block_mask_words(&b), want);
            assert_eq!(block_mask(&b), want);
        }
    }

    #[test]
    fn sixteen_byte_masks_agree_with_a_byte_loop() {
        let mut b = [0u8; 16];
        for seed in 0..5000u32 {
            for (i, x) in b.iter_mut().enumerate() {
                let r = (seed.wrapping_mul(2_654_435_761) ^ (i as u32 * 40_503)) >> 9;
                *x = [b':', b';', b'9', 0xba, 0, 0xff, b'a', r as u8][(r % 8) as usize];
            }
            let want = b
                .iter()
                .enumerate()
                .fold(0u32, |m, (i, &x)| m | (u32::from(x == b':') << i));
            assert_eq!(mask16_words(&b, b':'), want);
            assert_eq!(mask16(&b, b':'), want);
        }
    }

    #[test]
    fn has_colon_sees_every_position() {
        for n in 0..70usize {
            let mut s = vec![b';'; n];
            assert!(!has_colon(&s), "{n} bytes, none");
            for i in 0..n {
                s[i] = b':';
                assert!(has_colon(&s), "{n} bytes, at {i}");
                s[i] = b';';
            }
        }
    }

    #[test]
    fn first_colon_looks_at_sixteen_bytes() {
        assert_eq!(first_colon(b"Input producers: ;"), Some(15));
        assert_eq!(first_colon(b"Min: 1"), Some(3));
        assert_eq!(first_colon(b"Phase"), None);
        assert_eq!(first_colon(b"0123456789abcdef: x"), None);
        assert_eq!(first_colon(b"0123456789abcde: x"), Some(15));
        assert_eq!(first_colon(b":\xba\xba"), Some(0));
        // A byte one above `:` next to it (a borrow would misreport it).
        assert_eq!(first_colon(b";;;;;;;;;;;;;;;;:"), None);
        assert_eq!(first_colon(b";;;;;;;;;;;;;;;:"), Some(15));
    }
}
