"""The conformance recipe's eager step 2 with no tracer at all: prints, as
JSON, the statistics of every ``nn.Linear`` output, keyed as a log keys the
``mm`` that computes it (``<module FQN>/op_0_mm``), computed here with plain
torch in the reference tracer's definitions and printed as its log prints
them (``%.6e``).

It replays ../shared/capture/recipe.py's settings and steps (seed 0,
deterministic algorithms, one thread; step 1 then step 2, each forward,
backward, zero_grad; no optimizer in eager mode, so step 2 runs the same
weights). It runs in its own process, like the recipe, so the kernels it
gets are the ones a recipe run gets on this host.

usage: python linear_probe.py CAPTURE_DIR   (the folder holding recipe.py)
"""

from __future__ import annotations

import json
import sys


def main() -> None:
    sys.path.insert(0, sys.argv[1])
    import torch
    import torch.nn.functional as F
    from llama3.model import ModelConfig, batch, build

    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from logs import reference_lines

    torch.manual_seed(0)
    torch.use_deterministic_algorithms(True)
    torch.set_num_threads(1)
    cfg = ModelConfig(n_layers=4)
    model = build(cfg, seed=0)
    out: dict[str, dict[str, str]] = {}
    hooks = []
    for step in (1, 2):
        if step == 2:
            for fqn, m in model.named_modules():
                if isinstance(m, torch.nn.Linear):

                    def hook(_m, _args, y, fqn=fqn):
                        out[f"{fqn}/op_0_mm"] = reference_lines(y.detach())

                    hooks.append(m.register_forward_hook(hook))
        x, y = batch(cfg, 2, 64, seed=1000 + step)
        loss = F.cross_entropy(model(x).flatten(0, 1), y.flatten())
        loss.backward()
        model.zero_grad(set_to_none=True)
    for h in hooks:
        h.remove()
    json.dump(out, sys.stdout)


if __name__ == "__main__":
    main()
