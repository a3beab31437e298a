"""Agent harnesses behind the OpenAI-compatible endpoint (`rollout.mode=openai_server`, `agent.harness`).

A harness is the user's own agent code, unchanged: a function (sync or async) that talks to the model with the
ordinary `openai` client and returns a reward, or None to let the task's verifier score the final answer:

    def solve(record, *, base_url, api_key, model, **params) -> float | None:
        client = openai.OpenAI(base_url=base_url, api_key=api_key)
        reply = client.chat.completions.create(model=model, messages=[{"role": "user", "content": ...}])
        ...

It is called with keyword arguments `record` (the TaskRecord), `base_url` (this episode's endpoint),
`api_key` (a placeholder the server ignores), `model` (the served model's name) and `agent.harness_params`;
a harness that does not take one of them (and has no **kwargs) is not given it.

    groups = runner.rollout_groups(renderer, records, params)   # one Group per record, n episodes each

Each episode runs in its own thread (`agent.harness_workers` at once), under `agent.harness_timeout`.
The server records every call (exact prompt ids, sampled ids, behaviour log-probs); the episode becomes
Samples by `episode_samples`: consecutive calls whose prompt extends the previous call's prompt and completion
token by token are one Sample (the text between them, e.g. tool results, is in the sequence with loss mask 0),
and a call that does not (the harness rewrote the history, or ran a side conversation) starts a new Sample.
Every Sample of an episode carries the episode's reward. A harness that raises, times out or returns something
that is not a finite number is logged and scored 0 with the reason (`meta["harness_error"]`); the run goes on.
"""

from __future__ import annotations

import asyncio
import importlib
import importlib.util
import inspect
import logging
import math
import sys
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from rlvr.rollout.base import RolloutEngine, SamplingParams
from rlvr.rollout.openai_server import Call, PolicyServer
from rlvr.types import Group, Sample, TaskRecord

log = logging.getLogger(__name__)

API_KEY = "rlvr-local"  # the openai client needs some key; the local server does not check it
HARNESS_ARGS = ("record", "base_url", "api_key", "model")


class HarnessError(ValueError):
    """`agent.harness` cannot be loaded or called as a harness."""


def load_harness(spec: str) -> Callable[..., Any]:
    """`module:function` (an importable module) or `path/to/file.py:function` as a callable."""
    target, sep, name = spec.rpartition(":")
    if not sep or not target or not name:
        raise HarnessError(f"agent.harness: expected module:function or path/to/file.py:function; got {spec!r}")
    try:
        if target.endswith(".py"):
            path = Path(target)
            if not path.is_file():
                raise HarnessError(f"agent.harness: file {target!r} not found (looked for {path.resolve()})")
            mod_name = f"rlvr_harness_{path.stem}_{abs(hash(str(path.resolve())))}"
            module = sys.modules.get(mod_name)
            if module is None:
                loader = importlib.util.spec_from_file_location(mod_name, path)
                assert loader is not None and loader.loader is not None
                module = importlib.util.module_from_spec(loader)
                sys.modules[mod_name] = module
                loader.loader.exec_module(module)
        else:
            module = importlib.import_module(target)
    except HarnessError:
        raise
    except Exception as err:
        raise HarnessError(f"agent.harness: cannot import {target!r}: {type(err).__name__}: {err}") from None
    fn = getattr(module, name, None)
    if not callable(fn):
        raise HarnessError(f"agent.harness: {target!r} has no function {name!r}")
    params = inspect.signature(fn).parameters
    takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    missing = [a for a in ("record", "base_url") if a not in params and not takes_any]
    if missing:
        raise HarnessError(f"agent.harness: {spec} must take the keyword arguments {', '.join(missing)} "
                           f"(it is called as fn(record=..., base_url=..., api_key=..., model=...))")
    return fn


def call_harness(fn: Callable[..., Any], kwargs: dict[str, Any]) -> Any:
    """Call a sync or async harness with the keyword arguments it takes."""
    params = inspect.signature(fn).parameters
    if not any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        kwargs = {k: v for k, v in kwargs.items() if k in params}
    result = fn(**kwargs)
    if inspect.isawaitable(result):
        async def wait() -> Any:
            return await result
        result = asyncio.run(wait())
    return result


@dataclass
class EpisodeOutcome:
    reward: float | None = None
    error: str | None = None
    seconds: float = 0.0
    calls: list[Call] = field(default_factory=list)


