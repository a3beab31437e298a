"""For the test modules that start a real vLLM engine: skip the module where vLLM cannot run, except under
`make test`, which installed it and sets RLVR_REQUIRE_VLLM=1 (there a skip would hide a failure)."""

from __future__ import annotations

import os

import pytest

from rlvr.rollout.vllm_engine import vllm_status


def require_vllm() -> None:
    """Call at module level, before the imports that need vLLM."""
    usable, why = vllm_status()
    if usable:
        return
    if os.environ.get("RLVR_REQUIRE_VLLM") == "1":
        raise RuntimeError(f"RLVR_REQUIRE_VLLM=1 but vLLM cannot run: {why}")
    pytest.skip(f"vLLM not usable here: {why}", allow_module_level=True)
