//! Combining one group of ranks (the shards of the same tensors) into one
//! whole-tensor log: [`Group::combine`], row by row. See the parent module
//! for the rules.

use std::collections::{BTreeSet, HashMap};

use super::{
    op_name, row_layout, shape_of, whole_over, Combined, Placement, ReplicaMismatch, RowLayout,
    COMMUNICATION_OPS, MISMATCHES_KEPT, SCATTER_OPS,
};
use crate::capture::digest;
use crate::capture::record::{write_block, write_header, Moments, Phase, Record, Stats};
use crate::logformat::{HeaderNotes, Precision};
use crate::parser::{Field, OpTable};

/// A pending sum kept without values until a reduction completes it.
struct Pending {
    /// Its combined input hashes (`None`: an input has no whole-tensor
    /// value, e.g. a sum of pending sums).
    inputs: Option<Vec<f64>>,
    /// Its whole shape (`Layout:`), if stated.
    shape: Option<Vec<i64>>,
    /// Its combined input digests (empty: not all have a whole-tensor
    /// digest).
    input_digests: Vec<u64>,
}

/// The state of combining one group.
pub(super) struct Group<'a> {
    tables: &'a [(u32, &'a OpTable)],
    combined: &'a [String],
    /// The ranks whose shards of the parameters the optimizer rows combine
    /// from, and the dimensions they differ in ([`Group::with_parameters`]);
    /// swapped with `tables` and `combined` for those rows.
    param_tables: &'a [(u32, &'a OpTable)],
    param_combined: &'a [String],
    out: &'a mut Combined,
    records: Vec<Record>,
    /// Pending sums by record index.
    pending: HashMap<usize, Pending>,
    /// A pending sum's (or its chain's) output hash text → record index.
    by_hash: HashMap<String, usize>,
    /// A pending sum's original key → record index.
    by_key: HashMap<String, usize>,
    /// Communication rows linked to a pending sum: key → (record index,
    /// whether a reduce-scatter left each rank a shard of the sum).
    chain: HashMap<String, (usize, bool)>,
    /// Pending sums a reduction completed.
    filled: BTreeSet<usize>,
    /// Per module FQN, the next op number (keys without the communication).
    seq: HashMap<String, u32>,
    /// Original key → combined key (or, for a left-out op, the key its
    /// consumers' producer links point to).
    renamed: HashMap<String, String>,
    /// (rank, key) already listed as a replica mismatch.
    flagged: BTreeSet<(u32, String)>,
}

