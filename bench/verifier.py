#!/usr/bin/env python
"""Code-verifier throughput: score N code samples through the `correctness` reward's VerifierPool at the
default concurrency (2 workers) and print samples/s.

    python bench/verifier.py                 # 2,000 samples
    python bench/verifier.py --n 200 --json  # a quick run, one JSON line
    python bench/verifier.py --hostile 0.1   # 10% of the samples probe the judge (blocked / anomaly)

The samples are the code task's generated problems with a fixed mix of responses: 50% the reference solution,
25% a wrong function, 15% a program that raises, 10% a syntax error; with --hostile, that fraction of them is
replaced by programs that fake a comparison, open a socket or exit mid-test. Each response is verified with the task's
own `verify` (the same path training takes).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

from rlvr.rewards.pool import VerifierPool
from rlvr.tasks import build_task
from rlvr.tasks.code import synthetic_problem

HOSTILE = [  # each ends in a blocked action or an anomaly, so the sandbox server that ran it is replaced
    "class Any:\n    def __eq__(self, other):\n        return True\ndef f(*args):\n    return Any()\n",
    "import socket\nsocket.socket()\ndef f(*args):\n    return 0\n",
    "import os\ndef f(*args):\n    os._exit(0)\n",
]


def samples(n: int, seed: int = 0, hostile: float = 0.0) -> list[tuple[str, object]]:
    out = []
    every = round(1 / hostile) if hostile > 0 else 0
    for i in range(n):
        record = synthetic_problem(seed, f"bench-{i}")
        kind = i % 20
        if every and i % every == every - 1:
            body = HOSTILE[(i // every) % len(HOSTILE)]
        elif kind < 10:
            body = record.meta["solution"]
        elif kind < 15:
            body = "def f(*args):\n    return 0\n"
        elif kind < 18:
            body = "def f(*args):\n    raise ValueError('no')\n"
        else:
            body = "def f(x)\n    return x\n"
        out.append((f"Here you go.\n```python\n{body}```\n", record))
    return out


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=2000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--hostile", type=float, default=0.0,
                        help="fraction of samples replaced by programs the judge blocks or flags")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    task = build_task("code", {"train_size": 10, "eval_size": 2})
    pairs = samples(args.n, hostile=args.hostile)
    with VerifierPool(task, workers=args.workers, timeout=30) as pool:
        pool.map(pairs[:4])  # start the workers (and any warm sandboxes) outside the timing
        t0 = time.perf_counter()
        results = pool.map(pairs)
        seconds = time.perf_counter() - t0
    correct = sum(r.correct for r in results)
    expected = sum(1 for i, (text, _) in enumerate(pairs) if i % 20 < 10 and not any(h in text for h in HOSTILE))
    row = {"samples": args.n, "workers": args.workers, "hostile": args.hostile, "seconds": round(seconds, 2),
           "samples_per_s": round(args.n / seconds, 1), "correct": correct, "expected_correct": expected,
           "cpus": os.cpu_count(), "platform": platform.platform()}
    try:
        from rlvr.rewards import sandbox

        row["isolation"] = sandbox.isolation_info()
    except (ImportError, AttributeError):
        row["isolation"] = "python guard only (before the OS layer)"
    print(json.dumps(row) if args.json else "\n".join(f"{k}: {v}" for k, v in row.items()))
    if correct != expected:
        sys.exit(f"wrong verdicts: {correct} correct, expected {expected}")


if __name__ == "__main__":
    main()
