"""Multi-turn agent rollouts: token in/token out across turns, masks, formats, limits, concurrency, rewards."""

from __future__ import annotations

import re
import time

import pytest
import torch
from agent_fakes import TOOLS_TEMPLATE, ScriptedEngine, calculator_policy, raw_policy

from rlvr.config import AgentConfig
from rlvr.models.byte_tokenizer import build_byte_tokenizer
from rlvr.rewards import CorrectnessReward, RewardFunction
from rlvr.rewards.agent import EnvironmentReward
from rlvr.rewards.shaping import ToolEfficiencyReward
from rlvr.rollout import SamplingParams, agent_metrics, agent_rollout_groups
from rlvr.rollout.env import ToolEnvironment
from rlvr.rollout.format import format_tool_call
from rlvr.rollout.tools import Tool, ToolSet
from rlvr.rollout.tools.calculator import Calculator
from rlvr.tasks import PromptRenderer, build_task
from rlvr.types import Batch, Group


@pytest.fixture(scope="module")
def tok():
    return build_byte_tokenizer()


@pytest.fixture(scope="module")
def chat_tok():
    t = build_byte_tokenizer()
    t.chat_template = TOOLS_TEMPLATE
    return t


@pytest.fixture(scope="module")
def task():
    return build_task("addition", {"digits": [5, 8], "eval_size": 20})


def run(tok, task, policy, *, records=None, n=2, max_new_tokens=128, env_factory=None, renderer=None, **agent):
    agent.setdefault("tools", ["calculator"])
    cfg = AgentConfig(**agent)
    engine = ScriptedEngine(tok, policy)
    records = records if records is not None else list(task.train[:3])
    groups = agent_rollout_groups(engine, renderer or PromptRenderer(task, tok), task, records,
                                  SamplingParams(n=n, max_new_tokens=max_new_tokens), cfg, env_factory=env_factory)
    return groups, engine


def assert_token_in_token_out(groups, calls):
    """Every engine call's output ids and log-probs are the sample's trained tokens, in order, unchanged; and
    every engine call saw exactly prompt + response-so-far."""
    flat = [s for g in groups for s in g.samples]
    trained = {id(s): 0 for s in flat}
    for t, call in enumerate(calls):
        active = [s for s in flat if s.meta["turns"] > t]
        assert len(active) == len(call["outputs"])
        for s, ctx, out, lps in zip(active, call["contexts"], call["outputs"], call["logprobs"]):
            start, end = s.meta["turn_spans"][t]
            assert ctx == s.prompt_ids + s.response_ids[:start]  # the context the engine continued
            assert s.response_ids[start:end] == out[: end - start]
            assert s.loss_mask[start:end] == [1] * (end - start)
            assert s.logprobs[start:end] == pytest.approx(lps[: end - start], abs=0)
            trained[id(s)] += end - start
    for s in flat:
        assert sum(s.loss_mask) == trained[id(s)]  # nothing else is trained on
        spans = s.meta["turn_spans"]
        for (_, a_end), (b_start, _) in zip(spans, spans[1:] + [[len(s.response_ids), None]]):
            assert s.loss_mask[a_end:b_start] == [0] * (b_start - a_end)  # observations
            assert s.logprobs[a_end:b_start] == [0.0] * (b_start - a_end)
        assert len(s.logprobs) == len(s.loss_mask) == len(s.response_ids)


# -- token in, token out; masks; the plain format ------------------------------------------------------


def test_training_tokens_are_the_sampled_tokens_across_turns(tok, task):
    groups, engine = run(tok, task, calculator_policy(calls=2), max_turns=4)
    assert len(engine.calls) == 3  # two tool turns and the answer, each one call for the whole batch
    assert [len(c["outputs"]) for c in engine.calls] == [6, 6, 6]
    assert all(c["params"].n == 1 and "</tool_call>" in c["params"].stop for c in engine.calls)
    assert_token_in_token_out(groups, engine.calls)
    for g in groups:
        assert len(g.samples) == 2
        for s in g.samples:
            assert s.meta["turns"] == 3 and s.meta["tool_calls"] == 2 and s.meta["tool_errors"] == 0
            assert s.finish_reason == "stop" and s.meta["truncated"] is None
            assert s.prompt_ids == g.prompt_ids
            assert s.text == f"A:{g.record.answer}"
            assert task.verify(s.text, g.record).correct


