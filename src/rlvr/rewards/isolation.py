"""The OS-level isolation layer under the sandbox's Python guard: bubblewrap namespaces, a private size-limited
/tmp, and cgroup limits where the machine allows them.

`os_layer(interpreter)` probes once per process whether `bwrap` can start the interpreter in fresh user, PID,
network, IPC, UTS and cgroup namespaces, and returns how to launch it (or why it cannot). `isolation_info()`
says what a run gets; the trainer logs it once at start-up and writes it to versions.json, so a machine
without user namespaces never silently downgrades to the Python guard alone.

The sandbox's view of the filesystem (see `bwrap_command`):

- read-only: /usr (and the /bin, /lib... links into it), a few files from /etc (passwd, group, hosts, ld.so
  cache; no shadow, ssh or ssl keys), and the interpreter's own prefix directories (its site-packages);
- nothing else of the host: not the run directory, the datasets, the home directory or the host /tmp;
- writable: only /tmp, a private tmpfs of `disk_mb` MiB (the disk quota for everything the program writes);
  the root, /dev and every bind are read-only;
- a fresh /proc of the sandbox's own PID namespace, a minimal /dev; no network devices but a down loopback.

Inside, the process has no capabilities and cannot make further user namespaces. When the parent is root and
the interpreter is readable by `nobody`, bwrap itself runs as `nobody` (so the sandbox has no root-owned file
access at all); otherwise its uid maps to the caller's, with every capability dropped.

Setting `RLVR_SANDBOX` chooses: `auto` (default: bwrap when it works, else the Python guard alone, said loudly),
`bwrap` (refuse to run code without the OS layer) or `none` (the Python guard alone, on purpose).
"""

from __future__ import annotations

import functools
import json
import logging
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

NOBODY = 65534
DISK_MB = 64  # default size of the sandbox's private /tmp: every byte the program writes counts against it
CGROUP_PIDS = 256
CGROUP_MEMORY_MB = 4096
MODES = ("auto", "bwrap", "none")
ETC_FILES = ("passwd", "group", "hosts", "nsswitch.conf", "localtime", "timezone", "ld.so.cache", "ld.so.conf",
             "ld.so.conf.d", "alternatives", "mime.types")
NAMESPACES = ("user", "pid", "net", "ipc", "uts", "cgroup")


class IsolationUnavailable(RuntimeError):
    """RLVR_SANDBOX=bwrap was asked for and the OS layer cannot start here."""


def mode() -> str:
    value = os.environ.get("RLVR_SANDBOX", "auto").strip().lower() or "auto"
    if value not in MODES:
        raise ValueError(f"RLVR_SANDBOX must be one of {', '.join(MODES)}; got {value!r}")
    return value


@dataclass(frozen=True)
class OsLayer:
    """How the sandbox server starts: `available` with a bwrap command prefix, or not, with the reason."""

    available: bool
    reason: str = ""
    bwrap: str = ""
    version: str = ""
    binds: tuple[str, ...] = ()
    run_as_nobody: bool = False
    cgroup: str = ""  # "" when no cgroup limits could be set up; else a description
    cgroup_dirs: tuple[str, ...] = field(default=(), repr=False)  # parent cgroup dirs we may create children in

    def describe(self) -> dict[str, object]:
        if not self.available:
            return {"os_layer": None, "reason": self.reason,
                    "fallback": "Python guard (audit hook) + rlimits + process-group kill; " + (
                        "empty network namespace (root)" if _netns_ok() else "no network namespace")}
        return {
            "os_layer": "bubblewrap",
            "bwrap": self.version,
            "namespaces": list(NAMESPACES),
            "filesystem": "read-only /usr, selected /etc files and the interpreter; private /tmp tmpfs "
                          f"(disk quota {DISK_MB} MiB by default); nothing else of the host",
            "user": "nobody (no capabilities)" if self.run_as_nobody else
                    f"uid {os.geteuid()} mapped, no capabilities, no nested user namespaces",
            "cgroup": self.cgroup or "unavailable (rlimits only)",
            "python_guard": "on (second layer)",
        }


