#!/usr/bin/env python
"""Build the shipped tiny VLM `builtin-vl` (src/rlvr/models/builtin_vl/) from scratch, reproducibly.

    python scripts/build_vl_model.py          # the shipped build 9 (2026-11-26): ~26 minutes with --threads 2
    # build 7 (the same options without vl_ground; shipped until build 9):
    python scripts/build_vl_model.py --tasks vl_count,vl_click,vl_count,vl_click,vl_digits_sum,vl_jigsaw \
        --steps 3200 --eval-tasks vl_count,vl_digits_sum,vl_click,vl_jigsaw --out /tmp/vl_b7
    # build 4, shipped until build 7 (12-26 minutes on one thread):
    OMP_NUM_THREADS=1 python scripts/build_vl_model.py --tasks vl_count,vl_digits_sum,vl_click --steps 2400 \
        --teacher-right 0.6 --pos-init random --pos-scale 0.3 --guide-attention 0 --easy-frac 0 \
        --guide-bind-layers "" --no-question-first --eval-tasks vl_count,vl_digits_sum,vl_click --threads 1 \
        --out /tmp/vl_b4
    python scripts/build_vl_model.py --tasks vl_count,vl_ground --steps 300 --out /tmp/vl   # a variant

1. Processor: the byte-level tokenizer of the built-in text model plus one `<image>` special token, a slow
   `CLIPImageProcessor` (PIL + numpy, no torchvision) resizing to 48x48, and a short chat template.
2. Model: a LLaVA-style `LlavaForConditionalGeneration`, randomly initialised (seeded): a tiny CLIP vision
   tower (8x8 patches, 36 image tokens; features from its embedding layer, see VISION_FEATURE_LAYER), a
   two-layer MLP projector and a tiny Qwen2 text model.
   Why LLaVA: it loads through `AutoModelForImageTextToText` / `AutoProcessor` and its processor needs only
   PIL and numpy, while Qwen2-VL's processor wants torchvision's video utilities in recent transformers.
3. Supervised pretraining on the TRAIN splits of the synthetic visual tasks (rlvr.tasks.vision), with a
   teacher: counts and digit sums come with a scratchpad that misreads with probability SLIP; other answers
   are right with probability --teacher-right (1.0 in the shipped build) and otherwise a near miss (a shifted
   box, a click on another button, two tiles swapped). Click, ground and jigsaw examples also get the
   training-time attention guides (`attention_guide_loss`, `bind_guide_loss`; the saved model is a plain
   LLaVA). The tiny model learns the tasks imperfectly, so sampling at temperature 1 leaves RL room to lift it.
4. Held-out pass@1 per task with plain HF `generate` (temperature 1, n samples per prompt), written to
   build_info.json and printed.
"""

from __future__ import annotations

import argparse
import json
import math
import random
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from rlvr.models.byte_tokenizer import build_byte_tokenizer  # noqa: E402
from rlvr.tasks import build_task  # noqa: E402
from rlvr.tasks.images import IMAGE_TOKEN, record_images  # noqa: E402

IMAGE_SIZE, PATCH = 48, 8
ALL_TASKS = ("vl_count", "vl_digits_sum", "vl_ground", "vl_click", "vl_jigsaw", "vl_frames")
# The shipped mix (build 9). With all six tasks once each, build 1's 900 steps left ground, jigsaw and frames at
# ~1% (see docs/vision.md).
TASK_NAMES = ("vl_count", "vl_click", "vl_count", "vl_click", "vl_digits_sum", "vl_jigsaw",
              "vl_ground", "vl_ground")  # a task listed twice gets twice the examples
EVAL_TASKS = ("vl_count", "vl_digits_sum", "vl_click", "vl_jigsaw", "vl_ground")
TEACHER_RIGHT = 0.6
# The shipped build's teacher (--teacher-right P or TASK=P,...): right on every click and jigsaw answer. A
# careless teacher there (vl_click=0.7,vl_jigsaw=0.4, build 8) left the model at chance on both (docs/vision.md).
TEACHER_RIGHT_DEFAULT = "1.0"
SLIP = 0.15
# --easy-steps: the first steps draw these easier variants (one button, no distractor), a curriculum.
EASY = {"vl_click": {"buttons": (1, 1)}, "vl_ground": {"distractors": 0}}
VISION = dict(hidden_size=64, intermediate_size=128, num_hidden_layers=1, num_attention_heads=4,
              image_size=IMAGE_SIZE, patch_size=PATCH, projection_dim=64)
