"""The tool-call format: how tools are announced, how calls are parsed and how observations are rendered.

Calls (Qwen/Hermes style, for every tokenizer; the byte tokenizer reads them one character per token):

    <tool_call>{"name": "calculator", "arguments": {"expression": "48213+9921"}}</tool_call>

Whitespace around the JSON is allowed; `arguments` may also be a JSON string holding the object. Several
calls in one turn run in order. A turn's generation stops at `</tool_call>` (or EOS).

Observations, with a chat template (`tools` rendered by the template itself when it supports them): one
`{"role": "tool", "content": output}` message per call, tokenized as the text the template adds after the
assistant's turn, up to and including the next assistant header (e.g. Qwen2.5:
`<|im_end|>\\n<|im_start|>user\\n<tool_response>\\n58134\\n</tool_response><|im_end|>\\n<|im_start|>assistant\\n`).
The end-of-turn marker belongs to the observation (loss mask 0) unless the model sampled it itself.

Observations without a chat template (the built-in model), one per call, concatenated:

    <tool_response>58134</tool_response>

Environments whose observations are not tool outputs (games: role `user`) render as a user message with a
chat template, and as `\\n<observation>\\n` otherwise. A failed call's output is `Error: <why>`.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from rlvr.rollout.tools.base import MalformedCall, ToolCall

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"
RESPONSE_OPEN, RESPONSE_CLOSE = "<tool_response>", "</tool_response>"
_PLACEHOLDER = "\x00RLVR_ASSISTANT_TURN\x00"


def parse_tool_calls(text: str) -> list[ToolCall | MalformedCall]:
    """Every `<tool_call>...</tool_call>` block of `text`, in order; an unclosed last block is malformed."""
    out: list[ToolCall | MalformedCall] = []
    pos = 0
    while (start := text.find(CALL_OPEN, pos)) >= 0:
        body_start = start + len(CALL_OPEN)
        end = text.find(CALL_CLOSE, body_start)
        if end < 0:
            out.append(MalformedCall(f"unclosed {CALL_OPEN} (expected {CALL_CLOSE})", text[start:]))
            break
        raw = text[start : end + len(CALL_CLOSE)]
        out.append(_parse_body(text[body_start:end].strip(), raw))
        pos = end + len(CALL_CLOSE)
    return out


def _parse_body(body: str, raw: str) -> ToolCall | MalformedCall:
    try:
        obj = json.loads(body)
    except json.JSONDecodeError as err:
        return MalformedCall(f"tool call is not valid JSON: {err.msg} at char {err.pos}", raw)
    except (ValueError, RecursionError) as err:  # an integer past Python's digit limit; nesting too deep
        return MalformedCall(f"tool call is not usable JSON: {type(err).__name__}: {str(err)[:100]}", raw)
    if not isinstance(obj, dict):
        return MalformedCall('tool call must be a JSON object {"name": ..., "arguments": {...}}', raw)
    name = obj.get("name")
    if not isinstance(name, str) or not name:
        return MalformedCall('tool call has no "name" string', raw)
    args = obj.get("arguments", obj.get("parameters", {}))
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except (ValueError, RecursionError):  # JSONDecodeError, too many digits, too deep
            return MalformedCall(f'"arguments" of {name} is a string that is not a JSON object', raw)
    if not isinstance(args, dict):
        return MalformedCall(f'"arguments" of {name} must be a JSON object', raw)
    return ToolCall(name, args, raw)


def format_tool_call(name: str, arguments: dict[str, Any]) -> str:
    """The canonical text of a call (what synthetic traces use)."""
    return f"{CALL_OPEN}{json.dumps({'name': name, 'arguments': arguments})}{CALL_CLOSE}"


def tools_preamble(schemas: Sequence[dict[str, Any]]) -> str:
    """How tools are announced without a tools-aware chat template."""
    lines = [json.dumps(s.get("function", s)) for s in schemas]
    return ("<tools>\n" + "\n".join(lines) + "\n</tools>\n"
            f'Call a tool with {CALL_OPEN}{{"name": <tool name>, "arguments": <JSON object>}}{CALL_CLOSE}\n')


def template_supports_tools(tokenizer: Any) -> bool:
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("tool_use") or template.get("default")
    return isinstance(template, str) and "tools" in template


class AgentFormat:
    """Renders prompts (with tool schemas) and observations to token ids for one tokenizer."""

    def __init__(self, tokenizer: Any, uses_chat: bool, *, tools_in_prompt: bool = True):
        self.tokenizer = tokenizer
        self.uses_chat = uses_chat
        self.tools_in_prompt = tools_in_prompt
        self.template_tools = uses_chat and template_supports_tools(tokenizer)

    def prompt(self, task: Any, first_observation: str, schemas: Sequence[dict[str, Any]]) -> tuple[list[int], str]:
        """Prompt ids and text: the task's template around the environment's first observation."""
        tok = self.tokenizer
        announce = bool(schemas) and self.tools_in_prompt
        if not self.uses_chat:
            text = task.prompt_template.format(question=first_observation)
            if announce:
                text = tools_preamble(schemas) + text
            return list(tok(text)["input_ids"]), text
        system = task.system_prompt
        kwargs: dict[str, Any] = {}
        if announce and self.template_tools:
            kwargs["tools"] = list(schemas)
        elif announce:
            system = tools_preamble(schemas) + (f"\n{system}" if system else "")
        messages = [{"role": "system", "content": system}] if system else []
        messages.append({"role": "user", "content": task.chat_prompt_template.format(question=first_observation)})
        text = tok.apply_chat_template(messages, add_generation_prompt=True, tokenize=False, **kwargs)
        return list(tok(text, add_special_tokens=False)["input_ids"]), text

    def observation_text(self, role: str, outputs: Sequence[str]) -> str:
        """The text appended after the model's turn (see the module docstring)."""
        if not self.uses_chat:
            if role == "tool":
                return "".join(f"{RESPONSE_OPEN}{o}{RESPONSE_CLOSE}" for o in outputs)
            return "\n" + "\n".join(outputs) + "\n"
        if role == "tool":
            messages = [{"role": "tool", "content": o} for o in outputs]
        else:
            messages = [{"role": role, "content": "\n".join(outputs)}]
        head = [{"role": "user", "content": "u"}, {"role": "assistant", "content": _PLACEHOLDER}]
        full = self.tokenizer.apply_chat_template(head + messages, add_generation_prompt=True, tokenize=False)
        cut = full.rfind(_PLACEHOLDER)
        if cut < 0:
            raise ValueError("the chat template does not render assistant messages verbatim, so observations "
                             "cannot be appended token-in/token-out; use model.chat_template=off")
        return full[cut + len(_PLACEHOLDER) :]

    def observation_ids(self, role: str, outputs: Sequence[str], last_token: int | None,
                        end_of_turn: Sequence[int] = ()) -> list[int]:
        """Observation token ids. If the model ended its turn with an end-of-turn token that the rendering also
        starts with, that token is not repeated."""
        ids = list(self.tokenizer(self.observation_text(role, outputs), add_special_tokens=False)["input_ids"])
        if self.uses_chat and ids and last_token is not None and last_token in end_of_turn and ids[0] == last_token:
            ids = ids[1:]
        return ids

    def truncate(self, text: str, max_tokens: int) -> tuple[str, bool]:
        """`text` cut to `max_tokens` tokens (with a marker), and whether it was cut."""
        ids = self.tokenizer(text, add_special_tokens=False)["input_ids"]
        if len(ids) <= max_tokens:
            return text, False
        return self.tokenizer.decode(ids[:max_tokens], skip_special_tokens=True) + "...[truncated]", True
