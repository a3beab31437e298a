#!/usr/bin/env python
"""rlvr vs TRL's GRPOTrainer at equal work, with a set share of all-equal groups (issue "Performance at the
floor", points 1 and 6; not part of `make bench`):

    PYTHONPATH=src python bench/equal_work.py --models builtin,qwen25m --shares 0,0.3,0.6 --rounds 3 \\
        --out bench/results/<date>-equal-work.json

Both sides train the same model (fp32, no KL, one optimizer step per batch of P prompts x n samples, the same
lr, at most M new tokens) with the same reward function, `common.share_rewards`: a set share of each batch's
prompts get reward 0 on every sample (an all-equal group, advantage 0), the others a pseudo-random 0/1 per
sample. So both sides see the same share of all-equal groups, and the reward carries no learning signal:
this measures the work of a step, not learning. A randomly initialised model seldom samples EOS, so both
sides generate about P x n x M tokens a step; response tokens per step are reported beside the seconds so
unequal lengths show. Each framework runs in its own process (`bench/run.py --worker`), and the two
alternate (rlvr, TRL, TRL, rlvr, ...) so that drifting load hits both. Reported per setting: each side's
median s/step over its measured steps (the first step is warm-up), the per-round ratio TRL/rlvr (above 1:
rlvr faster), its median and range, and the 1-minute load average before every run.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import call  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="builtin,qwen25m")
    ap.add_argument("--shares", default="0,0.3,0.6", help="shares of all-equal groups, comma-separated")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=3, help="measured steps per run (one warm-up step more)")
    ap.add_argument("--prompts", type=int, default=8)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--micro-batch-size", type=int, default=16, help="rlvr's rows per forward/backward")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    results: list[dict[str, Any]] = []
    for model in args.models.split(","):
        for share in (float(s) for s in args.shares.split(",")):
            common = {"model": model, "prompts": args.prompts, "n": args.n, "max_new_tokens": args.max_new_tokens,
                      "lr": 1e-5, "steps": args.steps, "equal_share": share}
            runs: dict[str, list[dict[str, Any]]] = {"rlvr": [], "trl": []}
            for r in range(args.rounds):
                order = ("rlvr", "trl") if r % 2 == 0 else ("trl", "rlvr")
                for side in order:
                    load = os.getloadavg()[0]
                    if side == "rlvr":
                        out = call("rlvr_train", {**common, "engine": "fast", "round": r,
                                                  "micro_batch_size": args.micro_batch_size}, timeout=3600)
                    else:
                        out = call("trl_train", {**common, "round": r}, timeout=3600)
                    out["load_1min"] = round(load, 2)
                    runs[side].append(out)
            ratios = [t["step_s"] / v["step_s"] for v, t in zip(runs["rlvr"], runs["trl"])]
            tps = [v["rollout_tokens_per_s"] for v in runs["rlvr"]], [t["rollout_tokens_per_s"] for t in runs["trl"]]
            row = {
                "model": model, "equal_share": share, "rlvr": runs["rlvr"], "trl": runs["trl"],
                "rlvr_step_s": statistics.median(v["step_s"] for v in runs["rlvr"]),
                "trl_step_s": statistics.median(t["step_s"] for t in runs["trl"]),
                "trl_over_rlvr_median": statistics.median(ratios), "trl_over_rlvr_range": [min(ratios), max(ratios)],
                "rlvr_response_tokens_per_step": statistics.median(v["response_tokens_per_step"] for v in runs["rlvr"]),
                "trl_response_tokens_per_step": statistics.median(t["response_tokens_per_step"] for t in runs["trl"]),
                "rlvr_all_equal_share": statistics.median(v.get("all_equal_share", float("nan")) for v in runs["rlvr"]),
                "trl_all_equal_share": statistics.median(t.get("all_equal_share", float("nan")) for t in runs["trl"]),
                "rlvr_rollout_tokens_per_s": statistics.median(tps[0]),
                "trl_rollout_tokens_per_s": statistics.median(tps[1]),
                "load_1min": [o["load_1min"] for o in runs["rlvr"] + runs["trl"]],
            }
            print(f"{model:8s} share {share:.1f}: rlvr {row['rlvr_step_s']:.2f} s/step, TRL {row['trl_step_s']:.2f}; "
                  f"TRL/rlvr {row['trl_over_rlvr_median']:.2f} ({min(ratios):.2f}-{max(ratios):.2f}); tokens/step "
                  f"{row['rlvr_response_tokens_per_step']:.0f} vs {row['trl_response_tokens_per_step']:.0f}; "
                  f"all-equal {row['rlvr_all_equal_share']:.2f} vs {row['trl_all_equal_share']:.2f}", flush=True)
            results.append(row)
    doc = {"bench": "equal_work", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "settings": vars(args) | {"out": str(args.out)}, "results": results}
    if args.out is not None:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
