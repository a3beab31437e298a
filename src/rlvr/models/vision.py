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
    """The checkpoint's processor (image processor + tokenizer + chat template), from local files only.

    A processor that also takes a video processor (Qwen2-VL, Qwen2.5-VL, ...) cannot be built by `AutoProcessor`
    where torchvision is missing (transformers' video processors need it); it is then built without one
    (`image_only_processor`): rlvr's clips are lists of frames, which go through the image processor."""
    from transformers import AutoProcessor

    quiet_transformers()
    p = resolve_model_path(path, key)
    try:
        processor = AutoProcessor.from_pretrained(str(p), trust_remote_code=trust_remote_code, local_files_only=True)
    except Exception as err:
        processor = image_only_processor(p, trust_remote_code=trust_remote_code)
        if processor is None:
            raise ModelError(f"{key}: could not load a processor from '{p}' ({type(err).__name__}: {err}). A "
                             "vision-language checkpoint needs processor_config.json or preprocessor_config.json "
                             "next to its tokenizer") from None
    if getattr(processor, "image_processor", None) is None or getattr(processor, "tokenizer", None) is None:
        raise ModelError(f"{key}: '{p}' has a {type(processor).__name__}, not a vision-language processor with "
                         "an image processor and a tokenizer")
    return processor


def _processor_class_name(p: Path) -> str | None:
    import json

    for name in ("processor_config.json", "preprocessor_config.json", "tokenizer_config.json"):
        try:
            found = json.loads((p / name).read_text()).get("processor_class")
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(found, str):
            return found
    return None


def _without_video_processor(cls: type) -> type:
    """`cls` (a processor taking image_processor, tokenizer, video_processor) as one taking only the first two,
    under the same class name, so its `save_pretrained` writes the files `AutoProcessor` reads (the tokenizer,
    processor_config.json with the image processor and `processor_class`, the chat template)."""
    def __init__(self: Any, image_processor: Any = None, tokenizer: Any = None, chat_template: Any = None,
                 **kwargs: Any) -> None:
        cls.__init__(self, image_processor, tokenizer, None, chat_template=chat_template, **kwargs)
        self.video_processor = None

    return type(cls.__name__, (cls,), {"__init__": __init__, "__module__": cls.__module__,
                                        "__doc__": f"{cls.__name__} without its video processor (rlvr)."})


def image_only_processor(p: Path, *, trust_remote_code: bool = False) -> Any | None:
    """The checkpoint's processor built from its image processor, tokenizer and chat template alone, when its class
    takes a video processor that cannot be built here; None when that is not the case."""
    import inspect

    import transformers
    from transformers import AutoImageProcessor, AutoTokenizer

    name = _processor_class_name(p)
    cls = getattr(transformers, name, None) if name else None
    if not isinstance(cls, type) or "video_processor" not in inspect.signature(cls.__init__).parameters:
        return None
    try:
        image_processor = AutoImageProcessor.from_pretrained(str(p), trust_remote_code=trust_remote_code,
                                                             local_files_only=True)
        tokenizer = AutoTokenizer.from_pretrained(str(p), trust_remote_code=trust_remote_code, local_files_only=True)
    except Exception:
        return None
    template = None
    if (p / "chat_template.jinja").is_file():
        template = (p / "chat_template.jinja").read_text()
    elif (p / "chat_template.json").is_file():
        import json

        template = json.loads((p / "chat_template.json").read_text()).get("chat_template")
    return _without_video_processor(cls)(image_processor=image_processor, tokenizer=tokenizer,
                                         chat_template=template)


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


# Vision-language families rlvr trains. Image features are merged into the token embeddings once per prompt and the
# language model runs on `inputs_embeds`. LLaVA: plain 1D positions. Qwen2-VL / Qwen2.5-VL: multimodal RoPE
# (M-RoPE), whose position ids depend on each image's grid (`image_grid_thw`): `position_ids` builds them.
EMBEDDING_MERGE_TYPES = ("llava",)
MROPE_TYPES = ("qwen2_vl", "qwen2_5_vl")
TRAINABLE_VLM_TYPES = EMBEDDING_MERGE_TYPES + MROPE_TYPES


