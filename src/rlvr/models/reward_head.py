"""A scalar reward head on a causal LM: the model `rlvr rm` trains and a co-evolving run refreshes.

`AutoModelForSequenceClassification` with one label, built from a causal-LM checkpoint (the backbone keeps its
weights, the head starts at random). It reads the reward where the model pools: the last non-padding token.
"""

from __future__ import annotations

from typing import Any

import torch

from rlvr.models.loading import ModelError, quiet_transformers, resolve_model_path


def _load_head_model(auto_class: str, kind: str, path: str, *, dtype: torch.dtype, device: torch.device,
                     pad_token_id: int, trust_remote_code: bool, key: str) -> Any:
    """A one-label `transformers.<auto_class>` from a causal-LM (or trained head) checkpoint, in train mode."""
    import transformers

    quiet_transformers()
    p = resolve_model_path(path, key=key)
    try:
        model = getattr(transformers, auto_class).from_pretrained(str(p), num_labels=1, dtype=dtype,
                                                                  trust_remote_code=trust_remote_code)
    except Exception as err:
        raise ModelError(f"{key}: could not build a {kind} model from '{p}' (transformers needs a "
                         f"*For{auto_class.removeprefix('AutoModelFor')} class for its architecture): {err}") from None
    model.config.pad_token_id = pad_token_id  # a sequence head pools at the last token that is not padding
    return model.to(device).train()


def load_reward_model(path: str, *, dtype: torch.dtype, device: torch.device, pad_token_id: int,
                      trust_remote_code: bool = False, key: str = "model.path") -> Any:
    """A one-label `AutoModelForSequenceClassification` from a causal-LM (or reward-model) checkpoint."""
    return _load_head_model("AutoModelForSequenceClassification", "sequence-classification", path, dtype=dtype,
                            device=device, pad_token_id=pad_token_id, trust_remote_code=trust_remote_code, key=key)


def load_step_reward_model(path: str, *, dtype: torch.dtype, device: torch.device, pad_token_id: int,
                           trust_remote_code: bool = False, key: str = "model.path") -> Any:
    """A process reward model: a one-label `AutoModelForTokenClassification` (a scalar per token) from a
    causal-LM (or PRM) checkpoint. The score of a reasoning step is the logit at the step's last token."""
    return _load_head_model("AutoModelForTokenClassification", "token-classification", path, dtype=dtype,
                            device=device, pad_token_id=pad_token_id, trust_remote_code=trust_remote_code, key=key)


def pad_right(rows: list[list[int]], pad_id: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(input_ids, attention_mask) [len(rows), longest row], rows padded on the right."""
    ids = torch.full((len(rows), max(len(r) for r in rows)), pad_id, dtype=torch.long)
    attention = torch.zeros_like(ids)
    for i, r in enumerate(rows):
        ids[i, : len(r)] = torch.tensor(r)
        attention[i, : len(r)] = 1
    return ids, attention


def sequence_rewards(model: Any, rows: list[list[int]], pad_id: int, device: torch.device) -> torch.Tensor:
    """One scalar reward per token row: the head's logit at the row's last token (rows padded right)."""
    ids, attention = pad_right(rows, pad_id)
    return model(input_ids=ids.to(device), attention_mask=attention.to(device)).logits[:, 0].float()


def token_logits(model: Any, rows: list[list[int]], pad_id: int, device: torch.device) -> list[torch.Tensor]:
    """The head's logit at every token of each row (rows padded right): one 1-D tensor per row."""
    ids, attention = pad_right(rows, pad_id)
    logits = model(input_ids=ids.to(device), attention_mask=attention.to(device)).logits[..., 0].float()
    return [logits[i, : len(r)] for i, r in enumerate(rows)]