impl<'a> Group<'a> {
    /// Checks that every rank records the same ops (keys, row by row).
    /// Errors name the file and line where they part. The logs are whole
    /// (a log cut short is refused before: `run::layouts::prepare`).
    pub(super) fn new(
        tables: &'a [(u32, &'a OpTable)],
        combined: &'a [String],
        out: &'a mut Combined,
    ) -> Result<Group<'a>, String> {
        let (r0, t0) = tables[0];
        for (r, t) in &tables[1..] {
            let n = t.len().min(t0.len());
            if let Some(row) = (0..n).find(|&i| t.key(i) != t0.key(i)) {
                return Err(format!(
                    "{}:{}: rank {r} records `{}` where rank {r0} records `{}` ({}:{}): the ranks of one group ran different ops (a change on one rank?), so their shards cannot be combined; compare this run with a run of its own layout",
                    t.path().display(),
                    t.line(row),
                    t.key_str(row),
                    t0.key_str(row),
                    t0.path().display(),
                    t0.line(row)
                ));
            }
            if t.len() != t0.len() {
                return Err(format!(
                    "{}: rank {r} records {} ops, rank {r0} {} ({}): the ranks of one group ran different ops (a change on one rank?), so their shards cannot be combined; compare this run with a run of its own layout",
                    t.path().display(),
                    t.len(),
                    t0.len(),
                    t0.path().display()
                ));
            }
        }
        Ok(Group {
            tables,
            combined,
            param_tables: &[],
            param_combined: &[],
            out,
            records: Vec::with_capacity(t0.len()),
            pending: HashMap::new(),
            by_hash: HashMap::new(),
            by_key: HashMap::new(),
            chain: HashMap::new(),
            filled: BTreeSet::new(),
            seq: HashMap::new(),
            renamed: HashMap::new(),
            flagged: BTreeSet::new(),
        })
    }

    /// Combines the optimizer rows over `tables` (every rank holding a
    /// shard of the parameters, FSDP's, whose optimizer ops agree row by
    /// row: [`parameter_rows_agree`]) on the mesh dimensions `dims`: the
    /// group's own rows stay its own.
    pub(super) fn with_parameters(
        mut self,
        tables: &'a [(u32, &'a OpTable)],
        dims: &'a [String],
    ) -> Group<'a> {
        self.param_tables = tables;
        self.param_combined = dims;
        self
    }

    fn t0(&self) -> &'a OpTable {
        self.tables[0].1
    }

    /// The combined log's text.
    pub(super) fn combine(mut self) -> Result<Vec<u8>, String> {
        let t0 = self.t0();
        for row in 0..t0.len() {
            let layout = row_layout(t0.block(row))
                .map_err(|e| format!("{}:{}: {e}", t0.path().display(), t0.line(row)))?;
            // An optimizer row: from every rank's shard of the parameters.
            let param = !self.param_tables.is_empty()
                && t0.phase_kind(row) == crate::parser::Phase::Optimizer;
            if param {
                std::mem::swap(&mut self.tables, &mut self.param_tables);
                std::mem::swap(&mut self.combined, &mut self.param_combined);
            }
            if !self.communication(row, &layout) {
                self.op(row, &layout);
            }
            if param {
                std::mem::swap(&mut self.tables, &mut self.param_tables);
                std::mem::swap(&mut self.combined, &mut self.param_combined);
            }
        }
        for (i, r) in self.records.iter().enumerate() {
            if self.pending.contains_key(&i) && !self.filled.contains(&i) {
                self.out.not_comparable_keys.push(r.key.clone());
            }
        }
        let h = t0.header();
        let notes = HeaderNotes {
            excluded: h.excluded.clone(),
            compiled: h.compiled.clone(),
            compiled_modules: h.compiled_modules.clone(),
            level: h.level,
            step: h.step,
            loss: h.loss,
            // The group's first rank's (the ranks of a tensor-parallel
            // group draw alike on the CPU).
            rng: h.rng,
            // The combined run: one rank a group.
            world_size: h.world_size.and_then(|w| {
                let g = self.tables.len() as u32;
                (w % g == 0).then_some(w / g)
            }),
            mesh: None,
            filter: h.filter.clone(),
            below_min_numel: h.below_min_numel,
        };
        let prec = match t0.precision() {
            crate::parser::Precision::Full => Precision::Full,
            _ => Precision::PRINTED,
        };
        let mut text = Vec::with_capacity(t0.bytes().len());
        write_header(&mut text, self.records.len() as u64, &notes, prec);
        for r in &self.records {
            write_block(&mut text, r, prec);
        }
        Ok(text)
    }

    /// Field `f` of row `row` must be the same text on every rank (a
    /// replica); a rank where it is not is a [`ReplicaMismatch`].
    fn check(&mut self, row: usize, f: Field, key: &str) {
        let (r0, t0) = self.tables[0];
        let v0 = t0.field(row, f);
        for (r, t) in &self.tables[1..] {
            if t.field(row, f) == v0 {
                continue;
            }
            self.out.mismatch_count += 1;
            if self.flagged.insert((*r, key.to_string()))
                && self.out.mismatches.len() < MISMATCHES_KEPT
            {
                self.out.mismatches.push(ReplicaMismatch {
                    rank: *r,
                    against: r0,
                    key: key.to_string(),
                    path: t.path().to_path_buf(),
                    line: t.line(row),
                    field: f.label().to_string(),
                });
            }
        }
    }

    /// Row `row`'s input producers, as written.
    fn producers(&self, row: usize) -> Vec<String> {
        let p = self.t0().text(row, Field::InputProducers);
        if p.is_empty() {
            Vec::new()
        } else {
            p.split(';').map(|s| s.trim().to_string()).collect()
        }
    }

    /// A communication op of the layout, or a pending sum's own preparation
    /// before its reduction (the masking of a vocabulary-parallel
    /// embedding's partial result: it reads the sum and writes no
    /// whole-tensor value): left out. When it completes a pending sum, the
    /// sum takes its values: a chain (an all_reduce, then the wrapper and
    /// wait that complete it) follows the values on, and the last holds
    /// the reduced value (an asynchronous all_reduce's own output is
    /// recorded before it completed). Returns whether the row was one.
    fn communication(&mut self, row: usize, layout: &RowLayout) -> bool {
        let t0 = self.t0();
        let key = t0.key_str(row).into_owned();
        let producers = self.producers(row);
        let is_communication = COMMUNICATION_OPS.contains(&op_name(&key));
        // (in place: it changes the sum itself, it makes no new one)
        let prepares_sum = !is_communication
            && op_name(&key).ends_with('_')
            && !layout.outputs.is_empty()
            && layout
                .outputs
                .iter()
                .all(|p| matches!(p, Placement::Partial(_) | Placement::Unknown))
            && producers
                .iter()
                .any(|p| self.by_key.contains_key(p) || self.chain.contains_key(p));
        if !(prepares_sum || is_communication) {
            return false;
        }
        self.out.communication_left_out += 1;
        let input = t0.text(row, Field::InputHashes);
        let linked = self
            .by_hash
            .get(input.as_ref())
            .map(|&i| (i, false))
            .or_else(|| producers.iter().find_map(|p| self.chain.get(p)).copied())
            .or_else(|| {
                producers
                    .iter()
                    .find_map(|p| self.by_key.get(p))
                    .map(|&i| (i, false))
            });
        if let Some((idx, scattered)) = linked {
            // A reduce-scatter leaves each rank a shard of the sum.
            let scattered = scattered || SCATTER_OPS.contains(&op_name(&key));
            self.chain.insert(key.clone(), (idx, scattered));
            if prepares_sum {
                // A later op of the chain may read it without a producer link.
                self.by_hash
                    .insert(t0.text(row, Field::OutputHash).into_owned(), idx);
            } else {
                self.complete(row, idx, scattered);
            }
        }
        // Its consumers' producer: the op whose pending sum it reduces,
        // else what it read.
        let through = match linked {
            Some((idx, _)) => self.records[idx].key.clone(),
            None => producers
                .iter()
                .find(|p| !p.is_empty())
                .map(|p| self.renamed.get(p).cloned().unwrap_or_else(|| p.clone()))
                .unwrap_or_default(),
        };
        self.renamed.insert(key, through);
        true
    }

    /// Gives pending sum `idx` the values of communication row `row` (each
    /// rank's shard of them when `scattered`).
    fn complete(&mut self, row: usize, idx: usize, scattered: bool) {
        let t0 = self.t0();
        let Some((dims, dtype)) = shape_of(&t0.text(row, Field::Shape)) else {
            return;
        };
        let n: i64 = dims.iter().product::<i64>()
            * if scattered {
                self.tables.len() as i64
            } else {
                1
            };
        let pending = &self.pending[&idx];
        let whole = pending
            .shape
            .clone()
            .filter(|w| w.iter().product::<i64>() == n)
            .or_else(|| (!scattered).then_some(dims));
        let Some(shape) = whole else {
            return;
        };
        let (moments, hashes) = if scattered {
            (
                combined_moments(self.tables, row),
                sum_lists(self.tables, row, Field::OutputHash),
            )
        } else {
            (moments(t0, row), nums(t0, row, Field::OutputHash))
        };
        let r = &mut self.records[idx];
        r.stats = Some(Stats {
            shape,
            dtype,
            moments,
        });
        r.output_hashes = hashes;
        if !scattered && !pending.input_digests.is_empty() {
            // A completed sum is whole on every rank: its digest is the
            // reduction's (a reduce-scatter's shards are not whole-indexed).
            let out: Option<Vec<u64>> = t0.digests(row, Field::OutputDigest).collect();
            if let Some(out) = out.filter(|o| !o.is_empty()) {
                r.output_digests = out;
                r.input_digests = pending.input_digests.clone();
            }
        }
        match &pending.inputs {
            Some(v) => r.input_hashes = v.clone(),
            None => self.out.inputs_unknown_keys.push(r.key.clone()),
        }
        if self.filled.insert(idx) {
            self.out.not_comparable -= 1;
        }
    }

    /// One op of the combined log: its values combined by placement.
    fn op(&mut self, row: usize, layout: &RowLayout) {
        let t0 = self.t0();
        let key = t0.key_str(row).into_owned();
        let module = super::module_of(&key).to_string();
        let n = self.seq.entry(module.clone()).or_insert(0);
        let new_key = format!("{module}/op_{n}_{}", op_name(&key));
        *n += 1;
        let producers = self
            .producers(row)
            .iter()
            .map(|p| self.renamed.get(p).cloned().unwrap_or_else(|| p.clone()))
            .collect();
        self.renamed.insert(key.clone(), new_key.clone());
        let mut rec = Record {
            key: new_key,
            location: Some(t0.text(row, Field::Location).into_owned()).filter(|s| !s.is_empty()),
            phase: if t0.is_backward(row) {
                Phase::Backward
            } else {
                Phase::Forward
            },
            input_producers: producers,
            // An optimizer op's parameters, as written (the compare names
            // them).
            parameters: t0.parameters(row).into_owned(),
            output_parameters: {
                let e = t0.extra_field(row, crate::logformat::OUTPUT_PARAMETERS_LABEL);
                String::from_utf8_lossy(e)
                    .split(';')
                    .map(|p| p.trim().to_string())
                    .filter(|_| !e.is_empty())
                    .collect()
            },
            ..Default::default()
        };
        let stats_ok = self.stats(row, layout, &key, &mut rec);
        let outputs = self.hashes(row, Field::OutputHash, &layout.outputs, &key);
        let inputs = self.hashes(row, Field::InputHashes, &layout.inputs, &key);
        let comparable = stats_ok && outputs.is_some();
        if comparable {
            if inputs.is_none() {
                self.out.inputs_unknown_keys.push(rec.key.clone());
            }
            rec.output_hashes = outputs.unwrap_or_default();
            rec.input_hashes = inputs.clone().unwrap_or_default();
            rec.output_digests = self.digests(row, Field::OutputDigest, &layout.outputs);
            rec.input_digests = self.digests(row, Field::InputDigests, &layout.inputs);
        } else {
            self.out.not_comparable += 1;
            rec.stats = None;
            let partial = matches!(layout.stats, Some((Placement::Partial(_), _)))
                || layout
                    .outputs
                    .iter()
                    .any(|p| matches!(p, Placement::Partial(_)));
            let idx = self.records.len();
            if partial {
                self.by_hash
                    .insert(t0.text(row, Field::OutputHash).into_owned(), idx);
                self.by_key.insert(key, idx);
                let input_digests = self.digests(row, Field::InputDigests, &layout.inputs);
                self.pending.insert(
                    idx,
                    Pending {
                        inputs,
                        shape: layout.stats.as_ref().map(|(_, s)| s.clone()),
                        input_digests,
                    },
                );
            }
        }
        self.records.push(rec);
    }

    /// The stats of row `row` into `rec`: a replica's (checked across the
    /// group) or a whole-tensor shard's combined. False when they have no
    /// whole-tensor value.
    fn stats(&mut self, row: usize, layout: &RowLayout, key: &str, rec: &mut Record) -> bool {
        let t0 = self.t0();
        if !t0.has(row, Field::Shape) {
            return true;
        }
        let place = layout
            .stats
            .as_ref()
            .map_or(Placement::Plain, |(p, _)| p.clone());
        let Some((dims, dtype)) = shape_of(&t0.text(row, Field::Shape)) else {
            return false;
        };
        if place.is_same_over(self.combined) {
            for f in [
                Field::Shape,
                Field::L2Norm,
                Field::Min,
                Field::Max,
                Field::Mean,
            ] {
                self.check(row, f, key);
            }
            rec.stats = Some(Stats {
                shape: dims,
                dtype,
                moments: moments(t0, row),
            });
            true
        } else if whole_over(&place, self.combined) {
            rec.stats = Some(Stats {
                shape: layout
                    .stats
                    .as_ref()
                    .map(|(_, s)| s.clone())
                    .unwrap_or_default(),
                dtype,
                moments: combined_moments(self.tables, row),
            });
            true
        } else {
            false
        }
    }

    /// The combined hash list `field` of row `row` by `places` (absent:
    /// plain): a replica's value (checked across the group when every value
    /// is one), a whole-tensor shard's sum. `None` when some value has no
    /// whole-tensor counterpart.
    fn hashes(
        &mut self,
        row: usize,
        field: Field,
        places: &[Placement],
        key: &str,
    ) -> Option<Vec<f64>> {
        let first = nums(self.t0(), row, field);
        let sums = sum_lists(self.tables, row, field);
        let mut v = Vec::with_capacity(first.len());
        let mut ok = true;
        let mut replicas = true;
        for (j, x) in first.iter().enumerate() {
            let p = places.get(j).unwrap_or(&Placement::Plain);
            let same = p.is_same_over(self.combined);
            replicas &= same;
            if same {
                v.push(*x);
            } else if whole_over(p, self.combined) {
                v.push(sums[j]);
            } else {
                ok = false;
            }
        }
        if replicas {
            self.check(row, field, key);
        }
        ok.then_some(v)
    }
}

