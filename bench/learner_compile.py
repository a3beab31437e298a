#!/usr/bin/env python
"""`train.compile` measured (not part of `make bench`; issue "Performance at the floor", point 3):

    OMP_NUM_THREADS=1 PYTHONPATH=src python bench/learner_compile.py --models tiny,qwen25m \\
        --out bench/results/<date>-learner-compile.json

For each model (bench/common.py: `tiny` is the built-in model's architecture, `qwen25m` the 25M one, both
random weights), one forward and backward of the learner's log-probs (models/logprobs.forward_tokens, a
token-mean loss) on a fixed batch of `rows` x `length` tokens (the first 12 a prompt), eager and with the decoder
compiled by `learner.compiled.compile_decoder` (inductor, dynamic shapes). Reported: the compile time (the first
compiled call, the probe included, minus nothing: it is what a run pays once), the largest gradient difference
relative to the largest gradient, and `rounds` alternated timings of `steps` calls each (eager, compiled, ...):
median seconds per call, and the per-round ratio eager / compiled (above 1: compiled faster). The compiled
decoder is switched off between rounds by removing its compiled `forward`, so both sides share one model and
batch. The payback is compile time / (eager - compiled): the learner calls after which compiling is ahead.

Inductor keeps generated kernels in a cache (TORCHINDUCTOR_CACHE_DIR, by default under /tmp), so a later run
of the same shapes compiles faster. Unless that variable is set, this script uses a fresh directory (a cold
compile); set it to one directory and run twice to measure a warm one.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import environ_summary, model_dir  # noqa: E402

os.environ.setdefault("TORCHINDUCTOR_CACHE_DIR", tempfile.mkdtemp(prefix="rlvr-inductor-"))  # before torch


def measure(name: str, rows: int, length: int, rounds: int, steps: int) -> dict[str, Any]:
    import torch

    from rlvr.learner.compiled import compile_decoder
    from rlvr.models import load_causal_lm
    from rlvr.models.logprobs import forward_tokens

    torch.manual_seed(0)
    model = load_causal_lm(model_dir(name))
    vocab = model.config.vocab_size
    ids = torch.randint(1, min(vocab, 256), (rows, length))
    attention = torch.ones_like(ids)
    mask = torch.zeros(rows, length)
    mask[:, 12:] = 1.0

    def call() -> float:
        model.zero_grad(set_to_none=True)
        start = time.perf_counter()
        lp = forward_tokens(model, ids, attention, mask).logprobs
        (-(lp * mask).sum() / mask.sum()).backward()
        return time.perf_counter() - start

    def timed() -> float:
        return statistics.median(call() for _ in range(steps))

    decoder = model.get_decoder()
    call()
    eager_grads = {k: p.grad.clone() for k, p in model.named_parameters()}
    start = time.perf_counter()
    assert compile_decoder(model), "compilation fell back to eager"
    compiled_forward = decoder.forward
    call()
    compile_s = time.perf_counter() - start
    scale = max(float(g.abs().max()) for g in eager_grads.values())
    grad_diff = max(float((p.grad - eager_grads[k]).abs().max()) for k, p in model.named_parameters()) / scale
    eager, compiled, loads = [], [], []
    for _ in range(rounds):
        loads.append(round(os.getloadavg()[0], 2))
        del decoder.forward  # the class's eager forward
        eager.append(timed())
        decoder.forward = compiled_forward
        compiled.append(timed())
    ratios = [e / c for e, c in zip(eager, compiled)]
    e_med, c_med = statistics.median(eager), statistics.median(compiled)
    out = {"model": name, "rows": rows, "length": length, "compile_s": compile_s, "grad_rel_diff": grad_diff,
           "eager_s": eager, "compiled_s": compiled, "eager_median_s": e_med, "compiled_median_s": c_med,
           "ratio_median": statistics.median(ratios), "ratio_range": [min(ratios), max(ratios)],
           "payback_calls": compile_s / (e_med - c_med) if e_med > c_med else None, "load_1min": loads,
           "inductor_cache": os.environ["TORCHINDUCTOR_CACHE_DIR"]}
    print(f"{name}: compile {compile_s:.1f} s; eager {e_med:.4f} s, compiled {c_med:.4f} s per call; eager/compiled "
          f"{out['ratio_median']:.2f} [{min(ratios):.2f}, {max(ratios):.2f}]; grad diff {grad_diff:.1e}", flush=True)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models", default="tiny,qwen25m")
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--length", type=int, default=76, help="tokens per row (12 prompt + the rest response)")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--steps", type=int, default=5, help="timed calls per side per round")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    results = [measure(m, args.rows, args.length, args.rounds, args.steps) for m in args.models.split(",")]
    doc = {"bench": "learner_compile", "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
           "settings": vars(args) | {"out": str(args.out)}, "env": environ_summary(), "results": results}
    if args.out is not None:
        args.out.write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
