"""The CUDA paths that need neither vLLM nor Ray: bf16 learner log-probs, the fast and hf engines' behaviour
log-probs, a 30-step GRPO run, LoRA, resume, FSDP2 on NCCL, torchrun, train.compile (last: its compile is the
slowest part). Skipped without CUDA; on a GPU
machine `scripts/gpu_check.sh` runs this file (UNVERIFIED until a GPU has run it: see docs/scaling.md, "On a GPU").

RLVR_GPU_TESTS_DEVICE=cpu runs the same tests on the CPU (NCCL replaced by gloo): a rehearsal of their code, not
of CUDA; `scripts/gpu_check.sh --dry-run` uses it for the quick ones.

Each test also writes what it measured (differences, pass@1, ...) as one JSON line to $RLVR_GPU_RESULTS when that
is set, so the check's report holds the figures and not only pass/fail.
"""

from __future__ import annotations

import copy
import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch

DEVICE = os.environ.get("RLVR_GPU_TESTS_DEVICE", "cuda")  # cpu: the rehearsal (module docstring)
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(DEVICE == "cuda" and not torch.cuda.is_available(),
                                 reason="needs a CUDA GPU (scripts/gpu_check.sh)")]

ROOT = Path(__file__).resolve().parents[2]
GRPO = ROOT / "recipes" / "grpo.yaml"
# bf16 keeps 8 mantissa bits (relative rounding up to 2^-8 per op); over the built-in model's 4 layers, log-probs
# of sampled tokens agree with fp32 to ~0.1 nats (tests/gpu/test_cuda_paths.py uses the same bound for vLLM).
BF16_LOGPROB_ATOL = 0.15
# fp32 on both sides, but the engines decode with a KV cache (one token per forward) while the learner runs the
# whole sequence: another summation order, so ~1e-6 relative per op; 1e-3 nats is far above that, far below a bug.
FP32_LOGPROB_ATOL = 1e-3
CUDA = torch.device(DEVICE)


def _record(test: str, **values) -> None:
    path = os.environ.get("RLVR_GPU_RESULTS")
    if path:
        with open(path, "a") as f:
            f.write(json.dumps({"test": test, **values}) + "\n")


def _builtin(dtype: torch.dtype):
    from rlvr.models import load_causal_lm, load_tokenizer
    from rlvr.models.loading import BUILTIN_DIR

    return load_causal_lm(str(BUILTIN_DIR), dtype=dtype, device=CUDA), load_tokenizer(str(BUILTIN_DIR))


def _learner_logprobs(model, samples) -> list[torch.Tensor]:
    """The learner's log-probs (rlvr.models.logprobs.forward_tokens) of each sample's response tokens."""
    from rlvr.models.logprobs import forward_tokens

    out = []
    with torch.no_grad():
        for s in samples:
            ids = torch.tensor([s.prompt_ids + s.response_ids], device=CUDA)
            mask = torch.zeros_like(ids, dtype=torch.float32)
            mask[0, len(s.prompt_ids):] = 1
            lp = forward_tokens(model, ids, torch.ones_like(ids), mask).logprobs[0, len(s.prompt_ids):]
            out.append(lp.float().cpu())
    return out


def _sample(model, tok, n: int = 8, max_new: int = 32):
    from rlvr.rollout.base import SamplingParams
    from rlvr.rollout.fast import FastEngine

    torch.manual_seed(0)
    prompts = [tok.encode(q) for q in ("12+34=", "507+86=", "9+9=")]
    return [s for g in FastEngine(model, tok).generate(prompts, SamplingParams(n=n, max_new_tokens=max_new))
            for s in g]


def _cfg(run_dir: Path, *overrides: str):
    from rlvr.config import load_config

    return load_config(GRPO, [f"run.dir={run_dir}", "logging.progress=false", f"model.device={DEVICE}", *overrides])


