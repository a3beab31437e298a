"""The learner as a Ray actor group (distributed.learner_workers) on CPU: its update equals the single-process
update, a rank dealt no group keeps in step, a recipe trains with Ray rollout workers plus Ray learner ranks,
a dead learner rank stops the run cleanly with a checkpoint to resume from, and GKD (each rank loads its own
teacher) makes the single-process update. With LoRA (model.lora) the ranks train the adapters and make the
single-process LoRA update, the controller pulls only the adapters, and rollout workers receive the merged
weights, so they sample from exactly the weights the ranks train."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from ranks import random_groups

ray = pytest.importorskip("ray")

from rlvr.config import Config, ConfigError, load_config  # noqa: E402
from rlvr.distributed.ray_learner import RayLearnerGroup, combine_stats, deal_groups  # noqa: E402
from rlvr.learner import learn_on  # noqa: E402
from rlvr.learner.learner import Learner  # noqa: E402
from rlvr.models import load_causal_lm  # noqa: E402
from rlvr.models.lora import adapt_policy, lora_state, plain_state_dict  # noqa: E402
from rlvr.tracking import read_metrics  # noqa: E402
from rlvr.trainer.checkpoint import load_trainer_state  # noqa: E402
from rlvr.trainer.loop import TrainingError, train  # noqa: E402
from tests.conftest import make_tiny_model  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
GRPO = ROOT / "recipes" / "grpo.yaml"
RAY = ["eval.before=false", "eval.after=false", "logging.progress=false", "distributed.backend=ray",
       "distributed.num_cpus=2", "distributed.rollout_workers=2", "distributed.cpus_per_rollout_worker=0.5",
       "distributed.learner_workers=2", "distributed.cpus_per_learner_worker=0.5"]
LORA = {"r": 4, "alpha": 8}


@pytest.fixture(scope="module")
def ray_runtime():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _cfg(model_dir: Path) -> Config:
    # recomputed old log-probs, a KL term against the reference, active grad clipping, uneven micro-batches
    return Config.model_validate({
        "model": {"path": str(model_dir)},
        "train": {"steps": 5, "micro_batch_size": 2, "mini_batches": 1, "recompute_old_logprobs": True},
        "algorithm": {"kl_coef": 0.05},
        "optim": {"lr": 1e-2, "grad_clip": 0.5}, "rollout": {"n": 2},
        "distributed": {"backend": "ray", "learner_workers": 2, "cpus_per_learner_worker": 0.5},
    })


def _groups(num_groups: int):
    return random_groups(num_groups, seed=3, length=lambda g, i: 2 + 3 * i + g)


@pytest.mark.slow
@pytest.mark.parametrize("num_groups", [3, 1], ids=["uneven", "one_rank_idle"])
def test_two_learner_ranks_make_the_single_process_update(ray_runtime, tiny_model_dir, num_groups):
    cfg = _cfg(tiny_model_dir)
    local = Learner(load_causal_lm(tiny_model_dir), cfg, load_causal_lm(tiny_model_dir, trainable=False))
    group = RayLearnerGroup(cfg, str(tiny_model_dir), pad_id=0)
    try:
        for _ in range(2):  # two updates: the second one uses AdamW's moments
            local_groups, remote_groups = _groups(num_groups), _groups(num_groups)
            expected = learn_on(local, local_groups, pad_id=0)
            got = group.learn(remote_groups)
            assert got["train_tokens"] == expected["train_tokens"]
            for key in ("grad_norm", "lr", "kl", "pg_loss", "entropy"):
                assert got[key] == pytest.approx(expected[key], rel=1e-4, abs=1e-6), key
            for lg, rg in zip(local_groups, remote_groups):  # advantages come back to the controller's samples
                assert [s.advantage for s in rg.samples] == pytest.approx([s.advantage for s in lg.samples])
        whole = load_causal_lm(tiny_model_dir)
        before = {k: v.clone() for k, v in whole.state_dict().items()}
        group.pull_weights(whole)
        moved = max(float((whole.state_dict()[k] - before[k]).abs().max()) for k in before)
        assert moved > 1e-3  # the updates did something ...
        for k, v in local.model.state_dict().items():  # ... and the same thing
            assert torch.allclose(whole.state_dict()[k], v, atol=1e-5), k
        state = group.state_dict()
        assert state["updates"] == 2
        assert set(state["optimizer"]["state"]) == set(local.optimizer.state_dict()["state"])
    finally:
        group.close()


@pytest.mark.slow
def test_spark_on_two_learner_ranks_makes_the_single_process_update(ray_runtime, tiny_model_dir):
    """spark's judge examples (every objective) dealt over 2 ranks: the update, the judge metrics and, on the
    next (label-free) step, the self-judged rewards are the single-process SparkTrainable's."""
    from rlvr.learner.spark import SparkTrainable
    from rlvr.learner.step import LocalTrainable
    from rlvr.models import load_tokenizer

    cfg = Config.model_validate({
        "model": {"path": str(tiny_model_dir)},
        "train": {"steps": 5, "micro_batch_size": 2, "mini_batches": 1},
        "optim": {"lr": 1e-2, "grad_clip": 0.5}, "rollout": {"n": 2},
        "coevolve": {"mode": "spark", "objectives": ["pointwise", "pairwise", "reflection"],
                     "self_reward": {"after": 1}},
        "distributed": {"backend": "ray", "learner_workers": 2, "cpus_per_learner_worker": 0.5},
    })
    tok = load_tokenizer(tiny_model_dir)
    local = SparkTrainable(LocalTrainable(Learner(load_causal_lm(tiny_model_dir), cfg), 0), cfg.coevolve, tok, 0)
    controller = load_causal_lm(tiny_model_dir)  # the controller's copy: it reads the label-free judgement
    group = RayLearnerGroup(cfg, str(tiny_model_dir), pad_id=0)
    remote = SparkTrainable(group, cfg.coevolve, tok, 0, judge_model=controller)
    try:
        expected, got = local.learn(_groups(3)), remote.learn(_groups(3))  # step 1: policy + judge loss
        assert expected["rm/examples"] == 6 and expected["rm/pairwise_examples"] == 3  # each group: 1 right, 1 wrong
        assert expected["rm/reflection_examples"] == 3
        for key in ("rm/examples", "rm/pairwise_examples", "rm/reflection_examples", "rm/accuracy",
                    "rm/pairwise_accuracy", "train_tokens"):
            assert got[key] == expected[key], key
        for key in ("rm/loss", "rm/pairwise_loss", "rm/reflection_loss"):  # per-example NLLs, other padding
            assert got[key] == pytest.approx(expected[key], rel=1e-5), key
        for key in ("grad_norm", "pg_loss", "entropy"):  # as the other learner-rank tests
            assert got[key] == pytest.approx(expected[key], rel=1e-4, abs=1e-6), key
        group.pull_weights(controller)
        for k, v in local.learner.model.state_dict().items():
            assert torch.allclose(controller.state_dict()[k], v, atol=1e-5), k
        local_groups, remote_groups = _groups(3), _groups(3)
        expected, got = local.learn(local_groups), remote.learn(remote_groups)  # step 2: label-free
        assert expected["self_reward/step"] == got["self_reward/step"] == 1.0 and "rm/loss" not in got
        assert [s.reward for g in remote_groups for s in g.samples] == pytest.approx(
            [s.reward for g in local_groups for s in g.samples], rel=1e-4)
        assert got["grad_norm"] == pytest.approx(expected["grad_norm"], rel=1e-4, abs=1e-6)
        assert group.updates == group.state_dict()["updates"] == 2  # the count spark seeds its steps with
    finally:
        group.close()


