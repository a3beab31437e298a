"""Loading policy, frozen reference and tokenizer from a local Hugging Face checkpoint directory.

`path: builtin` means the small model shipped inside the package (`rlvr/models/builtin/`), `builtin-vl`
its tiny vision-language sibling (`rlvr/models/builtin_vl/`, see `rlvr.models.vision`), and `builtin-teacher`
the built-in model after GRPO training (`rlvr/models/builtin_teacher/`, a teacher for distillation), and
`builtin-lab` the lab's Countdown model (`rlvr/models/builtin_lab/`, docs/lab.md) with its teacher
`builtin-lab-teacher` (the lab model after GRPO, `rlvr/models/builtin_lab_teacher/`), and `builtin-lab-total`
the lab's running-total model (`rlvr/models/builtin_lab_total/`). Anything else
must be a local directory holding a transformers checkpoint (config.json plus weights), e.g. a downloaded
Qwen2.5-0.5B-Instruct. Nothing is downloaded at run time.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import torch

log = logging.getLogger(__name__)

BUILTIN_DIR = Path(__file__).parent / "builtin"
BUILTIN_VL_DIR = Path(__file__).parent / "builtin_vl"
BUILTIN_TEACHER_DIR = Path(__file__).parent / "builtin_teacher"
BUILTIN_LAB_DIR = Path(__file__).parent / "builtin_lab"
BUILTIN_LAB_TEACHER_DIR = Path(__file__).parent / "builtin_lab_teacher"
BUILTIN_LAB_TOTAL_DIR = Path(__file__).parent / "builtin_lab_total"


class ModelError(ValueError):
    """A model or tokenizer cannot be used. The message names the config key and the fix."""


# The models shipped in the package: name -> (directory, what it is, the script that rebuilds it)
BUILTIN_MODELS = {
    "builtin": (BUILTIN_DIR, "the built-in model", "scripts/build_base_model.py"),
    "builtin-vl": (BUILTIN_VL_DIR, "the built-in VLM", "scripts/build_vl_model.py"),
    "builtin-teacher": (BUILTIN_TEACHER_DIR, "the built-in teacher", "scripts/build_teacher_model.py"),
    "builtin-lab": (BUILTIN_LAB_DIR, "the lab model", "scripts/build_lab_model.py"),
    "builtin-lab-teacher": (BUILTIN_LAB_TEACHER_DIR, "the lab model's teacher",
                            "scripts/build_lab_model.py --teacher"),
    "builtin-lab-total": (BUILTIN_LAB_TOTAL_DIR, "the lab's running-total model",
                          "scripts/build_lab_total_model.py"),
}


def resolve_model_path(path: str | Path, key: str = "model.path") -> Path:
    if str(path) in BUILTIN_MODELS:
        p, what, script = BUILTIN_MODELS[str(path)]
        if not (p / "config.json").is_file():
            raise ModelError(f"{key}: {what} is missing from {p}; rebuild it with `python {script}` or "
                             "reinstall rlvr")
        return p
    p = Path(path).expanduser()
    if not p.exists():
        raise ModelError(f"{key}: model directory '{path}' does not exist. Expected a local Hugging Face "
                         "checkpoint directory (with config.json), or 'builtin'")
    if not p.is_dir() or not (p / "config.json").is_file():
        raise ModelError(f"{key}: '{path}' is not a Hugging Face checkpoint directory (no config.json in it)")
    return p


def resolve_device(spec: str = "auto") -> torch.device:
    if spec == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if spec.startswith("cuda") and not torch.cuda.is_available():
        raise ModelError(f"model.device: '{spec}' was asked for, but torch sees no CUDA device "
                         f"(torch {torch.__version__}). Use model.device=cpu or auto")
    if spec == "mps" and not torch.backends.mps.is_available():
        raise ModelError("model.device: 'mps' was asked for, but it is not available")
    return torch.device(spec)


def resolve_dtype(spec: str, device: torch.device) -> torch.dtype:
    if spec == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    return {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}[spec]


def quiet_transformers() -> None:
    """No per-file progress bars or advisory warnings from transformers: rlvr shows its own progress."""
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def load_tokenizer(path: str | Path, *, trust_remote_code: bool = False, key: str = "model.path") -> Any:
    from transformers import AutoTokenizer

    quiet_transformers()

    p = resolve_model_path(path, key)
    try:
        tok = AutoTokenizer.from_pretrained(str(p), trust_remote_code=trust_remote_code)
    except Exception as err:
        raise ModelError(f"{key}: could not load a tokenizer from '{p}': {err}") from None
    if tok.eos_token_id is None:
        raise ModelError(f"{key}: the tokenizer in '{p}' has no EOS token, so responses could never end. "
                         "Set eos_token in its tokenizer_config.json")
    if tok.pad_token_id is None:
        tok.pad_token = tok.eos_token  # padding is always masked, so reusing EOS is safe
    return tok


def load_causal_lm(
    path: str | Path,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str = "cpu",
    trust_remote_code: bool = False,
    trainable: bool = True,
    gradient_checkpointing: bool = False,
    key: str = "model.path",
) -> Any:
    from transformers import AutoModelForCausalLM

    quiet_transformers()
    p = resolve_model_path(path, key)
    try:
        model = AutoModelForCausalLM.from_pretrained(str(p), dtype=dtype, trust_remote_code=trust_remote_code)
    except Exception as err:
        raise ModelError(f"{key}: could not load a causal LM from '{p}': {err}") from None
    model.to(device)
    if trainable:
        model.train()
        if gradient_checkpointing:
            model.gradient_checkpointing_enable()
            model.config.use_cache = False
    else:
        model.eval()
        model.requires_grad_(False)
    # Dropout would make the learner's log-probs disagree with the sampler's; RL fine-tuning runs without it.
    for module in model.modules():
        if isinstance(module, torch.nn.Dropout):
            module.p = 0.0
    return model


def eos_token_ids(tokenizer: Any, model: Any | None = None) -> list[int]:
    """Every token id that ends a response: the tokenizer's EOS plus the model's generation-config EOS ids."""
    ids = {int(tokenizer.eos_token_id)}
    gen = getattr(model, "generation_config", None)
    extra = getattr(gen, "eos_token_id", None)
    if isinstance(extra, int):
        ids.add(extra)
    elif extra:
        ids.update(int(i) for i in extra)
    return sorted(ids)


def check_vocab(tokenizer: Any, model: Any, key: str = "model.tokenizer_path") -> None:
    vocab = model.get_input_embeddings().weight.shape[0]
    if len(tokenizer) > vocab:
        raise ModelError(f"{key}: the tokenizer has {len(tokenizer)} tokens but the model's embedding has "
                         f"only {vocab}; they do not belong together")
