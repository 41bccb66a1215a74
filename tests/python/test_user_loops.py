"""Training loops as a new user writes them, around a small MLP (a new
user's trial of the step series): capture settings that differ between
two runs, a model whose every forward op is below ``min_numel``, an eval
forward after the optimizer step, a NumPy loss, a single-step baseline.
Each test fails without the change it guards."""

from __future__ import annotations

import json
import re
import subprocess
import types
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import actdiff_capture
from actdiff_capture.baseline import BaselineError
from logs import blocks


class Small(torch.nn.Module):
    """16 -> 32 -> 2 residual blocks of 32 -> 4: every activation of a
    batch of 4 has fewer than 1000 elements."""

    def __init__(self):
        super().__init__()
        torch.manual_seed(0)
        self.inp = torch.nn.Linear(16, 32)
        self.blocks = torch.nn.ModuleList(torch.nn.Linear(32, 32) for _ in range(2))
        self.head = torch.nn.Linear(32, 4)

    def forward(self, x):
        x = torch.relu(self.inp(x))
        for b in self.blocks:
            x = torch.relu(b(x)) + x
        return self.head(x)


class Checkpointed(Small):
    """:class:`Small` with each residual block under activation
    checkpointing (``torch.utils.checkpoint``, non-reentrant, as
    TorchTitan's and most users' wrappers are): backward recomputes it."""

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint

        x = torch.relu(self.inp(x))
        for b in self.blocks:
            x = checkpoint(lambda x, b=b: torch.relu(b(x)) + x, x, use_reentrant=False)
        return self.head(x)


class Normed(Small):
    """:class:`Small` with a BatchNorm after each residual block's
    Linear; ``checkpointed`` puts each block under activation
    checkpointing, whose recomputation updates the running statistics a
    second time."""

    def __init__(self, checkpointed=False):
        super().__init__()
        self.norms = torch.nn.ModuleList(torch.nn.BatchNorm1d(32) for _ in range(2))
        self.checkpointed = checkpointed

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint

        x = torch.relu(self.inp(x))
        for b, n in zip(self.blocks, self.norms):
            f = lambda x, b=b, n=n: torch.relu(n(b(x))) + x  # noqa: E731
            x = checkpoint(f, x, use_reentrant=False) if self.checkpointed else f(x)
        return self.head(x)


def train(dump, steps=4, *, perturb_at=None, lr_change_at=None, eval_forward=False, checkpointed=False, model=None,
          data_edit_at=None, **prof_kw):
    """``steps`` AdamW steps of :class:`Small`, every step captured at full
    precision (``prof_kw`` overrides). ``perturb_at=S`` changes one input
    element of step S's batch (before the loop: no op of it is captured);
    ``lr_change_at=S`` raises the learning rate before step S;
    ``eval_forward`` runs a forward under ``torch.no_grad()`` after each
    optimizer step (``"eval"``: in eval mode); ``data_edit_at=S`` scales
    ``inp.weight`` through ``.data`` after step S's optimizer step (a hand-written
    weight decay); ``checkpointed`` trains :class:`Checkpointed`;
    ``model`` trains that model instead. Returns the profiler's warnings."""
    torch.set_num_threads(1)
    if model is None:
        model = Checkpointed() if checkpointed else Small()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(1)
    data = [(torch.randn(4, 16, generator=g), torch.randn(4, 4, generator=g)) for _ in range(steps)]
    if perturb_at is not None:
        x, y = data[perturb_at - 1]
        x = x.clone()
        x[0, 0] += 1e-3
        data[perturb_at - 1] = (x, y)
    kw = {"capture_steps": range(1, steps + 1), "precision": "full", **prof_kw}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        prof = actdiff_capture.Profiler(model, dump, **kw)
        for step, (x, y) in enumerate(data, start=1):
            if step == lr_change_at:
                for group in opt.param_groups:
                    group["lr"] = 3e-2
            loss = F.mse_loss(model(x), y)
            loss.backward()
            opt.step()
            opt.zero_grad()
            if step == data_edit_at:
                model.inp.weight.data.mul_(0.99)
            if eval_forward == "eval":
                model.eval()
                with torch.no_grad():
                    model(x)
                model.train()
            elif eval_forward:
                with torch.no_grad():
                    model(x)
            prof.step(loss=loss)
    return [str(w.message) for w in caught if "actdiff_capture" in str(w.message)]


def compare(actdiff_bin, a, b, out, *args):
    r = subprocess.run(
        [actdiff_bin, "compare", str(a), str(b), "-o", str(out), *args], capture_output=True, text=True
    )
    return r, json.loads((out / "summary.json").read_text())


def step_result(s, step):
    return next(x for x in s["step_results"] if x["step"] == step)


