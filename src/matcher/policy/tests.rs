use super::*;

#[test]
fn rules_text_and_errors() {
    let r = parse_rules_text(
        ".*\\.experts\\..*     rel <= 1e-3 or abs <= 1e-8\n.*\\.attention\\..*   rel <= 1e-5\n",
        "rules.txt",
    )
    .unwrap();
    assert_eq!(r.len(), 2);
    assert_eq!(
        r[0].tol,
        Some(Tolerance {
            rtol: 1e-3,
            atol: 1e-8,
            both: false,
        })
    );
    assert!(r[1]
        .key
        .as_ref()
        .unwrap()
        .is_match(b"layers.0.attention.wq/op_0_mm"));
    assert!(!r[1].key.as_ref().unwrap().is_match(b"attention"));
    let e = parse_rules_text(
        "a rel <= 1\nb abs <= 2\n.*  rel <=\n",
        "rules_malformed.txt",
    )
    .unwrap_err();
    // The column is where the number is missing (the end of the line).
    assert_eq!((e.line, e.column), (3, 11));
    assert!(
        e.to_string()
            .starts_with("rules_malformed.txt:3:11: malformed predicate"),
        "{e}"
    );
    assert!(parse_rules_text("( rel <= 1", "r")
        .unwrap_err()
        .message
        .contains("invalid regex"));
    assert!(parse_rules_text("a rel < 1", "r").is_err());
    assert!(parse_rules_text("a speed <= 1", "r").is_err());
}

fn tol(rtol: f64, atol: f64, both: bool) -> Tolerance {
    Tolerance { rtol, atol, both }
}

#[test]
fn predicates_combine_with_and_or_and_parentheses() {
    for (text, want) in [
        ("rel <= 1e-3", tol(1e-3, 0.0, false)),
        ("abs <= 1e-8", tol(0.0, 1e-8, false)),
        ("rel <= 1e-3 or abs <= 1e-8", tol(1e-3, 1e-8, false)),
        ("abs <= 1e-13 and rel <= 1e-3", tol(1e-3, 1e-13, true)),
        ("(abs <= 1e-13) and (rel <= 1e-3)", tol(1e-3, 1e-13, true)),
        ("rel<=1e-3 and abs<=2", tol(1e-3, 2.0, true)),
        // Repeated bounds of one kind: the tighter under `and`, the
        // looser under `or`.
        ("rel <= 1 and rel <= 2 and abs <= 3", tol(1.0, 3.0, true)),
        ("rel <= 1 or rel <= 2", tol(2.0, 0.0, false)),
        // `and` binds tighter than `or`: the `and` term here is implied
        // by the `rel` alone, so the whole is `rel <= 1e-3 or abs <= 1`.
        (
            "rel <= 1e-3 and abs <= 1e-9 or rel <= 1e-3 or abs <= 1",
            tol(1e-3, 1.0, false),
        ),
        // Parentheses group: `(a or b) and c` = `a and c or b and c`.
        (
            "(rel <= 1e-3 or rel <= 1e-5) and abs <= 1e-8",
            tol(1e-3, 1e-8, true),
        ),
    ] {
        assert_eq!(parse_predicate(text), Ok(want), "{text}");
    }
    // Errors point at the token (0-based offsets within the predicate).
    for (text, at, says) in [
        ("", 0, "missing"),
        ("rel <=", 6, "a number"),
        ("rel < 1", 4, "only `<=`"),
        ("speed <= 1", 0, "`rel` or `abs`"),
        ("rel <= x", 7, "not a number"),
        ("rel <= -1", 7, "non-negative"),
        ("rel <= 1 xor abs <= 2", 9, "`and`, `or`"),
        ("rel <= 1 and", 12, "found the end"),
        ("(rel <= 1", 0, "without a matching `)`"),
        ("rel <= 1)", 8, "without a matching `(`"),
        ("rel <= 1 or", 11, "found the end"),
        // `rel and abs, or rel` does not fit one tolerance.
        (
            "rel <= 1e-3 and abs <= 1e-8 or abs <= 1e-10",
            0,
            "cannot hold",
        ),
    ] {
        let e = parse_predicate(text).unwrap_err();
        assert_eq!(e.0, at, "{text}: {e:?}");
        assert!(e.1.contains(says), "{text}: {e:?}");
    }
    // In a rules file: the column of the bad token on its line.
    let e = parse_rules_text("a rel <= 1\n  b   rel <= 1 nand abs <= 2\n", "r.txt").unwrap_err();
    assert_eq!((e.line, e.column), (2, 16), "{e}");
    assert!(
        e.to_string().starts_with("r.txt:2:16: malformed predicate"),
        "{e}"
    );
    let r = parse_rules_text(".* abs <= 1e-13 and rel <= 1e-3\n", "r.txt").unwrap();
    assert_eq!(r[0].tol, Some(tol(1e-3, 1e-13, true)));
    assert_eq!(
        r[0].describe(),
        "r.txt:1 rel <= 1e-3 and abs <= 1e-13",
        "the report names the rule as it judges"
    );
}