def _interpreter_dirs(interpreter: str) -> tuple[list[str], str]:
    """Directories the interpreter needs (its prefixes), from the interpreter itself; ('', error) on failure."""
    probe = "import json, sys; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]))"
    try:
        done = subprocess.run([interpreter, "-I", "-c", probe], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError) as err:
        return [], f"cannot run {interpreter}: {err}"
    if done.returncode != 0:
        return [], f"{interpreter} failed: {done.stderr.strip()[-200:]}"
    dirs = [os.path.realpath(interpreter)]
    dirs += [os.path.realpath(p) for p in json.loads(done.stdout)]
    return dirs, ""


def _system_binds() -> list[str]:
    args: list[str] = ["--ro-bind", "/usr", "/usr"]
    for top in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        path = Path("/", top)
        if path.is_symlink():
            args += ["--symlink", os.readlink(path), str(path)]
        elif path.is_dir():
            args += ["--ro-bind", str(path), str(path)]
    for name in ETC_FILES:
        if os.path.lexists(f"/etc/{name}"):
            args += ["--ro-bind-try", f"/etc/{name}", f"/etc/{name}"]
    return args


def _interpreter_binds(interpreter_dirs: list[str]) -> tuple[str, ...]:
    """The smallest set of directories covering the interpreter's (outside /usr, which is bound anyway)."""
    binds: list[str] = []
    for d in interpreter_dirs:
        d = d if os.path.isdir(d) else os.path.dirname(d)
        if d in ("", "/", "/tmp") or d == "/usr" or d.startswith(("/usr/", "/proc", "/dev")):
            continue
        if any(d == b or d.startswith(b + "/") for b in binds):
            continue
        binds = [b for b in binds if not b.startswith(d + "/")] + [d]
    return tuple(sorted(binds))


def kept_under_tmp(layer: OsLayer) -> list[str]:
    """Interpreter directories that live under /tmp (a venv made there): bound read-only on top of the sandbox's
    private /tmp, and left alone when the server wipes /tmp after a run."""
    return [b for b in layer.binds if b.startswith("/tmp/")]


def bwrap_command(layer: OsLayer, disk_mb: int) -> list[str]:
    """The bwrap argument list (up to the command) for one sandbox server."""
    interpreter = [a for d in layer.binds for a in ("--ro-bind", d, d)]
    return [
        layer.bwrap, "--unshare-all", "--unshare-user", "--disable-userns", "--cap-drop", "ALL",
        "--new-session", "--clearenv", "--hostname", "sandbox",
        *_system_binds(),
        "--proc", "/proc", "--dev", "/dev",
        "--size", str(disk_mb * 2**20), "--perms", "1777", "--tmpfs", "/tmp",
        *interpreter,  # after the tmpfs: an interpreter under /tmp is bound on top of it
        "--remount-ro", "/dev", "--remount-ro", "/",
        "--setenv", "PATH", "/usr/local/bin:/usr/bin:/bin", "--setenv", "LANG", "C.UTF-8",
        "--chdir", "/tmp",
    ]


@functools.cache
def _netns_ok() -> bool:
    """`unshare -n` works here (Linux, root, util-linux present): the fallback's network isolation."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return False
    unshare = shutil.which("unshare")
    if not unshare:
        return False
    try:
        return subprocess.run([unshare, "-n", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


@functools.cache
def nobody_can_run(interpreter: str) -> bool:
    """The parent is root and `nobody` can start the interpreter (its files are readable by everyone)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return False
    try:
        done = subprocess.run([interpreter, "-I", "-B", "-c", "import os, json, socket, select"], user=NOBODY,
                              group=NOBODY, extra_groups=[], cwd="/", env={"PATH": "/usr/bin:/bin"},
                              capture_output=True, timeout=20)
    except (OSError, subprocess.SubprocessError, ValueError):
        return False
    return done.returncode == 0


