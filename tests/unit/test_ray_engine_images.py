"""RayEngine.submit refuses image prompts for a text-only worker engine with a ConfigError naming the key."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

pytest.importorskip("ray")

from rlvr.distributed.ray_engine import RayEngine  # noqa: E402
from rlvr.errors import ConfigError  # noqa: E402
from rlvr.rollout import SamplingParams  # noqa: E402


def test_text_only_worker_engine_with_images_names_rollout_engine():
    engine = RayEngine.__new__(RayEngine)  # no workers: the check comes before any is used
    engine.cfg = SimpleNamespace(rollout=SimpleNamespace(engine="text_only"))
    engine.multimodal = False
    with pytest.raises(ConfigError, match=r"rollout\.engine: the text_only engine .* set rollout\.engine=hf"):
        engine.submit([[1, 2, 3]], SamplingParams(n=1, max_new_tokens=2), mm_inputs=[{"pixel_values": None}])
