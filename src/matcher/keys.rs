//! Key normalisation, as in the reference comparator (`shared/spec/matching.md`):
//! the root-class strip, the fuzzy key and the op type.

use crate::parser::key::op_counter_at;
pub use crate::parser::key::{module_and_op, strip_root_class};
use crate::parser::layer::LayerLists;

/// The fuzzy key: every `/op_<digits>_` replaced with `/` (left to right, not
/// overlapping, like Python's `re.sub`), then [`strip_root_class`].
///
/// `layers.0.w2/op_3_mm` → `layers.0.w2/mm`.
pub fn fuzzy_key(key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len());
    let mut i = 0;
    while i < key.len() {
        if key[i] == b'/' {
            if let Some(n) = op_counter_at(key, i) {
                out.push(b'/');
                i += n;
                continue;
            }
        }
        out.push(key[i]);
        i += 1;
    }
    let stripped = strip_root_class(&out).len();
    out.drain(..out.len() - stripped);
    out
}

/// A 64-bit hash (FNV-1a) of [`fuzzy_key`]`(key)`, computed without building
/// it: equal fuzzy keys hash equal, so a set of hashes is a cheap first
/// filter before fuzzy keys are compared. (The root class is stripped first:
/// it holds no `/`, so no op counter starts in it, and the result is the
/// same.)
pub fn fuzzy_key_hash(key: &[u8]) -> u64 {
    let key = strip_root_class(key);
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    let mut eat = |b: u8| {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    };
    let mut i = 0;
    while i < key.len() {
        if key[i] == b'/' {
            if let Some(n) = op_counter_at(key, i) {
                eat(b'/');
                i += n;
                continue;
            }
        }
        eat(key[i]);
        i += 1;
    }
    h
}

/// The op type: the part of the fuzzy key after its last `/`.
pub fn op_type(fuzzy: &[u8]) -> &[u8] {
    match memchr::memrchr(b'/', fuzzy) {
        Some(i) => &fuzzy[i + 1..],
        None => fuzzy,
    }
}

