"""How the trainer feeds pure algorithm functions: by the names of their positional parameters.

An advantage estimator or loss is a plain function. Its positional (non keyword-only) parameters name the
tensors it needs, from a fixed vocabulary below; its keyword-only parameters are config knobs bound once by the
registry. The trainer computes only what some chosen function asks for (a reference forward only if a function
names `ref_logprobs`, a critic only if one names `values`), and a config that asks for something nothing can
provide fails at load time, naming the fix.

Shapes: N samples (rows); T token positions of the learner's batch (prompt + response, right-padded). Per-token
tensors are indexed by the token they describe and are meaningful only where `mask` is 1.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any

import torch

ADVANTAGE_INPUTS: dict[str, str] = {
    "rewards": "[N] float, the combined reward of each sample",
    "group_ids": "[N] long, samples of one prompt share an id (0..G-1)",
    "correct": "[N] bool, the verifier's verdict",
    "mask": "[N, T] float, 1 on trained response tokens",
    "response_lengths": "[N] long, response tokens per sample",
    "old_logprobs": "[N, T] float, log-probs of the sampling policy (temperature applied)",
    "ref_logprobs": "[N, T] float, log-probs of the frozen reference",
    "entropy": "[N, T] float, entropy of the sampling policy's next-token distribution",
    "values": "[N, T] float, the critic's value estimate before each token",
    "token_rewards": "[N, T] float, the reward on the last response token (minus a per-token KL in reward)",
    "input_ids": "[N, T] long, the token ids",
    "off_policy": "[N] bool, samples that came from outside the policy",
    "teacher_logprobs": "[N, T] float, log-probs of a frozen teacher on the sampled tokens (teacher role)",
    "tree_advantages": "[N, T] float, per-token advantages set on the samples by the rollout (a search tree's)",
    "step_rewards": "[N, T] float, each reasoning step's score on the step's last token (a step reward)",
    "step_mask": "[N, T] float, 1 on the last token of each scored step (a step reward)",
    "token_rm_scores": "[N, T] float, sigmoid of a frozen token-level reward model's score of each token "
                       "(model.token_rm_path; OREAL)",
}

LOSS_INPUTS: dict[str, str] = {
    "logprobs": "[N, T] float, log-probs of the current policy (differentiable)",
    "old_logprobs": "[N, T] float, log-probs of the policy that sampled (or recomputed before the update)",
    "advantages": "[N, T] float",
    "mask": "[N, T] float, 1 on trained response tokens",
    "entropy": "[N, T] float, differentiable entropy of the current policy",
    "ref_logprobs": "[N, T] float, log-probs of the frozen reference",
    "behaviour_logprobs": "[N, T] float, the rollout engine's own log-probs",
    "rewards": "[N] float",
    "correct": "[N] bool",
    "group_ids": "[N] long",
    "response_lengths": "[N] long",
    "off_policy": "[N] bool, samples that came from outside the policy (off-policy guidance, e.g. LUFFY)",
    "teacher_logprobs": "[N, T] float, log-probs of a frozen teacher on the sampled tokens (teacher role)",
    "student_logits": "[M, V] float, the current policy's full next-token logits on M response tokens, one "
                      "chunk at a time (GKD; divided by the temperature)",
    "teacher_logits": "[M, V] float, the frozen teacher's full next-token logits on the same tokens (GKD)",
}


def tensor_inputs(fn: Callable[..., Any]) -> list[str]:
    """Names of `fn`'s positional parameters: the tensors it consumes."""
    target = fn.func if hasattr(fn, "func") else fn  # functools.partial from Registry.bind
    return [
        p.name for p in inspect.signature(target).parameters.values()
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]


def check_inputs(fn: Callable[..., Any], vocabulary: Mapping[str, str], what: str) -> list[str]:
    """Problems with `fn`'s declared inputs (unknown names), as config error lines."""
    unknown = [n for n in tensor_inputs(fn) if n not in vocabulary]
    if unknown:
        return [f"{what}: asks for {', '.join(unknown)}, which the trainer does not provide; "
                f"known inputs: {', '.join(vocabulary)}"]
    return []


def call_with_inputs(fn: Callable[..., Any], available: Mapping[str, torch.Tensor | None], what: str) -> Any:
    """Call `fn` with the tensors its positional parameters name, taken from `available`."""
    args = []
    for name in tensor_inputs(fn):
        value = available.get(name)
        if value is None:
            raise ValueError(f"{what} needs '{name}', which was not computed for this batch")
        args.append(value)
    return fn(*args)


def call_on_rows(fn: Callable[..., Any], available: Mapping[str, torch.Tensor | None], rows: torch.Tensor | None,
                 what: str) -> torch.Tensor:
    """`call_with_inputs` on the rows where `rows` ([N] bool) is True, as if the others were not in the batch;
    the others get advantage 0. Every per-sample input ([N] or [N, T]) is cut to those rows, so the group and
    batch statistics of any estimator leave the other samples out. `rows=None` or all True: a plain call."""
    if rows is None or bool(rows.all()):
        return call_with_inputs(fn, available, what)
    n = rows.numel()
    keep = torch.nonzero(rows.cpu()).squeeze(1)
    if keep.numel() == 0:  # nothing to estimate from
        return torch.zeros(n, device=rows.device)
    sub = {k: v[keep.to(v.device)] if isinstance(v, torch.Tensor) and v.dim() >= 1 and v.shape[0] == n else v
           for k, v in available.items()}
    out = call_with_inputs(fn, sub, what)
    full = out.new_zeros((n, *out.shape[1:]))
    full[keep.to(out.device)] = out
    return full


def broadcast_to_tokens(advantages: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """[N] per-sample advantages -> [N, T] on the mask; [N, T] passes through (masked)."""
    adv = advantages.to(mask.dtype)
    if adv.dim() == 1:
        adv = adv[:, None].expand_as(mask)
    return adv * mask
