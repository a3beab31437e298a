"""rlvr's vLLM plugin: lets vLLM load LLaVA-style models where torchvision is not installed (this project's CPU
machines: torchvision's PyPI wheels do not import beside torch 2.13.0+cpu).

vLLM runs every `vllm.general_plugins` entry point in each of its processes (the model-inspection subprocess,
the engine core, the workers) before it imports a model; rlvr's `pyproject.toml` registers `register` there.

The one thing it does: vLLM's LLaVA module imports its Pixtral module, which imports `_num_image_tokens` from
transformers' `models.pixtral.image_processing_pixtral`, and that module imports torchvision at its top. The
torchvision-free `image_processing_pil_pixtral` defines the same function, so when torchvision is missing (and
only then) it is registered under the other module's name. Nothing else in the process changes; a Pixtral
*model*, which needs the torchvision image processor itself, still fails as it would without the plugin.
"""

from __future__ import annotations

import importlib.util
import sys

PIXTRAL_PROCESSOR = "transformers.models.pixtral.image_processing_pixtral"


def register() -> None:
    """The `vllm.general_plugins` entry point (idempotent; a no-op where torchvision is installed)."""
    if PIXTRAL_PROCESSOR in sys.modules or importlib.util.find_spec("torchvision") is not None:
        return
    try:
        from transformers.models.pixtral import image_processing_pil_pixtral as pil
    except ImportError:  # another transformers release: leave vLLM's own error in place
        return
    if hasattr(pil, "_num_image_tokens"):
        sys.modules[PIXTRAL_PROCESSOR] = pil