class HarnessRunner:
    """Runs `rollout.n` harness episodes per record against a `PolicyServer` over `engine` (started on first
    use, stopped by `close`)."""

    def __init__(self, engine: RolloutEngine, tokenizer: Any, harness: str | Callable[..., Any], *, uses_chat: bool,
                 context_length: int, model_name: str = "policy", harness_params: dict[str, Any] | None = None,
                 timeout: float = 120.0, workers: int = 64, max_calls: int = 4, batch_wait_ms: float = 5.0):
        self.engine, self.tokenizer = engine, tokenizer
        self.fn = load_harness(harness) if isinstance(harness, str) else harness
        self.harness_params = dict(harness_params or {})
        self.timeout, self.workers, self.max_calls = timeout, workers, max_calls
        self.model_name = model_name
        self.server = PolicyServer(engine, tokenizer, uses_chat=uses_chat, context_length=context_length,
                                   model_name=model_name, batch_wait_ms=batch_wait_ms)
        self._started = False

    @classmethod
    def from_config(cls, cfg: Any, engine: RolloutEngine, tokenizer: Any, *, uses_chat: bool,
                    context_length: int) -> HarnessRunner:
        """From the `agent:` and `rollout:` sections (`agent.max_turns` is the model calls per episode)."""
        a = cfg.agent
        return cls(engine, tokenizer, a.harness, uses_chat=uses_chat, context_length=context_length,
                   model_name=Path(str(cfg.model.path)).name or "policy", harness_params=a.harness_params,
                   timeout=a.harness_timeout, workers=a.harness_workers, max_calls=a.max_turns,
                   batch_wait_ms=cfg.rollout.server_batch_wait_ms)

    def close(self) -> None:
        if self._started:
            self.server.stop()
            self._started = False

    def rollout_groups(self, renderer: Any, records: Sequence[TaskRecord], params: SamplingParams) -> list[Group]:
        """`params.n` episodes per record, run concurrently; one Group per record (unrewarded). `renderer`
        renders each record's task prompt (the Group's prompt, and the placeholder of an episode without calls)."""
        if not self._started:
            self.server.start()
            self._started = True
        self.server.set_params(replace(params, n=1))
        first_batch = len(self.server.batch_sizes)
        jobs = [(gi, record) for gi, record in enumerate(records) for _ in range(params.n)]
        outcomes = self._run_all([r for _, r in jobs])
        sizes = self.server.batch_sizes[first_batch:]
        log.info("harness rollout: %d episodes, %d engine calls, mean batch %.1f, max batch %d", len(jobs),
                 len(sizes), sum(sizes) / len(sizes) if sizes else 0.0, max(sizes, default=0))
        groups = [Group(record=r, prompt_ids=ids, samples=[], prompt_text=text)
                  for r, (ids, text) in ((r, renderer.render(r)) for r in records)]
        for ei, ((gi, record), outcome) in enumerate(zip(jobs, outcomes)):
            groups[gi].samples.extend(episode_samples(outcome, f"{record.id}#{ei}", groups[gi].prompt_ids,
                                                      self.tokenizer))
        return groups

    def _run_all(self, records: list[TaskRecord]) -> list[EpisodeOutcome]:
        outcomes = [EpisodeOutcome() for _ in records]
        slots = threading.Semaphore(self.workers)
        lock = threading.Lock()
        state = ["queued"] * len(records)  # queued -> running -> done | timed_out
        started = [0.0] * len(records)
        ids = [f"ep-{uuid.uuid4().hex[:12]}" for _ in records]

        def work(i: int) -> None:
            slots.acquire()
            with lock:
                state[i], started[i] = "running", time.monotonic()
            self.server.open_episode(ids[i], self.max_calls)
            reward: float | None = None
            error: str | None = None
            try:
                result = call_harness(self.fn, {"record": records[i], "base_url": self.server.base_url_for(ids[i]),
                                                "api_key": API_KEY, "model": self.model_name,
                                                **self.harness_params})
                reward, error = _check_reward(result)
            except BaseException as err:  # the user's code: any failure scores this episode 0, never the run
                error = f"{type(err).__name__}: {err}"
            with lock:
                if state[i] != "running":
                    return  # timed out: the main thread already scored it and freed its slot
                state[i] = "done"
                calls = self.server.close_episode(ids[i])
                outcomes[i] = EpisodeOutcome(reward, error, time.monotonic() - started[i], calls)
            slots.release()

        threads = [threading.Thread(target=work, args=(i,), name=f"rlvr-harness-{i}", daemon=True)
                   for i in range(len(records))]
        for t in threads:
            t.start()
        while True:
            with lock:
                now = time.monotonic()
                for i, s in enumerate(state):
                    if s == "running" and now - started[i] > self.timeout:
                        state[i] = "timed_out"  # its thread is abandoned; its later requests are refused
                        calls = self.server.close_episode(ids[i])
                        outcomes[i] = EpisodeOutcome(None, f"timed out after {self.timeout:g} s (agent.harness_timeout)",
                                                     now - started[i], calls)
                        slots.release()
                if all(s in ("done", "timed_out") for s in state):
                    break
            time.sleep(0.01)
        for i, o in enumerate(outcomes):
            if o.error:
                log.warning("harness episode on %s scored 0: %s", records[i].id, o.error)
        return outcomes


