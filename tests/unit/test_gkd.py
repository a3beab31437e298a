"""Teachers wired into training: KDRL's coefficient schedule per step, GKD in the learner (the chunked
generalized-JSD path against a direct computation and hand values), GKD's lambda sampler, config errors, and
re-distillation's data source (`rlvr sft` on a run's rollouts.jsonl)."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import torch

from rlvr.algorithms import LOSSES, aggregate_loss
from rlvr.algorithms.distill import (
    generalized_jsd,
    gkd_use_student_samples,
    kd_coefficient,
    scheduled_loss,
    teacher_top_k,
    top_k_buckets,
)
from rlvr.config import Config, ConfigError, SFTConfig, load_config
from rlvr.learner.learner import Learner
from rlvr.learner.logprob_model import LocalLogProbModel
from rlvr.models import load_causal_lm, load_tokenizer
from rlvr.models.logprobs import token_logprobs
from rlvr.registry import RegistryError
from rlvr.sampling import SAMPLERS, StepContext
from rlvr.tasks import TASKS
from rlvr.tasks.base import PromptRenderer
from rlvr.trainer.sft import rollout_examples, tokenize_examples
from rlvr.types import Batch, Group, Sample, TaskRecord
from tests.conftest import make_tiny_model

T = torch.tensor


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A teacher of another size (hidden 48, 1 layer) with the student's byte tokenizer."""
    return make_tiny_model(tmp_path_factory.mktemp("tiny_teacher"), seed=1, hidden=48, layers=1)


# -- the gkd loss: hand values (vocabulary 2) -----------------------------------------------------------------

# student P_s = (0.5, 0.5), teacher P_t = (0.8, 0.2)
S_LOGITS = T([[0.0, 0.0]], dtype=torch.float64)
T_LOGITS = T([[math.log(0.8), math.log(0.2)]], dtype=torch.float64)
FORWARD_KL = 0.8 * math.log(0.8 / 0.5) + 0.2 * math.log(0.2 / 0.5)      # KL(P_t || P_s) = 0.192745
REVERSE_KL = 0.5 * math.log(0.5 / 0.8) + 0.5 * math.log(0.5 / 0.2)      # KL(P_s || P_t) = 0.223144
# beta = 0.5: M = (0.65, 0.35)
JSD_HALF = 0.5 * (0.8 * math.log(0.8 / 0.65) + 0.2 * math.log(0.2 / 0.35)) \
    + 0.5 * (0.5 * math.log(0.5 / 0.65) + 0.5 * math.log(0.5 / 0.35))  # 0.050672


@pytest.mark.parametrize("beta,value", [(0.0, FORWARD_KL), (0.5, JSD_HALF), (1.0, REVERSE_KL)])
def test_gkd_loss_hand_values(beta: float, value: float) -> None:
    assert FORWARD_KL == pytest.approx(0.192745, abs=1e-6) and REVERSE_KL == pytest.approx(0.223144, abs=1e-6)
    assert JSD_HALF == pytest.approx(0.050672, abs=1e-6)
    loss = LOSSES.bind("gkd", {"beta": beta})
    per_token, diag = loss(S_LOGITS, T_LOGITS)
    torch.testing.assert_close(per_token, T([value], dtype=torch.float64), atol=1e-9, rtol=0)
    torch.testing.assert_close(diag["gkd_jsd"], per_token)


def test_gkd_loss_gradient_at_the_limits_is_forward_and_reverse_kl() -> None:
    """GKD (arXiv:2306.13649): beta = 0 is the forward KL, whose logit gradient is P_s - P_t (supervised KD);
    beta = 1 the reverse KL, gradient P_s,i (log P_s,i - log P_t,i - KL(P_s || P_t))."""
    grads = {}
    for beta in (0.0, 1.0):
        z = S_LOGITS.clone().requires_grad_(True)
        LOSSES.bind("gkd", {"beta": beta})(z, T_LOGITS)[0].sum().backward()
        grads[beta] = z.grad[0]
    torch.testing.assert_close(grads[0.0], T([0.5 - 0.8, 0.5 - 0.2], dtype=torch.float64), atol=1e-9, rtol=0)
    rev = [0.5 * (math.log(0.5 / 0.8) - REVERSE_KL), 0.5 * (math.log(0.5 / 0.2) - REVERSE_KL)]  # -/+ 0.346574
    assert rev[1] == pytest.approx(0.346574, abs=1e-6)
    torch.testing.assert_close(grads[1.0], T(rev, dtype=torch.float64), atol=1e-9, rtol=0)
    # the teacher gets no gradient: its logits are constants of the loss
    t = T_LOGITS.clone().requires_grad_(True)
    LOSSES.bind("gkd", {"beta": 0.5})(S_LOGITS.clone().requires_grad_(True), t)[0].sum().backward()
    assert t.grad is None


