"""verifiers environments as an rlvr task: `task.name=verifiers task.env=NAME task.env_args={...}`.

Written against verifiers 0.4 (`verifiers.v1`), where an environment is an installed package that exports a
`vf.Taskset` subclass (its data: `load()` yields `vf.Task`s carrying a `TaskData` row) and, for multi-turn or
multi-agent environments, a `vf.Env` subclass whose `run(task, agents)` drives the conversation. verifiers loads
both by id (`vf.load_taskset`, `vf.environment_class`, `vf.load_environment`); so does this adapter.

    dataset   every task of the taskset becomes a TaskRecord (question = the prompt's text, answer = the row's
              `answer` field if it has one); `eval_size` of them, seeded, are held out.
    rubric    the task's `@vf.reward` functions (and rewards plugged through its TaskConfig) score each sample on
              a `vf.Trace` built from the prompt and the model's messages, each with its weight, summed as
              verifiers sums them (`Trace.reward` = sum of score * weight). Async functions are awaited. Each
              function's score is kept per sample (`Sample.meta["rubric"]`) and logged as
              `reward/verifiers_rubric/<function>` by the `verifiers_rubric` reward component.
    turns     an environment with its own `Env` runs through rlvr's agent rollout (`agent.environment=verifiers`,
              rlvr/rollout/ecosystem/verifiers_env.py): the engine samples and records the tokens, the environment
              reads the decoded text.

A reward function that raises, outlasts `timeout` or returns something that is not a finite number scores 0 for
that function, with the reason; the other functions still count. Environments that need what rlvr does not
provide (judge models, containers, tool servers, runtime-only rewards) are refused when the task is built.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import math
import pkgutil
import random
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, Any

from pydantic import Field

from rlvr.tasks.base import TASKS, Task, TaskError, VerifyResult
from rlvr.tasks.ecosystem.common import EnvironmentPackageError, require, run_sync
from rlvr.types import TaskRecord

log = logging.getLogger(__name__)


# -- loading ---------------------------------------------------------------------------------------------


@dataclass
class LoadedEnvironment:
    """One loaded verifiers environment: its tasks, and its `Env` class when it drives turns itself."""

    name: str
    args: dict[str, Any]
    vf: Any  # the verifiers.v1 module
    tasks: list[Any]  # vf.Task objects, in taskset order
    env_class: type
    multi_turn: bool
    _env: Any = None
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def env(self) -> Any:
        """The `vf.Env` instance (built on first use: its constructor loads the agents' harness configs)."""
        with self._lock:
            if self._env is None:
                config = self.vf.resolve_env_config({"taskset": {"id": self.name, **self.args}})
                self._env = self.vf.load_environment(config)
            return self._env


_LOADED: dict[str, LoadedEnvironment] = {}
_LOADED_LOCK = threading.Lock()


def _key(name: str, args: Mapping[str, Any], max_tasks: int | None) -> str:
    return repr((name, sorted((k, repr(v)) for k, v in args.items()), max_tasks))


def installed_environment_packages() -> list[str]:
    """Installed distributions that require verifiers (environment packages, as the Environments Hub installs)."""
    import importlib.metadata as md
    import re

    names = set()
    for dist in md.distributions():
        name = dist.metadata.get("Name") or ""
        if name.lower() == "verifiers":
            continue
        if any(re.match(r"verifiers\b(?![-_.])", r.strip().lower()) and "extra ==" not in r
               for r in dist.requires or []):
            names.add(name)
    return sorted(names)


def builtin_environments(vf: Any) -> list[str]:
    """The taskset ids that ship inside verifiers itself (`verifiers.v1.tasksets`)."""
    from verifiers.v1 import tasksets

    return sorted(m.name for m in pkgutil.iter_modules(tasksets.__path__))


def load_verifiers_environment(name: str, args: Mapping[str, Any] | None = None,
                               max_tasks: int | None = None) -> LoadedEnvironment:
    """Load (once per process) the verifiers environment `name` with taskset config `args`."""
    args = dict(args or {})
    key = _key(name, args, max_tasks)
    with _LOADED_LOCK:
        if key in _LOADED:
            return _LOADED[key]
    vf = require("verifiers.v1", f"task.env={name!r} (a verifiers environment)")
    try:
        config_type = vf.taskset_config_type(name)
    except ModuleNotFoundError as err:
        raise EnvironmentPackageError(
            f"task.env: no verifiers environment {name!r} is installed ({err}). An environment is an importable "
            f"package exporting a vf.Taskset subclass in its __all__: install it (pip install <package>, or from "
            f"the Environments Hub) or put its directory on PYTHONPATH. Environments inside verifiers itself: "
            f"{', '.join(builtin_environments(vf))}; installed packages that depend on verifiers: "
            f"{', '.join(installed_environment_packages()) or 'none'}") from err
    except (AttributeError, TypeError, ValueError) as err:
        raise TaskError(f"task.env: {name!r} is not a verifiers environment: {err}") from err
    try:
        config = config_type.model_validate({"id": name, **args})
    except Exception as err:  # pydantic's ValidationError names the bad field
        fields = sorted(set(config_type.model_fields) - {"id"})
        raise TaskError(f"task.env_args: not valid for verifiers environment {name!r} ({config_type.__name__}; "
                        f"fields: {', '.join(fields)}): {err}") from err
    taskset = vf.load_taskset(config)
    if not taskset.bounded and max_tasks is None:
        raise TaskError(f"task.max_tasks: verifiers environment {name!r} yields tasks forever; set task.max_tasks")
    tasks = list(taskset.take(max_tasks) if max_tasks is not None else taskset)
    if not tasks:
        raise TaskError(f"task.env: verifiers environment {name!r} loaded no tasks (with env_args {args})")
    _check_supported(name, type(taskset), tasks[0], config)
    env_class = vf.environment_class(name)
    loaded = LoadedEnvironment(name=name, args=args, vf=vf, tasks=tasks, env_class=env_class,
                                  multi_turn=env_class is not vf.SingleAgentEnv)
    with _LOADED_LOCK:
        return _LOADED.setdefault(key, loaded)


def _check_supported(name: str, taskset_cls: type, task: Any, config: Any) -> None:
    """Refuse, before any compute, what the adapter cannot run: it has no judge model, container or tools."""
    problems = []
    if getattr(task, "NEEDS_CONTAINER", False):
        problems.append("its tasks need a container runtime")
    if task.config.judges:
        problems.append(f"its rubric uses judge models ({len(task.config.judges)} judges)")
    if taskset_cls.toolsets(config) or type(task).toolsets(task.config):
        problems.append("it serves tools to the model (verifiers' MCP toolsets)")
    runtime_only = [fn.__name__ for fn in task.hooks("reward") if _needs_runtime(fn)]
    if runtime_only:
        problems.append(f"reward functions {runtime_only} need a sandbox runtime")
    if problems:
        raise TaskError(f"task.env: verifiers environment {name!r} cannot run in rlvr: {'; '.join(problems)}. "
                        "rlvr runs tool-less single- and multi-turn environments whose rewards read the task and "
                        "the trace")


def _needs_runtime(fn: Any) -> bool:
    param = inspect.signature(fn).parameters.get("runtime")
    return param is not None and param.default is inspect.Parameter.empty


# -- messages and traces ---------------------------------------------------------------------------------


def prompt_messages(vf_task: Any) -> list[dict[str, str]]:
    """The task's opening messages as plain {role, content} dicts (system prompt first)."""
    data = vf_task.data
    out = []
    if data.system_prompt:
        out.append({"role": "system", "content": data.system_prompt})
    if isinstance(data.prompt, str):
        out.append({"role": "user", "content": data.prompt})
    elif data.prompt:
        from verifiers.v1.types import content_text

        out.extend({"role": m.role, "content": content_text(getattr(m, "content", "") or "")} for m in data.prompt)
    return out


def build_trace(vf: Any, vf_task: Any, messages: list[dict[str, str]]) -> Any:
    """A `vf.Trace` of `messages` (a chain; assistant messages marked as sampled), for the task's rewards."""
    kinds = {"system": vf.SystemMessage, "user": vf.UserMessage, "assistant": vf.AssistantMessage}
    nodes = []
    for i, m in enumerate(messages):
        cls = kinds.get(m["role"])
        if cls is None:
            raise TaskError(f"verifiers adapter: unsupported message role {m['role']!r}")
        nodes.append(vf.MessageNode(parent=i - 1 if i else None, message=cls(content=m["content"]),
                                    sampled=m["role"] == "assistant"))
    trace = vf.Trace(task=vf.TraceTask(type=type(vf_task).__name__, data=vf_task.data),
                     agent=vf.AgentInfo(config=vf.AgentConfig()), nodes=nodes)
    trace.is_completed = True
    trace.ok = True
    return trace


# -- the rubric ------------------------------------------------------------------------------------------


async def score_trace(vf_task: Any, trace: Any, timeout: float) -> dict[str, Any]:
    """The task's rubric on `trace`: {"rewards": {name: {"score", "weight"}}, "metrics", "total", "errors"}.

    Each reward function runs under `timeout` seconds (sync ones in a thread, so a hang costs its timeout);
    one that fails scores 0 with its reason in `errors`, the others still count.
    """
    from verifiers.v1.utils.decorators import invoke

    available = {"task": vf_task.data, "trace": trace}

    async def call(fn: Any) -> Any:
        result = await asyncio.wait_for(_in_daemon_thread(invoke, fn, available), timeout)
        if inspect.isawaitable(result):
            result = await asyncio.wait_for(result, timeout)
        return result

    async def safe(fn: Any) -> tuple[Any, str | None]:
        try:
            return await call(fn), None
        except asyncio.TimeoutError:
            return None, f"{fn.__name__}: timed out after {timeout:g}s"
        except Exception as err:  # an environment bug costs this function's score, not the run
            return None, f"{fn.__name__}: {type(err).__name__}: {err}"

    rewards: dict[str, dict[str, float]] = {}
    metrics: dict[str, float] = {}
    errors: list[str] = []
    reward_fns = vf_task.hooks("reward")
    metric_fns = vf_task.hooks("metric")
    results = await asyncio.gather(*(safe(fn) for fn in [*reward_fns, *metric_fns]))
    for i, (fn, (result, error)) in enumerate(zip([*reward_fns, *metric_fns], results)):
        is_reward = i < len(reward_fns)
        weight = float(getattr(fn, "_vf_weight", 1.0))
        items = list(result.items()) if isinstance(result, Mapping) else [(fn.__name__, result)]
        if error is not None:
            errors.append(error)
            items = [(fn.__name__, 0.0)]
        for name, value in items:
            number = _number(value)
            if number is None:
                errors.append(f"{name}: returned {value!r}, not a finite number")
                number = 0.0
            if is_reward:
                rewards[str(name)] = {"score": number, "weight": weight}
            else:
                metrics[str(name)] = number
    total = sum(r["score"] * r["weight"] for r in rewards.values())
    return {"rewards": rewards, "metrics": metrics, "total": total, "errors": errors}


def _in_daemon_thread(fn: Any, *args: Any) -> asyncio.Future[Any]:
    """`fn(*args)` on a daemon thread: a sync function that never returns costs its timeout, and does not keep
    the process from exiting (the default executor's threads are joined at exit)."""
    loop = asyncio.get_running_loop()
    future: asyncio.Future[Any] = loop.create_future()

    def settle(ok: bool, value: Any) -> None:
        if not future.done():
            future.set_result(value) if ok else future.set_exception(value)

    def target() -> None:
        try:
            result, ok = fn(*args), True
        except BaseException as err:  # handed to the awaiting coroutine
            result, ok = err, False
        try:
            loop.call_soon_threadsafe(settle, ok, result)
        except RuntimeError:  # the loop is gone: the caller timed out long ago
            pass

    threading.Thread(target=target, name="rlvr-vf-reward", daemon=True).start()
    return future


def _number(value: Any) -> float | None:
    if isinstance(value, str) or value is None:
        return None
    try:
        f = float(value)
    except (TypeError, ValueError):
        return None
    return f if math.isfinite(f) else None


def describe(scores: Mapping[str, Any]) -> str:
    """'correct_answer=1 (x1), has_answer_line=1 (x0.1)' plus any errors: a sample's reward reason."""
    parts = [f"{n}={r['score']:g} (x{r['weight']:g})" for n, r in scores.get("rewards", {}).items()]
    text = ", ".join(parts) or "no reward functions"
    if scores.get("error"):
        text = f"environment error: {scores['error']}; {text}"
    if scores.get("errors"):
        text += "; failed: " + "; ".join(scores["errors"])
    return text


# -- the task --------------------------------------------------------------------------------------------


@TASKS.register("verifiers")
class VerifiersTask(Task):
    """An installed verifiers environment's dataset and rubric (see the module docstring)."""

    name = "verifiers"

    def __init__(
        self,
        *,
        env: Annotated[str, Field(description="the environment's id (its package name)")],
        env_args: Annotated[dict[str, Any], Field(description="its taskset config fields")] = {},  # noqa: B006
        eval_size: Annotated[int, Field(ge=1)] = 50,
        max_tasks: Annotated[int | None, Field(ge=1, description="read at most this many tasks")] = None,
        seed: Annotated[int, Field(ge=0)] = 0,
        timeout: Annotated[float, Field(gt=0, description="seconds per reward function")] = 30.0,
        correct_reward: Annotated[str | None, Field(description="the reward function that decides `correct` "
                                                    "(default: the one with the largest weight)")] = None,
        correct_threshold: float = 1.0,
        prompt_template: str | None = None,
        chat_prompt_template: str | None = None,
        system_prompt: str | None = None,
    ):
        super().__init__(prompt_template=prompt_template, chat_prompt_template=chat_prompt_template,
                         system_prompt=system_prompt)
        self.env_name, self.env_args, self.timeout, self.max_tasks = env, dict(env_args), timeout, max_tasks
        self.loaded = load_verifiers_environment(env, self.env_args, max_tasks)
        weights = {fn.__name__: float(getattr(fn, "_vf_weight", 1.0)) for fn in self.loaded.tasks[0].hooks("reward")}
        if not weights:
            raise TaskError(f"task.env: verifiers environment {env!r} has no @vf.reward functions to score with")
        if correct_reward is not None and correct_reward not in weights:
            raise TaskError(f"task.correct_reward: {env!r} has no reward function {correct_reward!r}; it has "
                            f"{', '.join(weights)}")
        self.correct_reward = correct_reward or max(weights, key=lambda n: weights[n])
        self.correct_threshold = correct_threshold
        if self.loaded.multi_turn:
            log.info("verifiers environment %s drives its own turns (%s): train it with agent.environment=verifiers",
                     env, self.loaded.env_class.__name__)
        records = [self._record(i, t) for i, t in enumerate(self.loaded.tasks)]
        if len(records) <= eval_size:
            raise TaskError(f"task.eval_size: {eval_size} held-out tasks leave none to train on; {env!r} has "
                            f"{len(records)} tasks")
        order = list(range(len(records)))
        random.Random(seed).shuffle(order)
        held = set(order[:eval_size])
        self._heldout = [records[i] for i in sorted(held)]
        held_questions = {r.question for r in self._heldout}
        self._train = [r for i, r in enumerate(records) if i not in held and r.question not in held_questions]
        if not self._train:
            raise TaskError(f"task.env: no training tasks of {env!r} are left after holding out the eval split")

    @property
    def multi_turn(self) -> bool:
        return self.loaded.multi_turn

    def _record(self, index: int, vf_task: Any) -> TaskRecord:
        data = vf_task.data
        answer = getattr(data, "answer", None)
        return TaskRecord(id=str(data.id if data.id is not None else f"{self.env_name}-{index}"),
                          question=data.prompt_text, answer="" if answer is None else str(answer),
                          source=f"verifiers:{self.env_name}",
                          meta={"vf_env": self.env_name, "vf_env_args": self.env_args, "vf_max_tasks": self.max_tasks,
                                "vf_index": index})

    def vf_task(self, record: TaskRecord) -> Any:
        return self.loaded.tasks[int(record.meta["vf_index"])]

    # prompts: the row's own messages (system prompt included)

    def chat_messages(self, record: TaskRecord) -> list[dict[str, str]]:
        messages = prompt_messages(self.vf_task(record))
        if self.system_prompt and not any(m["role"] == "system" for m in messages):
            messages.insert(0, {"role": "system", "content": self.system_prompt})
        return messages

    def plain_prompt(self, record: TaskRecord) -> str:
        system = self.vf_task(record).data.system_prompt
        text = self.prompt_template.format(question=record.question)
        return f"{system}\n\n{text}" if system else text

    # scoring

    def score(self, record: TaskRecord, messages: list[dict[str, str]]) -> dict[str, Any]:
        """The rubric's scores for a conversation (the prompt's messages, then the model's and the environment's)."""
        vf_task = self.vf_task(record)
        trace = build_trace(self.loaded.vf, vf_task, messages)
        # the whole rubric is bounded too: functions run concurrently, so one timeout plus slack covers them
        scores = run_sync(score_trace(vf_task, trace, self.timeout), self.timeout + 5.0)
        if scores["errors"]:
            log.warning("verifiers rubric of %s on %s: %s (scored 0)", self.env_name, record.id,
                        "; ".join(scores["errors"]))
        return scores

    def score_response(self, response: str, record: TaskRecord) -> dict[str, Any]:
        """The rubric on one reply to the task's prompt (a single-turn sample, or a multi-turn one's last turn)."""
        return self.score(record, [*prompt_messages(self.vf_task(record)), {"role": "assistant", "content": response}])

    describe = staticmethod(describe)

    def is_correct(self, scores: Mapping[str, Any]) -> bool:
        reward = scores.get("rewards", {}).get(self.correct_reward)
        return reward is not None and reward["score"] >= self.correct_threshold

    def verify(self, response: str, record: TaskRecord) -> VerifyResult:
        """The rubric's weighted total for one reply. For a multi-turn environment this sees only the final reply;
        training scores whole episodes with the `verifiers_rubric` reward."""
        scores = self.score_response(response, record)
        return VerifyResult(float(scores["total"]), self.is_correct(scores), describe(scores), None,
                            {"rubric": scores})
