"""Tasks: prompt sources with templates and verifiers. Importing this module registers the built-ins."""

from rlvr.tasks import (  # noqa: F401  (registration)
    addition,
    code,
    countdown,
    ecosystem,
    guess_number,
    hf_dataset,
    jsonl,
    preference_judge,
    reasoning_gym,
    running_total,
    vision,
)
from rlvr.tasks.base import (
    TASKS,
    LazySplit,
    PromptRenderer,
    Task,
    TaskError,
    VerifyResult,
    build_task,
    encode_prompt,
    uses_chat_template,
)

__all__ = ["TASKS", "LazySplit", "PromptRenderer", "Task", "TaskError", "VerifyResult", "build_task", "encode_prompt",
           "uses_chat_template"]
