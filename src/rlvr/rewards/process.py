"""Process rewards: components that score a response's reasoning steps, not only its final answer.

Each returns, per sample, a scalar value (added to the reward like any component, unless the term is
`process_only`) and the per-step scores with the steps' character spans (`RewardOutput.steps`). The reward
function places every step's weighted score on the step's last response token; `process_grpo` turns them into
token-level advantages. They read the reasoning steps through task hooks, so any task that provides them works:

    task.reasoning_steps(response, record) -> [(start, end), ...]     character spans of the steps
    task.key_steps(record) -> [str, ...]                             step_rar: intermediate results to find
    task.step_validity(response, record) -> ([0/1 per step], chain)   step_rvr: per-step and whole-chain logic

The built-in `addition` task provides all three (its column-by-column scratchpad can be checked step by step).
A learned process reward model (`prm`, trained by `rlvr prm`) needs only `reasoning_steps`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Annotated, Any, Literal

import torch
from pydantic import Field

from rlvr.rewards.base import (
    REWARDS,
    RewardContext,
    RewardOutput,
    StepScore,
    build_component,
    token_char_ends,
)
from rlvr.rewards.shaping import _is_correct
from rlvr.types import Group, TaskRecord

STEP_HOOKS = {"step_rar": ("reasoning_steps", "key_steps"), "step_rvr": ("reasoning_steps", "step_validity"),
              "prm": ("reasoning_steps",)}


def _hooks(task: Any, name: str) -> None:
    missing = [h for h in STEP_HOOKS[name] if not callable(getattr(task, h, None))]
    if missing:
        raise TypeError(f"the '{name}' reward needs the task to provide {', '.join(missing)} (see "
                        f"rlvr.rewards.process); task '{getattr(task, 'name', type(task).__name__)}' does not")


def _normal(text: str) -> str:
    return "".join(text.split()).lower()


@REWARDS.register("step_rar")
class StepAccuracyReward:
    r"""StepRAR, R1-VL's step-wise reasoning accuracy reward: the fraction of the solution's key intermediate
    results that the response's reasoning contains (soft key-step matching).

        value = |matched key steps| / |key steps|          per step j: 1 if step j matches a key step, else 0

    A key step matches a response step that contains it after whitespace and case are dropped; each key step
    matches at most one response step (the first unmatched one). R1-VL adds this, weighted, to the answer's
    reward: r = r_answer + alpha * value; here that is `correctness` plus `step_rar` with `weight: alpha`.
    Source: Zhang et al., "R1-VL: Learning to Reason with Multimodal Large Language Models via Step-wise Group
    Relative Policy Optimization", arXiv:2503.12937, section 3 (StepRAR). Their key steps are extracted from
    the reference solution by a model; here the task hook `key_steps` lists them exactly.
    """

    def __call__(self, group: Group, task: Any) -> list[RewardOutput]:
        _hooks(task, "step_rar")
        keys = [_normal(k) for k in task.key_steps(group.record)]
        out = []
        for sample in group.samples:
            spans = task.reasoning_steps(sample.text, group.record)
            left = list(keys)
            steps = []
            for a, b in spans:
                text = _normal(sample.text[a:b])
                hit = next((k for k in left if k and k in text), None)
                if hit is not None:
                    left.remove(hit)
                steps.append(StepScore(a, b, 1.0 if hit is not None else 0.0))
            matched = len(keys) - len(left)
            value = matched / len(keys) if keys else 0.0
            out.append(RewardOutput(value, f"{matched}/{len(keys)} key steps", steps=steps))
        return out


@REWARDS.register("step_rvr")
class StepValidityReward:
    r"""StepRVR, R1-VL's step-wise reasoning validity reward: is the reasoning complete and logically
    consistent? The task judges each step (well formed, follows from the previous steps) and the chain.

        value = 1 if the chain is valid (complete, every step valid, the answer follows), else 0   (`score: chain`)
              = fraction of valid steps                                                         (`score: fraction`)
        per step j: 1 if step j is valid, else 0

    Unlike StepRAR it does not compare with the reference solution: a consistent chain with a wrong digit copied
    from the question still passes. `score: chain` is the paper's binary reward; `fraction` is a graded variant
    (ours). Source: Zhang et al., R1-VL, arXiv:2503.12937, section 3 (StepRVR: reasoning completeness and
    reasoning logic).
    """

    def __init__(self, *, score: Literal["chain", "fraction"] = "chain"):
        self.score = score

    def __call__(self, group: Group, task: Any) -> list[RewardOutput]:
        _hooks(task, "step_rvr")
        out = []
        for sample in group.samples:
            spans = task.reasoning_steps(sample.text, group.record)
            valid, chain = task.step_validity(sample.text, group.record)
            if len(valid) != len(spans):
                raise ValueError(f"task.step_validity returned {len(valid)} step scores for {len(spans)} steps")
            steps = [StepScore(a, b, float(v)) for (a, b), v in zip(spans, valid)]
            frac = sum(valid) / len(valid) if valid else 0.0
            value = float(chain) if self.score == "chain" else frac
            out.append(RewardOutput(value, f"{int(sum(valid))}/{len(valid)} valid steps, chain "
                                    f"{'valid' if chain else 'invalid'}", steps=steps))
        return out


@REWARDS.register("trust_thinking")
class TrustWeightedThinkingReward:
    r"""SophiaVL-R1's Trust-GRPO reward term: a thinking-process reward weighted by how far the group's
    outcomes trust it, annealed over training.

    For a group with thinking rewards tau_i (the `thinking` component, in [0, 1]) and verifier verdicts c_i:

        mu_c, mu_w = mean tau over the correct / the incorrect responses
        gamma      = 1 if mu_c >= mu_w, else exp(mu_c - mu_w)          (trust: 1 when thinking agrees with outcome)
        value_i    = alpha * gamma * exp(-step / T) * tau_i

    and 0 for the whole group when all its responses are correct or all incorrect (nothing to compare; the
    authors' code skips the thinking reward there). `step` is the sample's `policy_version` (updates before it
    was sampled). Added to `correctness` (weight 1), this is r_i = r_outcome + alpha gamma e^{-step/T} tau_i.
    Defaults follow the authors' code (alpha 0.3, T 500 steps). Their thinking reward is a trained 3B reward
    model scoring the whole thinking; any [0, 1] component can stand in (e.g. step_rvr with score: fraction).
    Source: Fan et al., "SophiaVL-R1: Reinforcing MLLMs Reasoning with Thinking Reward", arXiv:2505.17018,
    section 3 (Trust-GRPO, annealing); kxfan2002/SophiaVL-R1 verl/workers/reward/custom.py.
    """

    def __init__(self, context: RewardContext, *, thinking: dict[str, Any] | str = "step_rvr",
                 alpha: Annotated[float, Field(ge=0)] = 0.3, anneal_steps: Annotated[float, Field(gt=0)] = 500.0):
        spec = {"name": thinking} if isinstance(thinking, str) else dict(thinking)
        if "name" not in spec:
            raise ValueError("trust_thinking.thinking: expected a reward name or {name: ..., <params>}")
        name = spec.pop("name")
        if name == "trust_thinking":
            raise ValueError("trust_thinking.thinking: must name another reward component")
        self.thinking_name = name
        self.thinking = build_component(name, spec, context, "rewards.trust_thinking.thinking")
        self.alpha, self.anneal_steps = alpha, anneal_steps
        self._gammas: list[float] = []

    def __call__(self, group: Group, task: Any) -> list[RewardOutput]:
        tau = [float(o.value) for o in self.thinking(group, task)]
        correct = [_is_correct(s, group, task) for s in group.samples]
        ok = [t for t, c in zip(tau, correct) if c]
        bad = [t for t, c in zip(tau, correct) if not c]
        if not ok or not bad:
            return [RewardOutput(0.0, "all correct or all incorrect: no thinking reward") for _ in group.samples]
        mu_c, mu_w = sum(ok) / len(ok), sum(bad) / len(bad)
        gamma = 1.0 if mu_c >= mu_w else math.exp(mu_c - mu_w)
        self._gammas.append(gamma)
        out = []
        for t, s in zip(tau, group.samples):
            anneal = math.exp(-s.policy_version / self.anneal_steps)
            out.append(RewardOutput(self.alpha * gamma * anneal * t,
                                    f"thinking {t:.2f}, trust {gamma:.3f}, anneal {anneal:.3f}"))
        return out

    def metrics(self) -> dict[str, float]:
        """Mean trust over the step's mixed groups, and the share of them with full trust."""
        g, self._gammas = self._gammas, []
        if not g:
            return {}
        return {"trust_mean": sum(g) / len(g), "trust_full_frac": sum(x == 1.0 for x in g) / len(g)}


def step_token_ends(task: Any, text: str, response_ids: Sequence[int], record: TaskRecord,
                    tokenizer: Any) -> list[tuple[int, int, int]]:
    """(response-token index of each reasoning step's last token, the step's start and end character), in
    order, as the reward function places step scores (the first token whose decoded text reaches the step's
    end). Two steps ending on one token keep the first."""
    spans = task.reasoning_steps(text, record)
    if not spans or not response_ids:
        return []
    ends = token_char_ends(response_ids, tokenizer)
    out: list[tuple[int, int, int]] = []
    for start, end in spans:
        token = next((k for k, e in enumerate(ends) if e >= end), len(ends) - 1)
        if not out or token > out[-1][0]:
            out.append((token, start, end))
    return out


@REWARDS.register("prm")
class ProcessRewardModel:
    r"""A learned process reward model (a `rlvr prm` run's `final/`): the probability that each reasoning step
    is on a good path, read at the step's last token.

        score_t = sigmoid( s(x + y)[end(t)] )        s: the PRM's per-token logit; end(t): step t's last token
        value   = min_t score_t  (`aggregate: min`, the weakest step), or the last or the mean step score

    It scores the sampled token ids themselves (prompt ids + response ids, as `rlvr prm` trained it), so the PRM
    must share the policy's tokenizer. The steps are the task's `reasoning_steps`; a response without steps gets
    value 0 and no step scores. With `process_only: true` only the step scores reach the advantage
    (`process_grpo`). Source: Zhang et al., "Entropy-Regularized Process Reward Model", arXiv:2412.11006 (the
    PRM used as the process reward in RL).
    """

    def __init__(self, context: RewardContext, *, path: str, aggregate: Literal["min", "last", "mean"] = "min",
                 batch_size: Annotated[int, Field(ge=1)] = 32, max_length: Annotated[int, Field(ge=8)] = 1024,
                 device: str = "auto"):
        self._load(path, context.tokenizer, key="rewards.prm.path", device=device)
        self.aggregate, self.batch_size, self.max_length = aggregate, batch_size, max_length

    @classmethod
    def from_path(cls, path: str, policy_tokenizer: Any, *, key: str, aggregate: Literal["min", "last", "mean"]
                  = "min", batch_size: int = 32, max_length: int = 1024, device: str = "auto") -> ProcessRewardModel:
        """The PRM outside a reward function (e.g. as a search's node value); errors name `key`."""
        self = cls.__new__(cls)
        self._load(path, policy_tokenizer, key=key, device=device)
        self.aggregate, self.batch_size, self.max_length = aggregate, batch_size, max_length
        return self

    def _load(self, path: str, policy_tok: Any, *, key: str, device: str) -> None:
        from rlvr.models import load_tokenizer, resolve_device, resolve_dtype
        from rlvr.models.reward_head import load_step_reward_model

        dev = resolve_device(device)
        self.tokenizer = load_tokenizer(path, key=key)
        if policy_tok is not None and policy_tok.get_vocab() != self.tokenizer.get_vocab():
            raise ValueError(f"{key}: the PRM at '{path}' has a different tokenizer from the policy's; "
                             "it scores the policy's token ids, so train it with `rlvr prm` on the policy's model "
                             "(model.path)")
        self.model = load_step_reward_model(path, dtype=resolve_dtype("auto", dev), device=dev,
                                            pad_token_id=int(self.tokenizer.pad_token_id), key=key).eval()

    @torch.no_grad()
    def step_scores(self, group: Group, task: Any) -> list[list[StepScore]]:
        """Per sample, sigmoid(s) at each reasoning step's last token (the task's `reasoning_steps`), with the
        step's character span; steps beyond `max_length` tokens are dropped."""
        from rlvr.models.reward_head import token_logits

        _hooks(task, "prm")
        steps = [step_token_ends(task, s.text, s.response_ids, group.record, self.tokenizer) for s in group.samples]
        rows = [(list(s.prompt_ids) + list(s.response_ids))[: self.max_length] for s in group.samples]
        device = next(self.model.parameters()).device
        pad = int(self.tokenizer.pad_token_id)
        logits: list[torch.Tensor] = []
        for start in range(0, len(rows), self.batch_size):
            logits.extend(t.cpu() for t in token_logits(self.model, rows[start : start + self.batch_size], pad, device))
        return [[StepScore(a, b, float(torch.sigmoid(row[len(sample.prompt_ids) + tok])))
                 for tok, a, b in row_steps if len(sample.prompt_ids) + tok < len(row)]
                for sample, row_steps, row in zip(group.samples, steps, logits)]

    def __call__(self, group: Group, task: Any) -> list[RewardOutput]:
        out = []
        for scored in self.step_scores(group, task):
            if not scored:
                out.append(RewardOutput(0.0, "no reasoning steps", steps=[]))
                continue
            values = [st.score for st in scored]
            value = min(values) if self.aggregate == "min" else values[-1] if self.aggregate == "last" \
                else sum(values) / len(values)
            out.append(RewardOutput(value, f"PRM {self.aggregate} {value:.3f} over {len(scored)} steps: "
                                    + " ".join(f"{v:.2f}" for v in values), steps=scored))
        return out
