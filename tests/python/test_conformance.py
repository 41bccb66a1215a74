"""Conformance with TorchTitan's tracer: ../shared/capture/recipe.py run in
each mode with actdiff_capture's ActivationCaptureProfiler, against the log
the reference tracer wrote through the same recipe under the installed
torch (../shared/capture/ref/torch-<version>/<mode>/).

- eager, adamw: the same header, the same keys in the same order, and every
  field the reference writes equal as printed (Shape and Dtype, stats,
  hashes, producers, Location, Phase);
- ac: the same ops, stats and phases; keys differ only where the reference
  writes the short FQNs of recomputed ops (docs/capture.md);
- compile: the same ops, stats and phases; keys carry module FQNs where the
  reference writes `<none>`, Location is the FX node's source line.

The numbers (stats and hashes) are the tensors' own, so they are the
reference's only on a host whose kernels compute the reference host's bits.
`linear_probe` tells: plain torch, no tracer, computes the recipe's Linear
outputs here, and every one of them must equal the agent's block on any host
(`test_linear_outputs_equal_plain_torch_here`). Where those plain values
equal the reference log's too, every number is compared as printed; where
they do not (a host without AVX-512 runs PyTorch's other vectorized
kernels), the numbers are compared within RTOL of max(|value|, the block's
RMS), every other field still as printed, and a warning says so.

Without ../shared these tests are reported as skipped, with the reason.
"""

from __future__ import annotations

import functools
import json
import math
import subprocess
import warnings

import pytest

from logs import blocks, capture_data, linear_probe, recipe_log, reference_header, split_key

DATA, WHY = capture_data()
pytestmark = pytest.mark.skipif(DATA is None, reason=WHY or "")

# Every field TorchTitan's tracer writes (the agent adds NaN/Inf counts).
REF_FIELDS = ("Shape", "L2 norm", "Min", "Max", "Mean", "Output hash", "Input hashes", "Input producers", "Location", "Phase")
VALUES = ("Shape", "L2 norm", "Min", "Max", "Mean", "Output hash", "Input hashes", "Phase")
# The fields computed from tensor values (the host's kernels decide them).
NUMBERS = ("L2 norm", "Min", "Max", "Mean", "Output hash", "Input hashes")
# On a host whose kernels differ from the reference's: float32 rounding
# differences of a few ulps per op, grown through 4 layers, backward and an
# AdamW step (measured here with ATEN_CPU_CAPABILITY=avx2 / default and
# MKL_CBWR=COMPATIBLE: at most 1.5e-5 of max(|value|, RMS)).
RTOL = 1e-4


def ref_log(mode: str):
    return blocks(DATA[1] / mode / "rank_0_activations.log")


def ours(mode: str):
    return blocks(recipe_log(mode))


@functools.cache
def host_differs() -> tuple:
    """The probe's fields whose plain-torch value on this host differs from
    the reference log's: () when this host reproduces the reference host's
    kernels."""
    ref = dict(ref_log("eager")[1])
    return tuple(
        f"{k} {f}: reference {ref[k][f]}, this host {v}"
        for k, fields in linear_probe().items()
        for f, v in fields.items()
        if ref[k].get(f) != v
    )


def rms(fields) -> float:
    """A block's root mean square, L2 / sqrt(numel); 0 without an L2 norm."""
    if "L2 norm" not in fields:
        return 0.0
    dims = fields["Shape"].split("[", 1)[1].split("]", 1)[0]
    numel = math.prod(int(d) for d in dims.split(",") if d.strip()) if dims.strip() else 1
    return float(fields["L2 norm"]) / math.sqrt(max(numel, 1))


