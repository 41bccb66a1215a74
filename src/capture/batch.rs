//! Queuing records' scalars on the device and moving them to the host once
//! per flush ([`StatsBatch`]), and a whole capture on top of it
//! ([`Capture`]: keys with per-module op counters, producer links by tensor
//! id, the excluded-op set, and the writer thread).
//!
//! ```no_run
//! use actdiff::capture::{Capture, OpRecord, StatsPath, Phase};
//! use actdiff::capture::torch::Tensor;
//!
//! let mut cap = Capture::create("dump/rank_0_activations.log", StatsPath::Auto).unwrap();
//! let x = Tensor::from_slice(&[1.0f32; 64 * 64], &[64, 64]).unwrap();
//! let w = Tensor::from_slice(&[0.5f32; 64 * 64], &[64, 64]).unwrap();
//! let y = Tensor::from_slice(&[32.0f32; 64 * 64], &[64, 64]).unwrap(); // x @ w
//! let meta = OpRecord { fqn: Some("layers.0.wq"), op: "mm", phase: Phase::Forward, location: None, layout: None, digest_index: Default::default(), parameters: String::new(), output_parameters: Vec::new(), input_parameters: Vec::new() };
//! // inputs' tensor ids 1, 2; output id 3 (any ids, stable while the tensors live)
//! cap.record(meta, Some(0), &[&y], (&[&x, &w][..]).into(), &[1, 2], &[3]).unwrap();
//! cap.note_excluded("t");
//! let n = cap.finish().unwrap(); // flush + header + rename
//! assert_eq!(n, 1);
//! ```

use std::collections::{BTreeSet, HashMap};
use std::io;
use std::path::PathBuf;
use std::sync::Arc;

use super::digest::{self, Index};
use super::record::{Phase, Precision, Record, Stats};
use super::stats::{
    host_stats, is_stats_kind, moments_from, StatsPath, TensorStats, N_MOMENT_SCALARS,
};
use super::torch::{cat, Device, Info, Tensor, TorchError};
use super::writer::LogWriter;
use crate::logformat::{CompileBackend, HeaderNotes};

/// The number of values a tensor's digest sums (`n` of [`digest`]'s step
/// 4, [`Info::digest_len`]).
pub fn digest_len(i: &Info) -> u64 {
    i.digest_len() as u64
}

/// The digest [`Index`] of each output and each input of a record: a shard
/// of a DTensor is digested by its elements' positions in the whole tensor
/// ([`digest`], "Shards"). A tensor past the end of its list (every tensor,
/// for empty lists) is whole.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DigestIndexes {
    /// One per output, in output order.
    pub outputs: Vec<Index>,
    /// One per input, in input order.
    pub inputs: Vec<Index>,
}

/// Entry `i` of `v`, or [`Index::WHOLE`] past its end.
fn index_at(v: &[Index], i: usize) -> Index {
    v.get(i).copied().unwrap_or(Index::WHOLE)
}

/// Errors of the capture agent.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// A libtorch call failed.
    #[error("libtorch: {0}")]
    Torch(#[from] TorchError),
    /// Writing the log failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The capture was already finished.
    #[error("the capture is already finished")]
    Finished,
}

/// The statistics of a CPU tensor being computed by the [`HostWorker`].
type Deferred = crossbeam_channel::Receiver<Result<TensorStats, TorchError>>;

/// Where a deferred tensor's statistics go in its record: the moments at
/// `0..N_MOMENT_SCALARS` (a primary output) or its L1 hash at `hash`, and
/// its digest sum at `digest`.
#[derive(Clone, Copy, Debug)]
enum Slots {
    Moments { digest: Option<usize> },
    Hash { hash: usize, digest: Option<usize> },
}

/// Computes CPU tensors' statistics and digests on one thread of its own,
/// in the order they were handed over ([`Capture::defer_host`]): the
/// caller goes on while the worker reads the tensors. One thread, so that
/// the fused pass takes one core and leaves the others to the training.
///
/// The caller must keep each tensor unchanged until its statistics are
/// read: [`HostWorker::wait`] returns once every tensor handed over so far
/// is done (the Python agent waits at the end of backward and before the
/// optimizer changes the parameters), and a flush waits for its records.
pub struct HostWorker {
    pool: rayon::ThreadPool,
}

