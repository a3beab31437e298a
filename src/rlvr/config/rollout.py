"""The `rollout` section: the engine that samples and its sampling parameters."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from rlvr.config.base import Strict


class RolloutConfig(Strict):
    engine: str = Field("fast", description="Rollout engine: fast (rlvr's KV-cache engine; falls back to "
                        "transformers generate for architectures it does not know), hf (transformers generate), "
                        "vllm (GPU).")
    engine_options: dict[str, Any] = Field(default_factory=dict, description="The engine's own options, e.g. "
                                           "fast: {compile: true}.")
    n: int = Field(8, ge=1, description="Samples per prompt (the group size).")
    temperature: float = Field(1.0, gt=0, description="Sampling temperature of the rollouts.")
    top_p: float = Field(1.0, gt=0, le=1, description="Nucleus sampling: keep the smallest set of tokens with this mass.")
    top_k: int = Field(0, ge=0, description="0 disables top-k.")
    max_new_tokens: int = Field(256, ge=1, description="The longest response, in tokens (a longer one is cut: truncated).")
    stop: list[str] = Field(default_factory=list, description="Stop strings; the match is kept.")
    batch_size: int = Field(256, ge=1, description="Sequences per generate call (a memory knob).")
    mode: Literal["engine", "openai_server"] = Field(
        "engine", description="engine: rlvr drives the engine (single-turn, or the agent: loop); openai_server: "
        "a local OpenAI-compatible endpoint in front of the engine, driven by agent.harness (docs/environments.md).")
    server_batch_wait_ms: float = Field(5.0, ge=0, description="openai_server: how long the server gathers "
                                        "concurrent requests into one engine call.")
