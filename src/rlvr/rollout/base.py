"""The rollout stage: an engine samples n responses per prompt and returns them as Groups of Samples."""

from __future__ import annotations

import abc
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from typing import Any

from rlvr.registry import Registry
from rlvr.types import Group, Sample, TaskRecord

ENGINES: Registry = Registry("rollout engine")


@dataclass
class SamplingParams:
    n: int = 1
    temperature: float = 1.0  # 0 means greedy
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int = 256
    stop: list[str] = field(default_factory=list)


class RolloutEngine(abc.ABC):
    """Generates token ids with behaviour log-probs. Token in, token out: prompts arrive as ids."""

    policy_version: int = 0
    multimodal: bool = False  # implements `generate_multimodal` (image prompts)

    @abc.abstractmethod
    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Sample]]:
        """For each prompt, `params.n` samples (prompt_ids, response_ids, logprobs, finish_reason, text)."""

    def generate_multimodal(self, prompts: Sequence[Sequence[int]], mm_inputs: Sequence[dict[str, Any]],
                            params: SamplingParams) -> list[list[Sample]]:
        """`generate` for vision-language prompts: prompt i's ids hold its expanded image tokens and `mm_inputs[i]`
        the processor's other outputs (pixel values). Engines that take images set `multimodal = True`."""
        raise NotImplementedError(f"the {type(self).__name__} rollout engine does not take images; use "
                                  "rollout.engine=hf for vision-language tasks")

    def sync_weights(self, model: Any, version: int) -> None:
        """Make the engine sample from `model`'s current weights, tagged as policy `version`."""
        self.policy_version = version

    def prefix_cache(self, max_bytes: int) -> AbstractContextManager[Any]:
        """Within this block, keep the KV of prompts (and of the responses decoded from them) across `generate`
        calls, so that a prompt extending an earlier one prefills only its new tokens (tree search). The weights
        must not change inside the block. Yields the cache (its `stats`), or None where the engine has no such
        cache (this default: every call prefills its whole prompt)."""
        return nullcontext(None)

    def sleep(self) -> None:  # noqa: B027  (optional hook: most engines keep their memory)
        """Free what the engine holds while the learner trains (a colocated engine's KV cache). Default: keep it."""

    def wake(self) -> None:  # noqa: B027
        """Undo `sleep` before the next rollout."""

    def metrics(self) -> dict[str, float]:
        """Placement metrics of the step (e.g. Ray worker restarts); none for an in-process engine."""
        return {}

    def shutdown(self) -> None:  # noqa: B027
        """Release workers, servers and memory; the engine is unusable afterwards."""


def rollout_groups(
    engine: RolloutEngine,
    renderer: Any,
    records: Sequence[TaskRecord],
    params: SamplingParams,
) -> list[Group]:
    """Render each record's prompt, sample `params.n` responses for it, and return one Group per record.

    Vision-language prompts (`renderer.multimodal`) go to `engine.generate_multimodal`, and every sample keeps
    its prompt's `mm_inputs` for the learner; a record whose image does not decode is skipped (no group) and
    counted in `renderer.skipped_images`."""
    if getattr(renderer, "multimodal", False):
        return _multimodal_groups(engine, renderer, records, params)
    rendered = [renderer.render(r) for r in records]
    samples = engine.generate([ids for ids, _ in rendered], params)
    return [Group(record=r, prompt_ids=ids, samples=s, prompt_text=text)
            for r, (ids, text), s in zip(records, rendered, samples)]


def _multimodal_groups(engine: RolloutEngine, renderer: Any, records: Sequence[TaskRecord],
                       params: SamplingParams) -> list[Group]:
    kept = [(r, out) for r in records if (out := renderer.render_or_skip(r)) is not None]
    if not kept:
        return []
    samples = engine.generate_multimodal([ids for _, (ids, _, _) in kept], [mm for _, (_, _, mm) in kept], params)
    groups = []
    for (record, (ids, text, mm)), group_samples in zip(kept, samples):
        for sample in group_samples:
            sample.mm_inputs = mm  # shared by the group's samples: one object, not a copy
        groups.append(Group(record=record, prompt_ids=ids, samples=group_samples, prompt_text=text))
    return groups


def build_engine(name: str, options: dict[str, Any], batch_size: int, model: Any, tokenizer: Any) -> RolloutEngine:
    """Engine `name` (`rollout.engine`) with its `rollout.engine_options` and `rollout.batch_size` over `model`."""
    return ENGINES.build(name, {**options, "batch_size": batch_size}, where="rollout.engine_options", model=model,
                         tokenizer=tokenizer)
