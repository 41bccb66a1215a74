//! The capture agent: per-op statistics (and, on request, content digests)
//! computed on the tensor's own device through a small libtorch shim, moved
//! to the host once per flush, and written by a writer thread in exactly the
//! log format that [`crate::parser`] reads (`shared/spec/log-format.md`).
//!
//! ```text
//! torch.Tensor ─► Capture::record ─► StatsBatch ─► flush: per device one cat + one copy ─► Vec<Record>
//!  (shim handle)  (key, producers)   (one 1-d float64 device tensor per tensor:             │
//!                                     stats, hash, digest sum; CPU: one fused Rust pass)    ▼
//!                                                     LogWriter thread ─► rank_N_activations.log
//! ```
//!
//! - `torch` (feature `capture`): the Rust side of the libtorch shim
//!   (`shim/shim.cpp`, compiled by build.rs against the installed torch,
//!   2.13 to 2.15): a `torch::Tensor` handle, its dtype/device/layout,
//!   the stats and digest ops queued on the device, `cat` and the one
//!   device-to-host copy, and tensors from host buffers for the tests.
//!   `shim/shim_python.cpp` (feature `python`) unpacks a `torch.Tensor`.
//! - [`record`] (always built): [`Record`], one op as host values, and its
//!   text (`write_header`, `write_block`) through the shared log writer
//!   [`crate::logformat`], in [`Precision::PRINTED`] (`%.6e`, the
//!   reference's) or [`Precision::Full`] (shortest round-trip float64, with
//!   the `Precision: full` header line).
//! - [`digest`] (always built): the 64-bit content digest of a tensor
//!   (`Output digest:` / `Input digests:` lines), its definition and the
//!   host implementation.
//! - [`writer`] (always built): [`LogWriter`], the writer thread (crossbeam
//!   channel). Blocks go to a body file while the capture runs; `finish`
//!   writes the header with the block count, appends the body and renames.
//! - `stats` (feature `capture`): the reductions of one tensor — the L1 norm
//!   (the hash) and the L2 norm and mean in float64, min and max in float32,
//!   NaN and Inf counts, and the digest's sum — as libtorch ops queued on
//!   the tensor's device, or, for CPU tensors, one fused pass over the
//!   buffer (16 float64 lanes per block of 256, blocks summed pairwise;
//!   deterministic; AVX2 build), the digest's sum read in the same pass
//!   (a shard's in a pass of its own).
//! - `batch` (feature `capture`): `StatsBatch` queues every record's values
//!   (one device tensor per record and device) and makes one device-to-host
//!   copy per device at `flush()`; `Capture` adds the per-module op counters
//!   (`<fqn>/op_<seq>_<op>`), the producer links by tensor id, the
//!   excluded-op set, the compile backend (`note_compiled`: the header's
//!   `Compiled:` line) and the writer.
//! - `python` (feature `python`): the PyO3 module `actdiff_capture._native`
//!   behind the Python package in `python/` (a `TorchDispatchMode` plus
//!   module hooks, used like TorchTitan's `ActivationCaptureProfiler`).
//!
//! What a record holds, beyond the reference tracer's fields:
//!
//! - `NaN count: N` and `Inf count: N` lines after the standard fields, only
//!   when non-zero ([`crate::logformat::NAN_COUNT_LABEL`], [`crate::logformat::INF_COUNT_LABEL`]).
//!   The reference comparator ignores them (no label of its own occurs in
//!   them); actdiff's parser reads them as known fields.
//! - With digests: `Output digest:` and `Input digests:` lines right after
//!   `Input hashes:`, one 16-hex-digit value per hashed tensor.
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
pub use batch::{
    Capture, CaptureError, DigestIndexes, HostWorker, InputHashes, Inputs, OpRecord, StatsBatch,
};
#[cfg(feature = "capture")]
pub use stats::{StatsPath, TensorStats};