def test_groups_are_dealt_whole_longest_first_to_the_least_loaded_rank():
    groups = random_groups(5, seed=0, length=lambda g, i: 1 + 4 * g)  # group g: 2 samples of 1 + 4g tokens
    dealt = deal_groups(groups, 2)
    assert dealt == [[0, 1, 4], [2, 3]]  # 4 -> r0; 3 -> r1; 2 -> r1 (less loaded); 1, 0 -> r0
    assert deal_groups(groups[:1], 3) == [[0], [], []]


def test_rank_metrics_combine_weighted_by_response_tokens():
    out = combine_stats([{"train_tokens": 50.0, "pg_loss": 1.0, "grad_norm": 2.0},
                         {"train_tokens": 20.0, "pg_loss": 3.0, "grad_norm": 2.0},
                         {"train_tokens": 0.0, "grad_norm": 2.0}],  # an idle rank reports no diagnostics
                        weights=[30.0, 10.0, 0.0])
    assert out == {"train_tokens": 70.0, "pg_loss": pytest.approx(1.5), "grad_norm": 2.0}


@pytest.mark.slow
def test_ray_rollout_workers_and_learner_ranks_train_the_builtin_recipe(ray_runtime, tmp_path):
    # one mini-batch: every update samples from exactly the weights it trains, which approx_kl_old checks
    run = train(load_config(GRPO, [f"run.dir={tmp_path / 'run'}", *RAY, "checkpoint.every=0", "train.steps=20",
                                   "train.mini_batches=1"]))
    metrics = read_metrics(run)
    first = sum(m["accuracy"] for m in metrics[:5]) / 5
    last = sum(m["accuracy"] for m in metrics[-5:]) / 5
    assert last > first + 0.1, (first, last)
    assert all(m["approx_kl_old"] < 1e-6 for m in metrics)  # rollout workers got every update's weights
    assert (run / "final" / "model.safetensors").is_file()


