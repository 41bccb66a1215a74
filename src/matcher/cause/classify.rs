//! Step 3 of root cause: [`classify`], the one place a diverging row gets
//! its [`CauseKind`] and the cause it counts under. It reads what the
//! earlier steps found (the row's differing inputs, their producers, the
//! one-sided ops feeding them) and what the tally knows of the rows before
//! it; it changes nothing, so the rules of the module doc read here in one
//! piece.

use super::super::compare::split_tokens;
use super::super::{MatchRow, Status, ROW_OUT_DIFF, ROW_STATS_DIFF, ROW_UNSYNCED};
use super::inputs::Pending;
use super::producers::{Heads, Producers};
use super::tally::Tally;
use super::CauseKind;
use crate::parser::{Field, OpTable};

/// Where an untraced or below-print row's divergence comes from: the latest
/// diverging row before it, preferring the rank's own divergence to an
/// unsynced collective.
pub(super) enum Upstream {
    /// The cause (result row index) of an earlier diverging row.
    Root(usize),
    /// Only an unsynced collective diverges before it.
    Collective,
    /// Nothing diverges before it.
    Nothing,
}

/// What [`classify`] reads besides a row's own inputs: run 1's producers
/// of the inputs asked about, every result row, run 1's log, and the
/// inputs of the one-sided ops that start a chain.
pub(super) struct Evidence<'e, 'a> {
    pub(super) prods: &'e Producers<'a>,
    pub(super) rows: &'e [MatchRow],
    pub(super) t1: &'e OpTable,
    pub(super) heads: &'e Heads<'a>,
}

/// What [`classify`] decided for one diverging row.
pub(super) struct Class {
    /// How it came to diverge.
    pub(super) kind: CauseKind,
    /// The cause (result row index) it counts under; `None`: it is a new
    /// cause (or an unsynced collective, which is never one). An entry via
    /// collective is grouped by the tally, by its collective.
    pub(super) under: Option<usize>,
    /// An origin that print rounding could explain, with nothing diverging
    /// before it ([`super::CauseEntry::print_limited`]).
    pub(super) print_limited: bool,
    /// For a one-sided row: the one-sided ops feeding it (result row
    /// indexes, the earliest, which names the cause, first).
    pub(super) one_sided: Option<Vec<usize>>,
}

impl Class {
    /// A differing record of a module-level log, counted under the rank's
    /// first (`first`; `None`: it is the first).
    pub(super) fn record(first: Option<usize>) -> Class {
        Class::new(CauseKind::Record, first)
    }

    /// A recomputation of a forward pair counted under `root`
    /// ([`crate::matcher::recompute::paired_repeats`]): it carries that
    /// divergence on.
    pub(super) fn recomputed(root: usize) -> Class {
        Class::new(CauseKind::Inherited, Some(root))
    }

    fn new(kind: CauseKind, under: Option<usize>) -> Class {
        Class {
            kind,
            under,
            print_limited: false,
            one_sided: None,
        }
    }
}

