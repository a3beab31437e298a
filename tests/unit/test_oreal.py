"""OREAL: the token-level reward model's outcome objective, its token weights in the `oreal` advantage, the
learner's token scores, a tiny training run, and the config errors."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass

import pytest
import torch

from rlvr.algorithms import ADVANTAGES
from rlvr.algorithms.advantages import oreal_advantages, oreal_token_weights
from rlvr.config import Config, ConfigError, PRMConfig, load_config
from rlvr.learner.token_rm import TokenRewardModel
from rlvr.models import load_tokenizer
from rlvr.models.reward_head import load_step_reward_model, token_logits
from rlvr.rm.oreal import oreal_outcome_loss, train_token_rm

T = torch.tensor


def _close(x: torch.Tensor, expected: list[list[float]]) -> None:
    # float32 scores: 1e-6 relative is a few ulps of the inputs
    assert torch.allclose(x.double(), T(expected, dtype=torch.float64), rtol=1e-6, atol=1e-7), x


def test_outcome_objective_hand_computed():
    # sequence 1: w = [1, 3], mean 2, correct:  -log sigmoid(2) = log(1 + e^-2) = 0.126928
    # sequence 2: w = [0, -2, 2], mean 0, wrong: -log(1 - sigmoid(0)) = log 2 = 0.693147
    w1 = T([1.0, 3.0], dtype=torch.float64, requires_grad=True)
    w2 = T([0.0, -2.0, 2.0], dtype=torch.float64, requires_grad=True)
    loss = oreal_outcome_loss([w1, w2], T([1.0, 0.0], dtype=torch.float64))
    assert loss.item() == pytest.approx((math.log1p(math.exp(-2.0)) + math.log(2.0)) / 2, rel=1e-12)
    loss.backward()
    # d loss / d w_t = (p - y) / T_i / (number of sequences)
    sig2 = 1 / (1 + math.exp(-2.0))
    assert w1.grad.tolist() == pytest.approx([(sig2 - 1) / 2 / 2] * 2, rel=1e-12)
    assert w2.grad.tolist() == pytest.approx([0.5 / 3 / 2] * 3, rel=1e-12)


def _two_samples():
    # one group: sample 0 correct (reward 1), sample 1 wrong (reward 0); 4 token slots, sample 0 has 3 tokens
    scores = T([[0.9, 0.5, 0.2, 0.7], [0.9, 0.5, 0.2, 0.05]])
    mask = T([[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 1.0, 1.0]])
    return T([1.0, 0.0]), T([0, 0]), T([True, False]), mask, scores


def test_token_weights_land_on_the_tokens_the_paper_says():
    _, _, correct, mask, scores = _two_samples()
    w = oreal_token_weights(scores, correct, mask)
    # correct: max(2s - 1, 0) -> [0.8, 0, 0] (the masked 4th slot is 0); wrong: max(1 - 2s, 0) -> [0, 0, 0.6, 0.9]
    _close(w, [[0.8, 0.0, 0.0, 0.0], [0.0, 0.0, 0.6, 0.9]])
    w = oreal_token_weights(scores, correct, mask, threshold=0.3)  # (s - 0.3) / 0.7 and (0.3 - s) / 0.3
    _close(w, [[6 / 7, 2 / 7, 0.0, 0.0], [0.0, 0.0, 1 / 3, 5 / 6]])
    w = oreal_token_weights(scores, correct, mask, reweight="negative")  # correct answers keep weight 1
    _close(w, [[1.0, 1.0, 1.0, 0.0], [0.0, 0.0, 0.6, 0.9]])
    w = oreal_token_weights(scores, correct, mask, normalize=True)  # each row's weights average 1 over its tokens
    _close(w, [[3.0, 0.0, 0.0, 0.0], [0.0, 0.0, 1.6, 2.4]])


def test_oreal_advantage_hand_computed():
    rewards, groups, correct, mask, scores = _two_samples()
    adv = oreal_advantages(rewards, groups, correct, mask, scores)
    # RLOO: A = [1 - 0, 0 - 1] = [1, -1]; the wrong sample at factor 0.5
    _close(adv, [[0.8, 0.0, 0.0, 0.0], [0.0, 0.0, -0.3, -0.45]])
    fn = ADVANTAGES.bind("oreal", {"negative_factor": 1.0, "baseline": "grpo"})
    # GRPO: (r - 0.5) / (std 0.7071 + 1e-6) = +-0.70711
    a = 0.5 / (math.sqrt(0.5) + 1e-6)
    _close(fn(rewards, groups, correct, mask, scores), [[0.8 * a, 0.0, 0.0, 0.0], [0.0, 0.0, -0.6 * a, -0.9 * a]])


def test_a_group_with_one_outcome_gets_no_gradient():
    scores = torch.full((3, 2), 0.9)
    adv = oreal_advantages(T([1.0, 1.0, 1.0]), T([0, 0, 0]), T([True] * 3), torch.ones(3, 2), scores)
    assert torch.count_nonzero(adv) == 0


@dataclass
class _Rows:
    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    mask: torch.Tensor

    def __len__(self) -> int:
        return self.input_ids.shape[0]


def test_the_learner_scores_each_rows_own_tokens():
    torch.manual_seed(0)
    tok = load_tokenizer("builtin")
    pad = int(tok.pad_token_id)
    model = load_step_reward_model("builtin", dtype=torch.float32, device=torch.device("cpu"), pad_token_id=pad)
    a, b = tok.encode("12+34=")[:6], tok.encode("7+8=15")[:4]
    ids = torch.full((2, 7), pad)
    attention = torch.zeros(2, 7, dtype=torch.long)
    ids[0, : len(a)], attention[0, : len(a)] = T(a), 1            # right-padded
    ids[1, 7 - len(b):], attention[1, 7 - len(b):] = T(b), 1       # left-padded
    mask = attention.float()
    mask[:, :2] = 0.0  # the first two slots are "prompt"
    scores = TokenRewardModel(model, pad, micro_batch_size=1).token_scores(_Rows(ids, attention, mask))
    ref_a, ref_b = (torch.sigmoid(x) for x in token_logits(model.eval(), [a, b], pad, torch.device("cpu")))
    assert torch.allclose(scores[0, 2: len(a)], ref_a[2:], atol=1e-6)
    assert torch.allclose(scores[1, 7 - len(b):], ref_b * mask[1, 7 - len(b):], atol=1e-6)
    assert torch.all(scores[mask == 0] == 0)


def test_tiny_token_rm_training_lowers_the_loss(tmp_path):
    # a learnable outcome: a response is "correct" when it contains the token of "7"; 48 solutions of 12 prompts
    tok = load_tokenizer("builtin")
    seven, other = tok.encode("7")[-1], [tok.encode(c)[-1] for c in "01234"]
    g = torch.Generator().manual_seed(0)
    rows = []
    for p in range(12):
        for k in range(4):
            resp = [other[int(i)] for i in torch.randint(0, 5, (6,), generator=g)]
            ok = k % 2 == 0
            if ok:
                resp[int(torch.randint(0, 6, (1,), generator=g))] = seven
            rows.append({"id": f"p{p}", "prompt_ids": tok.encode(f"{p}+{p}="), "response_ids": resp, "correct": ok})
    cfg = load_config(None, ["loss.type=oreal", "label.rollouts=0", "train.steps=25", "train.batch_size=12",
                             "train.micro_batch_size=12", "data.eval_fraction=0.25", "optim.lr=3e-3",
                             "optim.warmup_steps=0", "logging.progress=false", f"run.dir={tmp_path}"],
                      schema=PRMConfig)
    train_token_rm(cfg, rows, tmp_path, tok, torch.device("cpu"))
    result = json.loads((tmp_path / "token_rm_eval.json").read_text())
    metrics = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert metrics[-1]["loss"] < 0.5 * metrics[1]["loss"]               # training loss fell
    # held out (3 prompts x 4 solutions): the trained head ranks a solution with the "7" first in every prompt
    assert result["after"]["best_of_n"] == 1.0 and result["after"]["accuracy"] > result["before"]["accuracy"]
    assert (tmp_path / "final" / "config.json").exists()


def test_config_errors_name_the_key():
    with pytest.raises(ConfigError, match="model.token_rm_path"):
        load_config(None, ["algorithm.advantage.name=oreal"], schema=Config)
    with pytest.raises(ConfigError, match="label.rollouts"):
        load_config(None, ["label.rollouts=0"], schema=PRMConfig)
    load_config(None, ["label.rollouts=0", "loss.type=oreal"], schema=PRMConfig)


def test_uniform_scores_with_normalize_reduce_to_rloo():
    # a token RM that gives every token of a correct answer 0.9 and of a wrong one 0.1: normalized weights are 1,
    # so the advantage is RLOO's, with the wrong samples at the negative factor
    rewards, groups = T([1.0, 0.0, 0.0, 1.0]), T([0, 0, 0, 0])
    correct, mask = rewards.bool(), torch.ones(4, 3)
    scores = torch.where(correct[:, None], 0.9, 0.1).expand(4, 3)
    adv = oreal_advantages(rewards, groups, correct, mask, scores, normalize=True)
    rloo = ADVANTAGES.bind("rloo", {})(rewards, groups)  # [2/3, -2/3, -2/3, 2/3]
    expected = (rloo * torch.where(correct, 1.0, 0.5))[:, None].expand(4, 3)
    assert torch.allclose(adv.double(), expected.double(), atol=1e-6)
