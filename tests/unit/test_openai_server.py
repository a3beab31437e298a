"""The OpenAI-compatible endpoint and agent harnesses (rollout.mode=openai_server): token in/token out through
HTTP, episode assembly, batching of concurrent episodes, tool calls, and bad input."""

from __future__ import annotations

import asyncio
import json
import re
import threading
import time

import pytest

openai = pytest.importorskip("openai")
pytest.importorskip("fastapi")
pytest.importorskip("uvicorn")

from agent_fakes import TOOLS_TEMPLATE, ScriptedEngine  # noqa: E402

from rlvr.config import load_config  # noqa: E402
from rlvr.errors import ConfigError  # noqa: E402
from rlvr.models import load_causal_lm, load_tokenizer  # noqa: E402
from rlvr.models.byte_tokenizer import build_byte_tokenizer  # noqa: E402
from rlvr.rewards import RewardFunction  # noqa: E402
from rlvr.rewards.agent import HarnessReward  # noqa: E402
from rlvr.rollout import SamplingParams, agent_metrics, build_engine  # noqa: E402
from rlvr.rollout.format import format_tool_call  # noqa: E402
from rlvr.rollout.harness import HarnessRunner, load_harness  # noqa: E402
from rlvr.tasks import PromptRenderer, build_task  # noqa: E402
from rlvr.types import Batch  # noqa: E402

CALCULATOR = {"type": "function", "function": {"name": "calculator", "description": "Evaluate arithmetic.",
                                               "parameters": {"type": "object",
                                                              "properties": {"expression": {"type": "string"}}}}}


class RecordingEngine:
    """Wraps an engine; records every generate call: the prompts, the sampled ids and log-probs."""

    def __init__(self, engine):
        self.engine, self.calls = engine, []
        self.eos_ids = getattr(engine, "eos_ids", None)
        self.policy_version = 0

    def generate(self, prompts, params):
        out = self.engine.generate(prompts, params)
        self.calls.append({"contexts": [list(p) for p in prompts], "outputs": [list(o[0].response_ids) for o in out],
                           "logprobs": [list(o[0].logprobs) for o in out], "params": params})
        return out


@pytest.fixture(scope="module")
def builtin():
    tok = load_tokenizer("builtin")
    return tok, build_engine("fast", {}, 256, load_causal_lm("builtin"), tok)


@pytest.fixture(scope="module")
def task():
    return build_task("addition", {"digits": [2, 4], "eval_size": 20})


def runner_for(engine, tok, harness, **kw):
    kw.setdefault("uses_chat", False)
    kw.setdefault("context_length", 512)
    return HarnessRunner(engine, tok, harness, **kw)


def rollout(runner, task, records, n=2, max_new_tokens=96, temperature=1.0):
    try:
        return runner.rollout_groups(PromptRenderer(task, runner.tokenizer), records,
                                     SamplingParams(n=n, max_new_tokens=max_new_tokens, temperature=temperature))
    finally:
        runner.close()


def engine_outputs(engine):
    """(context, output ids, log-probs) of every sequence the engine sampled."""
    return [(c, o, lp) for call in engine.calls for c, o, lp in zip(call["contexts"], call["outputs"],
                                                                   call["logprobs"])]


def assert_samples_are_what_the_engine_sampled(groups, engine):
    """Every trained token of every sample is, in order, a token the engine sampled for exactly that context,
    with its behaviour log-prob; nothing else is trained on."""
    sampled = engine_outputs(engine)  # each engine output is claimed by one model turn of one sample
    for s in (s for g in groups for s in g.samples):
        if s.meta["episode_calls"] == 0:
            continue
        for start, end in s.meta["turn_spans"]:
            context = s.prompt_ids + s.response_ids[:start]
            match = [i for i, (c, o, lp) in enumerate(sampled)
                     if c == context and o[: end - start] == s.response_ids[start:end]
                     and lp[: end - start] == s.logprobs[start:end]]  # exactly, not approximately
            assert match, "a model turn is not what the engine sampled for prompt + everything before it"
            sampled.pop(match[0])
            assert s.loss_mask[start:end] == [1] * (end - start)
        assert sum(s.loss_mask) == sum(e - b for b, e in s.meta["turn_spans"])


# -- harnesses ----------------------------------------------------------------------------------------------


