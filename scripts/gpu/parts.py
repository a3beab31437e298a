#!/usr/bin/env python
"""Measurements of scripts/gpu/check.py that are not tests; each runs in its own process and prints one
`GPU_CHECK_RESULT {json}` line:

    python scripts/gpu/parts.py env                      # versions, nvidia-smi, torch.cuda's view, imports
    python scripts/gpu/parts.py shape --args '{"shape": "0.5b", "device": "cuda"}'

`shape`: at a model shape (Qwen2.5-0.5B's or -1.5B's config, random weights, bf16 on CUDA; 'tiny' for the CPU
rehearsal), one process measures
- the bf16 matmul peak (best of a few square products; the MFU denominator);
- rollout tokens/s of rlvr's fast engine, its hf engine and plain `model.generate`, at the same batch, length
  limit and sampling settings (a random model seldom samples EOS, so rows run to max_new_tokens);
- the learner: one GRPO update (PPO-clip) on a fixed batch of random response lengths; tokens/s and MFU =
  6 x parameters x tokens / seconds / peak (parameters counted once, embedding included, attention FLOPs left
  out: the convention of bench/workers.py).
A GRPO step's split (rollout, reward, train) and TRL at equal work come from bench/workers.py's rlvr_train and
trl_train (check.py runs them as parts of their own).
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT / "bench"))

# What the GPU machine is said to have (issue 33) and what travels in .whl/ (scripts/gpu/wheels.txt), by import
# name: each one's version is read, not assumed.
MACHINE_MODULES = ["torch", "transformers", "tokenizers", "safetensors", "accelerate", "peft", "numpy", "pandas",
                   "pyarrow", "sympy", "matplotlib", "yaml", "rich", "typer", "httpx", "pytest", "pytest_timeout"]
CARRIED_MODULES = ["pydantic", "pydantic_core", "math_verify", "latex2sympy2_extended", "antlr4", "trl",
                   "datasets", "dill", "multiprocess"]
RLVR_MODULES = ["rlvr", "rlvr.cli", "rlvr.trainer.loop", "rlvr.rewards.verifiers", "rlvr.parallel.fsdp",
                "rlvr.models.lora"]

# Qwen2.5-1.5B's architecture (as bench/common.py has 0.5B's), for random weights: nothing is downloaded.
QWEN15B_ARCH = dict(hidden_size=1536, intermediate_size=8960, num_hidden_layers=28, num_attention_heads=12,
                    num_key_value_heads=2, vocab_size=151936, tie_word_embeddings=True,
                    max_position_embeddings=32768, rope_theta=1000000.0, rms_norm_eps=1e-6)


def emit(result: dict[str, Any]) -> None:
    print("GPU_CHECK_RESULT " + json.dumps(result), flush=True)


def _version(name: str) -> dict[str, Any]:
    try:
        mod = importlib.import_module(name)
    except Exception as err:  # a missing wheel, or one built for another CPython
        return {"ok": False, "error": f"{type(err).__name__}: {err}"[:300]}
    return {"ok": True, "version": getattr(mod, "__version__", None), "file": getattr(mod, "__file__", None)}


def env(args: dict[str, Any]) -> None:
    """Versions of what the check relies on, nvidia-smi, and torch's view of the GPU."""
    out: dict[str, Any] = {"python": platform.python_version(), "executable": sys.executable,
                           "platform": platform.platform(), "cpus": os.cpu_count(),
                           "machine": {m: _version(m) for m in MACHINE_MODULES},
                           "carried": {m: _version(m) for m in CARRIED_MODULES},
                           "rlvr": {m: _version(m) for m in RLVR_MODULES}}
    smi = shutil.which("nvidia-smi")
    if smi:
        proc = subprocess.run([smi], capture_output=True, text=True, timeout=60)
        print(proc.stdout, flush=True)
        q = subprocess.run([smi, "--query-gpu=name,memory.total,driver_version,clocks.max.sm",
                            "--format=csv,noheader"], capture_output=True, text=True, timeout=60)
        out["nvidia_smi"] = q.stdout.strip() or q.stderr.strip()
    else:
        out["nvidia_smi"] = None
    import torch

    out["torch_cuda"] = {"available": torch.cuda.is_available(), "cuda_version": torch.version.cuda}
    if torch.cuda.is_available():
        p = torch.cuda.get_device_properties(0)
        out["torch_cuda"].update(name=p.name, memory_gib=round(p.total_memory / 2**30, 1),
                                 multiprocessors=p.multi_processor_count, capability=f"{p.major}.{p.minor}",
                                 bf16=torch.cuda.is_bf16_supported(),
                                 nccl=torch.distributed.is_nccl_available())
    missing = [m for group in ("machine", "carried", "rlvr") for m, v in out[group].items() if not v["ok"]]
    out["missing"] = missing
    emit(out)


