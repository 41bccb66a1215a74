"""The FX context protocol of TorchTitan's tracer, and FX node metadata.

Two ways a captured op learns the module FQN, source location and phase of
the FX node it runs for:

1. **Context variables**, set by an FX interpreter around each node (the
   protocol of TorchTitan's ``activation_tracer.py``, which the traced
   trainer's ``FQNInterpreter`` in ``graph_trainer/debug_utils.py`` sets, see
   ``patching.md`` in its numerics skill): :data:`_current_module_name`,
   :data:`_current_stack_frames` (a list of :class:`_StackFrame`, parsed
   from ``node.meta["stack_trace"]`` by :func:`_parse_stack_trace`) and
   :data:`_current_phase_override` (``"forward"`` / ``"backward"``).
   :func:`is_numerics_capture_active` tells the trainer when to replay
   through such an interpreter. The names (underscores included) are the
   reference's, so the patch works by importing them from ``actdiff_capture``.
   :class:`FQNInterpreter` is a ready-made interpreter that sets them.
2. **Generated graph code** (``torch.compile``'s graphs, or a traced graph
   called as ``gm(*inputs)``): the capture mode finds the frame of the
   ``GraphModule``'s generated ``forward`` and maps its line to the node
   (``GraphModule._lineno_map``); :func:`node_context` reads that node's
   metadata: ``custom["module_fqn"]`` (TorchTitan's annotation), else the
   innermost entry of ``nn_module_stack`` (forward nodes) or
   ``fwd_nn_module_stack`` (backward nodes of an AOT-autograd graph), else
   that of its last argument that has one (gradient-accumulation adds);
   ``stack_trace`` for the location;
   ``autograd_backward`` / ``partitioner_tag`` for the phase.
"""

from __future__ import annotations

import re
from contextvars import ContextVar
from dataclasses import dataclass

import torch

__all__ = [
    "FQNInterpreter",
    "StackFrame",
    "clean_fqn",
    "is_filtered_frame",
    "is_numerics_capture_active",
    "node_context",
    "parse_stack_trace",
    "set_numerics_capture_active",
]

# Frames never shown as a Location: torch plumbing and this package (the
# reference's `_is_filtered_frame` list, plus torch.fx's interpreter and
# code generation, which wrap every replayed node, and AOT autograd's and
# inductor's runtime wrappers: on the call that compiles, AOT autograd's own
# dispatch mode stands between an op and the compiled code that runs it).
FILTERED_FRAMES = (
    "/torch/nn/",
    "/torch/autograd/",
    "/torch/_ops.py",
    "/torch/_compile.py",
    "/torch/_dynamo/",
    "/torch/_functorch/",
    "/torch/_inductor/",
    "/torch/_tensor.py",
    "/torch/fx/",
    "/torch/utils/_debug_mode",
    "/torch/utils/_python_dispatch.py",
    "/torch/utils/checkpoint.py",
    "/actdiff_capture/",
    "activation_tracer.py",
    "graph_trainer/debug_utils.py",
)


def is_filtered_frame(path: str) -> bool:
    """True for a source file whose frames are never a Location (torch
    internals, this package, TorchTitan's tracer and FX interpreter)."""
    p = path.replace("\\", "/")
    return any(s in p for s in FILTERED_FRAMES)


def short_location(filename: str, lineno: int) -> str:
    """``dir/file.py:line``: the last two path parts, as the reference writes
    a Location."""
    parts = filename.replace("\\", "/").split("/")
    short = "/".join(parts[-2:]) if len(parts) >= 2 else filename
    return f"{short}:{lineno}"


@dataclass
class StackFrame:
    """One frame of a stack trace: file, line number (1-based), function and
    source line (None when the trace has none). Same fields and
    ``short_str()`` as the reference's ``_StackFrame``."""

    filename: str
    lineno: int
    name: str
    line: str | None = None

    def short_str(self) -> str:
        """The Location text: ``dir/file.py:line``."""
        return short_location(self.filename, self.lineno)


# `File "path", line N, in name`, then the source line unless the next line
# is another frame.
_FRAME_RE = re.compile(r'File "([^"]+)", line (\d+), in ([^\n]+)(?:\n(?![ \t]*File ")([^\n]*))?')


def parse_stack_trace(trace: str) -> list[StackFrame]:
    """The frames of a Python traceback text (``node.meta["stack_trace"]``,
    ``traceback.format_stack()``), outermost first, without filtered frames
    (:func:`is_filtered_frame`). Text that holds no ``File "...", line N, in
    f`` entry gives an empty list."""
    frames = []
    for m in _FRAME_RE.finditer(trace):
        path = m.group(1)
        if is_filtered_frame(path):
            continue
        src = (m.group(4) or "").strip()
        frames.append(StackFrame(path, int(m.group(2)), m.group(3).strip(), src or None))
    return frames


