//! Which result rows a rank's HTML pages hold ([`PagePlan`]), and how the
//! report's HTML size budget (`--html-budget-mb`) is shared out over its
//! ranks: an equal share each ([`rank_budget`]), then what the ranks left
//! to the ranks it cut ([`top_up`]).

use crate::matcher::Status;
use crate::parser::OpTable;

use super::{RankComparison, ReportOptions};

/// Matching rows shown before and after each diverging row when the size
/// budget leaves no room for every row.
pub const CONTEXT_ROWS: usize = 2;

/// What a rank's report costs besides its result rows, in bytes: its
/// heatmap on its first page (16 KB for a 2-layer model of 300 ops) and a
/// result page's own markup (about 2 KB), with headroom; the stylesheet
/// and script are one file each per folder.
const RANK_FIXED_BYTES: u64 = 24_000;

/// One rank's share of a report-wide HTML budget of `budget` bytes over
/// `ranks` ranks: what [`ReportOptions::html_budget`] is set to for each
/// rank (at least what a rank costs besides its rows).
pub fn rank_budget(budget: u64, ranks: usize) -> u64 {
    (budget / ranks.max(1) as u64).max(RANK_FIXED_BYTES)
}

/// Each step's share of a report-wide HTML budget (`None`: no budget) over
/// the `steps` steps of a step series, as [`rank_budget`] shares a step's
/// among its ranks: so the budget holds for the whole series' folder with
/// `--steps all`, and the first diverging step's pages (the only full ones
/// otherwise) are those `--steps all` writes for it.
pub fn series_step_budget(budget: Option<u64>, steps: usize) -> Option<u64> {
    budget.map(|b| b / steps.max(1) as u64)
}

/// Result rows `rows` (ascending) with up to [`CONTEXT_ROWS`] neighbours
/// each, of `total` rows, ascending without repeats.
fn with_context(rows: &[u32], total: usize) -> Vec<u32> {
    let mut out: Vec<u32> = Vec::with_capacity(rows.len() * (2 * CONTEXT_ROWS + 1));
    for &r in rows {
        let lo = (r as usize).saturating_sub(CONTEXT_ROWS) as u32;
        let hi = ((r as usize + CONTEXT_ROWS).min(total.saturating_sub(1))) as u32;
        let start = out.last().map_or(lo, |&l| lo.max(l + 1));
        out.extend(start..=hi);
    }
    out
}

/// Estimated HTML bytes of one result row: both sides' texts, plus its
/// markup, which is larger for a row that is not `match` (its cause, its
/// relative differences, its words). Fitted on the pages of the six
/// bundled real captures and a generated pair (`--html-rows all`): within
/// 5 % of the written pages for five, 19 % over for the sixth, whose
/// diverging rows are mostly one-sided.
fn row_html_estimate(rc: &RankComparison<'_>, index: usize) -> u64 {
    let r = &rc.matches.rows[index];
    let side = |t: &OpTable, row: Option<usize>| -> u64 {
        // Every column field once, the key twice (it is shown and anchored).
        row.map_or(0, |i| t.column_text_len(i) + t.key(i).len() as u64)
    };
    let markup = if r.status == Status::Match { 280 } else { 900 };
    side(rc.t1, r.r1()) + side(rc.t2, r.r2()) + markup
}

/// The budget ([`ReportOptions::html_budget`]) a rank needs for pages of
/// `rows` estimated bytes of result rows: a tenth is left for the index,
/// the key index and estimate error, and [`RANK_FIXED_BYTES`] for what the
/// rank costs besides its rows. The inverse of [`rows_budget`].
fn budget_for(rows: u64) -> u64 {
    (rows + RANK_FIXED_BYTES).div_ceil(9) * 10
}

/// The bytes of result rows a rank budget of `budget` leaves room for.
fn rows_budget(budget: u64) -> u64 {
    (budget / 10 * 9).saturating_sub(RANK_FIXED_BYTES)
}

