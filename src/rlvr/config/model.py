"""The `model` section: which checkpoint, tokenizer, dtype and device, and optional LoRA adapters."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator

from rlvr.config.base import Strict


class LoraSpec(Strict):
    """LoRA adapters on the policy (peft): only they train; checkpoints hold the merged model."""

    r: int = Field(16, ge=1, description="Adapter rank.")
    alpha: float = Field(32.0, gt=0, description="Scaling numerator: updates are scaled by alpha / r.")
    dropout: float = Field(0.0, ge=0, lt=1, description="Adapter dropout (0 keeps sampler and learner "
                           "log-probs consistent).")
    target_modules: list[str] | Literal["all-linear"] = Field(
        "all-linear", description="Module names to adapt, e.g. [q_proj, v_proj]; all-linear: every linear "
        "layer but the LM head."
    )


class ModelConfig(Strict):
    path: str = Field("builtin", description="Local HF checkpoint dir, or 'builtin' for the shipped model.")
    reference_path: str | None = Field(None, description="Frozen reference for the KL term; default: path.")
    teacher_path: str | None = Field(None, description="Frozen teacher for distillation (an algorithm that "
                                     "takes teacher_logprobs): a local HF dir or 'builtin-teacher'. It must "
                                     "share the policy's tokenizer.")
    token_rm_path: str | None = Field(None, description="Frozen token-level reward model (a one-label "
                                      "token-classification dir, e.g. final/ of `rlvr prm` with loss.type oreal) "
                                      "for an algorithm that takes token_rm_scores (OREAL). It must share the "
                                      "policy's tokenizer.")
    tokenizer_path: str | None = Field(None, description="Tokenizer dir; default: path.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="auto: float32 on CPU, bfloat16 on GPU."
    )
    device: str = Field("auto", description="auto, cpu, cuda, cuda:N or mps.")
    chat_template: Literal["auto", "on", "off"] = Field(
        "auto", description="auto: use the tokenizer's chat template when it has one."
    )
    trust_remote_code: bool = Field(False, description="Let transformers run the checkpoint's own model code.")
    gradient_checkpointing: bool = Field(False, description="Recompute activations in the backward pass: less memory, more time.")
    lora: LoraSpec | None = Field(None, description="Train LoRA adapters instead of all weights.")
    freeze_vision_tower: bool = Field(True, description="Vision-language models: keep the vision tower's weights "
                                      "fixed (the projector and the language model train).")
    freeze_projector: bool = Field(False, description="Vision-language models: keep the image projector's "
                                   "weights fixed too.")

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", v):
            raise ValueError("expected one of auto, cpu, mps, cuda, cuda:N")
        return v
