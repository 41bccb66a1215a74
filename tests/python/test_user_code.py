"""Model code as users write it beyond plain Linear stacks (new-user trial
31): channels_last convolutions, TorchScript submodules, torch.func
transforms, modules added or replaced during training, parameter
containers and complex-valued layers. Each capture is honest: identical
runs compare identical, nothing crashes the training job, and what is not
recorded is said."""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import actdiff_capture
from actdiff_capture import modules
from logs import blocks

B, V, D = 4, 12, 8
HERE = pathlib.Path(__file__).resolve().parent


def batches(steps, seed=1):
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, V, (B, 6), generator=g) for _ in range(steps)]


def train(model_fn, dump, *, steps=3, level="ops", change=None, loss_fn=None, **prof_kw):
    """Trains ``model_fn()`` ``steps`` AdamW steps on ``batches``, every
    step captured at full precision (``min_numel=0`` per op);
    ``change(step, model, opt)`` runs before each step. Returns the
    warnings the capture gave."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = model_fn()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=False)
    kw = {"min_numel": 0} if level == "ops" else {}
    kw.update(prof_kw)
    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with actdiff_capture.Profiler(
            model, dump, capture_steps=range(1, steps + 1), level=level, precision="full", **kw
        ) as prof:
            for step, idx in enumerate(batches(steps), start=1):
                if change is not None:
                    change(step, model, opt)
                out = model(idx)
                loss = loss_fn(model, idx) if loss_fn else F.cross_entropy(out.reshape(-1, V), idx.reshape(-1))
                loss.backward()
                opt.step()
                opt.zero_grad()
                prof.step(loss=loss)
    return [str(w.message) for w in said if "actdiff_capture" in str(w.message)]


def compare(actdiff_bin, a, b, out, *args):
    r = subprocess.run(
        [actdiff_bin, "compare", str(a), str(b), "-o", str(out), "--bitwise", *args], capture_output=True, text=True
    )
    assert r.returncode in (0, 1), r.stdout + r.stderr
    return r, json.loads((out / "summary.json").read_text())


class Conv(nn.Module):
    """A channels_last image through two convolutions whose parameters are
    contiguous: autograd re-strides the weight gradients through
    ``new_empty_strided`` (storage nobody wrote) and a ``copy_``."""

    def __init__(self):
        super().__init__()
        self.c1 = nn.Conv2d(2, 4, 3, padding=1)
        self.c2 = nn.Conv2d(4, 4, 3, padding=1)
        self.head = nn.Linear(4 * 6, V)

    def forward(self, tok):
        img = (tok.float().view(B, 1, 2, 3).expand(B, 2, 2, 3) / V).contiguous(memory_format=torch.channels_last)
        h = self.c2(F.relu(self.c1(img)))
        return self.head(h.reshape(B, -1)).unsqueeze(1).expand(B, 6, V)


def test_channels_last_gradients_are_not_read_from_unwritten_storage(actdiff_bin, tmp_path):
    """Trial 31 F1: the agent recorded ``new_empty_strided``'s result, the
    allocator's leftovers (L2 norm 5.5e+29 in one run, 4.7e+33 in the
    other), and two identical runs diverged at every step."""
    train(Conv, tmp_path / "a")
    train(Conv, tmp_path / "b")
    keys = [k for k, _ in blocks(tmp_path / "a" / "step_1" / "rank_0_activations.log")[1]]
    assert keys and not any("new_empty" in k or "empty_strided" in k for k in keys), keys
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "rep")
    assert r.returncode == 0 and all(x["bitwise"]["all"] for x in s["ranks"]), r.stdout


class Scripted(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.mlp = torch.jit.script(nn.Sequential(nn.Linear(D, D), nn.GELU()))
        self.head = nn.Linear(D, V)

    def forward(self, tok):
        return self.head(self.mlp(self.emb(tok)))


@pytest.mark.parametrize("level", ["ops", "modules"])
def test_a_torchscript_submodule_is_captured_around_and_said(actdiff_bin, tmp_path, level):
    """Trial 31 F4: ``Profiler()`` raised on a model with a
    ``torch.jit.script`` submodule ("register_forward_pre_hook is not
    supported on ScriptModules"), at both levels. It is not hooked: its
    ops are its caller's, a warning says so, and identical runs agree."""
    # Each run in a process of its own, as a user's: TorchScript's
    # profiling executor optimizes a function after its first calls, so a
    # second run in one process runs other kernels.
    for run in ("a", "b"):
        code = f"import test_user_code as t; print(t.train(t.Scripted, {str(tmp_path / run)!r}, level={level!r}))"
        p = subprocess.run([sys.executable, "-c", code], cwd=HERE, capture_output=True, text=True, timeout=300)
        assert p.returncode == 0, p.stdout + p.stderr
        assert "mlp: TorchScript module (torch.jit.script/trace) takes no hooks" in p.stdout, p.stdout
    r, _ = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "rep")
    assert r.returncode == 0, r.stdout
    keys = [k for k, _ in blocks(tmp_path / "a" / "step_2" / "rank_0_activations.log")[1]]
    if level == "modules":
        assert "mlp.0/op_1_weight_grad" in keys or any(k.startswith("mlp.0/") and k.endswith("weight_grad") for k in keys), keys
    else:
        assert any(k.endswith("_addmm") or k.endswith("_gelu") for k in keys), keys


