"""co_evolve's reward model on a Ray actor (distributed.reward_model_worker).

In the suite (one actor, 30-45 s with Ray's start on a loaded 2-core machine): the actor learns, scores and checkpoints exactly as
the reward model in the controller does, restoring its checkpoint (in the actor or in the controller) reproduces the
uninterrupted refreshes, and a
dead actor raises `RewardLearnerLost` naming the role.

Opt-in (RLVR_LONG_RAY_TESTS=1; five actor start-ups, 75-115 s): whole co_evolve runs, the reward model in the
controller vs on the actor, the actor killed at step 3 and the run resumed, metric for metric and both final
models bit-identical.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

ray = pytest.importorskip("ray")

from rlvr.config import load_config  # noqa: E402
from rlvr.distributed.ray_reward_model import RemoteRewardLearner, RewardLearnerLost  # noqa: E402
from rlvr.errors import RoleLost  # noqa: E402
from rlvr.learner.reward_model import build_reward_learner  # noqa: E402
from rlvr.models import load_tokenizer  # noqa: E402
from rlvr.tracking import read_metrics  # noqa: E402
from rlvr.trainer.loop import TrainingError, train  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
CO_EVOLVE = ROOT / "recipes" / "co_evolve.yaml"
# one torch thread in the controller and in the reward-model actor (cpus 0.5 -> 1 thread): the same reduction
# order in both placements, so their floats agree bit for bit
SMALL = ["eval.before=false", "eval.after=false", "logging.progress=false", "run.threads=1", "train.steps=3",
         "train.prompts_per_step=2", "rollout.n=4", "rollout.max_new_tokens=40", "train.mini_batches=2",
         "optim.warmup_steps=1", "checkpoint.every=1", "distributed.backend=ray", "distributed.num_cpus=2",
         "distributed.rollout_workers=1", "distributed.cpus_per_rollout_worker=0.5",
         "distributed.cpus_per_reward_model_worker=0.5"]
TIMING = ("_s", "tokens_per_s", "samples_per_s", "idle_frac", "queue_depth")


@pytest.fixture(scope="module")
def ray_runtime():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _metrics(run: Path) -> list[dict]:
    return [{k: v for k, v in m.items() if not k.endswith(TIMING)} for m in read_metrics(run)]


def _pairs(tok, refresh: int) -> list[tuple[list[int], list[int]]]:
    """Right vs wrong sums of different lengths, as (chosen, rejected) token rows; a new set each refresh."""
    def ids(text: str) -> list[int]:
        return list(tok(text, add_special_tokens=False)["input_ids"])

    terms = [(7 * refresh + 3 * i, 11 * i + refresh) for i in range(6)]
    return [(ids(f"{a}+{b}={a + b}"), ids(f"{a}+{b}={a + b + 1 + i}")) for i, (a, b) in enumerate(terms)]


@pytest.mark.slow
def test_reward_model_actor_matches_the_controller_and_restores_its_checkpoint(ray_runtime, monkeypatch):
    cfg = load_config(CO_EVOLVE, ["distributed.backend=ray", "distributed.reward_model_worker=true",
                                  "distributed.cpus_per_reward_model_worker=0.5", "coevolve.rm_batch_size=4",
                                  "coevolve.rm_updates=2", "coevolve.rm_lr=3e-3"])
    tok = load_tokenizer(cfg.model.path)
    torch.set_num_threads(1)  # as the actor (cpus 0.5 -> 1 thread): the same reduction order, exact equality
    local = build_reward_learner(cfg, int(tok.pad_token_id), torch.device("cpu"), torch.float32)
    rows = [c for c, _ in _pairs(tok, 9)] + [r for _, r in _pairs(tok, 9)]  # unseen rows to score
    expected, scores = [], []
    for k in range(3):
        expected.append(local.learn(_pairs(tok, k)))
        scores.append(local.score(rows))
    assert all(m["rm/pairs"] == 6 for m in expected) and scores[2] != scores[0]  # it trains: equality means more

    remote = RemoteRewardLearner(cfg, tok)
    try:
        got = [remote.learn(_pairs(tok, 0))]
        buffer = io.BytesIO()
        torch.save(remote.state_dict(), buffer)  # the checkpoint after refresh 1, as `Run.checkpoint` writes it
        got += [remote.learn(_pairs(tok, k)) for k in (1, 2)]
        assert got == expected and remote.score(rows) == scores[-1]
        final = remote.hf_model().state_dict()  # what final_rm/ is written from
        want = local.model.state_dict()
        assert final.keys() == want.keys() and all(torch.equal(final[k], v) for k, v in want.items())
        buffer.seek(0)
        remote.load_state_dict(torch.load(buffer))  # resume: weights, AdamW moments, refresh counter
        assert remote.learn(_pairs(tok, 1)) == expected[1] and remote.score(rows) == scores[1]
        buffer.seek(0)  # the checkpoint does not record the placement: the controller can resume it too
        moved = build_reward_learner(cfg, int(tok.pad_token_id), torch.device("cpu"), torch.float32)
        moved.load_state_dict(torch.load(buffer))
        assert moved.learn(_pairs(tok, 1)) == expected[1] and moved.score(rows) == scores[1]
        monkeypatch.setenv("RLVR_FAULTS", "kill:reward_model:5")  # the 5th refresh: the actor dies
        with pytest.raises(RewardLearnerLost, match=r"reward model worker \(co_evolve's reward model.*died while "
                           r"learning.*since the last checkpoint are lost") as err:
            remote.learn(_pairs(tok, 2))
        assert isinstance(err.value, RoleLost)  # the controller turns it into "continue with --resume"
        with pytest.raises(RewardLearnerLost, match="closed"):
            remote.score(rows)
    finally:
        remote.close()


@pytest.mark.slow
@pytest.mark.skipif(not os.environ.get("RLVR_LONG_RAY_TESTS"), reason="five Ray actor start-ups (75-115 s here); set "
                    "RLVR_LONG_RAY_TESTS=1")
def test_co_evolve_run_with_the_reward_model_on_ray_matches_and_resumes_after_its_actor_dies(ray_runtime, tmp_path,
                                                                                     monkeypatch):
    local = train(load_config(CO_EVOLVE, [f"run.dir={tmp_path / 'local'}", *SMALL]))
    remote_dir = tmp_path / "remote"
    remote = load_config(CO_EVOLVE, [f"run.dir={remote_dir}", *SMALL, "distributed.reward_model_worker=true"])
    monkeypatch.setenv("RLVR_FAULTS", "kill:reward_model:3")  # the actor dies at step 3's refresh
    with pytest.raises(TrainingError, match=r"reward model worker .* died while learning.*step_000002.*--resume"):
        train(remote)
    monkeypatch.delenv("RLVR_FAULTS")
    train(load_config(remote_dir / "config.yaml", []), resume=True)  # steps 1-2 from the actor, 3 after resume

    a, b = _metrics(local), _metrics(remote_dir)
    assert [m["step"] for m in b] == [1, 2, 3]
    assert sum(m.get("rm/pairs", 0.0) for m in a) > 0, "no step had a pair to learn from"
    assert a == b  # every metric, the reward model's rm/* and the learned_rm reward it scored, exactly equal
    for final in ("final", "final_rm"):
        wa, wb = load_file(str(local / final / "model.safetensors")), load_file(str(remote_dir / final /
                                                                                     "model.safetensors"))
        assert wa.keys() == wb.keys() and all(torch.equal(wa[k], wb[k]) for k in wa), final