def test_learner_bf16_logprobs_match_fp32():
    fp32, tok = _builtin(torch.float32)
    bf16, _ = _builtin(torch.bfloat16)
    samples = _sample(fp32, tok)
    a, b = _learner_logprobs(fp32, samples), _learner_logprobs(bf16, samples)
    diff = torch.cat([(x - y).abs() for x, y in zip(a, b)])
    _record("learner_bf16_vs_fp32", tokens=diff.numel(), max_abs_diff=diff.max().item(),
            mean_abs_diff=diff.mean().item())
    assert diff.numel() > 0 and diff.max().item() < BF16_LOGPROB_ATOL, diff.max().item()


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("engine", ["fast", "hf"])
def test_engine_behaviour_logprobs_match_the_learner(engine, dtype):
    """Token-in, token-out: the log-probs an engine reports while sampling on CUDA are the learner's."""
    from rlvr.rollout.base import SamplingParams, build_engine

    model, tok = _builtin(getattr(torch, dtype))
    eng = build_engine(engine, {}, 64, model, tok)
    torch.manual_seed(0)
    prompts = [tok.encode(q) for q in ("12+34=", "507+86=", "9+9=")]
    samples = [s for g in eng.generate(prompts, SamplingParams(n=8, max_new_tokens=32)) for s in g]
    assert len(samples) == 24 and all(s.response_ids for s in samples)
    learner = _learner_logprobs(model, samples)
    diff = torch.cat([(torch.tensor(s.logprobs) - lp).abs() for s, lp in zip(samples, learner)])
    atol = FP32_LOGPROB_ATOL if dtype == "float32" else BF16_LOGPROB_ATOL
    _record(f"engine_logprobs_{engine}_{dtype}", tokens=diff.numel(), max_abs_diff=diff.max().item(),
            mean_abs_diff=diff.mean().item(), atol=atol)
    assert diff.max().item() < atol, diff.max().item()