class Plain(nn.Module):
    def __init__(self):
        super().__init__()
        self.emb = nn.Embedding(V, D)
        self.fc = nn.Linear(D, D)
        self.head = nn.Linear(D, V)

    def forward(self, tok):
        return self.head(F.gelu(self.fc(self.emb(tok))))


def test_module_outputs_inside_torch_func_transforms_are_said_not_recorded(actdiff_bin, tmp_path):
    """Trial 31 F3: ``torch.func.grad`` in the step at level="modules"
    crashed the training job ("Cannot access data pointer of Tensor that
    doesn't have storage"): the hooks got functorch's wrapped tensors.
    Trial 32: the gradients it gives, set on the parameters, were not
    recorded (no backward accumulated them), and a changed gradient read
    as "the update itself differs"; they are recorded when the optimizer
    steps."""
    scale = {}

    def loss_fn(model, idx):
        params = dict(model.named_parameters())
        x = idx
        k = scale.get("k", 1.0)

        def f(p):
            out = torch.func.functional_call(model, p, (x,))
            return F.cross_entropy(out.reshape(-1, V), x.reshape(-1)) * k

        grads = torch.func.grad(f)(params)
        # The gradients torch.func computed, set where the optimizer reads
        # them; the loss itself through an ordinary forward.
        loss = f(params)
        for n, p in model.named_parameters():
            p.grad = None
            p.grad = grads[n].detach().clone()
        return loss.detach().requires_grad_()

    said = train(Plain, tmp_path / "a", level="modules", loss_fn=loss_fn)
    assert any("ran inside torch.func transforms (grad, vmap, jacrev, ...) and were not recorded" in w for w in said), said
    keys = [k for k, _ in blocks(tmp_path / "a" / "step_3" / "rank_0_activations.log")[1]]
    assert any(k.startswith("fc/") and k.endswith("weight_grad") for k in keys), keys

    def scaled_at_2(step, model, opt):
        scale["k"] = 1.5 if step == 2 else 1.0

    train(Plain, tmp_path / "b", level="modules", loss_fn=loss_fn, change=scaled_at_2)
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "rep")
    assert r.returncode == 1 and s["first_diverging_step"] == 2, r.stdout
    first = next(x for x in s["ranks"] if x["step"] == 2)["first_divergence"]
    assert first["key1"].endswith("_grad"), first
    assert "the update itself differs" not in r.stdout, r.stdout
    # Trial 67 F4: the generator alone profiled: the discriminator's
    # optimizer updates parameters the model does not hold, said once.
    said = gan_steps(tmp_path / "g", steps=2, profile_d=False)
    assert len([w for w in said if "an optimizer updates 6 of its 6 parameters that the Profiler's model does not hold" in w]) == 1, said


