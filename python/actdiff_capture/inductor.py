"""Module FQN, source line and phase for the ops that inductor-compiled code
dispatches.

Inductor turns a compiled graph into a Python wrapper (``call(args)`` in a
generated module) that calls two kinds of kernels:

- **extern kernels** (``extern_kernels.mm(a, b, out=buf)``, ``addmm``,
  ``bmm``, convolutions, ...): ATen ops, dispatched, so the capture mode
  sees them. Nothing at run time says which module they came from: the
  wrapper is not an FX ``GraphModule`` and has no module hooks.
- **fused kernels** (``cpp_fused_*`` / ``triton_*``): generated C++/Triton
  code that reads and writes buffers without dispatching any op. The
  capture cannot see them; the ops they replaced (norms, activations,
  dropout, residual adds) are absent from a compiled run's log, and the
  comparator reports them as only in the eager run.

:func:`install` adds one comment above each extern kernel call when
inductor generates the wrapper: ``# actdiff: {"fqn": ..., "loc": ...,
"bwd": ...}``, taken from the metadata of the FX nodes the kernel comes from
(its ``origins``: ``nn_module_stack`` for forward nodes,
``fwd_nn_module_stack`` for backward ones, ``stack_trace``,
``partitioner_tag``), the last of them in graph order that names a module.
:class:`WrapperSites` reads that comment back from the wrapper's source for
the line a dispatched op is called from. The comment is in the generated
source; a cache-key pass (:class:`_CacheKey`) keeps wrappers generated
without it from being reused, and :func:`install` turns inductor's FX graph
cache and AOTAutograd's cache off, whose keys do not hold module names.
"""

from __future__ import annotations

import json
import linecache
import weakref

import torch

from . import fx

MARK = "actdiff:"

_installed = False

# id(module) -> FQN of the modules of every model a Profiler captures: a
# kernel of a graph compiled for a submodule (``model.blocks[1].compile()``)
# has module paths relative to it (``fc1``); its ids name it in the model
# (``blocks.1.fc1``, trial 21 H1), as fx.GraphSites does for other graphs.
_module_names: dict = {}
# id(module) -> a weak reference to it: an entry whose module is gone is
# dropped, so that a freed module's id, reused by a module of a later
# model, does not keep the freed one's name (a flaky failure of
# test_a_compiled_submodules_kernels_are_named_in_the_model: a kernel of
# `blocks.1.mlp.proj` was keyed `mlp.proj`, its id naming another model's
# module, which the path did not agree with).
_module_refs: dict = {}


def note_model(model) -> None:
    """Adds ``model``'s modules to the names kernels' comments are given
    (``model.named_modules()``, as keys spell FQNs), after dropping those
    of modules that no longer exist; a module noted under two models keeps
    its first name."""
    if not isinstance(model, torch.nn.Module):
        return
    for key in [k for k, ref in _module_refs.items() if ref() is None]:
        del _module_refs[key]
        _module_names.pop(key, None)
    for name, m in model.named_modules():
        ref = _module_refs.get(id(m))
        if ref is not None and ref() is m:
            continue
        try:
            _module_refs[id(m)] = weakref.ref(m)
        except TypeError:  # a module that takes no weak reference: not kept
            continue
        _module_names[id(m)] = name


def _graph_order(node) -> int:
    graph = node.graph
    order = getattr(graph, "_actdiff_order", None)
    if order is None:
        order = {n: i for i, n in enumerate(graph.nodes)}
        try:
            graph._actdiff_order = order
        except AttributeError:
            pass
    return order.get(node, -1)


def origin_context(origins) -> dict | None:
    """{"fqn", "loc", "bwd"} of a kernel from its origin FX nodes: the
    module FQN of the last node in graph order that names one, the Location
    of the last node's stack trace, and whether the nodes are backward
    nodes. None when no node names a module or a location."""
    nodes = [n for n in origins if getattr(n, "op", None) == "call_function"]
    if not nodes:
        return None
    nodes.sort(key=_graph_order)
    fqn = loc = None
    bwd = False
    for n in reversed(nodes):
        f, l, b = fx.node_context(n, _module_names or None)
        bwd = bwd or b
        if fqn is None and f is not None:
            fqn = f
        if loc is None and l is not None:
            loc = l
    if fqn is None and loc is None:
        return None
    return {"fqn": fqn, "loc": loc, "bwd": bwd}


