"""Rollout with transformers' `generate`, recording the sampler's per-token log-probabilities.

The engine shares the policy module with the learner (in-process, colocated), so a weight sync is only a
version bump. Log-probs are those of the temperature-scaled distribution, before top-p/top-k truncation,
which is also what the learner computes; a logits processor records them as generation goes.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from typing import Any

import torch

from rlvr.models.loading import eos_token_ids
from rlvr.rollout.base import ENGINES, RolloutEngine, SamplingParams
from rlvr.types import Sample


class _LogprobRecorder:
    """A logits processor that keeps log softmax(logits / T) of each step and gathers the sampled token's.

    Placed before the temperature/top-p warpers, it sees the raw logits; at step t it learns which token was
    sampled at step t-1 (the last column of `input_ids`), so only one [B, V] tensor is kept at a time.
    """

    def __init__(self, temperature: float):
        self.temperature = temperature if temperature > 0 else 1.0
        self.prev: torch.Tensor | None = None
        self.steps: list[torch.Tensor] = []

    def __call__(self, input_ids: torch.Tensor, scores: torch.Tensor) -> torch.Tensor:
        if self.prev is not None:
            self.steps.append(self.prev.gather(1, input_ids[:, -1:]).squeeze(1))
        self.prev = torch.log_softmax(scores.float() / self.temperature, dim=-1)
        return scores

    def finish(self, generated: torch.Tensor) -> torch.Tensor:
        if self.prev is not None and len(self.steps) < generated.shape[1]:
            self.steps.append(self.prev.gather(1, generated[:, -1:].to(self.prev.device)).squeeze(1))
        self.prev = None
        if not self.steps:
            return torch.zeros(generated.shape[0], 0)
        return torch.stack(self.steps, dim=1).cpu()


@contextlib.contextmanager
def _sampling_mode(model: Any) -> Iterator[None]:
    """Eval mode and a neutral default generation config (no model-specific repetition penalty etc.)."""
    from transformers import GenerationConfig

    was_training = model.training
    saved = model.generation_config
    model.eval()
    model.generation_config = GenerationConfig()
    try:
        yield
    finally:
        model.generation_config = saved
        model.train(was_training)


@ENGINES.register("hf")
class HFEngine(RolloutEngine):
    """Batched sampling with `model.generate`: prompts are left-padded, n copies of each prompt sampled.

    Vision-language prompts (`generate_multimodal`): each prompt's images go through the vision tower once, their
    features are merged into the prompt's token embeddings, and the n copies are sampled from those embeddings
    (`inputs_embeds`), so the tower runs once per prompt, not once per sample."""

    multimodal = True

    def __init__(self, model: Any, tokenizer: Any, *, batch_size: int = 256):
        self.model = model
        self.tokenizer = tokenizer
        self.batch_size = batch_size
        self.eos_ids = eos_token_ids(tokenizer, model)
        self.pad_id = int(tokenizer.pad_token_id)
        self.policy_version = 0

    def sync_weights(self, model: Any, version: int) -> None:
        self.model = model
        self.policy_version = version

    @torch.no_grad()
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Sample]]:
        jobs = [(i, list(p)) for i, p in enumerate(prompts) for _ in range(params.n)]
        results: list[list[Sample]] = [[] for _ in prompts]
        for start in range(0, len(jobs), self.batch_size):
            chunk = jobs[start : start + self.batch_size]
            for (i, _), sample in zip(chunk, self._generate_batch([p for _, p in chunk], params)):
                results[i].append(sample)
        return results

    @torch.no_grad()
    def generate_multimodal(self, prompts: Sequence[Sequence[int]], mm_inputs: Sequence[dict[str, Any]],
                            params: SamplingParams) -> list[list[Sample]]:
        from rlvr.models.vision import mrope_generate_kwargs, multimodal_embeds

        per_chunk = max(1, self.batch_size // max(params.n, 1))  # whole prompts per generate call
        device = next(self.model.parameters()).device
        results: list[list[Sample]] = []
        for start in range(0, len(prompts), per_chunk):
            chunk = [list(p) for p in prompts[start : start + per_chunk]]
            input_ids, _ = self._left_pad(chunk)
            with _sampling_mode(self.model):
                embeds = multimodal_embeds(self.model, input_ids.to(device), list(mm_inputs[start : start + per_chunk]))
            copies = [p for p in chunk for _ in range(params.n)]
            rows = [m for m in mm_inputs[start : start + per_chunk] for _ in range(params.n)]
            extra = mrope_generate_kwargs(self.model, input_ids.repeat_interleave(params.n, dim=0), rows)
            samples = self._generate_batch(copies, params, embeds.repeat_interleave(params.n, dim=0), extra)
            results += [samples[i * params.n : (i + 1) * params.n] for i in range(len(chunk))]
        return results

    def _left_pad(self, prompts: list[list[int]]) -> tuple[torch.Tensor, torch.Tensor]:
        width = max(len(p) for p in prompts)
        input_ids = torch.full((len(prompts), width), self.pad_id, dtype=torch.long)
        attention_mask = torch.zeros_like(input_ids)
        for row, p in enumerate(prompts):
            input_ids[row, width - len(p) :] = torch.tensor(p, dtype=torch.long)
            attention_mask[row, width - len(p) :] = 1
        return input_ids, attention_mask

    def _generate_batch(self, prompts: list[list[int]], params: SamplingParams,
                        inputs_embeds: torch.Tensor | None = None,
                        extra: dict[str, torch.Tensor] | None = None) -> list[Sample]:
        from transformers import GenerationConfig, LogitsProcessorList

        device = next(self.model.parameters()).device
        input_ids, attention_mask = self._left_pad(prompts)
        width = input_ids.shape[1]
        greedy = params.temperature <= 0
        gen_config = GenerationConfig(
            do_sample=not greedy,
            temperature=1.0 if greedy else params.temperature,
            top_p=params.top_p,
            top_k=params.top_k,
            max_new_tokens=params.max_new_tokens,
            eos_token_id=self.eos_ids,
            pad_token_id=self.pad_id,
            num_beams=1,
            use_cache=True,
            stop_strings=list(params.stop) or None,
        )
        recorder = _LogprobRecorder(params.temperature)
        # image prompts: their merged embeddings (the ids ride along so the output starts with the prompt)
        embeds = {} if inputs_embeds is None else {"inputs_embeds": inputs_embeds}
        embeds.update({k: v.to(device) for k, v in (extra or {}).items()})  # e.g. Qwen2-VL's image grids
        with _sampling_mode(self.model):
            out = self.model.generate(
                input_ids=input_ids.to(device),
                attention_mask=attention_mask.to(device),
                **embeds,
                generation_config=gen_config,
                logits_processor=LogitsProcessorList([recorder]),
                tokenizer=self.tokenizer if params.stop else None,
            )
        generated = out[:, width:].cpu()
        logprobs = recorder.finish(generated)
        return [self._to_sample(p, generated[row].tolist(), logprobs[row].tolist(), params)
                for row, p in enumerate(prompts)]

    def _to_sample(self, prompt: list[int], tokens: list[int], logprobs: list[float],
                   params: SamplingParams) -> Sample:
        cut, finish = len(tokens), "length"
        eos = set(self.eos_ids)
        for j, t in enumerate(tokens):
            if t in eos:
                cut, finish = j + 1, "stop"
                break
        if params.stop:
            stop_at = self._stop_string_end(tokens[:cut], params.stop)
            if stop_at is not None:
                cut, finish = stop_at, "stop"
        response = tokens[:cut]
        return Sample(
            prompt_ids=list(prompt),
            response_ids=response,
            logprobs=logprobs[:cut],
            finish_reason=finish,
            policy_version=self.policy_version,
            text=self.tokenizer.decode(response, skip_special_tokens=True),
        )

    def _stop_string_end(self, tokens: list[int], stops: list[str]) -> int | None:
        """Smallest k such that tokens[:k] decodes to text containing a stop string, else None."""
        decode = self.tokenizer.decode
        if not any(s in decode(tokens) for s in stops):
            return None
        lo, hi = 1, len(tokens)
        while lo < hi:
            mid = (lo + hi) // 2
            if any(s in decode(tokens[:mid]) for s in stops):
                hi = mid
            else:
                lo = mid + 1
        return lo
