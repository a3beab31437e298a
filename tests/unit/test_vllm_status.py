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


@pytest.mark.parametrize("reset", [True, False])
def test_a_weight_sync_that_cannot_reset_the_prefix_cache_stops(tmp_path, reset):
    """vLLM's reset_prefix_cache returns False (and only logs) while blocks are held; serving KV computed with the
    old weights would follow, so the sync raises instead. A stand-in for the LLM: nothing is started."""
    import torch

    class FakeLLM:
        def __init__(self):
            self.resets = 0

        def collective_rpc(self, method, args):
            return [2]  # the Linear's weight and bias

        def reset_prefix_cache(self):
            self.resets += 1
            return reset

    engine = vllm_engine.VLLMEngine.__new__(vllm_engine.VLLMEngine)
    engine.llm, engine._shm, engine.colocate, engine._asleep, engine.policy_version = FakeLLM(), tmp_path, False, False, 0
    model = torch.nn.Linear(2, 2)
    if reset:
        engine.sync_weights(model, version=4)
        assert engine.policy_version == 4 and engine.llm.resets == 1
    else:
        with pytest.raises(RuntimeError, match="prefix cache could not be reset.*prefix_caching=false"):
            engine.sync_weights(model, version=4)
        assert engine.policy_version == 0
    assert not list(tmp_path.iterdir())  # the weights file is removed either way