@pytest.mark.slow
def test_asynchronous_training_with_learner_ranks_uses_one_step_old_samples(ray_runtime, tmp_path):
    run = train(load_config(GRPO, [f"run.dir={tmp_path / 'run'}", *RAY, "checkpoint.every=0", "train.steps=4",
                                   "train.prompts_per_step=4", "rollout.n=4", "rollout.max_new_tokens=32",
                                   "distributed.mode=async", "distributed.max_staleness=1"]))
    metrics = read_metrics(run)
    assert metrics[0]["async/staleness_0"] == 1.0
    assert all(m.get("async/staleness_1", 0.0) == 1.0 for m in metrics[1:])
    assert all(m["grad_norm"] == m["grad_norm"] and m["train_tokens"] > 0 for m in metrics)


@pytest.mark.slow
def test_a_dead_learner_rank_stops_with_a_checkpoint_that_resumes(ray_runtime, tmp_path, monkeypatch):
    small = ["train.steps=3", "train.prompts_per_step=4", "rollout.n=4", "rollout.max_new_tokens=32",
             "checkpoint.every=1"]
    run_dir = tmp_path / "run"
    monkeypatch.setenv("RLVR_FAULTS", "kill:learner:2")
    with pytest.raises(TrainingError, match=r"learner worker 1 died.*step_000001.*--resume"):
        train(load_config(GRPO, [f"run.dir={run_dir}", *RAY, *small]))
    assert len(read_metrics(run_dir)) == 1
    monkeypatch.delenv("RLVR_FAULTS")
    train(load_config(run_dir / "config.yaml", []), resume=True)
    metrics = read_metrics(run_dir)
    assert [m["step"] for m in metrics] == [1, 2, 3]
    assert (run_dir / "final" / "model.safetensors").is_file()


def test_learner_workers_need_ray_and_their_own_references():
    with pytest.raises(ConfigError, match="learner workers are Ray actors"):
        load_config(GRPO, ["distributed.learner_workers=2"])
    with pytest.raises(ConfigError, match="every learner rank holds its own reference"):
        load_config(GRPO, ["distributed.backend=ray", "distributed.learner_workers=2",
                           "distributed.reference_worker=true", "algorithm.kl_coef=0.01"])


# -- GKD (loss on full next-token distributions) on learner ranks, each with its own teacher ----------------


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A teacher of another size (hidden 48, 1 layer) with the student's byte tokenizer."""
    return make_tiny_model(tmp_path_factory.mktemp("tiny_teacher"), seed=1, hidden=48, layers=1)