#[test]
fn rules_match_the_optimizer_phase() {
    let p = Policy::from_toml("[[rule]]\nphase = 'optimizer'\nignore = true\n", "c.toml").unwrap();
    assert!(
        p.for_row(b"<none>/op_6_lerp_", b"lerp_", Phase::Optimizer, "")
            .ignored
    );
    assert!(
        !p.for_row(b"<none>/op_6_lerp_", b"lerp_", Phase::Forward, "")
            .ignored
    );
    assert!(
        !p.for_row(b"<none>/op_6_lerp_", b"lerp_", Phase::Backward, "")
            .ignored
    );
}

#[test]
fn first_matching_rule_wins_then_dtype_then_default() {
    let mut p = Policy::from_toml(
        r#"
[dtype.bfloat16]
rtol = 1e-2
[[rule]]
key = 'layers\.0\..*'
phase = "backward"
ignore = true
[[rule]]
key = 'layers\..*'
op = "mm"
rtol = 1e-3
"#,
        "actdiff.toml",
    )
    .unwrap();
    let r = p.for_row(b"layers.0.w/op_0_mm", b"mm", Phase::Backward, "float32");
    assert!(r.ignored);
    assert_eq!(r.source, Source::Rule(0));
    let r = p.for_row(b"layers.0.w/op_0_mm", b"mm", Phase::Forward, "bfloat16");
    assert_eq!(r.source, Source::Rule(1));
    assert_eq!(r.opts.hash.rtol, 1e-3);
    assert!(r.opts.stats.is_some());
    let r = p.for_row(b"norm/op_0_mul", b"mul", Phase::Forward, "bfloat16");
    assert_eq!(r.source, Source::Dtype(0));
    assert_eq!(r.opts.hash.rtol, 1e-2);
    let r = p.for_row(b"norm/op_0_mul", b"mul", Phase::Forward, "float32");
    assert_eq!(r.source, Source::Default);
    assert_eq!(r.opts, CompareOptions::default());
    let r = p.for_row(
        b"x/op_0__allgather_base_",
        b"_allgather_base_",
        Phase::Forward,
        "",
    );
    assert!(r.unsynced);
    p.ignore_ops.push("mul".into());
    assert!(
        p.for_row(b"norm/op_0_mul", b"mul", Phase::Forward, "")
            .ignored
    );
    assert_eq!(
        dtype_of(b"torch.Size([2]), Dtype: torch.bfloat16"),
        "bfloat16"
    );
}

