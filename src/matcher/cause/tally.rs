//! Step 4 of root cause: the tally. Rows are classified in dispatch order
//! (an inherited row needs the cause of its producer, which comes earlier);
//! the tally records each [`Class`], grouping rows under their cause, and
//! is what [`super::classify::classify`] asks about the rows before.

use ahash::AHashMap;

use super::super::{MatchRow, ROW_OUT_DIFF, ROW_UNSYNCED};
use super::classify::{Class, Upstream};
use super::inputs::Link;
use super::{CauseEntry, CauseKind, RootCauses, MAX_CHAIN, MAX_LISTED};

/// The latest of the ascending rows `v` before row `i`.
pub(super) fn latest_before(v: &[usize], i: usize) -> Option<usize> {
    let k = v.partition_point(|&j| j < i);
    (k > 0).then(|| v[k - 1])
}

/// The rows classified so far, grouped under their causes.
pub(super) struct Tally<'a> {
    /// Each result row's kind (`None`: not a `diff` row, or not yet seen).
    kinds: Vec<Option<CauseKind>>,
    rc: RootCauses,
    /// Classified row -> the cause (result row) it counts under.
    root: AHashMap<usize, usize>,
    /// Cause row -> its place in `rc.causes` (when listed).
    cause_slot: AHashMap<usize, usize>,
    /// Differing external inputs (run-1 value, run-2 value) -> the entry
    /// that read them first.
    read_by: AHashMap<(&'a [u8], &'a [u8]), usize>,
    /// Collective row -> the entry via collective it first fed.
    via_cause: AHashMap<usize, usize>,
    /// Earliest one-sided op (result row) -> the one-sided cause it first fed.
    fed_by: AHashMap<usize, usize>,
    /// The cause of the latest row that diverges on its own account (not
    /// only below print precision).
    last_own: Option<usize>,
    /// Unsynced collectives (any status), ascending.
    unsynced: Vec<usize>,
    /// The diverging ones, ascending.
    unsynced_div: Vec<usize>,
}

