"""The FSDP2 learner (distributed.learner=fsdp2) on two CPU ranks (gloo): the sharded update equals the
single-process update, ranks with fewer micro-batches join the others' collectives, the optimizer state gathers
and reloads by parameter name, and torchrun trains, checkpoints and resumes."""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from ranks import free_port, random_groups

from rlvr.config import Config, ConfigError
from rlvr.learner.learner import Learner
from rlvr.models import load_causal_lm
from rlvr.parallel import data_parallel as dp
from rlvr.parallel import fsdp
from rlvr.types import Batch, Group

ROOT = Path(__file__).resolve().parents[2]


def _groups() -> list[Group]:
    """Three groups of different lengths: rank 0 gets two (two micro-batches), rank 1 one (one micro-batch)."""
    return random_groups(3, seed=1, length=lambda g, i: 2 + 3 * i + g)


def _cfg() -> Config:
    # recompute_old_logprobs: the prepare pass runs the (sharded) policy forward too; grad_clip is active
    return Config.model_validate({"train": {"steps": 5, "micro_batch_size": 2, "mini_batches": 1,
                                            "recompute_old_logprobs": True},
                                  "optim": {"lr": 1e-2, "grad_clip": 0.5}, "rollout": {"n": 2}})


def _update(model, groups) -> Learner:
    learner = Learner(model, _cfg())
    for _ in range(2):  # two updates: the second one uses AdamW's moments
        batch, inputs = learner.prepare(Batch.from_groups(groups, pad_id=0))
        learner.compute_advantages(batch, inputs)
        learner.update(batch)
    return learner


def _rank_main(rank: int, world: int, port: int, model_dir: str, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    whole = load_causal_lm(model_dir)
    sharded = fsdp.shard_model(copy.deepcopy(whole))
    assert any(fsdp.is_sharded(p) for p in sharded.parameters())
    learner = _update(sharded, _groups()[rank::world])
    fsdp.gather_into(sharded, whole)
    state = learner.state_dict()  # collective: rank 0 gets the full optimizer state
    full = dp.broadcast_object(state)  # as if every rank read it from the checkpoint
    again = Learner(fsdp.shard_model(copy.deepcopy(whole)), _cfg())  # a fresh sharded learner loads it ...
    again.load_state_dict(full)
    reloaded = again.state_dict()  # ... and gathers the same state again
    if rank == 0:
        torch.save({"model": whole.state_dict(), "state": state, "reloaded": reloaded}, out)
    dist.destroy_process_group()


def test_two_fsdp2_ranks_make_the_single_process_update(tmp_path, tiny_model_dir):
    single = load_causal_lm(tiny_model_dir)
    learner = _update(single, _groups())
    out = tmp_path / "rank0.pt"
    mp.spawn(_rank_main, args=(2, free_port(), str(tiny_model_dir), str(out)), nprocs=2, join=True)
    got = torch.load(out, weights_only=False)
    # Two AdamW steps at lr 1e-2 move every weight by ~2e-2; the sharded run sums gradients in another order, and
    # Adam turns that float32 noise into ~1e-6 differences (most on k_proj.bias, whose gradient is ~0: softmax
    # ignores a shift shared by all keys). 1e-5 is 2000x below the update.
    for name, p in single.state_dict().items():
        torch.testing.assert_close(got["model"][name], p, atol=1e-5, rtol=1e-5, msg=name)
    assert any(not torch.equal(p, q) for p, q in zip(single.state_dict().values(),
                                                     load_causal_lm(tiny_model_dir).state_dict().values()))
    # the gathered optimizer state is keyed by parameter name and equals the single process's moments
    moments = got["state"]["optimizer"]["state"]
    names = [n for n, _ in single.named_parameters()]
    assert set(moments) == set(names)
    params = dict(single.named_parameters())
    for name in names:
        ref = learner.optimizer.state[params[name]]
        torch.testing.assert_close(moments[name]["exp_avg"], ref["exp_avg"], atol=1e-6, rtol=1e-4, msg=name)
        torch.testing.assert_close(moments[name]["exp_avg_sq"], ref["exp_avg_sq"], atol=1e-9, rtol=1e-4, msg=name)
    reloaded = got["reloaded"]["optimizer"]["state"]
    for name in names:
        torch.testing.assert_close(reloaded[name]["exp_avg"], moments[name]["exp_avg"], msg=name)


def test_fsdp2_rejects_what_it_cannot_shard():
    with pytest.raises((ConfigError, ValueError), match="distributed.learner: fsdp2 does not support model.lora"):
        Config.model_validate({"distributed": {"learner": "fsdp2"}, "model": {"lora": {"r": 4}}})
    with pytest.raises((ConfigError, ValueError), match="fsdp2 does not support distributed.backend=ray"):
        Config.model_validate({"distributed": {"learner": "fsdp2", "backend": "ray"}})


def test_a_model_without_decoder_layers_names_the_fix():
    with pytest.raises(ValueError, match="use distributed.learner=ddp"):
        fsdp.decoder_layers(torch.nn.Linear(2, 2))


@pytest.mark.slow
def test_torchrun_fsdp2_trains_checkpoints_and_resumes(tmp_path):
    run_dir = tmp_path / "run"
    torchrun = Path(sys.executable).parent / "torchrun"
    common = ["train.prompts_per_step=4",
              "rollout.n=4", "rollout.max_new_tokens=48", "eval.before=false", "eval.after=false",
              "logging.progress=false", "checkpoint.every=1", "train.mini_batches=1",
              "distributed.learner=fsdp2", "train.micro_batch_tokens=512"]

    def launch(*args: str) -> None:
        proc = subprocess.run(
            [str(torchrun), "--nproc_per_node=2", "--master_port", str(free_port()), "-m", "rlvr", "train", *args], cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}, capture_output=True,
            text=True, timeout=600)
        assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]

    launch(str(ROOT / "recipes" / "grpo.yaml"), f"run.dir={run_dir}", *common, "train.steps=2")
    state = torch.load(run_dir / "checkpoints" / "step_000002" / "trainer_state.pt", weights_only=False)
    assert "model.layers.0.mlp.gate_proj.weight" in state["learner"]["optimizer"]["state"]  # full, by name
    launch("--resume", str(run_dir), "train.steps=3")
    lines = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [1, 2, 3]
    assert all(m["grad_norm"] > 0 for m in lines)
    assert (run_dir / "final" / "model.safetensors").is_file()
    # the resumed step equals the same step of an uninterrupted run
    straight = tmp_path / "straight"
    launch(str(ROOT / "recipes" / "grpo.yaml"), f"run.dir={straight}", *common, "train.steps=3")
    last = json.loads((straight / "metrics.jsonl").read_text().splitlines()[-1])
    for key in ("reward_mean", "loss", "grad_norm", "response_length_mean", "kl"):
        if key in last:
            assert lines[-1][key] == last[key], key
