//! Tests of the messages' words and their round trip through JSON.

use super::*;

#[test]
fn words_are_the_ones_written() {
    let m = Message::NegativeLayers {
        rank: 0,
        side: 2,
        offset: -4,
        layers: (0, 3),
        ops: 1,
    };
    assert_eq!(
        m.to_string(),
        "rank 0: --layer-offset run2=-4 would number run2's layers 0–3 below 0; its 1 op keep their keys as they are"
    );
    let m = Message::UnusedRule {
        origin: "--rules:1".into(),
        key_src: "x".into(),
        strict: true,
    };
    assert_eq!(
        m.to_string(),
        "rule --rules:1 `x` matched no row (--strict)"
    );
    let w = Message::LogWarning {
        path: "a.log".into(),
        at: Some((3, 7)),
        side: "run1",
        what: LogWarning::Said {
            message: "bad".into(),
            count: 2,
        },
    };
    assert_eq!(w.to_string(), "a.log:3:7: run1: bad (2 times)");
    assert_eq!(
        Message::OneSidedFields {
            rank: 1,
            run1: vec![Field::Shape],
            run2: vec![],
        }
        .to_string(),
        "rank 1: fields not on both sides are not compared: run1-only: Shape; run2-only: none"
    );
}

#[test]
fn a_sides_problems_have_the_words_summary_json_had() {
    let w = Message::ParseWarning {
        path: "a/rank_0_activations.log".into(),
        line: 12,
        column: 3,
        message: "unknown field line `Foo`".into(),
    };
    assert_eq!(
        w.to_string(),
        "a/rank_0_activations.log:12:3: unknown field line `Foo`"
    );
    let cases = [
        (
            Message::CountMismatch {
                declared: 5,
                parsed: 3,
            },
            "declares 5 ops, parsed 3",
        ),
        (
            Message::TruncatedLog { why: None },
            "last block possibly truncated",
        ),
        (
            Message::TruncatedLog {
                why: Some("no final newline".into()),
            },
            "no final newline",
        ),
        (
            Message::UnreadableValues {
                count: 1,
                first: Some(UnreadableValue {
                    path: "a.log".into(),
                    line: 4,
                    column: 9,
                    message: "`x` is no number".into(),
                }),
            },
            "1 unreadable value; the first at a.log:4:9: `x` is no number",
        ),
        (
            Message::UnreadableValues {
                count: 3,
                first: None,
            },
            "3 unreadable values, not compared",
        ),
        (Message::GzipCut { why: None }, "gzip data cut short"),
    ];
    for (m, words) in cases {
        assert_eq!(m.to_string(), words);
        assert_eq!(serde_json::to_value(&m).unwrap(), words);
    }
}