def test_logs_captured_with_other_settings_are_not_compared(actdiff_bin, tmp_path):
    """Two identical trainings, one captured with ``min_numel=1``: its small
    ops are numbered among the others, and the compare said 'step 1
    diverges first' (a step-count ``add_`` paired with another op). Each
    log's header now states its filter, and the compare refuses the pair."""
    train(tmp_path / "a", steps=2)
    train(tmp_path / "b", steps=2, min_numel=1)
    train(tmp_path / "c", steps=2)
    h, _ = blocks(tmp_path / "a" / "step_1" / "rank_0_activations.log")
    assert "Capture filter: min_numel=1000" in h, h
    h, _ = blocks(tmp_path / "b" / "step_1" / "rank_0_activations.log")
    assert "Capture filter: min_numel=1" in h, h
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "ab")
    assert r.returncode == 2, r.stdout + r.stderr
    assert "`min_numel=1000`" in r.stderr and "`min_numel=1`" in r.stderr, r.stderr
    assert s["first_diverging_step"] is None, s["first_diverging_step"]
    # The terminal does not count them as compared ("2 steps compared (0 agree)").
    assert "0 steps compared (0 agree); 2 not compared: steps 1-2 (input errors, on stderr)" in r.stdout, r.stdout
    # Said once, not again per step (trial 17 L4).
    assert "step 1: not compared" not in r.stdout and "step 1: input error" not in r.stdout, r.stdout
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "c", tmp_path / "ac", "--bitwise")
    assert r.returncode == 0, r.stdout + r.stderr


def test_a_model_below_min_numel_is_told_what_was_left_out(actdiff_bin, tmp_path):
    """Every forward op of a small model is below the default ``min_numel``:
    a per-op capture left out the whole forward with no word, and a changed
    input element was named as entering at a backward ``mm``. The profiler
    now warns, the header counts the ops left out, and the compare says the
    difference may come from one of them; with ``min_numel=0`` the first
    cause is the first layer's op and nothing is said."""
    said = train(tmp_path / "a")
    assert any("ops of the model's forward were not captured because every floating-point result had fewer than min_numel=1000" in w for w in said), said
    train(tmp_path / "b", perturb_at=3)
    h, _ = blocks(tmp_path / "a" / "step_1" / "rank_0_activations.log")
    below = [x for x in h if x.startswith("Ops below min numel: ")]
    assert below and int(below[0].split(": ")[1]) > 0, h
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "ab")
    assert s["first_diverging_step"] == 3, r.stdout
    headline = step_result(s, 3)["headline"]
    assert "ops smaller than min_numel=1000 elements were not captured: it may come from one" in headline, headline
    assert "smaller than min_numel=1000 elements were not captured" in r.stdout, r.stdout

    assert train(tmp_path / "a0", min_numel=0) == []
    train(tmp_path / "b0", perturb_at=3, min_numel=0)
    r, s = compare(actdiff_bin, tmp_path / "a0", tmp_path / "b0", tmp_path / "ab0")
    assert s["first_diverging_step"] == 3, r.stdout
    headline = step_result(s, 3)["headline"]
    assert "`inp/op_0_addmm` (a differing input: input 1)" in headline and "min_numel" not in headline, headline


@pytest.mark.parametrize("level", ["modules", "ops"])
def test_an_eval_forward_after_the_optimizer_step_stays_forward(actdiff_bin, tmp_path, level):
    """A forward under ``torch.no_grad()`` after ``optimizer.step()`` (an
    eval, a logging pass) came after the step's last backward record, so it
    was read as the optimizer's phase, and at level='modules' a learning
    rate changed at step 3 was named as diverging first at the eval's
    ``inp`` output, before the parameter records read at ``prof.step()``.
    Its records now say ``Phase: forward``, the parameters are read when the
    optimizer step returns, and the first divergence is a parameter."""
    min_numel = {"min_numel": 0} if level == "ops" else {}
    train(tmp_path / "a", eval_forward=True, level=level, **min_numel)
    train(tmp_path / "b", eval_forward=True, level=level, lr_change_at=3, **min_numel)
    _, bl = blocks(tmp_path / "a" / "step_1" / "rank_0_activations.log")
    keys = [k for k, _ in bl]
    if level == "modules":
        # forward outputs, gradients, parameters, then the eval's outputs
        params = [i for i, (k, f) in enumerate(bl) if not k.endswith(("_output", "_grad"))]
        evals = [i for i, (k, f) in enumerate(bl) if k.endswith("_output") and i > params[0]]
        assert params and evals and max(params) < min(evals), keys
        assert all(bl[i][1].get("Phase") == "forward" for i in evals), [bl[i] for i in evals]
    else:
        evals = [k for k, f in bl if f.get("Phase") == "forward"]
        assert any(k.startswith("inp/") and k.endswith("_addmm") for k in evals), evals
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "ab")
    assert s["first_diverging_step"] == 3, r.stdout
    rank = next(x for x in s["ranks"] if x["step"] == 3)
    first = rank["first_divergence"]
    assert first["phase"] == "optimizer", first
    if level == "modules":
        assert not first["key1"].endswith("_output"), first


