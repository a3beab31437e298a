"""Environments from other libraries behind rlvr's Env API (`reset(record)`, `step(text)`): a verifiers
environment's own turn loop (`agent.environment=verifiers`) and an OpenEnv server (`agent.environment=openenv`)."""

from rlvr.rollout.ecosystem import openenv_env, verifiers_env  # noqa: F401  (registration)