def uses_mrope(model: Any) -> bool:
    return getattr(getattr(_unwrap(model), "config", None), "model_type", None) in MROPE_TYPES


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
    if model_type not in TRAINABLE_VLM_TYPES or not callable(getattr(model, "get_image_features", None)):
        raise ModelError(f"{key}: a {model_type} vision-language model cannot be trained by rlvr yet; supported "
                         f"model types: {', '.join(TRAINABLE_VLM_TYPES)} (e.g. builtin-vl, Qwen2-VL, Qwen2.5-VL)")


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
        projector(model).requires_grad_(True)  # Qwen2-VL's projector (the merger) sits inside its vision tower
    if freeze_projector:
        projector(model).requires_grad_(False)
    return model


def _unwrap(model: Any) -> Any:
    """The transformers model under a peft (LoRA) wrapper."""
    return model.get_base_model() if callable(getattr(model, "get_base_model", None)) else model


def _inner(model: Any) -> Any:
    """The core holding the vision tower and the projector (LLaVA's `.vision_tower` and `.multi_modal_projector`,
    Qwen2-VL's `.visual` with its `.merger`), also under a peft (LoRA) wrapper."""
    model = _unwrap(model)
    return getattr(model, "model", model)


def projector_module(model: Any) -> str:
    """The projector's full name in the checkpoint (peft's `modules_to_save`)."""
    return "model.visual.merger" if uses_mrope(model) else "model.multi_modal_projector"


def vision_tower(model: Any) -> torch.nn.Module:
    """The vision encoder (for Qwen2-VL its `.visual`, which also holds the projector: see `projector`)."""
    inner = _inner(model)
    return inner.visual if uses_mrope(model) else inner.vision_tower


def projector(model: Any) -> torch.nn.Module:
    """The layers that map image features into the language model's embedding space."""
    inner = _inner(model)
    return inner.visual.merger if uses_mrope(model) else inner.multi_modal_projector


def image_token_id(model: Any) -> int:
    cfg = model.config
    token = getattr(cfg, "image_token_id", None)
    return int(token if token is not None else cfg.image_token_index)


def encode_images(model: Any, mm_inputs: dict[str, Any]) -> torch.Tensor:
    """[image tokens, hidden]: the projected image features of one prompt (all its images, in order): one
    vision-tower call."""
    device = next(model.parameters()).device
    extra = {k: v.to(device) for k, v in mm_inputs.items() if k in ("image_sizes", "image_grid_thw")}
    pixels = mm_inputs["pixel_values"].to(device, next(projector(model).parameters()).dtype)
    try:  # transformers 5.24 loses `vision_feature_layer: 0` (falsy) unless hidden states are asked for
        out = model.get_image_features(pixel_values=pixels, return_dict=True, output_hidden_states=True, **extra)
    except TypeError:  # versions that always pass output_hidden_states themselves
        out = model.get_image_features(pixel_values=pixels, return_dict=True, **extra)
    features = out.pooler_output
    return torch.cat(list(features), dim=0) if isinstance(features, (list, tuple)) else features.flatten(0, -2)


def image_slots(input_ids: torch.Tensor, token: int, counts: list[int]) -> torch.Tensor:
    """[B, T] bool: the first `counts[row]` image placeholder tokens of each row, where its prompt's image features
    go. A placeholder token after them was sampled by the policy (a model may emit its image token as text): it
    stays an ordinary token embedding, as it was when the engine sampled after it. Raises when a row has fewer
    placeholders than features."""
    placeholder = input_ids == token
    slots = placeholder & (placeholder.long().cumsum(-1) <= torch.tensor(counts, device=input_ids.device)[:, None])
    have = slots.sum(-1).tolist()
    for row, (n, want) in enumerate(zip(have, counts)):
        if n != want:
            raise ValueError(f"row {row}: {n} image placeholder tokens for {want} image features; the prompt ids "
                             "and the processor outputs do not belong together")
    return slots