class _CacheKey:
    """A no-op post-grad pass whose ``uuid`` enters inductor's FX graph cache
    key, so a wrapper generated without the ``actdiff:`` comments (before
    :func:`install`) is not reused while they are wanted."""

    def __call__(self, graph) -> None:
        return None

    def uuid(self) -> str:
        return "actdiff-capture-origin-comments-1"


def _no_caches_by_code(config) -> None:
    """Turns off inductor's FX graph cache and AOTAutograd's cache (and
    their remote kinds) for this process. They key a compiled graph by its
    code, not by its nodes' module names, so a wrapper cached for another
    model of the same graph carries that model's FQNs in its ``actdiff:``
    comments: a new user's module ``b c`` was logged as ``b``, the name of
    an earlier compile's. Compiling takes longer in a capture run; every
    key names its own model's modules."""
    try:
        from torch._functorch import config as functorch_config
    except Exception:  # noqa: BLE001 (no functorch config: inductor's only)
        functorch_config = None
    for mod, name in (
        (config, "fx_graph_cache"),
        (config, "fx_graph_remote_cache"),
        (functorch_config, "enable_autograd_cache"),
        (functorch_config, "enable_remote_autograd_cache"),
    ):
        if mod is not None and getattr(mod, name, None):
            setattr(mod, name, False)


def install() -> bool:
    """Makes inductor write the ``actdiff:`` comment above each extern
    kernel call it generates from now on (idempotent). Returns False when
    this torch's inductor has no ``ExternKernel.codegen_comment`` (nothing
    is changed then: compiled extern kernels are keyed ``<none>``)."""
    global _installed
    if _installed:
        return True
    try:
        from torch._inductor import config, ir
    except Exception:  # noqa: BLE001 (no inductor in this build of torch)
        return False
    orig = getattr(ir.ExternKernel, "codegen_comment", None)
    if orig is None:
        return False

    def codegen_comment(self, wrapper, *args, **kwargs):
        orig(self, wrapper, *args, **kwargs)
        try:
            ctx = origin_context(getattr(self, "origins", ()) or ())
        except Exception:  # noqa: BLE001 (metadata of another shape: no comment)
            ctx = None
        if ctx is not None:
            wrapper.make_comment(f"{wrapper.comment} {MARK} {json.dumps(ctx, sort_keys=True)}")

    ir.ExternKernel.codegen_comment = codegen_comment
    _no_caches_by_code(config)
    try:
        from torch._inductor.custom_graph_pass import CustomGraphPass

        class CacheKey(_CacheKey, CustomGraphPass):
            pass

        if getattr(config, "post_grad_custom_post_pass", 0) is None:
            config.post_grad_custom_post_pass = CacheKey()
        elif getattr(config, "post_grad_custom_pre_pass", 0) is None:
            config.post_grad_custom_pre_pass = CacheKey()
    except Exception:  # noqa: BLE001 (older inductor: no cache-key pass)
        pass
    _installed = True
    return True


class WrapperSites:
    """Maps a line of an inductor wrapper's ``call`` to the ``actdiff:``
    comment above it, cached per (code object, line) for one capture."""

    def __init__(self):
        self.sites: dict = {}

    def lookup(self, frame):
        """(module FQN or None, Location or None, backward?) of the extern
        kernel call ``frame`` (a frame of an inductor wrapper) is running,
        or None when the lines above it carry no ``actdiff:`` comment."""
        code = frame.f_code
        key = (code, frame.f_lineno)
        if key in self.sites:
            return self.sites[key]
        ctx = None
        path = code.co_filename
        line = frame.f_lineno - 1
        while line > 0:
            text = linecache.getline(path, line).strip()
            if not text.startswith("#"):
                break
            i = text.find(MARK)
            if i >= 0:
                try:
                    d = json.loads(text[i + len(MARK) :])
                    ctx = (fx.clean_fqn(d.get("fqn")), d.get("loc"), bool(d.get("bwd")))
                except (ValueError, AttributeError):
                    ctx = None
                break
            line -= 1
        self.sites[key] = ctx
        return ctx
