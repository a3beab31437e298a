"""A multi-turn verifiers environment driven by rlvr's agent rollout: `agent.environment=verifiers`.

In verifiers 0.4 (`verifiers.v1`) a multi-turn environment is a `vf.Env` whose `run(task, agents)` drives the
conversation: it opens `agents.<seat>.interaction(task)` and calls `await interaction.turn(message)`, which sends
one user message and returns the model's reply (a `vf.Segment`); `@vf.stop` predicates of the task end the
exchange (the `is_completed` of older verifiers), and what the environment says between replies is its
`env_response`. verifiers normally answers `turn` by calling a model server. Here the seat is played by rlvr's
engine instead:

    reset(record)  starts `run` on the environment's own event loop (a thread per episode) and returns the first
                   message it sends (the task's prompt, when the task speaks first)
    step(text)     hands the model's decoded reply to the waiting `turn`, and returns the environment's next
                   message, or `done` when `run` returns; the task's rubric then scores the whole conversation
                   and the scores go back as `info["episode"]["rubric"]` (the `verifiers_rubric` reward reads them)

rlvr's engine samples and records every token (token in, token out); the environment only sees text. An
environment that raises, or does not answer within `turn_timeout` seconds, ends its episode with the reason in
`info["episode"]["error"]` (scored 0); the run goes on. One seat per environment plays the policy; an
environment whose other seats need a model of their own (user simulators) is not supported.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import queue
import threading
from typing import Annotated, Any

from pydantic import Field

from rlvr.rollout.env import ENVIRONMENTS, Environment, StepResult
from rlvr.rollout.tools.base import ToolSet
from rlvr.tasks.ecosystem.verifiers_task import load_verifiers_environment, prompt_messages, score_trace
from rlvr.types import TaskRecord

log = logging.getLogger(__name__)


@ENVIRONMENTS.register("verifiers")
class VerifiersEnvironment(Environment):
    """The task's verifiers environment (task.name=verifiers), one episode per instance."""

    observation_role = "user"

    def __init__(self, toolset: ToolSet | None = None, *,
                 turn_timeout: Annotated[float, Field(gt=0)] = 60.0,
                 score_timeout: Annotated[float, Field(gt=0)] = 30.0):
        super().__init__(toolset)
        self.turn_timeout, self.score_timeout = turn_timeout, score_timeout
        self._events: queue.Queue[tuple[str, Any]] = queue.Queue()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._main: asyncio.Task[Any] | None = None
        self._reply: asyncio.Future[str] | None = None
        self._thread: threading.Thread | None = None
        self._final: dict[str, Any] | None = None  # set once the episode is over
        self.trace: Any = None

    def tool_schemas(self) -> list[dict[str, Any]]:
        return []

    # -- rlvr's side (the agent loop's threads) -----------------------------------------------------------

    def reset(self, record: TaskRecord) -> str:
        if "vf_env" not in record.meta:
            raise ValueError("agent.environment=verifiers plays the environments of task.name=verifiers; this "
                             f"record ({record.id}) comes from another task")
        try:
            loaded = load_verifiers_environment(record.meta["vf_env"], record.meta.get("vf_env_args") or {},
                                                record.meta.get("vf_max_tasks"))
            vf_env = loaded.env()
        except Exception as err:  # reset must not raise: the episode ends at its first step, scored 0
            self._final = {"error": f"could not load the environment: {type(err).__name__}: {err}"}
            log.warning("verifiers environment for %s: %s", record.id, self._final["error"])
            return record.question
        vf_task = loaded.tasks[int(record.meta["vf_index"])]
        self._thread = threading.Thread(target=self._serve, args=(loaded.vf, vf_env, vf_task),
                                        name=f"rlvr-vf-{record.id}", daemon=True)
        self._thread.start()
        kind, value = self._next_event()
        if kind == "ask":
            return value
        self._final = value  # the environment ended (or failed) before the model said anything
        return record.question

    def step(self, action: str) -> StepResult:
        if self._final is None:
            assert self._loop is not None and self._reply is not None
            reply, self._reply = self._reply, None
            self._loop.call_soon_threadsafe(lambda: reply.done() or reply.set_result(action))
            kind, value = self._next_event()
            if kind == "ask":
                return StepResult(value, 0.0, False, {})
            self._final = value
        return StepResult("", 0.0, True, {"episode": self._final})

    def _next_event(self) -> tuple[str, Any]:
        try:
            return self._events.get(timeout=self.turn_timeout)
        except queue.Empty:
            self._cancel()
            error = f"the environment did not answer within {self.turn_timeout:g}s (agent.environment.turn_timeout)"
            log.warning("verifiers environment: %s", error)
            return "done", {"error": error}

    def close(self) -> None:
        self._cancel()
        if self._thread is not None:
            self._thread.join(timeout=5.0)

    def _cancel(self) -> None:
        loop, main = self._loop, self._main
        if loop is not None and main is not None and not loop.is_closed():
            try:
                loop.call_soon_threadsafe(main.cancel)
            except RuntimeError:  # the loop closed in between
                pass

    # -- the environment's side (its event loop, on this episode's thread) --------------------------------

    def _serve(self, vf: Any, vf_env: Any, vf_task: Any) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        try:
            self._main = loop.create_task(self._run(vf, vf_env, vf_task))
            loop.run_until_complete(asyncio.wait([self._main]))
        finally:
            loop.close()

    async def _run(self, vf: Any, vf_env: Any, vf_task: Any) -> None:
        from rlvr.tasks.ecosystem.verifiers_task import build_trace

        self.trace = build_trace(vf, vf_task, prompt_messages(vf_task))
        agents = _Agents(self, vf, vf_task)
        try:
            setup = getattr(vf_env, "setup", None)
            if setup is not None and "agents" in inspect.signature(setup).parameters:
                await setup(agents)
            await vf_env.run(vf_task, agents)
        except asyncio.CancelledError:  # rlvr ended the episode (turn or token limit) or it timed out
            return
        except Exception as err:  # an environment bug ends this episode, scored 0
            error = f"{type(err).__name__}: {err}"
            log.warning("verifiers environment %s failed: %s", type(vf_env).__name__, error)
            self._events.put(("done", {"error": error}))
            return
        try:
            scores = await score_trace(vf_task, self.trace, self.score_timeout)
        except Exception as err:
            self._events.put(("done", {"error": f"scoring failed: {type(err).__name__}: {err}"}))
            return
        self._events.put(("done", {"rubric": scores, "turns": len(self.trace.assistant_messages)}))

    async def ask(self, observation: str) -> str:
        """Show the model `observation` and wait for its reply (rlvr's next `step`)."""
        assert self._loop is not None
        self._reply = self._loop.create_future()
        self._events.put(("ask", observation))
        return await self._reply