def test_a_numpy_loss_is_a_loss(tmp_path):
    """``prof.step(loss=np.float32(...))`` was refused ('got float32') while
    ``np.float64`` passed; any real scalar or one-element array is a loss."""
    model = Small()
    prof = actdiff_capture.Profiler(model, tmp_path, capture_steps=range(1, 4), level="modules")
    for loss in (np.float32(0.5), np.array([0.25]), 2):
        model(torch.randn(4, 16)).sum().backward()
        prof.step(loss=loss)
    losses = [
        [float(x.split(": ")[1]) for x in blocks(tmp_path / f"step_{s}" / "rank_0_activations.log")[0] if x.startswith("Loss:")]
        for s in (1, 2, 3)
    ]
    assert losses == [[0.5], [0.25], [2.0]], losses
    with pytest.raises(ValueError, match="got str"):
        prof.step(loss="0.5")


def test_a_single_step_baseline_against_a_series_says_why_it_is_missing(tmp_path):
    """A baseline captured with ``capture_steps=3`` (an int: the reference's
    layout) checked by a run with ``capture_steps=[3]`` (a series) said only
    that ``step_3/...`` does not exist."""
    train(tmp_path / "blessed", capture_steps=3, level="modules")
    with pytest.raises(BaselineError, match=r"capture_steps=3 \(an int\)"):
        train(tmp_path / "run", capture_steps=[3], level="modules", baseline=str(tmp_path / "blessed"))


class TupleHead(Small):
    """:class:`Small` whose head returns ``(indices, logits)``: an integer
    tensor first."""

    def forward(self, x):
        z = super().forward(x)
        return z.argmax(-1), z


def test_a_module_output_is_every_tensor_of_it(actdiff_bin, tmp_path):
    """A module returning ``(argmax, logits)`` was recorded by its first
    tensor only: a changed input left its record a bitwise match (the
    argmax did not move), and the cause was named at its caller. Every
    tensor of an output is now in its record (an Output hash and digest
    each; stats of the first floating one)."""

    def train_tuple(dump, perturb):
        torch.set_num_threads(1)
        model = TupleHead()
        opt = torch.optim.SGD(model.parameters(), lr=1e-2)
        g = torch.Generator().manual_seed(1)
        x = torch.randn(4, 16, generator=g)
        if perturb:
            x[0, 0] += 1e-3
        prof = actdiff_capture.Profiler(model, dump, capture_steps=[1], level="modules", precision="full")
        idx, z = model(x)
        z.square().mean().backward()
        opt.step()
        prof.step()
        return idx

    a = train_tuple(tmp_path / "a", False)
    b = train_tuple(tmp_path / "b", True)
    assert torch.equal(a, b)  # the first tensor of the output did not move
    _, bl = blocks(tmp_path / "a" / "step_1" / "rank_0_activations.log")
    root = dict(bl)["<none>/op_0_output"]
    assert len(root["Output hash"].split(", ")) == 2 and len(root["Output digest"].split(", ")) == 2, root
    assert root["Shape"].startswith("torch.Size([4, 4]), Dtype: torch.float32"), root
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "ab", "--bitwise")
    rank = s["ranks"][0]
    assert rank["first_divergence"]["key1"] == "inp/op_0_output", rank["first_divergence"]
    assert rank["counts"]["diff"] >= 5, rank["counts"]  # inp, both blocks, head's and the root's outputs


def test_a_parameter_changed_after_the_optimizer_step_is_said_at_that_step(actdiff_bin, tmp_path):
    """A clamp of the parameters after ``optimizer.step()`` at step 3 (before
    ``prof.step()``) was found only at step 4 at level='modules' (the
    parameters are read when the optimizer step returns). A parameter whose
    version counter moved since is recorded again at ``prof.step()``: the
    clamped run diverges at step 3."""

    def train_clamp(dump, clamp_at):
        torch.set_num_threads(1)
        model = Small()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        g = torch.Generator().manual_seed(1)
        prof = actdiff_capture.Profiler(model, dump, capture_steps=range(1, 5), level="modules", precision="full")
        for step in range(1, 5):
            F.mse_loss(model(torch.randn(4, 16, generator=g)), torch.zeros(4, 4)).backward()
            opt.step()
            opt.zero_grad()
            if step == clamp_at:
                with torch.no_grad():
                    for p in model.parameters():
                        p.clamp_(-0.05, 0.05)
            prof.step()

    train_clamp(tmp_path / "a", None)
    train_clamp(tmp_path / "b", 3)
    _, bl = blocks(tmp_path / "b" / "step_3" / "rank_0_activations.log")
    def weights(bl):
        return [k for k, _ in bl if k.startswith("inp/") and k.endswith("_weight")]

    assert weights(bl) == ["inp/op_3_weight", "inp/op_5_weight"], [k for k, _ in bl]  # read twice
    _, bl = blocks(tmp_path / "a" / "step_3" / "rank_0_activations.log")
    assert weights(bl) == ["inp/op_3_weight"], [k for k, _ in bl]
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "ab")
    assert s["first_diverging_step"] == 3, r.stdout


