//! The PyO3 module `actdiff_capture._native` (feature `python`): a thin
//! wrapper of [`Capture`](super::Capture) for the Python package in
//! `python/actdiff_capture` (which owns the op interception). Tensors cross
//! as `torch.Tensor` through `pyo3-tch` (no copy).

use std::path::PathBuf;
use std::sync::{Mutex, MutexGuard};

use pyo3::exceptions::{PyRuntimeError, PyTypeError};
use pyo3::prelude::*;
use pyo3_tch::PyTensor;

use super::batch::{Capture as Core, CaptureError, InputHashes, Inputs, OpRecord};
use super::record::Phase;
use super::stats::{host_stats, read_back, StatsPath};

fn err(e: CaptureError) -> PyErr {
    PyRuntimeError::new_err(e.to_string())
}

fn tch_err(e: tch::TchError) -> PyErr {
    PyRuntimeError::new_err(format!("libtorch: {e}"))
}

fn stats_path(device_path: bool) -> StatsPath {
    if device_path {
        StatsPath::Device
    } else {
        StatsPath::Auto
    }
}

/// Input hashes taken before a mutating op ran (`Capture.hash_inputs`).
#[pyclass(module = "actdiff_capture._native")]
struct PreHashes {
    inner: Mutex<Option<InputHashes>>,
}

/// One capture writing one `rank_N_activations.log`.
///
/// `Capture(path, device_path=False)`: `device_path=True` computes CPU
/// tensors' stats with libtorch ops queued like a GPU's (one copy at flush)
/// instead of the fused Rust pass.
#[pyclass(module = "actdiff_capture._native")]
struct Capture {
    // pyclasses must be Sync (tch tensors are only Send). Backward ops may
    // come from autograd's device threads, so `unsendable` would not do.
    inner: Mutex<Core>,
}

impl Capture {
    fn core(&self) -> MutexGuard<'_, Core> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }
}

#[pymethods]
impl Capture {
    #[new]
    #[pyo3(signature = (path, device_path = false))]
    fn new(path: PathBuf, device_path: bool) -> PyResult<Self> {
        let inner = Core::create(path, stats_path(device_path))
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        Ok(Capture {
            inner: Mutex::new(inner),
        })
    }

    /// Hashes `inputs` now, before a mutating op runs.
    fn hash_inputs(&self, inputs: Vec<PyTensor>) -> PyResult<PreHashes> {
        let ts: Vec<&tch::Tensor> = inputs.iter().map(|t| &t.0).collect();
        Ok(PreHashes {
            inner: Mutex::new(Some(self.core().hash_inputs(&ts).map_err(err)?)),
        })
    }

    /// Records one op; returns its key. `primary` indexes `outputs` (the
    /// output whose Shape and stats are written) or is None (hash-only).
    /// `inputs` is a list of tensors (hashed now) or a `PreHashes`.
    #[allow(clippy::too_many_arguments)]
    #[pyo3(signature = (fqn, op, backward, location, primary, outputs, inputs, input_ids, output_ids))]
    fn record(
        &self,
        fqn: Option<&str>,
        op: &str,
        backward: bool,
        location: Option<String>,
        primary: Option<usize>,
        outputs: Vec<PyTensor>,
        inputs: &Bound<'_, PyAny>,
        input_ids: Vec<u64>,
        output_ids: Vec<u64>,
    ) -> PyResult<String> {
        let outs: Vec<&tch::Tensor> = outputs.iter().map(|t| &t.0).collect();
        if primary.is_some_and(|i| i >= outs.len()) {
            return Err(PyTypeError::new_err("primary index out of range"));
        }
        let meta = OpRecord {
            fqn,
            op,
            phase: if backward {
                Phase::Backward
            } else {
                Phase::Forward
            },
            location,
        };
        if let Ok(pre) = inputs.downcast::<PreHashes>() {
            let h = pre
                .borrow()
                .inner
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .take()
                .ok_or_else(|| PyTypeError::new_err("PreHashes used twice"))?;
            return self
                .core()
                .record(
                    meta,
                    primary,
                    &outs,
                    Inputs::Hashed(h),
                    &input_ids,
                    &output_ids,
                )
                .map_err(err);
        }
        let ins: Vec<PyTensor> = inputs.extract()?;
        let ins: Vec<&tch::Tensor> = ins.iter().map(|t| &t.0).collect();
        self.core()
            .record(
                meta,
                primary,
                &outs,
                Inputs::Tensors(&ins),
                &input_ids,
                &output_ids,
            )
            .map_err(err)
    }

    /// Notes an excluded op that was dispatched.
    fn note_excluded(&self, op: &str) {
        self.core().note_excluded(op);
    }

    /// Moves queued stats to the host and hands records to the writer.
    fn flush(&self) -> PyResult<usize> {
        self.core().flush().map_err(err)
    }

    /// Flushes and writes the finished log; returns the number of blocks.
    fn finish(&self) -> PyResult<u64> {
        self.core().finish().map_err(err)
    }

    /// Records so far.
    #[getter]
    fn recorded(&self) -> u64 {
        self.core().recorded()
    }

    /// Set how many records with device scalars may wait before a flush.
    #[setter]
    fn set_flush_every(&self, n: usize) {
        self.core().flush_every = n.max(1);
    }
}

/// `tensor_stats(t, device_path=False) -> (l1, (l2, min, max, mean, nan, inf) | None)`:
/// the stats of one tensor, read back at once (tests and benchmarks).
#[pyfunction]
#[pyo3(signature = (t, moments = true, device_path = false))]
#[allow(clippy::type_complexity)]
fn tensor_stats(
    py: Python<'_>,
    t: PyTensor,
    moments: bool,
    device_path: bool,
) -> PyResult<(f64, Option<(f64, f64, f64, f64, u64, u64)>)> {
    let t = t.0;
    let s = py
        .allow_threads(move || {
            if device_path || t.device() != tch::Device::Cpu {
                read_back(&t, moments)
            } else {
                host_stats(&t, moments)
            }
        })
        .map_err(tch_err)?;
    Ok((
        s.l1,
        s.moments
            .map(|m| (m.l2, m.min, m.max, m.mean, m.nan_count, m.inf_count)),
    ))
}

#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    m.add_class::<Capture>()?;
    m.add_class::<PreHashes>()?;
    m.add_function(wrap_pyfunction!(tensor_stats, m)?)?;
    Ok(())
}
