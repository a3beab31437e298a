"""The user's own code: the `python` reward (return shapes, async, batched, every failure scored 0 with its
reason and counted), plugins (files, modules, entry points, errors that name the key) and the Python API's
config path. Trainings that use them are in tests/e2e/test_user_code_train.py."""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import rlvr
from rlvr import plugins
from rlvr.config import ConfigError, load_config
from rlvr.rewards import REWARDS, RewardFunction
from rlvr.rewards.python import PythonReward, to_result
from rlvr.types import Group, Sample, TaskRecord

ROOT = Path(__file__).resolve().parents[2]

USER_CODE = '''
import asyncio, math, os, time

def dict_score(response, record):
    right = response == record.answer
    return {"reward": 0.5 * right + 0.25, "format": 0.25, "answer": float(right), "correct": right,
            "reason": "ok" if right else "wrong"}

def pair(response, record):
    return (len(response), f"length {len(response)}")

def plain(response, record):
    return len(response) / 10

async def slow_async(response, record):
    await asyncio.sleep(0)
    return 2.0

def flaky(response, record):
    if response == "boom":
        raise ZeroDivisionError("boom on purpose")
    if response == "nan":
        return math.nan
    if response == "text":
        return "yes"
    if response == "hang":
        time.sleep(3600)
    if response == "die":
        os._exit(3)
    return 1.0

def batch(responses, records):
    return [float(r == rec.answer) for r, rec in zip(responses, records)]

def short_batch(responses, records):
    return [1.0]

NOT_A_FUNCTION = 3
'''


@pytest.fixture(autouse=True)
def _registries_restored():
    """What a test's plugins register is gone after it (other tests in this process see the built-ins only)."""
    from rlvr.registry import ALL_REGISTRIES

    saved = [(reg, dict(reg._entries), dict(reg.origins)) for reg in ALL_REGISTRIES]
    loaded = dict(plugins._loaded)
    yield
    for reg, entries, origins in saved:
        reg._entries, reg.origins = entries, origins
    for key, module in list(plugins._loaded.items()):
        if key not in loaded:
            del plugins._loaded[key]
            if Path(key).is_absolute() and sys.modules.get(module.__name__) is module:  # a plugin file
                del sys.modules[module.__name__]


@pytest.fixture
def user_file(tmp_path, monkeypatch):
    path = tmp_path / "user_rewards.py"
    path.write_text(USER_CODE)
    monkeypatch.chdir(tmp_path)
    return path


def _groups(*texts: str, answer: str = "42") -> list[Group]:
    record = TaskRecord(id="p0", question="40+2", answer=answer)
    return [Group(record=record, prompt_ids=[1], samples=[Sample(prompt_ids=[1], response_ids=[2], text=t) for t in texts])]


def _reward(fn: str, **params) -> PythonReward:
    return REWARDS.build("python", {"function": f"user_rewards.py:{fn}", **params}, where="rewards[0]")


# -- return shapes --------------------------------------------------------------------------------------------


def test_to_result_reads_each_return_shape():
    assert to_result(0.5).reward == 0.5 and to_result(True).reward == 1.0
    r = to_result((0.25, "why"))
    assert (r.reward, r.reason) == (0.25, "why")
    r = to_result({"reward": 1, "fmt": 0.5, "correct": True, "reason": "fine"})
    assert (r.reward, r.reason, r.meta["components"], r.meta["correct"]) == (1.0, "fine", {"fmt": 0.5}, True)
    for bad, why in [("1.0", "expected a number"), ({"score": 1}, "needs a 'reward' key"),
                     ({"reward": 1, "fmt": "high"}, "component 'fmt' is not a number"), ((1, 2, 3), "pair"),
                     (None, "expected a number"), ({"reward": "x"}, "not a number")]:
        r = to_result(bad)
        assert r.reward == 0.0 and r.meta["verifier_failure"] == "wrong_type" and why in r.reason, (bad, r.reason)
    assert math.isnan(to_result(math.nan).reward)  # NaN passes through: the reward function excludes the sample


