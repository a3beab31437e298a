"""Run untrusted Python (model-written code) in a child process that cannot hurt the run.

`run_python(code)` starts `sys.executable` in a fresh session with a private temporary working directory
(removed afterwards), a scrubbed environment and a guard that runs before the program:

1. Resource limits: wall-clock timeout (enforced by the parent), RLIMIT_CPU, RLIMIT_AS (memory),
   RLIMIT_FSIZE, RLIMIT_NOFILE, no core dumps; RLIMIT_NPROC once the child runs as `nobody`.
2. Kernel isolation where the OS allows it: a new network namespace (`unshare -n`, root only) and, when
   the parent is root and the interpreter is readable by everyone, a drop to uid/gid 65534 (`nobody`).
3. An audit hook (`sys.addaudithook`, installed before the program is compiled) that raises
   PermissionError for sockets, process creation, signals to other processes, foreign extension modules,
   writes/deletes/renames/chmods outside the work dir, reads outside the interpreter's and the system's
   trees (so not the parent's home with its tokens), other processes' /proc entries, devices, changing
   rlimits, and patching the guard. The first block of each kind is reported on stderr as a
   `[rlvr-sandbox] blocked: ...` line, which becomes `SandboxResult.killed_reason`. Imports of ctypes,
   cffi, sqlite3 and a few other C modules fail with ImportError (libraries that probe for them carry on).
4. stdout/stderr read incrementally and capped; over the cap the child is killed ("output limit").
5. At the end the whole process group is SIGKILLed, even on success; a watchdog thread in the child
   deletes the work dir and kills its group if the parent dies first (a verifier worker killed on timeout).

The audit hook is a tripwire, not a proof. Code in the same interpreter can get around it: e.g.
`_imp.create_builtin` makes fresh copies of the C functions the guard replaced, a lying `__fspath__` can
show the hook one path and the OS another, and frame introspection reaches the harness's locals. Without
privilege dropping (root with an interpreter `nobody` cannot read) the kernel enforces only the rlimits,
the network namespace and the final group kill.
"""

from __future__ import annotations

import functools
import math
import os
import secrets
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

# The interpreter the child runs; tests may point it elsewhere (it must be the same Python version family).
INTERPRETER = sys.executable
NOBODY = 65534
FILE_SIZE_LIMIT_MB = 16
OPEN_FILES_LIMIT = 256
NPROC_LIMIT = 64  # only applied after dropping to `nobody` (root ignores RLIMIT_NPROC)
BLOCK_MARKER = "[rlvr-sandbox] blocked: "


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


# --------------------------------------------------------------------------------------------------------
# The guard: runs in the child before the program. It only uses names it binds itself (default arguments),
# so a program that rebinds module attributes or builtins cannot change what the hook checks.
# --------------------------------------------------------------------------------------------------------

_GUARD = r'''
def _rlvr_sandbox_guard(workdir, program_path, limits, drop_uid, nproc):
    import builtins, linecache, os, posix, resource, sys, time, _thread, _posixsubprocess, _signal

    with open(program_path, encoding="utf-8") as f:
        source = f.read()
    os.unlink(program_path)  # the program cannot read its own harness from disk

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

    main = type(sys)("__main__")
    main.__dict__["__builtins__"] = builtins
    sys.modules["__main__"] = main
    sys.argv[:] = ["program.py"]
    linecache.cache["<program>"] = (len(source), None, source.splitlines(True), "<program>")
    code = compile(source, "<program>", "exec")
    del source, f, hook, report, resolve, as_path, read_problem, fd_inside, inside, protected, _wipe, _watchdog
    exec(code, main.__dict__)
'''


def _guard_command(workdir: str, program_path: str, limits: list[tuple[str, int, int]],
                   drop_uid: int | None) -> str:
    return _GUARD + f"\n_rlvr_sandbox_guard({workdir!r}, {program_path!r}, {limits!r}, {drop_uid!r}, {NPROC_LIMIT!r})\n"


# --------------------------------------------------------------------------------------------------------
# Probes (once per process): what kernel isolation this machine allows.
# --------------------------------------------------------------------------------------------------------


