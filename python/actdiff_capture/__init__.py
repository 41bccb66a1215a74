"""Per-op activation capture for PyTorch, in the log format `actdiff compare` reads.

Used like TorchTitan's ``ActivationCaptureProfiler``::

    import actdiff_capture
    prof = actdiff_capture.Profiler(model, "dump/numerics", capture_step=2)
    for step in ...:
        ...              # one training step (forward, backward, optimizer)
        prof.step()      # after every step

``step()`` counts steps; after step ``capture_step - 1`` (or at construction
when ``capture_step`` is 1) it arms a ``TorchDispatchMode`` and global module
hooks, and after step ``capture_step`` it writes
``{dump_dir}/rank_{rank}_activations.log`` and disarms.

What is captured follows the reference tracer
(``agent_tooling/numerics_debugging/activation_tracer.py``):

- every ATen op dispatched during the step, except ``excluded_ops``
  (views, copies, creation, indexing; those seen are listed in the header),
  whose result has a float32/float16/bfloat16 tensor of at least
  ``min_numel`` elements (and, with ``op_filter``, whose name contains one
  of its strings). Shape and stats describe the first such tensor; every
  tensor output gets an output hash, every tensor input an input hash;
- ops whose name ends in ``_`` (in-place) with any tensor argument or
  result, hash-only when they have no such result;
- key ``<module_fqn>/op_<seq>_<op>``: the innermost module in forward
  (global forward pre/post hooks); in backward the module whose forward
  built the running autograd node (the reference's grad_fn walk);
  ``<none>`` otherwise. ``seq`` counts per module;
- phase ``backward`` when an autograd node is running;
- ``Input producers``: the key of the captured op whose output was that very
  tensor object (identity, as DebugMode's tensor ids);
- ``Location``: the innermost frame outside torch internals and this
  package (backward ops: the forward op's location).

Input hashes of ops that mutate an argument (in-place and ``out=`` ops) are
taken before the op runs; other ops cannot change their inputs, so their
inputs are hashed after, and only when the op is captured. All statistics
and the writing are done by the Rust core (``actdiff_capture._native``).
"""

from __future__ import annotations

import os
import sys
import weakref

import torch
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from . import _native
from ._native import Capture, tensor_stats

__all__ = ["Profiler", "Capture", "tensor_stats", "EXCLUDED_OPS", "DEFAULT_MIN_NUMEL"]

DEFAULT_MIN_NUMEL = 1000

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
    }
)  # fmt: skip

_FLOATS = frozenset({torch.float32, torch.float16, torch.bfloat16})

# Frames never shown as a Location (torch plumbing and this package).
_FILTERED = (
    "/torch/nn/",
    "/torch/autograd/",
    "/torch/_ops.py",
    "/torch/_compile.py",
    "/torch/_dynamo/",
    "/torch/_tensor.py",
    "/torch/utils/_debug_mode",
    "/torch/utils/_python_dispatch.py",
    "/torch/utils/checkpoint.py",
    "/actdiff_capture/",
)


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


class _OpInfo:
    __slots__ = ("name", "excluded", "mutable", "inplace", "wanted")

    def __init__(self, func, excluded_ops, op_filter):
        self.name = _op_name(func)
        self.excluded = self.name in excluded_ops
        schema = getattr(func, "_schema", None)
        self.mutable = bool(schema is not None and schema.is_mutable)
        self.inplace = self.name.endswith("_")
        self.wanted = op_filter is None or any(f in self.name for f in op_filter)