# -- GKD in the learner ---------------------------------------------------------------------------------------


def _gkd_cfg(beta=0.4, chunk=3, agg="token_mean", temperature=0.7, micro=2, top_k=0, **alg):
    return Config.model_validate({
        "model": {"teacher_path": "builtin-teacher"}, "train": {"steps": 10, "micro_batch_size": micro,
                                                                "logits_chunk": chunk},
        "optim": {"lr": 1e-2, "grad_clip": None}, "rollout": {"n": 2, "temperature": temperature},
        "algorithm": {"loss": {"name": "gkd", "beta": beta, "teacher_top_k": top_k}, "loss_agg": agg, **alg}})


def _batch() -> Batch:
    g = torch.Generator().manual_seed(0)
    groups = []
    for gi in range(2):
        samples = [Sample(prompt_ids=[5, 6, 7], response_ids=torch.randint(2, 60, (3 + i + gi,), generator=g).tolist(),
                          advantage=0.0, correct=bool(i)) for i in range(2)]
        groups.append(Group(TaskRecord(id=str(gi), question=""), [5, 6, 7], samples))
    return Batch.from_groups(groups, pad_id=0)


def _direct_loss(student, teacher, batch, beta, temperature, agg):
    """The definition, unchunked: full logits of both models on the response tokens, JSD, aggregate."""
    s = student(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits.float() / temperature
    with torch.no_grad():
        t = teacher(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits.float() / temperature
    mask = torch.zeros_like(batch.mask)
    mask[:, :-1] = batch.mask[:, 1:]  # logits at t-1 predict token t
    per_pos = generalized_jsd(s, t, mask, beta=beta)
    per_token = torch.zeros_like(batch.mask)
    per_token[:, 1:] = per_pos[:, :-1]
    return aggregate_loss(per_token, batch.mask, agg)


@pytest.mark.parametrize("agg,chunk", [("token_mean", 3), ("seq_mean_token_mean", 1000)])
def test_learner_gkd_gradient_equals_the_direct_computation(tiny_model_dir, teacher_dir, agg, chunk) -> None:
    student, teacher = load_causal_lm(tiny_model_dir), load_causal_lm(teacher_dir, trainable=False)
    reference = copy.deepcopy(student)
    batch = _batch()
    cfg = _gkd_cfg(chunk=chunk, agg=agg)
    learner = Learner(student, cfg, teacher=teacher)
    norms = {"num_tokens": float(batch.mask.sum()), "num_seqs": float(len(batch)), "all_tokens": float(batch.mask.sum())}
    total = 0.0
    for rows in (torch.arange(0, 2), torch.arange(2, 4)):  # two micro-batches accumulate into one gradient
        mb = batch.select(rows)
        total += learner._gkd_backward(mb, mb.mask, norms, first_epoch=True)["loss"]
    direct = _direct_loss(reference, teacher, batch, beta=0.4, temperature=0.7, agg=agg)
    direct.backward()
    assert total == pytest.approx(float(direct.detach()), rel=1e-5)
    for (name, p), q in zip(student.named_parameters(), reference.parameters()):
        torch.testing.assert_close(p.grad, q.grad, atol=1e-6, rtol=1e-4, msg=name)
    assert all(p.grad is None for p in teacher.parameters())


def test_learner_gkd_updates_pull_the_student_to_the_teacher(tiny_model_dir, teacher_dir) -> None:
    student, teacher = load_causal_lm(tiny_model_dir), load_causal_lm(teacher_dir, trainable=False)
    batch = _batch()
    with torch.no_grad():
        batch.old_logprobs, _ = token_logprobs(student, batch.input_ids, batch.attention_mask, batch.mask)
    learner = Learner(student, _gkd_cfg(beta=0.5), teacher=teacher)
    with torch.no_grad():
        before = float(_direct_loss(student, teacher, batch, 0.5, 0.7, "token_mean"))
    stats = [learner.update(copy.deepcopy(batch)) for _ in range(4)]
    with torch.no_grad():
        after = float(_direct_loss(student, teacher, batch, 0.5, 0.7, "token_mean"))
    assert stats[0]["gkd_jsd"] == pytest.approx(before, rel=1e-4)  # the first update's metric is this JSD
    assert after < 0.75 * before  # measured: 0.52 x after 4 updates


# -- the teacher's top k plus a tail bucket (what a teacher on a Ray actor ships) -----------------------------


@pytest.mark.parametrize("beta", [0.0, 0.4, 1.0])
def test_top_k_with_k_equal_to_the_vocabulary_is_the_full_jsd(beta: float) -> None:
    g = torch.Generator().manual_seed(0)
    s_logits = torch.randn(5, 7, generator=g, dtype=torch.float64).requires_grad_(True)
    t_logits = 3 * torch.randn(5, 7, generator=g, dtype=torch.float64)
    loss = LOSSES.bind("gkd", {"beta": beta})
    full, _ = loss(s_logits, t_logits)
    (g_full,) = torch.autograd.grad(full.sum(), s_logits)
    for k in (7, 100):  # k >= V: every token is kept, no tail bucket
        values, ids, tail = teacher_top_k(torch.log_softmax(t_logits, -1), k)
        assert ids.shape == (5, 7) and torch.all(tail == float("-inf"))
        topk, _ = loss(*top_k_buckets(s_logits, values, ids, tail))
        (g_topk,) = torch.autograd.grad(topk.sum(), s_logits)
        torch.testing.assert_close(topk, full, atol=1e-12, rtol=0)  # float64: only the summation order differs
        torch.testing.assert_close(g_topk, g_full, atol=1e-12, rtol=0)


# teacher P_t = (0.5, 0.3, 0.2), student P_s = (0.2, 0.2, 0.6); k = 1 keeps token 0, the tail holds tokens 1, 2:
# P_t^K = (0.5, 0.5), P_s^K = (0.2, 0.8)
PT3, PS3 = (0.5, 0.3, 0.2), (0.2, 0.2, 0.6)
FWD_K1 = 0.5 * math.log(0.5 / 0.2) + 0.5 * math.log(0.5 / 0.8)                                    # 0.223144
REV_K1 = 0.2 * math.log(0.2 / 0.5) + 0.8 * math.log(0.8 / 0.5)                                    # 0.192745
JSD_K1 = 0.5 * (0.5 * math.log(0.5 / 0.35) + 0.5 * math.log(0.5 / 0.65)) \
    + 0.5 * (0.2 * math.log(0.2 / 0.35) + 0.8 * math.log(0.8 / 0.65))                              # M = (0.35, 0.65)
FWD_FULL = sum(p * math.log(p / q) for p, q in zip(PT3, PS3))                                     # 0.360063


@pytest.mark.parametrize("beta,value", [(0.0, FWD_K1), (0.5, JSD_K1), (1.0, REV_K1)])
def test_top_1_with_a_tail_bucket_by_hand(beta: float, value: float) -> None:
    assert (FWD_K1, REV_K1, JSD_K1, FWD_FULL) == pytest.approx((0.223144, 0.192745, 0.050672, 0.360063), abs=1e-6)
    s_logits = torch.tensor([PS3], dtype=torch.float64).log()
    values, ids, tail = teacher_top_k(torch.tensor([PT3], dtype=torch.float64).log(), 1)
    assert ids.tolist() == [[0]] and values.exp()[0].tolist() == pytest.approx([0.5])
    assert tail.exp().tolist() == pytest.approx([0.5])  # 0.3 + 0.2
    s_in, t_in = top_k_buckets(s_logits, values, ids, tail)
    assert s_in.exp()[0].tolist() == pytest.approx([0.2, 0.8]) and t_in.exp()[0].tolist() == pytest.approx([0.5, 0.5])
    per_token, _ = LOSSES.bind("gkd", {"beta": beta})(s_in, t_in)
    assert float(per_token) == pytest.approx(value, abs=1e-12)
    # a lower bound of the full divergence (tokens merged into one bucket), exact once the tail is one token
    full, _ = LOSSES.bind("gkd", {"beta": beta})(s_logits, torch.tensor([PT3], dtype=torch.float64).log())
    assert float(per_token) < float(full)
    k2, _ = LOSSES.bind("gkd", {"beta": beta})(*top_k_buckets(s_logits, *teacher_top_k(
        torch.tensor([PT3], dtype=torch.float64).log(), 2)))
    assert float(k2) == pytest.approx(float(full), abs=1e-12)
    with pytest.raises(ValueError, match="k must be >= 1"):
        teacher_top_k(s_logits, 0)


class _ShippedTeacher:
    """A teacher that is not in the learner's process, as the learner sees it: only `token_distributions`."""

    def __init__(self, model):
        self._inner = LocalLogProbModel(model, micro_batch_size=2)
        self.calls = 0

    def token_distributions(self, batch, temperature, top_k=0, chunk=1024):
        self.calls += 1
        return self._inner.token_distributions(batch, temperature, top_k, chunk)


def _gkd_grads(learner: Learner, batch: Batch) -> tuple[float, list[torch.Tensor]]:
    norms = {"num_tokens": float(batch.mask.sum()), "num_seqs": float(len(batch)), "all_tokens": float(batch.mask.sum())}
    total = 0.0
    for rows in (torch.arange(0, 2), torch.arange(2, 4)):
        mb = batch.select(rows)
        total += learner._gkd_backward(mb, mb.mask, norms, first_epoch=True)["loss"]
    return total, [p.grad.clone() for p in learner.model.parameters()]


@pytest.mark.parametrize("top_k", [0, 5])
def test_a_shipped_teacher_gives_the_learner_the_in_process_gradient(tiny_model_dir, teacher_dir, top_k) -> None:
    """The learner with the teacher's distributions shipped per micro-batch (all V, or top 5 + tail) gets the
    gradient of the teacher in its own process (there: its logits, and the same top 5 + tail)."""
    teacher = load_causal_lm(teacher_dir, trainable=False)
    batch = _batch()
    cfg = _gkd_cfg(chunk=3, beta=0.4, temperature=0.7, top_k=top_k)
    here = Learner(load_causal_lm(tiny_model_dir), cfg, teacher=teacher)
    shipped_teacher = _ShippedTeacher(teacher)
    shipped = Learner(load_causal_lm(tiny_model_dir), cfg, teacher=shipped_teacher)
    assert here.teacher_local and not shipped.teacher_local
    loss_here, grads_here = _gkd_grads(here, batch)
    loss_shipped, grads_shipped = _gkd_grads(shipped, batch)
    assert shipped_teacher.calls == 2  # one call per micro-batch
    # fp32; the shipped log-probs go through one more log-softmax (a shift by ~1 ulp of their log-sum-exp)
    assert loss_shipped == pytest.approx(loss_here, rel=1e-5)
    for a, b in zip(grads_shipped, grads_here):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-4)
    if top_k:  # 5 of 257 tokens and a tail: smaller than the full JSD (the merged tail hides differences)
        full = Learner(load_causal_lm(tiny_model_dir), _gkd_cfg(chunk=3, beta=0.4, temperature=0.7), teacher=teacher)
        assert loss_here < _gkd_grads(full, batch)[0]


def test_the_reference_worker_ships_the_teachers_distributions(tiny_model_dir, teacher_dir) -> None:
    """The Ray actor's body (`ReferenceWorker`, run here without Ray): per response token, all 257 log-probs at
    the temperature, or the top 5, their int32 ids and the tail's log-mass; the learner with it as its teacher
    (`RemoteReference` only forwards these calls) makes the in-process update."""
    from rlvr.distributed.ray_groups import ReferenceWorker
    from rlvr.distributed.shipping import read_model_dir

    worker = ReferenceWorker(read_model_dir(teacher_dir), "float32", "cpu", False, None, 2, False)
    teacher = load_causal_lm(teacher_dir, trainable=False)
    batch = _batch()
    tokens = int(batch.mask.sum())
    full = worker.token_distributions(batch, 0.7, 0, 4)
    assert set(full) == {"logprobs"} and full["logprobs"].shape == (tokens, 257)
    logits = teacher(input_ids=batch.input_ids, attention_mask=batch.attention_mask).logits.detach()[:, :-1]
    direct = torch.log_softmax(logits[batch.mask[:, 1:] > 0] / 0.7, dim=-1)
    torch.testing.assert_close(full["logprobs"], direct, atol=1e-5, rtol=1e-5)
    top = worker.token_distributions(batch, 0.7, 5, 4)
    assert top["ids"].dtype == torch.int32 and top["logprobs"].shape == top["ids"].shape == (tokens, 5)
    torch.testing.assert_close(top["logprobs"], direct.topk(5, dim=-1).values, atol=1e-5, rtol=1e-5)
    rest = direct.scatter(-1, top["ids"].long(), float("-inf")).logsumexp(-1)
    torch.testing.assert_close(top["tail"], rest, atol=1e-5, rtol=1e-5)
    # the learner with this worker as its teacher makes the in-process update (one more log-softmax: fp32 ulps)
    cfg = _gkd_cfg(chunk=3, beta=0.4, temperature=0.7)
    expected = Learner(load_causal_lm(tiny_model_dir), cfg, teacher=teacher).update(copy.deepcopy(_old(batch)))
    got = Learner(load_causal_lm(tiny_model_dir), cfg, teacher=worker).update(copy.deepcopy(_old(batch)))
    for key in ("grad_norm", "gkd_jsd", "entropy"):
        assert got[key] == pytest.approx(expected[key], rel=1e-5), key


def _old(batch: Batch) -> Batch:
    batch.old_logprobs = torch.zeros_like(batch.mask)
    return batch


# -- KDRL's schedule, per step ---------------------------------------------------------------------------------


def test_scheduled_loss_rebinds_kd_coef_by_hand_values() -> None:
    fn = LOSSES.bind("kdrl", {"kd_coef": 0.005, "kd_coef_end": 0.001, "kd_schedule": "cosine",
                              "kd_schedule_steps": 4})
    # cosine: end + (start - end) (1 + cos(pi t / 4)) / 2 ; t = 1: 0.001 + 0.002 (1 + 0.7071068) = 0.0044142
    hand = {0: 0.005, 1: 0.0044142136, 2: 0.003, 4: 0.001, 9: 0.001}
    for step, value in hand.items():
        assert scheduled_loss(fn, step, default_steps=100).keywords["kd_coef"] == pytest.approx(value, abs=1e-9)
    constant = LOSSES.bind("kdrl", {"kd_coef": 0.005})
    assert scheduled_loss(constant, 3, default_steps=10) is constant  # nothing to anneal
    ppo = LOSSES.bind("ppo_clip", {})
    assert scheduled_loss(ppo, 3, default_steps=10) is ppo


def test_learner_uses_the_scheduled_kd_coef_at_each_step(tiny_model_dir, teacher_dir) -> None:
    """Linear over train.steps = 4 (kd_schedule_steps unset): steps 0, 1, 2 use 5e-3, 4e-3, 3e-3, and the loss
    the learner applies has that coefficient (its value matches kdrl_loss called with it)."""
    student, teacher = load_causal_lm(tiny_model_dir), load_causal_lm(teacher_dir, trainable=False)
    cfg = Config.model_validate({
        "model": {"teacher_path": "builtin-teacher"}, "train": {"steps": 4}, "optim": {"lr": 1e-3},
        "rollout": {"n": 2}, "algorithm": {"loss": {"name": "kdrl", "kd_coef": 0.005, "kd_coef_end": 0.001,
                                                    "kd_schedule": "linear", "kd_masking": "none"}}})
    learner = Learner(student, cfg, teacher=teacher)
    used = []
    for step in range(3):
        batch, _ = learner.prepare(_batch())
        learner.compute_advantages(batch, {"rewards": batch.rewards, "group_ids": batch.group_ids})
        stats = learner.update(batch)
        used.append(stats["kd_coef"])
        assert stats["kd_coef"] == pytest.approx(kd_coefficient(step, schedule="linear", start=0.005, end=0.001,
                                                                total_steps=4))
        assert learner.step_loss_fn.keywords["kd_coef"] == stats["kd_coef"]
    assert used == pytest.approx([0.005, 0.004, 0.003])


# -- config errors ----------------------------------------------------------------------------------------------

RECIPE = """\
task: addition
rollout:
  n: 4
model:
  teacher_path: builtin-teacher
algorithm:
  advantage: grpo
  loss: {name: gkd, beta: 0.5}
"""


@pytest.mark.parametrize("override,key", [
    ("algorithm.kl_coef=0.1", "algorithm.kl_coef"),
    ("algorithm.entropy_coef=0.01", "algorithm.entropy_coef"),
    ("algorithm.loss.teacher_top_k=-1", "algorithm.loss"),
    ("algorithm.loss.beta=1.5", "algorithm.loss"),
    ("model.teacher_path=null", "model.teacher_path"),
])
def test_gkd_config_errors_name_the_key(tmp_path: Path, override: str, key: str) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE)
    load_config(recipe, [])
    with pytest.raises(ConfigError) as err:
        load_config(recipe, [override])
    assert key in str(err.value)