def test_per_op_options_at_module_level_are_warned_about(tmp_path):
    """``min_numel``, ``op_filter`` and ``excluded_ops`` select ops: a
    module-level profiler ignored them without a word."""
    with pytest.warns(UserWarning, match="min_numel, op_filter apply to level='ops' only"):
        actdiff_capture.Profiler(Small(), tmp_path, capture_steps=[2], level="modules", min_numel=5000, op_filter={"mm"})
    with pytest.warns(UserWarning, match="min_numel applies to level='ops' only"):
        actdiff_capture.Profiler(Small(), tmp_path, capture_steps=[2], level="modules", min_numel=5000)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        actdiff_capture.Profiler(Small(), tmp_path, capture_steps=[2], level="modules")


def test_a_baseline_check_says_each_engine_warning_once(tmp_path, capfd):
    """A baseline captured at the default precision, checked by a run at
    full precision: the engine's two warnings (compared to print precision;
    digests on one side only) were printed on stderr at every step, in
    run1/run2 words. Each is now one UserWarning that names the baseline."""
    train(tmp_path / "blessed", level="modules", precision=None)
    capfd.readouterr()
    said = train(tmp_path / "run", level="modules", baseline=str(tmp_path / "blessed"))
    err = capfd.readouterr().err
    assert "warning: rank 0" not in err, err
    precision = [w for w in said if "baseline check (run1: the baseline, run2: this run)" in w and "full-precision" in w]
    assert len(precision) == 1, said


@pytest.mark.parametrize("level", ["ops", "modules"])
def test_activation_checkpointing_in_one_run_is_no_divergence(actdiff_bin, tmp_path, level):
    """Turning activation checkpointing on changes no number, and the
    compare said 'step 1 diverges first' at the recomputation's extra rows
    (at the per-op level with a warning that they were not a numeric
    difference; at the module level the recomputed outputs were written as
    forward, with no word). The module level now writes them in the
    backward phase, the compare flags one run's recomputation not gating
    (``recomputed``) and says so, and a real change is still found at its
    step."""
    kw = {"level": level, **({"min_numel": 0} if level == "ops" else {})}
    train(tmp_path / "a", steps=3, **kw)
    train(tmp_path / "b", steps=3, checkpointed=True, **kw)
    train(tmp_path / "c", steps=3, checkpointed=True, lr_change_at=3, **kw)
    if level == "modules":
        _, bs = blocks(tmp_path / "b" / "step_1" / "rank_0_activations.log")
        recomputed = [k for k, f in bs if k.startswith("blocks.") and k.endswith("_output")
                      and f.get("Phase") == "backward"]
        assert len(recomputed) == 2, [(k, f.get("Phase")) for k, f in bs]
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "ab", "--bitwise")
    assert r.returncode == 0, r.stdout + r.stderr
    assert s["first_diverging_step"] is None
    for rank in s["ranks"]:
        c = rank["counts"]
        assert c["only2"] > 0 and c["recomputed"] == c["only2"] and c["gating"] == 0, c
    assert "recomputed in backward in one run only, by activation checkpointing or a layout gathering parameters again (shown, not gating)" in r.stdout, r.stdout
    assert "activation checkpointing's recomputation in run2 only" in r.stderr, r.stderr
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "c", tmp_path / "ac", "--bitwise")
    assert r.returncode == 1, r.stdout + r.stderr
    assert s["first_diverging_step"] == 3, s["first_diverging_step"]


class RMSNorm(torch.nn.Module):
    """A hand-written RMSNorm: ``pow``, ``mean``, ``add``, ``rsqrt``,
    ``mul`` (Llama's)."""

    def __init__(self, dim):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return self.w * (x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6))


