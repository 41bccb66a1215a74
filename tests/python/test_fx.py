"""The drop-in for TorchTitan's tracer: ActivationCaptureProfiler's
constructor and lifecycle, and the FX context protocol that TorchTitan's
traced trainer uses (patching.md of its numerics skill): a forward+backward
step traced into one FX graph, replayed node by node through an FX
interpreter that sets the context variables imported from actdiff_capture,
is captured with the same keys as the eager step."""

from __future__ import annotations

import os

import pytest
import torch
import torch.fx.traceback as fx_traceback
import torch.nn.functional as F
from torch.fx.experimental.proxy_tensor import make_fx

import actdiff_capture
from llama import Llama, batch
from logs import blocks


def loss_fn(logits, y):
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))


def trace_train_step(model):
    """The forward and backward of one step traced into one GraphModule, as
    TorchTitan's graph trainer does: make_fx under preserve_node_meta, every
    module's ops annotated with meta["custom"]["module_fqn"], backward nodes
    tagged autograd_backward and given their forward node's annotation and
    stack trace (matched by seq_nr)."""
    from torch._functorch._aot_autograd.logging_utils import setup_stacktrace_preservation_hooks_from_tensors

    names = {id(m): n for n, m in model.named_modules() if n}
    open_annotations = []

    def pre(module, args):
        if id(module) in names:
            a = fx_traceback.annotate({"module_fqn": names[id(module)]})
            a.__enter__()
            open_annotations.append(a)

    def post(module, args, out):
        if id(module) in names:
            open_annotations.pop().__exit__(None, None, None)

    params = dict(model.named_parameters())

    def step(params, x, y):
        loss = loss_fn(torch.func.functional_call(model, params, (x,)), y)
        setup_stacktrace_preservation_hooks_from_tensors([loss])
        return [loss, *torch.autograd.grad(loss, list(params.values()))]

    mod = torch.nn.modules.module
    hooks = [mod.register_module_forward_pre_hook(pre), mod.register_module_forward_hook(post)]
    try:
        with fx_traceback.preserve_node_meta(), torch.autograd.set_multithreading_enabled(False):
            gm = make_fx(step, record_stack_traces=True)(params, *batch(1))
    finally:
        for h in hooks:
            h.remove()
    forward = {}
    for n in gm.graph.nodes:
        if n.op == "call_function" and not n.meta.get("autograd_backward") and "seq_nr" in n.meta:
            forward.setdefault(n.meta["seq_nr"], n)
    for n in gm.graph.nodes:
        f = forward.get(n.meta.get("seq_nr")) if n.meta.get("autograd_backward") else None
        if f is not None and f is not n:
            for field in ("custom", "stack_trace"):
                if f.meta.get(field):
                    n.meta[field] = f.meta[field]
    assert sum(bool(n.meta.get("autograd_backward")) for n in gm.graph.nodes) > 100
    return gm, params


class TitanStyleInterpreter(torch.fx.Interpreter):
    """What TorchTitan's patch adds to graph_trainer/debug_utils.py, with the
    context variables and the parser imported from actdiff_capture."""

    def run_node(self, n):
        from actdiff_capture import (
            _current_module_name,
            _current_phase_override,
            _current_stack_frames,
            _parse_stack_trace,
        )

        tokens = []
        fqn = (n.meta.get("custom") or {}).get("module_fqn")
        if fqn:
            tokens.append(_current_module_name.set(fqn))
        if n.meta.get("stack_trace"):
            tokens.append(_current_stack_frames.set(_parse_stack_trace(n.meta["stack_trace"])))
        tokens.append(_current_phase_override.set("backward" if n.meta.get("autograd_backward") else "forward"))
        try:
            return super().run_node(n)
        finally:
            for t in reversed(tokens):
                t.var.reset(t)


def capture(path, run):
    with actdiff_capture.ActivationCaptureProfiler(enabled=True, model=MODEL, dump_dir=path, capture_step=1) as p:
        assert p.armed and actdiff_capture.is_numerics_capture_active()
        run()
        p.step()
    assert not actdiff_capture.is_numerics_capture_active()
    return blocks(os.path.join(path, "rank_0_activations.log"))[1]


torch.manual_seed(0)
MODEL = Llama(n_layers=2)


@pytest.fixture(scope="module")
def traced():
    return trace_train_step(MODEL)


@pytest.fixture(scope="module")
def eager(tmp_path_factory):
    x, y = batch(1)

    def run():
        loss_fn(MODEL(x), y).backward()
        MODEL.zero_grad(set_to_none=True)

    return capture(tmp_path_factory.mktemp("eager"), run)


VALUES = ("Shape", "L2 norm", "Min", "Max", "Mean", "Output hash", "Input hashes", "Input producers", "Phase")


def assert_like_eager(bl, eager):
    assert [k for k, _ in bl] == [k for k, _ in eager]
    # Every op has its module FQN, except the loss (outside every module,
    # `<none>` in eager too).
    none = [k for k, _ in bl if k.startswith("<none>/")]
    assert len(none) == 3 and all(k.split("_", 2)[-1] in ("_log_softmax", "nll_loss_backward", "_log_softmax_backward_data") for k in none), none
    for (k, f), (_, e) in zip(bl, eager):
        assert {v: f.get(v) for v in VALUES} == {v: e.get(v) for v in VALUES}, k
    # Forward ops inside modules: the same source line as in eager.
    fwd = [(k, f["Location"], e["Location"]) for (k, f), (_, e) in zip(bl, eager) if "Phase" not in f and not k.startswith("<none>")]
    assert fwd and all(a == b for _, a, b in fwd), [x for x in fwd if x[1] != x[2]][:5]