def test_gkd_loads_with_the_teacher_on_a_ray_actor_and_top_k(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE)
    cfg = load_config(recipe, ["distributed.backend=ray", "distributed.reference_worker=true",
                               "algorithm.loss.teacher_top_k=8"])
    assert cfg.distributed.reference_worker and cfg.algorithm.loss.params["teacher_top_k"] == 8
    with pytest.raises(ConfigError, match="every learner rank holds its own"):  # ranks load their own teacher
        load_config(recipe, ["distributed.backend=ray", "distributed.reference_worker=true",
                             "distributed.learner_workers=2"])


def test_kd_schedule_knobs_are_validated(tmp_path: Path) -> None:
    recipe = tmp_path / "r.yaml"
    recipe.write_text(RECIPE.replace("{name: gkd, beta: 0.5}", "{name: kdrl, kd_schedule: linear}"))
    assert load_config(recipe, []).algorithm.loss.params["kd_schedule"] == "linear"
    for bad in ("algorithm.loss.kd_schedule=exp", "algorithm.loss.kd_schedule_steps=0"):
        with pytest.raises(ConfigError, match="algorithm.loss"):
            load_config(recipe, [bad])


# -- GKD's lambda sampler -----------------------------------------------------------------------------------


def _sampler_ctx(step: int, calls: list) -> StepContext:
    task = TASKS.build("addition", {"digits": [2, 2]})
    tok = load_tokenizer("builtin")

    def rollout(records, n):
        calls.append((len(records), n))
        return [Group(r, [1], [Sample(prompt_ids=[1], response_ids=[2]) for _ in range(n)]) for r in records]

    return StepContext(step=step, prompts_per_step=3, n=2, rollout=rollout, task=task, tokenizer=tok,
                       renderer=PromptRenderer(task, tok), score=lambda groups: None)


