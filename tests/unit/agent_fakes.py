"""Test doubles for agent rollouts: a scripted engine that records every call, and a few scripted policies."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from rlvr.rollout.base import RolloutEngine, SamplingParams
from rlvr.rollout.format import format_tool_call
from rlvr.types import Sample

# a chat template with tools in the Hermes/Qwen style (<tool_call> blocks, <tool_response> observations)
TOOLS_TEMPLATE = (
    "{%- if tools %}<|system|>Tools:{% for t in tools %}\n{{ t | tojson }}{% endfor %}<|endoftext|>{% endif %}"
    "{%- for m in messages %}<|{{ m['role'] }}|>"
    "{% if m['role'] == 'tool' %}<tool_response>\n{{ m['content'] }}\n</tool_response>"
    "{% else %}{{ m['content'] }}{% endif %}<|endoftext|>{% endfor %}"
    "{%- if add_generation_prompt %}<|assistant|>{% endif %}"
)

# policy(context text) -> (action text, end) with end "eos" (append EOS) or None (stopped by a stop string)
Policy = Callable[[str], tuple[str, str | None]]


class ScriptedEngine(RolloutEngine):
    """Plays `policy` on the decoded context; honours stop strings and max_new_tokens like the HF engine.

    Every call is recorded in `calls`: the contexts it got and the token ids (and log-probs) it returned."""

    def __init__(self, tokenizer, policy: Policy):
        self.tokenizer = tokenizer
        self.policy = policy
        self.eos_ids = [int(tokenizer.eos_token_id)]
        self.calls: list[dict] = []
        self.counter = 0

    def generate(self, prompts: Sequence[Sequence[int]], params: SamplingParams) -> list[list[Sample]]:
        out, record = [], {"contexts": [], "outputs": [], "logprobs": [], "params": params}
        for p in prompts:
            group = []
            for _ in range(params.n):
                text, end = self.policy(self.tokenizer.decode(list(p)))
                for stop in params.stop:
                    if stop in text:
                        text, end = text[: text.index(stop) + len(stop)], None
                ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
                if end == "eos":
                    ids.append(self.eos_ids[0])
                finish = "stop"
                if len(ids) > params.max_new_tokens:
                    ids, finish = ids[: params.max_new_tokens], "length"
                logprobs = []
                for _ in ids:
                    self.counter += 1
                    logprobs.append(-0.001 * (self.counter % 997) - 0.01)
                record["contexts"].append(list(p))
                record["outputs"].append(ids)
                record["logprobs"].append(logprobs)
                group.append(Sample(list(p), ids, logprobs, finish_reason=finish, policy_version=self.policy_version,
                                    text=self.tokenizer.decode(ids, skip_special_tokens=True)))
            out.append(group)
        self.calls.append(record)
        return out


_QUESTION = re.compile(r"(\d+\+\d+)=")
_RESPONSE = re.compile(r"<tool_response>(.*?)</tool_response>", re.DOTALL)
_OBSERVATION = re.compile(r"(?:<tool_response>.*?</tool_response>)+", re.DOTALL)  # one block per turn


def calculator_policy(calls: int = 1, expression: Callable[[str], str] | None = None) -> Policy:
    """Call the calculator `calls` times on the question, then answer with the last tool response."""

    def policy(context: str) -> tuple[str, str | None]:
        question = _QUESTION.findall(context)[-1]
        seen = _RESPONSE.findall(context)
        if len(seen) < calls:
            expr = expression(question) if expression else question
            return format_tool_call("calculator", {"expression": expr}), None
        return f"A:{seen[-1] if seen else '0'}", "eos"

    return policy


def raw_policy(*turns: str) -> Policy:
    """Turn i (counted by the tool responses in the context) emits turns[i]; the last one ends with EOS."""

    def policy(context: str) -> tuple[str, str | None]:
        i = min(len(_OBSERVATION.findall(context)), len(turns) - 1)
        return turns[i], "eos" if i == len(turns) - 1 else None

    return policy