# -- one model shape ------------------------------------------------------------------------------------------


def _sync(device: Any) -> None:
    import torch

    if device.type == "cuda":
        torch.cuda.synchronize()


def _timed(fn: Any, device: Any) -> tuple[Any, float]:
    _sync(device)
    t = time.perf_counter()
    out = fn()
    _sync(device)
    return out, time.perf_counter() - t


def matmul_peak(device: Any, dtype: Any, sizes: list[int], reps: int = 5) -> dict[str, float]:
    """Best dense matmul FLOP/s at `dtype` over square sizes: the MFU denominator, measured in the same run."""
    import torch

    best, per = 0.0, {}
    for n in sizes:
        a = torch.randn(n, n, device=device, dtype=dtype)
        b = torch.randn(n, n, device=device, dtype=dtype)
        for _ in range(2):
            a @ b
        times = [_timed(lambda a=a, b=b: a @ b, device)[1] for _ in range(reps)]
        flops = 2 * n**3 / min(times)
        per[f"mm{n}_tflops"] = flops / 1e12
        best = max(best, flops)
    return {"peak_tflops": best / 1e12, **per}


def _random_model(shape: str, device: Any, dtype: Any, tok: Any) -> Any:
    import torch
    from common import QWEN05B_ARCH, TINY_ARCH
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    arch = {"0.5b": QWEN05B_ARCH, "1.5b": QWEN15B_ARCH, "tiny": TINY_ARCH}[shape]
    config = Qwen2Config(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                         bos_token_id=tok.eos_token_id, **arch)
    torch.manual_seed(0)
    with torch.device(device):  # initialised where it runs: a 1.5B init on the CPU alone takes tens of seconds
        model = Qwen2ForCausalLM(config)
    model.to(dtype)
    model.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    return model


