"""Everything about a training config that can fail on bad input, checked before the run directory or any
compute exists: the task, the tokenizer, model paths, the engine, the agent's tools, sinks and memory."""

from __future__ import annotations

from typing import Any

import torch

from rlvr.config import Config, ConfigError
from rlvr.learner import needs_reference, needs_teacher
from rlvr.models import load_tokenizer, resolve_device, resolve_dtype, resolve_model_path
from rlvr.models.teacher import check_teacher_tokenizer
from rlvr.models.vision import is_vision_checkpoint, load_processor
from rlvr.roles.placement import uses_teacher_outputs
from rlvr.rollout import ENGINES, build_env_factory, load_harness
from rlvr.rollout.openai_server import require_serve
from rlvr.tasks import PromptRenderer, build_task
from rlvr.tasks.images import ImageError
from rlvr.tracking import check_sinks
from rlvr.trainer.memory import check_memory
from rlvr.trainer.stopping import TrainingError


def preflight(cfg: Config, multi_rank: bool) -> tuple[Any, Any, torch.device]:
    """Check the config against the world; returns the task, the tokenizer and the device."""
    if multi_rank and cfg.distributed.learner_workers:
        raise ConfigError("distributed.learner_workers: the learner ranks are Ray actors, so run this recipe with "
                          "`rlvr train`, not under torchrun (or set learner_workers=0)")
    if cfg.search is not None and cfg.search.compare is not None:
        raise ConfigError("search.compare: beam_prm's preference model re-ranks candidates at evaluation (rlvr eval) "
                          "only; the training sampler does not take it yet; remove search.compare")
    task = build_task(cfg.task.name, cfg.task.params)
    tokenizer = load_tokenizer(cfg.model.tokenizer_path or cfg.model.path,
                               trust_remote_code=cfg.model.trust_remote_code,
                               key="model.tokenizer_path" if cfg.model.tokenizer_path else "model.path")
    resolve_model_path(cfg.model.path)
    if needs_reference(cfg) and cfg.model.reference_path:
        resolve_model_path(cfg.model.reference_path, "model.reference_path")
    # a teacher grades the policy's tokens by id, or writes GKD's off-policy samples: the same tokenizer, now
    if needs_teacher(cfg) or uses_teacher_outputs(cfg):
        check_teacher_tokenizer(cfg.model.tokenizer_path or cfg.model.path, cfg.model.teacher_path)
    if cfg.model.lora is not None and not cfg.model.freeze_vision_tower and is_vision_checkpoint(cfg.model.path):
        raise ConfigError("model.freeze_vision_tower: LoRA on a vision-language model adapts its language layers "
                          "only and keeps the vision tower frozen; set model.freeze_vision_tower=true, or remove "
                          "model.lora to train the tower")
    device = resolve_device(cfg.model.device)
    processor = check_vision(cfg, task, tokenizer) if getattr(task, "visual", False) else None
    PromptRenderer(task, tokenizer, cfg.model.chat_template, processor)
    check_sinks(cfg.logging.sinks)
    check_available = getattr(ENGINES.get(cfg.rollout.engine), "check_available", None)
    if callable(check_available):  # e.g. vllm without a GPU: say so now, not after loading the model
        check_available()
    if cfg.agent is not None and cfg.agent.harness is not None:  # the serve extra and the harness, now
        try:
            require_serve()
            load_harness(cfg.agent.harness)
        except (ImportError, ValueError) as err:
            raise ConfigError(str(err)) from None
    elif cfg.agent is not None:  # tools fail here on a missing corpus, database or library
        build_env_factory(cfg.agent).close()
        if cfg.distributed.mode == "async":
            raise ConfigError("agent: multi-turn rollouts run synchronously; set distributed.mode=sync")
    if cfg.train.memory_check:
        try:
            check_memory(cfg, device, resolve_dtype(cfg.model.dtype, device))
        except MemoryError as err:
            raise TrainingError(str(err)) from None
    if multi_rank and device.type == "cuda":
        device = torch.device("cuda", torch.cuda.current_device())
    return task, tokenizer, device


# samplers that render, generate or score outside `rollout_groups`, so they would drop a prompt's images
TEXT_ONLY_SAMPLERS = ("pcl", "ettrl_tree", "cure")


def check_vision(cfg: Config, task: Any, tokenizer: Any) -> Any:
    """A task with images: the model, the engine and the placement must take them. Returns the processor, after
    rendering one held-out prompt (its image placeholders must match its images)."""
    name = cfg.task.name
    paths = [("model.path", cfg.model.path)]
    if needs_reference(cfg) and cfg.model.reference_path:
        paths.append(("model.reference_path", cfg.model.reference_path))
    if needs_teacher(cfg) and cfg.model.teacher_path:  # it scores the sampled tokens given the same images
        paths.append(("model.teacher_path", cfg.model.teacher_path))
    critic = cfg.algorithm.critic
    if critic is not None and critic.kind == "separate" and critic.path:  # a value model that sees the images
        paths.append(("algorithm.critic.path", critic.path))
    for key, path in paths:
        if not is_vision_checkpoint(path, key=key):
            raise ConfigError(f"{key}: '{path}' is a text-only model (its config.json has no vision_config), but task "
                              f"'{name}' has images. Use a vision-language checkpoint, e.g. {key}=builtin-vl")
    engine = ENGINES.get(cfg.rollout.engine)
    if not getattr(engine, "multimodal", False):
        raise ConfigError(f"rollout.engine: the {cfg.rollout.engine} engine does not take images yet; task '{name}' "
                          "has images, so set rollout.engine=hf")
    check_images = getattr(engine, "check_images", None)
    if callable(check_images):  # an engine that takes images from some model types only (vllm: LLaVA-style)
        check_images(cfg.model.path)
    if cfg.agent is not None:
        raise ConfigError(f"agent: not supported with an image task ('{name}') yet; remove it from the config")
    if uses_teacher_outputs(cfg):
        raise ConfigError(f"sampling.off_policy: teacher outputs are sampled without images; task '{name}' has "
                          "images, so use the student's own samples")
    if cfg.sampling.name in TEXT_ONLY_SAMPLERS:
        raise ConfigError(f"sampling.name: the {cfg.sampling.name} sampler builds prompts or scores tokens outside "
                          f"the rollout stage, without the images of task '{name}'; use uniform, dynamic, "
                          "difficulty_filter, a curriculum or reinforce_ada")
    if cfg.model.tokenizer_path:
        raise ConfigError("model.tokenizer_path: a vision-language model uses its own processor's tokenizer; "
                          "remove model.tokenizer_path")
    processor = load_processor(cfg.model.path)
    renderer = PromptRenderer(task, tokenizer, cfg.model.chat_template, processor)
    records = list(task.heldout[:1]) or list(task.train[:1])
    try:
        for record in records:
            renderer.render_multimodal(record)
    except ImageError as err:
        raise ConfigError(f"task: {err} (check task.chat_prompt_template / task.prompt_template and "
                          "model.chat_template)") from None
    return processor
