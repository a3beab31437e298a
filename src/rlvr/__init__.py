"""rlvr: reinforcement-learning post-training of language models with verifiable rewards.

`rlvr.train`, `rlvr.evaluate` and `rlvr.load_config` are the Python API (docs/python-api.md); they are imported
on first use, so `import rlvr` stays cheap (no torch, no pydantic).
"""

from typing import Any

__version__ = "0.1.0"
__all__ = ["__version__", "evaluate", "load_config", "train"]

_API = ("train", "evaluate", "load_config")


def __getattr__(name: str) -> Any:
    if name in _API:
        from rlvr import api

        return getattr(api, name)
    raise AttributeError(f"module 'rlvr' has no attribute {name!r}")
