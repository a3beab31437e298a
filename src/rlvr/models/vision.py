"""Loading a vision-language model and its processor from a local checkpoint (or `builtin-vl`), offline.

Any Hugging Face image-text-to-text checkpoint goes through `AutoModelForImageTextToText` and `AutoProcessor`
(LLaVA-style models, the Qwen2-VL / Qwen2.5-VL family, ...). Image processing uses transformers' PIL/numpy
("slow") processors, so torchvision is never needed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rlvr.models.loading import ModelError, load_causal_lm, quiet_transformers, resolve_model_path


def load_processor(path: str | Path, *, trust_remote_code: bool = False, key: str = "model.path") -> Any:
    """The checkpoint's processor (image processor + tokenizer + chat template), from local files only."""
    from transformers import AutoProcessor

    quiet_transformers()
    p = resolve_model_path(path, key)
    try:
        processor = AutoProcessor.from_pretrained(str(p), trust_remote_code=trust_remote_code, local_files_only=True)
    except Exception as err:
        raise ModelError(f"{key}: could not load a processor from '{p}' ({type(err).__name__}: {err}). A "
                         "vision-language checkpoint needs processor_config.json or preprocessor_config.json "
                         "next to its tokenizer") from None
    if getattr(processor, "image_processor", None) is None or getattr(processor, "tokenizer", None) is None:
        raise ModelError(f"{key}: '{p}' has a {type(processor).__name__}, not a vision-language processor with "
                         "an image processor and a tokenizer")
    return processor


def load_vlm(path: str | Path, *, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
             trust_remote_code: bool = False, key: str = "model.path") -> tuple[Any, Any]:
    """(model, processor) of a local image-text-to-text checkpoint, e.g. `builtin-vl`, in eval mode."""
    from transformers import AutoConfig, AutoModelForImageTextToText

    quiet_transformers()
    p = resolve_model_path(path, key)
    config = AutoConfig.from_pretrained(str(p), trust_remote_code=trust_remote_code, local_files_only=True)
    if getattr(config, "vision_config", None) is None:
        raise ModelError(f"{key}: '{p}' is a {config.model_type} checkpoint without a vision tower "
                         "(no vision_config); a vision-language task needs an image-text-to-text model such as "
                         "builtin-vl, a LLaVA or a Qwen2-VL checkpoint")
    try:
        model = AutoModelForImageTextToText.from_pretrained(str(p), dtype=dtype, trust_remote_code=trust_remote_code,
                                                            local_files_only=True)
    except Exception as err:
        raise ModelError(f"{key}: could not load '{p}' with AutoModelForImageTextToText "
                         f"({type(err).__name__}: {err})") from None
    return model.to(device).eval(), load_processor(p, trust_remote_code=trust_remote_code, key=key)


# Vision-language families whose text positions are plain 1D positions, so image features can be merged into
# the token embeddings once and the language model run on `inputs_embeds` (LLaVA: one projector output per
# image placeholder token). Qwen2-VL's multimodal RoPE positions depend on the image grid: not wired yet.
EMBEDDING_MERGE_TYPES = ("llava",)


