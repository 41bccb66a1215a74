//! Case 02-fqn-root-class (`../shared/cases/02-fqn-root-class/README.md`).

use super::common::*;

/// Case 02-fqn-root-class: `actdiff compare run1.log run2.log -o out`. The
/// `FSDPLlama3Model.` root is stripped before exact pairing: 3 exact matches,
/// exit 0, both raw keys kept and shown.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case02_class_root_is_stripped_before_exact_pairing() {
    let r = in_case("02-fqn-root-class", &["compare", "run1.log", "run2.log"]);
    r.expect(0);
    let rows = r.rows();
    assert_eq!(rows.len(), 3);
    for row in &rows {
        assert_eq!(row["status"], "match", "{row}");
        assert_eq!(row["strategy"], "exact", "{row}");
    }
    let norm = r.row("FSDPLlama3Model.norm/op_0_mul");
    assert_eq!(norm["key2"], "norm/op_0_mul");
    let w1 = r.row("FSDPLlama3Model.layers.0.feed_forward.w1/op_0_mm");
    assert_eq!(w1["key2"], "layers.0.feed_forward.w1/op_0_mm");
    let html = r.tbody("FSDPLlama3Model.norm/op_0_mul");
    assert!(html.contains("FSDPLlama3Model.norm/op_0_mul"), "{html}");
    assert!(html.contains("norm/op_0_mul"), "{html}");
    assert_eq!(counts(&r.rank(0)["counts"]), (3, 0, 0, 0));
}

/// Case 02-fqn-root-class: `actdiff compare run1.log run2.log -o out`: the
/// two rows whose keys were normalised are labelled as such.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case02_normalised_rows_are_labelled() {
    let r = in_case("02-fqn-root-class", &["compare", "run1.log", "run2.log"]);
    r.expect(0);
    let label = |key: &str| {
        let told = format!("{}\n{}", notes(&r.row(key)).join("\n"), r.tbody(key)).to_lowercase();
        told.contains("normalised") || told.contains("normalized")
    };
    assert!(label("FSDPLlama3Model.norm/op_0_mul"));
    assert!(label("FSDPLlama3Model.layers.0.feed_forward.w1/op_0_mm"));
    assert!(
        !label("output/op_0_mm"),
        "an unchanged key is labelled normalised"
    );
}

/// Case 02-fqn-root-class (rule): a first segment with one capital
/// (`Layers.`) or none (`layers.`) is never stripped, so such keys do not
/// pair in the exact pass; a class name such as `Llama3Model.` is.
/// Variants of run1.log, compared with run2.log.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case02_ordinary_first_segments_are_never_stripped() {
    let run1 = case_text("02-fqn-root-class", "run1.log");
    let run2 = case_file("02-fqn-root-class", "run2.log");
    let tmp = TempDir::new().unwrap();
    write(tmp.path(), "run2.log", &run2);
    for (root, stripped) in [
        ("Layers.", false),
        ("layers.", false),
        ("Llama3Model.", true),
    ] {
        write(
            tmp.path(),
            "v.log",
            run1.replace("FSDPLlama3Model.", root).as_bytes(),
        );
        let r = actdiff(tmp.path(), &["compare", "v.log", "run2.log"]);
        let key = format!("{root}norm/op_0_mul");
        let row = r.row(&key);
        assert_eq!(row["key1"], key.as_str(), "raw key kept");
        if stripped {
            r.expect(0);
            assert_eq!(row["strategy"], "exact", "{root}: {row}");
        } else {
            assert_ne!(row["strategy"], "exact", "{root} was stripped: {row}");
        }
    }
}
