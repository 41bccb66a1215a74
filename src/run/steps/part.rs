//! A sharded step series: each part's share of the (step, rank) units
//! (`actdiff compare --shard K/N` on step series, [`compare_part`]) and
//! their merge ([`merge_series`]).

use super::*;

/// The file a part of a sharded step series writes at its root: the
/// series-level facts `actdiff merge` joins ([`SeriesPart`]); each step's
/// own `part.json` is in the part's `step_S/`.
pub const SERIES_PART: &str = crate::report::files::SERIES_PART_MANIFEST;

/// What a part of a sharded step series records at its root
/// ([`SERIES_PART`]). Every part of one split records the same steps.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct SeriesPart {
    /// The part (`K/N`).
    pub shard: Shard,
    /// The steps compared (both runs have them, `--steps` includes them).
    pub steps: Vec<u64>,
    /// Steps only run 1 has (and `--steps` includes).
    pub steps_only1: Vec<u64>,
    /// Steps only run 2 has.
    pub steps_only2: Vec<u64>,
    /// Steps either run has that `--steps` left out.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub steps_not_selected: Vec<u64>,
    /// The losses recorded at the steps one run only has.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub one_sided_losses: Vec<crate::report::steps::StepLoss>,
    /// The series' own warnings (step folders without logs, `--steps`).
    pub warnings: Vec<Message>,
    /// What the merge says when no step is compared; absent when steps
    /// were compared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub no_step: Option<Message>,
    /// `--steps all`: every step has full pages (else only the first
    /// diverging step, and the merge warns on the others' pages, as
    /// [`compare_steps`] does).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub all_pages: bool,
    /// Why the part stopped before it compared its steps (a run missing,
    /// a step's logs not found, its folder not writable); absent for a
    /// part that compared them. The merge names it with this message.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed: Option<String>,
}

impl SeriesPart {
    /// The record of part `shard` that failed with `message` before it
    /// compared any step.
    fn failed(shard: Shard, message: String) -> SeriesPart {
        SeriesPart {
            shard,
            steps: Vec::new(),
            steps_only1: Vec::new(),
            steps_only2: Vec::new(),
            steps_not_selected: Vec::new(),
            one_sided_losses: Vec::new(),
            warnings: Vec::new(),
            no_step: None,
            all_pages: false,
            failed: Some(message),
        }
    }

    /// Writes the record into the part's folder `dir`.
    fn write(&self, dir: &Path) -> Result<(), String> {
        let json = serde_json::to_vec_pretty(self).expect("a series part serialises");
        let file = dir.join(SERIES_PART);
        std::fs::write(&file, json).map_err(|e| format!("{}: {e}", file.display()))
    }
}