class _Agents:
    """The `agents` an `Env.run` receives: every seat is played by the policy being trained (one seat per run)."""

    def __init__(self, episode: VerifiersEnvironment, vf: Any, vf_task: Any):
        self._episode, self._vf, self._vf_task = episode, vf, vf_task
        self._seats: dict[str, _Seat] = {}

    def __getattr__(self, name: str) -> _Seat:
        if name.startswith("_"):
            raise AttributeError(name)
        seat = self.__dict__["_seats"].get(name)
        if seat is None:
            seat = self.__dict__["_seats"][name] = _Seat(self, name)
        return seat


class _Seat:
    """One seat (`agents.solver`): `interaction(task)` opens the exchange; `run(task)` plays one reply."""

    def __init__(self, agents: _Agents, name: str):
        self._agents, self.name, self.trainable = agents, name, True
        self._opened = False

    def interaction(self, task: Any) -> _Interaction:
        others = [s for s in self._agents._seats.values() if s is not self and s._opened]
        if others:
            raise NotImplementedError(f"seat {self.name!r}: rlvr plays one seat of a verifiers environment with "
                                      f"the policy, and {others[0].name!r} already has it")
        self._opened = True
        return _Interaction(self._agents, task)

    async def run(self, task: Any) -> Any:
        async with self.interaction(task) as chat:
            await chat.turn()
        return chat.trace


class _Interaction:
    """`vf.Interaction`'s surface for an environment's `run`: `turn`, `trace`, an async context manager."""

    def __init__(self, agents: _Agents, task: Any):
        self._agents, self._task = agents, task
        self._episode = agents._episode
        self._started = False
        self._over = False

    @property
    def trace(self) -> Any:
        return self._episode.trace

    async def __aenter__(self) -> _Interaction:
        return self

    async def __aexit__(self, *exc: Any) -> None:
        return None

    async def turn(self, message: str | None = None) -> Any:
        vf, trace = self._agents._vf, self._episode.trace
        if self._over:
            return vf.Segment(messages=[], terminated=True)
        shown: list[str] = []
        if not self._started:  # the opening turn shows the task's prompt (when it has one) before `message`
            shown += [m["content"] for m in prompt_messages(self._task) if m["role"] == "user"]
            self._started = True
        if message is not None:
            shown.append(message)
            _append(vf, trace, vf.UserMessage(content=message), sampled=False)
        if not shown:
            raise ValueError("turn() without a message on a task without a prompt: the environment must speak first")
        reply = await self._episode.ask("\n\n".join(shown))
        assistant = vf.AssistantMessage(content=reply)
        _append(vf, trace, assistant, sampled=True)
        if await self._stopped(vf, trace):
            self._over = True
        return vf.Segment(messages=[assistant])

    async def _stopped(self, vf: Any, trace: Any) -> bool:
        """The task's `@vf.stop` predicates on the trace (those that take other arguments are not evaluated)."""
        from verifiers.v1.utils.decorators import invoke

        for fn in self._task.hooks("stop"):
            params = set(inspect.signature(fn).parameters)
            if not params <= {"trace", "task"}:
                continue
            result = invoke(fn, {"trace": trace, "task": self._task.data})
            if inspect.isawaitable(result):
                result = await result
            if result:
                trace.stop(fn.__name__)
                return True
        return False


def _append(vf: Any, trace: Any, message: Any, sampled: bool) -> None:
    parent = len(trace.nodes) - 1 if trace.nodes else None
    trace.nodes.append(vf.MessageNode(parent=parent, message=message, sampled=sampled))