def test_a_module_added_or_replaced_during_training_is_recorded(actdiff_bin, tmp_path):
    """Trial 31 F2: at level="modules" a module added during training (an
    adapter with its own param group, step 2) was never recorded, so a
    learning rate of its group changed at step 3 compared "bitwise
    identical", exit 0; a parameter-free module replaced by an equal new
    one was "only in" the other run."""

    class Grown(Plain):
        def forward(self, tok):
            h = F.gelu(self.fc(self.emb(tok)))
            if hasattr(self, "extra"):
                h = h + self.extra(h)
            return self.head(h)

    def grow(lr_at=None):
        def change(step, model, opt):
            if step == 2:
                torch.manual_seed(5)
                model.extra = nn.Linear(D, D)
                opt.add_param_group({"params": model.extra.parameters(), "lr": 1e-2})
            if step == lr_at:
                opt.param_groups[-1]["lr"] = 2e-2

        return change

    train(Grown, tmp_path / "a", steps=4, level="modules", change=grow())
    train(Grown, tmp_path / "c", steps=4, level="modules", change=grow(lr_at=3))
    keys = [k for k, _ in blocks(tmp_path / "a" / "step_2" / "rank_0_activations.log")[1]]
    assert "extra/op_0_output" in keys, keys  # the step that adds it records it
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "c", tmp_path / "rep")
    assert r.returncode == 1 and s["first_diverging_step"] == 3, r.stdout
    first = next(x for x in s["ranks"] if x["step"] == 3)["first_divergence"]
    assert first["key1"].startswith("extra/") and first["phase"] == "optimizer", first

    class Act(Plain):
        def __init__(self):
            super().__init__()
            self.act = nn.GELU()

        def forward(self, tok):
            return self.head(self.act(self.fc(self.emb(tok))))

    def swap(step, model, opt):
        if step == 2:
            model.act = nn.GELU()

    train(Act, tmp_path / "p", level="modules")
    train(Act, tmp_path / "q", level="modules", change=swap)
    r, _ = compare(actdiff_bin, tmp_path / "p", tmp_path / "q", tmp_path / "rep2")
    assert r.returncode == 0, r.stdout


class Scales(Plain):
    def __init__(self):
        super().__init__()
        self.scales = nn.ParameterList([nn.Parameter(torch.ones(D)) for _ in range(2)])

    def forward(self, tok):
        h = self.fc(self.emb(tok)) * self.scales[0]
        return self.head(F.gelu(h) * self.scales[1])


def test_a_parameter_list_is_not_said_to_have_a_forward_that_never_ran(tmp_path):
    """Trial 31 F8: nn.ParameterList is never called; its parameters'
    gradients drew "its forward hook never ran"."""
    said = train(Scales, tmp_path / "a", level="modules")
    assert not any("forward hook never ran" in w for w in said), said
    keys = [k for k, _ in blocks(tmp_path / "a" / "step_1" / "rank_0_activations.log")[1]]
    assert any(k.startswith("scales/") and k.endswith("_grad") for k in keys), keys


class Attention(Plain):
    def __init__(self, call_fc=True):
        super().__init__()
        self.attn = nn.MultiheadAttention(D, 2, batch_first=True)
        self.call_fc = call_fc

    def forward(self, tok):
        h = self.emb(tok)
        h, _ = self.attn(h, h, h, need_weights=False)
        h = self.fc(h) if self.call_fc else F.linear(h, self.fc.weight, self.fc.bias)
        return self.head(F.gelu(h))


def test_multihead_attention_out_proj_is_not_said_to_have_a_forward_that_never_ran(tmp_path):
    """Trial 64: nn.MultiheadAttention reads its out_proj's parameters
    without calling it: every run drew "attn.out_proj: ... forward hook
    never ran". A Linear of the model's own used through F.linear still
    is said."""
    said = train(Attention, tmp_path / "a", level="modules")
    assert not any("forward hook never ran" in w for w in said), said
    said = train(lambda: Attention(call_fc=False), tmp_path / "b", level="modules")
    hook = [w for w in said if "forward hook never ran" in w]
    assert len(hook) == 1 and hook[0].split(": ")[2] == "fc" and "out_proj" not in hook[0], said


class Spectral(Plain):
    def __init__(self):
        super().__init__()
        self.filt = nn.Parameter(torch.ones(4, D, dtype=torch.complex64))

    def forward(self, tok):
        x = self.emb(tok)
        y = torch.fft.irfft(torch.fft.rfft(x, dim=1) * self.filt, n=6, dim=1)
        return self.head(x + y)


