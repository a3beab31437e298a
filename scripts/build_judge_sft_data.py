#!/usr/bin/env python
"""Cold-start traces for the generative-RM recipes: prompt/completion JSONL for `rlvr sft`.

Think-RM and R1-Reward start RL from a model fine-tuned on reasoning traces that end in the right verdict
(the papers distil them from a stronger model). Here the trace is the project's own worked solution of the
question followed by the verdict naming the answer that matches it, e.g.

    Question: 269+575 / Answer A: 844 / Answer B: 833 / ...  ->  9+5=14;4|6+7+1=14;44|2+5+1=8;844|A:844 [[A]]

    python scripts/build_judge_sft_data.py --out runs/judge_sft.jsonl --size 4000
    rlvr sft recipes/sft_builtin.yaml model.path=builtin data.path=runs/judge_sft.jsonl train.steps=200

Only the training split is used, so held-out agreement stays held out.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rlvr.tasks import build_task
from rlvr.tasks.addition import worked_solution


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--size", type=int, default=4000, help="Training problems to write.")
    ap.add_argument("--mode", default="pairwise", choices=["pairwise", "pointwise"])
    args = ap.parse_args()
    task = build_task("preference_judge", {"mode": args.mode})
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w") as f:
        for i in range(args.size):
            rec = task.train[i]
            solution, _ = worked_solution(rec.meta["a"], rec.meta["b"])
            completion = f"{solution} {task.verdict_template.replace('{label}', str(rec.answer))}"
            f.write(json.dumps({"prompt": task.plain_prompt(rec), "completion": completion}) + "\n")
    print(f"wrote {args.size} traces to {args.out}")


if __name__ == "__main__":
    main()
