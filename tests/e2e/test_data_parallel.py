"""The data-parallel learner: two CPU ranks (gloo) give exactly the single-process update, and torchrun trains."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from ranks import free_port, random_groups

from rlvr.config import Config
from rlvr.learner.learner import Learner
from rlvr.models import load_causal_lm
from rlvr.types import Batch, Group

ROOT = Path(__file__).resolve().parents[2]


def _groups() -> list[Group]:
    return random_groups(4, seed=0, length=lambda g, i: 3 + i + g)


def _cfg() -> Config:
    return Config.model_validate({"train": {"steps": 5, "micro_batch_size": 2, "mini_batches": 1},
                                  "optim": {"lr": 1e-2}, "rollout": {"n": 2}})


def _update(model, groups) -> None:
    learner = Learner(model, _cfg())
    batch, inputs = learner.prepare(Batch.from_groups(groups, pad_id=0))
    learner.compute_advantages(batch, inputs)
    learner.update(batch)


def _rank_main(rank: int, world: int, port: int, model_dir: str, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.set_num_threads(1)
    model = load_causal_lm(model_dir)
    _update(model, _groups()[rank::world])
    if rank == 0:
        torch.save(model.state_dict(), out)
    dist.destroy_process_group()


def test_two_ranks_make_exactly_the_single_process_update(tmp_path, tiny_model_dir):
    single = load_causal_lm(tiny_model_dir)
    _update(single, _groups())
    out = tmp_path / "rank0.pt"
    mp.spawn(_rank_main, args=(2, free_port(), str(tiny_model_dir), str(out)), nprocs=2, join=True)
    ranked = torch.load(out)
    for name, p in single.state_dict().items():
        torch.testing.assert_close(ranked[name], p, atol=2e-6, rtol=1e-5, msg=name)
    assert any(not torch.equal(p, q) for p, q in zip(single.state_dict().values(),
                                                     load_causal_lm(tiny_model_dir).state_dict().values()))


@pytest.mark.slow
def test_torchrun_trains_with_two_ranks(tmp_path):
    run_dir = tmp_path / "run"
    torchrun = Path(sys.executable).parent / "torchrun"
    proc = subprocess.run(
        [str(torchrun), "--nproc_per_node=2", "--master_port", str(free_port()), "-m", "rlvr", "train",
         str(ROOT / "recipes" / "grpo.yaml"), f"run.dir={run_dir}", "train.steps=2", "train.prompts_per_step=4",
         "rollout.n=4", "rollout.max_new_tokens=48", "eval.before=false", "eval.after=false",
         "logging.progress=false", "checkpoint.every=0", "train.mini_batches=1"],
        cwd=ROOT, env={**os.environ, "OMP_NUM_THREADS": "1", "TMPDIR": str(tmp_path)}, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    assert len(lines) == 2  # rank 0 logs once per step
    assert (run_dir / "final" / "model.safetensors").is_file()
