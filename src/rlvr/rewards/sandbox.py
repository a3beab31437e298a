"""Run untrusted Python (model-written code) where it cannot hurt the run or see what it must not see.

Two layers, one under the other:

1. **The OS layer** (`rlvr.rewards.isolation`): a warm *sandbox server* per verifier process runs inside
   bubblewrap with fresh user, PID, network, IPC, UTS and cgroup namespaces, no capabilities, a read-only view
   of the system directories and the interpreter (nothing else of the host: no run directory, datasets, home
   or host /tmp), a private size-limited /tmp (the disk quota for everything the program writes), and cgroup
   pids/memory limits where the machine allows. When the OS layer is unavailable the server runs as a plain
   child process (empty network namespace and a drop to `nobody` when root) and rlvr says so at start-up.
2. **The Python guard** (`_GUARD`): an audit hook installed before the program is compiled that raises
   PermissionError for sockets, process creation, signals to other processes, foreign extension modules,
   writes/deletes/renames/chmods outside the work dir, reads outside the interpreter's and the system's trees,
   other processes' /proc entries, devices, changing rlimits and patching the guard. The first block of each
   kind is reported on stderr as a `[rlvr-sandbox] blocked: ...` line, which becomes
   `SandboxResult.killed_reason`. Imports of ctypes, cffi, sqlite3 and a few other C modules fail with
   ImportError. Plus rlimits: CPU, address space, file size, open files, no core dumps.

The server (`_ZYGOTE`) never runs untrusted code itself. For every run it forks a fresh child that gets a fresh
empty work dir, its own pipes (passed over a Unix socket, so the server never holds the data), the rlimits
and the guard, and then runs the program. When the child ends, the server kills every other process left in
its PID namespace (nothing outlives a run), wipes the work dir and reports the exit status and CPU time. The
parent enforces the wall-clock timeout (it asks the server to kill the child) and caps stdout/stderr.

Two ways to run a program:

- `run_python(code, stdin=...)`: a program with stdin, stdout, stderr and an exit code (the `python` tool, and
  stdin/stdout tests).
- `execution(code, call=True)`: the program is loaded as a module and then answers requests from the trusted
  parent over a private pipe pair: "call this function with these plain-data arguments", "get this
  attribute". `rlvr.rewards.judge` builds the code verifier on it: the tests run in the trusted process and
  only calls into the program cross over, so the program never sees a test, an expected value or another
  test's input, and what comes back is decoded as plain data by exact type.

The audit hook alone is a tripwire, not a proof: code in the same interpreter can get around it (e.g.
`_imp.create_builtin` makes fresh copies of the C functions the guard replaced, a lying `__fspath__` can show
the hook one path and the OS another). The OS layer is what holds if it does.
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import itertools
import json
import math
import os
import selectors
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from rlvr.rewards import isolation

# The interpreter the child runs; tests may point it elsewhere (it must be the same Python version family).
INTERPRETER = sys.executable
NOBODY = isolation.NOBODY
FILE_SIZE_LIMIT_MB = 16
OPEN_FILES_LIMIT = 256
NPROC_LIMIT = 64  # only applied after dropping to `nobody` without the OS layer (root ignores RLIMIT_NPROC)
BLOCK_MARKER = "[rlvr-sandbox] blocked: "
FRAME_LIMIT = 16 * 2**20  # largest message the program's process may send over the call channel
SERVER_MAX_RUNS = 2000  # a warm server is replaced after this many runs
MAX_IDLE_SERVERS = 16  # per process (the python tool runs on up to agent.tool_workers threads)
KILL_GRACE = 3.0  # seconds the server gets to report a killed child before it is itself replaced
START_TIMEOUT = 60.0
# Tests only: False starts servers whose children skip the Python guard, to show what the OS layer holds on its
# own (as if a program had got around the guard).
GUARD = True
_NO_GUARD = "def _rlvr_sandbox_guard(workdir, limits, drop_uid, nproc, watchdog):\n" \
            "    import resource\n" \
            "    for name, soft, hard in limits:\n" \
            "        resource.setrlimit(getattr(resource, name), (soft, hard))\n"


@dataclass
class SandboxResult:
    """What happened to one sandboxed run. `ok` means exit code 0 and nothing was killed or blocked."""

    ok: bool
    exit_code: int | None
    stdout: str
    stderr: str
    timed_out: bool
    killed_reason: str | None  # "timeout", "output limit", "memory limit", "cpu limit", "blocked: socket ..."
    seconds: float
    leftover: int = 0  # processes the program left behind, killed by the server when it ended
    os_layer: bool = False  # the run had the OS isolation layer


# --------------------------------------------------------------------------------------------------------
# The guard: runs in the child before the program. It only uses names it binds itself (default arguments),
# so a program that rebinds module attributes or builtins cannot change what the hook checks.
# --------------------------------------------------------------------------------------------------------

_GUARD = r'''
def _rlvr_sandbox_guard(workdir, limits, drop_uid, nproc, watchdog):
    import os, posix, resource, sys, time, _thread, _posixsubprocess, _signal

    for name, soft, hard in limits:
        try:
            resource.setrlimit(getattr(resource, name), (soft, hard))
        except (AttributeError, ValueError, OSError):
            pass
    if drop_uid is not None:
        os.setgroups([])
        os.setgid(drop_uid)
        os.setuid(drop_uid)
        try:
            resource.setrlimit(resource.RLIMIT_NPROC, (nproc, nproc))
        except (AttributeError, ValueError, OSError):
            pass

    # Unaudited C functions that could reach outside: replace them (best effort; see module docstring).
    def _blocker(name, _audit=sys.audit, _PermissionError=PermissionError):
        def blocked(*args, **kwargs):
            _audit("rlvr.blocked", name)
            raise _PermissionError("rlvr sandbox: %s is not allowed" % name)
        return blocked
    unaudited = ("pidfd_open", "mknod", "mkfifo", "chroot", "unshare", "setns", "setpriority",
                 "sched_setaffinity", "sched_setscheduler", "sched_setparam")
    for module, names in ((posix, unaudited), (os, unaudited),
                          (_signal, ("pidfd_send_signal",)), (_posixsubprocess, ("fork_exec",))):
        for name in names:
            if hasattr(module, name):
                setattr(module, name, _blocker(module.__name__ + "." + name))

    def _wipe(root, _scandir=posix.scandir, _unlink=posix.unlink, _rmdir=posix.rmdir, _list=list,
              _Errors=(OSError, ValueError)):
        """Delete the work dir tree (the parent that would have done it is gone)."""
        stack = [(root, False)]
        while stack:
            path, emptied = stack.pop()
            if emptied:
                try:
                    _rmdir(path)
                except _Errors:
                    pass
                continue
            stack.append((path, True))
            try:
                entries = _list(_scandir(path))
            except _Errors:
                continue
            for entry in entries:
                child = path + "/" + entry.name
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                except _Errors:
                    is_dir = False
                if is_dir:
                    stack.append((child, False))
                else:
                    try:
                        _unlink(child)
                    except _Errors:
                        pass

    # If the parent dies (say, a verifier worker killed on its timeout), clean up and take our process
    # group with us.
    def _watchdog(_ppid=os.getppid(), _getppid=os.getppid, _sleep=time.sleep, _killpg=os.killpg,
                  _wipe=_wipe, _wd=workdir):
        while True:
            _sleep(0.2)
            if _getppid() != _ppid:
                try:
                    _wipe(_wd)
                finally:
                    _killpg(0, 9)
    if watchdog:
        try:
            _thread.stack_size(256 * 1024)
            _thread.start_new_thread(_watchdog, ())
            _thread.stack_size(0)
        except (RuntimeError, ValueError, MemoryError):
            pass

    wd = workdir.rstrip("/") + "/"
    own = os.getpid()
    # Extension modules may load only from the interpreter's own trees; files may be read only under these
    # and a few system trees (not, say, the parent's home with its API tokens).
    code_dirs = {os.path.realpath(p).rstrip("/") + "/" for p in
                 (sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *sys.path) if p}
    trusted = tuple(sorted(t for t in code_dirs if not wd.startswith(t) and t != "/")) or ("\0",)
    read_roots = trusted + ("/usr/", "/lib/", "/lib32/", "/lib64/", "/libx32/", "/bin/", "/sbin/", "/etc/",
                            "/sys/")
    secret_files = frozenset(("/etc/shadow", "/etc/shadow-", "/etc/gshadow", "/etc/gshadow-", "/etc/sudoers"))
    secret_dirs = ("/etc/ssh/", "/etc/sudoers.d/", "/etc/ssl/private/")
    blocked_imports = frozenset((
        # raw memory and foreign calls; fresh copies of modules whose functions we replaced above; C code that
        # creates files without an audit event (sqlite ATTACH, dbm, shared memory)
        "ctypes", "_ctypes", "cffi", "_cffi_backend", "_ctypes_test", "posix", "_signal", "_posixsubprocess",
        "resource", "_posixshmem", "_multiprocessing", "_dbm", "_gdbm", "_sqlite3", "_testcapi",
        "_testinternalcapi", "_testmultiphase", "_testbuffer", "_testclinic", "_xxsubinterpreters",
        "_xxinterpchannels"))
    process_events = frozenset((
        "os.fork", "os.forkpty", "os.system", "os.exec", "os.spawn", "os.posix_spawn", "os.posix_spawnp",
        "subprocess.Popen", "os.startfile", "pty.spawn", "webbrowser.open"))
    network_events = frozenset((
        "urllib.Request", "http.client.connect", "ftplib.connect", "smtplib.connect", "poplib.connect",
        "imaplib.open", "nntplib.connect", "telnetlib.Telnet.open"))
    deny_events = {
        "os.symlink": "link", "os.link": "link", "os.chdir": "chdir", "fcntl.ioctl": "ioctl",
        "resource.setrlimit": "rlimit", "resource.prlimit": "rlimit", "gc.get_objects": "introspection",
        "gc.get_referrers": "introspection", "gc.get_referents": "introspection",
        "sys._current_frames": "introspection", "sqlite3.enable_load_extension": "sqlite extension",
        "sqlite3.load_extension": "sqlite extension", "syslog.openlog": "syslog", "syslog.syslog": "syslog",
    }
    deny_events = tuple(deny_events.items())
    path_events = frozenset(("os.mkdir", "os.rmdir", "os.remove", "os.chmod", "os.chown", "os.utime",
                             "os.truncate", "os.setxattr", "os.removexattr", "os.chflags", "os.lchflags"))
    fast_allow = frozenset(("compile", "exec", "marshal.loads", "marshal.load", "marshal.dumps",
                            "object.__getattr__", "sys._getframe", "code.__new__", "function.__new__",
                            "builtins.id", "time.sleep", "sys.excepthook", "sys.settrace", "sys.setprofile"))
    write_flags = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
    proc_info = frozenset(("cpuinfo", "meminfo", "stat", "loadavg", "uptime", "version", "self",
                           "thread-self", "filesystems"))
    dev_allow = frozenset(("/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"))

    def report(kind, event, detail, _seen=set(), _write=os.write, _len=len, _str=str, _OSError=OSError,
               _PermissionError=PermissionError):
        if kind not in _seen:
            _seen.add(kind)
            if _len(detail) > 200:
                detail = detail[:200] + "..."
            line = "\n[rlvr-sandbox] blocked: %s (%s%s)\n" % (kind, event, " " + detail if detail else "")
            try:
                _write(2, _str.encode(line, "utf-8", "replace"))
            except _OSError:
                pass
        return _PermissionError("rlvr sandbox: %s is not allowed (%s)" % (kind, event))

    def as_path(x, _type=type, _str=str, _bytes=bytes, _int=int, _bool=bool, _issubclass=issubclass,
                _fspath=posix.fspath, _BaseException=BaseException):
        """An exact str (or int fd) for a path argument, without running the object's own methods if
        it is a str or bytes; None when it is something else that cannot be turned into a path."""
        for _ in (0, 1):
            t = _type(x)
            if t is _str or (t is _int and t is not _bool):
                return x
            if _issubclass(t, _str):
                return _str.__str__(x)
            if _issubclass(t, _bytes):
                return _bytes.decode(x, "utf-8", "surrogateescape")
            if _issubclass(t, _int):
                return _int.__index__(x)
            try:
                x = _fspath(x)  # a PathLike: its __fspath__ runs here (see module docstring)
            except _BaseException:
                return None
        return None

    def resolve(path, _getcwd=posix.getcwd, _lstat=posix.lstat, _readlink=posix.readlink,
                _Errors=(OSError, ValueError), _str=str):
        """The absolute path with every symlink resolved, using only C-level functions."""
        if not path.startswith("/"):
            path = _getcwd() + "/" + path
        todo = [p for p in path.split("/") if p and p != "."]
        todo.reverse()
        done = []
        hops = 0
        while todo:
            part = todo.pop()
            if part == "..":
                if done:
                    done.pop()
                continue
            here = "/" + "/".join(done + [part])
            try:
                is_link = (_lstat(here).st_mode & 0o170000) == 0o120000
            except _Errors:
                is_link = False
            if not is_link:
                done.append(part)
                continue
            hops += 1
            if hops > 40:
                return None
            try:
                target = _readlink(here)
            except _Errors:
                done.append(part)
                continue
            if target.startswith("/"):
                done = []
            more = [p for p in target.split("/") if p and p != "."]
            more.reverse()
            todo.extend(more)
        return "/" + "/".join(done)

    def inside(r, _wd=wd):
        return r is not None and r.startswith(_wd)

    def read_problem(r, is_open, _own=str(own), _info=proc_info, _dev=dev_allow, _wd=wd, _stat=posix.stat,
                     _roots=read_roots, _secret_files=secret_files, _secret_dirs=secret_dirs,
                     _Errors=(OSError, ValueError)):
        """Why reading (is_open) or listing path `r` is not allowed, or None."""
        if r is None:
            return "unresolvable path"
        rr = r.rstrip("/") + "/"
        if rr.startswith(_wd):
            return None
        if rr == "/proc/" or r.startswith("/proc/"):
            first = r[6:].split("/", 1)[0]
            if first and first != _own and first not in _info:
                return "another process's /proc"
            return None
        if r.startswith("/dev/"):
            return None if r in _dev else "device file"
        if r in _secret_files or r.startswith(_secret_dirs):
            return "secret file"
        if rr.startswith(_roots):
            if is_open:
                try:
                    if (_stat(r).st_mode & 0o170000) == 0o040000:
                        return "directory outside the work dir"  # a dir fd would let dir_fd= paths escape
                except _Errors:
                    pass
            return None
        if not is_open:
            for root in _roots:
                if root.startswith(rr):  # listing an ancestor of a readable tree, such as /
                    return None
        return "file outside the readable trees"

    def fd_inside(fd, _readlink=posix.readlink, _Errors=(OSError, ValueError), _wd=wd):
        try:
            return _readlink("/proc/self/fd/%d" % fd).startswith(_wd)
        except _Errors:
            return False

    def hook(event, args, _type=type, _str=str, _int=int, _tuple=tuple, _len=len, _fast=fast_allow,
             _process=process_events, _network=network_events, _deny=deny_events, _paths=path_events,
             _blocked_imports=blocked_imports, _trusted=trusted, _write_flags=write_flags, _own=own,
             _report=report, _as_path=as_path, _resolve=resolve, _inside=inside, _read_problem=read_problem,
             _fd_inside=fd_inside, _lstat=posix.lstat, _wd=wd, _Errors=(OSError, ValueError), _id=id,
             _ImportError=ImportError, _protected=frozenset()):
        if _type(event) is not _str or _type(args) is not _tuple or event in _fast:
            return
        if event == "open" and _len(args) >= 3:
            p = _as_path(args[0])
            if p is None:
                raise _report("unsupported path object", event, "")
            if _type(p) is _int:
                return
            mode, flags = args[1], args[2]
            writing = (_type(flags) is _int and flags & _write_flags) or (
                _type(mode) is _str and ("w" in mode or "a" in mode or "x" in mode or "+" in mode))
            r = _resolve(p)
            if writing:
                if r != "/dev/null" and not _inside(r):
                    raise _report("file write outside the work dir", event, p)
                return
            problem = _read_problem(r, True)
            if problem:
                raise _report(problem, event, p)
            return
        if event == "import" and _len(args) >= 2:
            name, filename = args[0], args[1]
            if _type(name) is _str and (name in _blocked_imports or name.split(".")[0] in ("ctypes", "cffi")):
                # An ImportError (no "blocked" mark): libraries that try `import ctypes` (numpy) carry on.
                raise _ImportError("rlvr sandbox: importing %s is not allowed" % name, name=name)
            if filename is not None:  # an extension module being loaded
                f = _as_path(filename)
                r = _resolve(f) if _type(f) is _str else None
                if r is None or not r.startswith(_trusted):
                    raise _report("extension module from outside the interpreter", event, _str(f))
            return
        if event in _paths and args:
            p = _as_path(args[0])
            if _type(p) is _int:
                if not _fd_inside(p):
                    raise _report("file change outside the work dir", event, "fd")
                return
            r = _resolve(p) if p is not None else None
            if not _inside(r) and not (event == "os.rmdir" and r is not None and r + "/" == _wd):
                raise _report("file change outside the work dir", event, _str(p))
            return
        if event == "os.rename" and _len(args) >= 2:
            src, dst = _as_path(args[0]), _as_path(args[1])
            for p in (src, dst):
                if _type(p) is not _str or not _inside(_resolve(p)):
                    raise _report("file change outside the work dir", event, _str(p))
            try:
                if (_lstat(src).st_mode & 0o170000) == 0o040000:
                    raise _report("renaming a directory", event, src)
            except _Errors:
                pass
            return
        if event == "os.listdir" or event == "os.scandir":
            p = _as_path(args[0]) if args else "."
            if p is None:
                p = "."
            if _type(p) is _str:
                problem = _read_problem(_resolve(p), False)
                if problem:
                    raise _report(problem, event, p)
            return
        if event in _process:
            raise _report("process creation", event, "")
        if event.startswith("socket.") and event != "socket.gethostname":
            raise _report("socket", event, "")
        if event in _network:
            raise _report("network", event, "")
        if event == "os.kill" or event == "os.killpg":
            pid = args[0] if args else None
            if _type(pid) is _int and (pid == 0 or pid == _own or (event == "os.kill" and pid == -_own)):
                return
            raise _report("signal to another process", event, _str(pid))
        if event == "object.__setattr__" or event == "object.__delattr__":
            if args and _id(args[0]) in _protected:
                raise _report("patching the sandbox", event, "")
            return
        if event.startswith("ctypes."):
            raise _report("ctypes", event, "")
        if event == "rlvr.blocked":
            raise _report(_str(args[0]) if args else "call", "unaudited call", "")
        for denied, kind in _deny:
            if event == denied:
                raise _report(kind, event, "")

    # The hook and its helpers keep their code and defaults (their ids are fixed while the hook lives).
    protected = [hook, report, as_path, resolve, inside, read_problem, fd_inside, _wipe, _watchdog]
    hook.__defaults__ = hook.__defaults__[:-1] + (frozenset(id(f) for f in protected),)
    sys.addaudithook(hook)
'''


# --------------------------------------------------------------------------------------------------------
# The sandbox server ("zygote"). Trusted code only: it forks one child per run, and only the child installs
# the guard and runs the program. Messages to and from the parent are JSON over a SOCK_SEQPACKET socket; the
# child's pipes and memfds arrive with the "run" message as SCM_RIGHTS and the server closes its copies at
# once, so no program's input or output ever passes through the server's memory.
# --------------------------------------------------------------------------------------------------------

_ZYGOTE = r'''
import builtins, gc, io, json, linecache, os, posix, resource, select, signal, socket, sys, time
import _posixsubprocess, _signal, _thread

CFG = json.loads(sys.argv[1])
CTL = socket.socket(fileno=CFG["ctl"])
exec(compile(CFG["guard"], "<rlvr-guard>", "exec"))
ROOT = CFG["root"]
SWEEP_NS = CFG["pid_namespace"]
ME = os.getpid()
MAXFD = max(resource.getrlimit(resource.RLIMIT_NOFILE)[0], 1024)
ENV = CFG["env"]


def _nodump():
    """Make this server non-dumpable (no ptrace, no /proc/<pid>/mem or fd/ for children with our uid); keep
    only a bare function for the children to undo it for themselves, and forget ctypes."""
    try:
        import ctypes
        prctl = ctypes.CDLL(None, use_errno=True).prctl
        prctl(4, 0, 0, 0, 0)  # PR_SET_DUMPABLE 0
    except Exception:
        prctl = None
    for name in [m for m in sys.modules if m == "ctypes" or m.startswith("ctypes.") or m == "_ctypes"]:
        del sys.modules[name]
    return prctl


_PRCTL = _nodump()
gc.collect()


def send(obj):
    CTL.send(json.dumps(obj).encode())


def recv():
    data, fds, flags, _ = socket.recv_fds(CTL, 1 << 20, 8)
    if not data:
        for fd in fds:
            os.close(fd)
        return None, []
    return json.loads(data), fds


def alive_pids():
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        pid = int(name)
        if pid in (1, ME):
            continue
        try:
            with open("/proc/%d/stat" % pid, "rb") as f:
                state = f.read().rsplit(b")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in (b"Z", b"X"):
            out.append(pid)
    return out


def sweep(pid):
    """Kill everything the child left behind; how many processes that was."""
    if not SWEEP_NS:
        try:
            os.killpg(pid, 9)
        except (ProcessLookupError, PermissionError):
            return 0
        return 1
    seen = set()
    for _ in range(200):
        pids = alive_pids()
        if not pids:
            break
        for p in pids:
            seen.add(p)
            try:
                os.kill(p, 9)
            except (ProcessLookupError, PermissionError):
                pass
        time.sleep(0.002)
    return len(seen)


KEEP = frozenset(CFG["keep"])  # read-only interpreter directories bound under /tmp: never walked or removed


def wipe(root):
    """Remove everything under `root` (the server's whole writable area: the next run starts empty), without
    recursion (a program may nest directories deeply). False when something could not be removed."""
    clean = True
    stack = [(root, False)]
    while stack:
        path, emptied = stack.pop()
        if emptied:
            if path != root and not any(k.startswith(path + "/") for k in KEEP):
                try:
                    os.rmdir(path)
                except FileNotFoundError:
                    pass
                except OSError:
                    clean = False
            continue
        stack.append((path, True))
        try:
            entries = list(os.scandir(path))
        except FileNotFoundError:
            continue
        except OSError:
            clean = False
            continue
        for entry in entries:
            p = entry.path
            if p in KEEP:
                continue
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            if is_dir:
                try:
                    os.chmod(p, 0o700)
                except OSError:
                    pass
                stack.append((p, False))
            else:
                try:
                    os.unlink(p)
                except FileNotFoundError:
                    pass
                except OSError:
                    clean = False
    return clean


def read_all(fd):
    chunks = []
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            break
        chunks.append(b)
    return b"".join(chunks)


def child(msg, fds, workdir):
    global _PRCTL
    os.setsid()
    CTL.close()
    if _PRCTL is not None:
        try:
            _PRCTL(4, 1, 0, 0, 0)  # dumpable again: the child's own /proc/self stays readable to it
        except Exception:
            pass
    _PRCTL = None
    gc.collect()
    payload = json.loads(read_all(fds[0]))
    os.dup2(fds[1], 0)
    os.dup2(fds[2], 1)
    os.dup2(fds[3], 2)
    call = bool(msg.get("call"))
    if call:
        os.dup2(fds[4], 3)
        os.dup2(fds[5], 4)
    os.closerange(5 if call else 3, MAXFD)
    drop_uid = msg.get("drop_uid")
    os.mkdir(workdir, 0o700)
    for name, content in payload.get("files", {}).items():
        target = os.path.join(workdir, name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        with open(target, "w", encoding="utf-8") as f:
            f.write(content)
    if drop_uid is not None:
        for top, dirs, files in os.walk(workdir):
            for n in [top] + [os.path.join(top, d) for d in dirs] + [os.path.join(top, f) for f in files]:
                os.chown(n, drop_uid, drop_uid)
    os.chdir(workdir)
    os.environ.clear()
    os.environ.update(ENV)
    os.environ.update({"HOME": workdir, "TMPDIR": workdir, "PWD": workdir})
    sys.stdin = sys.__stdin__ = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)),
                                                 encoding="utf-8")
    sys.stdout = sys.__stdout__ = io.TextIOWrapper(io.BufferedWriter(io.FileIO(1, "w", closefd=False)),
                                                   encoding="utf-8")
    sys.stderr = sys.__stderr__ = io.TextIOWrapper(io.BufferedWriter(io.FileIO(2, "w", closefd=False)),
                                                   encoding="utf-8", errors="backslashreplace",
                                                   line_buffering=True)
    sys.path.insert(0, workdir)
    sys.argv[:] = ["program.py"]
    source = payload["program"]
    limits = [tuple(x) for x in msg["limits"]]
    del payload, fds, msg
    _rlvr_sandbox_guard(workdir, limits, drop_uid, CFG["nproc"], not SWEEP_NS)
    if call:
        run_module(source)
    else:
        run_main(source)


def finish(status):
    """What the interpreter does on the way out, then leave without returning into the server's loop."""
    try:
        t = sys.modules.get("threading")
        if t is not None and hasattr(t, "_shutdown"):
            t._shutdown()
    except BaseException:
        pass
    try:
        import atexit
        atexit._run_exitfuncs()
    except BaseException:
        pass
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:
            status = status or 120
    os._exit(status)


def exit_status(err):
    code = err.code
    if code is None:
        return 0
    if type(code) is int:
        return code & 0xFF
    try:
        print(code, file=sys.stderr)
    except BaseException:
        pass
    return 1


def run_main(source):
    main = type(sys)("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    linecache.cache["<program>"] = (len(source), None, source.splitlines(True), "<program>")
    status = 0
    try:
        code = compile(source, "<program>", "exec")
        del source
        exec(code, main.__dict__)
    except SystemExit as err:
        status = exit_status(err)
    except BaseException:
        try:
            sys.excepthook(*sys.exc_info())
        except BaseException:
            pass
        status = 1
    finish(status)


# -- call mode: the program as a module answering the parent's requests over fds 3 (in) and 4 (out) ---------

BUILTIN_EXCEPTIONS = frozenset(n for n, v in vars(builtins).items()
                               if isinstance(v, type) and issubclass(v, Exception))


def frame_out(obj):
    data = json.dumps(obj, allow_nan=False).encode("utf-8")
    data = len(data).to_bytes(4, "big") + data
    view = memoryview(data)
    while view:
        n = os.write(4, view)
        view = view[n:]


def frame_in():
    head = b""
    while len(head) < 4:
        b = os.read(3, 4 - len(head))
        if not b:
            return None
        head += b
    n = int.from_bytes(head, "big")
    body = []
    while n:
        b = os.read(3, min(n, 1 << 20))
        if not b:
            return None
        body.append(b)
        n -= len(b)
    return json.loads(b"".join(body))


class Unencodable(Exception):
    pass


def encode(x, handles, depth=0):
    if depth > 200:
        raise Unencodable("nested more than 200 levels deep")
    t = type(x)
    if x is None or t is bool or t is str:
        return x
    if t is int:
        return x if -2**1000 < x < 2**1000 else {"__i": hex(x)}
    if t is float:
        return x if x == x and x not in (float("inf"), float("-inf")) else {"__f": repr(x)}
    if t is list:
        return [encode(i, handles, depth + 1) for i in x]
    if t is tuple:
        return {"__t": [encode(i, handles, depth + 1) for i in x]}
    if t is dict:
        return {"__d": [[encode(k, handles, depth + 1), encode(v, handles, depth + 1)] for k, v in x.items()]}
    if t is set or t is frozenset:
        return {"__s" if t is set else "__fs": [encode(i, handles, depth + 1) for i in x]}
    if t is bytes:
        return {"__b": x.hex()}
    if t is complex:
        return {"__c": [encode(x.real, handles), encode(x.imag, handles)]}
    module = typemodule(x)
    if module == "numpy" and hasattr(x, "tolist"):  # numpy scalars and arrays: their plain value
        try:
            return encode(x.tolist(), handles, depth + 1)
        except Unencodable:
            raise
        except BaseException:
            pass
    if module == "collections" and isinstance(x, dict):  # OrderedDict, defaultdict, Counter
        return {"__d": [[encode(k, handles, depth + 1), encode(v, handles, depth + 1)] for k, v in dict.items(x)]}
    handles.append(x)
    return {"__h": len(handles) - 1, "type": typename(x), "own": module in ("solution", "__main__", "?")}


def typemodule(x):
    try:
        return str(type.__dict__["__module__"].__get__(type(x))).split(".")[0]
    except BaseException:
        return "?"


def typename(x):
    try:
        return str(type.__dict__["__name__"].__get__(type(x)))[:80]
    except BaseException:
        return "?"


def decode(x, handles):
    t = type(x)
    if t is list:
        return [decode(i, handles) for i in x]
    if t is not dict:
        return x
    (tag, body), = x.items()
    if tag == "__t":
        return tuple(decode(i, handles) for i in body)
    if tag == "__d":
        return {decode(k, handles): decode(v, handles) for k, v in body}
    if tag == "__s":
        return set(decode(i, handles) for i in body)
    if tag == "__fs":
        return frozenset(decode(i, handles) for i in body)
    if tag == "__b":
        return bytes.fromhex(body)
    if tag == "__i":
        return int(body, 16)
    if tag == "__f":
        return float(body)
    if tag == "__c":
        return complex(body[0], body[1])
    if tag == "__h":
        return handles[body]
    raise ValueError("bad tag")


def describe(err):
    try:
        text = type(err).__name__ + (": " + str(err) if str(err) else "")
    except BaseException:
        text = "exception"
    return text.replace("\n", " ")[:300]


def builtin_base(err):
    for klass in type(err).__mro__:
        if getattr(builtins, getattr(klass, "__name__", ""), None) is klass and klass.__name__ in BUILTIN_EXCEPTIONS:
            return klass.__name__
    return "Exception"


def run_module(source):
    module = type(sys)("solution")
    ns = module.__dict__
    ns["__builtins__"] = builtins
    sys.modules["solution"] = module
    linecache.cache["<solution>"] = (len(source), None, source.splitlines(True), "<solution>")
    handles = []
    try:
        code = compile(source, "<solution>", "exec")
        del source
        exec(code, ns)
    except BaseException as err:
        frame_out({"load_error": describe(err)})
        finish(0)
    table = {}
    for name, value in list(ns.items()):
        if type(name) is not str or name.startswith("__"):
            continue
        if type(value) is type(sys):
            table[name] = {"__m": str(getattr(value, "__name__", ""))[:100]}
            continue
        try:
            scratch = []
            enc = encode(value, scratch)
            if scratch or len(json.dumps(enc)) > 65536:
                raise Unencodable("not small plain data")
        except (Unencodable, ValueError, TypeError, RecursionError):
            handles.append(value)
            enc = {"__h": len(handles) - 1, "type": typename(value), "own": True}
        table[name] = enc
    frame_out({"ready": table})
    while True:
        try:
            request = frame_in()
        except BaseException:
            request = None
        if request is None:
            finish(0)
        reply = serve_one(request, handles)
        try:
            frame_out(reply)
        except (TypeError, ValueError, RecursionError) as err:
            frame_out({"unencodable": describe(err)})


def serve_one(request, handles):
    op = request.get("op")
    try:
        target = handles[request["id"]]
        if op == "call":
            args = decode(request.get("args", []), handles)
            kwargs = decode(request.get("kwargs", {}), handles)
            value = target(*args, **kwargs)
            reply = {"value": encode(value, handles)}
            back = {}
            for i in request.get("back", []):
                if 0 <= i < len(args):
                    back[str(i)] = encode(args[i], handles)
            if back:
                reply["back"] = back
            return reply
        if op == "getattr":
            return {"value": encode(getattr(target, request["name"]), handles)}
        return {"unencodable": "unknown request"}
    except Unencodable as err:
        return {"unencodable": str(err)}
    except RecursionError as err:
        return {"raise": "RecursionError", "type": "RecursionError", "message": str(err)[:300]}
    except BaseException as err:
        return {"raise": builtin_base(err), "type": type(err).__name__[:80], "message": describe(err)}


def run_one(msg, fds, n):
    workdir = ROOT.rstrip("/") + "/w%d" % n
    while any(k == workdir or k.startswith(workdir + "/") for k in KEEP):  # e.g. an interpreter in /tmp/w1/.venv
        workdir += "_"
    pid = os.fork()
    if pid == 0:
        try:
            child(msg, fds, workdir)
        except BaseException as err:
            try:
                os.write(2, ("\n[rlvr-sandbox] internal error: %r\n" % (err,)).encode())
            except BaseException:
                pass
        os._exit(70)
    for fd in fds:
        os.close(fd)
    try:
        pidfd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        pidfd = None
    killed = False
    while True:
        if pidfd is not None:
            ready = select.select([CTL, pidfd], [], [])[0]
            if pidfd in ready:
                break
        else:
            ready = select.select([CTL], [], [], 0.005)[0]
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                break
        if CTL in ready:
            m, extra = recv()
            for fd in extra:
                os.close(fd)
            if m is None:  # the parent is gone: take everything with us
                try:
                    os.killpg(pid, 9)
                except OSError:
                    pass
                sweep(pid)
                wipe(ROOT)
                os._exit(0)
            if m.get("op") == "kill" and not killed:
                killed = True
                try:
                    os.killpg(pid, 9)
                except OSError:
                    pass
                try:
                    os.kill(pid, 9)
                except OSError:
                    pass
    if pidfd is not None:
        os.close(pidfd)
    _, status, usage = os.wait4(pid, 0)
    leftover = sweep(pid)
    clean = wipe(ROOT)
    send({"exit": os.waitstatus_to_exitcode(status), "cpu": usage.ru_utime + usage.ru_stime,
          "leftover": leftover, "dirty": not clean, "id": msg.get("id")})


def main():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    send({"ready": ME, "uid": os.getuid()})
    n = 0
    while True:
        msg, fds = recv()
        if msg is None:
            os._exit(0)
        if msg.get("op") != "run" or len(fds) < 4:
            for fd in fds:
                os.close(fd)
            continue
        n += 1
        run_one(msg, fds, n)


main()
'''


def _base_env() -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "PYTHONHASHSEED": "0",
        "PYTHONDONTWRITEBYTECODE": "1",
        "PYTHONNOUSERSITE": "1",
        "PYTHONIOENCODING": "utf-8",
        "OMP_NUM_THREADS": "1",
        "OPENBLAS_NUM_THREADS": "1",
        "MKL_NUM_THREADS": "1",
        "MALLOC_ARENA_MAX": "2",
    }


# --------------------------------------------------------------------------------------------------------
# Probes (once per process): what isolation this machine allows.
# --------------------------------------------------------------------------------------------------------


@functools.cache
def _netns_prefix() -> tuple[str, ...]:
    """`unshare -n` when it works here (Linux, root, util-linux present); else nothing. Without the OS layer
    only."""
    return (shutil.which("unshare") or "unshare", "-n") if isolation._netns_ok() else ()


def _drop_uid(interpreter: str) -> int | None:
    """`nobody` when the parent is root and the interpreter works for `nobody` (its files are readable)."""
    return NOBODY if isolation.nobody_can_run(interpreter) else None


def os_layer_available(interpreter: str | None = None) -> bool:
    return isolation.os_layer(interpreter or INTERPRETER).available


def isolation_info() -> dict[str, object]:
    return isolation.isolation_info(INTERPRETER)


class SandboxUnavailable(RuntimeError):
    pass


# --------------------------------------------------------------------------------------------------------
# The parent side: warm servers, one run at a time each.
# --------------------------------------------------------------------------------------------------------

_ids = itertools.count(1)


class _Server:
    """One sandbox server process (bubblewrap + `_ZYGOTE`, or `_ZYGOTE` alone without the OS layer)."""

    def __init__(self, interpreter: str, disk_mb: int, guard: bool = True):
        self.interpreter, self.disk_mb, self.guard = interpreter, disk_mb, guard
        self.runs = 0
        self.broken = False
        self.cgroups: list[str] = []
        self.host_root: str | None = None
        layer = isolation.os_layer(interpreter)
        if not layer.available and isolation.mode() == "bwrap":
            raise SandboxUnavailable(f"RLVR_SANDBOX=bwrap, but the OS isolation layer is unavailable: {layer.reason}")
        self.os_layer = layer.available
        self.drop_uid = None if layer.available else _drop_uid(interpreter)
        self.sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            if layer.available:
                root = "/tmp"
                isolation.sweep_stale_cgroups(layer)
                self.cgroups = isolation.make_cgroups(layer, f"rlvr-sandbox-{os.getpid()}-{next(_ids)}")
                prefix = [*isolation.launch_prefix(layer, self.cgroups), *isolation.bwrap_command(layer, disk_mb)]
            else:
                self.host_root = root = os.path.realpath(tempfile.mkdtemp(prefix="rlvr-sandbox-"))
                if self.drop_uid is not None:
                    os.chown(root, self.drop_uid, self.drop_uid)
                prefix = list(_netns_prefix())
            keep = isolation.kept_under_tmp(layer) if layer.available else []
            cfg = {"ctl": theirs.fileno(), "guard": _GUARD if guard else _NO_GUARD, "root": root, "keep": keep,
                   "pid_namespace": layer.available,
                   "env": _base_env(), "nproc": NPROC_LIMIT}
            command = [*prefix, interpreter, "-I", "-B", "-c", _ZYGOTE, json.dumps(cfg)]
            self._log = tempfile.TemporaryFile()
            self.proc = subprocess.Popen(command, pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL,
                                         stdout=subprocess.DEVNULL, stderr=self._log, cwd="/",
                                         env=_base_env(), start_new_session=True)
        except BaseException:
            theirs.close()
            self.close(kill=True)
            raise
        theirs.close()
        self.sock.settimeout(START_TIMEOUT)
        try:
            hello = json.loads(self.sock.recv(1 << 16) or b"null")
        except (OSError, ValueError):
            hello = None
        if not isinstance(hello, dict) or "ready" not in hello:
            why = self._stderr_tail() or f"exit code {self.proc.poll()}"
            self.close(kill=True)
            raise SandboxUnavailable(f"sandbox server failed to start: {why}")
        self.sock.settimeout(None)
        self.uid = hello.get("uid")

    def _stderr_tail(self) -> str:
        try:
            self._log.seek(0)
            return self._log.read()[-2000:].decode("utf-8", "replace").strip()
        except (OSError, ValueError):
            return ""

    def alive(self) -> bool:
        return not self.broken and self.proc.poll() is None

    def send(self, obj: dict[str, Any], fds: list[int] = ()) -> None:  # type: ignore[assignment]
        socket.send_fds(self.sock, [json.dumps(obj).encode()], list(fds))

    def close(self, kill: bool = False) -> None:
        """Stop the server (closing its socket ends it; SIGKILL its process group if it lingers)."""
        self.broken = True
        with contextlib.suppress(OSError):
            self.sock.close()
        proc = getattr(self, "proc", None)
        if proc is not None:
            if not kill:
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=1.0)
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
        if getattr(self, "_log", None) is not None:
            with contextlib.suppress(OSError):
                self._log.close()
        if self.cgroups:
            for _ in range(50):
                isolation.remove_cgroups(self.cgroups)
                if not any(os.path.exists(d) for d in self.cgroups):
                    break
                time.sleep(0.01)
        if self.host_root:
            _remove_tree(self.host_root)

    def forget(self) -> None:
        """In a forked child: drop our copy of the socket without touching the server (the parent owns it)."""
        self.broken = True
        with contextlib.suppress(OSError):
            self.sock.close()


class _Pool:
    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.idle: list[_Server] = []
        self.pid = os.getpid()

    def acquire(self, interpreter: str, disk_mb: int, guard: bool = True) -> _Server:
        key = (interpreter, disk_mb, guard, isolation.os_layer(interpreter).available)
        with self.lock:
            while self.idle:
                for i, server in enumerate(self.idle):
                    if (server.interpreter, server.disk_mb, server.guard, server.os_layer) == key:
                        del self.idle[i]
                        break
                else:
                    break
                if server.alive():
                    return server
                server.close(kill=True)
        return _Server(interpreter, disk_mb, guard)

    def release(self, server: _Server, reusable: bool) -> None:
        if reusable and server.alive() and server.runs < SERVER_MAX_RUNS:
            with self.lock:
                if len(self.idle) < MAX_IDLE_SERVERS:
                    self.idle.append(server)
                    return
        server.close(kill=not reusable)

    def close_all(self) -> None:
        with self.lock:
            idle, self.idle = self.idle, []
        for server in idle:
            server.close()

    def after_fork(self) -> None:
        self.lock = threading.Lock()
        for server in self.idle:
            server.forget()
        self.idle = []
        self.pid = os.getpid()


_POOL = _Pool()
atexit.register(_POOL.close_all)
if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_POOL.after_fork)


def close_servers() -> None:
    """Stop every idle sandbox server of this process (they restart on demand)."""
    _POOL.close_all()


# --------------------------------------------------------------------------------------------------------
# One run.
# --------------------------------------------------------------------------------------------------------


class ChildGone(Exception):
    """The program's process ended (or was killed) while the parent waited for a reply."""


def _memfd(name: str, data: bytes) -> int:
    try:
        fd = os.memfd_create(f"rlvr-{name}", os.MFD_CLOEXEC)
    except (AttributeError, OSError):
        f = tempfile.TemporaryFile()
        fd = os.dup(f.fileno())
        f.close()
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]
    os.lseek(fd, 0, os.SEEK_SET)
    return fd


class Execution:
    """One program run in a warm sandbox server: `call=False` runs it as a script with stdin; `call=True` loads
    it as a module and exchanges length-prefixed JSON frames with it (`receive`, `request`). `finish()` ends
    the run and says what happened. Use through `execution(...)`."""

    def __init__(self, server: _Server, code: str, *, call: bool, stdin: str, files: dict[str, str],
                 timeout: float, cpu: int, memory_mb: int, max_output_bytes: int):
        self.server, self.call_mode = server, call
        self.start = time.monotonic()
        self.deadline = self.start + timeout
        self.cpu_limit = cpu
        self.cap = max_output_bytes
        self.out, self.err, self.resp = bytearray(), bytearray(), bytearray()
        self.frames: deque[bytes] = deque()
        self.pending = bytearray()
        self.report: dict[str, Any] | None = None
        self.reason: str | None = None
        self.anomaly: str | None = None
        self.kill_sent = False
        self.tainted = False  # the caller saw something off: do not reuse the server
        self.resp_closed = False
        self.finished: SandboxResult | None = None
        limits = [
            ("RLIMIT_CORE", 0, 0),
            ("RLIMIT_CPU", cpu, cpu + 1),
            ("RLIMIT_AS", memory_mb * 2**20, memory_mb * 2**20),
            ("RLIMIT_FSIZE", FILE_SIZE_LIMIT_MB * 2**20, FILE_SIZE_LIMIT_MB * 2**20),
            ("RLIMIT_NOFILE", OPEN_FILES_LIMIT, OPEN_FILES_LIMIT),
        ]
        mine: list[int] = []
        theirs: list[int] = []
        try:
            theirs.append(_memfd("payload", json.dumps({"program": code, "files": files}).encode("utf-8")))
            theirs.append(_memfd("stdin", stdin.encode("utf-8")))
            for _ in range(2 + 2 * call):
                r, w = os.pipe()
                mine.append(r)
                mine.append(w)
            out_r, out_w, err_r, err_w = mine[:4]
            theirs += [out_w, err_w]
            if call:
                req_r, req_w, resp_r, resp_w = mine[4:8]
                theirs += [req_r, resp_w]
            server.runs += 1
            server.send({"op": "run", "id": server.runs, "call": call, "limits": limits,
                         "drop_uid": server.drop_uid}, theirs)
        except BaseException:
            for fd in mine + theirs:
                with contextlib.suppress(OSError):
                    os.close(fd)
            raise
        for fd in theirs:
            os.close(fd)
        self.sel = selectors.DefaultSelector()
        self.fds = [out_r, err_r]
        self.sel.register(out_r, selectors.EVENT_READ, "out")
        self.sel.register(err_r, selectors.EVENT_READ, "err")
        self.sel.register(server.sock, selectors.EVENT_READ, "ctl")
        self.req_w: int | None = None
        if call:
            self.fds += [req_w, resp_r]
            self.req_w = req_w
            self.sel.register(resp_r, selectors.EVENT_READ, "resp")
        for fd in self.fds:
            os.set_blocking(fd, False)
        self.open_streams = {"out", "err", "resp"} if call else {"out", "err"}

    # -- the loop ----------------------------------------------------------------------------------------------

    def _pump(self, until: Callable[[], bool], deadline: float) -> bool:
        """Move bytes until `until()` holds (True), or the deadline passes (False)."""
        while not until():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            for key, _ in self.sel.select(left):
                kind = key.data
                if kind == "ctl":
                    self._on_ctl()
                elif kind == "req":
                    self._write_pending()
                else:
                    self._read(key.fd, kind)
        return True

    def _on_ctl(self) -> None:
        try:
            data, fds, _, _ = socket.recv_fds(self.server.sock, 1 << 16, 4)
        except OSError:
            data, fds = b"", []
        for fd in fds:
            os.close(fd)
        if not data:  # the server died (killed by the program, or its cgroup's memory limit)
            self.server.broken = True
            self.sel.unregister(self.server.sock)
            self.report = {"exit": None, "cpu": 0.0, "leftover": 0, "server_died": True}
            return
        msg = json.loads(data)
        if "exit" in msg:
            self.report = msg

    def _read(self, fd: int, kind: str) -> None:
        try:
            chunk = os.read(fd, 1 << 16)
        except BlockingIOError:
            return
        except OSError:
            chunk = b""
        if not chunk:
            self.sel.unregister(fd)
            self.open_streams.discard(kind)
            return
        if kind == "resp":
            if self.resp_closed:  # after an oversized frame the stream cannot be framed any more: drop it
                return
            self.resp += chunk
            while len(self.resp) >= 4:
                n = int.from_bytes(self.resp[:4], "big")
                if n > FRAME_LIMIT:
                    self.anomaly = self.anomaly or f"a {n}-byte message on the call channel (limit {FRAME_LIMIT})"
                    self.kill()
                    self.resp.clear()
                    self.resp_closed = True
                    break
                if len(self.resp) < 4 + n:
                    break
                self.frames.append(bytes(self.resp[4 : 4 + n]))
                del self.resp[: 4 + n]
            return
        buf = self.out if kind == "out" else self.err
        room = self.cap - len(buf)
        buf += chunk[: max(room, 0)]
        if len(chunk) > room and self.reason is None:
            self.reason = "output limit"
            self.kill()

    def _write_pending(self) -> None:
        assert self.req_w is not None
        try:
            n = os.write(self.req_w, self.pending)
        except BlockingIOError:
            return
        except OSError:  # the child closed its end (it exited)
            self.pending.clear()
            n = 0
        del self.pending[:n]
        if not self.pending:
            self.sel.unregister(self.req_w)

    def kill(self) -> None:
        if not self.kill_sent and not self.server.broken:
            self.kill_sent = True
            try:
                self.server.send({"op": "kill"})
            except OSError:
                self.server.broken = True

    # -- call mode -----------------------------------------------------------------------------------------

    def receive(self) -> bytes:
        """The next frame from the program's process; raises ChildGone with the reason when there is none."""
        ended = self._pump(lambda: bool(self.frames) or self.report is not None or self.reason is not None
                           or "resp" not in self.open_streams, self.deadline)
        if self.frames:
            return self.frames.popleft()
        if not ended:
            self.reason = self.reason or "timeout"
            self.kill()
        elif self.report is None and self.reason is None:
            # end of file on the call channel: the process is ending, or the program closed the channel
            self._pump(lambda: self.report is not None, min(self.deadline, time.monotonic() + 0.5))
            if self.report is None:
                self.anomaly = self.anomaly or "the program closed its call channel"
                self.kill()
        raise ChildGone(self.reason or "exited")

    def request(self, payload: dict[str, Any]) -> bytes:
        """Send one request frame and wait for the reply frame."""
        if self.report is not None or self.reason is not None:
            raise ChildGone(self.reason or "exited")
        data = json.dumps(payload, allow_nan=False).encode("utf-8")
        first = not self.pending
        self.pending += len(data).to_bytes(4, "big") + data
        if first and self.req_w is not None:
            self.sel.register(self.req_w, selectors.EVENT_WRITE, "req")
        return self.receive()

    # -- the end -------------------------------------------------------------------------------------------

    def finish(self) -> SandboxResult:
        if self.finished is not None:
            return self.finished
        if self.req_w is not None:
            with contextlib.suppress(KeyError, ValueError):
                self.sel.unregister(self.req_w)
            with contextlib.suppress(OSError):
                os.close(self.req_w)
            self.fds.remove(self.req_w)
            self.req_w = None
        if not self._pump(lambda: self.report is not None, self.deadline):
            self.reason = self.reason or "timeout"
        if self.report is None:
            self.kill()
            self._pump(lambda: self.report is not None, time.monotonic() + KILL_GRACE)
        if self.report is None:  # the server did not answer: replace it
            self.server.broken = True
            self.report = {"exit": None, "cpu": 0.0, "leftover": 0, "server_died": True}
        # what the program wrote before it ended (every writer is gone once the server has swept)
        self._pump(lambda: not self.open_streams or self.reason == "output limit",
                   time.monotonic() + (0.5 if not self.server.broken else 0.05))
        status = self.report.get("exit")
        cpu = float(self.report.get("cpu") or 0.0)
        stdout = self.out.decode("utf-8", "replace")
        stderr = self.err.decode("utf-8", "replace")
        leftover = int(self.report.get("leftover") or 0)
        if self.report.get("server_died") and self.reason is None:
            self.reason = "sandbox server died during the run"
        killed = self.reason or _exit_reason(status, stderr, cpu, self.cpu_limit)
        self.finished = SandboxResult(
            ok=status == 0 and killed is None,
            exit_code=status,
            stdout=stdout,
            stderr=stderr,
            timed_out=self.reason == "timeout",
            killed_reason=killed,
            seconds=time.monotonic() - self.start,
            leftover=leftover,
            os_layer=self.server.os_layer,
        )
        return self.finished

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.sel.unregister(self.server.sock)
        self.sel.close()
        for fd in self.fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self.fds = []


@contextlib.contextmanager
def execution(code: str, *, call: bool = False, stdin: str = "", timeout: float = 5.0,
              cpu_seconds: float | None = None, memory_mb: int = 512, max_output_bytes: int = 64_000,
              files: dict[str, str] | None = None, disk_mb: int = isolation.DISK_MB) -> Iterator[Execution]:
    """A run of `code` in a warm sandbox server; see `Execution`. Raises SandboxUnavailable when no server
    can start. The server is reused afterwards only if the run ended cleanly: the server reported, nothing
    was left behind, and the caller did not `taint` it."""
    _check_args(code, timeout, memory_mb, max_output_bytes)
    files = _check_files(files or {})
    cpu = max(1, math.ceil(cpu_seconds) if cpu_seconds is not None else math.ceil(timeout) + 1)
    for attempt in range(2):  # a warm server may have died while idle: then once more with a fresh one
        server = _POOL.acquire(INTERPRETER, disk_mb, GUARD)
        try:
            run = Execution(server, code, call=call, stdin=stdin, files=files, timeout=timeout, cpu=cpu,
                            memory_mb=memory_mb, max_output_bytes=max_output_bytes)
            break
        except OSError:
            _POOL.release(server, False)
            if attempt:
                raise
        except BaseException:
            _POOL.release(server, False)
            raise
    reusable = False
    try:
        yield run
        result = run.finish()
        reusable = (not server.broken and run.report is not None and not run.report.get("server_died")
                    and not run.report.get("dirty")
                    and result.leftover == 0 and run.anomaly is None and not run.tainted
                    and not (result.killed_reason or "").startswith("blocked"))
    finally:
        if run.finished is None:
            run.kill()
            with contextlib.suppress(Exception):
                run.finish()
        run.close()
        _POOL.release(server, reusable)


def _check_args(code: Any, timeout: float, memory_mb: int, max_output_bytes: int) -> None:
    if not isinstance(code, str):
        raise ValueError(f"run_python: code must be a str; got {type(code).__name__}")
    if not timeout > 0:
        raise ValueError(f"run_python: timeout must be > 0 seconds; got {timeout}")
    if memory_mb < 32:
        raise ValueError(f"run_python: memory_mb must be >= 32 (the interpreter needs it); got {memory_mb}")
    if max_output_bytes < 1:
        raise ValueError(f"run_python: max_output_bytes must be >= 1; got {max_output_bytes}")


def _check_files(files: dict[str, str]) -> dict[str, str]:
    out = {}
    for name, content in files.items():
        parts = [p for p in str(name).split("/") if p not in ("", ".")]
        if str(name).startswith("/") or ".." in parts or not parts:
            raise ValueError(f"run_python: files key {name!r} must be a relative path inside the work dir")
        out["/".join(parts)] = str(content)
    return out


def run_python(
    code: str,
    *,
    stdin: str = "",
    timeout: float = 5.0,
    cpu_seconds: float | None = None,
    memory_mb: int = 512,
    max_output_bytes: int = 64_000,
    files: dict[str, str] | None = None,
    disk_mb: int = isolation.DISK_MB,
) -> SandboxResult:
    """Run `code` as a Python program in the sandbox and return what happened. Never raises for anything
    the program does; raises ValueError only for bad arguments.

    `timeout` is wall-clock seconds; `cpu_seconds` (default: the timeout rounded up, plus one second) is the
    RLIMIT_CPU. The default sits above the wall clock so a single-threaded busy loop always ends as a timeout
    (equal limits race); the CPU limit is the backstop for programs that burn CPU on several threads;
    `memory_mb` the address-space limit; `max_output_bytes` caps stdout and stderr each; `files` are
    written into the work dir (relative paths) before the program starts; `disk_mb` is the size of the
    private /tmp holding the work dir (with the OS layer).
    """
    start = time.monotonic()
    try:
        with execution(code, stdin=stdin, timeout=timeout, cpu_seconds=cpu_seconds, memory_mb=memory_mb,
                       max_output_bytes=max_output_bytes, files=files, disk_mb=disk_mb) as run:
            return run.finish()
    except (SandboxUnavailable, OSError) as err:  # e.g. EAGAIN under a process limit: a failed run
        return SandboxResult(False, None, "", "", False, f"sandbox failed to start: {err}",
                             time.monotonic() - start)


def _exit_reason(status: int | None, stderr: str, cpu_used: float, cpu_limit: int) -> str | None:
    if status is not None and status < 0:
        sig = -status
        if sig == signal.SIGXCPU or (sig == signal.SIGKILL and cpu_used >= cpu_limit - 0.05):
            return "cpu limit"
        if sig == signal.SIGXFSZ:
            return "file size limit"
        try:
            name = signal.Signals(sig).name
        except ValueError:
            name = f"signal {sig}"
        return f"killed by {name}"
    i = stderr.find(BLOCK_MARKER)
    if i >= 0:
        return "blocked: " + stderr[i + len(BLOCK_MARKER):].split("\n", 1)[0].strip()
    if status:
        tail = stderr.rstrip().rsplit("\n", 1)[-1]
        if tail.startswith("MemoryError") or "Cannot allocate memory" in tail:
            return "memory limit"
        if "File too large" in tail:
            return "file size limit"
        if "No space left on device" in tail:
            return "disk quota"
    return None


def _remove_tree(path: str) -> None:
    """Remove a directory tree even if a program made parts of it unreadable."""

    def fix(func: Any, p: str, _exc: Any) -> None:
        try:
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=fix)