def _gkd_cfg(model_dir: Path, teacher_dir: Path, **distributed) -> Config:
    return Config.model_validate({
        "model": {"path": str(model_dir), "teacher_path": str(teacher_dir)},
        "train": {"steps": 5, "micro_batch_size": 2, "mini_batches": 1, "logits_chunk": 7},
        "algorithm": {"loss": {"name": "gkd", "beta": 0.4}, "loss_agg": "token_mean"},
        "optim": {"lr": 1e-2, "grad_clip": 0.5}, "rollout": {"n": 2, "temperature": 0.7},
        "distributed": {"backend": "ray", **distributed},
    })


def _gkd_groups():
    return random_groups(3, seed=3, length=lambda g, i: 2 + 3 * i + g)  # 27 response tokens in 6 rows


# fp32: the ranks sum their gradients (and the controller their token-weighted metrics) in another order than one
# process does. A sum of 27 positive per-token terms (the JSD, the entropy) summed in another order moves by at
# most 26 roundings of 2^-24 relative. The gradient's elements may cancel, so its norm has no such relative bound;
# it gets the tolerance of the other learner-rank tests (1e-4, far above fp32 rounding of a few hundred terms).
GKD_REL = 27 * 2.0**-24  # 1.6e-6


@pytest.mark.slow
def test_gkd_on_two_learner_ranks_makes_the_single_process_update(ray_runtime, tiny_model_dir, teacher_dir):
    cfg = _gkd_cfg(tiny_model_dir, teacher_dir, learner_workers=2, cpus_per_learner_worker=0.5)
    local = Learner(load_causal_lm(tiny_model_dir), cfg, teacher=load_causal_lm(teacher_dir, trainable=False))
    group = RayLearnerGroup(cfg, str(tiny_model_dir), pad_id=0)  # each rank loads the teacher itself
    try:
        expected = learn_on(local, _gkd_groups(), pad_id=0)
        got = group.learn(_gkd_groups())
        assert got["train_tokens"] == expected["train_tokens"] == 45  # prompt and response tokens
        assert expected["gkd_jsd"] > 0
        for key in ("gkd_jsd", "pg_loss", "entropy"):
            assert got[key] == pytest.approx(expected[key], rel=GKD_REL), key
        assert got["grad_norm"] == pytest.approx(expected["grad_norm"], rel=1e-4, abs=1e-6)
        whole = load_causal_lm(tiny_model_dir)
        group.pull_weights(whole)
        for k, v in local.model.state_dict().items():  # one AdamW step of lr 1e-2 from the same gradient
            assert torch.allclose(whole.state_dict()[k], v, atol=1e-5), k
    finally:
        group.close()


@pytest.mark.slow
def test_lora_learner_ranks_make_the_single_process_update(ray_runtime, tiny_model_dir):
    cfg = Config.model_validate({
        "model": {"path": str(tiny_model_dir), "lora": LORA},
        "train": {"steps": 5, "micro_batch_size": 2, "mini_batches": 1},
        "optim": {"lr": 1e-2, "grad_clip": 0.5}, "rollout": {"n": 2},
        "distributed": {"backend": "ray", "learner_workers": 2, "cpus_per_learner_worker": 0.5},
    })
    torch.manual_seed(7)  # adapters A drawn here; the ranks get the same ones through load_state_dict below
    local = Learner(adapt_policy(load_causal_lm(tiny_model_dir), cfg.model.lora, freeze_projector=True), cfg, None)
    group = RayLearnerGroup(cfg, str(tiny_model_dir), pad_id=0)
    try:
        group.load_state_dict({**local.state_dict(), "lora": lora_state(local.model)})  # the resume path
        for _ in range(2):  # B starts at zero, so A gets its first gradient in the second update
            groups_local = random_groups(3, seed=3, length=lambda g, i: 2 + 3 * i + g)
            groups_remote = random_groups(3, seed=3, length=lambda g, i: 2 + 3 * i + g)
            expected = learn_on(local, groups_local, pad_id=0)
            got = group.learn(groups_remote)
            assert got["train_tokens"] == expected["train_tokens"]
            # fp32, two ranks' gradients all-reduced against one process's sum over a few hundred tokens
            for key in ("grad_norm", "pg_loss", "entropy"):
                assert got[key] == pytest.approx(expected[key], rel=1e-4, abs=1e-6), key
        controller = adapt_policy(load_causal_lm(tiny_model_dir), cfg.model.lora, freeze_projector=True)
        group.pull_weights(controller)  # the adapters only, into a LoRA-wrapped copy
        trained = lora_state(local.model)
        pulled = lora_state(controller)
        assert set(pulled) == set(trained) and all("lora_" in k for k in pulled)
        assert max(float((trained[k] - pulled[k]).abs().max()) for k in trained) < 1e-5
        moved = max(float(v.abs().max()) for k, v in pulled.items() if "lora_B" in k)
        assert moved > 1e-3  # B left zero: the updates did something
        state = group.state_dict()
        assert state["updates"] == 2 and set(state["lora"]) == set(trained)
    finally:
        group.close()