impl HostWorker {
    /// Starts the worker thread.
    pub fn start() -> io::Result<HostWorker> {
        let pool = rayon::ThreadPoolBuilder::new()
            .num_threads(1)
            .thread_name(|_| "actdiff-stats".into())
            .build()
            .map_err(io::Error::other)?;
        Ok(HostWorker { pool })
    }

    /// Queues the statistics of `t` (a handle: the tensor is not copied).
    fn submit(&self, t: &Tensor, moments: bool, digest: Option<Index>) -> Deferred {
        let (tx, rx) = crossbeam_channel::bounded(1);
        let t = t.clone();
        // Inside the pool, the fused pass's rayon splits run on its one thread.
        self.pool.spawn_fifo(move || {
            let _ = tx.send(host_stats(&t, moments, digest));
        });
        rx
    }

    /// Blocks until every tensor handed over so far has been read.
    pub fn wait(&self) {
        let (tx, rx) = crossbeam_channel::bounded::<()>(1);
        self.pool.spawn_fifo(move || {
            let _ = tx.send(());
        });
        let _ = rx.recv();
    }
}

/// Scalars of one record or one set of input hashes under construction:
/// values already on the host, 1-d float64 device tensors with the
/// positions their values go to (one position per value, in order), and
/// CPU tensors' statistics the [`HostWorker`] is computing.
#[derive(Default)]
struct Scalars {
    host: Vec<(usize, f64)>,
    dev: Vec<(Device, Vec<Tensor>, Vec<usize>)>,
    deferred: Vec<(Deferred, Slots)>,
}

/// Each value of `st` with its position in a record, as `slots` places
/// them (the digest only when `st` has one), handed to `put`.
fn slot_values(st: &TensorStats, slots: Slots, mut put: impl FnMut(usize, f64)) {
    let digest = match slots {
        Slots::Moments { digest } => {
            let m = st.moments.expect("moments of a non-empty float tensor");
            let v = [
                st.l1,
                m.l2,
                m.min,
                m.max,
                m.mean,
                m.nan_count as f64,
                m.inf_count as f64,
            ];
            for (pos, x) in v.into_iter().enumerate() {
                put(pos, x);
            }
            digest
        }
        Slots::Hash { hash, digest } => {
            put(hash, st.l1);
            digest
        }
    };
    if let (Some(pos), Some(d)) = (digest, st.digest) {
        put(pos, f64::from_bits(d));
    }
}

impl Scalars {
    fn push_dev(&mut self, d: Device, positions: &[usize], t: Tensor) {
        match self.dev.iter_mut().find(|(dd, _, _)| *dd == d) {
            Some((_, ts, ps)) => {
                ts.push(t);
                ps.extend_from_slice(positions);
            }
            None => self.dev.push((d, vec![t], positions.to_vec())),
        }
    }

    /// Concatenates each device's scalars into one 1-d tensor.
    fn stacked(self) -> Result<Stacked, TorchError> {
        let mut dev = Vec::with_capacity(self.dev.len());
        for (d, ts, ps) in self.dev {
            let t = if ts.len() == 1 {
                ts.into_iter().next().expect("one tensor")
            } else {
                cat(&ts.iter().collect::<Vec<_>>())?
            };
            dev.push((d, t, ps));
        }
        Ok(Stacked {
            host: self.host,
            dev,
            deferred: self.deferred,
        })
    }
}

struct Stacked {
    host: Vec<(usize, f64)>,
    dev: Vec<(Device, Tensor, Vec<usize>)>,
    deferred: Vec<(Deferred, Slots)>,
}

/// Input hashes (and digests) taken before an op ran
/// ([`StatsBatch::hash_inputs`]): on the host already, or queued on the
/// inputs' devices (in stream order, so they see the inputs before the op
/// changes them). Positions: hash `i` at `i`, digest `i` at `n + i`.
pub struct InputHashes {
    n: usize,
    numels: Vec<u64>,
    s: Stacked,
}

impl InputHashes {
    /// Number of inputs hashed.
    pub fn len(&self) -> usize {
        self.n
    }
    /// Whether no input was hashed.
    pub fn is_empty(&self) -> bool {
        self.n == 0
    }
}

