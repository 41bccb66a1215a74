//! Keys (`[<module_fqn>/op_<seq>_<op_name>]`): their parts (root class,
//! module FQN and op name; the layer index is [`super::layer`]'s) and a table's key index, every
//! row's 64-bit key hash, sorted.
//!
//! The exact-key pass and the duplicate-key check both need rows grouped by
//! key; one bucket sort of the hashes the parser computed serves both
//! ([`crate::parser::OpTable::key_index`]).
//! Keys are hashed without their root-class segment ([`strip_root_class`]),
//! the exact pass's key (`shared/spec/matching.md`); rows with equal raw keys
//! therefore share a hash too. A hash is only a grouping: every user compares
//! key bytes within a group, so a 64-bit collision never joins two keys.

/// Removes one leading model-class segment: it starts with an uppercase ASCII
/// letter, consists of `[A-Za-z0-9_]`, contains at least one more uppercase
/// letter, and is followed by `.`.
///
/// `FSDPLlama3Model.layers.0.wq/op_0_mm` → `layers.0.wq/op_0_mm`;
/// `Linear.x` is unchanged (one uppercase letter only).
pub fn strip_root_class(key: &[u8]) -> &[u8] {
    if !key.first().is_some_and(|b| b.is_ascii_uppercase()) {
        return key;
    }
    let mut upper = 0;
    for (i, &b) in key.iter().enumerate() {
        if b == b'.' {
            return if upper >= 2 && i > 0 {
                &key[i + 1..]
            } else {
                key
            };
        }
        if b.is_ascii_uppercase() {
            upper += 1;
        } else if !(b.is_ascii_alphanumeric() || b == b'_') {
            return key;
        }
    }
    key
}

/// Whether `/op_<digits>_` starts at `key[i]`; returns its length.
pub(crate) fn op_counter_at(key: &[u8], i: usize) -> Option<usize> {
    let rest = &key[i..];
    if !rest.starts_with(b"/op_") {
        return None;
    }
    let digits = rest[4..].iter().take_while(|b| b.is_ascii_digit()).count();
    if digits == 0 || rest.get(4 + digits) != Some(&b'_') {
        return None;
    }
    Some(5 + digits)
}

/// Splits a raw key into (module FQN, op name) for display:
/// `enc/blk.0/attn/op_0_index_put_` → (`enc/blk.0/attn`, `index_put_`).
/// Keys without an `/op_<n>_` segment give the whole key as the module.
pub fn module_and_op(key: &[u8]) -> (&[u8], &[u8]) {
    let mut i = key.len();
    while let Some(p) = memchr::memrchr(b'/', &key[..i]) {
        if let Some(n) = op_counter_at(key, p) {
            return (&key[..p], &key[p + n..]);
        }
        i = p;
    }
    (key, &[])
}

/// `(hash, row)` of every row of a table, sorted by hash, then row: the
/// rows of one key are consecutive and in file order. 12 bytes of payload
/// per row (16 with padding).
pub type KeyIndex = Vec<(u64, u32)>;

/// The hasher of [`key_hash`] (fixed seeds: the same key always hashes
/// alike, in every table).
pub fn hasher() -> ahash::RandomState {
    ahash::RandomState::with_seeds(0x9e37, 0x79b9, 0x7f4a, 0x7c15)
}

/// The 64-bit hash of a key without its root class; the parser computes it
/// for every row while the key is in cache
/// ([`crate::parser::OpTable::key_hash`]).
#[inline]
pub fn key_hash(hasher: &ahash::RandomState, key: &[u8]) -> u64 {
    exact_key_hash(hasher, strip_root_class(key))
}

/// [`key_hash`] of a key already without its root class.
#[inline]
pub fn exact_key_hash(hasher: &ahash::RandomState, exact: &[u8]) -> u64 {
    hasher.hash_one(exact)
}

/// `(hash, row)` for `hashes`, sorted by hash, then row. The hashes are
/// uniform, so a bucket pass on their top bits (about four rows a bucket,
/// rows kept in order) and a sort of each small bucket beat a comparison
/// sort of the whole.
pub(crate) fn sorted_index(hashes: &[u64]) -> KeyIndex {
    let n = hashes.len();
    if n < 1 << 12 {
        let mut index: KeyIndex = hashes
            .iter()
            .enumerate()
            .map(|(r, h)| (*h, r as u32))
            .collect();
        index.sort_unstable();
        return index;
    }
    let bits = (usize::BITS - (n / 4).leading_zeros()).clamp(10, 24);
    let shift = 64 - bits;
    let mut start = vec![0u32; (1 << bits) + 1];
    for h in hashes {
        start[(h >> shift) as usize + 1] += 1;
    }
    for b in 1..start.len() {
        start[b] += start[b - 1];
    }
    let mut next = start.clone();
    let mut index: KeyIndex = vec![(0, 0); n];
    for (r, h) in hashes.iter().enumerate() {
        let b = (h >> shift) as usize;
        index[next[b] as usize] = (*h, r as u32);
        next[b] += 1;
    }
    for w in start.windows(2) {
        let bucket = &mut index[w[0] as usize..w[1] as usize];
        if bucket.len() > 1 {
            bucket.sort_unstable();
        }
    }
    index
}

/// The runs of equal hashes in a key index, as `start..end` ranges.
pub fn groups(index: &[(u64, u32)]) -> impl Iterator<Item = std::ops::Range<usize>> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        if i >= index.len() {
            return None;
        }
        let h = index[i].0;
        let start = i;
        while i < index.len() && index[i].0 == h {
            i += 1;
        }
        Some(start..i)
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parser::parse_bytes;

    #[test]
    fn bucket_sort_equals_a_plain_sort() {
        // Pseudo-random hashes with repeats (so equal hashes keep row
        // order), above and below the bucket threshold, and skewed ones.
        for n in [0usize, 1, 100, 5_000, 70_000] {
            let mut x = 0x9e37_79b9_7f4a_7c15u64;
            let hashes: Vec<u64> = (0..n)
                .map(|i| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    if i % 7 == 3 {
                        42
                    } else if i % 11 == 0 {
                        x >> 40
                    } else {
                        x
                    }
                })
                .collect();
            let mut want: KeyIndex = hashes
                .iter()
                .enumerate()
                .map(|(r, h)| (*h, r as u32))
                .collect();
            want.sort_unstable();
            assert_eq!(sorted_index(&hashes), want, "n = {n}");
        }
    }

    #[test]
    fn rows_of_one_key_are_grouped_in_file_order() {
        let log = "[a/op_0_mm]\n\n[BigModel.b/op_1_add]\n\n[a/op_0_mm]\n\n[b/op_1_add]\n\n[c/op_2_mul]\n\n";
        let t = parse_bytes(log.as_bytes().to_vec(), "t.log");
        let index = t.key_index();
        assert_eq!(index.len(), 5);
        let mut sets: Vec<Vec<u32>> = groups(&index)
            .map(|g| index[g].iter().map(|x| x.1).collect())
            .collect();
        sets.sort();
        // The root class `BigModel.` is stripped: rows 1 and 3 share a key.
        assert_eq!(sets, vec![vec![0, 2], vec![1, 3], vec![4]]);
    }
}