def multimodal_embeds(model: Any, input_ids: torch.Tensor, mm_rows: list[dict[str, Any] | None],
                      features: dict[int, torch.Tensor] | None = None) -> torch.Tensor:
    """Token embeddings of `input_ids` [B, T] with each row's prompt image placeholders (`image_slots`) replaced by
    its prompt's image features. Rows that share one `mm_inputs` dict (the samples of one prompt) share one
    vision-tower call; `features` (keyed by id(mm_inputs)) reuses encodings across calls."""
    features = {} if features is None else features
    embeds = model.get_input_embeddings()(input_ids)
    placeholder = input_ids == image_token_id(model)
    pieces, counts = [], []
    for row, mm in enumerate(mm_rows):
        if mm is None:  # a row without images beside rows with them: its prompt must not hold placeholders
            if bool(placeholder[row].any()):
                raise ValueError(f"row {row} has {int(placeholder[row].sum())} image placeholder tokens but no "
                                 "image inputs")
            counts.append(0)
            continue
        key = id(mm)
        if key not in features:
            features[key] = encode_images(model, mm)
        pieces.append(features[key])
        counts.append(int(features[key].shape[0]))
    if not pieces:
        return embeds
    slots = image_slots(input_ids, image_token_id(model), counts)
    merged = torch.cat(pieces).to(embeds.dtype)
    return embeds.masked_scatter(slots.unsqueeze(-1).expand_as(embeds), merged)


def _mrope_inputs(model: Any, input_ids: torch.Tensor, mm_rows: list[dict[str, Any] | None]
                  ) -> tuple[torch.Tensor | None, torch.Tensor]:
    """(every row's image grids in row order, or None; [B, T] int: 1 at the prompt's image tokens)."""
    merge = int(_unwrap(model).config.vision_config.spatial_merge_size)
    grids, counts = [], []
    for mm in mm_rows:
        grid = None if mm is None else mm.get("image_grid_thw")
        counts.append(0 if grid is None else int((grid.prod(-1) // merge**2).sum()))
        if grid is not None:
            grids.append(grid)
    types = image_slots(input_ids, image_token_id(model), counts).int()
    return (torch.cat(grids).to(input_ids.device) if grids else None), types


def position_ids(model: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                 mm_rows: list[dict[str, Any] | None]) -> torch.Tensor | None:
    """The language model's position ids for rows holding images: None for models with plain 1D positions (the
    model counts them itself), Qwen2-VL's M-RoPE ids [3, B, T] otherwise: text tokens advance by one, an image's
    tokens take (t, h, w) positions on its grid of merged patches, and the text after it continues from the largest
    of them. Padding (attention_mask 0) may sit on either side."""
    if not uses_mrope(model):
        return None
    grids, types = _mrope_inputs(model, input_ids, mm_rows)
    positions, _ = _inner(model).get_rope_index(input_ids, mm_token_type_ids=types, image_grid_thw=grids,
                                                attention_mask=attention_mask)
    return positions


def mrope_generate_kwargs(model: Any, input_ids: torch.Tensor, mm_rows: list[dict[str, Any] | None]
                          ) -> dict[str, torch.Tensor]:
    """What `generate` needs beside the merged embeddings to build M-RoPE positions itself (Qwen2-VL): each row's
    image grids in row order and which tokens are image tokens. Nothing for 1D-position models."""
    if not uses_mrope(model):
        return {}
    grids, types = _mrope_inputs(model, input_ids, mm_rows)
    return {} if grids is None else {"image_grid_thw": grids, "mm_token_type_ids": types}