/// The inputs of a record: tensors to hash now (an op that does not mutate
/// its inputs can be hashed after it ran), or hashes taken before.
pub enum Inputs<'a> {
    /// Hash these now.
    Tensors(&'a [&'a Tensor]),
    /// Hashed before the op ran.
    Hashed(InputHashes),
}

impl<'a> From<&'a [&'a Tensor]> for Inputs<'a> {
    fn from(t: &'a [&'a Tensor]) -> Self {
        Inputs::Tensors(t)
    }
}

/// Where a device group's values go in a pending record.
struct Fixup {
    group: usize,
    src: usize,
    positions: Vec<usize>,
}

/// The primary output of a pending record.
struct Primary {
    shape: Vec<i64>,
    dtype: &'static str,
    /// Index in the outputs.
    index: usize,
    /// Whether it has elements (and so moments; its hash is their L1).
    nonempty: bool,
}

/// A pending record's values: `[moments (N_MOMENT_SCALARS) if primary]
/// [output hashes] [input hashes]`, then with digests `[output digest sums]
/// [input digest sums]` (float64 bit patterns, finished at flush with
/// `numels`).
struct Pending {
    rec: Record,
    primary: Option<Primary>,
    n_out: usize,
    n_in: usize,
    values: Vec<f64>,
    numels: Vec<u64>,
    fixups: Vec<Fixup>,
    deferred: Vec<(Deferred, Slots)>,
}

struct Group {
    device: Device,
    parts: Vec<Tensor>,
    len: usize,
}

/// A batch of records whose scalars may still be on devices. Each tensor's
/// scalars (stats, hash, digest) are one 1-d device tensor, concatenated per
/// record and device; [`flush`] concatenates all of them and makes ONE
/// device-to-host copy per device.
///
/// [`flush`]: StatsBatch::flush
pub struct StatsBatch {
    path: StatsPath,
    digests: bool,
    /// CPU tensors' statistics of records (not of pre-op input hashes)
    /// go to this worker ([`Capture::defer_host`]).
    worker: Option<Arc<HostWorker>>,
    pending: Vec<Pending>,
    groups: Vec<Group>,
    device_scalars: usize,
}

impl StatsBatch {
    /// An empty batch; `digests`: every hashed tensor also gets a content
    /// digest ([`digest`]).
    pub fn new(path: StatsPath, digests: bool) -> StatsBatch {
        StatsBatch {
            path,
            digests,
            worker: None,
            pending: Vec::new(),
            groups: Vec::new(),
            device_scalars: 0,
        }
    }

    /// Records waiting for [`flush`](StatsBatch::flush).
    pub fn len(&self) -> usize {
        self.pending.len()
    }

