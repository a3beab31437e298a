"""An OpenAI-compatible HTTP endpoint in front of a rollout engine, for agent harnesses that speak `openai`.

    server = PolicyServer(engine, tokenizer, uses_chat=True, context_length=4096, model_name="policy")
    server.start()                       # uvicorn on 127.0.0.1, a free port, in a background thread
    episode = server.open_episode("e0")  # its base_url is server.base_url_for("e0")
    ...                                  # the harness calls /episodes/e0/v1/chat/completions
    calls = server.close_episode("e0")  # every call: exact prompt ids, completion ids, log-probs
    server.stop()

Routes (non-streaming only; `stream: true` is refused with an OpenAI-style error):
    GET  /v1/models                       (also under /episodes/{id}/v1/...)
    POST /v1/chat/completions             messages (text content), tools, max_tokens, stop, logprobs
    POST /v1/completions                  prompt (a string, or a list of token ids), max_tokens, stop, logprobs

Token in, token out. Every call is recorded with the token ids the engine was given and the ids and
behaviour log-probs it sampled. A request that continues an earlier call of the same episode (a chat whose
messages are that call's messages plus the assistant message it returned, then more; a completion prompt
that starts with that call's prompt and completion text) is built from that call's ids plus the tokens of the
new text only, so the model's own tokens are never re-tokenized and each call's prompt extends the previous
one token by token. Anything else is rendered and tokenized afresh.

Sampling follows the rollout's parameters (temperature, top_p, top_k: the learner recomputes log-probs at the
rollout temperature), whatever the client asks; `max_tokens` is honoured up to rollout.max_new_tokens and the
context length; `stop` strings are added to the rollout's. With `tools`, generation also stops at
`</tool_call>` and `<tool_call>{...}</tool_call>` blocks come back as OpenAI `tool_calls`.

Batching: requests go into one queue; a batcher thread takes what arrived within `batch_wait_ms` of the first
one and makes one `engine.generate` call per distinct stop list (all of them, usually), so many episodes in
flight share the engine. Only the batcher thread calls the engine.
"""

from __future__ import annotations

import asyncio
import json
import logging
import queue
import socket
import threading
import time
import uuid
from collections.abc import Sequence
from concurrent.futures import Future
from dataclasses import dataclass, field, replace
from typing import Any

from rlvr.rollout.base import RolloutEngine, SamplingParams
from rlvr.rollout.format import CALL_CLOSE, CALL_OPEN, format_tool_call, parse_tool_calls, tools_preamble
from rlvr.rollout.tools.base import ToolCall
from rlvr.types import Sample

log = logging.getLogger(__name__)

SERVE_HINT = "pip install 'rlvr[serve]'"
_PLACEHOLDER = "\x00RLVR_SAMPLED_TURN\x00"
KEEP_ALIVE_S = 24 * 3600


def require_serve() -> None:
    """Fail with the fix when the `serve` extra (fastapi, uvicorn) is missing."""
    missing = []
    for name in ("fastapi", "uvicorn"):
        try:
            __import__(name)
        except ImportError:
            missing.append(name)
    if missing:
        raise ImportError(f"rollout.mode=openai_server needs {' and '.join(missing)}: {SERVE_HINT}")


class APIError(Exception):
    """An OpenAI-style error response: HTTP `status` with {"error": {message, type, param, code}}."""

    def __init__(self, message: str, status: int = 400, code: str | None = None, param: str | None = None,
                 kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status, self.code, self.param, self.kind = status, code, param, kind

    def body(self) -> dict[str, Any]:
        return {"error": {"message": str(self), "type": self.kind, "param": self.param, "code": self.code}}


@dataclass
class Call:
    """One served request: what the engine got and sampled, and what the client saw."""

    kind: str  # "chat" or "completion"
    prompt_ids: list[int]
    completion_ids: list[int]
    logprobs: list[float] | None
    finish_reason: str  # "stop" or "length" (the engine's)
    policy_version: int
    text: str  # the completion as the client got it (special tokens skipped)
    prompt_text: str
    tool_calls: int = 0
    started: float = 0.0
    # how a later request is recognised as continuing this call
    messages: list[Any] | None = None  # chat: the request's messages, normalised
    tools: Any = None
    reply: Any = None  # chat: the assistant message returned, normalised


@dataclass
class Episode:
    id: str
    max_calls: int
    calls: list[Call] = field(default_factory=list)
    closed: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)


@dataclass
class _Pending:
    prompt_ids: list[int]
    max_tokens: int
    stop: tuple[str, ...]
    future: Future


