#!/usr/bin/env python
"""`make gpu-wheels`: the wheels the GPU machine lacks, for an offline install there (docs/scaling.md, "On a GPU").

    python scripts/gpu/wheels.py                         # download scripts/gpu/wheels.txt into .whl/ (CPython 3.12)
    python scripts/gpu/wheels.py --python-version 3.11 --dest /tmp/whl311    # the same set for another CPython
    python scripts/gpu/wheels.py --verify --dest .whl    # install offline into a fresh dir and import rlvr

The GPU machine (scripts/gpu/machine_packages.txt) has CPython 3.12, torch, transformers and ~190 other packages,
and no package index. Downloading uses `pip download --no-deps --only-binary=:all:` for manylinux x86-64, so each
dependency is named in wheels.txt (pinned) and torch is never fetched. The total must stay under --max-mib
(45 MiB: the working tree and the wheels travel together and must stay under 64 MiB); above it, this fails.

--verify installs the wheels with `pip install --no-index --no-deps --target` into a fresh temporary directory,
then imports, in a child interpreter, what the check imports (rlvr's CLI, config, trainer, the math verifier,
TRL, datasets). In that child every distribution that is neither on the GPU machine's list nor in the fresh
directory is hidden, so a wheel missing from wheels.txt fails here, naming its distribution, instead of there.
It needs an interpreter of the wheels' CPython version that holds the GPU machine's packages (torch,
transformers, ...): --python (default: this one).
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PLATFORMS = ["manylinux_2_28_x86_64", "manylinux_2_27_x86_64", "manylinux_2_17_x86_64", "manylinux2014_x86_64",
             "manylinux1_x86_64"]
# What the check imports, beyond the standard library (scripts/gpu/check.py and parts.py, bench/workers.py).
CHECK_IMPORTS = ["rlvr", "rlvr.cli", "rlvr.config", "rlvr.trainer.loop", "rlvr.learner.learner", "rlvr.rollout.fast",
                 "rlvr.rollout.hf", "rlvr.tasks", "rlvr.rewards.verifiers", "rlvr.parallel.fsdp", "rlvr.models.lora",
                 "math_verify", "trl", "datasets", "pytest", "pytest_timeout"]


def normalize(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def wanted() -> list[str]:
    """The pinned requirements of wheels.txt (name==version), comments dropped."""
    specs = []
    for line in (HERE / "wheels.txt").read_text().splitlines():
        spec = line.split("#", 1)[0].strip()
        if spec:
            if "==" not in spec:
                raise SystemExit(f"scripts/gpu/wheels.txt: '{spec}' is not pinned; write NAME==VERSION")
            specs.append(spec)
    return specs


def machine_packages() -> set[str]:
    names = set()
    for line in (HERE / "machine_packages.txt").read_text().splitlines():
        if not line.startswith("#"):
            names.update(normalize(n) for n in line.split())
    return names


def wheel_name(path: Path) -> str:
    return normalize(path.name.split("-", 1)[0])


def download(dest: Path, python_version: str, max_mib: float, pip_python: str) -> int:
    specs = wanted()
    dest.mkdir(parents=True, exist_ok=True)
    names = {normalize(s.split("==")[0]): s.split("==")[1] for s in specs}
    for old in dest.glob("*.whl"):  # one version each: drop wheels not (or no longer) in the list
        name, version = wheel_name(old), old.name.split("-")[1]
        if names.get(name) != version:
            print(f"removing {old.name} (not in scripts/gpu/wheels.txt)")
            old.unlink()
    cmd = [pip_python, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
           "--only-binary=:all:", "--python-version", python_version, "--implementation", "cp",
           *[a for p in PLATFORMS for a in ("--platform", p)], "-d", str(dest), *specs]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    if proc.returncode != 0:
        noise = "is ignored: it is neither a file nor a directory"
        err = "\n".join(line for line in proc.stderr.splitlines() if noise not in line)
        print(f"pip download failed (exit {proc.returncode}):\n{err[-3000:]}", file=sys.stderr)
        return proc.returncode
    got = sorted(dest.glob("*.whl"))
    missing = sorted(set(names) - {wheel_name(p) for p in got})
    if missing:
        print(f"no wheel in {dest} for: {', '.join(missing)}", file=sys.stderr)
        return 1
    total = 0
    for p in got:
        size = p.stat().st_size
        total += size
        print(f"{size / 2**20:8.2f} MiB  {p.name}")
    print(f"{total / 2**20:8.2f} MiB  total, {len(got)} wheels for CPython {python_version} in {dest} "
          f"(limit {max_mib:g} MiB)")
    if total > max_mib * 2**20:
        print(f"the wheels take {total / 2**20:.1f} MiB, over the {max_mib:g} MiB that may travel with the working "
              f"tree; drop a package from scripts/gpu/wheels.txt or pin a smaller version", file=sys.stderr)
        return 1
    return 0


# Runs in the --python interpreter: a directory of links to the distributions the GPU machine has (its list, and
# what those need as installed here, since the machine's own install is consistent), nothing else. A package named
# in wheels.txt is never linked (it is carried because the machine lacks it; e.g. typer here needs pydantic, the
# machine's older typer does not).
_BUILD_SITE = r"""
import importlib.metadata as md, json, os, re, sys
from packaging.requirements import Requirement
site, allowed, carried = sys.argv[1], json.loads(sys.argv[2]), set(json.loads(sys.argv[3]))
norm = lambda n: re.sub(r"[-_.]+", "-", n).lower()
dists = {}
for d in md.distributions():
    dists.setdefault(norm(d.metadata["Name"]), d)
