//! The tables a step series keeps while its steps are compared, so that
//! the first diverging step's full pages are written from them, not from a
//! second compare ([`Kept`], bounded by [`KEEP_BYTES`]).

use super::*;

/// How many bytes of tables ([`OpTable::heap_bytes`], both runs, and the
/// match rows) a step series keeps at most so that its first diverging
/// step's pages need no second compare: 1 GiB. Past it a rank's tables
/// are dropped and, if its step turns out to be the first diverging one,
/// that step is compared again as before; so a series never holds more
/// than this beyond what comparing its steps holds anyway.
pub(super) const KEEP_BYTES: usize = 1 << 30;

/// One rank of a step, parsed and matched, with the report options of its
/// full pages.
pub(super) struct KeptRank {
    pub(super) rank1: u32,
    pub(super) rank2: u32,
    pub(super) tables: (OpTable, OpTable, MatchTable),
    pub(super) report: ReportOptions,
}

/// The tables a step series keeps while its steps are compared: only
/// those of steps that may still be the first diverging step. A rank's
/// tables are kept when its step is not later than the earliest diverging
/// step found so far (and they fit in [`KEEP_BYTES`]); a step that
/// finishes without diverging drops its own, and a step that diverges
/// drops every later step's. When every step is compared, what is left is
/// the first diverging step's tables (or nothing): at most one step's
/// tables beyond the steps being compared at the moment.
pub(super) struct Kept {
    pub(super) state: Mutex<KeptState>,
    /// At most this many bytes kept ([`KEEP_BYTES`]).
    pub(super) cap: usize,
}

impl Default for Kept {
    fn default() -> Kept {
        Kept {
            state: Mutex::default(),
            cap: KEEP_BYTES,
        }
    }
}

#[derive(Default)]
pub(super) struct KeptState {
    pub(super) earliest: Option<u64>,
    pub(super) steps: BTreeMap<u64, Vec<KeptRank>>,
    /// Steps a rank of which was not kept (over [`KEEP_BYTES`]).
    pub(super) incomplete: BTreeSet<u64>,
    pub(super) bytes: usize,
}

pub(super) fn kept_bytes(k: &KeptRank) -> usize {
    let (t1, t2, m) = &k.tables;
    std::mem::size_of::<KeptRank>()
        + t1.heap_bytes()
        + t2.heap_bytes()
        + m.rows.capacity() * std::mem::size_of::<crate::matcher::MatchRow>()
}

impl KeptState {
    pub(super) fn remove(&mut self, step: u64) -> Option<Vec<KeptRank>> {
        let r = self.steps.remove(&step)?;
        self.bytes -= r.iter().map(kept_bytes).sum::<usize>();
        Some(r)
    }
}

impl Kept {
    pub(super) fn lock(&self) -> std::sync::MutexGuard<'_, KeptState> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Keeps a rank of `step` if its step may be the first diverging one.
    pub(super) fn offer(&self, step: u64, rank: KeptRank) {
        let size = kept_bytes(&rank);
        let mut st = self.lock();
        if st.earliest.is_some_and(|e| step > e) {
            return;
        }
        if st.bytes + size > self.cap {
            st.incomplete.insert(step);
            return;
        }
        st.bytes += size;
        st.steps.entry(step).or_default().push(rank);
    }

    /// Step `step` is compared: drops its tables unless it is the
    /// earliest diverging step so far, and then every later step's.
    pub(super) fn step_done(&self, step: u64, diverges: bool) {
        let mut dropped = Vec::new();
        {
            let mut st = self.lock();
            if diverges && st.earliest.is_none_or(|e| step < e) {
                st.earliest = Some(step);
                let later: Vec<u64> = st.steps.range(step + 1..).map(|(s, _)| *s).collect();
                for s in later {
                    dropped.extend(st.remove(s));
                }
            } else {
                dropped.extend(st.remove(step));
            }
        }
        drop(dropped);
    }

    /// The tables of every rank of `step` with a summary (`ranks` of
    /// them), or `None` if some were not kept.
    pub(super) fn take(&self, step: u64, ranks: usize) -> Option<Vec<KeptRank>> {
        let mut st = self.lock();
        // Removed either way: a step compared again needs them no more.
        let kept = st.remove(step);
        let complete = !st.incomplete.contains(&step);
        drop(st);
        kept.filter(|k| complete && k.len() == ranks)
    }
}

/// A step's handle on the tables a step series keeps
/// ([`CompareConfig::keep`]): the step, and the page settings of its full
/// pages (its ranks' share of the HTML budget once
/// `KeepTables::share_budget` is called).
#[derive(Clone)]
pub struct KeepTables {
    pub(super) step: u64,
    pub(super) html_rows: Option<usize>,
    pub(super) html_budget: Option<u64>,
    pub(super) kept: Arc<Kept>,
}

impl std::fmt::Debug for KeepTables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KeepTables")
            .field("step", &self.step)
            .finish_non_exhaustive()
    }
}

impl KeepTables {
    /// Each rank's share of the full pages' HTML budget, over `ranks`
    /// ranks (as [`compare_runs`] shares the budget it is given).
    pub(in crate::run) fn share_budget(&mut self, ranks: usize) {
        self.html_budget = self.html_budget.map(|b| report::rank_budget(b, ranks));
    }

    /// Offers a compared rank's tables; `report` is the options its pages
    /// (without rows) were written with.
    pub(in crate::run) fn offer(
        &self,
        rank1: u32,
        rank2: u32,
        tables: (OpTable, OpTable, MatchTable),
        report: &ReportOptions,
    ) {
        // The full pages' options: the series' page settings, and every
        // rank file (the step was compared without them).
        let report = ReportOptions {
            html_rows: self.html_rows,
            html_budget: self.html_budget,
            rank_files: true,
            ..report.clone()
        };
        self.kept.offer(
            self.step,
            KeptRank {
                rank1,
                rank2,
                tables,
                report,
            },
        );
    }
}
