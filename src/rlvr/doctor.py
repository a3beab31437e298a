"""`rlvr doctor`: what works on this machine (devices, rollout engines, optional layers) and, for what does
not, why and the fix. Each check is cheap: nothing is loaded or started."""

from __future__ import annotations

import importlib.metadata
from dataclasses import dataclass


@dataclass
class Check:
    name: str
    ok: bool
    detail: str


def _version(dist: str) -> str | None:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return None


def device_checks() -> list[Check]:
    import torch

    checks = [Check("torch", True, f"{torch.__version__}, {torch.get_num_threads()} CPU threads")]
    if torch.cuda.is_available():
        names = ", ".join(torch.cuda.get_device_name(i) for i in range(torch.cuda.device_count()))
        checks.append(Check("cuda", True, f"{torch.cuda.device_count()} GPU(s): {names}"))
    else:
        checks.append(Check("cuda", False, "no CUDA device: training runs on the CPU in float32"))
    try:
        bf16 = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        bf16 = False
    checks.append(Check("cpu bf16", bf16, "this CPU has a bf16 matmul path (model.dtype=bfloat16 may pay off; "
                        "auto stays float32 on CPU)" if bf16 else
                        "no bf16 hardware path on this CPU (bf16 is many times slower): keep float32"))
    return checks


def engine_checks() -> list[Check]:
    from rlvr.rollout.vllm_engine import vllm_status

    usable, why = vllm_status()
    return [
        Check("engine fast", True, "rlvr's KV-cache engine (default)"),
        Check("engine hf", True, f"transformers {_version('transformers')} generate"),
        Check("engine vllm", usable, why),
    ]


def optional_checks() -> list[Check]:
    ray = _version("ray")
    serve = {d: _version(d) for d in ("fastapi", "uvicorn", "openai")}
    missing = [d for d, v in serve.items() if v is None]
    return [Check("ray", ray is not None, f"ray {ray}: distributed.backend=ray" if ray else
                  "not installed: pip install 'rlvr[ray]' for distributed.backend=ray"),
            Check("openai endpoint", not missing,
                  "fastapi, uvicorn, openai: rollout.mode=openai_server" if not missing else
                  f"{', '.join(missing)} not installed: pip install 'rlvr[serve]' for rollout.mode=openai_server")]


def all_checks() -> list[Check]:
    return device_checks() + engine_checks() + optional_checks()