    /// Whether no record waits.
    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Scalars queued on devices (0 when every tensor was on the CPU with
    /// [`StatsPath::Auto`]).
    pub fn device_scalars(&self) -> usize {
        self.device_scalars
    }

    /// The digest a tensor of index `at` gets (`None`: no digests).
    fn digest_at(&self, at: Index) -> Option<Index> {
        self.digests.then_some(at)
    }

    /// Hashes (and digests, indexed by `at`) `t` into `hash_pos` (and
    /// `digest_pos`); returns its number of digest values. `defer`: a CPU
    /// tensor may go to the [`HostWorker`] (never for pre-op input hashes,
    /// which must be read before the op).
    fn hash_into(
        &self,
        s: &mut Scalars,
        (hash_pos, digest_pos): (usize, usize),
        t: &Tensor,
        at: Index,
        defer: bool,
    ) -> Result<u64, TorchError> {
        let i = t.info()?;
        let host = self.path == StatsPath::Auto && i.device == Device::Cpu;
        let slots = Slots::Hash {
            hash: hash_pos,
            digest: self.digests.then_some(digest_pos),
        };
        if let (true, true, Some(w)) = (host, defer, &self.worker) {
            s.deferred
                .push((w.submit(t, false, self.digest_at(at)), slots));
        } else if host {
            let st = host_stats(t, false, self.digest_at(at))?;
            slot_values(&st, slots, |pos, v| s.host.push((pos, v)));
        } else {
            let v = t.scalars(false, self.digest_at(at))?;
            let ps = [hash_pos, digest_pos];
            s.push_dev(i.device, &ps[..1 + self.digests as usize], v);
        }
        Ok(digest_len(&i))
    }

    /// Hashes `inputs` now (before the op that may mutate them runs);
    /// `index`: their digest indexes (see [`DigestIndexes`]).
    pub fn hash_inputs(
        &self,
        inputs: &[&Tensor],
        index: &[Index],
    ) -> Result<InputHashes, TorchError> {
        let mut s = Scalars::default();
        let n = inputs.len();
        let mut numels = Vec::with_capacity(n);
        for (i, t) in inputs.iter().enumerate() {
            numels.push(self.hash_into(&mut s, (i, n + i), t, index_at(index, i), false)?);
        }
        Ok(InputHashes {
            n,
            numels,
            s: s.stacked()?,
        })
    }

    /// Queues a record: `rec` carries key, producers, location and phase;
    /// its stats, hashes (and digests) are filled from `outputs` (every
    /// tensor output, hashed), `primary` (the index in `outputs` of the one
    /// whose Shape and stats are written; `None` for a hash-only record) and
    /// `inputs`; digests are indexed by `digest_index`.
    ///
    /// Panics if `primary` is not an index of `outputs`.
    pub fn push(
        &mut self,
        rec: Record,
        primary: Option<usize>,
        outputs: &[&Tensor],
        inputs: Inputs<'_>,
        digest_index: &DigestIndexes,
    ) -> Result<(), TorchError> {
        let n_out = outputs.len();
        let n_in = match &inputs {
            Inputs::Tensors(ts) => ts.len(),
            Inputs::Hashed(h) => h.n,
        };
        let base_out = if primary.is_some() {
            N_MOMENT_SCALARS
        } else {
            0
        };
        let base_in = base_out + n_out;
        let dbase = base_in + n_in;
        let n_values = dbase + if self.digests { n_out + n_in } else { 0 };
        let mut s = Scalars::default();
        let mut numels = vec![0u64; if self.digests { n_out + n_in } else { 0 }];
        let mut prim = None;
        if let Some(index) = primary {
            let p = outputs[index];
            let info = p.info()?;
            let shape = p.sizes()?;
            let nonempty = info.numel > 0;
            let moments = nonempty && is_stats_kind(info.kind);
            prim = Some(Primary {
                shape,
                dtype: info.dtype_name,
                index,
                nonempty: moments,
            });
            if moments {
                let dpos = dbase + index;
                if self.digests {
                    numels[index] = digest_len(&info);
                }
                let at = self.digest_at(index_at(&digest_index.outputs, index));
                let host = self.path == StatsPath::Auto && info.device == Device::Cpu;
                let slots = Slots::Moments {
                    digest: self.digests.then_some(dpos),
                };
                if let (true, Some(w)) = (host, &self.worker) {
                    s.deferred.push((w.submit(p, true, at), slots));
                } else if host {
                    let st = host_stats(p, true, at)?;
                    slot_values(&st, slots, |pos, v| s.host.push((pos, v)));
                } else {
                    let ps: Vec<usize> = (0..N_MOMENT_SCALARS)
                        .chain(self.digests.then_some(dpos))
                        .collect();
                    s.push_dev(info.device, &ps, p.scalars(true, at)?);
                }
            }
        }
        let skip = prim.as_ref().filter(|p| p.nonempty).map(|p| p.index);
        for (i, t) in outputs.iter().enumerate() {
            if Some(i) != skip {
                let at = index_at(&digest_index.outputs, i);
                let n = self.hash_into(&mut s, (base_out + i, dbase + i), t, at, true)?;
                if self.digests {
                    numels[i] = n;
                }
            }
        }
        let pre = match inputs {
            Inputs::Tensors(ts) => {
                for (i, t) in ts.iter().enumerate() {
                    let at = index_at(&digest_index.inputs, i);
                    let n =
                        self.hash_into(&mut s, (base_in + i, dbase + n_out + i), t, at, true)?;
                    if self.digests {
                        numels[n_out + i] = n;
                    }
                }
                None
            }
            Inputs::Hashed(h) => {
                let remap = |p: usize| {
                    if p < n_in {
                        base_in + p
                    } else {
                        dbase + n_out + (p - n_in)
                    }
                };
                s.host.extend(h.s.host.iter().map(|(p, v)| (remap(*p), *v)));
                if self.digests {
                    numels[n_out..].copy_from_slice(&h.numels);
                }
                Some(
                    h.s.dev
                        .into_iter()
                        .map(|(d, t, ps)| (d, t, ps.into_iter().map(remap).collect()))
                        .collect::<Vec<_>>(),
                )
            }
        };
        let st = s.stacked()?;
        self.queue(rec, prim, (n_out, n_in), n_values, numels, st, pre)
    }

    #[allow(clippy::too_many_arguments)]
    fn queue(
        &mut self,
        rec: Record,
        primary: Option<Primary>,
        (n_out, n_in): (usize, usize),
        n_values: usize,
        numels: Vec<u64>,
        st: Stacked,
        pre: Option<Vec<(Device, Tensor, Vec<usize>)>>,
    ) -> Result<(), TorchError> {
        let mut values = vec![f64::NAN; n_values];
        for (p, v) in &st.host {
            values[*p] = *v;
        }
        let mut fixups = Vec::new();
        for (d, t, ps) in st.dev.into_iter().chain(pre.into_iter().flatten()) {
            let gi = match self.groups.iter().position(|g| g.device == d) {
                Some(i) => i,
                None => {
                    self.groups.push(Group {
                        device: d,
                        parts: Vec::new(),
                        len: 0,
                    });
                    self.groups.len() - 1
                }
            };
            let g = &mut self.groups[gi];
            g.len += ps.len();
            self.device_scalars += ps.len();
            fixups.push(Fixup {
                group: gi,
                src: g.len - ps.len(),
                positions: ps,
            });
            g.parts.push(t);
        }
        self.pending.push(Pending {
            rec,
            primary,
            n_out,
            n_in,
            values,
            numels,
            fixups,
            deferred: st.deferred,
        });
        Ok(())
    }

    /// Moves every queued scalar to the host (per device: one `cat`, one
    /// copy) and returns the finished records in queue order.
    pub fn flush(&mut self) -> Result<Vec<Record>, TorchError> {
        let mut host: Vec<Vec<f64>> = Vec::with_capacity(self.groups.len());
        for g in self.groups.drain(..) {
            let all = cat(&g.parts.iter().collect::<Vec<_>>())?;
            drop(g.parts);
            let mut v = vec![0f64; g.len];
            all.copy_to_host(&mut v)?;
            host.push(v);
        }
        self.device_scalars = 0;
        let mut out = Vec::with_capacity(self.pending.len());
        for mut p in self.pending.drain(..) {
            for (rx, slots) in p.deferred.drain(..) {
                let st = rx
                    .recv()
                    .map_err(|_| TorchError("the statistics worker stopped".into()))??;
                slot_values(&st, slots, |pos, v| p.values[pos] = v);
            }
            for f in &p.fixups {
                let src = &host[f.group][f.src..f.src + f.positions.len()];
                for (pos, v) in f.positions.iter().zip(src) {
                    p.values[*pos] = *v;
                }
            }
            let mut rec = p.rec;
            let mut rest = &p.values[..];
            let mut l1 = None;
            if let Some(pr) = p.primary {
                let m = &rest[..N_MOMENT_SCALARS];
                rest = &rest[N_MOMENT_SCALARS..];
                if pr.nonempty {
                    l1 = Some((pr.index, m[0]));
                }
                rec.stats = Some(Stats {
                    shape: pr.shape,
                    dtype: pr.dtype.to_string(),
                    moments: pr.nonempty.then(|| moments_from(m)),
                });
            }
            rec.output_hashes = rest[..p.n_out].to_vec();
            if let Some((i, v)) = l1 {
                rec.output_hashes[i] = v; // the primary's hash is its L1 norm
            }
            rec.input_hashes = rest[p.n_out..p.n_out + p.n_in].to_vec();
            let d = &rest[p.n_out + p.n_in..];
            if !p.numels.is_empty() {
                let fin: Vec<u64> = d
                    .iter()
                    .zip(&p.numels)
                    .map(|(v, n)| digest::finish(v.to_bits(), *n))
                    .collect();
                rec.output_digests = fin[..p.n_out].to_vec();
                rec.input_digests = fin[p.n_out..].to_vec();
            }
            out.push(rec);
        }
        Ok(out)
    }
}

/// What a caller knows about one op besides its tensors.
#[derive(Clone, Debug)]
pub struct OpRecord<'a> {
    /// Module FQN (`layers.0.attention.wq`); `None` → `<none>`.
    /// `._checkpoint_wrapped_module` is removed.
    pub fqn: Option<&'a str>,
    /// ATen op name (`mm`, `add_`, `_fused_adamw_`).
    pub op: &'a str,
    /// Forward, backward, or optimizer (an op of the step, clipping, loss
    /// scaling). A forward record after a backward or optimizer one gets
    /// its `Phase: forward` line (an eval forward, the next micro-batch, a loss
    /// total: a reader takes a block without one after the step's last
    /// backward block as the optimizer's). An optimizer record gets a
    /// `Phase: optimizer` line only while no backward record has been
    /// written (the reference writes none; a log whose backward ops all
    /// fell under `min_numel` has no backward block to place it by).
    pub phase: Phase,
    /// `<short/path.py>:<line>`.
    pub location: Option<String>,
    /// The layout lines of an op on DTensors or their shards.
    pub layout: Option<crate::logformat::BlockLayout>,
    /// The digest index of its outputs and inputs (default: all whole).
    pub digest_index: DigestIndexes,
    /// The parameters an optimizer-step op reads or writes, `, `-joined
    /// FQNs (empty: none; [`crate::logformat::PARAMETERS_LABEL`]).
    pub parameters: String,
    /// The parameters of each output, when they differ from output to
    /// output ([`crate::logformat::OUTPUT_PARAMETERS_LABEL`]; empty: none).
    pub output_parameters: Vec<String>,
    /// The parameter FQN at each input, aligned with the inputs (empty
    /// entries where an input is none;
    /// [`crate::logformat::INPUT_PARAMETERS_LABEL`]; empty: none).
    pub input_parameters: Vec<String>,
}

