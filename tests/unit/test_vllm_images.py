"""vLLM with images, the parts that need no engine: rlvr's vLLM plugin (LLaVA without torchvision), the weight
names vLLM's LLaVA loads, the checkpoint view, and the refusal of VLM types it was not run with.
The engine itself: tests/e2e/test_vllm_vl.py."""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest
import torch
from safetensors import safe_open

from rlvr import vllm_plugin
from rlvr.errors import ConfigError
from rlvr.models.loading import BUILTIN_DIR, BUILTIN_VL_DIR
from rlvr.rollout.vllm_engine import VLLMEngine, vllm_checkpoint_view, vllm_weight_name, vllm_weight_names


def test_plugin_gives_vllms_pixtral_import_a_module_without_torchvision(monkeypatch) -> None:
    if importlib.util.find_spec("torchvision") is not None:
        pytest.skip("torchvision is installed: the plugin leaves transformers alone")
    monkeypatch.delitem(sys.modules, vllm_plugin.PIXTRAL_PROCESSOR, raising=False)
    vllm_plugin.register()
    from transformers.models.pixtral.image_processing_pixtral import _num_image_tokens  # what vLLM imports

    assert _num_image_tokens((32, 48), (16, 16)) == (2, 3)  # rows, columns of patches
    vllm_plugin.register()  # idempotent


def test_tower_names_get_clips_vision_model_level_back() -> None:
    assert vllm_weight_name("vision_tower.embeddings.patch_embedding.weight") == \
        "vision_tower.vision_model.embeddings.patch_embedding.weight"  # saved by transformers 5
    assert vllm_weight_name("model.vision_tower.pre_layrnorm.bias") == "vision_tower.vision_model.pre_layrnorm.bias"
    for unchanged in ("vision_tower.vision_model.embeddings.class_embedding", "model.multi_modal_projector.linear_1.weight",
                      "language_model.model.embed_tokens.weight", "model.layers.0.mlp.up_proj.weight"):
        assert vllm_weight_name(unchanged) == unchanged
    one = torch.ones(1)
    assert vllm_weight_names({"vision_tower.x": one}) == {"vision_tower.vision_model.x": one}


def test_checkpoint_view_renames_the_tower_and_links_the_rest() -> None:
    assert vllm_checkpoint_view(BUILTIN_DIR) is None  # a text model: vLLM reads it as it is
    view = vllm_checkpoint_view(BUILTIN_VL_DIR)
    assert view is not None
    try:
        with safe_open(str(view / "model.safetensors"), "pt") as new, \
                safe_open(str(BUILTIN_VL_DIR / "model.safetensors"), "pt") as old:
            assert sorted(new.keys()) == sorted(vllm_weight_name(k) for k in old.keys())
            assert torch.equal(new.get_tensor("vision_tower.vision_model.embeddings.patch_embedding.weight"),
                               old.get_tensor("vision_tower.embeddings.patch_embedding.weight"))
        assert (view / "config.json").is_symlink() and (view / "chat_template.jinja").resolve().is_file()
        assert vllm_checkpoint_view(view) is None  # the view itself needs nothing more
    finally:
        import shutil

        shutil.rmtree(view)


def test_vision_model_types_vllm_was_not_run_with_are_refused(tmp_path) -> None:
    VLLMEngine.check_images("builtin-vl")
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen2_vl", "vision_config": {}}))
    with pytest.raises(ConfigError, match=r"vllm with images runs LLaVA-style checkpoints .*'qwen2_vl'.*rollout.engine=hf"):
        VLLMEngine.check_images(str(tmp_path))

    from rlvr.config import load_config
    from rlvr.eval.run import check_eval_model
    from rlvr.tasks import build_task

    cfg = load_config(None, ["task.name=vl_count", "rollout.engine=vllm"])
    with pytest.raises(ConfigError, match="rollout.engine=hf"):
        check_eval_model(cfg, build_task("vl_count", {"eval_size": 1, "train_size": 1}), str(tmp_path))


def test_expanded_placeholders_go_back_to_one_token_per_image() -> None:
    from rlvr.rollout.vllm_engine import collapse_placeholders

    img = 9
    assert collapse_placeholders([1, img, img, img, 2], img, 1) == [1, img, 2]
    assert collapse_placeholders([1, img, img, img, img, img, img, 2], img, 2) == [1, img, img, 2]  # two frames
    assert collapse_placeholders([img, img, 5, img, img], img, 2) == [img, 5, img]
    assert collapse_placeholders([1, 2], img, 1) == [1, 2]  # no image tokens (0 splits evenly): unchanged
    with pytest.raises(ValueError, match="do not split evenly"):
        collapse_placeholders([img, img, img], img, 2)
    with pytest.raises(ValueError, match="not a whole number of images"):
        collapse_placeholders([img, 5, img, img, img], img, 2)
