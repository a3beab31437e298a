"""Rewards from the policy's own probabilities: RLPR (the probability of the reference answer) and
self-certainty (Intuitor: the KL of the policy's token distributions from uniform)."""

from __future__ import annotations

import logging
import math
from typing import Any, Literal

import torch

from rlvr.rewards.base import REWARDS, RewardContext, RewardOutput
from rlvr.types import Group

log = logging.getLogger(__name__)


# -- rewards from the policy's own probabilities ---------------------------------------------------------


@torch.no_grad()
def _score_continuations(policy: Any, pairs: list[tuple[list[int], list[int]]], temperature: float,
                         batch_size: int = 32) -> list[torch.Tensor]:
    """For each (context_ids, target_ids), the policy's log-probs of the target tokens given the context."""
    from rlvr.models.logprobs import token_logprobs

    device = next(policy.parameters()).device
    out: list[torch.Tensor] = []
    for start in range(0, len(pairs), batch_size):
        chunk = pairs[start : start + batch_size]
        width = max(len(c) + len(t) for c, t in chunk)
        ids = torch.zeros(len(chunk), width, dtype=torch.long)
        att = torch.zeros_like(ids)
        mask = torch.zeros(len(chunk), width)
        for row, (c, t) in enumerate(chunk):
            ids[row, : len(c) + len(t)] = torch.tensor(c + t)
            att[row, : len(c) + len(t)] = 1
            mask[row, len(c) : len(c) + len(t)] = 1.0
        lp, _ = token_logprobs(policy, ids.to(device), att.to(device), mask.to(device), temperature)
        for row, (c, t) in enumerate(chunk):
            out.append(lp[row, len(c) : len(c) + len(t)].cpu())
    return out


@REWARDS.register("rlpr")
class ReferenceProbabilityReward:
    r"""RLPR: the policy's own probability of the reference answer, for domains without a verifier.

    The response's final answer is replaced by the reference answer y*; with z the response's reasoning before
    its answer, the reward is the mean per-token probability of y*:

        r   = (1/|y*|) sum_t pi(y*_t | x, z, y*_<t)
        r'  = the same without the reasoning (x directly followed by the answer prefix)
        R   = clip(r - r', 0, 1)      (debiased; `debias: false` gives R = r)

    The reasoning is the response text up to its extracted answer; a response with no extractable answer is
    used whole. It uses the reference answer but no verifier. Source: Yu et al., "RLPR: Extrapolating RLVR to
    General Domains without Verifiers", arXiv:2506.18254.
    """

    def __init__(self, context: RewardContext, *, debias: bool = True):
        if context.policy is None or context.tokenizer is None:
            raise ValueError("rewards.rlpr: needs the policy and tokenizer (only available inside training)")
        self.context = context
        self.debias = debias

    def __call__(self, group: Group, task: Any) -> list[RewardOutput]:
        tok = self.context.tokenizer
        if group.record.answer is None:
            raise ValueError("rlpr needs a reference answer in the task record")
        answer_ids = tok(str(group.record.answer), add_special_tokens=False)["input_ids"]
        pairs = []
        for s in group.samples:
            found = task.extract_answer(s.text)
            cut = s.text.rfind(found) if found else -1
            reasoning = s.text[:cut] if cut >= 0 else s.text
            pairs.append((list(group.prompt_ids) + tok(reasoning, add_special_tokens=False)["input_ids"], answer_ids))
        scored = _score_continuations(self.context.policy, pairs, self.context.temperature)
        base = 0.0
        if self.debias:
            base = float(_score_continuations(self.context.policy, [(list(group.prompt_ids), answer_ids)],
                                              self.context.temperature)[0].exp().mean())
        out = []
        for lp in scored:
            r = float(lp.exp().mean()) if lp.numel() else 0.0
            value = min(1.0, max(0.0, r - base)) if self.debias else r
            out.append(RewardOutput(value, f"reference prob {r:.3f} (without reasoning {base:.3f})"))
        return out


@REWARDS.register("self_certainty")
class SelfCertaintyReward:
    r"""Confidence of the policy in its own response, as a reward.

    - `mode: neg_entropy` (RENT): R = -(1/T) sum_t H(pi(. | x, y_<t)), the negative mean token entropy.
      Source: Prabhudesai et al., "Maximizing Confidence Alone Improves Reasoning", arXiv:2505.22660; the
      same objective as one-shot entropy minimization (Gao et al., "One-shot Entropy Minimization",
      arXiv:2505.20282).
    - `mode: self_certainty` (INTUITOR): R = (1/T) sum_t KL(U || pi(. | x, y_<t)), the mean KL from the uniform
      distribution over the vocabulary. Source: Zhao et al., "Learning to Reason without External Rewards",
      arXiv:2505.19590.
    """

    def __init__(self, context: RewardContext, *, mode: Literal["neg_entropy", "self_certainty"] = "neg_entropy"):
        if context.policy is None:
            raise ValueError("rewards.self_certainty: needs the policy (only available inside training)")
        self.context, self.mode = context, mode

    @torch.no_grad()
    def __call__(self, group: Group, task: Any) -> list[RewardOutput]:
        policy = self.context.policy
        device = next(policy.parameters()).device
        out = []
        for s in group.samples:
            ids = torch.tensor([list(s.prompt_ids) + list(s.response_ids)], device=device)
            logits = policy(input_ids=ids).logits[0, len(s.prompt_ids) - 1 : -1].float() / self.context.temperature
            logp = torch.log_softmax(logits, dim=-1)
            if logp.shape[0] == 0:
                out.append(RewardOutput(0.0, "empty response"))
                continue
            if self.mode == "neg_entropy":
                value = float((logp.exp() * logp).sum(-1).mean())
            else:  # KL(U || p) = -log V - mean_v log p_v
                value = float((-math.log(logp.shape[-1]) - logp.mean(-1)).mean())
            out.append(RewardOutput(value, f"{self.mode} {value:.3f}"))
        return out
