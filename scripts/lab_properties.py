#!/usr/bin/env python
"""A lab model's measured properties from one `rlvr eval` result (docs/models.md, "The lab models").

    rlvr eval builtin-lab --task countdown --n 256 --k 1,4,16,64,256 --temperature 1.0 --out runs/lab-props/base.json
    python scripts/lab_properties.py runs/lab-props/base.json

    rlvr eval builtin-lab-total --task running_total --n 256 --k 1,4,16,64,256 --temperature 1.0 \
        rollout.max_new_tokens=160 --out runs/lab-props/total.json
    python scripts/lab_properties.py runs/lab-props/total.json --task running_total

Prints pass@k, maj@16, the share of held-out problems never solved in n samples, the share solved at a per-sample
rate in (0, 0.2], response lengths, and the bands of the task's model, each marked met or not:
- countdown: 10% <= pass@1 <= 35%, pass@64 >= 3 x pass@1, pass@256 <= 95%, >= 5% unsolved at k = 256, >= 20%
  with a rate in (0, 0.2];
- running_total: 10% <= pass@1 <= 40%, pass@64 >= 2 x pass@1, >= 5% unsolved at k = 256, maj@16 >= pass@1 + 10
  points (the vote premise), length p90 >= 2 x p10 and wrong answers' mean length >= 20% away from right answers'
  (the length premise).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def properties(result: dict, task: str = "countdown") -> dict:
    problems = result["problems"]
    rates = [p["correct"] / p["n"] for p in problems]
    n = problems[0]["n"]
    length = result.get("length") or {}
    out = {
        "prompts": len(problems), "n": n, "pass@k": result["pass@k"], "maj@k": result.get("maj@k"),
        "unsolved_frac": sum(r == 0 for r in rates) / len(rates),
        "rare_frac": sum(0 < r <= 0.2 for r in rates) / len(rates),
        "by_difficulty": {d: v["pass@k"] for d, v in result.get("by_difficulty", {}).items()},
        "mean_length": result.get("mean_length"), "length": length,
    }
    p = result["pass@k"]
    checks: dict[str, bool] = {}
    if task == "countdown":
        checks["10% <= pass@1 <= 35%"] = 0.10 <= p["1"] <= 0.35
        if "64" in p:
            checks["pass@64 >= 3 x pass@1"] = p["64"] >= 3 * p["1"]
        if "256" in p:
            checks["pass@256 <= 95%"] = p["256"] <= 0.95
        if n >= 256:
            checks[">= 5% unsolved at k=256"] = out["unsolved_frac"] >= 0.05
        checks[">= 20% solved at a rate in (0, 0.2]"] = out["rare_frac"] >= 0.20
    elif task == "running_total":
        checks["10% <= pass@1 <= 40%"] = 0.10 <= p["1"] <= 0.40
        if "64" in p:
            checks["pass@64 >= 2 x pass@1"] = p["64"] >= 2 * p["1"]
        if n >= 256:
            checks[">= 5% unsolved at k=256"] = out["unsolved_frac"] >= 0.05
        maj = (result.get("maj@k") or {}).get("16")
        if maj is not None:
            checks["maj@16 >= pass@1 + 10 points"] = maj >= p["1"] + 0.10
        if length.get("p10"):
            checks["length p90 >= 2 x p10"] = length["p90"] >= 2 * length["p10"]
        if length.get("right_mean") and length.get("wrong_mean"):
            ratio = length["wrong_mean"] / length["right_mean"]
            out["wrong_over_right_length"] = ratio
            checks["wrong vs right mean length >= 20% apart"] = abs(ratio - 1.0) >= 0.20
    else:
        raise SystemExit(f"--task: expected countdown or running_total; got {task!r}")
    out["checks"] = checks
    return out


if __name__ == "__main__":
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("result", type=Path, help="an `rlvr eval --out` JSON")
    ap.add_argument("--task", default="countdown", help="countdown (default) or running_total: whose bands")
    args = ap.parse_args()
    print(json.dumps(properties(json.loads(args.result.read_text()), args.task), indent=2))
