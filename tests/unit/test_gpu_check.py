"""scripts/gpu/check.py (behind scripts/gpu_check.sh) and scripts/gpu/wheels.py: the JSON report, time limits,
the budget, --dry-run, and the wheel list. The GPU parts themselves run only on a CUDA machine."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _load(name: str, path: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    sys.modules[name] = module  # dataclasses look their module up by name
    spec.loader.exec_module(module)
    return module


check = _load("gpu_check", "scripts/gpu/check.py")
wheels = _load("gpu_wheels", "scripts/gpu/wheels.py")
PY = sys.executable


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": f"{ROOT / 'src'}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}


_FAKE_PYTEST = """
import json, os, sys
junit = sys.argv[-1].split("=", 1)[1]
open(junit, "w").write('<testsuite><testcase name="test_resume" time="3.5"/></testsuite>')
open(os.environ["RLVR_GPU_RESULTS"], "a").write(json.dumps({"test": "resume", "bit_exact": True}) + "\\n")
"""


def test_a_hung_part_is_killed_at_its_limit_and_the_next_part_still_reports(tmp_path):
    parts = [
        check.Part("hangs", [PY, "-c", "import time; print('started', flush=True); time.sleep(120)"], 2,
                   needs_cuda=False, min_s=1),
        check.Part("measures", [PY, "-c", "print('noise'); print('GPU_CHECK_RESULT {\"tokens_per_s\": 12.5}')"], 30,
                   needs_cuda=False, min_s=1),
        check.Part("fails", [PY, "-c", "import sys; print('boom: the reason'); sys.exit(3)"], 30, needs_cuda=False,
                   min_s=1),
        check.Part("needs_a_gpu", [PY, "-c", "pass"], 30, needs_cuda=True, min_s=1),
        # a pytest part: its --junitxml file and the values the tests wrote to $RLVR_GPU_RESULTS join the record
        check.Part("tests", [PY, "-c", _FAKE_PYTEST], 30, needs_cuda=False, min_s=1, junit=True),
    ]
    report = check.run_check(parts, tmp_path, budget_s=60, dry_run=True)
    on_disk = json.loads((tmp_path / "gpu_check.json").read_text())
    assert on_disk["parts"] == report["parts"] and on_disk["schema"] == 1 and on_disk["dry_run"] is True
    hung, measured, failed, gpu = (on_disk["parts"][n] for n in ("hangs", "measures", "fails", "needs_a_gpu"))
    assert hung["status"] == "timeout" and 2 <= hung["seconds"] < 30 and hung["limit_s"] == 2
    assert measured["status"] == "ok" and measured["result"] == {"tokens_per_s": 12.5} and measured["returncode"] == 0
    assert failed["status"] == "failed" and failed["returncode"] == 3 and failed["reason"] == "boom: the reason"
    # --dry-run: a CUDA part without a CPU rehearsal is listed with its command, not run
    assert gpu["status"] == "skipped" and "needs CUDA" in gpu["reason"] and gpu["command"].endswith("-c pass")
    assert on_disk["summary"]["timeout"] == ["hangs"] and on_disk["summary"]["ok"] == ["measures", "tests"]
    assert on_disk["summary"]["failed"] == ["fails"] and on_disk["summary"]["skipped"] == ["needs_a_gpu"]
    tests = on_disk["parts"]["tests"]
    assert tests["status"] == "ok" and tests["measured"] == [{"test": "resume", "bit_exact": True}]
    assert tests["tests"] == [{"name": "test_resume", "outcome": "passed", "seconds": 3.5, "message": None}]
    # OUT holds the report and the log only (the device tool brings back at most 8 files)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["gpu_check.json", "gpu_check.log"]
    log = (tmp_path / "gpu_check.log").read_text()
    assert "===== hangs" in log and "started" in log and "boom: the reason" in log


def test_a_part_is_skipped_when_the_budget_left_is_under_its_minimum(tmp_path):
    parts = [check.Part("first", [PY, "-c", "import time; time.sleep(1.5)"], 30, needs_cuda=False, min_s=1),
             check.Part("second", [PY, "-c", "pass"], 30, needs_cuda=False, min_s=5)]
    report = check.run_check(parts, tmp_path, budget_s=6, dry_run=False)
    assert report["parts"]["first"]["status"] == "ok"
    # ~4.5 s left of 6: under the second part's 5 s minimum
    second = report["parts"]["second"]
    assert second["status"] == "skipped" and "of the 6 s budget left" in second["reason"], second


def test_a_part_whose_optional_package_is_missing_is_skipped_with_the_install_command(tmp_path):
    parts = [check.Part("needs_nothing_there", [PY, "-c", "raise SystemExit(3)"], 30, needs_cuda=False,
                        needs=[("rlvr_no_such_module_x", 'pip install -e ".[bench]"')]),
             check.Part("after", [PY, "-c", "pass"], 30, needs_cuda=False)]
    report = check.run_check(parts, tmp_path, budget_s=60, dry_run=True)
    skipped = report["parts"]["needs_nothing_there"]
    assert skipped["status"] == "skipped" and "rlvr_no_such_module_x" in skipped["reason"]
    assert 'pip install -e ".[bench]"' in skipped["reason"]
    assert report["parts"]["after"]["status"] == "ok"
    assert report["summary"]["failed"] == [] and "needs_nothing_there" in report["summary"]["skipped"]
    # the shipped parts declare their optional packages
    needs = {p.name: [m for m, _ in p.needs] for p in check.plan()}
    assert needs["trl_grpo_0.5b"] == ["trl", "datasets"]
    assert needs["cuda_tests"] == needs["grpo_30"] == needs["torchrun"] == ["pytest", "pytest_timeout"]


def test_the_optional_packages_are_looked_for_in_the_environment_the_part_runs_in(tmp_path):
    """A module this process cannot import but the part's environment can: the part runs; without that
    environment it is skipped. A module that imports nothing is only looked up, never imported."""
    (tmp_path / "lib").mkdir()
    (tmp_path / "lib" / "rlvr_probe_only_there.py").write_text("raise SystemExit('imported')\n")
    needs = [("rlvr_probe_only_there", "pip install rlvr-probe")]
    there = check.Part("there", [PY, "-c", "pass"], 30, needs_cuda=False, needs=needs,
                       env={"PYTHONPATH": str(tmp_path / "lib")})
    rehearsed_there = check.Part("rehearsed_there", [PY, "-c", "raise SystemExit(5)"], 30, needs_cuda=False,
                                 needs=needs, rehearsal=[PY, "-c", "pass"],
                                 rehearsal_env={"PYTHONPATH": str(tmp_path / "lib")})
    not_there = check.Part("not_there", [PY, "-c", "pass"], 30, needs_cuda=False, needs=needs)
    assert check.missing_packages(there, dry_run=False) == []
    assert check.missing_packages(rehearsed_there, dry_run=True) == []
    assert check.missing_packages(rehearsed_there, dry_run=False) == [("rlvr_probe_only_there",
                                                                       "pip install rlvr-probe", PY)]
    report = check.run_check([there, not_there], tmp_path / "out", budget_s=60, dry_run=False)
    assert report["parts"]["there"]["status"] == "ok"
    assert report["parts"]["not_there"]["status"] == "skipped"
    assert "pip install rlvr-probe" in report["parts"]["not_there"]["reason"]
    # an interpreter that does not start: the part runs and its failure is reported, not skipped
    broken = check.Part("broken", [str(tmp_path / "no-python"), "-c", "pass"], 30, needs_cuda=False, needs=needs)
    assert check.missing_packages(broken, dry_run=False) == []


def test_junit_outcomes_and_the_summary_of_equal_work(tmp_path):
    xml = tmp_path / "j.xml"
    xml.write_text(
        '<testsuites><testsuite name="pytest">'
        '<testcase classname="t" name="test_ok" time="1.25"/>'
        '<testcase classname="t" name="test_bad" time="0.5"><failure message="assert 0.3 &lt; 0.15">tb</failure>'
        '</testcase><testcase classname="t" name="test_skip" time="0"><skipped message="needs CUDA"/></testcase>'
        '</testsuite></testsuites>')
    assert check._read_junit(xml) == [
        {"name": "test_ok", "outcome": "passed", "seconds": 1.25, "message": None},
        {"name": "test_bad", "outcome": "failed", "seconds": 0.5, "message": "assert 0.3 < 0.15"},
        {"name": "test_skip", "outcome": "skipped", "seconds": 0.0, "message": "needs CUDA"}]
    assert check._read_junit(tmp_path / "missing.xml") == []
    # a part killed at its limit writes no XML: the -v lines of the tests that finished stand in
    text = ("tests/gpu/test_cuda_core.py::test_lora_trains_on_cuda PASSED                [ 60%]\n"
            "tests/gpu/test_cuda_core.py::test_engine_behaviour_logprobs_match_the_learner[hf-bfloat16] FAILED [ 70%]\n"
            "some other line\n")
    assert [(t["name"], t["outcome"]) for t in check._read_verbose(text)] == [
        ("test_lora_trains_on_cuda", "passed"), ("test_engine_behaviour_logprobs_match_the_learner[hf-bfloat16]", "failed")]
    report = {"parts": {"env": {"status": "ok", "result": {"torch_cuda": {"name": "NVIDIA H100 80GB HBM3"}}},
                        "rlvr_grpo_0.5b": {"status": "ok", "result": {"step_s": 2.0, "response_tokens_per_step": 4096}},
                        "trl_grpo_0.5b": {"status": "ok", "result": {"step_s": 5.0, "response_tokens_per_step": 4000}}}}
    s = check.summarise(report)
    assert s["gpu"] == "NVIDIA H100 80GB HBM3" and s["ok"] == ["env", "rlvr_grpo_0.5b", "trl_grpo_0.5b"]
    assert s["equal_work"]["trl_over_rlvr"] == 2.5 and s["equal_work"]["rlvr_step_s"] == 2.0


@pytest.mark.slow
def test_the_pytest_parts_select_every_cuda_test_exactly_once():
    """cuda_tests, grpo_30 and torchrun split tests/gpu/test_cuda_core.py between them, and the --dry-run's CPU
    rehearsal picks a subset of cuda_tests."""
    parts = {p.name: p for p in check.plan()}
    selections = {name: parts[name].command[parts[name].command.index("-k") + 1]
                  for name in ("cuda_tests", "grpo_30", "torchrun")}
    selections.update(every="not nothing_matches_this", rehearsed=check.DRY_TESTS)
    # one interpreter collects for every selection (each pytest start-up imports torch: slow on a busy CPU)
    script = (
        "import contextlib, io, json, sys, pytest\n"
        "out = {}\n"
        "for name, sel in json.loads(sys.argv[1]).items():\n"
        "    buf = io.StringIO()\n"
        "    with contextlib.redirect_stdout(buf):\n"
        "        pytest.main(['--collect-only', '-q', '-p', 'no:cacheprovider', sys.argv[2], '-k', sel])\n"
        "    out[name] = sorted(x for x in buf.getvalue().splitlines() if '::' in x)\n"
        "print('COLLECTED ' + json.dumps(out))\n")
    proc = subprocess.run([PY, "-c", script, json.dumps(selections), check.CORE], cwd=ROOT, capture_output=True,
                          text=True, env=_env(), timeout=600)
    line = next(x for x in proc.stdout.splitlines() if x.startswith("COLLECTED "))
    got = {k: set(v) for k, v in json.loads(line[len("COLLECTED "):]).items()}
    chosen = {k: got[k] for k in ("cuda_tests", "grpo_30", "torchrun")}
    every, rehearsed = got["every"], got["rehearsed"]
    assert len(every) == 11
    assert set().union(*chosen.values()) == every and sum(map(len, chosen.values())) == len(every)
    assert len(chosen["grpo_30"]) == 1 and len(chosen["torchrun"]) == 1
    assert rehearsed and rehearsed < chosen["cuda_tests"]


def test_every_part_fits_the_budget_and_names_files_that_exist():
    parts = check.plan()
    assert [p.name for p in parts][:2] == ["env", "cuda_tests"]
    for p in parts:
        assert p.min_s <= p.limit_s <= 600, p.name  # one device command runs at most 10 minutes
        files = [a for a in p.command if a.endswith(".py") and not a.startswith("-")]
        assert files and all((ROOT / f).is_file() for f in files), (p.name, files)
        assert not p.needs_cuda or p.rehearsal is not None or p.name in ("grpo_30", "torchrun", "shape_1.5b")
    # the parts a GPU run needs most fit in the default budget even at their full limits
    must = ("env", "cuda_tests", "grpo_30", "torchrun", "shape_0.5b")
    assert sum(p.limit_s for p in parts if p.name in must) <= 470


@pytest.mark.slow
def test_dry_run_of_the_env_part_writes_versions_and_no_gpu(tmp_path):
    proc = subprocess.run([PY, str(ROOT / "scripts/gpu/check.py"), "--dry-run", "--only", "env", "--out",
                           str(tmp_path)], cwd=ROOT, capture_output=True, text=True, env=_env(), timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    report = json.loads((tmp_path / "gpu_check.json").read_text())
    env = report["parts"]["env"]
    assert env["status"] == "ok" and env["needs_cuda"] is False
    res = env["result"]
    assert res["python"] == ".".join(map(str, sys.version_info[:3]))
    assert res["machine"]["torch"]["ok"] and res["carried"]["pydantic"]["ok"] and res["rlvr"]["rlvr.cli"]["ok"]
    assert res["torch_cuda"]["available"] is False  # this machine has no GPU
    assert report["summary"]["ok"] == ["env"] and report["finished"] >= report["started"]


def test_the_wheel_list_is_pinned_and_carries_nothing_the_gpu_machine_has():
    specs = wheels.wanted()
    names = [wheels.normalize(s.split("==")[0]) for s in specs]
    assert len(names) == len(set(names)) and all("==" in s for s in specs)
    machine = wheels.machine_packages()
    assert {"torch", "transformers", "numpy", "pytest-timeout"} <= machine
    assert not set(names) & machine  # carried and present: two versions would compete on sys.path
    assert {"pydantic", "pydantic-core", "math-verify", "trl", "datasets"} <= set(names)
