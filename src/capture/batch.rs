//! Queuing records' scalars on the device and moving them to the host once
//! per flush ([`StatsBatch`]), and a whole capture on top of it
//! ([`Capture`]: keys with per-module op counters, producer links by tensor
//! id, the excluded-op set, and the writer thread).
//!
//! ```no_run
//! use actdiff::capture::{Capture, OpRecord, StatsPath, Phase};
//! use tch::{Device, Kind, Tensor};
//!
//! let mut cap = Capture::create("dump/rank_0_activations.log", StatsPath::Auto).unwrap();
//! let x = Tensor::randn([64, 64], (Kind::Float, Device::Cpu));
//! let w = Tensor::randn([64, 64], (Kind::Float, Device::Cpu));
//! let y = x.mm(&w);
//! let meta = OpRecord { fqn: Some("layers.0.wq"), op: "mm", phase: Phase::Forward, location: None };
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

use tch::{Device, TchError, Tensor};

use super::record::{Phase, Record, Stats};
use super::stats::{
    device_l1, device_scalars, dtype_name, host_stats, moments_from, StatsPath, N_MOMENT_SCALARS,
};
use super::writer::LogWriter;

/// Errors of the capture agent.
#[derive(Debug, thiserror::Error)]
pub enum CaptureError {
    /// A libtorch call failed.
    #[error("libtorch: {0}")]
    Torch(#[from] TchError),
    /// Writing the log failed.
    #[error("{0}")]
    Io(#[from] io::Error),
    /// The capture was already finished.
    #[error("the capture is already finished")]
    Finished,
}

/// Scalars of one record or one set of input hashes under construction:
/// values already on the host, and 0-d device tensors with the positions
/// they go to.
#[derive(Default)]
struct Scalars {
    host: Vec<(usize, f64)>,
    dev: Vec<(Device, Vec<Tensor>, Vec<usize>)>,
}

impl Scalars {
    fn push_dev(&mut self, pos: usize, t: Tensor) {
        let d = t.device();
        match self.dev.iter_mut().find(|(dd, _, _)| *dd == d) {
            Some((_, ts, ps)) => {
                ts.push(t);
                ps.push(pos);
            }
            None => self.dev.push((d, vec![t], vec![pos])),
        }
    }

    /// Stacks each device's scalars into one 1-d tensor.
    fn stacked(self) -> Result<Stacked, TchError> {
        let mut dev = Vec::with_capacity(self.dev.len());
        for (d, ts, ps) in self.dev {
            dev.push((d, Tensor::f_stack(&ts, 0)?, ps));
        }
        Ok(Stacked {
            host: self.host,
            dev,
        })
    }
}

struct Stacked {
    host: Vec<(usize, f64)>,
    dev: Vec<(Device, Tensor, Vec<usize>)>,
}

/// Input hashes taken before an op ran ([`StatsBatch::hash_inputs`]): on the
/// host already, or queued on the inputs' devices (in stream order, so they
/// see the inputs before the op changes them).
pub struct InputHashes {
    n: usize,
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

struct Pending {
    rec: Record,
    primary: Option<Primary>,
    n_out: usize,
    /// [moments (N_MOMENT_SCALARS) if primary] [output hashes] [input hashes]
    values: Vec<f64>,
    fixups: Vec<Fixup>,
}

struct Group {
    device: Device,
    parts: Vec<Tensor>,
    len: usize,
}

/// A batch of records whose scalars may still be on devices. Each record's
/// device scalars are stacked into one tensor per device; [`flush`]
/// concatenates all of them and makes ONE device-to-host copy per device.
///
/// [`flush`]: StatsBatch::flush
pub struct StatsBatch {
    path: StatsPath,
    pending: Vec<Pending>,
    groups: Vec<Group>,
    device_scalars: usize,
}

impl StatsBatch {
    /// An empty batch.
    pub fn new(path: StatsPath) -> StatsBatch {
        StatsBatch {
            path,
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

    fn on_host(&self, t: &Tensor) -> bool {
        self.path == StatsPath::Auto && t.device() == Device::Cpu
    }

    fn hash_into(&self, s: &mut Scalars, pos: usize, t: &Tensor) -> Result<(), TchError> {
        if self.on_host(t) {
            s.host.push((pos, host_stats(t, false)?.l1));
        } else {
            s.push_dev(pos, device_l1(t)?);
        }
        Ok(())
    }

    /// Hashes `inputs` now (before the op that may mutate them runs).
    pub fn hash_inputs(&self, inputs: &[&Tensor]) -> Result<InputHashes, TchError> {
        let _g = tch::no_grad_guard();
        let mut s = Scalars::default();
        for (i, t) in inputs.iter().enumerate() {
            self.hash_into(&mut s, i, t)?;
        }
        Ok(InputHashes {
            n: inputs.len(),
            s: s.stacked()?,
        })
    }

    /// Queues a record: `rec` carries key, producers, location and phase;
    /// its stats and hashes are filled from `outputs` (every tensor output,
    /// hashed), `primary` (the index in `outputs` of the one whose Shape and
    /// stats are written; `None` for a hash-only record) and `inputs`.
    ///
    /// Panics if `primary` is not an index of `outputs`.
    pub fn push(
        &mut self,
        rec: Record,
        primary: Option<usize>,
        outputs: &[&Tensor],
        inputs: Inputs<'_>,
    ) -> Result<(), TchError> {
        let _g = tch::no_grad_guard();
        let mut s = Scalars::default();
        let mut prim = None;
        let base_out = if let Some(index) = primary {
            let p = outputs[index];
            let shape = p.size();
            let nonempty = shape.iter().all(|d| *d != 0);
            prim = Some(Primary {
                shape,
                dtype: dtype_name(p.f_kind()?),
                index,
                nonempty,
            });
            if nonempty {
                if self.on_host(p) {
                    let st = host_stats(p, true)?;
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
                    s.host.extend(v.into_iter().enumerate());
                } else {
                    for (i, t) in device_scalars(p)?.into_iter().enumerate() {
                        s.push_dev(i, t);
                    }
                }
            }
            N_MOMENT_SCALARS
        } else {
            0
        };
        let skip = prim.as_ref().filter(|p| p.nonempty).map(|p| p.index);
        for (i, t) in outputs.iter().enumerate() {
            if Some(i) != skip {
                self.hash_into(&mut s, base_out + i, t)?;
            }
        }
        let base_in = base_out + outputs.len();
        let n_in = match inputs {
            Inputs::Tensors(ts) => {
                for (i, t) in ts.iter().enumerate() {
                    self.hash_into(&mut s, base_in + i, t)?;
                }
                ts.len()
            }
            Inputs::Hashed(h) => {
                s.host
                    .extend(h.s.host.iter().map(|(p, v)| (base_in + p, *v)));
                let st = s.stacked()?;
                return self.queue(rec, prim, outputs.len(), base_in + h.n, st, Some(h.s.dev));
            }
        };
        let st = s.stacked()?;
        self.queue(rec, prim, outputs.len(), base_in + n_in, st, None)
    }

    fn queue(
        &mut self,
        rec: Record,
        primary: Option<Primary>,
        n_out: usize,
        n_values: usize,
        st: Stacked,
        pre: Option<Vec<(Device, Tensor, Vec<usize>)>>,
    ) -> Result<(), TchError> {
        let mut values = vec![f64::NAN; n_values];
        for (p, v) in &st.host {
            values[*p] = *v;
        }
        let base_in = if primary.is_some() {
            N_MOMENT_SCALARS
        } else {
            0
        } + n_out;
        let mut fixups = Vec::new();
        let parts = st.dev.into_iter().map(|(d, t, ps)| (d, t, ps, 0)).chain(
            pre.into_iter()
                .flatten()
                .map(|(d, t, ps)| (d, t, ps, base_in)),
        );
        for (d, t, ps, off) in parts {
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
            fixups.push(Fixup {
                group: gi,
                src: g.len,
                positions: ps.iter().map(|p| p + off).collect(),
            });
            g.len += ps.len();
            self.device_scalars += ps.len();
            g.parts.push(t);
        }
        self.pending.push(Pending {
            rec,
            primary,
            n_out,
            values,
            fixups,
        });
        Ok(())
    }

    /// Moves every queued scalar to the host (per device: one `cat`, one
    /// copy) and returns the finished records in queue order.
    pub fn flush(&mut self) -> Result<Vec<Record>, TchError> {
        let _g = tch::no_grad_guard();
        let mut host: Vec<Vec<f64>> = Vec::with_capacity(self.groups.len());
        for g in self.groups.drain(..) {
            let all = Tensor::f_cat(&g.parts, 0)?.f_to_device(Device::Cpu)?;
            drop(g.parts);
            let v = Vec::<f64>::try_from(&all)?;
            debug_assert_eq!(v.len(), g.len);
            host.push(v);
        }
        self.device_scalars = 0;
        let mut out = Vec::with_capacity(self.pending.len());
        for mut p in self.pending.drain(..) {
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
            rec.input_hashes = rest[p.n_out..].to_vec();
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
    /// Forward or backward.
    pub phase: Phase,
    /// `<short/path.py>:<line>`.
    pub location: Option<String>,
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
    /// Flush (one device sync) once this many records wait with scalars on
    /// a device; CPU-only records are handed to the writer every 1024.
    pub flush_every: usize,
    recorded: u64,
}

impl Capture {
    /// Starts a capture that writes the log at `path`.
    pub fn create(path: impl Into<PathBuf>, stats_path: StatsPath) -> io::Result<Capture> {
        Ok(Capture {
            batch: StatsBatch::new(stats_path),
            writer: Some(LogWriter::create(path)?),
            counters: HashMap::new(),
            producers: HashMap::new(),
            excluded: BTreeSet::new(),
            flush_every: 1 << 14,
            recorded: 0,
        })
    }

    /// Hashes inputs before a mutating op runs (see [`Inputs::Hashed`]).
    pub fn hash_inputs(&self, inputs: &[&Tensor]) -> Result<InputHashes, CaptureError> {
        Ok(self.batch.hash_inputs(inputs)?)
    }

    /// Notes an excluded op that was dispatched (the header's
    /// `Excluded ops dispatched`).
    pub fn note_excluded(&mut self, op: &str) {
        if !self.excluded.contains(op) {
            self.excluded.insert(op.to_string());
        }
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
        let rec = Record {
            key: key.clone(),
            stats: None,
            output_hashes: Vec::new(),
            input_hashes: Vec::new(),
            input_producers,
            location: meta.location,
            phase: meta.phase,
        };
        self.batch.push(rec, primary, outputs, inputs)?;
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

    /// Moves queued scalars to the host and hands the records to the
    /// writer thread. Returns how many records were flushed.
    pub fn flush(&mut self) -> Result<usize, CaptureError> {
        let w = self.writer.as_ref().ok_or(CaptureError::Finished)?;
        let recs = self.batch.flush()?;
        let n = recs.len();
        w.write(recs)?;
        Ok(n)
    }

    /// Flushes, writes the header (block count, excluded ops) and moves the
    /// finished log into place. Returns the number of blocks.
    pub fn finish(&mut self) -> Result<u64, CaptureError> {
        self.flush()?;
        let w = self.writer.take().ok_or(CaptureError::Finished)?;
        let ex: Vec<String> = self.excluded.iter().cloned().collect();
        Ok(w.finish(Some(&ex))?)
    }

    /// The log's path.
    pub fn path(&self) -> Option<&std::path::Path> {
        self.writer.as_ref().map(|w| w.path())
    }
}
