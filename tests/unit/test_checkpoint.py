"""Checkpoints: HF directory + trainer_state.pt, atomic writes, retention that keeps the newest."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from rlvr.models import load_causal_lm, load_tokenizer
from rlvr.trainer.checkpoint import (
    latest_checkpoint,
    list_checkpoints,
    load_trainer_state,
    save_checkpoint,
    save_hf_dir,
)


@pytest.fixture
def model_and_tok(tiny_model_dir):
    return load_causal_lm(tiny_model_dir), load_tokenizer(tiny_model_dir)


def test_round_trip_is_exact_and_loadable_by_plain_transformers(tmp_path, model_and_tok):
    model, tok = model_and_tok
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(input_ids=torch.tensor([[1, 2, 3]])).logits.sum().backward()
    opt.step()
    path = save_checkpoint(tmp_path, 5, model, tok, {"optimizer": opt.state_dict(), "extra": 1}, keep_last=2)
    assert path.name == "step_000005"
    loaded = AutoModelForCausalLM.from_pretrained(str(path))
    for (n1, p1), (_, p2) in zip(model.state_dict().items(), loaded.state_dict().items()):
        assert torch.equal(p1, p2), n1
    assert AutoTokenizer.from_pretrained(str(path)).encode("12+3") == tok.encode("12+3")
    state = load_trainer_state(path)
    assert state["step"] == 5 and state["extra"] == 1
    assert set(state["rng"]) >= {"python", "numpy", "torch"}
    opt2 = torch.optim.AdamW(model.parameters(), lr=1e-3)
    opt2.load_state_dict(state["optimizer"])
    s1, s2 = opt.state_dict()["state"][0], opt2.state_dict()["state"][0]
    assert torch.equal(s1["exp_avg"], s2["exp_avg"])


def test_crash_while_writing_leaves_the_previous_checkpoint_latest(tmp_path, model_and_tok, monkeypatch):
    model, tok = model_and_tok
    good = save_checkpoint(tmp_path, 1, model, tok, {}, keep_last=3)

    def boom(*a, **k):
        raise OSError("disk full")

    monkeypatch.setattr(tok, "save_pretrained", boom)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(tmp_path, 2, model, tok, {}, keep_last=3)
    assert latest_checkpoint(tmp_path) == good
    leftovers = [p.name for p in (tmp_path / "checkpoints").iterdir()]
    assert leftovers == ["step_000001"]


def test_incomplete_directory_is_not_a_checkpoint(tmp_path, model_and_tok):
    model, tok = model_and_tok
    save_checkpoint(tmp_path, 1, model, tok, {}, keep_last=3)
    (tmp_path / "checkpoints" / "step_000009").mkdir()  # e.g. left by another tool; no trainer_state.pt
    assert latest_checkpoint(tmp_path).name == "step_000001"


@pytest.mark.parametrize("keep", [1, 2])
def test_retention_keeps_the_newest(tmp_path, model_and_tok, keep):
    model, tok = model_and_tok
    for step in (1, 2, 3, 4):
        save_checkpoint(tmp_path, step, model, tok, {}, keep_last=keep)
    steps = [s for s, _ in list_checkpoints(tmp_path)]
    assert steps == [4 - i for i in range(keep)][::-1]


def test_save_hf_dir_replaces_an_existing_directory(tmp_path, model_and_tok):
    model, tok = model_and_tok
    target = tmp_path / "final"
    save_hf_dir(model, tok, target)
    (target / "stale.txt").write_text("old")
    save_hf_dir(model, tok, target)
    assert not (target / "stale.txt").exists()
    assert (target / "model.safetensors").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["final"]