todo, keep = [n for n in allowed if n in dists], set()
while todo:
    name = todo.pop()
    if name in keep:
        continue
    keep.add(name)
    for req in dists[name].requires or []:
        r = Requirement(req)
        if (r.marker is None or r.marker.evaluate({"extra": ""})) and norm(r.name) in dists \
                and norm(r.name) not in carried:
            todo.append(norm(r.name))
linked = set()
for name in sorted(keep):
    d = dists[name]
    base = str(d.locate_file(""))
    if not base.endswith(("site-packages", "dist-packages")):
        continue  # an editable or system install outside site-packages
    for f in d.files or []:
        top = f.parts[0]
        if top in ("..", "__pycache__") or top.endswith(".pth") or top in linked:
            continue
        src = os.path.join(base, top)
        if os.path.exists(src):
            os.symlink(src, os.path.join(site, top))
            linked.add(top)
print(json.dumps(sorted(keep)))
"""

# Runs with -S (no site-packages): sys.path is src, the target dir and the linked site. Imports the check's modules
# and reports which packages came from the target dir.
_CHILD = r"""
import importlib, json, sys
target, modules = sys.argv[1], json.loads(sys.argv[2])
report = {}
for m in modules:
    try:
        mod = importlib.import_module(m)
        report[m] = {"ok": True, "file": getattr(mod, "__file__", None)}
    except Exception as err:
        report[m] = {"ok": False, "error": f"{type(err).__name__}: {err}"}
from_target = sorted({k.split(".")[0] for k, v in list(sys.modules.items())
                      if (getattr(v, "__file__", None) or "").startswith(target + "/")})
print("VERIFY " + json.dumps({"imports": report, "from_target": from_target}))
"""


def verify(dest: Path, python: str) -> int:
    wheels = sorted(dest.glob("*.whl"))
    if not wheels:
        print(f"no wheels in {dest}: run `make gpu-wheels` first", file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="rlvr-gpu-target-") as target, \
            tempfile.TemporaryDirectory(prefix="rlvr-gpu-machine-") as machine:
        cmd = [python, "-m", "pip", "install", "--quiet", "--disable-pip-version-check", "--no-index", "--no-deps",
               "--no-compile", "--no-cache-dir", "--upgrade", "--target", target, *map(str, wheels)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"offline install failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}", file=sys.stderr)
            return 1
        site = Path(machine)
        carried = sorted(normalize(s.split("==")[0]) for s in wanted())
        proc = subprocess.run([python, "-c", _BUILD_SITE, str(site), json.dumps(sorted(machine_packages())),
                               json.dumps(carried)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            print(f"could not list {python}'s packages:\n{proc.stderr[-3000:]}", file=sys.stderr)
            return 1
        env = {"PYTHONPATH": f"{ROOT / 'src'}:{target}:{site}", "PATH": "/usr/bin:/bin", "HOME": tempfile.gettempdir()}
        proc = subprocess.run([python, "-S", "-c", _CHILD, target, json.dumps(CHECK_IMPORTS)],
                              capture_output=True, text=True, env=env)
        line = next((x for x in proc.stdout.splitlines() if x.startswith("VERIFY ")), None)
        if line is None:
            print(f"the import check did not finish (exit {proc.returncode}):\n{proc.stderr[-3000:]}", file=sys.stderr)
            return 1
        result = json.loads(line[len("VERIFY "):])
        version = subprocess.run([python, "-c", "import sys; print(sys.version.split()[0])"], capture_output=True,
                                 text=True).stdout.strip()
        print(f"offline install of {len(wheels)} wheels into a fresh --target dir, imports under Python {version} "
              f"with only the GPU machine's packages and the target dir:")
        bad = 0
        for name, r in result["imports"].items():
            print(f"  {'ok  ' if r['ok'] else 'FAIL'} {name}" + ("" if r["ok"] else f": {r['error']}"))
            bad += not r["ok"]
        print(f"  packages loaded from the target dir: {', '.join(result['from_target'])}")
        unused = sorted({wheel_name(w) for w in wheels} - {normalize(m) for m in result["from_target"]}
                        - {"pydantic-core", "annotated-types", "typing-inspection", "antlr4-python3-runtime",
                           "latex2sympy2-extended", "math-verify", "dill", "multiprocess"})
        if unused:
            print(f"  (wheels no import used: {', '.join(unused)})")
        return 1 if bad else 0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dest", type=Path, default=ROOT / ".whl")
    ap.add_argument("--python-version", default="3.12", help="the GPU machine's CPython (3.12)")
    ap.add_argument("--max-mib", type=float, default=45.0)
    ap.add_argument("--pip-python", default=sys.executable, help="the interpreter whose pip downloads")
    ap.add_argument("--verify", action="store_true", help="offline-install --dest into a fresh dir and import")
    ap.add_argument("--python", default=sys.executable, help="--verify: the interpreter to install and import with")
    args = ap.parse_args(argv)
    if args.verify:
        return verify(args.dest, args.python)
    if shutil.which(args.pip_python) is None and not Path(args.pip_python).exists():
        raise SystemExit(f"--pip-python {args.pip_python}: not found")
    return download(args.dest, args.python_version, args.max_mib, args.pip_python)


if __name__ == "__main__":
    sys.exit(main())
