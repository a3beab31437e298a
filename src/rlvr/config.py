"""Configuration: a pydantic v2 schema, YAML loading, dotted overrides and errors that name the fix.

    cfg = load_config("recipes/grpo.yaml", ["train.steps=50", "optim.lr=3e-4"])

Pluggable sections (`task`, `algorithm.advantage`, `algorithm.loss`, `rewards[i]`) are a `name` plus that
component's own parameters; they are checked against the registered component's signature when the config
is validated, so `rlvr config show` prints every default that will be used.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, Literal

import pydantic
import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rlvr.agent_config import AgentConfig, ComponentSpec
from rlvr.errors import ConfigError  # noqa: F401  (re-exported: `from rlvr.config import ConfigError`)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_assignment=True)


class RewardSpec(ComponentSpec):
    weight: float = 1.0
    gate: str | None = None  # count this term only when reward `gate` >= gate_threshold (G-RA)
    gate_threshold: float = 1.0


class RunConfig(Strict):
    name: str | None = Field(None, description="Run name; default: the recipe's file name.")
    dir: Path | None = Field(None, description="Run directory; default: <output_dir>/<name>-<timestamp>.")
    output_dir: Path = Path("runs")
    seed: int = Field(0, ge=0, description="Seeds every random choice: data order, sampling, init.")


class LoraSpec(Strict):
    """LoRA adapters on the policy (peft): only they train; checkpoints hold the merged model."""

    r: int = Field(16, ge=1, description="Adapter rank.")
    alpha: float = Field(32.0, gt=0, description="Scaling numerator: updates are scaled by alpha / r.")
    dropout: float = Field(0.0, ge=0, lt=1, description="Adapter dropout (0 keeps sampler and learner "
                           "log-probs consistent).")
    target_modules: list[str] | Literal["all-linear"] = Field(
        "all-linear", description="Module names to adapt, e.g. [q_proj, v_proj]; all-linear: every linear "
        "layer but the LM head."
    )


class ModelConfig(Strict):
    path: str = Field("builtin", description="Local HF checkpoint dir, or 'builtin' for the shipped model.")
    reference_path: str | None = Field(None, description="Frozen reference for the KL term; default: path.")
    tokenizer_path: str | None = Field(None, description="Tokenizer dir; default: path.")
    dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="auto: float32 on CPU, bfloat16 on GPU."
    )
    device: str = Field("auto", description="auto, cpu, cuda, cuda:N or mps.")
    chat_template: Literal["auto", "on", "off"] = Field(
        "auto", description="auto: use the tokenizer's chat template when it has one."
    )
    trust_remote_code: bool = False
    gradient_checkpointing: bool = False
    lora: LoraSpec | None = Field(None, description="Train LoRA adapters instead of all weights.")

    @field_validator("device")
    @classmethod
    def _device(cls, v: str) -> str:
        if not re.fullmatch(r"auto|cpu|mps|cuda(:\d+)?", v):
            raise ValueError("expected one of auto, cpu, mps, cuda, cuda:N")
        return v


class RolloutConfig(Strict):
    engine: str = Field("fast", description="Rollout engine: fast (rlvr's KV-cache engine; falls back to "
                        "transformers generate for architectures it does not know), hf (transformers generate), "
                        "vllm (GPU).")
    engine_options: dict[str, Any] = Field(default_factory=dict, description="The engine's own options, e.g. "
                                           "fast: {compile: true}.")
    n: int = Field(8, ge=1, description="Samples per prompt (the group size).")
    temperature: float = Field(1.0, gt=0)
    top_p: float = Field(1.0, gt=0, le=1)
    top_k: int = Field(0, ge=0, description="0 disables top-k.")
    max_new_tokens: int = Field(256, ge=1)
    stop: list[str] = Field(default_factory=list, description="Stop strings; the match is kept.")
    batch_size: int = Field(256, ge=1, description="Sequences per generate call (a memory knob).")


class OptimConfig(Strict):
    lr: float = Field(1e-6, gt=0)
    weight_decay: float = Field(0.0, ge=0)
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = Field(1e-8, gt=0)
    warmup_steps: int = Field(0, ge=0, description="Linear warm-up, in optimizer steps.")
    schedule: Literal["constant", "cosine", "linear"] = "constant"
    min_lr_ratio: float = Field(0.0, ge=0, le=1)
    grad_clip: float | None = Field(1.0, gt=0, description="Max global grad norm; null disables.")
    fused: bool = Field(True, description="torch's fused AdamW kernel (one pass per tensor) where the device "
                        "supports it; about 6x faster optimizer steps on a 0.5B model on CPU (make bench).")


class TrainConfig(Strict):
    steps: int = Field(100, ge=1, description="RL steps (one rollout batch each).")
    rollout_token_budget: int | None = Field(
        None, ge=1, description="Also stop once this many response tokens were sampled, counting groups a "
        "sampler dropped: compares samplers at equal rollout cost (train.steps stays the cap)."
    )
    max_time_s: float | None = Field(
        None, gt=0, description="Also stop after this many seconds of training in this invocation (a wall-time "
        "budget; the step in progress finishes, then the run ends normally)."
    )
    prompts_per_step: int = Field(16, ge=1)
    ppo_epochs: int = Field(1, ge=1, description="Passes over each rollout batch.")
    mini_batches: int = Field(1, ge=1, description="Optimizer steps per pass.")
    micro_batch_size: int = Field(64, ge=1, description="Sequences per forward/backward (grad accumulation).")
    micro_batch_tokens: int | None = Field(
        None, ge=1, description="Cut micro-batches by padded tokens (rows x longest row) instead, groups sorted "
        "by length: less compute on padding; micro_batch_size still caps the rows."
    )
    pack_tokens: int | None = Field(
        None, ge=1, description="Pack each micro-batch's rows into sequences of at most this many tokens (a "
        "block-diagonal causal mask, per-row positions): no compute on padding, at the price of attention over "
        "each packed sequence. For qwen2/qwen3/llama/mistral decoders; others run padded. None: padded rows."
    )
    recompute_old_logprobs: bool = Field(
        False, description="Recompute old log-probs with a learner forward instead of using the engine's."
    )
    max_fault_steps: int = Field(3, ge=1, description="Consecutive non-finite steps before the run stops.")
    memory_check: bool = Field(True, description="Estimate memory before training; stop if it cannot fit.")
    prompt_split: Literal["train", "heldout"] = Field(
        "train", description="Draw training prompts from this split; heldout is test-time RL (TTRL)."
    )


class CriticConfig(Strict):
    """A learned value model, for estimators that ask for `values` (GAE)."""

    kind: Literal["separate", "head"] = Field(
        "separate", description="separate: its own backbone; head: a value head on the policy's backbone."
    )
    path: str | None = Field(None, description="Backbone checkpoint of a separate critic; default: model.path.")
    lr: float = Field(1e-5, gt=0, description="Learning rate of the critic (and of the head in head mode).")
    coef: float = Field(0.5, gt=0, description="Weight of the value loss.")
    value_clip: float | None = Field(0.2, gt=0, description="PPO value clipping range; null disables.")
    warmup_steps: int = Field(0, ge=0, description="RL steps that train only the critic before the policy.")


class AlgorithmConfig(Strict):
    advantage: ComponentSpec = Field(default_factory=lambda: ComponentSpec(name="grpo"))
    loss: ComponentSpec = Field(default_factory=lambda: ComponentSpec(name="ppo_clip"))
    loss_agg: Literal["token_mean", "seq_mean_token_mean", "seq_mean_token_sum", "seq_mean_token_sum_norm"] = (
        "token_mean"
    )
    loss_agg_length: int | None = Field(
        None, ge=1, description="seq_mean_token_sum_norm's constant length (Dr.GRPO); default rollout.max_new_tokens."
    )
    kl_coef: float = Field(0.0, ge=0, description="Weight of the KL-to-reference term; 0 loads no reference.")
    kl_estimator: str = Field("k3", description="k1, k2, k3 (reverse KL) or a forward-KL estimator.")
    kl_placement: Literal["loss", "reward"] = Field(
        "loss", description="loss: a KL term in the loss; reward: a per-token penalty subtracted from the reward."
    )
    kl_target: float | None = Field(None, gt=0, description="Adaptive KL coefficient aiming at this KL.")
    kl_horizon: int = Field(10_000, ge=1, description="Adaptive KL controller horizon, in samples.")
    reference_reset_every: int = Field(
        0, ge=0, description="Every N steps, copy the policy into the reference and reset the optimizer (ProRL)."
    )
    entropy_coef: float = Field(0.0, ge=0, description="Entropy bonus weight (initial value with a target).")
    entropy_target: float | None = Field(None, gt=0, description="Adapt entropy_coef towards this entropy.")
    top_entropy_ratio: float | None = Field(
        None, gt=0, le=1, description="Policy gradient only on this fraction of highest-entropy tokens."
    )
    tis_cap: float | None = Field(
        None, gt=0, description="Truncated importance sampling against the engine's log-probs, capped here."
    )
    critic: CriticConfig | None = Field(None, description="A value model (needed by gae).")


class CheckpointConfig(Strict):
    every: int = Field(0, ge=0, description="Save every N steps; 0 saves only at the end.")
    keep_last: int = Field(2, ge=1, description="Checkpoints kept; the newest valid one is never deleted.")


class EvalConfig(Strict):
    before: bool = Field(False, description="Evaluate the starting model on the held-out split.")
    after: bool = Field(False, description="Evaluate the final model on the held-out split.")
    every: int = Field(0, ge=0, description="Also evaluate every N steps; 0 disables.")
    n: int = Field(8, ge=1, description="Samples per held-out prompt.")
    ks: list[int] = Field(default_factory=lambda: [1], description="k values for pass@k (each <= n).")
    size: int | None = Field(None, ge=1, description="Held-out prompts to use; default: all.")
    temperature: float | None = Field(None, gt=0, description="Default: rollout.temperature.")

    @field_validator("ks")
    @classmethod
    def _ks(cls, ks: list[int], info: pydantic.ValidationInfo) -> list[int]:
        n = info.data.get("n", 1)
        if not ks or any(k < 1 or k > n for k in ks):
            raise ValueError(f"each k must lie in 1..eval.n={n}")
        return ks


class DistributedConfig(Strict):
    """Where the stages run: in this process (local), or rollout workers as Ray actors (ray)."""

    backend: Literal["local", "ray"] = Field("local", description="local: one process; ray: rollout actors.")
    learner: Literal["ddp", "fsdp2"] = Field(
        "ddp", description="With torchrun ranks: ddp keeps the whole policy on every rank and sums gradients; "
        "fsdp2 shards the decoder layers' weights, gradients and optimizer state (docs/scaling.md).")
    address: str | None = Field(None, description="None: start a local Ray runtime; 'auto': join the cluster "
                                "started with `ray start`; or ray://host:port.")
    num_cpus: int | None = Field(None, ge=1, description="CPUs of a local Ray runtime; default: all.")
    rollout_workers: int = Field(2, ge=1, description="Rollout engine replicas (Ray actors).")
    cpus_per_rollout_worker: float = Field(1.0, gt=0)
    gpus_per_rollout_worker: float = Field(0.0, ge=0, description="> 0 places workers on GPUs (separate "
                                           "from the learner's unless fractions let them share).")
    weight_sync: Literal["object_store", "broadcast"] = Field(
        "object_store", description="How new weights reach the rollout workers: through Ray's object store, or "
        "broadcast over a process group of the controller and the workers (gloo; NCCL on GPUs).")
    reward_workers: int = Field(0, ge=0, description="Ray actors that run the correctness verifier (each with "
                                "its own process pool); 0: the controller's pool.")
    cpus_per_reward_worker: float = Field(1.0, gt=0)
    reference_worker: bool = Field(False, description="Run the frozen reference model (KL terms) in its own Ray "
                                   "actor instead of beside the learner.")
    cpus_per_reference_worker: float = Field(1.0, gt=0)
    gpus_per_reference_worker: float = Field(0.0, ge=0, description="> 0 puts the reference on a GPU of its own "
                                             "(or a fraction of one).")
    learner_workers: int = Field(0, ge=0, description="Data-parallel learner ranks as Ray actors (one process "
                                 "group; docs/scaling.md); 0: the learner runs in the controller.")
    cpus_per_learner_worker: float = Field(1.0, gt=0)
    gpus_per_learner_worker: float = Field(0.0, ge=0, description="> 0 puts each learner rank on a GPU of its "
                                           "own (NCCL between ranks), or a fraction of one.")
    mode: Literal["sync", "async"] = Field("sync", description="async: workers generate the next batches while "
                                           "the learner trains (needs backend=ray).")
    max_staleness: int = Field(1, ge=0, description="async: a sample may be at most this many policy versions "
                               "old; 0 reproduces synchronous training.")
    stale: Literal["drop", "requeue"] = Field("drop", description="What to do with samples older than allowed.")
    off_policy_correction: Literal["none", "tis", "decoupled"] = Field(
        "tis", description="async: none (PPO against the behaviour policy), tis (truncated importance sampling "
        "with the learner's recomputed log-probs), decoupled (decoupled PPO: untruncated)."
    )


class LoggingConfig(Strict):
    console_every: int = Field(1, ge=1, description="Print a metrics line every N steps.")
    progress: bool = Field(True, description="Show a progress bar (off when not a terminal).")
    sinks: list[Literal["jsonl", "tensorboard", "wandb", "mlflow"]] = Field(
        default_factory=lambda: ["jsonl"],
        description="Metric sinks: jsonl (always on), tensorboard, wandb (offline), mlflow (local file store).",
    )
    rollouts_every: int = Field(10, ge=0, description="Store sample prompts/responses every N steps; 0 disables.")
    rollouts_per_step: int = Field(16, ge=0, description="At most this many samples per stored step.")


class Config(Strict):
    """A full training run."""

    run: RunConfig = Field(default_factory=RunConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    task: ComponentSpec = Field(default_factory=lambda: ComponentSpec(name="addition"))
    rewards: list[RewardSpec] = Field(default_factory=lambda: [RewardSpec(name="correctness")])
    sampling: ComponentSpec = Field(default_factory=lambda: ComponentSpec(name="uniform"),
                                    description="Which prompts, how many samples, which groups (a batch sampler).")
    rollout: RolloutConfig = Field(default_factory=RolloutConfig)
    algorithm: AlgorithmConfig = Field(default_factory=AlgorithmConfig)
    train: TrainConfig = Field(default_factory=TrainConfig)
    optim: OptimConfig = Field(default_factory=OptimConfig)
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    eval: EvalConfig = Field(default_factory=EvalConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)
    distributed: DistributedConfig = Field(default_factory=DistributedConfig)
    agent: AgentConfig | None = Field(None, description="Multi-turn rollouts with tools or an environment "
                                      "(docs/agents.md); absent: single-turn.")

    @model_validator(mode="after")
    def _bind_components(self, validation: pydantic.ValidationInfo) -> Config:
        if validation.context and validation.context.get("bind_components") is False:
            return self
        problems = resolve_components(self)
        if problems:
            raise ValueError("\n".join(problems))
        return self


# -- SFT -----------------------------------------------------------------------------------------------


class SFTDataConfig(Strict):
    path: Path = Field(..., description="JSONL (or Parquet) file with prompt and completion columns.")
    prompt_column: str = "prompt"
    completion_column: str = "completion"
    max_length: int = Field(512, ge=2, description="Examples longer than this (tokens) are dropped.")


class SFTTrainConfig(Strict):
    steps: int = Field(1000, ge=1)
    batch_size: int = Field(32, ge=1)
    micro_batch_size: int = Field(64, ge=1)


class SFTConfig(Strict):
    """Supervised fine-tuning on prompt/completion pairs (loss on completion tokens only)."""

    run: RunConfig = Field(default_factory=RunConfig)
    model: ModelConfig = Field(default_factory=ModelConfig)
    data: SFTDataConfig
    train: SFTTrainConfig = Field(default_factory=SFTTrainConfig)
    optim: OptimConfig = Field(default_factory=lambda: OptimConfig(lr=1e-4))
    checkpoint: CheckpointConfig = Field(default_factory=CheckpointConfig)
    logging: LoggingConfig = Field(default_factory=LoggingConfig)


# -- component binding ---------------------------------------------------------------------------------


def resolve_components(cfg: Config) -> list[str]:
    """Check each pluggable section against its registry and fill in its defaults. Returns problems."""
    from rlvr.algorithms import ADVANTAGES, LOSSES
    from rlvr.registry import RegistryError
    from rlvr.rewards import REWARDS
    from rlvr.rollout import ENGINES
    from rlvr.sampling import SAMPLERS
    from rlvr.tasks import TASKS

    problems: list[str] = []

    def fill(spec: ComponentSpec, registry: Any, where: str) -> None:
        try:
            resolved = registry.resolve(spec.name, spec.params, where)
        except RegistryError as err:
            problems.extend(str(err).splitlines())
            return
        for k, v in resolved.items():
            setattr(spec, k, v)

    fill(cfg.task, TASKS, "task")
    fill(cfg.sampling, SAMPLERS, "sampling")
    fill(cfg.algorithm.advantage, ADVANTAGES, "algorithm.advantage")
    fill(cfg.algorithm.loss, LOSSES, "algorithm.loss")
    for i, r in enumerate(cfg.rewards):
        fill(r, REWARDS, f"rewards[{i}]")
    if cfg.rollout.engine not in ENGINES:
        problems.append(f"rollout.engine: unknown engine '{cfg.rollout.engine}'. Available: "
                        f"{', '.join(ENGINES.names())}")
    elif cfg.rollout.engine_options:
        if "batch_size" in cfg.rollout.engine_options:
            problems.append("rollout.engine_options.batch_size: set rollout.batch_size instead")
        try:
            ENGINES.resolve(cfg.rollout.engine, cfg.rollout.engine_options, "rollout.engine_options")
        except RegistryError as err:
            problems.append(str(err))
    if not cfg.rewards:
        problems.append("rewards: at least one reward component is needed")
    names = [r.name for r in cfg.rewards]
    for i, r in enumerate(cfg.rewards):
        if r.gate is not None and (r.gate not in names or r.gate == r.name):
            problems.append(f"rewards[{i}].gate: must name another reward in this list ({', '.join(names)}); "
                            f"got {r.gate!r}")
    if len(set(names)) != len(names):
        problems.append(f"rewards: each component may appear once; got {names}")
    problems.extend(_algorithm_problems(cfg))
    d = cfg.distributed
    if d.backend != "ray":
        if d.reward_workers:
            problems.append("distributed.reward_workers: reward workers are Ray actors; set distributed.backend=ray "
                            "(or reward_workers=0)")
        if d.reference_worker:
            problems.append("distributed.reference_worker: the reference worker is a Ray actor; set "
                            "distributed.backend=ray (or reference_worker=false)")
        if d.weight_sync != "object_store":
            problems.append("distributed.weight_sync: only Ray rollout workers receive weights; set "
                            "distributed.backend=ray (or weight_sync=object_store)")
        if d.learner_workers:
            problems.append("distributed.learner_workers: learner workers are Ray actors; set distributed.backend=ray "
                            "(or learner_workers=0; for a data-parallel learner without Ray, use torchrun)")
    if d.learner_workers and d.reference_worker:
        problems.append("distributed.reference_worker: with distributed.learner_workers every learner rank holds "
                        "its own reference; set reference_worker=false")
    if d.reward_workers and "correctness" not in [r.name for r in cfg.rewards]:
        problems.append("distributed.reward_workers: the reward workers run the `correctness` verifier, and "
                        f"rewards has none ({', '.join(r.name for r in cfg.rewards)}); set reward_workers=0")
    if d.mode == "async" and d.backend != "ray":
        problems.append("distributed.mode: async needs separate rollout workers; set distributed.backend=ray")
    if d.mode == "async" and cfg.sampling.name != "uniform":
        problems.append(f"distributed.mode: async generates batches ahead, so it works with sampling=uniform only; "
                        f"got sampling {cfg.sampling.name!r}")
    if cfg.train.mini_batches > cfg.train.prompts_per_step:
        problems.append(
            f"train.mini_batches: mini-batches hold whole groups, so there can be at most "
            f"train.prompts_per_step={cfg.train.prompts_per_step} of them; got {cfg.train.mini_batches}"
        )
    if d.learner == "fsdp2":
        for bad, why in ((cfg.model.lora is not None, "model.lora (adapters are not sharded)"),
                         (cfg.algorithm.critic is not None, "algorithm.critic (the critic is not sharded)"),
                         (bool(cfg.algorithm.reference_reset_every),
                          "algorithm.reference_reset_every (the reset copies whole policy weights)"),
                         (d.backend == "ray", "distributed.backend=ray (rollout workers are Ray actors; the "
                          "sharded learner runs under torchrun)")):
            if bad:
                problems.append(f"distributed.learner: fsdp2 does not support {why}; use distributed.learner=ddp")
    if cfg.model.lora is not None:
        if d.backend == "ray":
            problems.append("model.lora: Ray rollout workers receive full weights, not adapters; use "
                            "distributed.backend=local with LoRA")
        if cfg.algorithm.reference_reset_every:
            problems.append("model.lora: the reference reset (ProRL) copies full policy weights; unset "
                            "algorithm.reference_reset_every or train without LoRA")
        if cfg.algorithm.critic is not None and cfg.algorithm.critic.kind == "head":
            problems.append("model.lora: a value head on the adapted policy is not supported; use "
                            "algorithm.critic.kind=separate")
    return problems


def _algorithm_problems(cfg: Config) -> list[str]:
    """Cross-checks between the estimator, the loss and the algorithm options."""
    from rlvr.algorithms import ADVANTAGES, KL_ESTIMATORS, LOSSES
    from rlvr.algorithms.inputs import ADVANTAGE_INPUTS, LOSS_INPUTS, check_inputs, tensor_inputs

    a = cfg.algorithm
    problems: list[str] = []
    adv_inputs: list[str] = []
    if a.advantage.name in ADVANTAGES:
        fn = ADVANTAGES.get(a.advantage.name)
        problems += check_inputs(fn, ADVANTAGE_INPUTS, f"algorithm.advantage '{a.advantage.name}'")
        adv_inputs = tensor_inputs(fn)
        if getattr(fn, "needs_group", False) and cfg.rollout.n < 2:
            problems.append(
                f"rollout.n: the '{a.advantage.name}' advantage compares samples within each group, so it needs "
                f"rollout.n >= 2; got {cfg.rollout.n}"
            )
    if a.loss.name in LOSSES:
        problems += check_inputs(LOSSES.get(a.loss.name), LOSS_INPUTS, f"algorithm.loss '{a.loss.name}'")
    if "values" in adv_inputs and a.critic is None:
        problems.append(f"algorithm.critic: the '{a.advantage.name}' advantage needs a value model; set "
                        "algorithm.critic.kind=separate (its own backbone) or head (a value head on the policy)")
    if a.critic is not None and a.advantage.name in ADVANTAGES and "values" not in adv_inputs:
        problems.append(f"algorithm.critic: the '{a.advantage.name}' advantage does not use values; remove "
                        "algorithm.critic or use advantage gae")
    if a.kl_estimator not in KL_ESTIMATORS:
        problems.append(f"algorithm.kl_estimator: expected one of {', '.join(KL_ESTIMATORS)}; got {a.kl_estimator!r}")
    if a.reference_reset_every and a.kl_coef == 0:
        problems.append("algorithm.reference_reset_every: resetting the reference needs a KL term; set "
                        "algorithm.kl_coef > 0")
    if a.kl_target is not None and a.kl_coef == 0:
        problems.append("algorithm.kl_target: the adaptive KL controller starts from kl_coef; set kl_coef > 0")
    if a.entropy_target is not None and a.entropy_coef == 0:
        problems.append("algorithm.entropy_target: the entropy controller starts from entropy_coef; set "
                        "entropy_coef > 0")
    return problems


# -- loading -------------------------------------------------------------------------------------------


def parse_override(item: str) -> tuple[list[str], Any]:
    """`a.b.c=value` -> (["a","b","c"], value), the value parsed as YAML (numbers, bools, lists)."""
    if "=" not in item:
        raise ConfigError(f"override '{item}': expected key.sub=value")
    key, raw = item.split("=", 1)
    key = key.strip()
    if not re.fullmatch(r"[A-Za-z_][\w]*(\.[\w]+)*", key):
        raise ConfigError(f"override '{item}': '{key}' is not a dotted key like train.steps")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
    return key.split("."), value


def _component_default(schema: type[BaseModel] | None, path: list[str]) -> dict[str, Any]:
    """For a missing section that is a component (task, algorithm.advantage, ...), its default name."""
    model: Any = schema
    field = None
    for part in path:
        field = getattr(model, "model_fields", {}).get(part) if model is not None else None
        if field is None:
            return {}
        model = field.annotation if isinstance(field.annotation, type) else None
    if field is not None and model is not None and issubclass(model, ComponentSpec) and field.default_factory:
        return {"name": field.default_factory().name}  # type: ignore[call-arg]
    return {}


# Sections that select a registered component: (path to the section, key holding the name, key holding the
# parameters or None when they sit beside the name, keys of the section that are not the component's own).
_SWITCHABLE: tuple[tuple[tuple[str, ...], str, str | None, frozenset[str]], ...] = (
    (("task",), "name", None, frozenset()),
    (("sampling",), "name", None, frozenset()),
    (("algorithm", "advantage"), "name", None, frozenset()),
    (("algorithm", "loss"), "name", None, frozenset()),
    (("rewards", "*"), "name", None, frozenset({"weight", "gate", "gate_threshold"})),
    (("rollout",), "engine", "engine_options", frozenset()),
    (("agent", "environment"), "name", None, frozenset()),
    (("agent", "tools", "*"), "name", None, frozenset()),
)


def _registry_for(path: tuple[str, ...]) -> Any:
    from rlvr.algorithms import ADVANTAGES, LOSSES
    from rlvr.rewards import REWARDS
    from rlvr.rollout import ENGINES, ENVIRONMENTS, TOOLS
    from rlvr.sampling import SAMPLERS
    from rlvr.tasks import TASKS

    return {("task",): TASKS, ("sampling",): SAMPLERS, ("algorithm", "advantage"): ADVANTAGES,
            ("algorithm", "loss"): LOSSES, ("rewards", "*"): REWARDS, ("rollout",): ENGINES,
            ("agent", "environment"): ENVIRONMENTS, ("agent", "tools", "*"): TOOLS}[path]


def _sections(data: Any, path: tuple[str, ...]) -> list[tuple[tuple[str, ...], Any]]:
    """The sections of `data` at `path` ('*' = every list item), with their concrete paths."""
    found: list[tuple[tuple[str, ...], Any]] = [((), data)]
    for part in path:
        nxt: list[tuple[tuple[str, ...], Any]] = []
        for where, node in found:
            if part == "*" and isinstance(node, list):
                nxt += [((*where, str(i)), item) for i, item in enumerate(node)]
            elif isinstance(node, dict) and part in node:
                nxt.append(((*where, part), node[part]))
        found = nxt
    return found


def _component_name(section: Any, name_key: str) -> str | None:
    if isinstance(section, str):
        return section if name_key == "name" else None
    if isinstance(section, dict) and isinstance(section.get(name_key), str):
        return section[name_key]
    return None


def drop_stale_parameters(before: dict[str, tuple[Any, str | None]], data: dict[str, Any],
                          explicit: set[tuple[str, ...]]) -> list[str]:
    """After overrides switched a component's name, drop the old component's parameters the new one does not
    take, unless an override set them explicitly (those still fail validation, naming the key).

    `before` maps each switchable section's concrete path (dotted) to (the section object, its name) before
    the overrides; `explicit` holds every overridden key path. Returns one info line per switched section.
    """
    notes: list[str] = []
    for path, name_key, params_key, own in _SWITCHABLE:
        for where, section in _sections(data, path):
            dotted = ".".join(where)
            if dotted not in before or not isinstance(section, dict):
                continue
            old_section, old_name = before[dotted]
            if old_name is None and name_key == "engine" and isinstance(old_section, dict):
                old_name = RolloutConfig.model_fields["engine"].default  # the recipe kept the default engine
            new_name = _component_name(section, name_key)
            if section is not old_section or old_name is None or new_name in (None, old_name):
                continue  # replaced as a whole (its keys are the override's), or not switched
            registry = _registry_for(path)
            if new_name not in registry:
                continue  # validation reports the unknown name
            valid = set(registry.params_model(new_name).model_fields)
            holder, holder_path = section, where
            if params_key is not None:
                holder, holder_path = section.get(params_key), (*where, params_key)
                if not isinstance(holder, dict):
                    continue
            dropped = [k for k in list(holder) if k not in valid and k not in own and k != name_key
                       and (*holder_path, k) not in explicit and holder_path not in explicit]
            for k in dropped:
                del holder[k]
            if dropped:
                keys = ", ".join(".".join((*holder_path, k)) for k in dropped)
                notes.append(f"{dotted}.{name_key} changed from {old_name!r} to {new_name!r}: dropped {keys} "
                             f"({new_name!r} does not take {'it' if len(dropped) == 1 else 'them'})")
    return notes


def apply_overrides(data: dict[str, Any], overrides: list[str], schema: type[BaseModel] | None = None,
                    notes: list[str] | None = None) -> dict[str, Any]:
    """Apply `key.sub=value` overrides in order. When one switches a component's name (task.name=...,
    rollout.engine=...), the previous component's parameters that the new one does not take are dropped (an
    info line per switch is appended to `notes`); parameters given explicitly are kept, so they still fail."""
    before = {".".join(where): (section, _component_name(section, name_key))
              for path, name_key, _, _ in _SWITCHABLE for where, section in _sections(data, path)}
    explicit: set[tuple[str, ...]] = set()
    for item in overrides:
        explicit.add(tuple(parse_override(item)[0]))
    _apply(data, overrides, schema)
    found = drop_stale_parameters(before, data, explicit)
    if notes is not None:
        notes.extend(found)
    return data


def _apply(data: dict[str, Any], overrides: list[str], schema: type[BaseModel] | None) -> None:
    for item in overrides:
        path, value = parse_override(item)
        node: Any = data
        for i, part in enumerate(path[:-1]):
            if isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
                continue
            nxt = node.get(part) if isinstance(node, dict) else None
            if nxt is None:
                nxt = _component_default(schema, path[: i + 1])
                node[part] = nxt
            elif isinstance(nxt, str) and i + 1 < len(path):
                nxt = {"name": nxt}  # `task: addition` then `task.digits=...`
                node[part] = nxt
            elif not isinstance(nxt, (dict, list)):
                raise ConfigError(f"override '{item}': '{'.'.join(path[: i + 1])}' is a value, not a section")
            node = nxt
        last = path[-1]
        if isinstance(node, list):
            if not (last.isdigit() and int(last) < len(node)):
                raise ConfigError(f"override '{item}': list index '{last}' out of range")
            node[int(last)] = value
        else:
            node[last] = value


def read_yaml(path: str | Path) -> dict[str, Any]:
    p = Path(path)
    if not p.is_file():
        raise ConfigError(f"recipe file '{path}' not found (looked for {p.resolve()})")
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping of sections at the top, got {type(data).__name__}")
    return data


def validate(schema: type[Strict], data: dict[str, Any], source: str | None = None) -> Any:
    """Validate in two passes. The first checks the plain schema (unknown keys, types, ranges) without binding
    components, so it imports no registry and hence no torch: a typo is reported in a fraction of a second.
    The second binds each component to its registry entry (which imports torch)."""
    for context in ({"bind_components": False}, None):
        try:
            cfg = schema.model_validate(data, context=context)
        except pydantic.ValidationError as err:
            raise ConfigError(format_validation_error(err, schema), source) from None
    return cfg


def info(line: str) -> None:
    """An info line for the person at the console (stderr, so `rlvr config show > x.yaml` stays clean)."""
    print(f"info: {line}", file=sys.stderr)


def load_config(path: str | Path | None, overrides: list[str] | None = None, schema: type[Strict] = Config,
                notes: list[str] | None = None):
    """Read a recipe, apply `key.sub=value` overrides and validate. Raises ConfigError.

    Info lines (parameters dropped by a component switch) go to `notes` if given, else to stderr."""
    data = read_yaml(path) if path is not None else {}
    found: list[str] = []
    data = apply_overrides(data, list(overrides or []), schema, found)
    if notes is not None:
        notes.extend(found)
    else:
        for line in found:
            info(line)
    cfg = validate(schema, data, str(path) if path else None)
    if cfg.run.name is None:
        cfg.run.name = Path(path).stem if path else schema.__name__.lower().replace("config", "") or "run"
    return cfg


def dump_config(cfg: BaseModel) -> str:
    return yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False, default_flow_style=None)


def format_validation_error(err: pydantic.ValidationError, schema: type[BaseModel]) -> list[str]:
    from rlvr.registry import format_pydantic_errors

    return format_pydantic_errors(err, schema)
