"""Rollout engines and the rollout stage: single-turn (`rollout_groups`) and multi-turn agentic
(`agent_rollout_groups`, with environments and tools)."""

from rlvr.rollout import ecosystem, fast, hf, vllm_engine  # noqa: F401  (registration)
from rlvr.rollout.agent import agent_metrics, agent_rollout_groups, build_env_factory
from rlvr.rollout.base import ENGINES, RolloutEngine, SamplingParams, build_engine, rollout_groups
from rlvr.rollout.env import ENVIRONMENTS, Environment, StepResult
from rlvr.rollout.harness import HarnessRunner, load_harness
from rlvr.rollout.tools import TOOLS, Tool, ToolError, ToolSet

__all__ = ["ENGINES", "ENVIRONMENTS", "TOOLS", "Environment", "HarnessRunner", "RolloutEngine", "SamplingParams",
           "StepResult", "Tool", "ToolError", "ToolSet", "agent_metrics", "agent_rollout_groups", "build_engine",
           "build_env_factory", "load_harness",
           "rollout_groups"]