def test_grpo_30_steps_raise_held_out_pass_at_1(tmp_path):
    """recipes/grpo.yaml on CUDA in the dtype a user gets there (model.dtype=auto: bf16), 30 steps."""
    from rlvr.tracking import read_metrics
    from rlvr.trainer.loop import train

    run = train(_cfg(tmp_path / "run", "train.steps=30", "checkpoint.every=0", "eval.ks=[1]"))
    before = json.loads((run / "eval_before.json").read_text())["pass@k"]["1"]
    after = json.loads((run / "eval_after.json").read_text())["pass@k"]["1"]
    metrics = read_metrics(run)
    _record("grpo_30_steps", pass1_before=before, pass1_after=after, steps=len(metrics),
            step_s_median=sorted(m["step_s"] for m in metrics)[len(metrics) // 2],
            accuracy_first5=sum(m["accuracy"] for m in metrics[:5]) / 5,
            accuracy_last5=sum(m["accuracy"] for m in metrics[-5:]) / 5)
    assert len(metrics) == 30
    assert after > before + 0.05, (before, after)


def test_lora_trains_on_cuda(tmp_path):
    from safetensors.torch import load_file

    from rlvr.models.loading import BUILTIN_DIR
    from rlvr.tracking import read_metrics
    from rlvr.trainer.loop import train

    run = train(_cfg(tmp_path / "run", "model.lora={r: 16, alpha: 32}", "optim.lr=2e-3", "train.steps=4",
                     "train.prompts_per_step=8", "checkpoint.every=0", "eval.before=false", "eval.after=false"))
    metrics = read_metrics(run)
    base = load_file(str(Path(BUILTIN_DIR) / "model.safetensors"))
    final = load_file(str(run / "final" / "model.safetensors"))
    # final/ is saved in the run's dtype (bf16 on CUDA): compare with the base rounded the same way
    moved = {k for k in base if k in final and not torch.equal(base[k].to(final[k].dtype), final[k])}
    _record("lora", steps=len(metrics), grad_norm_last=metrics[-1]["grad_norm"], tensors_moved=len(moved))
    assert len(metrics) == 4 and all(m["grad_norm"] > 0 for m in metrics)
    assert moved and all("embed" not in k for k in moved)  # merged adapters changed the adapted linears only


def _groups(device_seed: int = 1):
    from rlvr.types import Group, Sample, TaskRecord

    gen = torch.Generator().manual_seed(device_seed)
    groups = []
    for g in range(4):
        samples = []
        for i in range(4):
            resp = torch.randint(2, 60, (8 + 5 * i + g,), generator=gen).tolist()
            samples.append(Sample(prompt_ids=[5, 6, 7], response_ids=resp, reward=float((g + i) % 2),
                                  correct=bool((g + i) % 2), logprobs=[-1.0] * len(resp)))
        groups.append(Group(TaskRecord(id=str(g), question=""), [5, 6, 7], samples))
    return groups


def _learner_cfg(**train):
    from rlvr.config import Config

    return Config.model_validate({"train": {"steps": 5, "micro_batch_size": 4, "mini_batches": 1,
                                            "recompute_old_logprobs": True, **train},
                                  "optim": {"lr": 1e-3, "grad_clip": 1.0}, "rollout": {"n": 4}})


def _two_updates(learner) -> list[dict[str, float]]:
    from rlvr.types import Batch

    out = []
    for _ in range(2):
        batch, inputs = learner.prepare(Batch.from_groups(_groups(), pad_id=0))
        learner.compute_advantages(batch, inputs)
        out.append(learner.update(batch))
    return out


def test_resume_on_cuda_matches_an_uninterrupted_run(tmp_path):
    """As tests/e2e/test_training.py on CPU. If CUDA kernels are not bit-exact run to run, the measured
    difference is recorded and the test fails saying which quantities differ."""
    from safetensors.torch import load_file

    from rlvr.config import load_config
    from rlvr.tracking import read_metrics
    from rlvr.trainer.loop import train

    common = ["train.steps=4", "train.prompts_per_step=4", "rollout.n=4", "checkpoint.every=2",
              "train.mini_batches=2", "optim.warmup_steps=2", "eval.before=false", "eval.after=false"]
    straight = train(_cfg(tmp_path / "straight", *common))
    interrupted = train(_cfg(tmp_path / "resumed", *common), stop_after=3)
    resumed = train(load_config(interrupted / "config.yaml", [f"run.dir={interrupted}"]), resume=True)
    timing = ("_s", "tokens_per_s")
    a = [{k: v for k, v in r.items() if not k.endswith(timing)} for r in read_metrics(straight)]
    b = [{k: v for k, v in r.items() if not k.endswith(timing)} for r in read_metrics(resumed)]
    differing = sorted({k for x, y in zip(a, b) for k in x if x.get(k) != y.get(k)})
    wa = load_file(str(straight / "final" / "model.safetensors"))
    wb = load_file(str(resumed / "final" / "model.safetensors"))
    weight_diff = max((wa[k].float() - wb[k].float()).abs().max().item() for k in wa)
    _record("resume", bit_exact=not differing and weight_diff == 0.0, metrics_differing=differing,
            max_weight_diff=weight_diff, steps=[r["step"] for r in b])
    assert [r["step"] for r in b] == [1, 2, 3, 4]
    assert not differing and weight_diff == 0.0, f"metrics differing: {differing}; max weight diff {weight_diff}"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_fsdp2_on_nccl_makes_the_unsharded_update():
    """One GPU, so one rank: an NCCL process group of size 1 and rlvr's fully_shard wrapping; the sharded update
    must equal the plain one (the sharding and collectives run, over one rank)."""
    import torch.distributed as dist

    from rlvr.learner.learner import Learner
    from rlvr.parallel import fsdp

    whole, _ = _builtin(torch.float32)
    plain = copy.deepcopy(whole)
    _two_updates(Learner(plain, _learner_cfg()))
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    dist.init_process_group("nccl" if DEVICE == "cuda" else "gloo", rank=0, world_size=1)
    try:
        backend = dist.get_backend()
        sharded = fsdp.shard_model(copy.deepcopy(whole))
        assert any(fsdp.is_sharded(p) for p in sharded.parameters())
        _two_updates(Learner(sharded, _learner_cfg()))
        fsdp.gather_into(sharded, whole)
    finally:
        dist.destroy_process_group()
    worst = max((p - q).abs().max().item() for p, q in zip(plain.state_dict().values(), whole.state_dict().values()))
    _record("fsdp2_nccl_one_rank", backend=backend, max_weight_diff=worst)
    assert backend == ("nccl" if DEVICE == "cuda" else "gloo")
    assert worst < 1e-5, worst


@pytest.mark.timeout(300)
def test_torchrun_one_process_trains_checkpoints_and_resumes_on_cuda(tmp_path):
    """`torchrun --nproc_per_node 1 -m rlvr train ... distributed.learner=fsdp2` on CUDA. With one process rlvr
    trains unsharded (it says so in a warning): this checks the launcher path, the checkpoint and --resume."""
    run_dir = tmp_path / "run"
    torchrun = Path(sys.executable).parent / "torchrun"
    launcher = [str(torchrun)] if torchrun.exists() else [sys.executable, "-m", "torch.distributed.run"]
    common = ["train.prompts_per_step=4", "rollout.n=4", "rollout.max_new_tokens=48", "eval.before=false",
              "eval.after=false", "logging.progress=false", "checkpoint.every=1", "train.mini_batches=1",
              "distributed.learner=fsdp2", f"model.device={DEVICE}"]

    def launch(*args: str) -> str:
        proc = subprocess.run([*launcher, "--nproc_per_node=1", "--master_port", str(_free_port()), "-m", "rlvr",
                               "train", *args], cwd=ROOT, capture_output=True, text=True, timeout=280)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
        return proc.stdout + proc.stderr

    launch(str(GRPO), f"run.dir={run_dir}", *common, "train.steps=2")
    launch("--resume", str(run_dir), "train.steps=3")
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    _record("torchrun_one_process", steps=[m["step"] for m in lines])
    assert [m["step"] for m in lines] == [1, 2, 3]
    assert all(m["grad_norm"] > 0 for m in lines)
    assert (run_dir / "final" / "model.safetensors").is_file()


def test_train_compile_runs_compiled_on_cuda_and_matches_eager():
    from rlvr.learner.learner import Learner
    from rlvr.models.logprobs import forward_tokens
    from rlvr.types import Batch

    eager_model, _ = _builtin(torch.float32)
    compiled_model = copy.deepcopy(eager_model)
    learner = Learner(compiled_model, _learner_cfg(compile=True))
    assert learner.compiled, "train.compile fell back to eager on CUDA (see the warning above)"
    batch = Batch.from_groups(_groups(), pad_id=0).to(CUDA)
    with torch.no_grad():  # the learner's forward: compiled decoder vs eager, the same fp32 weights
        lp_eager = forward_tokens(eager_model, batch.input_ids, batch.attention_mask, batch.mask).logprobs
        lp_compiled = forward_tokens(compiled_model, batch.input_ids, batch.attention_mask, batch.mask).logprobs
    lp_diff = (lp_eager - lp_compiled).abs().max().item()
    eager = _two_updates(Learner(eager_model, _learner_cfg()))
    compiled = _two_updates(learner)
    norm_rel = abs(eager[0]["grad_norm"] - compiled[0]["grad_norm"]) / eager[0]["grad_norm"]
    drift = max((a - b).abs().max().item() for a, b in zip(eager_model.state_dict().values(),
                                                            compiled_model.state_dict().values()))
    _record("train_compile", compiled=bool(learner.compiled), max_logprob_diff=lp_diff,
            grad_norm_eager=eager[0]["grad_norm"], grad_norm_compiled=compiled[0]["grad_norm"],
            max_weight_diff_after_2_updates=drift)
    # fused kernels reorder fp32 sums (~1e-6 relative; 2e-5 nats measured on the CPU); a wrong graph is off by
    # whole nats. (The weights after AdamW are only recorded: Adam divides near-zero gradients by their own size,
    # so rounding noise there moves a weight by up to lr per step.)
    assert lp_diff < 5e-4, lp_diff
    assert norm_rel < 1e-3, (eager[0]["grad_norm"], compiled[0]["grad_norm"])
