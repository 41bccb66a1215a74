//! The PyO3 module `actdiff_capture._native` (feature `python`): a thin
//! wrapper of [`Capture`](super::Capture) for the Python package in
//! `python/actdiff_capture` (which owns the op interception). Tensors cross
//! as `torch.Tensor` objects, unpacked by the libtorch shim
//! (`THPVariable_Unpack`: no copy).

use std::path::PathBuf;
use std::sync::{Arc, Mutex, MutexGuard};

use pyo3::exceptions::{PyImportError, PyRuntimeError, PyTypeError, PyValueError};
use pyo3::prelude::*;

use super::batch::{
    Capture as Core, CaptureError, DigestIndexes, HostWorker as CoreWorker, InputHashes, Inputs,
    OpRecord,
};
use super::digest::{self, Index};
use super::record::{Phase, Precision};
use super::stats::{host_stats, read_back, StatsPath};
use super::torch::{Device, Tensor, TorchError, TORCH_VERSION};
use crate::logformat::CompileBackend;

fn err(e: CaptureError) -> PyErr {
    PyRuntimeError::new_err(e.to_string())
}

fn torch_err(e: TorchError) -> PyErr {
    PyRuntimeError::new_err(format!("libtorch: {e}"))
}

/// The tensor behind a `torch.Tensor` argument, or a TypeError naming it.
fn tensor(obj: &Bound<'_, PyAny>, what: &str) -> PyResult<Tensor> {
    // SAFETY: `obj` is a live object and we hold the GIL (`Bound`).
    match unsafe { Tensor::from_python(obj.as_ptr().cast()) }.map_err(torch_err)? {
        Some(t) => Ok(t),
        None => Err(PyTypeError::new_err(format!(
            "{what}: expected a torch.Tensor, got {}",
            obj.get_type()
                .name()
                .map(|n| n.to_string())
                .unwrap_or_else(|_| "?".into())
        ))),
    }
}

