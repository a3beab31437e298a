"""co_evolve's second trainable role: a Bradley–Terry reward model refreshed on the run's own on-policy pairs.

Every `coevolve.every` steps the controller mines the step's groups for (correct, incorrect) answer pairs to one
prompt, with the verifier's labels, and hands them to `RewardModelLearner.learn`:

    accuracy, margin  measured on the fresh pairs first, before the model trains on them (so they are
                      held-out numbers: these answers did not exist at the previous refresh)
    loss              -mean( log sigmoid(r(x, y_correct) - r(x, y_incorrect)) )   (`bradley_terry_loss`)
                      `rm_updates` passes over the pairs, `rm_batch_size` pairs per AdamW step

The reward model scores exactly the token ids the policy sampled (prompt ids + response ids, token-in), so no
text is re-tokenized; the `learned_rm` reward reads it live through `score`. As Cooper (Hong et al.,
"Cooper: Co-Optimizing Policy and Reward Models in Reinforcement Learning for Large Language Models",
arXiv:2508.05613) does, positives are answers the rule-based verifier accepts and negatives the policy's own
rejected answers to the same prompt; Cooper's assistant-LLM negatives and reference-conditioned RM are not here.
"""

from __future__ import annotations

import math
import random
from typing import Any

import torch

from rlvr.algorithms.preference import bradley_terry_loss, pair_accuracy
from rlvr.models.reward_head import load_reward_model, sequence_rewards
from rlvr.types import Group

TokenPair = tuple[list[int], list[int]]  # (chosen ids, rejected ids), each prompt + response


def mine_group_pairs(groups: list[Group], max_pairs_per_prompt: int, seed: int) -> list[TokenPair]:
    """(correct, incorrect) token-id pairs within each group, by the verifier's `Sample.correct`.

    Identical responses count once; samples with no verdict (None) or excluded (non-finite reward) are left
    out; each group gives every combination, of which a draw seeded by `seed` keeps at most
    `max_pairs_per_prompt`."""
    rng = random.Random(seed)
    pairs: list[TokenPair] = []
    for group in groups:
        good: dict[tuple[int, ...], None] = {}
        bad: dict[tuple[int, ...], None] = {}
        for s in group.samples:
            if s.correct is None or s.excluded:
                continue
            (good if s.correct else bad)[tuple(s.prompt_ids) + tuple(s.response_ids)] = None
        combos = [(list(c), list(w)) for c in good for w in bad]
        rng.shuffle(combos)
        pairs.extend(combos[:max_pairs_per_prompt])
    return pairs


def build_reward_learner(cfg: Any, pad_id: int, device: torch.device, dtype: torch.dtype) -> RewardModelLearner:
    """co_evolve's reward model from the config: `coevolve.rm_path` (else `model.path`) with a scalar head whose
    initialisation is seeded by run.seed on its own RNG stream (the caller's other random draws are untouched).
    The controller and a Ray reward-model worker both build it here, so the two placements start identical."""
    co = cfg.coevolve
    key = "coevolve.rm_path" if co.rm_path else "model.path"
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(cfg.run.seed)
        model = load_reward_model(str(co.rm_path or cfg.model.path), dtype=dtype, device=device, pad_token_id=pad_id,
                                  trust_remote_code=cfg.model.trust_remote_code, key=key)
    return RewardModelLearner(model, pad_id, lr=co.rm_lr, updates=co.rm_updates, batch_size=co.rm_batch_size,
                              seed=cfg.run.seed, grad_clip=cfg.optim.grad_clip)


class RewardModelLearner:
    """A scalar-head reward model that learns from token-id pairs: `learn(pairs)`, `score(rows)`, and
    `state_dict`/`load_state_dict` (weights, optimizer and counters) for checkpoints."""

    def __init__(self, model: Any, pad_id: int, *, lr: float, updates: int = 1, batch_size: int = 32,
                 seed: int = 0, grad_clip: float | None = 1.0, score_batch_size: int = 64):
        self.model, self.pad_id = model, pad_id
        self.device = next(model.parameters()).device
        self.optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
        self.updates, self.batch_size, self.seed = updates, batch_size, seed
        self.grad_clip = grad_clip if grad_clip is not None else float("inf")
        self.score_batch_size = score_batch_size
        self.refreshes = 0  # learn() calls so far: the shuffle of each refresh is seeded by it

    @torch.no_grad()
    def score(self, rows: list[list[int]]) -> list[float]:
        """The raw reward (the head's logit) of each token row."""
        was_training = self.model.training
        self.model.eval()
        out: list[float] = []
        for start in range(0, len(rows), self.score_batch_size):
            out.extend(sequence_rewards(self.model, rows[start : start + self.score_batch_size], self.pad_id,
                                        self.device).cpu().tolist())
        self.model.train(was_training)
        return out

    def learn(self, pairs: list[TokenPair]) -> dict[str, float]:
        """Measure the pairs (before training on them), then train on them. Returns `rm/` metrics."""
        self.refreshes += 1
        if not pairs:  # every group all right or all wrong: nothing to rank
            return {"rm/pairs": 0.0}
        scores = self.score([c for c, _ in pairs] + [r for _, r in pairs])
        chosen, rejected = torch.tensor(scores[: len(pairs)]), torch.tensor(scores[len(pairs):])
        metrics = {"rm/pairs": float(len(pairs)), "rm/accuracy": pair_accuracy(chosen, rejected),
                   "rm/margin": float((chosen - rejected).mean())}
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + self.refreshes)
        losses, norms = [], []
        self.model.train()
        for _ in range(self.updates):
            order = torch.randperm(len(pairs), generator=gen).tolist()
            for start in range(0, len(order), self.batch_size):
                batch = [pairs[i] for i in order[start : start + self.batch_size]]
                self.optimizer.zero_grad(set_to_none=True)
                rewards = sequence_rewards(self.model, [c for c, _ in batch] + [r for _, r in batch], self.pad_id,
                                           self.device)
                loss = bradley_terry_loss(rewards[: len(batch)], rewards[len(batch):])
                loss.backward()
                norm = float(torch.nn.utils.clip_grad_norm_(self.model.parameters(), self.grad_clip))
                if math.isfinite(float(loss.detach())) and math.isfinite(norm):  # a bad batch leaves the model as it was
                    self.optimizer.step()
                else:
                    self.optimizer.zero_grad(set_to_none=True)
                losses.append(float(loss.detach()))
                norms.append(norm)
        metrics.update({"rm/loss": sum(losses) / len(losses), "rm/grad_norm": sum(norms) / len(norms)})
        return metrics

    def state_dict(self) -> dict[str, Any]:
        """Live references (as the policy learner's): a checkpoint writes them to disk before the next refresh."""
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "refreshes": self.refreshes}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.refreshes = int(state["refreshes"])

    def hf_model(self) -> Any:
        """The model with its current weights, to save as a HF directory (`final_rm/`)."""
        return self.model

    def close(self) -> None:
        """Nothing to release: the model lives in this process."""
