#!/usr/bin/env python
"""Build the lab model (src/rlvr/models/builtin_lab/) from scratch, reproducibly, with rlvr's own `rlvr sft`.

    OMP_NUM_THREADS=1 python scripts/build_lab_model.py   # the shipped build: seed 0, the defaults below

The lab model (`model.path=builtin-lab`) is the policy of `rlvr lab` (docs/lab.md): a small Qwen2 LM that plays
Countdown (`task.name=countdown`) badly in a problem-specific way, so that RL methods can be told apart on it.

What is designed in (stated, not discovered):
1. A byte-level tokenizer and a randomly initialised Qwen2 LM (seeded), a little larger than the built-in model.
2. Synthetic SFT data on the countdown task's *training* split, which lies outside the held-out pool by
   construction (tasks/heldout.py; the script checks every example it writes), by a teacher that mixes strategies:
   - `P_CHAIN_NO_DIV`: a right left-to-right chain that uses only + - * (uniform among them), when one exists;
   - `P_CHAIN_DIV`: a right chain that uses division (rare on purpose: problems that need division are solved
     rarely, at a problem-specific rate, which is where pass@k at large k and RL's narrowing can show);
   - the rest, and whenever the chosen strategy has no solution: a careless attempt, a random order and random
     + - * ops with the last op picked to land as near the target as it can; right or wrong as it lands.
   The teacher never writes an expression of shape (a op b) op (c op d): a problem whose every solution has that
   shape is never solved by the model, at any k.
3. `rlvr sft recipes/sft_lab.yaml` trains it.
4. `rlvr eval` measures held-out pass@1, pass@16 and pass@64 at temperature 1.0 (docs/models.md has the full
   pass@k to 256). The build fails unless 10% <= pass@1 <= 35% and pass@64 >= 3 x pass@1.
"""

from __future__ import annotations

import argparse
import itertools
import json
import random
import shutil
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "scripts"))

from build_base_model import MODEL_FILES, _count_params, eval_at_t1, make_init_model, rlvr, sft_into  # noqa: E402

from rlvr.tasks.countdown import (  # noqa: E402
    HELD_OUT_SHARE, OPS, CountdownTask, apply, canonical_problem, chain_solutions, chain_text, countdown_held_out,
)
from rlvr.tasks.heldout import HELD_OUT_KEY  # noqa: E402

P_CHAIN_NO_DIV = 0.55
P_CHAIN_DIV = 0.05
ARCH = dict(hidden_size=160, intermediate_size=480, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=256, rope_theta=10000.0, tie_word_embeddings=True)


def careless_attempt(numbers: list[int], target: int, rng: random.Random) -> str:
    """A random order and random + - * steps, the last op chosen to land nearest the target."""
    while True:
        order = rng.sample(numbers, len(numbers))
        ops = [rng.choice("+-*") for _ in range(len(order) - 2)]
        value: int | None = order[0]
        for op, n in zip(ops, order[1:-1]):
            value = apply(value, op, n) if value is not None else None
        if value is None:
            continue
        last = [(abs(v - target), op) for op in "+-*" if (v := apply(value, op, order[-1])) is not None]
        ops.append(min(last)[1])
        text, _ = chain_text(order, ops)
        return text


def teacher_solution(numbers: list[int], target: int, rng: random.Random) -> tuple[str, str]:
    """The teacher's worked answer and which strategy wrote it."""
    u = rng.random()
    if u < P_CHAIN_NO_DIV + P_CHAIN_DIV:
        use_div = u >= P_CHAIN_NO_DIV
        sols = [s for s in chain_solutions(numbers, target) if ("/" in s[1]) == use_div]
        if sols:
            order, ops = rng.choice(sols)
            return chain_text(order, ops)[0], "chain_div" if use_div else "chain"
    return careless_attempt(numbers, target, rng), "careless"


