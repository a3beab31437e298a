#!/usr/bin/env python
"""The lab model's measured properties from one `rlvr eval` result (docs/models.md, "The lab model").

    rlvr eval builtin-lab --task countdown --n 256 --k 1,4,16,64,256 --temperature 1.0 --out runs/lab-props/base.json
    python scripts/lab_properties.py runs/lab-props/base.json

Prints pass@k, the share of held-out problems never solved in n samples, the share solved at a per-sample rate in
(0, 0.2], and the bands the lab issue asks for (10% <= pass@1 <= 35%, pass@64 >= 3 x pass@1, pass@256 <= 95%,
>= 5% unsolved at k = 256, >= 20% with a rate in (0, 0.2]), each marked met or not; by difficulty too.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def properties(result: dict) -> dict:
    problems = result["problems"]
    rates = [p["correct"] / p["n"] for p in problems]
    n = problems[0]["n"]
    out = {
        "prompts": len(problems), "n": n, "pass@k": result["pass@k"],
        "unsolved_frac": sum(r == 0 for r in rates) / len(rates),
        "rare_frac": sum(0 < r <= 0.2 for r in rates) / len(rates),
        "by_difficulty": {d: v["pass@k"] for d, v in result.get("by_difficulty", {}).items()},
        "mean_length": result.get("mean_length"),
    }
    p = result["pass@k"]
    checks = {"10% <= pass@1 <= 35%": 0.10 <= p["1"] <= 0.35}
    if "64" in p:
        checks["pass@64 >= 3 x pass@1"] = p["64"] >= 3 * p["1"]
    if "256" in p:
        checks["pass@256 <= 95%"] = p["256"] <= 0.95
    if n >= 256:
        checks[">= 5% unsolved at k=256"] = out["unsolved_frac"] >= 0.05
    checks[">= 20% solved at a rate in (0, 0.2]"] = out["rare_frac"] >= 0.20
    out["checks"] = checks
    return out


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    print(json.dumps(properties(json.loads(Path(sys.argv[1]).read_text())), indent=2))
