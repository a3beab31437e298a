#!/usr/bin/env python
"""Build the lab's second model (src/rlvr/models/builtin_lab_total/) from scratch, reproducibly, with `rlvr sft`.

    OMP_NUM_THREADS=2 python scripts/build_lab_total_model.py   # the shipped build: seed 0, the defaults below

`model.path=builtin-lab-total` is the policy of the lab's findings on the running-total task
(`task.name=running_total`, docs/lab.md): a small Qwen2 LM whose answers are single numbers and whose responses
vary in length, so that voting, label-free and length findings have their premise (docs/models.md states it,
measured).

What is designed in (stated, not discovered), by a teacher that writes the SFT data on the task's *training*
split (outside the held-out pool by construction, tasks/heldout.py; the script checks every example):
- two moods per problem: careful (`P_CAREFUL`, few slips) or hasty (`SLIP` per operation: a result off by
  1, 2 or 10, carried into the next step);
- checks: after a step the teacher may write `!` and the step again (`CHECK_AFTER_SLIP` after a slip,
  `CHECK_AFTER_RIGHT` after a right step); the second try fixes a slip with `RETRY_FIXES`, else repeats it;
- a blind spot: a product of `BLIND_SPOT_MIN` or more whose ones digit carries (43*7) is always written with
  that carry forgotten (281 for 301), checked or not: problems with such a step are not solved at any k;
- rambling after the answer (`~` and some of the steps again, no new answer), more often after a wrong answer
  (`RAMBLE_WRONG`) than a right one (`RAMBLE_RIGHT`).
Then `rlvr sft recipes/sft_lab_total.yaml`, then `rlvr eval` at T = 1; `scripts/lab_properties.py --task
running_total` measures the properties table.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))

from build_base_model import _count_params, eval_at_t1, make_init_model, sft_into  # noqa: E402

from rlvr.tasks.heldout import HELD_OUT_KEY  # noqa: E402
from rlvr.tasks.running_total import (  # noqa: E402
    HELD_OUT_SHARE, RunningTotalTask, apply_op, canonical_problem, running_total_held_out,
)

P_CAREFUL = 0.2
SLIP = {"+": 0.3, "-": 0.35, "*": 0.4}  # per operation, hasty; careful slips at CAREFUL_SLIP times these
CAREFUL_SLIP = 0.3
CHECK_AFTER_SLIP = 0.45
CHECK_AFTER_RIGHT = 0.12
RETRY_FIXES = 0.6
RAMBLE_RIGHT = 0.1
RAMBLE_WRONG = 0.5
BLIND_SPOT_MIN = 300
MAX_NEW_TOKENS = 160
ARCH = dict(hidden_size=160, intermediate_size=480, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=320, rope_theta=10000.0, tie_word_embeddings=True)


def blind_spot(total: int, op: str, operand: int) -> int | None:
    """The teacher's systematic error: a product of BLIND_SPOT_MIN or more whose ones digit carries is written with
    that carry forgotten (23*15 is not asked; 43*7=301 is written 281)."""
    carry = (total % 10) * operand // 10
    if op != "*" or total * operand < BLIND_SPOT_MIN or carry == 0:
        return None
    return total * operand - 10 * carry


def slipped(value: int, rng: random.Random) -> int:
    while True:
        v = value + rng.choice((-10, -2, -1, 1, 2, 10))
        if v >= 0:
            return v


def teacher_solution(start: int, steps: list[tuple[str, int]], rng: random.Random) -> tuple[str, dict[str, int]]:
    """The teacher's worked answer for one problem, with counts of what it did."""
    careful = rng.random() < P_CAREFUL
    pieces, written, total = [], [], start
    stats = {"slips": 0, "checks": 0, "fixed": 0, "blind": 0}
    for op, operand in steps:
        right = apply_op(total, op, operand)
        if right is None:  # a slip left the range: the teacher goes on with the exact value
            right = total + operand if op == "+" else max(total - operand, 0) if op == "-" else total * operand
        blind = blind_spot(total, op, operand)
        p_slip = SLIP[op] * (CAREFUL_SLIP if careful else 1.0)
        value = blind if blind is not None else slipped(right, rng) if rng.random() < p_slip else right
        stats["blind"] += blind is not None
        stats["slips"] += value != right and blind is None
        step = f"{total}{op}{operand}={value}"
        text = step
        if rng.random() < (CHECK_AFTER_SLIP if value != right else CHECK_AFTER_RIGHT):
            stats["checks"] += 1
            if value != right and blind is None and rng.random() < RETRY_FIXES:
                value = right
                stats["fixed"] += 1
            text += f"!{total}{op}{operand}={value}"
        pieces.append(text)
        written.append(f"{total}{op}{operand}={value}")
        total = value
    out = ";".join(pieces) + f"|A:{total}"
    ok = total == _truth(start, steps)
    if rng.random() < (RAMBLE_RIGHT if ok else RAMBLE_WRONG):
        out += "~" + ";".join(written[:rng.randint(1, len(written))])
    return out, {**stats, "right": int(ok), "careful": int(careful)}