def clean_fqn(fqn: str | None) -> str | None:
    """A module FQN as keys spell it: activation-checkpoint wrappers,
    FSDP1's ``_fsdp_wrapped_module`` (trial 71: keys unlike FSDP2's and one
    process's) and ``torch.compile``'s ``_orig_mod`` removed; None for the
    root (empty)."""
    if not fqn:
        return None
    for w in _WRAPPED:
        fqn = fqn.replace("." + w, "").replace(w + ".", "")
    # The module a wrapper given as the model holds is the root (trial 64:
    # torch.compile(model) given to the Profiler named "_orig_mod" as a
    # compiled module, so no key matched it).
    if fqn in _WRAPPED:
        return None
    return fqn or None


#: The attribute names under which wrappers hold the module they wrap
#: (left out of module FQNs by :func:`clean_fqn`).
_WRAPPED = ("_checkpoint_wrapped_module", "_fsdp_wrapped_module", "_orig_mod")


# -- the context protocol (names as in TorchTitan's activation_tracer.py) ------

#: Module FQN of the FX node being replayed (set by an FX interpreter).
_current_module_name: ContextVar[str | None] = ContextVar("_current_module_name", default=None)
#: Stack frames of the FX node being replayed (a list of StackFrame).
_current_stack_frames: ContextVar[list | None] = ContextVar("_current_stack_frames", default=None)
#: "forward" or "backward" for the FX node being replayed.
_current_phase_override: ContextVar[str | None] = ContextVar("_current_phase_override", default=None)

_numerics_capture_active = False


def is_numerics_capture_active() -> bool:
    """True while a capture is armed (between the arming ``step()`` and the
    one that writes the log): the trainer should replay traced graphs through
    :class:`FQNInterpreter` then."""
    return _numerics_capture_active


def set_numerics_capture_active(active: bool) -> None:
    """Set the flag :func:`is_numerics_capture_active` returns (the profilers
    do it when they arm and disarm)."""
    global _numerics_capture_active
    _numerics_capture_active = bool(active)


# The reference's names for the same functions and class.
_StackFrame = StackFrame
_parse_stack_trace = parse_stack_trace
_clean_fqn = clean_fqn


class FQNInterpreter(torch.fx.Interpreter):
    """Replays a GraphModule node by node with the context variables set from
    each node's metadata, as TorchTitan's patch does for its traced trainer:
    module FQN from ``custom["module_fqn"]`` (else ``nn_module_stack``),
    stack frames from ``stack_trace``, phase from ``autograd_backward``."""

    def run_node(self, n: torch.fx.Node):
        meta = n.meta
        fqn = (meta.get("custom") or {}).get("module_fqn") or _stack_fqn(
            meta.get("nn_module_stack") or meta.get("fwd_nn_module_stack"), None
        )
        trace = meta.get("stack_trace")
        tokens = []
        if fqn:
            tokens.append(_current_module_name.set(fqn))
        if trace:
            tokens.append(_current_stack_frames.set(parse_stack_trace(trace)))
        tokens.append(_current_phase_override.set("backward" if _is_backward(meta) else "forward"))
        try:
            return super().run_node(n)
        finally:
            for t in reversed(tokens):
                t.var.reset(t)


# -- FX node metadata ------------------------------------------------------------

# The root of Dynamo's module path: the compiled forward's first argument,
# whatever its name (``L['self']``, ``L['mod']`` for ``def forward(mod, x)``,
# ``L['model']`` for a compiled function taking the model).
_ROOT_RE = re.compile(r"""^(?:L\[['"][A-Za-z_]\w*['"]\]|L__self__|self)(?:\.|$)""")
# A module whose name is no identifier: ``getattr(L['self'], 'b c')``.
_GETATTR_RE = re.compile(r"""getattr\(([^()]*?),\s*['"]([^'"]*)['"]\)""")
_ITEM_RE = re.compile(r"""(?:\._modules)?\[['"]?([^'"\]]+)['"]?\]""")


def _path_fqn(path: str) -> str | None:
    """``L['self'].layers['0'].attention`` (Dynamo's module path) →
    ``layers.0.attention``; ``getattr(L['self'], 'b c')`` → ``b c``; the
    root whatever the forward's first argument is named."""
    p = path.strip()
    while True:
        q = _GETATTR_RE.sub(r"\1.\2", p)
        if q == p:
            break
        p = q
    p = _ROOT_RE.sub("", p)
    p = _ITEM_RE.sub(r".\1", p).strip(".")
    return clean_fqn(p)