/// How a rank's pages use the HTML size budget it was given: what its
/// plan costs, and, when the budget cut its pages, what the fuller plans
/// would cost (all in [`ReportOptions::html_budget`] units). Read by
/// [`top_up`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct BudgetUse {
    /// The budget the shown rows need.
    pub spent: u64,
    /// The budgets of the fuller plans the cut left out, by level: every
    /// diverging row (when the budget cut them), the diverging rows with
    /// their context, every row (when the rank has at most
    /// `--html-rows`). All `None` when nothing was cut, or when the
    /// rank's rows all match (its pages need none of them).
    pub wants: [Option<u64>; 3],
}

/// Shares out what the ranks of a report left of its HTML budget: `total`
/// bytes for the ranks whose [`BudgetUse`] is `uses` (`None`: a rank with
/// no budget or no pages). Each rank was given an equal share
/// ([`rank_budget`]); most spend less (a rank whose rows all match shows
/// none of them once its share is exceeded), and what they leave goes to
/// the ranks the budget cut, a level at a time: first every diverging
/// row, then the context rows around them, then every row. At the first
/// two levels the ranks whose upgrade costs least come first, as far as
/// it goes (a rank that cannot have a level cannot have the next); every
/// row is given only when all cut ranks that want it get it (pages of
/// matching rows for some of many ranks are not worth comparing those
/// ranks again). Returns the new budget of each rank given more,
/// `None` for the rest.
pub fn top_up(total: u64, uses: &[Option<BudgetUse>]) -> Vec<Option<u64>> {
    let spent: u64 = uses.iter().flatten().map(|u| u.spent).sum();
    let mut left = total.saturating_sub(spent);
    let mut now: Vec<u64> = uses
        .iter()
        .map(|u| u.as_ref().map_or(0, |u| u.spent))
        .collect();
    let mut given: Vec<Option<u64>> = vec![None; uses.len()];
    for level in 0..3 {
        let mut wanting: Vec<(u64, usize, u64)> = uses
            .iter()
            .enumerate()
            .filter_map(|(i, u)| {
                let b = u.as_ref()?.wants[level]?;
                Some((b.saturating_sub(now[i]), i, b))
            })
            .collect();
        let all: u64 = wanting.iter().map(|w| w.0).sum();
        let partial = all > left;
        if partial && level == 2 {
            break;
        }
        wanting.sort_unstable();
        for (cost, i, b) in wanting {
            if cost > left {
                break;
            }
            left -= cost;
            now[i] = now[i].max(b);
            given[i] = Some(now[i]);
        }
    }
    given
}

/// Which result rows of a rank the HTML pages hold, and on which page.
#[derive(Clone, Debug)]
pub struct PagePlan {
    /// Result row indexes shown, ascending; `None` when every row is shown.
    shown: Option<Vec<u32>>,
    /// Result rows of the rank.
    total: usize,
    /// Rows per page.
    pub page_rows: usize,
    /// Diverging rows before the budget cut, when it cut.
    cut: Option<usize>,
    /// How the plan uses the rank's budget; `None` without a budget.
    budget_use: Option<BudgetUse>,
}