def test_gkd_sampler_follows_the_lambda_coin() -> None:
    task = TASKS.build("addition", {"digits": [2, 2]})
    prompts = task.train
    sampler = SAMPLERS.build("gkd", {"lmbda": 0.5}, prompts=prompts, seed=3)
    seen = {True: 0, False: 0}
    for step in range(1, 9):
        calls: list = []
        groups, metrics = sampler.next_batch(_sampler_ctx(step, calls))
        student = gkd_use_student_samples(step, lmbda=0.5, seed=3)
        seen[student] += 1
        assert metrics["student_samples"] == float(student)
        assert len(groups) == 3
        if student:
            assert calls == [(3, 2)]
        else:  # the task's reference answers (the scratchpad), trained as given; nothing generated
            assert calls == []
            for group in groups:
                (sample,) = group.samples
                text, ok = task.worked_solution(group.record)
                assert ok and sample.text == text and sample.meta["off_policy"]
                assert group.prompt_ids and sample.response_ids[-1] == load_tokenizer("builtin").eos_token_id
    assert seen[True] and seen[False]
    with pytest.raises(RegistryError, match="lmbda"):
        SAMPLERS.build("gkd", {"lmbda": 2.0}, where="sampling", prompts=prompts, seed=0)


def test_gkd_sampler_with_teacher_outputs_samples_the_teacher_on_off_policy_steps() -> None:
    prompts = TASKS.build("addition", {"digits": [2, 2]}).train
    sampler = SAMPLERS.build("gkd", {"lmbda": 0.0, "off_policy": "teacher"}, prompts=prompts, seed=3)
    calls: list = []
    teacher_calls: list = []

    def teacher_rollout(records, n):
        teacher_calls.append((len(records), n))
        return [Group(r, [1], [Sample(prompt_ids=[1], response_ids=[2, 3, 4], logprobs=[-0.5] * 3)
                               for _ in range(n)]) for r in records]

    ctx = _sampler_ctx(1, calls)
    ctx.extras["teacher_rollout"] = teacher_rollout
    groups, metrics = sampler.next_batch(ctx)
    assert calls == [] and teacher_calls == [(3, 2)]  # the student's engine samples nothing
    assert metrics["student_samples"] == 0.0 and metrics["teacher_tokens"] == 3 * 2 * 3
    for sample in (s for g in groups for s in g.samples):  # off-policy like a dataset response
        assert sample.meta["off_policy"] and sample.meta["teacher_sample"] and sample.logprobs == [0.0] * 3
    with pytest.raises(ValueError, match="teacher generator"):  # no teacher placed for this step
        sampler.next_batch(_sampler_ctx(2, []))