def chat_harness(record, *, base_url, api_key, model):
    client = openai.OpenAI(base_url=base_url, api_key=api_key)
    client.chat.completions.create(model=model, messages=[{"role": "user", "content": f"{record.question}="}])
    return None  # the task's verifier scores the last completion


def two_turn_harness(record, *, base_url, api_key, model):
    """Asks, then continues the same conversation (a second user turn): one Sample per episode."""
    client = openai.OpenAI(base_url=base_url, api_key=api_key)
    messages = [{"role": "user", "content": f"{record.question}="}]
    first = client.chat.completions.create(model=model, messages=messages, max_tokens=40)
    messages += [{"role": "assistant", "content": first.choices[0].message.content},
                 {"role": "user", "content": f"{record.question}="}]
    client.chat.completions.create(model=model, messages=messages)
    return None


def completion_harness(record, *, base_url, api_key, model):
    """The completions API, continuing its own text, then a fresh unrelated prompt (a second Sample)."""
    client = openai.OpenAI(base_url=base_url, api_key=api_key)
    prompt = f"{record.question}="
    first = client.completions.create(model=model, prompt=prompt, max_tokens=8)
    client.completions.create(model=model, prompt=prompt + first.choices[0].text + "|", max_tokens=8)
    client.completions.create(model=model, prompt="1+1=", max_tokens=8)
    return 0.5


async def async_harness(record, *, base_url, api_key, model):
    client = openai.AsyncOpenAI(base_url=base_url, api_key=api_key)
    reply = await client.chat.completions.create(model=model, messages=[{"role": "user",
                                                                         "content": f"{record.question}="}])
    return 1.0 if reply.choices[0].message.content.endswith(f"A:{record.answer}") else 0.0


# -- token in, token out ----------------------------------------------------------------------------------


def test_chat_samples_are_the_engines_tokens_and_the_verifier_scores_them(builtin, task):
    tok, fast = builtin
    engine = RecordingEngine(fast)
    groups = rollout(runner_for(engine, tok, chat_harness), task, task.train[:3], n=2)
    assert [len(g.samples) for g in groups] == [2, 2, 2]
    for g in groups:
        for s in g.samples:
            assert s.prompt_ids == g.prompt_ids  # "12+34=" rendered plainly is the task's own prompt
            assert s.meta["episode_calls"] == 1 and s.meta["harness_error"] is None
    assert_samples_are_what_the_engine_sampled(groups, engine)
    scorer = RewardFunction([("harness", 1.0, HarnessReward(workers=0))])
    scorer(groups, task)
    for s in (s for g in groups for s in g.samples):
        assert s.correct == task.verify(s.text, _record(groups, s)).correct


def _record(groups, sample):
    return next(g.record for g in groups if any(s is sample for s in g.samples))


def test_a_continued_conversation_is_one_sample_with_the_new_turn_masked(builtin, task):
    tok, fast = builtin
    engine = RecordingEngine(fast)
    groups = rollout(runner_for(engine, tok, two_turn_harness), task, task.train[:2], n=2)
    for s in (s for g in groups for s in g.samples):
        assert s.meta["segments"] == 1 and s.meta["turns"] == 2
        (a0, a1), (b0, b1) = s.meta["turn_spans"]
        gap = tok.decode(s.response_ids[a1:b0])
        assert gap.endswith(f"\n{_record(groups, s).question}=\n")  # the plain format's later user turn
        assert s.loss_mask[a1:b0] == [0] * (b0 - a1) and s.logprobs[a1:b0] == [0.0] * (b0 - a1)
    assert_samples_are_what_the_engine_sampled(groups, engine)
    batch = Batch.from_groups(groups, pad_id=tok.pad_token_id)
    assert batch.mask.sum() == sum(sum(s.loss_mask) for g in groups for s in g.samples)