#[test]
fn a_merges_problems_have_their_words() {
    let part = |index, dir: &str| PartName {
        shard: Shard { index, count: 3 },
        dir: dir.into(),
    };
    let m = Message::PartsMissing {
        missing: vec![1],
        count: 3,
        given: vec![
            (Shard { index: 0, count: 3 }, "p0".into()),
            (Shard { index: 2, count: 3 }, "p2".into()),
        ],
    };
    assert_eq!(
        m.to_string(),
        "part 1/3 missing: a merge needs all 3 parts (given: 0/3 = p0, 2/3 = p2)"
    );
    let at = |steps: Vec<u64>| Message::AtSteps {
        steps,
        message: Box::new(m.clone()),
    };
    assert_eq!(at(vec![2]).to_string(), format!("step 2: {m}"));
    assert_eq!(
        at(vec![1, 2, 3, 5]).to_string(),
        format!("steps 1-3, 5: {m}")
    );
    let first = part(0, "p0");
    let cases = [
        (
            Message::PartsOfOtherInputs {
                first: first.clone(),
                other: part(1, "q1"),
                difference: Box::new(InputsDifference::RankLog {
                    side: "run2",
                    rank: 3,
                    first: ("b/rank_3_activations.log".into(), 10),
                    other: ("b/rank_3_activations.log".into(), 12),
                }),
                relative: false,
            },
            "part 0/3 (p0) and part 1/3 (q1): different inputs: run2 rank 3: b/rank_3_activations.log (10 bytes) against b/rank_3_activations.log (12 bytes)",
        ),
        (
            Message::PartsOfOtherOptions {
                first: first.clone(),
                other: part(1, "q1"),
                keys: vec![],
            },
            "part 0/3 (p0) and part 1/3 (q1): different options: run metadata",
        ),
        (
            Message::LogsChanged {
                part: first.clone(),
                logs: vec![
                    ChangedLog {
                        file: "a/rank_0_activations.log".into(),
                        recorded: 10,
                        now: LogNow::Bytes(11),
                    },
                    ChangedLog {
                        file: "a/rank_1_activations.log".into(),
                        recorded: 10,
                        now: LogNow::Missing,
                    },
                ],
                relative: false,
            },
            "the logs changed since part 0/3 (p0) compared them: a/rank_0_activations.log (recorded 10 bytes, now 11 bytes), a/rank_1_activations.log (recorded 10 bytes, now missing)",
        ),
        (
            Message::PartFilesMissing {
                part: first.clone(),
                files: (0..12).map(|i| format!("f{i}")).collect(),
            },
            "part 0/3 (p0): missing 12 of its ranks' report files: f0, f1, f2, f3, f4, f5, f6, f7, f8, f9 and 2 more",
        ),
        (
            Message::PartUnits {
                part: first,
                held: vec![0],
                split: vec![0, 2],
            },
            "part 0/3 (p0): holds ranks [0], but the split of these inputs gives it [0, 2]",
        ),
        (
            // 500 ranks are not listed twice: the first few, then a count.
            Message::PartUnits {
                part: part(0, "p0"),
                held: (0..500).collect(),
                split: (1..500).collect(),
            },
            "part 0/3 (p0): holds ranks [0, 1, 2, 3, 4, 5, 6, 7, 8, 9 and 490 more], but the split of these inputs gives it [1, 2, 3, 4, 5, 6, 7, 8, 9, 10 and 489 more]",
        ),
    ];
    for (m, words) in cases {
        assert_eq!(m.to_string(), words);
    }
}

#[test]
fn written_as_its_words_and_read_back_as_them() {
    let m = Message::AtStep {
        step: 3,
        message: Box::new(Message::UnusedIgnoreOp { op: "add".into() }),
    };
    let json = serde_json::to_string(&m).unwrap();
    assert_eq!(
        json,
        r#""step 3: --ignore-op add: no op of that name in any log""#
    );
    let back: Message = serde_json::from_str(&json).unwrap();
    assert!(matches!(back, Message::Read(_)));
    assert_eq!(back, m);
    assert!(Message::StepWithoutPages { step: 2 }.is_step_without_pages());
    assert!(
        !Message::Read(Message::StepWithoutPages { step: 2 }.to_string()).is_step_without_pages(),
        "words are never matched"
    );
}

#[test]
fn steps_in_neither_run_say_step_or_steps() {
    let one = Message::StepsInNeither {
        steps: vec![(9, 9)],
    };
    assert_eq!(one.to_string(), "--steps: step 9 in neither run");
    let many = Message::StepsInNeither {
        steps: vec![(6, 8), (100, 100), (102, 99_999_999_999)],
    };
    assert_eq!(
        many.to_string(),
        "--steps: steps 6-8, 100, 102-99999999999 in neither run"
    );
}

