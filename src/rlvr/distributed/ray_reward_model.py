"""co_evolve's reward model as a Ray actor (`distributed.reward_model_worker: true`, with `distributed.backend: ray`).

The second trainable role of a co_evolve run: a Bradley–Terry reward model that learns from the step's (correct,
incorrect) pairs and scores the policy's samples for the `learned_rm` reward. `RemoteRewardLearner` has the
interface of the in-process `RewardModelLearner` (`rlvr.roles.RewardLearner`), so the controller, the reward and
the checkpoint code do not know where it runs:

    learn(pairs)        the refresh, in the actor; returns its `rm/` metrics
    score(rows)         one call per reward batch (every sample of the step), read from the actor's live weights
    state_dict()        weights, AdamW state and the refresh counter, brought to the CPU for the checkpoint
    load_state_dict(s)  resume: the actor continues exactly where the checkpointed model stopped
    hf_model()          a CPU copy with the current weights, for `final_rm/`

The actor builds the model with the same function and seed as the in-process placement
(`rlvr.learner.reward_model.build_reward_learner`), so both placements start from identical weights and, on the
same CPU with the same thread count, give bit-identical metrics (tested).

An actor that dies takes the weights and optimizer state of its refreshes since the last checkpoint with it, and
a fresh actor would score with a reward model the policy has not been trained against. So there is no in-place
recovery: the run stops with `RewardLearnerLost` (a `RoleLost`), which the controller turns into an error naming
the newest complete checkpoint; `rlvr train --resume` continues from it, bit-exactly.
"""

from __future__ import annotations

import logging
from typing import Any

import torch

from rlvr import faults
from rlvr.distributed.ray_engine import connect_ray, cpu_state, kill_actor
from rlvr.distributed.ray_groups import start_actor
from rlvr.distributed.ray_learner import _to_cpu
from rlvr.errors import RoleLost
from rlvr.models import ModelError

log = logging.getLogger("rlvr.distributed")


class RewardLearnerLost(RoleLost):
    """The reward model's actor died; its refreshes since the last checkpoint are gone."""


class RewardLearnerWorker:
    """Actor body: co_evolve's reward model and its optimizer, a `RewardModelLearner` in the actor's process."""

    def __init__(self, cfg_data: dict[str, Any], pad_id: int, device: str, threads: int | None):
        from rlvr.config import Config
        from rlvr.learner.reward_model import build_reward_learner
        from rlvr.models import resolve_device, resolve_dtype

        if threads:
            torch.set_num_threads(threads)
        cfg = Config.model_validate(cfg_data)
        dev = resolve_device(device)
        if dev.type == "cuda":
            dev = torch.device("cuda", 0)  # Ray sets CUDA_VISIBLE_DEVICES to this actor's GPU
        self.learner = build_reward_learner(cfg, pad_id, dev, resolve_dtype(cfg.model.dtype, dev))

    def ready(self) -> bool:
        return True

    def vocab_size(self) -> int:
        return int(self.learner.model.get_input_embeddings().weight.shape[0])

    def learn(self, pairs: list[tuple[list[int], list[int]]]) -> dict[str, float]:
        return self.learner.learn(pairs)

    def score(self, rows: list[list[int]]) -> list[float]:
        return self.learner.score(rows)

    def weights(self) -> dict[str, torch.Tensor]:
        return cpu_state(self.learner.model.state_dict())

    def state_dict(self) -> dict[str, Any]:
        return _to_cpu(self.learner.state_dict())

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.learner.load_state_dict(state)


class RemoteRewardLearner:
    """co_evolve's reward model on a Ray actor, behind `RewardModelLearner`'s interface (see the module doc)."""

    def __init__(self, cfg: Any, tokenizer: Any):
        self.ray = connect_ray(cfg)
        self.cfg, self.pad_id = cfg, int(tokenizer.pad_token_id)
        self._learns = 0  # learn() calls, for the `kill:reward_model:N` fault
        d = cfg.distributed
        threads = max(1, int(d.cpus_per_reward_model_worker)) if d.gpus_per_reward_model_worker == 0 else None
        self.actor = start_actor(self.ray, RewardLearnerWorker,
                                 (cfg.model_dump(mode="json"), self.pad_id,
                                  "cuda" if d.gpus_per_reward_model_worker > 0 else "cpu", threads),
                                 num_cpus=d.cpus_per_reward_model_worker, num_gpus=d.gpus_per_reward_model_worker,
                                 what="reward model worker", knob="distributed.cpus_per_reward_model_worker")
        try:  # the same check as in-process placement (`check_vocab`), raised here rather than inside the actor
            vocab = self._call("vocab_size", doing="starting")
            if len(tokenizer) > vocab:
                key = "coevolve.rm_path" if cfg.coevolve.rm_path else "model.path"
                raise ModelError(f"{key}: the tokenizer has {len(tokenizer)} tokens but the reward model's "
                                 f"embedding has only {vocab}; they do not belong together")
        except BaseException:
            self.close()
            raise

    def _call(self, method: str, *args: Any, doing: str) -> Any:
        if self.actor is None:
            raise RewardLearnerLost("the reward model worker (co_evolve's reward model) is closed")
        try:
            return self.ray.get(getattr(self.actor, method).remote(*args))
        except self.ray.exceptions.RayActorError as err:
            self.close()
            why = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
            raise RewardLearnerLost(
                f"the reward model worker (co_evolve's reward model, distributed.reward_model_worker) died while "
                f"{doing} ({why}); its weights and optimizer state since the last checkpoint are lost") from None

    def learn(self, pairs: list[tuple[list[int], list[int]]]) -> dict[str, float]:
        self._learns += 1
        if faults.armed("kill", "reward_model", self._learns):  # the reward model's node dying mid-run
            self.ray.kill(self.actor, no_restart=True)
        return self._call("learn", pairs, doing="learning")

    def score(self, rows: list[list[int]]) -> list[float]:
        return self._call("score", rows, doing="scoring") if rows else []

    def state_dict(self) -> dict[str, Any]:
        return self._call("state_dict", doing="saving its state")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._call("load_state_dict", self.ray.put(state), doing="loading its state")

    def hf_model(self) -> Any:
        """A CPU copy of the reward model with the actor's current weights (for `final_rm/`)."""
        from rlvr.models import resolve_dtype
        from rlvr.models.reward_head import load_reward_model

        cpu, co = torch.device("cpu"), self.cfg.coevolve
        with torch.random.fork_rng(devices=[]):  # the throw-away head init draws nothing from the run's RNG
            model = load_reward_model(str(co.rm_path or self.cfg.model.path), device=cpu, pad_token_id=self.pad_id,
                                      dtype=resolve_dtype(self.cfg.model.dtype, cpu),
                                      trust_remote_code=self.cfg.model.trust_remote_code)
        model.load_state_dict(self._call("weights", doing="sending its weights"))
        return model

    def close(self) -> None:
        if self.actor is not None:
            kill_actor(self.ray, self.actor)
        self.actor = None
