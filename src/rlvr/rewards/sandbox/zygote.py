"""The sandbox server ("zygote") program: the source the parent starts as `python -I -B -c ZYGOTE_SOURCE cfg`.

Trusted code only: it forks one child per run, and only the child installs the guard and runs the program
(`child.py`). Messages to and from the parent are JSON over a SOCK_SEQPACKET socket; the child's pipes and
memfds arrive with the "run" message as SCM_RIGHTS and the server closes its copies at once, so no program's
input or output ever passes through the server's memory. When a child ends the server kills whatever it left in
the PID namespace, wipes the writable area and reports the exit status and CPU time.
"""

from rlvr.rewards.sandbox.child import CHILD_SOURCE

# Start-up, the control socket, and the sweep and wipe after each run.
_HEAD = r'''
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
'''

# One run (fork, wait, kill on request, sweep, wipe, report) and the request loop.
_LOOP = r'''
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
                leave()
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


def leave():
    """Wipe the writable area and, when it is a directory of the host (no OS layer), remove it too: nothing of
    a server outlives its parent."""
    wipe(ROOT)
    if CFG.get("remove_root"):
        try:
            os.rmdir(ROOT)
        except OSError:
            pass
    os._exit(0)


def main():
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    send({"ready": ME, "uid": os.getuid()})
    n = 0
    while True:
        msg, fds = recv()
        if msg is None:  # the parent is gone (closed the socket, or was killed)
            leave()
        if msg.get("op") != "run" or len(fds) < 4:
            for fd in fds:
                os.close(fd)
            continue
        n += 1
        run_one(msg, fds, n)


main()
'''

ZYGOTE_SOURCE = _HEAD + "\n" + CHILD_SOURCE + "\n" + _LOOP
