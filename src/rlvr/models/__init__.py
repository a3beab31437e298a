"""Model and tokenizer loading (transformers), and the built-in model's assets."""

from rlvr.models.loading import (
    BUILTIN_DIR,
    ModelError,
    check_vocab,
    eos_token_ids,
    load_causal_lm,
    load_tokenizer,
    resolve_device,
    resolve_dtype,
    resolve_model_path,
)

__all__ = [
    "BUILTIN_DIR",
    "ModelError",
    "check_vocab",
    "eos_token_ids",
    "load_causal_lm",
    "load_tokenizer",
    "resolve_device",
    "resolve_dtype",
    "resolve_model_path",
]
