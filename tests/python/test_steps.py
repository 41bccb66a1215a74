"""Step series (issue 24) on ``usermodel.TinyGPT``: ``capture_steps=``
writes ``step_S/rank_R_activations.log`` with ``Step:`` and ``Loss:``
header lines, steps outside the schedule run disarmed, and ``actdiff
compare`` on two series names the first step where they part: a changed
token of step 3's batch, a learning rate changed at step 3; identical runs
are bitwise equal over every step."""

from __future__ import annotations

import json
import os
import re
import subprocess
import warnings

import pytest

import torch
import torch.nn.functional as F

import actdiff_capture
from logs import blocks
from usermodel import VOCAB, TinyGPT, batches


def run(
    dump, steps=4, schedule=None, *, change_token_at=None, lr_change_at=None, probe=None, dropout_seed=None, **prof_kw
):
    """Trains ``steps`` AdamW steps of TinyGPT (dropout on), capturing
    ``schedule`` (default: every step) at full precision into ``dump``,
    with the loss passed to ``prof.step``. ``change_token_at=S`` changes
    one token of step S's batch; ``lr_change_at=S`` sets the learning rate
    to 3e-2 before step S. ``probe(prof, step)`` is called after each
    ``prof.step``. ``dropout_seed``: torch's generator reseeded after the
    model is made (the same initial weights, other dropout masks).
    Returns the profiler."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = TinyGPT(dropout=0.1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
    if dropout_seed is not None:
        torch.manual_seed(dropout_seed)
    sched = range(1, steps + 1) if schedule is None else schedule
    prof = actdiff_capture.Profiler(model, dump, capture_steps=sched, precision="full", **prof_kw)
    for step, idx in enumerate(batches(steps), start=1):
        if step == change_token_at:
            idx = idx.clone()
            idx[0, 3] = (idx[0, 3] + 1) % VOCAB
        if step == lr_change_at:
            for g in opt.param_groups:
                g["lr"] = 3e-2
        logits = model(idx[:, :-1])
        loss = F.cross_entropy(logits.reshape(-1, VOCAB), idx[:, 1:].reshape(-1))
        loss.backward()
        opt.step()
        opt.zero_grad()
        prof.step(loss=loss)
        if probe is not None:
            probe(prof, step)
    return prof


def compare(actdiff_bin, a, b, out, *args):
    r = subprocess.run(
        [actdiff_bin, "compare", str(a), str(b), "-o", str(out), *args],
        capture_output=True,
        text=True,
    )
    assert r.returncode in (0, 1), r.stdout + r.stderr
    return r, json.loads((out / "summary.json").read_text())


def header(path):
    lines = []
    for line in path.read_text().splitlines():
        if line.startswith("="):
            return lines
        lines.append(line)
    return lines


def statistics_on_training_thread(monkeypatch, sync: bool) -> None:
    """The module level's statistics on the training thread
    (``ACTDIFF_CAPTURE_SYNC=1``) or on its worker (the default) for the
    profilers made after this."""
    if sync:
        monkeypatch.setenv("ACTDIFF_CAPTURE_SYNC", "1")
    else:
        monkeypatch.delenv("ACTDIFF_CAPTURE_SYNC", raising=False)


def test_schedule_writes_step_folders_and_disarms_between(tmp_path):
    armed = {}

    def probe(prof, step):
        armed[step] = (prof.armed, sum(len(m._forward_hooks) for m in prof.model.modules()))

    prof = run(tmp_path, steps=5, schedule=[1, 3], probe=probe)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_1", "step_3"]
    assert set(prof.paths) == {1, 3}
    h = header(tmp_path / "step_3" / "rank_0_activations.log")
    assert "Step: 3" in h and "Precision: full" in h, h
    loss = [line for line in h if line.startswith("Loss: ")]
    assert len(loss) == 1 and 0 < float(loss[0][6:]) < 10, h
    # Armed (hooks on the modules) only for the step about to be captured.
    assert armed == {1: (False, 0), 2: (True, armed[2][1]), 3: (False, 0), 4: (False, 0), 5: (False, 0)}
    assert armed[2][1] > 0


def test_a_scheduled_step_never_reached_leaves_no_folder_on_exit(tmp_path):
    torch.manual_seed(0)
    model = TinyGPT()
    with actdiff_capture.Profiler(model, tmp_path, capture_steps=[1, 2, 3]) as prof:
        for step, idx in enumerate(batches(2), start=1):
            model(idx[:, :-1]).sum().backward()
            prof.step()
        assert prof.armed, "step 3 is armed"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_1", "step_2"]


def test_an_int_keeps_the_reference_layout(tmp_path):
    run(tmp_path, steps=2, schedule=2)
    assert [p.name for p in tmp_path.iterdir()] == ["rank_0_activations.log"]
    h = header(tmp_path / "rank_0_activations.log")
    assert not any(line.startswith("Step:") for line in h), h


def test_bad_schedules_are_refused(tmp_path):
    m = TinyGPT()
    with pytest.raises(ValueError, match="not both"):
        actdiff_capture.Profiler(m, tmp_path, capture_step=1, capture_steps=[1])
    with pytest.raises(ValueError, match="1-based"):
        actdiff_capture.Profiler(m, tmp_path, capture_steps=[0, 1])
    with pytest.raises(ValueError, match="iterable"):
        actdiff_capture.Profiler(m, tmp_path, capture_steps="12")
    # A float or a bool among the steps is refused, not truncated (trial
    # 22: [2.5] captured step 2, [True, 3] steps 1 and 3); each error names
    # the argument given.
    for steps, bad in (([2.5], "2.5"), ([2, 2.9], "2.9"), ([True, 3], "True")):
        with pytest.raises(ValueError, match=rf"capture_steps must be whole step numbers \(ints\), got {bad}"):
            actdiff_capture.Profiler(m, tmp_path, capture_steps=steps)
    with pytest.raises(ValueError, match="capture_step must be an int, got 2.5"):
        actdiff_capture.Profiler(m, tmp_path, capture_step=2.5)
    assert actdiff_capture.Profiler(m, tmp_path / "t", capture_steps=[torch.tensor(3), 4]).series
    prof = actdiff_capture.Profiler(m, tmp_path / "x", capture_steps=[1])
    with pytest.raises(ValueError, match="one-element"):
        prof.step(loss=torch.ones(2))
    assert prof.armed, "a refused loss changes nothing"
    prof.step(loss=1.5)
    assert "Loss: 1.5e+00" in header(tmp_path / "x" / "step_1" / "rank_0_activations.log")


def test_identical_runs_are_bitwise_equal_over_every_step(actdiff_bin, tmp_path):
    run(tmp_path / "a")
    run(tmp_path / "b")
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "rep", "--bitwise")
    assert r.returncode == 0, r.stdout + r.stderr
    assert s["steps"] == [1, 2, 3, 4] and s["first_diverging_step"] is None
    assert all(rk["bitwise"]["all"] for rk in s["ranks"]), "every paired row bitwise identical"
    # The series says so, as one step's summary does (trial 20 F6).
    assert "rows match, every one bitwise identical" in r.stdout, r.stdout


def test_a_changed_token_at_step_3_is_found_at_step_3(actdiff_bin, tmp_path):
    run(tmp_path / "a")
    run(tmp_path / "b", change_token_at=3)
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "rep")
    assert r.returncode == 1
    assert s["first_diverging_step"] == 3, r.stdout
    # Full precision: steps 1-2 are bitwise identical, and said so (trial
    # 20 F6, trial 28).
    assert "the runs are bitwise identical from step 1 through step 2; step 3 diverges first" in r.stdout, r.stdout
    step3 = next(x for x in s["step_results"] if x["step"] == 3)
    # The batch is the model's input: the embedding is where it enters.
    assert "`tok/op_0_embedding`" in step3["headline"], step3["headline"]
    assert step3["loss1"] != step3["loss2"]
    losses = {x["step"]: (x["loss1"], x["loss2"]) for x in s["step_results"]}
    assert losses[1][0] == losses[1][1] and losses[2][0] == losses[2][1]


def test_a_learning_rate_changed_at_step_3_parts_in_step_3s_optimizer(actdiff_bin, tmp_path):
    run(tmp_path / "a")
    run(tmp_path / "b", lr_change_at=3)
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "rep")
    assert r.returncode == 1
    assert s["first_diverging_step"] == 3, r.stdout
    rank = next(x for x in s["ranks"] if x["step"] == 3)
    # Forward and backward of step 3 agree; the update is the first change.
    assert rank["first_divergence"]["phase"] == "optimizer", rank["first_divergence"]
    assert rank["root_causes"]["first_divergence_forward"] is None


def test_module_level_records_outputs_gradients_and_parameters(tmp_path):
    active = []
    prof = run(tmp_path, steps=2, level="modules", probe=lambda p, s: active.append(actdiff_capture.is_numerics_capture_active()))
    assert not any(active), "no dispatch mode, no FX capture context"
    head, bl = blocks(tmp_path / "step_2" / "rank_0_activations.log")
    assert "Level: modules" in "".join(head) and "Step: 2" in "".join(head), head
    keys = [k for k, _ in bl]
    fields = dict(bl)
    # Forward outputs first (the root's is <none>), then gradients in
    # backward, then the parameters after the optimizer.
    assert "blocks.0.attn.qkv/op_0_output" in keys and "<none>/op_0_output" in keys, keys
    grads = [k for k in keys if k.endswith("_grad")]
    def role(k):
        fqn, op = k.rsplit("/", 1)
        return fqn + "/" + op.split("_", 2)[2]

    params = {role(k) for k in keys if k.endswith(("_weight", "_bias"))}
    assert "blocks.0.attn.qkv/weight" in params and "tok/weight" in params, params
    assert len(grads) == len(params) == sum(1 for _ in TinyGPT().parameters()), (grads, params)
    assert all(fields[k].get("Phase") == "backward" for k in grads)
    assert keys.index(grads[-1]) < min(keys.index(k) for k in keys if k.endswith(("_weight", "_bias")))
    assert prof.count == len(bl)


class InPlaceNet(torch.nn.Module):
    """fc1's output is changed in place by the ReLU right after fc1's
    forward hook ran."""

    def __init__(self):
        super().__init__()
        self.fc1 = torch.nn.Linear(256, 1024)
        self.act = torch.nn.ReLU(inplace=True)
        self.fc2 = torch.nn.Linear(1024, 64)

    def forward(self, x):
        return self.fc2(self.act(self.fc1(x)))


def test_module_level_off_the_training_thread_records_what_training_saw(actdiff_bin, tmp_path, monkeypatch):
    """The module level computes CPU statistics on a worker thread while
    training goes on; in-place changes made right after a record (an
    in-place ReLU on a module's output, gradients scaled in place after
    backward and zeroed in place, parameters changed by the optimizer and
    clamped in place at the start of the next step) do not reach the log: it is bitwise the log of the capture on the training
    thread (ACTDIFF_CAPTURE_SYNC=1)."""

    def train(dump, sync):
        statistics_on_training_thread(monkeypatch, sync)
        torch.set_num_threads(1)
        torch.manual_seed(0)
        model = InPlaceNet()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        prof = actdiff_capture.Profiler(model, dump, capture_steps=range(1, 4), level="modules", precision="full")
        for _ in range(3):
            with torch.no_grad():
                for p in model.parameters():
                    p.clamp_(-0.05, 0.05)  # at the start of a step: in place, no optimizer
            model(torch.randn(512, 256)).square().mean().backward()
            for p in model.parameters():
                p.grad.mul_(-3.0)  # after backward, before the optimizer: in place
            opt.step()
            opt.zero_grad(set_to_none=False)  # in place too
            prof.step()
        return prof

    on_thread = train(tmp_path / "sync", sync=True)
    off_thread = train(tmp_path / "async", sync=False)
    assert on_thread._worker is None and off_thread._worker is not None
    _, bl = blocks(tmp_path / "async" / "step_2" / "rank_0_activations.log")
    fc1 = dict(bl)["fc1/op_0_output"]
    assert float(fc1["Min"]) < 0, "fc1's output before the in-place ReLU"
    r, s = compare(actdiff_bin, tmp_path / "sync", tmp_path / "async", tmp_path / "rep", "--bitwise")
    assert r.returncode == 0 and s["first_diverging_step"] is None, r.stdout
    assert s["steps"] == [1, 2, 3] and s["counts"]["match"] == 3 * len(bl), s["counts"]


def test_module_level_records_changes_through_data_that_start_late_as_training_saw(actdiff_bin, tmp_path, monkeypatch):
    """Parameters and gradients changed through ``.data`` (a tensor with a
    version counter of its own: nothing tells the capture) only from step 3
    on (a weight decay by hand, a gradient scaled by hand) are recorded as
    the optimizer and backward left them: the log is bitwise the capture on
    the training thread's (ACTDIFF_CAPTURE_SYNC=1). A background reader that
    trusted its first step's probe recorded step 2's parameters with step
    3's decay, and the scaled gradients, without a warning (a new user's
    trial; reverted)."""

    def train(dump, sync):
        statistics_on_training_thread(monkeypatch, sync)
        torch.set_num_threads(1)
        torch.manual_seed(0)
        model = InPlaceNet()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        prof = actdiff_capture.Profiler(model, dump, capture_steps=range(1, 6), level="modules", precision="full")
        for step in range(1, 6):
            if step >= 3:
                for p in model.parameters():
                    p.data.mul_(0.99)
            model(torch.randn(512, 256)).square().mean().backward()
            if step >= 3:
                for p in model.parameters():
                    p.grad.data.mul_(0.5)
            opt.step()
            opt.zero_grad()
            prof.step()
        return prof

    train(tmp_path / "sync", sync=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # nothing to warn about: the records hold
        train(tmp_path / "async", sync=False)
    r, s = compare(actdiff_bin, tmp_path / "sync", tmp_path / "async", tmp_path / "rep", "--bitwise")
    assert r.returncode == 0 and s["first_diverging_step"] is None, r.stdout
    assert s["steps"] == [1, 2, 3, 4, 5]


def test_module_level_keeps_its_hooks_over_consecutive_steps_only(tmp_path):
    """Consecutive captured steps go on with one recorder (its hooks
    registered once, not once a step, and never twice); a step outside the
    schedule runs with no hook on any module or parameter."""
    seen = {}

    def probe(prof, step):
        hooks = sum(len(m._forward_hooks) for m in prof.model.modules())
        grad_hooks = sum(len(p._post_accumulate_grad_hooks or {}) for p in prof.model.parameters())
        seen[step] = (prof._modules, hooks, grad_hooks)

    run(tmp_path, steps=6, schedule=[1, 2, 3, 5], probe=probe, level="modules")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["step_1", "step_2", "step_3", "step_5"]
    n_modules = sum(1 for _ in TinyGPT().modules())
    # Armed for steps 2 and 3 by the recorder of step 1 itself.
    assert seen[1][0] is not None and seen[1][0] is seen[2][0]
    assert seen[1][1:] == seen[2][1:] and seen[1][1] == n_modules and seen[1][2] > 0
    # Step 4 is not captured: no hooks after step 3; step 5 gets a new recorder.
    assert seen[3] == (None, 0, 0) and seen[5] == (None, 0, 0) and seen[6] == (None, 0, 0)
    assert seen[4][0] is not None and seen[4][0] is not seen[1][0] and seen[4][1] == n_modules


class Scale(torch.nn.Module):
    def forward(self, x):
        return x * 1.5


class Flip(torch.nn.Module):
    """Forward only, cheap next to its records (the worker falls behind):
    fc's output is changed in place right after its hook, then scaled by
    a chain of modules; fc's weight flips sign in place after each step's
    parameter record."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(64, 1024)
        self.act = torch.nn.ReLU(inplace=True)
        self.scales = torch.nn.Sequential(*(Scale() for _ in range(12)))

    def forward(self, x):
        return self.scales(self.act(self.fc(x)))