def test_completions_continue_token_by_token_and_a_fresh_prompt_starts_a_new_sample(builtin, task):
    tok, fast = builtin
    engine = RecordingEngine(fast)
    groups = rollout(runner_for(engine, tok, completion_harness), task, task.train[:2], n=1)
    for g in groups:
        first, second = g.samples
        assert first.meta["segments"] == 2 and first.meta["turns"] == 2 and second.meta["turns"] == 1
        assert tok.decode(second.prompt_ids) == "1+1="
        assert first.text == second.text == second.meta["segment_text"]  # the episode's last completion
        start, end = first.meta["turn_spans"][-1]
        assert first.meta["segment_text"] == tok.decode(first.response_ids[start:end], skip_special_tokens=True)
        assert first.meta["harness_reward"] == second.meta["harness_reward"] == 0.5
    assert_samples_are_what_the_engine_sampled(groups, engine)
    scorer = RewardFunction([("harness", 1.0, HarnessReward(workers=0))])
    scorer(groups, task)
    assert all(s.reward == 0.5 for g in groups for s in g.samples)


def test_async_harness_and_its_own_reward(builtin, task):
    tok, fast = builtin
    groups = rollout(runner_for(RecordingEngine(fast), tok, async_harness), task, task.train[:2], n=2)
    RewardFunction([("harness", 1.0, HarnessReward(workers=0))])(groups, task)
    for g in groups:
        for s in g.samples:
            assert s.meta["harness_reward"] in (0.0, 1.0) and s.reward == s.meta["harness_reward"]
            assert s.correct == (s.reward == 1.0)


# -- concurrency ------------------------------------------------------------------------------------------


def test_concurrent_episodes_are_batched_into_one_engine_call(builtin, task):
    tok, fast = builtin
    engine = RecordingEngine(fast)
    ready = threading.Barrier(16, timeout=30)
    http = openai.DefaultHttpxClient()

    def harness(record, *, base_url, api_key, model):
        client = openai.OpenAI(base_url=base_url, api_key=api_key, http_client=http)
        ready.wait()  # 16 episodes in flight, each about to call the model
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": f"{record.question}="}])

    runner = runner_for(engine, tok, harness, workers=16, batch_wait_ms=50)
    groups = rollout(runner, task, task.train[:4], n=4)
    sizes = [len(c["contexts"]) for c in engine.calls]
    assert sum(sizes) == 16 and max(sizes) > 1, sizes  # 16 episodes in flight shared engine calls
    assert runner.server.batch_sizes == sizes
    assert len(sizes) < 16
    assert_samples_are_what_the_engine_sampled(groups, engine)
    metrics = agent_metrics(groups)
    assert metrics["harness/episodes"] == 16 and metrics["harness/failed_frac"] == 0


# -- tool calls with a chat template ----------------------------------------------------------------------


def test_tool_calls_in_the_templates_format_and_the_tool_result_is_masked(task):
    tok = build_byte_tokenizer()
    tok.chat_template = TOOLS_TEMPLATE
    record = task.train[0]

    def policy(ctx):
        seen = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", ctx)
        if not seen:
            return "Let me compute. " + format_tool_call("calculator", {"expression": record.question}), None
        return f"A:{seen[-1]}", "eos"

    engine = RecordingEngine(ScriptedEngine(tok, policy))
    seen = {}

    def harness(record, *, base_url, api_key, model):
        client = openai.OpenAI(base_url=base_url, api_key=api_key)
        messages = [{"role": "user", "content": f"{record.question}="}]
        first = client.chat.completions.create(model=model, messages=messages, tools=[CALCULATOR])
        msg = first.choices[0].message
        seen["first"] = first
        call = msg.tool_calls[0]
        result = str(eval(json.loads(call.function.arguments)["expression"]))  # the harness's own tool
        messages += [msg.model_dump(exclude_none=True),
                     {"role": "tool", "tool_call_id": call.id, "content": result}]
        second = client.chat.completions.create(model=model, messages=messages, tools=[CALCULATOR])
        seen["second"] = second
        return None

    groups = rollout(runner_for(engine, tok, harness, uses_chat=True), task, [record], n=1, max_new_tokens=200)
    first = seen["first"].choices[0]
    assert first.finish_reason == "tool_calls" and first.message.content == "Let me compute."
    assert first.message.tool_calls[0].function.name == "calculator"
    assert json.loads(first.message.tool_calls[0].function.arguments) == {"expression": record.question}
    assert seen["second"].choices[0].message.content == f"A:{record.answer}"
    s = groups[0].samples[0]
    assert s.meta["segments"] == 1 and s.meta["turns"] == 2 and s.meta["tool_calls"] == 1
    assert tok.decode(s.prompt_ids).startswith('<|system|>Tools:{"type": "function"')
    masked = [t for t, m in zip(s.response_ids, s.loss_mask) if m == 0]
    assert tok.decode(masked) == (f"<|endoftext|><|tool|><tool_response>\n{record.answer}\n</tool_response>"
                                  "<|endoftext|><|assistant|>")
    assert engine.calls[0]["params"].stop[-1] == "</tool_call>"
    assert_samples_are_what_the_engine_sampled(groups, engine)
    RewardFunction([("harness", 1.0, HarnessReward(workers=0))])(groups, task)
    assert s.correct and s.reward == 1.0