@pytest.mark.parametrize("workers", [0, 2])
def test_dict_rewards_become_components_logged_per_step(user_file, workers):
    reward = _reward("dict_score", workers=workers)
    fn = RewardFunction([("python", 1.0, reward)])
    groups = _groups("42", "41", "42", "x")
    fn(groups, task=None)
    samples = groups[0].samples
    assert [s.reward for s in samples] == [0.75, 0.25, 0.75, 0.25]
    assert [s.correct for s in samples] == [True, False, True, False]
    assert samples[1].meta["reasons"]["python"] == "wrong"
    # means over the step's 4 samples: format 0.25 each; answer 2 of 4
    assert fn.last_metrics["reward/python/format"] == 0.25
    assert fn.last_metrics["reward/python/answer"] == 0.5
    assert fn.last_metrics["reward/python/failed"] == 0.0
    reward.close()


def test_pairs_plain_numbers_and_async_functions(user_file):
    for name, texts, expected, reason in [("pair", ["ab", "abcd"], [2.0, 4.0], "length 2"),
                                          ("plain", ["abcde"], [0.5], ""),
                                          ("slow_async", ["a", "b"], [2.0, 2.0], "")]:
        reward = _reward(name, workers=1)
        out = reward(_groups(*texts)[0], task=None)
        assert [o.value for o in out] == expected and out[0].reason == reason and not out[0].failed
        reward.close()


def test_batched_functions_get_lists_and_a_wrong_length_fails_every_sample(user_file):
    reward = _reward("batch", batched=True, workers=1)
    assert [o.value for o in reward(_groups("42", "7", "42")[0], None)] == [1.0, 0.0, 1.0]
    reward.close()
    reward = _reward("short_batch", batched=True, workers=1)
    out = reward(_groups("42", "7")[0], None)
    assert all(o.failed and o.value == 0 and "must return a list of 2 values" in o.reason for o in out)
    reward.close()


def test_several_functions_are_summed_and_each_logged(user_file):
    reward = REWARDS.build("python", {"function": ["user_rewards.py:plain", "user_rewards.py:pair"], "workers": 0})
    fn = RewardFunction([("python", 1.0, reward)])
    groups = _groups("abcde", "ab")
    fn(groups, None)
    assert [s.reward for s in groups[0].samples] == [0.5 + 5, 0.2 + 2]
    assert fn.last_metrics["reward/python/plain"] == pytest.approx(0.35)
    assert fn.last_metrics["reward/python/pair"] == 3.5


# -- failures: reward 0 with the reason, counted, never raised ---------------------------------------------


def test_every_kind_of_failure_scores_zero_with_its_reason_and_is_counted(user_file):
    reward = _reward("flaky", workers=2, timeout=5.0)  # only `hang` reaches it (it sleeps an hour); others take µs
    fn = RewardFunction([("python", 1.0, reward)])
    groups = _groups("fine", "boom", "nan", "text", "hang", "die", "fine")
    fn(groups, None)
    s = groups[0].samples
    reasons = [x.meta["reasons"]["python"] for x in s]
    assert [x.reward for x in s] == [1.0, 0, 0, 0, 0, 0, 1.0]
    assert reasons[1] == "reward function error: ZeroDivisionError: boom on purpose"
    assert reasons[2].startswith("non-finite reward nan") and s[2].excluded
    assert reasons[3].startswith("reward function error: wrong type: expected a number") and "got str 'yes'" in reasons[3]
    assert reasons[4] == "reward function timeout after 5s"
    assert reasons[5].startswith("reward function crashed (exit code 3")
    assert not s[0].excluded and not s[1].excluded  # an error scores 0; only a non-finite value is left out
    assert fn.last_metrics["reward/python/failed"] == 4.0  # error, wrong type, timeout, crash
    assert {k: fn.last_metrics[f"reward/python/failed_{k}"] for k in ("error", "wrong_type", "timeout", "crash")} \
        == {"error": 1, "wrong_type": 1, "timeout": 1, "crash": 1}
    assert fn.last_metrics["reward/python/worker_restarts"] == 2  # the hung one and the dead one
    assert fn.failures == {"python: ZeroDivisionError": 1, "python: non-finite": 1, "python: wrong type": 1,
                           "python: timeout": 1, "python: crashed": 1}
    # the pool replaced its workers: the next step works
    groups = _groups("fine", "fine")
    fn(groups, None)
    assert [x.reward for x in groups[0].samples] == [1.0, 1.0]
    assert fn.last_metrics["reward/python/failed"] == 0.0
    assert fn.last_metrics["reward/python/calls_per_s"] > 0 and fn.last_metrics["reward/python/worker_restarts"] == 0
    reward.close()