# Image features are the tower's embedding output (patch embedding + position, LayerNorm'd per patch). Taken
# after its encoder layers (-1), the residual stream of a from-scratch tower grew a large image-independent
# component and the model learned to ignore the image (pass@1 stayed at the answer prior; see docs/vision.md).
VISION_FEATURE_LAYER = 0
TEXT = dict(hidden_size=128, intermediate_size=384, num_hidden_layers=4, num_attention_heads=4,
            num_key_value_heads=2, max_position_embeddings=1024, rope_theta=10000.0, tie_word_embeddings=True)
# "Q: <image>...question\nA:" then the answer; a list content carries {"type": "image"} entries.
CHAT_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'assistant' %}A:"
    "{% elif m['role'] == 'system' %}S: {% else %}Q: {% endif %}"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}{% for c in m['content'] %}"
    "{% if c['type'] == 'image' %}<image>{% elif c['type'] == 'text' %}{{ c['text'] }}{% endif %}"
    "{% endfor %}{% endif %}"
    "{% if m['role'] == 'assistant' %}<|endoftext|>{% else %}\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}A:{% endif %}"
)
# --question-first: "Q: question<image>\nA:". The image tokens come after the words that name the target, so each
# can attend to them (is my colour the one asked for?) before the answer reads the image; with the image first,
# only the answer sees both, and matching the named colour to one button was not learned (build history D4, D7).
QUESTION_FIRST_TEMPLATE = (
    "{% for m in messages %}"
    "{% if m['role'] == 'assistant' %}A:"
    "{% elif m['role'] == 'system' %}S: {% else %}Q: {% endif %}"
    "{% if m['content'] is string %}{{ m['content'] }}{% else %}"
    "{% for c in m['content'] %}{% if c['type'] == 'text' %}{{ c['text'] }}{% endif %}{% endfor %}"
    "{% for c in m['content'] %}{% if c['type'] == 'image' %}<image>{% endif %}{% endfor %}{% endif %}"
    "{% if m['role'] == 'assistant' %}<|endoftext|>{% else %}\n{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}A:{% endif %}"
)
MODEL_FILES = ("config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
               "tokenizer_config.json", "processor_config.json", "preprocessor_config.json",
               "chat_template.jinja", "special_tokens_map.json")