/// Whether the logs `tables` (the ranks holding shards of the same
/// parameters) run the same optimizer ops, row by row (same length, same
/// key at each optimizer-phase row): their optimizer rows can then be
/// combined. Errors say where they part (a shard below `min_numel` on one
/// rank only is left out there).
pub(super) fn parameter_rows_agree(tables: &[(u32, &OpTable)]) -> Result<(), String> {
    let Some(&(r0, t0)) = tables.first() else {
        return Ok(());
    };
    for (r, t) in &tables[1..] {
        if t.len() != t0.len() {
            return Err(format!(
                "rank {r} records {} ops, rank {r0} {} ({} and {})",
                t.len(),
                t0.len(),
                t.path().display(),
                t0.path().display()
            ));
        }
        let optimizer = |i: usize| t0.phase_kind(i) == crate::parser::Phase::Optimizer;
        if let Some(row) = (0..t0.len()).find(|&i| optimizer(i) && t.key(i) != t0.key(i)) {
            return Err(format!(
                "{}:{}: rank {r} records `{}` where rank {r0} records `{}`",
                t.path().display(),
                t.line(row),
                t.key_str(row),
                t0.key_str(row)
            ));
        }
    }
    Ok(())
}

impl Group<'_> {
    /// The combined digest list `field` of row `row` by `places`: a
    /// replica's digest, or a shard's over one combined mesh dimension
    /// combined from the group's shards ([`digest::combine`]: the capture
    /// digests a shard by its elements' whole-tensor index). Empty when
    /// some digest has no whole-tensor counterpart (a pending sum, a
    /// shard over several mesh dimensions, a log without digests).
    fn digests(&self, row: usize, field: Field, places: &[Placement]) -> Vec<u64> {
        let lists: Vec<Vec<Option<u64>>> = self
            .tables
            .iter()
            .map(|(_, t)| t.digests(row, field).collect())
            .collect();
        let mut out = Vec::with_capacity(lists[0].len());
        for (j, d0) in lists[0].iter().enumerate() {
            let p = places.get(j).unwrap_or(&Placement::Plain);
            let d = if p.is_same_over(self.combined) {
                *d0
            } else if matches!(p, Placement::Shard(s) if s.len() == 1)
                && whole_over(p, self.combined)
            {
                lists
                    .iter()
                    .map(|l| l.get(j).copied().flatten())
                    .collect::<Option<Vec<u64>>>()
                    .map(digest::combine)
            } else {
                None
            };
            match d {
                Some(d) => out.push(d),
                None => return Vec::new(),
            }
        }
        out
    }
}

