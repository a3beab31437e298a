"""The reasons vLLM cannot start are named with their fix, without starting anything."""

from __future__ import annotations

import builtins
import sys

import pytest

from rlvr.rollout import vllm_engine
from rlvr.rollout.vllm_engine import _start_failure, vllm_status


def _failing_import(monkeypatch, exc: BaseException):
    real = builtins.__import__

    def fake(name, *args, **kwargs):
        if name == "vllm" or name.startswith("vllm."):
            raise exc
        return real(name, *args, **kwargs)

    monkeypatch.delitem(sys.modules, "vllm", raising=False)
    monkeypatch.setattr(builtins, "__import__", fake)


def test_not_installed_names_the_install_command(monkeypatch):
    _failing_import(monkeypatch, ModuleNotFoundError("No module named 'vllm'", name="vllm"))
    usable, why = vllm_status()
    assert not usable and "not installed" in why and "make install-vllm" in why


def test_gpu_builds_of_torchvision_are_named_with_the_uninstall_command(monkeypatch):
    _failing_import(monkeypatch, RuntimeError("operator torchvision::nms does not exist"))
    monkeypatch.setattr(vllm_engine, "_installed", lambda name: name in ("torchvision", "torchcodec"))
    usable, why = vllm_status()
    assert not usable
    assert "torchvision, torchcodec" in why and "pip uninstall -y torchvision torchcodec" in why


def test_an_engine_error_names_the_key_to_change():
    err = ValueError("Available memory on node 0 (8.1/11.7 GiB) on kv cache allocation is less than requested "
                     "memory for kv (1000.00 GiB).")
    assert "rollout.engine_options.kv_cache_gb (now 1000" in _start_failure(err, 1000, on_cpu=True)
    assert "gpu_memory_utilization" in _start_failure(err, 1.0, on_cpu=False)
    head = _start_failure(ValueError("Head size 48 is not supported by the attention backend"), 1.0, True)
    assert "head size" in head
    other = _start_failure(RuntimeError("boom"), 1.0, True)
    assert "boom" in other and "rollout.engine=fast" in other


def test_selecting_vllm_when_it_cannot_run_is_a_config_error(monkeypatch):
    from rlvr.config import ConfigError

    monkeypatch.setattr(vllm_engine, "vllm_status", lambda: (False, "vLLM is not installed: install it"))
    with pytest.raises(ConfigError, match="rollout.engine: 'vllm' cannot start: vLLM is not installed"):
        vllm_engine.VLLMEngine.check_available()


def test_doctor_lists_every_engine():
    from typer.testing import CliRunner

    from rlvr.cli import app

    result = CliRunner().invoke(app, ["doctor"])
    assert result.exit_code == 0, result.output
    for row in ("engine fast", "engine hf", "engine vllm", "cuda", "torch"):
        assert row in result.output
