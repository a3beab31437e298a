#!/usr/bin/env python
"""How much learner work skipping zero-advantage rows saves (not part of `make bench`; issue "Performance at
the floor", point 5):

    PYTHONPATH=src python bench/learner_work.py --models builtin,qwen25m --rounds 3 > bench/results/<date>-skip.json

One GRPO update (ppo_clip, token_mean, one mini-batch, micro-batches of 16 rows) on 8 groups x 8 samples of 64
response tokens, with 0, 2, 4 or 6 of the 8 groups all-equal (their advantages exactly 0, as GRPO gives a group
whose rewards are all the same): `train.skip_zero_advantage` on (A) and off (B), alternated A B A B ... on a
copy of the same weights and the same batch. Reported: the median seconds of each side, the median and range of
the per-round ratio B/A, and the 1-minute load average before each timed call (the machine is shared).
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import environ_summary, model_dir  # noqa: E402


def make_batch(model: Any, groups: int, n: int, prompt_len: int, response_len: int, dead: int, vocab: int) -> Any:
    import torch

    from rlvr.models.logprobs import token_logprobs
    from rlvr.types import Batch, Group, Sample, TaskRecord

    gen = torch.Generator().manual_seed(0)
    out = []
    for g in range(groups):
        prompt = torch.randint(3, vocab, (prompt_len,), generator=gen).tolist()
        advantages = [0.0] * n if g < dead else [(-1.0) ** i for i in range(n)]  # the first `dead` groups
        samples = [Sample(prompt_ids=prompt, response_ids=torch.randint(3, vocab, (response_len,),
                                                                        generator=gen).tolist(), advantage=a)
                   for a in advantages]
        out.append(Group(TaskRecord(id=str(g), question=""), prompt, samples))
    batch = Batch.from_groups(out, pad_id=0)
    with torch.no_grad():
        batch.old_logprobs, _ = token_logprobs(model, batch.input_ids, batch.attention_mask, batch.mask)
    return batch


def one_update(model: Any, batch: Any, skip: bool, micro: int) -> tuple[float, dict[str, float]]:
    from rlvr.config import Config
    from rlvr.learner.learner import Learner

    cfg = Config.model_validate({"train": {"steps": 1, "micro_batch_size": micro, "skip_zero_advantage": skip},
                                 "optim": {"lr": 1e-5}})
    learner = Learner(model, cfg)
    started = time.perf_counter()
    metrics = learner.update(copy.deepcopy(batch))
    return time.perf_counter() - started, metrics


def main(argv: list[str] | None = None) -> int:
    import torch

    from rlvr.models import load_causal_lm

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", default="builtin,qwen25m")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--dead", default="0,2,4,6", help="all-equal groups of the 8, comma-separated")
    parser.add_argument("--response-len", type=int, default=64)
    parser.add_argument("--micro", type=int, default=16)
    args = parser.parse_args(argv)
    results: list[dict[str, Any]] = []
    for name in args.models.split(","):
        base = load_causal_lm(model_dir(name))
        vocab = min(int(base.config.vocab_size), 256)
        for dead in (int(d) for d in args.dead.split(",")):
            batch = make_batch(base, 8, 8, 12, args.response_len, dead, vocab)
            one_update(copy.deepcopy(base), batch, True, args.micro)  # warm-up (allocator, kernels)
            times: dict[str, list[float]] = {"skip": [], "full": []}
            loads: list[float] = []
            skipped = 0.0
            for _ in range(args.rounds):
                for side in ("skip", "full"):
                    loads.append(os.getloadavg()[0])
                    seconds, metrics = one_update(copy.deepcopy(base), batch, side == "skip", args.micro)
                    times[side].append(seconds)
                    skipped = metrics.get("zero_adv_rows_skipped_frac", skipped)
            ratios = [f / s for s, f in zip(times["skip"], times["full"])]
            row = {"model": name, "dead_groups": dead, "dead_frac": dead / 8, "rows_skipped_frac": skipped,
                   "skip_s": times["skip"], "full_s": times["full"],
                   "median_skip_s": statistics.median(times["skip"]),
                   "median_full_s": statistics.median(times["full"]),
                   "ratio_full_over_skip_median": statistics.median(ratios),
                   "ratio_range": [min(ratios), max(ratios)], "load_1min": loads}
            print(f"{name:8s} dead {dead}/8: skip {row['median_skip_s']:.3f}s  full {row['median_full_s']:.3f}s  "
                  f"full/skip {row['ratio_full_over_skip_median']:.2f} ({min(ratios):.2f}-{max(ratios):.2f})",
                  file=sys.stderr)
            results.append(row)
        del base
    print(json.dumps({"bench": "learner_work", "threads": torch.get_num_threads(), "env": environ_summary(),
                      "response_len": args.response_len, "micro_batch_size": args.micro, "results": results},
                     indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