# -- re-distillation's data: a run's rollouts -----------------------------------------------------------------


def _write_rollouts(run_dir: Path) -> None:
    rows = [  # (step, prompt, response, correct)
        (1, "p1", "old right", True), (1, "p2", "wrong", False), (2, "p1", "new right", True),
        (2, "p1", "new right", True), (2, "p3", "p3 right", True), (2, "p4", "label free", None),
    ]
    run_dir.mkdir(parents=True, exist_ok=True)
    with (run_dir / "rollouts.jsonl").open("w") as f:
        for step, prompt, response, correct in rows:
            f.write(json.dumps({"step": step, "prompt": prompt, "response": response, "correct": correct}) + "\n")


def test_rollout_examples_newest_correct_one_per_prompt(tmp_path: Path) -> None:
    _write_rollouts(tmp_path / "run")
    pairs, left = rollout_examples(tmp_path / "run")
    assert pairs == [("p1", "new right"), ("p3", "p3 right")] and left == 4
    pairs, _ = rollout_examples(tmp_path / "run" / "rollouts.jsonl", per_prompt=None)
    assert pairs == [("p1", "new right"), ("p3", "p3 right"), ("p1", "old right")]
    assert rollout_examples(tmp_path / "run", max_examples=1)[0] == [("p1", "new right")]
    pairs, _ = rollout_examples(tmp_path / "run", correct_only=False, per_prompt=None)
    assert len(pairs) == 5  # duplicates count once
    (tmp_path / "bad.jsonl").write_text(json.dumps({"prompt": "a", "completion": "b"}) + "\n")
    with pytest.raises(ValueError, match="not a run's rollouts"):
        rollout_examples(tmp_path / "bad.jsonl")
    with pytest.raises(ValueError, match="rollouts.jsonl"):
        rollout_examples(tmp_path / "nowhere")


def test_sft_reads_a_run_directory_as_the_renderer_encodes_prompts(tmp_path: Path) -> None:
    _write_rollouts(tmp_path / "run")
    cfg = SFTConfig.model_validate({"model": {"path": "builtin"}, "data": {"path": str(tmp_path / "run")}})
    tok = load_tokenizer("builtin")
    examples, skipped = tokenize_examples(cfg, tok)
    ids, prompt_len = examples[0]
    expected_prompt = list(tok("p1")["input_ids"])  # encode_prompt(text=...) for a model without a chat template
    assert ids[:prompt_len] == expected_prompt
    assert ids[prompt_len:] == list(tok("new right", add_special_tokens=False)["input_ids"]) + [tok.eos_token_id]
    assert len(examples) == 2 and skipped == 4
    redistill = load_config(Path(__file__).parents[2] / "recipes" / "redistill.yaml",
                            [f"data.path={tmp_path / 'run'}"], schema=SFTConfig)
    assert redistill.data.format == "rollouts" and redistill.data.correct_only