/// Adds `offset` to the layer index of a key: the index its log's layer
/// lists give it ([`LayerLists::layer_of_key`]: `layers.<N>`, `blocks.<N>`,
/// `model.layers.<N>`, found per log; pipeline stage `k` of a model numbers
/// its layers from 0; global index = N + offset). `layers` are the lists of
/// the key's own log ([`crate::parser::OpTable::layer_lists`]), so a
/// numbered list that is no layer list (`heads.0` beside `blocks.N`) is
/// never shifted. Keys without a layer, or whose index would go negative,
/// are returned unchanged.
pub fn with_layer_offset<'k>(
    key: &'k [u8],
    offset: i64,
    layers: &LayerLists,
) -> std::borrow::Cow<'k, [u8]> {
    use std::borrow::Cow;
    if offset == 0 {
        return Cow::Borrowed(key);
    }
    let Some((p, idx)) = layers.layer_of_key(key) else {
        return Cow::Borrowed(key);
    };
    let Some(shifted) = i64::try_from(idx)
        .ok()
        .and_then(|i| i.checked_add(offset))
        .filter(|i| *i >= 0)
    else {
        return Cow::Borrowed(key);
    };
    let n = key[p..].iter().take_while(|b| b.is_ascii_digit()).count();
    let mut out = key[..p].to_vec();
    out.extend_from_slice(shifted.to_string().as_bytes());
    out.extend_from_slice(&key[p + n..]);
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    /// `key` shifted by `offset` under the layer lists detected from
    /// `modules` (the distinct module FQNs of its log).
    fn shift(modules: &[&str], key: &str, offset: i64) -> String {
        let layers = LayerLists::detect(modules.iter().map(|m| m.as_bytes()));
        String::from_utf8(with_layer_offset(key.as_bytes(), offset, &layers).into_owned()).unwrap()
    }

    #[test]
    fn layer_offsets() {
        let tt = ["layers.0.attention.wo", "layers.1.attention.wo", "norm"];
        assert_eq!(
            shift(&tt, "layers.0.attention.wo/op_0_mm", 4),
            "layers.4.attention.wo/op_0_mm"
        );
        assert_eq!(shift(&tt, "norm/op_0_mul", 4), "norm/op_0_mul");
        assert_eq!(shift(&["layers.1.x"], "layers.1.x", -3), "layers.1.x");
        // Any block list: the outer list's index.
        let moe = [
            "blocks.0.mlp.experts.3",
            "blocks.1.mlp.experts.3",
            "blocks.1.mlp.experts.4",
        ];
        assert_eq!(
            shift(&moe, "blocks.1.mlp.experts.3/op_0_mm", 4),
            "blocks.5.mlp.experts.3/op_0_mm"
        );
        assert_eq!(
            shift(&["Model.h.2", "Model.h.3"], "Model.h.2/op_1_add", -2),
            "Model.h.0/op_1_add"
        );
        assert_eq!(
            shift(&tt, "norm.w/op_12_mm", 4),
            "norm.w/op_12_mm",
            "the op counter is no layer"
        );
        // A pipeline stage holding one layer: no repeated list, its
        // outermost numeric segment is the layer.
        assert_eq!(
            shift(
                &["layers.4.attention.wo", "norm"],
                "layers.4.attention.wo/op_0_mm",
                4
            ),
            "layers.8.attention.wo/op_0_mm"
        );
        // The root class is kept.
        assert_eq!(
            shift(&["blocks.0", "blocks.1"], "FSDPModel.blocks.1/op_0_mm", 1),
            "FSDPModel.blocks.2/op_0_mm"
        );
    }

    #[test]
    fn a_numbered_list_that_is_no_layer_list_is_never_shifted() {
        // `heads.0` beside the repeated `blocks.N`: no layer, left alone
        // (the outermost numeric segment was shifted: `heads.4`).
        let modules = ["heads.0.proj", "blocks.0.mlp", "blocks.1.mlp"];
        assert_eq!(
            shift(&modules, "heads.0.proj/op_0_mm", 4),
            "heads.0.proj/op_0_mm"
        );
        assert_eq!(
            shift(&modules, "blocks.1.mlp/op_0_mm", 4),
            "blocks.5.mlp/op_0_mm"
        );
        // A numbered segment before the layer list: only the layer moves
        // (was `enc.4.blocks.1`).
        let modules = ["enc.0.blocks.0.mlp", "enc.0.blocks.1.mlp"];
        assert_eq!(
            shift(&modules, "enc.0.blocks.1.mlp/op_2_mm", 4),
            "enc.0.blocks.5.mlp/op_2_mm"
        );
    }

    use super::*;

    fn s(b: &[u8]) -> &str {
        std::str::from_utf8(b).unwrap()
    }

    #[test]
    fn root_class_strip() {
        assert_eq!(
            s(strip_root_class(b"FSDPLlama3Model.layers.0.wq/op_0_mm")),
            "layers.0.wq/op_0_mm"
        );
        assert_eq!(
            s(strip_root_class(b"layers.0.wq/op_0_mm")),
            "layers.0.wq/op_0_mm"
        );
        assert_eq!(s(strip_root_class(b"Linear.x")), "Linear.x");
        assert_eq!(s(strip_root_class(b"MyModel")), "MyModel");
        assert_eq!(s(strip_root_class(b"My-Model.x")), "My-Model.x");
        assert_eq!(s(strip_root_class(b"AB/op_0_mm.x")), "AB/op_0_mm.x");
        assert_eq!(s(strip_root_class(b"AB.CD.x")), "CD.x");
    }

    #[test]
    fn fuzzy_keys_and_op_types() {
        assert_eq!(s(&fuzzy_key(b"layers.0.w2/op_3_mm")), "layers.0.w2/mm");
        assert_eq!(
            s(&fuzzy_key(
                b"FSDPLlama3Model.layers.0/op_12__allgather_base_"
            )),
            "layers.0/_allgather_base_"
        );
        assert_eq!(s(&fuzzy_key(b"a/op_1_/op_2_x")), "a//x");
        assert_eq!(s(&fuzzy_key(b"a/op_x_mm")), "a/op_x_mm");
        assert_eq!(s(op_type(&fuzzy_key(b"<none>/op_6_lerp_"))), "lerp_");
        assert_eq!(s(op_type(b"nofuzzy")), "nofuzzy");
    }

    #[test]
    fn fuzzy_key_hashes_are_the_fuzzy_keys_hashes() {
        let fnv = |k: &[u8]| {
            k.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, b| {
                (h ^ u64::from(*b)).wrapping_mul(0x0100_0000_01b3)
            })
        };
        for k in [
            b"layers.0.w2/op_3_mm".as_slice(),
            b"FSDPLlama3Model.layers.0/op_12__allgather_base_",
            b"a/op_1_/op_2_x",
            b"a/op_x_mm",
            b"AB/op_1_.x",
            b"AB.CD/op_0_mm",
            b"x/mm",
            b"",
        ] {
            assert_eq!(fuzzy_key_hash(k), fnv(&fuzzy_key(k)), "{}", s(k));
        }
        assert_eq!(
            fuzzy_key_hash(b"x/op_1_mm"),
            fuzzy_key_hash(b"MyModel.x/op_7_mm")
        );
        assert_ne!(fuzzy_key_hash(b"x/op_1_mm"), fuzzy_key_hash(b"x/op_1_add"));
    }

    #[test]
    fn module_and_op_split() {
        let (m, o) = module_and_op(b"enc/blk.0/attn/op_0_index_put_");
        assert_eq!((s(m), s(o)), ("enc/blk.0/attn", "index_put_"));
        let (m, o) = module_and_op(b"<none>/op_0__fused_adamw_");
        assert_eq!((s(m), s(o)), ("<none>", "_fused_adamw_"));
    }
}
