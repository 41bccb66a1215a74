"""Stop at the first divergence (``Profiler(..., baseline=DIR)``): each
captured step is compared, in process through actdiff's engine
(``_native.compare``), with the same step of a blessed dump, right after
its log is written. At the first gating divergence the step's report is
kept under ``{dump_dir}/divergence/``, one line names the step, rank and
first cause, and :class:`Diverged` is raised (or, with
``on_divergence="warn"``, the run goes on; ``"stop-capturing"`` also
disarms). A baseline step that is missing, or a log that does not match it
(another level, no op in common, unreadable), is a :class:`BaselineError`:
never a silent pass. The engine's warnings (a baseline at another
precision, fields one side lacks) are said once each, as a
``UserWarning`` naming the baseline, not once per step on stderr.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import sys
import tempfile
import warnings

log = logging.getLogger("actdiff_capture")

#: The prefix of the engine's warnings, said as UserWarnings.
BASELINE_WARNING = "actdiff_capture: baseline check (run1: the baseline, run2: this run): {}"

ON_DIVERGENCE = ("raise", "warn", "stop-capturing")


class Diverged(RuntimeError):
    """A captured step diverged from the baseline beyond tolerance.

    Attributes:
        step: the step (1-based).
        rank: the rank.
        key: run 2's (this run's) key of the first cause, else of the first
            divergence; for a cause that is an op only one run ran (an
            in-place edit of this run's), that op's key (the baseline's
            when only the baseline ran it).
        report: the report folder of that step (``index.html`` in it).
    """

    def __init__(self, message: str, step: int, rank: int, key: str | None, report: str):
        super().__init__(message)
        self.step = step
        self.rank = rank
        self.key = key
        self.report = report


class BaselineError(RuntimeError):
    """The baseline cannot be compared with this capture (missing step or
    rank, another capture level, nothing in common, unreadable logs).

    Attributes:
        step: the step checked.
        rank: the rank.
    """

    def __init__(self, message: str, step: int | None = None, rank: int | None = None):
        super().__init__(message)
        self.step = step
        self.rank = rank


def _log_header(path: str):
    """The header lines of the log at ``path`` (``{label: value}``, up to
    the ``====`` line or the first block), or None when the file cannot be
    read or its first 4 KiB hold no end of a header (an empty log)."""
    try:
        with open(path, "rb") as f:
            head = f.read(4096)
    except OSError:
        return None
    lines = {}
    for line in head.split(b"\n"):
        if line.startswith(b"[") or line.startswith(b"===="):
            return lines
        label, sep, value = line.partition(b":")
        if sep:
            lines[label.decode("ascii", "replace")] = value.strip().decode("ascii", "replace")
    return None


def log_level(path: str):
    """The capture level of the log at ``path``: its ``Level:`` header
    line, ``"ops"`` when the header ends (the ``====`` line or a block)
    without one; None when the file cannot be read or its first 4 KiB hold
    neither (an empty log)."""
    h = _log_header(path)
    return None if h is None else h.get("Level", "ops")


def log_precision(path: str):
    """``"full"`` for a log with the ``Precision: full`` header line,
    ``"default"`` for one whose header ends without it; None as
    :func:`log_level`."""
    h = _log_header(path)
    return None if h is None else ("full" if h.get("Precision") == "full" else "default")


def _first_log_says(baseline: str, read):
    """``read(path)`` of the baseline's first log that says something (not
    None), in step order, of ``rank_0``, else of any rank; None when none
    does."""
    import glob
    import re

    def step(path: str) -> int:
        m = re.search(r"step_(\d+)", path)
        return int(m.group(1)) if m else 0

    logs = sorted(glob.glob(os.path.join(baseline, "rank_*_activations.log")))
    logs += sorted(glob.glob(os.path.join(baseline, "step_*", "rank_*_activations.log")), key=step)
    for path in logs:
        said = read(path)
        if said is not None:
            return said
    return None


def level_of(baseline: str):
    """The capture level of the baseline's logs (``"ops"`` or
    ``"modules"``: :func:`log_level` of its first log that says one), or
    None when it holds none."""
    return _first_log_says(baseline, log_level)


def precision_of(baseline: str):
    """The precision of the baseline's logs (:func:`log_precision` of its
    first log that says one), or None when it holds none."""
    return _first_log_says(baseline, log_precision)


def missing_steps(baseline: str, steps, first_step: int) -> tuple[int, list]:
    """The scheduled steps (``steps``, a range or a collection; those from
    ``first_step`` on) for which ``baseline`` holds no ``step_S`` folder:
    how many, and the first three (at no cost for a long range: only the
    baseline's own steps are looked up in it)."""
    import re

    have = set()
    try:
        names = os.listdir(baseline)
    except OSError:
        return 0, []
    for name in names:
        m = re.fullmatch(r"step_(\d+)", name)
        if m and os.path.isdir(os.path.join(baseline, name)):
            have.add(int(m.group(1)))
    if isinstance(steps, range):
        if steps.step < 0:
            steps = steps[::-1]
        start = max(steps.start, first_step)
        start += (steps.start - start) % steps.step  # the first scheduled step from first_step on
        sched = range(start, steps.stop, steps.step)
        n = max(0, (sched.stop - sched.start + sched.step - 1) // sched.step) - sum(1 for s in have if s in sched)
        first = []
        s = sched.start
        while len(first) < min(3, n):
            if s not in have:
                first.append(s)
            s += sched.step
        return n, first
    rest = sorted(s for s in steps if s >= first_step and s not in have)
    return len(rest), rest[:3]


def baseline_log(baseline: str, step: int, rank: int, series: bool) -> str:
    """The baseline's log of ``step`` and ``rank``: ``baseline/step_S/...``
    for a step series, ``baseline/rank_R_activations.log`` for one step."""
    name = f"rank_{rank}_activations.log"
    path = os.path.join(baseline, f"step_{step}", name) if series else os.path.join(baseline, name)
    if not os.path.isfile(path):
        hint = ""
        if not series and os.path.isdir(os.path.join(baseline, f"step_{step}")):
            hint = f"; the baseline is a step series: capture with capture_steps=[{step}] (a list) to write step folders too"
        elif series and os.path.isfile(os.path.join(baseline, name)):
            hint = (
                f"; the baseline holds one step's log in the reference's layout ({name}, captured with "
                f"an int capture_step): capture this run with capture_steps={step} (an int) too, or "
                "capture the baseline with a list or range of steps"
            )
        raise BaselineError(
            f"baseline {baseline}: no log for step {step}, rank {rank} ({path} does not exist){hint}", step, rank
        )
    return path


def _compare_quietly(native, args: list, said: set | None) -> tuple[int, list[str]]:
    """``native.compare(args)`` with its stderr taken: each ``warning:``
    line not in ``said`` (the profiler's: each text once a profiler) is
    said as a UserWarning (:data:`BASELINE_WARNING`) and added; ``None``:
    no warning is said (a probe of the options on logs of its own). Returns
    the exit status and the other lines (the caller says them: in the
    error it raises, or on stderr)."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as err:
        os.dup2(err.fileno(), 2)
        try:
            status = native.compare(args)
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        err.seek(0)
        text = err.read().decode("utf-8", errors="replace")
    rest = []
    for line in text.splitlines():
        if line.startswith("warning: "):
            message = line[len("warning: ") :]
            if said is not None and message not in said:
                said.add(message)
                warnings.warn(BASELINE_WARNING.format(message), stacklevel=6)
        elif line.strip():
            rest.append(line)
    return status, rest


def tolerance_args(tolerances) -> tuple:
    """``tolerances=`` as ``actdiff compare`` arguments: a string is split
    as a shell would (``"--rtol 1e-4"``), an iterable taken item by item.
    The engine parses them at once, on two one-op logs, so that a bad
    option fails when the profiler is made, not after the first step
    trained.

    Raises:
        ValueError: an option ``actdiff compare`` refuses (its message).
    """
    import shlex

    from . import _native

    args = tuple(shlex.split(tolerances)) if isinstance(tolerances, str) else tuple(map(str, tolerances))
    if not args:
        return args
    for a in args:
        opt = _not_a_tolerance(a)
        if opt:
            raise ValueError(
                f"tolerances={tolerances!r}: {opt} is not a tolerance or pairing option: "
                "the baseline check chooses what it compares and writes itself"
            )
    with tempfile.TemporaryDirectory() as d:
        logs = []
        for name in ("a", "b"):
            path = os.path.join(d, f"{name}.log")
            with open(path, "w") as f:
                f.write("Total captured activations: 1\n" + "=" * 80 + "\n\n[m/op_0_mm]\n  Output hash: 1.0\n\n")
            logs.append(path)
        # Its warnings are of the probe's logs (trial 65 F5: "--bitwise on
        # logs printed with 7 digits" against a full-precision baseline).
        status, rest = _compare_quietly(_native, [*logs, "-o", os.path.join(d, "out"), "-q", *args], None)
    if status not in (0, 1):
        raise ValueError(f"tolerances={tolerances!r}: " + "; ".join(rest or [f"actdiff compare exited {status}"]))
    return args


# ``actdiff compare`` options that choose what a compare reads or writes,
# or split it: the baseline check sets them (or has no use for them), and
# the probe of ``tolerance_args`` would take them (``--shard 1/2`` made it
# a part that wrote no summary, found only after step 1 trained; trial 63).
_NOT_TOLERANCES = ("--out", "--shard", "--steps", "--rows", "--junit", "--format", "--name1", "--name2")


def _not_a_tolerance(arg: str):
    """The option ``arg`` names when it is one of ``_NOT_TOLERANCES``
    (also as ``--opt=value``) or ``-o`` (also ``-oDIR``), else ``None``."""
    if arg == "-o" or (arg.startswith("-o") and not arg.startswith("--")):
        return "-o"
    return next((o for o in _NOT_TOLERANCES if arg == o or arg.startswith(o + "=")), None)


def _discard(out: str) -> None:
    """Removes a report folder of a step that did not diverge (it agreed,
    or could not be compared), and ``divergence/`` above it when empty."""
    shutil.rmtree(out, ignore_errors=True)
    try:
        os.rmdir(os.path.dirname(out))
    except OSError:
        pass  # not empty: an earlier divergence's report is kept


def _what_diverges(r: dict, step: int) -> tuple:
    """The words naming where a rank's step parts from the baseline, and
    the key of ``Diverged.key``, from the rank's entry of the compare's
    ``summary.json`` (``r``), as the compare's own sentences say it: the
    first cause with its phase and parameters; at ``level="modules"`` the
    first differing record, which is no cause (inputs are not recorded);
    for a rank whose own ops agree, the collective the change arrives
    through (trial 20 F1, F2: both were called a "first cause")."""
    rc = r.get("root_causes") or {}
    cause = rc.get("first_cause")
    row = (cause["row"] if cause else r.get("first_divergence")) or {}
    key = row.get("key2") or row.get("key1")
    phase = row.get("phase")
    modules = (r.get("run2") or {}).get("level") == "modules"
    world = (r.get("run2") or {}).get("world_size") or 1
    if rc.get("via_collective_only"):
        via = next((c["collective"] for c in rc.get("causes") or [] if c.get("collective")), None)
        through = f"the collective `{via.get('key2') or via.get('key1')}`" if via else "a collective"
        own = (
            "its forward outputs and its own gradients agree, only its parameters after the optimizer differ"
            if modules
            else "its own ops agree until the change arrives"
        )
        return f"{own}: the change arrives through {through} from another rank, which diverges first (see its message)", key
    if modules:
        what = (
            f"first differing record `{key}` ({phase}; inputs are not recorded at level=\"modules\": "
            f"re-capture step {step} at level=\"ops\" for its cause"
        )
        # With several ranks a rank's own gradients agreeing says nothing
        # of the reduced ones its update reads (trial 71 F9: FSDP's
        # reduce-scatter, named only after "the update itself differs").
        arrive = f"with {world} ranks the change may arrive through the gradient all-reduce or reduce-scatter from another rank"
        if r.get("update_alone"):
            # The compare's own reading (RankSummary::update_changed_alone;
            # trial 70 F4: the check named the record alone).
            update = (
                "the update itself differs (the learning rate or its schedule, gradient clipping, weight decay, "
                "the optimizer's state or settings, a loss scale)"
            )
            lead = f"{arrive}, or {update}" if world > 1 else update
            what = (
                "its forward outputs and gradients agree and its parameters differ after the optimizer step: "
                f"{lead}; {what}"
            )
        elif phase == "optimizer" and world > 1:
            what += f"; {arrive}"
        return what + ")", key
    words = [phase] if phase else []
    what = f"first cause `{key}`" if cause else f"first divergence `{key}`"
    # A cause that is an op of one run only (an in-place edit this run
    # alone made) is named, not the row it feeds (the compare's sentence).
    one = (cause or {}).get("one_sided") or []
    if one:
        fed, key = key, one[0].get("key2") or one[0].get("key1")
        side = "this run" if one[0].get("key2") else "the baseline"
        what = f"first cause `{key}`"
        words.insert(0, f"an op only in {side}, feeding `{fed}`")
    # An optimizer-step op names the parameters it updates (its
    # `Parameters:` line), as the compare's own sentence does.
    names = [n for n in (row.get("parameters_changed") or row.get("parameters") or "").split(", ") if n]
    if names:
        shown = ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
        words.append(f"{'parameter' if len(names) == 1 else 'parameters'} {shown}")
    return (f"{what} ({'; '.join(words)})" if words else what), key


def check(
    baseline: str,
    log_path: str,
    step: int,
    rank: int,
    series: bool,
    dump_dir: str,
    tolerances,
    said: set | None = None,
    uncaptured: tuple | None = None,
) -> Diverged | None:
    """Compares ``log_path`` with the baseline's log of the same step and
    rank. The engine's warnings not in ``said`` are said as UserWarnings
    and added to it. ``uncaptured``: ``(first, last)``, the steps right
    before ``step`` that this job ran and did not capture, named in a
    divergence's message as ``compare`` names them (trial 68 F5: a sparse
    schedule's change at an uncaptured step was blamed on step 4's conv,
    with no word of step 3). Returns None when they agree (the report folder removed; removed too
    when it raises), a
    :class:`Diverged` (not raised) when they do not, with the report kept
    under ``{dump_dir}/divergence/step_S_rank_R``.

    Raises:
        BaselineError: a missing baseline log, or a comparison that could
            not be made (exit status 2 or 3: its verdict in the message).
    """
    from . import _native

    base = baseline_log(baseline, step, rank, series)
    out = os.path.join(dump_dir, "divergence", f"step_{step}_rank_{rank}")
    args = [base, log_path, "-o", out, "-q", "--name1", "baseline", "--name2", "this run", *map(str, tolerances)]
    status, rest = _compare_quietly(_native, args, set() if said is None else said)
    if status in (0, 1) and rest:
        print("\n".join(rest), file=sys.stderr)
    summary_path = os.path.join(out, "summary.json")
    try:
        with open(summary_path) as f:
            s = json.load(f)
    except OSError as e:
        _discard(out)
        raise BaselineError(
            f"step {step}, rank {rank}: the comparison wrote no summary (exit status {status}): "
            + "; ".join([*rest, str(e)]),
            step,
            rank,
        ) from e
    if status not in (0, 1):
        # The engine's error lines, once: in the message (the verdict says
        # most of them already), not also on stderr.
        said_ = "; ".join(s.get("verdict", []))
        extra = [ln for ln in rest if ln.removeprefix("error: ") not in said_]
        _discard(out)
        raise BaselineError(
            f"step {step}, rank {rank}: not compared with the baseline: {'; '.join([said_, *extra] if said_ else extra)}",
            step,
            rank,
        )
    # Another data-parallel degree: every gradient is averaged over
    # another number of ranks, a layout mismatch, not a divergence (trial
    # 29: a 4-rank baseline raised Diverged at DDP's gradient mul).
    sizes = [(s["ranks"][0][side].get("world_size") if s["ranks"] else None) for side in ("run1", "run2")]
    if None not in sizes and sizes[0] != sizes[1]:
        _discard(out)
        raise BaselineError(
            f"step {step}, rank {rank}: the baseline ran with World size {sizes[0]} and this run with "
            f"{sizes[1]}: with data parallelism every gradient is averaged over the world size, so the "
            "two differ by design; capture a baseline with this job's world size",
            step,
            rank,
        )
    paired = sum(r["counts"].get("match", 0) + r["counts"].get("diff", 0) for r in s["ranks"])
    if paired == 0:
        _discard(out)
        raise BaselineError(
            f"step {step}, rank {rank}: no op pairs with the baseline's {base}: another model or capture", step, rank
        )
    if status == 0:
        _discard(out)
        return None
    r = s["ranks"][0]
    what, key = _what_diverges(r, step)
    gating = r["counts"].get("gating", 0)
    message = (
        f"step {step} diverges from the baseline on rank {rank}: {what} "
        f"({gating} gating row{'' if gating == 1 else 's'}); report: {out} (open its index.html)"
    )
    if uncaptured is not None:
        a, b = uncaptured
        steps = f"step {a}, before step {step}, was" if a == b else f"steps {a}-{b}, before step {step}, were"
        message += f"; {steps} not captured: the runs may part there first"
    return Diverged(message, step, rank, key, out)
