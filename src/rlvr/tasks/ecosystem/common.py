"""What the ecosystem adapters share: importing an optional library with an error that names the fix, and
running a coroutine (verifiers' async rubric functions) to completion under a timeout from synchronous code."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Awaitable
from types import ModuleType
from typing import Any, TypeVar

from rlvr.tasks.base import TaskError

T = TypeVar("T")

INSTALL_HINTS = {
    "verifiers": "pip install 'rlvr[envs]'   (verifiers 0.4.x)",
    "openenv": "pip install 'rlvr[envs]' && pip install --no-deps 'openenv==0.10.*'   (see docs/environments.md: "
               "openenv's own requirements pull gradio, which downgrades pillow)",
}


class EnvironmentPackageError(TaskError):
    """An ecosystem library, or an environment package, is not installed."""


def require(module: str, what: str) -> ModuleType:
    """Import `module` (an optional dependency) or raise an error saying how to install it."""
    top = module.split(".")[0]
    try:
        return importlib.import_module(module)
    except ImportError as err:
        hint = INSTALL_HINTS.get(top, f"pip install {top}")
        raise EnvironmentPackageError(f"{what} needs the '{top}' package, which is not installed "
                                      f"({type(err).__name__}: {err}). Install it with: {hint}") from err


def run_sync(awaitable: Awaitable[T], timeout: float | None) -> T:
    """Run `awaitable` on a private event loop, cancelled after `timeout` seconds (asyncio.TimeoutError)."""

    async def bounded() -> Any:
        return await asyncio.wait_for(awaitable, timeout)

    loop = asyncio.new_event_loop()
    try:
        return loop.run_until_complete(bounded())
    finally:
        try:
            loop.run_until_complete(loop.shutdown_asyncgens())
        finally:
            loop.close()