/// One capture: records go through a [`StatsBatch`] to a [`LogWriter`].
/// Keys get per-module op counters in record order, inputs get their
/// producers from the output ids of earlier records.
pub struct Capture {
    batch: StatsBatch,
    writer: Option<LogWriter>,
    counters: HashMap<String, u64>,
    producers: HashMap<u64, Arc<str>>,
    excluded: BTreeSet<String>,
    /// The header's compile backend, step and loss (its excluded ops come
    /// from `excluded` at the finish).
    notes: HeaderNotes,
    /// Flush (one device sync) once this many records wait with scalars on
    /// a device; CPU-only records are handed to the writer every 1024.
    pub flush_every: usize,
    recorded: u64,
    /// Whether a backward record was recorded (a later forward record
    /// gets its `Phase: forward` line written, an optimizer record none).
    seen_backward: bool,
    /// Whether an optimizer record was (a later forward record gets its
    /// line too: a reader takes the rows after a log's first optimizer
    /// row as the optimizer's when it has no backward row).
    seen_optimizer: bool,
}

impl Capture {
    /// Starts a capture that writes the log at `path` with `%.6e` numbers
    /// and no digests (the reference tracer's format).
    pub fn create(path: impl Into<PathBuf>, stats_path: StatsPath) -> io::Result<Capture> {
        Capture::with_options(path, stats_path, Precision::PRINTED, false)
    }