#[test]
fn toml_errors_have_positions() {
    let e = Policy::from_toml("[[rule]]\nkey = '('\n", "c.toml").unwrap_err();
    assert!(e.to_string().contains("invalid regex"), "{e}");
    let e = Policy::from_toml("[defaults]\nrtol = \n", "c.toml").unwrap_err();
    assert_eq!(e.line, 2, "{e}");
    let e = Policy::from_toml("[[rule]]\nspeed = 1\n", "c.toml").unwrap_err();
    assert!(e.message.contains("unknown field `speed`"), "{e}");
    assert_eq!((e.line, e.column), (2, 1), "{e}");
    // Everything a fresh user got through silently before: each is an
    // error at the value's line.
    for (text, line, says) in [
        ("[defaults]\nrtol = \"abc\"\n", 2, "invalid type"),
        ("[defaults]\nrtoll = 1e-3\n", 2, "unknown field `rtoll`"),
        ("[defaults]\ngate_stats = \"yes\"\n", 2, "invalid type"),
        ("[defaults]\nnan_equal = 3\n", 2, "invalid type"),
        ("[collectives]\nunsynced = 5\n", 2, "invalid type"),
        ("[[rule]]\nkey = 'a'\nrtol = -1\n", 3, "finite number >= 0"),
        ("[dtype.bfloat16]\natol = -1e-3\n", 2, "finite number >= 0"),
        (
            "[[rule]]\nphase = \"sideways\"\n",
            2,
            "unknown variant `sideways`",
        ),
        ("[[rule]]\nop = 'mm'\nkey = '('\n", 3, "invalid regex"),
        ("[speed]\nx = 1\n", 1, "unknown field `speed`"),
    ] {
        let e = Policy::from_toml(text, "c.toml").unwrap_err();
        assert!(e.message.contains(says), "{text:?}: {e}");
        assert_eq!(e.line, line, "{text:?}: {e}");
        assert!(e.to_string().starts_with("c.toml:"), "{e}");
    }
    // Integers are numbers; the phase is checked, not just matched.
    let p = Policy::from_toml(
        "[defaults]\nrtol = 0\n[[rule]]\nphase = 'backward'\natol = 1\n",
        "c.toml",
    )
    .unwrap();
    assert_eq!(p.default.hash.rtol, 0.0);
    assert_eq!(p.rules[0].phase, Some(Phase::Backward));
    assert_eq!(p.rules[0].tol.map(|t| t.atol), Some(1.0));
}

/// A rule of run 2's keys ([`Rule::side`], the layout stage's) judges a
/// pair by run 2's row, whatever run 1's key: a pair by fuzzy key has other
/// op counters in run 1 (trial 71 F1: FSDP2's pending-sum norm, paired
/// with DDP's whose broadcasts shifted its counters, gated). Run 1's row
/// alone does not take it, and a rule of every run keeps matching run 1's.
#[test]
fn a_rule_of_run_2s_keys_judges_a_pair_by_run_2s_row() {
    let log = |key: &str| {
        crate::parser::parse_bytes(
            format!(
                "Total captured activations: 1\n{}\n\n[{key}]\n  Shape: torch.Size([2]), Dtype: torch.float32\n  Output hash: 1.0\n\n",
                "=".repeat(80)
            )
            .into_bytes(),
            "t.log",
        )
    };
    let (t1, t2) = (
        log("<none>/op_8__foreach_norm"),
        log("<none>/op_6__foreach_norm"),
    );
    let rule = |side| Rule {
        origin: "run 2's layout".into(),
        key_src: "1 ops".into(),
        key: Some(regex::bytes::Regex::new("^(?:<none>/op_6__foreach_norm)$").unwrap()),
        op: None,
        phase: None,
        dtype: None,
        tol: None,
        gate_stats: None,
        ignore: true,
        unsynced: None,
        gate_inputs: None,
        side,
    };
    let mut p = Policy::default();
    p.rules.push(rule(Some(2)));
    let rp = p.for_pair(&t1, 0, &t2, 0);
    assert!(rp.ignored && matches!(rp.source, Source::Rule(0)), "{rp:?}");
    assert!(!p.for_side_row(&t1, 0, Some(1)).ignored);
    assert!(p.for_side_row(&t2, 0, Some(2)).ignored);
    // Without a side the rule reads run 1's key, as user rules do.
    p.rules[0] = rule(None);
    assert!(!p.for_pair(&t1, 0, &t2, 0).ignored);
}
