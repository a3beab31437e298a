"""Rollout workers that the cluster cannot place are a clear error at start, not a hang at the first weight sync
(2 workers x 1 CPU beside a 1-CPU reference worker on a 2-CPU machine used to wait forever)."""

from __future__ import annotations

import types

import pytest

from rlvr.config import load_config
from rlvr.errors import RoleLost
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


def test_no_room_for_the_rollout_workers_names_the_knobs():
    with pytest.raises(RuntimeError, match=r"no room for 2 rollout worker\(s\): they ask for 2 CPU\(s\).*"
                                           r"distributed.rollout_workers or distributed.cpus_per_rollout_worker"):
        _engine({"CPU": 1.5}, "distributed.rollout_workers=2", "distributed.placement_timeout_s=0.01")\
            ._wait_for_room(2, "start")
    with pytest.raises(RuntimeError, match=r"1 GPU\(s\)"):
        _engine({"CPU": 4.0}, "distributed.rollout_workers=1", "distributed.gpus_per_rollout_worker=1",
                "distributed.placement_timeout_s=0.01")._wait_for_room(1, "start")


def test_enough_room_passes_at_once():
    _engine({"CPU": 2.0}, "distributed.rollout_workers=2")._wait_for_room(2, "start")
    _engine({"CPU": 1.5}, "distributed.rollout_workers=3", "distributed.cpus_per_rollout_worker=0.5")\
        ._wait_for_room(3, "start")
    _engine({"CPU": 1.0, "gpu_node": 1.0}, "distributed.rollout_workers=1",
            "distributed.rollout_worker_resources={gpu_node: 1}")._wait_for_room(1, "start")


def test_a_worker_whose_node_is_gone_and_does_not_come_back_stops_the_run_naming_the_knobs():
    """A worker pinned to a node (distributed.rollout_worker_resources) that was lost: the replacement waits
    distributed.placement_timeout_s for a node with that resource, then a RoleLost error (the loop turns it into
    one naming the checkpoint and --resume)."""
    engine = _engine({"CPU": 1.0}, "distributed.rollout_workers=1", "distributed.cpus_per_rollout_worker=0.5",
                     "distributed.rollout_worker_resources={second_node: 1}", "distributed.placement_timeout_s=0.01")
    with pytest.raises(RoleLost, match=r"rollout worker 0 died \(x\), and no replacement could be placed within "
                                       r"0.01s \(distributed.placement_timeout_s\): it asks for 0.5 CPU\(s\) and 1 of "
                                       r"resource 'second_node'.*distributed.rollout_worker_resources"):
        engine._wait_for_room(1, "rollout worker 0 died (x)")