def pair_solutions(numbers: list[int], target: int) -> list[tuple[tuple[int, ...], tuple[str, str, str]]]:
    """Every `(a op b) op (c op d)` over positive integers that makes `target` (4 numbers), as (order, ops)."""
    if len(numbers) != 4:
        return []
    out = []
    for order in dict.fromkeys(itertools.permutations(numbers)):
        for o1, o2, o3 in itertools.product(OPS, repeat=3):
            left, right = apply(order[0], o1, order[1]), apply(order[2], o3, order[3])
            if left is not None and right is not None and apply(left, o2, right) == target:
                out.append((order, (o1, o2, o3)))
    return out


def pair_text(order: tuple[int, ...], ops: tuple[str, str, str]) -> str:
    """The worked form of a pair-shaped solution: both pairs, their combination, then the expression."""
    a, b, c, d = order
    o1, o2, o3 = ops
    left, right = apply(a, o1, b), apply(c, o3, d)
    value = apply(left, o2, right)  # type: ignore[arg-type]
    return f"{a}{o1}{b}={left};{c}{o3}{d}={right};{left}{o2}{right}={value}|A:({a}{o1}{b}){o2}({c}{o3}{d})"


def right_solution(numbers: list[int], target: int, rng: random.Random) -> tuple[str, str]:
    """The right-only teacher (builtin-lab-teacher): a uniformly chosen right solution of any shape."""
    chains = list(chain_solutions(numbers, target))
    pairs = pair_solutions(numbers, target)
    if not chains and not pairs:  # the task's targets are built from a chain or a pair, so this is not reached
        return careless_attempt(numbers, target, rng), "careless"
    k = rng.randrange(len(chains) + len(pairs))
    if k < len(chains):
        order, ops = chains[k]
        return chain_text(order, ops)[0], "chain_div" if "/" in ops else "chain"
    order, ops = pairs[k - len(chains)]
    return pair_text(order, ops), "pair"


def make_data(path: Path, count: int, seed: int, right_only: bool = False) -> dict[str, float]:
    # pair_only=False: pair-shaped targets of any kind. Any variant's training split lies outside the held-out
    # pool (tasks/heldout.py), so the lab's held-out problems (pair_only=true) cannot be among these either.
    task = CountdownTask(train_size=max(count, 100_000), pair_only=False)
    rng = random.Random(seed)
    right, styles = 0, {"chain": 0, "chain_div": 0, "careless": 0, "pair": 0}
    with path.open("w") as f:
        for i in range(count):
            record = task.train[i]
            if countdown_held_out(record):  # the build's own check over the data it writes
                raise SystemExit(f"training example {i} ({canonical_problem(record)}) is a held-out problem")
            solve = right_solution if right_only else teacher_solution
            text, style = solve(record.meta["numbers"], record.meta["target"], rng)
            styles[style] += 1
            right += task.verify(text, record).correct
            f.write(json.dumps({"prompt": task.plain_prompt(record), "completion": text}) + "\n")
    return {"teacher_accuracy": right / count, **{f"{k}_frac": v / count for k, v in styles.items()}}


