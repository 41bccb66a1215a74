"""The capture: a ``TorchDispatchMode`` plus forward hooks on the model's modules that record
every op of one training step into the Rust core, and the two profilers that
arm it (:class:`Profiler`, and :class:`ActivationCaptureProfiler`, the
drop-in for TorchTitan's).

What is captured follows the reference tracer
(TorchTitan's ``agent_tooling/numerics_debugging/activation_tracer.py``):

- every ATen op dispatched during the step, except ``excluded_ops``
  (views, copies, creation, indexing; those seen are listed in the header),
  whose result has a float32/float16/bfloat16 tensor of at least
  ``min_numel`` elements (and, with ``op_filter``, whose name contains one
  of its strings). Shape and stats describe the first such tensor; every
  tensor output gets an output hash, every tensor input an input hash;
- ops whose name ends in ``_`` (in-place) with any tensor argument or
  result, hash-only when they have no such result;
- ops of ``torch.compile``'d graphs: the mode tells Dynamo to keep compiling
  while it is armed (``ignore_compile_internals``), so the ATen ops the
  compiled graphs run are dispatched through it, as under the reference's
  DebugMode;
- key ``<module_fqn>/op_<seq>_<op>`` with ``seq`` counted per module. The
  module FQN, first found of:

  1. the FX context variable ``_current_module_name`` (an FX interpreter
     replaying a traced graph, see :mod:`actdiff_capture.fx`);
  2. the FX node that generated graph code is running (compiled and traced
     graphs): ``custom["module_fqn"]``, ``nn_module_stack``,
     ``fwd_nn_module_stack`` (the reference writes ``<none>`` here);
  3. the innermost module whose forward is running (forward pre/post
     hooks on the model's modules): forward ops, and ops recomputed by activation checkpointing
     during backward (full FQN, ``_checkpoint_wrapped_module`` removed; the
     reference's are relative to the checkpointed block);
  4. in backward, the module whose forward built the running autograd node
     (the reference's grad_fn walk);

  else ``<none>``;
- phase ``backward`` when the FX phase override says so, when an autograd
  node is running or the backward's final callbacks are (FSDP2's last
  reduce-scatter runs there: no node, yet the backward's graph task), or
  when the FX node is a backward node;
- ``Input producers``: the key of the captured op whose output was that very
  tensor object (identity, as DebugMode's tensor ids);
- ``Location``: the FX context's stack frames, else the FX node's
  ``stack_trace``, else for forward (and recomputed) ops the innermost frame
  outside torch internals and this package; for backward ops the location
  of the forward op that created the running autograd node, including
  excluded ops (views, ``t``) whose nodes run gradient-accumulation adds.

Inputs are what an op reads. An argument it writes without reading is no
input (no input hash, no producer): its ``out=`` arguments (the schema's
``is_out``) and ``self`` of the in-place fills of :data:`OVERWRITING_OPS`
(``bernoulli_``, ``uniform_``, ``fill_``, ``zero_``, ``copy_``, ...). Nor is
storage an ``empty*`` op made in eager code that no dispatched op has
written yet: its contents are whatever the allocator's memory held, and
hashing them made two captures of the same run differ (dropout's
``empty_like(x).bernoulli_(p)``, inductor's ``mm(a, b, out=buf)``).
Inputs of ops that write an argument they read (``add_``'s self), or
whose ``out=`` argument shares storage with an argument they read
(``torch.add(p, g, out=p)``), are hashed before the op runs; other ops
cannot change their inputs, so their inputs are hashed after, and only when
the op is captured. The batch norms (:data:`UNMARKED_WRITES`) update
their running statistics although the schema does not mark them written:
their inputs are hashed before, and the updated statistics are written as
further outputs after the op's own. Scratch results (an RNN's workspace,
:data:`WORKSPACE_OUTPUTS`) hold no defined values and are not hashed,
as outputs nor as a later op's inputs. An asynchronous collective
(``allreduce_``, ``_allgather_base_``, ``_reduce_scatter_base_``, the
functional collectives) is waited for before its result is read
(:func:`_await_collective`). All statistics
and the writing are done by the Rust core (``actdiff_capture._native``).
"""

from __future__ import annotations

import atexit
import gc
import hashlib
import itertools
import numbers
import operator
import os
import sys
import threading
import weakref
import warnings

import torch
from torch import nn
from torch.optim import optimizer as _optimizer
from torch.utils._python_dispatch import TorchDispatchMode

from . import baseline as _baseline
from . import fx, inductor, layouts, modules
from ._native import Capture, HostWorker

DEFAULT_MIN_NUMEL = 1000

#: The warning of a per-op step in which more of the forward's ops were left
#: out by ``min_numel`` than were captured (a small model: all of them).
BELOW_MIN_NUMEL = (
    "actdiff_capture: step {step}: {below} ops of the model's forward were not captured because "
    "every floating-point result had fewer than min_numel={n} elements ({captured} captured): a compare can name "
    "only captured ops, so a difference that enters through one of these is named where it is "
    "first seen, later (the log's header says 'Ops below min numel'). min_numel=0 captures every op."
)

#: The warning of a per-op step with ops whose results are all complex.
COMPLEX_OPS = (
    "actdiff_capture: step {step}: {n} op{s} with complex results ({names}) {were} not captured: the log "
    "format records real floating-point results. A compare names a difference that enters through one of "
    "them where it is first seen in a real result (a differing input with no captured producer); "
    "level='modules' records complex parameters and gradients (hash and digest)."
)

#: The warning of a per-op step in which ops ran in inductor code generated
#: before the Profiler was made (without the comments that name modules).
COMPILED_BEFORE = (
    "actdiff_capture: step {step}: {n} ops ran in inductor code compiled before this Profiler was "
    "made, which carries no module names: they are keyed '<none>/...' with no source line, and a "
    "compare can name only '<none>' ops there. Make the Profiler before the compiled model's first "
    "call (docs/capture.md, compiled graphs)."
)

#: The warning of a step folder whose log, from an earlier capture, is of
#: another level than the one that replaces it (a per-op re-capture of one
#: step written into the module-level series' dump_dir).
REPLACES_OTHER_LEVEL = (
    "actdiff_capture: {path} holds a level={old} capture of step {step}; this level={new} capture "
    "replaces it when the step's log is written, so {dump_dir} will mix levels, and a compare of that "
    "step with a level={old} run is an input error. Re-capture one step into another dump_dir "
    "(docs/capture.md, step series)."
)

#: The warning of a profiler counting from step 1 whose optimizer has taken
#: more steps than it counted: a job resumed from a checkpoint without
#: ``first_step=`` (trial 63: its steps 1-4 were written over the first
#: process's logs, with no warning).
RESUMED_WITHOUT_FIRST_STEP = (
    "actdiff_capture: step {step}: this profiler counts steps from 1 (first_step=1), but the optimizer "
    "has taken {n} steps (its state's 'step'): if this job resumed from a checkpoint, pass "
    "first_step= (the step it resumes at, counted in prof.step() calls: {first} when prof.step() is "
    "called once per optimizer step) so that its captured steps keep their numbers; "
    "this step is captured as {what}{over}"
)

#: The warning of first_step > 1 whose optimizer has taken no step
#: before this process's: a fresh job, or its state not restored.
FIRST_STEP_NOT_RESUMED = (
    "actdiff_capture: step {step}: first_step={first} says that this job resumed from a checkpoint, "
    "but the optimizer has taken {n} step{s} (its state's 'step'), no more than this process ran: "
    "a job that did not resume counts from 1 (leave first_step out), and one that resumed "
    "restores its optimizer's state (load_state_dict), or it does not continue the uninterrupted run"
)

#: The warning of a schedule whose every step comes before first_step.
SCHEDULE_BEFORE_FIRST_STEP = (
    "actdiff_capture: every scheduled step is before first_step={first} (the last is {last}): this "
    "process counts its steps from {first} and captures none of them"
)

#: The warning of a baseline without some scheduled steps (trial 65: the
#: check raised only when the job reached the first of them).
BASELINE_LACKS_STEPS = (
    "actdiff_capture: baseline {baseline} holds no step_S folder for {n} scheduled step{s} ({shown}): "
    "the baseline check raises BaselineError when this job reaches step {first}; capture the baseline "
    "over the same steps, or schedule only steps it holds"
)

#: The warning of a series capture that writes over a step's log when the
#: optimizer keeps no step count to tell a resumed job (SGD; trial 64: a
#: resumed SGD job wrote its steps over the first process's, silently).
OVERWRITES_UNCHECKED = (
    "actdiff_capture: step {step}: {path} already held a log, which this capture replaces; this profiler "
    "counts steps from 1 (first_step=1) and the optimizer keeps no step count to tell whether the job "
    "resumed from a checkpoint: if it did, pass first_step= (the step it resumes at) so that its captured "
    "steps keep their numbers"
)

#: The warning of per-op options given to a module-level profiler.
OPS_ONLY_OPTIONS = (
    "actdiff_capture: {names} {verb} to level='ops' only: level='modules' records every module's "
    "output, every gradient and every parameter, whatever their size or name"
)

#: The reference tracer's infrastructure ops (creation, copies, views,
#: permutations, concatenation, indexing, autograd plumbing, bucketing).
EXCLUDED_OPS = frozenset(
    {
        "empty", "empty_like", "zeros", "zeros_like", "ones", "ones_like",
        "full", "full_like", "lift_fresh", "lift_fresh_copy",
        "copy_", "_to_copy", "to", "clone", "contiguous", "_pin_memory",
        "view", "_unsafe_view", "view_as", "view_as_real", "view_as_complex",
        "reshape", "_reshape_alias", "flatten", "unflatten", "alias",
        "permute", "transpose", "t", "unsqueeze", "squeeze", "expand",
        "expand_as", "repeat",
        "cat", "stack", "split", "chunk",
        "narrow", "select", "index_select", "gather", "scatter", "slice",
        "as_strided",
        "detach",
        "_pre_bucket_all_gather", "_pre_bucket_reduce_scatter",
        "set_",
    }
)  # fmt: skip

#: Values of the ``precision`` option: None or ``"default"`` (the same:
#: the reference's ``%.6e``, 7 significant digits) or ``"full"`` (shortest
#: round-trip float64 text, at most 17 digits, and a ``Precision: full``
#: header line).
PRECISIONS = (None, "default", "full")

# What a capture records: "ops" (one block per ATen op, the reference's) or
# "modules" (module outputs, parameter gradients and parameters after the
# optimizer: actdiff_capture.modules).
LEVELS = ("ops", "modules")

# Profilers whose last step's log may still be finishing in a thread: at
# interpreter exit each is completed, so no captured step is lost.
_unfinished: "weakref.WeakSet[Profiler]" = weakref.WeakSet()


# Every profiler not yet released at interpreter exit (see _complete_all).
_live: "weakref.WeakSet[Profiler]" = weakref.WeakSet()


@atexit.register
def _complete_all() -> None:
    for p in list(_unfinished):
        try:
            p._complete()
        except Exception as e:  # noqa: BLE001 - reported, not raised, at exit
            print(f"actdiff_capture: a step's log was not written: {e}", file=sys.stderr)
        finally:
            # No statistics worker may still be reading a tensor when the
            # interpreter and libtorch shut down: a training loop that
            # raised mid-step left work queued, and the process then
            # aborted ("terminate called without an active exception") in
            # about one run in ten.
            p._drain_workers()
    # A profiler a script never closed holds the model, its recorders and
    # their native state in reference cycles, which Python frees only in
    # its last collection, after libtorch and the process group are partly
    # gone: a DDP job at level="modules" then aborted at exit
    # ("terminate called without an active exception", 2 runs in 30; new-
    # user trial 14 F1). Each is closed and emptied, and the cycles freed,
    # here, while everything is alive.
    for p in list(_live):
        try:
            p.close()
        except Exception as e:  # noqa: BLE001 - reported, not raised, at exit
            print(f"actdiff_capture: closing a profiler at exit: {e}", file=sys.stderr)
        finally:
            p._drain_workers()
            p.__dict__.clear()
    gc.collect()

_FLOATS = frozenset({torch.float32, torch.float16, torch.bfloat16})


def _op_name(func) -> str:
    schema = getattr(func, "_schema", None)
    if schema is not None:
        return schema.name.split("::")[-1]
    return str(func).split(".")[-1].replace(">", "")