def close(ref: str, ours: str, scale: float) -> float | None:
    """The largest |a - b| / max(|b|, scale) over two printed numbers (or
    comma-separated lists of them); None when they cannot be paired (other
    lengths, NaN against a number)."""
    a, b = ref.split(", "), ours.split(", ")
    if len(a) != len(b):
        return None
    worst = 0.0
    for x, y in zip(a, b):
        x, y = float(x), float(y)
        if x == y or (math.isnan(x) and math.isnan(y)):
            continue
        if math.isnan(x) or math.isnan(y) or math.isinf(x) or math.isinf(y):
            return None
        worst = max(worst, abs(x - y) / max(abs(x), scale, 1e-300))
    return worst


def assert_fields(ref_bl, our_bl, fields, skip=lambda i: False, differ=None):
    """Every field equal as printed; the NUMBERS within RTOL where this host
    does not reproduce the reference's kernels (`differ`, by default
    host_differs()), with a warning."""
    differ = host_differs() if differ is None else differ
    bad, worst = [], 0.0
    for i, ((rk, rf), (ok, of)) in enumerate(zip(ref_bl, our_bl)):
        if skip(i):
            continue
        for f in fields:
            a, b = rf.get(f), of.get(f)
            if a == b:
                continue
            if differ and f in NUMBERS and a is not None and b is not None:
                d = close(a, b, rms(rf))
                if d is not None and d <= RTOL:
                    worst = max(worst, d)
                    continue
            bad.append(f"block {i} [{rk}] vs [{ok}] {f}: reference {a!r}, agent {b!r}")
    assert not bad, f"{len(bad)} differences, first ones:\n" + "\n".join(bad[:15])
    if differ:
        warnings.warn(
            f"this host's kernels do not compute the reference host's values ({len(differ)} of the plain-torch "
            f"probe's fields differ, e.g. {differ[0]}): stats and hashes compared within rtol {RTOL} "
            f"(largest difference {worst:.2e}), every other field as printed"
        )


def mapped_producers(ref_bl, our_bl):
    """The agent's Input producers with each key replaced by the reference's
    key of the same block (so logs whose keys differ can be compared)."""
    to_ref = {ok: rk for (rk, _), (ok, _) in zip(ref_bl, our_bl)}
    out = []
    for _, f in our_bl:
        p = f.get("Input producers")
        out.append(None if p is None else ";".join(to_ref.get(k, k) if k else "" for k in p.split(";")))
    return out


def test_the_comparison_catches_a_changed_number():
    """assert_fields fails on a number changed in its 7th digit where the
    host reproduces the reference, and on one changed by 10 x RTOL of the
    block's RMS where it does not."""
    _, ref = ref_log("eager")
    i, (k, f) = next((i, b) for i, b in enumerate(ref) if b[0] == "layers.1.attention.wv/op_0_mm")
    for differ, delta in (((), 1e-6 * abs(float(f["Mean"]))), (("x",), 10 * RTOL * rms(f))):
        changed = list(ref)
        changed[i] = (k, dict(f, Mean=f"{float(f['Mean']) + delta:.6e}"))
        assert changed[i][1]["Mean"] != f["Mean"]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            assert_fields(ref, ref, REF_FIELDS, differ=differ)
            with pytest.raises(AssertionError, match=r"(?s)1 differences.*Mean"):
                assert_fields(ref, changed, REF_FIELDS, differ=differ)


@pytest.mark.parametrize("mode", ["eager", "ac", "compile"])
def test_linear_outputs_equal_plain_torch_here(mode):
    """On any host: the agent's block of every nn.Linear output of step 2
    holds the values plain torch computes for it on this host (the same
    forward, no tracer): the capture neither changes the computation nor
    computes a statistic otherwise than the reference does."""
    probe = linear_probe()
    assert len(probe) == 4 * 7 + 1
    got = dict(ours(mode)[1])
    bad = [
        f"[{k}] {f}: plain torch {v!r}, agent {got.get(k, {}).get(f)!r}"
        for k, fields in probe.items()
        for f, v in fields.items()
        if got.get(k, {}).get(f) != v
    ]
    assert not bad, f"{len(bad)} differences:\n" + "\n".join(bad[:15])