/// Classifies `diff` row `i` (see the module doc of [`super`]), given its
/// inputs (`None` for an unsynced collective) with the one-sided chain
/// feeding them, the producers, and the rows classified before it.
pub(super) fn classify(
    i: usize,
    inputs: Option<(&Pending<'_>, Option<&[usize]>)>,
    ev: &Evidence<'_, '_>,
    known: &Tally<'_>,
    gradient_collective: bool,
) -> Class {
    match inputs {
        None => Class::new(CauseKind::Unsynced, None),
        Some((p, _)) if p.bad.is_empty() && !p.explained => {
            hidden_input(i, p, ev, known).unwrap_or_else(|| Class::new(CauseKind::Origin, None))
        }
        Some((p, _)) if p.bad.is_empty() => below_print(i, p, ev.prods, known),
        Some((p, source)) => differing(i, p, source, ev, known, gradient_collective),
    }
}

/// For a row whose inputs all agree by their hashes (an origin unless
/// this finds one): the class of a row one of whose inputs is the first
/// output (the one its statistics describe) of a captured producer whose
/// Output hash agrees while its statistics differ ([`ROW_STATS_DIFF`]):
/// inherited from that producer when it is `diff`; when it is a `match`
/// (within the hash tolerance), carried on below print precision from the
/// latest divergence before the row, if any. The hash, an L1 norm, is blind to
/// the change (a softmax's rows each sum to 1: its L1 norm is its row
/// count), so the input differs and the row inherits the divergence (trial
/// 13: a router's `topk` was named an origin below the `softmax` whose
/// min and max had changed).
fn hidden_input(
    i: usize,
    p: &Pending<'_>,
    ev: &Evidence<'_, '_>,
    known: &Tally<'_>,
) -> Option<Class> {
    let (prods, rows, t1) = (ev.prods, ev.rows, ev.t1);
    p.links.iter().find_map(|l| {
        if l.prod.is_empty() {
            return None;
        }
        let j = prods.before(i, l.prod, l.value)?;
        let row = &rows[j];
        if !row.has(ROW_STATS_DIFF) {
            return None;
        }
        let first = split_tokens(t1.field(row.r1()?, Field::OutputHash)).next()?;
        if first != l.value {
            return None;
        }
        match row.status {
            Status::Diff => Some(Class::new(CauseKind::Inherited, Some(known.root_of(j)?))),
            // A producer within the hash tolerance whose statistics moved
            // (an Adam moment): the row carries on a difference the hashes
            // cannot show, from the latest divergence before it (AdamW's
            // first update, about lr * sign(g), magnifies it).
            _ => match known.upstream(i) {
                Upstream::Root(r) => Some(Class::new(CauseKind::BelowPrint, Some(r))),
                _ => None,
            },
        }
    })
}

/// The cause of a diverging row that the one-sided op `head` (the first of
/// a chain of ops of one run only) reads, by the producer keys its own log
/// names, else by value ([`super::producers::head_producers`]), looked up
/// in run 1: a paired `diff` row whose output differs and whose cause is
/// known.
fn diverging_head_input(head: usize, ev: &Evidence<'_, '_>, known: &Tally<'_>) -> Option<usize> {
    let (prods, rows) = (ev.prods, ev.rows);
    ev.heads.get(&head)?.iter().find_map(|inp| {
        let j = match inp.row {
            Some(j) => j,
            None if inp.key.is_empty() && inp.value.is_empty() => return None,
            None => prods.before(head, inp.key, inp.value)?,
        };
        let row = &rows[j];
        (row.status == Status::Diff && (row.has(ROW_OUT_DIFF) || row.has(ROW_STATS_DIFF)))
            .then(|| known.root_of(j))
            .flatten()
    })
}

/// A row whose inputs agree and whose output difference print rounding
/// explains: carried on from a diverging producer, else from the latest
/// diverging row before it; with nothing before it, an origin the log's
/// digits cannot confirm.
fn below_print(i: usize, p: &Pending<'_>, prods: &Producers<'_>, known: &Tally<'_>) -> Class {
    let producer = p.links.iter().find_map(|l| {
        let j = prods.before(i, l.prod, l.value)?;
        known.root_of(j)
    });
    match producer.map_or_else(|| known.upstream(i), Upstream::Root) {
        Upstream::Root(r) => Class::new(CauseKind::BelowPrint, Some(r)),
        Upstream::Collective => Class::new(CauseKind::ViaCollective, None),
        Upstream::Nothing => Class {
            print_limited: true,
            ..Class::new(CauseKind::Origin, None)
        },
    }
}

/// A row with differing inputs: inherited from a captured diverging
/// producer; else fed by a one-sided op; else an entry grouped with an
/// earlier entry that read the same differing values; else via an unsynced
/// collective; else attributed to the latest divergence before it; else,
/// in the optimizer phase after a collective of the backward phase
/// captured before it completed (`gradient_collective`: DDP's gradient
/// all-reduce, hashed as this rank's own bucket, so it agrees, and the
/// reduced gradients reach `.grad` through copies the capture excludes),
/// via that collective; else a new entry.
fn differing(
    i: usize,
    p: &Pending<'_>,
    source: Option<&[usize]>,
    ev: &Evidence<'_, '_>,
    known: &Tally<'_>,
    gradient_collective: bool,
) -> Class {
    let (prods, rows) = (ev.prods, ev.rows);
    let (mut untraced, mut inherited_from, mut via) = (false, None, false);
    let mut read = None;
    let mut agreed = 0;
    for l in &p.links {
        match prods.before(i, l.prod, l.value) {
            // A difference the digests see, within the row's tolerance by
            // the printed hashes, from a producer whose row agrees: the
            // input agrees, as the producer's row does.
            Some(j) if l.soft && rows[j].status == Status::Match => agreed += 1,
            Some(j) if rows[j].has(ROW_UNSYNCED) => via = true,
            Some(j)
                if rows[j].status == Status::Diff
                    && (rows[j].has(ROW_OUT_DIFF) || rows[j].has(ROW_STATS_DIFF))
                    && known.root_of(j).is_some() =>
            {
                inherited_from = inherited_from.or(known.root_of(j));
            }
            // No captured producer, or the producer's output agrees and the
            // value changed outside the capture.
            _ => {
                untraced = true;
                read = read.or(known.entry_reading(l.value, l.value2));
            }
        }
    }
    if agreed == p.links.len() {
        // Every differing input agrees where it was made: inputs agree,
        // the output differs.
        hidden_input(i, p, ev, known).unwrap_or_else(|| Class::new(CauseKind::Origin, None))
    } else if let Some(r) = inherited_from {
        Class::new(CauseKind::Inherited, Some(r))
    } else if let Some(r) = source.and_then(|c| diverging_head_input(c[0], ev, known)) {
        // The one-sided ops feeding it read a diverging row themselves (an
        // MoE expert that only one run's changed routing ran): they carry
        // on that divergence, they do not start one.
        Class::new(CauseKind::Inherited, Some(r))
    } else if let Some(chain) = source {
        // An op of one run only feeds a differing input: one cause per
        // earliest one-sided op.
        Class {
            one_sided: Some(chain.to_vec()),
            ..Class::new(CauseKind::OneSided, known.fed_by(chain[0]))
        }
    } else if let Some(c) = read {
        Class::new(CauseKind::Entry, Some(c))
    } else if via && !untraced {
        Class::new(CauseKind::ViaCollective, None)
    } else {
        match known.upstream(i) {
            Upstream::Root(r) => Class::new(CauseKind::Untraced, Some(r)),
            Upstream::Collective => Class::new(CauseKind::ViaCollective, None),
            Upstream::Nothing if gradient_collective && untraced => {
                Class::new(CauseKind::ViaCollective, None)
            }
            Upstream::Nothing => Class::new(CauseKind::Entry, None),
        }
    }
}