    /// Starts a capture that writes the log at `path` with `precision`, and
    /// with `digests` an `Output digest:` / `Input digests:` line per block.
    pub fn with_options(
        path: impl Into<PathBuf>,
        stats_path: StatsPath,
        precision: Precision,
        digests: bool,
    ) -> io::Result<Capture> {
        Ok(Capture {
            batch: StatsBatch::new(stats_path, digests),
            writer: Some(LogWriter::create(path, precision)?),
            counters: HashMap::new(),
            producers: HashMap::new(),
            excluded: BTreeSet::new(),
            notes: HeaderNotes::default(),
            flush_every: 1 << 14,
            recorded: 0,
            seen_backward: false,
            seen_optimizer: false,
        })
    }

    /// Hashes inputs before a mutating op runs (see [`Inputs::Hashed`]);
    /// `index`: their digest indexes ([`DigestIndexes::inputs`]).
    pub fn hash_inputs(
        &self,
        inputs: &[&Tensor],
        index: &[Index],
    ) -> Result<InputHashes, CaptureError> {
        Ok(self.batch.hash_inputs(inputs, index)?)
    }

    /// Notes an excluded op that was dispatched (the header's
    /// `Excluded ops dispatched`).
    pub fn note_excluded(&mut self, op: &str) {
        if !self.excluded.contains(op) {
            self.excluded.insert(op.to_string());
        }
    }

