"""Parallel layouts (issue 27) on ``tpmodel.py``, a user's tensor-parallel
language model (``ColwiseParallel``/``RowwiseParallel``, gloo on CPU, two
processes through torchrun): the capture records DTensor layouts, and
``actdiff compare`` combines the TP=2 run's shards into whole tensors and
compares them op by op with a TP=1 run."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

HERE = pathlib.Path(__file__).resolve().parent
MODEL = HERE / "tpmodel.py"

# The tolerance the README documents for summation order across layouts.
LAYOUT_TOL = ["--rtol", "1e-4", "--atol", "1e-6"]


def capture(dump, nproc: int, *args):
    """Runs tpmodel.py into ``dump`` on ``nproc`` processes (1: no torchrun)."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    if nproc == 1:
        cmd = [sys.executable, str(MODEL), str(dump), *args]
    else:
        cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone",
               f"--nproc_per_node={nproc}", str(MODEL), str(dump), *args]  # fmt: skip
    r = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return re.findall(r"loss (\S+)", r.stdout)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    d = tmp_path_factory.mktemp("layouts")
    losses = {
        "tp1": capture(d / "tp1", 1),
        "tp2": capture(d / "tp2", 2),
        "tp2_eps": capture(d / "tp2_eps", 2, "--eps", "1e-2"),
        "tp2_replica": capture(d / "tp2_replica", 2, "--perturb-rank", "1"),
    }
    return d, losses