#[test]
fn recomputed_rows_say_whether_they_are_communication_or_checkpointing() {
    let m = |count, communication| Message::RecomputedOps {
        rank: 1,
        side: "run2",
        count,
        example: Box::new(("b/op_9_x".into(), "b/op_2_x".into())),
        communication,
    };
    assert_eq!(
        m(1, true).to_string(),
        "rank 1: 1 row only run2 has repeats its forward communication in the backward phase (`b/op_9_x` repeats `b/op_2_x`): a parallel layout gathering the same parameters again (FSDP2's reshard_after_forward) in run2 only; shown, not gating"
    );
    assert_eq!(
        m(3, false).to_string(),
        "rank 1: 3 rows only run2 has repeat its forward ops in the backward phase (`b/op_9_x` repeats `b/op_2_x`): activation checkpointing's recomputation in run2 only; shown, not gating (the backward ops that read the recomputed values are compared)"
    );
}

/// The `--layouts` hint says to capture at full precision only when the
/// runs are not (trial 27 F5: runs already at full precision were told
/// to capture so); with digests on both sides it points at `--bitwise`.
#[test]
fn the_layouts_hint_asks_for_full_precision_only_without_digests() {
    let said = |digests| {
        Message::LayoutsAtReferenceTolerance {
            runs: vec!["tp2".into()],
            digests,
        }
        .to_string()
    };
    assert!(said(false).ends_with(
        "capture both runs with precision=\"full\" to see which rows are bitwise equal (--bitwise)"
    ));
    let full = said(true);
    assert!(!full.contains("precision=\"full\""), "{full}");
    assert!(full.ends_with("--bitwise shows which rows are bitwise equal (both runs have digests)"));
}

/// A problem alike on many ranks is one stderr line naming the ranks;
/// messages that differ by more than their rank, that name two ranks, or
/// that name none stay as they are, in the order they came.
#[test]
fn messages_alike_on_ranks_are_one_line() {
    let warning = |rank: u32, line: u64| Message::LogWarning {
        path: format!("a/rank_{rank}_activations.log"),
        at: Some((line, 1)),
        side: "run1",
        what: LogWarning::Said {
            message: "no header".into(),
            count: 1,
        },
    };
    let mut msgs: Vec<Message> = (0..300).map(|r| warning(r, 1)).collect();
    // Rank 7's at another line: a line of its own.
    msgs[7] = warning(7, 9);
    msgs.push(Message::Text(
        "rank 3 of run 1 against rank 5 of run 2".into(),
    ));
    msgs.push(Message::Text("no rank named".into()));
    msgs.push(Message::NegativeLayers {
        rank: 12,
        side: 2,
        offset: -4,
        layers: (0, 3),
        ops: 1,
    });
    msgs.push(Message::NegativeLayers {
        rank: 40,
        side: 2,
        offset: -4,
        layers: (0, 3),
        ops: 1,
    });
    let lines = lines_by_rank(&msgs);
    assert_eq!(
        lines,
        [
            "ranks 0–6 and 8–299: a/rank_*_activations.log:1:1: run1: no header",
            "a/rank_7_activations.log:9:1: run1: no header",
            "rank 3 of run 1 against rank 5 of run 2",
            "no rank named",
            "ranks 12 and 40: --layer-offset run2=-4 would number run2's layers 0–3 below 0; its 1 op keep their keys as they are",
        ]
    );
    // A message of several steps names its rank behind the steps: the
    // line names the ranks once, before them.
    let wrapped = |rank: u32| Message::AtSteps {
        steps: vec![1, 2, 3],
        message: Box::new(Message::WrapperPrefix { rank, side: "run2" }),
    };
    let lines = lines_by_rank(&[wrapped(0), wrapped(1)]);
    assert_eq!(lines.len(), 1, "{lines:?}");
    assert!(
        lines[0].starts_with("ranks 0 and 1: steps 1-3: every module FQN of the run2 log"),
        "{lines:?}"
    );
    // A rank number inside a word or a decimal is no rank.
    assert_eq!(any_rank("ranked 3"), None);
    assert_eq!(any_rank("rank 2.5 of"), None);
    assert_eq!(
        any_rank("step 4: x/step_4/rank_10_activations.log:2:1"),
        Some((10, "step 4: x/step_4/rank_*_activations.log:2:1".into()))
    );
}