def test_module_level_copies_are_reused_only_once_read(actdiff_bin, tmp_path, monkeypatch):
    """A loop with no backward and no optimizer step (nothing else waits for
    the worker): the copies of outputs and parameters kept from step to
    step are overwritten only once the worker has read them, so every step's
    log is bitwise the log computed on the training thread, and the steps'
    records differ from each other."""

    def run_flip(dump, sync):
        statistics_on_training_thread(monkeypatch, sync)
        torch.set_num_threads(1)
        torch.manual_seed(0)
        model = Flip()
        prof = actdiff_capture.Profiler(model, dump, capture_steps=range(1, 7), level="modules", precision="full")
        with torch.no_grad():
            for _ in range(6):
                model(torch.randn(512, 64))
                prof.step()
                model.fc.weight.neg_()
        return prof

    assert run_flip(tmp_path / "sync", True)._worker is None
    assert run_flip(tmp_path / "async", False)._worker is not None
    logs = [dict(blocks(tmp_path / "async" / f"step_{s}" / "rank_0_activations.log")[1]) for s in (1, 2)]
    assert float(logs[0]["fc/op_0_output"]["Min"]) < 0, "fc's output before the in-place ReLU"
    assert float(logs[0]["fc/op_1_weight"]["Mean"]) == -float(logs[1]["fc/op_1_weight"]["Mean"]) != 0, logs
    r, s = compare(actdiff_bin, tmp_path / "sync", tmp_path / "async", tmp_path / "rep", "--bitwise")
    assert r.returncode == 0 and s["first_diverging_step"] is None, r.stdout
    assert s["steps"] == [1, 2, 3, 4, 5, 6], s