    /// Notes that the model was compiled by `backend` (`torch.compile`):
    /// the header gets a `Compiled: <backend>` line, so a comparison with
    /// an eager run reports the ops the backend fused away as such. A
    /// later call replaces an earlier one.
    pub fn note_compiled(&mut self, backend: CompileBackend) {
        self.notes.compiled = Some(backend);
    }

    /// Notes the modules whose forward ran compiled in a module-level
    /// capture (FQNs, `<none>` for the whole forward): the header gets a
    /// `Compiled modules: a, b` line, so a comparison reads only their
    /// outputs (and those of the modules inside them) as not recorded. A
    /// later call replaces an earlier one.
    pub fn note_compiled_modules(&mut self, fqns: Vec<String>) {
        self.notes.compiled_modules = Some(fqns);
    }

    /// Notes the training step this log captures (1-based): the header
    /// gets a `Step: S` line (a step series' `step_S/` log).
    pub fn note_step(&mut self, step: u64) {
        self.notes.step = Some(step);
    }

    /// Notes that the log is a module-level capture: the header gets a
    /// `Level: modules` line.
    pub fn note_level(&mut self, level: crate::logformat::CaptureLevel) {
        self.notes.level = level;
    }

    /// Notes the step's training loss: the header gets a `Loss: x` line.
    pub fn note_loss(&mut self, loss: f64) {
        self.notes.loss = Some(loss);
    }

    /// Notes digests of torch's random number generators' state when the
    /// step was armed and when it ended: the header gets an `RNG state:`
    /// line ([`crate::logformat::RngState`]).
    pub fn note_rng(&mut self, start: u64, end: u64) {
        self.notes.rng = Some(crate::logformat::RngState { start, end });
    }

    /// Notes the processes of the distributed run this log is one rank
    /// of: the header gets a `World size: N` line.
    pub fn note_world_size(&mut self, n: u32) {
        self.notes.world_size = Some(n);
    }

    /// Notes the run's device mesh and this rank's coordinates: the header
    /// gets `Mesh:` and `Coords:` lines.
    pub fn note_mesh(&mut self, mesh: crate::logformat::Mesh) {
        self.notes.mesh = Some(mesh);
    }

    /// Notes what the capture's settings leave out (`min_numel=1000`, then
    /// `, op_filter=...` and `, excluded_ops=...` when set): the header
    /// gets a `Capture filter:` line, and a compare refuses two logs whose
    /// filters differ (their ops are numbered differently).
    pub fn note_filter(&mut self, filter: String) {
        self.notes.filter = Some(filter);
    }

    /// Notes how many ops were not captured because every floating-point
    /// result was smaller than `min_numel`: the header gets an `Ops below
    /// min numel: N` line.
    pub fn note_below_min_numel(&mut self, n: u64) {
        self.notes.below_min_numel = Some(n);
    }

