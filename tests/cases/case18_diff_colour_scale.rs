//! Case 18-diff-colour-scale (`../shared/cases/18-diff-colour-scale/README.md`).

use super::common::*;

/// Asserts every coloured cell of a page has a defined colour: a CSS rule
/// for its class, with no NaN or infinite value in it.
fn colours_defined(page: &str) {
    for c in cells(page) {
        if let Some(class) = c.class.as_deref().filter(|k| k.starts_with('x')) {
            let rules = css_rules(page, class);
            assert!(!rules.is_empty(), "no CSS rule for .{class} ({c:?})");
            for rule in rules {
                let low = rule.to_lowercase();
                assert!(
                    !low.contains("nan") && !low.contains("inf"),
                    ".{class}{{{rule}}}"
                );
            }
        }
    }
}

/// Case 18-diff-colour-scale: `actdiff compare run1.log run2.log -o out`:
/// the report is generated, `blk.3` (NaN) and `blk.4` (Inf) differ, `blk.0`
/// to `blk.2` (0, 1 ulp, just under 1e-8) match; every coloured cell has a
/// defined colour and 0 is neutral; exit 1.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case18_colour_scale() {
    let r = in_case("18-diff-colour-scale", &["compare", "run1.log", "run2.log"]);
    r.expect(1);
    for i in 0..3 {
        r.row_is(&format!("blk.{i}/op_0_mm"), "match", Some("exact"));
    }
    for i in 3..5 {
        r.row_is(&format!("blk.{i}/op_0_mm"), "diff", Some("exact"));
    }
    let page = r.page("rank0-page1.html");
    colours_defined(&page);
    no_highlighted_cell(&page, &r.tbody("blk.0/op_0_mm"));
}

/// Case 18-diff-colour-scale: `actdiff compare run1.log run1.log -o out`:
/// self-comparison renders without any division by zero; exit 0.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case18_self_compare_renders() {
    let r = in_case("18-diff-colour-scale", &["compare", "run1.log", "run1.log"]);
    r.expect(0);
    assert_eq!(counts(&r.rank(0)["counts"]), (5, 0, 0, 0));
    let page = r.page("rank0-page1.html");
    assert!(page.contains("blk.4/op_0_mm"));
    colours_defined(&page);
}

/// Case 18-diff-colour-scale: `actdiff compare run1.log run2.log -o out`:
/// NaN and Inf get a "non-finite" colour. Variant: both logs get a sixth op
/// `blk.5` whose hash doubles (a finite difference at the top of the
/// scale); the NaN and Inf cells must not share its colour.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case18_non_finite_colour() {
    let case = "18-diff-colour-scale";
    let blk5 = |h: &str| {
        format!("[blk.5/op_0_mm]\n  Shape: torch.Size([2, 2]), Dtype: torch.float64\n  Output hash: {h}\n\n")
    };
    let tmp = TempDir::new().unwrap();
    for (name, h) in [("run1.log", "1.000000e+00"), ("run2.log", "2.000000e+00")] {
        let mut t = case_text(case, name).replace(
            "Total captured activations: 5",
            "Total captured activations: 6",
        );
        if !t.ends_with("\n\n") {
            t.push('\n');
        }
        t += &blk5(h);
        write(tmp.path(), name, t.as_bytes());
    }
    let r = actdiff(tmp.path(), &["compare", "run1.log", "run2.log"]);
    r.expect(1);
    let class_of = |key: &str, text: &str| {
        cells(&r.tbody(key))
            .into_iter()
            .find(|c| c.text == text)
            .and_then(|c| c.class)
            .unwrap_or_else(|| panic!("{key}: no coloured `{text}` cell"))
    };
    let finite = class_of("blk.5/op_0_mm", "2.000000e+00");
    assert_ne!(
        class_of("blk.3/op_0_mm", "nan"),
        finite,
        "NaN has the finite colour"
    );
    assert_ne!(
        class_of("blk.4/op_0_mm", "inf"),
        finite,
        "Inf has the finite colour"
    );
}
