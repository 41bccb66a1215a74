//! Layers: which numeric segment of a module FQN is the layer index.
//!
//! A model's layers are the items of a repeated block list: a module path
//! segment whose numeric children hold the same sub-modules
//! (`blocks.0.attn.qkv`, `blocks.1.attn.qkv`, …). The list is found from the
//! keys of each log, never from a fixed word, so `layers.N` (TorchTitan),
//! `blocks.N`, `h.N` (GPT-2), `encoder.layer.N` (BERT) and
//! `model.layers.N` (Hugging Face) are all layers. This module owns that
//! detection ([`LayerLists::detect`]), run once per log on its distinct
//! module FQNs (never per row), and the lookup of a module FQN's layer
//! ([`LayerLists::layer_of`]). `--layer-offset` shifts this layer and no
//! other numeric segment ([`crate::matcher::keys::with_layer_offset`]).
//!
//! The rules:
//!
//! - A *segment* is a run of bytes between `.` or `/` separators; a
//!   *numeric segment* is all ASCII digits (`blocks.3`). Its *list* is the
//!   path before it, with every earlier numeric segment written `#`
//!   (`blocks.#.mlp.experts.` for `blocks.3.mlp.experts.5`), so the experts
//!   of every block form one list.
//! - A list is *repeated* when two different items of it hold the same
//!   sub-path below them (numeric segments again written `#`; the item
//!   itself, an empty sub-path, counts as a sub-path).
//! - A key's layer is the index after the leftmost (outermost) repeated list
//!   on its module FQN: `model.layers.2.mlp.experts.7` is layer 2.
//! - A log without any repeated list takes each key's outermost numeric
//!   segment instead, so a one-layer model or a pipeline stage holding a
//!   single layer keeps its layer (and `--layer-offset` still applies). In a
//!   log that has a repeated list, a numeric segment of a list seen with one
//!   item only (`heads.0`) is no layer.
//! - A model without numeric segments has no layer, as before.
//!
//! One case these rules get wrong: a one-layer model whose layer holds a
//! repeated list (`layers.0.moe.experts.M` with a single `layers.0`) takes
//! the experts as its layers, since one item is no evidence of a list.
//!
//! Keys are looked at after their root class is stripped
//! ([`super::key::strip_root_class`]).

use ahash::{AHashMap, AHashSet};

/// The lists whose items are layers in one log ([`LayerLists::detect`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LayerLists {
    /// The lists (each a path with its trailing separator, earlier numeric
    /// segments written `#`), sorted.
    lists: Vec<Box<[u8]>>,
}

/// Whether `b` separates module path segments.
#[inline]
fn is_separator(b: u8) -> bool {
    b == b'.' || b == b'/'
}

/// The numeric segments of `module` as `(start, end)` byte ranges, left to
/// right.
fn numeric_segments(module: &[u8]) -> impl Iterator<Item = (usize, usize)> + '_ {
    let mut i = 0;
    std::iter::from_fn(move || {
        while i < module.len() {
            let start = i;
            let end = module[i..]
                .iter()
                .position(|b| is_separator(*b))
                .map_or(module.len(), |p| i + p);
            i = end + 1;
            if end > start && module[start..end].iter().all(u8::is_ascii_digit) {
                return Some((start, end));
            }
        }
        None
    })
}

/// `part` (a range of `module`) with each numeric segment of `module` in it
/// written `#`.
fn normalised(module: &[u8], from: usize, to: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(to - from);
    let mut at = from;
    for (s, e) in numeric_segments(module) {
        if s < from || e > to {
            continue;
        }
        out.extend_from_slice(&module[at..s]);
        out.push(b'#');
        at = e;
    }
    out.extend_from_slice(&module[at..to]);
    out
}

/// The value of a numeric segment, if it fits a `u64`.
fn index_of(digits: &[u8]) -> Option<u64> {
    digits.iter().try_fold(0u64, |n, d| {
        n.checked_mul(10)?.checked_add(u64::from(d - b'0'))
    })
}