def careless_answer(name: str, record, rng: random.Random, p_right: float = TEACHER_RIGHT) -> tuple[str, bool]:
    """The teacher's answer text and whether it is right.

    Counting and digit sums come with a short scratchpad, which gives the vision tower a dense target per
    object: the shapes left to right as colour+shape initials ("rs bc: 2"), or the digits read left to right
    ("6+4=10"). The teacher misreads: it skips or repeats a shape, or reads a digit one off, with probability
    SLIP each, and then computes from what it read, consistently. Other tasks are right with probability
    `p_right` and otherwise a near miss.
    """
    if name == "vl_count":
        seen = []
        for shape, color, _box in sorted(record.meta["shapes"], key=lambda s: (s[2][0], s[2][1])):
            if rng.random() >= SLIP:
                seen.append(color[0] + shape[0])
            if rng.random() < SLIP / 2:
                seen.append(color[0] + shape[0])
        return f" {' '.join(seen)}: {len(seen)}", len(seen) == int(record.answer)
    if name == "vl_digits_sum":
        read = [d if rng.random() >= SLIP else (d + rng.choice((-1, 1))) % 10 for d in record.meta["digits"]]
        return f" {'+'.join(map(str, read))}={sum(read)}", sum(read) == int(record.answer)
    right = rng.random() < p_right
    if name == "vl_ground":
        x1, y1, x2, y2 = record.answer
        side = x2 - x1
        if right:
            dx, dy = rng.randint(-1, 1), rng.randint(-1, 1)
        else:  # shifted by at least half its side: IoU < 0.5
            dx, dy = rng.choice((-1, 1)) * rng.randint(side // 2 + 1, side), rng.randint(-2, 2)
            if rng.random() < 0.5:
                dx, dy = dy, dx
        return f" [{x1 + dx}, {y1 + dy}, {x2 + dx}, {y2 + dy}]", right
    if name == "vl_click":
        boxes = list(record.meta["buttons"].values())
        box = record.answer if right or len(boxes) == 1 else rng.choice([b for b in boxes if list(b) != record.answer])
        x, y = rng.randint(box[0] + 1, box[2] - 1), rng.randint(box[1] + 1, box[3] - 1)
        inside = record.answer[0] <= x <= record.answer[2] and record.answer[1] <= y <= record.answer[3]
        return f" ({x}, {y})", inside
    order = record.answer.split()
    if not right:
        i, j = rng.sample(range(len(order)), 2)
        order[i], order[j] = order[j], order[i]
    return " " + " ".join(order), right


def parse_teacher_right(text: str) -> dict[str, float]:
    """`--teacher-right`: "0.8" (every task) or "vl_click=0.7,vl_jigsaw=0.4" (the rest TEACHER_RIGHT), as
    {task: p, "*": default}. ValueError on anything else."""
    out = {"*": TEACHER_RIGHT}
    for part in filter(None, text.split(",")):
        name, _, value = part.rpartition("=")
        out[name or "*"] = float(value)
    if not all(0.0 <= v <= 1.0 for v in out.values()):
        raise ValueError("probabilities must be in [0, 1]")
    return out


def make_processor(path: Path, template: str = CHAT_TEMPLATE):
    from transformers import CLIPImageProcessor, LlavaProcessor

    tok = build_byte_tokenizer()
    tok.add_tokens([IMAGE_TOKEN], special_tokens=True)
    tok.chat_template = template
    images = CLIPImageProcessor(size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}, do_center_crop=False,
                                crop_size={"height": IMAGE_SIZE, "width": IMAGE_SIZE}, do_convert_rgb=True,
                                image_mean=[0.5, 0.5, 0.5], image_std=[0.5, 0.5, 0.5], resample=3)
    processor = LlavaProcessor(image_processor=images, tokenizer=tok, patch_size=PATCH,
                               vision_feature_select_strategy="default", chat_template=template,
                               image_token=IMAGE_TOKEN, num_additional_image_tokens=1)
    processor.save_pretrained(str(path))
    cfg_path = path / "tokenizer_config.json"  # the generic fast class loads in any transformers release
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    return processor


def sincos_positions(model, scale: float) -> None:
    """Overwrite the vision tower's learned position embeddings with a 2D sine/cosine code of each patch's
    column and row (a quarter of the width each for sin/cos of column and row), times `scale`.

    The default init (std 0.02) is ~10x smaller than a patch's content after the patch embedding, so where a
    patch is must first be learned before any click or box can be read; this makes it linearly readable at
    step 0. The class position (index 0, dropped by the "default" feature strategy) keeps its init.
    """
    import torch

    table = model.model.vision_tower.embeddings.position_embedding.weight
    side, width = IMAGE_SIZE // PATCH, table.shape[1]
    q = width // 4
    freqs = 1.0 / (10000.0 ** (torch.arange(q, dtype=torch.float32) / q)) * 3.0
    with torch.no_grad():
        for i in range(side * side):
            row, col = divmod(i, side)
            code = torch.cat([torch.sin(col * freqs), torch.cos(col * freqs), torch.sin(row * freqs),
                              torch.cos(row * freqs)])
            table[i + 1, : 4 * q] = code * scale


