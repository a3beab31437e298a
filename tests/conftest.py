"""Shared fixtures: tiny random-init models built in the test session (nothing is downloaded)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import torch
from hypothesis import settings

os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

# Property tests draw the same examples on every run and every clone (no example database), so the suite's
# verdict never depends on luck; HYPOTHESIS_PROFILE=explore draws fresh random examples to hunt for new bugs.
settings.register_profile("rlvr", derandomize=True, database=None, print_blob=True)
settings.register_profile("explore", derandomize=False, database=None, print_blob=True)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "rlvr"))
# `make test` runs the suite in two pytest-xdist worker processes (`-n 2 --dist loadfile`); each worker then
# gets one intra-op thread (two workers x two threads on two cores oversubscribes the cores), and so do the
# processes the tests start (`rlvr train` subprocesses, torchrun ranks, Ray's raylet and actors inherit
# OMP_NUM_THREADS). A plain `pytest` (no -n) keeps up to two threads.
XDIST_WORKERS = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1") or 1)
TORCH_THREADS = max(1, min(2, os.cpu_count() or 1) // max(1, XDIST_WORKERS))
if XDIST_WORKERS > 1:
    os.environ.setdefault("OMP_NUM_THREADS", str(TORCH_THREADS))
    os.environ.setdefault("MKL_NUM_THREADS", str(TORCH_THREADS))
torch.set_num_threads(TORCH_THREADS)

# `make test` distributes the tests by file (`--dist loadfile`), so a module's tests stay on one worker and its
# module-scoped fixtures (trained runs, engines) are built once, as in a serial run. The files below are one
# unit together: they run one after another on one worker, never two at once, because each starts a local Ray
# cluster (raylet, GCS, object store) or a vLLM engine (its own KV cache and threads), and two of those at once
# on 2 shared cores is the contention that turns start-up timeouts red. (pytest-xdist's own `xdist_group` mark
# does not group under pytest 9.2: xdist 3.8 renames `item._nodeid`, which pytest 9.2 no longer reads.) The
# torchrun / mp.spawn tests need no unit of their own: they take free ports (tests/e2e/ranks.py).
SERIAL_GROUP = "ray_vllm"
SERIAL_FILES = frozenset({
    "tests/e2e/test_distributed.py",
    "tests/e2e/test_ray_learner.py",
    "tests/e2e/test_ray_plugins.py",
    "tests/e2e/test_ray_reward_model.py",
    "tests/e2e/test_ray_cluster.py",
    "tests/e2e/test_vl_ray.py",
    "tests/e2e/test_vllm.py",
    "tests/e2e/test_vllm_vl.py",
})


def xdist_unit(nodeid: str) -> str:
    """The unit of work a test belongs to under `--dist loadfile`: its file, or SERIAL_GROUP."""
    path = nodeid.split("::", 1)[0]
    return SERIAL_GROUP if path in SERIAL_FILES else path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log):
    """`--dist loadfile`, with SERIAL_FILES as one unit (the hook is pytest-xdist's; without it, unused)."""
    if config.getvalue("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadFileScheduling

    class _LoadFileWithSerialGroup(LoadFileScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return xdist_unit(nodeid)

    return _LoadFileWithSerialGroup(config, log)


@pytest.fixture(autouse=True)
def _torch_threads():
    """Every test starts with the same intra-op thread count, whatever a module or an earlier test set: the
    number of threads changes how reductions are split, so resume and replay comparisons depend on it."""
    torch.set_num_threads(TORCH_THREADS)
    yield
    torch.set_num_threads(TORCH_THREADS)

CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}<|end|>{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def make_tiny_model(path: Path, *, chat_template: str | None = None, seed: int = 0, hidden: int = 32,
                    layers: int = 2) -> Path:
    """A random-init Qwen2 causal LM with the byte-level tokenizer, saved as an HF directory."""
    from transformers import GenerationConfig, Qwen2Config, Qwen2ForCausalLM

    from rlvr.models.byte_tokenizer import save_byte_tokenizer

    tok = save_byte_tokenizer(path)
    if chat_template:
        tok.chat_template = chat_template
        tok.save_pretrained(str(path))
        cfg_path = path / "tokenizer_config.json"
        cfg = json.loads(cfg_path.read_text())
        cfg["tokenizer_class"] = "PreTrainedTokenizerFast"
        cfg_path.write_text(json.dumps(cfg))
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=len(tok), hidden_size=hidden, intermediate_size=2 * hidden,
                         num_hidden_layers=layers, num_attention_heads=4, num_key_value_heads=2,
                         max_position_embeddings=256, tie_word_embeddings=True,
                         eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id, bos_token_id=tok.eos_token_id)
    model = Qwen2ForCausalLM(config)
    model.generation_config = GenerationConfig(eos_token_id=tok.eos_token_id, pad_token_id=tok.pad_token_id)
    model.save_pretrained(str(path), safe_serialization=True)
    return path


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny_model"))


@pytest.fixture(scope="session")
def tiny_chat_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_model(tmp_path_factory.mktemp("tiny_chat_model"), chat_template=CHAT_TEMPLATE)


@pytest.fixture
def no_eos_model_dir(tmp_path: Path, tiny_model_dir: Path) -> Path:
    """A copy of the tiny model whose tokenizer declares no EOS token."""
    import shutil

    bad = tmp_path / "no_eos"
    shutil.copytree(tiny_model_dir, bad)
    cfg = json.loads((bad / "tokenizer_config.json").read_text())
    cfg["eos_token"] = None
    (bad / "tokenizer_config.json").write_text(json.dumps(cfg))
    return bad


def _sandbox_layers() -> list:
    """The sandbox's two isolation setups: the OS layer (bubblewrap) under the Python guard, when this machine
    has it, and the Python guard alone (RLVR_SANDBOX=none)."""
    import sys

    if not sys.platform.startswith("linux"):
        return ["guard"]
    from rlvr.rewards import isolation, sandbox

    layer = isolation.os_layer(sandbox.INTERPRETER)
    return [pytest.param("os", marks=pytest.mark.skipif(not layer.available, reason=f"no OS layer: {layer.reason}")),
            "guard"]


@pytest.fixture(params=_sandbox_layers())
def layer(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Run the test under each sandbox isolation setup ("os" or "guard")."""
    monkeypatch.setenv("RLVR_SANDBOX", "none" if request.param == "guard" else "auto")
    return request.param
