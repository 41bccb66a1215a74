"""Per-op activation capture for PyTorch, in the log format `actdiff compare` reads.

Used like TorchTitan's ``ActivationCaptureProfiler`` (and as a drop-in for
it: the same constructor, lifecycle and FX context protocol)::

    import actdiff_capture
    prof = actdiff_capture.Profiler(model, "dump/numerics", capture_step=2)
    for step in ...:
        ...              # one training step (forward, backward, optimizer)
        prof.step()      # after every step

or, with TorchTitan's patch (``patching.md`` of its numerics skill),
``from actdiff_capture import ActivationCaptureProfiler`` where it imports
the tracer script, and the traced trainer's ``FQNInterpreter`` importing
``_current_module_name``, ``_current_stack_frames``,
``_current_phase_override``, ``_parse_stack_trace`` and
``is_numerics_capture_active`` from ``actdiff_capture``.

``step()`` counts steps; after step ``capture_step - 1`` it arms a
``TorchDispatchMode`` and forward hooks on the model's modules, and after step
``capture_step`` it writes ``{dump_dir}/rank_{rank}_activations.log`` and
disarms. ``capture_steps=range(1, 1001)`` (any iterable of steps) captures a
step series instead: ``{dump_dir}/step_{S}/rank_{rank}_activations.log`` per
step, each with a ``Step: S`` header line, which ``actdiff compare`` reads
to name the first step where two runs part; ``prof.step(loss=loss)``
records the loss in the header. ``level="modules"`` records module outputs,
parameter gradients and parameters after the optimizer through hooks only
(:mod:`actdiff_capture.modules`), cheap enough to capture every step;
``baseline=DIR`` compares each captured step with a blessed dump as it is
written and raises :class:`Diverged` at the first divergence
(:mod:`actdiff_capture.baseline`). What is captured and how keys, phases and locations are found:
:mod:`actdiff_capture.capture`; the FX side: :mod:`actdiff_capture.fx`.
All statistics and the writing are done by the Rust core
(``actdiff_capture._native``).
"""

from __future__ import annotations

from ._native import Capture, tensor_stats
from .baseline import BaselineError, Diverged
from .capture import (
    DEFAULT_MIN_NUMEL,
    EXCLUDED_OPS,
    LEVELS,
    PRECISIONS,
    ActivationCaptureProfiler,
    Profiler,
)
from .fx import (
    FQNInterpreter,
    StackFrame,
    _clean_fqn,
    _current_module_name,
    _current_phase_override,
    _current_stack_frames,
    _parse_stack_trace,
    _StackFrame,
    is_numerics_capture_active,
    parse_stack_trace,
    set_numerics_capture_active,
)

__all__ = [
    "ActivationCaptureProfiler",
    "BaselineError",
    "Capture",
    "Diverged",
    "DEFAULT_MIN_NUMEL",
    "EXCLUDED_OPS",
    "FQNInterpreter",
    "LEVELS",
    "PRECISIONS",
    "Profiler",
    "StackFrame",
    "is_numerics_capture_active",
    "parse_stack_trace",
    "set_numerics_capture_active",
    "tensor_stats",
    # The reference's private names, for TorchTitan's FQNInterpreter patch.
    "_StackFrame",
    "_clean_fqn",
    "_current_module_name",
    "_current_phase_override",
    "_current_stack_frames",
    "_parse_stack_trace",
]
