"""A byte-level tokenizer with no merges: one token per byte, i.e. one per character for ASCII text.

It is a standard Hugging Face fast tokenizer (tokenizer.json: BPE with the 256 byte symbols and no merges,
ByteLevel pre-tokenizer and decoder), the same machinery GPT-2 and Qwen2 use, so
`transformers.AutoTokenizer.from_pretrained(dir)` loads it exactly, including as a Qwen2 tokenizer. Any text
round-trips; nothing maps to an unknown token. <|endoftext|> is both EOS and padding.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

EOS = "<|endoftext|>"


def byte_symbols() -> list[str]:
    """The printable stand-in character of each byte 0..255 (GPT-2's reversible byte-to-unicode map)."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[b] = chr(b)
        else:
            table[b] = chr(256 + extra)
            extra += 1
    return [table[b] for b in range(256)]


def build_byte_tokenizer() -> Any:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {EOS: 0, **{sym: i + 1 for i, sym in enumerate(byte_symbols())}}
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=core, eos_token=EOS, pad_token=EOS, model_max_length=2048)


def save_byte_tokenizer(directory: str | Path) -> Any:
    tok = build_byte_tokenizer()
    tok.save_pretrained(str(directory))
    # Name the generic fast class so that any transformers release (4.x and 5.x) loads it.
    cfg_path = Path(directory) / "tokenizer_config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
    cfg_path.write_text(json.dumps(cfg, indent=2) + "\n")
    return tok