def _leaves(obj, out: list) -> None:
    """Tensor leaves of nested lists/tuples/dicts, in pytree order."""
    if isinstance(obj, torch.Tensor):
        out.append(obj)
    elif isinstance(obj, (list, tuple)):
        for o in obj:
            _leaves(o, out)
    elif isinstance(obj, dict):
        for o in obj.values():
            _leaves(o, out)


_PLAIN = (torch.Tensor, nn.Parameter)


def _parameter_fqns(model) -> dict:
    """id(parameter) -> its FQN in ``model`` as keys spell FQNs (no
    activation-checkpoint wrapper, no ``torch.compile``'s ``_orig_mod``);
    a tied parameter goes by all of its names (``tok.weight =
    head.weight``). Empty when ``model`` is no module."""
    named = model.named_parameters(remove_duplicate=False) if isinstance(model, torch.nn.Module) else ()
    fqn: dict = {}
    for n, p in named:
        n = fx.clean_fqn(n) or n
        prev = fqn.get(id(p))
        fqn[id(p)] = n if prev is None or n in prev.split(" = ") else f"{prev} = {n}"
    return fqn


def _local(t: torch.Tensor):
    """The tensor the Rust core reads: DTensor's local shard; None when it
    cannot be read (fake/meta tensors, other devices, sparse)."""
    if type(t) not in _PLAIN:
        inner = getattr(t, "_local_tensor", None)
        if inner is not None:
            t = inner
        elif isinstance(t, torch._subclasses.FakeTensor):
            return None
    if not (t.is_cpu or t.is_cuda) or t.layout is not torch.strided:
        return None
    return t


class _Ids:
    """Tensor identity → a number that is never reused (DebugMode's tensor
    ids): keyed by id() and checked through a weak reference, so a freed
    tensor's id() taken by a new tensor gets a new number."""

    __slots__ = ("d", "n")

    def __init__(self):
        self.d: dict = {}
        self.n = 0

    def get(self, t) -> int:
        e = self.d.get(id(t))
        return e[0] if e is not None and e[1]() is t else 0

    def assign(self, t) -> int:
        e = self.d.get(id(t))
        if e is not None and e[1]() is t:
            return e[0]
        self.n += 1
        self.d[id(t)] = (self.n, weakref.ref(t))
        return self.n


def _region(t):
    """The bytes of its storage tensor ``t`` spans, ``(start, end)``, or
    ``None`` when it has no element."""
    if t.numel() == 0:
        return None
    extent = 1 + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
    size = t.element_size()
    start = t.storage_offset() * size
    return start, start + extent * size


class _Writes:
    """Where captured in-place and ``out=`` ops wrote, by storage: an input
    read through another tensor object than the one written (a view made by
    an excluded op, or the parameter a view of it was written through) gets
    the latest captured write that overlaps it as its producer. An entry
    holds a weak reference to the written tensor's base, so a storage freed
    and reused is not taken for the one written; a parameter's storage
    (``params``, by storage) needs none: it lives the whole step, and a
    write through ``w.data[3, 5]`` or ``w.detach()[3, 5]`` has as base an
    alias that is gone at once."""

    __slots__ = ("d", "params")

    #: Writes remembered per storage (the latest ones).
    KEEP = 64

    def __init__(self, params=frozenset()):
        self.d: dict = {}
        self.params = params

    def note(self, t, oid: int) -> None:
        k = _storage_key(t)
        r = _region(t) if k else None
        if r is None:
            return
        base = t._base if t._base is not None else t
        ref = None if k in self.params else weakref.ref(base)
        lst = self.d.setdefault(k, [])
        lst.append((r[0], r[1], oid, ref))
        if len(lst) > self.KEEP:
            del lst[0]

    def writer(self, t) -> int:
        """The id of the latest recorded write overlapping ``t``, or 0."""
        if not self.d:
            return 0
        k = _storage_key(t)
        lst = self.d.get(k) if k else None
        if not lst:
            return 0
        r = _region(t)
        if r is None:
            return 0
        for lo, hi, oid, ref in reversed(lst):
            if lo < r[1] and r[0] < hi:
                if ref is None:
                    return oid
                b = ref()
                return oid if b is not None and _storage_key(b) == k else 0
        return 0


#: In-place ops that overwrite every element of ``self`` without reading it
#: (random fills, constant fills, copies into a destination). The schema
#: marks ``self`` written (``Tensor(a!)``) but cannot say it is not read, so
#: this list does: ``self`` of these ops is not an input (no input hash, no
#: producer). ``out=`` arguments need no list: the schema says so
#: (``Argument.is_out``).
OVERWRITING_OPS = frozenset(
    {
        "bernoulli_", "uniform_", "normal_", "random_", "exponential_",
        "geometric_", "cauchy_", "log_normal_",
        "fill_", "zero_", "copy_", "set_", "resize_", "resize_as_",
        "_foreach_copy_",
    }
)  # fmt: skip

#: Ops that write arguments their schema does not mark written, by op:
#: the positions of those arguments and of the flag saying they are
#: written. The batch norms update their running statistics
#: (``running_mean``, ``running_var``: arguments 3 and 4) when ``training``
#: (argument 5) is true. Their inputs are hashed before the op runs, as an
#: in-place op's are (hashed after, the updated statistics were recorded
#: as the inputs and a changed momentum was named "a differing input"),
#: and the updated statistics are recorded as further outputs, after the
#: op's own: a change of the update (the momentum) is then an origin at
#: the batch norm, and the backward that reads them has a producer.
UNMARKED_WRITES = {
    "native_batch_norm": ((3, 4), 5),
    "cudnn_batch_norm": ((3, 4), 5),
    "miopen_batch_norm": ((3, 4), 5),
}

#: Results that are a kernel's scratch memory, by op and output position:
#: oneDNN's RNN workspace, cuDNN's and MIOpen's reserve space, the batch
#: norms' reserve, and FSDP2's all-gather buffer as ``all_gather_copy_in``
#: returns it (an ``empty`` buffer of which only this rank's slice, its
#: output 0, is written yet: the collective fills the rest). Their bytes
#: are not defined values (two runs of the same seeded LSTM, or of one
#: FSDP2 job, differ there), so they are not hashed, and a later op reading
#: them before any op writes them (the RNN's backward) does not hash them
#: as an input.
WORKSPACE_OUTPUTS = {
    "all_gather_copy_in": frozenset({1}),
    "mkldnn_rnn_layer": frozenset({3}),
    "_cudnn_rnn": frozenset({3}),
    "miopen_rnn": frozenset({3}),
    "cudnn_batch_norm": frozenset({3}),
    "_batch_norm_with_update": frozenset({3}),
}

#: The functional collectives (``torch.ops._c10d_functional``: DTensor's
#: redistributions, ``torch.distributed._functional_collectives``, compiled
#: graphs), whose result is written by the process group's thread (gloo)
#: or stream (NCCL) until ``wait_tensor`` runs on it.
FUNCTIONAL_COLLECTIVES = frozenset(
    {
        "all_reduce", "all_reduce_", "all_reduce_coalesced", "all_reduce_coalesced_",
        "all_gather_into_tensor", "all_gather_into_tensor_out", "all_gather_into_tensor_coalesced",
        "reduce_scatter_tensor", "reduce_scatter_tensor_coalesced", "all_to_all_single",
        "broadcast", "broadcast_",
    }
)  # fmt: skip

_WORK, _FUNCTIONAL = 1, 2


def _awaits(func, schema, name: str) -> int:
    """Whether an op's result is filled asynchronously: _WORK for a c10d
    op that returns its ``Work`` (``allreduce_``, ``_allgather_base_``,
    ``_reduce_scatter_base_``, what DDP and FSDP2 call), _FUNCTIONAL for a
    functional collective, else 0."""
    ns = getattr(func, "namespace", "")
    if ns == "_c10d_functional" and name in FUNCTIONAL_COLLECTIVES:
        return _FUNCTIONAL
    if schema is not None and any("c10d.Work" in str(r.type) for r in schema.returns):
        return _WORK
    return 0


def _coalescing() -> bool:
    """Whether a process group is inside ``_coalescing_manager`` (its ops
    complete together at its end: one of them is not waited for alone)."""
    try:
        from torch.distributed.distributed_c10d import _world

        return bool(_world.pg_coalesce_state)
    except (ImportError, AttributeError):
        return False


def _await_collective(kind: int, out) -> None:
    """Waits until an asynchronous collective has written its result
    (:func:`_awaits`), so that its statistics are of the whole result, not
    of a buffer the collective is still filling (trial 13 F7: two identical
    DDP or FSDP2 runs differed at these rows). The program's own wait then
    finds it done; overlap of communication and computation is lost in the
    captured step only."""
    if _coalescing():
        return
    if kind == _WORK:
        stack = [out]
        while stack:
            o = stack.pop()
            if isinstance(o, (list, tuple)):
                stack.extend(o)
            elif isinstance(o, torch.ScriptObject):
                torch._C._distributed_c10d.Work.unbox(o).wait()
    else:
        raw: list = []
        _leaves(out, raw)
        for t in raw:
            torch.ops._c10d_functional.wait_tensor(t)


#: Ops whose result is storage nobody has written yet (its contents are
#: whatever the allocator's memory held).
EMPTY_OPS = frozenset({"empty", "empty_like", "empty_strided", "new_empty", "new_empty_strided", "empty_permuted"})


def _unread_arguments(schema, name: str):
    """(positions, keyword names) of the arguments an op writes without
    reading them: ``out=`` arguments (``alias_info.is_write`` and
    ``is_out`` in the schema), and ``self`` of :data:`OVERWRITING_OPS`.
    None when there are none."""
    if schema is None:
        return None
    pos, kw = set(), set()
    for i, a in enumerate(schema.arguments):
        alias = a.alias_info
        if alias is None or not alias.is_write:
            continue
        if getattr(a, "is_out", False) or (i == 0 and name in OVERWRITING_OPS):
            kw.add(a.name)
            if not a.kwarg_only:
                pos.add(i)
    return (frozenset(pos), frozenset(kw)) if kw else None


def _read_leaves(args, kwargs, unread) -> list:
    """Tensor leaves of the arguments an op reads (every argument but those
    ``unread`` names, see :func:`_unread_arguments`), in pytree order."""
    out: list = []
    if unread is None:
        _leaves(args, out)
        if kwargs:
            _leaves(kwargs, out)
        return out
    pos, kw = unread
    for i, a in enumerate(args):
        if i not in pos:
            _leaves(a, out)
    for k, v in kwargs.items():
        if k not in kw:
            _leaves(v, out)
    return out


def _written_leaves(args, kwargs, schema) -> list:
    """Tensor leaves of the arguments the schema marks written."""
    out: list = []
    if schema is None or not schema.is_mutable:
        return out
    for i, a in enumerate(schema.arguments):
        alias = a.alias_info
        if alias is None or not alias.is_write:
            continue
        if not a.kwarg_only and i < len(args):
            _leaves(args[i], out)
        elif a.name in kwargs:
            _leaves(kwargs[a.name], out)
    return out


def _writes_a_read(args, kwargs, info, read) -> bool:
    """Whether an op that overwrites arguments without reading them
    (``out=``, see :func:`_unread_arguments`) writes into the storage of an
    argument it reads (``torch.add(p, g, out=p)``, a hand-written SGD
    step): its inputs are then hashed before it runs, as an in-place op's
    are, not after (which recorded the result as the input)."""
    written = {_storage_key(t) for t in _written_leaves(args, kwargs, info.schema)}
    written.discard(0)
    return bool(written) and any(_storage_key(t) in written for t in read)


# Ops of the optimizer's part that touch neither a parameter nor a
# gradient: GradScaler's update of its scale after ``scaler.step``.
_OPTIMIZER_OPS = frozenset({"_amp_update_scale_", "_amp_update_scale"})


def _note(noted: dict, ts) -> None:
    """Notes tensors ``ts`` in ``noted`` (id -> weak reference: a tensor's
    ``==`` is elementwise, so no WeakSet)."""
    for t in ts:
        noted[id(t)] = weakref.ref(t)


def _any_noted(noted: dict, ts) -> bool:
    """Whether a tensor of ``ts`` is one ``_note`` noted and still alive."""
    for t in ts:
        r = noted.get(id(t))
        if r is not None and r() is t:
            return True
    return False


