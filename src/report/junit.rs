//! `--junit FILE`: JUnit XML with one test case per rank of either run, so
//! CI systems (GitHub, GitLab, Jenkins) show a numeric regression natively.
//!
//! - a compared rank passes, or fails (`<failure type="NumericDivergence">`)
//!   when it has gating divergences, listing its origins and entries;
//! - a rank present in one run only fails (`OneSidedRank`);
//! - in a step series, each case is a (step, rank), `step S rank R`, and
//!   a step present in one run only fails (`OneSidedStep`);
//! - a rank whose input is incomplete (a cut log, or a log missing below
//!   the `World size:` the other logs declare) is an
//!   `<error type="IncompleteInput">` (a `<failure>` where the exit status
//!   is 1: under `--allow-incomplete`, or at a step after a series' first
//!   diverging step);
//! - a rank that could not be compared is an `<error type="InputError">`
//!   with the reason;
//! - input errors that belong to no rank (a missing run, a bad option or
//!   option file) are one more `<error>` case, `input`; so is any other
//!   reason for a non-zero exit status that no rank shows.
//!
//! So the file passes (no failure, no error) exactly when the exit status
//! is 0, and it is written even when no rank was read.

use std::io::Write;

use quick_xml::events::{BytesDecl, BytesEnd, BytesStart, BytesText, Event};
use quick_xml::Writer;

use super::messages::{self, Message};
use super::reasons::Reason;
use super::summary::{RankSummary, RowRef, Summary};
use crate::exit_codes;

/// How one test case ended.
enum Outcome {
    Pass,
    /// `<failure>`: the comparison ran and found a divergence.
    Failure {
        ty: &'static str,
        message: String,
        body: String,
    },
    /// `<error>`: the comparison could not run on this input.
    Error {
        ty: &'static str,
        message: String,
        body: String,
    },
}

/// One test case: a rank, or `input`.
struct Case {
    name: String,
    /// For ordering: the rank number (`u32::MAX + 1` for `input`).
    order: u64,
    outcome: Outcome,
}

fn failure_text(s: &Summary, r: &RankSummary) -> String {
    let fused = if r.counts.fused > 0 {
        let modules = r.run1.level == crate::logformat::CaptureLevel::Modules;
        let what = super::reasons::compiled_away_words(r.counts.fused, modules, "the compiler");
        format!(", {what}")
    } else {
        String::new()
    };
    let recomputed = if r.counts.recomputed > 0 {
        format!(
            ", {}",
            super::reasons::recomputed_words(r.counts.recomputed)
        )
    } else {
        String::new()
    };
    let mut t = format!(
        "{} diff, {} only in {}, {} only in {} ({} gating{fused}{recomputed})\n",
        r.counts.diff, r.counts.only1, s.name1, r.counts.only2, s.name2, r.counts.gating
    );
    for c in &r.root_causes.causes {
        t.push_str(&format!(
            "{}: {} ({}, row {})\n",
            c.cause.kind.as_str(),
            c.subject((&s.name1, &s.name2)),
            log_place(r, &c.row),
            c.row.index
        ));
    }
    if let Some(f) = &r.first_divergence {
        t.push_str(&format!(
            "first divergence: {} ({}, {})\n",
            f.key(),
            f.status.as_str(),
            log_place(r, f)
        ));
    }
    t
}

/// Where a row's block is, `PATH:LINE` of the log its key belongs to
/// ([`RowRef::place_beside`]), so that a CI reader opens it from the
/// failure text (a step series' logs are in `step_S` folders: trial 19
/// L3 had only the line).
fn log_place(r: &RankSummary, row: &RowRef) -> String {
    match row.place_beside(row.status) {
        Some((1, l)) => format!("{}:{l}", r.run1.path),
        Some((_, l)) => format!("{}:{l}", r.run2.path),
        None => "no log line".to_string(),
    }
}

/// The test case of a compared rank.
fn compared_case(s: &Summary, r: &RankSummary) -> Case {
    let incomplete: Vec<String> = [("run1", &r.run1), ("run2", &r.run2)]
        .iter()
        .flat_map(|(n, side)| {
            side.incomplete
                .iter()
                .map(move |x| format!("{n} ({}) {x}", side.path))
        })
        .collect();
    let outcome = if !incomplete.is_empty() {
        let message = format!("rank {}: incomplete input: {}", r.rank, incomplete[0]);
        let mut body = incomplete.join("\n");
        body.push('\n');
        if r.gates() {
            body.push_str(&failure_text(s, r));
        }
        if s.exit_status == exit_codes::DIVERGED {
            // --allow-incomplete: compared anyway, never a pass.
            Outcome::Failure {
                ty: "IncompleteInput",
                message,
                body,
            }
        } else {
            Outcome::Error {
                ty: "IncompleteInput",
                message,
                body,
            }
        }
    } else if r.gates() {
        let message = match &r.root_causes.first_cause {
            Some(c) => format!(
                "rank {}: numerics diverge; first {}: {}",
                r.rank,
                c.cause.kind.as_str(),
                c.subject((&s.name1, &s.name2))
            ),
            None => format!(
                "rank {}: numerics diverge ({} gating rows)",
                r.rank, r.counts.gating
            ),
        };
        Outcome::Failure {
            ty: "NumericDivergence",
            message,
            body: failure_text(s, r),
        }
    } else {
        Outcome::Pass
    };
    // In a step series, one case per (step, rank), in step order.
    let (name, order) = match r.step {
        Some(step) => (
            format!("step {step} rank {}", r.rank),
            (step << 32) | u64::from(r.rank),
        ),
        None => (format!("rank {}", r.rank), u64::from(r.rank)),
    };
    Case {
        name,
        order,
        outcome,
    }
}

