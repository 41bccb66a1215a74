//! The capture agent (planned, feature `capture`): per-op statistics computed
//! on the tensor's own device through libtorch (`tch`), moved to the host once
//! per flush, and written by a writer thread in exactly the log format that
//! [`crate::parser`] reads (`shared/spec/log-format.md`). A thin Python
//! extension (PyO3) will drive it from a PyTorch training loop the way
//! TorchTitan's `ActivationCaptureProfiler` is used.
//!
//! Nothing lives here yet: the engine builds and tests without libtorch.
