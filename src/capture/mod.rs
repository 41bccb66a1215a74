//! The capture agent: per-op statistics computed on the tensor's own device
//! through libtorch (`tch`), moved to the host once per flush, and written by
//! a writer thread in exactly the log format that [`crate::parser`] reads
//! (`shared/spec/log-format.md`).
//!
//! ```text
//! tch::Tensor ─► Capture::record ─► StatsBatch (device scalars per record) ─► flush: one cat + one
//!                (key, producers)                                              device→host copy per device
//!                                                             ─► Vec<Record> ─► LogWriter thread ─► rank_N_activations.log
//! ```
//!
//! - [`record`] (always built): [`Record`](record::Record), one op as host
//!   values, and its text (`write_header`, `write_block`).
//! - [`writer`] (always built): [`LogWriter`](writer::LogWriter), the writer
//!   thread (crossbeam channel); the header count is written at the end.
//! - `stats` (feature `capture`): the reductions of one tensor, on its device
//!   (libtorch ops) or, for CPU tensors, in one fused pass over the buffer.
//! - `batch` (feature `capture`): `StatsBatch`, which queues every record's
//!   scalars on the device and copies them to the host at `flush()`, and
//!   `Capture`, which adds the per-module op counters, the producer links
//!   and the writer.
//! - `python` (feature `python`): the PyO3 module `actdiff_capture._native`
//!   behind the Python package in `python/` (a `TorchDispatchMode` plus
//!   module hooks, used like TorchTitan's `ActivationCaptureProfiler`).
//!
//! Without the `capture` feature nothing here needs libtorch: the engine
//! builds and tests without it.

pub mod record;
pub mod writer;

#[cfg(feature = "capture")]
pub mod batch;
#[cfg(feature = "capture")]
pub mod stats;

#[cfg(feature = "python")]
mod python;

pub use record::{Moments, Phase, Record, Stats};
pub use writer::LogWriter;

#[cfg(feature = "capture")]
pub use batch::{Capture, CaptureError, InputHashes, Inputs, OpRecord, StatsBatch};
#[cfg(feature = "capture")]
pub use stats::{StatsPath, TensorStats};