/// A case's name, `rank R` or in a step series `step S rank R`, and the
/// prefix its message takes (`""` or `"step S: "`).
fn case_name(step: Option<u64>, rank: u32) -> (String, String) {
    match step {
        Some(s) => (format!("step {s} rank {rank}"), format!("step {s}: ")),
        None => (format!("rank {rank}"), String::new()),
    }
}

/// Every test case of `s`, in rank order, `input` last.
fn cases(s: &Summary) -> Vec<Case> {
    let mut cases: Vec<Case> = s.ranks.iter().map(|r| compared_case(s, r)).collect();
    // One-sided ranks: per step in a series (a rank one run lacks at one
    // step is no rank only one run has), else per run.
    type OneSided<'a> = (Option<u64>, &'a Vec<u32>, &'a Vec<u32>, &'a [Reason]);
    let one_sided: Vec<OneSided> = match &s.series {
        Some(series) => series
            .step_results
            .iter()
            .map(|r| (Some(r.step), &r.ranks_only1, &r.ranks_only2, &r.verdict[..]))
            .collect(),
        None => vec![(None, &s.ranks_only1, &s.ranks_only2, &s.verdict[..])],
    };
    for (step, only1, only2, verdict) in one_sided {
        for (ranks, name, other) in [(only1, &s.name1, &s.name2), (only2, &s.name2, &s.name1)] {
            for rank in ranks {
                let (case, at) = case_name(step, *rank);
                let message = format!("{at}rank {rank} is only in {name}");
                // The other run declares this rank (`World size:`): its log
                // is missing, an error of the input, not a divergence.
                let missing = verdict.iter().find(|v| {
                    matches!(v, Reason::RanksMissing { name, ranks, .. } if name == other && ranks.contains(rank))
                });
                let outcome = match missing {
                    // Judged anyway (--allow-incomplete, or a step after
                    // the series' first diverging step): exit 1, a
                    // failure, as for a cut log.
                    Some(why) if s.exit_status == exit_codes::DIVERGED => Outcome::Failure {
                        ty: "IncompleteInput",
                        message: format!("{at}{why}"),
                        body: format!("{message}: {why}\n"),
                    },
                    Some(why) => Outcome::Error {
                        ty: "IncompleteInput",
                        message: format!("{at}{why}"),
                        body: format!("{message}: {why}\n"),
                    },
                    None => Outcome::Failure {
                        ty: "OneSidedRank",
                        body: format!("{message}: {other} has no log of this rank\n"),
                        message,
                    },
                };
                cases.push(Case {
                    name: case,
                    order: (step.unwrap_or(0) << 32) | u64::from(*rank),
                    outcome,
                });
            }
        }
    }
    if let Some(series) = &s.series {
        for (steps, name, other) in [
            (&series.steps_only1, &s.name1, &s.name2),
            (&series.steps_only2, &s.name2, &s.name1),
        ] {
            for step in steps {
                let message = format!("step {step} is only in {name}");
                cases.push(Case {
                    name: format!("step {step}"),
                    order: step << 32,
                    outcome: Outcome::Failure {
                        ty: "OneSidedStep",
                        body: format!("{message}: {other} has no step_{step} folder\n"),
                        message,
                    },
                });
            }
        }
    }
    for l in &s.layouts {
        let name = if l.side == 1 { &s.name1 } else { &s.name2 };
        let body: String = l.lines(name).iter().map(|x| format!("{x}\n")).collect();
        cases.push(Case {
            name: format!("layout of {name}: {}", l.describe().join("; ")),
            order: u64::MAX - 2 + u64::from(l.side),
            outcome: if l.mismatch_count == 0 {
                Outcome::Pass
            } else {
                Outcome::Failure {
                    ty: "ReplicaMismatch",
                    message: format!(
                        "{} replicated value{} differ across the ranks combined in {name}",
                        l.mismatch_count,
                        if l.mismatch_count == 1 { "" } else { "s" }
                    ),
                    body,
                }
            },
        });
    }
    for f in &s.ranks_failed {
        let (case, at) = case_name(f.step, f.rank);
        cases.push(Case {
            name: case,
            order: (f.step.unwrap_or(0) << 32) | u64::from(f.rank),
            outcome: Outcome::Error {
                ty: "InputError",
                message: format!(
                    "{at}rank {}: not compared: {}",
                    f.rank,
                    f.errors.first().map(|e| e.to_string()).unwrap_or_default()
                ),
                body: messages::join(&f.errors, "\n") + "\n",
            },
        });
    }
    cases.sort_by_key(|c| c.order);
    // Errors no failed rank holds, or a non-zero status no case shows.
    // (A series' errors are its steps': `AtSteps`, or `AtStep` in a
    // summary an earlier actdiff wrote.)
    let of_ranks = |e: &Message| {
        s.ranks_failed.iter().any(|f| match e {
            Message::AtStep { step, message } if Some(*step) == f.step => {
                f.errors.contains(message)
            }
            Message::AtSteps { steps, message }
                if f.step.is_some_and(|step| steps.contains(&step)) =>
            {
                f.errors.contains(message)
            }
            _ => f.errors.contains(e),
        })
    };
    let rest: Vec<String> = s
        .input_errors
        .iter()
        .filter(|e| !of_ranks(e))
        .map(|e| e.to_string())
        .collect();
    let shown = cases.iter().any(|c| !matches!(c.outcome, Outcome::Pass));
    // An input error (exit 2) is an `<error>` even when the cases shown are
    // failures: "no rank in both runs" listed its one-sided ranks as
    // failures only, and a CI reading errors saw none.
    let errored = cases
        .iter()
        .any(|c| matches!(c.outcome, Outcome::Error { .. }));
    let unsaid_input_error = s.exit_status == exit_codes::INPUT_ERROR && !errored;
    if !rest.is_empty() || (s.exit_status != exit_codes::OK && !shown) || unsaid_input_error {
        let lines: Vec<String> = if rest.is_empty() {
            s.verdict.iter().map(ToString::to_string).collect()
        } else {
            rest
        };
        let mut body = String::new();
        for l in &lines {
            body.push_str(l);
            body.push('\n');
        }
        cases.push(Case {
            name: "input".into(),
            order: u64::from(u32::MAX) + 1,
            outcome: Outcome::Error {
                ty: if s.exit_status == exit_codes::INCOMPLETE && !s.input_errors.is_empty() {
                    "IncompleteInput"
                } else {
                    "InputError"
                },
                message: format!(
                    "exit status {}: {}",
                    s.exit_status,
                    lines.first().map_or("", |l| l.as_str())
                ),
                body,
            },
        });
    }
    cases
}

