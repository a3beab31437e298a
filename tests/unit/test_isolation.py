"""The OS isolation layer on its own (the Python guard switched off, as if a program had got around it), the
warm servers, and how a run reports its isolation (start-up log, versions.json)."""

from __future__ import annotations

import ast
import logging
import multiprocessing
import os
import sys
from pathlib import Path

import pytest

from rlvr.config import ConfigError
from rlvr.rewards import isolation, sandbox
from rlvr.rewards.judge import run_test
from rlvr.rewards.sandbox import run_python

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox targets Linux")
LAYER = isolation.os_layer(sandbox.INTERPRETER) if sys.platform.startswith("linux") else None
needs_os = pytest.mark.skipif(LAYER is None or not LAYER.available,
                              reason=f"no OS isolation layer here: {LAYER.reason if LAYER else ''}")
Q = {"timeout": 3.0, "memory_mb": 256}


@pytest.fixture
def no_guard(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLVR_SANDBOX", "auto")
    monkeypatch.setattr(sandbox, "GUARD", False)


@needs_os
def test_the_host_is_invisible_and_read_only(no_guard: None, tmp_path: Path) -> None:
    secret = tmp_path / "token"
    secret.write_text("hf_secret")
    r = run_python(f"print(open({str(secret)!r}).read())", **Q)
    assert "hf_secret" not in r.stdout and "No such file or directory" in r.stderr
    r = run_python("import os\nprint(' '.join(os.listdir('/')))", **Q)
    interpreter_tops = {b.split("/")[1] for b in LAYER.binds}  # where the interpreter lives (read-only)
    system = {"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "proc", "dev", "tmp"}
    assert set(r.stdout.split()) <= system | interpreter_tops, r.stdout
    for path in ("/usr/pwned", "/pwned", "/dev/pwned", "/etc/pwned"):
        r = run_python(f"open({path!r}, 'w')", **Q)
        assert "Read-only file system" in r.stderr or "No such file" in r.stderr, (path, r.stderr)
    r = run_python("print(open('/etc/shadow').read())", **Q)
    assert r.exit_code == 1 and "No such file or directory" in r.stderr


@needs_os
def test_disk_quota_no_network_no_capabilities(no_guard: None) -> None:
    r = run_python("for i in range(100):\n    open(f'/tmp/f{i}', 'wb').write(b'x' * 10**6)", disk_mb=8, **Q)
    assert r.killed_reason == "disk quota", r
    r = run_python("import socket\nsocket.create_connection(('1.1.1.1', 53), timeout=1)", **Q)
    assert r.exit_code == 1 and ("unreachable" in r.stderr or "Network" in r.stderr), r.stderr
    r = run_python("print(open('/proc/self/status').read().split('CapEff:')[1].split()[0])", **Q)
    assert r.stdout.strip() == "0000000000000000"


@needs_os
def test_nothing_outlives_a_run_and_nothing_carries_over(no_guard: None) -> None:
    r = run_python("import os, time\nif os.fork() == 0:\n    time.sleep(60)\nprint('parent done')", **Q)
    assert r.ok and r.leftover == 1
    r = run_python("import os\nprint(sorted(int(p) for p in os.listdir('/proc') if p.isdigit()), os.getpid())", **Q)
    pids, me = r.stdout.rsplit(" ", 1)
    assert pids == f"[1, 2, {int(me)}]"  # the namespace's init, the server, this run: nothing else
    run_python("open('/tmp/stash', 'w').write('inputs of an earlier test')", **Q)
    r = run_python("import os\nprint(os.listdir('/tmp'))", **Q)
    assert "stash" not in r.stdout
    # the judge fails a test whose program leaves a process behind, even if the answer is right
    program = "import os, time\nif os.fork() == 0:\n    time.sleep(60)\ndef f(x):\n    return 3 * x + 2\n"
    outcome = run_test(program, "assert f(1) == 5", **Q)
    assert outcome.flag == "anomaly" and "outlived the program" in outcome.reason


@needs_os
def test_junk_that_cannot_be_wiped_retires_the_server(no_guard: None) -> None:
    sandbox.close_servers()
    deep = ("import os\nfor i in range(2500):\n    os.mkdir('d')\n    os.chdir('d')\n"
            "open('f', 'w').write('x' * 10**6)")  # paths past PATH_MAX: the server cannot remove them
    assert run_python(deep, timeout=10, memory_mb=256).ok
    assert sandbox._POOL.idle == []  # retired, not reused
    r = run_python("import os\nprint(sorted(os.listdir('/tmp')))", **Q)
    # a fresh server: only this run's work dir (and the mount point of an interpreter kept under /tmp, when the
    # virtualenv lives there, e.g. a clone in /tmp/x)
    mounts = {Path(p).relative_to("/tmp").parts[0]
              for p in isolation.kept_under_tmp(isolation.os_layer(sandbox.INTERPRETER))}
    assert sorted(set(ast.literal_eval(r.stdout)) - mounts) == ["w1"], r.stdout


@needs_os
def test_an_interpreter_under_tmp_is_bound_over_the_private_tmp(monkeypatch: pytest.MonkeyPatch,
                                                                tmp_path: Path) -> None:
    import subprocess

    venv = tmp_path / "venv"  # e.g. a CI job that makes its virtualenv in /tmp
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    monkeypatch.setattr(sandbox, "INTERPRETER", str(venv / "bin" / "python"))
    monkeypatch.setenv("RLVR_SANDBOX", "auto")
    layer = isolation.os_layer(sandbox.INTERPRETER)
    assert layer.available and str(venv.resolve()) in isolation.kept_under_tmp(layer)
    for _ in range(2):  # the server's wipe of /tmp leaves the interpreter alone
        r = run_python("import sys\nprint(sys.prefix)", **Q)
        assert r.stdout.strip() == str(venv.resolve()), r
    r = run_python(f"open({str(venv / 'pwned')!r}, 'w')", **Q)
    assert not r.ok and not (venv / "pwned").exists()


@needs_os
def test_work_dirs_avoid_an_interpreter_kept_under_tmp(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLVR_SANDBOX", "auto")
    monkeypatch.setattr(isolation, "kept_under_tmp", lambda layer: ["/tmp/w1/venv"])  # as if cloned into /tmp/w1
    sandbox.close_servers()
    try:
        r = run_python("import os\nprint(os.getcwd())", **Q)
        assert r.ok and r.stdout == "/tmp/w1_\n", r
    finally:
        sandbox.close_servers()


@needs_os
def test_killing_the_server_costs_one_run(no_guard: None) -> None:
    r = run_python("import os\nos.kill(os.getppid(), 9)\nimport time\ntime.sleep(5)", **Q)
    assert r.killed_reason == "sandbox server died during the run"
    assert run_python("print(1)", **Q).stdout == "1\n"
    r = run_python("import os\nos.kill(1, 9)\nprint('still here')", **Q)  # init of the PID namespace ignores it
    assert r.stdout == "still here\n"


@needs_os
def test_server_runs_in_its_own_cgroup_when_available(monkeypatch: pytest.MonkeyPatch) -> None:
    if not LAYER.cgroup:
        pytest.skip("no cgroup limits on this machine")
    monkeypatch.setenv("RLVR_SANDBOX", "auto")
    sandbox.close_servers()
    assert run_python("print(1)", **Q).ok
    server = sandbox._POOL.idle[-1]
    assert server.cgroups and all(Path(d).is_dir() for d in server.cgroups)
    assert "rlvr-sandbox-" in Path(f"/proc/{server.proc.pid}/cgroup").read_text()
    sandbox.close_servers()
    assert not any(Path(d).exists() for d in server.cgroups)


def test_warm_servers_are_reused_and_replaced_after_a_bad_run(layer: str) -> None:
    sandbox.close_servers()
    run_python("print(1)", **Q)
    first = sandbox._POOL.idle[-1]
    run_python("print(2)", **Q)
    assert sandbox._POOL.idle[-1] is first  # a clean run: the same server again
    r = run_python("import socket\nsocket.socket()", **Q)
    assert r.killed_reason.startswith("blocked: socket")
    assert first not in sandbox._POOL.idle and not first.alive()


def _child_run(queue: multiprocessing.Queue) -> None:
    r = run_python("print('from the forked child')", timeout=10)
    queue.put((r.stdout, len(sandbox._POOL.idle)))


def test_a_forked_process_starts_its_own_servers(layer: str) -> None:
    run_python("print(1)", **Q)
    ctx = multiprocessing.get_context("fork")
    queue = ctx.Queue()
    proc = ctx.Process(target=_child_run, args=(queue,))
    proc.start()
    out, idle = queue.get(timeout=60)
    proc.join(30)
    assert out == "from the forked child\n" and idle == 1
    assert run_python("print(3)", **Q).stdout == "3\n"  # ours still work


# -- reporting --------------------------------------------------------------------------------------------------


def test_isolation_is_recorded_in_versions_json(tmp_path: Path) -> None:
    from rlvr.config import Config
    from rlvr.runtime import package_versions, prepare_run_dir

    info = package_versions()["sandbox"]
    assert info["mode"] == f"RLVR_SANDBOX={isolation.mode()}"
    if LAYER is not None and LAYER.available and isolation.mode() != "none":
        assert info["os_layer"] == "bubblewrap" and info["namespaces"] == list(isolation.NAMESPACES)
    cfg = Config.model_validate({"run": {"dir": str(tmp_path / "run")}})
    run_dir = prepare_run_dir(cfg, resume=False)
    assert '"sandbox"' in (run_dir / "versions.json").read_text()


def test_unavailable_os_layer_is_said_once_and_recorded(monkeypatch: pytest.MonkeyPatch,
                                                       caplog: pytest.LogCaptureFixture) -> None:
    from rlvr.config import Config
    from rlvr.runtime import announce_sandbox, package_versions

    monkeypatch.setattr(isolation, "_probe", lambda interpreter: isolation.OsLayer(False, "no user namespaces (test)"))
    monkeypatch.setattr(isolation, "_announced", False)
    monkeypatch.setenv("RLVR_SANDBOX", "auto")
    assert package_versions()["sandbox"]["os_layer"] is None
    assert package_versions()["sandbox"]["reason"] == "no user namespaces (test)"
    code_cfg = Config.model_validate({"task": {"name": "code"}})
    with caplog.at_level(logging.WARNING, logger="rlvr.rewards.isolation"):
        announce_sandbox(code_cfg)
        announce_sandbox(code_cfg)
    warnings = [r for r in caplog.records if "NO OS-level isolation" in r.getMessage()]
    assert len(warnings) == 1 and "no user namespaces (test)" in warnings[0].getMessage()
    monkeypatch.setenv("RLVR_SANDBOX", "bwrap")  # required: no silent downgrade, and no run at all
    with pytest.raises(ConfigError, match="RLVR_SANDBOX=bwrap"):
        announce_sandbox(code_cfg)
    sandbox.close_servers()
    r = run_python("print(1)", **Q)
    assert not r.ok and r.killed_reason.startswith("sandbox failed to start: RLVR_SANDBOX=bwrap")
    monkeypatch.setenv("RLVR_SANDBOX", "sometimes")
    with pytest.raises(ValueError, match="RLVR_SANDBOX must be one of"):
        isolation.mode()
    assert "error" in package_versions()["sandbox"]


def test_runs_without_code_say_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    from rlvr.config import Config
    from rlvr.runtime import announce_sandbox, uses_code_execution

    called = []
    monkeypatch.setattr(isolation, "announce", lambda: called.append(1) or {})
    assert not uses_code_execution(Config())
    announce_sandbox(Config())
    assert called == [] and uses_code_execution(Config.model_validate({"task": {"name": "code"}}))
    assert os.environ.get("RLVR_SANDBOX", "auto") in isolation.MODES
