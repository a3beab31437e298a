"""The Python guard: the source of `_rlvr_sandbox_guard(workdir, limits, drop_uid, nproc, watchdog)`.

The sandbox server `exec`s this text at start-up (it is shipped as a string inside the server's config, never
imported) and every forked child calls the function just before it compiles the program: it sets the rlimits,
drops to `nobody` when asked, replaces unaudited C functions, starts the orphan watchdog and installs the audit
hook. What it blocks, and why it is a tripwire rather than a proof, is in `rlvr.rewards.sandbox`.
"""

# How the guard's first report of a kind starts on stderr; `limits.exit_reason` turns it into `killed_reason`.
BLOCK_MARKER = "[rlvr-sandbox] blocked: "
# Tests only (`sandbox.GUARD = False`): the rlimits without the guard, to show what the OS layer holds alone.
NO_GUARD_SOURCE = "def _rlvr_sandbox_guard(workdir, limits, drop_uid, nproc, watchdog):\n" \
                  "    import resource\n" \
                  "    for name, soft, hard in limits:\n" \
                  "        resource.setrlimit(getattr(resource, name), (soft, hard))\n"

# --------------------------------------------------------------------------------------------------------
# The guard: runs in the child before the program. It only uses names it binds itself (default arguments),
# so a program that rebinds module attributes or builtins cannot change what the hook checks.
# --------------------------------------------------------------------------------------------------------

GUARD_SOURCE = r'''
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
            # Not even an ancestor of a readable tree (/, /tmp when the interpreter lives in /tmp/x/.venv):
            # listing it would show the host's file names, and walking it could use up the time limit
            # before it reaches a blocked directory.
            return "directory listing outside the readable trees"
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