/// Writes the JUnit XML of `s` to `w`.
pub fn write_junit(s: &Summary, w: impl Write) -> std::io::Result<()> {
    let cases = cases(s);
    let count = |f: fn(&Outcome) -> bool| cases.iter().filter(|c| f(&c.outcome)).count();
    let failures = count(|o| matches!(o, Outcome::Failure { .. }));
    let errors = count(|o| matches!(o, Outcome::Error { .. }));
    let mut x = Writer::new_with_indent(w, b' ', 2);
    let ev = |x: &mut Writer<_>, e: Event<'_>| x.write_event(e).map_err(std::io::Error::other);
    ev(
        &mut x,
        Event::Decl(BytesDecl::new("1.0", Some("UTF-8"), None)),
    )?;
    let mut suite = BytesStart::new("testsuite");
    suite.push_attribute((
        "name",
        format!("actdiff {} vs {}", s.name1, s.name2).as_str(),
    ));
    suite.push_attribute(("tests", cases.len().to_string().as_str()));
    suite.push_attribute(("failures", failures.to_string().as_str()));
    suite.push_attribute(("errors", errors.to_string().as_str()));
    ev(&mut x, Event::Start(suite))?;
    for c in &cases {
        let mut tc = BytesStart::new("testcase");
        tc.push_attribute(("classname", "actdiff.compare"));
        tc.push_attribute(("name", c.name.as_str()));
        let (tag, ty, message, body) = match &c.outcome {
            Outcome::Pass => {
                ev(&mut x, Event::Empty(tc))?;
                continue;
            }
            Outcome::Failure { ty, message, body } => ("failure", ty, message, body),
            Outcome::Error { ty, message, body } => ("error", ty, message, body),
        };
        ev(&mut x, Event::Start(tc))?;
        let mut f = BytesStart::new(tag);
        f.push_attribute(("message", message.as_str()));
        f.push_attribute(("type", *ty));
        ev(&mut x, Event::Start(f))?;
        ev(&mut x, Event::Text(BytesText::new(body)))?;
        ev(&mut x, Event::End(BytesEnd::new(tag)))?;
        ev(&mut x, Event::End(BytesEnd::new("testcase")))?;
    }
    ev(&mut x, Event::End(BytesEnd::new("testsuite")))?;
    Ok(())
}
