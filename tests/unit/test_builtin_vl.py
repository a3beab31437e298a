"""builtin-vl: the shipped tiny VLM loads offline through the Auto classes, processes images, and generates."""

from __future__ import annotations

import json

import pytest
import torch

from rlvr.models.loading import BUILTIN_VL_DIR, ModelError, resolve_model_path
from rlvr.models.vision import load_vlm
from rlvr.tasks import build_task
from rlvr.tasks.images import ImageError, check_placeholders, count_images, record_images


@pytest.fixture(scope="module")
def vlm():
    return load_vlm("builtin-vl")


def test_ships_its_files() -> None:
    assert resolve_model_path("builtin-vl") == BUILTIN_VL_DIR
    for name in ("config.json", "model.safetensors", "tokenizer.json", "processor_config.json",
                 "chat_template.jinja", "build_info.json"):
        assert (BUILTIN_VL_DIR / name).is_file(), name
    assert (BUILTIN_VL_DIR / "model.safetensors").stat().st_size < 20e6  # a few MB
    info = json.loads((BUILTIN_VL_DIR / "build_info.json").read_text())
    assert info["architecture"] == "LlavaForConditionalGeneration" and info["heldout_eval"]["pass@1"]


def test_loads_through_auto_classes_offline(monkeypatch) -> None:
    from transformers import AutoModelForImageTextToText, AutoProcessor

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    model = AutoModelForImageTextToText.from_pretrained(str(BUILTIN_VL_DIR), local_files_only=True)
    processor = AutoProcessor.from_pretrained(str(BUILTIN_VL_DIR), local_files_only=True)
    assert type(model).__name__ == "LlavaForConditionalGeneration"
    assert type(processor).__name__ == "LlavaProcessor"
    assert processor.tokenizer.convert_tokens_to_ids("<image>") == model.config.image_token_index
    assert next(model.parameters()).dtype == torch.float32


def test_process_one_image_and_generate(vlm) -> None:
    model, processor = vlm
    task = build_task("vl_count", {"eval_size": 2, "train_size": 2})
    record = task.heldout[0]
    prompt = processor.apply_chat_template(task.multimodal_messages(record), add_generation_prompt=True)
    check_placeholders(prompt, count_images(record), record_id=record.id)
    enc = processor(text=prompt, images=record_images(record), return_tensors="pt")
    assert enc["pixel_values"].shape == (1, 3, 48, 48)
    image_id = model.config.image_token_index
    assert int((enc["input_ids"] == image_id).sum()) == model.config.image_seq_length == 36
    torch.manual_seed(0)
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=6, do_sample=False)
    new = out[0, enc["input_ids"].shape[1]:]
    assert 1 <= len(new) <= 6
    text = processor.decode(new, skip_special_tokens=True)
    assert isinstance(task.verify(text, record).reward, float)


def test_several_images_in_one_prompt(vlm) -> None:
    model, processor = vlm
    task = build_task("vl_frames", {"eval_size": 1, "train_size": 1})
    record = task.heldout[0]
    prompt = processor.apply_chat_template(task.multimodal_messages(record), add_generation_prompt=True)
    assert prompt.count("<image>") == 4
    enc = processor(text=prompt, images=record_images(record), return_tensors="pt")
    assert enc["pixel_values"].shape[0] == 4
    with torch.no_grad():
        logits = model(**enc).logits
    assert torch.isfinite(logits).all()


def test_placeholder_mismatch_is_caught_before_the_model(vlm) -> None:
    _, processor = vlm
    task = build_task("vl_frames", {"eval_size": 1, "train_size": 1})
    record = task.heldout[0]
    with pytest.raises(ImageError, match="has 1 '<image>' placeholder"):
        check_placeholders("Q: <image>order?\nA:", count_images(record), record_id=record.id)


def test_text_only_checkpoint_is_refused() -> None:
    with pytest.raises(ModelError, match="without a vision tower"):
        load_vlm("builtin")
