"""Switching a registered component by name is one override; config errors come before torch is imported."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

from rlvr.config import ConfigError, load_config

ROOT = Path(__file__).resolve().parents[2]


def _recipe(tmp_path: Path, data: dict) -> Path:
    path = tmp_path / "r.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_task_switch_drops_the_old_tasks_parameters(tmp_path: Path) -> None:
    notes: list[str] = []
    cfg = load_config(ROOT / "recipes/grpo.yaml", ["task.name=reasoning_gym", "task.dataset=gcd"], notes=notes)
    assert cfg.task.name == "reasoning_gym" and cfg.task.dataset == "gcd"
    assert "digits" not in cfg.task.params
    assert cfg.task.eval_size == 200  # valid for both tasks: kept
    assert notes == ["task.name changed from 'addition' to 'reasoning_gym': dropped task.digits "
                     "('reasoning_gym' does not take it)"]


def test_switch_order_does_not_matter(tmp_path: Path) -> None:
    cfg = load_config(ROOT / "recipes/grpo.yaml", ["task.dataset=gcd", "task.name=reasoning_gym"], notes=[])
    assert cfg.task.dataset == "gcd" and "digits" not in cfg.task.params


def test_explicit_parameter_the_new_component_lacks_is_still_an_error() -> None:
    with pytest.raises(ConfigError) as err:
        load_config(ROOT / "recipes/grpo.yaml", ["task.name=reasoning_gym", "task.digits=[3,4]"], notes=[])
    assert "task.digits: unknown key" in str(err.value)


def test_same_name_keeps_everything_and_says_nothing() -> None:
    notes: list[str] = []
    cfg = load_config(ROOT / "recipes/grpo.yaml", ["task.name=addition"], notes=notes)
    assert tuple(cfg.task.digits) == (2, 4) and notes == []


def test_switch_prints_an_info_line_to_stderr(capsys: pytest.CaptureFixture[str]) -> None:
    load_config(ROOT / "recipes/grpo.yaml", ["task.name=reasoning_gym", "task.dataset=gcd"])
    err = capsys.readouterr().err
    assert err.startswith("info: task.name changed from 'addition' to 'reasoning_gym': dropped task.digits")


@pytest.mark.parametrize("section, old, new, override, dropped, kept", [
    ("sampling", {"name": "dynamic", "metric": "reward", "max_rounds": 3}, "difficulty_filter", "sampling.name",
     ["metric"], {"max_rounds": 3}),
    ("algorithm.advantage", {"name": "grpo", "std_scope": "batch", "eps": 1e-4}, "gae", "algorithm.advantage.name",
     ["std_scope", "eps"], {}),
    ("algorithm.loss", {"name": "cpgd", "clip_low": 0.3, "drift_coef": 0.5}, "ppo_clip", "algorithm.loss.name",
     ["drift_coef"], {"clip_low": 0.3}),
])
def test_every_named_section_switches(tmp_path: Path, section: str, old: dict, new: str, override: str,
                                      dropped: list[str], kept: dict) -> None:
    data: dict = {}
    node = data
    parts = section.split(".")
    for p in parts[:-1]:
        node = node.setdefault(p, {})
    node[parts[-1]] = old
    extra = ["algorithm.critic.kind=separate"] if new == "gae" else []
    notes: list[str] = []
    cfg = load_config(_recipe(tmp_path, data), [f"{override}={new}", *extra], notes=notes)
    spec = cfg
    for p in parts:
        spec = getattr(spec, p)
    assert spec.name == new
    for k in dropped:
        assert k not in spec.params
    for k, v in kept.items():
        assert spec.params[k] == v
    assert len(notes) == 1 and all(f"{section}.{k}" in notes[0] for k in dropped)


def test_reward_switch_keeps_weight_and_gate_fields(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, {"rewards": [{"name": "correctness"},
                                            {"name": "overlong", "max_length": 64, "buffer": 8, "weight": 0.5}]})
    notes: list[str] = []
    cfg = load_config(recipe, ["rewards.1.name=concise_length"], notes=notes)
    r = cfg.rewards[1]
    assert r.name == "concise_length" and r.weight == 0.5
    assert r.max_length == 64 and "buffer" not in r.params  # max_length is a parameter of both
    assert notes == ["rewards.1.name changed from 'overlong' to 'concise_length': dropped rewards.1.buffer "
                     "('concise_length' does not take it)"]


def test_engine_switch_drops_engine_options_the_new_engine_lacks(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, {"rollout": {"engine_options": {"compile": True}}})  # default engine: fast
    notes: list[str] = []
    cfg = load_config(recipe, ["rollout.engine=hf"], notes=notes)
    assert cfg.rollout.engine == "hf" and cfg.rollout.engine_options == {}
    assert notes == ["rollout.engine changed from 'fast' to 'hf': dropped rollout.engine_options.compile "
                     "('hf' does not take it)"]
    with pytest.raises(ConfigError, match="compile"):
        load_config(recipe, ["rollout.engine=hf", "rollout.engine_options.compile=true"], notes=[])


def test_whole_section_replacement_is_not_a_switch() -> None:
    notes: list[str] = []
    cfg = load_config(ROOT / "recipes/grpo.yaml", ["task={name: reasoning_gym, dataset: gcd}"], notes=notes)
    assert cfg.task.dataset == "gcd" and notes == []


def test_switch_to_an_unknown_name_reports_the_name_not_the_parameters() -> None:
    with pytest.raises(ConfigError) as err:
        load_config(ROOT / "recipes/grpo.yaml", ["task.name=reasoning_gmy"], notes=[])
    assert "Did you mean 'reasoning_gym'" in str(err.value)


FAST_CHECK = """
import sys, time
start = time.perf_counter()
sys.argv = ["rlvr", *sys.argv[1:]]
from rlvr.cli import main
try:
    main()