def test_exact_plain_transcript_and_observation_mask(tok, task):
    record = task.train[0]
    groups, _ = run(tok, task, calculator_policy(), records=[record], n=1)
    s = groups[0].samples[0]
    call = format_tool_call("calculator", {"expression": record.question})
    expected = f"{call}<tool_response>{record.answer}</tool_response>A:{record.answer}<|endoftext|>"
    assert tok.decode(s.response_ids) == expected == s.meta["transcript"]
    observation = f"<tool_response>{record.answer}</tool_response>"
    masked = [t for t, m in zip(s.response_ids, s.loss_mask) if m == 0]
    assert tok.decode(masked) == observation


def test_prompt_announces_tools_or_matches_the_single_turn_prompt(tok, task):
    record = task.train[0]
    groups, _ = run(tok, task, calculator_policy(), records=[record], n=1)
    text = groups[0].prompt_text
    assert text.startswith("<tools>\n") and '"name": "calculator"' in text and text.endswith(f"{record.question}=")
    plain, _ = run(tok, task, calculator_policy(), records=[record], n=1, tools_in_prompt=False)
    assert plain[0].prompt_ids == PromptRenderer(task, tok).render(record)[0]


def test_chat_template_renders_tools_and_tool_messages(chat_tok, task):
    record = task.train[0]

    def policy(ctx):
        seen = re.findall(r"<tool_response>\n(.*?)\n</tool_response>", ctx)
        if not seen:
            return format_tool_call("calculator", {"expression": record.question}), None
        return f"Answer: {seen[-1]}", "eos"

    groups, engine = run(chat_tok, task, policy, records=[record], n=1)
    g, s = groups[0], groups[0].samples[0]
    assert g.prompt_text.startswith('<|system|>Tools:{"type": "function", "function": {"name": "calculator"')
    assert g.prompt_text.endswith("<|assistant|>")
    masked = [t for t, m in zip(s.response_ids, s.loss_mask) if m == 0]
    assert chat_tok.decode(masked) == (f"<|endoftext|><|tool|><tool_response>\n{record.answer}\n</tool_response>"
                                       "<|endoftext|><|assistant|>")
    assert s.text == f"Answer: {record.answer}" and task.verify(s.text, record).correct
    assert_token_in_token_out(groups, engine.calls)


def test_chat_end_of_turn_sampled_by_the_model_is_not_repeated(chat_tok):
    game = build_task("guess_number", {"low": 1, "high": 8, "eval_size": 4})
    turns = iter(["no idea", "<guess>3</guess>"] * 10)

    def policy(ctx):
        return next(turns), "eos"

    cfg = AgentConfig(environment={"name": "guess_number", "low": 1, "high": 8}, max_turns=2)
    engine = ScriptedEngine(chat_tok, policy)
    groups = agent_rollout_groups(engine, PromptRenderer(game, chat_tok), game, [game.train[0]],
                                  SamplingParams(n=1, max_new_tokens=32), cfg)
    s = groups[0].samples[0]
    eos = chat_tok.eos_token_id
    assert all(not (a == b == eos) for a, b in zip(s.response_ids, s.response_ids[1:]))
    assert chat_tok.decode(s.response_ids).startswith(
        "no idea<|endoftext|><|user|>Reply with <guess>N</guess>.<|endoftext|><|assistant|><guess>3</guess>")
    assert_token_in_token_out(groups, engine.calls)


# -- malformed calls -----------------------------------------------------------------------------------


def test_malformed_calls_get_error_observations_and_the_episode_goes_on(tok, task):
    policy = raw_policy(
        '<tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}</tool_call>',  # bad JSON
        '<tool_call>{"name": "calc", "arguments": {}}</tool_call>',  # unknown tool
        '<tool_call>{"name": "calculator", "arguments": {"expr": "1"}}</tool_call>',  # bad arguments
        '<tool_call>{"name": "calculator", "arguments": {"expression": "1/0"}}</tool_call>',  # tool error
        "A:2",
    )
    groups, engine = run(tok, task, policy, records=[task.train[0]], n=1, max_turns=6, max_total_tokens=2000)
    s = groups[0].samples[0]
    assert s.meta["turns"] == 5 and s.meta["tool_calls"] == 4 and s.meta["tool_errors"] == 4
    observations = re.findall(r"<tool_response>(.*?)</tool_response>", s.meta["transcript"])
    assert [o.split(":")[0] for o in observations] == ["Error"] * 4
    assert "not valid JSON" in observations[0] and "unknown tool 'calc'" in observations[1]
    assert "missing required argument 'expression'" in observations[2] and "division by zero" in observations[3]
    assert s.finish_reason == "stop" and s.text == "A:2"
    assert [c["ok"] for c in s.meta["calls"]] == [False] * 4
    assert_token_in_token_out(groups, engine.calls)


