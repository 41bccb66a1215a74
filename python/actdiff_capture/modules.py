"""The module-level capture (``Profiler(..., level="modules")``): cheap
enough to leave on for every step. No dispatch mode: per step it records,
through module and tensor hooks,

- each module's forward output (``{fqn}/op_N_output``, phase forward, or
  backward for activation checkpointing's recomputation inside backward;
  every tensor of the output (tuples, lists, dicts), an Output hash and
  digest each, Shape and stats of the first floating-point one; an
  output after a backward record, such as an eval forward under
  ``torch.no_grad()`` after the optimizer step, is written with its
  ``Phase: forward`` line, so a reader does not take it as the
  optimizer's);
- each parameter's gradient as backward accumulates it
  (``{module fqn}/op_N_{param}_grad``, phase backward): the rank's own,
  before DDP's all-reduce; under FSDP2 (``fully_shard``) the whole
  parameter's, read at once from the unsharded parameter, before FSDP's
  reduce-scatter (the shard's hooks, which FSDP calls with the reduced
  shard, record nothing);
- each parameter after the optimizer step (``{module fqn}/op_N_{param}``,
  after the last backward record: the optimizer phase), read when a
  ``torch.optim`` optimizer's ``step()`` returns (a global step post-hook:
  before anything after it, an eval forward or a clamp, runs), and the
  parameters no such optimizer updated (a loop's own update, frozen
  ones) when ``prof.step()`` is called; a parameter changed in place
  after its optimizer step (a clamp, an EMA: its version counter moved) is
  recorded again then, under the next number;
- each persistent buffer (BatchNorm's running statistics, its batch
  count) as the step left it (``{module fqn}/op_N_{buffer}``, after the
  parameters, when ``prof.step()`` is called: a buffer of a module run
  under activation checkpointing may be updated twice); when a forward
  runs after the optimizer step (an evaluation pass), they are read
  before its first output, so that they come before its records in the
  log, and again at ``prof.step()`` if a module of that forward ran in
  training mode (a BatchNorm then updates them again).

Gradients are recorded as backward leaves them: with loss scaling
(``GradScaler``) they are the scaled gradients, so runs with different
scales differ in every gradient record (and agree in the parameters).

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
- the gradients are read in place: the end of each backward pass waits for
  the worker (a callback queued on autograd's engine), before anything such
  as ``clip_grad_norm_`` or the optimizer can change them;
- the parameters after the optimizer are read before the optimizer's ``step()`` (or ``prof.step()``) returns
  (a loop may change them in place before the next optimizer step, e.g. a
  clamp at the start of a step), by two threads at once: the worker takes
  the first half of them (by elements), a second worker of the recorder's
  own the rest, and the training thread waits for both. No copy: the
  training thread waits about as long as a copy of them would take it
  (its core reads half), and never computes statistics itself (that
  would run rayon's pool beside it); every optimizer step also waits for
  the worker first (a global optimizer step pre-hook).

A run of consecutive captured steps keeps one recorder: its hooks stay
registered from one step to the next (:meth:`ModuleRecorder.rearm` hands
them the next step's capture) instead of being removed and registered
again every step; the modules and parameters are those of the first step
of the run.

A module whose forward runs compiled (``torch.compile(model)``,
``block.compile()``, a block replaced by ``torch.compile(block)``) runs no
module hooks: its output, and those of the modules inside it, are not
recorded; its parameters' gradients and values are (autograd's hooks and
the reads after the optimizer run outside compiled code).
:meth:`ModuleRecorder.compiled_modules` names them, outermost only: the
modules whose hooks Dynamo traced (the hook appends the module's FQN to a
list when ``torch.compiler.is_compiling()``, an append Dynamo replays at
every call of the compiled code: modules called inside a compiled
function are seen too), the modules compiled themselves
(``_compiled_call_impl`` set by ``Module.compile()``, or a
``torch.compile`` wrapper among the modules: seen even when Dynamo traced
them before the profiler's hooks existed), and the whole forward when the
root's hook was traced, or did not run although gradients were recorded
after Dynamo compiled some frame. The profiler writes the header lines ``Compiled:
torch.compile`` (hooks do not see the backend) and ``Compiled modules:
a, b`` (``<none>``: the whole forward), and warns once
(:data:`COMPILED_OUTPUTS`); a compare reads the other run's one-sided
outputs of those modules, and of the modules inside them, as not
recorded, not gating. A module whose parameters got gradients while its
forward hook never ran, and that is none of those (its parameters used
without calling it: ``F.linear(x, self.head.weight)``; or called in code
Dynamo compiled before the profiler existed), is not marked in the log: a
warning says so once (:data:`UNEXPLAINED_OUTPUTS`).

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
    "that end with an optimizer step. (Only torch.optim optimizers are seen: a loop that "
    "updates the parameters itself before prof.step() has records after its update.)"
)


#: The warning of a step whose modules ran compiled (no output records).
COMPILED_OUTPUTS = (
    "actdiff_capture: step {step}: {modules} ran compiled (torch.compile), where module hooks "
    "do not run: level='modules' records no forward output of {them} or of the modules inside "
    "{them}, only gradients and parameters. The log's header says so ('Compiled modules:'), and "
    "a compare shows those outputs, which only the other run has, as not recorded, not gating. "
    "Capture at level='ops' for records of compiled code."
)

#: The warning of a step with modules whose parameters got gradients while
#: their forward hook never ran, none of them compiled as far as the
#: profiler can see.
UNEXPLAINED_OUTPUTS = (
    "actdiff_capture: step {step}: {modules}: gradients of {their} parameters were recorded but "
    "{their} forward hook never ran: {their} parameters used without calling {them} "
    "(F.linear(x, m.weight)), or called in code compiled before the profiler existed. No output of "
    "{them} is recorded, and the log does not mark {them} as compiled: a compare shows an output "
    "only the other run has as a difference."
)


#: The warning of a step whose modules ran inside torch.func transforms:
#: their outputs are functorch's wrapped tensors, which have no storage.
IN_TRANSFORMS = (
    "actdiff_capture: step {step}: {n} forward output{s} of {modules} ran inside torch.func transforms "
    "(grad, vmap, jacrev, ...) and {were} not recorded: their tensors are functorch's wrappers, with no "
    "storage to read. Gradients set on the parameters (p.grad = g) are recorded when the optimizer "
    "steps, parameters after it as usual; level='ops' records the ops inside transforms."
)

#: The warning of a model with TorchScript submodules, which take no hooks.
SCRIPT_MODULES = (
    "actdiff_capture: {modules}: TorchScript module{s} (torch.jit.script/trace) {take} no hooks: at "
    "level='ops' {their} ops are named under the module that calls {them}; at level='modules' "
    "{their} outputs are not recorded ({their} parameters and gradients are)."
)


def is_script_module(m: nn.Module) -> bool:
    """Whether ``m`` is a TorchScript module, on which ``register_forward_hook``
    and ``register_forward_pre_hook`` raise."""
    return isinstance(m, torch.jit.ScriptModule)


def script_modules_warning(model: nn.Module) -> str | None:
    """:data:`SCRIPT_MODULES` for the TorchScript modules of ``model`` (the
    outermost ones), or None when it has none."""
    names = []
    for name, m in model.named_modules():
        if is_script_module(m) and not any(name.startswith(n + ".") for n in names):
            names.append(name)
    if not names:
        return None
    shown = [fx.clean_fqn(n) or "the model" for n in names]
    one = len(names) == 1
    return SCRIPT_MODULES.format(
        modules=", ".join(shown),
        s="" if one else "s",
        take="takes" if one else "take",
        their="its" if one else "their",
        them="it" if one else "them",
    )


# Bumped by torch's global module and parameter registration hooks (a
# module or parameter set on any module): a recorder checks its model's
# structure again only when it moved.
_REGISTRATIONS = [0]
_REGISTRATION_HOOKS: list = []


def _count_registration(*_args) -> None:
    _REGISTRATIONS[0] += 1


def _watch_registrations() -> None:
    """Installs the global registration hooks once (they only count)."""
    if _REGISTRATION_HOOKS:
        return
    from torch.nn.modules import module as _m

    for name in ("register_module_module_registration_hook", "register_module_parameter_registration_hook"):
        register = getattr(_m, name, None)
        if register is not None:
            _REGISTRATION_HOOKS.append(register(_count_registration))


def _wrappers(model: nn.Module) -> set:
    """Ids of the modules whose output hook would record another module's
    output under the same FQN: a wrapper whose FQN as keys spell it
    (:func:`fx.clean_fqn`) is its wrapped module's (an activation-
    checkpoint wrapper, FSDP1's ``FullyShardedDataParallel``, trial 71:
    two ``blocks.0`` outputs a step, one of them "only in" against the
    unwrapped model). Of each such chain the innermost module is hooked
    (it runs again in checkpointing's recomputation), or the model itself
    when the chain holds it (its hooks see the step's start and end)."""
    groups: dict = {}
    for name, m in model.named_modules():
        groups.setdefault(fx.clean_fqn(name), []).append((name, m))
    skip = set()
    for fqn, ms in groups.items():
        if len(ms) < 2:
            continue
        keep = ms[0][1] if fqn is None and ms[0][0] == "" else ms[-1][1]
        skip.update(id(m) for _, m in ms if m is not keep)
    return skip


def _structure(model: nn.Module) -> tuple:
    """What a recorder's hooks depend on: every module (name, identity) and
    every parameter (identity)."""
    return (
        tuple((name, id(m)) for name, m in model.named_modules()),
        tuple(id(p) for p in model.parameters()),
    )


#: The header's ``Compiled:`` value of a module-level log whose modules ran
#: compiled: the backend is not known to module hooks (the op level names
#: ``inductor`` from its wrappers).
COMPILED_BY = "torch.compile"


def dynamo_compiled() -> bool:
    """Whether Dynamo compiled some frame in this process (its counters)."""
    try:
        from torch._dynamo.utils import counters
    except ImportError:  # pragma: no cover - no Dynamo in this torch
        return False
    return any(counters["frames"].values()) or any(counters["stats"].values())


#: Module outputs with fewer elements are read by the training thread in
#: the forward hook (one pass, in cache, on this thread only: below the
#: length at which the host pass splits a tensor across rayon's threads);
#: larger ones are copied for the worker.
HERE_MAX = 1 << 16

#: Said once when the model's forward ran without autograd (an evaluation
#: pass under torch.no_grad()) before its training forward in a captured
#: step: an evaluation after ``prof.step()`` is recorded as the next step's
#: first records (trial 68 F3: a forgotten ``model.eval()`` there read as
#: "from step 3's batch").
EVAL_BEFORE_TRAINING = (
    "actdiff_capture: step {step}: the model's forward ran without autograd (an evaluation pass under "
    "torch.no_grad()) before its training forward: at level=\"modules\" its outputs are this step's first "
    "records and read as the training forward's; run the evaluation before prof.step() (after "
    "optimizer.step()), where its records come after the update"
)

#: Said once per profiler when an optimizer steps parameters the
#: Profiler's model does not hold, at either level (:func:`warn_unheld`),
#: with what that level then misses (new-user trials 16 F4 and 67 F4: a
#: submodule given; a GAN's generator profiled, its discriminator's
#: changed update unseen and blamed on the generator's backward).
UNHELD_PARAMETERS = (
    "actdiff_capture: an optimizer updates {n} of its {total} parameters that the Profiler's model does not hold "
    "(another model: a GAN's discriminator, a teacher; or a submodule given): {missed}; give the Profiler one "
    "module holding every model trained (nn.ModuleDict({{\"G\": G, \"D\": D}}))"
)

#: Said once per recorder when the model's parameters are views of another
#: tensor during its forward (FSDP1, ``FullyShardedDataParallel`` with
#: ``use_orig_params=True``, trial 71: the gradient hook raised, then the
#: freed views were read). Their records are the parameters as FSDP1
#: leaves them: this rank's flat shard, its gradient after the
#: reduce-scatter.
VIEW_PARAMETERS = (
    "actdiff_capture: {n} parameters ({names}) are views of another tensor while the model runs (FSDP1's "
    "FullyShardedDataParallel with use_orig_params=True?): level=\"modules\" records each as FSDP1 holds it "
    "after the step, this rank's flattened shard, and its gradient after the reduce-scatter, not the rank's "
    "own; their shapes differ from an unsharded or FSDP2 run's. FSDP2 (fully_shard) or level=\"ops\" "
    "record whole tensors"
)

#: What each level misses of the parameters :data:`UNHELD_PARAMETERS`
#: counts.
UNHELD_MISSED = {
    "modules": 'level="modules" records none of them, their outputs or gradients',
    "ops": "the ops that update only them carry no 'Parameters:' line",
}


def warn_unheld(optimizer, held, level: str) -> bool:
    """Warns (:data:`UNHELD_PARAMETERS`) when ``optimizer`` (its
    ``param_groups``) steps parameters whose ``id`` is not in ``held`` (the
    Profiler's model's parameters). Returns whether it warned, for the
    caller's once-per-profiler flag."""
    params = [p for g in getattr(optimizer, "param_groups", ()) for p in g.get("params", ())]
    unheld = sum(id(p) not in held for p in params)
    if unheld:
        warnings.warn(
            UNHELD_PARAMETERS.format(n=unheld, total=len(params), missed=UNHELD_MISSED[level]), stacklevel=3
        )
    return bool(unheld)


def _compiled_itself(m: nn.Module) -> bool:
    """Whether ``m``'s calls run compiled whoever calls it:
    ``m.compile()`` (``_compiled_call_impl``) or ``m`` is a
    ``torch.compile`` wrapper (``OptimizedModule``) put among the model's
    modules."""
    return getattr(m, "_compiled_call_impl", None) is not None or type(m).__name__ == "OptimizedModule"


def _strided(ts: list) -> list:
    """``ts`` as tensors the recorder reads: a DTensor (a tensor-parallel
    parameter, its gradient, a module's sharded output) as this rank's
    local shard (its Shape is the shard's), a sparse COO tensor (the
    gradient of ``nn.Embedding(sparse=True)``) as its coalesced values and
    indices (two tensors: the values' Shape and statistics, a hash and
    digest each, in index order), any other layout (CSR, ...) as its dense
    values."""
    out = []
    for t in ts:
        if type(t) not in (torch.Tensor, nn.Parameter):
            local = getattr(t, "_local_tensor", None)
            if local is not None:
                t = local.detach()
        if t.layout is torch.sparse_coo:
            c = t.coalesce()
            out += [c.values(), c.indices()]
        elif t.layout is not torch.strided:
            out.append(t.to_dense())
        else:
            out.append(t)
    return out


def _tensors(x, out: list) -> list:
    """Every tensor of a module's output, in order (tuples, lists and
    dicts' values, nested), appended to ``out``."""
    if isinstance(x, torch.Tensor):
        out.append(x)
    elif isinstance(x, (list, tuple)):
        for v in x:
            _tensors(v, out)
    elif isinstance(x, dict):
        for v in x.values():
            _tensors(v, out)
    return out


def _param_fqn(fqn, pname: str) -> str:
    """A parameter's FQN as the ``Parameters:`` lines spell it: its
    module's FQN as keys spell it (``fqn``, None for the root) and its
    name."""
    return pname if fqn is None else f"{fqn}.{pname}"


def _version(p: torch.Tensor) -> tuple:
    """``p``'s version counter, and its local shard's for a DTensor
    (FSDP2's ``fully_shard``, TP): an in-place change through
    ``p.to_local()`` moves the shard's counter, not the DTensor's (trial
    29: a local-shard edit after ``optimizer.step()`` went unseen at
    ``level="modules"``)."""
    local = getattr(p, "_local_tensor", None)
    return (p._version, local._version if isinstance(local, torch.Tensor) else None)


def _fsdp_params(model: nn.Module) -> dict:
    """FSDP2's parameters of ``model`` (``fully_shard``): ``(id(module),
    parameter name)`` → its ``FSDPParam`` (empty without FSDP2). Reads
    FSDP2's private state (``_get_fsdp_state``, ``_fsdp_param_groups``,
    ``_module_info``), the same in torch 2.13 to 2.15; anything else gives
    an empty map (gradients are then recorded after the reduce-scatter)."""
    out = {}
    for m in model.modules():
        get = getattr(m, "_get_fsdp_state", None)
        if get is None:
            continue
        try:
            state = get()
        except Exception:
            continue
        for group in getattr(state, "_fsdp_param_groups", None) or ():
            for fp in getattr(group, "fsdp_params", ()) or ():
                info = getattr(fp, "_module_info", None)
                if info is not None:
                    out[(id(info.module), info.param_name)] = fp
    return out


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
        # Copies the worker reads, kept from step to step (worker only):
        # the step's N-th module output's, and each parameter's.
        self._out_bufs: list = []
        self._out_n = 0
        # The second half of the parameters' reader (finish).
        self._helper = type(worker)() if worker is not None else None
        # Whether a gradient was recorded since the last optimizer step (a
        # global optimizer step post-hook clears it).
        self.grads_since_optimizer = False
        # Whether this step is being recorded (False between finish() and
        # rearm()), and the parameters (ids) recorded this step.
        self.active = True
        self._params_read: set = set()
        # The buffers were read this step (before a forward after the
        # optimizer step), and whether a module ran in training mode since.
        self._buffers_read = False
        self._trained_since_buffers = False
        # Each recorded parameter's version counter when it was read: one
        # changed in place after the optimizer's step (a clamp, an EMA) is
        # recorded again at finish().
        self._versions: dict = {}

        def after_optimizer_step(optimizer, args, kwargs):
            self.grads_since_optimizer = False
            if self.active:
                # The parameters this optimizer updated, as it left them:
                # read now, before anything after step() (a forward under
                # no_grad, a clamp) runs; finish() reads the rest.
                ids = {id(p) for g in optimizer.param_groups for p in g["params"]}
                self._read_params([x for x in self.params if id(x[2]) in ids and id(x[2]) not in self._params_read])

        def before_optimizer_step(optimizer, args, kwargs):
            if self.active and not self._warned_unheld:
                self._warned_unheld = warn_unheld(optimizer, self._param_names, "modules")
            if self.active:
                # Gradients set on the parameters rather than accumulated
                # by backward (``p.grad = g`` from torch.func.grad, a
                # hand-written all-reduce): no accumulate hook ran for them
                # (trial 32: none recorded, and a changed gradient read as
                # "the update itself differs"). Read as the optimizer
                # finds them.
                for g in optimizer.param_groups:
                    for p in g["params"]:
                        if p.grad is not None and id(p) not in self._grads_read and id(p) in self._param_names:
                            fqn, pname = self._param_names[id(p)]
                            self._grads_read.add(id(p))
                            self.grads_since_optimizer = True
                            # Read here, now: the optimizer may change it.
                            if self.worker is not None:
                                self.cap.defer_host(None)
                            try:
                                self._record(fqn, f"{pname}_grad", p.grad, 1)
                            finally:
                                if self.worker is not None:
                                    self.cap.defer_host(self.worker)

        self._grads_read: set = set()  # ids of the parameters whose gradient was recorded this step
        self._warned_unheld = False  # UNHELD_PARAMETERS said (once per recorder)
        # The model's forward ran without autograd before its training
        # forward in this step (EVAL_BEFORE_TRAINING), and with it.
        self._eval_first = False
        self._root_trained = False
        self._optimizer_pre_hook = _optimizer.register_optimizer_step_pre_hook(before_optimizer_step)
        self._optimizer_hook = _optimizer.register_optimizer_step_post_hook(after_optimizer_step)
        if worker is not None:
            cap.defer_host(worker)
        self.handles: list = []
        # This step's modules whose forward hook ran, and modules that own
        # a parameter whose gradient was recorded (by id): a module in the
        # second set only ran compiled (compiled_modules).
        self._ran: set = set()
        self._grad_owners: set = set()
        # This step's modules whose forward ran in compiled code (their
        # FQNs, None for the root): the output hook, traced by Dynamo,
        # appends here, and Dynamo replays that append at every call of
        # the compiled code (a list mutation, no graph break). Cleared in
        # place, never replaced: compiled code holds this list.
        self._ran_compiled: list = []
        names = {}
        for name, m in model.named_modules():
            names.setdefault(id(m), fx.clean_fqn(name) or None)
        self.params = []  # (module fqn, param name, param)
        # Parameters that are not leaf tensors (views of a flat parameter:
        # FSDP1 with use_orig_params=True): no gradient hook can be set on
        # them (VIEW_PARAMETERS): their FQNs.
        self._view_params: set = set()
        self._warned_views = False
        self._owner = {}  # id(param) -> its module
        seen = set()
        for mname, m in model.named_modules():
            for pname, p in m.named_parameters(recurse=False):
                if id(p) in seen:
                    continue  # a tied parameter: recorded once, by its first module
                if not p.is_leaf:
                    # A view in the parameter's place (add_new()).
                    self._view_params.add(_param_fqn(fx.clean_fqn(mname) or None, pname))
                    continue
                seen.add(id(p))
                self.params.append((fx.clean_fqn(mname) or None, pname, p))
                self._owner[id(p)] = m
        self._param_names = {id(p): (fqn, pname) for fqn, pname, p in self.params}
        self._hooked: set = set()  # ids of the modules with an output hook
        wrappers = _wrappers(model)
        for m in dict.fromkeys(m for _, m in model.named_modules()):
            self._hooked.add(id(m))
            if is_script_module(m) or id(m) in wrappers:
                continue  # takes no hooks (SCRIPT_MODULES)
            fqn = names.get(id(m))
            self.handles.append(m.register_forward_hook(self._output_hook(fqn)))
        # The model as hooked: a module or parameter added or replaced later
        # (an adapter, a grown layer) is hooked at the next forward
        # (add_new()), and a new recorder replaces this one at the next
        # captured step (current()).
        _watch_registrations()
        self._registrations = _REGISTRATIONS[0]
        self._added_at = _REGISTRATIONS[0]
        self._structure = _structure(model)
        # This step's outputs not recorded inside torch.func transforms:
        # their count and modules.
        self.in_transforms = 0
        self._in_transform_modules: list = []

        def before_forward(module, args):
            # A forward after the optimizer step (an evaluation pass): the
            # buffers as the training step left them, before any of its
            # modules runs (and its records).
            if not torch.compiler.is_compiling() and self._after_optimizer() and not self._buffers_read:
                self._read_buffers_here()

        def refresh_first(module, args):
            if not torch.compiler.is_compiling():
                self.add_new()

        if not is_script_module(model):
            self.handles.append(model.register_forward_pre_hook(refresh_first, prepend=True))
            self.handles.append(model.register_forward_pre_hook(before_forward))
        # Each module's persistent buffers (``(module fqn, module, name)``,
        # looked up at finish(): a module may replace a buffer's tensor).
        # (named_buffers: a TorchScript module's _buffers is no dict.)
        self.buffers = [
            (fx.clean_fqn(mname) or None, m, bname)
            for mname, m in model.named_modules()
            for bname, _ in m.named_buffers(recurse=False)
            if bname not in getattr(m, "_non_persistent_buffers_set", ())
        ]
        self._root = model
        for fqn, pname, p in self.params:
            if p.requires_grad:
                owner = id(self._owner[id(p)])
                self.handles.append(p.register_post_accumulate_grad_hook(self._grad_hook(fqn, pname, owner)))
        # FSDP2 (``fully_shard``): each parameter above is this rank's shard,
        # and FSDP calls its hooks with the gradient after the
        # reduce-scatter (every rank's sum). The rank's own gradient is the
        # unsharded parameter's, which exists from its first all-gather on:
        # its hook is registered after the module's first forward, and the
        # shard's hook then records nothing.
        fsdp = _fsdp_params(model)
        self._fsdp_pending = {
            id(p): (fp, fqn, pname, id(self._owner[id(p)]))
            for fqn, pname, p in self.params
            if p.requires_grad and (fp := fsdp.get((id(self._owner[id(p)]), pname))) is not None
        }
        # Ids of the shards whose unsharded parameter's gradient was recorded
        # since FSDP last called the shard's hooks.
        self._fsdp_seen: set = set()

    def _record(self, fqn, role: str, t: torch.Tensor, phase: int, parameter: str | None = None) -> None:
        """Records ``t`` as ``{fqn}/op_N_{role}``; ``phase`` is
        ``Capture.record``'s: 3 a parameter or buffer after the step (the
        optimizer's phase, said with a ``Phase: optimizer`` line), 1 a
        gradient, 2 a module's output (forward, said as such when it comes
        after backward: an eval forward). ``parameter``: the FQN of the
        parameter ``t`` is (a ``Parameters:`` line: a compare tells a
        parameter's record from a buffer's by it)."""
        ts = _strided([t.detach()])
        # An empty one (a rank's empty FSDP shard) gets its Shape and hash.
        primary = 0 if ts and ts[0].is_floating_point() else None
        self.cap.record(fqn, role, phase, None, primary, ts, [], [], [], parameters=parameter)

    def _record_output(self, fqn, ts: list) -> None:
        """Records a module's output, every tensor of it (``ts``): one
        block, an Output hash (and digest) per tensor, Shape and stats of
        the first floating-point one. An output made while backward runs
        (activation checkpointing's recomputation of the module's forward)
        is in the backward phase, as the per-op level records its ops."""
        ts = _strided([t.detach() for t in ts])
        floating = [i for i, t in enumerate(ts) if t.is_floating_point()]
        primary = next((i for i in floating if ts[i].numel() > 0), floating[0] if floating else None)
        phase = 1 if torch._C._current_autograd_node() is not None else 2
        self.cap.record(fqn, "output", phase, None, primary, ts, [], [], [])

    def add_new(self) -> None:
        """Hooks the modules and parameters set on the model since it was
        hooked (checked only when a module or parameter was set on some
        module since): so the step that adds a module (an adapter, a
        replaced activation) records it. Modules and parameters removed
        keep their hooks until the next captured step's recorder."""
        if self._added_at == _REGISTRATIONS[0]:
            return
        self._added_at = _REGISTRATIONS[0]
        model = self._root
        wrappers = _wrappers(model)
        for name, m in model.named_modules():
            if id(m) in self._hooked:
                continue
            self._hooked.add(id(m))
            if not is_script_module(m) and id(m) not in wrappers:
                self.handles.append(m.register_forward_hook(self._output_hook(fx.clean_fqn(name) or None)))
        known = {id(x[2]) for x in self.params}
        for mname, m in model.named_modules():
            for pname, p in m.named_parameters(recurse=False):
                if id(p) in known:
                    continue
                fqn = fx.clean_fqn(mname) or None
                if not p.is_leaf:
                    # A view set in the parameter's place for the forward
                    # (FSDP1, use_orig_params=True, trial 71): no gradient
                    # hook can be set on it, and its storage is freed after
                    # use. The parameter itself is recorded (VIEW_PARAMETERS).
                    self._view_params.add(_param_fqn(fqn, pname))
                    continue
                known.add(id(p))
                self.params.append((fqn, pname, p))
                self._owner[id(p)] = m
                self._param_names[id(p)] = (fqn, pname)
                if p.requires_grad:
                    self.handles.append(p.register_post_accumulate_grad_hook(self._grad_hook(fqn, pname, id(m))))

        self._warn_views()

    def _warn_views(self) -> None:
        """Says :data:`VIEW_PARAMETERS` once, when views were found."""
        if self._view_params and not self._warned_views:
            self._warned_views = True
            names = sorted(self._view_params)
            shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
            warnings.warn(VIEW_PARAMETERS.format(n=len(names), names=shown), stacklevel=3)

    def current(self) -> bool:
        """Whether the model still has the modules and parameters this
        recorder hooked (checked only after a module or parameter was set
        on some module since the last check): a module added during
        training (trial 31: an adapter and its param group added at step
        3) was never recorded, and a replaced one's output was "only in"
        the other run."""
        if self._registrations == _REGISTRATIONS[0]:
            return True
        self._registrations = _REGISTRATIONS[0]
        return _structure(self._root) == self._structure

    def eval_warning(self, step: int) -> str | None:
        """:data:`EVAL_BEFORE_TRAINING` when the model's forward ran without
        autograd before its training forward in this step, or None."""
        if not (self._eval_first and self._root_trained):
            return None
        return EVAL_BEFORE_TRAINING.format(step=step)

    def transform_warning(self, step: int) -> str | None:
        """:data:`IN_TRANSFORMS` for this step's outputs left out inside
        torch.func transforms, or None."""
        n = self.in_transforms
        if not n:
            return None
        shown = self._in_transform_modules[:3]
        more = len(self._in_transform_modules) - len(shown)
        return IN_TRANSFORMS.format(
            step=step,
            n=n,
            s="" if n == 1 else "s",
            modules=", ".join(shown) + (f" and {more} more modules" if more else ""),
            were="was" if n == 1 else "were",
        )

    def rearm(self, cap) -> None:
        """Records the next step into ``cap`` (a ``_native.Capture``) with
        the same hooks, after :meth:`finish`."""
        self.cap = cap
        self.in_transforms = 0
        self._in_transform_modules.clear()
        self._out_n = 0
        self.active = True
        self._eval_first = self._root_trained = False
        self._params_read.clear()
        self._grads_read.clear()
        self._buffers_read = False
        self._trained_since_buffers = False
        self._versions.clear()
        self._ran.clear()
        self._grad_owners.clear()
        self._ran_compiled.clear()
        self._fsdp_seen.clear()
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
        def hook(module, args, output):
            if torch.compiler.is_compiling():
                self._ran_compiled.append(fqn)
                return
            self._ran.add(id(module))
            if module is self._root:
                if torch.is_grad_enabled():
                    self._root_trained = True
                elif not self._root_trained and not self._params_read:
                    self._eval_first = True
            if self._fsdp_pending:
                self._hook_fsdp_unsharded()
            if self._after_optimizer():
                # A forward after the optimizer step (an evaluation pass),
                # a module of it called alone (the root's pre-hook read the
                # buffers otherwise); one in training mode may update them.
                if not self._buffers_read:
                    self._read_buffers_here()
                if module.training:
                    self._trained_since_buffers = True
            ts = _tensors(output, [])
            if not ts:
                return
            if any(torch._C._functorch.is_functorch_wrapped_tensor(t) for t in ts):
                # Inside torch.func.grad/vmap: no storage to read.
                self.in_transforms += 1
                name = fqn or "<none>"
                if name not in self._in_transform_modules:
                    self._in_transform_modules.append(name)
                return
            if self.worker is None:
                self._record_output(fqn, ts)
            elif sum(t.numel() for t in ts) < HERE_MAX:
                # A later in-place op may change it: read here, now.
                self.cap.defer_host(None)
                try:
                    self._record_output(fqn, ts)
                finally:
                    self.cap.defer_host(self.worker)
            else:
                # A later in-place op may change it: the worker reads a
                # copy. The buffers were read by the worker before the last
                # step's parameters were recorded (finish() waits for it).
                copies = []
                for t in ts:
                    n, self._out_n = self._out_n, self._out_n + 1
                    copies.append(self._copy_into(self._out_bufs, n, t))
                self._record_output(fqn, copies)

        return hook

    def _hook_fsdp_unsharded(self) -> None:
        """Registers the gradient hook of each FSDP2 parameter's unsharded
        parameter that exists by now (after its group's first all-gather):
        it records the rank's own gradient, read at once (FSDP's
        reduce-scatter consumes and frees it before backward ends)."""
        for key, (fp, fqn, pname, owner) in list(self._fsdp_pending.items()):
            u = getattr(fp, "_unsharded_param", None)
            if u is None:
                continue
            del self._fsdp_pending[key]
            if u.requires_grad:
                self.handles.append(u.register_post_accumulate_grad_hook(self._grad_hook(fqn, pname, owner, shard=key)))

    def _grad_hook(self, fqn, pname, owner: int, shard=None):
        """The hook recording a parameter's gradient. ``shard``: the hook
        of an FSDP2 unsharded parameter, for the shard of that id: it reads
        at once, and the shard's own hook (which FSDP calls after the
        reduce-scatter) then records nothing; it does record when the
        unsharded one did not run (FSDP made another unsharded parameter),
        rather than lose the record."""
        now = shard is not None

        def hook(p):
            if now:
                self._fsdp_seen.add(shard)
            elif id(p) in self._fsdp_seen:
                self._fsdp_seen.discard(id(p))
                return  # an FSDP2 shard after the reduce-scatter: its unsharded parameter's hook recorded it
            if p.grad is not None:
                self.grads_since_optimizer = True
                self._grads_read.add(shard if now else id(p))
                self._grad_owners.add(owner)
                if now and self.worker is not None:
                    self.cap.defer_host(None)
                    try:
                        self._record(fqn, f"{pname}_grad", p.grad, 1)
                    finally:
                        self.cap.defer_host(self.worker)
                    return
                self._record(fqn, f"{pname}_grad", p.grad, 1)
                if self.worker is not None and not self._waits_queued:
                    # The gradients stay unchanged until the worker read
                    # them: the end of this backward pass waits for it.
                    self._waits_queued = True
                    torch.autograd.Variable._execution_engine.queue_callback(self._backward_done)

        return hook

    def _backward_done(self) -> None:
        self._waits_queued = False
        self.worker.wait()

    def compiled_modules(self) -> tuple[list, list]:
        """This step's modules whose outputs are not recorded because they
        ran compiled, and those whose parameters got a gradient while their
        forward hook never ran for no reason the profiler can see: two
        lists of FQNs in the model's order (the first ``["<none>"]`` when
        the whole forward ran compiled). The first holds the outermost of
        the modules seen running in compiled code (their hooks, traced by
        Dynamo, said so: compiled functions included) and of those compiled
        themselves (``Module.compile()``, a ``torch.compile`` wrapper: seen
        even when Dynamo traced them before the hooks existed); the whole
        forward also when the model's own hook did not run although
        gradients were recorded, after Dynamo compiled a frame."""
        seen = set(self._ran_compiled)
        # A container given as the model (``nn.ModuleDict({"G": G, "D":
        # D})``, which docs/capture.md advises for two models) has no
        # forward of its own: its hook never running says nothing.
        container = isinstance(self._root, (nn.ModuleDict, nn.ModuleList, nn.ParameterDict, nn.ParameterList))
        if None in seen or (
            self._grad_owners and id(self._root) not in self._ran and not container and dynamo_compiled()
        ):
            return ["<none>"], []
        compiled: list = []  # named_modules' names: parents come before their modules
        for name, m in self._root.named_modules():
            if not name or any(name.startswith(c + ".") for c in compiled):
                continue
            if _compiled_itself(m) or (fx.clean_fqn(name) or None) in seen:
                compiled.append(name)
        unexplained = []
        missing = self._grad_owners - self._ran
        if missing:
            # nn.MultiheadAttention reads its out_proj's parameters without
            # calling it (trial 64: a warning on every run of a standard
            # module).
            attention = [n for n, m in self._root.named_modules() if isinstance(m, nn.MultiheadAttention)]
            for name, m in self._root.named_modules():
                inside = any(name == c or name.startswith(c + ".") for c in compiled)
                # Parameter containers are never called (trial 31: a false
                # warning for nn.ParameterList), nor hooked TorchScript.
                never_called = (
                    isinstance(m, (nn.ParameterList, nn.ParameterDict))
                    or is_script_module(m)
                    or any(name.startswith(a + ".") if a else True for a in attention)
                )
                if id(m) in missing and not inside and not never_called:
                    unexplained.append(fx.clean_fqn(name) or "<none>")
        names = [fx.clean_fqn(c) or "<none>" for c in compiled]
        if "<none>" in names:  # the root (a torch.compile wrapper's module): every module
            names = ["<none>"]
        return names, unexplained

    def finish(self) -> None:
        """Records every parameter not recorded yet at an optimizer step
        of this step (a loop's own update, a frozen parameter), and again
        each one changed in place since it was (its version counter moved:
        a clamp or an EMA after ``optimizer.step()``, recorded under the
        next number, ``op_N+1_weight``; a change through ``.data`` has a
        counter of its own and is not seen; a DTensor's local shard's counter
        is read too, so a change through ``to_local()`` is seen), read
        before this returns. The hooks stay registered: :meth:`rearm` goes
        on with the next step, or :meth:`remove` removes them."""
        versions = self._versions
        self._read_params(
            [x for x in self.params if id(x[2]) not in self._params_read or _version(x[2]) != versions[id(x[2])]]
        )
        if not self._buffers_read or self._trained_since_buffers:
            self._read_buffers()
        self.active = False
        if self.worker is not None:
            # This step's output buffers (reused next step) have been read
            # once this returns.
            self.worker.wait()

    def _read_buffers(self) -> None:
        """Records each persistent buffer (``state_dict``'s, such as
        BatchNorm's running statistics) as this step left it,
        ``{module fqn}/op_N_{buffer}`` in the optimizer's phase, once per
        tensor (a shared buffer by its first module). Every step: a
        kernel such as ``native_batch_norm`` updates its running
        statistics without moving their version counter, so a buffer's
        change cannot be told without reading it. Non-persistent buffers
        (rotary tables, masks) are constants a model recomputes and are
        not recorded."""
        seen = set()
        for fqn, m, bname in self.buffers:
            bufs = m._buffers
            b = bufs.get(bname) if isinstance(bufs, dict) else getattr(m, bname, None)
            if b is None or id(b) in seen:
                continue
            seen.add(id(b))
            self._record(fqn, bname, b, 3)

    def _after_optimizer(self) -> bool:
        """Whether this step is recorded and an optimizer step has run in
        it, with no gradient since (a forward now follows the update)."""
        return self.active and bool(self._params_read) and not self.grads_since_optimizer

    def _read_buffers_here(self) -> None:
        """:meth:`_read_buffers` on the training thread, now: the forward
        this runs in may update them in place next."""
        self._buffers_read = True
        if self.worker is None:
            self._read_buffers()
            return
        self.cap.defer_host(None)
        try:
            self._read_buffers()
        finally:
            self.cap.defer_host(self.worker)

    def _read_params(self, params: list) -> None:
        """Records ``params`` (``(fqn, name, parameter)``) as they are now,
        read before this returns."""
        self._params_read.update(id(p) for _, _, p in params)
        self._versions.update((id(p), _version(p)) for _, _, p in params)
        w = self.worker
        if w is None:
            for fqn, pname, p in params:
                self._record(fqn, pname, p, 3, _param_fqn(fqn, pname))
            return
        # The loop may change a parameter in place once step() returns (a
        # clamp or a weight norm at the start of a step): the worker takes
        # the first half, the helper the second, both read them now.
        half = sum(p.numel() for _, _, p in params) / 2
        done = 0
        helped = False
        try:
            for fqn, pname, p in params:
                if not helped and done >= half:
                    helped = True
                    self.cap.defer_host(self._helper)
                done += p.numel()
                self._record(fqn, pname, p, 3, _param_fqn(fqn, pname))
        finally:
            if helped:
                self.cap.defer_host(w)
            w.wait()
            self._helper.wait()

    def remove(self) -> None:
        for h in self.handles:
            h.remove()
        self.handles = []
        for attr in ("_optimizer_hook", "_optimizer_pre_hook"):
            h = getattr(self, attr, None)
            setattr(self, attr, None)
            if h is not None:
                h.remove()