class RMSNormBlock(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.norm = RMSNorm(dim)
        self.fc = torch.nn.Linear(dim, dim)

    def forward(self, x):
        return x + self.fc(self.norm(x))


class RMSNormed(torch.nn.Module):
    """Two :class:`RMSNormBlock` s, each under activation checkpointing
    when ``checkpointed``."""

    def __init__(self, checkpointed):
        super().__init__()
        torch.manual_seed(0)
        self.checkpointed = checkpointed
        self.blocks = torch.nn.ModuleList(RMSNormBlock(32) for _ in range(2))
        self.head = torch.nn.Linear(32, 4)

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint

        for b in self.blocks:
            x = checkpoint(b, x, use_reentrant=False) if self.checkpointed else b(x)
        return self.head(x)


def test_checkpointing_an_rmsnorm_block_is_no_divergence(actdiff_bin, tmp_path):
    """Trial 28 (HF Llama's ``gradient_checkpointing_enable()``): the
    recomputed ``x.pow(2)`` of an RMSNorm was re-paired by the lineage
    with the other run's backward ``pow`` (held out of the passes, it was
    not held out of the re-pairing), and the compare named an origin with
    "inputs agree" in a norm whose every value was equal."""
    for name, checkpointed in (("plain", False), ("ckpt", True)):
        model = RMSNormed(checkpointed)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
        prof = actdiff_capture.Profiler(model, tmp_path / name, capture_steps=[1], precision="full", min_numel=0)
        g = torch.Generator().manual_seed(1)
        x, y = torch.randn(8, 32, generator=g), torch.randint(0, 4, (8,), generator=g)
        F.cross_entropy(model(x), y).backward()
        opt.step()
        opt.zero_grad()
        prof.step()
        prof.close()
    r, s = compare(actdiff_bin, tmp_path / "plain", tmp_path / "ckpt", tmp_path / "out", "--bitwise")
    assert r.returncode == 0, r.stdout + r.stderr
    c = s["ranks"][0]["counts"]
    assert c["gating"] == 0 and c["only1"] == 0 and c["only2"] > 0 and c["recomputed"] == c["only2"], c


def test_batchnorm_statistics_updated_twice_by_checkpointing_are_found_at_module_level(actdiff_bin, tmp_path):
    """Checkpointing a block with a BatchNorm recomputes its forward in
    backward, and the recomputation updates the running statistics a
    second time: every number of the step agrees, the model's state does
    not. The module level recorded no buffers and the compare exited 0; it
    now records each persistent buffer as the step left it (BatchNorm
    updates them without moving their version counters, so each step
    reads them), and the compare names the first running statistic."""
    kw = {"level": "modules"}
    train(tmp_path / "a", steps=2, model=Normed(), **kw)
    train(tmp_path / "a2", steps=2, model=Normed(), **kw)
    train(tmp_path / "b", steps=2, model=Normed(checkpointed=True), **kw)
    _, bs = blocks(tmp_path / "a" / "step_1" / "rank_0_activations.log")
    keys = [k for k, _ in bs]
    for name in ("running_mean", "running_var", "num_batches_tracked"):
        assert [k for k in keys if k.startswith("norms.0/") and k.endswith("_" + name)], keys
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "a2", tmp_path / "aa", "--bitwise")
    assert r.returncode == 0, r.stdout + r.stderr
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "ab", "--bitwise")
    assert r.returncode == 1, r.stdout + r.stderr
    assert s["first_diverging_step"] == 1, s["first_diverging_step"]
    first = step_result(s, 1)
    assert "diverges first at `norms.0/op_5_running_mean`" in first["headline"], first
    assert first["loss1"] == first["loss2"], first


def test_buffers_are_recorded_before_an_evaluation_pass_after_the_optimizer(actdiff_bin, tmp_path):
    """A BatchNorm's momentum changed, with an evaluation pass (eval mode,
    ``no_grad``) after each optimizer step: the running statistics the
    training forward left are recorded before the evaluation's outputs, so
    the first differing record is a running statistic, not the evaluation
    forward's BatchNorm output (trial 12). A forward in training mode
    after the optimizer updates them again: they are read again at
    ``prof.step()``."""
    kw = {"level": "modules"}
    moved = Normed()
    moved.norms[0].momentum = 0.2
    train(tmp_path / "a", steps=2, model=Normed(), eval_forward="eval", **kw)
    train(tmp_path / "b", steps=2, model=moved, eval_forward="eval", **kw)
    _, bs = blocks(tmp_path / "a" / "step_1" / "rank_0_activations.log")
    keys = [k for k, _ in bs]
    stats = [i for i, k in enumerate(keys) if k.endswith("_running_mean")]
    evals = [i for i, (k, f) in enumerate(bs) if k.endswith("_output") and f.get("Phase") == "forward"]
    assert len(stats) == 2 and evals and max(stats) < min(evals), keys
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "ab")
    assert r.returncode == 1, r.stdout + r.stderr
    first = step_result(s, 1)
    assert "diverges first at `norms.0/op_" in first["headline"] and "_running_mean`" in first["headline"], first
    # In training mode (no model.eval()), read again at prof.step().
    train(tmp_path / "c", steps=1, model=Normed(), eval_forward=True, **kw)
    _, cs = blocks(tmp_path / "c" / "step_1" / "rank_0_activations.log")
    assert len([k for k, _ in cs if k.endswith("_running_mean")]) == 4, [k for k, _ in cs]