def _stack_fqn(stack, names: dict | None) -> str | None:
    """The innermost module of an ``nn_module_stack`` (an ordered dict,
    outermost first, of key → (path, class)). The key is the module's id()
    on current torch: looked up in ``names`` (id → FQN from
    ``model.named_modules()``) when given, and used when the path names the
    same module or a suffix of it (a graph compiled for a submodule has
    paths relative to it); else the path, normalised."""
    if not stack:
        return None
    try:
        key, val = next(reversed(stack.items()))
    except (AttributeError, StopIteration, TypeError):
        return None
    path = val[0] if isinstance(val, (tuple, list)) and val else val
    by_path = _path_fqn(path) if isinstance(path, str) else None
    if names is not None:
        try:
            fqn = clean_fqn(names.get(int(key)))
        except (TypeError, ValueError):
            fqn = None
        # An id is trusted only where the path agrees with it: a graph
        # compiled for an earlier model object keeps that object's ids, and
        # a freed module's id can be another module's now.
        if fqn is not None and (by_path is None or fqn == by_path or fqn.endswith("." + by_path)):
            return fqn
    return by_path


def _is_gradient_acc(meta: dict) -> bool:
    if meta.get("is_gradient_acc"):
        return True
    acc = getattr(torch.fx.traceback, "GRADIENT_ACC_SPECIAL_STACK", None)
    return bool(acc) and acc in (meta.get("stack_trace") or "")


def _is_backward(meta: dict) -> bool:
    return bool(meta.get("autograd_backward")) or meta.get("partitioner_tag") == "is_backward"


def meta_fqn(meta: dict, names: dict | None) -> str | None:
    """The module FQN an FX node's metadata names: ``custom["module_fqn"]``,
    else the innermost module of ``nn_module_stack`` / ``fwd_nn_module_stack``;
    None when it names none."""
    fqn = clean_fqn((meta.get("custom") or {}).get("module_fqn"))
    if fqn is None:
        fqn = _stack_fqn(meta.get("nn_module_stack") or meta.get("fwd_nn_module_stack"), names)
    return fqn


def node_context(node: torch.fx.Node, names: dict | None, fqn_of=None):
    """(module FQN or None, Location or None, backward?) of an FX node, from
    its metadata (see the module docstring). ``names``: id(module) → FQN.
    ``fqn_of(node)``: the FQN of another node; a gradient-accumulation add
    (AOT autograd's, traced by make_fx), whose metadata names no module,
    takes that of its last argument that has one: the contribution added
    last, whose autograd node runs the add in eager mode."""
    meta = node.meta
    fqn = meta_fqn(meta, names)
    if fqn is None and fqn_of is not None and _is_gradient_acc(meta):
        fqn = fqn_of(node)
    loc = None
    trace = meta.get("stack_trace")
    if trace:
        frames = parse_stack_trace(trace)
        if frames:
            loc = frames[-1].short_str()
    return fqn, loc, _is_backward(meta)


class GraphSites:
    """Maps the frames of GraphModules' generated code to their nodes'
    context, cached per (code object, line) for one capture."""

    def __init__(self, names: dict):
        self.names = names
        self.graphs: dict = {}  # code object -> (gm, nodes) or None
        self.sites: dict = {}  # (code, line) -> node_context(...) or None
        self.fqns: dict = {}  # node -> module FQN or None
        self.contexts: dict = {}  # node -> node_context(...)

    def fqn_of(self, node, depth: int = 0):
        """The node's module FQN, else its last argument's that has one
        (recursively, a few levels)."""
        if node in self.fqns:
            return self.fqns[node]
        fqn = meta_fqn(node.meta, self.names)
        if fqn is None and depth < 8:
            for a in reversed(node.args):
                if isinstance(a, torch.fx.Node) and a.op == "call_function":
                    fqn = self.fqn_of(a, depth + 1)
                    if fqn is not None:
                        break
        self.fqns[node] = fqn
        return fqn

    def node(self, node):
        """node_context(...) of a node (cached)."""
        ctx = self.contexts.get(node, False)
        if ctx is False:
            ctx = self.contexts[node] = node_context(node, self.names, self.fqn_of)
        return ctx

    def lookup(self, frame):
        """node_context(...) of the node whose line ``frame`` (a frame of
        generated GraphModule code) is running, or None."""
        code = frame.f_code
        key = (code, frame.f_lineno)
        if key in self.sites:
            return self.sites[key]
        g = self.graphs.get(code, False)
        if g is False:
            gm = frame.f_locals.get("self")
            g = None
            if isinstance(gm, torch.fx.GraphModule) and getattr(gm, "_lineno_map", None):
                g = (gm, list(gm.graph.nodes))
            self.graphs[code] = g
        ctx = None
        if g is not None:
            gm, nodes = g
            # Generated lines are numbered from the `def forward` line.
            idx = gm._lineno_map.get(frame.f_lineno - code.co_firstlineno)
            if idx is not None and 0 <= idx < len(nodes):
                ctx = self.node(nodes[idx])
        self.sites[key] = ctx
        return ctx
