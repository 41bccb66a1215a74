"""The module-level capture (``Profiler(..., level="modules")``): cheap
enough to leave on for every step. No dispatch mode: per step it records,
through module and tensor hooks,

- each module's forward output (``{fqn}/op_N_output``, phase forward; the
  first tensor of the output, hashed and with stats when floating);
- each parameter's gradient as backward accumulates it
  (``{module fqn}/op_N_{param}_grad``, phase backward);
- each parameter after the optimizer step, read when ``step()`` is called
  (``{module fqn}/op_N_{param}``, after the last backward record: the
  optimizer phase).

The log is the same block format as a per-op capture, with the header line
``Level: modules``; ``N`` counts the module's records in order (a module
called twice gets ``op_0_output`` and ``op_1_output``). The root module's
output is ``<none>/op_N_output``, as the reference names ops outside any
module.

Off the training thread (``worker``, a ``_native.HostWorker``; the
profiler gives one when the model trains on the CPU in one process): the
statistics and digests of CPU tensors are computed by the worker's thread
while training goes on, and each tensor is kept unchanged until the worker
has read it:

- a module's output is copied first (a later in-place op, such as
  ``ReLU(inplace=True)`` or ``x += y``, may change it at once);
- the gradients are read in place: the end of each backward pass waits for
  the worker (a callback queued on autograd's engine), before anything such
  as ``clip_grad_norm_`` or the optimizer can change them;
- the parameters after the optimizer are copied too (a loop may change
  them in place before the next optimizer step, e.g. a clamp at the start
  of a step); every optimizer step also waits for the worker first (a
  global optimizer step pre-hook).

A step whose backward ran with no optimizer step after it (``prof.step()``
called before ``optimizer.step()``, or a step of gradient accumulation) has
parameter records that are the values before an optimizer step: a
``UserWarning`` says so, once per profiler.
"""

from __future__ import annotations

import warnings

import torch
from torch import nn
from torch.optim import optimizer as _optimizer

from . import fx

#: The warning of a step whose backward was not followed by an optimizer step.
NO_OPTIMIZER_STEP = (
    "actdiff_capture: step {step}: no optimizer step ran after this step's backward, so its "
    "parameter records (after the optimizer, level='modules') hold the values before one. "
    "Call prof.step() after optimizer.step(); in gradient accumulation, only on the steps "
    "that end with an optimizer step."
)


def _first_tensor(x):
    if isinstance(x, torch.Tensor):
        return x
    if isinstance(x, (list, tuple)):
        for v in x:
            t = _first_tensor(v)
            if t is not None:
                return t
    if isinstance(x, dict):
        for v in x.values():
            t = _first_tensor(v)
            if t is not None:
                return t
    return None


class ModuleRecorder:
    """Hooks of one captured step at module level, recording into ``cap``
    (a ``_native.Capture``); :meth:`finish` records the parameters after
    the optimizer and removes the hooks. With ``worker`` (a
    ``_native.HostWorker``) the statistics are computed off the training
    thread (see the module documentation)."""

    def __init__(self, model: nn.Module, cap, worker=None):
        self.model = model
        self.cap = cap
        self.worker = worker
        self._waits_queued = False  # a wait queued for this backward pass's end
        # Whether a gradient was recorded since the last optimizer step (a
        # global optimizer step post-hook clears it).
        self.grads_since_optimizer = False

        def after_optimizer_step(optimizer, args, kwargs):
            self.grads_since_optimizer = False

        self._optimizer_hook = _optimizer.register_optimizer_step_post_hook(after_optimizer_step)
        if worker is not None:
            cap.defer_host(worker)
        self.handles: list = []
        names = {}
        for name, m in model.named_modules():
            names.setdefault(id(m), fx.clean_fqn(name) or None)
        self.params = []  # (module fqn, param name, param)
        seen = set()
        for mname, m in model.named_modules():
            for pname, p in m.named_parameters(recurse=False):
                if id(p) in seen:
                    continue  # a tied parameter: recorded once, by its first module
                seen.add(id(p))
                self.params.append((fx.clean_fqn(mname) or None, pname, p))
        for m in dict.fromkeys(m for _, m in model.named_modules()):
            fqn = names.get(id(m))
            self.handles.append(m.register_forward_hook(self._output_hook(fqn)))
        for fqn, pname, p in self.params:
            if p.requires_grad:
                self.handles.append(p.register_post_accumulate_grad_hook(self._grad_hook(fqn, pname)))

    def _record(self, fqn, role: str, t: torch.Tensor, backward: bool) -> None:
        t = t.detach()
        primary = 0 if t.is_floating_point() and t.numel() > 0 else None
        self.cap.record(fqn, role, backward, None, primary, [t], [], [], [])

    def _output_hook(self, fqn):
        def hook(module, args, output):
            if torch.compiler.is_compiling():
                return
            t = _first_tensor(output)
            if t is not None:
                if self.worker is not None:
                    t = t.detach().clone()  # a later in-place op may change it
                self._record(fqn, "output", t, False)

        return hook

    def _grad_hook(self, fqn, pname):
        def hook(p):
            if p.grad is not None:
                self.grads_since_optimizer = True
                self._record(fqn, f"{pname}_grad", p.grad, True)
                if self.worker is not None and not self._waits_queued:
                    # The gradients stay unchanged until the worker read
                    # them: the end of this backward pass waits for it.
                    self._waits_queued = True
                    torch.autograd.Variable._execution_engine.queue_callback(self._backward_done)

        return hook

    def _backward_done(self) -> None:
        self._waits_queued = False
        self.worker.wait()

    def finish(self) -> None:
        """Records every parameter as the optimizer left it, then removes
        the hooks."""
        self.remove()
        with torch.no_grad():
            for fqn, pname, p in self.params:
                if self.worker is not None:
                    # The loop may change a parameter in place before the
                    # next optimizer step (a clamp or a weight norm at the
                    # start of a step): the worker reads a copy.
                    p = p.detach().clone()
                self._record(fqn, pname, p, False)

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []
        h, self._optimizer_hook = self._optimizer_hook, None
        if h is not None:
            h.remove()
