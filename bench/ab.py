#!/usr/bin/env python
"""A/B one benchmark worker between two source trees, interleaved (A B A B ...), e.g. before and after a
refactor that must not change speed:

    python bench/ab.py --a /path/to/old/checkout --b . --worker rlvr_train \\
        --args '{"model": "builtin", "prompts": 16, "n": 8, "max_new_tokens": 96, "lr": 1e-4, "steps": 5,
                 "engine": "fast"}' --rounds 3

Each run is a fresh process of that tree's `bench/run.py --worker` (its own `src/` first on the path). Prints
each run's median step time, then the B/A ratio per round and its median and spread; writes the raw results to
`--out` (JSON). The machine's load average is recorded beside every run: on a busy machine, read the spread.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path


def run(tree: Path, worker: str, args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(tree / "src"), "TOKENIZERS_PARALLELISM": "false",
           "PYTHONWARNINGS": "ignore"}
    load = os.getloadavg()[0]
    proc = subprocess.run([sys.executable, str(tree / "bench" / "run.py"), "--worker", worker, "--args", args],
                          capture_output=True, text=True, env=env, cwd=tree, timeout=3600)
    for line in proc.stdout.splitlines():
        if line.startswith("BENCH_RESULT "):
            result = json.loads(line[len("BENCH_RESULT "):])
            result["loadavg_1m_at_start"] = round(load, 2)
            return result
    raise RuntimeError(f"{tree}: {worker} failed (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--a", type=Path, required=True, help="baseline source tree")
    ap.add_argument("--b", type=Path, required=True, help="candidate source tree")
    ap.add_argument("--worker", default="rlvr_train")
    ap.add_argument("--args", required=True, help="the worker's JSON arguments")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--metric", default="step_s", help="the result field compared (lower is better)")
    ap.add_argument("--out", type=Path, default=None)
    opts = ap.parse_args()
    rows = []
    for r in range(opts.rounds):
        for label, tree in (("A", opts.a), ("B", opts.b)):
            res = run(tree.resolve(), opts.worker, opts.args)
            rows.append({"round": r, "tree": label, **res})
            print(f"round {r} {label}: {opts.metric} {res[opts.metric]:.3f}  "
                  f"(load {res['loadavg_1m_at_start']})", flush=True)
    ratios = [b[opts.metric] / a[opts.metric] for a, b in zip(rows[0::2], rows[1::2])]
    summary = {"ratio_b_over_a": ratios, "median": statistics.median(ratios), "min": min(ratios),
               "max": max(ratios), "metric": opts.metric, "a": str(opts.a), "b": str(opts.b)}
    print(f"B/A {opts.metric}: median {summary['median']:.3f} (range {summary['min']:.3f}-{summary['max']:.3f})")
    if opts.out:
        opts.out.write_text(json.dumps({"summary": summary, "runs": rows}, indent=2) + "\n")


if __name__ == "__main__":
    main()