@pytest.mark.parametrize("mode", ["eager", "adamw"])
def test_same_log_as_the_reference(mode):
    ref_head, ref_bl = ref_log(mode)
    head, bl = ours(mode)
    assert reference_header(head) == ref_head
    assert "Capture filter: min_numel=1000" in head, head
    assert [k for k, _ in bl] == [k for k, _ in ref_bl]
    assert_fields(ref_bl, bl, REF_FIELDS)
    # The agent writes no field the reference lacks, except NaN/Inf counts,
    # the parameters an op of optimizer.step() updates, and the parameters
    # other ops read, which the reference ignores (docs/log-format.md).
    extra = {f for _, fields in bl for f in fields} - set(REF_FIELDS)
    assert extra <= {"NaN count", "Inf count", "Parameters", "Input parameters"}, extra
    named = [k for k, f in bl if "Parameters" in f]
    assert bool(named) == (mode == "adamw"), named
    assert all(k.startswith("<none>/") for k in named), named
    # Every forward op reading a weight names it where it reads it; no
    # optimizer op has the line (its Parameters line says it).
    reading = {k: f["Input parameters"] for k, f in bl if "Input parameters" in f}
    assert reading and not set(reading) & set(named), reading
    assert all(n.count(";") == f["Input hashes"].count(",") for k, n in reading.items() for kk, f in bl if kk == k)


def test_activation_checkpointing_differs_only_in_recomputed_fqns():
    ref_head, ref_bl = ref_log("ac")
    head, bl = ours("ac")
    assert reference_header(head) == ref_head
    assert "Capture filter: min_numel=1000" in head, head
    assert len(bl) == len(ref_bl)
    recomputed = set()
    for i, ((rk, rf), (ok, of)) in enumerate(zip(ref_bl, bl)):
        rfqn, _, rop = split_key(rk)
        ofqn, _, oop = split_key(ok)
        assert rop == oop, f"block {i}: op {rop} vs {oop}"
        if rfqn == ofqn:
            continue
        # A recomputed op: the reference's FQN is relative to the checkpointed
        # block (or, for the block's own ops, a child's via the grad_fn walk);
        # the agent's is the full FQN of the module it runs in.
        assert rf.get("Phase") == "backward", (rk, ok)
        assert ofqn.startswith("layers."), (rk, ok)
        block = ".".join(ofqn.split(".")[:2])
        assert ofqn == f"{block}.{rfqn}" or (ofqn == block and rfqn.startswith(block + ".")), (rk, ok)
        recomputed.add(i)
    keys = [k for k, _ in bl]
    assert len(set(keys)) == len(keys)
    assert_fields(ref_bl, bl, VALUES)
    assert mapped_producers(ref_bl, bl) == [f.get("Input producers") for _, f in ref_bl]
    # Location: the reference gives a recomputed op the line of the backward
    # node that triggered the recomputation; the agent the op's own line.
    assert_fields(ref_bl, bl, ("Location",), skip=lambda i: i in recomputed)
    # What each block recomputes is its forward, as the plain (eager) run
    # captures it: the same modules, ops and lines, in the same order.
    eager = ours("eager")[1]
    for n in range(4):
        block = f"layers.{n}"

        def rows(bls, which):
            return [
                (split_key(k)[0], split_key(k)[2], f["Location"])
                for i, (k, f) in enumerate(bls)
                if which(i, f) and (k.startswith(block + ".") or k.startswith(block + "/"))
            ]

        again = rows(bl, lambda i, f: i in recomputed)
        assert again and again == rows(eager, lambda i, f: "Phase" not in f), block