# -- bad input --------------------------------------------------------------------------------------------


def test_over_long_requests_get_an_openai_error_and_the_server_goes_on(builtin, task):
    tok, fast = builtin
    outcome = {}

    def harness(record, *, base_url, api_key, model):
        client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
        with pytest.raises(openai.BadRequestError) as err:
            client.chat.completions.create(model=model, messages=[{"role": "user", "content": "9" * 600}])
        outcome["error"] = err.value
        with pytest.raises(openai.BadRequestError, match="streaming"):
            client.chat.completions.create(model=model, messages=[{"role": "user", "content": "1+1="}], stream=False,
                                           extra_body={"stream": True})
        outcome["models"] = [m.id for m in client.models.list()]
        ok = client.completions.create(model=model, prompt=f"{record.question}=", logprobs=1)
        outcome["logprobs"] = ok.choices[0].logprobs.token_logprobs
        return None

    engine = RecordingEngine(fast)
    groups = rollout(runner_for(engine, tok, harness, model_name="builtin"), task, task.train[:1], n=1)
    err = outcome["error"]
    assert err.status_code == 400 and err.code == "context_length_exceeded"
    assert err.body["type"] == "invalid_request_error" and "maximum context length is 512" in err.body["message"]
    assert outcome["models"] == ["builtin"]
    s = groups[0].samples[0]
    assert s.meta["harness_error"] is None and s.meta["episode_calls"] == 1  # refused calls are not recorded
    assert outcome["logprobs"] == s.logprobs  # JSON carries float64 exactly


def test_a_failing_harness_is_scored_zero_with_the_reason_and_the_rollout_goes_on(builtin, task):
    tok, fast = builtin
    behaviours = iter(["raise", "string", "nan", "sleep", "ok", "call_then_raise"])
    lock = threading.Lock()

    def harness(record, *, base_url, api_key, model):
        with lock:
            what = next(behaviours)
        client = openai.OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
        if what == "raise":
            raise RuntimeError("tool backend down")
        if what == "string":
            return "great job"
        if what == "nan":
            return float("nan")
        if what == "sleep":
            time.sleep(5)
            return 1.0
        client.chat.completions.create(model=model, messages=[{"role": "user", "content": f"{record.question}="}])
        if what == "call_then_raise":
            raise ValueError("parse failure")
        return 1.0

    runner = runner_for(fast, tok, harness, workers=6, timeout=1.5)
    started = time.monotonic()
    groups = rollout(runner, task, task.train[:1], n=6)
    assert time.monotonic() - started < 4.5  # the sleeping harness cost its timeout, not its sleep
    RewardFunction([("harness", 1.0, HarnessReward(workers=0))])(groups, task)
    samples = groups[0].samples
    errors = sorted(str(s.meta["harness_error"]) for s in samples)
    assert any("RuntimeError: tool backend down" in e for e in errors)
    assert any("returned str 'great job', not a number" in e for e in errors)
    assert any("not a finite number" in e for e in errors)
    assert any("timed out after 1.5 s" in e for e in errors)
    assert any("ValueError: parse failure" in e for e in errors)
    for s in samples:
        if s.meta["harness_error"]:
            assert s.reward == 0.0 and s.meta["reasons"]["harness"].startswith("harness failed: ")
        else:
            assert s.reward == 1.0
    raised_after_call = next(s for s in samples if "parse failure" in str(s.meta["harness_error"]))
    assert raised_after_call.meta["episode_calls"] == 1 and sum(raised_after_call.loss_mask) > 0
    placeholder = next(s for s in samples if "backend down" in str(s.meta["harness_error"]))
    assert placeholder.loss_mask == [0]  # nothing of an episode without calls is trained on
    assert agent_metrics(groups)["harness/failed_frac"] == pytest.approx(5 / 6)