impl LayerLists {
    /// Finds the layer lists of a log from its distinct module FQNs (root
    /// class stripped; each once, in any order).
    pub fn detect<'a>(modules: impl IntoIterator<Item = &'a [u8]>) -> LayerLists {
        // (list, sub-path) → the first item index seen under it, and
        // whether a second, different one was seen.
        let mut items: AHashMap<(Vec<u8>, Vec<u8>), (u64, bool)> = AHashMap::new();
        let mut all: AHashSet<Vec<u8>> = AHashSet::new();
        for m in modules {
            for (s, e) in numeric_segments(m) {
                let Some(n) = index_of(&m[s..e]) else {
                    continue;
                };
                let list = normalised(m, 0, s);
                let below = normalised(m, e, m.len());
                all.insert(list.clone());
                items
                    .entry((list, below))
                    .and_modify(|(first, two)| *two |= *first != n)
                    .or_insert((n, false));
            }
        }
        let repeated: AHashSet<Vec<u8>> = items
            .into_iter()
            .filter(|(_, (_, two))| *two)
            .map(|((list, _), _)| list)
            .collect();
        let chosen = if repeated.is_empty() { all } else { repeated };
        let mut lists: Vec<Box<[u8]>> = chosen.into_iter().map(Vec::into_boxed_slice).collect();
        lists.sort();
        LayerLists { lists }
    }

    /// Whether the log has no layer list (no key has a layer).
    pub fn is_empty(&self) -> bool {
        self.lists.is_empty()
    }

    /// The layer of a module FQN (root class stripped) and where its digits
    /// are in it: the item index after the leftmost layer list.
    pub fn layer_of(&self, module: &[u8]) -> Option<(usize, u64)> {
        if self.lists.is_empty() {
            return None;
        }
        for (s, e) in numeric_segments(module) {
            let list = normalised(module, 0, s);
            if self.lists.binary_search_by(|l| (**l).cmp(&list)).is_ok() {
                return index_of(&module[s..e]).map(|n| (s, n));
            }
        }
        None
    }

    /// The layer of a raw key and where its digits are in the key: its
    /// module FQN's ([`LayerLists::layer_of`]) after the root class.
    pub fn layer_of_key(&self, key: &[u8]) -> Option<(usize, u64)> {
        let exact = super::key::strip_root_class(key);
        let module = super::key::module_and_op(exact).0;
        self.layer_of(module)
            .map(|(p, n)| (p + key.len() - exact.len(), n))
    }

    /// The lists, for messages and tests (`blocks.`, `model.layers.`).
    pub fn lists(&self) -> impl Iterator<Item = String> + '_ {
        self.lists
            .iter()
            .map(|l| String::from_utf8_lossy(l).into_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The layer lists found in `modules`, and each module's layer.
    fn detect(modules: &[&str]) -> (Vec<String>, Vec<Option<u64>>) {
        let lists = LayerLists::detect(modules.iter().map(|m| m.as_bytes()));
        let layers = modules
            .iter()
            .map(|m| lists.layer_of(m.as_bytes()).map(|(_, n)| n))
            .collect();
        (lists.lists().collect(), layers)
    }

    #[test]
    fn torchtitan_layers() {
        let (lists, layers) = detect(&[
            "tok_embeddings",
            "layers.0.attention.wq",
            "layers.0.feed_forward.w1",
            "layers.1.attention.wq",
            "layers.1.feed_forward.w1",
            "layers.11",
            "norm",
        ]);
        assert_eq!(lists, ["layers."]);
        assert_eq!(
            layers,
            [None, Some(0), Some(0), Some(1), Some(1), Some(11), None]
        );
    }

    #[test]
    fn blocks_h_and_encoder_layer() {
        for (list, modules) in [
            (
                "blocks.",
                ["blocks.0.attn.qkv", "blocks.1.attn.qkv", "head"],
            ),
            (
                "transformer.h.",
                [
                    "transformer.h.0.attn.c_attn",
                    "transformer.h.1.attn.c_attn",
                    "transformer.wte",
                ],
            ),
            (
                "bert.encoder.layer.",
                [
                    "bert.encoder.layer.0.attention.self.query",
                    "bert.encoder.layer.1.attention.self.query",
                    "bert.pooler",
                ],
            ),
            (
                "model.layers.",
                [
                    "model.layers.0.self_attn.q_proj",
                    "model.layers.1.self_attn.q_proj",
                    "lm_head",
                ],
            ),
        ] {
            let (lists, layers) = detect(&modules);
            assert_eq!(lists, [list], "{modules:?}");
            assert_eq!(layers, [Some(0), Some(1), None], "{modules:?}");
        }
    }

    #[test]
    fn slash_separated_paths() {
        let (lists, layers) = detect(&["enc/blk.0/attn", "enc/blk.1/attn"]);
        assert_eq!(lists, ["enc/blk."]);
        assert_eq!(layers, [Some(0), Some(1)]);
    }

    #[test]
    fn nested_experts_take_the_outer_list() {
        let (lists, layers) = detect(&[
            "model.layers.0.mlp.experts.0.w1",
            "model.layers.0.mlp.experts.1.w1",
            "model.layers.1.mlp.experts.0.w1",
            "model.layers.1.mlp.experts.1.w1",
            "model.layers.1.self_attn",
        ]);
        // Both lists repeat; the outer one is the layer.
        assert_eq!(lists, ["model.layers.", "model.layers.#.mlp.experts."]);
        assert_eq!(layers, [Some(0), Some(0), Some(1), Some(1), Some(1)]);
    }

    #[test]
    fn items_differing_in_their_sub_modules_only_are_no_list() {
        // `seq.0` and `seq.1` hold different modules: not a repeated list;
        // `blocks` is one, so `seq` is no layer.
        let (lists, layers) = detect(&["seq.0.conv", "seq.1.norm", "blocks.0.mlp", "blocks.1.mlp"]);
        assert_eq!(lists, ["blocks."]);
        assert_eq!(layers, [None, None, Some(0), Some(1)]);
    }

    #[test]
    fn a_single_item_is_a_layer_only_without_a_repeated_list() {
        // `heads.0` beside a repeated list: no layer.
        let (_, layers) = detect(&["heads.0.proj", "blocks.0.mlp", "blocks.1.mlp"]);
        assert_eq!(layers, [None, Some(0), Some(1)]);
        // The only numbered module of its log (a one-layer model, a
        // pipeline stage holding one layer): its outermost numeric segment.
        let (lists, layers) = detect(&["heads.0", "norm"]);
        assert_eq!(lists, ["heads."]);
        assert_eq!(layers, [Some(0), None]);
        let (_, layers) = detect(&["layers.4.attention.wo"]);
        assert_eq!(layers, [Some(4)]);
        let (_, layers) = detect(&["stage.0.layers.3.attn"]);
        assert_eq!(layers, [Some(0)], "outermost numeric segment");
    }

    #[test]
    fn no_numeric_segment_no_layer() {
        let lists = LayerLists::detect([b"norm".as_slice(), b"output", b"<none>", b""]);
        assert!(lists.is_empty());
        assert_eq!(lists.layer_of(b"norm"), None);
        // Digits inside a segment are no index.
        let (lists, _) = detect(&["layer1", "fc2.x", "a.b3"]);
        assert!(lists.is_empty(), "{lists:?}");
    }

    #[test]
    fn an_index_past_u64_is_no_layer() {
        let (_, layers) = detect(&["layers.99999999999999999999.x", "layers.1.x", "layers.2.x"]);
        assert_eq!(layers, [None, Some(1), Some(2)]);
    }

    #[test]
    fn keys_with_root_class_and_op() {
        let lists = LayerLists::detect([b"blocks.0.attn".as_slice(), b"blocks.1.attn"]);
        assert_eq!(
            lists.layer_of_key(b"FSDPModel.blocks.1.attn/op_0_mm"),
            Some((17, 1))
        );
        assert_eq!(lists.layer_of_key(b"blocks.12/op_3_add"), Some((7, 12)));
        assert_eq!(lists.layer_of_key(b"head/op_4_mm"), None);
        assert_eq!(lists.layer_of_key(b"blocks.x/op_4_mm"), None);
    }
}
