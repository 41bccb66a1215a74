//! Step series (`step_S/` folders, issue 24): `actdiff compare` names the
//! first step where two runs part, each rank's own first diverging step,
//! gates over every step, and writes one JUnit case per (step, rank).

#[path = "support/mod.rs"]
mod support;

use std::path::Path;

use serde_json::Value;
use support::Run;
use tempfile::TempDir;

/// Two step series of `steps` steps × 2 ranks (generated logs, 300 ops):
/// run 2 perturbs 3 rows of every rank from step `from`, except rank 0 at
/// step `from` (its log copied from run 1): rank 1 parts at `from`, rank
/// 0 one step later (`from` past `steps`: the runs agree).
fn series(dir: &Path, steps: u64, from: u64) {
    for s in 1..=steps {
        let n = if s >= from { "3" } else { "0" };
        let (g1, g2) = (dir.join("g1"), dir.join("g2"));
        Run::of(
            support::actdiff()
                .args(["gen", "--ops", "300", "--ranks", "2", "--perturb-count", n])
                .args(["--seed", &s.to_string()])
                .arg(&g1)
                .arg(&g2),
            "",
        )
        .expect(0);
        for (g, run) in [(&g1, "a"), (&g2, "b")] {
            std::fs::create_dir_all(dir.join(run)).unwrap();
            std::fs::rename(g, dir.join(run).join(format!("step_{s}"))).unwrap();
        }
    }
    let log = |run: &str| {
        dir.join(run)
            .join(format!("step_{from}/rank_0_activations.log"))
    };
    if from <= steps {
        std::fs::copy(log("a"), log("b")).unwrap();
    }
}

fn summary(out: &Path) -> Value {
    serde_json::from_slice(&std::fs::read(out.join("summary.json")).unwrap()).unwrap()
}

#[test]
fn names_the_first_diverging_step_and_each_ranks_own() {
    let d = TempDir::new().unwrap();
    series(d.path(), 5, 3);
    let out = d.path().join("rep");
    let junit = d.path().join("j.xml");
    let r = Run::of(
        support::actdiff()
            .arg("compare")
            .arg(d.path().join("a"))
            .arg(d.path().join("b"))
            .arg("-o")
            .arg(&out)
            .arg("--junit")
            .arg(&junit),
        "",
    );
    let stdout = &r.stdout;
    r.expect(1);
    assert!(
        stdout.contains("the runs agree from step 1 through step 2; step 3 diverges first: rank 1 diverges first at `"),
        "{stdout}"
    );
    assert!(
        stdout.contains("first diverging step per rank: rank 0 at step 4, rank 1 at step 3"),
        "{stdout}"
    );
    let s = summary(&out);
    assert_eq!(s["steps"], serde_json::json!([1, 2, 3, 4, 5]));
    assert_eq!(s["first_diverging_step"], 3);
    assert_eq!(
        s["first_diverging_step_by_rank"],
        serde_json::json!([{"rank": 0, "step": 4}, {"rank": 1, "step": 3}])
    );
    let ranks = s["ranks"].as_array().unwrap();
    assert_eq!(ranks.len(), 10, "one entry per (step, rank)");
    assert!(ranks.iter().all(|r| r["step"].is_u64()));
    // Links lead into the step's folder, and the first diverging step's
    // pages hold its rows; other steps' pages hold none.
    let step3 = ranks
        .iter()
        .find(|r| r["step"] == 3 && r["rank"] == 1)
        .unwrap();
    // The first diverging (step, rank) gets a single-step compare's
    // per-phase lines (trial 14), and no other unit does.
    let mut said = 0;
    for phase in ["forward", "backward", "optimizer"] {
        let f = &step3["root_causes"][format!("first_divergence_{phase}")];
        if let Some(k) = f["key1"].as_str().or(f["key2"].as_str()) {
            // The row's source line follows (its block's `Location:`).
            let at = match f["location"].as_str() {
                Some(l) => format!(" (at {l})"),
                None => String::new(),
            };
            let line = format!("step 3 rank 1: first divergence ({phase}): {k}{at}\n");
            assert!(stdout.contains(&line), "{line} in {stdout}");
            said += 1;
        }
    }
    assert!(said > 0, "{step3}");
    assert!(!stdout.contains("step 4 rank"), "{stdout}");
    let page = step3["first_divergence"]["page"].as_str().unwrap();
    assert!(page.starts_with("step_3/"), "{page}");
    assert!(out.join(page).is_file(), "{page}");
    assert!(step3["html_rows"].as_u64().unwrap() > 0);
    let step4 = ranks
        .iter()
        .find(|r| r["step"] == 4 && r["rank"] == 1)
        .unwrap();
    assert_eq!(step4["html_rows"], 0, "summary line only for a later step");
    assert!(
        step4["first_divergence"].is_object(),
        "but its result is complete"
    );
    let own4 = summary(&out.join("step_4"));
    assert!(
        own4["warnings"][0].as_str().unwrap().contains("--steps 4"),
        "the step's own report says how to get its rows: {own4}"
    );
    assert!(
        !r.stderr.contains("has no result pages"),
        "not repeated by the series"
    );
    // Each step's own report is an ordinary one.
    let own = summary(&out.join("step_3"));
    assert_eq!(own["exit_status"], 1);
    assert!(own.get("steps").is_none());
    // The index: the strip marks step 3.
    let index = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(
        index.contains("class=first title=\"first diverging step\">3<"),
        "{index}"
    );
    assert!(index.contains("href=\"step_3/index.html\""));
    // The answer's report is a link (trial 22 L2: plain text).
    assert!(
        index.contains("(report: <a href=\"step_3/index.html\">step_3/index.html</a>)</div>"),
        "{index}"
    );
    // A diverging cell is shaded by its largest gating relative difference,
    // and says it.
    let rd = own["ranks"][1]["root_causes"]["largest_rel_diff"]
        .as_f64()
        .unwrap();
    let shade = actdiff::report::html::gate_shade(Some(rd));
    assert!(
        // (at the first diverging step a cell leads to the rank's first
        // divergence)
        index.contains(&format!(
            "<td class=gate style=\"{shade}\"><a href=\"step_3/rank1-page1.html#"
        )),
        "{index}"
    );
    assert!(
        index.contains("\" title=\"step 3, rank 1: 3 gating rows; largest relative difference"),
        "{index}"
    );
    assert_ne!(shade, actdiff::report::html::gate_shade(Some(1e-7)));
    // JUnit: one case per (step, rank); steps 3-5 of rank 1 fail.
    let x = std::fs::read_to_string(&junit).unwrap();
    assert_eq!(x.matches("<testcase ").count(), 10, "{x}");
    assert!(x.contains("name=\"step 3 rank 1\">"), "{x}");
    assert!(x.contains("name=\"step 3 rank 0\"/>"), "{x}");
    // Its causes name their log and line, in the step's folder (trial 19
    // L3: "log line 767, row 56" and no file).
    let a3 = d.path().join("a/step_3/rank_1_activations.log");
    let place = format!("({}:", a3.display());
    let case = &x[x.find("name=\"step 3 rank 1\"").unwrap()..];
    let case = &case[..case.find("</testcase>").unwrap()];
    assert!(case.contains(&place), "{place} in {case}");
    assert!(!case.contains("log line"), "{case}");
}

#[test]
fn steps_all_gives_every_step_its_pages_and_a_list_limits_the_steps() {
    let d = TempDir::new().unwrap();
    series(d.path(), 4, 3);
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    let out = d.path().join("all");
    Run::of(
        support::actdiff()
            .arg("compare")
            .args([&a, &b])
            .args(["--steps", "all", "-q", "-o"])
            .arg(&out),
        "",
    )
    .expect(1);
    let s = summary(&out);
    let step4 = s["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["step"] == 4)
        .unwrap();
    assert!(step4["html_rows"].as_u64().unwrap() > 0);
    // Steps 1-2 only: they agree.
    let out = d.path().join("some");
    let r = Run::of(
        support::actdiff()
            .arg("compare")
            .args([&a, &b])
            .args(["--steps", "1-2", "-o"])
            .arg(&out),
        "",
    );
    r.expect(0);
    let s = summary(&out);
    assert_eq!(s["steps"], serde_json::json!([1, 2]));
    assert_eq!(s["first_diverging_step"], Value::Null);
    // The steps left out are said, so that "no divergence" is not read
    // as the whole series agreeing.
    assert_eq!(s["steps_not_selected"], serde_json::json!([3, 4]));
    assert!(
        r.stdout
            .contains("2 steps compared (2 agree); 2 steps left out by --steps (3-4)"),
        "{}",
        r.stdout
    );
    let index = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(index.contains("<p class=\"mut not-selected\">2 steps left out by --steps (3-4)</p>"));
    assert!(index.contains("<span class=mut>· 2 steps compared</span>"));
    assert!(r.stdout.contains(
        "no divergence beyond tolerance over 2 steps (2 more steps left out by --steps)"
    ));
    // Step 4 alone: its divergence is the first of the steps compared.
    let late = d.path().join("late");
    let r = Run::of(
        support::actdiff()
            .arg("compare")
            .args([&a, &b])
            .args(["--steps", "4", "-o"])
            .arg(&late),
        "",
    );
    r.expect(1);
    assert!(
        r.stdout.contains(
            "step 4 diverges first of the steps compared (3 earlier steps left out by --steps)"
        ),
        "{}",
        r.stdout
    );
    // A bad list is a usage error naming the part.
    Run::of(
        support::actdiff()
            .arg("compare")
            .args([&a, &b])
            .args(["--steps", "2-x"])
            .arg("-o")
            .arg(d.path().join("bad")),
        "",
    )
    .expect(2)
    .stderr_has("`2-x` is no step or range");
}

/// The files of a report folder, by name, with their bytes.
fn files_of(dir: &Path) -> std::collections::BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| {
            let name = e.file_name().to_string_lossy().into_owned();
            (name, std::fs::read(e.path()).unwrap())
        })
        .collect()
}

/// Trial 32: steps 1, 4 and 5 captured (2 and 3 in neither run), step 4
/// diverging: "step 4 diverges first" alone hid that the runs may part at
/// step 2 or 3; the sentence after it says so.
#[test]
fn steps_neither_run_captured_before_the_first_diverging_one_are_said() {
    let d = TempDir::new().unwrap();
    series(d.path(), 5, 4);
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    for run in [&a, &b] {
        for st in [2, 3] {
            std::fs::remove_dir_all(run.join(format!("step_{st}"))).unwrap();
        }
    }
    let out = d.path().join("rep");
    let r = compare_into([&a, &b], &[], &out, 1);
    let said = "steps 2-3, before step 4, were captured in neither run: the runs may part there first; capture them to tell";
    assert_eq!(r.stdout.lines().nth(2), Some(said), "{}", r.stdout);
    let s = summary(&out);
    assert_eq!(s["first_diverging_step"], 4);
    assert!(s["verdict"].as_array().unwrap().iter().any(|v| v == said));
    // With every step captured, nothing of the kind.
    let d2 = TempDir::new().unwrap();
    series(d2.path(), 5, 4);
    let r = compare_into(
        [d2.path().join("a"), d2.path().join("b")],
        &[],
        d2.path().join("rep"),
        1,
    );
    assert!(
        !r.stdout.contains("captured in neither run"),
        "{}",
        r.stdout
    );
}

