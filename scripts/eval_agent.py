#!/usr/bin/env python
"""Evaluate a model as an agent on a recipe's held-out prompts: accuracy and tool-use statistics.

    python scripts/eval_agent.py runs/tool_model/sft/final recipes/agent_calculator.yaml --size 100 --n 4

Reads the recipe's `task` and `agent` sections, runs multi-turn agent rollouts (the same code as training)
at the recipe's temperature, verifies the final answers, and prints one JSON object: accuracy (pass@1 over
all samples), pass@n, and the agent metrics (turns, tool calls, success rate, extra-call fraction, ...).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("model", help="model directory (or 'builtin')")
    ap.add_argument("recipe", type=Path)
    ap.add_argument("--size", type=int, default=100, help="held-out prompts")
    ap.add_argument("--n", type=int, default=4, help="samples per prompt")
    ap.add_argument("--temperature", type=float, default=None, help="default: the recipe's rollout.temperature")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", type=Path, default=None, help="also write the JSON here")
    args = ap.parse_args()

    import torch

    from rlvr.config import AgentConfig, read_yaml
    from rlvr.models import load_causal_lm, load_tokenizer
    from rlvr.rewards import CorrectnessReward, RewardFunction
    from rlvr.rollout import (
        SamplingParams,
        agent_metrics,
        agent_rollout_groups,
        build_env_factory,
    )
    from rlvr.rollout.hf import HFEngine
    from rlvr.tasks import PromptRenderer, build_task

    recipe = read_yaml(args.recipe)
    task_spec = dict(recipe.get("task", {}))
    task = build_task(task_spec.pop("name"), task_spec)
    agent = AgentConfig(**recipe["agent"])
    rollout = recipe.get("rollout", {})
    tokenizer = load_tokenizer(args.model)
    torch.manual_seed(args.seed)
    engine = HFEngine(load_causal_lm(args.model, trainable=False), tokenizer)
    renderer = PromptRenderer(task, tokenizer, recipe.get("model", {}).get("chat_template", "auto"))
    params = SamplingParams(n=args.n, temperature=args.temperature or rollout.get("temperature", 1.0),
                            max_new_tokens=rollout.get("max_new_tokens", 256), stop=list(rollout.get("stop", [])))
    factory = build_env_factory(agent)
    verify = RewardFunction([("correctness", 1.0, CorrectnessReward(workers=0))])
    records = list(task.heldout)[: args.size]
    groups = []
    started = time.perf_counter()
    for i in range(0, len(records), 32):
        chunk = agent_rollout_groups(engine, renderer, task, records[i : i + 32], params, agent, env_factory=factory)
        verify(chunk, task)
        groups.extend(chunk)
    factory.close()
    samples = [s for g in groups for s in g.samples]
    result = {
        "model": args.model, "prompts": len(groups), "n": args.n, "temperature": params.temperature,
        "accuracy": sum(bool(s.correct) for s in samples) / len(samples),
        f"pass@{args.n}": sum(any(s.correct for s in g.samples) for g in groups) / len(groups),
        **{k.removeprefix("agent/"): round(v, 4) for k, v in agent_metrics(groups).items()},
        "seconds": round(time.perf_counter() - started, 1),
    }
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