def test_ops_with_complex_results_are_said_not_captured(actdiff_bin, tmp_path):
    """Trial 31 F5: an FFT layer's complex ops (rfft, the multiply by a
    complex parameter, their backward) were left out of the per-op log
    without a word, with min_numel=0 and "Ops below min numel: 0"."""
    said = train(Spectral, tmp_path / "a")
    assert any("ops with complex results (_fft_r2c, mul" in w and "were not captured" in w for w in said), said
    train(Spectral, tmp_path / "b")
    r, _ = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "rep")
    assert r.returncode == 0, r.stdout


def test_a_profiler_whose_making_raised_says_nothing_at_close(tmp_path):
    """Trial 31 F7: a Profiler whose constructor raised stayed among the
    profilers closed at exit, which warned of its unreached steps with
    advice for a job resumed from a checkpoint."""
    from actdiff_capture import capture

    class Boom(nn.Module):
        def named_modules(self, *a, **k):  # arming walks the modules
            raise RuntimeError("boom")

    before = len(capture._live)
    with pytest.raises(RuntimeError, match="boom"):
        actdiff_capture.Profiler(Boom(), tmp_path / "d", capture_steps=[1, 2])
    assert len(capture._live) == before, "not closed (nor warned about) at exit"
    # A process that ran no step is given no resume advice.
    prof = actdiff_capture.Profiler(nn.Linear(2, 2), tmp_path / "e", capture_steps=[3], level="modules")
    with pytest.warns(UserWarning, match=r"\(the last step was 0\): no log was written"):
        prof.close()


def gan_steps(dump, *, steps=4, d_lr_at=None, bn_momentum=0.1, profile_d=True, level="modules", skip_d_at=None):
    """A GAN's loop at ``level`` ("modules" by default): the discriminator
    (with a BatchNorm) updated by its own optimizer before the generator's
    backward runs through it, both in one captured step. ``d_lr_at``:
    the step from which D's learning rate is 5x; ``bn_momentum``: D's
    BatchNorm momentum; ``skip_d_at``: the step whose ``opt_d.step()`` is
    skipped."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    G = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 4))
    D = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8, momentum=bn_momentum), nn.ReLU(), nn.Linear(8, 1))
    opt_g = torch.optim.Adam(G.parameters(), lr=1e-2)
    opt_d = torch.optim.SGD(D.parameters(), lr=1e-2, momentum=0.9)
    g = torch.Generator().manual_seed(3)
    model = nn.ModuleDict({"G": G, "D": D}) if profile_d else G
    with warnings.catch_warnings(record=True) as said, actdiff_capture.Profiler(
        model, dump, capture_steps=range(1, steps + 1), level=level, precision="full",
        **({"min_numel": 0} if level == "ops" else {}),
    ) as prof:
        warnings.simplefilter("always")
        for step in range(1, steps + 1):
            if d_lr_at is not None and step == d_lr_at:
                opt_d.param_groups[0]["lr"] *= 5
            z, real = torch.randn(8, 4, generator=g), torch.randn(8, 4, generator=g)
            fake = G(z)
            loss_d = F.softplus(-D(real)).mean() + F.softplus(D(fake.detach())).mean()
            loss_d.backward()
            if step != skip_d_at:
                opt_d.step()
            opt_d.zero_grad()
            loss_g = F.softplus(-D(fake)).mean()
            loss_g.backward()
            opt_g.step()
            opt_g.zero_grad()
            opt_d.zero_grad()
            prof.step(loss=loss_g)
    return [str(w.message) for w in said if "actdiff_capture" in str(w.message)]


def test_an_optimizer_step_one_run_skipped_is_named_with_its_parameters(actdiff_bin, tmp_path):
    """Trial 67 F5: one run skips the discriminator's ``opt_d.step()`` at
    step 3; per op, the headline named a one-sided momentum ``mul_``
    alone. It now says what the op updates and that the other run ran no
    such op."""
    gan_steps(tmp_path / "a", level="ops")
    gan_steps(tmp_path / "b", level="ops", skip_d_at=3)
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "rep")
    assert r.returncode == 1 and s["first_diverging_step"] == 3, r.stdout
    head = r.stdout.splitlines()[1]
    assert "an op only in a" in head and "it updates parameter D.0.weight, and b ran no such op" in head, r.stdout


def eval_steps(dump, *, eval_at=None, steps=3, level="modules", forget_train=False):
    """A small training loop at ``level``; ``eval_at``: the step after
    whose optimizer step a ``no_grad`` evaluation forward runs;
    ``forget_train``: the model is left in eval mode after it."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.Dropout(0.1), nn.ReLU(), nn.Linear(8, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    g = torch.Generator().manual_seed(3)
    kw = {"min_numel": 0} if level == "ops" else {}
    with actdiff_capture.Profiler(model, dump, capture_steps=range(1, steps + 1), level=level, precision="full", **kw) as prof:
        for step in range(1, steps + 1):
            x = torch.randn(8, 4, generator=g)
            loss = model(x).pow(2).mean()
            loss.backward()
            opt.step()
            opt.zero_grad()
            if step == eval_at:
                model.eval()
                with torch.no_grad():
                    model(torch.randn(8, 4, generator=torch.Generator().manual_seed(9)))
                if not forget_train:
                    model.train()
            prof.step(loss=loss)


