"""A learned value model for GAE-style estimators: a separate backbone with a value head, or a head on the policy.

Value loss (PPO, with optional clipping around the values the batch was prepared with):

    L_V = 1/2 * max((V - R)^2, (V_old + clip(V - V_old, -c, c) - R)^2)

where R are the returns (GAE advantages + V_old).
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr.config import CriticConfig, OptimConfig
from rlvr.learner.optim import build_optimizer
from rlvr.models.logprobs import token_values
from rlvr.types import Batch


class ValueHead(torch.nn.Module):
    """A linear map from a hidden state to a scalar value; starts at zero so early advantages are the returns."""

    def __init__(self, hidden_size: int):
        super().__init__()
        self.proj = torch.nn.Linear(hidden_size, 1)
        torch.nn.init.zeros_(self.proj.weight)
        torch.nn.init.zeros_(self.proj.bias)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.proj(hidden.to(self.proj.weight.dtype))


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, mask: torch.Tensor,
               clip: float | None, num_tokens: float) -> torch.Tensor:
    """Token-mean (over `num_tokens`) clipped value loss; see the module docstring."""
    err = (values - returns).square()
    if clip is not None:
        clipped = old_values + (values - old_values).clamp(-clip, clip)
        err = torch.maximum(err, (clipped - returns).square())
    return 0.5 * (err * mask).sum() / max(num_tokens, 1.0)


class Critic:
    """Owns the value head (and, for kind=separate, its backbone and optimizer)."""

    def __init__(self, cfg: CriticConfig, policy: Any, backbone: Any | None, device: torch.device):
        self.cfg = cfg
        model = policy if backbone is None else backbone
        hidden = model.config.get_text_config().hidden_size  # a VLM's language model width
        self.head = ValueHead(hidden).to(device)
        self.backbone = backbone  # None: the head reads the policy's hidden states (kind=head)
        self.optimizer = None
        if backbone is not None:
            params_model = torch.nn.ModuleList([backbone, self.head])
            self.optimizer = build_optimizer(params_model, OptimConfig(lr=cfg.lr, grad_clip=1.0))

    @property
    def separate(self) -> bool:
        return self.backbone is not None

    def parameters(self) -> list[torch.nn.Parameter]:
        params = list(self.head.parameters())
        if self.backbone is not None:
            params += [p for p in self.backbone.parameters() if p.requires_grad]
        return params

    def values(self, batch: Batch) -> torch.Tensor:
        """Values of the separate critic (with grad if enabled)."""
        assert self.backbone is not None
        return token_values(self.backbone, self.head, batch.input_ids, batch.attention_mask, batch.mask,
                            batch.mm_inputs)

    def state_dict(self) -> dict[str, Any]:
        state: dict[str, Any] = {"head": self.head.state_dict()}
        if self.backbone is not None:
            state["backbone"] = self.backbone.state_dict()
            state["optimizer"] = self.optimizer.state_dict() if self.optimizer else None
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.head.load_state_dict(state["head"])
        if self.backbone is not None:
            self.backbone.load_state_dict(state["backbone"])
            if self.optimizer is not None and state.get("optimizer"):
                self.optimizer.load_state_dict(state["optimizer"])


def build_critic(cfg: Any, policy: torch.nn.Module, dtype: torch.dtype, device: torch.device) -> Critic | None:
    """The critic `algorithm.critic` asks for: a value head on the policy, or a separate backbone (GAE/PPO)."""
    from rlvr.models.vision import load_lm_or_vlm

    spec = cfg.algorithm.critic
    if spec is None:
        return None
    backbone = None
    if spec.kind == "separate":  # a vision-language checkpoint sees the images (its vision tower frozen)
        backbone = load_lm_or_vlm(spec.path or cfg.model.path, dtype=dtype, device=device,
                                  trust_remote_code=cfg.model.trust_remote_code,
                                  freeze_vision_tower=True, freeze_projector=cfg.model.freeze_projector,
                                  key="algorithm.critic.path" if spec.path else "model.path")
    return Critic(spec, policy, backbone, device)
