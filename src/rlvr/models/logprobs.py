"""Per-token log-probabilities, entropy and values of given token ids under a causal LM.

The decoder runs over the whole sequence, but the LM head (the big [hidden, vocab] matmul) runs only on the
hidden states that predict a response token, in chunks, so a long prompt or a large vocabulary costs no logits
memory. A value head, when given, reads the same hidden states.
"""

from __future__ import annotations

from typing import Any, NamedTuple

import torch


class TokenOutputs(NamedTuple):
    logprobs: torch.Tensor  # [B, T], 0 where mask is 0
    entropy: torch.Tensor | None  # [B, T]
    values: torch.Tensor | None  # [B, T]


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


PACKABLE_TYPES = ("qwen2", "qwen3", "llama", "mistral")


def packable(model: Any) -> bool:
    """Whether rows can run packed: a decoder whose attention honours a 4D boolean mask (transformers' sdpa or
    eager attention) and whose logits are lm_head(decoder(x))."""
    cfg = getattr(model, "config", None)
    if getattr(cfg, "model_type", None) not in PACKABLE_TYPES or _head_parts(model) is None:
        return False
    if getattr(cfg, "use_sliding_window", False) or "sliding_attention" in (getattr(cfg, "layer_types", None) or []):
        return False
    return getattr(cfg, "_attn_implementation", "sdpa") in ("sdpa", "eager")


def pack_rows(attention_mask: torch.Tensor, capacity: int) -> list[list[int]]:
    """Rows of a right-padded batch packed into bins of at most `capacity` tokens (first fit, longest first; a
    row longer than `capacity` gets a bin of its own). Each bin lists its rows in packing order."""
    lengths = attention_mask.sum(dim=1).tolist()
    bins: list[list[int]] = []
    room: list[int] = []
    for row in sorted(range(len(lengths)), key=lambda r: (-lengths[r], r)):
        n = int(lengths[row])
        for i, free in enumerate(room):
            if n <= free:
                bins[i].append(row)
                room[i] -= n
                break
        else:
            bins.append([row])
            room.append(max(capacity - n, 0))
    return bins