def test_requests_for_an_ended_episode_are_refused(builtin, task):
    tok, fast = builtin
    urls = []

    def harness(record, *, base_url, api_key, model):
        urls.append(base_url)
        return 1.0

    rollout(runner_for(fast, tok, harness), task, task.train[:1], n=1)
    runner = runner_for(fast, tok, harness)
    runner.server.start()
    try:
        url = urls[0].replace(urls[0].split("/episodes/")[0], f"http://127.0.0.1:{runner.server.port}")
        client = openai.OpenAI(base_url=url, api_key="x", max_retries=0)
        with pytest.raises(openai.NotFoundError, match="is not running"):
            client.completions.create(model="m", prompt="1+1=")
        plain = openai.OpenAI(base_url=runner.server.base_url, api_key="x", max_retries=0)  # /v1: served, unrecorded
        assert plain.completions.create(model="m", prompt="1+1=", max_tokens=4).usage.completion_tokens <= 4
    finally:
        runner.server.stop()


# -- configuration ----------------------------------------------------------------------------------------


def test_config_shape_and_errors(tmp_path):
    cfg = load_config(None, ["rollout.mode=openai_server", "agent.harness=tests.x:solve"])
    assert [r.name for r in cfg.rewards] == ["harness"] and cfg.agent.harness == "tests.x:solve"
    with pytest.raises(ConfigError, match="set rollout.mode=openai_server"):
        load_config(None, ["agent.harness=tests.x:solve"])
    with pytest.raises(ConfigError, match="set agent.harness=module:function"):
        load_config(None, ["rollout.mode=openai_server"])
    with pytest.raises(ConfigError, match="add {name: harness} to rewards"):
        load_config(None, ["rollout.mode=openai_server", "agent.harness=tests.x:solve", "rewards=[correctness]"])


def test_load_harness_from_a_file_or_module_and_its_errors(tmp_path):
    f = tmp_path / "my_agent.py"
    f.write_text("def solve(record, *, base_url, **kw):\n    return 1.0\n\ndef bad(x):\n    return 0\n")
    assert load_harness(f"{f}:solve")(record=None, base_url="u") == 1.0
    assert callable(load_harness("json:dumps"))  # an importable module; **kwargs takes every argument
    with pytest.raises(ValueError, match="must take the keyword arguments record, base_url"):
        load_harness(f"{f}:bad")
    with pytest.raises(ValueError, match="has no function 'nope'"):
        load_harness(f"{f}:nope")
    with pytest.raises(ValueError, match="not found"):
        load_harness(f"{tmp_path / 'missing.py'}:solve")
    with pytest.raises(ValueError, match="expected module:function"):
        load_harness("solve")


def test_a_missing_serve_extra_names_the_install_command(monkeypatch, builtin):
    import sys

    from rlvr.rollout.openai_server import require_serve

    monkeypatch.setitem(sys.modules, "uvicorn", None)
    with pytest.raises(ImportError, match=r"pip install 'rlvr\[serve\]'"):
        require_serve()


def test_asyncio_harness_runs_in_its_own_loop():
    from rlvr.rollout.harness import call_harness

    async def fn(record, base_url):
        await asyncio.sleep(0)
        return 2.0

    assert call_harness(fn, {"record": None, "base_url": "u", "api_key": "k", "model": "m"}) == 2.0


def test_a_chat_template_conversation_continues_token_by_token_on_a_real_engine(tiny_chat_model_dir, task):
    tok = load_tokenizer(tiny_chat_model_dir)
    engine = RecordingEngine(build_engine("fast", {}, 64, load_causal_lm(tiny_chat_model_dir), tok))
    runner = runner_for(engine, tok, two_turn_harness, uses_chat=True, context_length=256)
    groups = rollout(runner, task, task.train[:2], n=2, max_new_tokens=12)
    for s in (s for g in groups for s in g.samples):
        assert s.meta["harness_error"] is None and s.meta["segments"] == 1 and s.meta["turns"] == 2
        (_, a1), (b0, _) = s.meta["turn_spans"]
        gap = tok.decode(s.response_ids[a1:b0])  # what the template adds after the model's turn
        assert gap.endswith(f"<|end|><|user|>{_record(groups, s).question}=<|end|><|assistant|>")
    assert_samples_are_what_the_engine_sampled(groups, engine)

