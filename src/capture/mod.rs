//! The capture agent: per-op statistics computed on the tensor's own device
//! through libtorch (`tch`), moved to the host once per flush, and written by
//! a writer thread in exactly the log format that [`crate::parser`] reads
//! (`shared/spec/log-format.md`).
//!
//! ```text
//! tch::Tensor ─► Capture::record ─► StatsBatch ─► flush: per device one cat + one copy ─► Vec<Record>
//!                (key, producers)   (scalars stacked per record on the device;           │
//!                                    CPU: one fused Rust pass, values at once)            ▼
//!                                                                LogWriter thread ─► rank_N_activations.log
//! ```
//!
//! - [`record`] (always built): [`Record`], one op as host values, and its
//!   text (`write_header`, `write_block`), numbers through
//!   [`crate::gen::fmt_e6`] (Python `%.6e`: `nan`, `inf`, `-inf`).
//! - [`writer`] (always built): [`LogWriter`], the writer thread (crossbeam
//!   channel). Blocks go to a body file while the capture runs; `finish`
//!   writes the header with the block count, appends the body and renames.
//! - `stats` (feature `capture`): the reductions of one tensor — the L1 norm
//!   (the hash) and the L2 norm and mean in float64, min and max in float32,
//!   NaN and Inf counts — as libtorch ops queued on the tensor's device, or,
//!   for CPU tensors, one fused pass over the buffer (16 float64 lanes per
//!   block of 256, blocks summed pairwise; deterministic; AVX2 build).
//! - `batch` (feature `capture`): `StatsBatch` queues every record's scalars
//!   (stacked into one device tensor per record) and makes one
//!   device-to-host copy per device at `flush()`; `Capture` adds the
//!   per-module op counters (`<fqn>/op_<seq>_<op>`), the producer links by
//!   tensor id, the excluded-op set and the writer.
//! - `python` (feature `python`): the PyO3 module `actdiff_capture._native`
//!   behind the Python package in `python/` (a `TorchDispatchMode` plus
//!   module hooks, used like TorchTitan's `ActivationCaptureProfiler`).
//!
//! What a record holds, beyond the reference tracer's fields:
//!
//! - `NaN count: N` and `Inf count: N` lines after the standard fields, only
//!   when non-zero ([`record::NAN_COUNT_LABEL`], [`record::INF_COUNT_LABEL`]).
//!   The reference comparator ignores them (no label of its own occurs in
//!   them); actdiff's parser reports them as unknown field lines.
//! - An empty primary output (possible with `min_numel` 0) gets its `Shape`
//!   line and hash (0) but no `L2 norm`/`Min`/`Max`/`Mean` lines: the
//!   reference tracer raises there (`min()` of an empty tensor).
//!
//! Without the `capture` feature nothing here needs libtorch: the engine
//! builds and tests without it.

pub mod digest;
pub mod record;
pub mod writer;

#[cfg(feature = "capture")]
pub mod batch;
#[cfg(feature = "capture")]
pub mod stats;
#[cfg(feature = "capture")]
pub mod torch;

#[cfg(feature = "python")]
mod python;

pub use record::{Moments, Phase, Precision, Record, Stats};
pub use writer::LogWriter;

#[cfg(feature = "capture")]
pub use batch::{Capture, CaptureError, InputHashes, Inputs, OpRecord, StatsBatch};
#[cfg(feature = "capture")]
pub use stats::{StatsPath, TensorStats};