def test_plain_state_dict_is_what_a_plain_model_computes(tiny_model_dir):
    spec = Config.model_validate({"model": {"lora": LORA}}).model.lora
    torch.manual_seed(0)
    adapted = adapt_policy(load_causal_lm(tiny_model_dir), spec, freeze_projector=True)
    with torch.no_grad():  # non-zero B, so merging matters
        for name, p in adapted.named_parameters():
            if "lora_B" in name:
                p.normal_(0, 0.1)
    plain = load_causal_lm(tiny_model_dir, trainable=False)
    plain.load_state_dict(plain_state_dict(adapted))  # the keys a rollout worker's plain model has
    ids = torch.tensor([[5, 9, 17, 3, 11, 2]])
    with torch.no_grad():
        a, b = adapted(input_ids=ids).logits, plain(input_ids=ids).logits
    assert not torch.equal(b, load_causal_lm(tiny_model_dir, trainable=False)(input_ids=ids).logits)
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)  # (W + s B A) x against W x + s B (A x), fp32


@pytest.mark.slow
def test_lora_with_ray_rollout_workers_and_learner_ranks(ray_runtime, tmp_path):
    # (resuming restores the ranks' adapters through RayLearnerGroup.load_state_dict, checked above)
    keys = ["eval.before=false", "eval.after=false", "logging.progress=false", "distributed.backend=ray",
            "distributed.num_cpus=2", "distributed.rollout_workers=1", "distributed.cpus_per_rollout_worker=0.5",
            "distributed.learner_workers=2", "distributed.cpus_per_learner_worker=0.5",
            "model.lora={r: 8, alpha: 16}", "train.steps=3", "train.prompts_per_step=4", "rollout.n=4",
            "rollout.max_new_tokens=32", "train.mini_batches=1", "optim.lr=2e-3", "checkpoint.every=3"]
    run = train(load_config(GRPO, [f"run.dir={tmp_path / 'run'}", *keys]))
    metrics = read_metrics(run)
    assert [m["step"] for m in metrics] == [1, 2, 3]
    # every step's samples came from the merged weights of exactly the adapters the learner ranks trained: a
    # stale or unmerged worker would show a log-ratio once the adapters move (B != 0 after step 1)
    assert all(m["approx_kl_old"] < 1e-6 for m in metrics)
    state = load_trainer_state(run / "checkpoints" / "step_000003")
    assert state["lora"] and set(state["learner"]["lora"]) == set(state["lora"])
    assert all(torch.equal(state["lora"][k], state["learner"]["lora"][k]) for k in state["lora"])
    assert any(float(v.abs().max()) > 0 for k, v in state["lora"].items() if "lora_B" in k)
    base = load_causal_lm("builtin", trainable=False).state_dict()
    final = load_causal_lm(run / "final", trainable=False).state_dict()
    assert any(not torch.equal(v, base[k]) for k, v in final.items())  # merged adapters, plain transformers