def guide_targets(name: str, record, completion: str) -> list[tuple[int | None, int, list[int]]] | None:
    """Where each answer token must look: (completion token index or None for all answer tokens, image index,
    box in that image's pixels). The named button (vl_click), the red square (vl_ground); for vl_jigsaw and
    vl_frames, the token of each number in the answer looks at the tile or frame it names (the completion is
    byte-level, " 2 4 1 3": number k is token 2k + 1). Else None."""
    if name in ("vl_click", "vl_ground"):
        return [(None, 0, list(record.answer))]
    half = IMAGE_SIZE // 2
    if name == "vl_jigsaw":
        return [(2 * k + 1, 0, [(t - 1) % 2 * half, (t - 1) // 2 * half, (t - 1) % 2 * half + half,
                                (t - 1) // 2 * half + half])
                for k, t in enumerate(int(d) for d in completion.split())]
    if name == "vl_frames":
        return [(2 * k + 1, int(d) - 1, [0, 0, IMAGE_SIZE, IMAGE_SIZE]) for k, d in enumerate(completion.split())]
    return None


def target_words(name: str, record) -> tuple[str, str] | None:
    """(phrase of the question, the words in it that name the target): what the answer must first read."""
    if name == "vl_click":
        return f"the {record.meta['target']} button", record.meta["target"]
    if name == "vl_ground":
        return "the red square", "red square"
    return None


def word_positions(tokenizer, ids: list[int], phrase: str, words: str) -> list[int]:
    """Token positions of `words` inside the first occurrence of `phrase` in `ids` (byte-level: no merges)."""
    p = tokenizer(phrase, add_special_tokens=False)["input_ids"]
    start = next(i for i in range(len(ids) - len(p) + 1) if ids[i : i + len(p)] == p)
    offset = len(tokenizer(phrase[: phrase.index(words)], add_special_tokens=False)["input_ids"])
    return list(range(start + offset, start + offset + len(tokenizer(words, add_special_tokens=False)["input_ids"])))


def patch_weights(box: list[int]) -> list[float]:
    """Per image token (raster order, PATCH x PATCH pixels each): the fraction of the box's area it covers."""
    side = IMAGE_SIZE // PATCH
    x1, y1, x2, y2 = box
    weights = []
    for i in range(side * side):
        row, col = divmod(i, side)
        w = max(0, min(x2, (col + 1) * PATCH) - max(x1, col * PATCH))
        h = max(0, min(y2, (row + 1) * PATCH) - max(y1, row * PATCH))
        weights.append(w * h)
    total = sum(weights) or 1
    return [w / total for w in weights]


def other_boxes(name: str, record) -> list[list[int]]:
    """The buttons not named (vl_click) or the distractors (vl_ground): with `--guide-bind-layers`, their image
    tokens must not read the words naming the target."""
    if name == "vl_click":
        return [list(b) for b in record.meta["buttons"].values() if list(b) != list(record.answer)]
    if name == "vl_ground":
        return [list(box) for _shape, _color, box in record.meta["distractors"]]
    return []


def bind_guide_loss(attentions, batch, targets, others, words, image_token: int, layers: list[int], head: int):
    """In `layers`, head `head`: the target's image tokens put their attention on the question's words naming the
    target (-log mass) and the other buttons' tokens do not (-log(1 - mass)); mean over those tokens.

    With the question first (`--question-first`), this is the binding step: an image token learns whether its
    colour is the one asked for, so that a later layer's answer can attend to the flagged tokens alone.
    """
    import torch

    side = IMAGE_SIZE // PATCH
    losses = []
    for b, example in enumerate(targets):
        if not example or not words or not words[b] or example[0][0] is not None:
            continue
        image_pos = (batch["input_ids"][b] == image_token).nonzero().flatten().view(-1, side * side)
        cols = torch.tensor(words[b])
        on = image_pos[0][torch.tensor(patch_weights(example[0][2])) > 0]
        off = [image_pos[0][torch.tensor(patch_weights(box)) > 0] for box in others[b]]
        for layer in layers:
            attn = attentions[layer][b, head]
            losses.append(-torch.log(attn[on][:, cols].sum(-1) + 1e-6).mean())
            for rows in off:
                losses.append(-torch.log(1 - attn[rows][:, cols].sum(-1) + 1e-6).mean())
    return torch.stack(losses).mean() if losses else None


def attention_guide_loss(attentions, batch, targets, image_token: int, layers: list[int], head: int,
                         words=None, word_layers: list[int] = ()):
    """Mean over answer positions of -log(attention mass on the target box's image tokens), one head per layer
    (`targets[b]`: `guide_targets`); and, in `word_layers`, -log(mass on the question's words naming the target)
    (`words[b]`: positions).

    A training-time signal only (the saved model is a plain LLaVA): on click and ground examples the answer
    must read the position of one object, a content-selected attention the tiny model does not find from the
    answer loss alone in thousands of steps (its answers stay the same string for every image; see
    docs/vision.md). `targets[b]` is None for examples without a target (they add nothing).
    """
    import torch

    losses = []
    side = IMAGE_SIZE // PATCH
    for b, example in enumerate(targets):
        if not example:
            continue
        ids = batch["input_ids"][b]
        image_pos = (ids == image_token).nonzero().flatten().view(-1, side * side)  # one row per image
        answer_pos = (batch["labels"][b] != -100).nonzero().flatten() - 1  # answer_pos[i] predicts token i
        for token, image, box in example:
            if token is not None and token >= len(answer_pos):
                continue
            on = image_pos[image][torch.tensor(patch_weights(box)) > 0]
            rows = answer_pos if token is None else answer_pos[token : token + 1]
            for layer in layers:
                attn = attentions[layer][b, head]  # (T, T), rows = queries
                mass = attn[rows][:, on].sum(-1)
                losses.append(-torch.log(mass + 1e-6).mean())
        for layer in word_layers if words is not None and words[b] else ():
            attn = attentions[layer][b, head]
            mass = attn[answer_pos][:, torch.tensor(words[b])].sum(-1)
            losses.append(-torch.log(mass + 1e-6).mean())
    return torch.stack(losses).mean() if losses else None


def make_model(processor, seed: int):
    import torch
    from transformers import (
        CLIPVisionConfig,
        GenerationConfig,
        LlavaConfig,
        LlavaForConditionalGeneration,
        Qwen2Config,
    )

    tok = processor.tokenizer
    torch.manual_seed(seed)
    text = Qwen2Config(vocab_size=len(tok), bos_token_id=tok.eos_token_id, eos_token_id=tok.eos_token_id,
                       pad_token_id=tok.pad_token_id, **TEXT)
    config = LlavaConfig(vision_config=CLIPVisionConfig(**VISION), text_config=text,
                         image_token_index=processor.image_token_id, image_seq_length=(IMAGE_SIZE // PATCH) ** 2,
                         vision_feature_select_strategy="default", vision_feature_layer=VISION_FEATURE_LAYER,
                         tie_word_embeddings=True)
    model = LlavaForConditionalGeneration(config)
    model.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id,
                                               max_new_tokens=32)
    return model


def encode(processor, task, record, completion: str | None):
    """Token ids (prompt, then completion + EOS), the label mask and the pixel values of one example."""
    prompt = processor.apply_chat_template(task.multimodal_messages(record), add_generation_prompt=True)
    enc = processor(text=prompt, images=record_images(record), return_tensors="pt")
    ids = enc["input_ids"][0].tolist()
    n_prompt = len(ids)
    if completion is not None:
        ids += processor.tokenizer(completion, add_special_tokens=False)["input_ids"]
        ids.append(processor.tokenizer.eos_token_id)
    return ids, n_prompt, enc["pixel_values"]


def collate(batch, pad_id: int):
    import torch

    T = max(len(ids) for ids, _, _ in batch)
    input_ids = torch.full((len(batch), T), pad_id, dtype=torch.long)
    labels = torch.full((len(batch), T), -100, dtype=torch.long)
    attention = torch.zeros((len(batch), T), dtype=torch.long)
    for b, (ids, n_prompt, _) in enumerate(batch):
        input_ids[b, : len(ids)] = torch.tensor(ids)
        labels[b, n_prompt : len(ids)] = torch.tensor(ids[n_prompt:])
        attention[b, : len(ids)] = 1
    pixels = torch.cat([p for _, _, p in batch])
    return dict(input_ids=input_ids, attention_mask=attention, labels=labels, pixel_values=pixels)


def pass_at_1(model, processor, task, records, n: int, batch: int = 16) -> float:
    """Mean over prompts of the fraction of n samples (temperature 1) that the task's verifier calls correct."""
    import torch

    processor.tokenizer.padding_side = "left"
    scores = []
    for start in range(0, len(records), batch):
        chunk = records[start : start + batch]
        prompts = [processor.apply_chat_template(task.multimodal_messages(r), add_generation_prompt=True)
                   for r in chunk]
        images = [record_images(r) for r in chunk]
        enc = processor(text=prompts, images=images, return_tensors="pt", padding=True)
        with torch.no_grad():
            out = model.generate(**enc, do_sample=True, temperature=1.0, top_k=0, top_p=1.0, max_new_tokens=32,
                                 num_return_sequences=n)
        texts = processor.batch_decode(out[:, enc["input_ids"].shape[1]:], skip_special_tokens=True)
        for i, record in enumerate(chunk):
            scores.append(sum(task.verify(t, record).correct for t in texts[i * n : (i + 1) * n]) / n)
    return sum(scores) / len(scores)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, default=ROOT / "src/rlvr/models/builtin_vl")
    ap.add_argument("--tasks", default=",".join(TASK_NAMES), help="comma-separated pretraining mix")
    ap.add_argument("--steps", type=int, default=4300)
    ap.add_argument("--teacher-right", default=TEACHER_RIGHT_DEFAULT,
                    help="how often the teacher's click/ground/jigsaw/frames answer is right: P for every task, "
                         "or TASK=P,... (others: TEACHER_RIGHT)")
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--eval-prompts", type=int, default=50)
    ap.add_argument("--n", type=int, default=8, help="samples per held-out prompt")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--eval-tasks", default=",".join(EVAL_TASKS),
                    help="comma-separated tasks to evaluate (empty: the pretraining mix)")
    ap.add_argument("--pos-init", choices=("random", "sincos"), default="sincos",
                    help="vision position embeddings: the default random init, or a 2D sin/cos code")
    ap.add_argument("--pos-scale", type=float, default=1.0, help="amplitude of --pos-init sincos")
    ap.add_argument("--guide-attention", type=float, default=1.0, metavar="WEIGHT",
                    help="weight of the training-time attention guide on click/ground examples (0: off)")
    ap.add_argument("--guide-layers", default="1", help="language-model layers whose head --guide-head is guided")
    ap.add_argument("--guide-head", type=int, default=0)
    ap.add_argument("--guide-word-layers", default="",
                    help="layers whose guided head is also led from the answer to the words naming the target")
    ap.add_argument("--guide-bind-layers", default="0",
                    help="layers whose guided head leads the named button's image tokens to the colour word "
                         "(bind_guide_loss; needs --question-first)")
    ap.add_argument("--easy-steps", type=int, default=0,
                    help="curriculum: the first N steps draw the EASY variants of click (one button) and ground")
    ap.add_argument("--easy-frac", type=float, default=0.3,
                    help="after --easy-steps, this share of click/ground examples still draws the EASY variant")
    ap.add_argument("--question-first", action=argparse.BooleanOptionalAction, default=True,
                    help="chat template with the question before the image (QUESTION_FIRST_TEMPLATE)")
    args = ap.parse_args()
    try:
        p_right = parse_teacher_right(args.teacher_right)
    except ValueError as err:
        ap.error(f"--teacher-right: expected P or TASK=P,... with P in [0, 1]; got {args.teacher_right!r} ({err})")

    import torch

    torch.set_num_threads(args.threads)
    started = time.time()
    args.out.mkdir(parents=True, exist_ok=True)
    processor = make_processor(args.out, QUESTION_FIRST_TEMPLATE if args.question_first else CHAT_TEMPLATE)
    model = make_model(processor, args.seed)
    if args.pos_init == "sincos":
        sincos_positions(model, args.pos_scale)
    guide_layers = [int(x) for x in args.guide_layers.split(",")]
    word_layers = [int(x) for x in args.guide_word_layers.split(",") if x]
    bind_layers = [int(x) for x in args.guide_bind_layers.split(",") if x]
    if bind_layers and not args.question_first:
        ap.error("--guide-bind-layers needs --question-first: image tokens before the question cannot read it")
    if args.guide_attention > 0:
        model.set_attn_implementation("eager")  # attention weights are returned only by the eager kernel
    names = args.tasks.split(",")
    eval_names = args.eval_tasks.split(",") if args.eval_tasks else names
    tasks = {name: build_task(name, {"seed": args.seed, "eval_size": args.eval_prompts})
             for name in dict.fromkeys(names + eval_names)}
    easy = {name: build_task(name, {"seed": args.seed, "eval_size": args.eval_prompts, **EASY[name]})
            for name in names if name in EASY and (args.easy_steps > 0 or args.easy_frac > 0)}
    rng = random.Random(args.seed)
    pad = processor.tokenizer.pad_token_id

    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=0.01, betas=(0.9, 0.98))
    warmup = max(1, args.steps // 20)
    sched = torch.optim.lr_scheduler.LambdaLR(
        opt, lambda s: min(1.0, (s + 1) / warmup) * 0.5 * (1 + math.cos(math.pi * min(1.0, s / args.steps))))
    model.train()
    teacher_right, seen, cursor = {n: 0 for n in names}, {n: 0 for n in names}, {n: 0 for n in names}
    for step in range(args.steps):
        batch, targets, words, others = [], [], [], []
        for b in range(args.batch):
            name = names[(step * args.batch + b) % len(names)]
            use_easy = name in easy and (step < args.easy_steps or rng.random() < args.easy_frac)
            source = easy[name] if use_easy else tasks[name]
            record = source.train[cursor[name]]
            cursor[name] += 1
            text, ok = careless_answer(name, record, rng, p_right.get(name, p_right["*"]))
            teacher_right[name] += ok
            seen[name] += 1
            batch.append(encode(processor, source, record, text))
            targets.append(guide_targets(name, record, text))
            phrase = target_words(name, record)
            words.append(word_positions(processor.tokenizer, batch[-1][0], *phrase)
                         if phrase and (word_layers or bind_layers) else None)
            others.append(other_boxes(name, record))
        inputs = collate(batch, pad)
        guided = args.guide_attention > 0 and any(targets)
        out = model(**inputs, output_attentions=guided)
        loss = out.loss
        guide = attention_guide_loss(out.attentions, inputs, targets, model.config.image_token_index, guide_layers,
                                     args.guide_head, words, word_layers) if guided else None
        if guided and bind_layers:
            bind = bind_guide_loss(out.attentions, inputs, targets, others, words, model.config.image_token_index,
                                   bind_layers, args.guide_head)
            if bind is not None:
                guide = bind if guide is None else guide + bind
        total = loss if guide is None else loss + args.guide_attention * guide
        total.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad(set_to_none=True)
        if step % 50 == 0 or step == args.steps - 1:
            extra = f" guide {guide.item():.3f}" if guide is not None else ""
            print(f"step {step} loss {loss.item():.3f}{extra} ({(time.time() - started) / 60:.1f} min)", flush=True)
    train_minutes = (time.time() - started) / 60

    model.eval()
    if args.guide_attention > 0:
        model.set_attn_implementation("sdpa")
    model.save_pretrained(str(args.out), safe_serialization=True)
    torch.manual_seed(args.seed)
    results = {}
    for name in eval_names:
        results[name] = round(pass_at_1(model, processor, tasks[name], list(tasks[name].heldout), args.n), 4)
        print(f"{name}: held-out pass@1 = {results[name]:.3f}", flush=True)
    card = {
        "architecture": "LlavaForConditionalGeneration",
        "vision": {"model_type": "clip_vision_model", **VISION, "vision_feature_layer": VISION_FEATURE_LAYER},
        "text": {"model_type": "qwen2", **TEXT},
        "parameters": sum(p.numel() for p in model.parameters()),
        "processor": "LlavaProcessor: CLIPImageProcessor (slow, PIL/numpy) 48x48 + byte-level tokenizer + <image>",
        "image_tokens": (IMAGE_SIZE // PATCH) ** 2,
        "sft": {"tasks": names, "steps": args.steps, "batch": args.batch, "lr": args.lr, "seed": args.seed,
                "teacher_right": p_right, "slip": SLIP,
                "teacher_accuracy": {n: round(teacher_right[n] / max(1, seen[n]), 3) for n in names},
                "pos_init": args.pos_init, "pos_scale": args.pos_scale if args.pos_init == "sincos" else None,
                "guide_attention": args.guide_attention,
                "guide_layers": guide_layers if args.guide_attention > 0 else None,
                "guide_head": args.guide_head if args.guide_attention > 0 else None,
                "guide_word_layers": word_layers if args.guide_attention > 0 else None,
                "guide_bind_layers": bind_layers if args.guide_attention > 0 else None,
                "question_first": args.question_first, "easy_steps": args.easy_steps, "easy_frac": args.easy_frac, "easy": {k: v for k, v in EASY.items() if k in easy}},
        "heldout_eval": {"temperature": 1.0, "n": args.n, "prompts_per_task": args.eval_prompts,
                         "pass@1": results},
        "train_minutes": round(train_minutes, 1),
        "build_minutes": round((time.time() - started) / 60, 1),
        "threads": args.threads,
    }
    (args.out / "build_info.json").write_text(json.dumps(card, indent=2) + "\n")
    print(json.dumps(card, indent=2))


if __name__ == "__main__":
    main()