def _in_final_callbacks() -> bool:
    """Whether the autograd engine runs a backward's final callbacks (no
    node runs, yet a graph task does): FSDP2's post-backward of the root's
    parameters reduce-scatters there."""
    return _current_graph_task_id() != -1


_current_graph_task_id = getattr(torch._C, "_current_graph_task_id", lambda: -1)


def _address(t) -> int:
    """``t``'s data address (0 when it has none to give)."""
    try:
        return t.data_ptr()
    except (RuntimeError, NotImplementedError):
        return 0


def _storage_key(t) -> int:
    try:
        return t.untyped_storage().data_ptr()
    except (RuntimeError, NotImplementedError):
        return 0


class _OpInfo:
    """What the capture needs to know of one op overload, from its schema."""

    __slots__ = (
        "name", "schema", "excluded", "mutable", "inplace", "wanted", "unread", "empty", "pre_hash", "workspace",
        "unmarked", "awaits", "view",
    )  # fmt: skip

    def __init__(self, func, excluded_ops, op_filter):
        self.name = _op_name(func)
        # An op whose result is storage nobody has written (EMPTY_OPS) is
        # never captured, excluded or not: its statistics would be the
        # allocator's leftovers, different from run to run (trial 31: a
        # channels_last conv's weight gradient re-strided through
        # new_empty_strided made identical runs differ at every step).
        self.excluded = self.name in excluded_ops or self.name in EMPTY_OPS
        schema = getattr(func, "_schema", None)
        self.schema = schema
        self.mutable = bool(schema is not None and schema.is_mutable)
        # A view: every result aliases an argument, none is written
        # (``split_with_sizes``): its results are the argument's memory.
        self.view = bool(
            schema is not None
            and not self.mutable
            and schema.returns
            and all(r.alias_info is not None and not r.alias_info.is_write for r in schema.returns)
        )
        self.inplace = self.name.endswith("_")
        self.wanted = op_filter is None or any(f in self.name for f in op_filter)
        self.unread = _unread_arguments(schema, self.name)
        self.empty = self.name in EMPTY_OPS
        # Inputs are hashed before the op only when it writes one it reads
        # (``add_``'s self); an op that only overwrites (``out=``,
        # ``bernoulli_``) leaves every input it reads as it was.
        read_written = False
        if self.mutable:
            pos, kw = self.unread or ((), ())
            for i, a in enumerate(schema.arguments):
                alias = a.alias_info
                if alias is not None and alias.is_write and i not in pos and a.name not in kw:
                    read_written = True
        self.unmarked = UNMARKED_WRITES.get(self.name)
        self.pre_hash = read_written or self.unmarked is not None
        self.workspace = WORKSPACE_OUTPUTS.get(self.name)
        self.awaits = _awaits(func, schema, self.name)


_FILTERED, _USER, _GRAPH, _INTERPRETER, _INDUCTOR = 0, 1, 2, 3, 4
_RUN_NODE = torch.fx.Interpreter.run_node.__code__


def _code_kind(frame) -> int:
    """_GRAPH for the generated ``forward`` of a GraphModule (its file name
    can be anything, torch.fx's own files included), _INDUCTOR for code of a
    module inductor generated (its wrapper imports ``AsyncCompile``),
    _INTERPRETER for
    ``torch.fx.Interpreter.run_node`` (its local ``n`` is the node),
    _FILTERED for frames never shown as a Location
    (``fx.is_filtered_frame``), else _USER."""
    code = frame.f_code
    if code is _RUN_NODE:
        return _INTERPRETER
    if code.co_name == "forward":
        gm = frame.f_locals.get("self")
        if isinstance(gm, torch.fx.GraphModule):
            fwd = getattr(type(gm).forward, "__code__", None)
            if fwd is code:
                return _GRAPH
    if "AsyncCompile" in frame.f_globals:
        return _INDUCTOR
    return _FILTERED if fx.is_filtered_frame(code.co_filename) else _USER


_current_module_name = fx._current_module_name
_current_stack_frames = fx._current_stack_frames
_current_phase_override = fx._current_phase_override