@functools.cache
def _netns_prefix() -> tuple[str, ...]:
    """`unshare -n` when it works here (Linux, root, util-linux present); else nothing."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0:
        return ()
    unshare = shutil.which("unshare") or ("/usr/bin/unshare" if os.path.exists("/usr/bin/unshare") else None)
    if not unshare:
        return ()
    try:
        ok = subprocess.run([unshare, "-n", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.SubprocessError):
        ok = False
    return (unshare, "-n") if ok else ()


@functools.cache
def _drop_uid(interpreter: str) -> int | None:
    """`nobody` when the parent is root and the interpreter works for `nobody` (its files are readable)."""
    if not hasattr(os, "geteuid") or os.geteuid() != 0:
        return None
    try:
        done = subprocess.run(
            [interpreter, "-s", "-B", "-c", "import os, resource, linecache, json, _thread, _posixsubprocess"],
            user=NOBODY, group=NOBODY, extra_groups=[], cwd="/", env=_base_env("/"), capture_output=True,
            timeout=20)
    except (OSError, subprocess.SubprocessError, ValueError):
        return None
    return NOBODY if done.returncode == 0 else None


def _base_env(workdir: str) -> dict[str, str]:
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
        "HOME": workdir,
        "TMPDIR": workdir,
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
# The parent side.
# --------------------------------------------------------------------------------------------------------


def run_python(
    code: str,
    *,
    stdin: str = "",
    timeout: float = 5.0,
    cpu_seconds: float | None = None,
    memory_mb: int = 512,
    max_output_bytes: int = 64_000,
    files: dict[str, str] | None = None,
) -> SandboxResult:
    """Run `code` as a Python program in the sandbox and return what happened. Never raises for anything
    the program does; raises ValueError only for bad arguments.

    `timeout` is wall-clock seconds; `cpu_seconds` (default: the timeout rounded up, plus one second) is the
    RLIMIT_CPU. The default sits above the wall clock so a single-threaded busy loop always ends as a timeout
    (equal limits race); the CPU limit is the backstop for programs that burn CPU on several threads;
    `memory_mb` the address-space limit; `max_output_bytes` caps stdout and stderr each; `files` are
    written into the work dir (relative paths) before the program starts.
    """
    if not isinstance(code, str):
        raise ValueError(f"run_python: code must be a str; got {type(code).__name__}")
    if not timeout > 0:
        raise ValueError(f"run_python: timeout must be > 0 seconds; got {timeout}")
    if memory_mb < 32:
        raise ValueError(f"run_python: memory_mb must be >= 32 (the interpreter needs it); got {memory_mb}")
    if max_output_bytes < 1:
        raise ValueError(f"run_python: max_output_bytes must be >= 1; got {max_output_bytes}")
    cpu = max(1, math.ceil(cpu_seconds) if cpu_seconds is not None else math.ceil(timeout) + 1)
    limits = [
        ("RLIMIT_CORE", 0, 0),
        ("RLIMIT_CPU", cpu, cpu + 1),
        ("RLIMIT_AS", memory_mb * 2**20, memory_mb * 2**20),
        ("RLIMIT_FSIZE", FILE_SIZE_LIMIT_MB * 2**20, FILE_SIZE_LIMIT_MB * 2**20),
        ("RLIMIT_NOFILE", OPEN_FILES_LIMIT, OPEN_FILES_LIMIT),
    ]
    interpreter = INTERPRETER
    drop_uid = _drop_uid(interpreter)
    start = time.monotonic()
    workdir = os.path.realpath(tempfile.mkdtemp(prefix="rlvr-sandbox-"))
    proc: subprocess.Popen[bytes] | None = None
    try:
        _write_files(workdir, files or {}, drop_uid)
        program_path = os.path.join(workdir, f".rlvr-program-{secrets.token_hex(8)}.py")
        fd = os.open(program_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(code)
        if drop_uid is not None:
            os.chown(workdir, drop_uid, drop_uid)
        command = [*_netns_prefix(), interpreter, "-s", "-B", "-c",
                   _guard_command(workdir, program_path, limits, drop_uid)]
        with tempfile.TemporaryFile() as stdin_file:
            stdin_file.write(stdin.encode("utf-8"))
            stdin_file.seek(0)
            try:
                proc = subprocess.Popen(command, stdin=stdin_file, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, cwd=workdir, env=_base_env(workdir),
                                        start_new_session=True, close_fds=True)
            except OSError as err:  # e.g. EAGAIN under a process limit: a failed run, not a dead caller
                return SandboxResult(False, None, "", "", False, f"sandbox failed to start: {err}",
                                     time.monotonic() - start)
        deadline = start + timeout
        out, err, reason = _pump(proc, deadline, max_output_bytes)
        if reason is None and _wait_for_exit(proc, deadline) is False:
            reason = "timeout"
        status, cpu_used = _kill_and_reap(proc)
    finally:
        if proc is not None:
            for pipe in (proc.stdout, proc.stderr):
                if pipe is not None:
                    pipe.close()
            if proc.returncode is None:  # an exception above: still never leave the group behind
                _kill_and_reap(proc)
        _remove_tree(workdir)
    stdout = out.decode("utf-8", "replace")
    stderr = err.decode("utf-8", "replace")
    killed = reason or _exit_reason(status, stderr, cpu_used, cpu)
    return SandboxResult(
        ok=status == 0 and killed is None,
        exit_code=status,
        stdout=stdout,
        stderr=stderr,
        timed_out=reason == "timeout",
        killed_reason=killed,
        seconds=time.monotonic() - start,
    )


def _write_files(workdir: str, files: dict[str, str], drop_uid: int | None) -> None:
    for name, content in files.items():
        rel = Path(name)
        if rel.is_absolute() or ".." in rel.parts or not rel.parts:
            raise ValueError(f"run_python: files key {name!r} must be a relative path inside the work dir")
        target = Path(workdir, rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content, encoding="utf-8")
        if drop_uid is not None:
            for p in [target, *target.relative_to(workdir).parents]:
                os.chown(Path(workdir, p), drop_uid, drop_uid)


def _pump(proc: subprocess.Popen[bytes], deadline: float, cap: int) -> tuple[bytes, bytes, str | None]:
    """Read stdout/stderr until both close, the deadline passes ("timeout") or one overflows ("output limit")."""
    assert proc.stdout is not None and proc.stderr is not None
    bufs = {"stdout": bytearray(), "stderr": bytearray()}
    reason = None
    with selectors.DefaultSelector() as sel:
        for name, pipe in (("stdout", proc.stdout), ("stderr", proc.stderr)):
            os.set_blocking(pipe.fileno(), False)
            sel.register(pipe, selectors.EVENT_READ, name)
        while sel.get_map() and reason is None:
            left = deadline - time.monotonic()
            if left <= 0:
                reason = "timeout"
                break
            for key, _ in sel.select(left):
                try:
                    chunk = os.read(key.fd, 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    sel.unregister(key.fileobj)
                    continue
                buf = bufs[key.data]
                room = cap - len(buf)
                buf += chunk[: max(room, 0)]
                if len(chunk) > room:
                    reason = "output limit"
                    break
    return bytes(bufs["stdout"]), bytes(bufs["stderr"]), reason


def _wait_for_exit(proc: subprocess.Popen[bytes], deadline: float) -> bool:
    """Wait until the child exits WITHOUT reaping it (its pid keeps the process group alive for the kill)."""
    delay = 0.001
    while True:
        try:
            if hasattr(os, "waitid"):
                if os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                    return True
            elif proc.poll() is not None:
                return True
        except ChildProcessError:
            return True
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(delay, left))
        delay = min(delay * 2, 0.02)


def _kill_and_reap(proc: subprocess.Popen[bytes]) -> tuple[int | None, float]:
    """SIGKILL the child's whole process group, reap the child; (exit code, CPU seconds it used)."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # pgid == pid: start_new_session=True
    except (ProcessLookupError, PermissionError):
        pass
    if proc.returncode is not None:
        return proc.returncode, 0.0
    try:
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        return proc.returncode, usage.ru_utime + usage.ru_stime
    except ChildProcessError:
        proc.returncode = proc.wait()
        return proc.returncode, 0.0


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
    return None


def _remove_tree(path: str) -> None:
    """Remove the work dir even if the program made parts of it unreadable."""

    def fix(func, p, _exc):
        try:
            os.chmod(os.path.dirname(p), 0o700)
            os.chmod(p, 0o700)
            func(p)
        except OSError:
            pass

    shutil.rmtree(path, onerror=fix)
