"""Search against plain sampling at equal token budgets, on the built-in model and held-out addition.

For each method (sampling, beam_prm, mcts) and token budget B per problem, `rlvr.eval.search.evaluate_search`
on the first N held-out problems: the solve rate (pass@1 of the searched answer; for sampling, of the first
correct sample) and the tokens generated per problem and per solved problem. Every method stops at the first
verified-correct complete response. Seeded; OMP_NUM_THREADS=1 recommended.

    OMP_NUM_THREADS=1 PYTHONPATH=src python bench/search_builtin.py --digits 4 4 --size 60 \
        --budgets 100 200 400 --out /tmp/search_builtin.json [--plot /tmp/search_builtin.png]

Any `key=value` after `--` is a config override for every method (e.g. -- search.branch=2 search.c=0.5).
"""

from __future__ import annotations

import argparse
import json

import torch

from rlvr.config import load_config
from rlvr.eval.search import evaluate_search
from rlvr.models import load_causal_lm, load_tokenizer
from rlvr.rollout import SamplingParams, build_engine
from rlvr.runtime import step_seed
from rlvr.tasks import PromptRenderer, build_task

METHODS = {  # label -> the search section's overrides
    "sampling": ["search.name=sampling"],
    "beam_prm": ["search.name=beam_prm", "search.beam_width=2"],
    "mcts": ["search.name=mcts", "search.c=0.5"],
    "mcts_widen": ["search.name=mcts", "search.c=0.5", "search.widen=0.5"],
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--digits", type=int, nargs=2, default=(4, 4))
    ap.add_argument("--size", type=int, default=60)
    ap.add_argument("--budgets", type=int, nargs="+", default=(100, 200, 400))
    ap.add_argument("--methods", nargs="+", default=list(METHODS))
    ap.add_argument("--out", default=None)
    ap.add_argument("--plot", default=None)
    ap.add_argument("overrides", nargs="*")
    args = ap.parse_args()
    base = [f"task.digits=[{args.digits[0]},{args.digits[1]}]", "rollout.max_new_tokens=96",
            "search.delimiter=|", "search.branch=2", *args.overrides]
    cfg0 = load_config(None, [*base, "search.name=sampling", "search.max_tokens=100"])
    task = build_task(cfg0.task.name, cfg0.task.params)
    tokenizer = load_tokenizer("builtin")
    model = load_causal_lm("builtin", dtype=torch.float32, device=torch.device("cpu"), trainable=False)
    engine = build_engine("fast", {}, 256, model, tokenizer)
    renderer = PromptRenderer(task, tokenizer, cfg0.model.chat_template)
    records = list(task.heldout)[: args.size]
    rows = []
    for method in args.methods:
        for budget in args.budgets:
            cfg = load_config(None, [*base, *METHODS[method], f"search.max_tokens={budget}"])
            params = SamplingParams(temperature=cfg.rollout.temperature, max_new_tokens=cfg.rollout.max_new_tokens)
            torch.manual_seed(step_seed(cfg.run.seed, 10**9))
            res = evaluate_search(engine, renderer, task, records, params, cfg.search.settings(), tokenizer)
            row = {"method": method, "budget": budget, "solve_rate": res["solve_rate"],
                   "tokens_per_problem": res["tokens_per_problem"], "tokens_per_solved": res["tokens_per_solved"],
                   "seconds": res["seconds"], "search": res["search"]}
            rows.append(row)
            per_solved = "-" if row["tokens_per_solved"] is None else f"{row['tokens_per_solved']:.0f}"
            print(f"| {method} | {budget} | {100 * row['solve_rate']:.1f}% | {row['tokens_per_problem']:.0f} | "
                  f"{per_solved} | {row['seconds']:.1f} |", flush=True)
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"args": vars(args), "rows": rows}, f, indent=2)
    if args.plot:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        fig, ax = plt.subplots(figsize=(5, 3.5))
        for method in args.methods:
            pts = [(r["budget"], 100 * r["solve_rate"]) for r in rows if r["method"] == method]
            ax.plot(*zip(*pts), marker="o", label=method)
        ax.set_xlabel("token budget per problem")
        ax.set_ylabel("solved (%)")
        ax.set_xscale("log")
        ax.set_title(f"builtin, addition {args.digits[0]}-{args.digits[1]} digits, {args.size} problems")
        ax.legend()
        fig.tight_layout()
        fig.savefig(args.plot, dpi=100)


if __name__ == "__main__":
    main()