    /// Records one op and returns its key. `primary` is the index in
    /// `outputs` of the output whose Shape and stats are written (`None`:
    /// a hash-only record). `input_ids` are the identities of
    /// the input tensors (aligned with `inputs`), `output_ids` those of its
    /// outputs: a later input with the id of this op's output gets this key
    /// as its producer.
    pub fn record(
        &mut self,
        meta: OpRecord<'_>,
        primary: Option<usize>,
        outputs: &[&Tensor],
        inputs: Inputs<'_>,
        input_ids: &[u64],
        output_ids: &[u64],
    ) -> Result<String, CaptureError> {
        if self.writer.is_none() {
            return Err(CaptureError::Finished);
        }
        let fqn = super::record::clean_fqn(meta.fqn.unwrap_or("<none>"));
        let fqn = if fqn.is_empty() {
            std::borrow::Cow::Borrowed("<none>")
        } else {
            fqn
        };
        let seq = match self.counters.get_mut(fqn.as_ref()) {
            Some(c) => {
                *c += 1;
                *c - 1
            }
            None => {
                self.counters.insert(fqn.to_string(), 1);
                0
            }
        };
        let key = format!("{fqn}/op_{seq}_{}", meta.op);
        let input_producers = input_ids
            .iter()
            .map(|id| {
                self.producers
                    .get(id)
                    .map(|k| k.to_string())
                    .unwrap_or_default()
            })
            .collect();
        let explicit_phase = match meta.phase {
            Phase::Forward => self.seen_backward || self.seen_optimizer,
            // At level=modules, always: a record after one optimizer's
            // step may come before another backward of the step (a GAN's
            // discriminator updated before the generator's backward), and
            // a reader takes a line-less block before the step's last
            // backward for forward (trial 67: "first differs in its
            // forward" for a changed learning rate).
            Phase::Optimizer => {
                !self.seen_backward || self.notes.level == crate::logformat::CaptureLevel::Modules
            }
            Phase::Backward => false,
        };
        self.seen_backward |= meta.phase == Phase::Backward;
        self.seen_optimizer |= meta.phase == Phase::Optimizer;
        let rec = Record {
            key: key.clone(),
            stats: None,
            output_hashes: Vec::new(),
            input_hashes: Vec::new(),
            input_producers,
            location: meta.location,
            phase: meta.phase,
            explicit_phase,
            layout: meta.layout,
            parameters: meta.parameters,
            output_parameters: meta.output_parameters,
            input_parameters: meta.input_parameters,
            ..Default::default()
        };
        self.batch
            .push(rec, primary, outputs, inputs, &meta.digest_index)?;
        let shared: Arc<str> = Arc::from(key.as_str());
        for id in output_ids {
            self.producers.insert(*id, shared.clone());
        }
        self.recorded += 1;
        let n = self.batch.len();
        if (self.batch.device_scalars() == 0 && n >= 1024) || n >= self.flush_every {
            self.flush()?;
        }
        Ok(key)
    }

    /// Records so far.
    pub fn recorded(&self) -> u64 {
        self.recorded
    }

    /// Hands the statistics of CPU tensors of later records to `worker`
    /// (a [`HostWorker`], which may serve several captures) instead of
    /// computing them on the calling thread: `record` returns at once. The
    /// caller keeps each recorded tensor unchanged until [`HostWorker::wait`]
    /// or a flush has returned. Pre-op input hashes
    /// ([`Capture::hash_inputs`]) stay on the calling thread.
    pub fn defer_host(&mut self, worker: Arc<HostWorker>) {
        self.batch.worker = Some(worker);
    }

    /// Computes the statistics of CPU tensors of later records on the
    /// calling thread again (after [`Capture::defer_host`]; records
    /// already handed to the worker stay with it, and a flush waits for them).
    pub fn compute_on_caller(&mut self) {
        self.batch.worker = None;
    }

    /// Moves queued scalars to the host and hands the records to the
    /// writer thread. Returns how many records were flushed.
    pub fn flush(&mut self) -> Result<usize, CaptureError> {
        let w = self.writer.as_ref().ok_or(CaptureError::Finished)?;
        let recs = self.batch.flush()?;
        let n = recs.len();
        w.write(recs)?;
        Ok(n)
    }

    /// Flushes, writes the header (block count, excluded ops, compile
    /// backend) and moves the finished log into place. Returns the number
    /// of blocks.
    pub fn finish(&mut self) -> Result<u64, CaptureError> {
        self.flush()?;
        let w = self.writer.take().ok_or(CaptureError::Finished)?;
        let notes = HeaderNotes {
            excluded: Some(self.excluded.iter().cloned().collect()),
            ..self.notes.clone()
        };
        Ok(w.finish(&notes)?)
    }

    /// The log's path.
    pub fn path(&self) -> Option<&std::path::Path> {
        self.writer.as_ref().map(|w| w.path())
    }
}