def _check_reward(result: Any) -> tuple[float | None, str | None]:
    """(reward, None) for a finite number or None; (None, why) otherwise."""
    if result is None:
        return None, None
    if isinstance(result, bool) or not isinstance(result, (int, float)) and not _is_number(result):
        return None, f"the harness returned {type(result).__name__} {str(result)[:80]!r}, not a number or None"
    value = float(result)
    if not math.isfinite(value):
        return None, f"the harness returned {value!r}, not a finite number"
    return value, None


def _is_number(x: Any) -> bool:
    try:  # numpy and torch scalars
        return hasattr(x, "item") and isinstance(x.item(), (int, float)) and not isinstance(x.item(), bool)
    except Exception:
        return False


def episode_samples(outcome: EpisodeOutcome, episode: str, fallback_prompt: list[int], tokenizer: Any) -> list[Sample]:
    """The episode's calls as Samples: a chain of calls, each prompt extending the previous prompt + completion,
    is one Sample (the tokens in between with loss mask 0 and log-prob 0); a call that breaks the chain starts
    the next Sample. Every Sample's `text` is the episode's last completion (the final answer a verifier
    scores); `meta["segment_text"]` is its own chain's last one. An episode without calls is one untrained
    placeholder Sample (reward 0 when it failed)."""
    meta = {"episode": episode, "harness_reward": outcome.reward, "harness_error": outcome.error,
            "harness_seconds": round(outcome.seconds, 4), "episode_calls": len(outcome.calls)}
    if not outcome.calls:
        eos = int(tokenizer.eos_token_id)
        return [Sample(list(fallback_prompt), [eos], [0.0], loss_mask=[0], finish_reason="stop", text="",
                       meta={**meta, "turns": 0, "tool_calls": 0, "tool_errors": 0, "truncated": None,
                             "segment": 0, "segments": 1})]
    chains: list[list[Call]] = []
    for call in outcome.calls:
        if chains and _extends(chains[-1], call):
            chains[-1].append(call)
        else:
            chains.append([call])
    samples = []
    for k, chain in enumerate(chains):
        head = chain[0]
        response: list[int] = []
        logprobs: list[float] | None = []
        mask: list[int] = []
        spans = []
        for j, call in enumerate(chain):
            if j:
                gap = call.prompt_ids[len(head.prompt_ids) + len(response):]
                response += gap
                mask += [0] * len(gap)
                if logprobs is not None:
                    logprobs += [0.0] * len(gap)
            spans.append([len(response), len(response) + len(call.completion_ids)])
            response += call.completion_ids
            mask += [1] * len(call.completion_ids)
            if logprobs is not None:
                logprobs = None if call.logprobs is None else logprobs + [float(x) for x in call.logprobs]
        last = chain[-1]
        samples.append(Sample(
            prompt_ids=list(head.prompt_ids), response_ids=response, logprobs=logprobs, loss_mask=mask,
            finish_reason=last.finish_reason, policy_version=head.policy_version, text=outcome.calls[-1].text,
            meta={**meta, "segment": k, "segments": len(chains), "turns": len(chain), "segment_text": last.text,
                  "tool_calls": sum(c.tool_calls for c in chain), "tool_errors": 0,
                  "truncated": "turn_tokens" if last.finish_reason == "length" else None, "turn_spans": spans,
                  "transcript": tokenizer.decode(response, skip_special_tokens=False)}))
    return samples


def _extends(chain: list[Call], call: Call) -> bool:
    """Whether `call`'s prompt starts with the chain's whole sequence so far (prompt, completions, gaps)."""
    last = chain[-1]
    seen = len(last.prompt_ids) + len(last.completion_ids)
    return (len(call.prompt_ids) >= seen and call.prompt_ids[: len(last.prompt_ids)] == last.prompt_ids
            and call.prompt_ids[len(last.prompt_ids): seen] == last.completion_ids)


def harness_metrics(groups: Sequence[Group]) -> dict[str, float]:
    """Per-step episode statistics (`harness/...`); empty when no sample came from a harness."""
    samples = [s for g in groups for s in g.samples if "episode" in s.meta]
    if not samples:
        return {}
    episodes: dict[str, Sample] = {}
    for s in samples:
        episodes.setdefault(s.meta["episode"], s)
    eps = list(episodes.values())
    n = len(eps)
    errors = [str(s.meta.get("harness_error") or "") for s in eps]
    return {
        "harness/episodes": float(n),
        "harness/samples_per_episode": len(samples) / n,
        "harness/calls_mean": sum(int(s.meta["episode_calls"]) for s in eps) / n,
        "harness/failed_frac": sum(bool(e) for e in errors) / n,
        "harness/timeout_frac": sum(e.startswith("timed out") for e in errors) / n,
        "harness/own_reward_frac": sum(s.meta.get("harness_reward") is not None for s in eps) / n,
        "harness/seconds_mean": sum(float(s.meta.get("harness_seconds", 0.0)) for s in eps) / n,
    }
