"""run.threads: torch's CPU threads from the config, and `auto` from the cores other processes leave free."""

from __future__ import annotations

import pytest
import torch

from rlvr.config import Config, ConfigError
from rlvr.runtime import apply_threads, auto_threads


@pytest.mark.parametrize(("cores", "load", "ranks", "expected"), [
    (2, 0.0, 1, 2),    # idle machine: every core
    (2, 0.4, 1, 2),    # a little background load rounds away
    (2, 0.6, 1, 1),    # one core busy elsewhere
    (2, 9.5, 1, 1),    # oversubscribed: never fewer than one thread
    (8, 2.0, 2, 3),    # six free cores shared by two torchrun ranks
    (8, 0.0, 3, 2),    # three ranks never take more than their share, 8 // 3
    (1, 0.0, 4, 1),    # more ranks than cores: still one thread each
])
def test_auto_threads_counts_the_free_cores(cores, load, ranks, expected):
    assert auto_threads(cores=cores, load=load, ranks=ranks) == expected


def test_auto_reads_the_affinity_load_and_local_world_size(monkeypatch):
    monkeypatch.setattr("os.sched_getaffinity", lambda pid: {0, 1, 2, 3})
    monkeypatch.setattr("os.getloadavg", lambda: (1.2, 0.0, 0.0))
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "1")
    assert auto_threads() == 3
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert auto_threads() == 1  # 3 free cores // 2 ranks


def test_apply_threads_sets_torch_and_none_leaves_it():
    before = torch.get_num_threads()
    try:
        assert apply_threads(None) is None and torch.get_num_threads() == before
        assert apply_threads(1) == 1 and torch.get_num_threads() == 1
    finally:
        torch.set_num_threads(before)


@pytest.mark.parametrize("bad", [0, -2, "fast", 1.5])
def test_bad_thread_settings_name_the_key(bad):
    with pytest.raises((ConfigError, ValueError), match="threads"):
        Config.model_validate({"run": {"threads": bad}})


def test_auto_and_integers_validate():
    assert Config.model_validate({"run": {"threads": "auto"}}).run.threads == "auto"
    assert Config.model_validate({"run": {"threads": 3}}).run.threads == 3
    assert Config.model_validate({}).run.threads is None
