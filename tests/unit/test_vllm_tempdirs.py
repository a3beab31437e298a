"""The vLLM engine's own directories (its IPC sockets' in the temp dir, its weights' in shared memory): made at the
start, removed on shutdown, after a failed start, and swept by the next engine when a run was killed. vLLM is not
started: a stand-in module takes its place, so these run without vLLM installed."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import types
from pathlib import Path

import pytest
import torch

from rlvr.errors import ConfigError
from rlvr.models import load_causal_lm, load_tokenizer
from rlvr.models.loading import BUILTIN_DIR
from rlvr.rollout import vllm_engine
from rlvr.rollout.vllm_engine import IPC_PREFIX, WEIGHTS_PREFIX, VLLMEngine

SRC = str(Path(__file__).resolve().parents[2] / "src")


@pytest.fixture
def dirs(tmp_path, monkeypatch):
    """A temp dir and a shared-memory dir of the test's own, and no inherited VLLM_RPC_BASE_PATH / TMPDIR."""
    tmp, shm = tmp_path / "tmp", tmp_path / "shm"
    tmp.mkdir()
    shm.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    monkeypatch.setattr(vllm_engine, "_shared_memory_dir", lambda: str(shm))
    monkeypatch.delenv("VLLM_RPC_BASE_PATH", raising=False)
    monkeypatch.setenv("TMPDIR", "/the/users/tmpdir")
    return tmp, shm


@pytest.fixture(scope="module")
def policy():
    return load_causal_lm(str(BUILTIN_DIR), dtype=torch.float32, device=torch.device("cpu"))


@pytest.fixture(scope="module")
def tokenizer():
    return load_tokenizer(str(BUILTIN_DIR))


def _stand_in_vllm(monkeypatch, fail: bool) -> dict:
    """A module in vLLM's place whose LLM records the environment it starts in, and fails if asked to."""
    seen: dict = {}

    class LLM:
        def __init__(self, **kwargs):
            seen["VLLM_RPC_BASE_PATH"] = os.environ.get("VLLM_RPC_BASE_PATH")
            seen["TMPDIR"] = os.environ.get("TMPDIR")
            if fail:
                raise RuntimeError("Engine core initialization failed")
            config = types.SimpleNamespace(max_model_len=64)
            self.llm_engine = types.SimpleNamespace(model_config=config, engine_core=None)

    platform = types.SimpleNamespace(is_cpu=lambda: True, is_sleep_mode_available=lambda: False, device_name="cpu")
    fake = types.ModuleType("vllm")
    fake.LLM = LLM
    platforms = types.ModuleType("vllm.platforms")
    platforms.current_platform = platform
    monkeypatch.setitem(sys.modules, "vllm", fake)
    monkeypatch.setitem(sys.modules, "vllm.platforms", platforms)
    monkeypatch.setattr(vllm_engine, "_check_environment", lambda: fake)
    return seen


def _ours(path: Path) -> list[str]:
    return sorted(n for n in os.listdir(path) if n.startswith(("rlvr-vllm-", "vllm_dist_")))


def test_the_engine_starts_vllm_in_its_own_directory_and_shutdown_removes_it(dirs, policy, tokenizer, monkeypatch):
    tmp, shm = dirs
    seen = _stand_in_vllm(monkeypatch, fail=False)
    engine = VLLMEngine(policy, tokenizer, kv_cache_gb=0.25)
    ipc = engine._ipc_dir
    assert os.path.dirname(ipc) == os.path.realpath(tmp)
    assert os.path.basename(ipc).startswith(f"{IPC_PREFIX}{os.getpid()}-") and os.path.isdir(ipc)
    # vLLM's processes start with both its socket base path and their temp dir in that directory
    assert seen == {"VLLM_RPC_BASE_PATH": ipc, "TMPDIR": ipc}
    # the base path stays for the engine's life; TMPDIR is the user's again once vLLM has started
    assert os.environ["VLLM_RPC_BASE_PATH"] == ipc and os.environ["TMPDIR"] == "/the/users/tmpdir"
    assert [n.startswith(f"{WEIGHTS_PREFIX}{os.getpid()}-") for n in _ours(shm)] == [True]
    Path(ipc, "0f6f1c2e-socket").touch()  # what vLLM leaves there
    engine.shutdown()
    assert _ours(tmp) == [] and _ours(shm) == []
    assert "VLLM_RPC_BASE_PATH" not in os.environ and os.environ["TMPDIR"] == "/the/users/tmpdir"
    engine.shutdown()  # a second shutdown is harmless


