"""Checkpoints: HF directory + trainer_state.pt, atomic writes, manifests verified on resume, damaged checkpoints
moved aside, partial writes cleaned up, retention that keeps the newest (verified) one."""

from __future__ import annotations

import json
import shutil
import zlib

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

import rlvr.trainer.checkpoint as ckpt
from rlvr.models import load_causal_lm, load_tokenizer
from rlvr.trainer.checkpoint import (
    CheckpointError,
    latest_checkpoint,
    list_checkpoints,
    load_trainer_state,
    prune_checkpoints,
    resume_checkpoint,
    save_checkpoint,
    save_hf_dir,
    verify_checkpoint,
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


# -- manifests, verification, fallback on resume -----------------------------------------------------------


@pytest.fixture(scope="module")
def two_checkpoints(tmp_path_factory, tiny_model_dir):
    """A run directory with the checkpoints of steps 1 and 2 (step 2 with different weights)."""
    run = tmp_path_factory.mktemp("two") / "run"
    model, tok = load_causal_lm(tiny_model_dir), load_tokenizer(tiny_model_dir)
    save_checkpoint(run, 1, model, tok, {"marker": 1}, keep_last=5)
    with torch.no_grad():
        next(model.parameters()).add_(1.0)
    save_checkpoint(run, 2, model, tok, {"marker": 2}, keep_last=5)
    return run


def _copy(run, tmp_path):
    dest = tmp_path / "run"
    shutil.copytree(run, dest)
    return dest


def test_the_manifest_records_every_file_size_and_crc32(two_checkpoints):
    path = two_checkpoints / "checkpoints" / "step_000002"
    manifest = json.loads((path / "manifest.json").read_text())
    on_disk = {p.name for p in path.iterdir()} - {"manifest.json"}
    assert set(manifest["files"]) == on_disk
    assert {"model.safetensors", "trainer_state.pt", "config.json", "tokenizer.json"} <= on_disk
    for name, entry in manifest["files"].items():
        data = (path / name).read_bytes()
        assert entry == {"size": len(data), "crc32": f"{zlib.crc32(data):08x}"}
    assert verify_checkpoint(path) is None
    assert load_trainer_state(path)["manifest"] is True


def _damage(path, how):
    data = path.read_bytes()
    if how == "truncate":
        path.write_bytes(data[: len(data) // 2])
    elif how == "corrupt":  # one byte in the middle, inverted: same size, different content
        mid = len(data) // 2
        path.write_bytes(data[:mid] + bytes([data[mid] ^ 0xFF]) + data[mid + 1 :])
    else:
        path.unlink()


FILES = ["model.safetensors", "trainer_state.pt", "config.json", "generation_config.json", "tokenizer.json",
         "tokenizer_config.json", "manifest.json"]


@pytest.mark.parametrize("how", ["truncate", "corrupt", "delete"])
def test_each_damaged_file_moves_the_newest_aside_and_resumes_from_the_previous(two_checkpoints, tmp_path, how):
    names = sorted(p.name for p in (two_checkpoints / "checkpoints" / "step_000002").iterdir())
    assert names == sorted(FILES)  # every file of a checkpoint is damaged in turn below
    for name in FILES:
        run = _copy(two_checkpoints, tmp_path / f"{how}-{name}")
        _damage(run / "checkpoints" / "step_000002" / name, how)
        said: list[str] = []
        found = resume_checkpoint(run, say=said.append)
        assert found == run / "checkpoints" / "step_000001", (how, name, said)
        assert load_trainer_state(found)["marker"] == 1
        assert name in said[0] and "step_000002 is damaged" in said[0], (how, name, said)
        assert str(run / "checkpoints" / "damaged" / "step_000002") in said[0]
        assert "Resuming from step 1" in said[1]
        assert (run / "checkpoints" / "damaged" / "step_000002").is_dir()
        assert [s for s, _ in list_checkpoints(run)] == [1]


def test_the_messages_say_what_is_wrong(two_checkpoints, tmp_path):
    run = _copy(two_checkpoints, tmp_path)
    path = run / "checkpoints" / "step_000002"
    size = (path / "model.safetensors").stat().st_size
    _damage(path / "model.safetensors", "truncate")
    assert verify_checkpoint(path) == (f"model.safetensors has {size // 2} bytes, the manifest says {size} "
                                       "(truncated or overwritten)")
    shutil.copy(run / "checkpoints" / "step_000001" / "model.safetensors", path / "model.safetensors")
    assert "model.safetensors does not match its checksum" in verify_checkpoint(path)
    (path / "manifest.json").unlink()
    assert verify_checkpoint(path) == "manifest.json is missing (this checkpoint was written with one)"


def test_an_intact_newest_checkpoint_is_used_as_is(two_checkpoints, tmp_path):
    run = _copy(two_checkpoints, tmp_path)
    said: list[str] = []
    assert resume_checkpoint(run, say=said.append) == run / "checkpoints" / "step_000002"
    assert said == [] and not (run / "checkpoints" / "damaged").exists()


def test_when_every_checkpoint_is_damaged_there_is_none_to_resume(two_checkpoints, tmp_path):
    run = _copy(two_checkpoints, tmp_path)
    for step in (1, 2):
        _damage(run / "checkpoints" / f"step_00000{step}" / "trainer_state.pt", "truncate")
    said: list[str] = []
    assert resume_checkpoint(run, say=said.append) is None
    assert sorted(p.name for p in (run / "checkpoints" / "damaged").iterdir()) == ["step_000001", "step_000002"]
    assert "no intact checkpoint left" in said[-1]


def test_a_second_damaged_copy_of_a_step_does_not_overwrite_the_first(two_checkpoints, tmp_path):
    run = _copy(two_checkpoints, tmp_path)
    (run / "checkpoints" / "damaged" / "step_000002").mkdir(parents=True)
    _damage(run / "checkpoints" / "step_000002" / "config.json", "delete")
    resume_checkpoint(run)
    assert (run / "checkpoints" / "damaged" / "step_000002.1" / "model.safetensors").is_file()


def test_a_step_directory_without_trainer_state_is_reported_on_resume(two_checkpoints, tmp_path):
    run = _copy(two_checkpoints, tmp_path)
    (run / "checkpoints" / "step_000009").mkdir()
    said: list[str] = []
    assert resume_checkpoint(run, say=said.append).name == "step_000002"
    assert "step_000009 is damaged: trainer_state.pt is missing" in said[0]


def test_a_checkpoint_without_manifest_from_an_older_rlvr_gets_structural_checks(two_checkpoints, tmp_path):
    run = _copy(two_checkpoints, tmp_path)
    for step in (1, 2):  # as written before manifests existed
        path = run / "checkpoints" / f"step_00000{step}"
        (path / "manifest.json").unlink()
        state = load_trainer_state(path)
        del state["manifest"]
        torch.save(state, path / "trainer_state.pt")
    step2 = run / "checkpoints" / "step_000002"
    assert verify_checkpoint(step2) is None
    _damage(step2 / "model.safetensors", "truncate")
    assert "model.safetensors has" in verify_checkpoint(step2) and "its header says" in verify_checkpoint(step2)
    assert resume_checkpoint(run).name == "step_000001"
    _damage(run / "checkpoints" / "step_000001" / "trainer_state.pt", "truncate")
    assert verify_checkpoint(run / "checkpoints" / "step_000001").startswith("trainer_state.pt does not load")


def test_partial_writes_are_removed_at_the_next_start_and_said(two_checkpoints, tmp_path):
    run = _copy(two_checkpoints, tmp_path)
    partial = [run / "checkpoints" / ".step_000003.tmp-abc123", run / "checkpoints" / ".step_000002.old-4242",
               run / ".final.tmp-xyz"]
    for p in partial:
        p.mkdir()
        (p / "model.safetensors").write_bytes(b"x" * 100)
    unrelated = run / "checkpoints" / ".keep"
    unrelated.mkdir()
    said: list[str] = []
    assert resume_checkpoint(run, say=said.append).name == "step_000002"
    assert not any(p.exists() for p in partial)
    assert unrelated.is_dir()
    assert sorted(said) == sorted(f"Removed {p.name}, a partial checkpoint write left by an interrupted run"
                                  for p in partial)


def test_a_checkpoint_that_does_not_verify_after_writing_fails_and_prunes_nothing(tmp_path, model_and_tok,
                                                                                 monkeypatch):
    model, tok = model_and_tok
    save_checkpoint(tmp_path, 1, model, tok, {}, keep_last=1)
    real = ckpt.write_manifest

    def then_cut_short(directory):  # a file changes after it was written and checksummed
        out = real(directory)
        _damage(directory / "model.safetensors", "truncate")
        return out

    monkeypatch.setattr(ckpt, "write_manifest", then_cut_short)
    with pytest.raises(OSError, match="did not verify after writing: model.safetensors has .* bytes"):
        save_checkpoint(tmp_path, 2, model, tok, {}, keep_last=1)
    assert [s for s, _ in list_checkpoints(tmp_path)] == [1]
    assert (tmp_path / "checkpoints" / "damaged" / "step_000002").is_dir()


def test_retention_keeps_the_newest_verified_checkpoint_even_beyond_keep_last(two_checkpoints, tmp_path):
    run = _copy(two_checkpoints, tmp_path)
    _damage(run / "checkpoints" / "step_000002" / "model.safetensors", "corrupt")
    prune_checkpoints(run, keep_last=1)
    assert [s for s, _ in list_checkpoints(run)] == [1, 2]  # 2 is the newest, 1 the newest intact
    prune_checkpoints(run, keep_last=1, verified=run / "checkpoints" / "step_000002")
    assert [s for s, _ in list_checkpoints(run)] == [2]


def test_a_state_file_that_does_not_load_is_a_clear_error(two_checkpoints, tmp_path):
    run = _copy(two_checkpoints, tmp_path)
    path = run / "checkpoints" / "step_000002"
    _damage(path / "trainer_state.pt", "truncate")
    with pytest.raises(CheckpointError, match=r"step_000002/trainer_state.pt does not load .*move .* aside"):
        load_trainer_state(path)