def test_an_evaluation_pass_in_one_run_is_no_forward_change(actdiff_bin, tmp_path):
    """Trial 70 F2: an evaluation forward in one run only (training
    bitwise identical) read "step 2 first differs in its forward: from a
    change to the forward computation ..., from step 2's batch ..."; its
    records are of one run only, and every paired record agrees."""
    eval_steps(tmp_path / "a")
    eval_steps(tmp_path / "b", eval_at=2)
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "rep")
    assert r.returncode == 1 and s["first_diverging_step"] == 2, r.stdout
    assert "first differs in its forward" not in r.stdout, r.stdout
    assert "every paired record agrees; the runs recorded other module calls: only in b (" in r.stdout, r.stdout
    assert "(an evaluation pass, or a module called more often, in one run)" in r.stdout, r.stdout


def test_a_model_left_in_eval_mode_is_suggested(actdiff_bin, tmp_path):
    """Trial 70 F5: a model left in eval mode after an evaluation pass
    (dropout off from the next step) was named at its dropout, with no
    word of the likely cause; per op, the one-sided random op says it,
    and at level="modules" the differing draws do."""
    eval_steps(tmp_path / "a", eval_at=1, level="ops")
    eval_steps(tmp_path / "b", eval_at=1, level="ops", forget_train=True)
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "rep")
    assert r.returncode == 1 and s["first_diverging_step"] == 2, r.stdout
    assert "a random op that b did not run (dropout off in a module left in eval mode there?)" in r.stdout, r.stdout
    eval_steps(tmp_path / "ma", eval_at=1)
    eval_steps(tmp_path / "mb", eval_at=1, forget_train=True)
    r, s = compare(actdiff_bin, tmp_path / "ma", tmp_path / "mb", tmp_path / "mrep")
    assert r.returncode == 1 and s["first_diverging_step"] == 2, r.stdout
    assert "dropout off in a module left in eval mode in one run" in r.stdout, r.stdout


