"""Rollout workers that the cluster cannot place are a clear error at start, not a hang at the first weight sync
(2 workers x 1 CPU beside a 1-CPU reference worker on a 2-CPU machine used to wait forever)."""

from __future__ import annotations

import types

import pytest

from rlvr.config import load_config
from rlvr.distributed import ray_engine
from rlvr.distributed.ray_engine import RayEngine


class FakeRay:
    def __init__(self, free):
        self.free = free
        self.exceptions = types.SimpleNamespace(GetTimeoutError=TimeoutError)

    def available_resources(self):
        return dict(self.free)


def _engine(free, *overrides):
    engine = RayEngine.__new__(RayEngine)  # only the room check: no cluster, no actors
    engine.cfg = load_config(None, ["distributed.backend=ray", *overrides])
    engine.ray = FakeRay(free)
    return engine


def test_no_room_for_the_rollout_workers_names_the_knobs(monkeypatch):
    monkeypatch.setattr(ray_engine, "PLACEMENT_TIMEOUT_S", 0.0)
    with pytest.raises(RuntimeError, match=r"no room for 2 rollout worker\(s\): they ask for 2 CPU\(s\).*"
                                           r"distributed.rollout_workers or distributed.cpus_per_rollout_worker"):
        _engine({"CPU": 1.5}, "distributed.rollout_workers=2")._check_room()
    with pytest.raises(RuntimeError, match=r"1 GPU\(s\)"):
        _engine({"CPU": 4.0}, "distributed.rollout_workers=1", "distributed.gpus_per_rollout_worker=1")._check_room()


def test_enough_room_passes_at_once():
    _engine({"CPU": 2.0}, "distributed.rollout_workers=2")._check_room()
    _engine({"CPU": 1.5}, "distributed.rollout_workers=3", "distributed.cpus_per_rollout_worker=0.5")._check_room()