def shape(args: dict[str, Any]) -> None:
    import torch
    from common import addition_records, num_params, prompt_text

    from rlvr.models.byte_tokenizer import save_byte_tokenizer
    from rlvr.rollout import SamplingParams
    from rlvr.rollout.fast import FastEngine
    from rlvr.rollout.hf import HFEngine

    device = torch.device(args.get("device", "cuda"))
    dtype = getattr(torch, args.get("dtype", "bfloat16"))
    P, n, M = args.get("prompts", 16), args.get("n", 8), args.get("max_new_tokens", 128)
    out: dict[str, Any] = {"shape": args["shape"], "device": str(device), "dtype": str(dtype).split(".")[1],
                           "rows": P * n, "max_new_tokens": M}
    if device.type == "cuda":
        out["gpu"] = torch.cuda.get_device_name(0)
    out["matmul"] = matmul_peak(device, dtype, args.get("mm_sizes", [4096, 8192]))
    peak = out["matmul"]["peak_tflops"] * 1e12
    with tempfile.TemporaryDirectory(prefix="rlvr-gpu-tok-") as tmp:
        tok = save_byte_tokenizer(tmp)
    model, build_s = _timed(lambda: _random_model(args["shape"], device, dtype, tok), device)
    N = num_params(model)
    out.update(params=N, build_s=build_s)
    prompts = [tok(prompt_text(r))["input_ids"] for r in addition_records(P)]
    params = SamplingParams(n=n, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=M)
    eos = set(HFEngine(model, tok).eos_ids)

    def plain_generate() -> int:
        from transformers import GenerationConfig

        rows = [p for p in prompts for _ in range(n)]
        width = max(map(len, rows))
        ids = torch.full((len(rows), width), tok.pad_token_id, device=device)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(rows):
            ids[i, width - len(p):] = torch.tensor(p, device=device)
            mask[i, width - len(p):] = 1
        cfg = GenerationConfig(do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=M,
                               eos_token_id=sorted(eos), pad_token_id=tok.pad_token_id)
        with torch.no_grad():
            res = model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)[:, width:].tolist()
        return sum(next((j + 1 for j, t in enumerate(r) if t in eos), len(r)) for r in res)

    def engine_run(engine: Any) -> Any:
        return lambda: sum(len(s.response_ids) for g in engine.generate(prompts, params) for s in g)

    model.eval()
    runners = {"generate": plain_generate, "hf": engine_run(HFEngine(model, tok)),
               "fast": engine_run(FastEngine(model, tok))}
    for run in runners.values():  # warm-up: allocator, kernel selection, lazy imports
        torch.manual_seed(0)
        run()
    best: dict[str, dict[str, float]] = {}
    for rep in range(args.get("reps", 2)):
        for name, run in runners.items():  # alternated, best repetition kept
            torch.manual_seed(rep)
            tokens, seconds = _timed(run, device)
            if name not in best or tokens / seconds > best[name]["tokens_per_s"]:
                best[name] = {"tokens_per_s": tokens / seconds, "seconds": seconds, "tokens": tokens}
    for e in best.values():
        e["vs_generate"] = e["tokens_per_s"] / best["generate"]["tokens_per_s"]
    out["rollout"] = best
    if device.type == "cuda":
        out["rollout_peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
    out["learner"] = _learner(model, tok, prompts, args, device, peak, N)
    emit(out)


def _learner(model: Any, tok: Any, prompts: list[list[int]], args: dict[str, Any], device: Any, peak: float,
             N: int) -> dict[str, Any]:
    """One GRPO update on a fixed batch (P x n rows, random response lengths in [L/4, L]), after a warm-up."""
    import copy

    import torch
    from common import addition_records

    from rlvr.config import Config
    from rlvr.learner.learner import Learner
    from rlvr.types import Batch, Group, Sample

    P, n, L = args.get("prompts", 16), args.get("n", 8), args.get("train_tokens", 256)
    g = torch.Generator().manual_seed(0)
    groups = []
    for r, p in zip(addition_records(P), prompts):
        samples = []
        for i in range(n):
            length = int(torch.randint(L // 4, L + 1, (1,), generator=g))
            samples.append(Sample(prompt_ids=p, response_ids=torch.randint(1, 256, (length,), generator=g).tolist(),
                                  logprobs=[-5.0] * length, reward=float(i % 2)))
        groups.append(Group(r, p, samples))
    batch = Batch.from_groups(groups, pad_id=tok.pad_token_id)
    rows = args.get("micro_rows", 16)
    cfg = Config.model_validate({
        "train": {"steps": 100, "mini_batches": 1, "micro_batch_size": rows, "prompts_per_step": P},
        "rollout": {"n": n, "max_new_tokens": L},
        "optim": {"lr": 1e-6, "grad_clip": 1.0},
        "algorithm": {"advantage": {"name": "grpo"}, "loss": {"name": "ppo_clip"}},
    })
    model.train()
    lrn = Learner(model, cfg)

    def update() -> dict[str, float]:
        b, inputs = lrn.prepare(copy.deepcopy(batch))
        lrn.compute_advantages(b, inputs)
        return lrn.update(b)

    update()  # warm-up: optimizer state, allocator
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats()
    times = [_timed(update, device)[1] for _ in range(args.get("learner_reps", 2))]
    seconds = statistics.median(times)
    tokens = batch.num_tokens
    out = {"rows": len(batch), "tokens": tokens, "update_s": seconds, "tokens_per_s": tokens / seconds,
           "achieved_tflops": 6.0 * N * tokens / seconds / 1e12, "mfu": 6.0 * N * tokens / seconds / peak,
           "micro_batch_rows": rows}
    if device.type == "cuda":
        out["peak_memory_gib"] = torch.cuda.max_memory_allocated() / 2**30
    return out


PARTS = {"env": env, "shape": shape}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("part", choices=sorted(PARTS))
    ap.add_argument("--args", default="{}", help="JSON object of the part's settings")
    a = ap.parse_args(argv)
    PARTS[a.part](json.loads(a.args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
