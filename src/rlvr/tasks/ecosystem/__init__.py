"""Tasks whose data and scoring come from another library's environments: verifiers (`task.name=verifiers`)
and OpenEnv servers (`task.name=openenv`). The libraries are optional (`pip install 'rlvr[envs]'`) and imported
only when such a task is built."""

from rlvr.tasks.ecosystem import openenv_task, verifiers_task  # noqa: F401  (registration)
from rlvr.tasks.ecosystem.common import EnvironmentPackageError, require

__all__ = ["EnvironmentPackageError", "require"]