def test_a_failed_start_removes_the_directory_and_restores_the_environment(dirs, policy, tokenizer, monkeypatch):
    tmp, shm = dirs
    monkeypatch.setenv("VLLM_RPC_BASE_PATH", "/somewhere/the/user/chose")
    seen = _stand_in_vllm(monkeypatch, fail=True)
    with pytest.raises(ConfigError, match="vLLM did not start"):
        VLLMEngine(policy, tokenizer, kv_cache_gb=0.25)
    assert seen["VLLM_RPC_BASE_PATH"].startswith(os.path.join(os.path.realpath(tmp), IPC_PREFIX))
    assert _ours(tmp) == [] and _ours(shm) == []
    assert os.environ["VLLM_RPC_BASE_PATH"] == "/somewhere/the/user/chose"
    assert os.environ["TMPDIR"] == "/the/users/tmpdir"


def test_an_engine_dropped_without_shutdown_removes_its_directories(dirs, policy, tokenizer, monkeypatch):
    tmp, shm = dirs
    _stand_in_vllm(monkeypatch, fail=False)
    engine = VLLMEngine(policy, tokenizer, kv_cache_gb=0.25)
    assert len(_ours(tmp)) == 1 and len(_ours(shm)) == 1
    del engine  # the same finalizers run at the interpreter's exit
    assert _ours(tmp) == [] and _ours(shm) == []


def test_the_directory_of_a_killed_engine_is_swept_by_the_next_one(dirs):
    """SIGKILL runs no cleanup: the directory stays until the next engine (of any process) starts."""
    tmp, _ = dirs
    code = ("import sys, tempfile, time; sys.path.insert(0, sys.argv[2]); tempfile.tempdir = sys.argv[1]\n"
            "from rlvr.rollout.vllm_engine import VLLMEngine\n"
            "e = VLLMEngine.__new__(VLLMEngine); e._use_private_ipc_dir(); print(e._ipc_dir, flush=True)\n"
            "open(e._ipc_dir + '/a-socket', 'w').close(); time.sleep(120)")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp), SRC], stdout=subprocess.PIPE, text=True)
    try:
        made = proc.stdout.readline().strip()
        assert made and os.path.isdir(made), made
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert os.path.isdir(made)  # nothing removed it
    live = tmp / f"{IPC_PREFIX}{os.getppid()}-x"  # an engine of a live process (our parent): left alone
    live.mkdir()
    engine = VLLMEngine.__new__(VLLMEngine)
    engine._use_private_ipc_dir()
    try:
        assert not os.path.exists(made)
        assert live.is_dir() and os.path.isdir(engine._ipc_dir)
    finally:
        engine._release_ipc_dir()
    assert _ours(tmp) == [live.name]


def test_engines_closed_out_of_order_leave_no_base_path_to_a_removed_directory(dirs):
    first, second = VLLMEngine.__new__(VLLMEngine), VLLMEngine.__new__(VLLMEngine)
    first._use_private_ipc_dir()
    second._use_private_ipc_dir()
    assert os.environ["VLLM_RPC_BASE_PATH"] == second._ipc_dir
    first._release_ipc_dir()  # not the current base path: left as it is
    assert os.environ["VLLM_RPC_BASE_PATH"] == second._ipc_dir
    second._release_ipc_dir()  # the first engine's directory is gone: no base path rather than a dead one
    assert "VLLM_RPC_BASE_PATH" not in os.environ and _ours(dirs[0]) == []