/// `actdiff compare RUN1 RUN2 --shard K/N` on two step series: one split
/// of every (step, rank) unit of the series over the `N` parts
/// ([`shard::series_units_by_part`]), so that many steps of one rank
/// spread as well as many ranks do. Part `K` compares its units of each
/// step into `OUT/step_S/` (a part of that step, with its `part.json`),
/// the first step where its own units diverge with full pages, and writes
/// [`SERIES_PART`]; `actdiff merge` ([`merge_series`]) joins the parts
/// into the series' report. Returns 0 when every step's part finished.
pub fn compare_part(cfg: &CompareConfig, sel: &StepSelection, quiet: bool) -> i32 {
    let part = cfg.shard.clone().expect("a part");
    let out = &cfg.report.out_dir;
    let said = |e: &str| {
        eprintln!("error: part {}: {e}", part.shard);
        exit_codes::INPUT_ERROR
    };
    // A part that stops before its steps are compared says why in its
    // series-part.json, for the merge to name (a folder that cannot be
    // written says it on stderr only).
    let fail = |e: String| {
        let _ = SeriesPart::failed(part.shard, e.clone()).write(out);
        said(&e)
    };
    // Also removes the records of an earlier part in this folder (its
    // series-part.json, and the part.json of a part that failed before it
    // knew its runs were step series), which the merge would read as this
    // part's.
    if let Err(e) = prepare_report_folder(&cfg.report) {
        return said(&e.to_string());
    }
    let pairs = StepPairs::of(cfg, sel);
    if !pairs.errors.is_empty() {
        return fail(crate::report::messages::join(&pairs.errors, "; "));
    }
    let mut plans = Vec::with_capacity(pairs.both.len());
    for (s, p1, p2) in &pairs.both {
        let mut errors = Vec::new();
        let c = step_config(cfg, *s, (p1, p2), false, None);
        let (plan, inputs) = crate::run::pipeline::discover(&c, &mut errors);
        if !errors.is_empty() {
            let e = Message::AtStep {
                step: *s,
                message: Box::new(Message::Text(crate::report::messages::join(&errors, "; "))),
            };
            return fail(e.to_string());
        }
        plans.push((*s, plan, inputs));
    }
    let split = shard::series_units_by_part(&plans, part.shard.count);
    let units: BTreeMap<u64, Vec<shard::Unit>> = plans
        .iter()
        .zip(split)
        .map(|((s, ..), mut by_part)| (*s, std::mem::take(&mut by_part[part.shard.index as usize])))
        .collect();
    let part_of = |s: u64| {
        Some(ShardPart {
            units: units.get(&s).cloned(),
            ..part.clone()
        })
    };
    let all_pages = *sel == StepSelection::All;
    // A part's step writes its results into its part.json as well: its
    // first diverging step is compared again (keep: false).
    let done = match compare_all(cfg, &pairs.both, all_pages, &part_of, true, false) {
        Ok(d) => d,
        Err(e) => return fail(e),
    };
    let compared: Vec<u64> = done.iter().map(|d| d.step).collect();
    if let Err(e) = join_step_rows(cfg, &compared) {
        return fail(e);
    }
    let finished = compared.iter().all(|s| {
        shard::Manifest::read(&cfg.report.out_dir.join(format!("{STEP_DIR_PREFIX}{s}")))
            .is_ok_and(|m| m.status == shard::PartStatus::Done)
    });
    let record = SeriesPart {
        shard: part.shard,
        no_step: compared.is_empty().then_some(pairs.no_step),
        steps: compared,
        steps_only1: pairs.only.0,
        steps_only2: pairs.only.1,
        steps_not_selected: pairs.not_selected,
        one_sided_losses: pairs.only_losses,
        warnings: pairs.warnings,
        all_pages,
        failed: None,
    };
    if let Err(e) = record.write(out) {
        return said(&e);
    }
    let n_units: usize = units.values().map(Vec::len).sum();
    if !quiet {
        let d = done.iter().filter(|d| diverges(&d.summary)).count();
        println!(
            "part {}: {} step(s), {n_units} (step, rank) unit(s), {d} step(s) with a diverging unit; written to {}; the verdict is `actdiff merge`'s",
            part.shard,
            record.steps.len(),
            cfg.report.out_dir.display()
        );
    }
    if finished {
        exit_codes::OK
    } else {
        said("a step's part did not finish (its step_S/part.json says why)")
    }
}

/// Whether `dir` is a part of a sharded step series (holds [`SERIES_PART`]).
pub fn is_series_part(dir: &Path) -> bool {
    dir.join(SERIES_PART).is_file()
}

/// Reads part `dir`'s [`SERIES_PART`]. A part that failed is a problem
/// with its own message: one whose `series-part.json` says failed, or one
/// that failed before it knew its runs were step series (a bad option, a
/// run missing), whose `part.json` says so. A folder that is not there,
/// and one that is no part of a step series, are problems too.
fn read_record(dir: &Path) -> Result<SeriesPart, Message> {
    let file = dir.join(SERIES_PART);
    let name = |shard: Shard| crate::run::messages::PartName {
        shard,
        dir: dir.display().to_string(),
    };
    let error = match std::fs::read(&file) {
        Ok(b) => match serde_json::from_slice::<SeriesPart>(&b) {
            Ok(SeriesPart {
                shard,
                failed: Some(message),
                ..
            }) => {
                return Err(Message::PartFailed {
                    part: name(shard),
                    message,
                })
            }
            Ok(r) => return Ok(r),
            Err(e) => format!("{}:{}: {e}", e.line(), e.column()),
        },
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if !dir.exists() {
                return Err(Message::Text(format!(
                    "{}: no such file or folder",
                    dir.display()
                )));
            }
            match shard::Manifest::read(dir) {
                Ok(m) => match m.status {
                    shard::PartStatus::Failed { message } => {
                        return Err(Message::PartFailed {
                            part: name(m.shard),
                            message,
                        })
                    }
                    shard::PartStatus::Running => {
                        return Err(Message::PartUnfinished {
                            part: name(m.shard),
                        })
                    }
                    shard::PartStatus::Done => {
                        return Err(Message::PartOfOneStep {
                            dir: dir.display().to_string(),
                        })
                    }
                },
                Err(_) => {
                    // No series-part.json and no part.json: a series part that has
                    // not finished (its step folders only) or not started (an empty
                    // folder), not some other folder (trial 22 M2: "not a part of a
                    // sharded step series" for a killed array task).
                    let steps =
                        super::step_folders(dir).len() + super::unfinished_step_folders(dir).len();
                    let empty = std::fs::read_dir(dir).is_ok_and(|mut d| d.next().is_none());
                    if steps > 0 || empty {
                        return Err(Message::SeriesPartUnfinished {
                            dir: dir.display().to_string(),
                            started: steps > 0,
                        });
                    }
                    e.to_string()
                }
            }
        }
        Err(e) => e.to_string(),
    };
    Err(Message::NotASeriesPart {
        file: file.display().to_string(),
        error,
    })
}

