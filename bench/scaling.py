#!/usr/bin/env python
"""The scaling table and the floors (issue "Performance at the floor", point 6; not part of `make bench`):

    PYTHONPATH=src python bench/scaling.py --out bench/results/<date>-scaling.json

rlvr's seconds per GRPO step (rollout and learner apart) while one thing varies:
  - n, samples per prompt (4, 8, 16, 32), on `tiny` (the built-in model's 0.8M architecture) and `qwen25m`;
  - max_new_tokens (16 ... 256) on `qwen25m`;
  - model size: `tiny` (0.8M), `qwen25m` (25M) and `qwen0.5b` (Qwen2.5-0.5B's architecture, 494M).
All three models are randomly initialised, so they seldom sample EOS and every row runs to max_new_tokens:
the work of a step is set by the settings alone. The reward is `common.share_rewards` at share 0 (pseudo-random
0/1, no learning signal) and `train.skip_zero_advantage=false`, so the learner computes every row.
For each sweep, the fitted exponent is the least-squares slope of log(seconds) against log(the varied
quantity) (parameters for the size sweep); 1 means linear. Beside every step, the `floors` worker measures
in a separate process the matmul time of the same step's shapes (`bench/workers.py: floors`), and the table
gives rlvr's learner and rollout time as multiples of those floors.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import call  # noqa: E402

SWEEPS = {
    "n": [dict(model=m, prompts=4, n=n, max_new_tokens=64) for m in ("tiny", "qwen25m") for n in (4, 8, 16, 32)],
    "max_new_tokens": [dict(model="qwen25m", prompts=4, n=8, max_new_tokens=m) for m in (16, 32, 64, 128, 256)],
    "size": [dict(model=m, prompts=2, n=8, max_new_tokens=32) for m in ("tiny", "qwen25m", "qwen0.5b")],
}


def slope(xs: list[float], ys: list[float]) -> float:
    """Least-squares slope of log(y) on log(x)."""
    lx, ly = [math.log(x) for x in xs], [math.log(y) for y in ys]
    mx, my = statistics.fmean(lx), statistics.fmean(ly)
    return sum((a - mx) * (b - my) for a, b in zip(lx, ly)) / sum((a - mx) ** 2 for a in lx)


def measure(point: dict[str, Any], steps: int, micro_rows: int) -> dict[str, Any]:
    load = os.getloadavg()[0]
    rows = point["prompts"] * point["n"]
    mrows = min(micro_rows, rows)
    out = call("rlvr_train", {**point, "engine": "fast", "lr": 1e-5, "steps": steps, "equal_share": 0.0,
                              "micro_batch_size": mrows, "overrides": ["train.skip_zero_advantage=false"]},
               timeout=7200)
    prompt_len = round((out["train_tokens_per_step"] - out["response_tokens_per_step"]) / rows)
    floor = call("floors", {"model": point["model"], "rows": rows, "micro_rows": mrows, "prompt_len": prompt_len,
                            "max_new_tokens": point["max_new_tokens"], "prefill_rows": point["prompts"]},
                 timeout=3600)
    out.update(point, load_1min=round(load, 2), prompt_len=prompt_len, floors=floor,
               learner_over_floor=out["train_s"] / floor["learner_matmul_floor_s"],
               learner_over_floor_with_optimizer=out["train_s"] / (floor["learner_matmul_floor_s"]
                                                                  + floor["optimizer_floor_s"]),
               rollout_over_floor=out["rollout_s"] / floor["decode_matmul_floor_s"])
    print(f"  {point}: step {out['step_s']:.2f} s (rollout {out['rollout_s']:.2f}, learner {out['train_s']:.2f}); "
          f"tokens/step {out['response_tokens_per_step']:.0f}; learner {out['learner_over_floor']:.2f}x its "
          f"matmul floor, rollout {out['rollout_over_floor']:.2f}x", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--sweeps", default=",".join(SWEEPS), help=f"comma-separated, of {', '.join(SWEEPS)}")
    ap.add_argument("--steps", type=int, default=2, help="measured steps per point (one warm-up step more)")
    ap.add_argument("--micro-rows", type=int, default=16, help="rlvr's rows per forward/backward")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    unknown = set(args.sweeps.split(",")) - set(SWEEPS)
    if unknown:
        ap.error(f"--sweeps: unknown {', '.join(sorted(unknown))}; choose from {', '.join(SWEEPS)}")
    cache: dict[str, dict[str, Any]] = {}
    doc: dict[str, Any] = {"bench": "scaling", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                           "settings": vars(args) | {"out": str(args.out)}, "sweeps": {}}
    for name in args.sweeps.split(","):
        print(f"sweep {name}", flush=True)
        points = []
        for point in SWEEPS[name]:
            key = json.dumps(point, sort_keys=True)
            if key not in cache:
                cache[key] = measure(point, args.steps, args.micro_rows)
            points.append(cache[key])
        fits: dict[str, Any] = {}
        groups = sorted({p["model"] for p in points}) if name != "size" else ["all"]
        for g in groups:
            sel = [p for p in points if g == "all" or p["model"] == g]
            xs = [p["floors"]["matmul_params"] if name == "size" else p[name] for p in sel]
            fits[g] = {part: slope(xs, [p[part] for p in sel]) for part in ("step_s", "rollout_s", "train_s")}
            print(f"  fitted exponents ({g}): " + ", ".join(f"{k} {v:.2f}" for k, v in fits[g].items()), flush=True)
        doc["sweeps"][name] = {"points": points, "exponents": fits}
        if args.out is not None:  # after every sweep: nothing lost if a later one fails
            args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