def compare(actdiff_bin, a, b, out, *args):
    r = subprocess.run(
        [actdiff_bin, "compare", str(a), str(b), "-o", str(out), *args],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    summary = json.loads((out / "summary.json").read_text())
    return r, summary


def test_logs_declare_the_mesh_and_layouts_the_reference_ignores(runs):
    d, _ = runs
    for rank in (0, 1):
        text = (d / "tp2" / f"rank_{rank}_activations.log").read_text()
        head = text.split("=" * 80)[0]
        assert "Mesh: tp=2\n" in head and f"Coords: tp={rank}\n" in head
        layout_lines = [ln for ln in text.splitlines() if re.match(r"\s+(Layout|Output layouts|Input layouts):", ln)]
        # wq's column shard: its whole shape and this rank's offset
        assert any(ln.strip() == f"Layout: tp:S(1) [64, 64] at [0, {32 * rank}]" for ln in layout_lines)
        assert any(ln.strip() == "Output layouts: tp:P" for ln in layout_lines)  # wo's pending sum
        # The reference comparator's reading rules (spec/log-format.md): a
        # line naming one of its labels sets that field, a stat line
        # `\s+(Shape|L1 norm|...):\s+` sets a stat; layout lines do neither.
        ref = ("Location:", "Phase:", "Output hash:", "Input hashes:", "Input producers:")
        stat = re.compile(r"\s+(Shape|L1 norm|L2 norm|Min|Max|Mean):\s+")
        for ln in layout_lines:
            assert not any(label in ln for label in ref) and not stat.match(ln), ln
    assert "Mesh:" not in (d / "tp1" / "rank_0_activations.log").read_text()


def test_tp2_against_tp1_agrees_up_to_summation_order(runs, actdiff_bin, tmp_path):
    d, losses = runs
    assert losses["tp1"] == losses["tp2"]  # the same loss to 7 digits
    r, s = compare(actdiff_bin, d / "tp1", d / "tp2", tmp_path / "rep", *LAYOUT_TOL)
    assert r.returncode == 0, r.stdout + r.stderr
    (rank,) = s["ranks"]
    assert rank["run1"]["paired"] == rank["run1"]["entries"] > 200  # every TP=1 row paired
    assert rank["counts"]["diff"] == 0 and rank["counts"]["only2"] == 0
    (lay,) = s["layouts"]
    assert (lay["side"], lay["combined"], lay["ranks"]) == (2, "tp=2", [{"rank": 0, "name": "", "ranks": [0, 1]}])
    assert lay["mismatch_count"] == 0 and lay["not_comparable"] == 0
    assert "tp2: ranks 0–1 combined as tp=2 (rank 0)" in r.stdout
    assert "ranks 0–1 combined as tp=2" in (tmp_path / "rep" / "index.html").read_text()
    r, s = compare(actdiff_bin, d / "tp1", d / "tp2", tmp_path / "rep_preset", "--layouts")
    assert r.returncode == 0 and s["ranks"][0]["counts"]["match"] == rank["counts"]["match"], r.stdout
    # Summation order is visible at 7 digits, and far below the tolerance:
    # at the reference's tolerance the compare says to use --layouts (a
    # new user's trial: no word pointed there), and only then.
    r, s = compare(actdiff_bin, d / "tp1", d / "tp2", tmp_path / "rep0")
    assert r.returncode == 1
    hint = "tp2 combined from shards into whole tensors and compared at the reference's tolerance"
    assert hint in r.stderr and "--layouts (rtol 1e-4, atol 1e-6)" in r.stderr, r.stderr
    assert any(hint in w for w in s["warnings"]), s["warnings"]
    assert hint not in r.stderr.replace(hint, "", 1)  # said once
    # ... and the verdict says every gating row is within --layouts'
    # tolerance, which a real change is not (trial 18 M3: the same
    # headline for both, a warning apart).
    rounding = "within --layouts' tolerance (rtol 1e-4): runs of different parallel layouts add in another order"
    assert rounding in r.stdout and any(rounding in v for v in s["verdict"]), r.stdout
    r_eps, _ = compare(actdiff_bin, d / "tp1", d / "tp2_eps", tmp_path / "rep_eps0")
    assert r_eps.returncode == 1 and rounding not in r_eps.stdout, r_eps.stdout
    r, s = compare(actdiff_bin, d / "tp1", d / "tp2", tmp_path / "rep5", "--rtol", "1e-5", "--atol", "1e-6")
    assert r.returncode == 0, r.stdout
    assert "combined from shards" not in r.stderr, r.stderr


def test_an_eps_changed_in_tp2_is_the_first_cause_in_that_norm(runs, actdiff_bin, tmp_path):
    d, _ = runs
    r, s = compare(actdiff_bin, d / "tp1", d / "tp2_eps", tmp_path / "rep", "--layouts", "--junit", str(tmp_path / "j.xml"))
    assert r.returncode == 1, r.stdout
    cause = s["ranks"][0]["root_causes"]["first_cause"]["row"]["key2"]
    assert cause.startswith("layers.0.attention_norm/"), cause
    assert "layout of tp2_eps: ranks 0–1 combined as tp=2" in (tmp_path / "j.xml").read_text()


def test_a_replica_perturbed_on_one_rank_names_that_rank(runs, actdiff_bin, tmp_path):
    d, _ = runs
    r, s = compare(actdiff_bin, d / "tp1", d / "tp2_replica", tmp_path / "rep", *LAYOUT_TOL)
    assert r.returncode == 1
    (lay,) = s["layouts"]
    first = lay["mismatches"][0]
    assert first["rank"] == 1 and first["against"] == 0
    assert first["key"].startswith("layers.1.ffn_norm/"), first
    assert any(v.startswith("replicas differ in tp2_replica") for v in s["verdict"]), s["verdict"]
    assert "rank 1's replica of `layers.1.ffn_norm/" in r.stdout
    # The headline names the replica beside the first cause: the combined
    # run kept rank 0's replica, so the change shows downstream as an
    # origin whose inputs agree (trial 12).
    headline = r.stdout.splitlines()[[i for i, ln in enumerate(r.stdout.splitlines()) if "diverges first at" in ln][0]]
    assert "but rank 1's replica of `layers.1.ffn_norm/" in headline and "the change may start there" in headline, headline
    rank = s["ranks"][0]["root_causes"]
    assert rank["replicas_differ"]["rank"] == 1, rank


def test_no_combine_compares_shards_rank_by_rank(runs, actdiff_bin, tmp_path):
    d, _ = runs
    r, s = compare(actdiff_bin, d / "tp1", d / "tp2", tmp_path / "rep", *LAYOUT_TOL, "--no-combine")
    assert r.returncode == 1
    assert s["ranks_only2"] == [1] and "layouts" not in s


def test_a_shard_log_cut_short_is_incomplete_input_named_by_its_file(runs, actdiff_bin, tmp_path):
    """Trial 18 M1: TP=2's rank 0 log cut in half gave exit 2 and an error
    naming rank 1's intact log, pointing at --no-combine."""
    d, _ = runs
    cut = tmp_path / "tp2_cut"
    cut.mkdir()
    for rank in (0, 1):
        text = (d / "tp2" / f"rank_{rank}_activations.log").read_text()
        if rank == 0:
            text = text[: text.index("\n[", len(text) // 2) + 1]
        (cut / f"rank_{rank}_activations.log").write_text(text)
    junit = tmp_path / "j.xml"
    for extra in ([], ["--allow-incomplete"]):
        r, s = compare(actdiff_bin, d / "tp1", cut, tmp_path / "rep", *LAYOUT_TOL, "--junit", str(junit), *extra)
        assert r.returncode == 3, r.stdout + r.stderr
        (err,) = [ln for ln in r.stderr.splitlines() if ln.startswith("error: ")]
        assert err.startswith(f"error: {cut / 'rank_0_activations.log'}: run2 rank 0's log is incomplete (declares "), err
        assert "rank_1_activations.log" not in err and "--no-combine" not in err, err
        assert s["ranks"] == [] and s["exit_status"] == 3, s
        assert "incomplete input: 1 error, printed on stderr" in r.stdout, r.stdout
        assert 'type="IncompleteInput"' in junit.read_text()


def test_tp2_against_tp2_at_full_precision_is_bitwise_equal(actdiff_bin, tmp_path):
    capture(tmp_path / "a", 2, "--precision", "full")
    capture(tmp_path / "b", 2, "--precision", "full")
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "rep", "--bitwise")
    assert r.returncode == 0, r.stdout + r.stderr
    # The same layout: shard against shard, digests included.
    assert [x["rank"] for x in s["ranks"]] == [0, 1] and "layouts" not in s
    text = (tmp_path / "a" / "rank_1_activations.log").read_text()
    assert "Output digest:" in text and "Layout: tp:S(1)" in text


def test_step_series_of_two_layouts_combine_step_by_step(actdiff_bin, tmp_path):
    capture(tmp_path / "tp1", 1, "--steps", "2", "--series")
    capture(tmp_path / "tp2", 2, "--steps", "2", "--series")
    r, s = compare(actdiff_bin, tmp_path / "tp1", tmp_path / "tp2", tmp_path / "rep", *LAYOUT_TOL)
    assert r.returncode == 0, r.stdout + r.stderr
    assert s["steps"] == [1, 2] and s["first_diverging_step"] is None
    # The series says what it combined, as a single step does (trial 22 L2).
    assert "tp2: ranks 0–1 combined as tp=2 (rank 0)" in r.stdout, r.stdout
    for step in (1, 2):
        step_summary = json.loads((tmp_path / "rep" / f"step_{step}" / "summary.json").read_text())
        assert step_summary["layouts"][0]["ranks"][0]["ranks"] == [0, 1]
        assert (tmp_path / "rep" / f"step_{step}" / "combined" / "run2" / "rank_0_activations.log").is_file()
    # At step 2 rank 1 alone edits its shard in place: the ranks' logs part
    # there and cannot be combined. That step is not compared (its shard
    # logs against whole tensors named a `diverging` op of another module
    # and a rank "only in" the TP=2 run: trial 18 H1); the error says why.
    capture(tmp_path / "tp2_edit", 2, "--steps", "2", "--series", "--edit-rank", "1")
    r, s = compare(actdiff_bin, tmp_path / "tp1", tmp_path / "tp2_edit", tmp_path / "rep_edit", *LAYOUT_TOL)
    assert r.returncode == 2, r.stdout + r.stderr
    assert s["first_diverging_step"] is None and "diverges first" not in r.stdout, r.stdout
    assert "1 step compared (1 agree); 1 not compared: step 2 (input errors, on stderr)" in r.stdout, r.stdout
    assert "rank 1 records" in r.stderr and "ran different ops" in r.stderr, r.stderr
    step2 = json.loads((tmp_path / "rep_edit" / "step_2" / "summary.json").read_text())
    assert step2["ranks"] == [] and step2["ranks_only2"] == [], step2


def test_shard_digests_combine_to_the_whole_tensors_on_both_paths():
    """A shard digested by its elements' whole-tensor index (the capture's
    ``Layouts.digest_index``) combines with the other shards' into the
    whole tensor's digest, on the host pass and the device ops."""
    import torch
    from actdiff_capture import _native

    x = torch.randn(6, 10, 4)
    want = _native.tensor_digest(x)
    for dim in range(3):
        n = x.shape[dim]
        for device_path in (False, True):
            parts = [x.narrow(dim, lo, hi - lo) for lo, hi in ((0, n // 2), (n // 2, n))]
            inner = [int(torch.tensor(p.shape[dim + 1 :]).prod()) for p in parts]
            ds = [
                _native.tensor_digest(p, device_path=device_path, index=(p.shape[dim] * k, n * k, lo * k))
                for p, k, lo in zip(parts, inner, (0, n // 2))
            ]
            assert _native.combine_digests(ds) == want, (dim, device_path)
            own = [_native.tensor_digest(p, device_path=device_path) for p in parts]
            assert _native.combine_digests(own) != want


def test_bitwise_crosses_layouts_up_to_the_row_parallel_sum(actdiff_bin, tmp_path):
    """TP=2 against TP=1 at full precision with ``--bitwise``: the combined
    shards' digests equal the TP=1 tensors' digests (column-parallel
    matmuls, attention over sharded heads), so the first bitwise
    difference is the row-parallel matmul, whose partial products add in
    another order."""
    capture(tmp_path / "tp1", 1, "--precision", "full")
    capture(tmp_path / "tp2", 2, "--precision", "full")
    r, s = compare(actdiff_bin, tmp_path / "tp1", tmp_path / "tp2", tmp_path / "rep", "--bitwise")
    assert r.returncode == 1, r.stdout + r.stderr
    (rank,) = s["ranks"]
    first = rank["first_divergence"]
    assert first["key2"] == "layers.0.attention.wo/op_0_mm", first
    assert rank["bitwise"]["identical"] >= first["index"] > 4
    # Each row before it is bitwise equal, sharded rows included: their
    # combined digests are TP=1's.
    def digests(path, key):
        block = path.read_text().split(f"[{key}]\n", 1)[1].split("\n\n", 1)[0]
        return re.findall(r"(?:Output digest|Input digests): (.*)", block)

    combined = tmp_path / "rep" / "combined" / "run2" / "rank_0_activations.log"
    shard_log = (tmp_path / "tp2" / "rank_1_activations.log").read_text()
    for key in ("layers.0.attention.wq/op_0_mm", "layers.0.attention/op_0__scaled_dot_product_flash_attention_for_cpu"):
        assert f"[{key}]" in shard_log and "Layout: tp:S(" in shard_log.split(f"[{key}]", 1)[1].split("\n\n", 1)[0]
        got = digests(combined, key)
        assert len(got) == 2 and got == digests(tmp_path / "tp1" / "rank_0_activations.log", key), key


def test_fsdp2_with_tp_against_fsdp2_alone_agrees_through_backward(actdiff_bin, tmp_path):
    """FSDP2 + TP on a 2 x 2 mesh (four processes) against FSDP2 alone (two):
    ``tp`` is combined, ``dp`` is not (FSDP shards parameters, not
    activations), and a tensor sharded over ``dp`` only (a parameter's or
    gradient's shard) is compared as it is, rank by rank. Every forward and
    backward row agrees; the optimizer step, run per parameter shard, does
    not line up across the layouts (docs/capture.md)."""
    capture(tmp_path / "tp2dp2", 4, "--dp", "2")
    capture(tmp_path / "dp2", 2, "--dp", "2")
    r, s = compare(actdiff_bin, tmp_path / "dp2", tmp_path / "tp2dp2", tmp_path / "rep", "--layouts")
    lay = {x["side"]: x for x in s["layouts"]}
    assert lay[2]["combined"] == "tp=2"
    assert [(g["name"], g["ranks"]) for g in lay[2]["ranks"]] == [("dp 0", [0, 1]), ("dp 1", [2, 3])]
    assert lay[1]["combined"] == "" and lay[1]["mismatch_count"] == 0
    assert r.returncode == 1
    for rank in s["ranks"]:
        assert rank["first_divergence"]["phase"] == "optimizer", rank["first_divergence"]
        assert rank["run2"]["paired"] == rank["run2"]["entries"]
    # Nothing is combined on the FSDP-only side: every op but the left-out
    # communication keeps its values (dp-sharded gradients included).
    combined = (tmp_path / "rep" / "combined" / "run1" / "rank_0_activations.log").read_text()
    blocks = [b for b in combined.split("\n\n[")[1:]]
    assert len(blocks) > 250
    assert all("Output hash:" in b for b in blocks), [b.split("]")[0] for b in blocks if "Output hash:" not in b][:5]


def test_fsdp2_against_one_process_compares_the_optimizer_on_whole_parameters(actdiff_bin, tmp_path):
    """FSDP2 over 2 ranks, every rank given the one-process run's batches,
    against that one process at full precision: each rank's forward and
    backward are its own, and its optimizer rows are combined from both
    ranks' parameter shards, so every row of rank 0 is bitwise equal,
    the optimizer step included (trial 19 F2: every update "differed",
    shard against whole, "a differing input; parameter inp.weight")."""
    capture(tmp_path / "one", 1, "--precision", "full")
    capture(tmp_path / "fsdp", 2, "--dp", "2", "--precision", "full", "--same-batch")
    r, s = compare(actdiff_bin, tmp_path / "one", tmp_path / "fsdp", tmp_path / "rep", "--bitwise")
    (rank,) = s["ranks"]
    counts = rank["counts"]
    assert (counts["diff"], counts["only1"], counts["only2"]) == (0, 0, 0), r.stdout + r.stderr
    assert rank["bitwise"]["all"], r.stdout
    # Rank 1 has no counterpart in a one-process run: one-sided, exit 1;
    # `--ranks 0` compares rank 0 alone (trial 22 M1).
    assert s["ranks_only2"] == [1] and r.returncode == 1, r.stdout
    r0, s0 = compare(actdiff_bin, tmp_path / "one", tmp_path / "fsdp", tmp_path / "rep0", "--bitwise", "--ranks", "0")
    assert r0.returncode == 0 and s0["ranks_only2"] == [], r0.stdout + r0.stderr
    (lay,) = s["layouts"]
    assert (lay["combined"], lay["parameters"]) == ("", "dp=2"), lay
    assert "the optimizer's parameter shards combined over dp=2" in r.stdout, r.stdout

    def optimizer_shapes(path):
        blocks = path.read_text().split("\n\n[")[1:]
        found = [re.search(r"Shape: (.*)", b) for b in blocks if "\n  Parameters: " in b]
        return [m.group(1) for m in found if m]

    want = optimizer_shapes(tmp_path / "one" / "rank_0_activations.log")
    assert len(want) > 20
    for k in (0, 1):
        got = optimizer_shapes(tmp_path / "rep" / "combined" / "run2" / f"rank_{k}_activations.log")
        assert got == want, (k, got[:3], want[:3])
    # Each rank's own shards, as captured: half the rows of the embedding.
    assert optimizer_shapes(tmp_path / "fsdp" / "rank_1_activations.log") != want


def test_module_level_records_a_tensor_parallel_model_by_its_shards(actdiff_bin, tmp_path):
    """``level="modules"`` on a tensor-parallel model (2 ranks): its
    parameters, gradients and sharded outputs are DTensors, recorded as
    each rank's local shard (trial 12: the gradient hook raised "mixed
    torch.Tensor and DTensor" at full precision and the process died of
    SIGSEGV at the default one). Two identical runs agree bitwise."""
    for name in ("a", "b"):
        capture(tmp_path / name, 2, "--level", "modules", "--precision", "full", "--series", "--steps", "2")
    log = (tmp_path / "a" / "step_1" / "rank_1_activations.log").read_text()
    assert "Level: modules" in log
    # A column-parallel weight's gradient: this rank's half of the rows.
    blocks = {b.split("]")[0]: b for b in log.split("\n[")[1:]}
    grads = [k for k in blocks if k.endswith("_grad")]
    assert grads, list(blocks)
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "rep", "--bitwise")
    assert r.returncode == 0, r.stdout + r.stderr
    assert s["first_diverging_step"] is None
    # Against TP=1 at module level, the shards are not combined: a warning
    # says why every sharded record differs (trial 18 H2: exit 1, silent).
    capture(tmp_path / "one", 1, "--level", "modules", "--precision", "full", "--series", "--steps", "2")
    r, s = compare(actdiff_bin, tmp_path / "one", tmp_path / "a", tmp_path / "rep1", *LAYOUT_TOL)
    assert r.returncode == 1, r.stdout + r.stderr
    assert "are level=modules captures whose records differ in Shape" in r.stderr, r.stderr
    assert "compare such runs with level=\"ops\" captures" in r.stderr, r.stderr


def test_two_identical_fsdp2_runs_are_bitwise_equal(actdiff_bin, tmp_path):
    """FSDP2 alone (two processes), the same seeded run captured twice at
    full precision: every row is bitwise equal (trial 13 F1).
    ``all_gather_copy_in``'s second result is the all-gather's whole
    buffer, made by ``empty`` and written only in this rank's slice (its
    first result) before the collective: it held whatever the allocator's
    memory did, and hashing it made two identical runs differ, and a change
    on one rank was filed under it. It is not hashed (its first result is)."""
    capture(tmp_path / "a", 2, "--dp", "2", "--precision", "full")
    capture(tmp_path / "b", 2, "--dp", "2", "--precision", "full")
    log = (tmp_path / "a" / "rank_0_activations.log").read_text()
    blocks = [b for b in log.split("\n\n[") if "_all_gather_copy_in]" in b.split("\n", 1)[0]]
    assert blocks, "no all_gather_copy_in record"
    for b in blocks:
        out = [ln for ln in b.splitlines() if ln.strip().startswith("Output hash:")]
        assert len(out) == 1 and "," not in out[0], b
    rows = tmp_path / "rows.jsonl"
    assert_bitwise_equal(actdiff_bin, tmp_path, ("_allgather_base_", "_reduce_scatter_base_"))
    assert_optimizer_rows_name_one_parameter_each(log)


def assert_optimizer_rows_name_one_parameter_each(log: str):
    """The single-tensor AdamW of ``tpmodel.py`` updates one parameter at a
    time: every op of its step names one parameter (``Parameters:``), the
    one the next ``addcdiv_`` (the update) names, and each parameter is
    updated once. FSDP2's gradients are views of one reduce-scattered
    buffer: named by storage, they all took one name."""
    named = []
    for b in log.split("\n\n["):
        key = b.split("]", 1)[0].lstrip("[")
        lines = [ln.strip() for ln in b.splitlines() if ln.strip().startswith("Parameters:")]
        if lines:
            named.append((key, lines[0].split(": ", 1)[1]))
    assert all(key.startswith("<none>/") and ", " not in p for key, p in named), named
    updates = [p for key, p in named if key.endswith("_addcdiv_")]
    assert len(updates) == len(set(updates)) >= 10, updates
    pending = []
    for key, p in named:
        pending.append((key, p))
        if key.endswith("_addcdiv_"):
            assert all(q == p for _, q in pending), pending
            pending = []


def test_two_identical_fsdp2_mixed_precision_runs_are_bitwise_equal(actdiff_bin, tmp_path):
    """FSDP2 with a bfloat16 ``MixedPrecisionPolicy``: its all-gather input
    is an ``empty`` buffer split by ``split_with_sizes`` and filled by
    ``_foreach_copy_``. The split's parts were recorded (whatever the
    memory held: NaN in one run, 1e39 in the other) and taken as written,
    and ``_foreach_copy_``'s destinations hashed as its inputs: two
    identical runs always differed (trial 23 F1). The parts are not
    recorded, and the copy's outputs are the bfloat16 parameters."""
    capture(tmp_path / "a", 2, "--dp", "2", "--mp", "--precision", "full")
    capture(tmp_path / "b", 2, "--dp", "2", "--mp", "--precision", "full")
    log = (tmp_path / "a" / "rank_0_activations.log").read_text()
    assert not re.search(r"/op_\d+_split_with_sizes\]", log), "a view of unwritten memory was recorded"
    copies = [b for b in log.split("\n\n[") if b.split("]", 1)[0].endswith("_foreach_copy_")]
    assert copies, "no _foreach_copy_ record"
    for b in copies:
        fields = dict(ln.strip().split(": ", 1) for ln in b.splitlines()[1:] if ": " in ln)
        n_in = len(fields["Input hashes"].split(", "))
        assert len(fields["Output hash"].split(", ")) == n_in, b  # destinations are outputs only
    assert_bitwise_equal(actdiff_bin, tmp_path, ("_allgather_base_", "_reduce_scatter_base_"))


def assert_bitwise_equal(actdiff_bin, tmp_path, collectives):
    """``compare --bitwise`` of ``tmp_path/a`` and ``tmp_path/b`` exits 0
    and every paired row is ``match``, the asynchronous ``collectives``
    (recorded in run a's rank 0) included: their results are hashed once
    the collective has written them (trial 13 F7: they were hashed when the
    op returned, while gloo's thread still filled them, and two identical
    runs were "not bitwise identical" there)."""
    log = (tmp_path / "a" / "rank_0_activations.log").read_text()
    for op in collectives:
        assert re.search(rf"/op_\d+_{op}\]", log), f"no {op} record"
    rows = tmp_path / "rows.jsonl"
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "rep", "--bitwise", "--rows", str(rows))
    assert r.returncode == 0, r.stdout + r.stderr
    differ = [json.loads(x) for x in rows.read_text().splitlines()]
    differ = [x["key1"] for x in differ if x["status"] != "match"]
    assert differ == [], differ
    assert "not bitwise identical" not in r.stdout, r.stdout


def test_two_identical_ddp_runs_are_bitwise_equal(actdiff_bin, tmp_path):
    """DistributedDataParallel (two processes), the same seeded run
    captured twice at full precision: every row is bitwise equal, DDP's
    gradient all-reduce (``allreduce_`` of a bucket) included."""
    capture(tmp_path / "a", 2, "--ddp", "--precision", "full")
    capture(tmp_path / "b", 2, "--ddp", "--precision", "full")
    assert_bitwise_equal(actdiff_bin, tmp_path, ("allreduce_",))
    assert_optimizer_rows_name_one_parameter_each((tmp_path / "a" / "rank_1_activations.log").read_text())
    # Each log says the world size, so a rank whose log is missing (a
    # crashed rank) is incomplete input, exit 3, not a divergence (trial
    # 18 L5: exit 1, "ranks only in ...").
    assert "\nWorld size: 2\n" in (tmp_path / "a" / "rank_1_activations.log").read_text()
    (tmp_path / "b" / "rank_1_activations.log").unlink()
    r, _ = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "rep_missing")
    assert r.returncode == 3, r.stdout + r.stderr
    assert "incomplete input: b has no log of rank 1, though its logs say `World size: 2`" in r.stdout, r.stdout


def test_a_ddp_rank_receives_a_change_through_the_all_reduce(actdiff_bin, tmp_path):
    """DDP, one token of rank 1's batch changed: rank 1's first cause is
    the embedding that reads the batch; rank 0's forward and its own
    backward agree, the all-reduce's result (the bucket reduced over both
    ranks, read once the collective wrote it) is where its divergence
    enters: it receives the change through a collective, from rank 1."""
    capture(tmp_path / "a", 2, "--ddp", "--precision", "full")
    capture(tmp_path / "b", 2, "--ddp", "--precision", "full", "--token-rank", "1")
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "rep")
    assert r.returncode == 1, r.stdout + r.stderr
    by_rank = {x["rank"]: x for x in s["ranks"]}
    ranks = {r: x["root_causes"] for r, x in by_rank.items()}
    assert ranks[1]["first_cause"]["row"]["key1"].startswith("tok/op_0_embedding"), ranks[1]["first_cause"]
    assert ranks[0]["first_divergence_forward"] is None, ranks[0]["first_divergence_forward"]
    assert ranks[0]["first_divergence_backward"] is None, ranks[0]["first_divergence_backward"]
    assert ranks[0]["via_collective_only"] is True and ranks[0]["see_ranks"] == [1], ranks[0]
    first = by_rank[0]["first_nongating_difference"]
    assert first is not None and first["key1"].endswith("_allreduce_"), first


def test_a_ddp_rank_whose_update_alone_differs_at_module_level_is_said_to_receive_it(actdiff_bin, tmp_path):
    """DDP at ``level="modules"``, one token of rank 1's batch changed at
    step 2: rank 0's forward outputs and its own gradients agree and only
    its parameters after the optimizer differ. The verdict said rank 0
    and rank 1 diverge first at their own records, as if independently
    (trial 29 F6); it says the change most likely reached rank 0 through
    the gradient all-reduce."""
    args = ("--ddp", "--precision", "full", "--series", "--level", "modules", "--steps", "2")
    capture(tmp_path / "a", 2, *args)
    capture(tmp_path / "b", 2, *args, "--token-rank", "1")
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "rep")
    assert r.returncode == 1 and s["first_diverging_step"] == 2, r.stdout + r.stderr
    said = (
        "at step 2, rank 0 differs only after the optimizer step (its forward outputs and gradients agree) "
        "while rank 1 differs before it: most likely its gradients reaching it through the gradient all-reduce"
    )
    assert said in r.stdout and any(said in v for v in s["verdict"]), r.stdout
    assert "the update itself differs" not in r.stdout, r.stdout


def test_fsdp2_module_level_records_each_rank_own_gradient(actdiff_bin, tmp_path):
    """``level="modules"`` under FSDP2 (two processes, each with its own
    batches): a gradient record is the rank's own gradient of the whole
    parameter, as backward accumulates it into the unsharded parameter,
    before the reduce-scatter (trial 13 F2: it was the shard after it,
    every rank's sum, so a rank whose data did not change diverged at its
    gradients). One token of rank 1's last batch changed: rank 0's forward
    outputs and gradients agree, only its parameter shards after the
    optimizer (updated with the reduced gradient) differ: it receives the
    change through a collective."""
    capture(tmp_path / "a", 2, "--dp", "2", "--level", "modules", "--precision", "full", "--steps", "2")
    capture(tmp_path / "b", 2, "--dp", "2", "--level", "modules", "--precision", "full", "--steps", "2", "--token-rank", "1")
    log = (tmp_path / "a" / "rank_0_activations.log").read_text()
    blocks = {b.split("]")[0]: b for b in log.split("\n[")[1:]}
    grad = next(b for k, b in blocks.items() if k.startswith("layers.0.feed_forward.w1/") and k.endswith("_weight_grad"))
    assert "Shape: torch.Size([128, 64])" in grad, grad
    shard = next(b for k, b in blocks.items() if k.startswith("layers.0.feed_forward.w1/") and k.endswith("_weight"))
    assert "Shape: torch.Size([64, 64])" in shard, shard
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "rep", "--bitwise")
    assert r.returncode == 1, r.stdout + r.stderr
    ranks = {x["rank"]: x["root_causes"] for x in s["ranks"]}
    assert ranks[1]["first_divergence_forward"] is not None
    assert ranks[0]["first_divergence_forward"] is None, ranks[0]
    assert ranks[0]["first_divergence_backward"] is None, ranks[0]["first_divergence_backward"]
    assert ranks[0]["first_divergence_optimizer"] is not None
    # Its shards read rank 1's gradient through the reduce-scatter.
    assert ranks[0]["via_collective_only"] is True and ranks[0]["see_ranks"] == [1], ranks[0]
    assert "rank 0 receives that change through a collective" in r.stdout, r.stdout


def test_fsdp1_with_original_parameters_is_recorded_at_module_level(actdiff_bin, tmp_path):
    """FSDP1 (``FullyShardedDataParallel(use_orig_params=True)``, each
    layer its own unit) at ``level="modules"`` (trial 71 F5): its
    parameters are views of the flat parameter while the model runs, so
    registering their gradient hook raised, and once skipped, reading the
    views after FSDP freed their storage crashed the process (SIGSEGV).
    Now the capture finishes and says what FSDP1's records are; keys carry
    no ``_fsdp_wrapped_module`` and each wrapped layer's output is recorded
    once (a wrapper and its module share an FQN); two identical runs are
    bitwise equal."""
    env = dict(os.environ, OMP_NUM_THREADS="1")
    outs = []
    for name in ("a", "b"):
        r = subprocess.run(
            [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", str(MODEL),
             str(tmp_path / name), "--fsdp1", "--level", "modules", "--precision", "full", "--steps", "2", "--series"],
            env=env, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert r.returncode == 0, r.stdout + r.stderr
        outs.append(r.stdout + r.stderr)
    assert "are views of another tensor while the model runs (FSDP1's" in outs[0], outs[0]
    log = (tmp_path / "a" / "step_2" / "rank_1_activations.log").read_text()
    keys = re.findall(r"^\[(.*)\]$", log, re.M)
    assert keys and not any("_fsdp_wrapped_module" in k for k in keys), keys
    assert [k for k in keys if k.startswith("layers.0/")] == ["layers.0/op_0_output"], keys
    assert any(k.endswith("_weight_grad") for k in keys) and any(k.endswith("_weight") for k in keys), keys
    r, s = compare(actdiff_bin, tmp_path / "a", tmp_path / "b", tmp_path / "rep", "--bitwise")
    assert r.returncode == 0 and s["first_diverging_step"] is None, r.stdout + r.stderr


def test_fsdp2_against_one_process_at_module_level_names_the_shards_not_the_update(actdiff_bin, tmp_path):
    """FSDP2 over 2 ranks, every rank given the one-process run's batches,
    against that one process at ``level="modules"``, rank 0 alone (trial
    71 F2): every forward and gradient record is bitwise equal; FSDP2's
    parameter records after the optimizer step are each rank's shard, so
    they differ only in shape. The verdict said "the update itself
    differs (the learning rate ...)"; it now says the parameter records
    have other shapes and how to compare the update."""
    args = ("--level", "modules", "--precision", "full", "--series", "--steps", "2")
    capture(tmp_path / "one", 1, *args)
    capture(tmp_path / "fsdp", 2, "--dp", "2", "--same-batch", *args)
    r, s = compare(actdiff_bin, tmp_path / "one", tmp_path / "fsdp", tmp_path / "rep", "--ranks", "0", "--bitwise")
    assert r.returncode == 1 and s["first_diverging_step"] == 1, r.stdout + r.stderr
    said = "step 1's forward outputs and gradients agree, and its parameters after the optimizer step have other shapes (`"
    assert said in r.stdout and any(said in v for v in s["verdict"]), r.stdout
    assert "which combines FSDP2's parameter shards" in r.stdout, r.stdout
    assert "the update itself differs" not in r.stdout, r.stdout
    first = next(x for x in s["ranks"] if x["step"] == 1)["first_divergence"]
    assert first["phase"] == "optimizer" and first["shapes"][0] != first["shapes"][1], first