def os_layer(interpreter: str) -> OsLayer:
    """Whether bwrap can run `interpreter` with the sandbox's namespaces (probed once per interpreter)."""
    if mode() == "none":
        return OsLayer(False, "disabled by RLVR_SANDBOX=none")
    return _probe(interpreter)


@functools.cache
def _probe(interpreter: str) -> OsLayer:
    if not sys.platform.startswith("linux"):
        return OsLayer(False, f"not Linux ({sys.platform}): no namespaces")
    bwrap = shutil.which("bwrap")
    if not bwrap:
        return OsLayer(False, "bubblewrap (bwrap) not found; install it (Debian/Ubuntu: apt-get install bubblewrap)")
    try:
        version = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError) as err:
        return OsLayer(False, f"bwrap does not run: {err}")
    dirs, problem = _interpreter_dirs(interpreter)
    if problem:
        return OsLayer(False, problem)
    binds = _interpreter_binds(dirs)
    as_nobody = nobody_can_run(interpreter) and shutil.which("setpriv") is not None
    layer = OsLayer(True, "", bwrap, version, binds, as_nobody)
    cmd = [*_user_prefix(layer), *bwrap_command(layer, 1), interpreter, "-I", "-B", "-c",
           # a fresh name: /tmp may also hold read-only binds (an interpreter under /tmp, e.g. /tmp/x/.venv)
           "import os, tempfile; os.write(tempfile.mkstemp(dir='/tmp')[0], b'1'); "
           "assert os.listdir('/proc').count('2') == 1"]
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.SubprocessError) as err:
        return OsLayer(False, f"bwrap failed to start: {err}")
    if done.returncode != 0:
        why = done.stderr.strip().splitlines()[-1] if done.stderr.strip() else f"exit code {done.returncode}"
        hint = " (user namespaces disabled? see /proc/sys/kernel/unprivileged_userns_clone, " \
               "/proc/sys/user/max_user_namespaces)" if "namespace" in why.lower() or "permission" in why.lower() else ""
        return OsLayer(False, f"bwrap cannot create the sandbox here: {why}{hint}")
    cgroup, cgroup_dirs = _cgroup_probe()
    return OsLayer(True, "", bwrap, version, binds, as_nobody, cgroup, cgroup_dirs)


def _user_prefix(layer: OsLayer) -> list[str]:
    if not layer.run_as_nobody:
        return []
    return [shutil.which("setpriv") or "setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", "--"]


def launch_prefix(layer: OsLayer, cgroup_dirs: list[str]) -> list[str]:
    """What comes before the bwrap arguments: join the server's cgroups (as the caller), then drop to nobody."""
    prefix: list[str] = []
    if cgroup_dirs:
        script = 'for d in "$@"; do case "$d" in --) break;; esac; echo $$ > "$d/cgroup.procs" || exit 97; done; ' \
                 'while [ "$1" != "--" ]; do shift; done; shift; exec "$@"'
        prefix = ["/bin/sh", "-c", script, "sh", *cgroup_dirs, "--"]
    return prefix + _user_prefix(layer)


# -- cgroups (v1 or v2), where this process may create child groups --------------------------------------------