def is_vision_checkpoint(path: str | Path, *, trust_remote_code: bool = False, key: str = "model.path") -> bool:
    """Whether the checkpoint at `path` (or `builtin-vl`) has a vision tower (a `vision_config`)."""
    import json

    p = resolve_model_path(path, key)
    try:
        config = json.loads((p / "config.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(config, dict) and config.get("vision_config") is not None


def load_lm_or_vlm(path: str | Path, *, dtype: torch.dtype = torch.float32, device: str | torch.device = "cpu",
                   trust_remote_code: bool = False, trainable: bool = True, gradient_checkpointing: bool = False,
                   freeze_vision_tower: bool = True, freeze_projector: bool = False, key: str = "model.path") -> Any:
    """The model at `path` as a worker process needs it (Ray rollout, reference and learner actors): a
    vision-language checkpoint through `load_vlm_for_training`, anything else through `load_causal_lm`."""
    if is_vision_checkpoint(path, trust_remote_code=trust_remote_code, key=key):
        return load_vlm_for_training(path, dtype=dtype, device=device, trust_remote_code=trust_remote_code,
                                     trainable=trainable, freeze_vision_tower=freeze_vision_tower,
                                     freeze_projector=freeze_projector, key=key)
    return load_causal_lm(path, dtype=dtype, device=device, trust_remote_code=trust_remote_code,
                          trainable=trainable, gradient_checkpointing=gradient_checkpointing, key=key)


def check_trainable_vlm(model: Any, key: str = "model.path") -> None:
    """Raise unless rlvr can run `model` on images (merge image features into the token embeddings)."""
    model_type = getattr(getattr(model, "config", None), "model_type", None)
    if model_type not in EMBEDDING_MERGE_TYPES or not callable(getattr(model, "get_image_features", None)):
        raise ModelError(f"{key}: a {model_type} vision-language model cannot be trained by rlvr yet; supported: "
                         f"{', '.join(EMBEDDING_MERGE_TYPES)} (e.g. builtin-vl). Qwen2-VL needs its multimodal "
                         "position ids, which the rollout and learner do not build yet")


def load_vlm_for_training(path: str | Path, *, dtype: torch.dtype = torch.float32,
                          device: str | torch.device = "cpu", trust_remote_code: bool = False,
                          trainable: bool = True, freeze_vision_tower: bool = True, freeze_projector: bool = False,
                          key: str = "model.path") -> Any:
    """A vision-language policy (or, with `trainable=False`, a frozen reference) without dropout: the learner's
    log-probs must match the sampler's. `freeze_vision_tower` / `freeze_projector` keep those weights fixed."""
    model, _ = load_vlm(path, dtype=dtype, device=device, trust_remote_code=trust_remote_code, key=key)
    check_trainable_vlm(model, key)
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    if not trainable:
        return model.eval().requires_grad_(False)
    model.train()
    if freeze_vision_tower:
        vision_tower(model).requires_grad_(False)
    if freeze_projector:
        projector(model).requires_grad_(False)
    return model


def _inner(model: Any) -> Any:
    """The LLaVA-style core (`.vision_tower`, `.multi_modal_projector`), also under a peft (LoRA) wrapper."""
    if callable(getattr(model, "get_base_model", None)):
        model = model.get_base_model()
    return getattr(model, "model", model)


PROJECTOR_MODULE = "model.multi_modal_projector"  # its full name in a LLaVA checkpoint (peft's modules_to_save)


def vision_tower(model: Any) -> torch.nn.Module:
    return _inner(model).vision_tower


def projector(model: Any) -> torch.nn.Module:
    return _inner(model).multi_modal_projector


def image_token_id(model: Any) -> int:
    cfg = model.config
    token = getattr(cfg, "image_token_id", None)
    return int(token if token is not None else cfg.image_token_index)


def encode_images(model: Any, mm_inputs: dict[str, Any]) -> torch.Tensor:
    """[image tokens, hidden]: the projected image features of one prompt (all its images, in order): one
    vision-tower call."""
    device = next(model.parameters()).device
    extra = {k: v.to(device) for k, v in mm_inputs.items() if k == "image_sizes"}
    pixels = mm_inputs["pixel_values"].to(device, next(projector(model).parameters()).dtype)
    try:  # transformers 5.24 loses `vision_feature_layer: 0` (falsy) unless hidden states are asked for
        out = model.get_image_features(pixel_values=pixels, return_dict=True, output_hidden_states=True, **extra)
    except TypeError:  # versions that always pass output_hidden_states themselves
        out = model.get_image_features(pixel_values=pixels, return_dict=True, **extra)
    features = out.pooler_output
    return torch.cat(list(features), dim=0) if isinstance(features, (list, tuple)) else features.flatten(0, -2)


def multimodal_embeds(model: Any, input_ids: torch.Tensor, mm_rows: list[dict[str, Any] | None],
                      features: dict[int, torch.Tensor] | None = None) -> torch.Tensor:
    """Token embeddings of `input_ids` [B, T] with each row's image placeholder tokens replaced by its prompt's
    image features. Rows that share one `mm_inputs` dict (the samples of one prompt) share one vision-tower call;
    `features` (keyed by id(mm_inputs)) reuses encodings across calls."""
    features = {} if features is None else features
    embeds = model.get_input_embeddings()(input_ids)
    placeholder = input_ids == image_token_id(model)
    pieces = []
    for row, mm in enumerate(mm_rows):
        n = int(placeholder[row].sum())
        if mm is None:
            if n:
                raise ValueError(f"row {row} has {n} image placeholder tokens but no image inputs")
            continue
        key = id(mm)
        if key not in features:
            features[key] = encode_images(model, mm)
        f = features[key]
        if f.shape[0] != n:
            raise ValueError(f"row {row}: {n} image placeholder tokens for {f.shape[0]} image features; the prompt "
                             "ids and the processor outputs do not belong together")
        pieces.append(f)
    if not pieces:
        return embeds
    merged = torch.cat(pieces).to(embeds.dtype)
    return embeds.masked_scatter(placeholder.unsqueeze(-1).expand_as(embeds), merged)