def test_an_environment_that_raises_ends_only_its_episode(tok, task):
    class Exploding(ToolEnvironment):
        def step(self, action):
            raise RuntimeError("env bug")

    groups, _ = run(tok, task, calculator_policy(), n=1, env_factory=lambda: Exploding(ToolSet([Calculator()])))
    for g in groups:
        s = g.samples[0]
        assert s.meta["turns"] == 1 and s.finish_reason == "stop"


# -- limits --------------------------------------------------------------------------------------------


def test_max_turns_truncates_and_skips_the_last_observation(tok, task):
    groups, engine = run(tok, task, calculator_policy(calls=100), max_turns=3)
    for s in (s for g in groups for s in g.samples):
        assert s.meta["turns"] == 3 and s.meta["truncated"] == "max_turns" and s.finish_reason == "length"
        assert s.meta["transcript"].endswith("</tool_call>")
        assert s.meta["transcript"].count("<tool_response>") == 2
    assert_token_in_token_out(groups, engine.calls)
    metrics = agent_metrics(groups)
    assert metrics["agent/truncated/max_turns"] == 1.0 and metrics["agent/truncated_frac"] == 1.0


def test_max_total_tokens_bounds_the_response(tok, task):
    groups, engine = run(tok, task, calculator_policy(calls=100), max_turns=20, max_total_tokens=300)
    for s in (s for g in groups for s in g.samples):
        assert len(s.response_ids) <= 300
        assert s.meta["truncated"] == "max_total_tokens" and s.finish_reason == "length"
    assert_token_in_token_out(groups, engine.calls)
    assert agent_metrics(groups)["agent/truncated/max_total_tokens"] == 1.0


def test_turn_token_limit(tok, task):
    groups, _ = run(tok, task, calculator_policy(), max_turn_tokens=10)
    for s in (s for g in groups for s in g.samples):
        assert len(s.response_ids) == 10 and s.meta["truncated"] == "turn_tokens"
        assert s.meta["tool_calls"] == 0


def test_long_observations_are_cut_to_max_obs_tokens(tok, task):
    class Verbose(Tool):
        name = "verbose"
        parameters = {"type": "object", "properties": {}}

        def call(self, args):
            return "x" * 500

    policy = raw_policy('<tool_call>{"name": "verbose", "arguments": {}}</tool_call>', "A:1")
    groups, _ = run(tok, task, policy, records=[task.train[0]], n=1, max_obs_tokens=20,
                    env_factory=lambda: ToolEnvironment(ToolSet([Verbose()])))
    s = groups[0].samples[0]
    (obs,) = re.findall(r"<tool_response>(.*?)</tool_response>", s.meta["transcript"])
    assert obs == "x" * 20 + "...[truncated]"
    assert s.meta["obs_truncated"] == 1
    assert agent_metrics(groups)["agent/obs_truncated_frac"] == 1.0


def test_turn_budget_caps_the_turns(tok, task):
    cfg = AgentConfig(tools=["calculator"], max_turns=6)
    engine = ScriptedEngine(tok, calculator_policy(calls=100))
    seen = []

    def budget(step, total):
        seen.append((step, total))
        return 2

    groups = agent_rollout_groups(engine, PromptRenderer(task, tok), task, list(task.train[:2]),
                                  SamplingParams(n=1, max_new_tokens=128), cfg, step=3, total_steps=10,
                                  turn_budget=budget)
    assert seen == [(3, 10)]
    assert all(s.meta["turns"] == 2 for g in groups for s in g.samples)


# -- concurrency ---------------------------------------------------------------------------------------


