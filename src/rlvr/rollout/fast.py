"""A fast torch rollout engine: batched sampling over a preallocated KV cache, with minimal per-token Python.

For Qwen2/Llama/Mistral-style decoders (RMSNorm, RoPE, GQA attention, SwiGLU MLP) it runs its own forward
over the model's weights instead of calling `model.generate`:

- each distinct prompt is prefilled once and its KV is copied to the n rows of its group;
- the KV cache is one preallocated buffer [layers, 2, rows, kv_heads, max_len, head_dim]; a decode step
  writes one position per row and attends over the filled prefix only;
- a row that finishes (EOS, stop string) is compacted out: the last live row moves into its slot, so the
  batch shrinks and no compute is spent on finished sequences;
- small models get fused q|k|v and gate|up weight copies (fewer, larger matmuls); the copies are rewritten
  from the parameters before every `generate`, so an optimizer step (fused AdamW included) is always seen;
- `compile=True` compiles the per-token decoder step with torch.compile (dynamic shapes; `compile_backend`
  picks the backend, inductor by default, `zentorch` with the AMD ZenDNN plugin); when compilation is
  unavailable or fails, a warning is logged and the step runs eagerly;
- `share_prefill=False` prefills every row on its own (n copies of each prompt): the same samples for the
  same seed, n times the prefill work; kept only to measure what sharing saves.
- inside `with engine.prefix_cache(max_bytes):` (tree search opens it) the KV of every decoded row is kept across
  `generate` calls, keyed by its token ids (`rlvr.rollout.prefix_cache`), and a prompt prefills only the tokens
  after its longest cached prefix; dropped on leaving the block, on `sync_weights` and when the parameters'
  version counters move.

The behaviour log-probs are log softmax(logits / T) before top-k/top-p, as in `rlvr.rollout.hf` and the
learner's `forward_tokens`; sampling uses torch's global RNG, so `torch.manual_seed` makes it reproducible.
Other architectures (or a PEFT-wrapped model) fall back to the transformers-generate engine with a log line.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F

from rlvr.rollout.base import ENGINES, SamplingParams
from rlvr.rollout.hf import HFEngine
from rlvr.rollout.prefix_cache import DEFAULT_MAX_ENTRIES, PrefixKVCache
from rlvr.types import Sample

log = logging.getLogger(__name__)

SUPPORTED_TYPES = ("qwen2", "llama", "mistral")
FUSE_LIMIT_BYTES = 256 * 2**20  # fused weight copies are made only when they cost at most this much memory
STOP_CHECK_EVERY = 4  # decode steps between stop-string checks (the response is cut exactly afterwards)


def unsupported_reason(model: Any) -> str | None:
    """Why the fast path cannot run `model` exactly, or None when it can."""
    cfg = getattr(model, "config", None)
    mtype = getattr(cfg, "model_type", None)
    if mtype not in SUPPORTED_TYPES:
        return f"model_type {mtype!r} is not one of {', '.join(SUPPORTED_TYPES)}"
    inner = getattr(model, "model", None)
    layers = getattr(inner, "layers", None)
    if layers is None or not hasattr(model, "lm_head"):
        return "the model has no .model.layers / .lm_head (a wrapper such as PEFT?)"
    if getattr(cfg, "hidden_act", "silu") != "silu":
        return f"hidden_act {cfg.hidden_act!r} is not silu"
    if getattr(cfg, "use_sliding_window", False) or "sliding_attention" in (getattr(cfg, "layer_types", None) or []):
        return "sliding-window attention"
    if mtype == "mistral" and getattr(cfg, "sliding_window", None):
        return "sliding-window attention"
    if getattr(cfg, "final_logit_softcapping", None) or getattr(cfg, "logit_scale", None):
        return "scaled or soft-capped logits"
    if getattr(cfg, "pretraining_tp", 1) != 1:
        return "pretraining_tp != 1"
    rotary = getattr(inner, "rotary_emb", None)
    if rotary is None or getattr(rotary, "rope_type", "default") in ("dynamic", "longrope"):
        return "a position-dependent rotary scaling"
    linear_names = ("q_proj", "k_proj", "v_proj", "o_proj")
    for layer in layers:
        attn, mlp = layer.self_attn, layer.mlp
        if any(type(getattr(attn, n, None)) is not torch.nn.Linear for n in linear_names):
            return "attention projections are not plain nn.Linear (LoRA or quantised?)"
        if any(type(getattr(mlp, n, None)) is not torch.nn.Linear for n in ("gate_proj", "up_proj", "down_proj")):
            return "MLP projections are not plain nn.Linear"
        if hasattr(attn, "q_norm") or hasattr(attn, "k_norm"):
            return "q/k norms"
    if type(model.lm_head) is not torch.nn.Linear:
        return "lm_head is not a plain nn.Linear"
    return None


@dataclass
class _Layer:
    ln1: torch.Tensor
    qkv: list[tuple[torch.Tensor, torch.Tensor | None]]  # one fused (w, b) or three separate
    o: tuple[torch.Tensor, torch.Tensor | None]
    ln2: torch.Tensor
    gate_up: list[tuple[torch.Tensor, torch.Tensor | None]]  # one fused or two separate
    down: tuple[torch.Tensor, torch.Tensor | None]


class _Decoder:
    """The model's weights laid out for decoding, and its prefill / decode-step forwards."""

    def __init__(self, model: Any):
        self.model = model
        cfg = model.config
        self.num_heads = cfg.num_attention_heads
        self.num_kv = getattr(cfg, "num_key_value_heads", None) or self.num_heads
        self.head_dim = getattr(cfg, "head_dim", None) or cfg.hidden_size // self.num_heads
        self.hidden = cfg.hidden_size
        self.eps = float(cfg.rms_norm_eps)
        self.scale = self.head_dim ** -0.5
        self.num_layers = len(model.model.layers)
        param = next(model.parameters())
        self.device, self.dtype = param.device, param.dtype
        w_qkv = sum(getattr(layer.self_attn, n).weight.numel() for layer in model.model.layers
                    for n in ("q_proj", "k_proj", "v_proj"))
        w_gu = sum(2 * layer.mlp.gate_proj.weight.numel() for layer in model.model.layers)
        self.fuse_qkv = w_qkv * param.element_size() <= FUSE_LIMIT_BYTES
        self.fuse_gate_up = w_gu * param.element_size() <= FUSE_LIMIT_BYTES
        self._rope_len = 0
        self._slot_cache: dict[tuple[Any, ...], torch.Tensor] = {}
        self.refresh()

    # -- weights -----------------------------------------------------------------------------------------

    @torch.no_grad()
    def refresh(self) -> None:
        """Bring the fused weight copies up to date with the model's parameters. Called before every
        `generate`: change detection through tensor version counters is not reliable (fused AdamW updates
        parameters without bumping them), and the copy is cheap next to generation (fusion is limited to
        FUSE_LIMIT_BYTES). Fused buffers are rewritten in place, so their identity (and a compiled step's
        guards) stay the same."""
        m = self.model
        old = getattr(self, "layers", None)
        layers = []
        for n, layer in enumerate(m.model.layers):
            a, mlp = layer.self_attn, layer.mlp
            qkv = self._fuse([a.q_proj, a.k_proj, a.v_proj], self.fuse_qkv, old[n].qkv if old else None)
            gate_up = self._fuse([mlp.gate_proj, mlp.up_proj], self.fuse_gate_up, old[n].gate_up if old else None)
            layers.append(_Layer(
                ln1=layer.input_layernorm.weight, qkv=qkv, o=(a.o_proj.weight, a.o_proj.bias),
                ln2=layer.post_attention_layernorm.weight, gate_up=gate_up,
                down=(mlp.down_proj.weight, mlp.down_proj.bias)))
        self.layers = layers
        self.embed = m.model.embed_tokens.weight
        self.norm = m.model.norm.weight
        self.head = (m.lm_head.weight, m.lm_head.bias)

    @staticmethod
    def _fuse(linears: list[Any], fuse: bool, old: list[tuple[torch.Tensor, torch.Tensor | None]] | None
              ) -> list[tuple[torch.Tensor, torch.Tensor | None]]:
        """[(w, b)] of the concatenated linears (rewriting `old`'s buffers in place), or each one's (w, b)."""
        if not fuse:
            return [(lin.weight, lin.bias) for lin in linears]
        weights = [lin.weight for lin in linears]
        biases = None
        if any(lin.bias is not None for lin in linears):
            biases = [lin.bias if lin.bias is not None else weights[0].new_zeros(lin.weight.shape[0])
                      for lin in linears]
        if old is not None and len(old) == 1:
            w, b = old[0]
            torch.cat(weights, out=w)
            if b is not None and biases is not None:
                torch.cat(biases, out=b)
            return old
        return [(torch.cat(weights), torch.cat(biases) if biases is not None else None)]

    def rope_tables(self, length: int) -> None:
        """cos and signed-sin tables for positions [0, length), computed by the model's own rotary module.
        Sized generously at first so that a compiled step rarely sees a new table."""
        if length <= self._rope_len:
            return
        cap = int(getattr(self.model.config, "max_position_embeddings", 0) or 0)
        length = max(length, min(cap, 8192), 2 * self._rope_len)
        rotary = self.model.model.rotary_emb
        pos = torch.arange(length, device=self.device)[None]
        probe = torch.zeros(1, dtype=self.dtype, device=self.device)
        with torch.no_grad():
            cos, sin = rotary(probe, pos)
        half = self.head_dim // 2
        sin_signed = torch.cat([-sin[0, :, :half], sin[0, :, half:]], dim=-1)
        self.rope = torch.stack([cos[0], sin_signed], dim=1).contiguous()  # [length, 2, D]: cos, signed sin
        self._rope_len = length

    # -- forwards ----------------------------------------------------------------------------------------

    def _rope(self, x: torch.Tensor, cos: torch.Tensor, sin_signed: torch.Tensor, out: torch.Tensor | None = None
              ) -> torch.Tensor:
        # x * cos + rotate_half(x) * sin, with rotate_half(x) * sin == roll(x, D/2) * [-sin_lo, sin_hi]
        rolled = x.roll(self.head_dim // 2, dims=-1)
        if out is None:
            return torch.addcmul(x * cos, rolled, sin_signed)
        return torch.addcmul(x * cos, rolled, sin_signed, out=out)

    def _project(self, x: torch.Tensor, parts: list[tuple[torch.Tensor, torch.Tensor | None]]) -> torch.Tensor:
        if len(parts) == 1:
            return F.linear(x, *parts[0])
        return torch.cat([F.linear(x, w, b) for w, b in parts], dim=-1)

    def new_cache(self, rows: int, length: int) -> torch.Tensor:
        """[layers, 2 (k, v), rows, kv_heads, length, head_dim], zeroed: attention multiplies the masked-out
        positions by a zero weight, and uninitialised memory could hold NaN (0 * NaN = NaN)."""
        return torch.zeros((self.num_layers, 2, rows, self.num_kv, length, self.head_dim), dtype=self.dtype,
                           device=self.device)

    def prefill(self, ids: torch.Tensor, lengths: torch.Tensor, cache: torch.Tensor, start: int = 0
                ) -> torch.Tensor:
        """Run right-padded prompts ids [B, L] (true lengths [B]) at positions [start, start + L); write their KV to
        cache[:, :, :B, :, start:start + L]. With start > 0 the cache already holds positions [0, start) of every
        row (a reused prefix), which the new tokens attend to. Returns the last-position logits [B, V], float32."""
        B, L = ids.shape
        E = start + L
        H, K, D = self.num_heads, self.num_kv, self.head_dim
        self.rope_tables(E)
        cos, sin = self.rope[start:E, None, 0], self.rope[start:E, None, 1]  # broadcast over [B, L, heads, D]
        keys = torch.arange(E, device=ids.device)
        valid = keys[None, :] < (start + lengths)[:, None]  # [B, E]
        mask = (keys[None, start:, None] >= keys[None, None, :]) & valid[:, None, :]  # [B, Lq, Lk]
        mask = mask[:, None]  # [B, 1, Lq, Lk]
        x = F.embedding(ids, self.embed)
        for i, layer in enumerate(self.layers):
            h = F.rms_norm(x, (self.hidden,), layer.ln1, self.eps)
            qkv = self._project(h, layer.qkv)
            qk = self._rope(qkv[..., : (H + K) * D].view(B, L, H + K, D), cos, sin)
            q = qk[:, :, :H].transpose(1, 2)
            k = qk[:, :, H:].transpose(1, 2)
            v = qkv[..., (H + K) * D :].view(B, L, K, D).transpose(1, 2)
            cache[i, 0, :B, :, start:E] = k
            cache[i, 1, :B, :, start:E] = v
            if start:  # attend over the reused prefix too
                k, v = cache[i, 0, :B, :, :E], cache[i, 1, :B, :, :E]
            if K != H:
                k = k.repeat_interleave(H // K, dim=1)
                v = v.repeat_interleave(H // K, dim=1)
            att = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=self.scale)
            att = att.transpose(1, 2).reshape(B, L, H * D)
            x = x + F.linear(att, *layer.o)
            h = F.rms_norm(x, (self.hidden,), layer.ln2, self.eps)
            gu = self._project(h, layer.gate_up)
            g, u = gu.chunk(2, dim=-1)
            x = x + F.linear(F.silu(g) * u, *layer.down)
        last = x[torch.arange(B, device=ids.device), lengths - 1]
        last = F.rms_norm(last, (self.hidden,), self.norm, self.eps)
        return F.linear(last, *self.head).float()

    def _slot_base(self, B: int, N: int, S: int, device: torch.device) -> torch.Tensor:
        """[B, 2K]: the row of (k/v s, slot b, kv head j, position 0) in a layer's cache viewed as [2*N*K*S, D],
        in the order of the k|v heads in the qkv projection (c = s*K + j)."""
        key = (B, N, S, device)
        base = self._slot_cache.get(key)
        if base is None:
            K = self.num_kv
            c = torch.arange(2 * K, device=device)
            base = (((c // K) * (N * K) + c % K)[None, :] + (torch.arange(B, device=device) * K)[:, None]) * S
            self._slot_cache = {key: base} if len(self._slot_cache) > 256 else {**self._slot_cache, key: base}
        return base

    def _decode_attention(self, q: torch.Tensor, layer_cache: torch.Tensor, bias: torch.Tensor, width: int
                          ) -> torch.Tensor:
        """softmax(q k^T * scale + bias) v for one new query per row. GQA without copying the cache: the H/K
        query heads that share a kv head are that head's query rows. Two batched matmuls over B*K small
        matrices (faster than SDPA's CPU kernel at these sizes)."""
        B, K, S, D = q.shape[0], self.num_kv, layer_cache.shape[3], self.head_dim
        r = self.num_heads // K
        keys = layer_cache[0, :B].view(B * K, S, D)[:, :width]  # views: rows [0, B) of the buffer are contiguous
        values = layer_cache[1, :B].view(B * K, S, D)[:, :width]
        scores = torch.bmm(q.reshape(B * K, r, D), keys.transpose(1, 2)).view(B, K, r, width)
        probs = torch.softmax(scores.mul_(self.scale).add_(bias), dim=-1)
        return torch.bmm(probs.view(B * K, r, width), values)

    def step(self, tokens: torch.Tensor, pos: torch.Tensor, cache: torch.Tensor, width: int) -> torch.Tensor:
        """One decode step for the B = len(tokens) rows held in slots [0, B) of `cache`: token [B] at position
        pos [B] (its KV is written there), attending over positions [0, width), width = max(pos) + 1.
        Returns logits [B, V], float32."""
        base = self._slot_base(tokens.shape[0], cache.shape[2], cache.shape[4], pos.device)
        return self.step_core(tokens, pos, base, cache, width)

    def step_core(self, tokens: torch.Tensor, pos: torch.Tensor, slot_base: torch.Tensor, cache: torch.Tensor,
                  width: int) -> torch.Tensor:
        """`step` with the cache-row table given: pure tensor code, what `compile=True` compiles."""
        B = tokens.shape[0]
        H, K, D = self.num_heads, self.num_kv, self.head_dim
        cs = self.rope[pos]  # [B, 2, D]
        cos, sin = cs[:, None, 0], cs[:, None, 1]
        visible = torch.arange(width, device=pos.device)[None] <= pos[:, None]
        bias = torch.where(visible, 0.0, float("-inf")).to(self.dtype)[:, None, None]  # [B, 1, 1, W]
        slot = (slot_base + pos[:, None]).view(-1)
        x = F.embedding(tokens, self.embed)
        for i, layer in enumerate(self.layers):
            h = F.rms_norm(x, (self.hidden,), layer.ln1, self.eps)
            qkv = self._project(h, layer.qkv)
            qk = qkv[:, : (H + K) * D].view(B, H + K, D)
            layer_cache = cache[i]  # [2, N, K, S, D], contiguous
            if torch.compiler.is_compiling():
                # No out= into a view under dynamo; index_put_ on the cache input itself (not a view of it),
                # which inductor can keep in place instead of copying the whole buffer back.
                qk = self._rope(qk, cos, sin)
                kv = torch.cat([qk[:, H:], qkv[:, (H + K) * D :].view(B, K, D)], dim=1)
                c = torch.arange(2 * K, device=pos.device)
                rows = torch.arange(B, device=pos.device)[:, None]
                cache.index_put_((torch.full_like(pos, i)[:, None], (c // K)[None], rows, (c % K)[None],
                                  pos[:, None]), kv)
            else:  # rotate q|k in place, so that k|v is one contiguous slice of qkv
                self._rope(qk, cos, sin, out=qk)
                kv = qkv[:, H * D :].view(B, 2 * K, D)
                layer_cache.view(-1, D).index_copy_(0, slot, kv.reshape(B * 2 * K, D))
            att = self._decode_attention(qk[:, :H], layer_cache, bias, width).view(B, H * D)
            x = torch.addmm(x, att, layer.o[0].t()) if layer.o[1] is None else x + F.linear(att, *layer.o)
            h = F.rms_norm(x, (self.hidden,), layer.ln2, self.eps)
            gu = self._project(h, layer.gate_up)
            g, u = gu.chunk(2, dim=-1)
            a = F.silu(g).mul_(u)
            x = torch.addmm(x, a, layer.down[0].t()) if layer.down[1] is None else x + F.linear(a, *layer.down)
        x = F.rms_norm(x, (self.hidden,), self.norm, self.eps)
        return F.linear(x, *self.head).float()


def _truncate(scaled: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Top-k then top-p (nucleus) filtering of temperature-scaled logits, as transformers' warpers do it:
    top-k keeps logits >= the k-th largest; top-p keeps the smallest set of largest tokens whose probability
    reaches top_p (always at least one token). Removed tokens get -inf."""
    if top_k > 0 and top_k < scaled.shape[-1]:
        kth = torch.topk(scaled, top_k, dim=-1).values[:, -1:]
        scaled = scaled.masked_fill(scaled < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(scaled, dim=-1, descending=False)
        cum = sorted_logits.softmax(dim=-1).cumsum(dim=-1)
        remove = cum <= (1 - top_p)
        remove[:, -1] = False
        scaled = scaled.masked_fill(remove.scatter(1, order, remove), float("-inf"))
    return scaled


def _sample(logp: torch.Tensor) -> torch.Tensor:
    """One token per row from the categorical distribution exp(logp) (rows may hold -inf), by inverting the
    CDF at a uniform draw: the first token whose cumulative probability exceeds u * total. One uniform per
    row from torch's global RNG, so `torch.manual_seed` fixes the result."""
    cum = logp.exp().cumsum_(dim=-1)
    u = torch.rand((logp.shape[0], 1), device=logp.device, dtype=cum.dtype).mul_(cum[:, -1:])
    return torch.searchsorted(cum, u, right=True).squeeze(1).clamp_(max=logp.shape[-1] - 1)


@ENGINES.register("fast")
class FastEngine(HFEngine):
    """Static-KV-cache batched sampling with a shared prompt prefill per group (see the module docstring).
    Falls back to the transformers-generate engine for models it does not support."""

    def __init__(self, model: Any, tokenizer: Any, *, batch_size: int = 256, compile: bool = False,
                 compile_backend: str = "inductor", share_prefill: bool = True):
        super().__init__(model, tokenizer, batch_size=batch_size)
        self.compile = compile
        self.compile_backend = compile_backend
        self.share_prefill = share_prefill
        self.prefill_tokens = 0  # prompt tokens run through the model's prefill (reused prefixes not counted)
        self._prefix: PrefixKVCache | None = None  # active inside `prefix_cache(...)` only
        self._prefix_depth = 0
        self._prefix_weights: tuple[Any, ...] | None = None
        self._decoder: _Decoder | None = None
        self._step_fn: Any = None
        self._bind(model)

    def _bind(self, model: Any) -> None:
        self.model = model
        self._drop_prefixes()
        reason = unsupported_reason(model)
        if reason is not None:
            log.info("fast engine: %s; using transformers generate instead", reason)
            self._decoder = None
            return
        self._decoder = _Decoder(model)
        self._step_fn = self._decoder.step
        if self.compile:
            self._step_fn = self._compiled_step(self._decoder)

    def _compiled_step(self, dec: _Decoder) -> Any:
        """`dec.step` through torch.compile, falling back to eager `dec.step` for good (with one warning) when
        the backend cannot be set up or a compilation fails. A failed call is simply repeated eagerly: the
        only state it can have touched is the KV written at `pos`, which the eager step rewrites."""
        try:
            if self.compile_backend == "zentorch":
                import zentorch  # noqa: F401  (registers the "zentorch" backend)
            core = torch.compile(dec.step_core, dynamic=True, backend=self.compile_backend)
        except Exception as err:  # an unknown backend, a missing plugin, no dynamo on this platform
            return self._compile_failed(dec, err)

        def compiled_step(tokens: torch.Tensor, pos: torch.Tensor, cache: torch.Tensor, width: int
                          ) -> torch.Tensor:
            base = dec._slot_base(tokens.shape[0], cache.shape[2], cache.shape[4], pos.device)
            try:
                return core(tokens, pos, base, cache, width)
            except Exception as err:  # inductor needs a working C++ compiler; any compile error lands here
                self._compile_failed(dec, err)
                return dec.step(tokens, pos, cache, width)

        return compiled_step

    def _compile_failed(self, dec: _Decoder, err: Exception) -> Any:
        first_line = (str(err).strip().splitlines() or [""])[0][:300]
        log.warning("fast engine: torch.compile (backend %r) failed, decoding eagerly instead: %s: %s",
                    self.compile_backend, type(err).__name__, first_line)
        self._step_fn = dec.step
        return dec.step

    @property
    def supported(self) -> bool:
        return self._decoder is not None

    def sync_weights(self, model: Any, version: int) -> None:
        if model is not self.model:
            self._bind(model)
        self.policy_version = version
        self._drop_prefixes()  # a publish: cached KV was computed with the old weights

    # -- the cross-call prefix cache ------------------------------------------------------------------------

    @contextmanager
    def prefix_cache(self, max_bytes: int, max_entries: int = DEFAULT_MAX_ENTRIES) -> Iterator[Any]:
        """Reuse prefix KV across `generate` calls inside this block (`rlvr.rollout.prefix_cache`): every decoded
        row's KV is stored under its token ids, and a prompt prefills only what follows its longest cached prefix.
        Off outside the block (the cache is dropped on leaving it); nested blocks share the outer one's cache.
        Yields the `PrefixKVCache` (None when the model runs on the transformers fallback, which has no cache).

        Never stale: the cache is dropped by `sync_weights` (every publish) and whenever the policy's parameter
        version counters or the policy version moved since it was filled (an in-place update, `load_state_dict`).
        An optimizer that writes parameters without bumping their version counters (fused AdamW) is not seen
        without a `sync_weights`: do not train inside the block."""
        if self._decoder is None or not self.share_prefill:
            yield None
            return
        if self._prefix is None:
            self._prefix = PrefixKVCache(max_bytes, max_entries)
            self._prefix_weights = self._weights_stamp()
        self._prefix_depth += 1
        try:
            yield self._prefix
        finally:
            self._prefix_depth -= 1
            if self._prefix_depth == 0:
                self._prefix, self._prefix_weights = None, None

    def _weights_stamp(self) -> tuple[Any, ...]:
        return (id(self.model), self.policy_version, sum(p._version for p in self.model.parameters()))

    def _drop_prefixes(self) -> None:
        if getattr(self, "_prefix", None) is not None:
            self._prefix.clear()
            self._prefix_weights = self._weights_stamp()

    def _fresh_prefixes(self) -> PrefixKVCache | None:
        """The active prefix cache, emptied first if the weights changed since it was filled."""
        if self._prefix is not None:
            stamp = self._weights_stamp()
            if stamp != self._prefix_weights:
                self._prefix.clear()
                self._prefix_weights = stamp
        return self._prefix

    @torch.inference_mode()
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Sample]]:
        if self._decoder is None:
            return super().generate(prompts, params)
        self._decoder.refresh()
        # Pieces (prompt, count) of at most batch_size rows, packed into chunks of at most batch_size rows.
        pieces = []
        for i in range(len(prompts)):
            left = params.n
            while left > 0:
                take = min(left, self.batch_size)
                pieces.append((i, take))
                left -= take
        results: list[list[Sample]] = [[] for _ in prompts]
        chunk: list[tuple[int, int]] = []
        for piece in pieces + [(-1, 0)]:
            if piece[0] < 0 or (chunk and sum(c for _, c in chunk) + piece[1] > self.batch_size):
                samples = self._generate_chunk([list(prompts[i]) for i, _ in chunk], [c for _, c in chunk], params)
                for (i, _), group in zip(chunk, samples):
                    results[i].extend(group)
                chunk = []
            if piece[0] >= 0:
                chunk.append(piece)
        return results

    def _generate_chunk(self, prompts: list[list[int]], counts: list[int], params: SamplingParams
                        ) -> list[list[Sample]]:
        dec = self._decoder
        assert dec is not None
        device = dec.device
        if any(len(p) == 0 for p in prompts):
            raise ValueError("the fast engine needs non-empty prompts")
        P, N, M = len(prompts), sum(counts), params.max_new_tokens
        lengths_list = [len(p) for p in prompts]
        L = max(lengths_list)
        S = L + M
        dec.rope_tables(S)
        ids = torch.full((P, L), self.pad_id, dtype=torch.long)
        for b, p in enumerate(prompts):
            ids[b, : len(p)] = torch.tensor(p, dtype=torch.long)
        ids, lengths = ids.to(device), torch.tensor(lengths_list, device=device)

        # Prefill the P distinct prompts, then copy each prompt's KV (and first logits) to its rows.
        cache = dec.new_cache(N, S)
        counts_t = torch.tensor(counts, device=device)
        prefixes = self._fresh_prefixes()
        if not self.share_prefill:  # every row prefilled on its own, straight into its cache rows
            ids, lengths = ids.repeat_interleave(counts_t, dim=0), lengths.repeat_interleave(counts_t)
            logits = dec.prefill(ids, lengths, cache)
            self.prefill_tokens += sum(n * c for n, c in zip(lengths_list, counts))
        elif all(c == 1 for c in counts) and prefixes is None:
            logits = dec.prefill(ids, lengths, cache)
            self.prefill_tokens += sum(lengths_list)
        else:
            small = dec.new_cache(P, L)
            if prefixes is None:
                logits = dec.prefill(ids, lengths, small)
                self.prefill_tokens += sum(lengths_list)
            else:
                logits = self._prefill_reusing(prefixes, prompts, ids, small)
            cache[..., :L, :] = small.repeat_interleave(counts_t, dim=2)
            logits = logits.repeat_interleave(counts_t, dim=0)
            lengths = lengths.repeat_interleave(counts_t)
            del small

        greedy = params.temperature <= 0
        T = 1.0 if greedy else float(params.temperature)
        truncate = not greedy and (params.top_p < 1.0 or params.top_k > 0)
        eos = torch.tensor(self.eos_ids, device=device)
        out_tok = torch.full((N, M), self.pad_id, dtype=torch.long, device=device)
        out_lp = torch.zeros((N, M), dtype=torch.float32, device=device)
        out_len = torch.full((N,), M, dtype=torch.long)
        row_ids = torch.arange(N, device=device)  # original row held by each live slot
        pos = lengths.clone()  # where the token sampled now will be written
        stops = list(params.stop)
        live = N
        row_prompt = [b for b, c in enumerate(counts) for _ in range(c)]
        for t in range(M):
            logp = torch.log_softmax(logits if T == 1.0 else logits.div_(T), dim=-1)
            token = logp.argmax(dim=-1) if greedy else _sample(_truncate(logp, params.top_k, params.top_p)
                                                                 if truncate else logp)
            out_tok[row_ids, t] = token
            out_lp[row_ids, t] = logp.gather(1, token[:, None]).squeeze(1)
            finished = torch.isin(token, eos) if len(self.eos_ids) > 1 else token == eos[0]
            if stops and (t + 1) % STOP_CHECK_EVERY == 0:
                finished = finished | self._hit_stop(out_tok, row_ids, t + 1, stops)
            if t + 1 == M:
                break
            done = finished.nonzero().squeeze(1)
            if done.numel():
                if prefixes is not None:
                    self._remember(prefixes, cache, done.tolist(), row_ids, pos, out_tok, prompts, row_prompt)
                out_len[row_ids[done].cpu()] = t + 1
                keep_n = live - done.numel()
                if keep_n == 0:
                    live = 0
                    break
                # Move live rows from the tail into the holes left by finished rows below keep_n.
                holes = done[done < keep_n]
                tail_alive = ~finished[keep_n:live]
                movers = keep_n + tail_alive.nonzero().squeeze(1)
                if holes.numel():
                    cache[:, :, holes] = cache[:, :, movers]
                    token[holes] = token[movers]
                    pos[holes] = pos[movers]
                    row_ids[holes] = row_ids[movers]
                live = keep_n
                token, pos, row_ids = token[:live], pos[:live], row_ids[:live]
            width = int(pos.max()) + 1
            logits = self._step_fn(token, pos, cache, width)
            pos = pos + 1
        if prefixes is not None and live:
            self._remember(prefixes, cache, list(range(live)), row_ids, pos, out_tok, prompts, row_prompt)
        tok_rows = out_tok.cpu().tolist()
        lp_rows = out_lp.cpu().tolist()
        lens = out_len.tolist()
        samples: list[list[Sample]] = []
        row = 0
        for p, c in zip(prompts, counts):
            group = []
            for _ in range(c):
                n = lens[row]
                group.append(self._to_sample(p, tok_rows[row][:n], lp_rows[row][:n], params))
                row += 1
            samples.append(group)
        return samples

    def _prefill_reusing(self, prefixes: PrefixKVCache, prompts: list[list[int]], ids: torch.Tensor,
                         small: torch.Tensor) -> torch.Tensor:
        """Prefill each prompt into its row of `small` [layers, 2, P, K, L, D], copying its longest cached prefix
        (at most all but its last token) and running only the rest; one prompt at a time (the reused lengths
        differ). Returns the last-position logits [P, V]."""
        dec = self._decoder
        assert dec is not None
        out = []
        for b, p in enumerate(prompts):
            n, kv = prefixes.lookup(p, limit=len(p) - 1)
            row = small[:, :, b : b + 1]
            if n:
                row[:, :, 0, :, :n] = kv[:, :, :, :n]
            rest = torch.tensor([len(p) - n], device=ids.device)
            out.append(dec.prefill(ids[b : b + 1, n : len(p)], rest, row, start=n))
            self.prefill_tokens += len(p) - n
        return torch.cat(out)

    @staticmethod
    def _remember(prefixes: PrefixKVCache, cache: torch.Tensor, slots: list[int], row_ids: torch.Tensor,
                  pos: torch.Tensor, out_tok: torch.Tensor, prompts: list[list[int]], row_prompt: list[int]) -> None:
        """Store the KV of the rows in cache `slots` before they are overwritten: positions [0, pos) hold the KV of
        the row's prompt and of every sampled token but the last (which was never fed)."""
        for slot in slots:
            row, n = int(row_ids[slot]), int(pos[slot])
            prompt = prompts[row_prompt[row]]
            ids = prompt + out_tok[row, : n - len(prompt)].tolist()
            prefixes.insert(ids, cache[:, :, slot, :, :n].clone())

    def _hit_stop(self, out_tok: torch.Tensor, row_ids: torch.Tensor, upto: int, stops: list[str]) -> torch.Tensor:
        """[live] bool: whether each live row's response so far contains a stop string (checked on the tail
        that the last STOP_CHECK_EVERY tokens could have completed)."""
        longest = max(len(s) for s in stops)
        start = max(0, upto - STOP_CHECK_EVERY - 4 * longest - 8)
        rows = out_tok[row_ids, start:upto].cpu().tolist()
        hit = [any(s in self.tokenizer.decode(r) for s in stops) for r in rows]
        return torch.tensor(hit, device=row_ids.device)