/// A step's merge error as the series' problems.
fn at_step(s: u64, e: crate::run::merge::MergeError) -> Vec<Message> {
    let problems = crate::run::merge::problems(e);
    crate::run::messages::at_steps(problems.into_iter().map(|p| (s, p)).collect())
}

/// `actdiff merge` of the parts of a sharded step series: checks that the
/// parts record one split of the same steps, merges each step's parts into
/// `OUT/step_S/` with [`crate::run::merge::merge_parts_split`] (the units each
/// part must hold come from the series' split, recomputed from the parts'
/// recorded inputs), then writes the series' outputs as
/// [`compare_steps`] does. Returns the exit status over every step, or 2
/// with the problems named: each once, with the steps it concerns
/// (`steps 1-4: part 1/3 missing ...`), the parts named by their folders.
pub fn merge_series(parts: &[PathBuf], out: &Path, outs: &RunOutputs) -> i32 {
    match merge_steps(parts, out) {
        Ok((opts, summary)) => write_outputs(&opts, summary, outs),
        Err(problems) => crate::run::merge::refuse(out, problems, outs),
    }
}

/// The parts' [`SeriesPart`] records, checked: the report folder is none
/// of the parts, each part reads ([`read_record`]: a failed part is its
/// own error), and all record the same steps and split. Returns the
/// records in the order of `parts`, or every problem.
fn read_records(parts: &[PathBuf], out: &Path) -> Result<Vec<SeriesPart>, Vec<Message>> {
    let mut records = Vec::new();
    // The report folder being one of the parts is refused before anything
    // is written or cleared there (the single-step merge finds it only per
    // step, after the series' folder was prepared: a part lost its pages).
    let canon = |p: &Path| std::fs::canonicalize(p).unwrap_or_else(|_| p.to_path_buf());
    let mut problems: Vec<Message> = parts
        .iter()
        .filter(|p| canon(p) == canon(out))
        .map(|p| Message::PartIsReport {
            dir: p.display().to_string(),
        })
        .collect();
    if !problems.is_empty() {
        return Err(problems);
    }
    for p in parts {
        match read_record(p) {
            Ok(r) => records.push(r),
            Err(e) => problems.push(e),
        }
    }
    if !problems.is_empty() {
        return Err(problems);
    }
    let first = records[0].clone();
    for (r, p) in records.iter().zip(parts).skip(1) {
        let same = (&r.steps, &r.steps_only1, &r.steps_only2, r.shard.count)
            == (
                &first.steps,
                &first.steps_only1,
                &first.steps_only2,
                first.shard.count,
            );
        if !same {
            problems.push(Message::PartsOfOtherSeries {
                first: parts[0].display().to_string(),
                other: p.display().to_string(),
                steps: Box::new((first.steps.clone(), r.steps.clone())),
                only1: Box::new((first.steps_only1.clone(), r.steps_only1.clone())),
                only2: Box::new((first.steps_only2.clone(), r.steps_only2.clone())),
                counts: (first.shard.count, r.shard.count),
            });
        }
    }
    if problems.is_empty() {
        Ok(records)
    } else {
        Err(problems)
    }
}