class Slow(Tool):
    name = "slow"
    parameters = {"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]}

    def __init__(self, timeout=5.0):
        self.timeout = timeout

    def call(self, args):
        time.sleep(args["seconds"])
        return "done"


def _slow_policy(seconds_for):
    def policy(ctx):
        if "</tool_response>" in ctx:
            return "A:1", "eos"
        return format_tool_call("slow", {"seconds": seconds_for(ctx)}), None
    return policy


def test_tool_calls_of_a_turn_run_concurrently(tok, task, capsys):
    records = list(task.train[:4])  # 4 records x n=2 = 8 episodes, one 0.3 s call each
    timings = {}
    for workers in (1, 8):
        started = time.perf_counter()
        groups, _ = run(tok, task, _slow_policy(lambda ctx: 0.3), records=records, tool_workers=workers,
                        env_factory=lambda: ToolEnvironment(ToolSet([Slow()])))
        timings[workers] = time.perf_counter() - started
        assert all(s.meta["tool_calls"] == 1 and s.meta["tool_errors"] == 0 for g in groups for s in g.samples)
        assert agent_metrics(groups)["agent/tool_latency_mean_s"] >= 0.3
    with capsys.disabled():
        print(f"\n[agent concurrency] 8 episodes x one 0.3 s tool call: sequential {timings[1]:.2f} s, "
              f"8 workers {timings[8]:.2f} s")
    assert timings[1] >= 8 * 0.3
    assert timings[8] < timings[1] / 2


def test_one_hung_call_costs_only_its_own_timeout(tok, task):
    records = list(task.train[:4])
    hang_on = records[0].question
    started = time.perf_counter()
    groups, _ = run(tok, task, _slow_policy(lambda ctx: 30 if f"{hang_on}=" in ctx else 0.05), records=records,
                    env_factory=lambda: ToolEnvironment(ToolSet([Slow(timeout=0.4)])))
    elapsed = time.perf_counter() - started
    assert elapsed < 3.0
    hung = groups[0].samples
    assert all(s.meta["tool_errors"] == 1 and s.meta["calls"][0]["timed_out"] for s in hung)
    assert "timed out after 0.4s" in hung[0].meta["transcript"]
    assert all(s.meta["tool_errors"] == 0 for g in groups[1:] for s in g.samples)
    assert agent_metrics(groups)["agent/tool_timeouts"] == 2


# -- rewards, metrics and the learner's batch ----------------------------------------------------------


def test_outcome_otc_and_env_rewards(tok, task):
    record = task.train[0]
    one, _ = run(tok, task, calculator_policy(calls=1), records=[record], n=2)
    two, _ = run(tok, task, calculator_policy(calls=2), records=[record], n=1)
    wrong, _ = run(tok, task, calculator_policy(calls=1, expression=lambda q: q + "+1"), records=[record], n=1)
    group = Group(record, one[0].prompt_ids, one[0].samples + two[0].samples + wrong[0].samples)
    reward_fn = RewardFunction([("correctness", 1.0, CorrectnessReward(workers=0)),
                                ("otc", 0.5, ToolEfficiencyReward()), ("env_reward", 1.0, EnvironmentReward())])
    reward_fn([group], task)
    s1, s1b, s2, bad = group.samples
    assert [s.correct for s in group.samples] == [True, True, True, False]
    assert s1.rewards["otc"] == pytest.approx(1.0) and s1.reward == pytest.approx(1.5)
    assert 0 < s2.rewards["otc"] < 1.0 and s2.reward < s1.reward
    assert bad.rewards["otc"] == 0 and bad.reward == 0


def test_env_reward_carries_penalties_and_game_rewards(tok, task):
    policy = raw_policy('<tool_call>{"name": "nope", "arguments": {}}</tool_call>', "A:1")
    groups, _ = run(tok, task, policy, records=[task.train[0]], n=1, tool_error_penalty=0.5, turn_penalty=0.1)
    s = groups[0].samples[0]
    assert s.meta["turn_rewards"] == pytest.approx([-0.6, -0.1])
    assert EnvironmentReward()(groups[0], task)[0].value == pytest.approx(-0.7)


def test_agent_metrics_summarise_episodes(tok, task):
    policy = raw_policy('<tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}}</tool_call>',
                        '<tool_call>{"name": "calculator", "arguments": {"expression": "x"}}</tool_call>', "A:2")
    groups, _ = run(tok, task, policy, n=2)
    m = agent_metrics(groups)
    assert m["agent/turns_mean"] == 3 and m["agent/tool_calls_mean"] == 2 and m["agent/tool_errors_mean"] == 1
    assert m["agent/tool_success_rate"] == 0.5 and m["agent/multi_call_frac"] == 1.0
    assert m["agent/truncated_frac"] == 0 and 0 < m["agent/obs_token_frac"] < 1
    assert agent_metrics([Group(task.train[0], [1], [])]) == {}


def test_batch_masks_observations_out(tok, task):
    groups, _ = run(tok, task, calculator_policy(calls=2))
    batch = Batch.from_groups(groups, pad_id=tok.pad_token_id)
    for row, s in enumerate(s for g in groups for s in g.samples):
        P, R = len(s.prompt_ids), len(s.response_ids)
        assert batch.mask[row, P : P + R].tolist() == [float(m) for m in s.loss_mask]
        assert batch.input_ids[row, P : P + R].tolist() == s.response_ids
        obs = torch.tensor(s.loss_mask) == 0
        assert (batch.old_logprobs[row, P : P + R][obs] == 0).all()


# -- a game environment --------------------------------------------------------------------------------


def test_guess_number_game_through_the_agent_loop(tok):
    game = build_task("guess_number", {"low": 1, "high": 100, "eval_size": 8})

    def binary_search(ctx):
        lo, hi = 1, 100
        for guess, hint in re.findall(r"<guess>(\d+)</guess>\n(Higher|Lower)\.", ctx):
            lo, hi = (int(guess) + 1, hi) if hint == "Higher" else (lo, int(guess) - 1)
        return f"<guess>{(lo + hi) // 2}</guess>", None

    cfg = AgentConfig(environment={"name": "guess_number", "low": 1, "high": 100}, max_turns=8)
    engine = ScriptedEngine(tok, binary_search)
    groups = agent_rollout_groups(engine, PromptRenderer(game, tok), game, list(game.heldout),
                                  SamplingParams(n=1, max_new_tokens=32), cfg)
    reward_fn = RewardFunction([("correctness", 1.0, CorrectnessReward(workers=0)),
                                ("env_reward", 1.0, EnvironmentReward())])
    reward_fn(groups, game)
    for g in groups:
        s = g.samples[0]
        assert s.correct and s.meta["env_reward"] == 1.0 and s.meta["turns"] <= 7 and s.finish_reason == "stop"
        assert s.meta["tool_calls"] == 0
        assert g.prompt_text.startswith("I am thinking of a number from 1 to 100.")
    assert_token_in_token_out(groups, engine.calls)


# -- a real engine -------------------------------------------------------------------------------------


class RecordingEngine:
    """Wraps a real engine and records what each call returned, in ScriptedEngine's format."""

    def __init__(self, engine):
        self.engine, self.calls = engine, []
        self.eos_ids = engine.eos_ids

    def generate(self, prompts, params):
        out = self.engine.generate(prompts, params)
        self.calls.append({"contexts": [list(p) for p in prompts], "params": params,
                           "outputs": [o[0].response_ids for o in out], "logprobs": [o[0].logprobs for o in out]})
        return out


def test_real_hf_engine_multi_turn_keeps_sampled_tokens(tiny_model_dir):
    from rlvr.models import load_causal_lm, load_tokenizer
    from rlvr.rollout.hf import HFEngine

    tokenizer = load_tokenizer(tiny_model_dir)
    engine = RecordingEngine(HFEngine(load_causal_lm(tiny_model_dir), tokenizer))
    game = build_task("guess_number", {"low": 1, "high": 8, "eval_size": 4})
    cfg = AgentConfig(environment={"name": "guess_number", "low": 1, "high": 8}, max_turns=3, max_turn_tokens=12)
    torch.manual_seed(0)
    # Printable characters as extra stop strings, so a random model's turns end by a stop, not by the length limit.
    stops = [chr(c) for c in range(33, 127)]
    groups = agent_rollout_groups(engine, PromptRenderer(game, tokenizer), game, list(game.heldout[:2]),
                                  SamplingParams(n=2, max_new_tokens=12, stop=stops), cfg)
    samples = [s for g in groups for s in g.samples]
    assert len(samples) == 4 and len(engine.calls) >= 2  # a random model never guesses: several turns
    assert any(s.meta["turns"] > 1 for s in samples)
    assert_token_in_token_out(groups, engine.calls)
    batch = Batch.from_groups(groups, pad_id=tokenizer.pad_token_id)
    assert batch.mask.sum() == sum(sum(s.loss_mask) for s in samples)