def test_traced_step_replayed_through_a_titan_style_interpreter(traced, eager, tmp_path):
    gm, params = traced
    x, y = batch(1)
    bl = capture(tmp_path, lambda: TitanStyleInterpreter(gm).run(params, x, y))
    assert_like_eager(bl, eager)
    assert any(k.startswith("layers.1.attention.wq/") and f.get("Phase") == "backward" for k, f in bl)


def test_traced_step_through_the_packaged_interpreter(traced, eager, tmp_path):
    gm, params = traced
    x, y = batch(1)
    assert_like_eager(capture(tmp_path, lambda: actdiff_capture.FQNInterpreter(gm).run(params, x, y)), eager)


def test_traced_step_called_directly(traced, eager, tmp_path):
    # gm(*inputs) without an interpreter: the FX nodes are found from the
    # generated code's frame; backward nodes get their phase from the metadata.
    gm, params = traced
    x, y = batch(1)
    assert_like_eager(capture(tmp_path, lambda: gm(params, x, y)), eager)


def test_parse_stack_trace():
    trace = (
        "Traceback (most recent call last):\n"
        '  File "/work/train.py", line 12, in main\n'
        "    loss = model(x)\n"
        '  File "/usr/lib/python3/site-packages/torch/nn/modules/module.py", line 1784, in _call_impl\n'
        "    return forward_call(*args, **kwargs)\n"
        '  File "/work/models/llama3/model.py", line 152, in forward\n'
        "    h = x + self.attention(self.attention_norm(x), table)\n"
    )
    frames = actdiff_capture._parse_stack_trace(trace)
    assert [(f.filename, f.lineno, f.name) for f in frames] == [
        ("/work/train.py", 12, "main"),
        ("/work/models/llama3/model.py", 152, "forward"),
    ]
    assert frames[0].line == "loss = model(x)"
    assert frames[-1].short_str() == "llama3/model.py:152"
    assert actdiff_capture.parse_stack_trace("no frames here") == []
    # A frame without its source line.
    f = actdiff_capture.parse_stack_trace('File "a/b/c.py", line 3, in f\nFile "a/b/d.py", line 4, in g')
    assert [(x.short_str(), x.line) for x in f] == [("b/c.py:3", None), ("b/d.py:4", None)]


def test_activation_capture_profiler_lifecycle(tmp_path):
    with pytest.raises(TypeError):
        actdiff_capture.ActivationCaptureProfiler(True, MODEL, str(tmp_path), 2)  # keyword-only, as the reference
    x, y = batch(1)
    p = actdiff_capture.ActivationCaptureProfiler(enabled=True, model=MODEL, dump_dir=str(tmp_path / "d"), capture_step=3)
    seen = []
    with p:
        for _ in range(4):
            seen.append((p.armed, actdiff_capture.is_numerics_capture_active()))
            loss_fn(MODEL(x), y).backward()
            MODEL.zero_grad(set_to_none=True)
            p.step()
    # Armed after step 2 (capture_step - 1), written after step 3.
    assert seen == [(False, False), (False, False), (True, True), (False, False)]
    assert os.listdir(tmp_path / "d") == ["rank_0_activations.log"]
    assert p.count == len(blocks(tmp_path / "d" / "rank_0_activations.log")[1]) > 100
    # capture_step=1: armed by __enter__ (not by the constructor); __exit__
    # disarms without writing.
    q = actdiff_capture.ActivationCaptureProfiler(enabled=True, model=MODEL, dump_dir=str(tmp_path / "e"))
    assert not q.armed
    with q:
        assert q.armed and actdiff_capture.is_numerics_capture_active()
    assert not q.armed and not actdiff_capture.is_numerics_capture_active()
    assert not (tmp_path / "e" / "rank_0_activations.log").exists()
    # Disabled: never armed.
    with actdiff_capture.ActivationCaptureProfiler(enabled=False, model=MODEL, dump_dir=str(tmp_path / "f")) as r:
        assert not r.armed
        r.step()
    assert not (tmp_path / "f" / "rank_0_activations.log").exists()


def test_module_fqn_from_node_metadata():
    from actdiff_capture import fx

    names = {101: "layers.0._checkpoint_wrapped_module.attention.wq"}
    stack = {"1": ("L['self'].layers.0", object), "101": ("L['self'].layers.0.attention.wq", object)}
    # The key is the module's id(): its named_modules() name, wrapper removed.
    assert fx.meta_fqn({"nn_module_stack": stack}, names) == "layers.0.attention.wq"
    # Keys that are no id of this model: Dynamo's path, normalised.
    paths = {
        "L['self'].layers['0'].attention": "layers.0.attention",
        "L['self'].layers.0._checkpoint_wrapped_module.ffn_norm": "layers.0.ffn_norm",
        "L['self']._orig_mod.output": "output",
        "L['self']": None,
    }
    for path, want in paths.items():
        assert fx.meta_fqn({"fwd_nn_module_stack": {"L__x": (path, object)}}, names) == want, path
    # TorchTitan's annotation wins over the module stack.
    assert fx.meta_fqn({"custom": {"module_fqn": "layers.3.moe"}, "nn_module_stack": stack}, names) == "layers.3.moe"
    assert fx.meta_fqn({}, names) is None
