"""LoRA (model.lora): adapters train and the base stays frozen, reward rises, resume is bit-exact, and every
checkpoint and the final model are plain transformers directories holding the merged weights."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from rlvr.config import ConfigError, load_config
from rlvr.models import load_causal_lm
from rlvr.tracking import read_metrics
from rlvr.trainer.checkpoint import load_trainer_state
from rlvr.trainer.loop import train

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
GRPO = ROOT / "recipes" / "grpo.yaml"
LORA = "model.lora={r: 8, alpha: 16}"


def _cfg(run_dir, *overrides):
    return load_config(GRPO, [f"run.dir={run_dir}", "logging.progress=false", "eval.before=false",
                              "eval.after=false", LORA, *overrides])


def test_lora_raises_reward_and_exports_merged_weights(tmp_path):
    run = train(_cfg(tmp_path / "run", "train.steps=20", "optim.lr=2e-3", "checkpoint.every=10"))
    metrics = read_metrics(run)
    first = sum(m["accuracy"] for m in metrics[:5]) / 5
    last = sum(m["accuracy"] for m in metrics[-5:]) / 5
    assert last > first + 0.10, (first, last)
    final = load_causal_lm(run / "final", trainable=False)  # plain transformers, no peft needed to load
    base = load_causal_lm("builtin", trainable=False)
    changed = [k for k, v in final.state_dict().items() if not torch.equal(v, base.state_dict()[k])]
    assert changed and all("embed" not in k and "norm" not in k for k in changed)  # only adapted linears
    state = load_trainer_state(run / "checkpoints" / "step_000020")
    assert state["lora"] and all("lora_" in k for k in state["lora"])
    assert not (run / "final" / "adapter_config.json").exists()


def _comparable(rows):
    return [{k: v for k, v in r.items() if not k.endswith(("_s", "tokens_per_s"))} for r in rows]


def test_lora_resume_is_bit_exact(tmp_path):
    common = ["train.steps=4", "train.prompts_per_step=4", "rollout.n=4", "checkpoint.every=2",
              "train.mini_batches=2", "optim.lr=1e-3"]
    straight = train(_cfg(tmp_path / "straight", *common))
    part = train(_cfg(tmp_path / "resumed", *common), stop_after=3)
    resumed = train(load_config(part / "config.yaml", [f"run.dir={part}"]), resume=True)
    assert _comparable(read_metrics(straight)) == _comparable(read_metrics(resumed))
    wa = load_file(str(straight / "final" / "model.safetensors"))
    wb = load_file(str(resumed / "final" / "model.safetensors"))
    assert all(torch.equal(wa[k], wb[k]) for k in wa)


@pytest.mark.parametrize("override, message", [
    ("algorithm.reference_reset_every=5", "reference reset"),
    ("model.lora={r: 0}", "model.lora.r"),
])
def test_lora_bad_combinations_are_rejected(override, message):
    with pytest.raises(ConfigError, match=message):
        load_config(GRPO, [LORA, override])


def test_lora_unknown_target_module_is_named(tmp_path):
    with pytest.raises(ValueError, match="model.lora"):
        train(_cfg(tmp_path / "run", "train.steps=1", "model.lora={r: 4, target_modules: [no_such_proj]}"))
