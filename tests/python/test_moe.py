"""A mixture-of-experts model (``moemodel.py``) whose routing changes
with one token (new-user trial 13, F3 and F5): in run B an expert gets no
token and its loop iteration is skipped, so every later counter of
``moe`` and of the optimizer shifts, and the router's softmax changes in
a way its L1-norm hash cannot see (each row sums to 1)."""

from __future__ import annotations

import json
import re
import subprocess

import moemodel


def test_an_expert_one_run_skips_is_no_cause_of_its_own(actdiff_bin, tmp_path):
    """The changed token is the one cause (its embedding, an entry); the
    skipped expert's ops are only in A, and every op around them is paired
    with its own: the router's topk inherits the softmax's change (it was
    an origin), the experts after the skipped one pair with their namesakes
    (the exact pass paired each with the next one's), and the optimizer
    updates each parameter against its own."""
    token = moemodel.token_leaving_an_expert_out()
    moemodel.train(tmp_path / "a")
    moemodel.train(tmp_path / "b", token)
    rows = tmp_path / "rows.jsonl"
    r = subprocess.run(
        [actdiff_bin, "compare", str(tmp_path / "a"), str(tmp_path / "b"), "-o", str(tmp_path / "rep"),
         "--rows", str(rows)],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    s = json.loads((tmp_path / "rep" / "summary.json").read_text())
    rc = s["ranks"][0]["root_causes"]
    assert rc["cause_count"] == 1, rc["causes"]
    assert rc["first_cause"]["row"]["key1"] == "emb/op_0_embedding", rc["first_cause"]
    assert rc["kinds"]["origin"] == 0 and rc["kinds"]["one_sided"] == 0, rc["kinds"]
    # The experts' rows only in A are the skipped expert's.
    only1 = [x["key1"] for x in map(json.loads, rows.read_text().splitlines()) if x["status"] == "only1"]
    skipped = moemodel.experts_used(moemodel.batch()) - moemodel.experts_used(moemodel.batch(token))
    assert len(skipped) == 1
    experts = {k for k in only1 if k.startswith("moe.experts.")}
    assert experts and all(re.match(rf"moe\.experts\.{min(skipped)}[./]", k) for k in experts), (skipped, experts)
    assert s["ranks"][0]["counts"]["only2"] == 0
    # The other way round (the run with the skipped expert as run 1), the
    # same verdict (new-user trial 14 F2: a second, one-sided cause).
    r = subprocess.run(
        [actdiff_bin, "compare", str(tmp_path / "b"), str(tmp_path / "a"), "-o", str(tmp_path / "rep2")],
        capture_output=True, text=True,
    )  # fmt: skip
    assert r.returncode == 1, r.stdout + r.stderr
    rc = json.loads((tmp_path / "rep2" / "summary.json").read_text())["ranks"][0]["root_causes"]
    assert rc["cause_count"] == 1 and rc["kinds"]["one_sided"] == 0, rc["causes"]
