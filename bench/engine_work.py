#!/usr/bin/env python
"""How much work the fast engine saves (not part of `make bench`; issue "Performance at the floor"):

    PYTHONPATH=src python bench/engine_work.py prefill --rounds 3 > bench/results/<date>-prefill.json
    PYTHONPATH=src python bench/engine_work.py compile --models builtin,qwen25m > bench/results/<date>-compile.json
    PYTHONPATH=src:<zentorch dir> python bench/engine_work.py zentorch > bench/results/<date>-zentorch.json

- prefill: response tokens/s with one shared prefill per prompt vs one prefill per row (`share_prefill`), at
  n = 1, 8, 16, for short (addition, 5-10 tokens) and long (~100-token few-shot) prompts; A and B alternate.
- compile: compile time of the decode step (first compiled call minus an eager call) and the per-step time
  of eager vs compiled decoding, alternated, hence the steps after which compiling has paid for itself.
- zentorch: fp32 matmul GFLOP/s of torch.mm vs zentorch's mm at decode shapes and square ones, and rollout
  tokens/s of eager, inductor-compiled and zentorch-compiled decoding.

Rows never stop on EOS (every row is exactly max-new tokens long), so each call does the same work. The
1-minute load average is recorded before every timed call: the machine is shared.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from common import addition_records, environ_summary, model_dir, prompt_text  # noqa: E402


def load(name: str) -> tuple[Any, Any]:
    from rlvr.models import load_causal_lm, load_tokenizer

    path = model_dir(name)
    return load_causal_lm(path), load_tokenizer(path)


def prompts_for(tok: Any, kind: str, count: int) -> list[list[int]]:
    records = addition_records(count + 12)
    texts = [prompt_text(r) for r in records[:count]]
    if kind == "long":  # a few-shot prefix of worked sums: ~100 byte tokens in front of the question
        shots = "".join(f"{prompt_text(r)}{r.answer}\n" for r in records[count:count + 8])
        texts = [shots + t for t in texts]
    return [tok(t)["input_ids"] for t in texts]


def engine(model: Any, tok: Any, **options: Any) -> Any:
    from rlvr.rollout.fast import FastEngine

    eng = FastEngine(model, tok, **options)
    eng.eos_ids = [-1]  # no id is -1: never stop on EOS, every row decodes max_new_tokens
    return eng


def timed(eng: Any, prompts: list[list[int]], n: int, max_new: int, seed: int = 0) -> dict[str, Any]:
    import torch

    from rlvr.rollout import SamplingParams

    load = os.getloadavg()[0]
    torch.manual_seed(seed)
    start = time.perf_counter()
    out = eng.generate(prompts, SamplingParams(n=n, temperature=1.0, max_new_tokens=max_new))
    seconds = time.perf_counter() - start
    tokens = sum(len(s.response_ids) for g in out for s in g)
    assert tokens == len(prompts) * n * max_new, tokens
    return {"seconds": seconds, "tokens": tokens, "tokens_per_s": tokens / seconds, "load1": load,
            "ids": [s.response_ids for g in out for s in g]}


def summary(runs: list[dict[str, Any]]) -> dict[str, Any]:
    tps = [r["tokens_per_s"] for r in runs]
    return {"median_tokens_per_s": statistics.median(tps), "min": min(tps), "max": max(tps),
            "tokens_per_s": tps, "seconds": [r["seconds"] for r in runs], "load1": [r["load1"] for r in runs]}


def bench_prefill(args: argparse.Namespace) -> list[dict[str, Any]]:
    out = []
    for name in args.models.split(","):
        model, tok = load(name)
        engines = {"shared": engine(model, tok), "unshared": engine(model, tok, share_prefill=False)}
        for kind in ("short", "long"):
            prompts = prompts_for(tok, kind, args.prompts)
            for n in (1, 8, 16):
                for eng in engines.values():  # warm-up (allocator, first-call costs)
                    timed(eng, prompts[:2], 2, 4)
                runs: dict[str, list] = {k: [] for k in engines}
                for rnd in range(args.rounds):
                    order = list(engines) if rnd % 2 == 0 else list(engines)[::-1]  # ABBA...
                    for key in order:
                        runs[key].append(timed(engines[key], prompts, n, args.max_new, seed=rnd))
                same = all(a["ids"] == b["ids"] for a, b in zip(runs["shared"], runs["unshared"]))
                res = {"model": name, "prompts": kind, "n": n, "rows": args.prompts * n,
                       "prompt_tokens": [len(p) for p in prompts], "max_new_tokens": args.max_new,
                       "same_samples_for_same_seed": same,
                       **{k: summary(v) for k, v in runs.items()}}
                res["shared_over_unshared"] = statistics.median(
                    a["tokens_per_s"] / b["tokens_per_s"] for a, b in zip(runs["shared"], runs["unshared"]))
                out.append(res)
                print(f"{name} {kind} n={n}: shared {res['shared']['median_tokens_per_s']:.0f} unshared "
                      f"{res['unshared']['median_tokens_per_s']:.0f} tok/s, ratio {res['shared_over_unshared']:.2f}"
                      f", same samples {same}", file=sys.stderr, flush=True)
    return out


def bench_compile(args: argparse.Namespace, backends: tuple[str, ...] = ("inductor",)) -> list[dict[str, Any]]:
    out = []
    for name in args.models.split(","):
        model, tok = load(name)
        prompts = prompts_for(tok, "short", args.prompts)
        n, M = 8, args.max_new
        engines = {"eager": engine(model, tok)}
        timed(engines["eager"], prompts, n, M)  # warm-up
        first_eager = timed(engines["eager"], prompts, n, M)
        compile_s = {}
        for backend in backends:
            key = f"compiled ({backend})"
            engines[key] = engine(model, tok, compile=True, compile_backend=backend)
            first = timed(engines[key], prompts, n, M)  # compiles
            ok = engines[key]._step_fn is not engines[key]._decoder.step
            compile_s[key] = {"first_call_s": first["seconds"], "eager_call_s": first_eager["seconds"],
                              "compile_s": first["seconds"] - first_eager["seconds"], "compiled": ok}
            print(f"{name} {key}: first call {first['seconds']:.1f} s (eager {first_eager['seconds']:.2f} s), "
                  f"compiled {ok}", file=sys.stderr, flush=True)
            timed(engines[key], prompts, n, M)  # any second specialisation
        runs: dict[str, list] = {k: [] for k in engines}
        for rnd in range(args.rounds):
            order = list(engines) if rnd % 2 == 0 else list(engines)[::-1]
            for key in order:
                runs[key].append(timed(engines[key], prompts, n, M, seed=rnd))
        res: dict[str, Any] = {"model": name, "rows": args.prompts * n, "max_new_tokens": M,
                               "compile": compile_s, **{k: summary(v) for k, v in runs.items()}}
        eager_step = statistics.median(r["seconds"] for r in runs["eager"]) / M
        for key in compile_s:
            same = all(a["ids"] == b["ids"] for a, b in zip(runs["eager"], runs[key]))
            step = statistics.median(r["seconds"] for r in runs[key]) / M
            saving = eager_step - step
            res[key]["same_samples_as_eager"] = same
            res[key]["step_s"] = step
            res[key]["eager_step_s"] = eager_step
            res[key]["payback_steps"] = compile_s[key]["compile_s"] / saving if saving > 0 else None
            res[key]["ratio_over_eager"] = statistics.median(
                a["seconds"] / b["seconds"] for a, b in zip(runs["eager"], runs[key]))
            print(f"{name} {key}: step {step * 1e3:.2f} ms vs eager {eager_step * 1e3:.2f} ms, "
                  f"payback {res[key]['payback_steps']}, same samples {same}", file=sys.stderr, flush=True)
        out.append(res)
    return out


def bench_matmul(rounds: int) -> list[dict[str, Any]]:
    import torch

    mm_zen = torch.ops.zentorch.zentorch_mm
    # (rows, in, out): decode steps of the built-in model (128 rows, hidden 128: q|k|v 384, gate|up 768) and of
    # qwen25m (64 rows, hidden 512: q|k|v 768, gate|up 3072, down 1536 -> 512, LM head 2048), then squares.
    shapes = [(128, 128, 384), (128, 128, 768), (64, 512, 768), (64, 512, 3072), (64, 1536, 512),
              (64, 512, 2048), (1024, 1024, 1024), (2048, 2048, 2048)]
    out = []
    torch.manual_seed(0)
    for m, k, n in shapes:
        a, w = torch.randn(m, k), torch.randn(n, k)  # x @ W^T, the weight laid out as nn.Linear holds it
        b = w.t()
        flop = 2 * m * k * n
        reps = max(3, int(3e9 / flop))
        fns = {"torch": torch.mm, "zentorch": mm_zen}
        for f in fns.values():
            f(a, b)
        runs: dict[str, list] = {k_: [] for k_ in fns}
        for rnd in range(rounds):
            for key in (list(fns) if rnd % 2 == 0 else list(fns)[::-1]):
                start = time.perf_counter()
                for _ in range(reps):
                    fns[key](a, b)
                runs[key].append(flop * reps / (time.perf_counter() - start) / 1e9)
        ref = torch.mm(a.double(), b.double())
        err = {k_: float((f(a, b).double() - ref).abs().max()) for k_, f in fns.items()}
        res = {"shape": [m, k, n], "load1": os.getloadavg()[0], "max_abs_err_vs_fp64": err,
               **{k_: {"median_gflops": statistics.median(v), "min": min(v), "max": max(v), "gflops": v}
                  for k_, v in runs.items()}}
        out.append(res)
        print(f"{m}x{k}x{n}: torch {res['torch']['median_gflops']:.1f} zentorch "
              f"{res['zentorch']['median_gflops']:.1f} GFLOP/s; err {err}", file=sys.stderr, flush=True)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("what", choices=["prefill", "compile", "zentorch"])
    parser.add_argument("--models", default="builtin,qwen25m")
    parser.add_argument("--prompts", type=int, default=8)
    parser.add_argument("--max-new", type=int, default=32)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    import torch

    info = {"what": args.what, "args": vars(args), "env": environ_summary(),
            "start": time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime()), "uptime_start": os.getloadavg()}
    if args.what == "prefill":
        info["results"] = bench_prefill(args)
    elif args.what == "compile":
        info["results"] = bench_compile(args)
    else:
        import zentorch

        info["zentorch"] = zentorch.__version__
        info["matmul"] = bench_matmul(args.rounds)
        info["results"] = bench_compile(args, backends=("inductor", "zentorch"))
    info["end"] = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime())
    info["uptime_end"] = os.getloadavg()
    info["torch_threads"] = torch.get_num_threads()
    for res in info["results"]:  # sampled ids were only for the equality checks
        for value in res.values():
            if isinstance(value, dict):
                value.pop("ids", None)
    print(json.dumps(info, indent=1))


if __name__ == "__main__":
    main()
