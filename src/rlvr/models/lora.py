"""LoRA adapters on the policy (peft): train low-rank updates of the linear layers, the base frozen.

    policy = apply_lora(load_causal_lm(path), cfg.model.lora)

Checkpoints stay plain Hugging Face directories: the weights written are the merged model (base + B A scaled),
so any checkpoint or `final/` loads with transformers alone; the adapter weights themselves go into the
trainer state, and resuming rebuilds the policy as base + restored adapters, so a resumed run is bit-exact.

A vision-language model (a config with `vision_config`, e.g. builtin-vl) gets adapters on its language model's
linear layers only: `target_modules` is matched against the modules under `language_model` (never the vision
tower, the projector or the LM head). `train_modules` names modules that train in full beside the adapters
(peft's `modules_to_save`: the projector when `model.freeze_projector=false`); their trained copies are part of
the adapter state a checkpoint keeps, and merging puts them back in place.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import torch

from rlvr.models.vision import projector_module


def apply_lora(model: Any, spec: Any, *, train_modules: Sequence[str] = ()) -> Any:
    """Wrap `model` with LoRA adapters per `spec` (r, alpha, dropout, target_modules); only they (and the modules
    named in `train_modules`, trained in full) train. A vision-language model is adapted in its language model
    only (`language_model_targets`)."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise ImportError("model.lora needs the peft package: pip install peft (or the rlvr[lora] extra)") from None
    targets: str | list[str]
    if is_vision_language(model):
        targets = language_model_targets(model, spec.target_modules)
    else:
        targets = spec.target_modules if isinstance(spec.target_modules, str) else list(spec.target_modules)
    config = LoraConfig(r=spec.r, lora_alpha=spec.alpha, lora_dropout=spec.dropout, target_modules=targets,
                        bias="none", task_type="CAUSAL_LM", modules_to_save=list(train_modules) or None)
    try:
        wrapped = get_peft_model(model, config)
    except ValueError as err:  # e.g. a target module name that is not in the model
        raise ValueError(f"model.lora: {err}") from None
    return wrapped


def is_vision_language(model: Any) -> bool:
    return getattr(getattr(model, "config", None), "vision_config", None) is not None


def language_model_targets(model: Any, target_modules: Sequence[str] | str) -> list[str]:
    """Full names of the linear layers under the model's `language_model` whose last name part is in
    `target_modules` ("all-linear": all of them). Full names match exactly one module each in peft, so a
    vision-tower layer with the same short name (CLIP's q_proj) is never adapted."""
    linear = [name for name, module in model.named_modules()
              if isinstance(module, torch.nn.Linear) and "language_model" in name.split(".")[:-1]]
    if not linear:
        raise ValueError(f"model.lora: found no linear layers under a `language_model` module in this "
                         f"{type(model).__name__}; LoRA on a vision-language model adapts its language model only")
    if target_modules == "all-linear":
        return linear
    wanted = set(target_modules)
    chosen = [name for name in linear if name.rsplit(".", 1)[-1] in wanted]
    if not chosen:
        names = sorted({name.rsplit(".", 1)[-1] for name in linear})
        raise ValueError(f"model.lora.target_modules: none of {sorted(wanted)} is a linear layer of the language "
                         f"model; its linear layers are named {', '.join(names)} (or use all-linear)")
    return chosen


def lora_summary(model: Any, spec: Any) -> str:
    """What peft users expect to see: adapters on, where, and how many parameters train."""
    trainable = sum(p.numel() for p in model.parameters() if p.requires_grad)
    total = sum(p.numel() for p in model.parameters())
    targets = spec.target_modules if isinstance(spec.target_modules, str) else ", ".join(spec.target_modules)
    if is_vision_language(model):
        targets = f"the language model's {targets}"
        full = getattr(model.peft_config.get("default"), "modules_to_save", None) if is_lora(model) else None
        if full:
            targets += f"; trained in full: {', '.join(full)}"
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


def adapt_policy(model: Any, spec: Any, *, freeze_projector: bool) -> Any:
    """`apply_lora` as a run applies it: on a vision-language model the projector trains in full beside the
    adapters unless `model.freeze_projector` (the vision tower is frozen: LoRA never adapts it)."""
    train_modules = [projector_module(model)] if is_vision_language(model) and not freeze_projector else []
    return apply_lora(model, spec, train_modules=train_modules)


def plain_state_dict(model: Any) -> dict[str, torch.Tensor]:
    """The weights a plain transformers copy of `model` loads: its own state dict, or for a LoRA-wrapped model
    the merged weights (base + B A scaled, trained `modules_to_save` copies in place) under the base names. A
    rollout worker holding the plain model takes these."""
    return exportable(model).state_dict()


def exportable(model: Any) -> Any:
    """A plain transformers model to save: the model itself, or a merged copy of a LoRA-wrapped one (the
    training model is left untouched, so training continues bit-exactly)."""
    if not is_lora(model):
        return model
    merged = copy.deepcopy(model).merge_and_unload()
    return merged