# -- the config: a missing file or name stops before any compute, naming the key ----------------------------


@pytest.mark.parametrize(("spec", "message"), [
    ("missing.py:score", "rewards[0].function: Python file 'missing.py' not found (looked for "),
    ("user_rewards.py:scor", "rewards[0].function: user_rewards.py has no 'scor' (functions there: batch, "),
    ("user_rewards.py:NOT_A_FUNCTION", "rewards[0].function: user_rewards.py:NOT_A_FUNCTION is a int, not a function"),
    ("no_such_module_xyz:score", "rewards[0].function: no module named 'no_such_module_xyz'"),
    ("user_rewards.py", "rewards[0].function: expected 'path/to/file.py:function' or 'module:function'"),
])
def test_a_bad_function_spec_fails_at_load_naming_the_key(user_file, spec, message):
    with pytest.raises(ConfigError) as err:
        load_config(None, [f"rewards=[{{name: python, function: '{spec}'}}]"])
    assert message in str(err.value)


def test_a_module_function_spec_loads(user_file, monkeypatch):
    monkeypatch.syspath_prepend(str(user_file.parent))
    cfg = load_config(None, ["rewards=[{name: python, function: 'user_rewards:plain'}]"])
    assert cfg.rewards[0].params["function"] == "user_rewards:plain"


# -- plugins ------------------------------------------------------------------------------------------------


PLUGIN = '''
import torch
from rlvr.algorithms import ADVANTAGES

@ADVANTAGES.register("{name}")
def centred(rewards: torch.Tensor, group_ids: torch.Tensor, *, scale: float = 1.0):
    return scale * (rewards - rewards.mean())
'''


def test_a_plugin_file_registers_names_a_config_can_use(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "my_plugin_a.py").write_text(PLUGIN.format(name="centred_a"))
    with pytest.raises(ConfigError, match="unknown advantage estimator 'centred_a'"):
        load_config(None, ["algorithm.advantage.name=centred_a"])
    cfg = load_config({"plugins": ["my_plugin_a.py"], "algorithm": {"advantage": {"name": "centred_a", "scale": 2}}})
    assert cfg.algorithm.advantage.params == {"scale": 2.0} and cfg.plugins == ["my_plugin_a.py"]
    assert ("advantage estimator", "centred_a") in plugins.provided_names()["my_plugin_a.py"]
    assert str(tmp_path / "my_plugin_a.py") in plugins.loaded()
    # --plugin (the `plugins` argument) is recorded in the config, so config.yaml imports it on resume
    (tmp_path / "my_plugin_b.py").write_text(PLUGIN.format(name="centred_b"))
    cfg = load_config(None, ["algorithm.advantage.name=centred_b"], plugins=["my_plugin_b.py"])
    assert cfg.plugins == ["my_plugin_b.py"]


