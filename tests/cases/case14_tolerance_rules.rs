//! Case 14-tolerance-rules (`../shared/cases/14-tolerance-rules/README.md`).

use super::common::*;

const EXPERT14: &str = "layers.5.moe.experts.7.w2/op_1_mm";
const ATTN14: &str = "layers.5.attention.wo/op_0_mm";
const NORM14: &str = "norm/op_0_mul";

/// Checks case 14's first command: expert passes on abs, attention fails on
/// rel, norm falls back to the default; the rule is shown per row.
fn case14_check(r: &Run, origin: &str) {
    r.expect(1);
    let e = r.row_is(EXPERT14, "match", Some("exact"));
    let a = r.row_is(ATTN14, "diff", Some("exact"));
    let n = r.row_is(NORM14, "match", Some("exact"));
    let tol = |v: &Value| v["tolerance"].as_str().unwrap().to_string();
    assert!(
        tol(&e).contains(origin) && tol(&e).contains("abs <= 1e-8"),
        "{e}"
    );
    assert!(
        tol(&a).contains(origin) && tol(&a).contains("rel <= 1e-5"),
        "{a}"
    );
    assert!(tol(&n).starts_with("default"), "{n}");
    assert_ne!(tol(&e), tol(&a));
}

/// Case 14-tolerance-rules: `actdiff compare run1.log run2.log -o out
/// --rules rules.txt`: the expert op passes on its absolute differences
/// (rel ~0.67), the attention op fails (rel 1e-4 > 1e-5), `norm/op_0_mul`
/// uses the default and matches; each row names its rule; exit 1.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case14_ordered_rules_with_rel_or_abs() {
    let r = in_case(
        "14-tolerance-rules",
        &["compare", "run1.log", "run2.log", "--rules", "rules.txt"],
    );
    case14_check(&r, "rules.txt");
    let rel = r.row(EXPERT14)["diffs"]["Mean"].as_f64().unwrap();
    assert!((0.6..0.7).contains(&rel), "{rel}");
}

/// Case 14-tolerance-rules: `actdiff compare run1.log run2.log -o out
/// --rules rules.txt --rules-exhaustive`: exit 2, "no rule matches
/// norm/op_0_mul".
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case14_rules_exhaustive() {
    let r = in_case(
        "14-tolerance-rules",
        &[
            "compare",
            "run1.log",
            "run2.log",
            "--rules",
            "rules.txt",
            "--rules-exhaustive",
        ],
    );
    r.expect(2).stderr_has("no rule matches norm/op_0_mul");
}

/// Case 14-tolerance-rules: `actdiff compare run1.log run2.log -o out
/// --rules rules_malformed.txt`: exit 2 at startup, "malformed predicate"
/// naming rules_malformed.txt line 3.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case14_malformed_rule() {
    let r = in_case(
        "14-tolerance-rules",
        &[
            "compare",
            "run1.log",
            "run2.log",
            "--rules",
            "rules_malformed.txt",
        ],
    );
    r.expect(2)
        .stderr_has("malformed predicate")
        .stderr_has("rules_malformed.txt:3");
}

/// Case 14-tolerance-rules (Notes): the same rules given in the config file
/// (`--config actdiff.toml`, `[[rule]]` tables) give the same outcome.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case14_rules_in_config_file() {
    let tmp = TempDir::new().unwrap();
    let cfg = write(
        tmp.path(),
        "actdiff.toml",
        br#"[[rule]]
key = '.*\.experts\..*'
rtol = 1e-3
atol = 1e-8

[[rule]]
key = '.*\.attention\..*'
rtol = 1e-5
atol = 0.0
"#,
    );
    let r = in_case(
        "14-tolerance-rules",
        &[
            "compare",
            "run1.log",
            "run2.log",
            "--config",
            cfg.to_str().unwrap(),
        ],
    );
    case14_check(&r, "actdiff.toml");
}

/// Case 14-tolerance-rules: `actdiff compare run1.log run2.log -o out
/// --rules rules.txt`: each row of the report shows the rule (or default)
/// applied (the `--rows` file does; this checks the HTML rows).
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case14_html_rows_show_the_applied_rule() {
    let r = in_case(
        "14-tolerance-rules",
        &["compare", "run1.log", "run2.log", "--rules", "rules.txt"],
    );
    r.expect(1);
    assert!(r.tbody(EXPERT14).contains("rules.txt:1"));
    assert!(r.tbody(ATTN14).contains("rules.txt:2"));
    assert!(r.tbody(NORM14).contains("default"));
}