def _truth(start: int, steps: list[tuple[str, int]]) -> int:
    total = start
    for op, operand in steps:
        total = apply_op(total, op, operand)  # type: ignore[assignment]
    return total


def make_data(path: Path, count: int, seed: int) -> dict[str, float]:
    task = RunningTotalTask(train_size=max(count, 100_000))
    rng = random.Random(seed)
    sums = {"slips": 0, "checks": 0, "fixed": 0, "blind": 0, "right": 0, "careful": 0, "chars": 0}
    with path.open("w") as f:
        for i in range(count):
            record = task.train[i]
            if running_total_held_out(record):  # the build's own check over the data it writes
                raise SystemExit(f"training example {i} ({canonical_problem(record)}) is a held-out problem")
            text, stats = teacher_solution(record.meta["start"], record.meta["steps"], rng)
            assert bool(stats["right"]) == task.verify(text, record).correct
            for k, v in stats.items():
                sums[k] += v
            sums["chars"] += len(text)
            f.write(json.dumps({"prompt": task.plain_prompt(record), "completion": text}) + "\n")
    return {("teacher_accuracy" if k == "right" else f"{k}_per_example"): v / count for k, v in sums.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "src/rlvr/models/builtin_lab_total")
    ap.add_argument("--work", type=Path, default=ROOT / "runs/build_lab_total_model")
    ap.add_argument("--examples", type=int, default=120_000)
    ap.add_argument("--steps", type=int, default=1600)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--data-only", action="store_true", help="write the SFT data and print the teacher's numbers")
    args = ap.parse_args()

    started = time.time()
    if args.work.exists():
        shutil.rmtree(args.work)
    args.work.mkdir(parents=True)
    data = args.work / "sft_data.jsonl"
    stats = make_data(data, args.examples, args.seed)
    print(f"wrote {args.examples} examples to {data}: {json.dumps(stats)}", flush=True)
    if args.data_only:
        return
    init = args.work / "init"
    make_init_model(init, args.seed, ARCH)
    sft_into(args.out, "recipes/sft_lab_total.yaml", init, data, args.work, args.seed, args.steps)
    result = eval_at_t1(args.out, args.work, "running_total", 64, "1,4,16,64", MAX_NEW_TOKENS)
    card = {
        "architecture": "Qwen2ForCausalLM", **ARCH,
        "parameters": _count_params(args.out),
        "tokenizer": "byte-level, no merges (one token per ASCII character), tokenizers library",
        "task": "running_total (a start 1..20 and 2-5 operations + - * on a total kept in 0..999); steps with "
                "checks and retries, then the answer, sometimes rambling after it",
        "held_out": {"rule": "tasks/heldout.py", "key": HELD_OUT_KEY, "family": "running_total",
                     "share": HELD_OUT_SHARE, "training_examples_in_pool": 0},
        "role": "builtin-lab-total",
        "sft": {"examples": args.examples, "steps": args.steps, "seed": args.seed,
                "p_careful": P_CAREFUL, "slip": SLIP, "careful_slip": CAREFUL_SLIP,
                "check_after_slip": CHECK_AFTER_SLIP, "check_after_right": CHECK_AFTER_RIGHT,
                "retry_fixes": RETRY_FIXES, "ramble_right": RAMBLE_RIGHT, "ramble_wrong": RAMBLE_WRONG,
                **{k: round(v, 4) for k, v in stats.items()}},
        "heldout_eval": {"temperature": 1.0, "n": 64, "prompts": result["num_prompts"],
                         "max_new_tokens": MAX_NEW_TOKENS,
                         **{f"pass@{k}": round(v, 4) for k, v in result["pass@k"].items()}},
        "command": f"OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS', '(unset)')} python "
                   f"scripts/build_lab_total_model.py --examples {args.examples} "
                   f"--steps {args.steps} --seed {args.seed}",
    }
    (args.out / "build_info.json").write_text(json.dumps(card, indent=2) + "\n")
    print(json.dumps(card, indent=2))
    print(f"built {args.out} in {(time.time() - started) / 60:.1f} min")


if __name__ == "__main__":
    main()
