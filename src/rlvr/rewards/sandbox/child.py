"""What a forked child of the sandbox server does, as source text: part of the server program (`zygote.py`).

`child(msg, fds, workdir)` makes the work dir and the program's files, moves the pipes it was sent to fds 0-2
(and 3-4 for the call channel), clears the environment, calls the guard and then either runs the program as
`__main__` (`run_main`, a script with stdin) or loads it as the module `solution` and answers the parent's
requests (`run_module`/`serve_one`) in length-prefixed JSON frames whose value tags `rlvr.rewards.judge.channel`
decodes on the trusted side. The text is spliced into the server's source, so it uses the server's globals
(`CFG`, `CTL`, `ENV`, `MAXFD`, `SWEEP_NS`, `_PRCTL`, `read_all`) and the guard function `exec`ed there.
"""

CHILD_SOURCE = r'''
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
        if op == "iter":  # a test iterates a program object: the iterator stays here, its items cross one by one
            return {"value": encode(iter(target), handles)}
        if op == "next":
            try:
                value = next(target)
            except StopIteration:
                return {"stop": True}
            return {"value": encode(value, handles)}
        if op == "len":
            return {"value": len(target)}  # len() itself makes it an exact int
        return {"unencodable": "unknown request"}
    except Unencodable as err:
        return {"unencodable": str(err)}
    except RecursionError as err:
        return {"raise": "RecursionError", "type": "RecursionError", "message": str(err)[:300]}
    except BaseException as err:
        return {"raise": builtin_base(err), "type": type(err).__name__[:80], "message": describe(err)}
'''