def _packed_hidden(decoder: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor, capacity: int
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Decoder states of a right-padded batch computed packed. Returns (hidden [bins * width, H], index [B, L]):
    row b's token at column c has its state at hidden[index[b, c]]."""
    device = input_ids.device
    B, L = input_ids.shape
    lengths = attention_mask.sum(dim=1).tolist()
    bins = pack_rows(attention_mask, capacity)
    width = max(sum(int(lengths[r]) for r in rows) for rows in bins)
    ids = torch.zeros((len(bins), width), dtype=input_ids.dtype, device=device)
    positions = torch.zeros((len(bins), width), dtype=torch.long, device=device)
    segment = torch.full((len(bins), width), -1, dtype=torch.long, device=device)
    index = torch.zeros((B, L), dtype=torch.long, device=device)
    for i, rows in enumerate(bins):
        start = 0
        for row in rows:
            n = int(lengths[row])
            ids[i, start : start + n] = input_ids[row, :n]
            positions[i, start : start + n] = torch.arange(n, device=device)
            segment[i, start : start + n] = row
            index[row, :n] = i * width + start + torch.arange(n, device=device)
            start += n
    causal = torch.ones((width, width), dtype=torch.bool, device=device).tril_()
    allowed = (segment[:, :, None] == segment[:, None, :]) & causal
    allowed |= torch.eye(width, dtype=torch.bool, device=device)  # padding attends to itself: no all-masked row
    hidden = decoder(input_ids=ids, attention_mask=allowed[:, None], position_ids=positions).last_hidden_state
    return hidden.reshape(len(bins) * width, -1), index


def _scatter(flat: torch.Tensor, select: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    out = torch.zeros(shape, dtype=torch.float32, device=select.device)
    out[:, 1:][select] = flat.float()
    return out


def has_images(mm_inputs: list[dict[str, Any] | None] | None) -> bool:
    return mm_inputs is not None and any(m is not None for m in mm_inputs)


def decoder_hidden(model: Any, decoder: Any, input_ids: torch.Tensor, attention_mask: torch.Tensor,
                   mm_inputs: list[dict[str, Any] | None] | None = None) -> torch.Tensor:
    """The decoder's last hidden states [B, T, H] of `input_ids`; with image rows (`mm_inputs`), on the token
    embeddings with each prompt's image features merged in (one vision-tower call per distinct prompt) and the
    model's multimodal position ids where it has them (Qwen2-VL's M-RoPE). `decoder` is `model`'s language model."""
    if not has_images(mm_inputs):
        return decoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    from rlvr.models.vision import multimodal_embeds, position_ids

    rows = list(mm_inputs)
    embeds = multimodal_embeds(model, input_ids, rows)
    positions = position_ids(model, input_ids, attention_mask, rows)  # None: the model counts 1D positions
    return decoder(inputs_embeds=embeds, attention_mask=attention_mask, position_ids=positions).last_hidden_state


def forward_tokens(
    model: Any,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    mask: torch.Tensor,
    temperature: float = 1.0,
    *,
    with_entropy: bool = False,
    entropy_grad: bool = False,
    value_head: torch.nn.Module | None = None,
    chunk_size: int = 4096,
    pack_tokens: int | None = None,
    mm_inputs: list[dict[str, Any] | None] | None = None,
) -> TokenOutputs:
    """log softmax(logits / T)[token] for each token t with mask[:, t] > 0 (row b's token t is predicted from
    position t-1); optionally the entropy of that distribution (differentiable if `entropy_grad`) and
    `value_head(hidden[t-1])`, the value of the state before token t. With `pack_tokens` (and a `packable`
    model) the rows run packed into sequences of at most that many tokens instead of padded.

    `mm_inputs` (vision-language rows, one entry per row) merges each prompt's image features into the token
    embeddings (`rlvr.models.vision.multimodal_embeds`: one vision-tower call per distinct prompt), with the
    model's multimodal position ids where it has them (Qwen2-VL's M-RoPE). Such rows are not packable: they
    always run padded, whatever `pack_tokens` says."""
    T = max(temperature, 1e-6)
    select = mask[:, 1:] > 0  # [B, T-1]: position t-1 predicts token t
    targets = input_ids[:, 1:][select]
    parts = _head_parts(model)
    if has_images(mm_inputs):
        if parts is None:
            raise ValueError("image inputs need a model whose logits are lm_head(language_model(x))")
        decoder, head = parts
        hidden = decoder_hidden(model, decoder, input_ids, attention_mask, mm_inputs)
        chosen = hidden[:, :-1][select]
        logits_of = head
    elif parts is not None and pack_tokens is not None and len(input_ids) > 1 and packable(model):
        decoder, head = parts
        hidden_flat, index = _packed_hidden(decoder, input_ids, attention_mask, pack_tokens)
        chosen = hidden_flat[index[:, :-1][select]]
        logits_of = head
    elif parts is not None:
        decoder, head = parts
        hidden = decoder(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        chosen = hidden[:, :-1][select]
        logits_of = head
    else:
        if value_head is not None:
            raise ValueError("a value head needs a model whose logits are lm_head(decoder(x))")
        logits_all = model(input_ids=input_ids, attention_mask=attention_mask).logits
        chosen = logits_all[:, :-1][select]
        logits_of = None
    lps, ents = [], []
    for start in range(0, chosen.shape[0], chunk_size):
        rows = chosen[start : start + chunk_size]
        logits = (logits_of(rows) if logits_of is not None else rows).float() / T
        logp = torch.log_softmax(logits, dim=-1)
        lps.append(logp.gather(1, targets[start : start + chunk_size, None]).squeeze(1))
        if with_entropy:
            with torch.set_grad_enabled(entropy_grad and torch.is_grad_enabled()):
                ents.append(-(logp.exp() * logp).sum(-1))
    empty = torch.zeros(0, device=input_ids.device)
    logprobs = _scatter(torch.cat(lps) if lps else empty, select, mask.shape)
    entropy = _scatter(torch.cat(ents) if ents else empty, select, mask.shape) if with_entropy else None
    values = None
    if value_head is not None:
        values = _scatter(value_head(chosen).squeeze(-1), select, mask.shape)
    return TokenOutputs(logprobs, entropy, values)


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
    """(log-probs, detached entropy or None) as [B, T]; see `forward_tokens`."""
    out = forward_tokens(model, input_ids, attention_mask, mask, temperature, with_entropy=with_entropy,
                         chunk_size=chunk_size)
    return out.logprobs, out.entropy


def token_values(backbone: Any, value_head: torch.nn.Module, input_ids: torch.Tensor,
                 attention_mask: torch.Tensor, mask: torch.Tensor,
                 mm_inputs: list[dict[str, Any] | None] | None = None) -> torch.Tensor:
    """Values [B, T] from a critic: `value_head` on the decoder states that precede each masked token (a
    vision-language backbone sees each row's images, `mm_inputs`)."""
    decoder = backbone.get_decoder() if hasattr(backbone, "get_decoder") else backbone
    hidden = decoder_hidden(backbone, decoder, input_ids, attention_mask, mm_inputs)
    select = mask[:, 1:] > 0
    return _scatter(value_head(hidden[:, :-1][select]).squeeze(-1), select, mask.shape)
