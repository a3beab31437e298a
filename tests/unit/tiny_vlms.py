"""Tiny random-init Qwen2-VL / Qwen2.5-VL checkpoints for tests (built in the session; nothing is downloaded).

They reuse builtin-vl's byte-level tokenizer with the Qwen vision tokens added, and a PIL image processor whose
pixel bounds keep rlvr's 48x48 synthetic images at 48x48: 6x6 patches of 8 pixels, merged 2x2 into 9 image tokens.
"""

from __future__ import annotations

from pathlib import Path

import torch

QWEN_TEMPLATE = (
    "{% for m in messages %}{% if m['role'] == 'assistant' %}A:{% else %}Q: {% endif %}"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<|vision_start|><|image_pad|><|vision_end|>"
    "{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}{% endif %}"
    "{% if m['role'] == 'assistant' %}<|endoftext|>{% else %}\n{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}A:{% endif %}"
)
VISION_TOKENS = ["<|vision_start|>", "<|vision_end|>", "<|image_pad|>", "<|video_pad|>"]


def make_tiny_qwen_vl(path: Path, *, family: str = "qwen2_vl", seed: int = 0) -> Path:
    """Save a random-init `family` ("qwen2_vl" or "qwen2_5_vl") checkpoint with its processor at `path`."""
    import transformers
    from transformers import AutoTokenizer

    from rlvr.models.loading import resolve_model_path
    from rlvr.models.vision import _without_video_processor

    path.mkdir(parents=True, exist_ok=True)
    tok = AutoTokenizer.from_pretrained(str(resolve_model_path("builtin-vl", "model.path")))
    tok.add_special_tokens({"additional_special_tokens": VISION_TOKENS})
    start, end, image, video = tok.convert_tokens_to_ids(VISION_TOKENS)
    text = dict(vocab_size=len(tok), hidden_size=64, intermediate_size=128, num_hidden_layers=2,
                num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=512,
                rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "mrope_section": [2, 3, 3]},
                bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    if family == "qwen2_vl":
        config_cls, model_cls, processor_cls = (transformers.Qwen2VLConfig, transformers.Qwen2VLForConditionalGeneration,
                                                transformers.Qwen2VLProcessor)
        vision = dict(depth=2, embed_dim=32, hidden_size=64, num_heads=2, mlp_ratio=2, patch_size=8,
                      spatial_merge_size=2, temporal_patch_size=2)
    elif family == "qwen2_5_vl":
        config_cls, model_cls, processor_cls = (transformers.Qwen2_5_VLConfig,
                                                transformers.Qwen2_5_VLForConditionalGeneration,
                                                transformers.Qwen2_5_VLProcessor)
        vision = dict(depth=2, hidden_size=32, out_hidden_size=64, intermediate_size=64, num_heads=2,
                      patch_size=8, spatial_merge_size=2, temporal_patch_size=2, window_size=16,
                      fullatt_block_indexes=[1])
    else:
        raise ValueError(f"unknown family {family!r}")
    config = config_cls(text_config=text, vision_config=vision, vision_start_token_id=start, vision_end_token_id=end,
                        image_token_id=image, video_token_id=video, tie_word_embeddings=True)
    torch.manual_seed(seed)
    model_cls(config).save_pretrained(str(path))
    from transformers.models.qwen2_vl.image_processing_pil_qwen2_vl import Qwen2VLImageProcessorPil

    images = Qwen2VLImageProcessorPil(min_pixels=32 * 32, max_pixels=64 * 64, patch_size=8, merge_size=2,
                                      temporal_patch_size=2)
    processor = _without_video_processor(processor_cls)(image_processor=images, tokenizer=tok,
                                                         chat_template=QWEN_TEMPLATE)
    processor.save_pretrained(str(path))
    return path