class _Mode(TorchDispatchMode):
    """Records ops into a Rust ``Capture``; see the module docstring."""

    def __init__(self, prof: "Profiler", cap):
        super().__init__()
        self.p = prof
        self.cap = cap
        self.min_numel = prof.min_numel
        self.infos: dict = {}
        self.excluded: set = set()
        self.ids = _Ids()
        self.node_loc: dict = {}
        self.pending = None  # (outputs, location) of the last forward op
        self.file_ok: dict = {}

    def location(self):
        f = sys._getframe(1)
        ok = self.file_ok
        while f is not None:
            fn = f.f_code.co_filename
            good = ok.get(fn)
            if good is None:
                p = fn.replace("\\", "/")
                good = not any(s in p for s in _FILTERED)
                ok[fn] = good
            if good:
                parts = fn.replace("\\", "/").split("/")
                short = "/".join(parts[-2:]) if len(parts) >= 2 else fn
                return f"{short}:{f.f_lineno}"
            f = f.f_back
        return None

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if kwargs is None:
            kwargs = {}
        info = self.infos.get(func)
        if info is None:
            info = self.infos[func] = _OpInfo(func, self.p.excluded_ops, self.p.op_filter)
        if info.excluded:
            self.excluded.add(info.name)
            return func(*args, **kwargs)

        if self.pending is not None:
            outs_prev, loc_prev = self.pending
            self.pending = None
            for t in outs_prev:
                gf = t.grad_fn
                if gf is not None and gf not in self.node_loc:
                    self.node_loc[gf] = loc_prev

        raw_ins: list = []
        _leaves(args, raw_ins)
        if kwargs:
            _leaves(kwargs, raw_ins)
        ins = [_local(t) for t in raw_ins]
        # (not `None in ins`: that compares tensors with None through torch)
        readable = all(t is not None for t in ins)
        pre = None
        if info.mutable and ins and readable:
            pre = self.cap.hash_inputs(ins)

        out = func(*args, **kwargs)

        raw: list = []
        _leaves(out, raw)
        outs = [_local(t) for t in raw]
        if not all(t is not None for t in outs):
            readable = False
        node = torch._C._current_autograd_node()

        primary = None
        if readable and info.wanted:
            mn = self.min_numel
            for i, t in enumerate(outs):
                if t.dtype in _FLOATS and t.numel() >= mn:
                    primary = i
                    break
        captured = readable and (primary is not None or (info.inplace and bool(outs or ins)))

        if node is None:
            # Forward: remember where this op ran for the backward ops of the
            # autograd node its outputs get once this call returns (looked up
            # at the next dispatch). Outputs get a node when an input
            # requires grad (their own flag is not set yet down here).
            grads = bool(raw) and any(t.requires_grad for t in raw_ins)
            loc = self.location() if (captured or grads) else None
            if grads:
                self.pending = (raw, loc)
        else:
            loc = self.node_loc.get(node) if captured else None
            if loc is None and captured:
                loc = self.location()
        if not captured:
            return out

        if node is None:
            fqn = self.p._stack[-1] if self.p._stack else None
        else:
            fqn = self.p._grad_fn_to_module.get(node)
        ids = self.ids
        in_ids = [ids.get(t) for t in ins]
        out_ids = [ids.assign(t) for t in outs]
        self.cap.record(
            fqn,
            info.name,
            node is not None,
            loc,
            primary,
            outs,
            pre if pre is not None else ins,
            in_ids,
            out_ids,
        )
        return out


def _grad_fns(args) -> set:
    leaves: list = []
    _leaves(args, leaves)
    return {t.grad_fn for t in leaves if t.grad_fn is not None}


