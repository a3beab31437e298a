"""Model directories sent to Ray workers as bytes (no shared filesystem), and the placement record."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from rlvr.distributed.shipping import describe_node, local_model_dir, node_names, read_model_dir
from rlvr.models.loading import ModelError
from rlvr.models import load_causal_lm, load_tokenizer


def test_a_checkpoint_travels_without_its_trainer_state_and_loads_the_same_model(tiny_model_dir, tmp_path):
    ckpt = tmp_path / "step-2"
    ckpt.mkdir()
    for f in tiny_model_dir.iterdir():
        (ckpt / f.name).write_bytes(f.read_bytes())
    (ckpt / "trainer_state.pt").write_bytes(b"x" * 1000)  # optimizer moments: not needed by a worker
    files = read_model_dir(ckpt)
    assert "trainer_state.pt" not in files
    assert set(files) == {f.name for f in tiny_model_dir.iterdir()}
    with local_model_dir(files) as path:
        assert Path(path) != ckpt
        model = load_causal_lm(path, dtype=torch.float32, device=torch.device("cpu"), trainable=False)
        tok = load_tokenizer(path)
        kept = Path(path)
    assert not kept.exists()  # the private copy is removed once loaded
    want = load_causal_lm(str(tiny_model_dir), dtype=torch.float32, device=torch.device("cpu"), trainable=False)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), want.state_dict().values()))
    assert tok("12+34").input_ids == load_tokenizer(str(tiny_model_dir))("12+34").input_ids


def test_the_builtin_model_is_read_from_the_package_and_a_missing_path_names_the_key(tmp_path):
    assert "model.safetensors" in read_model_dir("builtin")
    with pytest.raises(ModelError, match=r"model.tokenizer_path: model directory '.*nope' does not exist"):
        read_model_dir(tmp_path / "nope", "model.tokenizer_path")


class FakeRay:
    def nodes(self):
        return [{"NodeID": "aa" * 28, "Resources": {"CPU": 1.0, "memory": 1e9, "object_store_memory": 3e8,
                                                    "node:127.0.0.1": 1.0, "node:__internal_head__": 1.0,
                                                    "head_node": 1.0}},
                {"NodeID": "bb" * 28, "Resources": {"CPU": 1.0, "second_node": 1.0, "gpu_pool": 4.0,
                                                    "accelerator_type:H100": 1.0}}]


def test_a_node_is_described_by_its_custom_resources():
    assert node_names(FakeRay(), "aa" * 28) == ["head_node"]
    assert node_names(FakeRay(), "bb" * 28) == ["gpu_pool", "second_node"]
    assert node_names(FakeRay(), "cc" * 28) == []
    line = describe_node(FakeRay(), {"node_id": "bb" * 28, "host": "vm", "pid": 7})
    assert line == "node bbbbbbbbbbbb (resources: gpu_pool, second_node; host vm, pid 7)"
