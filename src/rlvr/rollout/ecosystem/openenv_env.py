"""An OpenEnv environment server behind rlvr's Env API: `agent.environment: {name: openenv, url: ...}`.

OpenEnv (Meta's `openenv`, 0.10) serves Gymnasium-style environments over HTTP: a FastAPI app made by
`openenv.core.env_server.create_app(env_factory, ActionCls, ObservationCls)`, and a client (`EnvClient`; here
its dict-based `GenericEnvClient`) that holds one session per episode on the server's `/ws` endpoint and calls
`reset(**kwargs)` and `step(action)`, each returning `StepResult(observation, reward, done, metadata)`.

    url     an already running server (http://host:port)
    server  `module:attr`, an app (or with `server_factory: true`, a function returning one) that rlvr starts
            with uvicorn on 127.0.0.1 and a free port, once per process, and stops at exit

Each episode: `reset(seed=record.meta["seed"], **record.meta["reset_kwargs"])`, then per model turn
`step({action_field: text})`. The observation's `observation_field` (default: the first of text, message,
prompt, observation, content that is a string) is what the model reads next; the step's reward goes to
`env_reward`. A reset that fails, a reward that is not a number, a server error or a timeout ends the episode
or zeroes that reward, with the reason in `info["episode"]`, and the run goes on.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import logging
import math
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from typing import Annotated, Any

from pydantic import Field

from rlvr.rollout.env import ENVIRONMENTS, Environment, StepResult
from rlvr.rollout.tools.base import ToolSet
from rlvr.tasks.ecosystem.common import require
from rlvr.types import TaskRecord

log = logging.getLogger(__name__)

TEXT_FIELDS = ("text", "message", "prompt", "observation", "content")


# -- servers rlvr starts ---------------------------------------------------------------------------------


class OpenEnvServer:
    """`python -m uvicorn module:attr` on 127.0.0.1, a free port; stopped by `stop()` or at exit."""

    def __init__(self, spec: str, factory: bool = False, start_timeout: float = 60.0):
        self.spec = spec
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            self.port = s.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        self.log = tempfile.NamedTemporaryFile("w+", prefix="rlvr-openenv-", suffix=".log", delete=False)
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        cmd = [sys.executable, "-m", "uvicorn", spec, "--host", "127.0.0.1", "--port", str(self.port),
               "--log-level", "warning", *(["--factory"] if factory else [])]
        self.proc = subprocess.Popen(cmd, stdout=self.log, stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True)
        deadline = time.monotonic() + start_timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                tail = self._tail()
                self.stop()
                raise RuntimeError(f"agent.environment.server: the OpenEnv server {spec!r} exited with code "
                                   f"{self.proc.returncode}: {tail}")
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as r:
                    if r.status == 200:
                        return
            except OSError:
                time.sleep(0.2)
        tail = self._tail()
        self.stop()
        raise RuntimeError(f"agent.environment.server: the OpenEnv server {spec!r} did not answer {self.url}/health "
                           f"within {start_timeout:g}s: {tail}")

    def _tail(self) -> str:
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()[-2000:].strip() or "(no output)"

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=3)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        with contextlib.suppress(OSError):  # the server's output is shown in errors only; no file per run left
            os.unlink(self.log.name)


_SERVERS: dict[tuple[str, bool], OpenEnvServer] = {}
_SERVERS_LOCK = threading.Lock()


def server_url(spec: str, factory: bool = False, start_timeout: float = 60.0) -> str:
    """The URL of the server for `spec`, started on first use (one per process)."""
    with _SERVERS_LOCK:
        server = _SERVERS.get((spec, factory))
        if server is None or server.proc.poll() is not None:
            server = _SERVERS[(spec, factory)] = OpenEnvServer(spec, factory, start_timeout)
        return server.url


def stop_servers() -> None:
    with _SERVERS_LOCK:
        for server in _SERVERS.values():
            server.stop()
        _SERVERS.clear()


atexit.register(stop_servers)


# -- the environment -------------------------------------------------------------------------------------


@ENVIRONMENTS.register("openenv")
class OpenEnvEnvironment(Environment):
    """One episode on an OpenEnv server (see the module docstring)."""

    observation_role = "user"

    def __init__(self, toolset: ToolSet | None = None, *,
                 url: Annotated[str | None, Field(description="a running server, http://host:port")] = None,
                 server: Annotated[str | None, Field(description="module:app to start on 127.0.0.1")] = None,
                 server_factory: bool = False,
                 action_field: str = "message",
                 observation_field: str | None = None,
                 timeout: Annotated[float, Field(gt=0, description="seconds per reset or step")] = 60.0,
                 start_timeout: Annotated[float, Field(gt=0)] = 60.0):
        super().__init__(toolset)
        self.core = require("openenv.core", "agent.environment=openenv (an OpenEnv client)")
        if (url is None) == (server is None):
            raise ValueError("agent.environment: set exactly one of url (a running OpenEnv server) or server "
                             f"(module:app for rlvr to start); got url={url!r}, server={server!r}")
        self.url, self.server, self.server_factory = url, server, server_factory
        self.action_field, self.observation_field = action_field, observation_field
        self.timeout, self.start_timeout = timeout, start_timeout
        self.client: Any = None
        self._final: dict[str, Any] | None = None
        self._reward_errors: list[str] = []

    def tool_schemas(self) -> list[dict[str, Any]]:
        return []

    def reset(self, record: TaskRecord) -> str:
        try:
            url = self.url or server_url(self.server, self.server_factory, self.start_timeout)  # type: ignore[arg-type]
            self.client = self.core.GenericEnvClient(base_url=url, connect_timeout_s=min(self.timeout, 30.0),
                                                message_timeout_s=self.timeout).sync()
            self.client.connect()
            kwargs = dict(record.meta.get("reset_kwargs") or {})
            if record.meta.get("seed") is not None:
                kwargs.setdefault("seed", record.meta["seed"])
            result = self.client.reset(**kwargs)
            first = self._text(result.observation)
        except Exception as err:  # reset must not raise: the episode ends at its first step, scored 0
            self._final = {"error": f"reset failed: {type(err).__name__}: {err}"}
            log.warning("OpenEnv environment (%s): %s", self.url or self.server, self._final["error"])
            return record.question
        if result.done:
            self._final = {"error": "the environment was done at reset"}
        return first

    def step(self, action: str) -> StepResult:
        if self._final is not None:
            return StepResult("", 0.0, True, {"episode": self._final})
        try:
            result = self.client.step({self.action_field: action})
        except Exception as err:  # a server error or timeout ends this episode, never the run
            error = f"step failed: {type(err).__name__}: {err}"
            log.warning("OpenEnv environment (%s): %s", self.url or self.server, error)
            return StepResult("", 0.0, True, {"episode": {"error": error}})
        reward = self._reward(result.reward)
        info: dict[str, Any] = {"metadata": result.metadata or {}}
        if result.done:
            info["episode"] = {"reward_errors": self._reward_errors} if self._reward_errors else {}
        return StepResult(self._text(result.observation), reward, bool(result.done), info)

    def close(self) -> None:
        if self.client is not None:
            try:
                self.client.close()
            except Exception as err:  # closing must not end the run
                log.debug("closing the OpenEnv client failed: %s", err)
            self.client = None

    def _reward(self, value: Any) -> float:
        if value is None:
            return 0.0
        number = float(value) if isinstance(value, (int, float)) else math.nan  # bool is an int
        if not math.isfinite(number):
            reason = f"the environment returned reward {value!r}, not a finite number; scored 0"
            log.warning("OpenEnv environment (%s): %s", self.url or self.server, reason)
            self._reward_errors.append(reason)
            return 0.0
        return number

    def _text(self, observation: Any) -> str:
        if isinstance(observation, str):
            return observation
        if not isinstance(observation, dict):
            return str(observation)
        if self.observation_field is not None:
            if self.observation_field not in observation:
                raise KeyError(f"agent.environment.observation_field: the observation has no field "
                               f"{self.observation_field!r}; it has {sorted(observation)}")
            return str(observation[self.observation_field])
        for key in TEXT_FIELDS:
            if isinstance(observation.get(key), str):
                return observation[key]
        return json.dumps(observation, default=str)