class Profiler:
    """Captures training step ``capture_step`` (1-based) of ``model``.

    Args:
        model: the model (module FQNs come from ``model.named_modules()``).
        dump_dir: folder of the log (created).
        rank: the log's rank; default: ``torch.distributed``'s rank when it
            is initialized, else 0.
        capture_step: the step to capture; ``step()`` is called after each.
        min_numel: smallest result captured with stats (default 1000).
        op_filter: optional set of op-name substrings (an allow list).
        excluded_ops: ops never captured (default ``EXCLUDED_OPS``).
        enabled: False makes every call a no-op.
        device_path: compute CPU tensors' stats with queued libtorch ops
            (the GPU path) instead of the fused Rust pass.
    """

    def __init__(
        self,
        model: nn.Module,
        dump_dir: str,
        *,
        rank: int | None = None,
        capture_step: int = 1,
        min_numel: int = DEFAULT_MIN_NUMEL,
        op_filter=None,
        excluded_ops=None,
        enabled: bool = True,
        device_path: bool = False,
    ):
        if int(capture_step) < 1:
            raise ValueError(f"capture_step is 1-based, got {capture_step}")
        self.model = model
        self.dump_dir = os.fspath(dump_dir)
        self.rank = rank
        self.capture_step = int(capture_step)
        self.min_numel = int(min_numel)
        self.op_filter = set(op_filter) if op_filter else None
        self.excluded_ops = frozenset(EXCLUDED_OPS if excluded_ops is None else excluded_ops)
        self.enabled = enabled
        self.device_path = device_path
        self.path: str | None = None  # the log, once written
        self.count: int | None = None  # its number of blocks
        self._step = 0
        self._done = False
        self._mode: _Mode | None = None
        self._handles: list = []
        self._stack: list = []
        self._grad_fn_to_module: dict = {}
        if self.enabled and self.capture_step <= 1:
            self._arm()

    # -- the ActivationCaptureProfiler protocol --------------------------------

    def __enter__(self) -> "Profiler":
        return self

    def __exit__(self, *exc) -> None:
        self._disarm()

    def step(self) -> None:
        """Call after every training step."""
        self._step += 1
        if not self.enabled or self._done:
            return
        if self._step == self.capture_step - 1:
            self._arm()
        elif self._step == self.capture_step:
            self._dump()

    @property
    def armed(self) -> bool:
        return self._mode is not None

    # -- internals --------------------------------------------------------------

    def _log_path(self) -> str:
        rank = self.rank
        if rank is None:
            dist = torch.distributed
            rank = dist.get_rank() if dist.is_available() and dist.is_initialized() else 0
        return os.path.join(self.dump_dir, f"rank_{rank}_activations.log")

    def _arm(self) -> None:
        if self._mode is not None:
            return
        names = {id(m): name for name, m in self.model.named_modules()}
        stack = self._stack
        g2m = self._grad_fn_to_module
        pending: dict = {}
        stack.clear()
        g2m.clear()

        def pre_hook(module, args):
            fqn = names.get(id(module))
            if fqn is None:
                return
            stack.append(fqn.replace("._checkpoint_wrapped_module", "") or None)
            pending[id(module)] = _grad_fns(args)

        def post_hook(module, args, output):
            fqn = names.get(id(module))
            if fqn is None:
                return
            if stack:
                stack.pop()
            inputs = pending.pop(id(module), set())
            fqn = fqn.replace("._checkpoint_wrapped_module", "")
            if not fqn:
                return  # the root: its ops are <none>, as the reference's
            outs: list = []
            _leaves(output, outs)
            for t in outs:
                if t.grad_fn is None:
                    continue
                todo = [t.grad_fn]
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

        mod = nn.modules.module
        self._handles = [
            mod.register_module_forward_pre_hook(pre_hook),
            mod.register_module_forward_hook(post_hook, always_call=True),
        ]
        self.path = self._log_path()
        cap = Capture(self.path, device_path=self.device_path)
        self._mode = _Mode(self, cap)
        self._mode.__enter__()

    def _disarm(self):
        mode, self._mode = self._mode, None
        for h in self._handles:
            h.remove()
        self._handles = []
        self._stack.clear()
        self._grad_fn_to_module.clear()
        if mode is not None:
            mode.__exit__(None, None, None)
            mode.node_loc.clear()
            mode.pending = None
        return mode

    def _dump(self) -> None:
        mode = self._disarm()
        if mode is None:
            return
        for op in mode.excluded:
            mode.cap.note_excluded(op)
        self.count = mode.cap.finish()
        self._done = True
