"""Reward models and generative judges, with tiny random-init models built in the test."""

from __future__ import annotations

import pytest
import torch

from rlvr.models.byte_tokenizer import save_byte_tokenizer
from rlvr.rewards.models import GenerativeJudgeReward, SequenceClassifierReward
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