def test_two_optimizers_and_a_batchnorm_at_level_modules(actdiff_bin, tmp_path):
    """Trial 67 F1: the discriminator's parameters, recorded after its
    optimizer step and before the generator's backward, were read as
    forward records (a block without a Phase line before the step's last
    backward), so its changed learning rate read as "first differs in its
    forward ... from step 3's batch"; they carry ``Phase: optimizer``.
    Trial 68 F1: a changed BatchNorm momentum (its running statistics
    alone differ) read as "the update itself differs"; parameter records
    carry a ``Parameters:`` line and a buffer's does not, and the verdict
    names the buffer. A frame compiled earlier in the process (Dynamo's
    counters move) does not make the container given as the model, which
    has no forward of its own, read as "the model's forward ran compiled"
    (the full suite's order: a false warning)."""
    torch.compile(lambda x: x + 1, backend="eager")(torch.ones(2))
    assert modules.dynamo_compiled()
    assert not gan_steps(tmp_path / "a")
    log = (tmp_path / "a" / "step_1" / "rank_0_activations.log").read_text()
    weight = log[log.index("[D.0/op_") :].split("\n\n")[0]
    bufs = [b for b in log.split("\n\n") if "_running_mean]" in b]
    assert bufs and "Phase: optimizer" in bufs[0] and "Parameters:" not in bufs[0], bufs
    d_params = [b for b in log.split("\n\n") if b.startswith("[D.0/op_") and b.split("]")[0].endswith(("_weight", "_bias"))]
    assert d_params and all("Phase: optimizer" in b and "Parameters: D.0." in b for b in d_params), (weight, d_params)
    gan_steps(tmp_path / "b", d_lr_at=3)
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "rep")
    assert r.returncode == 1 and s["first_diverging_step"] == 3, r.stdout
    first = next(x for x in s["ranks"] if x["step"] == 3)["first_divergence"]
    assert first["phase"] == "optimizer" and first["key1"].startswith("D."), first
    assert "step 3's forward outputs and gradients agree, and its parameters differ after the optimizer step: the update itself differs" in r.stdout, r.stdout
    assert "first differs in its forward" not in r.stdout, r.stdout
    gan_steps(tmp_path / "c", bn_momentum=0.3)
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "c", tmp_path / "rep2")
    assert r.returncode == 1 and s["first_diverging_step"] == 1, r.stdout
    assert "a persistent buffer differs as the step left it (`D.1/op_" in r.stdout, r.stdout
    assert "the update itself differs" not in r.stdout, r.stdout
    # Trial 67 F4: the generator alone profiled: the discriminator's
    # optimizer updates parameters the model does not hold, said once.
    said = gan_steps(tmp_path / "g", steps=2, profile_d=False)
    assert len([w for w in said if "an optimizer updates 6 of its 6 parameters that the Profiler's model does not hold" in w]) == 1, said


def test_an_ema_of_batchnorm_buffers_is_in_the_optimizer_phase(tmp_path):
    """Trial 68 F4: a timm-style EMA updated after ``optimizer.step()``:
    the ``lerp_`` of its copies of the parameters was the optimizer's, the
    ``lerp_`` of its copy of BatchNorm's running mean "Phase: forward", and
    a changed EMA decay read as "first divergence (forward)". Both are the
    optimizer's: the model's persistent buffers count as its state."""
    import copy

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.Linear(8, 2))
    ema = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    with actdiff_capture.Profiler(model, tmp_path / "a", capture_steps=[1], precision="full", min_numel=0) as prof:
        loss = model(torch.randn(8, 4)).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        with torch.no_grad():
            for e, m in zip(ema.state_dict().values(), model.state_dict().values()):
                if e.is_floating_point():
                    e.lerp_(m, 0.1)
        prof.step(loss=loss)
    lerps = [b for b in (tmp_path / "a" / "step_1" / "rank_0_activations.log").read_text().split("\n\n") if "_lerp_]" in b]
    # 6 parameters and 2 float buffers (num_batches_tracked is an int).
    assert len(lerps) == 8, lerps
    assert not any("Phase: forward" in b for b in lerps), lerps


@pytest.mark.parametrize("eval_after_prof_step", [True, False])
def test_an_evaluation_before_the_training_forward_is_warned_about(tmp_path, eval_after_prof_step):
    """Trial 68 F3: an evaluation pass at the end of the loop, after
    ``prof.step()``, is recorded at level="modules" as the next step's
    first records, read as its training forward: said once. Run before
    ``prof.step()`` (after the update), it is not."""
    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(4, 8), nn.ReLU(), nn.Linear(8, 2))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)

    def evaluate():
        model.eval()
        with torch.no_grad():
            model(torch.randn(2, 4))
        model.train()

    with warnings.catch_warnings(record=True) as said:
        warnings.simplefilter("always")
        with actdiff_capture.Profiler(model, tmp_path / "a", capture_steps=range(1, 4), level="modules") as prof:
            for _ in range(3):
                loss = model(torch.randn(8, 4)).square().mean()
                loss.backward()
                opt.step()
                opt.zero_grad()
                if not eval_after_prof_step:
                    evaluate()
                prof.step(loss=loss)
                if eval_after_prof_step:
                    evaluate()
    said = [str(w.message) for w in said if "ran without autograd" in str(w.message)]
    if eval_after_prof_step:
        assert len(said) == 1 and said[0].startswith("actdiff_capture: step 2: the model's forward ran without autograd"), said
    else:
        assert not said, said