def test_plugin_errors_name_the_plugin_and_the_fix(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken_plugin.py").write_text("raise RuntimeError('half-written')\n")
    with pytest.raises(ConfigError, match=r"plugins\[0\]: importing broken_plugin.py failed: RuntimeError: "
                                          "half-written; fix the error there"):
        load_config({"plugins": ["broken_plugin.py"]})
    assert "broken_plugin" not in sys.modules  # a failed import leaves nothing half-registered behind
    with pytest.raises(ConfigError, match=r"--plugin gone.py: Python file 'gone.py' not found"):
        load_config(None, plugins=["gone.py"])
    with pytest.raises(ConfigError, match=r"plugins\[1\]: no module named 'not_installed_pkg'"):
        load_config({"plugins": ["os", "not_installed_pkg"]})
    with pytest.raises(ConfigError, match="plugins: expected a list"):
        load_config({"plugins": "my.py"})


def test_entry_points_in_the_rlvr_plugins_group_are_loaded_once(tmp_path, monkeypatch):
    (tmp_path / "ep_plugin_pkg.py").write_text(PLUGIN.format(name="centred_ep") + "\nREGISTERED = []\n"
                                               "def setup():\n    REGISTERED.append(1)\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    ep = importlib.metadata.EntryPoint(name="demo", value="ep_plugin_pkg:setup", group=plugins.ENTRY_POINT_GROUP)
    seen = []

    def fake_entry_points(*, group):
        seen.append(group)
        return [ep] if group == plugins.ENTRY_POINT_GROUP else []

    monkeypatch.setattr(importlib.metadata, "entry_points", fake_entry_points)
    monkeypatch.setattr(plugins, "_entry_points_done", False)
    cfg = load_config(None, ["algorithm.advantage.name=centred_ep"])
    load_config(None)
    assert cfg.algorithm.advantage.name == "centred_ep" and seen == [plugins.ENTRY_POINT_GROUP]
    assert sys.modules["ep_plugin_pkg"].REGISTERED == [1]  # the named function was called, once
    assert ("advantage estimator", "centred_ep") in plugins.provided_names()["entry point demo = ep_plugin_pkg:setup"]


def test_config_show_lists_plugin_names_and_train_stops_before_compute(tmp_path):
    env_run = [sys.executable, "-m", "rlvr"]
    shown = subprocess.run([*env_run, "config", "show", "--plugin", "examples/plugins/doubling.py", "task=doubling",
                            "algorithm.advantage=mean_baseline"], cwd=ROOT, capture_output=True, text=True,
                           timeout=300)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[0] == \
        "# plugin examples/plugins/doubling.py: advantage estimator mean_baseline, task doubling"
    assert "task: {name: doubling, digits: 3, eval_size: 50, seed: 0}" in shown.stdout
    run_dir = tmp_path / "never"
    failed = subprocess.run([*env_run, "train", "recipes/grpo.yaml", f"run.dir={run_dir}",
                             "rewards=[{name: python, function: 'examples/rewards/format_and_answer.py:scor'}]"],
                            cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert failed.returncode == 2
    assert "rewards[0].function: examples/rewards/format_and_answer.py has no 'scor' (functions there: score)" \
        in failed.stderr
    assert not run_dir.exists()


# -- the Python API ---------------------------------------------------------------------------------------


def test_import_rlvr_stays_cheap_and_exposes_the_api():
    code = ("import sys, rlvr; heavy = [m for m in ('torch', 'pydantic', 'transformers', 'rlvr.config') "
            "if m in sys.modules]; print(heavy); print(rlvr.train.__module__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, check=True)
    assert out.stdout.splitlines()[0] == "[]"
    assert out.stdout.splitlines()[1] == "rlvr.api"
    with pytest.raises(AttributeError, match="no attribute 'trian'"):
        rlvr.trian  # noqa: B018


def test_api_load_config_takes_dicts_overrides_and_reward_functions(user_file):
    def local(response, record):  # a closure-like function no module exposes by name
        return 1.0

    cfg = rlvr.load_config({"train": {"steps": 7}}, {"rollout.n": 4},
                           rewards=[local, "user_rewards.py:plain", {"name": "format", "weight": 0.1}])
    assert (cfg.train.steps, cfg.rollout.n) == (7, 4)
    assert [r.name for r in cfg.rewards] == ["python", "format"]
    specs = cfg.rewards[0].params["function"]
    assert specs[0].startswith("rlvr.api:inline.local_") and specs[1] == "user_rewards.py:plain"
    assert cfg == load_config({"train": {"steps": 7}}, ["rollout.n=4", "rewards=" + repr(
        [{"name": "python", "function": specs}, {"name": "format", "weight": 0.1}])])
    with pytest.raises(ConfigError, match=r"rewards\[0\]: expected a function"):
        rlvr.load_config(None, rewards=[3])
    with pytest.raises(ConfigError, match="overrides: expected a list"):
        rlvr.load_config(None, "train.steps=3")


def test_api_reward_functions_run_in_the_verifier_pool(user_file):
    calls = []

    def counting(response, record):
        calls.append(response)  # in a forked worker: the parent's list stays empty
        return textwrap.dedent(response) == record.answer

    cfg = rlvr.load_config(None, rewards=[counting])
    reward = RewardFunction.from_config(cfg.rewards)
    groups = _groups("42", "1")
    reward(groups, None)
    assert [s.reward for s in groups[0].samples] == [1.0, 0.0] and calls == []
    reward.close()


def test_python_api_doc_shows_the_example_script_whole():
    script = (ROOT / "examples" / "train_script.py").read_text()
    code = script[script.index("import sys"):]
    doc = (ROOT / "docs" / "python-api.md").read_text()
    assert f"```python\n{code}```" in doc


def test_worker_env_names_the_runs_plugins_with_absolute_paths(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda *, group: [])
    assert plugins.worker_env([]) == {}
    env = plugins.worker_env(["sub/p.py", "mypkg.rl"])
    assert env == {"RLVR_PLUGINS": f"{tmp_path / 'sub' / 'p.py'}{os.pathsep}mypkg.rl"}
    ep = importlib.metadata.EntryPoint(name="x", value="x", group=plugins.ENTRY_POINT_GROUP)
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda *, group: [ep])
    assert plugins.worker_env([]) == {"RLVR_PLUGINS": ""}  # the hook still runs: it loads the entry points


def test_plugin_files_travel_as_source_to_a_node_without_them(tmp_path, monkeypatch):
    """No shared filesystem: a worker whose node lacks the plugin file imports it from the shipped source, under
    the same module name, and the names it registers are there."""
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda *, group: [])
    src = tmp_path / "controller" / "shipped_plugin.py"
    src.parent.mkdir()
    src.write_text(PLUGIN.format(name="centred_shipped"))
    env = plugins.worker_env([str(src)])
    assert json.loads(env[plugins.SOURCES_VAR]) == {str(src): src.read_text()}
    src.unlink()  # the worker's node: the path does not exist there
    shutil.rmtree(src.parent)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    plugins.load_from_env()
    from rlvr.algorithms import ADVANTAGES

    assert "centred_shipped" in ADVANTAGES
    assert sys.modules["shipped_plugin"].__file__.endswith("/shipped_plugin.py")
    # too much source to travel in an environment variable: a clear error naming the fix
    big = tmp_path / "big_plugin.py"
    big.write_text("#" * (plugins.MAX_SHIPPED_SOURCE + 10))
    with pytest.raises(ConfigError, match="install them as a package"):
        plugins.worker_env([str(big)])


def test_a_multi_stage_recipe_imports_its_plugins_before_any_stage_is_validated(tmp_path, monkeypatch):
    from rlvr.config.stages import load_stages

    monkeypatch.chdir(tmp_path)
    (tmp_path / "stage_plugin.py").write_text(PLUGIN.format(name="centred_stage"))
    (tmp_path / "staged.yaml").write_text(
        "plugins: [stage_plugin.py]\nstages:\n  - {name: one, algorithm.advantage.name: centred_stage}\n"
        "  - {name: two}\n")
    staged = load_stages(tmp_path / "staged.yaml")
    assert [s.cfg.algorithm.advantage.name for s in staged.stages] == ["centred_stage", "grpo"]
    assert all(s.cfg.plugins == ["stage_plugin.py"] for s in staged.stages)  # each stage's config.yaml has them