def grpo_into(out: Path, work: Path, seed: int, steps: int) -> None:
    """`rlvr train recipes/grpo.yaml` on countdown from the model in `out` (WORK/grpo), its final/ copied back."""
    run = work / "grpo"
    rlvr("train", "recipes/grpo.yaml", f"model.path={out}", "task={name: countdown}", "rollout.max_new_tokens=64",
         f"train.steps={steps}", f"run.seed={seed}", f"run.dir={run}", "eval.before=false", "eval.after=false",
         "checkpoint.every=0", "logging.progress=false")
    for name in MODEL_FILES:
        if (run / "final" / name).exists():
            shutil.copy2(run / "final" / name, out / name)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "src/rlvr/models/builtin_lab")
    ap.add_argument("--work", type=Path, default=ROOT / "runs/build_lab_model")
    ap.add_argument("--examples", type=int, default=120_000)
    ap.add_argument("--steps", type=int, default=1600)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-check", action="store_true", help="Skip the pass@k acceptance bounds.")
    ap.add_argument("--teacher", action="store_true", help="build builtin-lab-teacher instead: the same model "
                    "trained on right solutions only, of every shape (chains with and without division, and "
                    "(a op b) op (c op d)), then --grpo-steps of GRPO; no student bands")
    ap.add_argument("--grpo-steps", type=int, default=None, help="with --teacher: then this many GRPO steps of "
                    "recipes/grpo.yaml on countdown from the SFT model (default 300; 0: none)")
    args = ap.parse_args()
    if args.grpo_steps is None:
        args.grpo_steps = 300 if args.teacher else 0
    if args.teacher and args.out == ROOT / "src/rlvr/models/builtin_lab":
        args.out = ROOT / "src/rlvr/models/builtin_lab_teacher"
    assert set(OPS) == set("+-*/")

    started = time.time()
    if args.work.exists():
        shutil.rmtree(args.work)
    args.work.mkdir(parents=True)
    data = args.work / "sft_data.jsonl"
    stats = make_data(data, args.examples, args.seed, right_only=args.teacher)
    print(f"wrote {args.examples} examples to {data}: {json.dumps(stats)}", flush=True)
    init = args.work / "init"
    make_init_model(init, args.seed, ARCH)

    sft_into(args.out, "recipes/sft_lab.yaml", init, data, args.work, args.seed, args.steps)
    sft_eval = None
    if args.grpo_steps:
        sft_eval = eval_at_t1(args.out, args.work, "countdown", 64, "1,4,16,64", 64)["pass@k"]
        grpo_into(args.out, args.work, args.seed, args.grpo_steps)
    result = eval_at_t1(args.out, args.work, "countdown", 64, "1,4,16,64", 64)
    p1, p64 = result["pass@k"]["1"], result["pass@k"]["64"]
    minutes = (time.time() - started) / 60
    card = {
        "architecture": "Qwen2ForCausalLM", **ARCH,
        "parameters": _count_params(args.out),
        "tokenizer": "byte-level, no merges (one token per ASCII character), tokenizers library",
        "task": "countdown (3 or 4 numbers from 1..10, targets 1..100), chain scratchpad then the expression",
        "held_out": {"rule": "tasks/heldout.py", "key": HELD_OUT_KEY, "family": "countdown",
                     "share": HELD_OUT_SHARE, "training_examples_in_pool": 0},
        "role": "builtin-lab-teacher: right solutions of every shape only" if args.teacher else "builtin-lab",
        "sft": {"examples": args.examples, "steps": args.steps, "seed": args.seed,
                **({} if args.teacher else {"p_chain_no_div": P_CHAIN_NO_DIV, "p_chain_div": P_CHAIN_DIV}),
                **{k: round(v, 4) for k, v in stats.items()}},
        **({"grpo": {"steps": args.grpo_steps, "recipe": "recipes/grpo.yaml", "seed": args.seed,
                     "sft_heldout_pass@k": {k: round(v, 4) for k, v in sft_eval.items()}}} if sft_eval else {}),
        "heldout_eval": {"temperature": 1.0, "n": 64, "prompts": result["num_prompts"],
                         **{f"pass@{k}": round(v, 4) for k, v in result["pass@k"].items()}},
        "build_minutes": round(minutes, 1),
        "command": f"OMP_NUM_THREADS=1 python scripts/build_lab_model.py{' --teacher' if args.teacher else ''} "
                   f"--examples {args.examples} --steps {args.steps} --seed {args.seed}"
                   + (f" --grpo-steps {args.grpo_steps}" if args.teacher else ""),
    }
    (args.out / "build_info.json").write_text(json.dumps(card, indent=2) + "\n")
    print(json.dumps(card, indent=2))
    if not args.no_check and not args.teacher:
        if not 0.10 <= p1 <= 0.35:
            sys.exit(f"pass@1 = {p1:.3f} is outside [0.10, 0.35]")
        if p64 < 3 * p1:
            sys.exit(f"pass@64 = {p64:.3f} is less than three times pass@1 = {p1:.3f}")
    print(f"built {args.out} in {minutes:.1f} min")


if __name__ == "__main__":
    main()
