"""docs/reference/ is generated from the code (scripts/gen_reference.py): it must be current and complete."""

from __future__ import annotations

from pathlib import Path

from script_loader import load_script

ROOT = Path(__file__).resolve().parents[2]


def _gen():
    return load_script("gen_reference")


def test_the_committed_references_are_what_the_code_gives():
    gen = _gen()
    stale = [name for name, make in gen.PAGES.items() if (ROOT / "docs" / "reference" / name).read_text() != make()]
    assert not stale, f"stale: {stale}; run python scripts/gen_reference.py and commit docs/reference/"


def test_every_config_key_has_a_description():
    from rlvr.config.schema import Config

    rows = _gen().config_rows(Config)
    assert len(rows) > 150
    missing = [key for key, _, _, desc in rows if not desc]
    assert not missing, f"config keys without a description (pydantic Field(description=...)): {missing}"
    keys = {key for key, *_ in rows}
    assert {"model.lora", "model.teacher_path", "train.pack_tokens", "train.micro_batch_tokens", "logging.sinks",
            "distributed.backend", "search.max_tokens"} <= keys | {k.rsplit(".", 1)[0] for k in keys}


def test_every_cli_flag_has_a_line_of_help():
    rows = _gen().cli_rows()
    commands = {path for path, *_ in rows}
    assert {"rlvr train", "rlvr sft", "rlvr rm", "rlvr prm", "rlvr sweep", "rlvr lab", "rlvr compare",
            "rlvr eval"} <= commands
    missing = [f"{path} {flag}" for path, _, params in rows for flag, _, help_text in params if not help_text]
    assert not missing, f"flags without help: {missing}"
    assert not [path for path, help_text, _ in rows if not help_text], "a command without a description"