fn num(t: &OpTable, row: usize, f: Field) -> Option<f64> {
    let s = t.text(row, f);
    let s = s.trim();
    if s.is_empty() {
        return None;
    }
    s.parse().ok()
}

fn nums(t: &OpTable, row: usize, f: Field) -> Vec<f64> {
    t.text(row, f)
        .split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| s.parse().unwrap_or(f64::NAN))
        .collect()
}

/// Element-wise sums of list `field` of row `row` over the ranks.
fn sum_lists(tables: &[(u32, &OpTable)], row: usize, field: Field) -> Vec<f64> {
    let lists: Vec<Vec<f64>> = tables.iter().map(|(_, t)| nums(t, row, field)).collect();
    (0..lists[0].len())
        .map(|j| {
            lists
                .iter()
                .map(|v| v.get(j).copied().unwrap_or(f64::NAN))
                .sum()
        })
        .collect()
}

/// One table's moments of row `row` (`None` without an L2 norm line).
fn moments(t: &OpTable, row: usize) -> Option<Moments> {
    Some(Moments {
        l2: num(t, row, Field::L2Norm)?,
        min: num(t, row, Field::Min).unwrap_or(f64::NAN),
        max: num(t, row, Field::Max).unwrap_or(f64::NAN),
        mean: num(t, row, Field::Mean).unwrap_or(f64::NAN),
        nan_count: 0,
        inf_count: 0,
    })
}

/// The whole tensor's moments from its shards': L2 = √Σ L2ᵢ², min and
/// max, mean = Σ meanᵢ·nᵢ / Σ nᵢ (nᵢ each shard's element count).
fn combined_moments(tables: &[(u32, &OpTable)], row: usize) -> Option<Moments> {
    let (mut sq, mut lo, mut hi, mut sum, mut n) =
        (0.0f64, f64::INFINITY, f64::NEG_INFINITY, 0.0, 0.0);
    let mut nan = false;
    for (_, t) in tables {
        let m = moments(t, row)?;
        let k: f64 = shape_of(&t.text(row, Field::Shape))
            .map(|(d, _)| d.iter().product::<i64>() as f64)
            .unwrap_or(0.0);
        nan |= m.min.is_nan() || m.max.is_nan();
        sq += m.l2 * m.l2;
        lo = lo.min(m.min);
        hi = hi.max(m.max);
        sum += m.mean * k;
        n += k;
    }
    Some(Moments {
        l2: sq.sqrt(),
        min: if nan { f64::NAN } else { lo },
        max: if nan { f64::NAN } else { hi },
        mean: if n > 0.0 { sum / n } else { f64::NAN },
        nan_count: 0,
        inf_count: 0,
    })
}