impl<'a> Tally<'a> {
    /// An empty tally over the result rows `rows`, continuing `rc`.
    pub(super) fn new(rows: &[MatchRow], rc: RootCauses) -> Tally<'a> {
        let unsynced: Vec<usize> = rows
            .iter()
            .enumerate()
            .filter(|(_, r)| r.has(ROW_UNSYNCED))
            .map(|(i, _)| i)
            .collect();
        let unsynced_div = unsynced
            .iter()
            .copied()
            .filter(|&i| rows[i].status.is_divergence())
            .collect();
        Tally {
            kinds: vec![None; rows.len()],
            rc,
            root: AHashMap::new(),
            cause_slot: AHashMap::new(),
            read_by: AHashMap::new(),
            via_cause: AHashMap::new(),
            fed_by: AHashMap::new(),
            last_own: None,
            unsynced,
            unsynced_div,
        }
    }

    /// The cause that classified row `j` counts under.
    pub(super) fn root_of(&self, j: usize) -> Option<usize> {
        self.root.get(&j).copied()
    }

    /// The entry that first read the differing input values `(v1, v2)`.
    pub(super) fn entry_reading(&self, v1: &[u8], v2: &[u8]) -> Option<usize> {
        self.read_by.get(&(v1, v2)).copied()
    }

    /// The one-sided cause that one-sided op `op` (result row) first fed.
    pub(super) fn fed_by(&self, op: usize) -> Option<usize> {
        self.fed_by.get(&op).copied()
    }

    /// Where row `i`'s divergence comes from when no producer says: the
    /// latest own divergence, else an unsynced collective before it.
    pub(super) fn upstream(&self, i: usize) -> Upstream {
        match self.last_own {
            Some(j) => Upstream::Root(j),
            None if latest_before(&self.unsynced_div, i).is_some() => Upstream::Collective,
            None => Upstream::Nothing,
        }
    }

    /// Records `diff` row `i` of `rows` as `class`, with its differing
    /// input positions `bad` and the inputs it reads (`links`).
    pub(super) fn record(
        &mut self,
        rows: &[MatchRow],
        i: usize,
        class: Class,
        bad: Vec<usize>,
        links: &[Link<'a>],
    ) {
        let Class {
            kind,
            under,
            print_limited,
            one_sided,
        } = class;
        self.count(kind);
        self.kinds[i] = Some(kind);
        if kind == CauseKind::Unsynced {
            return;
        }
        // Entries via collective group by the nearest collective before them.
        let (under, collective) = if kind == CauseKind::ViaCollective && under.is_none() {
            let c = latest_before(&self.unsynced, i);
            match c.and_then(|c| self.via_cause.get(&c).copied()) {
                Some(v) => (Some(v), c),
                None => {
                    if let Some(c) = c {
                        self.via_cause.insert(c, i);
                    }
                    (None, c)
                }
            }
        } else {
            (under, None)
        };
        match under {
            None => {
                let one_sided = one_sided.unwrap_or_default();
                if kind == CauseKind::Entry {
                    for l in links {
                        self.read_by.entry((l.value, l.value2)).or_insert(i);
                    }
                }
                if let Some(&op) = one_sided.first() {
                    self.fed_by.insert(op, i);
                }
                let entry = CauseEntry {
                    index: i,
                    kind,
                    inputs: bad.into_iter().take(16).collect(),
                    inherited: 0,
                    below_print: 0,
                    untraced: 0,
                    reads: 0,
                    print_limited,
                    collective,
                    chain: Vec::new(),
                    one_sided,
                    in_its_place: None,
                };
                self.new_cause(entry);
            }
            Some(r) => self.count_under(i, kind, r),
        }
        if rows[i].has(ROW_OUT_DIFF) || kind != CauseKind::BelowPrint {
            self.last_own = self.root_of(i);
        }
    }

    /// Adds one row of `kind` to the per-kind counts.
    fn count(&mut self, kind: CauseKind) {
        let k = &mut self.rc.kinds;
        match kind {
            CauseKind::Origin => k.origin += 1,
            CauseKind::Entry => k.entry += 1,
            CauseKind::OneSided => k.one_sided += 1,
            CauseKind::Inherited => k.inherited += 1,
            CauseKind::BelowPrint => k.inherited_below_print += 1,
            CauseKind::Untraced => k.inherited_untraced += 1,
            CauseKind::ViaCollective => k.via_collective += 1,
            CauseKind::Unsynced => k.unsynced += 1,
            CauseKind::Record => k.record += 1,
        }
    }

    /// Starts a new cause at row `entry.index` (listed while fewer than
    /// [`MAX_LISTED`] are).
    fn new_cause(&mut self, entry: CauseEntry) {
        let (i, kind) = (entry.index, entry.kind);
        self.root.insert(i, i);
        if self.rc.causes.len() < MAX_LISTED {
            self.cause_slot.insert(i, self.rc.causes.len());
            self.rc.causes.push(entry);
        }
        if kind != CauseKind::ViaCollective {
            self.rc.cause_count += 1;
            self.rc.first_cause.get_or_insert(i);
        }
    }

    /// Counts row `i`, of `kind`, under cause `r`.
    fn count_under(&mut self, i: usize, kind: CauseKind, r: usize) {
        self.root.insert(i, r);
        let Some(&s) = self.cause_slot.get(&r) else {
            return;
        };
        let c = &mut self.rc.causes[s];
        match kind {
            CauseKind::Entry | CauseKind::OneSided | CauseKind::ViaCollective => c.reads += 1,
            CauseKind::Record => {}
            _ => {
                c.inherited += 1;
                if kind == CauseKind::BelowPrint {
                    c.below_print += 1;
                } else if kind == CauseKind::Untraced {
                    c.untraced += 1;
                }
            }
        }
        if c.chain.len() < MAX_CHAIN {
            c.chain.push(i);
        }
    }

    /// The rank's first cause so far (result row index).
    pub(super) fn first_cause(&self) -> Option<usize> {
        self.rc.first_cause
    }

    /// The kinds (indexed like the result rows) and the rank's causes.
    pub(super) fn finish(self) -> (Vec<Option<CauseKind>>, RootCauses) {
        (self.kinds, self.rc)
    }
}