impl PagePlan {
    /// Every row when the rank has at most `opts.html_rows` rows (or it is
    /// `None`), else only the rows that are not `match`; then, if the
    /// estimated HTML exceeds `opts.html_budget`, the diverging rows with
    /// their context, else only the diverging rows, and if still over, the
    /// first of them that fit (at least the first).
    /// Without [`ReportOptions::rank_files`], no row is shown (there are
    /// no pages).
    pub fn new(rc: &RankComparison<'_>, opts: &ReportOptions) -> PagePlan {
        let m = rc.matches;
        let total = m.rows.len();
        let mut plan = PagePlan {
            shown: None,
            total,
            page_rows: opts.page_rows.max(1),
            cut: None,
            budget_use: None,
        };
        if !opts.rank_files {
            plan.shown = Some(Vec::new());
            return plan;
        }
        let diverging = || -> Vec<u32> {
            m.rows
                .iter()
                .enumerate()
                .filter(|(_, r)| r.status != Status::Match)
                .map(|(i, _)| i as u32)
                .collect()
        };
        let every_row = opts.html_rows.is_none_or(|limit| total <= limit);
        let Some(budget) = opts.html_budget else {
            plan.shown = (!every_row).then(diverging);
            return plan;
        };
        let rows_budget = rows_budget(budget);
        let cost = |rows: &[u32]| -> u64 {
            rows.iter()
                .map(|&i| row_html_estimate(rc, i as usize))
                .sum()
        };
        // Estimated bytes of every row, of the diverging rows with their
        // context, of every diverging row: those the budget left out.
        let mut wants = [None; 3];
        if every_row {
            let full: u64 = (0..total).map(|i| row_html_estimate(rc, i)).sum();
            if full <= rows_budget {
                plan.budget_use = Some(BudgetUse {
                    spent: budget_for(full),
                    wants,
                });
                return plan;
            }
            wants[2] = Some(full);
        }
        let d = diverging();
        let mut shown = d.clone();
        let mut spent = cost(&d);
        if every_row {
            let c = with_context(&d, total);
            let with = cost(&c);
            if with <= rows_budget {
                (shown, spent) = (c, with);
            } else if c.len() > d.len() {
                wants[1] = Some(with);
            }
        }
        if spent > rows_budget {
            // The first diverging row is always shown, whatever the
            // budget: the first divergence's link has a row to lead to
            // (trial 32: a budget spent by the ranks' fixed pages left a
            // rank's one diverging row out, "detailed: first 0").
            let mut sum = 0u64;
            let k = shown
                .iter()
                .position(|&i| {
                    sum += row_html_estimate(rc, i as usize);
                    sum > rows_budget
                })
                .unwrap_or(shown.len())
                .clamp(1.min(shown.len()), shown.len());
            if k < shown.len() {
                wants[0] = Some(spent);
                plan.cut = Some(shown.len());
                shown.truncate(k);
                spent = cost(&shown);
            }
        }
        if d.is_empty() {
            // Its rows all match: its pages need none of them.
            wants = [None; 3];
        }
        plan.budget_use = Some(BudgetUse {
            spent: budget_for(spent),
            wants: wants.map(|w| w.map(budget_for)),
        });
        plan.shown = Some(shown);
        plan
    }
    /// How the plan uses the rank's HTML budget ([`top_up`] reads it);
    /// `None` without a budget or without rank files.
    pub fn budget_use(&self) -> Option<&BudgetUse> {
        self.budget_use.as_ref()
    }
    /// When the size budget cut the diverging rows: how many there were.
    pub fn cut_from(&self) -> Option<usize> {
        self.cut
    }
    /// Whether only the non-`match` rows are shown.
    pub fn is_filtered(&self) -> bool {
        self.shown.is_some()
    }
    /// Number of rows shown.
    pub fn len(&self) -> usize {
        self.shown.as_ref().map_or(self.total, |s| s.len())
    }
    /// Whether no row is shown.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Result row index of the `k`-th shown row.
    pub fn row(&self, k: usize) -> usize {
        self.shown.as_ref().map_or(k, |s| s[k] as usize)
    }
    /// Number of pages (at least one).
    pub fn pages(&self) -> usize {
        self.len().div_ceil(self.page_rows).max(1)
    }
    /// The page (0-based) holding result row `index`, if it is shown.
    pub fn page_of(&self, index: usize) -> Option<usize> {
        match &self.shown {
            None => (index < self.total).then_some(index / self.page_rows),
            Some(s) => s
                .binary_search(&(index as u32))
                .ok()
                .map(|k| k / self.page_rows),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::matcher::{match_tables, MatchOptions};
    use crate::parser::parse_bytes;
    use crate::report::write_rank;

    fn log(hashes: &[&str]) -> OpTable {
        let mut s = format!("Total captured activations: {}\n", hashes.len());
        for (i, h) in hashes.iter().enumerate() {
            s.push_str(&format!("[m/op_{i}_mm]\n  Output hash: {h}\n\n"));
        }
        parse_bytes(s.into_bytes(), "t.log")
    }

    #[test]
    fn page_plan_shows_only_diverging_rows_above_the_threshold() {
        let a = log(&["1", "2", "3", "4", "5"]);
        let b = log(&["1", "9", "3", "9", "5"]);
        let m = match_tables(&a, &b, &MatchOptions::default());
        let rc = RankComparison {
            rank1: 0,
            rank2: 0,
            t1: &a,
            t2: &b,
            matches: &m,
        };
        let plan = |html_rows: Option<usize>, page_rows: usize, budget: Option<u64>| {
            let o = ReportOptions {
                html_rows,
                page_rows,
                html_budget: budget,
                ..Default::default()
            };
            PagePlan::new(&rc, &o)
        };
        let all = plan(Some(5), 2, None);
        assert!(!all.is_filtered());
        assert_eq!((all.len(), all.pages()), (5, 3));
        assert_eq!(all.page_of(4), Some(2));
        let some = plan(Some(4), 1, None);
        assert!(some.is_filtered());
        assert_eq!((some.len(), some.pages()), (2, 2));
        assert_eq!((some.row(0), some.row(1)), (1, 3));
        assert_eq!(some.page_of(3), Some(1));
        assert_eq!(some.page_of(2), None, "a match row is not shown");
        assert!(!plan(None, 1, None).is_filtered());
        // A budget that fits one row estimate: diverging rows only, cut to the first.
        let one = row_html_estimate(&rc, 1);
        // (the plan keeps a tenth of the budget for the index)
        let budget = |rows: u64| (rows + RANK_FIXED_BYTES) * 10 / 9 + 10;
        let tight = plan(None, 1, Some(budget(one + 10)));
        assert!(tight.is_filtered());
        assert_eq!((tight.len(), tight.cut_from()), (1, Some(2)));
        assert_eq!(tight.row(0), 1);
        let roomy = plan(None, 1, Some(budget(10 * one)));
        assert!(!roomy.is_filtered());
        assert_eq!(roomy.cut_from(), None);

        let dir = tempfile::tempdir().unwrap();
        let opts = ReportOptions {
            out_dir: dir.path().to_path_buf(),
            page_rows: 1,
            html_rows: Some(4),
            ..Default::default()
        };
        let s = write_rank(&rc, &opts).unwrap();
        assert!(s.html_filtered);
        assert_eq!(s.html_rows, 2);
        assert_eq!(s.pages.len(), 2);
        assert_eq!(
            s.first_divergence.as_ref().unwrap().page,
            "rank0-page1.html"
        );
        let page2 = std::fs::read_to_string(dir.path().join("rank0-page2.html")).unwrap();
        assert!(page2.contains("rank0-row3"));
        assert!(page2.contains("showing 2 diverging rows of 5; all rows: --html-rows all"));
        assert!(!page2.contains("rank0-row2\""), "match rows are left out");
    }

    /// Over the budget, the diverging rows keep [`CONTEXT_ROWS`] rows of
    /// context each when that fits; a report-wide budget is shared out.
    #[test]
    fn budget_keeps_context_around_diverging_rows() {
        let h: Vec<String> = (0..12).map(|i| (i + 1).to_string()).collect();
        let mut h2 = h.clone();
        h2[6] = "99".into();
        h2[11] = "98".into();
        let a = log(&h.iter().map(String::as_str).collect::<Vec<_>>());
        let b = log(&h2.iter().map(String::as_str).collect::<Vec<_>>());
        let m = match_tables(&a, &b, &MatchOptions::default());
        let rc = RankComparison {
            rank1: 0,
            rank2: 0,
            t1: &a,
            t2: &b,
            matches: &m,
        };
        // A budget that holds these rows' estimates (and a byte more).
        let plan = |rows: &[usize]| {
            let bytes: u64 = rows.iter().map(|&i| row_html_estimate(&rc, i)).sum();
            let o = ReportOptions {
                html_budget: Some(budget_for(bytes + 1)),
                ..Default::default()
            };
            PagePlan::new(&rc, &o)
        };
        let c = plan(&[4, 5, 6, 7, 8, 9, 10, 11]);
        assert!(c.is_filtered());
        let shown: Vec<usize> = (0..c.len()).map(|k| c.row(k)).collect();
        assert_eq!(
            shown,
            vec![4, 5, 6, 7, 8, 9, 10, 11],
            "two rows each side, clipped at the end"
        );
        let d = plan(&[6, 11]);
        assert_eq!(
            (0..d.len()).map(|k| d.row(k)).collect::<Vec<_>>(),
            vec![6, 11]
        );
        let every: Vec<usize> = (0..12).collect();
        assert!(!plan(&every).is_filtered(), "every row fits");
        assert_eq!(with_context(&[0, 1, 9], 10), vec![0, 1, 2, 3, 7, 8, 9]);
        assert_eq!(rank_budget(256 << 20, 4096), 65_536);
        assert_eq!(rank_budget(1 << 20, 4096), RANK_FIXED_BYTES);
    }

    /// Trial 29: a report of 2,048 ranks whose one diverging rank got 5 of
    /// its 200 rows, because each rank got an equal share and the matching
    /// ranks left theirs unused. What they leave goes to the cut ranks:
    /// every diverging row first (cheapest first, as far as it goes), then
    /// context, then every row only when all that want it get it.
    #[test]
    fn what_ranks_leave_of_the_budget_goes_to_the_ranks_it_cut() {
        let used = |spent: u64| {
            Some(BudgetUse {
                spent,
                wants: [None; 3],
            })
        };
        let cut = |spent: u64, wants: [Option<u64>; 3]| Some(BudgetUse { spent, wants });
        // One cut rank among matching ranks that spent little: every row.
        let uses = vec![used(10), cut(40, [None, None, Some(150)]), used(10), None];
        assert_eq!(top_up(4 * 50, &uses), vec![None, Some(150), None, None]);
        // Not enough left for every row (100 left, 110 more wanted):
        // nothing.
        assert_eq!(top_up(160, &uses), vec![None; 4]);
        // A rank whose every diverging row would take more than is left
        // does not keep the others from theirs, and the level after it
        // is not given to anyone.
        let uses = vec![
            cut(40, [Some(1_000), Some(2_000), Some(3_000)]),
            cut(40, [Some(60), Some(80), Some(200)]),
            cut(40, [None, Some(70), None]),
            used(20),
        ];
        // The cheapest upgrade goes first: rank 1's context (20 more)
        // before rank 2's (30 more, 20 left).
        assert_eq!(top_up(4 * 50, &uses), vec![None, Some(80), None, None]);
        // With more left: the two small ranks get their context, not the
        // large one; every row is not given (the large rank wants it too).
        assert_eq!(
            top_up(200 + 60, &uses),
            vec![None, Some(80), Some(70), None]
        );
        // Nothing cut, or nothing left: nothing given.
        assert_eq!(top_up(1_000, &[used(10), None]), vec![None, None]);
        assert_eq!(top_up(0, &uses), vec![None; 4]);
    }

    /// The plan says what it spends and what the cut left out, so that
    /// [`top_up`] can give it back: a budget of exactly what a level
    /// wants shows that level.
    #[test]
    fn a_cut_plan_wants_the_budget_that_shows_each_fuller_level() {
        let h: Vec<String> = (0..40).map(|i| (i + 1).to_string()).collect();
        let mut h2 = h.clone();
        h2[20] = "99".into();
        let a = log(&h.iter().map(String::as_str).collect::<Vec<_>>());
        let b = log(&h2.iter().map(String::as_str).collect::<Vec<_>>());
        let m = match_tables(&a, &b, &MatchOptions::default());
        let rc = RankComparison {
            rank1: 0,
            rank2: 0,
            t1: &a,
            t2: &b,
            matches: &m,
        };
        let plan = |budget: u64| {
            let o = ReportOptions {
                html_budget: Some(budget),
                ..Default::default()
            };
            PagePlan::new(&rc, &o)
        };
        // A budget that holds one row: the diverging row, nothing cut.
        let one = plan(budget_for(row_html_estimate(&rc, 20)));
        assert_eq!((one.len(), one.cut_from()), (1, None));
        let u = one.budget_use().unwrap().clone();
        assert_eq!(u.wants[0], None, "every diverging row is shown");
        let (ctx, every) = (u.wants[1].unwrap(), u.wants[2].unwrap());
        assert!(u.spent < ctx && ctx < every, "{u:?}");
        // Given what it wants, it shows that level, and then wants no more.
        let c = plan(ctx);
        assert_eq!(c.len(), 1 + 2 * CONTEXT_ROWS);
        assert_eq!(c.budget_use().unwrap().spent, ctx);
        assert_eq!(c.budget_use().unwrap().wants, [None, None, Some(every)]);
        let e = plan(every);
        assert!(!e.is_filtered());
        assert_eq!(e.budget_use().unwrap().wants, [None; 3]);
        // A budget with no room for a row still shows the first diverging
        // one (trial 32), and says the cut only when it cut.
        let none = plan(budget_for(0));
        assert_eq!((none.len(), none.row(0), none.cut_from()), (1, 20, None));
        let h3: Vec<String> = (0..40).map(|i| (i + 1).to_string()).collect();
        let mut h4 = h3.clone();
        h4[5] = "98".into();
        h4[30] = "99".into();
        let (c, d) = (
            log(&h3.iter().map(String::as_str).collect::<Vec<_>>()),
            log(&h4.iter().map(String::as_str).collect::<Vec<_>>()),
        );
        let two = match_tables(&c, &d, &MatchOptions::default());
        let rc2 = RankComparison {
            rank1: 0,
            rank2: 0,
            t1: &c,
            t2: &d,
            matches: &two,
        };
        let p = PagePlan::new(
            &rc2,
            &ReportOptions {
                html_budget: Some(budget_for(0)),
                ..Default::default()
            },
        );
        assert_eq!((p.len(), p.row(0), p.cut_from()), (1, 5, Some(2)));
        // A rank whose rows all match wants none of them back.
        let same = match_tables(&a, &a, &MatchOptions::default());
        let rc = RankComparison {
            matches: &same,
            t2: &a,
            ..rc
        };
        let p = PagePlan::new(
            &rc,
            &ReportOptions {
                html_budget: Some(budget_for(10)),
                ..Default::default()
            },
        );
        assert!(p.is_empty());
        assert_eq!(p.budget_use().unwrap().wants, [None; 3]);
    }

    /// The row estimate keeps a rank within its budget: on a bundled real
    /// capture, the pages written for every row are not larger than the
    /// rows' estimate plus the tenth [`budget_for`] keeps for error, and
    /// not so much smaller that a report which fits is cut (trial 29: a
    /// 225 MB report was cut under a 256 MiB budget, its estimate 22 %
    /// over).
    #[test]
    fn the_row_estimate_is_close_to_the_written_pages() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("testdata/bug_layer2");
        let read = |run: &str| {
            let p = dir.join(run).join("rank_0_activations.log");
            crate::parser::parse_bytes(std::fs::read(&p).unwrap(), p.display().to_string())
        };
        let (a, b) = (read("run_A"), read("run_B"));
        let m = match_tables(&a, &b, &MatchOptions::default());
        let rc = RankComparison {
            rank1: 0,
            rank2: 0,
            t1: &a,
            t2: &b,
            matches: &m,
        };
        let out = tempfile::tempdir().unwrap();
        let opts = ReportOptions {
            out_dir: out.path().to_path_buf(),
            html_budget: None,
            ..Default::default()
        };
        write_rank(&rc, &opts).unwrap();
        let pages: u64 = std::fs::read_dir(out.path())
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.to_string_lossy().contains("-page"))
            .map(|p| std::fs::metadata(p).unwrap().len())
            .sum();
        let estimate: u64 = (0..m.rows.len()).map(|i| row_html_estimate(&rc, i)).sum();
        let ratio = estimate as f64 / pages as f64;
        assert!(
            (0.9..=1.15).contains(&ratio),
            "estimate {estimate}, pages {pages}"
        );
    }
}
