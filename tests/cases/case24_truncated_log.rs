//! Case 24-truncated-log (`../shared/cases/24-truncated-log/README.md`).

use super::common::*;

/// Case 24-truncated-log: `actdiff compare truncated.log complete.log -o
/// out`: no crash; "run1 declares 3 ops, parsed 2" and "last block ends
/// without newline (possibly truncated)"; `wk` truncated (no verdict), `wv`
/// only in run2, `wq` matches; exit 3.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case24_truncated_log_is_incomplete_input() {
    let r = in_case(
        "24-truncated-log",
        &["compare", "truncated.log", "complete.log"],
    );
    r.expect(3);
    r.says("declares 3 ops, parsed 2")
        .says("without newline (possibly truncated)")
        .says("truncated.log");
    case24_rows(&r);
    assert_eq!(
        r.rank(0)["run1"]["incomplete"],
        serde_json::json!([
            "declares 3 ops, parsed 2",
            "last block ends without newline (possibly truncated)"
        ])
    );
}

fn case24_rows(r: &Run) {
    r.row_is("layers.0.attention.wq/op_0_mm", "match", Some("exact"));
    let wk = r.row("layers.0.attention.wk/op_0_mm");
    assert_eq!(wk["status"], "truncated", "{wk}");
    assert_note(&wk, "truncated");
    r.row_is("layers.0.attention.wv/op_0_mm", "only2", None);
}

/// Case 24-truncated-log: `actdiff compare truncated.log complete.log -o
/// out --allow-incomplete`: `wq` matches, `wk` still truncated with no
/// verdict, `wv` only in run2; exit 1.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case24_allow_incomplete() {
    let r = in_case(
        "24-truncated-log",
        &[
            "compare",
            "truncated.log",
            "complete.log",
            "--allow-incomplete",
        ],
    );
    r.expect(1);
    case24_rows(&r);
}

/// Cut points in complete.log: (what, offset, expected exit statuses
/// without and with `--allow-incomplete`).
struct Cut {
    what: String,
    at: usize,
    plain: &'static [i32],
    allowed: &'static [i32],
}

/// Cuts in block `b` (0-based) of `text`: mid-key, right after the key line,
/// mid-field-name, mid-value, right after a value's newline, mid last value,
/// last value without its newline.
fn cuts_in_block(text: &str, b: usize, plain: &'static [i32], allowed: &'static [i32]) -> Vec<Cut> {
    let starts: Vec<usize> = text.match_indices("\n[").map(|(i, _)| i + 1).collect();
    let s = starts[b];
    let key_end = s + text[s..].find('\n').unwrap();
    let l2 = s + text[s..].find("L2 norm: ").unwrap();
    let l2_end = l2 + text[l2..].find('\n').unwrap();
    let oh = s + text[s..].find("Output hash: ").unwrap();
    let oh_end = oh + text[oh..].find('\n').unwrap();
    let shape = s + text[s..].find("torch.Size").unwrap();
    [
        ("mid-key", s + 5),
        ("key without `]`", key_end - 1),
        ("right after the key line", key_end + 1),
        ("mid-field-name", key_end + 5),
        ("mid-Shape-value", shape + 8),
        ("mid-L2-value", l2 + 12),
        ("right after the L2 line", l2_end + 1),
        ("mid-Output-hash-name", oh + 4),
        ("mid-Output-hash-value", oh + 16),
        ("Output hash without newline", oh_end),
    ]
    .into_iter()
    .map(|(what, at)| Cut {
        what: format!("block {b}: {what}"),
        at,
        plain,
        allowed,
    })
    .collect()
}

/// Cuts complete.log at each offset and compares the cut log with the
/// complete one, as run1 and as run2, with and without
/// `--allow-incomplete`: never a panic, never a pass on incomplete input.
fn check_cuts(cuts: &[Cut]) {
    let complete = case_file("24-truncated-log", "complete.log");
    let tmp = TempDir::new().unwrap();
    write(tmp.path(), "complete.log", &complete);
    let mut wrong = Vec::new();
    for c in cuts {
        write(tmp.path(), "cut.log", &complete[..c.at]);
        let tail = String::from_utf8_lossy(&complete[c.at.saturating_sub(16)..c.at]).into_owned();
        for pair in [["cut.log", "complete.log"], ["complete.log", "cut.log"]] {
            for (flag, want) in [(None, c.plain), (Some("--allow-incomplete"), c.allowed)] {
                let mut args = vec!["compare", pair[0], pair[1]];
                args.extend(flag);
                let r = actdiff(tmp.path(), &args);
                if !want.contains(&r.code) {
                    wrong.push(format!(
                        "{} (offset {}, ends {tail:?}): `{}`: exit {}, want one of {want:?}",
                        c.what,
                        c.at,
                        args.join(" "),
                        r.code
                    ));
                }
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{} of {} runs gave the wrong exit status:\n{}",
        wrong.len(),
        cuts.len() * 4,
        wrong.join("\n")
    );
}

/// Case 24-truncated-log (variants): complete.log cut at many offsets in
/// the header, the first block and the second block (mid-key, mid-field
/// name, mid-value, right after a newline, a value without its newline),
/// compared with complete.log on either side: never a panic, never a pass.
/// A cut in or before the first field leaves nothing comparable (exit 2, or
/// 3); any later cut is incomplete input: exit 3, and 1 with
/// `--allow-incomplete`. Losing only the final blank line may pass.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case24_cuts_before_the_last_block() {
    let text = case_text("24-truncated-log", "complete.log");
    let first = text.find("\n[").unwrap() + 1;
    let mut cuts = vec![
        Cut {
            what: "mid-header".into(),
            at: 10,
            plain: &[2, 3],
            allowed: &[1, 2],
        },
        Cut {
            what: "after the header line".into(),
            at: text.find('\n').unwrap() + 1,
            plain: &[2, 3],
            allowed: &[1, 2],
        },
        Cut {
            what: "before the first block".into(),
            at: first - 1,
            plain: &[2, 3],
            allowed: &[1, 2],
        },
        Cut {
            what: "only the final blank line lost".into(),
            at: text.len() - 1,
            plain: &[0, 3],
            allowed: &[0, 1],
        },
        Cut {
            what: "nothing lost".into(),
            at: text.len(),
            plain: &[0],
            allowed: &[0],
        },
    ];
    for c in cuts_in_block(&text, 0, &[3], &[1]) {
        let early = c.at <= first + text[first..].find(": ").unwrap() + 2;
        cuts.push(if early {
            Cut {
                plain: &[2, 3],
                allowed: &[1, 2],
                ..c
            }
        } else {
            c
        });
    }
    cuts.extend(cuts_in_block(&text, 1, &[3], &[1]));
    check_cuts(&cuts);
}

/// Case 24-truncated-log (variants): complete.log cut inside its last block
/// (mid-key, right after the key line, mid-value, right after a value's
/// newline, the last value without its newline): exit 3, and 1 with
/// `--allow-incomplete`.
#[test]
#[cfg_attr(not(has_shared), ignore = "../shared absent")]
fn case24_cuts_inside_the_last_block() {
    let text = case_text("24-truncated-log", "complete.log");
    check_cuts(&cuts_in_block(&text, 2, &[3], &[1]));
}
