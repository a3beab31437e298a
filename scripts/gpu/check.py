#!/usr/bin/env python
"""The one-command GPU check (run it through scripts/gpu_check.sh, which first installs .whl/ offline):

    scripts/gpu_check.sh                 # on a CUDA machine: every part below, about 8 minutes on an H100
    scripts/gpu_check.sh --dry-run       # here, on a CPU: the parts that need no GPU, the others rehearsed or listed

UNVERIFIED on a GPU until its first run there (docs/scaling.md, "On a GPU"): built and rehearsed on a CPU only.

Each part runs in its own process group under its own time limit (a hang in one is killed and the next runs),
and the whole run stays inside --budget-s: a part is given min(its limit, the time left) and skipped when less
than its minimum is left. After every part, all results so far are written to OUT/gpu_check.json (schema below);
the parts' output goes to OUT/gpu_check.log. OUT: --out, else $OUT (the device tool's folder), else
runs/gpu-check-<UTC time>.

Parts (in order): env (versions, nvidia-smi, torch's view of the GPU, imports); cuda_tests (tests/gpu/
test_cuda_core.py but the two long ones: bf16 log-probs, the engines' behaviour log-probs, LoRA, train.compile,
resume, FSDP2 on NCCL); grpo_30 (30 GRPO steps of recipes/grpo.yaml on CUDA, held-out pass@1 before and after);
torchrun (torchrun --nproc_per_node 1 trains, checkpoints, resumes); shape_0.5b (the matmul peak, rollout tokens/s
of the fast engine, the hf engine and generate, learner tokens/s and MFU at Qwen2.5-0.5B's shape, random bf16
weights); rlvr_grpo_0.5b and trl_grpo_0.5b (one GRPO step's split, and TRL's GRPOTrainer at equal work:
bench/workers.py); shape_1.5b (as shape_0.5b at Qwen2.5-1.5B's shape, if time is left).

gpu_check.json: {"schema": 1, "started", "finished", "dry_run", "budget_s", "elapsed_s", "out",
"parts": {name: {"status": ok|failed|timeout|skipped|rehearsed, "needs_cuda", "command", "limit_s", "seconds",
"returncode", "reason"?, "result"?, "tests"?, "measured"?}}, "summary": {"ok", "failed", "timeout", "skipped",
"rehearsed", "gpu"?, "equal_work"?}}. "rehearsed": a --dry-run ran the part's code on the CPU at toy size (its
figures say nothing about a GPU). OUT gets these two files only (the device tool brings back at most 8).
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
PY = sys.executable
CORE = "tests/gpu/test_cuda_core.py"
SCHEMA = 1
# The quick tests a --dry-run rehearses on the CPU (RLVR_GPU_TESTS_DEVICE=cpu): a few seconds each there.
DRY_TESTS = "learner_bf16 or (engine_behaviour and float32) or fsdp2_on_nccl"
# The equal-work settings of rlvr_grpo and trl_grpo: bench/equal_work.py's defaults, on the 0.5B shape, bf16.
EQUAL_WORK = {"model": "qwen0.5b", "prompts": 8, "n": 8, "max_new_tokens": 64, "lr": 1e-5, "steps": 3,
              "equal_share": 0.5}
TOY_WORK = {"model": "tiny", "prompts": 2, "n": 2, "max_new_tokens": 8, "lr": 1e-5, "steps": 1, "equal_share": 0.5}


@dataclass
class Part:
    name: str
    command: list[str]
    limit_s: int
    needs_cuda: bool = True
    min_s: int = 30  # skipped when less time than this is left
    env: dict[str, str] = field(default_factory=dict)
    junit: bool = False  # a pytest run: read its JUnit XML
    rehearsal: list[str] | None = None  # --dry-run: this command instead (on the CPU, toy sizes)
    rehearsal_env: dict[str, str] = field(default_factory=dict)
    # optional packages the part imports: (module, install command); a missing one skips the part with the reason
    needs: list[tuple[str, str]] = field(default_factory=list)


BENCH = 'pip install -e ".[bench]" (on the GPU machine: the wheels in .whl/, make gpu-wheels)'
TEST = 'pip install -e ".[test]" (on the GPU machine: the wheels in .whl/, make gpu-wheels)'
PYTEST_NEEDS = [("pytest", TEST), ("pytest_timeout", TEST)]  # --timeout is pytest-timeout's


def _pytest(select: str, limit: int) -> list[str]:
    # -v: one line per finished test, read back when a part is killed before pytest writes its JUnit XML
    return [PY, "-m", "pytest", "-v", "-p", "no:cacheprovider", "-o", "addopts=", "-rA",
            f"--timeout={limit}", CORE, "-k", select]


def plan() -> list[Part]:
    """The parts, in the order they run, with the limits that fit about 8 minutes on one H100."""
    worker = [PY, "bench/run.py", "--worker"]
    shape_05 = {"shape": "0.5b", "device": "cuda", "prompts": 16, "n": 8, "max_new_tokens": 128,
                "train_tokens": 256, "micro_rows": 16, "reps": 2}
    toy_shape = {"shape": "tiny", "device": "cpu", "dtype": "float32", "prompts": 2, "n": 2, "max_new_tokens": 8,
                 "train_tokens": 16, "micro_rows": 2, "reps": 1, "learner_reps": 1, "mm_sizes": [128]}
    bf16 = ["model.dtype=bfloat16"]
    return [
        Part("env", [PY, "scripts/gpu/parts.py", "env"], 30, needs_cuda=False, min_s=10),
        Part("cuda_tests", _pytest("not grpo_30 and not torchrun", 180), 180, junit=True,
             rehearsal=_pytest(DRY_TESTS, 120), rehearsal_env={"RLVR_GPU_TESTS_DEVICE": "cpu"}, needs=PYTEST_NEEDS),
        Part("grpo_30", _pytest("grpo_30", 90), 90, junit=True, needs=PYTEST_NEEDS),
        Part("torchrun", _pytest("torchrun", 70), 70, junit=True, needs=PYTEST_NEEDS),
        Part("shape_0.5b", [PY, "scripts/gpu/parts.py", "shape", "--args", json.dumps(shape_05)], 90, min_s=60,
             rehearsal=[PY, "scripts/gpu/parts.py", "shape", "--args", json.dumps(toy_shape)]),
        Part("rlvr_grpo_0.5b", [*worker, "rlvr_train", "--args",
                                json.dumps({**EQUAL_WORK, "engine": "fast", "micro_batch_size": 16,
                                            "overrides": bf16})], 80, min_s=50,
             rehearsal=[*worker, "rlvr_train", "--args", json.dumps({**TOY_WORK, "engine": "fast"})]),
        Part("trl_grpo_0.5b", [*worker, "trl_train", "--args",
                               json.dumps({**EQUAL_WORK, "device": "cuda", "dtype": "bfloat16"})], 90, min_s=60,
             rehearsal=[*worker, "trl_train", "--args", json.dumps(TOY_WORK)],
             needs=[("trl", BENCH), ("datasets", BENCH)]),
        Part("shape_1.5b", [PY, "scripts/gpu/parts.py", "shape", "--args",
                            json.dumps({**shape_05, "shape": "1.5b"})], 90, min_s=70),
    ]


def _read_junit(path: Path) -> list[dict[str, Any]]:
    """Each test case of a pytest JUnit XML file: name, outcome (passed/failed/error/skipped), seconds, message."""
    if not path.is_file():
        return []
    tests = []
    for case in ET.parse(path).getroot().iter("testcase"):
        outcome, message = "passed", None
        for tag in ("failure", "error", "skipped"):
            node = case.find(tag)
            if node is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                message = (node.get("message") or node.text or "")[:1500]
                break
        tests.append({"name": case.get("name"), "outcome": outcome, "seconds": float(case.get("time") or 0),
                      "message": message})
    return tests


_VERBOSE = re.compile(r"^(\S+::(\S+)) (PASSED|FAILED|ERROR|SKIPPED|XFAIL|XPASS)\b")


def _read_verbose(text: str) -> list[dict[str, Any]]:
    """Outcomes from pytest -v lines ("path::test PASSED [ 10%]"): what finished before a part was killed."""
    tests = []
    for line in text.splitlines():
        m = _VERBOSE.match(line)
        if m:
            tests.append({"name": m.group(2), "outcome": m.group(3).lower(),
                          "seconds": None, "message": None})
    return tests


def _result_line(text: str) -> dict[str, Any] | None:
    """The last `GPU_CHECK_RESULT {json}` (scripts/gpu/parts.py) or `BENCH_RESULT {json}` (bench/) line."""
    for line in reversed(text.splitlines()):
        for prefix in ("GPU_CHECK_RESULT ", "BENCH_RESULT "):
            if line.startswith(prefix):
                return json.loads(line[len(prefix):])
    return None


def run_part(part: Part, work: Path, limit: float, dry_run: bool, log: Any) -> dict[str, Any]:
    """Run one part in its own process group; kill the group at `limit` seconds. A pytest part's JUnit XML and
    measured values go to `work` (outside OUT: the device tool brings back at most 8 files) and into the record."""
    rehearse = dry_run and part.rehearsal is not None
    command = part.rehearsal if rehearse else part.command
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "TOKENIZERS_PARALLELISM": "false", **part.env,
           **(part.rehearsal_env if rehearse else {})}
    junit = work / f"junit-{part.name}.xml"
    measured = work / f"measured-{part.name}.jsonl"
    if part.junit:
        command = [*command, f"--junitxml={junit}"]
        env["RLVR_GPU_RESULTS"] = str(measured)
        junit.unlink(missing_ok=True)
        measured.unlink(missing_ok=True)
    record: dict[str, Any] = {"needs_cuda": part.needs_cuda, "command": shlex.join(command), "limit_s": round(limit)}
    log.write(f"\n===== {part.name} (limit {limit:.0f} s{', rehearsal on the CPU' if rehearse else ''})"
              f": {shlex.join(command)}\n")
    log.flush()
    start = time.perf_counter()
    proc = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        text, _ = proc.communicate(timeout=limit)
        timed_out = False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # the part and everything it started (torchrun's ranks, compilers)
        text, _ = proc.communicate()
        timed_out = True
    record["seconds"] = round(time.perf_counter() - start, 1)
    record["returncode"] = proc.returncode
    log.write(text or "")
    log.flush()
    if part.junit:
        record["tests"] = _read_junit(junit) or _read_verbose(text or "")
        if measured.is_file():
            record["measured"] = [json.loads(x) for x in measured.read_text().splitlines() if x.strip()]
    result = _result_line(text or "")
    if result is not None:
        record["result"] = result
    if timed_out:
        record["status"] = "timeout"
        record["reason"] = f"killed after its {limit:.0f} s limit; the log's last lines show where it was"
    elif proc.returncode != 0:
        record["status"] = "failed"
        record["reason"] = (text or "").strip().splitlines()[-1][:500] if text and text.strip() else "no output"
    elif part.junit and not any(t["outcome"] == "passed" for t in record["tests"]):
        record["status"] = "failed"
        record["reason"] = "no test passed (all skipped: is CUDA visible to torch?)"
    else:
        record["status"] = "rehearsed" if rehearse else "ok"
    return record


def summarise(report: dict[str, Any]) -> dict[str, Any]:
    parts = report["parts"]
    summary: dict[str, Any] = {s: sorted(n for n, p in parts.items() if p["status"] == s)
                               for s in ("ok", "failed", "timeout", "skipped", "rehearsed")}
    env = parts.get("env", {}).get("result") or {}
    if env.get("torch_cuda", {}).get("name"):
        summary["gpu"] = env["torch_cuda"]["name"]
    rlvr, trl = (parts.get(n, {}).get("result") or {} for n in ("rlvr_grpo_0.5b", "trl_grpo_0.5b"))
    if "step_s" in rlvr and "step_s" in trl:
        summary["equal_work"] = {"rlvr_step_s": rlvr["step_s"], "trl_step_s": trl["step_s"],
                                 "trl_over_rlvr": trl["step_s"] / rlvr["step_s"],
                                 "rlvr_response_tokens_per_step": rlvr.get("response_tokens_per_step"),
                                 "trl_response_tokens_per_step": trl.get("response_tokens_per_step")}
    return summary


def write(report: dict[str, Any], out: Path) -> None:
    report["summary"] = summarise(report)
    tmp = out / "gpu_check.json.tmp"
    tmp.write_text(json.dumps(report, indent=1) + "\n")
    tmp.replace(out / "gpu_check.json")


_FIND_SPECS = ("import importlib.util, sys; "
               "print(' '.join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))")


def missing_packages(part: Part, dry_run: bool) -> list[tuple[str, str, str]]:
    """The part's optional packages that the interpreter which will run it cannot import, each with its install
    command and that interpreter; asked before the part runs, in the environment it will run in."""
    if not part.needs:
        return []
    rehearse = dry_run and part.rehearsal is not None
    command = part.rehearsal if rehearse else part.command
    env = {**os.environ, **part.env, **(part.rehearsal_env if rehearse else {})}
    modules = [m for m, _ in part.needs]
    try:
        proc = subprocess.run([command[0], "-c", _FIND_SPECS, *modules], cwd=ROOT, env=env, capture_output=True,
                              text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return []  # the interpreter does not even start: the part runs and reports that as its failure
    if proc.returncode != 0:
        return []
    absent = set(proc.stdout.split())
    return [(m, how, command[0]) for m, how in part.needs if m in absent]


def run_check(parts: list[Part], out: Path, budget_s: float, dry_run: bool) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    start = time.perf_counter()
    report: dict[str, Any] = {"schema": SCHEMA, "started": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
                              "dry_run": dry_run, "budget_s": budget_s, "out": str(out), "parts": {}}
    with open(out / "gpu_check.log", "a") as log, tempfile.TemporaryDirectory(prefix="rlvr-gpu-check-") as tmp:
        for part in parts:
            left = budget_s - (time.perf_counter() - start)
            missing = missing_packages(part, dry_run)
            if missing:
                report["parts"][part.name] = {
                    "status": "skipped", "needs_cuda": part.needs_cuda, "command": shlex.join(part.command),
                    "limit_s": part.limit_s,
                    "reason": "; ".join(f"needs the optional package '{m}', which {interpreter} cannot import: {how}"
                                        for m, how, interpreter in missing)}
            elif dry_run and part.needs_cuda and part.rehearsal is None:
                report["parts"][part.name] = {"status": "skipped", "needs_cuda": True,
                                              "command": shlex.join(part.command), "limit_s": part.limit_s,
                                              "reason": "--dry-run: needs CUDA, no CPU rehearsal"}
            elif left < part.min_s:
                report["parts"][part.name] = {"status": "skipped", "needs_cuda": part.needs_cuda,
                                              "command": shlex.join(part.command), "limit_s": part.limit_s,
                                              "reason": f"{left:.0f} s of the {budget_s:.0f} s budget left, "
                                                        f"under the part's minimum {part.min_s} s"}
            else:
                report["parts"][part.name] = run_part(part, Path(tmp), min(part.limit_s, left), dry_run, log)
            p = report["parts"][part.name]
            print(f"{part.name:16s} {p['status']:9s} {p.get('seconds', 0):6.1f} s  {p.get('reason', '')}", flush=True)
            report["elapsed_s"] = round(time.perf_counter() - start, 1)
            write(report, out)
    report["finished"] = dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds")
    write(report, out)
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dry-run", action="store_true", help="no GPU: run what needs none, rehearse the rest on the CPU")
    ap.add_argument("--out", type=Path, default=None, help="results folder (default: $OUT, else runs/gpu-check-<time>)")
    ap.add_argument("--budget-s", type=float, default=470.0, help="the whole run's time (default 470: under 8 min)")
    ap.add_argument("--only", default=None, help="comma-separated part names (default: all)")
    args = ap.parse_args(argv)
    out = args.out or (Path(os.environ["OUT"]) if os.environ.get("OUT") else
                       ROOT / "runs" / f"gpu-check-{dt.datetime.now(dt.timezone.utc):%Y%m%dT%H%M%SZ}")
    parts = plan()
    if args.only:
        names = args.only.split(",")
        unknown = sorted(set(names) - {p.name for p in parts})
        if unknown:
            raise SystemExit(f"--only: unknown part(s) {', '.join(unknown)}; parts: {', '.join(p.name for p in parts)}")
        parts = [p for p in parts if p.name in names]
    report = run_check(parts, out.resolve(), args.budget_s, args.dry_run)
    s = report["summary"]
    print("summary: " + json.dumps(s))
    print(f"{out}/gpu_check.json: ok {len(s['ok'])}, rehearsed {len(s['rehearsed'])}, failed {len(s['failed'])}, "
          f"timeout {len(s['timeout'])}, skipped {len(s['skipped'])}")
    return 1 if s["failed"] or s["timeout"] else 0


if __name__ == "__main__":
    sys.exit(main())
