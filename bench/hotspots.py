#!/usr/bin/env python
"""Where the time goes: torch-profiler tables of one learner update and one fast-engine rollout.

    python bench/hotspots.py --model qwen0.5b          # the 0.5B-architecture model (random weights)
    python bench/hotspots.py --model builtin --top 15

Prints the top operators by self CPU time for (1) one GRPO learner update (forward + backward of the policy
with the chunked LM head, PPO-clip, AdamW step) and (2) one rollout of the fast engine, plus each table's
share of matmul-type operators. Conclusions drawn from these tables are in docs/performance.md.
"""

from __future__ import annotations

import argparse
import copy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "src"))

MATMUL_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::matmul", "aten::linear",
              "aten::_scaled_dot_product_flash_attention_for_cpu", "aten::baddbmm")


def table(prof, top: int) -> tuple[str, float]:
    events = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in events) or 1.0
    mm = sum(e.self_cpu_time_total for e in events if e.key in MATMUL_OPS)
    return events.table(sort_by="self_cpu_time_total", row_limit=top), mm / total


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen0.5b", choices=["builtin", "qwen0.5b"])
    ap.add_argument("--top", type=int, default=12)
    args = ap.parse_args()

    from common import model_dir
    from torch.profiler import ProfilerActivity, profile
    from workers import _learner_batch

    from rlvr.config import Config
    from rlvr.learner.learner import Learner
    from rlvr.models import load_causal_lm, load_tokenizer
    from rlvr.rollout import SamplingParams
    from rlvr.rollout.fast import FastEngine

    small = args.model == "qwen0.5b"
    spec = {"prompts": 2 if small else 16, "n": 4 if small else 8, "max_new_tokens": 64 if small else 96,
            "random_lengths": small}
    path = model_dir(args.model)
    tok, model = load_tokenizer(path), load_causal_lm(path)
    batch = _learner_batch(model, tok, spec)
    cfg = Config.model_validate({
        "train": {"steps": 10, "mini_batches": 1, "micro_batch_size": spec["prompts"] * spec["n"],
                  "prompts_per_step": spec["prompts"]},
        "rollout": {"n": spec["n"], "max_new_tokens": spec["max_new_tokens"]},
        "optim": {"lr": 1e-6, "grad_clip": 1.0},
    })
    learner = Learner(model, cfg)
    learner.update(copy.deepcopy(batch))  # warm-up: allocator, optimizer state
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        learner.update(copy.deepcopy(batch))
    text, mm = table(prof, args.top)
    print(f"== learner update ({args.model}, {int(batch.mask.sum())} response tokens, "
          f"{int(batch.attention_mask.sum())} tokens in all); matmul-type share of self CPU time {100 * mm:.0f}%")
    print(text)

    engine = FastEngine(model, tok)
    prompts = [tok(f"{1234 + i}+{4321 * i}=")["input_ids"] for i in range(spec["prompts"])]
    params = SamplingParams(n=spec["n"], temperature=1.0, max_new_tokens=spec["max_new_tokens"])
    engine.generate(prompts, params)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out = engine.generate(prompts, params)
    text, mm = table(prof, args.top)
    print(f"== fast-engine rollout ({args.model}, {sum(len(s.response_ids) for g in out for s in g)} new tokens); "
          f"matmul-type share of self CPU time {100 * mm:.0f}%")
    print(text)


if __name__ == "__main__":
    main()