class _Mode(TorchDispatchMode):
    """Records ops into a Rust ``Capture``; see the module docstring."""

    def __init__(self, prof: "Profiler", cap, names: dict):
        super().__init__()
        self.p = prof
        self.cap = cap
        self.min_numel = prof.min_numel
        self.infos: dict = {}
        self.excluded: set = set()
        self.ids = _Ids()
        self.node_loc: dict = {}
        self.pending = None  # (outputs, location) of the last forward op
        self.code_kind: dict = {}  # code object -> _USER / _GRAPH / _FILTERED
        self.graphs = fx.GraphSites(names)
        self.wrappers = inductor.WrapperSites()
        self.compiled = None  # "inductor" once an op came from its wrapper
        self.fresh: set = set()  # storage of empty* results no op has written
        # Regions captured in-place and out= ops wrote; the parameters'
        # storage lives the whole step.
        model = getattr(prof, "model", None)
        params = model.parameters() if isinstance(model, torch.nn.Module) else ()
        self.writes = _Writes({_storage_key(p) for p in params} - {0})
        # id(parameter) -> its FQN, for the ``Input parameters:`` line of an
        # op outside the optimizer step that reads one (or a view of one:
        # a forward ``mm`` reads ``weight.t()``).
        self.input_fqn = _parameter_fqns(model)
        self.layouts = layouts.Layouts()  # DTensor shards (actdiff_capture.layouts)
        # Ops not captured because every float result had fewer than
        # min_numel elements (the header's `Ops below min numel:`); of them
        # and of the captured ops, those run in a module's forward.
        self.below_min_numel = 0
        self.below_in_modules = 0
        # Ops not captured because their results are complex (COMPLEX_OPS):
        # how many, and their names.
        self.complex_ops = 0
        self.complex_names: dict = {}
        # Whether a backward op ran (captured or not) since the last
        # forward op inside a module; then the data addresses of the
        # model's parameters and gradients (None: not looked up yet). An op
        # outside every module that reads or writes one of them then is the
        # optimizer's (gradient clipping, loss scaling, an EMA or a clamp
        # after the step), as every op of ``optimizer.step()`` is, and so
        # is one that reads what such an op computed (``is_optimizer_op``);
        # the next micro-batch's or an eval batch's data and a loss total
        # are not.
        self.after_backward = False
        self.grad_addresses = None
        # Results of the optimizer's ops outside the step (clipping's
        # norms and coefficient, GradScaler's found-inf): an op that reads
        # one is the optimizer's too.
        self.optimizer_results: dict = {}  # id -> weak reference
        self.captured_in_modules = 0
        # Ops in inductor code without actdiff's comments (compiled before
        # the Profiler was made): COMPILED_BEFORE.
        self.unnamed_compiled = 0
        # Inside an optimizer's step(): the data address of a parameter, its
        # gradient and its state -> (its FQN as a 1-tuple, a weak reference
        # to the tensor); else None (``enter_optimizer``).
        self.param_names = None
        self.optimizer = None
        self.fqn: dict = {}  # id(parameter) -> its FQN
        self.mapped: dict = {}
        self.signature = (0, 0)
        # id() of a result of an optimizer-step op -> (a weak reference to
        # it, the FQNs it was computed from).
        self.derived: dict = {}
        # The last ``parameters_of``'s names per output, when they differ.
        self.output_names = None
        layouts.install()
        layouts.arm(self.layouts)

    @classmethod
    def ignore_compile_internals(cls) -> bool:
        # Dynamo keeps compiling while the mode is armed (as for DebugMode),
        # and the compiled graphs' ATen ops are dispatched through it.
        return True

    def site(self):
        """(Location of the innermost frame outside torch internals, generated
        graph code and this package; the FX node context of the innermost
        frame of generated GraphModule code, or None; see ``fx.GraphSites``)."""
        f = sys._getframe(1)
        kinds = self.code_kind
        ctx = None
        while f is not None:
            code = f.f_code
            kind = kinds.get(code)
            if kind is None:
                kind = kinds[code] = _code_kind(f)
            if kind == _USER:
                return fx.short_location(code.co_filename, f.f_lineno), ctx
            if ctx is None:
                if kind == _GRAPH:
                    ctx = self.graphs.lookup(f)
                elif kind == _INTERPRETER:
                    n = f.f_locals.get("n")
                    if isinstance(n, torch.fx.Node):
                        ctx = self.graphs.node(n)
                elif kind == _INDUCTOR:
                    self.compiled = "inductor"
                    ctx = self.wrappers.lookup(f)
                    # Code generated before the Profiler: no comments.
                    self.unnamed_compiled += ctx is None
            f = f.f_back
        return None, ctx

    def _settle(self):
        # The outputs of the last forward op have their autograd node now.
        outs_prev, loc_prev = self.pending
        self.pending = None
        node_loc = self.node_loc
        for t in outs_prev:
            gf = _grad_fn(t)
            if gf is not None and gf not in node_loc:
                node_loc[gf] = loc_prev

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        info = self.infos.get(func)
        if info is None:
            info = self.infos[func] = _OpInfo(func, self.p.excluded_ops, self.p.op_filter)
        if self.pending is not None:
            self._settle()
        stack = self.p._stack
        lay = self.layouts
        dtensors = lay.dtensor is not None and any(issubclass(t, lay.dtensor) for t in types)
        if info.excluded:
            self.excluded.add(info.name)
            out = func(*args, **kwargs)
            if self.after_backward and self.optimizer_results and not stack:
                # A view of clipping's norms (``stack``'s ``unsqueeze``) is
                # the optimizer's too.
                ins_o: list = []
                _leaves(args, ins_o)
                if _any_noted(self.optimizer_results, ins_o):
                    outs_o: list = []
                    _leaves(out, outs_o)
                    _note(self.optimizer_results, outs_o)
            if self.param_names is not None and not stack and torch._C._current_autograd_node() is None:
                # A view or copy (``_to_copy``: a gradient cast to float32)
                # of a parameter's tensors carries its names on.
                ins_p: list = []
                _leaves(args, ins_p)
                outs_p: list = []
                _leaves(out, outs_p)
                ins_p = [_local(t) for t in ins_p]
                outs_p = [_local(t) for t in outs_p]
                if all(t is not None for t in ins_p + outs_p):
                    self.parameters_of(ins_p, outs_p)
            if dtensors or lay.tags:
                ins_l: list = []
                _leaves(args, ins_l)
                outs_l: list = []
                _leaves(out, outs_l)
                lay.follow(info.name, args, ins_l, outs_l)
            if info.empty:
                if not self.in_generated_code():
                    self.mark_fresh(out)
            elif self.fresh:
                self.mark_written(args, kwargs, info, out)
            # A forward view/copy gets an autograd node whose backward ops
            # (gradient-accumulation adds) take this op's line, as the
            # reference's autograd tracebacks give them.
            if stack or torch._C._current_autograd_node() is None:
                raw_ins: list = []
                _leaves(args, raw_ins)
                if any(t.requires_grad for t in raw_ins):
                    raw: list = []
                    _leaves(out, raw)
                    if raw:
                        self.pending = (raw, self._forward_location())
            return out

        # What the op reads: not its out= arguments nor what it overwrites
        # (bernoulli_'s self), and not storage no op has written yet.
        raw_ins = _read_leaves(args, kwargs, info.unread)
        if self.fresh:
            fresh = self.fresh
            raw_ins = [t for t in raw_ins if _storage_key(t) not in fresh]
        ins = [_local(t) for t in raw_ins]
        # (not `None in ins`: that compares tensors with None through torch)
        readable = all(t is not None for t in ins)
        pre = None
        in_index = None
        if dtensors or lay.tags:
            in_index = [lay.digest_index(t) for t in raw_ins]
        if ins and readable and (info.pre_hash or (info.unread is not None and _writes_a_read(args, kwargs, info, raw_ins))):
            pre = self.cap.hash_inputs(ins, in_index)

        out = func(*args, **kwargs)
        if info.awaits:
            _await_collective(info.awaits, out)
        if self.fresh:
            self.mark_written(args, kwargs, info, out)

        raw = []
        _leaves(out, raw)
        if dtensors or lay.tags:
            lay.follow(info.name, args, raw_ins, raw)
        if info.workspace is not None:
            raw = self.drop_workspace(raw, info.workspace)
        if info.view and raw and self.fresh and all(_storage_key(t) in self.fresh for t in raw):
            # Views of memory no op has written hold nothing defined: not
            # recorded (FSDP2's mixed precision splits an ``empty`` buffer
            # before ``_foreach_copy_`` fills it; hashed, its garbage made
            # two identical runs differ: trial 23 F1).
            return out
        if info.unmarked is not None:
            written, flag = info.unmarked
            if len(args) > flag and args[flag] is True:
                raw.extend(a for a in (args[i] for i in written) if isinstance(a, torch.Tensor))
        # An op that writes arguments and returns none of them
        # (``_foreach_lerp_``, ``_fused_adamw_``, GradScaler's unscale, and
        # ``_foreach_copy_``, which overwrites without reading): its
        # written arguments, as it left them, are its outputs (hashes only;
        # the reference records its inputs alone, so a foreach or fused
        # optimizer's update went unseen until the next step's forward).
        written_only = False
        if not raw and (info.pre_hash or info.unread is not None) and info.unmarked is None:
            raw = _written_leaves(args, kwargs, info.schema)
            written_only = bool(raw)
        outs = [_local(t) for t in raw]
        if not all(t is not None for t in outs):
            readable = False
        node = torch._C._current_autograd_node()
        forward_like = node is None or bool(stack)  # forward, or recomputed (AC)
        if node is not None:
            self.after_backward = True
            self.grad_addresses = None
        elif stack:
            self.after_backward = False

        primary = None
        if readable and info.wanted and not written_only:
            mn = self.min_numel
            small = False
            for i, t in enumerate(outs):
                if t.dtype in _FLOATS:
                    if t.numel() >= mn:
                        primary = i
                        break
                    small = True
            if small and primary is None and not info.inplace:
                self.below_min_numel += 1
                self.below_in_modules += bool(stack) and node is None
            elif primary is None and not small and any(t.is_complex() for t in outs):
                self.complex_ops += 1
                self.complex_names[info.name] = None
        captured = readable and (primary is not None or (info.inplace and bool(outs or ins)))
        # Outputs get an autograd node when an input requires grad (their
        # own flag is not set yet down here).
        grads = forward_like and bool(raw) and any(t.requires_grad for t in raw_ins)
        if not (captured or grads):
            if self.param_names is not None and readable and node is None and not stack:
                self.parameters_of(ins, outs)  # names pass through it
            elif self.after_backward and readable and node is None and not stack:
                self.is_optimizer_op(info, ins, outs)  # clipping's small norms
            return out

        frames = _current_stack_frames.get()
        live, fxc = self.site()
        if frames:
            loc = frames[-1].short_str()
        elif fxc is not None and fxc[1] is not None:
            loc = fxc[1]
        elif forward_like:
            loc = live
        else:
            loc = self.node_loc.get(node) or live
        if grads:
            self.pending = (raw, loc)
        if not captured:
            return out
        self.captured_in_modules += bool(stack) and node is None

        fqn = fx.clean_fqn(_current_module_name.get())
        if fqn is None and fxc is not None:
            fqn = fxc[0]
        if fqn is None:
            if stack:
                fqn = stack[-1]
            elif node is not None:
                fqn = _recomputing_module(self.p._module_names)
                if fqn is None:
                    fqn = self.p._grad_fn_to_module.get(node)
        phase = _current_phase_override.get()
        if phase is not None:
            backward = phase == "backward"
        else:
            backward = node is not None or _in_final_callbacks() or (fxc is not None and fxc[2])
        # Capture.record's phase: 1 backward; 2 forward inside a module's
        # forward (an eager module, or a compiled graph's module); 3 the
        # optimizer's: an op of its step, or one outside every module after
        # a backward that touches the model's parameters or gradients
        # (clipping, loss scaling, an EMA) or is GradScaler's update; 0
        # forward outside any module (the loss, the next micro-batch's or
        # an eval batch's data, a loss total, an eval loss). A forward
        # record after a backward one says so (``Phase: forward``); an
        # optimizer record, only while no backward op was captured (all
        # under min_numel: no backward block marks where it starts).
        if backward:
            code = 1
        elif stack or (fxc is not None and fxc[0] is not None):
            code = 2
        elif self.param_names is not None or (self.after_backward and self.is_optimizer_op(info, ins, outs)):
            code = 3
        else:
            code = 0

        ids = self.ids
        writes = self.writes
        # An input never seen as a result (a parameter, a view an excluded
        # op made) is produced by the last captured op that wrote its
        # storage there: `w[3, 5] += d` under no_grad writes a view of w
        # that is gone when addmm reads `w.t()`.
        in_ids = [ids.get(t) or writes.writer(t) for t in ins]
        out_ids = [ids.assign(t) for t in outs]
        if info.mutable:
            for t, oid in zip(outs, out_ids):
                writes.note(t, oid)
        layout = None
        digest_index = None
        if dtensors or lay.tags:
            o_tok = [lay.token(t) for t in raw]
            i_tok = [lay.token(t) for t in raw_ins]
            stats = lay.stats_line(raw[primary]) if primary is not None else None
            if stats is not None or any(x != layouts.PLAIN for x in o_tok + i_tok):
                layout = (stats, o_tok, i_tok)
            # A shard's digest indexes its elements by their place in the
            # whole tensor, so shard digests combine (docs/log-format.md).
            o_index = [lay.digest_index(t) for t in raw]
            if any(x is not None for x in o_index + in_index):
                digest_index = (o_index, in_index)
        # Only the step's own ops: a closure's forward (in a module) and
        # backward (``optimizer.step(closure)``) update no parameter.
        params = self.parameters_of(ins, outs) if self.param_names is not None and code in (0, 3) else None
        out_params = self.output_names if params is not None else None
        # Outside the optimizer step: which inputs are parameters (trial 26
        # F5: an entry named "input 1", not the adapter it is), also in
        # the optimizer phase after ``step()`` returned (trial 29: an
        # in-place edit of a parameter there had no parameter name).
        in_params = None
        if (code != 3 or params is None) and self.input_fqn:
            fqns = self.input_fqn
            names = []
            for t in raw_ins:
                n = fqns.get(id(t))
                if n is None:
                    b = t._base
                    n = fqns.get(id(b)) if b is not None else None
                names.append(n or "")
            if any(names):
                in_params = names
        self.cap.record(
            fqn,
            info.name,
            code,
            loc,
            primary,
            outs,
            pre if pre is not None else ins,
            in_ids,
            out_ids,
            layout,
            digest_index,
            params,
            out_params,
            in_params,
        )
        return out

    def enter_optimizer(self, optimizer, model) -> None:
        """Called as ``optimizer.step()`` starts: maps the data address of
        each of its parameters, their gradients and their state tensors to
        the parameter's FQN in ``model`` (spelled as keys spell modules),
        for the ``Parameters:`` lines of the step's ops (a per-op optimizer
        row's key names no module). The address, not the storage: FSDP2's
        gradients (DDP's, a flat parameter's) are views of one buffer. An
        entry holds while its tensor lives (a closure's ``zero_grad`` frees
        the gradients, whose memory a later tensor may take). State the
        step creates (its first) is mapped once the optimizer's state has
        grown (:meth:`parameters_of`)."""
        self.fqn = _parameter_fqns(model)
        if not self.p._warned_unheld_parameters:
            self.p._warned_unheld_parameters = modules.warn_unheld(optimizer, self.fqn, "ops")
        self.optimizer = optimizer
        self.param_names = {}
        self.derived = {}
        self.mapped: dict = {}  # id(parameter) -> its state's size when mapped
        self.map_parameters()

    def state_signature(self) -> tuple:
        """(how many parameters have state, the size of the newest one's):
        it changes whenever the optimizer adds state."""
        state = getattr(self.optimizer, "state", None)
        if not isinstance(state, dict) or not state:
            return (0, 0)
        newest = next(reversed(state.values()))
        return (len(state), len(newest) if isinstance(newest, dict) else 0)

    def is_optimizer_op(self, info, ins: list, outs: list) -> bool:
        """Whether an op outside every module after a backward is the
        optimizer's: GradScaler's update, or one that touches the model's
        parameters or gradients or reads an earlier such op's result (then
        its results are noted as such)."""
        marked = self.optimizer_results
        if not (info.name in _OPTIMIZER_OPS or self.touches_the_model(ins, outs) or _any_noted(marked, ins)):
            return False
        _note(marked, outs)
        return True

    def touches_the_model(self, ins: list, outs: list) -> bool:
        """Whether a tensor of ``ins`` or ``outs`` is (its data address) a
        parameter of the Profiler's model, its gradient or a persistent
        buffer (``state_dict``'s: an EMA of BatchNorm's running statistics
        is the optimizer's as the EMA of the parameters is, trial 68 F4),
        as they are after the last backward op."""
        known = self.grad_addresses
        if known is None:
            model = getattr(self.p, "model", None)
            params = model.parameters() if isinstance(model, torch.nn.Module) else ()
            known = self.grad_addresses = {}
            buffers = (
                b
                for m in (model.modules() if isinstance(model, torch.nn.Module) else ())
                for name, b in m.named_buffers(recurse=False)
                if name not in getattr(m, "_non_persistent_buffers_set", ())
            )
            for b in buffers:
                k = _address(b)
                if k:
                    known[k] = weakref.ref(b)
            for p in params:
                for t in (p, p.grad):
                    t = _local(t) if t is not None else None
                    k = _address(t) if t is not None else 0
                    if k:
                        known[k] = weakref.ref(t)
        for t in (*ins, *outs):
            r = known.get(_address(t))
            # Only while that tensor lives and still holds that memory: an
            # unsharded gradient FSDP2 freed after its copy-in left its
            # address to the reduce-scatter's fresh output, and two
            # identical runs filed that reduce-scatter under different
            # phases, by the allocator's choice.
            if r is not None:
                held = r()
                if held is not None and _address(held) == _address(t):
                    return True
        return False

    def map_parameters(self) -> None:
        """Adds the addresses of the optimizer's parameters, gradients and
        state tensors to ``param_names`` (a parameter whose state has not
        grown since it was mapped is skipped); notes the state's
        signature."""
        keys = self.param_names
        mapped = self.mapped
        optimizer = self.optimizer
        state = getattr(optimizer, "state", {})
        for group in getattr(optimizer, "param_groups", ()):
            for p in group.get("params", ()):
                st = state.get(p)
                size = len(st) if isinstance(st, dict) else 0
                if mapped.get(id(p)) == size:
                    continue
                mapped[id(p)] = size
                name = self.fqn.get(id(p))
                if name is None:
                    continue
                ts = [p, p.grad]
                if size:
                    ts.extend(v for v in st.values() if isinstance(v, torch.Tensor))
                for t in ts:
                    t = _local(t) if isinstance(t, torch.Tensor) else None
                    k = _address(t) if t is not None else 0
                    if k:
                        # With the tensor: its memory, once freed (a
                        # closure's zero_grad), may hold another.
                        e = keys.get(k)
                        held = e[1]() if e is not None else None
                        if held is None or _address(held) != k:
                            keys[k] = ((name,), weakref.ref(t))
        self.signature = self.state_signature()

    def known(self, t):
        """The FQN (a 1-tuple) of the parameter whose tensor (or a view at
        its address) ``t`` is, while that tensor lives and holds that
        memory; else None."""
        k = _address(t)
        e = self.param_names.get(k)
        if e is None:
            return None
        held = e[1]()
        return e[0] if held is not None and _address(held) == k else None

    def leave_optimizer(self) -> None:
        """Called as ``optimizer.step()`` returns."""
        self.param_names = None
        self.derived = {}
        self.optimizer = None

    def parameters_of(self, ins: list, outs: list):
        """The ``Parameters:`` text of an optimizer-step op reading ``ins``
        and writing ``outs`` (local tensors): the FQNs of the parameters
        whose tensors it reads or writes (by data address), or whose values
        the tensors it reads were computed from in the step (by tensor
        identity, which a freed tensor's memory does not pass on), in
        first-seen order; None when none. Its results remember those names:
        each its own parameter's where it is a parameter's tensor (a
        foreach or fused op's list), else all; ``output_names`` is then
        the names per output when they differ from output to output (the
        ``Output parameters:`` line), else None.
        Called for every op of the step, captured or not (below
        ``min_numel``, a view), so that names pass through the ops a
        capture leaves out. State made from nothing (a step counter,
        ``torch.zeros(())``) is mapped at the first op that reads a tensor
        not known yet after the state grew: an optimizer creates a group's
        state before it computes with it."""
        grew = self.state_signature() != self.signature
        known = self.known
        derived = self.derived
        names: dict = {}
        for t in ins:
            got = known(t)
            if got is None and grew:
                self.map_parameters()
                grew = False
                got = known(t)
            if got is None:
                e = derived.get(id(t))
                got = e[1] if e is not None and e[0]() is t else None
            if got:
                names.update(dict.fromkeys(got))
        # Each output's own parameters where it is one of theirs (a foreach
        # or fused op writes one list entry per parameter), else all.
        own = []
        for t in outs:
            got = known(t)
            own.append(got)
            if got:
                names.update(dict.fromkeys(got))
        if not names:
            self.output_names = None
            return None
        found = tuple(names)
        per_output = [got or found for got in own]
        for t, got in zip(outs, per_output):
            derived[id(t)] = (weakref.ref(t), got)
        # Said only where outputs differ in their parameters: a compare
        # can then name the parameters whose outputs differ.
        self.output_names = [", ".join(g) for g in per_output] if len(set(per_output)) > 1 else None
        return ", ".join(found)

    def in_generated_code(self) -> bool:
        """True when the running op was called by compiled code (a
        GraphModule's generated ``forward`` or an inductor wrapper), whose
        kernels may write buffers without dispatching an op."""
        f = sys._getframe(2)
        kinds = self.code_kind
        while f is not None:
            code = f.f_code
            kind = kinds.get(code)
            if kind is None:
                kind = kinds[code] = _code_kind(f)
            if kind in (_GRAPH, _INDUCTOR):
                return True
            f = f.f_back
        return False

    def drop_workspace(self, raw: list, positions) -> list:
        """``raw`` (an op's results) without its scratch outputs
        (:data:`WORKSPACE_OUTPUTS`), whose storage is remembered as holding
        no defined values, as an ``empty*`` result's is: an op reading it
        does not hash it."""
        kept = []
        for i, t in enumerate(raw):
            if i in positions:
                k = _storage_key(t)
                if k:
                    self.fresh.add(k)
            else:
                kept.append(t)
        return kept

    def mark_fresh(self, out) -> None:
        """Remembers the storage of an ``empty*`` op's result as written by
        no op yet (eager code only: see :meth:`in_generated_code`)."""
        ts: list = []
        _leaves(out, ts)
        for t in ts:
            k = _storage_key(t)
            if k:
                self.fresh.add(k)

    def mark_written(self, args, kwargs, info, out) -> None:
        """Forgets as fresh the storage an op wrote: its written arguments
        and its results (a result reusing freed memory is written too), not
        a view's (``split_with_sizes`` of an ``empty`` buffer, whose parts
        FSDP2's mixed precision then fills with ``_foreach_copy_``)."""
        ts = _written_leaves(args, kwargs, info.schema)
        if not info.view:
            _leaves(out, ts)
        fresh = self.fresh
        for t in ts:
            fresh.discard(_storage_key(t))

    def _forward_location(self):
        frames = _current_stack_frames.get()
        if frames:
            return frames[-1].short_str()
        live, fxc = self.site()
        if fxc is not None and fxc[1] is not None:
            return fxc[1]
        return live