class PolicyServer:
    """The endpoint (see the module docstring). `params` (the rollout's sampling parameters) may be replaced
    between rollouts with `set_params`; `batch_sizes` lists the size of every engine call it made."""

    def __init__(self, engine: RolloutEngine, tokenizer: Any, *, uses_chat: bool, context_length: int,
                 model_name: str = "policy", params: SamplingParams | None = None, batch_wait_ms: float = 5.0,
                 max_batch: int = 256, host: str = "127.0.0.1"):
        require_serve()
        self.engine, self.tokenizer, self.uses_chat = engine, tokenizer, uses_chat
        self.context_length, self.model_name = int(context_length), model_name
        self.params = params or SamplingParams()
        self.batch_wait = batch_wait_ms / 1000.0
        self.max_batch, self.host = max_batch, host
        self.eos_ids = set(getattr(engine, "eos_ids", None) or [int(tokenizer.eos_token_id)])
        self.episodes: dict[str, Episode] = {}
        self.batch_sizes: list[int] = []
        self.port = 0
        self._queue: queue.Queue[_Pending] = queue.Queue()
        self._closed = threading.Event()
        self._server: Any = None
        self._threads: list[threading.Thread] = []

    # -- lifecycle ---------------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}/v1"

    def base_url_for(self, episode: str) -> str:
        return f"http://{self.host}:{self.port}/episodes/{episode}/v1"

    def start(self) -> PolicyServer:
        import uvicorn

        self._closed.clear()
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((self.host, 0))  # a free port, held from here on (no race with another process)
        self.port = sock.getsockname()[1]
        # Keep idle connections for the whole run: a harness's pooled connection that the server closed while the
        # learner trained (uvicorn's default: after 5 s) fails the next step's first request with a connection error.
        config = uvicorn.Config(build_app(self), log_level="warning", lifespan="off", access_log=False,
                                timeout_keep_alive=KEEP_ALIVE_S)
        self._server = uvicorn.Server(config)
        batcher = threading.Thread(target=self._batch_loop, name="rlvr-server-batcher", daemon=True)
        http = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, name="rlvr-server-http",
                                daemon=True)
        self._threads = [batcher, http]
        for t in self._threads:
            t.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not http.is_alive() or time.monotonic() > deadline:
                raise RuntimeError(f"the OpenAI-compatible server did not start on {self.host}:{self.port}")
            time.sleep(0.01)
        log.info("OpenAI-compatible endpoint at %s", self.base_url)
        return self

    def stop(self) -> None:
        self._closed.set()
        if self._server is not None:
            self._server.should_exit = True
        for t in self._threads:
            t.join(timeout=10)
        self._threads = []

    def set_params(self, params: SamplingParams) -> None:
        self.params = params

    # -- episodes ----------------------------------------------------------------------------------------

    def open_episode(self, episode: str, max_calls: int) -> Episode:
        e = Episode(episode, max_calls)
        self.episodes[episode] = e
        return e

    def close_episode(self, episode: str) -> list[Call]:
        """End the episode (later requests for it are refused) and return its calls in the order they began."""
        e = self.episodes.pop(episode, None)
        if e is None:
            return []
        with e.lock:
            e.closed = True
            return sorted(e.calls, key=lambda c: c.started)

    def _episode(self, episode: str | None) -> Episode | None:
        if episode is None:
            return None
        e = self.episodes.get(episode)
        if e is None or e.closed:
            raise APIError(f"episode {episode!r} is not running (it ended, timed out, or never started)", 404,
                           "episode_not_found")
        with e.lock:
            if len(e.calls) >= e.max_calls:
                raise APIError(f"episode {episode!r} used its {e.max_calls} model calls (agent.max_turns)", 400,
                               "call_budget_exhausted")
        return e

    # -- requests ----------------------------------------------------------------------------------------

    async def chat(self, body: dict[str, Any], episode: str | None) -> dict[str, Any]:
        ep = self._episode(episode)
        _check_common(body)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise APIError("'messages' must be a non-empty list", param="messages")
        messages = [_normalise_message(m, i) for i, m in enumerate(messages)]
        tools = body.get("tools") or None
        if tools is not None and not isinstance(tools, list):
            raise APIError("'tools' must be a list", param="tools")
        use_tools = tools is not None and body.get("tool_choice") != "none"
        started = time.monotonic()
        ids, text = self._chat_prompt(messages, tools if use_tools else None, ep)
        stop = _stops(body) + ((CALL_CLOSE,) if use_tools else ())
        sample = await self._generate(ids, body, stop, "messages")
        content = sample.text
        calls = [c for c in parse_tool_calls(content) if isinstance(c, ToolCall)] if use_tools else []
        message: dict[str, Any] = {"role": "assistant", "content": content}
        if calls:
            before = content[: content.find(CALL_OPEN)].strip()
            message["content"] = before or None
            message["tool_calls"] = [{"id": f"call_{uuid.uuid4().hex[:12]}", "type": "function",
                                      "function": {"name": c.name, "arguments": json.dumps(c.arguments)}}
                                     for c in calls]
        finish = "tool_calls" if calls else sample.finish_reason
        self._record(ep, Call("chat", ids, list(sample.response_ids), sample.logprobs, sample.finish_reason,
                              sample.policy_version, content, text, len(calls), started, messages,
                              _canonical(tools if use_tools else None), _reply_key(message)))
        choice: dict[str, Any] = {"index": 0, "message": message, "finish_reason": finish, "logprobs": None}
        if body.get("logprobs"):
            choice["logprobs"] = {"content": [{"token": self._piece(t), "logprob": lp, "bytes": None,
                                               "top_logprobs": []}
                                              for t, lp in zip(sample.response_ids, sample.logprobs or [])]}
        return self._response("chat.completion", "chatcmpl", [choice], ids, sample)

    async def completion(self, body: dict[str, Any], episode: str | None) -> dict[str, Any]:
        ep = self._episode(episode)
        _check_common(body)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], (str, list)):
            prompt = prompt[0]  # a batch of one
        started = time.monotonic()
        if isinstance(prompt, str):
            ids, text = self._completion_prompt(prompt, ep)
        elif isinstance(prompt, list) and prompt and all(isinstance(t, int) and not isinstance(t, bool)
                                                         for t in prompt):
            vocab = len(self.tokenizer)
            if any(t < 0 or t >= vocab for t in prompt):
                raise APIError(f"'prompt' token ids must be in [0, {vocab})", param="prompt")
            ids, text = list(prompt), self.tokenizer.decode(prompt, skip_special_tokens=False)
        else:
            raise APIError("'prompt' must be a string or a list of token ids (one prompt per request)", param="prompt")
        sample = await self._generate(ids, body, _stops(body), "prompt")
        self._record(ep, Call("completion", ids, list(sample.response_ids), sample.logprobs, sample.finish_reason,
                              sample.policy_version, sample.text, text, 0, started))
        choice: dict[str, Any] = {"index": 0, "text": sample.text, "finish_reason": sample.finish_reason,
                                  "logprobs": None}
        if body.get("logprobs") is not None and body.get("logprobs") is not False:
            choice["logprobs"] = {"tokens": [self._piece(t) for t in sample.response_ids],
                                  "token_logprobs": list(sample.logprobs or []), "top_logprobs": None,
                                  "text_offset": None}
        return self._response("text_completion", "cmpl", [choice], ids, sample)

    def models(self) -> dict[str, Any]:
        return {"object": "list", "data": [{"id": self.model_name, "object": "model", "created": 0,
                                            "owned_by": "rlvr"}]}

    # -- prompts -----------------------------------------------------------------------------------------

    def render(self, messages: list[dict[str, Any]], tools: list[Any] | None) -> str:
        """Messages as prompt text: the chat template, or the plain format (docs/environments.md)."""
        if self.uses_chat:
            kwargs = {"tools": tools} if tools else {}
            try:
                return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False,
                                                          **kwargs)
            except Exception as err:  # a template that rejects these messages
                raise APIError(f"the chat template cannot render these messages: {type(err).__name__}: {err}",
                               param="messages") from None
        return plain_render(messages, tools)

    def _chat_prompt(self, messages: list[dict[str, Any]], tools: list[Any] | None,
                     ep: Episode | None) -> tuple[list[int], str]:
        prior = self._continued_chat(messages, tools, ep)
        if prior is not None:
            call, k = prior
            marked = [*messages[:k], {"role": "assistant", "content": _PLACEHOLDER}, *messages[k + 1 :]]
            full = self.render(marked, tools)
            cut = full.find(_PLACEHOLDER)
            if cut >= 0 and full[:cut] == call.prompt_text:  # the template renders the history as before
                return self._extend(call, full[cut + len(_PLACEHOLDER) :]), self.render(messages, tools)
        text = self.render(messages, tools)
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"]), text

    def _continued_chat(self, messages: list[dict[str, Any]], tools: list[Any] | None,
                        ep: Episode | None) -> tuple[Call, int] | None:
        """The latest chat call of the episode whose messages and reply start this request's messages."""
        if ep is None:
            return None
        key = _canonical(tools)
        with ep.lock:
            calls = list(ep.calls)
        for call in reversed(calls):
            k = len(call.messages or [])
            if (call.kind == "chat" and len(messages) > k and call.tools == key and messages[:k] == call.messages
                    and _reply_key(messages[k]) == call.reply):
                return call, k
        return None

    def _completion_prompt(self, prompt: str, ep: Episode | None) -> tuple[list[int], str]:
        if ep is not None:
            with ep.lock:
                calls = list(ep.calls)
            for call in reversed(calls):
                head = call.prompt_text + call.text
                if call.kind == "completion" and prompt.startswith(head):
                    return self._extend(call, prompt[len(head) :]), prompt
        return list(self.tokenizer(prompt)["input_ids"]), prompt

    def _extend(self, call: Call, suffix: str) -> list[int]:
        """`call`'s prompt and sampled ids, then the new text's tokens (an end-of-turn token the model sampled
        and the rendering repeats is not doubled)."""
        new = list(self.tokenizer(suffix, add_special_tokens=False)["input_ids"]) if suffix else []
        last = call.completion_ids[-1] if call.completion_ids else None
        if new and last is not None and last in self.eos_ids and new[0] == last:
            new = new[1:]
        return [*call.prompt_ids, *call.completion_ids, *new]

    # -- generation --------------------------------------------------------------------------------------

    async def _generate(self, ids: list[int], body: dict[str, Any], stop: tuple[str, ...], param: str) -> Sample:
        room = self.context_length - len(ids)
        if room < 1:
            raise APIError(f"This model's maximum context length is {self.context_length} tokens. However, your "
                           f"prompt has {len(ids)} tokens. Please reduce the length of the {param}.", 400,
                           "context_length_exceeded", param)
        asked = body.get("max_completion_tokens", body.get("max_tokens"))
        if asked is not None and (not isinstance(asked, int) or isinstance(asked, bool) or asked < 1):
            raise APIError("'max_tokens' must be a positive integer", param="max_tokens")
        max_tokens = min(asked or self.params.max_new_tokens, self.params.max_new_tokens, room)
        if self._closed.is_set():
            raise APIError("the server is shutting down", 503, kind="server_error")
        pending = _Pending(ids, max_tokens, tuple(dict.fromkeys([*self.params.stop, *stop])), Future())
        self._queue.put(pending)
        return await asyncio.wrap_future(pending.future)

    def _batch_loop(self) -> None:
        while not self._closed.is_set():
            try:
                first = self._queue.get(timeout=0.05)
            except queue.Empty:
                continue
            batch = [first]
            deadline = time.monotonic() + self.batch_wait
            while len(batch) < self.max_batch:
                try:
                    batch.append(self._queue.get(timeout=max(0.0, deadline - time.monotonic())))
                except queue.Empty:
                    break
            by_stop: dict[tuple[str, ...], list[_Pending]] = {}
            for p in batch:
                by_stop.setdefault(p.stop, []).append(p)
            for stop, items in by_stop.items():
                self._run(items, stop)
        for p in _drain(self._queue):
            p.future.set_exception(APIError("the server is shutting down", 503, kind="server_error"))

    def _run(self, items: list[_Pending], stop: tuple[str, ...]) -> None:
        params = replace(self.params, n=1, max_new_tokens=max(p.max_tokens for p in items), stop=list(stop))
        try:
            outputs = self.engine.generate([p.prompt_ids for p in items], params)
        except Exception as err:  # an engine failure fails these requests, not the server
            log.warning("engine.generate failed for %d requests: %s: %s", len(items), type(err).__name__, err)
            for p in items:
                p.future.set_exception(APIError(f"generation failed: {type(err).__name__}: {err}", 500,
                                                kind="server_error"))
            return
        self.batch_sizes.append(len(items))
        for p, out in zip(items, outputs):
            s = out[0]
            if len(s.response_ids) > p.max_tokens:  # a shorter budget than the batch's: a prefix of the sample
                ids = list(s.response_ids)[: p.max_tokens]
                s = replace(s, response_ids=ids, loss_mask=[1] * len(ids), finish_reason="length",
                            logprobs=None if s.logprobs is None else list(s.logprobs)[: p.max_tokens],
                            text=self.tokenizer.decode(ids, skip_special_tokens=True))
            p.future.set_result(s)

    # -- helpers -----------------------------------------------------------------------------------------

    def _record(self, ep: Episode | None, call: Call) -> None:
        if ep is None:
            return
        with ep.lock:
            if not ep.closed:  # a call that finishes after its episode timed out is not kept
                ep.calls.append(call)

    def _piece(self, token: int) -> str:
        return self.tokenizer.decode([token], skip_special_tokens=False)

    def _response(self, obj: str, prefix: str, choices: list[Any], ids: list[int], sample: Sample) -> dict[str, Any]:
        n = len(sample.response_ids)
        return {"id": f"{prefix}-{uuid.uuid4().hex}", "object": obj, "created": int(time.time()),
                "model": self.model_name, "choices": choices,
                "usage": {"prompt_tokens": len(ids), "completion_tokens": n, "total_tokens": len(ids) + n}}