fn tensors(objs: &[Bound<'_, PyAny>], what: &str) -> PyResult<Vec<Tensor>> {
    objs.iter().map(|o| tensor(o, what)).collect()
}

fn stats_path(device_path: bool) -> StatsPath {
    if device_path {
        StatsPath::Device
    } else {
        StatsPath::Auto
    }
}

/// `"default"` (or `"printed"`) → `%.6e`; `"full"` → shortest round-trip.
fn precision(p: &str) -> PyResult<Precision> {
    match p {
        "default" | "printed" => Ok(Precision::PRINTED),
        "full" => Ok(Precision::Full),
        _ => Err(PyValueError::new_err(format!(
            "precision must be \"default\" or \"full\", got {p:?}"
        ))),
    }
}

/// Input hashes taken before a mutating op ran (`Capture.hash_inputs`).
#[pyclass(module = "actdiff_capture._native")]
struct PreHashes {
    inner: Mutex<Option<InputHashes>>,
}

/// `HostWorker()`: a thread computing CPU tensors' statistics off the
/// training thread, for the captures given to `Capture.defer_host`; one
/// may serve several captures (a profiler's steps).
#[pyclass(module = "actdiff_capture._native", frozen)]
struct HostWorker {
    inner: Arc<CoreWorker>,
}

#[pymethods]
impl HostWorker {
    #[new]
    fn new() -> PyResult<Self> {
        let inner = CoreWorker::start().map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        Ok(HostWorker {
            inner: Arc::new(inner),
        })
    }

    /// `wait() -> None`: returns once every tensor handed to this worker
    /// so far has been read (the GIL released meanwhile). Until then the
    /// caller must not change those tensors.
    fn wait(&self, py: Python<'_>) {
        let w = self.inner.clone();
        py.detach(move || w.wait());
    }
}

/// One capture writing one `rank_N_activations.log`.
///
/// `Capture(path, device_path=False, precision="default", digests=None)`:
/// `device_path=True` computes CPU tensors' stats with libtorch ops queued
/// like a GPU's (one copy at flush) instead of the fused Rust pass;
/// `precision="full"` prints every float as the shortest text that
/// round-trips in float64 (header line `Precision: full`); `digests` writes
/// `Output digest:` / `Input digests:` lines (default: on with full
/// precision, off otherwise).
#[pyclass(module = "actdiff_capture._native")]
struct Capture {
    // Backward ops may come from autograd's device threads, so the capture
    // is shared behind a mutex (not `unsendable`).
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
    #[pyo3(signature = (path, device_path = false, precision = "default", digests = None))]
    fn new(
        path: PathBuf,
        device_path: bool,
        precision: &str,
        digests: Option<bool>,
    ) -> PyResult<Self> {
        let p = self::precision(precision)?;
        let digests = digests.unwrap_or(p == Precision::Full);
        let inner = Core::with_options(path, stats_path(device_path), p, digests)
            .map_err(|e| PyRuntimeError::new_err(e.to_string()))?;
        Ok(Capture {
            inner: Mutex::new(inner),
        })
    }

    /// Hashes `inputs` now, before a mutating op runs; `index`: their
    /// digest indexes (see `record`).
    #[pyo3(signature = (inputs, index = None))]
    fn hash_inputs(
        &self,
        inputs: Vec<Bound<'_, PyAny>>,
        index: Option<Vec<PyIndex>>,
    ) -> PyResult<PreHashes> {
        let ts = tensors(&inputs, "inputs")?;
        let refs: Vec<&Tensor> = ts.iter().collect();
        let index = indexes(index);
        Ok(PreHashes {
            inner: Mutex::new(Some(self.core().hash_inputs(&refs, &index).map_err(err)?)),
        })
    }

    /// Records one op; returns its key. `phase` is 0 (forward, outside any
    /// module), 1 (backward), 2 (forward inside a module's forward) or 3
    /// (the optimizer's: `Phase::Optimizer`); a bool reads as 0 or 1. `primary` indexes `outputs` (the
    /// output whose Shape and stats are written) or is None (hash-only).
    /// `inputs` is a list of tensors (hashed now) or a `PreHashes`.
    #[allow(clippy::too_many_arguments)]
    /// `layout` is `None` or `(stats, outputs, inputs)`: the block's layout
    /// lines (`logformat::BlockLayout`) for an op on DTensors or shards.
    /// `digest_index` is `None` or `(outputs, inputs)`, each a list of
    /// `None` (a whole tensor) or `(run, stride, offset)` (a shard:
    /// `digest::Index`).
    /// `parameters` is the `, `-joined FQNs of the parameters an
    /// optimizer-step op reads or writes (`Parameters:` line), or None;
    /// `output_parameters` the parameters of each output when they differ
    /// from output to output (`Output parameters:` line), or None;
    /// `input_parameters` the parameter FQN at each input of an op outside
    /// the optimizer step, aligned with `inputs` ("" where an input is
    /// none: `Input parameters:` line), or None.
    #[pyo3(signature = (fqn, op, phase, location, primary, outputs, inputs, input_ids, output_ids, layout = None, digest_index = None, parameters = None, output_parameters = None, input_parameters = None))]
    fn record(
        &self,
        fqn: Option<&str>,
        op: &str,
        phase: u8,
        location: Option<String>,
        primary: Option<usize>,
        outputs: Vec<Bound<'_, PyAny>>,
        inputs: &Bound<'_, PyAny>,
        input_ids: Vec<u64>,
        output_ids: Vec<u64>,
        layout: Option<(Option<String>, Vec<String>, Vec<String>)>,
        digest_index: Option<(Vec<PyIndex>, Vec<PyIndex>)>,
        parameters: Option<String>,
        output_parameters: Option<Vec<String>>,
        input_parameters: Option<Vec<String>>,
    ) -> PyResult<String> {
        if phase > 3 {
            return Err(PyValueError::new_err(format!(
                "phase must be 0 (forward), 1 (backward), 2 (forward in a module) or 3 (optimizer), got {phase}"
            )));
        }
        let outs = tensors(&outputs, "outputs")?;
        let outs: Vec<&Tensor> = outs.iter().collect();
        if primary.is_some_and(|i| i >= outs.len()) {
            return Err(PyTypeError::new_err("primary index out of range"));
        }
        let meta = OpRecord {
            fqn,
            op,
            phase: match phase {
                1 => Phase::Backward,
                3 => Phase::Optimizer,
                _ => Phase::Forward,
            },
            location,
            layout: layout.map(|(stats, outputs, inputs)| crate::logformat::BlockLayout {
                stats,
                outputs,
                inputs,
            }),
            digest_index: digest_index
                .map(|(o, i)| DigestIndexes {
                    outputs: indexes(Some(o)),
                    inputs: indexes(Some(i)),
                })
                .unwrap_or_default(),
            parameters: parameters.unwrap_or_default(),
            output_parameters: output_parameters.unwrap_or_default(),
            input_parameters: input_parameters.unwrap_or_default(),
        };
        if let Ok(pre) = inputs.cast::<PreHashes>() {
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
        let ins: Vec<Bound<'_, PyAny>> = inputs.extract()?;
        let ins = tensors(&ins, "inputs")?;
        let ins: Vec<&Tensor> = ins.iter().collect();
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

    /// `defer_host(worker: HostWorker | None) -> None`: the statistics of
    /// CPU tensors of later records are computed by `worker`, so `record`
    /// returns at once; each recorded tensor must stay unchanged until
    /// `worker.wait()`, `flush()` or `finish()` has returned (see
    /// `actdiff_capture.modules`). Pre-op input hashes (`hash_inputs`)
    /// stay on the calling thread. `None`: later records' statistics are
    /// computed by the calling thread again (records already handed over
    /// stay with the worker).
    fn defer_host(&self, worker: Option<PyRef<'_, HostWorker>>) {
        match worker {
            Some(w) => self.core().defer_host(w.inner.clone()),
            None => self.core().compute_on_caller(),
        }
    }

    /// Notes an excluded op that was dispatched.
    fn note_excluded(&self, op: &str) {
        self.core().note_excluded(op);
    }

    /// `note_compiled(backend: str) -> None`: notes that the model was
    /// compiled by `torch.compile` with `backend` (`"inductor"`,
    /// `"aot_eager"`, ...): `finish()` writes the header line
    /// `Compiled: <backend>`, so comparing with an eager run reports the
    /// ops the backend fused away as such (not gating). A later call
    /// replaces an earlier one. ValueError for an empty name or one with
    /// control characters.
    fn note_compiled(&self, backend: &str) -> PyResult<()> {
        let b = CompileBackend::from_name(backend).ok_or_else(|| {
            PyValueError::new_err(format!(
                "backend must be a non-empty name without control characters, got {backend:?}"
            ))
        })?;
        self.core().note_compiled(b);
        Ok(())
    }

    /// `note_filter(filter: str) -> None`: notes what the capture's
    /// settings leave out (`min_numel=1000`, then `, op_filter=...`,
    /// `, excluded_ops=...`): `finish()` writes the header line `Capture
    /// filter: ...`. ValueError for text with a control character.
    fn note_filter(&self, filter: String) -> PyResult<()> {
        if filter.trim().is_empty() || filter.chars().any(char::is_control) {
            return Err(PyValueError::new_err(format!(
                "a capture filter must be non-empty text without control characters, got {filter:?}"
            )));
        }
        self.core().note_filter(filter.trim().to_string());
        Ok(())
    }

    /// `note_below_min_numel(n: int) -> None`: notes how many ops were not
    /// captured because every floating-point result was smaller than
    /// `min_numel`: `finish()` writes the header line `Ops below min
    /// numel: N`.
    fn note_below_min_numel(&self, n: u64) {
        self.core().note_below_min_numel(n);
    }

    /// `note_compiled_modules(fqns: list[str]) -> None`: notes the modules
    /// whose forward ran compiled in a module-level capture (`<none>`: the
    /// whole forward): `finish()` writes the header line `Compiled
    /// modules: a, b`. ValueError for a name that is empty, has a comma or
    /// a control character (it would not read back as one name).
    fn note_compiled_modules(&self, fqns: Vec<String>) -> PyResult<()> {
        if let Some(bad) = fqns
            .iter()
            .find(|f| f.trim().is_empty() || f.contains(',') || f.chars().any(char::is_control))
        {
            return Err(PyValueError::new_err(format!(
                "a module name must be non-empty, without commas or control characters, got {bad:?}"
            )));
        }
        self.core().note_compiled_modules(fqns);
        Ok(())
    }

    /// `note_step(step: int) -> None`: notes the training step this log
    /// captures (1-based): `finish()` writes the header line `Step: S`.
    fn note_step(&self, step: u64) {
        self.core().note_step(step);
    }

    /// `note_level(level: str) -> None`: `"modules"` for a module-level
    /// capture (`finish()` writes `Level: modules`), `"ops"` the default.
    /// ValueError for another name.
    fn note_level(&self, level: &str) -> PyResult<()> {
        let l = crate::logformat::CaptureLevel::from_name(level).ok_or_else(|| {
            PyValueError::new_err(format!("level must be 'ops' or 'modules', got {level:?}"))
        })?;
        self.core().note_level(l);
        Ok(())
    }

    /// `note_loss(loss: float) -> None`: notes the step's training loss:
    /// `finish()` writes the header line `Loss: x` (round-trip float64).
    fn note_loss(&self, loss: f64) {
        self.core().note_loss(loss);
    }

    /// `note_rng(start: int, end: int) -> None`: notes 64-bit digests of
    /// torch's random number generators' state when the step was armed
    /// and when it ended: `finish()` writes the header line
    /// `RNG state: start=<16 hex> end=<16 hex>`.
    fn note_rng(&self, start: u64, end: u64) {
        self.core().note_rng(start, end);
    }

    /// `note_world_size(n: int) -> None`: notes the processes of the
    /// distributed run (`torch.distributed.get_world_size()`): `finish()`
    /// writes the header line `World size: N`.
    fn note_world_size(&self, n: u32) {
        self.core().note_world_size(n);
    }

    /// `note_mesh(mesh: str, coords: str) -> None`: notes the run's device
    /// mesh (`"dp=2 tp=2"`) and this rank's coordinates (`"dp=0 tp=1"`):
    /// `finish()` writes the header lines `Mesh:` and `Coords:`.
    /// ValueError when they do not fit (`logformat::Mesh::parse`).
    fn note_mesh(&self, mesh: &str, coords: &str) -> PyResult<()> {
        let m = crate::logformat::Mesh::parse(mesh, coords).map_err(PyValueError::new_err)?;
        self.core().note_mesh(m);
        Ok(())
    }

    /// Moves queued stats to the host and hands records to the writer
    /// (the GIL released while it waits for them).
    fn flush(&self, py: Python<'_>) -> PyResult<usize> {
        py.detach(|| self.core().flush()).map_err(err)
    }

    /// Flushes and writes the finished log; returns the number of blocks.
    fn finish(&self, py: Python<'_>) -> PyResult<u64> {
        py.detach(|| self.core().finish()).map_err(err)
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

/// `compare(args: list[str]) -> int`: runs `actdiff compare ARGS...` in
/// this process (the engine this extension was built with), the GIL
/// released; returns its exit status (0 agree, 1 diverged, 2 input error,
/// 3 incomplete input). Its outputs are those of the command line: pass
/// `-o DIR` and `-q`, then read `DIR/summary.json`.
#[pyfunction]
fn compare(py: Python<'_>, args: Vec<String>) -> i32 {
    let mut argv = vec!["actdiff".to_string(), "compare".to_string()];
    argv.extend(args);
    py.detach(|| crate::cli::run_from(argv))
}

/// `tensor_stats(t, moments=True, device_path=False) -> (l1, (l2, min, max, mean, nan, inf) | None)`:
/// the stats of one tensor, read back at once (tests and benchmarks).
#[pyfunction]
#[pyo3(signature = (t, moments = true, device_path = false))]
#[allow(clippy::type_complexity)]
fn tensor_stats(
    py: Python<'_>,
    t: &Bound<'_, PyAny>,
    moments: bool,
    device_path: bool,
) -> PyResult<(f64, Option<(f64, f64, f64, f64, u64, u64)>)> {
    let t = tensor(t, "t")?;
    let s = py
        .detach(move || stats_of(&t, moments, None, device_path))
        .map_err(torch_err)?;
    Ok((
        s.l1,
        s.moments
            .map(|m| (m.l2, m.min, m.max, m.mean, m.nan_count, m.inf_count)),
    ))
}

fn stats_of(
    t: &Tensor,
    moments: bool,
    digest: Option<Index>,
    device_path: bool,
) -> Result<super::TensorStats, TorchError> {
    let i = t.info()?;
    let moments = moments && i.floating && i.numel > 0;
    if device_path || i.device != Device::Cpu {
        read_back(t, moments, digest)
    } else {
        host_stats(t, moments, digest)
    }
}

/// `tensor_digest(t, device_path=False, index=None) -> int`: the 64-bit
/// content digest that `Output digest:` / `Input digests:` lines carry (16
/// hex digits there), read back at once (tests and benchmarks); `index`:
/// `None` or a shard's `(run, stride, offset)` (`digest::Index`).
#[pyfunction]
#[pyo3(signature = (t, device_path = false, index = None))]
fn tensor_digest(
    py: Python<'_>,
    t: &Bound<'_, PyAny>,
    device_path: bool,
    index: PyIndex,
) -> PyResult<u64> {
    let t = tensor(t, "t")?;
    let n = super::batch::digest_len(&t.info().map_err(torch_err)?);
    let at = Some(to_index(index));
    let s = py
        .detach(move || stats_of(&t, false, at, device_path))
        .map_err(torch_err)?;
    Ok(digest::finish(s.digest.unwrap_or(0), n))
}

/// `combine_digests(digests) -> int`: the whole tensor's digest from its
/// shards' (`digest::combine`).
#[pyfunction]
fn combine_digests(digests: Vec<u64>) -> u64 {
    digest::combine(digests)
}

/// A digest index from Python: `None` (whole) or `(run, stride, offset)`.
type PyIndex = Option<(u64, u64, u64)>;

fn to_index(i: PyIndex) -> Index {
    i.map_or(Index::WHOLE, |(run, stride, offset)| Index {
        run,
        stride,
        offset,
    })
}

fn indexes(v: Option<Vec<PyIndex>>) -> Vec<Index> {
    v.unwrap_or_default().into_iter().map(to_index).collect()
}

#[pymodule]
#[pyo3(name = "_native")]
fn native(m: &Bound<'_, PyModule>) -> PyResult<()> {
    // The extension is tied to the torch it was compiled against.
    let torch = m.py().import("torch")?;
    let have: String = torch.getattr("__version__")?.extract()?;
    if have != TORCH_VERSION {
        return Err(PyImportError::new_err(format!(
            "actdiff_capture was built against torch {TORCH_VERSION}, but torch {have} is installed: \
             reinstall it (pip install --no-build-isolation --force-reinstall ./python)"
        )));
    }
    m.add("TORCH_VERSION", TORCH_VERSION)?;
    m.add_class::<Capture>()?;
    m.add_class::<PreHashes>()?;
    m.add_class::<HostWorker>()?;
    m.add_function(wrap_pyfunction!(tensor_stats, m)?)?;
    m.add_function(wrap_pyfunction!(tensor_digest, m)?)?;
    m.add_function(wrap_pyfunction!(combine_digests, m)?)?;
    m.add_function(wrap_pyfunction!(compare, m)?)?;
    Ok(())
}
