"""The fast engine's cross-call prefix KV cache during tree search: prompt tokens prefilled and wall time of one
prompt's search, cache on against off, for models of growing size and prompt lengths.

Per model and prompt length P, `rlvr.sampling.search.search_prompt` (mcts, c = 0.5, widen 0.5, branch 2,
segments of 16 tokens, a 400-token budget (`--budget`), one rollout per partial leaf, max_new_tokens 96) on
`--prompts` prompts, with search.prefix_cache_mb = 0 and 256, each with the same seed; every response is scored 0
(random-weight models write no answers; the search still expands, rolls out and backs up, which is the work
measured). Wall time and the process's CPU time (one thread: the compute, whatever else shares the core) are
both reported. `same_trees` says whether all runs grew the same trees (node tokens and rollouts): they should,
except where fp32 rounding flips a draw (seen on the random 0.5B model's near-uniform distribution;
docs/search.md). Prompts: an addition question padded with filler text to P byte tokens (a long system prompt or
a few-shot prefix).

    OMP_NUM_THREADS=1 PYTHONPATH=src python bench/prefix_cache.py --models builtin,qwen25m --lengths 32 256 \
        --rounds 3

Off and on alternate for `--rounds` rounds and the median times are reported.

Models: bench/common.py (`builtin` shipped; `qwen25m`, `qwen0.5b` random weights, built once into runs/).
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from common import addition_records, model_dir, prompt_text

from rlvr.models import load_causal_lm, load_tokenizer
from rlvr.rollout import SamplingParams
from rlvr.rollout.fast import FastEngine
from rlvr.sampling.search import SearchSettings, search_prompt

FILLER = "You are a careful calculator. Add the numbers column by column, carry when needed, and answer. "


def prompt_ids(tok, record, length: int) -> list[int]:
    tail = tok(prompt_text(record))["input_ids"]
    head = tok(FILLER * (length // len(FILLER) + 1))["input_ids"]
    return (head[: max(length - len(tail), 0)] + tail)[-length:]


def one(engine, prompts, cache_mb: float, budget: int = 400) -> dict:
    settings = SearchSettings(strategy="mcts", strategy_params={"c": 0.5, "widen": 0.5}, max_tokens=budget, branch=2,
                              segment_tokens=16, delimiter="|", leaf_rollouts=1, prefix_cache_mb=cache_mb)
    params = SamplingParams(temperature=1.0, max_new_tokens=96)
    engine.prefill_tokens = 0
    trees, seconds, cpu, generated, calls = [], 0.0, 0.0, 0, 0
    for i, p in enumerate(prompts):
        torch.manual_seed(i)
        start, start_cpu = time.perf_counter(), time.process_time()
        res = search_prompt(engine, params, p, settings, lambda samples: [0.0] * len(samples), engine.eos_ids)
        seconds += time.perf_counter() - start
        cpu += time.process_time() - start_cpu
        generated += res.stats.tokens
        calls += res.stats.calls
        trees.append(([n.token_ids for n in res.tree.all_nodes()], [r.token_ids for r in res.rollouts]))
    return {"prefill_tokens": engine.prefill_tokens, "seconds": round(seconds, 2), "cpu_seconds": round(cpu, 2),
            "generated_tokens": generated,
            "calls": calls, "trees": trees}


def median_run(runs: list[dict]) -> dict:
    """The counts of the first run (every round does the same work) with the median times over rounds."""
    out = dict(runs[0])
    for key in ("seconds", "cpu_seconds"):
        out[key] = sorted(r[key] for r in runs)[len(runs) // 2]
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="builtin,qwen25m")
    ap.add_argument("--lengths", type=int, nargs="+", default=(32, 256))
    ap.add_argument("--prompts", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--budget", type=int, default=400, help="search.max_tokens per prompt")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rows = []
    for name in args.models.split(","):
        path = model_dir(name)
        model, tok = load_causal_lm(str(path)), load_tokenizer(str(path))
        engine = FastEngine(model, tok)
        for length in args.lengths:
            prompts = [prompt_ids(tok, r, length) for r in addition_records(args.prompts)]
            engine.generate(prompts[:1], SamplingParams(n=2, max_new_tokens=4))  # warm-up (rope tables, allocator)
            runs: dict[str, list[dict]] = {"off": [], "on": []}
            for _ in range(args.rounds):  # alternate, so that a slow spell of a shared machine hits both
                runs["off"].append(one(engine, prompts, 0, args.budget))
                runs["on"].append(one(engine, prompts, 256, args.budget))
            trees = [r.pop("trees") for rs in runs.values() for r in rs]
            off, on = (median_run(runs[k]) for k in ("off", "on"))
            row = {"model": name, "prompt_tokens": length, "prompts": len(prompts), "rounds": args.rounds,
                   "budget": args.budget, "same_trees": all(t == trees[0] for t in trees), "off": off, "on": on,
                   "speedup_wall": round(off["seconds"] / on["seconds"], 3),
                   "speedup_cpu": round(off["cpu_seconds"] / on["cpu_seconds"], 3)}
            rows.append(row)
            print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
