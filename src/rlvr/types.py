"""The data protocol: plain dataclasses that flow one way through the stages.

    Task --TaskRecord--> Rollout --Group[Sample]--> Reward --> Advantage --> Batch --> Learner

`Sample` is one sampled response, `Group` all samples of one prompt, and `Batch` the learner's tensor view
of many groups. `Batch.from_groups` is the only place that turns samples into tensors.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any

import torch


@dataclass
class VerifyResult:
    """A verifier's verdict on one response: reward in [0, 1], whether it is fully correct, and why."""

    reward: float
    correct: bool
    reason: str
    extracted: str | None = None
    meta: dict[str, Any] = field(default_factory=dict)


@dataclass
class TaskRecord:
    """One problem: what the task hands to the rollout stage.

    `images` (vision-language tasks) lists the problem's images in prompt order; each item is a PIL image, a
    file path or encoded bytes, and a list item is the frames of one clip, in order. `rlvr.tasks.images`
    decodes them.
    """

    id: str
    question: str
    answer: Any = None
    difficulty: float | int | None = None
    source: str = ""
    meta: dict[str, Any] = field(default_factory=dict)
    images: list[Any] | None = None


@dataclass
class Sample:
    """One sampled response to one prompt.

    `response_ids`, `logprobs` and `loss_mask` have one entry per response token. `logprobs` are the
    behaviour log-probabilities of the sampling policy (temperature applied, before top-p/top-k
    truncation). Tool-observation tokens (multi-turn) carry `loss_mask` 0. `mm_inputs` (vision-language prompts)
    holds the processor's non-token outputs for the prompt, e.g. `{"pixel_values": tensor}`; every sample of one
    prompt shares the same dict (one object, not a copy), and `prompt_ids` already hold the expanded image
    placeholder tokens, so the learner recomputes log-probs on exactly the sampled ids. A sample whose reward is unknown
    (`meta["non_finite_reward"]` lists the components that were NaN or inf) is scored 0, trained on nowhere and
    left out of its group's statistics (`excluded`).

    Process rewards (`rlvr.rewards.process`): `step_ends` lists, in order, the response-token index of the last
    token of each scored reasoning step, and `step_rewards` the step's (weighted) score; both None when no step
    reward is configured. A step's score sits on its last token; see docs/reward-models.md#process-rewards.
    """

    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float] | None = None
    loss_mask: list[int] | None = None
    finish_reason: str = "stop"  # "stop" (EOS or stop string) or "length"
    policy_version: int = 0
    text: str = ""
    rewards: dict[str, float] = field(default_factory=dict)
    reward: float = 0.0
    correct: bool | None = None
    advantage: float | list[float] | None = None
    meta: dict[str, Any] = field(default_factory=dict)
    mm_inputs: dict[str, Any] | None = None
    step_rewards: list[float] | None = None
    step_ends: list[int] | None = None

    def __post_init__(self) -> None:
        if self.loss_mask is None:
            self.loss_mask = [1] * len(self.response_ids)
        n = len(self.response_ids)
        if len(self.loss_mask) != n:
            raise ValueError(f"loss_mask has {len(self.loss_mask)} entries for {n} response tokens")
        if self.logprobs is not None and len(self.logprobs) != n:
            raise ValueError(f"logprobs has {len(self.logprobs)} entries for {n} response tokens")
        check_steps(self.step_rewards, self.step_ends, n)

    @property
    def truncated(self) -> bool:
        return self.finish_reason == "length"

    @property
    def excluded(self) -> bool:
        """Left out of training and of its group's statistics (its reward is not a finite number)."""
        return bool(self.meta.get("non_finite_reward"))


def check_steps(step_rewards: list[float] | None, step_ends: list[int] | None, n: int) -> None:
    """Step scores must come with their end tokens, one each, at increasing indices inside the response."""
    if step_rewards is None and step_ends is None:
        return
    if step_rewards is None or step_ends is None or len(step_rewards) != len(step_ends):
        raise ValueError(f"step_rewards and step_ends must both be set, one entry per step; got "
                         f"{step_rewards!r} and {step_ends!r}")
    if any(not 0 <= e < n for e in step_ends) or any(a >= b for a, b in zip(step_ends, step_ends[1:])):
        raise ValueError(f"step_ends must be increasing response-token indices in [0, {n}); got {step_ends}")


