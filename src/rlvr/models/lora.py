"""LoRA adapters on the policy (peft): train low-rank updates of the linear layers, the base frozen.

    policy = apply_lora(load_causal_lm(path), cfg.model.lora)

Checkpoints stay plain Hugging Face directories: the weights written are the merged model (base + B A scaled),
so any checkpoint or `final/` loads with transformers alone; the adapter weights themselves go into the
trainer state, and resuming rebuilds the policy as base + restored adapters, so a resumed run is bit-exact.
"""

from __future__ import annotations

import copy
from typing import Any

import torch


def apply_lora(model: Any, spec: Any) -> Any:
    """Wrap `model` with LoRA adapters per `spec` (r, alpha, dropout, target_modules); only they train."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise ImportError("model.lora needs the peft package: pip install peft (or the rlvr[lora] extra)") from None
    targets = spec.target_modules if isinstance(spec.target_modules, str) else list(spec.target_modules)
    config = LoraConfig(r=spec.r, lora_alpha=spec.alpha, lora_dropout=spec.dropout, target_modules=targets,
                        bias="none", task_type="CAUSAL_LM")
    try:
        wrapped = get_peft_model(model, config)
    except ValueError as err:  # e.g. a target module name that is not in the model
        raise ValueError(f"model.lora: {err}") from None
    return wrapped


def lora_summary(model: Any, spec: Any) -> str:
    """What peft users expect to see: adapters on, where, and how many parameters train."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    targets = spec.target_modules if isinstance(spec.target_modules, str) else ", ".join(spec.target_modules)
    return (f"LoRA adapters on ({targets}; r={spec.r}, alpha={spec.alpha:g}, dropout={spec.dropout:g}): "
            f"trainable params {trainable:,} of {total:,} ({100 * trainable / max(total, 1):.2f}%)")


def is_lora(model: Any) -> bool:
    return hasattr(model, "peft_config") and hasattr(model, "get_base_model")


def lora_state(model: Any) -> dict[str, torch.Tensor]:
    """The adapter weights (what a checkpoint needs beyond the base model)."""
    from peft import get_peft_model_state_dict

    return {k: v.detach().cpu().clone() for k, v in get_peft_model_state_dict(model).items()}


def load_lora_state(model: Any, state: dict[str, torch.Tensor]) -> None:
    from peft import set_peft_model_state_dict

    result = set_peft_model_state_dict(model, state)
    unexpected = getattr(result, "unexpected_keys", [])
    if unexpected:
        raise ValueError(f"checkpoint adapter weights do not fit the model: unexpected {unexpected[:3]}")


def exportable(model: Any) -> Any:
    """A plain transformers model to save: the model itself, or a merged copy of a LoRA-wrapped one (the
    training model is left untouched, so training continues bit-exactly)."""
    if not is_lora(model):
        return model
    merged = copy.deepcopy(model).merge_and_unload()
    return merged