def _recomputing_module(names: dict):
    """While non-reentrant activation checkpointing (``use_reentrant=False``)
    recomputes a checkpointed method of a module (``checkpoint(self.inner,
    x)``) in backward: that module's FQN, for the recomputed ops outside
    its submodules (whose own hooks name them). Else None. Without it,
    those ops took the module whose backward asked for the recomputation
    (``blocks.0.fc2/op_1_gelu`` for ``blocks.0``'s own gelu; trial 13 F4);
    reentrant checkpointing recomputes inside its own autograd node, made
    in the block's forward, which names the block.

    Reads torch.utils.checkpoint's private state (the saved-tensor hooks on
    top: ``_recomputation_hook``'s pack hook, its ``target_frame_ref``, the
    frame's ``recompute_fn`` and its ``fn``; the same in torch 2.13 to
    2.15); anything else gives None (the old naming)."""
    try:
        hooks = torch._C._autograd._top_saved_tensors_default_hooks(False)
        if not hooks:
            return None
        pack = hooks[0]
        while hasattr(pack, "__wrapped__"):
            pack = pack.__wrapped__
        if not getattr(pack, "__qualname__", "").startswith("_recomputation_hook."):
            return None
        code = pack.__code__
        frame = pack.__closure__[code.co_freevars.index("target_frame_ref")].cell_contents()
        rf = frame.recompute_fn
        fn = rf.__closure__[rf.__code__.co_freevars.index("fn")].cell_contents
        while hasattr(fn, "func") and hasattr(fn, "args"):  # functools.partial
            fn = fn.func
        module = getattr(fn, "__self__", None)
        if not isinstance(module, torch.nn.Module):
            return None
        name = names.get(id(module))
        return None if name is None else fx.clean_fqn(name)
    except Exception:
        return None


def _grad_fn(t):
    """``t.grad_fn``, or None where reading it raises: a view made under
    ``torch.no_grad()`` whose base was changed in place (``w[0, 0] += x``
    under ``no_grad``, a common way to poke a weight) raises when its
    ``grad_fn`` is read with grad mode on. Such a view has no autograd
    node to follow."""
    try:
        return t.grad_fn
    except RuntimeError:
        return None


def _grad_fns(args) -> set:
    leaves: list = []
    _leaves(args, leaves)
    return {gf for gf in map(_grad_fn, leaves) if gf is not None}


def _default_rank() -> int:
    dist = torch.distributed
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def _world_size():
    """``torch.distributed``'s world size, or None without a process group."""
    dist = torch.distributed
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else None


#: The warning of a schedule without any step (nothing will be captured).
EMPTY_SCHEDULE = "actdiff_capture: capture_steps={!r} holds no step: this profiler captures nothing"

#: Said when the Profiler is given a DDP (or DataParallel) wrapper rather
#: than the model it wraps (trial 70 F3: every key started with
#: ``module.``, none paired by name with a run given ``.module``, and the
#: first diverging step read step 1 while a change made at step 5 hid
#: behind it).
WRAPPER_MODEL = (
    "actdiff_capture: the model given is a {wrapper} wrapper, so every module FQN (and key) starts with 'module.' "
    "and none pairs by name with a run profiled with the model it wraps or without {wrapper}: give the Profiler "
    "model.module, as in every run compared with this one"
)

#: Said when ``tolerances=`` is given without ``baseline=`` (trial 70 F5:
#: accepted and never used).
UNUSED_TOLERANCES = (
    "actdiff_capture: tolerances={tolerances!r} is given without baseline=: it sets the in-process baseline "
    "check's options and is unused here (pass them to `actdiff compare` instead)"
)

UNREACHED_STEPS = (
    "actdiff_capture: {n} scheduled step{s} ({steps}) {were} never reached (the last step was {last}{counted}): "
    "no log was written for them"
)

# Said with UNREACHED_STEPS when no scheduled step was reached, counting
# from step 1: a job resumed from a checkpoint that did not say so (trial
# 30 F1: a schedule of range(11, 21) in the process that resumed at step 11
# captured nothing, and said only "the last step was 10").
COUNTED_FROM_ONE = (
    ", counted from step 1: a job resumed from a checkpoint passes first_step= (the step it resumes at) "
    "so that its steps keep their numbers"
)