def _drain(q: queue.Queue) -> list[Any]:
    out = []
    while True:
        try:
            out.append(q.get_nowait())
        except queue.Empty:
            return out


def _check_common(body: dict[str, Any]) -> None:
    if body.get("stream"):
        raise APIError("streaming is not supported by this endpoint; send stream=false", param="stream")
    if body.get("n", 1) != 1:
        raise APIError("only n=1 is supported (run the harness several times for several samples)", param="n")


def _stops(body: dict[str, Any]) -> tuple[str, ...]:
    stop = body.get("stop")
    if stop is None:
        return ()
    if isinstance(stop, str):
        return (stop,)
    if isinstance(stop, list) and all(isinstance(s, str) for s in stop):
        return tuple(s for s in stop if s)
    raise APIError("'stop' must be a string or a list of strings", param="stop")


def _text(content: Any, where: str) -> str:
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") in ("text", "input_text") and isinstance(part.get("text"), str):
                parts.append(part["text"])
            else:
                raise APIError(f"{where}: only text content parts are supported", param="messages")
        return "".join(parts)
    raise APIError(f"{where}: content must be a string or a list of text parts", param="messages")


def _normalise_message(m: Any, i: int) -> dict[str, Any]:
    """A message as the chat template reads it: role, text content, and tool calls with parsed arguments."""
    if not isinstance(m, dict) or not isinstance(m.get("role"), str):
        raise APIError(f"messages[{i}] must be an object with a 'role'", param="messages")
    role = "system" if m["role"] == "developer" else m["role"]
    if role not in ("system", "user", "assistant", "tool"):
        raise APIError(f"messages[{i}].role: unknown role {m['role']!r}", param="messages")
    out: dict[str, Any] = {"role": role, "content": _text(m.get("content"), f"messages[{i}]")}
    calls = m.get("tool_calls")
    if role == "assistant" and calls:
        parsed = []
        for c in calls:
            fn = (c or {}).get("function") or {}
            args = fn.get("arguments", {})
            if isinstance(args, str):
                try:
                    args = json.loads(args) if args.strip() else {}
                except ValueError:
                    raise APIError(f"messages[{i}].tool_calls: arguments are not JSON", param="messages") from None
            parsed.append({"type": "function", "function": {"name": fn.get("name", ""), "arguments": args}})
        out["tool_calls"] = parsed
    if role == "tool":
        for k in ("tool_call_id", "name"):
            if m.get(k) is not None:
                out[k] = m[k]
    return out