/// Trial 30 F4 and trial 29: the index of a long series folds the steps
/// that agree into one line of its list (149 lines of "no divergence"
/// came before the first diverging step), and a cell of the first
/// diverging step leads to that rank's first divergence, not to the
/// step's index; a cell of a step without rank pages leads to its index.
#[test]
fn a_series_index_folds_agreeing_steps_and_its_cells_lead_to_the_rank() {
    let d = TempDir::new().unwrap();
    series(d.path(), 6, 5);
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    let out = d.path().join("rep");
    compare_into([&a, &b], &["-q"], &out, 1);
    let s = summary(&out);
    assert_eq!(s["first_diverging_step"], 5);
    let index = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(
        index.contains(r#"<li><a href="step_1/index.html">steps 1–4</a>: each agrees (4 steps;"#),
        "{index}"
    );
    assert!(!index.contains(r#">step 2</a>"#), "{index}");
    assert!(index.contains(r#"<a href="step_6/index.html">step 6</a>: "#));
    assert!(index.contains("· 6 steps compared"), "{index}");
    // Rank 1 diverges at step 5 (rank 0's log of step 5 is run a's).
    let first = s["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["step"] == 5 && r["rank"] == 1)
        .unwrap()["first_divergence"]
        .clone();
    let link = format!(
        "{}#{}",
        first["page"].as_str().unwrap(),
        first["anchor"].as_str().unwrap()
    );
    assert!(link.starts_with("step_5/rank1-page"), "{link}");
    assert!(out.join(link.split('#').next().unwrap()).is_file());
    assert!(
        index.contains(&format!(r#"<a href="{link}" title="step 5, rank 1: "#)),
        "{index}"
    );
    assert!(
        index.contains(r#"<a href="step_6/index.html" title="step 6, rank 1: "#),
        "{index}"
    );
    // The strip scrolls to the first diverging step.
    assert!(index.contains(r#"<div class=stripwrap id=stripwrap><table class=strip id=strip>"#));
}

/// The first diverging step's full pages are written from the tables its
/// compare kept (no second compare): they must be the very pages that
/// `--steps all` writes for that step, and the other steps' pages must
/// hold no rows. Under a budget that bites, too: the HTML budget is shared
/// by every step and rank either way (1 MiB over 4 steps × 2 ranks is
/// 128 KiB a rank, less than a 300-op rank's full pages; over the first
/// step's 2 ranks alone it would be 512 KiB, enough for them).
#[test]
fn the_first_diverging_steps_pages_are_those_of_a_full_compare() {
    let d = TempDir::new().unwrap();
    series(d.path(), 4, 2);
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    for budget in [None, Some("1")] {
        let tag = budget.unwrap_or("default");
        let first = d.path().join(format!("first-{tag}"));
        let all = d.path().join(format!("all-{tag}"));
        for (out, extra) in [(&first, None), (&all, Some("all"))] {
            let mut c = support::actdiff();
            c.arg("compare").args([&a, &b]).arg("-q").arg("-o").arg(out);
            if let Some(x) = extra {
                c.args(["--steps", x]);
            }
            if let Some(mb) = budget {
                c.args(["--html-budget-mb", mb]);
            }
            Run::of(&mut c, "").expect(1);
        }
        let s = summary(&first);
        assert_eq!(s["first_diverging_step"], 2);
        let got = files_of(&first.join("step_2"));
        let want = files_of(&all.join("step_2"));
        assert_eq!(
            got.keys().collect::<Vec<_>>(),
            want.keys().collect::<Vec<_>>(),
            "the first diverging step's report files ({tag} budget)"
        );
        assert!(got.keys().any(|k| k.starts_with("rank1-page")), "{got:?}");
        for (name, bytes) in &want {
            assert!(
                got[name] == *bytes,
                "step_2/{name} differs from --steps all's ({tag} budget)"
            );
        }
        for r in s["ranks"].as_array().unwrap() {
            let rows = r["html_rows"].as_u64().unwrap();
            if r["step"] == 2 {
                // Rank 1 diverges; rank 0's pages hold every row unless
                // the budget bit (then only diverging rows: none).
                assert_eq!(rows > 0, r["rank"] == 1 || budget.is_none(), "{r}");
                let page = r["pages"][0]["file"].as_str().unwrap();
                assert!(first.join(page).is_file(), "{page}");
                assert_eq!(r["html_filtered"], budget.is_some(), "{r}");
            } else {
                assert_eq!(rows, 0, "{r}");
            }
        }
        // The step's own summary warns of no step without pages.
        let own = std::fs::read_to_string(first.join("step_2/summary.json")).unwrap();
        assert!(!own.contains("has no result pages"), "{own}");
        // The terminal says the budget cut the pages (counted over the
        // ranks with pages: the first diverging step's 2).
        let r = Run::of(
            support::actdiff()
                .arg("compare")
                .args([&a, &b])
                .args(budget.map(|mb| ["--html-budget-mb", mb]).iter().flatten())
                .arg("-o")
                .arg(d.path().join(format!("said-{tag}"))),
            "",
        );
        r.expect(1);
        assert_eq!(
            r.stdout
                .contains("The pages of 1 of 2 ranks hold only their diverging rows (1 with 2 rows of context each), and those of the 1 rank whose rows all match hold none of them"),
            budget.is_some(),
            "{}",
            r.stdout
        );
        // And the series' index, above its strip.
        let index =
            std::fs::read_to_string(d.path().join(format!("said-{tag}/index.html"))).unwrap();
        assert_eq!(
            index.contains("<p class=\"banner left-out\">The pages of 1 of 2 ranks"),
            budget.is_some()
        );
    }
}

#[test]
fn a_step_in_one_run_only_gates_and_one_series_alone_is_an_error() {
    let d = TempDir::new().unwrap();
    series(d.path(), 3, 9);
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    std::fs::remove_dir_all(b.join("step_3")).unwrap();
    // Run a's step 3 recorded its loss (a header line after the count).
    let log = a.join("step_3/rank_0_activations.log");
    let text = std::fs::read_to_string(&log).unwrap();
    let (count, rest) = text.split_once('\n').unwrap();
    std::fs::write(&log, format!("{count}\nLoss: 2.5\n{rest}")).unwrap();
    let out = d.path().join("rep");
    let r = Run::of(
        support::actdiff()
            .arg("compare")
            .args([&a, &b])
            .arg("-o")
            .arg(&out),
        "",
    );
    let stdout = &r.stdout;
    r.expect(1);
    assert!(stdout.contains("steps only in a: 3"), "{stdout}");
    // Trial 30 F3: the steps both have agree, and the sentence says so
    // first, with how to compare only them (a job killed after step 2).
    let opening = "the runs agree in every step both have (2 steps: 1-2): 1200 rows match; the steps only one run has gate (exit status 1): --steps 1-2 compares only the steps both have";
    assert!(
        stdout.lines().nth(1) == Some(opening),
        "the line after the runs' line: {stdout}"
    );
    let s = summary(&out);
    assert_eq!(s["verdict"][0], opening);
    assert_eq!(s["steps_only1"], serde_json::json!([3]));
    assert_eq!(s["first_diverging_step"], Value::Null, "steps 1-2 agree");
    // The index's strip has a grey column for it (a run its baseline
    // check stopped early lost its later steps from the strip), with no
    // link to a report it does not have; 2 steps compared.
    let index = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(
        index.contains(r#"<th class=none title="only in a: not compared">3</th>"#),
        "{index}"
    );
    assert!(!index.contains("step_3/index.html"), "{index}");
    assert!(index.contains("<span class=mut>· 2 steps compared</span>"));
    // Its loss is drawn, though the step is not compared.
    assert_eq!(
        s["one_sided_losses"],
        serde_json::json!([{"step": 3, "loss1": 2.5, "loss2": null}])
    );
    assert!(index.contains("<svg class=loss"), "{index}");
    // A step folder without a log (scheduled, never reached) is no step:
    // a warning, not a one-sided step.
    std::fs::create_dir_all(b.join("step_3")).unwrap();
    std::fs::write(b.join("step_3/rank_0_activations.log.body.tmp"), "").unwrap();
    std::fs::remove_dir_all(a.join("step_3")).unwrap();
    std::fs::create_dir_all(a.join("step_4")).unwrap();
    let r = Run::of(
        support::actdiff()
            .arg("compare")
            .args([&a, &b])
            .args(["-o"])
            .arg(d.path().join("unfinished"))
            .args(["--steps", "1-2,9"]),
        "",
    );
    let stderr = &r.stderr;
    // Step 9, named and reached by neither run, is an input error: a gate
    // asked about it (trial 19 F3: exit 0 with a warning).
    r.expect(2);
    assert!(
        stderr.contains("step_4: no rank_N_activations.log in it"),
        "{stderr}"
    );
    assert!(
        stderr.contains("step_3: no rank_N_activations.log in it"),
        "{stderr}"
    );
    assert!(
        stderr.contains("error: --steps names step 9, which neither run has (their steps: 1-2): not compared, so nothing says it agrees"),
        "{stderr}"
    );
    let r = Run::of(
        support::actdiff()
            .arg("compare")
            .args([&a, &b])
            .args(["-o"])
            .arg(d.path().join("none"))
            .args(["--steps", "20"]),
        "",
    );
    r.expect(2);
    assert!(
        r.stderr
            .contains("--steps selects no step both runs have (run1 steps 1-2, run2 steps 1-2)"),
        "{}",
        r.stderr
    );
    // A series against a single-step folder.
    Run::of(
        support::actdiff()
            .arg("compare")
            .arg(&a)
            .arg(a.join("step_1"))
            .arg("-o")
            .arg(d.path().join("mixed")),
        "",
    )
    .expect(2)
    .stderr_has("holds step_S folders (a step series)");
    // --steps without a series.
    Run::of(
        support::actdiff()
            .arg("compare")
            .arg(a.join("step_1"))
            .arg(b.join("step_1"))
            .args(["--steps", "1"])
            .arg("-o")
            .arg(d.path().join("nos")),
        "",
    )
    .expect(2)
    .stderr_has("hold no step_S folders");
}

#[test]
fn step_and_loss_header_lines_reach_the_summary() {
    let d = TempDir::new().unwrap();
    series(d.path(), 2, 9);
    for (run, loss) in [("a", "2.5"), ("b", "2.75")] {
        for s in 1..=2 {
            for rank in 0..2 {
                let p = d
                    .path()
                    .join(run)
                    .join(format!("step_{s}/rank_{rank}_activations.log"));
                let text = std::fs::read_to_string(&p).unwrap();
                let (first, rest) = text.split_once('\n').unwrap();
                std::fs::write(&p, format!("{first}\nStep: {s}\nLoss: {loss}\n{rest}")).unwrap();
            }
        }
    }
    let out = d.path().join("rep");
    Run::of(
        support::actdiff()
            .arg("compare")
            .arg(d.path().join("a"))
            .arg(d.path().join("b"))
            .args(["-q", "-o"])
            .arg(&out),
        "",
    )
    .expect(0);
    let s = summary(&out);
    let r0 = &s["step_results"][1];
    assert_eq!(
        (
            r0["step"].as_u64(),
            r0["loss1"].as_f64(),
            r0["loss2"].as_f64()
        ),
        (Some(2), Some(2.5), Some(2.75))
    );
    assert_eq!(s["ranks"][0]["run1"]["step"], 1);
    let index = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(
        index.contains("<polyline class=l1"),
        "the loss curves are drawn"
    );
}

#[test]
fn gen_writes_step_series_that_diverge_where_asked() {
    let d = TempDir::new().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    Run::of(
        support::actdiff()
            .args([
                "gen",
                "--ops",
                "200",
                "--ranks",
                "3",
                "--perturb-count",
                "2",
            ])
            .args(["--steps", "6", "--diverge-at", "4"])
            .arg(&a)
            .arg(&b),
        "",
    )
    .expect(0);
    let head = std::fs::read_to_string(a.join("step_5/rank_2_activations.log")).unwrap();
    assert!(head.lines().any(|l| l == "Step: 5"), "{}", &head[..200]);
    let out = d.path().join("rep");
    Run::of(
        support::actdiff()
            .arg("compare")
            .args([&a, &b])
            .args(["-q", "-o"])
            .arg(&out),
        "",
    )
    .expect(1);
    let s = summary(&out);
    assert_eq!(s["first_diverging_step"], 4);
    assert_eq!(s["ranks"].as_array().unwrap().len(), 18);
    assert_eq!(s["ranks"][0]["run1"]["step"], 1, "the header's step");
    let by_rank: Vec<u64> = s["first_diverging_step_by_rank"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["step"].as_u64().unwrap())
        .collect();
    assert_eq!(by_rank, vec![4, 4, 4]);
}

/// `--rows` of a step series: one file with every (step, rank)'s rows, each
/// row carrying its step, as JSON Lines and as Parquet (a `step` column);
/// the rows per (step, rank) and the gating rows agree with summary.json.
#[test]
fn rows_of_a_step_series_carry_their_step() {
    use arrow_array::Array;
    use parquet::arrow::arrow_reader::ParquetRecordBatchReaderBuilder;
    let d = TempDir::new().unwrap();
    series(d.path(), 3, 2);
    let out = d.path().join("rep");
    let jsonl = d.path().join("rows.jsonl");
    Run::of(
        support::actdiff()
            .arg("compare")
            .arg(d.path().join("a"))
            .arg(d.path().join("b"))
            .arg("-o")
            .arg(&out)
            .arg("--rows")
            .arg(&jsonl)
            .arg("-q"),
        "",
    )
    .expect(1);
    let s = summary(&out);
    let mut per: std::collections::BTreeMap<(u64, u64), u64> = Default::default();
    let mut steps_seen = Vec::new();
    for line in std::fs::read_to_string(&jsonl).unwrap().lines() {
        let v: Value = serde_json::from_str(line).unwrap();
        let step = v["step"].as_u64().expect("every row has its step");
        if steps_seen.last() != Some(&step) {
            steps_seen.push(step);
        }
        *per.entry((step, v["rank"].as_u64().unwrap())).or_default() += 1;
    }
    assert_eq!(steps_seen, vec![1, 2, 3], "in step order");
    for r in s["ranks"].as_array().unwrap() {
        let total: u64 = ["match", "diff", "only1", "only2", "truncated", "missing"]
            .iter()
            .map(|k| r["counts"][k].as_u64().unwrap())
            .sum();
        let key = (r["step"].as_u64().unwrap(), r["rank"].as_u64().unwrap());
        assert_eq!(per.get(&key), Some(&total), "step {} rank {}", key.0, key.1);
    }
    assert_eq!(per.len(), 6);
    // No step's own rows file is left behind.
    for step in 1..=3 {
        let dir = out.join(format!("step_{step}"));
        assert!(!dir.join(".rows-step.jsonl").exists());
    }

    let pq = d.path().join("rows.parquet");
    Run::of(
        support::actdiff()
            .arg("compare")
            .arg(d.path().join("a"))
            .arg(d.path().join("b"))
            .arg("-o")
            .arg(d.path().join("rep2"))
            .arg("--rows")
            .arg(&pq)
            .arg("-q"),
        "",
    )
    .expect(1);
    let reader = ParquetRecordBatchReaderBuilder::try_new(std::fs::File::open(&pq).unwrap())
        .unwrap()
        .build()
        .unwrap();
    let (mut rows, mut gating_by_step) = (0u64, std::collections::BTreeMap::<u64, u64>::new());
    for b in reader {
        let b = b.unwrap();
        let step = b
            .column_by_name("step")
            .unwrap()
            .as_any()
            .downcast_ref::<arrow_array::UInt64Array>()
            .unwrap()
            .clone();
        let gates = b
            .column_by_name("gates")
            .unwrap()
            .as_any()
            .downcast_ref::<arrow_array::BooleanArray>()
            .unwrap()
            .clone();
        assert_eq!(step.null_count(), 0);
        for i in 0..b.num_rows() {
            *gating_by_step.entry(step.value(i)).or_default() += gates.value(i) as u64;
        }
        rows += b.num_rows() as u64;
    }
    assert_eq!(rows, per.values().sum::<u64>());
    // Step 1 agrees; rank 1 parts at step 2, both ranks at step 3.
    assert_eq!(gating_by_step.get(&1).copied().unwrap_or(0), 0);
    assert_eq!(gating_by_step[&2], 3);
    assert_eq!(gating_by_step[&3], 6);
}

/// Runs `cmd` and checks its exit status.
fn exec(cmd: &mut std::process::Command, code: i32) -> Run {
    let r = Run::of(cmd, "");
    r.expect(code);
    r
}

/// `actdiff compare RUN1 RUN2 OPTS -o OUT`, expecting exit `code`.
fn compare_into<R: AsRef<std::ffi::OsStr>>(
    runs: [R; 2],
    opts: &[&str],
    out: impl AsRef<Path>,
    code: i32,
) -> Run {
    exec(
        support::actdiff()
            .arg("compare")
            .args(runs)
            .args(opts)
            .arg("-o")
            .arg(out.as_ref()),
        code,
    )
}

/// `actdiff gen OPTS A B`: two generated runs.
fn gen_into(opts: &[&str], a: &Path, b: &Path) {
    exec(support::actdiff().arg("gen").args(opts).arg(a).arg(b), 0);
}

/// `actdiff merge PARTS -q -o OUT`, expecting exit `code`.
fn merge_parts<P: AsRef<std::ffi::OsStr>>(
    parts: impl IntoIterator<Item = P>,
    out: impl AsRef<Path>,
    code: i32,
) -> Run {
    exec(
        support::actdiff()
            .arg("merge")
            .args(parts)
            .args(["-q", "-o"])
            .arg(out.as_ref()),
        code,
    )
}

/// What a compare of a step series says per (step, rank): its counts, first
/// divergence and first cause.
fn units(s: &Value) -> Vec<(u64, u64, Value, Value, Value)> {
    s["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| {
            (
                r["step"].as_u64().unwrap(),
                r["rank"].as_u64().unwrap(),
                r["counts"].clone(),
                r["first_divergence"]["key2"].clone(),
                r["root_causes"]["first_cause"]["row"]["key2"].clone(),
            )
        })
        .collect()
}

/// Writes part `k` of `n` of the compare of `a` and `b` into `dir/pK`.
fn part(dir: &Path, a: &Path, b: &Path, k: u32, n: u32) -> std::path::PathBuf {
    let p = dir.join(format!("p{k}"));
    compare_into([a, b], &["-q", "--shard", &format!("{k}/{n}")], &p, 0);
    p
}

/// `--shard K/N` on two step series splits the series' (step, rank) units
/// over the parts, and `actdiff merge` gives the answer of one compare:
/// the same first diverging step, steps, verdict, exit status, counts and
/// per (step, rank) first divergence and first cause.
#[test]
fn sharded_step_series_merge_to_the_single_compare() {
    let d = TempDir::new().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    series(d.path(), 5, 3);
    let full = d.path().join("full");
    compare_into([&a, &b], &["-q"], &full, 1);
    let parts: Vec<_> = (0..3).map(|k| part(d.path(), &a, &b, k, 3)).collect();
    for p in &parts {
        let rec: Value =
            serde_json::from_slice(&std::fs::read(p.join("series-part.json")).unwrap()).unwrap();
        assert_eq!(rec["steps"], serde_json::json!([1, 2, 3, 4, 5]));
        assert!(
            p.join("step_5/part.json").is_file(),
            "every step has its part"
        );
        // A part's step is no whole report (trial 10: an empty unit's
        // index said "exit status 2, nothing compared").
        for s in 1..=5 {
            for f in ["index.html", "summary.json"] {
                let file = p.join(format!("step_{s}/{f}"));
                assert!(!file.exists(), "{}", file.display());
            }
        }
    }
    let out = d.path().join("merged");
    let junit = d.path().join("junit.xml");
    exec(
        support::actdiff()
            .arg("merge")
            .args(&parts)
            .args(["-q", "--junit"])
            .arg(&junit)
            .arg("-o")
            .arg(&out),
        1,
    );
    let (f, m) = (summary(&full), summary(&out));
    for k in [
        "first_diverging_step",
        "first_diverging_step_by_rank",
        "steps",
        "exit_status",
        "verdict",
        "counts",
    ] {
        assert_eq!(f[k], m[k], "{k}");
    }
    assert_eq!(m["first_diverging_step"], 3);
    assert_eq!(units(&f), units(&m));
    assert_eq!(units(&m).len(), 10, "5 steps x 2 ranks");
    // The first diverging step's pages were linked from the parts.
    let page = m["ranks"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["step"] == 3 && r["rank"] == 1)
        .unwrap()["pages"][0]["file"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(out.join(&page).is_file(), "{page}");
    let cases = std::fs::read_to_string(&junit)
        .unwrap()
        .matches("<testcase ")
        .count();
    assert_eq!(cases, 10, "one JUnit case per (step, rank)");
}

/// One rank over many steps spreads over the parts (the split is over
/// (step, rank) units, not over ranks), and a merge missing a part or
/// mixing two series is refused, naming the problem.
#[test]
fn one_rank_series_spreads_over_parts_and_bad_merges_are_refused() {
    let d = TempDir::new().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    exec(
        support::actdiff()
            .args([
                "gen",
                "--ops",
                "120",
                "--ranks",
                "1",
                "--perturb-count",
                "2",
            ])
            .args(["--steps", "6", "--diverge-at", "4"])
            .arg(&a)
            .arg(&b),
        0,
    );
    let parts: Vec<_> = (0..3).map(|k| part(d.path(), &a, &b, k, 3)).collect();
    for p in &parts {
        let held = (1..=6)
            .filter(|s| {
                let m: Value = serde_json::from_slice(
                    &std::fs::read(p.join(format!("step_{s}/part.json"))).unwrap(),
                )
                .unwrap();
                !m["units"].as_array().unwrap().is_empty()
            })
            .count();
        assert_eq!(held, 2, "{}: 6 units over 3 parts", p.display());
    }
    let out = d.path().join("merged");
    merge_parts(&parts, &out, 1);
    assert_eq!(summary(&out)["first_diverging_step"], 4);
    let missing = merge_parts(&parts[..2], d.path().join("m2"), 2);
    let err = missing.stderr.clone();
    assert!(err.contains("missing"), "{err}");
    // A part of another series (other steps) cannot join.
    let (c, e) = (d.path().join("c"), d.path().join("e"));
    gen_into(&["--ops", "120", "--ranks", "1", "--steps", "2"], &c, &e);
    let other = d.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    let q = part(&other, &c, &e, 2, 3);
    let mixed = merge_parts([&parts[0], &parts[1], &q], d.path().join("m3"), 2);
    let err = mixed.stderr.clone();
    // Said with what differs, as each part records it.
    assert!(
        err.contains("parts of different step series or splits: steps compared 1-6 against 1-2"),
        "{err}"
    );
    assert!(!err.contains("parts against"), "the same split: {err}");
}

/// A report folder that held a longer step series keeps none of its step
/// reports: a compare of fewer steps into it, and a refused merge, remove
/// the old `step_S` reports (a new user found stale step pages there).
#[test]
fn old_step_reports_do_not_stay_in_the_report_folder() {
    let d = TempDir::new().unwrap();
    series(d.path(), 4, 3);
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    let out = d.path().join("rep");
    compare_into([&a, &b], &["-q"], &out, 1);
    assert!(out.join("step_4/summary.json").is_file());
    compare_into([&a, &b], &["-q", "--steps", "1-2"], &out, 0);
    assert!(out.join("step_2/summary.json").is_file());
    assert!(!out.join("step_3").exists() && !out.join("step_4").exists());
    // A refused merge into it leaves no step report behind either.
    let p0 = part(d.path(), &a, &b, 0, 2);
    merge_parts([&p0], &out, 2);
    assert!(!out.join("summary.json").exists() && !out.join("step_1").exists());
}

/// A merge problem of a sharded step series is said once, naming the
/// steps it concerns, not once per step (a new user found a missing part
/// named six times): a part missing from every step is one error line
/// for steps 1-4, the parts named by their own folders; a log changed in
/// one step is one line for that step.
#[test]
fn a_series_merge_says_each_problem_once_with_its_steps() {
    let d = TempDir::new().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    exec(
        support::actdiff()
            .args(["gen", "--ops", "60", "--ranks", "2", "--steps", "4"])
            .args(["--seed", "5", "--perturb", "0.05"])
            .arg(&a)
            .arg(&b),
        0,
    );
    let parts: Vec<_> = (0..3).map(|k| part(d.path(), &a, &b, k, 3)).collect();
    let errors = |r: &Run| -> Vec<String> {
        r.stderr
            .lines()
            .filter(|l| l.starts_with("error: ") && !l.starts_with("error: nothing merged"))
            .map(str::to_string)
            .collect()
    };
    let missing = merge_parts([&parts[0], &parts[2]], d.path().join("m1"), 2);
    assert_eq!(
        errors(&missing),
        vec![format!(
            "error: steps 1-4: part 1/3 missing: a merge needs all 3 parts (given: 0/3 = {}, 2/3 = {})",
            parts[0].display(),
            parts[2].display()
        )],
        "{}",
        missing.stderr
    );
    // A log of step 2 changed since the parts compared it.
    let log = a.join("step_2/rank_1_activations.log");
    let bytes = std::fs::metadata(&log).unwrap().len();
    let mut f = std::fs::OpenOptions::new().append(true).open(&log).unwrap();
    std::io::Write::write_all(&mut f, b"\n").unwrap();
    let changed = merge_parts(&parts, d.path().join("m2"), 2);
    assert_eq!(
        errors(&changed),
        vec![format!(
            "error: step 2: the logs changed since part 0/3 ({}) compared them: {} (recorded {bytes} bytes, now {} bytes)",
            parts[0].display(),
            log.display(),
            bytes + 1
        )],
        "{}",
        changed.stderr
    );
}

/// `--steps` on runs that are no step series is refused with `--shard`
/// as without it (a new user found it accepted, `--steps` ignored).
#[test]
fn steps_on_runs_without_steps_is_refused_with_shard_too() {
    let d = TempDir::new().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    exec(
        support::actdiff()
            .args(["gen", "--ops", "50", "--ranks", "2"])
            .args([&a, &b]),
        0,
    );
    let plain = compare_into([&a, &b], &["-q", "--steps", "3"], d.path().join("plain"), 2);
    let sharded = compare_into(
        [&a, &b],
        &["-q", "--steps", "3", "--shard", "1/2"],
        d.path().join("part"),
        2,
    );
    let words = "hold no step_S folders (a step series); drop --steps to compare one step";
    assert!(plain.stderr.contains(words), "{}", plain.stderr);
    assert!(sharded.stderr.contains(words), "{}", sharded.stderr);
}

/// A part of a sharded step series records "nothing compared" only when
/// no step was compared; a merged series' later diverging steps warn that
/// they have no result pages, as the unsharded compare's do.
#[test]
fn series_parts_say_no_step_only_without_steps_and_merges_warn_of_pages() {
    let d = TempDir::new().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    series(d.path(), 4, 2);
    let full = d.path().join("full");
    compare_into([&a, &b], &["-q"], &full, 1);
    let parts: Vec<_> = (0..2).map(|k| part(d.path(), &a, &b, k, 2)).collect();
    for p in &parts {
        let rec = std::fs::read_to_string(p.join("series-part.json")).unwrap();
        assert!(!rec.contains("nothing compared"), "{rec}");
    }
    let out = d.path().join("merged");
    merge_parts(&parts, &out, 1);
    let warns = |dir: &Path| -> bool {
        summary(dir)["warnings"].as_array().is_some_and(|w| {
            w.iter().any(|w| {
                w.as_str()
                    .unwrap()
                    .contains("this step has no result pages")
            })
        })
    };
    for s in 1..=4 {
        let step = format!("step_{s}");
        let want = warns(&full.join(&step));
        assert_eq!(want, s > 2, "{step} of the unsharded compare");
        assert_eq!(warns(&out.join(&step)), want, "{step} of the merge");
    }
    // The series itself does not repeat it, merged or not.
    assert!(!warns(&full) && !warns(&out));
    // A part that compared no step records what the merge then says.
    // (Step 3 only in c, at a step a lacks.)
    let (c, none) = (d.path().join("c"), d.path().join("none"));
    for s in [1, 3] {
        std::fs::create_dir_all(c.join(format!("step_{s}"))).unwrap();
        let log = format!("step_{s}/rank_0_activations.log");
        std::fs::copy(b.join(&log), c.join(&log)).unwrap();
    }
    std::fs::remove_dir_all(a.join("step_3")).unwrap();
    compare_into(
        [&a, &c],
        &["-q", "--steps", "3", "--shard", "0/1"],
        &none,
        0,
    );
    let rec = std::fs::read_to_string(none.join("series-part.json")).unwrap();
    assert!(rec.contains("no_step"), "{rec}");
    merge_parts([&none], d.path().join("none-merged"), 2)
        .stderr_has("--steps selects no step both runs have");
    // A step no run reached, named: the part fails saying so, and the merge
    // names it (trial 19 F3).
    let beyond = d.path().join("beyond");
    compare_into(
        [&a, &b],
        &["-q", "--steps", "9", "--shard", "0/1"],
        &beyond,
        2,
    );
    merge_parts([&beyond], d.path().join("beyond-merged"), 2)
        .stderr_has("--steps names step 9, which neither run has");
}

/// A step series against a path that does not exist: the error names the
/// missing path, not "holds no step_S folders".
#[test]
fn a_series_against_a_missing_path_says_it_does_not_exist() {
    let d = TempDir::new().unwrap();
    series(d.path(), 2, 9);
    let missing = d.path().join("no-such-run");
    for (x, y) in [
        (d.path().join("a"), missing.clone()),
        (missing.clone(), d.path().join("a")),
    ] {
        let r = compare_into([&x, &y], &["-q"], d.path().join("rep"), 2);
        let want = format!("{}: no such file or folder", missing.display());
        assert!(r.stderr.contains(&want), "{}", r.stderr);
        assert!(!r.stderr.contains("does not"), "{}", r.stderr);
    }
}

/// Two step series of `ranks` ranks × 3 steps (generated, 12 ops a rank):
/// step 1 agrees; from step 2 run 2 perturbs 2 rows of every rank, except
/// every fifth rank at step 2 (its log copied from run 1), which first
/// diverges at step 3. Compared into `dir/rep-RANKS`, returned.
fn many_rank_series(dir: &Path, ranks: u32) -> std::path::PathBuf {
    let (a, b) = (dir.join(format!("a{ranks}")), dir.join(format!("b{ranks}")));
    exec(
        support::actdiff()
            .args(["gen", "--ops", "12", "--ranks", &ranks.to_string()])
            .args(["--steps", "3", "--diverge-at", "2", "--perturb-count", "2"])
            .args(["--seed", "5"])
            .args([&a, &b]),
        0,
    );
    for r in (0..ranks).step_by(5) {
        let log = format!("step_2/rank_{r}_activations.log");
        std::fs::copy(a.join(&log), b.join(&log)).unwrap();
    }
    let out = dir.join(format!("rep-{ranks}"));
    compare_into([&a, &b], &["-q"], &out, 1);
    out
}

/// Every link target a report file names: `href="…"` in an HTML page,
/// and in a `ranks-K.js` part the page files (`"p"`) and first diverging
/// rows (`"fd"`) of the index's rank table. Fragments dropped; links out
/// of the report (`http…`, `#…`) skipped.
fn report_links(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let mut out: Vec<String> = Vec::new();
    let name = file.file_name().unwrap().to_str().unwrap();
    if name.ends_with(".html") {
        for piece in text.split("href=\"").skip(1) {
            out.push(piece[..piece.find('"').unwrap()].to_string());
        }
    } else if name.starts_with("ranks-") && name.ends_with(".js") {
        let json = text
            .split_once(", ")
            .and_then(|(_, j)| j.trim_end().strip_suffix(");"))
            .unwrap();
        let rows: Vec<Value> = serde_json::from_str(json).unwrap();
        for r in rows {
            for p in r["p"].as_array().into_iter().flatten() {
                out.push(p.as_str().unwrap().to_string());
            }
            if let Some(h) = r["fd"][1].as_str() {
                out.push(h.to_string());
            }
        }
    }
    out.into_iter()
        .map(|h| h.split('#').next().unwrap().to_string())
        .filter(|h| !h.is_empty() && !h.starts_with("http") && !h.starts_with("javascript:"))
        .collect()
}

/// Every file under `dir`, recursively.
fn files_under(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            out.extend(files_under(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// A step series at many ranks (issues 24 × 26): the series index does
/// not grow with the rank count (its strip shows blocks of ranks, every
/// rank's row in `ranks-K.js` parts), its verdict is one sentence with no
/// per-rank list, a step without full pages writes no per-rank file, and
/// every link of the report leads to a file that is there.
#[test]
fn a_many_rank_series_stays_small_and_every_link_resolves() {
    let d = TempDir::new().unwrap();
    let out300 = many_rank_series(d.path(), 300);
    let out600 = many_rank_series(d.path(), 600);
    let size = |out: &Path| std::fs::metadata(out.join("index.html")).unwrap().len();
    let (i300, i600) = (size(&out300), size(&out600));
    // The same number of strip rows (64 blocks at most) and steps: twice
    // the ranks may add a few digits to labels and titles, never rows.
    assert!(
        i600 <= i300 + i300 / 10,
        "index.html: {i300} bytes at 300 ranks, {i600} at 600"
    );
    assert!(i600 < 200_000, "{i600} bytes");
    let index = std::fs::read_to_string(out600.join("index.html")).unwrap();
    assert_eq!(
        index.matches("<tr><th>").count(),
        2 + 60,
        "the two tables' heads and 60 blocks of 10 ranks"
    );
    assert!(index.contains("id=rk-go"), "search by rank");
    assert!(out600.join("ranks-0.js").is_file() && out600.join("ranks-1.js").is_file());
    // The verdict: one sentence per rank group, no per-rank list.
    let s = summary(&out600);
    let verdict: Vec<&str> = s["verdict"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v.as_str().unwrap())
        .collect();
    let per_rank = verdict
        .iter()
        .find(|v| v.starts_with("first diverging step per rank: "))
        .unwrap();
    assert!(per_rank.len() < 300, "{per_rank}");
    assert!(!per_rank.contains("rank 7 at step"), "{per_rank}");
    // Ranks 1–4, 6–9, … part at step 2, every fifth at step 3 (a rank
    // whose 2 perturbed rows stay within tolerance parts later or never).
    assert!(
        per_rank.starts_with("first diverging step per rank: ranks 1–4, 6–9, "),
        "{per_rank}"
    );
    assert!(
        per_rank.contains(" ranks) at step 2; ranks 0, 5, 10, 15, 20, … ("),
        "{per_rank}"
    );
    assert!(per_rank.contains(" ranks) at step 3"), "{per_rank}");
    assert!(verdict.iter().all(|v| v.len() < 600), "{verdict:?}");
    for out in [&out300, &out600] {
        // Steps 1 and 3 have no full pages: no per-rank file (no result
        // page, no file of key indexes); step 2 has them.
        let rank_files = |step: u64| {
            std::fs::read_dir(out.join(format!("step_{step}")))
                .unwrap()
                .filter(|e| {
                    let n = e.as_ref().unwrap().file_name();
                    let n = n.to_str().unwrap();
                    (n.starts_with("rank") && !n.starts_with("ranks-")) || n.starts_with("keys-")
                })
                .count()
        };
        assert_eq!(rank_files(1), 0, "{}", out.display());
        assert_eq!(rank_files(3), 0, "{}", out.display());
        assert!(rank_files(2) > 0);
        // Every link resolves.
        let mut links = 0;
        for f in files_under(out) {
            for h in report_links(&f) {
                let target = f.parent().unwrap().join(&h);
                assert!(
                    target.is_file(),
                    "{} links to {h}, which is not there",
                    f.display()
                );
                links += 1;
            }
        }
        assert!(links > 1000, "{links} links checked");
    }
    // The strip of every rank links each cell to its step's report, and a
    // cell of the first diverging step (2) to the rank's first divergence
    // there: both are there.
    let part = std::fs::read_to_string(out600.join("ranks-1.js")).unwrap();
    assert!(
        part.starts_with("actdiffRanks(1, [{\"r\":512,\"c\":[[\"o\"],[\"g\","),
        "{}",
        &part[..200]
    );
    let link = part
        .split("\"step_2/rank512-page")
        .nth(1)
        .and_then(|t| t.split('"').next())
        .map(|t| format!("rank512-page{t}"))
        .expect("rank 512's step-2 cell links to its first divergence");
    let (page, anchor) = link.split_once('#').unwrap();
    assert!(anchor.starts_with("rank512-row"), "{link}");
    assert!(out600.join("step_2").join(page).is_file(), "{link}");
    assert!(index.contains("a.href = c[3] || (\"step_\" + steps[i] + \"/index.html\")"));
}

/// A merge of a step series into the folder of one of its parts is
/// refused before anything there is cleared or written, and the refusal
/// leaves that part whole (a new user's `-o` typo emptied a part's step
/// folders: 1,503 files down to 1).
#[test]
fn a_series_merge_into_one_of_its_parts_leaves_the_part_whole() {
    let d = TempDir::new().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    series(d.path(), 3, 2);
    let parts: Vec<_> = (0..2).map(|k| part(d.path(), &a, &b, k, 2)).collect();
    let before: Vec<(std::path::PathBuf, Vec<u8>)> = files_under(&parts[0])
        .into_iter()
        .map(|f| {
            let bytes = std::fs::read(&f).unwrap();
            (f, bytes)
        })
        .collect();
    assert!(before.len() > 3, "{before:?}");
    let r = merge_parts(&parts, &parts[0], 2);
    assert_eq!(
        r.stderr
            .matches("the report folder (-o) is one of the parts")
            .count(),
        1,
        "{}",
        r.stderr
    );
    let after: Vec<(std::path::PathBuf, Vec<u8>)> = files_under(&parts[0])
        .into_iter()
        .map(|f| {
            let bytes = std::fs::read(&f).unwrap();
            (f, bytes)
        })
        .collect();
    assert_eq!(before, after, "the part is unchanged");
    // It still merges.
    merge_parts(&parts, d.path().join("m"), 1);
}

/// A part of a sharded step series that failed is named by the merge with
/// its own error, wherever it stands among the parts: one that failed
/// before it knew its runs were step series (run 2 missing: only a
/// `part.json`), and one that failed on a step's logs (rank 0 with two
/// logs at step 2: its `series-part.json` says failed). A new user got
/// "series-part.json: not a part of a sharded step series" instead.
#[test]
fn a_failed_series_part_is_merged_as_its_own_error() {
    let d = TempDir::new().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    series(d.path(), 3, 2);
    let mut parts: Vec<_> = (0..3).map(|k| part(d.path(), &a, &b, k, 3)).collect();
    let compare = |k: u32, b: &Path, out: &Path| {
        compare_into([&a, b], &["-q", "--shard", &format!("{k}/3")], out, 2)
    };
    let missing = d.path().join("no-such-run");
    compare(1, &missing, &parts[1]);
    let merge = |parts: &[std::path::PathBuf]| merge_parts(parts, d.path().join("merged"), 2);
    let said = format!(
        "error: part 1/3 ({}): its compare failed: {}: no such file or folder",
        parts[1].display(),
        missing.display()
    );
    for order in [[0, 1, 2], [1, 0, 2]] {
        let given: Vec<_> = order.iter().map(|i| parts[*i].clone()).collect();
        let r = merge(&given);
        assert!(r.stderr.contains(&said), "{order:?}: {}", r.stderr);
        assert!(!r.stderr.contains("not a part"), "{order:?}: {}", r.stderr);
    }
    // Rank 0 of step 2 has two logs in run 2: every part fails on it.
    let b2 = d.path().join("b2");
    std::fs::create_dir_all(b2.join("step_2")).unwrap();
    for s in 1..=3 {
        let (from, to) = (b.join(format!("step_{s}")), b2.join(format!("step_{s}")));
        std::fs::create_dir_all(&to).unwrap();
        for r in 0..2 {
            let log = format!("rank_{r}_activations.log");
            std::fs::copy(from.join(&log), to.join(&log)).unwrap();
        }
    }
    let gz = b2.join("step_2/rank_0_activations.log.gz");
    std::fs::write(&gz, b"").unwrap();
    parts[2] = d.path().join("p2-two-logs");
    compare(2, &b2, &parts[2]);
    let r = merge(&parts);
    assert!(
        r.stderr.contains(&format!(
            "error: part 2/3 ({}): its compare failed: step 2: ",
            parts[2].display()
        )) && r.stderr.contains("rank 0 has two logs"),
        "{}",
        r.stderr
    );
    assert!(r.stderr.contains(&said), "{}", r.stderr);
    assert!(!r.stderr.contains("not a part"), "{}", r.stderr);
}

/// Merge problems a new user found said once per step or too long: parts
/// of another series' folder are one line for every step, naming the
/// runs' folders (not one per step, naming its step folder); step folders
/// given as parts are one line naming the parts to merge (not each part's
/// 30 ranks, twice); a folder that is not there says so.
#[test]
fn series_merge_problems_are_said_once_and_short() {
    let d = TempDir::new().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    gen_into(&["--ops", "20", "--ranks", "30", "--steps", "3"], &a, &b);
    let parts: Vec<_> = (0..2).map(|k| part(d.path(), &a, &b, k, 2)).collect();
    let errors = |r: &Run| -> Vec<String> {
        r.stderr
            .lines()
            .filter(|l| l.starts_with("error: ") && !l.starts_with("error: nothing merged"))
            .map(str::to_string)
            .collect()
    };
    let merge = |given: &[std::path::PathBuf]| merge_parts(given, d.path().join("merged"), 2);
    // Part 1 of a copy of run 1 in another folder.
    let c = d.path().join("c");
    std::fs::create_dir_all(&c).unwrap();
    for s in 1..=3 {
        let step = format!("step_{s}");
        std::fs::create_dir_all(c.join(&step)).unwrap();
        for e in std::fs::read_dir(a.join(&step)).unwrap() {
            let e = e.unwrap();
            std::fs::copy(e.path(), c.join(&step).join(e.file_name())).unwrap();
        }
    }
    let other = d.path().join("other-1");
    compare_into([&c, &b], &["-q", "--shard", "1/2"], &other, 0);
    let r = merge(&[parts[0].clone(), other.clone()]);
    assert_eq!(
        errors(&r),
        vec![format!(
            "error: steps 1-3: part 0/2 ({}) and part 1/2 ({}): different inputs: run1 is {} in one and {} in the other",
            parts[0].display(),
            other.display(),
            a.display(),
            c.display()
        )],
        "{}",
        r.stderr
    );
    let steps: Vec<_> = parts.iter().map(|p| p.join("step_2")).collect();
    let r = merge(&steps);
    assert_eq!(
        errors(&r),
        vec![format!(
            "error: {}, {}: step folders of the parts of a sharded step series; merge the parts themselves ({}, {})",
            steps[0].display(),
            steps[1].display(),
            parts[0].display(),
            parts[1].display()
        )],
        "{}",
        r.stderr
    );
    let gone = d.path().join("p2");
    for given in [vec![parts[0].clone(), gone.clone()], vec![gone.clone()]] {
        let r = merge(&given);
        assert!(
            errors(&r).contains(&format!(
                "error: {}: no such file or folder",
                gone.display()
            )),
            "{}",
            r.stderr
        );
        assert!(!r.stderr.contains("not a part"), "{}", r.stderr);
    }
}

/// 2 ranks × 3 steps over 6 parts (one (step, rank) unit each): every
/// part's unit is its own first divergence, so each wrote full pages, and
/// a merged later step had pages while its page warned it had none. The
/// merge now writes what one compare writes: full pages for the first
/// diverging step only, every step folder's files byte for byte.
#[test]
fn a_merge_of_one_unit_parts_has_the_pages_one_compare_has() {
    let d = TempDir::new().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    gen_into(&["--ops", "200", "--ranks", "2", "--steps", "3"], &a, &b);
    let full = d.path().join("full");
    compare_into([&a, &b], &["-q"], &full, 1);
    let parts: Vec<_> = (0..6).map(|k| part(d.path(), &a, &b, k, 6)).collect();
    let out = d.path().join("merged");
    merge_parts(&parts, &out, 1);
    for s in 1..=3 {
        let step = format!("step_{s}");
        let (want, got) = (files_of(&full.join(&step)), files_of(&out.join(&step)));
        assert_eq!(
            want.keys().collect::<Vec<_>>(),
            got.keys().collect::<Vec<_>>(),
            "{step}: the files of one compare"
        );
        for (name, bytes) in &want {
            assert!(got[name] == *bytes, "{step}/{name} differs");
        }
    }
    assert!(files_of(&full.join("step_2")).len() < files_of(&full.join("step_1")).len());
}

/// A dump folder with rank logs directly in it beside its `step_S/`
/// folders (an earlier single-step capture into the same folder): the
/// series is compared and the top-level logs are named as ignored, with
/// their count, on stderr and in summary.json, merged or not (a new user
/// found them ignored without a word).
#[test]
fn rank_logs_beside_step_folders_are_named_as_ignored() {
    let d = TempDir::new().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    series(d.path(), 2, 2);
    for r in 0..2 {
        let log = format!("rank_{r}_activations.log");
        std::fs::copy(a.join("step_1").join(&log), a.join(&log)).unwrap();
    }
    let said = format!(
        "warning: {}: 2 rank logs directly in the folder are ignored: it holds step_S folders",
        a.display()
    );
    let full = d.path().join("full");
    let r = compare_into([&a, &b], &["-q"], &full, 1);
    assert_eq!(r.stderr.matches(&said).count(), 1, "{}", r.stderr);
    let in_summary = |dir: &Path| {
        summary(dir)["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .any(|w| {
                w.as_str()
                    .unwrap()
                    .contains("2 rank logs directly in the folder are ignored")
            })
    };
    assert!(in_summary(&full));
    let parts: Vec<_> = (0..2).map(|k| part(d.path(), &a, &b, k, 2)).collect();
    let out = d.path().join("merged");
    let r = merge_parts(&parts, &out, 1);
    assert_eq!(r.stderr.matches(&said).count(), 1, "{}", r.stderr);
    assert!(in_summary(&out));
    // b has none: no warning names it.
    assert!(
        !r.stderr.contains(&format!("{}: ", b.display())),
        "{}",
        r.stderr
    );
}

/// The parts of a step series compared with relative paths merge from
/// another folder (each step's `part.json` records its inputs absolute),
/// to the answer the parts' own folder gives.
#[test]
fn series_parts_with_relative_inputs_merge_from_another_folder() {
    let d = TempDir::new().unwrap();
    series(d.path(), 2, 2);
    let (x, deep) = (d.path().join("x"), d.path().join("y/z"));
    std::fs::create_dir_all(&x).unwrap();
    std::fs::create_dir_all(&deep).unwrap();
    for k in 0..2 {
        exec(
            support::actdiff()
                .current_dir(&x)
                .args(["compare", "../a", "../b", "-q", "-o", &format!("p{k}")])
                .args(["--shard", &format!("{k}/2")]),
            0,
        );
    }
    let merge = |cwd: &Path, parts: [&str; 2]| {
        exec(
            support::actdiff()
                .current_dir(cwd)
                .arg("merge")
                .args(parts)
                .args(["-q", "-o", "out"]),
            1,
        );
        summary(&cwd.join("out"))["first_diverging_step"].clone()
    };
    let here = merge(&x, ["p0", "p1"]);
    assert_eq!(here, 2);
    assert_eq!(merge(&deep, ["../../x/p0", "../../x/p1"]), here);
}

/// A rank one run lacks at one step gates that step, as a rank only one
/// run has gates a compare: that step is the first diverging one, the
/// rank's own first diverging step, and the sentence says why. A new
/// user's series with rank 1 missing from run 1's step 2 was said to
/// "agree from step 1 through step 3" (step 2 gated on its own index,
/// exit 1). Sharded and merged, the same.
#[test]
fn a_rank_missing_at_one_step_makes_that_step_diverge_first() {
    let d = TempDir::new().unwrap();
    series(d.path(), 4, 3);
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    std::fs::remove_file(a.join("step_2/rank_1_activations.log")).unwrap();
    let out = d.path().join("rep");
    let r = exec(
        support::actdiff()
            .arg("compare")
            .args([&a, &b])
            .arg("-o")
            .arg(&out),
        1,
    );
    assert!(
        r.stdout
            .contains("the runs agree at step 1; step 2 diverges first: rank 1 only in b"),
        "{}",
        r.stdout
    );
    let s = summary(&out);
    assert_eq!(s["first_diverging_step"], 2);
    // (series() makes rank 0 agree at step 3, its first step from 3.)
    let by_rank = s["first_diverging_step_by_rank"].clone();
    assert_eq!(
        by_rank,
        serde_json::json!([{"rank": 0, "step": 4}, {"rank": 1, "step": 2}]),
        "{by_rank}"
    );
    let parts: Vec<_> = (0..2).map(|k| d.path().join(format!("p{k}"))).collect();
    for (k, p) in parts.iter().enumerate() {
        let shard = format!("{k}/2");
        compare_into([&a, &b], &["--shard", &shard, "-q"], p, 0);
    }
    let merged = d.path().join("merged");
    merge_parts(&parts, &merged, 1);
    let m = summary(&merged);
    assert_eq!(m["first_diverging_step"], 2);
    assert_eq!(m["first_diverging_step_by_rank"], by_rank);
    assert_eq!(m["verdict"], s["verdict"]);
}

/// A part of a one-step compare merged with parts of a step series is
/// named as what it is, in either order. A new user got
/// "p0/series-part.json: not a part of a sharded step series", a file
/// that does not exist.
#[test]
fn a_one_step_part_among_series_parts_is_named_as_one() {
    let d = TempDir::new().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    series(d.path(), 2, 2);
    let series_part = part(d.path(), &a, &b, 0, 2);
    let one = d.path().join("one");
    compare_into(
        [a.join("step_1"), b.join("step_1")],
        &["-q", "--shard", "1/2"],
        &one,
        0,
    );
    assert!(one.join("part.json").is_file() && !one.join("series-part.json").exists());
    for given in [[&one, &series_part], [&series_part, &one]] {
        let r = merge_parts(given, d.path().join("merged"), 2);
        let said = format!(
            "error: {}: a part of a one-step compare (it has part.json, no series-part.json), merged with parts of a step series",
            one.display()
        );
        assert!(r.stderr.contains(&said), "{}", r.stderr);
        assert!(
            !r.stderr.contains("series-part.json: not a part"),
            "{}",
            r.stderr
        );
    }
}

/// A step folder that cannot be read is a step whose logs cannot be read
/// (an input error, exit 2), not a step the job never reached: a new
/// user's series with step 4 unreadable in both runs passed, "no
/// divergence beyond tolerance over 7 steps", exit 0 and a green JUnit.
/// As root (CI) the compare runs as user `nobody` (`setpriv`), whom the
/// folder's mode 000 keeps out.
#[test]
fn an_unreadable_step_folder_is_an_input_error_not_a_skipped_step() {
    use std::os::unix::fs::PermissionsExt;
    let d = TempDir::new().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    series(d.path(), 3, 99);
    let mode =
        |p: &Path, m: u32| std::fs::set_permissions(p, std::fs::Permissions::from_mode(m)).unwrap();
    mode(d.path(), 0o755);
    let out = d.path().join("out");
    std::fs::create_dir(&out).unwrap();
    mode(&out, 0o777);
    for run in [&a, &b] {
        mode(&run.join("step_2"), 0o000);
    }
    let mut cmd = if unsafe { libc::geteuid() } == 0 {
        let mut c = std::process::Command::new("setpriv");
        c.args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(env!("CARGO_BIN_EXE_actdiff"));
        c
    } else {
        support::actdiff()
    };
    let r = exec(cmd.arg("compare").args([&a, &b]).arg("-o").arg(&out), 2);
    for run in [&a, &b] {
        mode(&run.join("step_2"), 0o755);
    }
    assert!(
        r.stderr.contains(&format!(
            "{}: cannot read this folder: Permission denied",
            a.join("step_2").display()
        )),
        "{}",
        r.stderr
    );
    assert!(
        !r.stderr.contains("no rank_N_activations.log in it"),
        "{}",
        r.stderr
    );
    assert!(
        !r.stdout.contains("no divergence beyond tolerance"),
        "{}",
        r.stdout
    );
}

/// What a new user's trial found a series to say wrong, each fixed:
/// - a rank one run lacks at one step is a `step S rank R` JUnit case and
///   its step's `ranks_only1`, not "rank 1 is only in a" for the run;
/// - a rank that could not be compared at a step is in `ranks_failed`
///   with its step, and a `step S rank R` JUnit error;
/// - the agreeing steps before the first diverging one are listed when
///   a step between them did not agree ("at steps 1, 3"), not spanned
///   ("from step 1 through step 3");
/// - a log truncated at a step is no first divergence there (the step
///   exits 3; the rows past its end are not compared).
#[test]
fn a_series_says_per_step_what_one_sided_failed_and_cut_ranks_are() {
    let d = TempDir::new().unwrap();
    series(d.path(), 5, 5);
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    let log = |run: &Path, s: u32, r: u32| run.join(format!("step_{s}/rank_{r}_activations.log"));
    std::fs::remove_file(log(&b, 4, 1)).unwrap();
    std::fs::write(log(&b, 2, 1), b"").unwrap();
    let cut = std::fs::read(log(&b, 3, 0)).unwrap();
    std::fs::write(log(&b, 3, 0), &cut[..cut.len() / 3]).unwrap();
    let junit = d.path().join("j.xml");
    let r = compare_into(
        [&a, &b],
        &["--junit", junit.to_str().unwrap()],
        d.path().join("o"),
        2,
    );
    let s = summary(&d.path().join("o"));
    assert_eq!(s["first_diverging_step"], 4, "{}", r.stdout);
    // Steps 2 (rank 1's log empty) and 3 (rank 0's cut short) could not
    // be judged in full: the runs may part there first.
    assert!(
        r.stdout.contains("the runs agree at step 1; step 4 diverges first of the steps judged (steps 2-3 before it could not be compared, so the runs may part there first): rank 1 only in a"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("  step 3: not compared (incomplete input)"),
        "{}",
        r.stdout
    );
    let step4 = &s["step_results"].as_array().unwrap()[3];
    assert_eq!(step4["ranks_only1"], serde_json::json!([1]));
    assert_eq!(s["ranks_failed"][0]["step"], 2);
    assert_eq!(s["ranks_failed"][0]["rank"], 1);
    let x = std::fs::read_to_string(&junit).unwrap();
    assert!(
        x.contains("<failure message=\"step 4: rank 1 is only in a\""),
        "{x}"
    );
    assert!(!x.contains("name=\"rank 1\""), "{x}");
    assert!(
        x.contains("<error message=\"step 2: rank 1: not compared: "),
        "{x}"
    );
    // The series' terminal and index give the exit status, and its index
    // lists the warnings (a step's, with its step) as summary.json does.
    assert!(r.stdout.contains("(exit status 2)"), "{}", r.stdout);
    let index = std::fs::read_to_string(d.path().join("o/index.html")).unwrap();
    assert!(index.contains("<div class=status>exit status 2</div>"));
    assert!(
        index.contains("<h3>Warnings</h3><ul><li>step 3: ") && index.contains("parsed 100"),
        "{index}"
    );
    // Rank 0's first diverging step is its own (5), not the cut step 3.
    let by_rank = &s["first_diverging_step_by_rank"];
    assert!(
        by_rank.as_array().unwrap().iter().all(|r| r["step"] != 3),
        "{by_rank}"
    );
}

/// A step series compared with itself is said, as one log is.
#[test]
fn a_series_compared_with_itself_is_said() {
    let d = TempDir::new().unwrap();
    series(d.path(), 2, 9);
    let a = d.path().join("a");
    let r = compare_into([&a, &a], &["-q"], d.path().join("o"), 0);
    assert!(
        r.stderr.contains("run1 and run2 are the same: ")
            && r.stderr.contains("every row matches itself"),
        "{}",
        r.stderr
    );
    assert_eq!(r.stderr.matches("are the same").count(), 1, "{}", r.stderr);
}

/// A log whose `Step:` header names another step than its folder is said
/// (a folder renamed, a log copied into the wrong step); it is compared as
/// its folder's step. A new user's `step_1` holding `Step: 3` logs passed
/// without a word.
#[test]
fn a_log_whose_step_header_is_another_step_is_said() {
    let d = TempDir::new().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    gen_into(
        &[
            "--ops",
            "50",
            "--ranks",
            "1",
            "--steps",
            "2",
            "--diverge-at",
            "9",
        ],
        &a,
        &b,
    );
    let log = b.join("step_1/rank_0_activations.log");
    let text = std::fs::read_to_string(&log).unwrap();
    assert!(text.contains("\nStep: 1\n"));
    std::fs::write(&log, text.replace("\nStep: 1\n", "\nStep: 3\n")).unwrap();
    let r = compare_into([&a, &b], &["-q"], d.path().join("o"), 0);
    assert!(
        r.stderr.contains(&format!(
            "warning: step 1: {}: its header says Step: 3, and it is in the folder of step 1",
            log.display()
        )),
        "{}",
        r.stderr
    );
    assert_eq!(
        r.stderr.matches("its header says").count(),
        1,
        "{}",
        r.stderr
    );
}

/// A rank whose capture did not finish (the agent's `.body.tmp` is there,
/// its log is not: the process was killed mid-step) is said where its log
/// is missing, at that step, once; a one-step folder says it too. A new
/// user's killed run left the file with nothing said of it.
#[test]
fn a_capture_that_did_not_finish_is_said_where_its_log_is_missing() {
    let d = TempDir::new().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    series(d.path(), 2, 9);
    let log = b.join("step_2/rank_1_activations.log");
    let tmp = b.join("step_2/rank_1_activations.log.body.tmp");
    std::fs::rename(&log, &tmp).unwrap();
    let said = format!(
        "{}: a capture that did not finish (its process stopped before it wrote the rank's log): that rank has no log here",
        tmp.display()
    );
    let r = compare_into([&a, &b], &["-q"], d.path().join("o"), 1);
    assert!(
        r.stderr.contains(&format!("warning: step 2: {said}")),
        "{}",
        r.stderr
    );
    assert_eq!(
        r.stderr.matches("did not finish").count(),
        1,
        "{}",
        r.stderr
    );
    // One step's folder alone.
    let r = compare_into(
        [a.join("step_2"), b.join("step_2")],
        &["-q"],
        d.path().join("p"),
        1,
    );
    assert!(
        r.stderr.contains(&format!("warning: {said}")),
        "{}",
        r.stderr
    );
    // A log that finished next to a stale temporary file is no warning.
    std::fs::copy(a.join("step_2/rank_1_activations.log"), &log).unwrap();
    let r = compare_into([&a, &b], &["-q"], d.path().join("q"), 0);
    assert!(!r.stderr.contains("did not finish"), "{}", r.stderr);
    // A temporary file newer than the log: a later capture (a re-capture
    // into the same folder) did not finish, and the log is an earlier
    // capture's (trial 11).
    std::thread::sleep(std::time::Duration::from_millis(20));
    std::fs::write(&tmp, b"").unwrap();
    let r = compare_into([&a, &b], &["-q"], d.path().join("s"), 0);
    assert!(
        r.stderr
            .contains("the rank's log beside it is an earlier capture's, not this one's"),
        "{}",
        r.stderr
    );
}

/// `--bitwise` on logs printed with 7 digits (the reference's) compares the
/// printed values: a new user's perturbation below the 7th digit was
/// named downstream with no word. A warning says so, once for the whole
/// series (3 steps × 2 ranks), with the steps it concerns; a step
/// series' warnings are each said once with their steps.
#[test]
fn bitwise_on_printed_logs_is_said_once_for_a_series() {
    let d = TempDir::new().unwrap();
    series(d.path(), 3, 9);
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    let r = compare_into([&a, &b], &["-q", "--bitwise"], d.path().join("o"), 0);
    assert_eq!(
        r.stderr
            .matches("warning: steps 1-3: --bitwise on logs printed with 7 digits")
            .count(),
        1,
        "{}",
        r.stderr
    );
    let r = compare_into([&a, &b], &["-q"], d.path().join("p"), 0);
    assert!(!r.stderr.contains("--bitwise"), "{}", r.stderr);
}

/// A step that could not be compared (here run 2's step 2 is another
/// capture level: an input error) before the first step found diverging
/// leaves the first diverging step unknown: the verdict says the runs may
/// part there first, and `summary.json` lists it in `steps_not_compared`
/// (trial 10: "the runs agree from step 1 through step 1; step 3 diverges
/// first" was said with step 2 never compared).
#[test]
fn a_step_not_compared_before_the_first_diverging_one_is_said() {
    let d = TempDir::new().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    series(d.path(), 4, 3);
    for rank in 0..2 {
        let log = b.join(format!("step_2/rank_{rank}_activations.log"));
        let text = std::fs::read_to_string(&log).unwrap();
        let (first, rest) = text.split_once('\n').unwrap();
        std::fs::write(&log, format!("{first}\nLevel: modules\n{rest}")).unwrap();
    }
    let out = d.path().join("out");
    let r = compare_into([&a, &b], &[], &out, 2);
    let s = summary(&out);
    assert_eq!(s["steps_not_compared"], serde_json::json!([2]), "{s:#}");
    assert_eq!(s["first_diverging_step"], 3);
    let said = "step 3 diverges first of the steps judged (step 2 before it could not be compared, so the runs may part there first)";
    assert!(r.stdout.contains(said), "{}", r.stdout);
    assert!(
        r.stdout
            .contains("3 steps compared (1 agree); 1 not compared"),
        "{}",
        r.stdout
    );
    let index = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(index.contains("could not be compared, so the runs may part there first"));
    // A step one run lacks (its capture did not finish) is not judged
    // either (trial 11: "step 3 diverges first" was said unqualified).
    std::fs::remove_dir_all(b.join("step_2")).unwrap();
    let out = d.path().join("out2");
    let r = compare_into([&a, &b], &[], &out, 1);
    assert!(r.stdout.contains(said), "{}", r.stdout);
    assert_eq!(summary(&out)["steps_only1"], serde_json::json!([2]));
}

/// A step whose log is cut short (exit 3) before the first diverging step:
/// the merge of a sharded series names the same first diverging step as
/// one compare, not the cut step (trial 11: the merge said "step 2
/// diverges first" at the rows the truncation lost, one compare step 3).
#[test]
fn a_merge_does_not_take_a_cut_step_for_the_first_diverging_one() {
    let d = TempDir::new().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    series(d.path(), 4, 3);
    let log = b.join("step_2/rank_0_activations.log");
    let text = std::fs::read(&log).unwrap();
    std::fs::write(&log, &text[..text.len() / 3]).unwrap();
    let full = d.path().join("full");
    compare_into([&a, &b], &["-q"], &full, 3);
    let parts: Vec<_> = (0..2).map(|k| part(d.path(), &a, &b, k, 2)).collect();
    let merged = d.path().join("merged");
    merge_parts(&parts, &merged, 3);
    let (f, m) = (summary(&full), summary(&merged));
    assert_eq!(f["first_diverging_step"], 3, "{f:#}");
    for k in ["first_diverging_step", "steps_not_compared", "verdict"] {
        assert_eq!(f[k], m[k], "{k}");
    }
}

/// Under `--allow-incomplete` a cut-short log's lost rows are judged (one
/// run only, gating): the series' verdict says which step's input was
/// incomplete, so its "first diverging step" is read as what it is
/// (trial 11: nothing on stdout named the truncation).
#[test]
fn allow_incomplete_on_a_series_names_the_cut_step() {
    let d = TempDir::new().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    series(d.path(), 3, 99);
    let log = b.join("step_2/rank_0_activations.log");
    let text = std::fs::read(&log).unwrap();
    std::fs::write(&log, &text[..text.len() / 3]).unwrap();
    let r = compare_into([&a, &b], &["--allow-incomplete"], d.path().join("o"), 1);
    assert!(
        r.stdout.contains("step 2: incomplete input: rank 0 run2"),
        "{}",
        r.stdout
    );
}

/// A dtype change at some (step, rank) is said once by the series'
/// terminal (trial 12: a single-step compare said "dtype changed in 11
/// paired rows", the series said nothing).
#[test]
fn a_series_says_where_a_dtype_changed() {
    let d = TempDir::new().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    series(d.path(), 2, 99);
    for rank in 0..2 {
        let log = b.join(format!("step_2/rank_{rank}_activations.log"));
        let text = std::fs::read_to_string(&log).unwrap();
        std::fs::write(&log, text.replace("torch.float32", "torch.bfloat16")).unwrap();
    }
    let r = compare_into([&a, &b], &[], d.path().join("o"), 1);
    assert!(
        r.stdout.contains("step 2 rank 0: dtype changed in ")
            && r.stdout.contains("(and in 1 more (step, rank) unit)"),
        "{}",
        r.stdout
    );
}

/// Every step of a series refused for the same kind of input error (one
/// run's logs empty): the steps line names them once, "4 not compared:
/// steps 1-4 (input errors, on stderr)", and no line a step repeats it
/// ("step 1: not compared (input error)", "step 1: input error: 1 error,
/// printed on stderr": three lines a step for one mistake, new-user
/// trial 17 L4); the errors themselves are on stderr, one a step.
#[test]
fn a_series_refused_step_by_step_says_so_once() {
    let d = TempDir::new().unwrap();
    series(d.path(), 4, 5);
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    for s in 1..=4 {
        for r in 0..2 {
            std::fs::write(b.join(format!("step_{s}/rank_{r}_activations.log")), b"").unwrap();
        }
    }
    let r = compare_into([&a, &b], &[], d.path().join("o"), 2);
    assert!(
        r.stdout.contains(
            "0 steps compared (0 agree); 4 not compared: steps 1-4 (input errors, on stderr)"
        ),
        "{}",
        r.stdout
    );
    for s in 1..=4 {
        assert!(!r.stdout.contains(&format!("step {s}: ")), "{}", r.stdout);
        assert!(r.stderr.contains(&format!("step {s}: ")), "{}", r.stderr);
    }
}

/// The phase lines under a series' answer are the named rank's: rank 1
/// diverges first, rank 0 only receives the change through the gradient
/// collective (its parameters after the optimizer differ, nothing before
/// them): rank 1's lines are printed, not rank 0's (trial 20 F3).
#[test]
fn the_series_phase_lines_are_the_named_ranks() {
    let d = TempDir::new().unwrap();
    let log =
        |output: &str, weight: &str| support::modules_log("World size: 2\n", output, "2.0", weight);
    for (run, step, rank, output, weight) in [
        ("a", 1, 0, "1.0", "3.0"),
        ("a", 1, 1, "1.0", "3.0"),
        ("b", 1, 0, "1.0", "3.0"),
        ("b", 1, 1, "1.0", "3.0"),
        ("a", 2, 0, "1.0", "3.0"),
        ("a", 2, 1, "1.0", "3.0"),
        ("b", 2, 0, "1.0", "4.0"),
        ("b", 2, 1, "1.5", "4.0"),
    ] {
        let dir = d.path().join(format!("{run}/step_{step}"));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(
            dir.join(format!("rank_{rank}_activations.log")),
            log(output, weight),
        )
        .unwrap();
    }
    let r = compare_into(
        [d.path().join("a"), d.path().join("b")],
        &[],
        d.path().join("rep"),
        1,
    );
    assert!(
        r.stdout
            .contains("rank 1 diverges first at `lin/op_0_output`"),
        "{}",
        r.stdout
    );
    assert!(
        r.stdout
            .contains("step 2 rank 1: first divergence (forward): lin/op_0_output"),
        "{}",
        r.stdout
    );
    assert!(
        !r.stdout.contains("step 2 rank 0: first divergence"),
        "{}",
        r.stdout
    );
    // The answer opens the summary, after the runs' line (trial 20 F4).
    let second = r.stdout.lines().nth(1).unwrap_or_default();
    assert!(
        second.starts_with("the runs agree at step 1; step 2 diverges first: rank 1"),
        "{}",
        r.stdout
    );
    assert_eq!(r.stdout.matches("step 2 diverges first").count(), 1);
    // Each step's report links back to the series' index (trial 22 L2).
    let step = std::fs::read_to_string(d.path().join("rep/step_2/index.html")).unwrap();
    assert!(step.contains("<a href=\"../index.html\">&larr; the step series</a>"));
    assert!(d.path().join("rep/step_2/../index.html").is_file());
}

/// A merge of a step series' parts where one part's compare did not
/// finish (killed: its step folders only) or has not started (an empty
/// folder) names that part's folder and why, not "not a part of a sharded
/// step series" (trial 22 M2).
#[test]
fn a_series_merge_names_a_part_that_did_not_finish() {
    let d = TempDir::new().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    series(d.path(), 3, 2);
    let p0 = part(d.path(), &a, &b, 0, 2);
    let killed = d.path().join("p1");
    std::fs::create_dir_all(killed.join("step_1")).unwrap();
    merge_parts([&p0, &killed], d.path().join("m1"), 2).stderr_has(&format!(
        "{}: a part of a step series whose compare did not finish (interrupted, or still running)",
        killed.display()
    ));
    let empty = d.path().join("p2");
    std::fs::create_dir_all(&empty).unwrap();
    merge_parts([&p0, &empty], d.path().join("m2"), 2).stderr_has(&format!(
        "{}: an empty folder: a part whose compare has not run yet",
        empty.display()
    ));
}

/// A step whose only gating rows differ in their digests alone (every
/// printed value equal) is shaded lightest in the strip and says why,
/// not darkest as a difference without a number was (trial 22 M5).
#[test]
fn a_digest_only_step_is_shaded_lightest() {
    let d = TempDir::new().unwrap();
    let log = |digest: &str| {
        format!(
            "Total captured activations: 1\nPrecision: full\nStep: 1\n{}\n\n[m/op_0_nll_loss_forward]\n  Shape: torch.Size([]), Dtype: torch.float32\n  L2 norm: 1.5e+00\n  Min: 1.5e+00\n  Max: 1.5e+00\n  Mean: 1.5e+00\n  Output hash: 1.5e+00\n  Input hashes: 2.5e+00\n  Output digest: 00000000000000aa\n  Input digests: {digest}\n\n",
            "=".repeat(80)
        )
    };
    for (run, digest) in [("a", "00000000000000bb"), ("b", "00000000000000cc")] {
        let dir = d.path().join(run).join("step_1");
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("rank_0_activations.log"), log(digest)).unwrap();
    }
    let out = d.path().join("rep");
    compare_into([d.path().join("a"), d.path().join("b")], &["-q"], &out, 1);
    let index = std::fs::read_to_string(out.join("index.html")).unwrap();
    assert!(
        index.contains("<td class=gate style=\"background:rgb(250,190,190)\"><a href=\"step_1/rank0-page1.html#rank0-row0\" title=\"step 1, rank 0: 1 gating row; only their digests differ, below every printed digit\""),
        "{index}"
    );
}

/// Two folders of one step in a run (`step_03` beside `step_3`): which
/// is the step's is a guess, and the compare took one and dropped the
/// other silently (trial 25: a diverging `step_03` beside an agreeing
/// `step_3` exited 0, "3 steps compared (3 agree)"). It is an input
/// error naming both, as two logs of one rank are.
#[test]
fn two_folders_of_one_step_are_an_input_error() {
    let d = TempDir::new().unwrap();
    series(d.path(), 3, 9);
    let a = d.path().join("a");
    std::fs::create_dir(a.join("step_03")).unwrap();
    std::fs::copy(
        a.join("step_3/rank_0_activations.log"),
        a.join("step_03/rank_0_activations.log"),
    )
    .unwrap();
    let out = d.path().join("rep");
    let r = Run::of(
        support::actdiff()
            .arg("compare")
            .arg(&a)
            .arg(d.path().join("b"))
            .arg("-o")
            .arg(&out),
        "",
    );
    r.expect(2);
    let said = format!(
        "{}: step 3 has two folders, step_03 and step_3; keep one",
        a.display()
    );
    assert!(r.stderr.contains(&said), "{said} in {}", r.stderr);
}

/// Incomplete input after the first diverging step (a rank that stopped
/// capturing at the divergence, `on_divergence="stop-capturing"`, or a
/// later log cut short) cannot change where the runs part: the series
/// exits 1, and a line says why, not 3 (trial 29: "a rank that crashed").
/// The same cut before the first diverging step is still exit 3.
#[test]
fn incomplete_input_after_the_first_diverging_step_does_not_make_it_3() {
    let t = tempfile::tempdir().unwrap();
    let (a, b) = (t.path().join("a"), t.path().join("b"));
    let opts = [
        "--ops",
        "100",
        "--ranks",
        "2",
        "--seed",
        "5",
        "--perturb",
        "0.01",
    ];
    gen_into(
        &[&opts[..], &["--steps", "4", "--diverge-at", "3"]].concat(),
        &a,
        &b,
    );
    let cut = |step: u64| {
        let log = b.join(format!("step_{step}/rank_1_activations.log"));
        let text = std::fs::read_to_string(&log).unwrap();
        std::fs::write(&log, &text[..text.len() / 2]).unwrap();
    };
    cut(4);
    let r = compare_into([&a, &b], &[], t.path().join("out"), 1);
    assert!(
        r.stdout.contains("step 4 after step 3, where the runs part, has incomplete input, which does not change the first diverging step"),
        "{}",
        r.stdout
    );
    let s = summary(&t.path().join("out"));
    assert_eq!(
        (
            s["first_diverging_step"].as_u64(),
            s["exit_status"].as_i64()
        ),
        (Some(3), Some(1))
    );
    cut(2);
    compare_into([&a, &b], &[], t.path().join("out2"), 3);
}

/// At `level=modules`, a first diverging step whose parameters differ
/// after the optimizer step while its records before agree is worded by
/// what "agree" means: exactly (digests equal): "the update itself
/// differs"; within the tolerance, not exactly (a gradient's digest
/// differs, its hash within 1e-8): the optimizer may magnify the
/// gradients' small differences (trial 63: eager against inductor, AdamW's
/// first step); without digests: by hashes and printed digits, blind to a
/// reordered batch (trial 64: a permuted batch at default precision read
/// as "the update itself differs").
#[test]
fn an_update_after_records_that_agree_says_how_they_agree() {
    // Digests after each Output hash line, in block order.
    let with_digests = |log: String, d: [&str; 3]| {
        let mut out = String::new();
        let mut i = 0;
        for line in log.split_inclusive('\n') {
            out.push_str(line);
            if line.starts_with("  Output hash:") {
                out.push_str(&format!("  Output digest: {}\n", d[i]));
                i += 1;
            }
        }
        out
    };
    let (d0, d1, d2, d3) = (
        "00000000000000a0",
        "00000000000000a1",
        "00000000000000a2",
        "00000000000000a3",
    );
    let exact = "step 1's forward outputs and gradients agree, and its parameters differ after the optimizer step: the update itself differs";
    let within = "step 1's forward outputs and gradients agree within the tolerance, not exactly, and its parameters differ after the optimizer step: either the optimizer magnifies the gradients' small differences";
    let hashes = "step 1's forward outputs and gradients agree by their hashes and printed statistics (the logs have no digests: a reordering of the same values, such as a permuted batch, is not seen), and its parameters differ after the optimizer step: either the batch was reordered";
    let a = support::modules_log("", "1.0", "2.0", "3.0");
    let cases = [
        (
            a.clone(),
            support::modules_log("", "1.0", "2.00000000001", "3.5"),
            hashes,
            false,
        ),
        (
            with_digests(a.clone(), [d0, d1, d2]),
            with_digests(support::modules_log("", "1.0", "2.0", "3.5"), [d0, d1, d3]),
            exact,
            false,
        ),
        (
            with_digests(a.clone(), [d0, d1, d2]),
            with_digests(
                support::modules_log("", "1.0", "2.00000000001", "3.5"),
                [d0, d3, d3],
            ),
            within,
            true,
        ),
    ];
    for (i, (log_a, log_b, said, inexact)) in cases.into_iter().enumerate() {
        let d = TempDir::new().unwrap();
        for (run, log) in [("a", &log_a), ("b", &log_b)] {
            support::write(
                d.path(),
                &format!("{run}/step_1/rank_0_activations.log"),
                log.as_bytes(),
            );
        }
        let r = compare_into(
            [d.path().join("a"), d.path().join("b")],
            &[],
            d.path().join("rep"),
            1,
        );
        assert!(r.stdout.contains(said), "case {i}: {}", r.stdout);
        for other in [exact, within, hashes] {
            assert!(
                other == said || !r.stdout.contains(other),
                "case {i}: {}",
                r.stdout
            );
        }
        let s = summary(&d.path().join("rep"));
        assert_eq!(
            s["ranks"][0]
                .get("inexact_before_optimizer")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            inexact || i == 0,
            "case {i}: {}",
            s["ranks"][0]
        );
    }
}

/// A step series whose first diverging step is named by an origin whose
/// inputs' hashes agree (logs without digests) says what hashes cannot
/// see among its verdict lines, as a single compare does (trial 64: a
/// permuted batch at the default precision named the loss, and neither
/// the terminal nor the series index said a hash is blind to order).
#[test]
fn a_series_named_by_hashes_says_what_they_cannot_see() {
    let d = TempDir::new().unwrap();
    let log = |out: &str| {
        format!(
            "Total captured activations: 1\nExcluded ops dispatched: (none)\n{}\n\n[m/op_0_mul]\n  Shape: torch.Size([4, 8]), Dtype: torch.float32\n  Output hash: {out}\n  Input hashes: 5.0\n\n",
            "=".repeat(80)
        )
    };
    for (run, step, out) in [
        ("a", 1, "16.0"),
        ("b", 1, "16.0"),
        ("a", 2, "16.0"),
        ("b", 2, "15.0"),
    ] {
        support::write(
            d.path(),
            &format!("{run}/step_{step}/rank_0_activations.log"),
            log(out).as_bytes(),
        );
    }
    let r = compare_into(
        [d.path().join("a"), d.path().join("b")],
        &[],
        d.path().join("rep"),
        1,
    );
    let said = "the logs of every rank have no digests, so rows were judged by their hashes (L1 norms), as the reference judges them, with the printed statistics shown but not judged: a reordering of the same values (a permuted batch, swapped tokens), a change of sign that keeps every magnitude, or a change below the printed digits is not seen";
    assert!(r.stdout.contains(said), "{}", r.stdout);
    let s = summary(&d.path().join("rep"));
    assert!(
        s["verdict"]
            .as_array()
            .unwrap()
            .iter()
            .any(|v| v.as_str().unwrap().starts_with(said)),
        "{}",
        s["verdict"]
    );
    let index = std::fs::read_to_string(d.path().join("rep/index.html")).unwrap();
    assert!(
        index.contains("a reordering of the same values"),
        "the index says it too"
    );
}

/// An input error of every step is said once with the steps, on stderr
/// and in `summary.json` (trial 64: `--bitwise` on a full-precision
/// series against a default one printed the same error once a step).
#[test]
fn an_error_of_many_steps_is_said_once() {
    let d = TempDir::new().unwrap();
    let log = |precision: &str| {
        format!(
            "Total captured activations: 1\nExcluded ops dispatched: (none)\n{precision}{}\n\n[m/op_0_mul]\n  Shape: torch.Size([4, 8]), Dtype: torch.float32\n  Output hash: 16.0\n  Input hashes: 5.0\n\n",
            "=".repeat(80)
        )
    };
    for step in 1..=3 {
        for (run, precision) in [("a", "Precision: full\n"), ("b", "")] {
            support::write(
                d.path(),
                &format!("{run}/step_{step}/rank_0_activations.log"),
                log(precision).as_bytes(),
            );
        }
    }
    let r = compare_into(
        [d.path().join("a"), d.path().join("b")],
        &["--bitwise"],
        d.path().join("rep"),
        2,
    );
    let errors: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.starts_with("error:"))
        .collect();
    assert_eq!(errors.len(), 1, "{}", r.stderr);
    assert!(
        errors[0]
            .starts_with("error: steps 1-3: rank 0: --bitwise needs both logs at full precision"),
        "{}",
        r.stderr
    );
    let s = summary(&d.path().join("rep"));
    assert_eq!(
        s["input_errors"].as_array().unwrap().len(),
        1,
        "{}",
        s["input_errors"]
    );
}

/// Logs of two capture levels at every step (a run re-captured at
/// `level="ops"` against one at `level="modules"`) are one input error
/// with the steps it concerns, not one line a step (trial 64).
#[test]
fn logs_of_two_levels_at_every_step_are_said_once() {
    let d = TempDir::new().unwrap();
    let ops = format!(
        "Total captured activations: 1\n{}\n\n[lin/op_0_linear]\n  Shape: torch.Size([4, 8]), Dtype: torch.float32\n  L2 norm: 1.0\n  Min: -1.0\n  Max: 1.0\n  Mean: 0.0\n  Output hash: 8.0\n",
        "=".repeat(80)
    );
    for s in 1..=3 {
        let name = format!("step_{s}/rank_0_activations.log");
        support::write(
            &d.path().join("a"),
            &name,
            support::modules_log("", "8.0", "2.0", "3.0").as_bytes(),
        );
        support::write(&d.path().join("b"), &name, ops.as_bytes());
    }
    let r = compare_into(
        [d.path().join("a"), d.path().join("b")],
        &[],
        d.path().join("r"),
        2,
    );
    let said: Vec<&str> = r
        .stderr
        .lines()
        .filter(|l| l.contains("capture both runs at one level"))
        .collect();
    let any = |run: &str| {
        format!(
            "{}",
            d.path()
                .join(run)
                .join("step_*/rank_0_activations.log")
                .display()
        )
    };
    assert_eq!(
        said,
        [format!(
            "error: steps 1-3: {} is a level=modules capture and {} a level=ops one: capture both runs at one level",
            any("a"),
            any("b")
        )],
        "{}",
        r.stderr
    );
}

/// A step series says where one run's values first turn NaN or Inf, and
/// that steps where both runs' losses are NaN agree only because NaN
/// agrees with NaN (trial 65 F1, F3: only a single-step compare said the
/// first non-finite op; two runs NaN from step 2 read "bitwise identical").
#[test]
fn non_finite_values_and_losses_are_said_over_a_series() {
    let d = TempDir::new().unwrap();
    let log = |step: u64, loss: &str, l2: &str| {
        format!(
            "Total captured activations: 1\nLevel: modules\nStep: {step}\nLoss: {loss}\n{}\n\n[lin/op_0_output]\n  Shape: torch.Size([4]), Dtype: torch.float32\n  L2 norm: {l2}\n  Output hash: {l2}\n\n",
            "=".repeat(80)
        )
    };
    // d and e: a NaN loss computed outside the captured ops, whose
    // values stay finite.
    for (run, nan_from) in [("a", 2), ("b", 2), ("c", 9), ("d", 2), ("e", 2)] {
        for s in 1..=3 {
            let (loss, l2) = match (s >= nan_from, run) {
                (true, "d" | "e") => ("nan", "2.0"),
                (true, _) => ("nan", "nan"),
                _ => ("1.5", "2.0"),
            };
            let name = format!("step_{s}/rank_0_activations.log");
            support::write(&d.path().join(run), &name, log(s, loss, l2).as_bytes());
        }
    }
    compare_into(
        [d.path().join("a"), d.path().join("b")],
        &[],
        d.path().join("r1"),
        0,
    )
    .stdout_has(
        "both runs' values are NaN from `lin/op_0_output` on (rank 0, step 2): NaN agrees with NaN",
    );
    compare_into([d.path().join("d"), d.path().join("e")], &[], d.path().join("r3"), 0)
        .stdout_has("both runs recorded a NaN or Inf loss from step 2 on, and step 2 agrees: NaN agrees with NaN");
    let one = compare_into(
        [d.path().join("c"), d.path().join("b")],
        &[],
        d.path().join("r2"),
        1,
    );
    one.stdout_has("b's values are first non-finite (NaN or Inf) at step 2, rank 0, at `lin/op_0_output` (finite in the other run)");
    assert!(!one.stdout.contains("both runs"), "{}", one.stdout);
    let index = std::fs::read_to_string(d.path().join("r2/index.html")).unwrap();
    assert!(
        index.contains("first non-finite (NaN or Inf) at step 2"),
        "index lacks it"
    );
}

/// A step not compared for a cut-short log is said as incomplete input,
/// not also as "diverged" by the rows the cut lost (trial 65).
#[test]
fn a_cut_step_not_compared_is_not_said_to_diverge() {
    let d = TempDir::new().unwrap();
    let (a, b) = (d.path().join("a"), d.path().join("b"));
    series(d.path(), 3, 99);
    let log = b.join("step_2/rank_0_activations.log");
    let text = std::fs::read(&log).unwrap();
    std::fs::write(&log, &text[..text.len() / 3]).unwrap();
    let r = compare_into([&a, &b], &[], d.path().join("o"), 3);
    let line = r
        .stdout
        .lines()
        .find(|l| l.starts_with("step 2: "))
        .unwrap_or_else(|| panic!("{}", r.stdout));
    assert!(line.contains("incomplete input: rank 0 run2"), "{line}");
    assert!(!line.contains("diverged"), "{line}");
}

/// At `level=modules`, a first diverging step whose first differing
/// record is a persistent buffer (BatchNorm's running mean: an
/// optimizer-phase record without the `Parameters:` line the parameter
/// records carry) is said to be the buffer a module's forward updates, not
/// "the update itself differs"; a parameter record that differs still is
/// the update (trial 68: a changed BatchNorm momentum).
#[test]
fn a_buffer_that_differs_first_is_no_update() {
    let block = |key: &str, hash: &str, extra: &str| {
        format!("[{key}]\n  Shape: torch.Size([4]), Dtype: torch.float32\n  Output hash: {hash}\n{extra}\n")
    };
    let log = |weight: &str, mean: &str| {
        format!(
            "Total captured activations: 4\nLevel: modules\n{}\n\n{}{}{}{}",
            "=".repeat(80),
            block("bn/op_0_output", "1.0", ""),
            block("bn/op_1_weight_grad", "2.0", "  Phase: backward\n"),
            block(
                "bn/op_2_weight",
                weight,
                "  Phase: optimizer\n  Parameters: bn.weight\n"
            ),
            block("bn/op_3_running_mean", mean, "  Phase: optimizer\n"),
        )
    };
    let buffer = "step 1's forward outputs, gradients and parameters after the optimizer step agree, and a persistent buffer differs as the step left it (`bn/op_3_running_mean`): a module's forward updates it, not the optimizer";
    let update = "the update itself differs";
    for (b, said, not_said, is_buffer) in [
        (log("3.0", "4.5"), buffer, update, true),
        (log("3.5", "4.5"), update, buffer, false),
    ] {
        let d = TempDir::new().unwrap();
        for (run, text) in [("a", log("3.0", "4.0")), ("b", b)] {
            support::write(
                d.path(),
                &format!("{run}/step_1/rank_0_activations.log"),
                text.as_bytes(),
            );
        }
        let r = compare_into(
            [d.path().join("a"), d.path().join("b")],
            &[],
            d.path().join("rep"),
            1,
        );
        assert!(r.stdout.contains(said), "{}", r.stdout);
        assert!(!r.stdout.contains(not_said), "{}", r.stdout);
        let s = summary(&d.path().join("rep"));
        assert_eq!(
            s["ranks"][0]
                .get("first_divergence_buffer")
                .and_then(Value::as_bool)
                .unwrap_or(false),
            is_buffer,
            "{}",
            s["ranks"][0]
        );
    }
}

/// A module-level series whose first diverging step starts in the same
/// random state in both runs and ends in different ones (a reseed inside
/// the step) says the runs draw differently within the step, not "not
/// from its random state" (trial 67).
#[test]
fn a_step_that_draws_differently_is_not_cleared_of_randomness() {
    let log = |step: u64, output: &str, end: &str| {
        support::modules_log(
            &format!("Step: {step}\nRNG state: start=00000000000000{step}0 end={end}\n"),
            output,
            "2.0",
            "3.0",
        )
    };
    let d = TempDir::new().unwrap();
    for (run, end2, out2) in [
        ("a", "00000000000000ff", "1.0"),
        ("b", "00000000000000ee", "1.5"),
    ] {
        for (step, end, out) in [(1, "0000000000000020", "1.0"), (2, end2, out2)] {
            support::write(
                d.path(),
                &format!("{run}/step_{step}/rank_0_activations.log"),
                log(step, out, end).as_bytes(),
            );
        }
    }
    let r = compare_into(
        [d.path().join("a"), d.path().join("b")],
        &[],
        d.path().join("rep"),
        1,
    );
    assert!(
        r.stdout.contains("from step 2's batch, or from its random draws: the runs start the step in the same random state and end it in different ones"),
        "{}",
        r.stdout
    );
    assert!(
        !r.stdout.contains("not from its random state"),
        "{}",
        r.stdout
    );
}

/// A module-level series whose first differing record is a forward after
/// the step's optimizer records (an evaluation pass after the update, in
/// train mode in one run: a forgotten `model.eval()`) says so, not "step 2
/// first differs in its forward: ... from step 2's batch" (trial 68 F6).
#[test]
fn an_evaluation_forward_after_the_update_is_named() {
    let block = |key: &str, hash: &str, extra: &str| {
        format!("[{key}]\n  Shape: torch.Size([4]), Dtype: torch.float32\n  Output hash: {hash}\n{extra}\n")
    };
    let log = |step: u64, eval: &str| {
        format!(
            "Total captured activations: 4\nLevel: modules\nStep: {step}\n{}\n\n{}{}{}{}",
            "=".repeat(80),
            block("lin/op_0_output", "1.0", ""),
            block("lin/op_1_weight_grad", "2.0", "  Phase: backward\n"),
            block(
                "lin/op_2_weight",
                "3.0",
                "  Phase: optimizer\n  Parameters: lin.weight\n"
            ),
            block("lin/op_3_output", eval, "  Phase: forward\n"),
        )
    };
    let d = TempDir::new().unwrap();
    for (run, eval2) in [("a", "4.0"), ("b", "4.5")] {
        for (step, eval) in [(1, "4.0"), (2, eval2)] {
            support::write(
                d.path(),
                &format!("{run}/step_{step}/rank_0_activations.log"),
                log(step, eval).as_bytes(),
            );
        }
    }
    let r = compare_into(
        [d.path().join("a"), d.path().join("b")],
        &[],
        d.path().join("rep"),
        1,
    );
    assert!(
        r.stdout.contains("step 2's training forward, gradients and parameters after the optimizer step agree, and a forward after the optimizer step differs first (`lin/op_3_output`, an evaluation pass)"),
        "{}",
        r.stdout
    );
    assert!(
        !r.stdout.contains("first differs in its forward"),
        "{}",
        r.stdout
    );
    let s = summary(&d.path().join("rep"));
    let ranks = s["ranks"].as_array().unwrap();
    let at2 = ranks.iter().find(|x| x["step"] == 2).unwrap();
    assert_eq!(at2["first_divergence_after_update"], true, "{at2}");
}
