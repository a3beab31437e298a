#!/usr/bin/env python
"""Ad-hoc follow-up to `bench/run.py --sections vllm` (not part of `make bench`): vLLM's CPU worker runs one OpenMP
thread on 2 cores (it keeps a core for its scheduler), while the fast engine and `generate` use torch's default
of 2. On a shared, oversubscribed machine a 2-thread torch process loses most of its speed, so this re-measures
the fast engine with 1 torch thread against vLLM, alternated, on the given models.

    PYTHONPATH=src python bench/threads_check.py qwen25m:3 qwen0.5b:2 > bench/results/<date>-threads.json
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from run import Server  # noqa: E402

SPEC = {"builtin": 64, "qwen25m": 64, "qwen0.5b": 32}  # max_new_tokens, as in the vllm section


def main() -> None:
    out = []
    for item in sys.argv[1:]:
        model, _, rounds = item.partition(":")
        args = {"model": model, "prompts": 8, "n": 8, "max_new_tokens": SPEC[model], "reps": 1}
        servers = {"fast (1 thread)": Server({**args, "engine": "fast", "threads": 1}),
                   "vllm": Server({**args, "engine": "vllm"})}
        runs: dict[str, list] = {k: [] for k in servers}
        try:
            for rnd in range(int(rounds or 2)):
                for name, server in servers.items():
                    print(f"  round {rnd}: {name} on {model}", file=sys.stderr, flush=True)
                    runs[name].append(server.ask(f"run {rnd}"))
        finally:
            for server in servers.values():
                server.close()
        med = {k: statistics.median(r["tokens_per_s"][0] for r in v) for k, v in runs.items()}
        out.append({"settings": args, "median_tokens_per_s": med, "vllm_over_fast_1thread": med["vllm"] /
                    med["fast (1 thread)"], "startup": {k: s.ready for k, s in servers.items()}, "runs": runs})
        print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
