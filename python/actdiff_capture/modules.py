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

- a module's output (a later in-place op, such as ``ReLU(inplace=True)``
  or ``x += y``, may change it at once) below ``HERE_MAX`` elements is
  read by the training thread in the hook itself, while it is in cache
  (cheaper than copying it for the worker); a larger one is copied first,
  into a buffer kept for that output (the N-th copied output of a step)
  from one captured step to the next (no allocation a step), and the
  worker reads the copy;
- the gradients are read in place. The profiler's first captured step is
  a probe: the end of its backward pass waits for the worker (a callback queued on
  autograd's engine), and each gradient's version counter is taken when
  it is recorded and compared at ``prof.step()``. When none changed (no
  clipping, scaling or ``zero_grad(set_to_none=False)`` in place), later
  steps do not wait at backward's end: the worker reads them while the
  optimizer runs, and :meth:`ModuleRecorder.finish` waits for it and
  compares the versions. A change seen there warns once
  (:data:`GRAD_CHANGED_IN_PLACE`: that step's gradient records may mix
  values) and backward's end waits from then on; a loop that changes
  them in place every step keeps the wait from the probe on, silently;
- the parameters after the optimizer: a normal loop changes them only in
  its next optimizer step, so they are read by the worker in the
  background while the next step runs (the training thread does not wait
  for them), and everything that could change them waits for the worker
  first: the next optimizer step (a global optimizer step pre-hook that
  waits for the parameters only, ``HostWorker.wait_for`` their ticket),
  the next :meth:`ModuleRecorder.finish`, the profiler's ``_complete``.
  The step's log is completed by the extension's finishing thread
  (``Capture.finish_background``) once the worker has read them. Each
  parameter's version counter (``Tensor._version``) is taken when it is
  recorded and compared at that wait: a loop that changes a parameter in
  place between optimizer steps (a clamp at the start of a step) is seen
  there. The profiler's first captured step is a probe (what the probes
  learned is a :class:`ParamReads` the profiler's recorders share): its
  parameters are read before ``step()`` returns (by the worker and a
  second worker of the recorder's own, half each, the training thread
  waiting); only when no parameter changed
  until the next wait do later steps read them in the background. A
  change seen after a background read makes that step's parameter
  records possibly a mix of values before and after it: a
  ``UserWarning`` names the parameter and the step (once per profiler)
  and every later step reads them before ``step()`` returns. A change
  through ``p.data`` (a tensor with a version counter of its own) keeps
  the version: the probe also compares the parameters' digests, so a loop
  doing that every step keeps the reads before ``step()`` returns, but one
  doing it only in a later step is not seen.

A run of consecutive captured steps keeps one recorder: its hooks stay
registered from one step to the next (:meth:`ModuleRecorder.rearm` hands
them the next step's capture) instead of being removed and registered
again every step; the modules and parameters are those of the first step
of the run.

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
from ._native import tensor_digest

#: The warning of a step whose backward was not followed by an optimizer step.
NO_OPTIMIZER_STEP = (
    "actdiff_capture: step {step}: no optimizer step ran after this step's backward, so its "
    "parameter records (after the optimizer, level='modules') hold the values before one. "
    "Call prof.step() after optimizer.step(); in gradient accumulation, only on the steps "
    "that end with an optimizer step."
)


#: The warning of a parameter changed in place while the worker read it.
CHANGED_IN_PLACE = (
    "actdiff_capture: step {step}: parameter {name} was changed in place after the optimizer step "
    "(not by an optimizer) while the statistics worker was reading it (level='modules'): step "
    "{step}'s parameter records may mix values from before and after the change. From now on the "
    "parameters are read before prof.step() returns."
)


#: The warning of a gradient changed in place while the worker read it.
GRAD_CHANGED_IN_PLACE = (
    "actdiff_capture: step {step}: the gradient of {name} was changed in place after backward "
    "(gradient clipping or scaling, zero_grad(set_to_none=False), an optimizer) while the "
    "statistics worker was reading it (level='modules'): step {step}'s gradient records may mix "
    "values from before and after the change. From now on backward's end waits for the worker."
)


class ParamReads:
    """How a profiler's module-level recorders read the parameters after
    the optimizer and the gradients, learned from the loop: ``background``
    is None until a probe step has shown whether the loop changes
    parameters in place between optimizer steps (then False), else True;
    ``grads`` likewise for gradients changed in place between backward's
    end and ``prof.step()`` (True: the gradients are read while the
    optimizer runs, with no wait at backward's end); ``warned`` and
    ``grads_warned``: :data:`CHANGED_IN_PLACE` and
    :data:`GRAD_CHANGED_IN_PLACE` were given."""

    def __init__(self):
        self.background: bool | None = None
        self.grads: bool | None = None
        self.warned = False
        self.grads_warned = False


#: Module outputs with fewer elements are read by the training thread in
#: the forward hook (one pass, in cache, on this thread only: below the
#: length at which the host pass splits a tensor across rayon's threads);
#: larger ones are copied for the worker.
HERE_MAX = 1 << 16


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

    def __init__(self, model: nn.Module, cap, worker=None, reads: ParamReads | None = None):
        self.model = model
        self.cap = cap
        self.worker = worker
        self._waits_queued = False  # a wait queued for this backward pass's end
        # Copies the worker reads, kept from step to step (worker only):
        # the step's N-th module output's, and each parameter's.
        self._out_bufs: list = []
        self._out_n = 0
        # The second half of the parameters' reader (finish).
        self._helper = type(worker)() if worker is not None else None
        # How the parameters are read (shared by the profiler's recorders),
        # and the versions of the last recorded ones, checked at the next
        # wait: (step, read in the background, [version per parameter]).
        self.reads = reads if reads is not None else ParamReads()
        self._versions = None
        # Every output copy handed to the worker has been read (a wait
        # since): the next step may overwrite the buffers.
        self._outputs_read = True
        # The worker's ticket of the parameters read in the background
        # (the next optimizer step waits for them only), this step's
        # gradients with their versions at record time (checked by
        # finish), and whether they are read with no wait at backward's end.
        self._params_ticket = None
        self._grads: list = []
        self._grads_background = self.reads.grads is True
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

    def _record(self, fqn, role: str, t: torch.Tensor, backward: bool, here: bool = False) -> None:
        """Records ``t`` as ``{fqn}/op_N_{role}``; ``here``: its statistics
        computed by this thread now (else by the worker, if any)."""
        self.cap.record_tensor(fqn, role, t, backward, here)

    def rearm(self, cap) -> None:
        """Records the next step into ``cap`` (a ``_native.Capture``) with
        the same hooks, after :meth:`finish`."""
        self.cap = cap
        self._out_n = 0
        self._grads_background = self.reads.grads is True
        if self.worker is not None:
            cap.defer_host(self.worker)

    @staticmethod
    def _copy_into(bufs: list, i: int, t: torch.Tensor) -> torch.Tensor:
        """``t``'s values in ``bufs[i]`` (made, or made again, when absent
        or of another shape or dtype): a copy no later op can change."""
        t = t.detach()
        if i < len(bufs):
            b = bufs[i]
            if b.shape == t.shape and b.dtype == t.dtype and b.device == t.device:
                b.copy_(t)
                return b
            bufs[i] = b = t.clone()
            return b
        b = t.clone()
        bufs.append(b)
        return b

    def _output_hook(self, fqn):
        compiling = torch.compiler.is_compiling

        def hook(module, args, output):
            if compiling():
                return
            t = output if type(output) is torch.Tensor else _first_tensor(output)
            if t is None:
                return
            if self.worker is None:
                self.cap.record_tensor(fqn, "output", t, False, False)
            elif t.numel() < HERE_MAX:
                # A later in-place op may change it: read here, now.
                self.cap.record_tensor(fqn, "output", t, False, True)
            else:
                # A later in-place op may change it: the worker reads a
                # copy, into a buffer the last step's copy was read from
                # (a wait came since: backward's end, or the one here).
                n, self._out_n = self._out_n, self._out_n + 1
                if n == 0 and not self._outputs_read:
                    # No wait since the last step's copies were handed over
                    # (no backward ran): they are read before reuse.
                    self.wait()
                self._outputs_read = False
                self.cap.record_tensor(fqn, "output", self._copy_into(self._out_bufs, n, t), False, False)

        return hook

    def _grad_hook(self, fqn, pname):
        role = f"{pname}_grad"

        def hook(p):
            g = p.grad
            if g is None:
                return
            self.grads_since_optimizer = True
            self.cap.record_tensor(fqn, role, g, True, False)
            if self.worker is None:
                return
            if self.reads.grads is not False:
                self._grads.append((fqn, pname, g, g._version))  # checked by finish
            if not self._grads_background and not self._waits_queued:
                # The gradients stay unchanged until the worker read
                # them: the end of this backward pass waits for it.
                self._waits_queued = True
                torch.autograd.Variable._execution_engine.queue_callback(self._backward_done)

        return hook

    def _backward_done(self) -> None:
        self._waits_queued = False
        self.wait()

    def wait(self) -> None:
        """Returns once the worker has read every tensor handed to it
        (those recorded may change from then on), then checks that no
        parameter read in the background changed in place meanwhile."""
        self.worker.wait()
        self._outputs_read = True
        self.check_params()

    def before_optimizer_step(self) -> None:
        """Before an optimizer changes the parameters: waits until the
        worker has read those recorded by the last :meth:`finish` (not the
        gradients queued after them), then checks their versions."""
        t, self._params_ticket = self._params_ticket, None
        if t is not None:
            self.worker.wait_for(t)
        self.check_params()

    def check_grads(self, step: int) -> None:
        """Waits until the worker has read this step's gradients, then
        compares their versions with those at record time: unchanged in the
        probe step, later steps' are read with no wait at backward's end;
        changed, backward's end waits from then on, with a warning
        (:data:`GRAD_CHANGED_IN_PLACE`, once) when they were read with no
        wait."""
        grads, self._grads = self._grads, []
        if not grads:
            return
        if self._grads_background:
            self.wait()
        changed = next(((fqn, pname) for fqn, pname, g, n in grads if g._version != n), None)
        if changed is None:
            if self.reads.grads is None:
                self.reads.grads = True
            return
        self.reads.grads = False
        if self._grads_background and not self.reads.grads_warned:
            self.reads.grads_warned = True
            fqn, pname = changed
            name = pname if fqn is None else f"{fqn}.{pname}"
            warnings.warn(GRAD_CHANGED_IN_PLACE.format(step=step, name=name), stacklevel=3)

    def check_params(self) -> None:
        """Compares the version counter of each parameter recorded by the
        last :meth:`finish` with its version then (once the worker has read
        them: call after a wait). A probe step whose parameters did not
        change lets later steps read them in the background; a change
        after a background read is warned about (:data:`CHANGED_IN_PLACE`)
        and makes later steps read them before ``finish`` returns. The
        probe also compares the parameters' digests (a change through
        ``p.data`` keeps the version)."""
        v, self._versions = self._versions, None
        if v is None:
            return
        step, background, versions, digests = v
        changed = next(
            (i for i, ((_, _, p), n) in enumerate(zip(self.params, versions)) if p._version != n),
            None,
        )
        if changed is None and digests is not None:
            changed = next(
                (i for i, ((_, _, p), d) in enumerate(zip(self.params, digests)) if tensor_digest(p) != d),
                None,
            )
        if changed is None:
            if self.reads.background is None:
                self.reads.background = True
            return
        self.reads.background = False
        if background and not self.reads.warned:
            self.reads.warned = True
            fqn, pname, _ = self.params[changed]
            name = pname if fqn is None else f"{fqn}.{pname}"
            warnings.warn(CHANGED_IN_PLACE.format(step=step, name=name), stacklevel=2)

    def finish(self, step: int = 0, background: bool = False) -> None:
        """Records every parameter as the optimizer left it (step ``step``).
        With ``background`` and once a probe step showed that the loop
        leaves the parameters alone between optimizer steps, the worker
        reads them while training goes on (whatever may change them waits
        for it first: see the module documentation); otherwise they are
        read before this returns. The hooks stay registered: :meth:`rearm`
        goes on with the next step, or :meth:`remove` removes them."""
        w = self.worker
        if w is None:
            for fqn, pname, p in self.params:
                self._record(fqn, pname, p, False)
            return
        self.check_grads(step)
        if self._versions is not None:
            self.wait()  # no optimizer step since the last finish: checked here
        versions = [p._version for _, _, p in self.params]
        if background and self.reads.background:
            self._versions = (step, True, versions, None)
            for fqn, pname, p in self.params:
                self._record(fqn, pname, p, False)
            self._params_ticket = w.ticket()
            return
        if self.reads.background is None:
            # The probe: versions, and the contents' digests (a change
            # through ``p.data`` leaves the version as it was).
            digests = [tensor_digest(p) for _, _, p in self.params]
            self._versions = (step, False, versions, digests)
        # Read now, by two threads: the worker takes the first half, the
        # helper the second.
        half = sum(p.numel() for _, _, p in self.params) / 2
        done = 0
        helped = False
        try:
            for fqn, pname, p in self.params:
                if not helped and done >= half:
                    helped = True
                    self.cap.defer_host(self._helper)
                done += p.numel()
                self._record(fqn, pname, p, False)
        finally:
            if helped:
                self.cap.defer_host(w)
            # The parameters, and this step's output buffers (reused next
            # step), have been read once these return.
            w.wait()
            self._helper.wait()
            self._outputs_read = True

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []
        h, self._optimizer_hook = self._optimizer_hook, None
        if h is not None:
            h.remove()