@dataclass
class Group:
    """All samples of one prompt, with the prompt's task record."""

    record: TaskRecord
    prompt_ids: list[int]
    samples: list[Sample]
    prompt_text: str = ""

    @property
    def rewards(self) -> list[float]:
        return [s.reward for s in self.samples]


@dataclass
class Batch:
    """The learner's tensor view of a list of groups: prompt+response rows, right-padded.

    Per-token tensors have shape [B, T] and are indexed by the token they describe: `old_logprobs[b, t]`
    is log p(input_ids[b, t] | input_ids[b, :t]). Column 0 is never a response token, so it is always
    masked out. `mask` is 1 exactly on response tokens that are trained on (loss_mask 1, not padding, and the
    sample not excluded). `valid` is False for excluded samples: advantage estimators run on the valid rows only.
    """

    input_ids: torch.Tensor  # [B, T] long
    attention_mask: torch.Tensor  # [B, T] long
    mask: torch.Tensor  # [B, T] float, trainable response tokens
    advantages: torch.Tensor  # [B, T] float
    old_logprobs: torch.Tensor | None  # [B, T] float, behaviour log-probs from the engine
    group_ids: torch.Tensor  # [B] long, index of the sample's group
    prompt_lengths: torch.Tensor  # [B] long
    response_lengths: torch.Tensor  # [B] long
    rewards: torch.Tensor  # [B] float
    correct: torch.Tensor  # [B] bool, the verifier's verdict
    off_policy: torch.Tensor | None = None  # [B] bool, samples not drawn from the policy (e.g. guidance)
    valid: torch.Tensor | None = None  # [B] bool, False for excluded samples (a non-finite reward); None: all valid
    # Filled by the learner's `prepare` only when something asks for them:
    ref_logprobs: torch.Tensor | None = None  # [B, T] frozen reference
    teacher_logprobs: torch.Tensor | None = None  # [B, T] frozen teacher (distillation)
    behaviour_logprobs: torch.Tensor | None = None  # [B, T] the engine's, kept when old ones are recomputed
    values: torch.Tensor | None = None  # [B, T] critic values before each token
    returns: torch.Tensor | None = None  # [B, T] critic targets
    token_filter: torch.Tensor | None = None  # [B, T] 1 on tokens that get a policy gradient (e.g. top entropy)
    # Vision-language rows: each row's prompt `mm_inputs` (rows of one prompt share the dict), None for text rows.
    # A list, not a tensor: `select` picks from it, `to` leaves it (the forward moves what it encodes).
    mm_inputs: list[dict[str, Any] | None] | None = None
    # Process rewards, only when some sample carries step scores (else None): the step's score on its last token.
    step_rewards: torch.Tensor | None = None  # [B, T] float, 0 off step ends
    step_mask: torch.Tensor | None = None  # [B, T] float, 1 on the last token of each scored step

    @classmethod
    def from_groups(cls, groups: Sequence[Group], pad_id: int) -> Batch:
        rows: list[tuple[int, Sample]] = [(g, s) for g, group in enumerate(groups) for s in group.samples]
        if not rows:
            raise ValueError("cannot build a batch from zero samples")
        B = len(rows)
        T = max(len(s.prompt_ids) + len(s.response_ids) for _, s in rows)
        input_ids = torch.full((B, T), pad_id, dtype=torch.long)
        attention_mask = torch.zeros((B, T), dtype=torch.long)
        mask = torch.zeros((B, T), dtype=torch.float32)
        advantages = torch.zeros((B, T), dtype=torch.float32)
        have_logprobs = all(s.logprobs is not None for _, s in rows)
        old_logprobs = torch.zeros((B, T), dtype=torch.float32) if have_logprobs else None
        have_steps = any(s.step_ends is not None for _, s in rows)
        step_rewards = torch.zeros((B, T), dtype=torch.float32) if have_steps else None
        step_mask = torch.zeros((B, T), dtype=torch.float32) if have_steps else None
        for b, (_, s) in enumerate(rows):
            P, R = len(s.prompt_ids), len(s.response_ids)
            input_ids[b, :P] = torch.tensor(s.prompt_ids, dtype=torch.long)
            input_ids[b, P : P + R] = torch.tensor(s.response_ids, dtype=torch.long)
            attention_mask[b, : P + R] = 1
            if not s.excluded:
                mask[b, P : P + R] = torch.tensor(s.loss_mask, dtype=torch.float32)
            adv = s.advantage
            if adv is None:
                pass  # computed on the batch later (see trainer.loop)
            elif isinstance(adv, (list, tuple)):
                if len(adv) != R:
                    raise ValueError(f"per-token advantage has {len(adv)} entries for {R} response tokens")
                advantages[b, P : P + R] = torch.tensor(adv, dtype=torch.float32)
            else:
                advantages[b, P : P + R] = float(adv)
            if old_logprobs is not None:
                old_logprobs[b, P : P + R] = torch.tensor(s.logprobs, dtype=torch.float32)
            if have_steps and s.step_ends and not s.excluded:
                ends = torch.tensor(s.step_ends, dtype=torch.long) + P
                step_rewards[b, ends] = torch.tensor(s.step_rewards, dtype=torch.float32)
                step_mask[b, ends] = 1.0
        return cls(
            input_ids=input_ids,
            attention_mask=attention_mask,
            mask=mask,
            advantages=advantages,
            old_logprobs=old_logprobs,
            group_ids=torch.tensor([g for g, _ in rows], dtype=torch.long),
            prompt_lengths=torch.tensor([len(s.prompt_ids) for _, s in rows], dtype=torch.long),
            response_lengths=torch.tensor([len(s.response_ids) for _, s in rows], dtype=torch.long),
            rewards=torch.tensor([s.reward for _, s in rows], dtype=torch.float32),
            correct=torch.tensor([bool(s.correct) for _, s in rows], dtype=torch.bool),
            off_policy=torch.tensor([bool(s.meta.get("off_policy", False)) for _, s in rows], dtype=torch.bool),
            valid=torch.tensor([not s.excluded for _, s in rows], dtype=torch.bool),
            mm_inputs=[s.mm_inputs for _, s in rows] if any(s.mm_inputs is not None for _, s in rows) else None,
            step_rewards=step_rewards,
            step_mask=step_mask,
        )

    @property
    def multimodal(self) -> bool:
        return self.mm_inputs is not None

    def __len__(self) -> int:
        return self.input_ids.shape[0]

    @property
    def last_token_index(self) -> torch.Tensor:
        """[B] column of each row's last response token."""
        return self.prompt_lengths + self.response_lengths - 1

    @property
    def num_tokens(self) -> int:
        """Tokens the model runs on (prompt + response, no padding)."""
        return int(self.attention_mask.sum())

    def select(self, index: torch.Tensor | Sequence[int]) -> Batch:
        """Rows `index`, with trailing columns that are padding in every selected row cut off."""
        idx = torch.as_tensor(index, dtype=torch.long)
        width = int(self.attention_mask[idx].sum(dim=1).max())
        out = {}
        for f in fields(self):
            v = getattr(self, f.name)
            if v is None:
                out[f.name] = None
            elif isinstance(v, list):
                out[f.name] = [v[i] for i in idx.tolist()]
            elif v.dim() == 2:
                out[f.name] = v[idx, :width]
            else:
                out[f.name] = v[idx]
        return Batch(**out)

    def to(self, device: torch.device | str) -> Batch:
        return replace(self, **{f.name: getattr(self, f.name).to(device) for f in fields(self)
                                if isinstance(getattr(self, f.name), torch.Tensor)})