def _range_len(r: range) -> int:
    """``len(r)`` of an increasing range, with no ``OverflowError`` for one
    longer than ``sys.maxsize`` (``range(1, 10**20)``)."""
    return max(0, (r.stop - r.start + r.step - 1) // r.step)


def _unreached(steps, last: int) -> tuple[int, list]:
    """The scheduled steps after step ``last``: how many, and the first
    three (at no cost for a range, however long)."""
    if isinstance(steps, range):
        if not _range_len(steps) or steps[-1] <= last:
            return 0, []
        rest = steps[0 if steps[0] > last else (last - steps[0]) // steps.step + 1 :]
        return _range_len(rest), list(rest[:3])
    rest = sorted(s for s in steps if s > last)
    return len(rest), rest[:3]


def _first_and_last(steps) -> tuple[int, int]:
    """The first and last scheduled step (0, 0 when none), at no cost for
    a range (``min()`` walks one: trial 30 F2, ``range(1000, 10**12,
    1000)`` took 47 s)."""
    if isinstance(steps, range):
        return (steps[0], steps[-1]) if _range_len(steps) else (0, 0)
    return (min(steps), max(steps)) if steps else (0, 0)


def _step_number(s, name: str) -> int:
    """``s`` as a step number: an int (a numpy or 0-d torch integer too),
    never a bool or a float, which ``int()`` would truncate (trial 22:
    ``capture_steps=[2.5]`` captured step 2 without a word).

    Raises:
        ValueError: naming ``name`` and the value.
    """
    if not isinstance(s, bool):
        try:
            return operator.index(s)
        except TypeError:
            pass
    # One number (first_step, an int capture_step) or each of a schedule's.
    what = "whole step numbers (ints)" if name == "capture_steps" else "a whole step number (an int)"
    raise ValueError(f"{name} must be {what}, got {s!r}")


def _schedule(capture_step, capture_steps):
    """The steps to capture: ``(series, steps)``. ``series`` is False for one
    step given as an int (the reference's layout: ``{dump_dir}/rank_R...``),
    True for an iterable (``{dump_dir}/step_S/rank_R...``). ``steps`` is a
    ``range`` (kept as is: membership costs nothing however long) or a
    frozenset of 1-based step numbers."""
    name = "capture_steps"
    if capture_steps is None:
        name = "capture_step"
        capture_steps = 1 if capture_step is None else capture_step
    elif capture_step is not None:
        raise ValueError("give capture_step or capture_steps, not both")
    if isinstance(capture_steps, (bool, str, bytes)):
        kind = "an int" if name == "capture_step" else "an int or an iterable of ints"
        raise ValueError(f"{name} must be {kind}, got {capture_steps!r}")
    if isinstance(capture_steps, int) or (
        isinstance(capture_steps, torch.Tensor) and capture_steps.dim() == 0
    ):
        step = _step_number(capture_steps, name)
        if step < 1:
            raise ValueError(f"capture_step is 1-based, got {step}")
        return False, frozenset((step,))
    if isinstance(capture_steps, range):
        if capture_steps.step < 1:
            raise ValueError(f"capture_steps must be an increasing range, got {capture_steps!r}")
        if _range_len(capture_steps) and capture_steps[0] < 1:
            raise ValueError(f"capture_steps are 1-based, got {capture_steps!r}")
        if not _range_len(capture_steps):
            warnings.warn(EMPTY_SCHEDULE.format(capture_steps), stacklevel=3)
        return True, capture_steps
    if name == "capture_step":
        raise ValueError(f"capture_step must be an int, got {capture_steps!r}")
    if isinstance(capture_steps, (itertools.count, itertools.cycle, itertools.repeat)):
        # list() of it would never return.
        raise ValueError(
            f"capture_steps={capture_steps!r} never ends: give a range (range(1000, 10**12, 1000): "
            "a range costs nothing however long)"
        )
    try:
        items = list(capture_steps)
    except TypeError as e:
        raise ValueError(f"capture_steps must be an int or an iterable of ints, got {capture_steps!r}") from e
    steps = frozenset(_step_number(s, name) for s in items)
    if any(s < 1 for s in steps):
        raise ValueError(f"capture_steps are 1-based, got {min(steps)}")
    if not steps:
        warnings.warn(EMPTY_SCHEDULE.format(capture_steps), stacklevel=3)
    return True, steps


def _rng_digest() -> int:
    """A 64-bit digest of torch's random number generators' state: the
    CPU generator's and, when CUDA is initialised, the current device's
    (a few KB copied on the host: no device sync). The header's ``RNG
    state:`` line gives it when a step is armed and when it ends, so a
    compare can tell randomness (dropout) from a change to the computation
    at ``level="modules"``, where random ops are not recorded."""
    h = hashlib.blake2b(digest_size=8)
    h.update(_state_bytes(torch.get_rng_state()))
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        h.update(_state_bytes(torch.cuda.get_rng_state()))
    return int.from_bytes(h.digest(), "little")


def _state_bytes(t: torch.Tensor) -> bytes:
    """A generator state's bytes (a CPU uint8 tensor): through numpy
    (about 7 µs for the CPU generator's 5,056 bytes), or, where numpy is
    not installed (torch does not need it), through a list (about 70 µs)."""
    try:
        return t.numpy().tobytes()
    except (RuntimeError, ImportError):
        return bytes(t.tolist())


def _optimizer_step_count(optimizer) -> int | None:
    """The number of steps ``optimizer`` has taken, from the ``step`` of the
    first parameter's state that has one (Adam, AdamW, RMSprop, Adagrad
    ...; a checkpoint's ``load_state_dict`` restores it), or None: no such
    state (SGD), or a count on a device (reading it would synchronise)."""
    for group in optimizer.param_groups:
        for p in group["params"]:
            st = optimizer.state.get(p)
            if not st or "step" not in st:
                continue
            v = st["step"]
            if isinstance(v, torch.Tensor):
                if v.device.type != "cpu" or v.numel() != 1:
                    return None
                v = v.item()
            try:
                return int(v)
            except (TypeError, ValueError):
                return None
    return None


def _check_loss(loss) -> None:
    """Raises ValueError for a loss that is no real number (a Python or
    NumPy scalar) nor a one-element tensor or array (before anything is
    read or written: no sync)."""
    if isinstance(loss, torch.Tensor) or _is_array(loss):
        n = loss.numel() if isinstance(loss, torch.Tensor) else loss.size
        if n != 1:
            raise ValueError(f"loss must be a float or a one-element tensor, got shape {tuple(loss.shape)}")
    elif loss is not None and (not isinstance(loss, numbers.Real) or isinstance(loss, bool)):
        raise ValueError(f"loss must be a float or a one-element tensor, got {type(loss).__name__}")


def _is_array(x) -> bool:
    """Whether ``x`` is a NumPy array (without importing NumPy)."""
    return type(x).__module__ == "numpy" and type(x).__name__ == "ndarray"


def _loss_value(loss) -> float | None:
    """``loss`` as a float (a tensor read with ``item()``)."""
    if loss is None:
        return None
    if isinstance(loss, torch.Tensor):
        return float(loss.detach().item())
    if _is_array(loss):
        return float(loss.item())
    return float(loss)


class Profiler:
    """Captures training step ``capture_step`` (1-based) of ``model``, or
    the steps of a schedule (``capture_steps=``).

    Args:
        model: the model (module FQNs come from ``model.named_modules()``).
        dump_dir: folder of the log (created).
        rank: the log's rank; default: ``torch.distributed``'s rank when it
            is initialized, else 0.
        capture_step: the step to capture; ``step()`` is called after each.
            With 1 the capture is armed at construction. The log is
            ``{dump_dir}/rank_{rank}_activations.log``, as the reference's.
        capture_steps: an int (as ``capture_step``) or an iterable of step
            numbers (``range(1, 1001)``, ``[10, 20]``): a step series. Each
            captured step ``S`` writes ``{dump_dir}/step_{S}/rank_{rank}_activations.log``
            with a ``Step: S`` header line, flushed and written before the
            next step is armed (host memory holds one step). Steps outside
            the schedule run disarmed: no dispatch mode, no hooks.
        min_numel: an op whose floating-point results all have fewer
            elements is not captured (default 1000, as the reference's
            tracer; in-place ops are, hash-only). The header counts them
            (``Ops below min numel: N``) and states the setting
            (``Capture filter: min_numel=1000``): logs captured with other
            settings are not compared (their ops are numbered otherwise).
            ``min_numel=0`` captures every op: a small model wants it.
        op_filter: optional set of op-name substrings (an allow list).
        excluded_ops: ops never captured (default ``EXCLUDED_OPS``).
        enabled: False makes every call a no-op.
        device_path: compute CPU tensors' stats with queued libtorch ops
            (the GPU path) instead of the fused Rust pass.
        precision: None or ``"default"`` (the default) prints every float
            as the reference does (``%.6e``, 7 significant digits);
            ``"full"`` prints the shortest
            text that round-trips in float64 (at most 17 digits) and states
            ``Precision: full`` in the header.
        digests: write ``Output digest`` / ``Input digests`` lines (a 64-bit
            digest of each hashed tensor's contents, for bitwise
            comparison); default: on with ``precision="full"``.
        baseline: a blessed dump folder (as this one writes: ``step_S/``
            folders for a series): each captured step is compared with the
            same step and rank there, in process, right after it is
            written (:mod:`actdiff_capture.baseline`). At the first
            gating divergence the step's report is kept under
            ``{dump_dir}/divergence/``, a line is logged, and
            ``on_divergence`` applies.
        tolerances: ``actdiff compare`` options for that check
            (``["--rtol", "1e-4"]``, or one string split as a shell would:
            ``"--rtol 1e-4"``); default: identical. Checked when the
            profiler is made (``ValueError`` with the engine's message).
        on_divergence: ``"raise"`` (default) raises
            :class:`actdiff_capture.Diverged` (``step``, ``rank``, ``key``,
            ``report``) from ``step()``; ``"warn"`` logs and goes on;
            ``"stop-capturing"`` logs and disarms for good.
        level: ``"ops"`` (default) records every ATen op through a
            dispatch mode; ``"modules"`` records each module's forward
            output, each parameter's gradient and each parameter after the
            optimizer step through hooks only, cheap enough for every step
            (:mod:`actdiff_capture.modules`; header ``Level: modules``).
        first_step: the number of the first training step this process
            runs (default 1): a job resumed from a checkpoint saved after
            step k passes ``k + 1``, so that its steps are captured under
            their own numbers (``step_{S}``, ``Step: S``), the schedule
            and ``baseline=`` count them as the uninterrupted job does,
            and ``actdiff compare`` pairs them with its steps. Counted from
            1, a resumed job's step 11 would be captured as step 1, over
            the first process's log (trial 30).

    Raises:
        ValueError: a step below 1, both ``capture_step`` and
            ``capture_steps``, an endless iterator of steps, or an unknown
            ``precision``.
    """

    def __init__(
        self,
        model: nn.Module,
        dump_dir: str,
        *,
        rank: int | None = None,
        capture_step: int | None = None,
        capture_steps=None,
        min_numel: int = DEFAULT_MIN_NUMEL,
        op_filter=None,
        excluded_ops=None,
        enabled: bool = True,
        device_path: bool = False,
        precision: str | None = None,
        digests: bool | None = None,
        level: str = "ops",
        baseline: str | None = None,
        tolerances=(),
        on_divergence: str = "raise",
        first_step: int = 1,
    ):
        try:
            self._configure(
                model, dump_dir, rank, _schedule(capture_step, capture_steps), min_numel, op_filter, excluded_ops,
                enabled, device_path, precision, digests, level, baseline, tolerances, on_divergence, first_step,
            )  # fmt: skip
            if self.enabled and self.first_step in self.steps:
                self._arm()
        except BaseException:
            self._forget()
            raise

    def _forget(self) -> None:
        """A profiler whose making (or arming in ``__enter__``) raised: its
        hooks removed, and nothing said of it at exit (trial 31: its
        unreached steps were warned about, with advice for a resumed job)."""
        _live.discard(self)
        self._done = True
        try:
            self._disarm()
        except Exception:  # noqa: BLE001 - partly made: nothing more to undo
            pass

    def _configure(
        self, model, dump_dir, rank, schedule, min_numel, op_filter, excluded_ops, enabled, device_path,
        precision, digests, level, baseline, tolerances, on_divergence, first_step,
    ) -> None:  # fmt: skip
        if level not in LEVELS:
            raise ValueError(f"level must be one of {LEVELS}, got {level!r}")
        ignored = [
            name
            for name, given in (
                ("min_numel", min_numel != DEFAULT_MIN_NUMEL),
                ("op_filter", bool(op_filter)),
                ("excluded_ops", excluded_ops is not None),
            )
            if given
        ]
        if level == "modules" and ignored:
            verb = "applies" if len(ignored) == 1 else "apply"
            warnings.warn(OPS_ONLY_OPTIONS.format(names=", ".join(ignored), verb=verb), stacklevel=3)
        if on_divergence not in _baseline.ON_DIVERGENCE:
            raise ValueError(f"on_divergence must be one of {_baseline.ON_DIVERGENCE}, got {on_divergence!r}")
        if baseline is not None and not os.path.isdir(baseline):
            raise _baseline.BaselineError(f"baseline {baseline}: no such folder")
        if baseline is not None:
            # A baseline of the other level is refused now, not after the
            # first captured step trained (trial 22 L1).
            other = _baseline.level_of(os.fspath(baseline))
            if other is not None and other != level:
                raise _baseline.BaselineError(
                    f"baseline {baseline} holds level={other!r} logs and this profiler captures "
                    f"level={level!r}: capture both runs at one level"
                )
        self.level = level
        self._warned_level = False  # REPLACES_OTHER_LEVEL said
        self.baseline = None if baseline is None else os.fspath(baseline)
        self.tolerances = _baseline.tolerance_args(tolerances) if baseline is not None else tuple(tolerances)
        self.on_divergence = on_divergence
        self.diverged: _baseline.Diverged | None = None  # the first divergence found
        self._baseline_said: set = set()  # the baseline check's engine warnings said
        if precision not in PRECISIONS:
            raise ValueError(f"precision must be None, 'default' (the same) or 'full', got {precision!r}")
        if precision == "default":
            precision = None
        if self.baseline is not None and "--bitwise" in self.tolerances:
            # Refused now, not at the first captured step (trial 66: the
            # engine's "--bitwise needs both logs at full precision" came
            # after every step before it had trained).
            short = []
            if _baseline.precision_of(self.baseline) == "default":
                short.append(f"the baseline {self.baseline} holds logs at default precision")
            if precision != "full":
                short.append("this profiler captures at default precision")
            if short:
                raise _baseline.BaselineError(
                    f"tolerances={tolerances!r}: --bitwise needs both logs at full precision, and "
                    + " and ".join(short)
                    + ": capture both runs with precision=\"full\""
                )
        if not callable(getattr(model, "named_modules", None)):
            raise TypeError(f"model must be a torch.nn.Module (its module FQNs name the ops), got {type(model).__name__}")
        if isinstance(model, (nn.parallel.DistributedDataParallel, nn.DataParallel)):
            warnings.warn(WRAPPER_MODEL.format(wrapper=type(model).__name__), stacklevel=3)
        if baseline is None and tuple(tolerances):
            warnings.warn(UNUSED_TOLERANCES.format(tolerances=tolerances), stacklevel=3)
        self.model = model
        self.dump_dir = os.fspath(dump_dir)
        self.rank = rank
        self.series, self.steps = schedule
        # The reference's attribute: the (first) step captured.
        self.capture_step, self._last = _first_and_last(self.steps)
        self.first_step = _step_number(first_step, "first_step")
        if self.first_step < 1:
            raise ValueError(f"first_step is 1-based, got {first_step!r}")
        if enabled and 0 < self._last < self.first_step:
            # Trial 64: capture_steps=[2, 3] with first_step=4 captured
            # nothing and said nothing.
            warnings.warn(
                SCHEDULE_BEFORE_FIRST_STEP.format(last=self._last, first=self.first_step), stacklevel=3
            )
        if enabled and self.baseline is not None and self.series:
            n, first = _baseline.missing_steps(self.baseline, self.steps, self.first_step)
            if n:
                shown = ", ".join(map(str, first)) + (", ..." if n > len(first) else "")
                warnings.warn(
                    BASELINE_LACKS_STEPS.format(
                        baseline=self.baseline, n=n, s="" if n == 1 else "s", shown=shown, first=first[0]
                    ),
                    stacklevel=3,
                )
        self.min_numel = int(min_numel)
        if self.min_numel < 0:
            raise ValueError(f"min_numel must be 0 or more (0 captures every op), got {min_numel!r}")
        self.op_filter = set(op_filter) if op_filter else None
        self.excluded_ops = frozenset(EXCLUDED_OPS if excluded_ops is None else excluded_ops)
        self.enabled = bool(enabled)
        if self.enabled:
            # Before the model is compiled (torch.compile compiles at its
            # first call, usually a step before the captured one): extern
            # kernels of inductor's wrappers then carry their module FQN.
            inductor.install()
            inductor.note_model(model)
            said = modules.script_modules_warning(model)
            if said is not None:
                warnings.warn(said, stacklevel=4)
        self.device_path = device_path
        self.precision = precision
        self.digests = (precision == "full") if digests is None else bool(digests)
        self._path: str | None = None
        self._count: int | None = None
        self._paths: dict = {}
        # Module level, CPU, one process: statistics off the training
        # thread (actdiff_capture.modules), and each step's log finished by
        # a thread of its own (_finishing), joined before anything reads it.
        self._worker = None
        self._finishing: threading.Thread | None = None
        _live.add(self)
        self._finish_error: BaseException | None = None
        self._optimizer_hook = None
        # Steps done: counted from first_step.
        self._step = self.first_step - 1
        self._done = False
        self._mode: _Mode | None = None
        self._modules: modules.ModuleRecorder | None = None
        # The recorder of the step just written, its hooks kept for the next
        # step's capture if that step is captured too (_arm), else removed
        # before step() returns.
        self._spare_modules: modules.ModuleRecorder | None = None
        self._warned_no_optimizer_step = False  # modules.NO_OPTIMIZER_STEP said once
        self._warned_unheld_parameters = False  # modules.UNHELD_PARAMETERS said at level="ops"
        self._warned_below_min_numel = False  # BELOW_MIN_NUMEL said once
        self._warned_complex = False  # COMPLEX_OPS said once
        self._warned_compiled_before = False  # COMPILED_BEFORE said once
        self._warned_outputs: set = set()  # modules.COMPILED_OUTPUTS / UNEXPLAINED_OUTPUTS said
        # RESUMED_WITHOUT_FIRST_STEP: an optimizer step post-hook while a
        # captured step runs, until one optimizer's step count was read.
        self._resume_hook = None
        self._resume_checked = False
        self._optimizer_steps: int | None = None
        self._optimizer_stepped = False  # the hook saw an optimizer step (with or without a count)
        self._resume_warned = False  # RESUMED_WITHOUT_FIRST_STEP or OVERWRITES_UNCHECKED said
        self._log_existed = False  # the armed step's log was on disk before this capture
        self._rng_start = 0  # _rng_digest() when the step was armed
        self._handles: list = []
        self._stack: list = []
        self._grad_fn_to_module: dict = {}
        self._module_names: dict = {}  # id(module) -> its FQN (the per-op level's hooks)

    @property
    def path(self) -> str | None:
        """The last log written (its step's capture finished first)."""
        self._complete()
        return self._path

    @property
    def count(self) -> int | None:
        """The last log's number of blocks."""
        self._complete()
        return self._count

    @property
    def paths(self) -> dict:
        """Step -> log written, for every step captured so far."""
        self._complete()
        return self._paths

    # -- the ActivationCaptureProfiler protocol --------------------------------

    def __enter__(self) -> "Profiler":
        return self

    def __exit__(self, exc_type, *exc) -> None:
        if exc_type is not None:
            # The job stopped on an exception (a BaselineError, a crash):
            # the steps after it are not "never reached" for a reason to
            # warn of (trial 66: a resume's first_step= advice after a
            # BaselineError).
            self._done = True
        self.close()

    def close(self) -> None:
        """Ends the capture, as leaving a ``with Profiler(...)`` block
        does: the last captured step's log is written (the thread finishing
        it joined; what it raised is raised here), the hooks and the
        dispatch mode are removed, and a step armed but not reached is
        dropped with its folder. Later ``step()`` calls only count steps.
        Calling it again does nothing."""
        first = not self._done
        self._done = True
        try:
            self._complete()
        finally:
            if first and self.enabled and (self.diverged is None or self.on_divergence == "warn"):
                n, shown = _unreached(self.steps, self._step)
                if n:
                    more = f" and {n - len(shown)} more" if n > len(shown) else ""
                    warnings.warn(
                        UNREACHED_STEPS.format(
                            n=n,
                            s="" if n == 1 else "s",
                            steps=", ".join(map(str, shown)) + more,
                            last=self._step,
                            # No scheduled step reached, counting from 1:
                            # a resumed job, perhaps.
                            counted=(
                                COUNTED_FROM_ONE
                                if self.first_step == 1
                                and (0 < self._step < self.capture_step or self._resume_warned)
                                else ""
                            ),
                            were="was" if n == 1 else "were",
                        ),
                        stacklevel=2,
                    )
            self._release_worker()
            armed = self.armed
            self._disarm()  # the unwritten capture is dropped: its temporary file goes
            if armed and self.series:
                # A step armed but never reached leaves no empty step_S folder.
                try:
                    os.rmdir(os.path.dirname(self._armed_path))
                except OSError:
                    pass

    def step(self, loss=None) -> None:
        """Call after every training step. ``loss`` (optional: a float or a
        one-element tensor) is the step's training loss; for a captured
        step the log's header records it (``Loss: x``), a tensor read after
        the capture's own flush has synchronised the device."""
        _check_loss(loss)
        self._step += 1
        if not self.enabled or self._done:
            return
        try:
            self._complete()  # the previous step's log, before this one's
            if self.armed and self._step in self.steps:
                self._dump(loss)
                if self._done:  # the baseline check stopped capturing
                    return
            if self._step >= self._last:
                self._done = True
                self._disarm()
                self._release_worker()
            elif self._step + 1 in self.steps:
                self._arm()
        finally:
            self._drop_spare()

    @property
    def armed(self) -> bool:
        """True between arming and writing the log (or ``__exit__``)."""
        return self._mode is not None or self._modules is not None

    # -- internals --------------------------------------------------------------

    def _log_path(self, step: int) -> str:
        rank = _default_rank() if self.rank is None else self.rank
        name = f"rank_{rank}_activations.log"
        if self.series:
            return os.path.join(self.dump_dir, f"step_{step}", name)
        return os.path.join(self.dump_dir, name)

    def _new_capture(self, path: str):
        self._log_existed = os.path.exists(path)
        self._watch_optimizer_steps()
        if self.series and not self._warned_level:
            old = _baseline.log_level(path)
            if old is not None and old != self.level:
                self._warned_level = True
                warnings.warn(
                    REPLACES_OTHER_LEVEL.format(
                        path=path, old=old, new=self.level, step=self._armed_step, dump_dir=self.dump_dir
                    ),
                    stacklevel=3,
                )
        kw = {"device_path": self.device_path}
        if self.precision is not None or self.digests:
            kw["precision"] = self.precision or "default"
            kw["digests"] = self.digests
        try:
            cap = Capture(path, **kw)
        except TypeError as e:
            if len(kw) > 1:
                raise RuntimeError(
                    f"the installed actdiff_capture._native cannot write precision={self.precision!r} "
                    f"digests={self.digests}: rebuild the extension from this checkout ({e})"
                ) from e
            raise
        # `World size: N`: a compare then knows a rank whose log is missing
        # (a crashed rank) from a run of fewer ranks.
        world = _world_size()
        if world is not None:
            cap.note_world_size(world)
        return cap

    def _arm(self) -> None:
        if self._mode is not None or self._modules is not None:
            return
        self._rng_start = _rng_digest()
        if self.level == "modules":
            self._armed_step = self._step + 1
            self._armed_path = self._log_path(self._armed_step)
            cap = self._new_capture(self._armed_path)
            cap.note_level("modules")
            if self.series:
                cap.note_step(self._armed_step)
            rec, self._spare_modules = self._spare_modules, None
            if rec is not None and not rec.current():
                # Modules or parameters were added or replaced: hook the
                # model as it is now.
                rec.remove()
                rec = None
            if rec is not None:
                rec.rearm(cap)  # the last step's hooks go on with this one
            else:
                rec = modules.ModuleRecorder(self.model, cap, self._host_worker())
            self._modules = rec
            return
        names = {id(m): name for name, m in self.model.named_modules()}
        self._module_names = names
        stack = self._stack
        g2m = self._grad_fn_to_module
        pending: dict = {}
        stack.clear()
        g2m.clear()
        compiling = torch.compiler.is_compiling

        def pre_hook(module, args):
            if compiling():
                return  # traced by Dynamo: module context comes from FX metadata
            fqn = names.get(id(module))
            if fqn is None:
                return
            stack.append(fx.clean_fqn(fqn))
            pending[id(module)] = _grad_fns(args)

        def post_hook(module, args, output):
            if compiling():
                return
            fqn = names.get(id(module))
            if fqn is None:
                return
            if stack:
                stack.pop()
            inputs = pending.pop(id(module), set())
            fqn = fx.clean_fqn(fqn)
            if not fqn:
                return  # the root: its ops are <none>, as the reference's
            outs: list = []
            _leaves(output, outs)
            for t in outs:
                gf = _grad_fn(t)
                if gf is None:
                    continue
                todo = [gf]
                seen = set()
                while todo:
                    fn = todo.pop()
                    if fn in seen or fn in inputs:
                        continue
                    seen.add(fn)
                    if fn not in g2m:
                        g2m[fn] = fqn
                    for parent, _ in fn.next_functions:
                        if parent is not None and parent not in seen:
                            todo.append(parent)

        self._armed_step = self._step + 1
        path = self._log_path(self._armed_step)
        cap = self._new_capture(path)
        if self.series:
            cap.note_step(self._armed_step)
        # Hooks on the model's own modules, not torch's global module hooks:
        # those apply to every module of the process and make torch.compile
        # warn about them.
        self._handles = []
        for m in dict.fromkeys(m for _, m in self.model.named_modules()):
            if modules.is_script_module(m):
                continue  # takes no hooks: its ops are its caller's (SCRIPT_MODULES)
            # First, as the reference tracer's global module hooks run before
            # a module's own: ops of another pre-hook (a parallel style's
            # input redistribution) belong to the module, those of another
            # forward hook (its output redistribution) to the parent.
            self._handles.append(m.register_forward_pre_hook(pre_hook, prepend=True))
            self._handles.append(m.register_forward_hook(post_hook, always_call=True, prepend=True))
        # Every optimizer's step: its ops' Parameters lines.
        ref = weakref.ref(self)

        def optimizer_starts(optimizer, args, kwargs):
            p = ref()
            if p is not None and p._mode is not None:
                p._mode.enter_optimizer(optimizer, p.model)

        def optimizer_ends(optimizer, args, kwargs):
            p = ref()
            if p is not None and p._mode is not None:
                p._mode.leave_optimizer()

        self._handles.append(_optimizer.register_optimizer_step_pre_hook(optimizer_starts))
        self._handles.append(_optimizer.register_optimizer_step_post_hook(optimizer_ends))
        self._armed_path = path
        self._mode = _Mode(self, cap, names)
        self._mode.__enter__()
        fx.set_numerics_capture_active(True)

    def _watch_optimizer_steps(self) -> None:
        """Hooks every optimizer's step to read its step count, in the
        first captured step that runs one: a profiler counting from 1 in a
        job resumed from a checkpoint is said then (``_check_resumed``)."""
        if self._resume_checked or self._resume_hook is not None:
            return
        ref = weakref.ref(self)

        def counted(optimizer, args, kwargs):
            p = ref()
            if p is not None and p._optimizer_steps is None:
                p._optimizer_stepped = True
                p._optimizer_steps = _optimizer_step_count(optimizer)

        self._resume_hook = _optimizer.register_optimizer_step_post_hook(counted)

    def _check_resumed(self) -> None:
        """Warns once (RESUMED_WITHOUT_FIRST_STEP) when an optimizer has
        taken more steps than this profiler counted from step 1."""
        h, self._resume_hook = self._resume_hook, None
        if h is None:
            return
        h.remove()
        n, self._optimizer_steps = self._optimizer_steps, None
        stepped, self._optimizer_stepped = self._optimizer_stepped, False
        if n is None:
            if not stepped:
                return  # no optimizer step in this step: the next captured one is read
            # An optimizer step ran but keeps no count (SGD) or keeps it on
            # a device: no later step has one either, so the hook is not
            # put back (each read walks every parameter's state).
            self._resume_checked = True
            if self.series and self._log_existed and self.first_step == 1:
                # No count to check: the log written over is said.
                self._resume_warned = True
                warnings.warn(OVERWRITES_UNCHECKED.format(step=self._step, path=self._armed_path), stacklevel=4)
            return
        self._resume_checked = True
        ran = self._step - self.first_step + 1  # steps this process ran
        if self.first_step > 1 and n <= ran:
            # Trial 64: a fresh job given first_step=4 wrote step_4 on,
            # silently; a resumed job whose optimizer state was not loaded
            # is not the uninterrupted job either.
            warnings.warn(
                FIRST_STEP_NOT_RESUMED.format(step=self._step, first=self.first_step, n=n, s="" if n == 1 else "s"),
                stacklevel=4,
            )
            return
        if self.first_step == 1 and n > self._step:
            self._resume_warned = True
            warnings.warn(
                RESUMED_WITHOUT_FIRST_STEP.format(
                    step=self._step,
                    n=n,
                    first=n - self._step + 1,
                    what=f"step_{self._step}" if self.series else "this dump_dir's log",
                    over=f", over the log {self._armed_path} already held" if self._log_existed else "",
                ),
                stacklevel=4,
            )

    def _drop_spare(self) -> None:
        """Removes the hooks of a finished step's recorder that no next
        step took over."""
        rec, self._spare_modules = self._spare_modules, None
        if rec is not None:
            rec.remove()

    def _filter_text(self) -> str:
        """The header's ``Capture filter:`` value: ``min_numel=N``, then
        ``op_filter=`` and ``excluded_ops=`` (``|``-joined, sorted) when
        they are not the defaults."""
        parts = [f"min_numel={self.min_numel}"]
        if self.op_filter:
            parts.append("op_filter=" + "|".join(sorted(self.op_filter)))
        if self.excluded_ops != EXCLUDED_OPS:
            parts.append("excluded_ops=" + ("|".join(sorted(self.excluded_ops)) or "(none)"))
        return ", ".join(parts)

    def _disarm(self):
        h, self._resume_hook = self._resume_hook, None
        if h is not None:
            h.remove()
        self._drop_spare()
        rec, self._modules = self._modules, None
        if rec is not None:
            rec.remove()
        mode, self._mode = self._mode, None
        if mode is not None:
            fx.set_numerics_capture_active(False)
        for h in self._handles:
            h.remove()
        self._handles = []
        self._stack.clear()
        self._grad_fn_to_module.clear()
        if mode is not None:
            mode.__exit__(None, None, None)
            layouts.disarm(mode.layouts)
            mode.node_loc.clear()
            mode.pending = None
        return mode

    def _host_worker(self):
        """The statistics worker of a module-level capture, or None: only
        for a model on the CPU in one process (a GPU's statistics are
        queued on its stream already; in a distributed job, collectives and
        FSDP may change gradients and parameters in place at times this
        agent does not see)."""
        if self._worker is not None:
            return self._worker
        dist = torch.distributed.is_available() and torch.distributed.is_initialized()
        on_cpu = all(p.device.type == "cpu" for p in self.model.parameters())
        if dist or not on_cpu or os.environ.get("ACTDIFF_CAPTURE_SYNC"):
            return None
        self._worker = HostWorker()
        # Every optimizer's step waits until the worker has read the
        # parameters (and gradients) it was given.
        ref = weakref.ref(self)

        def before_optimizer_step(optimizer, args, kwargs):
            p = ref()
            if p is not None and p._worker is not None:
                p._worker.wait()

        self._optimizer_hook = _optimizer.register_optimizer_step_pre_hook(before_optimizer_step)
        _unfinished.add(self)
        return self._worker

    def _release_worker(self) -> None:
        """Removes the optimizer hook once no capture will use the worker."""
        h, self._optimizer_hook = self._optimizer_hook, None
        if h is not None:
            h.remove()

    def _drain_workers(self) -> None:
        """Blocks until the statistics workers (the profiler's and its
        module recorders') have read every tensor handed to them."""
        recorders = (getattr(self, "_modules", None), getattr(self, "_spare_modules", None))
        workers = [self._worker] + [getattr(r, "_helper", None) for r in recorders]
        for w in workers:
            if w is not None:
                w.wait()

    def _complete(self) -> None:
        """Waits for the thread finishing the last step's log; re-raises
        what it raised."""
        t, self._finishing = self._finishing, None
        if t is not None:
            t.join()
        e, self._finish_error = self._finish_error, None
        if e is not None:
            raise e

    def _dump(self, loss=None) -> None:
        self._check_resumed()
        rec, self._modules = self._modules, None
        if rec is not None:
            if rec.grads_since_optimizer and not self._warned_no_optimizer_step:
                self._warned_no_optimizer_step = True
                warnings.warn(modules.NO_OPTIMIZER_STEP.format(step=self._armed_step), stacklevel=3)
            rec.finish()  # the parameters as the optimizer left them
            self._spare_modules = rec  # its hooks, for the next step if captured
            cap = rec.cap
            cap.note_rng(self._rng_start, _rng_digest())
            self._note_compiled_modules(rec)
            if rec.worker is not None and self.baseline is None and self._step + 1 in self.steps:
                # A captured step follows: this step's log is finished
                # (flushed, written) by a thread of its own while training
                # goes on, and is on disk when the next step() returns (or
                # once path, paths or count is read). Otherwise (the last
                # step of a run of captured steps, or a baseline check) it
                # is written before step() returns.
                step, path = self._armed_step, self._armed_path
                self._finishing = threading.Thread(
                    target=self._finish_in_thread, args=(cap, loss, step, path), daemon=True
                )
                self._finishing.start()
                return
        else:
            mode = self._disarm()
            if mode is None:
                return
            cap = mode.cap
            cap.note_rng(self._rng_start, _rng_digest())
            for op in mode.excluded:
                cap.note_excluded(op)
            # What the settings leave out, so that logs captured with other
            # settings (their ops numbered differently) are not compared;
            # and how many ops min_numel left out this step.
            cap.note_filter(self._filter_text())
            cap.note_below_min_numel(mode.below_min_numel)
            if mode.below_in_modules > mode.captured_in_modules and not self._warned_below_min_numel:
                self._warned_below_min_numel = True
                warnings.warn(
                    BELOW_MIN_NUMEL.format(
                        step=self._armed_step,
                        below=mode.below_in_modules,
                        n=self.min_numel,
                        captured=mode.captured_in_modules,
                    ),
                    stacklevel=3,
                )
            if mode.complex_ops and not self._warned_complex:
                self._warned_complex = True
                names = list(mode.complex_names)
                shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
                n = mode.complex_ops
                warnings.warn(
                    COMPLEX_OPS.format(
                        step=self._armed_step, n=n, s="" if n == 1 else "s", names=shown, were="was" if n == 1 else "were"
                    ),
                    stacklevel=3,
                )
            if mode.unnamed_compiled and not self._warned_compiled_before:
                self._warned_compiled_before = True
                warnings.warn(COMPILED_BEFORE.format(step=self._armed_step, n=mode.unnamed_compiled), stacklevel=3)
            # A run with DTensors: the header's `Mesh:` and `Coords:`.
            if mode.layouts.mesh is not None:
                cap.note_mesh(*mode.layouts.mesh)
            # The header's `Compiled: inductor`: ops of this log ran in
            # inductor's wrapper, so the ops it fused into kernels are absent
            # (the comparator shows them as fused away, not gating).
            note_compiled = getattr(cap, "note_compiled", None)
            if mode.compiled is not None and note_compiled is not None:
                note_compiled(mode.compiled)
        self._finish(cap, loss, self._armed_step, self._armed_path)
        if self.baseline is not None and self.diverged is None:
            self._check_baseline()

    def _note_compiled_modules(self, rec) -> None:
        """At level='modules': the header's ``Compiled:`` and ``Compiled
        modules:`` lines when modules of this step ran compiled (no output
        records of them), with a warning the first time
        (:data:`modules.COMPILED_OUTPUTS`); a warning, once, for modules
        whose outputs are missing for no reason seen
        (:data:`modules.UNEXPLAINED_OUTPUTS`)."""
        compiled, unexplained = rec.compiled_modules()
        if compiled:
            rec.cap.note_compiled(modules.COMPILED_BY)
            rec.cap.note_compiled_modules(compiled)
        for names, key, text in (
            (compiled, "compiled", modules.COMPILED_OUTPUTS),
            (unexplained, "unexplained", modules.UNEXPLAINED_OUTPUTS),
        ):
            if not names or key in self._warned_outputs:
                continue
            self._warned_outputs.add(key)
            whole = names == ["<none>"]
            said = "the model's forward" if whole else ", ".join(names[:5])
            if len(names) > 5:
                said += f" and {len(names) - 5} more modules"
            one = whole or len(names) == 1
            words = {"them": "it" if one else "them", "their": "its" if one else "their"}
            warnings.warn(text.format(step=self._armed_step, modules=said, **words), stacklevel=4)
        said = rec.eval_warning(self._armed_step)
        if said is not None and "eval" not in self._warned_outputs:
            self._warned_outputs.add("eval")
            warnings.warn(said, stacklevel=4)
        said = rec.transform_warning(self._armed_step)
        if said is not None and "transforms" not in self._warned_outputs:
            self._warned_outputs.add("transforms")
            warnings.warn(said, stacklevel=4)

    def _finish(self, cap, loss, step: int, path: str) -> None:
        """Flushes and writes step ``step``'s log at ``path``, with its loss."""
        # The device is synchronised by this flush: reading a loss tensor
        # afterwards costs no sync of its own.
        cap.flush()
        value = _loss_value(loss)
        if value is not None:
            cap.note_loss(value)
        self._count = cap.finish()
        self._path = path
        self._paths[step] = path

    def _finish_in_thread(self, cap, loss, step: int, path: str) -> None:
        try:
            self._finish(cap, loss, step, path)
        except BaseException as e:  # re-raised by _complete
            self._finish_error = e

    def _uncaptured_before(self, step: int) -> tuple | None:
        """``(first, last)``: the steps right before ``step`` that this job
        ran (from ``first_step`` on) and its schedule did not capture, or
        None when the step before ``step`` was captured or not run."""
        last = step - 1
        first = last
        while first >= self.first_step and first not in self.steps:
            first -= 1
        return (first + 1, last) if first < last else None

    def _check_baseline(self) -> None:
        rank = _default_rank() if self.rank is None else self.rank
        try:
            d = _baseline.check(
                self.baseline, self._path, self._armed_step, rank, self.series, self.dump_dir, self.tolerances,
                self._baseline_said, self._uncaptured_before(self._armed_step),
            )  # fmt: skip
        except _baseline.BaselineError:
            self._done = True  # the job stops here, as at a Diverged
            raise
        if d is None:
            return
        self.diverged = d
        _baseline.log.warning("actdiff_capture: %s", d)
        if self.on_divergence == "raise":
            self._done = True
            raise d
        if self.on_divergence == "stop-capturing":
            self._done = True


class ActivationCaptureProfiler(Profiler):
    """Drop-in for TorchTitan's ``ActivationCaptureProfiler``
    (``agent_tooling/numerics_debugging/activation_tracer.py``): the same
    keyword-only constructor (``enabled``, ``model``, ``dump_dir``,
    ``capture_step``, 1-based) and lifecycle: ``__enter__`` arms when
    ``capture_step`` is 1, ``step()`` (after every training step) arms after
    step ``capture_step - 1`` and writes ``{dump_dir}/rank_{rank}_activations.log``
    after step ``capture_step``; ``__exit__`` disarms without writing.
    :func:`is_numerics_capture_active` is True while armed.

    The reference tracer's own options are accepted too (``min_numel``,
    ``op_filter``), and this agent's (``capture_steps``, ``rank``,
    ``excluded_ops``, ``device_path``, ``precision``, ``digests``, ``first_step``: see
    :class:`Profiler`).
    """

    def __init__(
        self,
        *,
        enabled: bool,
        model: nn.Module,
        dump_dir: str,
        capture_step: int | None = None,
        capture_steps=None,
        min_numel: int = DEFAULT_MIN_NUMEL,
        op_filter=None,
        rank: int | None = None,
        excluded_ops=None,
        device_path: bool = False,
        precision: str | None = None,
        digests: bool | None = None,
        level: str = "ops",
        baseline: str | None = None,
        tolerances=(),
        on_divergence: str = "raise",
        first_step: int = 1,
    ):
        self._configure(
            model, dump_dir, rank, _schedule(capture_step, capture_steps), min_numel, op_filter, excluded_ops,
            enabled, device_path, precision, digests, level, baseline, tolerances, on_divergence, first_step,
        )  # fmt: skip

    def __enter__(self) -> "ActivationCaptureProfiler":
        if self.enabled and self.first_step in self.steps and not self._done and self._step == self.first_step - 1:
            try:
                self._arm()
            except BaseException:
                self._forget()
                raise
        return self
