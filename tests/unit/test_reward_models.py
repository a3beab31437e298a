"""Reward models and generative judges, with tiny random-init models built in the test."""

from __future__ import annotations

import pytest
import torch

from rlvr.config import ConfigError
from rlvr.models.byte_tokenizer import save_byte_tokenizer
from rlvr.rewards.models import GenerativeJudgeReward, SequenceClassifierReward, meta_rm_vote
from rlvr.tasks import build_task
from rlvr.types import Group, Sample, TaskRecord

TASK = build_task("addition", {"eval_size": 5})


@pytest.fixture(scope="module")
def classifier_dir(tmp_path_factory):
    from transformers import Qwen2Config, Qwen2ForSequenceClassification

    path = tmp_path_factory.mktemp("rm")
    tok = save_byte_tokenizer(path)
    torch.manual_seed(0)
    cfg = Qwen2Config(vocab_size=len(tok), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, num_labels=1, pad_token_id=tok.pad_token_id)
    Qwen2ForSequenceClassification(cfg).save_pretrained(str(path))
    return path


def _group(texts):
    return Group(TaskRecord(id="q", question="2+3", answer="5", meta={"a": 2, "b": 3}), [1],
                 [Sample(prompt_ids=[1], response_ids=[2], text=t) for t in texts])


def test_sequence_classifier_scores_are_batched_and_deterministic(classifier_dir):
    rm = SequenceClassifierReward(path=str(classifier_dir), batch_size=2)
    texts = ["A:5", "a longer response A:5", "A:6"]
    out = rm(_group(texts), TASK)
    assert len(out) == 3 and all(0.0 < o.value < 1.0 for o in out)
    # batching (with padding) must not change a score
    single = SequenceClassifierReward(path=str(classifier_dir), batch_size=1)(_group(texts), TASK)
    assert [o.value for o in out] == pytest.approx([o.value for o in single], abs=1e-5)
    raw = SequenceClassifierReward(path=str(classifier_dir), normalize="raw")(_group(texts), TASK)
    assert [torch.sigmoid(torch.tensor(r.value)).item() for r in raw] == pytest.approx([o.value for o in out],
                                                                                       abs=1e-5)


def test_generative_judge_probability_and_score_modes(tiny_model_dir):
    judge = GenerativeJudgeReward(path=str(tiny_model_dir), yes_text="y", no_text="n", batch_size=2)
    out = judge(_group(["A:5", "A:6", "something"]), TASK)
    assert all(0.0 < o.value < 1.0 for o in out)
    assert "Reference answer: 5" in judge.prompts(_group(["A:5"]))[0]
    scorer = GenerativeJudgeReward(path=str(tiny_model_dir), mode="score", max_new_tokens=4)
    assert all(0.0 <= o.value <= 1.0 for o in scorer(_group(["A:5", "A:6"]), TASK))


def test_missing_reward_model_directory_names_the_key(tmp_path):
    with pytest.raises(Exception, match="rewards.reward_model.path"):
        SequenceClassifierReward(path=str(tmp_path / "missing"))


# -- meta-RM-guided voting (DeepSeek-GRM / SPCT) --------------------------------------------------------------

def test_meta_rm_vote_by_hand():
    scores = [7.0, 3.0, 9.0, None, 3.0]
    meta = [0.9, 0.1, 0.5, 0.99, 0.2]  # rank: judgement 3 (no score), 0 (7), 2 (9), 4 (3), 1 (3)
    assert meta_rm_vote(scores, None, None, "mean") == pytest.approx((7 + 3 + 9 + 3) / 4)  # all, unscored dropped
    assert meta_rm_vote(scores, meta, 3, "mean") == pytest.approx((7 + 9) / 2)  # kept 3, 0, 2
    assert meta_rm_vote(scores, meta, 1, "mean") is None  # the best-ranked judgement has no score
    assert meta_rm_vote(scores, None, None, "majority") == 3.0  # 3 twice
    assert meta_rm_vote(scores, meta, 3, "majority") == 7.0  # 7 and 9 once each: 7 ranks first
    assert meta_rm_vote(scores, [0.1, 0.2, 0.9, 0.0, 0.0], 2, "majority") == 9.0  # kept 2 (9), 1 (3): 9 first
    assert meta_rm_vote([None, None], None, None, "mean") is None


class _FakeMeta:
    """A meta reward model that trusts a judgement by its length, and records what it was asked."""

    def __init__(self):
        self.asked = []

    def score_texts(self, questions, responses):
        self.asked.append((questions, responses))
        return [float(len(r)) for r in responses]


def test_judge_votes_over_sampled_judgements_kept_by_the_meta_rm(tiny_model_dir):
    judge = GenerativeJudgeReward(path=str(tiny_model_dir), mode="score", samples=4, batch_size=2)
    fake = {  # four judgements per response, keyed by the response in the prompt
        "A:5": ["8", "score 6 out of ten", "2", "no verdict at all here"],
        "A:6": ["1", "9", "1", "3 because of a slip"],
    }
    judge.generate = lambda prompts, k: [fake["A:5" if "A:5" in p else "A:6"] for p in prompts]
    out = judge(_group(["A:5", "A:6"]), TASK)
    assert [o.value for o in out] == pytest.approx([(8 + 6 + 2) / 3 / 10, (1 + 9 + 1 + 3) / 4 / 10])
    judge.meta, judge.meta_keep = _FakeMeta(), 2  # keep the two longest judgements
    out = judge(_group(["A:5", "A:6"]), TASK)
    assert [o.value for o in out] == pytest.approx([0.6, (3 + 1) / 2 / 10])  # kept: "no verdict..", "score 6.."
    questions, responses = judge.meta.asked[0]
    assert responses == fake["A:5"] and "Response: A:5" in questions[0]  # (judge prompt, judgement)
    judge.vote = "majority"
    assert [o.value for o in judge(_group(["A:6"]), TASK)] == [pytest.approx(0.3)]  # kept 3, 1 (1 each): 3 first
    judge.meta = None
    judge.meta_keep = None
    assert [o.value for o in judge(_group(["A:6"]), TASK)] == [pytest.approx(0.1)]  # 1 twice


def test_judge_sampling_is_seeded_and_bad_voting_options_name_the_fix(tiny_model_dir):
    judge = GenerativeJudgeReward(path=str(tiny_model_dir), mode="score", samples=3, max_new_tokens=4,
                                  meta_path=str(tiny_model_dir), meta_kind="judge", meta_keep=2)
    first = judge.generate(["2+3=", "7+1="], 3)
    assert len(first) == 2 and all(len(k) == 3 for k in first)
    again = GenerativeJudgeReward(path=str(tiny_model_dir), mode="score", samples=3, max_new_tokens=4)
    assert again.generate(["2+3=", "7+1="], 3) == first  # same seed, same call count
    assert all(0.0 <= o.value <= 1.0 for o in judge(_group(["A:5"]), TASK))
    for kwargs, message in [({"samples": 4}, "set mode: score"),
                            ({"mode": "score", "samples": 2, "meta_keep": 3, "meta_path": "x"}, "meta_keep: 3"),
                            ({"mode": "score", "samples": 2, "meta_keep": 1}, "set meta_path")]:
        with pytest.raises(ConfigError, match=message):
            GenerativeJudgeReward(path=str(tiny_model_dir), **kwargs)