/// The work of [`merge_series`]: the series' report options and summary.
fn merge_steps(parts: &[PathBuf], out: &Path) -> Result<(ReportOptions, Summary), Vec<Message>> {
    let first = read_records(parts, out)?.swap_remove(0);
    let step_dir = |p: &Path, s: u64| p.join(format!("{STEP_DIR_PREFIX}{s}"));
    // The series' split, from the recorded inputs of each step (every
    // part records the same inputs; merge_parts_split checks that).
    let mut plans = Vec::with_capacity(first.steps.len());
    for s in &first.steps {
        let m = shard::Manifest::read(&step_dir(&parts[0], *s)).map_err(|e| {
            vec![Message::AtStep {
                step: *s,
                message: Box::new(Message::Text(e)),
            }]
        })?;
        let plan = match (&m.inputs.run1, &m.inputs.run2) {
            (Some(a), Some(b)) => crate::run::plan(&a.input(), &b.input(), &m.run.rank_map, None),
            _ => crate::run::RankPlan::default(),
        };
        plans.push((*s, plan, m.inputs));
    }
    let split = shard::series_units_by_part(&plans, first.shard.count);
    let opts = ReportOptions {
        out_dir: out.to_path_buf(),
        ..Default::default()
    };
    prepare_report_folder(&opts).map_err(|e| vec![Message::Text(e.to_string())])?;
    let dirs: Vec<Vec<PathBuf>> = first
        .steps
        .iter()
        .map(|s| parts.iter().map(|p| step_dir(p, *s)).collect())
        .collect();
    let mut checked = Vec::with_capacity(first.steps.len());
    // Each step's problems, the parts named by their own folders (not
    // their step folders), so that a problem of every step is said once.
    let mut at = Vec::new();
    for (((s, ..), by_part), dirs) in plans.iter().zip(split).zip(&dirs) {
        let out_s = step_dir(out, *s);
        match crate::run::merge::check_parts(dirs, &out_s, Some(by_part), parts) {
            Ok(read) => checked.push((*s, read)),
            Err(e) => at.extend(
                crate::run::merge::problems(e)
                    .into_iter()
                    .map(|p| (*s, crate::run::messages::series_problem(*s, p))),
            ),
        }
    }
    if !at.is_empty() {
        return Err(crate::run::messages::at_steps(at));
    }
    // Full pages for the first diverging step only (but with --steps
    // all), as one compare writes them: a part's pages of a later step
    // (its own units' first divergence) are not the report's.
    // A rank one run lacks at a step diverges there, as it gates; a rank
    // whose log is cut short diverges only under --allow-incomplete (the
    // rows past its end are not compared: [`judged_divergence`]).
    let diverges = |read: &[crate::run::merge::ReadPart]| {
        read.iter().any(|p| {
            let run = &p.manifest.run;
            !run.only1.is_empty()
                || !run.only2.is_empty()
                || p.manifest
                    .results
                    .iter()
                    .filter_map(|r| r.summary.as_ref())
                    .any(|r| {
                        r.first_divergence.is_some() && (run.allow_incomplete || !r.incomplete())
                    })
        })
    };
    let first_step = checked
        .iter()
        .find(|(_, read)| diverges(read))
        .map(|(s, _)| *s);
    let mut merged = Vec::with_capacity(checked.len());
    for (s, read) in checked {
        let pages = first.all_pages || Some(s) == first_step;
        let c = crate::run::merge::join_parts(
            read,
            &step_dir(out, s),
            pages,
            Some(format!("../{}", files::INDEX)),
        )
        .map_err(|e| at_step(s, e))?;
        merged.push((s, c));
    }
    // A diverging step other than the first has pages without rows (but
    // with --steps all): its own report says so, as compare_step's does.
    let done: Vec<StepDone> = merged
        .into_iter()
        .map(|(s, mut c)| {
            let diverging = c.ranks.iter().any(|r| r.counts.diverging() > 0);
            if !first.all_pages && diverging && Some(s) != first_step {
                c.meta.warnings.push(Message::StepWithoutPages { step: s });
            }
            let (meta, summary) = crate::run::outputs::finish_step(c.meta, c.ranks);
            StepDone {
                step: s,
                summary,
                meta,
            }
        })
        .collect();
    // Names and paths as the steps' merges give them (the runs' step
    // folders' parents).
    let opts = match done.first() {
        Some(d) => ReportOptions {
            name1: d.summary.name1.clone(),
            name2: d.summary.name2.clone(),
            path1: parent(&d.summary.path1),
            path2: parent(&d.summary.path2),
            ..opts
        },
        None => opts,
    };
    let summary = join(
        &opts,
        done,
        (
            first.steps_only1,
            first.steps_only2,
            first.steps_not_selected,
            first.one_sided_losses,
        ),
        first_step,
        first.warnings,
        first.no_step.unwrap_or(Message::NoStep { selected: None }),
    );
    Ok((opts, summary))
}
