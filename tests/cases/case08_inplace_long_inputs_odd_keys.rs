//! Case 08-inplace-long-inputs-odd-keys (`../shared/cases/08-inplace-long-inputs-odd-keys/README.md`).

use super::common::*;

const ADAMW: &str = "<none>/op_0__fused_adamw_";
const ODD_KEYS: [&str; 4] = [
    "model.layers[0].mlp/op_0_mm",
    "vision tower.proj/op_0_mm",
    "décodeur.couche_0/op_0_mm",
    "enc/blk.0/attn/op_0_index_put_",
];

/// Case 08-inplace-long-inputs-odd-keys: `actdiff compare run1.log run2.log
/// -o out`: the hash-only adamw block pairs exactly and differs at input 731
/// of 1200 (rel ~1e-6); no Shape or stats cells for it, not a shape
/// mismatch; the 4 odd keys round-trip byte for byte and match; the HTML
/// escapes `<none>`; exit 1. Also (library) all 1200 producer positions are
/// kept and `enc/blk.0/attn/op_0_index_put_` splits into module
/// `enc/blk.0/attn` and op `index_put_`.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case08_long_input_list_and_odd_keys() {
    let case = "08-inplace-long-inputs-odd-keys";
    let r = in_case(case, &["compare", "run1.log", "run2.log"]);
    r.expect(1);
    let adamw = r.row_is(ADAMW, "diff", Some("exact"));
    let note = notes(&adamw)
        .into_iter()
        .find(|n| n.contains("input 731 of 1200 differs"))
        .unwrap_or_else(|| panic!("no `input 731 of 1200` note: {adamw}"));
    let rel: f64 = note
        .split("(rel ")
        .nth(1)
        .and_then(|t| t.trim_end_matches(')').parse().ok())
        .unwrap_or_else(|| panic!("no relative difference in `{note}`"));
    assert!((5e-7..2e-6).contains(&rel), "{note}");
    assert!(
        !notes(&adamw).iter().any(|n| n.contains("shape")),
        "{adamw}"
    );
    assert!(r.rank(0)["shape_mismatches"].is_null());
    for k in ODD_KEYS {
        let row = r.row_is(k, "match", Some("exact"));
        assert_eq!(row["key1"], k);
        assert_eq!(row["key2"], k);
    }
    let html = r.html();
    assert!(!html.contains("<none>"), "a raw <none> tag in the HTML");
    let shown = page_rows(&html);
    assert!(
        shown.iter().any(|(_, row)| row["k1"] == ADAMW),
        "no `<none>/` key shown"
    );
    for k in ODD_KEYS {
        assert!(
            shown.iter().any(|(_, row)| row["k1"] == k),
            "the pages lack the key `{k}`"
        );
    }
    let body = r.tbody(ADAMW);
    assert!(!body.contains("torch.Size"), "adamw shows a Shape");
    for c in cells(&body) {
        assert!(
            c.text.parse::<f64>() != Ok(0.0),
            "adamw shows a zero cell where it has no value: {c:?}"
        );
    }

    let t = actdiff::parser::parse_path(&case_dir(case).join("run1.log")).unwrap();
    let prod = t
        .text(0, actdiff::parser::Field::InputProducers)
        .into_owned();
    let p: Vec<&str> = prod.split(';').collect();
    assert_eq!(p.len(), 1200);
    assert_eq!(p[0].trim(), "layers.0.attention.wq/op_1_mm");
    assert!(p[1..].iter().all(|x| x.trim().is_empty()));
    let (m, op) = actdiff::matcher::keys::module_and_op(b"enc/blk.0/attn/op_0_index_put_");
    assert_eq!((m, op), (&b"enc/blk.0/attn"[..], &b"index_put_"[..]));
}
