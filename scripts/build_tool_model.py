#!/usr/bin/env python
"""Build a tool-using version of the built-in model for the agent demo (recipes/agent_calculator.yaml).

    python scripts/build_tool_model.py              # about 18 minutes on 2 idle CPU cores

1. Synthetic traces for large additions (the `addition` task with 5-8 digit operands, training split): the
   prompt is the task's plain prompt `a+b=`, the completion a whole episode in the agent format, e.g.

       <tool_call>{"name": "calculator", "arguments": {"expression": "48213+9921"}}</tool_call><tool_response>58134</tool_response>A:58134

   Observations are produced by the real `tools` environment (calculator, parser, error messages), so they
   are exactly what the model will see during RL. The mix is imperfect on purpose, so that RL has something
   to improve (fractions below): malformed JSON (then a retry or a blind answer), a mistyped operand,
   an unnecessary second call, and answering without the tool.
2. `rlvr sft recipes/sft_builtin.yaml model.path=builtin ...` warm-starts the built-in model on them. SFT
   trains on the whole completion, observation text included (RL later masks observations out); for a
   warm start that only teaches the format this is acceptable.
3. The model directory is RUN/sft/final (default runs/tool_model/sft/final); traces.jsonl and
   build_info.json sit next to it.
"""

from __future__ import annotations

import argparse
import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rlvr.rollout.env import ToolEnvironment  # noqa: E402
from rlvr.rollout.format import RESPONSE_CLOSE, RESPONSE_OPEN, format_tool_call  # noqa: E402
from rlvr.rollout.tools import ToolSet  # noqa: E402
from rlvr.rollout.tools.calculator import Calculator  # noqa: E402
from rlvr.tasks.addition import AdditionTask  # noqa: E402

DIGITS = (5, 8)
# What kind of episode each trace shows (the rest are clean: one correct call, then the answer).
MIX = {"malformed": 0.12, "typo": 0.10, "extra_call": 0.15, "no_tool": 0.13}


def _slip(number: str, rng: random.Random) -> str:
    """The number with one digit changed (a careless copy)."""
    i = rng.randrange(len(number))
    digit = rng.choice([d for d in "0123456789" if d != number[i]] if i or len(number) == 1 else "123456789")
    return number[:i] + digit + number[i + 1 :]


def _malformed(expression: str, rng: random.Random) -> str:
    good = format_tool_call("calculator", {"expression": expression})
    return rng.choice([
        good.replace("}}</tool_call>", "}</tool_call>"),  # a brace short
        good.replace('"expression": ', '"expression" '),  # a missing colon
        good.replace('"calculator"', "calculator"),  # an unquoted name
    ])


class Episode:
    """Builds a completion turn by turn with the real environment's observations."""

    def __init__(self, env: ToolEnvironment):
        self.env, self.text, self.calls = env, "", 0

    def call(self, action: str) -> str:
        result = self.env.step(action)
        self.calls += len(result.info["calls"])
        observation = "".join(f"{RESPONSE_OPEN}{o}{RESPONSE_CLOSE}" for o in result.info["tool_outputs"])
        self.text += action + observation
        return result.info["tool_outputs"][-1]

    def answer(self, value: str) -> str:
        self.text += f"A:{value}"
        return self.text


def make_trace(record, kind: str, env: ToolEnvironment, rng: random.Random) -> str:
    a, b = str(record.meta["a"]), str(record.meta["b"])
    expression = f"{a}+{b}"
    ep = Episode(env)
    call = format_tool_call("calculator", {"expression": expression})
    if kind == "no_tool":
        return ep.answer(record.answer if rng.random() < 0.5 else _slip(record.answer, rng))
    if kind == "malformed":
        ep.call(_malformed(expression, rng))
        if rng.random() < 0.5:
            return ep.answer(ep.call(call))
        return ep.answer(_slip(record.answer, rng))
    if kind == "typo":
        typo = f"{_slip(a, rng)}+{b}" if rng.random() < 0.5 else f"{a}+{_slip(b, rng)}"
        return ep.answer(ep.call(format_tool_call("calculator", {"expression": typo})))
    if kind == "extra_call":
        ep.call(call)
        return ep.answer(ep.call(call))
    return ep.answer(ep.call(call))


def make_traces(path: Path, count: int, seed: int) -> dict[str, float]:
    task = AdditionTask(digits=DIGITS, eval_size=200)
    env = ToolEnvironment(ToolSet([Calculator()]))
    rng = random.Random(seed)
    kinds = list(MIX) + ["clean"]
    weights = list(MIX.values()) + [1 - sum(MIX.values())]
    counts = dict.fromkeys(kinds, 0)
    right = 0
    with path.open("w") as f:
        for i in range(count):
            record = task.train[i]
            kind = rng.choices(kinds, weights)[0]
            counts[kind] += 1
            text = make_trace(record, kind, env, rng)
            right += text.rsplit("A:", 1)[1] == record.answer
            f.write(json.dumps({"prompt": task.plain_prompt(record), "completion": text}) + "\n")
    return {**{k: v / count for k, v in counts.items()}, "teacher_accuracy": right / count}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--work", type=Path, default=ROOT / "runs/tool_model")
    ap.add_argument("--init", default="builtin", help="model to start from (default: the built-in model)")
    ap.add_argument("--traces", type=int, default=20_000)
    ap.add_argument("--steps", type=int, default=1200)
    ap.add_argument("--batch-size", type=int, default=32)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    started = time.time()
    if args.work.exists():
        shutil.rmtree(args.work)
    args.work.mkdir(parents=True)
    data = args.work / "traces.jsonl"
    mix = make_traces(data, args.traces, args.seed)
    print(f"wrote {args.traces} traces to {data}: " + ", ".join(f"{k} {v:.2f}" for k, v in mix.items()), flush=True)
    cmd = [sys.executable, "-m", "rlvr", "sft", "recipes/sft_builtin.yaml", f"model.path={args.init}",
           f"data.path={data}", f"run.dir={args.work / 'sft'}", f"run.seed={args.seed}", "data.max_length=384",
           f"train.steps={args.steps}", f"train.batch_size={args.batch_size}", f"train.micro_batch_size={args.batch_size}",
           f"optim.lr={args.lr}", "optim.warmup_steps=20", "logging.console_every=50"]
    print("$", " ".join(cmd), flush=True)
    subprocess.run(cmd, check=True, cwd=ROOT)
    minutes = (time.time() - started) / 60
    info = {"base": args.init, "task": f"addition, {DIGITS[0]}-{DIGITS[1]} digits, calculator tool",
            "traces": args.traces, "mix": {k: round(v, 4) for k, v in mix.items()}, "sft_steps": args.steps,
            "batch_size": args.batch_size, "lr": args.lr, "seed": args.seed, "build_minutes": round(minutes, 1)}
    (args.work / "build_info.json").write_text(json.dumps(info, indent=2) + "\n")
    print(f"built {args.work / 'sft' / 'final'} in {minutes:.1f} min")


if __name__ == "__main__":
    main()
