#!/usr/bin/env python
"""`run.reuse_memory` on and off, end to end (docs/performance.md, "Freed memory kept for reuse"; not part of
`make bench`):

    OMP_NUM_THREADS=1 PYTHONPATH=src python bench/reuse_memory.py --rounds 2 --steps 5 \\
        --out bench/results/<date>-reuse-memory.json

Runs `workers.rlvr_train` (the GRPO loop, share-0 reward, every row trained) with `run.reuse_memory` true and
false alternated, each in its own process, and records for every learner call (`learn_on`: the warm-up step
first) its wall time, minor page faults and system/user CPU time from `getrusage`.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent

CHILD = """
import json, resource, sys, time
sys.path.insert(0, {bench!r})
from rlvr.learner import step
calls = []
inner = step.learn_on
def learn_on(learner, groups, pad_id):
    r0, t0 = resource.getrusage(resource.RUSAGE_SELF), time.perf_counter()
    out = inner(learner, groups, pad_id)
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    calls.append({{"learn_s": time.perf_counter() - t0, "minor_faults": r1.ru_minflt - r0.ru_minflt,
                  "sys_s": r1.ru_stime - r0.ru_stime, "user_s": r1.ru_utime - r0.ru_utime}})
    return out
step.learn_on = learn_on
from workers import rlvr_train
rlvr_train({args})
print("CALLS " + json.dumps(calls))
"""


def run(args: argparse.Namespace, reuse: bool) -> dict:
    spec = {"model": args.model, "prompts": args.prompts, "n": args.n, "max_new_tokens": args.max_new_tokens,
            "engine": "fast", "lr": 1e-5, "steps": args.steps, "equal_share": 0.0,
            "micro_batch_size": args.prompts * args.n,
            "overrides": ["train.skip_zero_advantage=false", f"run.reuse_memory={str(reuse).lower()}"]}
    code = CHILD.format(bench=str(HERE), args=repr(spec))
    env = {**os.environ, "PYTHONWARNINGS": "ignore", "TOKENIZERS_PARALLELISM": "false"}
    load = os.getloadavg()[0]
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=7200)
    out: dict = {"reuse_memory": reuse, "load_1min_at_start": load}
    for line in proc.stdout.splitlines():
        if line.startswith("BENCH_RESULT "):
            out["result"] = json.loads(line[len("BENCH_RESULT "):])
        elif line.startswith("CALLS "):
            out["learner_calls"] = json.loads(line[len("CALLS "):])
    if "result" not in out:
        raise RuntimeError(f"run failed (exit {proc.returncode}):\n{(proc.stdout + proc.stderr)[-3000:]}")
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model", default="qwen0.5b")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--steps", type=int, default=5, help="measured steps per run (one warm-up step more)")
    ap.add_argument("--prompts", type=int, default=2)
    ap.add_argument("--n", type=int, default=8)
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    runs = []
    for r in range(args.rounds):
        for reuse in (True, False):
            res = run(args, reuse) | {"round": r + 1}
            runs.append(res)
            calls = ", ".join(f"{c['learn_s']:.1f}" for c in res["learner_calls"])
            print(f"round {r + 1} reuse_memory={reuse}: learner s per call {calls}; "
                  f"median step {res['result']['step_s']:.2f} s", flush=True)
    out = {"bench": "reuse_memory", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "settings": vars(args) | {"out": str(args.out)}, "runs": runs}
    if args.out:
        args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