except SystemExit as exc:
    code = exc.code
heavy = sorted(m for m in ("torch", "transformers", "numpy") if m in sys.modules)
print(f"RESULT code={code} heavy={','.join(heavy) or 'none'} seconds={time.perf_counter() - start:.3f}")
"""


@pytest.mark.parametrize("command", [["train", "recipes/grpo.yaml", "train.stepz=3"],
                                     ["config", "show", "recipes/grpo.yaml", "optim.lr=-1"],
                                     ["train", "recipes/no_such.yaml"]])
def test_config_errors_come_before_heavy_imports(command: list[str]) -> None:
    out = subprocess.run([sys.executable, "-c", FAST_CHECK, *command], cwd=ROOT, capture_output=True, text=True,
                         timeout=120, env={"PYTHONPATH": str(ROOT / "src"), "PATH": "/usr/bin:/bin"})
    line = next(x for x in out.stdout.splitlines() if x.startswith("RESULT"))
    assert "code=2" in line and "heavy=none" in line, (line, out.stderr)
    assert "error:" in out.stderr and "Traceback" not in out.stderr
    seconds = float(line.rsplit("=", 1)[1])
    assert seconds < 10  # generous: the point is that torch/transformers were never imported (checked above)


def test_fast_pass_costs_little_in_process() -> None:
    start = time.perf_counter()
    with pytest.raises(ConfigError):
        load_config(ROOT / "recipes/grpo.yaml", ["train.stepz=3"])
    assert time.perf_counter() - start < 5


def test_agent_environment_and_tool_switch(tmp_path: Path) -> None:
    recipe = _recipe(tmp_path, {"agent": {"environment": {"name": "guess_number", "high": 50},
                                          "tools": [{"name": "python", "timeout": 3, "memory_mb": 256}]}})
    notes: list[str] = []
    cfg = load_config(recipe, ["agent.environment.name=tools", "agent.tools.0.name=calculator"], notes=notes)
    assert cfg.agent.environment.name == "tools" and "high" not in cfg.agent.environment.params
    tool = cfg.agent.tools[0]
    assert tool.name == "calculator" and tool.timeout == 3 and "memory_mb" not in tool.params
    assert notes == [
        "agent.environment.name changed from 'guess_number' to 'tools': dropped agent.environment.high "
        "('tools' does not take it)",
        "agent.tools.0.name changed from 'python' to 'calculator': dropped agent.tools.0.memory_mb "
        "('calculator' does not take it)"]
