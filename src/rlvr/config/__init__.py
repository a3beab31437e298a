"""Configuration: a pydantic v2 schema, YAML loading, dotted overrides and errors that name the fix.

    cfg = load_config("recipes/grpo.yaml", ["train.steps=50", "optim.lr=3e-4"])

Pluggable sections (`task`, `algorithm.advantage`, `algorithm.loss`, `rewards[i]`) are a `name` plus that
component's own parameters; they are checked against the registered component's signature when the config
is validated, so `rlvr config show` prints every default that will be used.

The schema is one module per group of sections (run, model, rollout, algorithm, train, distributed, agent;
the base models in base.py, the whole run in schema.py, SFT in sft.py); loading.py reads and validates a
recipe, overrides.py applies dotted overrides; registries.py holds every check that needs a plug-in registry
(the only module here that imports tasks, rewards, rollout, sampling or algorithms), consistency.py the
checks that do not.
"""

from rlvr.config.agent import AgentConfig, EnvironmentSpec, ToolSpec
from rlvr.config.algorithm import AlgorithmConfig, CriticConfig
from rlvr.config.base import ComponentSpec, Strict
from rlvr.config.coevolve import CoEvolveConfig
from rlvr.config.distributed import DistributedConfig
from rlvr.config.loading import dump_config, format_validation_error, info, load_config, read_yaml, validate
from rlvr.config.model import LoraSpec, ModelConfig
from rlvr.config.overrides import apply_overrides, drop_stale_parameters, parse_override
from rlvr.config.prm import PRMConfig
from rlvr.config.registries import resolve_components
from rlvr.config.rm import RMConfig, RMDataConfig, RMLossConfig, RMTrainConfig
from rlvr.config.rollout import RolloutConfig
from rlvr.config.run import CheckpointConfig, EvalConfig, LoggingConfig, RunConfig
from rlvr.config.schema import Config, RewardSpec
from rlvr.config.sft import SFTConfig, SFTDataConfig, SFTTrainConfig
from rlvr.config.train import OptimConfig, TrainConfig
from rlvr.errors import ConfigError

__all__ = ["AgentConfig", "AlgorithmConfig", "CheckpointConfig", "CoEvolveConfig", "ComponentSpec", "Config", "ConfigError",
           "CriticConfig", "DistributedConfig", "EnvironmentSpec", "EvalConfig", "LoggingConfig", "LoraSpec",
           "ModelConfig", "OptimConfig", "PRMConfig", "RMConfig", "RMDataConfig", "RMLossConfig",
           "RMTrainConfig", "RewardSpec", "RolloutConfig", "RunConfig", "SFTConfig",
           "SFTDataConfig", "SFTTrainConfig", "Strict", "ToolSpec", "TrainConfig", "apply_overrides",
           "drop_stale_parameters", "dump_config", "format_validation_error", "info", "load_config",
           "parse_override", "read_yaml", "resolve_components", "validate"]
