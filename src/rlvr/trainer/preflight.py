"""Everything about a training config that can fail on bad input, checked before the run directory or any
compute exists: the task, the tokenizer, model paths, the engine, the agent's tools, sinks and memory."""

from __future__ import annotations

from typing import Any

import torch

from rlvr.config import Config, ConfigError
from rlvr.learner import needs_reference, needs_teacher
from rlvr.models import load_tokenizer, resolve_device, resolve_dtype, resolve_model_path
from rlvr.models.teacher import check_teacher_tokenizer
from rlvr.rollout import ENGINES, build_env_factory, load_harness
from rlvr.rollout.openai_server import require_serve
from rlvr.tasks import PromptRenderer, build_task
from rlvr.tracking import check_sinks
from rlvr.trainer.memory import check_memory
from rlvr.trainer.stopping import TrainingError


def preflight(cfg: Config, multi_rank: bool) -> tuple[Any, Any, torch.device]:
    """Check the config against the world; returns the task, the tokenizer and the device."""
    if multi_rank and cfg.distributed.learner_workers:
        raise ConfigError("distributed.learner_workers: the learner ranks are Ray actors, so run this recipe with "
                          "`rlvr train`, not under torchrun (or set learner_workers=0)")
    task = build_task(cfg.task.name, cfg.task.params)
    tokenizer = load_tokenizer(cfg.model.tokenizer_path or cfg.model.path,
                               trust_remote_code=cfg.model.trust_remote_code,
                               key="model.tokenizer_path" if cfg.model.tokenizer_path else "model.path")
    resolve_model_path(cfg.model.path)
    if needs_reference(cfg) and cfg.model.reference_path:
        resolve_model_path(cfg.model.reference_path, "model.reference_path")
    if needs_teacher(cfg):  # a teacher grades the policy's tokens by id: the same tokenizer, checked now
        check_teacher_tokenizer(cfg.model.tokenizer_path or cfg.model.path, cfg.model.teacher_path)
    device = resolve_device(cfg.model.device)
    PromptRenderer(task, tokenizer, cfg.model.chat_template)
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