def test_sparse_gradients_are_recorded_at_module_level(actdiff_bin, tmp_path):
    """``nn.Embedding(sparse=True)`` gives a sparse gradient, and the module
    level's ``prof.step()`` raised from libtorch ('Could not run aten::min
    ... SparseCPU'), losing the steps' logs. A sparse gradient is now
    recorded as its coalesced values and indices: identical runs agree
    bitwise, and a token changed at step 2 is found at step 2."""
    torch.set_num_threads(1)

    class Bag(torch.nn.Module):
        def __init__(self):
            super().__init__()
            torch.manual_seed(0)
            self.emb = torch.nn.Embedding(50, 16, sparse=True)
            self.fc = torch.nn.Linear(16, 4)

        def forward(self, t):
            return self.fc(self.emb(t).mean(1))

    def run(dump, perturb_at=None):
        model = Bag()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        g = torch.Generator().manual_seed(1)
        prof = actdiff_capture.Profiler(model, str(dump), capture_steps=range(1, 4), level="modules", precision="full")
        for step in range(1, 4):
            t = torch.randint(0, 50, (4, 8), generator=g)
            if step == perturb_at:
                t[0, 0] = (t[0, 0] + 1) % 50
            F.cross_entropy(model(t), torch.zeros(4, dtype=torch.long)).backward()
            opt.step()
            opt.zero_grad()
            prof.step()

    run(tmp_path / "a")
    run(tmp_path / "b")
    run(tmp_path / "c", perturb_at=2)
    _, bs = blocks(tmp_path / "a" / "step_1" / "rank_0_activations.log")
    (fields,) = [f for k, f in bs if k == "emb/op_1_weight_grad"]
    assert len(fields["Output hash"].split(",")) == 2, fields  # values, indices
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "ab", "--bitwise")
    assert r.returncode == 0, r.stdout + r.stderr
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "c", tmp_path / "ac", "--bitwise")
    assert r.returncode == 1, r.stdout + r.stderr
    assert s["first_diverging_step"] == 2, s["first_diverging_step"]
    # One step's terminal: the first differing record, not a count of
    # 'causes' (a module-level log records no inputs to trace).
    r = subprocess.run(
        [actdiff_bin, "compare", str(tmp_path / "a" / "step_2"), str(tmp_path / "c" / "step_2"), "-o", str(tmp_path / "r")],
        capture_output=True,
        text=True,
    )
    assert "rank 0: first differing record: emb/op_0_output" in r.stdout, r.stdout
    assert "more cause" not in r.stdout and "trace back to it" not in r.stdout, r.stdout


class MethodCheckpointed(torch.nn.Module):
    """A block that checkpoints a method of its own (``checkpoint(self.inner,
    x)``), whose gelu runs outside any submodule."""

    def __init__(self, reentrant: bool):
        super().__init__()
        self.fc1 = torch.nn.Linear(16, 32)
        self.fc2 = torch.nn.Linear(32, 16)
        self.reentrant = reentrant

    def inner(self, x):
        return self.fc2(F.gelu(self.fc1(x)))

    def forward(self, x):
        from torch.utils.checkpoint import checkpoint

        return checkpoint(self.inner, x, use_reentrant=self.reentrant) + x


