"""Small real multi-turn trainings on a tiny random model.

The game: three turns; a turn earns 1/3 when its last character is a lowercase letter. Every printable character
is a stop string, so each turn is a few sampled tokens; observations ("next") sit between the turns with loss
mask 0. A random byte-level model starts at about 26/94 per turn; RL through the agent loop must raise it.

`test_agent_loop_with_the_learner_improves_reward` drives the learner by hand (works today);
`test_train_with_agent_config` goes through `rlvr.trainer.loop.train` and needs `agent:` wired into Config
and `Run.rollout` (it skips until then).
"""

from __future__ import annotations

import pytest
import torch

from rlvr.config import AgentConfig, Config, load_config
from rlvr.rollout import (
    ENVIRONMENTS,
    Environment,
    StepResult,
    agent_metrics,
    agent_rollout_groups,
)

PRINTABLE = [chr(c) for c in range(33, 127)]


class LowercaseGame(Environment):
    """Say a lowercase letter, `turns` times; each turn pays 1/turns if its last character is one."""

    stop = PRINTABLE
    observation_role = "user"

    def __init__(self, toolset=None, *, turns: int = 3):
        super().__init__(toolset)
        self.turns = turns

    def reset(self, record):
        self.left = self.turns
        return "Say letters."

    def step(self, action):
        self.left -= 1
        text = action.strip()
        ok = bool(text) and "a" <= text[-1] <= "z"
        return StepResult("next", float(ok) / self.turns, self.left <= 0, {"ok": ok})


if "test_lowercase" not in ENVIRONMENTS:
    ENVIRONMENTS.register("test_lowercase")(LowercaseGame)

AGENT = {"environment": {"name": "test_lowercase", "turns": 3}, "max_turns": 3, "max_turn_tokens": 8,
         "max_total_tokens": 64}
COMMON = ["task.name=guess_number", "task.eval_size=16", "rollout.n=8", "rollout.max_new_tokens=8",
          "rollout.temperature=1.0", "train.prompts_per_step=4", "train.mini_batches=1", "optim.lr=1e-2",
          "optim.warmup_steps=0", "logging.progress=false", "eval.before=false", "eval.after=false",
          "checkpoint.every=0"]
REWARDS = ["rewards=[{name: env_reward, weight: 1.0}, {name: correctness, weight: 0.0}]"]


@pytest.mark.slow
def test_agent_loop_with_the_learner_improves_reward(tiny_model_dir, tmp_path):
    from rlvr.learner.learner import Learner
    from rlvr.models import load_causal_lm, load_tokenizer
    from rlvr.rewards import RewardFunction
    from rlvr.rollout.hf import HFEngine
    from rlvr.tasks import PromptRenderer, build_task
    from rlvr.types import Batch

    cfg = load_config(None, [f"model.path={tiny_model_dir}", f"run.dir={tmp_path / 'run'}", *COMMON, *REWARDS])
    agent = AgentConfig(**AGENT)
    torch.manual_seed(0)
    tokenizer = load_tokenizer(tiny_model_dir)
    policy = load_causal_lm(tiny_model_dir)
    engine = HFEngine(policy, tokenizer)
    task = build_task("guess_number", {"eval_size": 16})
    renderer = PromptRenderer(task, tokenizer)
    reward_fn = RewardFunction.from_config(cfg.rewards)
    learner = Learner(policy, cfg, None, None)
    params = engine_params(cfg)
    rewards, obs_fracs = [], []
    for step in range(1, 13):
        records = [task.train[(step * 4 + i) % len(task.train)] for i in range(4)]
        groups = agent_rollout_groups(engine, renderer, task, records, params, agent, step=step, total_steps=12)
        reward_fn(groups, task)
        batch = Batch.from_groups(groups, pad_id=tokenizer.pad_token_id)
        batch, inputs = learner.prepare(batch)
        learner.compute_advantages(batch, inputs)
        stats = learner.update(batch)
        engine.sync_weights(policy, version=step)
        m = agent_metrics(groups)
        rewards.append(sum(s.reward for g in groups for s in g.samples) / 32)
        obs_fracs.append(m["agent/obs_token_frac"])
        assert m["agent/turns_mean"] > 1 and stats["grad_norm"] == stats["grad_norm"]
        assert batch.mask.sum() == sum(sum(s.loss_mask) for g in groups for s in g.samples)
    first, last = sum(rewards[:3]) / 3, sum(rewards[-3:]) / 3
    assert last > first + 0.1, rewards
    assert all(0 < f < 1 for f in obs_fracs)


def engine_params(cfg):
    from rlvr.rollout import SamplingParams

    return SamplingParams(n=cfg.rollout.n, temperature=cfg.rollout.temperature,
                          max_new_tokens=cfg.rollout.max_new_tokens)


needs_wiring = pytest.mark.skipif(
    "agent" not in Config.model_fields,
    reason="wire `agent: AgentConfig | None` into rlvr.config.Config and agent_rollout_groups into Run.rollout",
)


@pytest.mark.slow
@needs_wiring
def test_train_with_agent_config(tiny_model_dir, tmp_path):
    """End to end through `train`: agent rollouts, metrics, a final model and an agent evaluation."""
    import json

    from rlvr.tracking import read_metrics
    from rlvr.trainer.loop import train

    agent = ("agent={environment: {name: test_lowercase, turns: 3}, max_turns: 3, max_turn_tokens: 8, "
             "max_total_tokens: 64}")
    cfg = load_config(None, [f"model.path={tiny_model_dir}", f"run.dir={tmp_path / 'run'}", *COMMON, *REWARDS,
                             agent, "train.steps=12", "eval.after=true", "eval.n=2", "eval.ks=[1]", "eval.size=4"])
    run_dir = train(cfg)
    metrics = read_metrics(run_dir)
    assert len(metrics) == 12
    for key in ("agent/turns_mean", "agent/tool_calls_mean", "agent/truncated_frac", "agent/obs_token_frac",
                "agent/env_reward_mean", "reward/env_reward"):
        assert key in metrics[0], key
    assert metrics[0]["agent/turns_mean"] > 1
    first = sum(m["reward_mean"] for m in metrics[:3]) / 3
    last = sum(m["reward_mean"] for m in metrics[-3:]) / 3
    assert last > first + 0.1, [m["reward_mean"] for m in metrics]
    assert (run_dir / "final" / "model.safetensors").is_file()
    after = json.loads((run_dir / "eval_after.json").read_text())
    assert after["num_prompts"] == 4
