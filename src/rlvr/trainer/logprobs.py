"""Per-token log-probabilities (and entropy) of given token ids under a causal LM.

The logits are computed only at positions that predict a response token: the decoder runs over the whole
sequence, but the LM head (the big [hidden, vocab] matmul) runs on the selected hidden states alone, in
chunks, so a long prompt or a large vocabulary costs no logits memory.
"""

from __future__ import annotations

from typing import Any

import torch


def _head_parts(model: Any) -> tuple[Any, Any] | None:
    """(decoder, lm_head) when logits are exactly lm_head(decoder(x)), else None (use the full forward)."""
    cfg = getattr(model, "config", None)
    if getattr(cfg, "final_logit_softcapping", None) or getattr(cfg, "logit_scale", None):
        return None
    get_decoder = getattr(model, "get_decoder", None)
    head = model.get_output_embeddings() if hasattr(model, "get_output_embeddings") else None
    decoder = get_decoder() if callable(get_decoder) else None
    if decoder is None or head is None or decoder is model:
        return None
    return decoder, head


def token_logprobs(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    mask: torch.Tensor,
    temperature: float = 1.0,
    *,
    with_entropy: bool = False,
    chunk_size: int = 4096,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """log softmax(logits / T)[token] for every token t with mask[:, t] > 0, as [B, T] (0 elsewhere).

    Row b's token t is predicted from position t-1. Entropy (if asked) is that of the same distribution,
    detached: it is a diagnostic.
    """
    T = max(temperature, 1e-6)
    select = mask[:, 1:] > 0  # [B, T-1]: position t-1 predicts token t
    targets = input_ids[:, 1:][select]
    parts = _head_parts(model)
    if parts is not None:
        decoder, head = parts
        hidden = decoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        chosen = hidden[:, :-1][select]
        logits_of = lambda rows: head(rows)  # noqa: E731
    else:
        logits_all = model(input_ids=input_ids, attention_mask=attention_mask).logits
        chosen = logits_all[:, :-1][select]
        logits_of = lambda rows: rows  # noqa: E731
    lps, ents = [], []
    for start in range(0, chosen.shape[0], chunk_size):
        logits = logits_of(chosen[start : start + chunk_size]).float() / T
        logp = torch.log_softmax(logits, dim=-1)
        lps.append(logp.gather(1, targets[start : start + chunk_size, None]).squeeze(1))
        if with_entropy:
            with torch.no_grad():
                ents.append(-(logp.exp() * logp).sum(-1))
    flat = torch.cat(lps) if lps else torch.zeros(0, device=input_ids.device)
    out = torch.zeros(mask.shape, dtype=torch.float32, device=input_ids.device)
    out[:, 1:][select] = flat
    entropy = None
    if with_entropy:
        entropy = torch.zeros(mask.shape, dtype=torch.float32, device=input_ids.device)
        if ents:
            entropy[:, 1:][select] = torch.cat(ents)
    return out, entropy