@pytest.mark.parametrize("reentrant", [False, True])
def test_recomputed_ops_of_a_checkpointed_method_keep_its_module(tmp_path, reentrant):
    """Recomputed by activation checkpointing, an op of the block itself
    (the gelu between ``fc1`` and ``fc2``) is filed under the block, as in
    its forward, with either ``use_reentrant`` (trial 13 F4: without
    reentrance it was filed under ``blocks.0.fc2``, the module whose
    backward asked for the recomputation)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(MethodCheckpointed(reentrant), torch.nn.Linear(16, 4))
    with actdiff_capture.Profiler(model, tmp_path, capture_step=1, min_numel=0) as prof:
        model(torch.randn(4, 16, requires_grad=True)).sum().backward()
        prof.step()
    text = (tmp_path / "rank_0_activations.log").read_text()
    gelus = re.findall(r"^\[([^\]]*/op_\d+_gelu)\]$", text, re.M)
    assert len(gelus) == 2, gelus  # the forward's and the recomputation's
    assert all(k.startswith("0/op_") for k in gelus), gelus


def test_an_op_in_the_backward_s_final_callbacks_is_backward(tmp_path):
    """An op that runs in the autograd engine's final callbacks, after the
    last node (FSDP2 reduce-scatters the root's gradients there), is
    recorded ``Phase: backward``: no node runs, yet the backward does. It
    was recorded as a forward or optimizer op by chance (the CI run of stop
    44: two identical FSDP2 runs differed there)."""
    torch.manual_seed(0)
    model = Small()
    seen = []

    def reduce_grads():
        seen.append(model.head.weight.grad.repeat(40, 1) * 0.5)  # 4*32*40 elements

    def queue(g):
        torch.autograd.Variable._execution_engine.queue_callback(reduce_grads)
        return g

    model.head.weight.register_hook(queue)
    with actdiff_capture.Profiler(model, tmp_path, capture_step=1) as prof:
        model(torch.randn(8, 16)).sum().backward()
        prof.step()
    assert len(seen) == 1
    _, rows = blocks(tmp_path / "rank_0_activations.log")
    muls = [(k, f) for k, f in rows if k.endswith("_mul")]
    assert len(muls) == 1, [k for k, _ in rows]
    assert muls[0][1].get("Phase") == "backward", muls


def test_a_freed_gradient_s_memory_is_not_the_model_s(monkeypatch):
    """After a backward, an op outside every module is the optimizer's when
    it touches a parameter or gradient, known by data address. A gradient
    freed since (FSDP2 frees its unsharded gradients after the copy-in)
    left its address to a fresh tensor, which was then taken as the
    model's: by the allocator's choice, two identical runs filed FSDP2's
    last reduce-scatter under different phases (stop 44's CI). Addresses
    are faked here so the reuse is certain."""
    from actdiff_capture import capture

    fake = {}
    monkeypatch.setattr(capture, "_address", lambda t: fake.get(id(t), 0))
    model = torch.nn.Linear(4, 4)
    model.weight.grad = torch.ones(4, 4)
    fake[id(model.weight)] = 100
    fake[id(model.weight.grad)] = 200
    mode = types.SimpleNamespace(p=types.SimpleNamespace(model=model), grad_addresses=None)
    touches = capture._Mode.touches_the_model
    alias = torch.zeros(4, 4)
    fake[id(alias)] = 200
    assert touches(mode, [alias], [])  # the gradient lives there
    model.weight.grad = None  # freed: its memory is the allocator's again
    fresh = torch.zeros(4, 4)
    fake[id(fresh)] = 200
    assert not touches(mode, [], [fresh])
    weight_view = torch.zeros(4)
    fake[id(weight_view)] = 100
    assert touches(mode, [weight_view], [])


def test_a_batch_rebuilt_with_set_is_not_recorded(tmp_path):
    """A DataLoader with workers rebuilds each batch it receives with
    ``set_`` (``torch/_utils.py``'s ``_rebuild_tensor``), in whichever step
    the batch arrives: prefetching put 0 to 6 ``set_`` rows in a step from
    run to run, and two identical runs diverged at ``<none>/op_0_set_``
    (trial 23 F2). ``set_`` computes nothing: it is left out with the
    reference's infrastructure ops, and the batch is the input of the
    first op that reads it."""
    torch.manual_seed(0)
    model = Small()
    src = torch.randn(64, 16)
    with actdiff_capture.Profiler(model, tmp_path, capture_step=1, min_numel=0) as prof:
        x = torch.empty(0).set_(src.untyped_storage(), 0, src.shape, src.stride())
        model(x).sum().backward()
        prof.step()
    head, rows = blocks(tmp_path / "rank_0_activations.log")
    assert rows and not any(k.endswith("_set_") for k, _ in rows), [k for k, _ in rows]
    first = rows[0]
    assert first[0] == "inp/op_0_addmm", first
    assert "set_" in next(h for h in head if h.startswith("Excluded ops dispatched:")), head


def test_views_of_unwritten_memory_are_not_recorded(tmp_path):
    """FSDP2's mixed precision all-gather input, in one process: an
    ``empty`` buffer split by ``split_with_sizes`` and filled by
    ``_foreach_copy_``. The parts held whatever the memory did and were
    recorded; the copy's destinations were hashed as its inputs (trial 23
    F1: two identical runs always differed). The parts are not recorded
    and the copy reads only its sources."""
    torch.manual_seed(0)
    model = Small()
    with actdiff_capture.Profiler(model, tmp_path, capture_step=1, min_numel=0) as prof:
        params = [model.inp.weight.detach(), model.head.weight.detach()]
        flat = torch.empty(sum(p.numel() for p in params), dtype=torch.bfloat16)
        parts = torch.split(flat, [p.numel() for p in params])
        torch._foreach_copy_(parts, [p.reshape(-1) for p in params])
        model(torch.randn(4, 16)).sum().backward()
        prof.step()
    _, rows = blocks(tmp_path / "rank_0_activations.log")
    keys = [k for k, _ in rows]
    assert not any(k.endswith("_split_with_sizes") for k in keys), keys
    (copy,) = [f for k, f in rows if k.endswith("_foreach_copy_")]
    assert len(copy["Input hashes"].split(", ")) == 2, copy
    assert len(copy["Output hash"].split(", ")) == 2, copy


def test_a_module_level_series_says_what_it_cannot_see_before_its_first_step(actdiff_bin, tmp_path):
    """At level="modules", a parameter scaled through ``.data`` after step
    2's optimizer step is recorded by no hook: step 2's records agree and
    step 3's forward differs first. The series said "the runs agree from
    step 1 through step 2" and nothing else (trial 24 F1); it now says
    what the level cannot see there and to re-capture both steps per op,
    which finds step 2 (the ``mul_`` of ``.data`` is an op)."""
    train(tmp_path / "a", level="modules")
    train(tmp_path / "b", level="modules", data_edit_at=2)
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "ab")
    assert s["first_diverging_step"] == 3, r.stdout
    said = "step 2's records agree, its parameters after the optimizer step included, and step 3 first differs in its forward"
    lines = r.stdout.splitlines()
    assert said in lines[2] and 're-capture steps 2 and 3 at level="ops"' in lines[2], r.stdout
    # A changed setting in the forward (a temperature, an activation) is
    # named first among what the level cannot tell apart (trial 26 F3:
    # only the batch, the random state and `.data` were).
    assert "from a change to the forward computation at step 3" in lines[2], r.stdout
    train(tmp_path / "ao", steps=3, capture_steps=[2, 3])
    train(tmp_path / "bo", steps=3, capture_steps=[2, 3], data_edit_at=2)
    r, s = compare(actdiff_bin, tmp_path / "ao", tmp_path / "bo", tmp_path / "abo")
    assert s["first_diverging_step"] == 2, r.stdout
    assert "step 2 diverges first" in r.stdout and "mul_" in r.stdout and said[:20] not in r.stdout, r.stdout
    # A batch changed at step 3 gets the same line (its batch is one of the
    # causes it names); an agreeing run none.
    train(tmp_path / "c", level="modules", perturb_at=3)
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "c", tmp_path / "ac")
    assert s["first_diverging_step"] == 3 and "step 3's batch" in r.stdout, r.stdout


def test_an_entry_names_the_parameter_that_differs(actdiff_bin, tmp_path):
    """A parameter initialised differently (one block's weight scaled)
    enters the first op that reads it as a differing input: the verdict
    names the parameter, from the capture's ``Input parameters:`` line
    (trial 26 F5: "a differing input: input 1" and nothing about which
    tensor it is). Ops that read no parameter carry no such line."""
    train(tmp_path / "a", steps=1, min_numel=0)
    scaled = Small()
    with torch.no_grad():
        scaled.blocks[1].weight.mul_(1.01)
    train(tmp_path / "b", steps=1, min_numel=0, model=scaled)
    _, rows = blocks(tmp_path / "a" / "step_1" / "rank_0_activations.log")
    rows = dict(rows)
    # addmm(bias, x, weight.t()): the bias, then the weight through its view.
    assert rows["blocks.1/op_0_addmm"]["Input parameters"] == "blocks.1.bias;;blocks.1.weight"
    assert "Input parameters" not in rows["<none>/op_0_relu"]
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "ab")
    assert r.returncode == 1, r.stdout
    assert "the parameter blocks.1.weight" in r.stdout.splitlines()[1], r.stdout


def test_an_fsdp2_local_shard_edited_after_the_optimizer_is_recorded_at_module_level(actdiff_bin, tmp_path):
    """FSDP2 (``fully_shard``), ``level="modules"``: a parameter's local
    shard changed in place through ``to_local()`` after
    ``optimizer.step()`` moves the shard's version counter, not the
    DTensor's, and went unseen: the step that made the change was said to
    agree, "its parameters after the optimizer step included" (trial 29).
    A one-process gloo group."""
    import socket

    import torch.distributed as dist
    from torch.distributed.fsdp import fully_shard

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        for name, edit in (("a", False), ("b", True)):
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
            fully_shard(model)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
            prof = actdiff_capture.Profiler(model, tmp_path / name, capture_steps=range(1, 4), level="modules",
                                            precision="full")
            g = torch.Generator().manual_seed(1)
            for step in range(1, 4):
                model(torch.randn(4, 8, generator=g)).sum().backward()
                opt.step()
                opt.zero_grad()
                if edit and step == 2:
                    with torch.no_grad():
                        model[0].weight.to_local()[0, 0] += 0.01
                prof.step()
            prof.close()
    finally:
        dist.destroy_process_group()
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "ab")
    assert r.returncode == 1, r.stdout + r.stderr
    assert s["first_diverging_step"] == 2, r.stdout
    assert "`0/op_5_weight` (only in b)" in r.stdout, r.stdout


def test_an_in_place_parameter_edit_after_the_optimizer_step_is_named(actdiff_bin, tmp_path):
    """An in-place edit of a parameter after ``optimizer.step()`` (a clamp
    or a hand-written decay before ``prof.step()``) is captured after
    ``step()`` returned: the capture wrote neither
    ``Parameters:`` nor ``Input parameters:``, and the verdict said
    ``<none>/op_38_add_ (only in b)`` with no parameter (trial 29)."""
    for name, edit in (("a", False), ("b", True)):
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 4))
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        prof = actdiff_capture.Profiler(model, tmp_path / name, capture_steps=[1], precision="full", min_numel=0)
        model(torch.randn(4, 8, generator=torch.Generator().manual_seed(1))).sum().backward()
        opt.step()
        opt.zero_grad()
        if edit:
            with torch.no_grad():
                model[0].weight.add_(0.01)
        prof.step()
        prof.close()
    _, rows = blocks(tmp_path / "b" / "step_1" / "rank_0_activations.log")
    last_key, last = rows[-1]
    assert last_key.endswith("_add_"), (last_key, last)
    assert last["Input parameters"] == "0.weight", last
    r, _ = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "ab")
    assert r.returncode == 1, r.stdout
    assert f"`{last_key}` (only in b; it changes the parameter 0.weight in place)" in r.stdout, r.stdout
