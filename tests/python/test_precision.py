"""precision="full" and digests (issue 13), through the Profiler and the
ActivationCaptureProfiler: the header line, every float printed as the
shortest text that round-trips in float64 (and rounding to the default
log's %.6e text), and one 16-hex-digit digest per hashed tensor that is
equal across identical runs and differs where a tensor changed."""

from __future__ import annotations

import re

import pytest

import actdiff_capture
from llama import train
from logs import blocks

FLOAT_FIELDS = ("L2 norm", "Min", "Max", "Mean")
HASH_FIELDS = ("Output hash", "Input hashes")
HEX16 = re.compile(r"^[0-9a-f]{16}$")


def capture(path, perturb=None, **kw):
    train(2, profiler=lambda m: actdiff_capture.Profiler(m, path, capture_step=2, **kw), perturb=perturb)
    return blocks(path / "rank_0_activations.log")


@pytest.fixture(scope="module")
def default(tmp_path_factory):
    return capture(tmp_path_factory.mktemp("default"))


@pytest.fixture(scope="module")
def full(tmp_path_factory):
    return capture(tmp_path_factory.mktemp("full"), precision="full")


def values(fields, name):
    v = fields.get(name)
    return [] if v is None else v.split(", ")


def significant_digits(text: str) -> int:
    mant = text.lower().split("e")[0].lstrip("+-").replace(".", "").lstrip("0")
    return len(mant.rstrip("0")) or 1


def test_header_states_the_precision(default, full):
    head, _ = full
    assert head[-1] == "Precision: full", head
    assert head[1].startswith("Excluded ops dispatched: ") and len(head) == 6, head
    assert re.fullmatch(r"RNG state: start=[0-9a-f]{16} end=[0-9a-f]{16}", head[4]), head
    assert all(not line.startswith("Precision") for line in default[0])


def test_full_precision_round_trips_and_rounds_to_the_default_text(default, full):
    _, dbl = default
    _, fbl = full
    assert [k for k, _ in fbl] == [k for k, _ in dbl]
    longer = 0
    for (k, d), (_, f) in zip(dbl, fbl):
        assert f.get("Shape") == d.get("Shape") and f.get("Phase") == d.get("Phase"), k
        for name in FLOAT_FIELDS + HASH_FIELDS:
            fv, dv = values(f, name), values(d, name)
            assert len(fv) == len(dv), (k, name)
            for a, b in zip(fv, dv):
                x = float(a)  # Python float() syntax
                # Shortest round-trip text: no more digits than repr() needs.
                assert significant_digits(a) <= min(17, significant_digits(repr(x))), (k, name, a)
                # The default log prints the same float64 with %.6e.
                assert f"{x:.6e}" == b, (k, name, a, b)
                longer += significant_digits(a) > 7
    assert longer > 1000  # most values carry more than the 7 printed digits


def test_digests_are_aligned_with_the_hashes(default, full):
    _, fbl = full
    for k, f in fbl:
        assert len(values(f, "Output digest")) == len(values(f, "Output hash")), k
        assert len(values(f, "Input digests")) == len(values(f, "Input hashes")), k
        assert all(HEX16.match(v) for v in values(f, "Output digest") + values(f, "Input digests")), k
    # Field order: digests right after Input hashes, before Input producers.
    labels = list(fbl[1][1])
    assert labels.index("Output digest") == labels.index("Input hashes") + 1
    assert labels.index("Input digests") == labels.index("Output digest") + 1
    assert labels.index("Input producers") > labels.index("Input digests")
    # Default precision: no digests unless asked for.
    assert all("Output digest" not in f for _, f in default[1])


def test_digests_tell_identical_runs_from_a_changed_tensor(full, tmp_path):
    _, again = capture(tmp_path / "again", precision="full")
    assert again == full[1]

    def perturb(model):
        model.layers[2].feed_forward.w1.weight[0, 0] += 1e-7

    _, changed = capture(tmp_path / "changed", perturb=perturb, precision="full")
    keys = [k for k, _ in full[1]]
    first = next(i for i, ((_, a), (_, b)) in enumerate(zip(full[1], changed)) if a.get("Output digest") != b.get("Output digest"))
    assert keys[first].startswith("layers.2.feed_forward.w1/"), keys[first]
    assert all(a == b for (_, a), (_, b) in zip(full[1][:first], changed[:first]))


def test_digests_without_full_precision(tmp_path):
    _, bl = capture(tmp_path, digests=True)
    assert all(HEX16.match(v) for _, f in bl for v in values(f, "Output digest"))
    assert all(significant_digits(v) <= 7 for _, f in bl for v in values(f, "L2 norm"))


def test_bad_precision_is_an_error(tmp_path):
    import torch

    # The error lists every value, "default" (the same as None) included
    # (trial 63: an alias no text named).
    with pytest.raises(ValueError, match=r"^precision must be None, 'default' \(the same\) or 'full', got 'double'$"):
        actdiff_capture.Profiler(torch.nn.Linear(2, 2), tmp_path, precision="double")
    with actdiff_capture.Profiler(torch.nn.Linear(2, 2), tmp_path, precision="default", capture_steps=[2]) as p:
        assert p.precision is None
    assert "default" in actdiff_capture.capture.PRECISIONS
    with pytest.raises(ValueError, match="precision"):
        actdiff_capture.ActivationCaptureProfiler(enabled=True, model=torch.nn.Linear(2, 2), dump_dir=str(tmp_path), precision=7)