def _reply_key(message: dict[str, Any]) -> Any:
    """What identifies an assistant message when a client sends it back: its text and its calls."""
    if message.get("role") != "assistant":
        return None
    calls = [(c["function"]["name"], _canonical(_args(c["function"].get("arguments"))))
             for c in message.get("tool_calls") or []]
    return ((message.get("content") or "").strip(), calls)


def _args(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except ValueError:
            return arguments
    return arguments


def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True)


def plain_render(messages: Sequence[dict[str, Any]], tools: list[Any] | None) -> str:
    """The prompt text of a chat without a chat template (the built-in model's byte tokenizer):

        [<tools> block]  system content + "\\n"  first user content  assistant content (+ its calls)
        later user messages as "\\n<content>\\n"  tool messages as <tool_response>content</tool_response>

    so one user message is exactly the text of a plain task prompt, and a conversation is the agent loop's
    plain transcript (docs/agents.md)."""
    parts = [tools_preamble([t.get("function", t) if isinstance(t, dict) else t for t in tools])] if tools else []
    seen_turn = False
    for m in messages:
        role, content = m["role"], m.get("content") or ""
        if role == "system":
            parts.append(content + "\n")
        elif role == "user":
            parts.append(f"\n{content}\n" if seen_turn else content)
        elif role == "tool":
            parts.append(f"<tool_response>{content}</tool_response>")
        else:
            seen_turn = True
            calls = "".join(format_tool_call(c["function"]["name"], _args(c["function"]["arguments"]))
                            for c in m.get("tool_calls") or [])
            parts.append(content + calls)
    return "".join(parts)


def build_app(server: PolicyServer) -> Any:
    """The FastAPI app (rlvr.rollout.openai_app, imported only when a server starts)."""
    from rlvr.rollout.openai_app import build_app as build

    return build(server, APIError)