def _own_cgroups() -> list[tuple[str, str]]:
    """(controller, directory) for the pids and memory controllers this process can see."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controllers == "":  # cgroup v2
            base = Path("/sys/fs/cgroup") / path.lstrip("/")
            if (base / "cgroup.controllers").exists():
                enabled = (base / "cgroup.subtree_control").read_text().split() if (
                    base / "cgroup.subtree_control").exists() else []
                for c in ("pids", "memory"):
                    if c in enabled:
                        out.append((c + "2", str(base)))
            continue
        for c in controllers.split(","):
            if c in ("pids", "memory"):
                out.append((c, str(Path("/sys/fs/cgroup") / c / path.lstrip("/"))))
    return out


@functools.cache
def _cgroup_probe() -> tuple[str, tuple[str, ...]]:
    """Whether this process can create child cgroups with limits; a description and the parent dirs."""
    found = []
    for controller, base in _own_cgroups():
        test = Path(base, f"rlvr-probe-{os.getpid()}")
        try:
            test.mkdir()
        except OSError:
            continue
        try:
            limit = "pids.max" if controller.startswith("pids") else (
                "memory.max" if controller == "memory2" else "memory.limit_in_bytes")
            (test / limit).write_text(str(CGROUP_PIDS) if controller.startswith("pids") else str(2**30))
            found.append((controller, base))
        except OSError:
            pass
        finally:
            try:
                test.rmdir()
            except OSError:
                pass
    if not found:
        return "", ()
    kinds = sorted({c.rstrip("2") for c, _ in found})
    version = "v2" if any(c.endswith("2") for c, _ in found) else "v1"
    limits = []
    if "pids" in kinds:
        limits.append(f"pids.max={CGROUP_PIDS}")
    if "memory" in kinds:
        limits.append(f"memory limit {CGROUP_MEMORY_MB} MiB (processes and /tmp)")
    return f"{', '.join(limits)} per sandbox server (cgroup {version})", tuple(
        f"{c}:{b}" for c, b in sorted(set(found)))


def make_cgroups(layer: OsLayer, name: str) -> list[str]:
    """Create this server's cgroups with limits; the directories (empty when none could be made)."""
    made = []
    for entry in layer.cgroup_dirs:
        controller, base = entry.split(":", 1)
        d = Path(base, name)
        try:
            d.mkdir(exist_ok=True)
            if controller.startswith("pids"):
                (d / "pids.max").write_text(str(CGROUP_PIDS))
            elif controller == "memory2":
                (d / "memory.max").write_text(str(CGROUP_MEMORY_MB * 2**20))
                if (d / "memory.swap.max").exists():
                    (d / "memory.swap.max").write_text("0")
            else:
                (d / "memory.limit_in_bytes").write_text(str(CGROUP_MEMORY_MB * 2**20))
        except OSError:
            remove_cgroups([str(d)])
            continue
        made.append(str(d))
    return sorted(set(made))


def remove_cgroups(dirs: list[str]) -> None:
    for d in dirs:
        try:
            os.rmdir(d)
        except OSError:
            pass


def sweep_stale_cgroups(layer: OsLayer) -> None:
    """Remove empty server cgroups left by processes that were killed (rmdir fails on non-empty ones)."""
    for entry in layer.cgroup_dirs:
        base = entry.split(":", 1)[1]
        try:
            names = os.listdir(base)
        except OSError:
            continue
        for n in names:
            if n.startswith("rlvr-sandbox-"):
                pid = n.split("-")[2] if n.count("-") >= 3 else ""
                if pid.isdigit() and Path(f"/proc/{pid}").exists():
                    continue
                remove_cgroups([os.path.join(base, n)])


# -- what a run reports ------------------------------------------------------------------------------------------


def isolation_info(interpreter: str) -> dict[str, object]:
    """What isolation code run by `interpreter` gets on this machine (for versions.json and the start-up log;
    `rlvr.rewards.sandbox.isolation_info()` asks it for the sandbox's interpreter)."""
    layer = os_layer(interpreter)
    info = {"mode": f"RLVR_SANDBOX={mode()}", **layer.describe()}
    return info


_announced = False


def announce(interpreter: str) -> dict[str, object]:
    """Log the isolation state once per process (a warning when the OS layer is unavailable) and return it."""
    global _announced
    info = isolation_info(interpreter)
    if not _announced:
        _announced = True
        if info.get("os_layer"):
            log.info("sandbox: OS isolation with %s (%s namespaces; %s)", info.get("bwrap"),
                     ", ".join(NAMESPACES), info.get("cgroup"))
        else:
            log.warning("sandbox: NO OS-level isolation for model-written code: %s. Code runs under the Python "
                        "guard alone, which is not a security boundary (recorded in versions.json)", info["reason"])
    return info