def test_compiled_graphs_carry_module_fqns():
    ref_head, ref_bl = ref_log("compile")
    head, bl = ours("compile")
    assert reference_header(head) == ref_head
    assert "Capture filter: min_numel=1000" in head, head
    # The same ATen ops in the same order, with the same values: the compiled
    # graphs ran under the capture (not an eager fallback: 270 blocks, where
    # the eager step has 265).
    assert len(bl) == len(ref_bl) != len(ref_log("eager")[1])
    for i, ((rk, _), (ok, _)) in enumerate(zip(ref_bl, bl)):
        assert split_key(rk)[2] == split_key(ok)[2], f"block {i}: {rk} vs {ok}"
    assert_fields(ref_bl, bl, VALUES)
    assert mapped_producers(ref_bl, bl) == [f.get("Input producers") for _, f in ref_bl]
    # Beyond the reference (all `<none>`): module FQNs from the FX nodes.
    assert all(split_key(k)[0] == "<none>" for k, _ in ref_bl)
    with_fqn = [k for k, _ in bl if not k.startswith("<none>/")]
    assert len(with_fqn) >= 0.9 * len(bl), f"{len(with_fqn)}/{len(bl)} keys with a module FQN"
    keys = [k for k, _ in bl]
    assert len(set(keys)) == len(keys)
    assert keys[0] == "tok_embeddings/op_0_embedding"
    assert "layers.0.attention.wq/op_0_mm" in keys
    # Locations: the FX node's source line, not the generated code's.
    assert not [k for k, f in bl if "eval_with_key" in f.get("Location", "") or "_aot_autograd" in f.get("Location", "")]
    eager = dict(ours("eager")[1])
    assert bl[0][1]["Location"] == eager["tok_embeddings/op_0_embedding"]["Location"]


def compare_rows(actdiff_bin, log1, log2, out):
    """`actdiff compare` of two capture folders; (exit status, --rows rows)."""
    rows = out / "rows.jsonl"
    r = subprocess.run(
        [actdiff_bin, "compare", str(log1.parent), str(log2.parent), "-o", str(out / "report"), "--rows", str(rows), "-q"],
        capture_output=True,
        text=True,
    )
    assert r.returncode in (0, 1), r.stdout + r.stderr
    return r.returncode, [json.loads(line) for line in rows.read_text().splitlines()]


def paired_by_key(rows):
    """The run-1 rows and those of them paired by exact or fuzzy key."""
    run1 = [r for r in rows if r.get("key1")]
    return run1, [r for r in run1 if r.get("key2") and r["strategy"] in ("exact", "fuzzy")]


def test_eager_and_compiled_captures_pair_by_key(actdiff_bin, tmp_path):
    _, rows = compare_rows(actdiff_bin, recipe_log("eager"), recipe_log("compile"), tmp_path)
    run1, paired = paired_by_key(rows)
    assert len(run1) == 265
    assert len(paired) >= 0.9 * len(run1), f"{len(paired)}/{len(run1)} eager rows paired by key"
    # What stays unpaired: RMSNorm's in-place `add_` of the eps (a hash-only
    # row in eager), which the compiled graph runs as a functional add on a
    # tensor below min_numel (not captured).
    unpaired = [r["key1"] for r in run1 if r not in paired]
    assert all(k.endswith("_norm/op_1_add_") or k == "norm/op_1_add_" for k in unpaired), unpaired
    # Most pairs match. The `diff` ones are pairs of different ops: the
    # eager `add_` row shifts the counters of the two `mul`s of each RMSNorm
    # (an exact key then pairs the first with the second), and backward ops
    # of one module run in another order in the compiled graph.
    assert sum(r["status"] == "match" for r in paired) >= 0.8 * len(paired)


def test_checkpointed_capture_pairs_with_the_plain_one_by_key(actdiff_bin, tmp_path):
    _, rows = compare_rows(actdiff_bin, recipe_log("eager"), recipe_log("ac"), tmp_path)
    run1, paired = paired_by_key(rows)
    assert len(paired) == len(run1) == 265
    # The recomputed forward ops are the checkpointed run's extra rows.
    assert sum(1 for r in rows if r["status"] == "only2") == 4 * 20