def test_module_level_says_when_no_optimizer_step_followed_backward(tmp_path):
    """`prof.step()` before `optimizer.step()`: the records named "after the
    optimizer" would hold the values before it; a warning says so, once,
    naming the step. The right order warns nothing."""

    def train(dump, step_first):
        torch.manual_seed(0)
        model = InPlaceNet()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        prof = actdiff_capture.Profiler(model, dump, capture_steps=range(1, 4), level="modules")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                model(torch.randn(8, 256)).square().mean().backward()
                if step_first:
                    prof.step()
                opt.step()
                opt.zero_grad()
                if not step_first:
                    prof.step()
        return [str(w.message) for w in caught if "no optimizer step" in str(w.message)]

    assert train(tmp_path / "right", step_first=False) == []
    said = train(tmp_path / "wrong", step_first=True)
    assert len(said) == 1 and said[0].startswith("actdiff_capture: step 1: no optimizer step ran"), said
    # A hand-written update is not seen: the warning says so (a new user's
    # manual SGD read it as records before the update).
    assert "Only torch.optim optimizers are seen" in said[0], said


def test_module_level_writes_the_shape_of_an_empty_parameter(tmp_path):
    """An empty tensor (a rank's empty FSDP2 shard of a small parameter;
    here a ``Linear(8, 0)``) is recorded with its Shape and hash, as the
    per-op level records an empty output (trial 13 F8: the Shape was left
    out, and the record read as a real, agreeing value)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.Linear(8, 0))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    with actdiff_capture.Profiler(model, tmp_path, capture_step=1, level="modules") as prof:
        model(torch.randn(4, 8)).sum().backward()
        opt.step()
        prof.step()
    _, bl = blocks(tmp_path / "rank_0_activations.log")
    empty = {k: f for k, f in bl if k.startswith("1/")}
    assert empty, list(bl)
    for k, f in empty.items():
        assert "Shape" in f, (k, f)
    assert empty["1/op_3_weight"]["Shape"].startswith("torch.Size([0, 8])"), empty


@pytest.mark.parametrize("level", ["ops", "modules"])
def test_close_ends_a_capture_without_a_with_block(tmp_path, level):
    """A loop without ``with Profiler(...)`` ends the capture with
    ``close()`` (a new user's trial found no way to): the captured steps'
    logs are written, the hooks and the dispatch mode are gone, the step
    armed next leaves no folder, and later steps record nothing."""
    torch.manual_seed(0)
    model = InPlaceNet()
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    prof = actdiff_capture.Profiler(model, tmp_path, capture_steps=range(1, 5), level=level, precision="full")
    for _ in range(2):
        model(torch.randn(8, 256)).square().mean().backward()
        opt.step()
        opt.zero_grad()
        prof.step()
    assert prof.armed
    prof.close()
    assert not prof.armed
    assert sorted(os.listdir(tmp_path)) == ["step_1", "step_2"], os.listdir(tmp_path)
    for s in (1, 2):
        _, bl = blocks(tmp_path / f"step_{s}" / "rank_0_activations.log")
        assert bl, s
    assert all(not m._forward_hooks and not m._forward_pre_hooks for m in model.modules())
    assert all(not getattr(p, "_post_accumulate_grad_hooks", None) for p in model.parameters())
    assert torch.utils._python_dispatch._get_current_dispatch_mode() is None
    model(torch.randn(8, 256)).square().mean().backward()
    prof.step()
    prof.close()  # again: nothing
    assert sorted(os.listdir(tmp_path)) == ["step_1", "step_2"]


class Blocks(torch.nn.Module):
    """Two residual blocks (a Linear and a GELU each) and a head."""

    def __init__(self, functional_head=False):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.Linear(16, 16), torch.nn.GELU()) for _ in range(2))
        self.head = torch.nn.Linear(16, 4)
        self.functional_head = functional_head

    def forward(self, x):
        for b in self.blocks:
            x = b(x) + x
        if self.functional_head:  # the head's weights, its module never called
            return F.linear(x, self.head.weight, self.head.bias)
        return self.head(x)


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
@pytest.mark.parametrize("compiled", ["model", "blocks"])
def test_module_level_says_which_modules_ran_compiled(actdiff_bin, tmp_path, backend, compiled):
    """Module hooks do not run in compiled code, so a compiled forward's
    module outputs are not recorded at level='modules' (a new user's
    eager-against-compiled compare gave 'first divergence
    blocks.0.0/op_0_output (only in eager)', and the compiled run's log and
    warnings said nothing). Now the profiler warns once, naming the modules
    that ran compiled, the log's header says 'Compiled:', and the compare
    shows those outputs as not recorded, not gating; gradients and
    parameters are recorded and compared."""

    def train(dump, backend=None):
        torch.manual_seed(1)
        model = Blocks()
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        run = model
        if backend is not None and compiled == "model":
            run = torch.compile(model, backend=backend)
        elif backend is not None:
            for b in model.blocks:
                b.compile(backend=backend)
        prof = actdiff_capture.Profiler(model, dump, capture_steps=range(1, 4), level="modules", precision="full")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                run(torch.randn(8, 16)).square().mean().backward()
                opt.step()
                opt.zero_grad()
                prof.step()
        said = [str(w.message) for w in caught if "ran compiled" in str(w.message)]
        return said, [blocks(dump / f"step_{s}" / "rank_0_activations.log") for s in (1, 2, 3)]

    said, eager = train(tmp_path / "eager")
    assert said == [] and all(not any(x.startswith("Compiled") for x in h) for h, _ in eager), said
    said, logs = train(tmp_path / "compiled", backend)
    names = "the model's forward" if compiled == "model" else "blocks.0, blocks.1"
    assert len(said) == 1 and said[0].startswith(f"actdiff_capture: step 1: {names} ran compiled"), said
    name = "torch.compile"  # module hooks do not see the backend
    for (h, bl), (_, eager_bl) in zip(logs, eager):
        assert f"Compiled: {name}" in h, h  # header lines
        keys = {k for k, _ in bl}
        # Every gradient and parameter record; the outputs of modules that
        # ran eagerly (the root and the head with compiled blocks).
        want = {k for k, _ in eager_bl if not k.endswith("_output")}
        if compiled == "blocks":
            want |= {k for k, _ in eager_bl if k.split("/")[0] in ("<none>", "head") and k.endswith("_output")}
        assert {k.split("/")[0] + "/" + k.split("_", 2)[2] for k in keys} == {
            k.split("/")[0] + "/" + k.split("_", 2)[2] for k in want
        }, (keys, want)
    r, s = compare(actdiff_bin, tmp_path / "eager", tmp_path / "compiled", tmp_path / "rep")
    inside = ("",) if compiled == "model" else ("blocks.",)  # the modules that ran compiled
    not_recorded = sum(1 for _, bl in eager for k, _ in bl if k.endswith("_output") and k.startswith(inside))
    assert s["counts"]["fused"] == not_recorded, (s["counts"], r.stdout)
    assert f"{not_recorded} module outputs not recorded in compiled code" in r.stdout, r.stdout
    for rank in s["ranks"]:
        first = rank.get("first_divergence")
        assert first is None or not first["key1"].startswith("blocks.") or not first["key1"].endswith("_output"), first
    if backend == "aot_eager":  # the same kernels: gradients and parameters bitwise equal
        assert r.returncode == 0 and s["counts"]["gating"] == 0, r.stdout


def test_module_level_names_only_the_modules_that_ran_compiled(actdiff_bin, tmp_path):
    """A compiled module without parameters (an activation) and a head
    whose weights are used without calling it (a new user's trial: the
    activation's output was missing with no word, a false 'first
    divergence', and the head was named as compiled): the header names the
    compiled activation only, the compare excuses its output only, and the
    head gets a warning of its own that says why its output may be
    missing, not that it ran compiled."""

    def train(dump, compile_act):
        torch.manual_seed(1)
        model = Blocks(functional_head=True)
        if compile_act:
            model.blocks[1][1].compile(backend="aot_eager")
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        prof = actdiff_capture.Profiler(model, dump, capture_steps=range(1, 3), level="modules", precision="full")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(2):
                model(torch.randn(8, 16)).square().mean().backward()
                opt.step()
                opt.zero_grad()
                prof.step()
        return [str(w.message) for w in caught if "actdiff_capture: step" in str(w.message)]

    said = train(tmp_path / "eager", False)
    assert len(said) == 1 and said[0].startswith("actdiff_capture: step 1: head: gradients of its parameters"), said
    assert "ran compiled" not in said[0] and "F.linear" in said[0], said
    said = train(tmp_path / "act", True)
    compiled = [w for w in said if "ran compiled" in w]
    assert len(compiled) == 1 and compiled[0].startswith("actdiff_capture: step 1: blocks.1.1 ran compiled"), said
    assert any(w.startswith("actdiff_capture: step 1: head: gradients") for w in said), said
    h, _ = blocks(tmp_path / "act" / "step_1" / "rank_0_activations.log")
    assert "Compiled: torch.compile" in h and "Compiled modules: blocks.1.1" in h, h
    h, _ = blocks(tmp_path / "eager" / "step_1" / "rank_0_activations.log")
    assert not any(x.startswith("Compiled") for x in h), h
    r, s = compare(actdiff_bin, tmp_path / "eager", tmp_path / "act", tmp_path / "rep")
    assert r.returncode == 0, r.stdout
    assert s["counts"]["fused"] == 2 and s["counts"]["gating"] == 0, s["counts"]


class CompiledFunctionAct(torch.nn.Module):
    """A Linear, then an activation module called inside a compiled
    function (``fullgraph=True``: a graph break the capture caused would
    raise)."""

    def __init__(self, backend=None):
        super().__init__()
        torch.manual_seed(1)
        self.fc = torch.nn.Linear(16, 16)
        self.act = torch.nn.GELU()
        self.head = torch.nn.Linear(16, 4)
        self.apply_act = self._act if backend is None else torch.compile(self._act, backend=backend, fullgraph=True)

    def _act(self, x):
        return self.act(x)

    def forward(self, x):
        return self.head(self.apply_act(self.fc(x)))


@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_module_level_sees_modules_called_inside_a_compiled_function(actdiff_bin, tmp_path, backend):
    """A module without parameters called inside a torch.compile'd function
    runs no module hook, and nothing else tells (no gradient of its own):
    its output was missing from the compiled run with no word, and an
    eager-against-compiled compare gave a false first divergence
    ('act/op_0_output only in eager'). Its hook, traced by Dynamo, now says
    it ran compiled: the header names it, a warning says so, and the
    compare excuses its output only; the compiled code runs with no graph
    break."""

    def train(dump, backend):
        model = CompiledFunctionAct(backend)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        prof = actdiff_capture.Profiler(model, dump, capture_steps=range(1, 4), level="modules", precision="full")
        torch.manual_seed(2)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for _ in range(3):
                model(torch.randn(8, 16)).square().mean().backward()
                opt.step()
                opt.zero_grad()
                prof.step()
        return [str(w.message) for w in caught if "actdiff_capture: step" in str(w.message)]

    assert train(tmp_path / "eager", None) == []
    said = train(tmp_path / "compiled", backend)
    assert len(said) == 1 and said[0].startswith("actdiff_capture: step 1: act ran compiled"), said
    for s in (1, 2, 3):
        h, bl = blocks(tmp_path / "compiled" / f"step_{s}" / "rank_0_activations.log")
        assert "Compiled modules: act" in h, h
        keys = {k for k, _ in bl}
        assert "fc/op_0_output" in keys and "head/op_0_output" in keys and "act/op_0_output" not in keys, keys
    r, s = compare(actdiff_bin, tmp_path / "eager", tmp_path / "compiled", tmp_path / "rep")
    assert s["counts"]["fused"] == 3, (s["counts"], r.stdout)  # act's output, each step
    if backend == "aot_eager":  # the same kernels: nothing else differs
        assert r.returncode == 0 and s["counts"]["gating"] == 0, r.stdout


def test_module_level_finds_the_step_and_the_phase(actdiff_bin, tmp_path):
    for name, kw in [("a", {}), ("b", {"lr_change_at": 3}), ("c", {"change_token_at": 3})]:
        run(tmp_path / name, level="modules", **kw)
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "lr", "--bitwise")
    assert s["first_diverging_step"] == 3, r.stdout
    rank = next(x for x in s["ranks"] if x["step"] == 3)
    assert rank["first_divergence"]["phase"] == "optimizer", rank["first_divergence"]
    # Said in words (trial 30 F5): the update itself changed.
    update = "step 3's forward outputs and gradients agree, and its parameters differ after the optimizer step"
    assert update in r.stdout and any(update in v for v in s["verdict"]), r.stdout
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "c", tmp_path / "tok")
    assert not any("the update itself differs" in v for v in s["verdict"]), s["verdict"]
    assert s["first_diverging_step"] == 3, r.stdout
    rank = next(x for x in s["ranks"] if x["step"] == 3)
    assert rank["first_divergence"]["key1"] == "tok/op_0_output", rank["first_divergence"]
    step3 = next(x for x in s["step_results"] if x["step"] == 3)
    assert "inputs are not recorded at level=modules" in step3["headline"], step3["headline"]
    # Identical runs at module level: bitwise equal over every step.
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "a", tmp_path / "same", "--bitwise")
    assert r.returncode == 0 and s["first_diverging_step"] is None


def test_a_module_level_log_is_not_compared_with_a_per_op_one(actdiff_bin, tmp_path):
    run(tmp_path / "m", steps=1, level="modules")
    run(tmp_path / "o", steps=1)
    r = subprocess.run(
        [actdiff_bin, "compare", str(tmp_path / "m"), str(tmp_path / "o"), "-o", str(tmp_path / "rep")],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2, r.stdout + r.stderr
    assert "level=modules capture" in r.stderr and "level=ops" in r.stderr, r.stderr
    # A per-op re-capture of one step written into the module-level
    # series' folder replaces that step's log: a warning says the folder
    # now mixes levels (trial 10).
    run(tmp_path / "s", steps=2, level="modules")
    with pytest.warns(UserWarning, match=r"holds a level=modules capture of step 2; this level=ops capture replaces it when"):
        run(tmp_path / "s", steps=2, schedule=[2])
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        run(tmp_path / "s", steps=2, schedule=[2])  # the same level again: nothing to say


def test_module_level_names_randomness_from_the_rng_state(actdiff_bin, tmp_path):
    """Trial 63: at level="modules" a dropout seed changed was worded as any
    change to the computation (per op the random op is named). Each log's
    header gives digests of torch's generators when the step was armed and
    when it ended (``RNG state:``): a seed changed after the model was made
    is named as randomness at step 1; a token changed at step 3 with the
    same seed is not (the states agree)."""
    run(tmp_path / "a", steps=3, level="modules")
    run(tmp_path / "b", steps=3, level="modules", dropout_seed=1)
    run(tmp_path / "c", steps=3, level="modules", change_token_at=3)
    for step in (1, 2, 3):
        h = header(tmp_path / "a" / f"step_{step}" / "rank_0_activations.log")
        (line,) = [x for x in h if x.startswith("RNG state: ")]
        start, end = re.fullmatch(r"RNG state: start=([0-9a-f]{16}) end=([0-9a-f]{16})", line).groups()
        assert start != end, line  # dropout drew
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "rep")
    assert r.returncode == 1 and s["first_diverging_step"] == 1, r.stdout
    assert "the records before it agree, and the runs' random state (torch's generators, the logs' `RNG state:`) differs when step 1 starts and the step draws random numbers: most likely a random op (dropout) in this module" in r.stdout, r.stdout
    # Later steps differ from their first record (the parameters differ
    # after step 1): not blamed on randomness (trial 64).
    later = [ln for ln in r.stdout.splitlines() if ln.startswith(("  step 2:", "  step 3:"))]
    assert len(later) == 2 and not any("random" in ln for ln in later), r.stdout
    first = next(rk for rk in s["ranks"] if rk["step"] == 1)
    assert first["run1"]["rng_state"]["start"] != first["run2"]["rng_state"]["start"]
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "c", tmp_path / "rep2")
    assert r.returncode == 1 and s["first_diverging_step"] == 3, r.stdout
    opening = r.stdout.splitlines()[1]
    assert "step 3 diverges first: rank 0 diverges first at `tok/op_0_output`" in opening, r.stdout
    assert "random" not in opening, r.stdout
    # What the level cannot see before step 3 leaves the random state out
    # (trial 64: "from step 3's batch or random state" with equal states).
    assert "from step 3's batch (not from its random state: the logs' `RNG state:` lines start and end the step alike" in r.stdout, r.stdout


def test_baseline_raises_at_the_first_diverging_step(tmp_path):
    run(tmp_path / "blessed", steps=5)
    # An identical run passes the check on every step and leaves no report.
    prof = run_with_baseline(tmp_path / "same", tmp_path / "blessed", steps=5)
    assert prof.diverged is None
    with pytest.raises(actdiff_capture.Diverged) as e:
        run_with_baseline(tmp_path / "b", tmp_path / "blessed", change_token_at=3)
    d = e.value
    assert (d.step, d.rank, d.key) == (3, 0, "tok/op_0_embedding"), str(d)
    assert (tmp_path / "b" / "divergence" / "step_3_rank_0" / "index.html").is_file()
    assert sorted(p.name for p in (tmp_path / "b").iterdir()) == ["divergence", "step_1", "step_2", "step_3"]
    assert "step 3 diverges from the baseline on rank 0: first cause `tok/op_0_embedding`" in str(d)


def test_baseline_names_the_steps_a_sparse_schedule_left_out(tmp_path):
    """A schedule of every other step and a token changed at step 3, which
    it does not capture: the divergence at step 4 says step 3 was not
    captured and the runs may part there first, as the compare says
    (trial 68 F5: only "first cause ... (forward)" at step 4)."""
    run(tmp_path / "blessed", steps=4, schedule=[2, 4])
    with pytest.raises(actdiff_capture.Diverged) as e:
        run(tmp_path / "b", steps=4, schedule=[2, 4], change_token_at=3, baseline=tmp_path / "blessed")
    assert e.value.step == 4, str(e.value)
    assert "; step 3, before step 4, was not captured: the runs may part there first" in str(e.value), str(e.value)
    # The step before the first captured one (step 1) ran too.
    with pytest.raises(actdiff_capture.Diverged) as e:
        run(tmp_path / "c", steps=4, schedule=[2, 4], change_token_at=1, baseline=tmp_path / "blessed")
    assert e.value.step == 2 and "step 1, before step 2, was not captured" in str(e.value), str(e.value)
    # Every step captured: no such words.
    run(tmp_path / "full", steps=3)
    with pytest.raises(actdiff_capture.Diverged) as e:
        run_with_baseline(tmp_path / "d", tmp_path / "full", steps=3, change_token_at=3)
    assert "not captured" not in str(e.value), str(e.value)


def test_baseline_names_the_parameters_of_an_optimizer_cause(tmp_path):
    """A learning rate changed at step 2: the first cause is an op of the
    optimizer step, and the message names the parameter it updates, as the
    compare does (trial 16 F3)."""
    run(tmp_path / "blessed", steps=2)
    with pytest.raises(actdiff_capture.Diverged) as e:
        run_with_baseline(tmp_path / "b", tmp_path / "blessed", steps=2, lr_change_at=2)
    d = e.value
    assert d.step == 2 and d.key.startswith("<none>/"), str(d)
    assert re.search(r"first cause `<none>/op_\d+_\w+` \(optimizer; parameter [\w.]+\)", str(d)), str(d)


def test_baseline_at_module_level_names_the_first_differing_record_not_a_cause(tmp_path):
    """At level="modules" the first differing record is no cause (inputs
    are not recorded): the message says so, with its phase, and to
    re-capture the step per op (trial 20 F1: "first cause
    `blocks.1.ln2/op_0_output`")."""
    run(tmp_path / "blessed", steps=3, level="modules")
    with pytest.raises(actdiff_capture.Diverged) as e:
        run_with_baseline(tmp_path / "b", tmp_path / "blessed", steps=3, level="modules", lr_change_at=2)
    d = e.value
    assert d.step == 2, str(d)
    assert f"first differing record `{d.key}` (optimizer; inputs are not recorded at level=\"modules\"" in str(d), str(d)
    assert 're-capture step 2 at level="ops" for its cause' in str(d) and "first cause" not in str(d), str(d)
    # What the compare reads into it, said as the series says it (trial 70
    # F4: a learning rate changed, and the message named the record alone).
    assert "its forward outputs and gradients agree and its parameters differ after the optimizer step: the update itself differs" in str(d), str(d)


def test_a_rank_that_receives_the_change_through_a_collective_says_so():
    """A rank whose own ops agree and whose change arrives through an
    all-reduce (DDP: another rank's batch changed) names the collective,
    not a local "first divergence" (trial 20 F2: `<none>/op_6__foreach_norm`)."""
    from actdiff_capture.baseline import _what_diverges

    coll = {"key1": "tok/op_4_allreduce_", "key2": "tok/op_4_allreduce_", "phase": "backward"}
    first = {"key1": "<none>/op_6__foreach_norm", "key2": "<none>/op_6__foreach_norm", "phase": "optimizer"}
    r = {
        "run2": {"world_size": 2},
        "first_divergence": first,
        "root_causes": {"first_cause": None, "via_collective_only": True, "causes": [{"row": first, "collective": coll}]},
    }
    what, key = _what_diverges(r, 4)
    assert what == (
        "its own ops agree until the change arrives: the change arrives through the collective "
        "`tok/op_4_allreduce_` from another rank, which diverges first (see its message)"
    ), what
    assert key == "<none>/op_6__foreach_norm"


def test_baseline_warn_goes_on_and_stop_capturing_disarms(tmp_path, caplog):
    run(tmp_path / "blessed", steps=4)
    prof = run_with_baseline(tmp_path / "w", tmp_path / "blessed", change_token_at=2, on_divergence="warn")
    assert prof.diverged.step == 2 and set(prof.paths) == {1, 2, 3, 4}
    assert "step 2 diverges from the baseline" in caplog.text
    prof = run_with_baseline(tmp_path / "s", tmp_path / "blessed", change_token_at=2, on_divergence="stop-capturing")
    assert prof.diverged.step == 2 and set(prof.paths) == {1, 2} and not prof.armed


def test_a_baseline_that_does_not_match_is_an_error(tmp_path, capfd):
    run(tmp_path / "blessed", steps=2)
    # Said when the profiler is made (trial 65: only when step 3 was
    # reached), then raised there.
    with pytest.warns(UserWarning, match=r"holds no step_S folder for 1 scheduled step \(3\): the baseline check raises BaselineError when this job reaches step 3"):
        with pytest.raises(actdiff_capture.BaselineError, match="no log for step 3") as e:
            run_with_baseline(tmp_path / "longer", tmp_path / "blessed", steps=3)
    assert (e.value.step, e.value.rank) == (3, 0)
    # A job the check stops in a ``with`` block: the steps after it are
    # not said to be "never reached" (trial 66: a resume's first_step=
    # advice after the BaselineError).
    def linear(dump, steps, **kw):
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 4)
        with actdiff_capture.Profiler(model, dump, capture_steps=range(1, 5), level="modules", **kw) as prof:
            for _ in range(steps):
                model(torch.ones(4)).sum().backward()
                prof.step()

    with pytest.warns(UserWarning, match="never reached"):
        linear(tmp_path / "lb", 2)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with pytest.raises(actdiff_capture.BaselineError, match="no log for step 3"):
            linear(tmp_path / "lc", 4, baseline=tmp_path / "lb")
    assert not [w for w in said if "never reached" in str(w.message)], [str(w.message) for w in said]
    with pytest.warns(UserWarning, match=r"for 999999999997 scheduled steps \(3, 4, 5, \.\.\.\)"):
        actdiff_capture.Profiler(torch.nn.Linear(2, 2), tmp_path / "x", capture_steps=range(1, 10**12), baseline=tmp_path / "blessed").close()
    with pytest.raises(actdiff_capture.BaselineError, match=r"capture_steps=\[2\] \(a list\)"):
        run_with_baseline(tmp_path / "int", tmp_path / "blessed", steps=2, schedule=2)
    capfd.readouterr()
    # A baseline of the other level is refused when the profiler is made,
    # before a step trains (trial 22 L1: after step 1), and nothing is
    # written.
    with pytest.raises(actdiff_capture.BaselineError, match="holds level='ops' logs and this profiler captures level='modules'"):
        actdiff_capture.Profiler(TinyGPT(), tmp_path / "m", capture_steps=[1], level="modules", baseline=tmp_path / "blessed")
    assert not (tmp_path / "m").exists()
    assert "level=" not in capfd.readouterr().err
    with pytest.raises(actdiff_capture.BaselineError, match="no such folder"):
        actdiff_capture.Profiler(TinyGPT(), tmp_path / "x", baseline=tmp_path / "nowhere")


def test_a_baseline_of_another_world_size_is_an_error(tmp_path):
    """A baseline of another data-parallel degree (4 DDP ranks for a 2-rank
    job): every gradient is averaged over another number of ranks, a
    layout mismatch that raised ``Diverged`` at DDP's gradient ``mul``
    (trial 29). A one-process gloo group writes ``World size: 1``; the
    blessed log is made to say 2."""
    import socket

    import torch.distributed as dist

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    try:
        run(tmp_path / "blessed", steps=1)
        log = tmp_path / "blessed" / "step_1" / "rank_0_activations.log"
        text = log.read_text()
        assert "World size: 1\n" in text
        log.write_text(text.replace("World size: 1\n", "World size: 2\n", 1))
        with pytest.raises(actdiff_capture.BaselineError, match="the baseline ran with World size 2 and this run with 1"):
            run_with_baseline(tmp_path / "job", tmp_path / "blessed", steps=1)
    finally:
        dist.destroy_process_group()


def run_with_baseline(dump, baseline, steps=4, on_divergence="raise", **kw):
    """``run`` with ``baseline=`` (every step captured, full precision)."""
    return run(dump, steps=steps, baseline=baseline, on_divergence=on_divergence, **kw)


def test_an_empty_schedule_is_warned_about(tmp_path):
    """`capture_steps=[]` (or an empty range) captures nothing: a warning
    says so instead of a silent profiler."""
    model = InPlaceNet()
    for steps in ([], range(5, 5)):
        with pytest.warns(UserWarning, match="holds no step: this profiler captures nothing"):
            prof = actdiff_capture.Profiler(model, tmp_path / "d", capture_steps=steps, level="modules")
        prof.step()
    assert not (tmp_path / "d").exists() or not any((tmp_path / "d").iterdir())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        actdiff_capture.Profiler(model, tmp_path / "e", capture_steps=[2], level="modules")


_RAISES_MID_STEP = """
import sys, torch, torch.nn as nn, actdiff_capture
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 4))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
prof = actdiff_capture.Profiler(model, sys.argv[1], capture_steps=range(1, 7), level="modules")
for step in range(1, 7):
    loss = model(torch.randn(2048, 16)).pow(2).mean()
    if step == 2:
        raise RuntimeError("boom in step 2")
    loss.backward()
    opt.step()
    opt.zero_grad()
    prof.step(loss=loss)
"""


def test_a_loop_that_raises_mid_step_exits_with_its_error_not_an_abort(tmp_path):
    """A training loop that raises inside a captured step (module level,
    outputs large enough for the statistics worker) ends with Python's
    traceback and exit 1. Work still queued on the worker when the
    interpreter and libtorch shut down aborted the process ("terminate
    called without an active exception", SIGABRT) in about one run in
    ten to fifteen; the exit handler now drains the workers first. Ten
    runs: without the drain, this fails about half the time."""
    import subprocess
    import sys

    script = tmp_path / "raises.py"
    script.write_text(_RAISES_MID_STEP)
    for i in range(10):
        r = subprocess.run(
            [sys.executable, str(script), str(tmp_path / f"dump{i}")],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert r.returncode == 1, (i, r.returncode, r.stderr[-2000:])
        assert "boom in step 2" in r.stderr
        assert "terminate called" not in r.stderr


def _edited_input_run(dump, edit_at=None, **prof_kw):
    """Three SGD steps of an MLP, every step captured with every op; at
    step ``edit_at`` the input is edited in place after a ``clone`` (one
    ``add_`` of this run only, whose input has no captured producer)."""
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    g = torch.Generator().manual_seed(1)
    prof = actdiff_capture.Profiler(model, dump, capture_steps=range(1, 4), precision="full", min_numel=0, **prof_kw)
    for step in range(1, 4):
        x, y = torch.randn(8, 8, generator=g), torch.randn(8, 1, generator=g)
        if step == edit_at:
            x = x.clone()
            x[0, 0] += 0.5
        loss = F.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        prof.step(loss=loss)
    prof.close()
    return prof


def test_an_input_edited_in_place_in_one_run_is_the_cause(actdiff_bin, tmp_path):
    """The edit's ``add_`` is named as the first cause, in both orders, by
    the compare and by the baseline check; the ``randn`` it edited, equal
    in both runs, stays a pair (trial 17 H1: it was split into two
    one-sided rows and named as the cause)."""
    _edited_input_run(tmp_path / "a")
    _edited_input_run(tmp_path / "b", edit_at=2)
    for x, y, side in (("a", "b", "key2"), ("b", "a", "key1")):
        r, s = compare(actdiff_bin, tmp_path / x, tmp_path / y, tmp_path / f"rep_{x}")
        assert s["first_diverging_step"] == 2, r.stdout
        (rank,) = [u for u in s["ranks"] if u["step"] == 2]
        assert rank["counts"].get("only1", 0) + rank["counts"].get("only2", 0) == 1, rank["counts"]
        cause = rank["root_causes"]["first_cause"]
        assert re.fullmatch(r"<none>/op_\d+_add_", cause["one_sided"][0][side] or ""), cause
    with pytest.raises(actdiff_capture.Diverged) as e:
        _edited_input_run(tmp_path / "c", edit_at=2, baseline=tmp_path / "a")
    d = e.value
    assert d.step == 2 and re.fullmatch(r"<none>/op_\d+_add_", d.key), str(d)
    assert "(an op only in this run, feeding `0/op_" in str(d), str(d)


def test_scheduled_steps_never_reached_are_warned_about_at_close(tmp_path):
    """``capture_steps=[10, 20]`` in an 8-step job wrote nothing, silently,
    until the compare found no folder (trial 17 M2): ``close()`` says
    which steps were never reached."""
    model = torch.nn.Linear(4, 4)
    prof = actdiff_capture.Profiler(model, tmp_path / "d", capture_steps=[10, 20], level="modules")
    for _ in range(8):
        prof.step()
    with pytest.warns(UserWarning, match=r"2 scheduled steps \(10, 20\) were never reached \(the last step was 8, counted from step 1"):
        prof.close()
    prof = actdiff_capture.Profiler(model, tmp_path / "r", capture_steps=range(1, 1001), level="modules")
    for _ in range(3):
        model(torch.ones(4)).sum().backward()
        prof.step()
    with pytest.warns(UserWarning, match=r"997 scheduled steps \(4, 5, 6 and 994 more\) were never reached"):
        prof.close()
    # A schedule the job reached says nothing.
    prof = actdiff_capture.Profiler(model, tmp_path / "q", capture_steps=[1], level="modules")
    model(torch.ones(4)).sum().backward()
    prof.step()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prof.close()


def test_baseline_tolerances_are_checked_when_the_profiler_is_made(tmp_path):
    """A bad ``tolerances=`` failed only after step 1 trained, behind an
    unrelated missing-file error, and a string was split into characters
    (trial 17 M3); ``capture_step="5"`` was said to be a bad
    ``capture_steps`` (L1)."""
    run(tmp_path / "blessed", steps=1)
    (tmp_path / "default" / "step_1").mkdir(parents=True)
    (tmp_path / "default" / "step_1" / "rank_0_activations.log").write_text(
        "Total captured activations: 1\n" + "=" * 80 + "\n\n[m/op_0_mm]\n  Output hash: 1.0\n\n"
    )
    model = torch.nn.Linear(4, 4)
    with pytest.raises(ValueError, match=r"invalid value 'abc' for '--rtol"):
        actdiff_capture.Profiler(model, tmp_path / "x", capture_steps=[1], baseline=tmp_path / "blessed", tolerances=["--rtol", "abc"])
    # Options that choose what the compare reads or writes, or split it,
    # are refused too (trial 63: `--shard 1/2` passed, then step 1 failed
    # on a missing summary).
    for bad, opt in [("--shard 1/2", "--shard"), (["--junit", "j.xml"], "--junit"), ("--rows=r.jsonl", "--rows"), ("-oX", "-o")]:
        with pytest.raises(ValueError, match=rf"{opt} is not a tolerance or pairing option"):
            actdiff_capture.Profiler(model, tmp_path / "x", capture_steps=[1], baseline=tmp_path / "blessed", tolerances=bad)
    assert not (tmp_path / "j.xml").exists() and not os.path.exists("j.xml")
    prof = actdiff_capture.Profiler(model, tmp_path / "y", capture_steps=[1], baseline=tmp_path / "blessed", tolerances="--rtol 1e-4 --atol 1e-6")
    assert prof.tolerances == ("--rtol", "1e-4", "--atol", "1e-6")
    with pytest.warns(UserWarning, match="never reached"):
        prof.close()
    # --bitwise against a baseline of the reference's precision, or with
    # this profiler's, is refused when the profiler is made (trial 66: after
    # the steps before the first captured one trained).
    with pytest.raises(actdiff_capture.BaselineError, match=r"--bitwise needs both logs at full precision, and the baseline .* holds logs at default precision: capture both"):
        actdiff_capture.Profiler(model, tmp_path / "v", capture_steps=[3], baseline=tmp_path / "default", tolerances="--bitwise", precision="full")
    with pytest.raises(actdiff_capture.BaselineError, match=r"and this profiler captures at default precision: capture both"):
        actdiff_capture.Profiler(model, tmp_path / "v", capture_steps=[3], baseline=tmp_path / "blessed", tolerances="--bitwise")
    # The probe's own logs say nothing (trial 65 F5: "--bitwise on logs
    # printed with 7 digits" when the profiler was made).
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        prof = actdiff_capture.Profiler(model, tmp_path / "w", capture_steps=[1], baseline=tmp_path / "blessed", tolerances="--bitwise", precision="full")
    with pytest.warns(UserWarning, match="never reached"):
        prof.close()
    with pytest.raises(ValueError, match=r"^capture_step must be an int, got '5'"):
        actdiff_capture.Profiler(model, tmp_path / "z", capture_step="5")
    with pytest.raises(ValueError, match=r"^min_numel must be 0 or more"):
        actdiff_capture.Profiler(model, tmp_path / "z", min_numel=-1)
    with pytest.raises(TypeError, match=r"^model must be a torch.nn.Module .*got NoneType"):
        actdiff_capture.Profiler(None, tmp_path / "z")


def _resumed(dump, ckpt, *, at, steps, first_step=None, schedule=None, **prof_kw):
    """A job preempted after step ``at`` and resumed from its checkpoint
    (``ckpt``: model, optimizer and RNG state saved by the first process,
    loaded by a second one made from scratch): each process has its own
    Profiler on ``dump``. ``first_step``: what the second process passes
    (None: not given). Returns the second process's Profiler."""
    torch.set_num_threads(1)
    data = batches(steps)

    def train(model, opt, prof, todo):
        for step in todo:
            idx = data[step - 1]
            logits = model(idx[:, :-1])
            loss = F.cross_entropy(logits.reshape(-1, VOCAB), idx[:, 1:].reshape(-1))
            loss.backward()
            opt.step()
            opt.zero_grad()
            prof.step(loss=loss)

    sched = range(1, steps + 1) if schedule is None else schedule
    torch.manual_seed(0)
    model = TinyGPT(dropout=0.1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
    with actdiff_capture.Profiler(model, dump, capture_steps=sched, precision="full", **prof_kw) as prof:
        train(model, opt, prof, range(1, at + 1))
    torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "rng": torch.get_rng_state()}, ckpt)
    # The second process.
    torch.manual_seed(1234)
    model = TinyGPT(dropout=0.1)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
    state = torch.load(ckpt)
    model.load_state_dict(state["model"])
    opt.load_state_dict(state["opt"])
    torch.set_rng_state(state["rng"])
    kw = {} if first_step is None else {"first_step": first_step}
    with actdiff_capture.Profiler(model, dump, capture_steps=sched, precision="full", **kw, **prof_kw) as prof:
        train(model, opt, prof, range(at + 1, steps + 1))
    return prof


def test_a_job_resumed_from_a_checkpoint_keeps_its_step_numbers(actdiff_bin, tmp_path):
    """Trial 30 F1: a job resumed after step k counted its steps from 1
    again, so its step k+1 was captured as step_1 over the first process's
    log, and compare called the bitwise-identical run diverging at step 1;
    ``baseline=`` raised at "step 1". With ``first_step=k+1`` the steps
    keep their numbers: the resumed job is bitwise identical to the
    uninterrupted one, and its baseline check passes."""
    run(tmp_path / "full", steps=6)
    _resumed(tmp_path / "resumed", tmp_path / "ck.pt", at=3, steps=6, first_step=4)
    assert "Step: 4" in header(tmp_path / "resumed" / "step_4" / "rank_0_activations.log")
    r, s = compare(actdiff_bin, tmp_path / "full", tmp_path / "resumed", tmp_path / "rep", "--bitwise")
    assert r.returncode == 0, r.stdout + r.stderr
    assert s["steps"] == [1, 2, 3, 4, 5, 6] and s["first_diverging_step"] is None
    assert all(rk["bitwise"]["all"] for rk in s["ranks"])
    prof = _resumed(
        tmp_path / "checked", tmp_path / "ck2.pt", at=3, steps=6, first_step=4, baseline=tmp_path / "full"
    )
    assert prof.diverged is None
    # Counted from 1 (first_step not given), the second process's steps
    # are those of the first process again: step 4 is captured as step 1,
    # over the first process's log, and the optimizer's step count says so
    # (trial 63: no warning).
    with pytest.warns(UserWarning, match=RESUMED % (4, 4, "step_1, over the log")):
        _resumed(tmp_path / "naive", tmp_path / "ck3.pt", at=3, steps=6)
    assert "Step: 1" in header(tmp_path / "naive" / "step_1" / "rank_0_activations.log")
    r, s = compare(actdiff_bin, tmp_path / "full", tmp_path / "naive", tmp_path / "rep2")
    assert r.returncode == 1 and s["first_diverging_step"] == 1


# RESUMED_WITHOUT_FIRST_STEP with (optimizer steps, first_step, what).
RESUMED = (
    r"this profiler counts steps from 1 \(first_step=1\), but the optimizer has taken %d steps "
    r"\(its state's 'step'\): if this job resumed from a checkpoint, pass first_step= \(the step it "
    r"resumes at, counted in prof.step\(\) calls: %d when prof.step\(\) is called once per optimizer step\) .*"
    r"this step is captured as %s"
)


@pytest.mark.parametrize("level", ["ops", "modules"])
def test_a_resumed_job_counting_from_one_is_told_by_its_optimizer(tmp_path, level):
    """Trial 63: a job resumed without first_step= wrote its steps over the
    first process's with no warning. The optimizer's own step count (its
    state's ``step``, restored by ``load_state_dict``) says that the
    profiler's step 1 is the optimizer's step 4, at both levels, once; a
    resumed job that passes first_step=, a fresh run, and a fresh run with
    gradient accumulation (fewer optimizer steps than profiler steps) are
    told nothing."""
    with pytest.warns(UserWarning, match=RESUMED % (4, 4, "step_1, over the log")) as said:
        _resumed(tmp_path / "a", tmp_path / "ck.pt", at=3, steps=6, level=level)
    assert sum("first_step=1" in str(w.message) for w in said) == 1
    # A profiler made after three optimizer steps, writing into a folder
    # of its own: nothing written over, still told.
    torch.manual_seed(0)
    model = TinyGPT()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2)

    def train(prof, data):
        for idx in data:
            F.cross_entropy(model(idx[:, :-1]).reshape(-1, VOCAB), idx[:, 1:].reshape(-1)).backward()
            opt.step()
            opt.zero_grad()
            if prof is not None:
                prof.step()

    train(None, batches(3))
    with pytest.warns(UserWarning, match=RESUMED % (4, 4, r"step_1$")):
        with actdiff_capture.Profiler(model, tmp_path / "b", capture_steps=[1, 2], level=level) as prof:
            train(prof, batches(2))
    # The other way round (trial 64): first_step=4 given to a fresh job.
    with pytest.warns(UserWarning, match=r"step 4: first_step=4 says that this job resumed from a checkpoint, but the optimizer has taken 1 step \(its state's 'step'\), no more than this process ran"):
        run(tmp_path / "f", steps=2, level=level, first_step=4, schedule=range(1, 7))
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*first_step=")
        _resumed(tmp_path / "c", tmp_path / "ck3.pt", at=3, steps=6, level=level, first_step=4)
        run(tmp_path / "d", steps=3, level=level)
        # Gradient accumulation: prof.step() every micro-batch, an optimizer
        # step every other one.
        torch.manual_seed(0)
        model = TinyGPT()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        with actdiff_capture.Profiler(model, tmp_path / "e", capture_steps=range(1, 5), level=level) as prof:
            for step, idx in enumerate(batches(4), start=1):
                F.cross_entropy(model(idx[:, :-1]).reshape(-1, VOCAB), idx[:, 1:].reshape(-1)).backward()
                if step % 2 == 0:
                    opt.step()
                    opt.zero_grad()
                prof.step()


def test_a_resumed_sgd_job_counting_from_one_says_the_log_it_writes_over(tmp_path, monkeypatch):
    """Trial 64: SGD keeps no step count, so a job resumed without
    first_step= wrote its steps over the first process's logs silently,
    and said at close only that steps 4-6 were never reached. The first
    log written over is said, once, and the close warning adds the
    first_step= advice; a schedule wholly before first_step is said when
    the profiler is made."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = TinyGPT()
    data = batches(6)

    def train(prof, todo, opt):
        for step in todo:
            idx = data[step - 1]
            F.cross_entropy(model(idx[:, :-1]).reshape(-1, VOCAB), idx[:, 1:].reshape(-1)).backward()
            opt.step()
            opt.zero_grad()
            prof.step()

    # SGD keeps no count: its state is walked at the first captured
    # optimizer step only, not at every step after it.
    reads = []
    count = actdiff_capture.capture._optimizer_step_count
    monkeypatch.setattr(actdiff_capture.capture, "_optimizer_step_count", lambda o: reads.append(o) or count(o))
    with actdiff_capture.Profiler(model, tmp_path / "d", capture_steps=range(1, 7)) as prof:
        train(prof, range(1, 4), torch.optim.SGD(model.parameters(), lr=0.1))
    assert len(reads) == 1, reads
    with pytest.warns(UserWarning) as said:
        with actdiff_capture.Profiler(model, tmp_path / "d", capture_steps=range(1, 7)) as prof:
            train(prof, range(4, 7), torch.optim.SGD(model.parameters(), lr=0.1))
    texts = [str(w.message) for w in said]
    over = [t for t in texts if "already held a log, which this capture replaces" in t]
    assert len(over) == 1 and "step_1" in over[0] and "pass first_step=" in over[0], texts
    assert any("never reached" in t and "a job resumed from a checkpoint passes first_step=" in t for t in texts), texts
    # Into a folder of its own: nothing written over, nothing said of it.
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*already held a log")
        with actdiff_capture.Profiler(model, tmp_path / "e", capture_steps=range(1, 4)) as prof:
            train(prof, range(4, 7), torch.optim.SGD(model.parameters(), lr=0.1))
    with pytest.warns(UserWarning, match=r"every scheduled step is before first_step=4 \(the last is 3\)"):
        actdiff_capture.Profiler(model, tmp_path / "f", capture_steps=[2, 3], first_step=4).close()


def test_a_resumed_job_whose_schedule_it_never_reaches_is_told_of_first_step(tmp_path):
    """Trial 30 F1: a resumed process given its schedule in global steps
    (range(4, 7)) but not first_step counted 1-3, captured nothing, and
    said only "the last step was 3"."""
    with pytest.warns(UserWarning, match=r"never reached \(the last step was 3, counted from step 1: a job resumed from a checkpoint passes first_step="):
        _resumed(tmp_path / "d", tmp_path / "ck.pt", at=3, steps=6, schedule=range(4, 7))
    # Given first_step, it captures those steps.
    _resumed(tmp_path / "e", tmp_path / "ck2.pt", at=3, steps=6, schedule=range(4, 7), first_step=4)
    assert sorted(p.name for p in (tmp_path / "e").iterdir()) == ["step_4", "step_5", "step_6"]
    with pytest.raises(ValueError, match="first_step is 1-based"):
        actdiff_capture.Profiler(TinyGPT(), tmp_path / "f", capture_steps=[1], first_step=0)
    # One number, said in the singular (trial 64: "first_step must be
    # whole step numbers").
    with pytest.raises(ValueError, match=r"^first_step must be a whole step number \(an int\), got 4.0$"):
        actdiff_capture.Profiler(TinyGPT(), tmp_path / "f", capture_steps=[1], first_step=4.0)


def test_a_long_or_endless_schedule_costs_nothing_to_make(tmp_path):
    """Trial 30 F2: ``min()``/``max()`` walked a range schedule when the
    profiler was made (range(1000, 10**12, 1000): 47 s), range(1, 10**20)
    raised OverflowError, and itertools.count never returned."""
    import itertools
    import time

    m = torch.nn.Linear(4, 4)
    t = time.perf_counter()
    prof = actdiff_capture.Profiler(m, tmp_path / "a", capture_steps=range(1000, 10**12, 1000), level="modules")
    assert prof.capture_step == 1000 and not prof.armed
    prof.close()  # no step reached: says so, counting the steps without walking them
    prof = actdiff_capture.Profiler(m, tmp_path / "b", capture_steps=range(1, 10**20), level="modules")
    assert prof.armed
    m(torch.ones(4)).sum().backward()
    prof.step()
    with pytest.warns(UserWarning, match=rf"{10**20 - 2} scheduled steps \(2, 3, 4 and {10**20 - 5} more\)"):
        prof.close()
    assert time.perf_counter() - t < 30, "no walk of the schedule"
    assert (tmp_path / "b" / "step_1" / "rank_0_activations.log").is_file()
    with pytest.raises(ValueError, match="never ends: give a range"):
        actdiff_capture.Profiler(m, tmp_path / "c", capture_steps=itertools.count(10, 10))


def test_the_rng_digest_needs_no_numpy(monkeypatch):
    """The header's RNG state is digested through numpy when it is there
    and through a list when it is not (torch runs without numpy; a
    capture must not fail for it): the same digest either way, and it
    follows the generator's state."""
    from actdiff_capture import capture as cap

    torch.manual_seed(5)
    with_numpy = cap._rng_digest()

    def no_numpy(self):
        raise RuntimeError("Numpy is not available")

    monkeypatch.setattr(torch.Tensor, "numpy", no_numpy)
    torch.manual_seed(5)
    assert cap._rng_digest() == with_numpy
    torch.rand(3)
    assert cap._rng_digest() != with_numpy


def test_baseline_at_module_level_with_several_ranks_puts_the_collective_first():
    """At ``level="modules"`` with several ranks, a rank whose forward
    outputs and own gradients agree and whose parameters differ may read
    another rank's change through the gradient all-reduce or FSDP's
    reduce-scatter (trial 71 F9: rank 0's message opened with "the update
    itself differs" and named only an all-reduce). The message puts that
    first, then the update; with one rank, the update alone."""
    from actdiff_capture.baseline import _what_diverges

    def entry(world):
        row = {"key2": "tok/op_2_weight", "phase": "optimizer"}
        return {"root_causes": {}, "first_divergence": row, "update_alone": True,
                "run2": {"level": "modules", "world_size": world}}  # fmt: skip

    words, key = _what_diverges(entry(2), 4)
    assert key == "tok/op_2_weight", key
    assert words.startswith(
        "its forward outputs and gradients agree and its parameters differ after the optimizer step: with 2 ranks "
        "the change may arrive through the gradient all-reduce or reduce-scatter from another rank, or the update itself differs"
    ), words
    words, _ = _what_diverges(entry(1), 4)
    assert "the optimizer step: the update itself differs" in words and "reduce-scatter" not in words, words
