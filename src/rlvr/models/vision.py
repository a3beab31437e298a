"""Loading a vision-language model and its processor from a local checkpoint (or `builtin-vl`), offline.

Any Hugging Face image-text-to-text checkpoint goes through `AutoModelForImageTextToText` and `AutoProcessor`
(LLaVA-style models, the Qwen2-VL / Qwen2.5-VL family, ...). Image processing uses transformers' PIL/numpy
("slow") processors, so torchvision is never needed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from rlvr.models.loading import ModelError, quiet_transformers, resolve_model_path


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
