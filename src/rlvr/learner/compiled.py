"""`train.compile`: the policy's decoder through torch.compile, forward and backward.

The decoder (the transformer body; the LM head stays eager, it runs in chunks on the response positions only,
see models/logprobs.py) gets a compiled `forward` with dynamic shapes, so micro-batches of any row count and
length reuse one graph. Compilation is lazy in torch, and a backend can fail only when it first generates code
(inductor needs a working C++ compiler), so a probe batch runs the compiled forward and backward once at start;
if anything fails, the decoder stays eager and one warning names the backend and the error. The probe leaves
no gradient behind and draws no random numbers.

Only the learner's calls run compiled: a call with a KV cache (`generate`, used by the hf engine and by
evaluation) takes the class's eager forward. The compiled forward is a `functools.partial` holding the
decoder: a deep copy of the model (LoRA's merge for saving) then binds the copy, not the original. The weights, their names and the state dict are
untouched, so checkpoints and `final/` are the same as without compiling.
"""

from __future__ import annotations

import functools
import logging
from typing import Any

import torch

from rlvr.models.logprobs import _head_parts

log = logging.getLogger(__name__)


def compile_decoder(model: torch.nn.Module, backend: str = "inductor") -> bool:
    """Compile `model`'s decoder in place (see the module docstring); True when the probe ran compiled."""
    parts = _head_parts(model)
    decoder = parts[0] if parts is not None else model
    try:
        if backend == "zentorch":
            import zentorch  # noqa: F401  (registers the "zentorch" backend)
        compiled = torch.compile(type(decoder).forward, dynamic=True, backend=backend)
        decoder.forward = functools.partial(_dispatch, compiled, decoder)
        _probe(decoder)
    except Exception as err:  # an unknown backend, a missing plugin or C++ compiler, an unsupported op
        decoder.__dict__.pop("forward", None)  # the class's eager forward again
        for p in decoder.parameters():
            p.grad = None
        first_line = (str(err).strip().splitlines() or [""])[0][:300]
        log.warning("train.compile: torch.compile (backend %r) failed, the learner runs eagerly instead: %s: %s",
                    backend, type(err).__name__, first_line)
        return False
    return True


def _dispatch(compiled: Any, decoder: torch.nn.Module, *args: Any, **kwargs: Any) -> Any:
    """The compiled forward for the learner's calls; the class's eager one for calls with a KV cache
    (`generate` in the hf engine and evaluation), whose per-token shapes and cache objects would each cost a
    compilation, outside the probe's fallback."""
    if kwargs.get("past_key_values") is not None:
        return type(decoder).forward(decoder, *args, **kwargs)
    return compiled(decoder, *args, **kwargs)


def _probe(decoder: torch.nn.Module) -> None:
    """One forward and backward of 2 rows x 8 tokens through the compiled decoder; gradients reset after."""
    device = next(decoder.parameters()).device
    ids = torch.ones(2, 8, dtype=torch.long, device=device)
    with torch.enable_grad():
        hidden = decoder(input_ids=ids, attention_mask=torch.ones_like(ids)).last_hidden_state
        if hidden.requires_grad:
            (hidden.float().sum() * 0.0).backward()
    for p in decoder.parameters():
        p.grad = None
