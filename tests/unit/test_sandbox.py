"""The sandbox contains hostile programs: the test process survives, the result says why, and it is quick.

Every test runs under both isolation setups (the `layer` fixture): the OS layer (bubblewrap) with the Python
guard on top, and the Python guard alone. Under the OS layer the host's files are not even visible, so an
attempt on them may end in "no such file" before the guard sees it; either way nothing outside is touched.
"""

from __future__ import annotations

import os
import socket
import sys
import time
from pathlib import Path

import pytest

from rlvr.rewards import sandbox
from rlvr.rewards.sandbox import run_python

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox targets Linux")

QUICK = {"timeout": 3.0, "memory_mb": 256}


def _blocked(result, kind: str) -> None:
    assert not result.ok
    assert result.killed_reason is not None and result.killed_reason.startswith(f"blocked: {kind}"), result
    assert result.seconds < 3


def _refused(result, kind: str) -> None:
    """Blocked by the guard, or (OS layer) the host path is not there / read-only inside the sandbox."""
    if result.os_layer and result.killed_reason is None:
        assert not result.ok and result.exit_code == 1, result
        assert "No such file or directory" in result.stderr or "Read-only file system" in result.stderr, result
        return
    _blocked(result, kind)


# -- ordinary programs -----------------------------------------------------------------------------------


def test_normal_program_prints_and_exits_zero(layer: str) -> None:
    r = run_python("import math\nprint('hello', math.factorial(5))", **QUICK)
    assert r.ok and r.exit_code == 0 and not r.timed_out and r.killed_reason is None
    assert r.stdout == "hello 120\n" and r.stderr == ""


def test_stdin_is_passed(layer: str) -> None:
    r = run_python("import sys\nprint(sum(int(x) for x in sys.stdin.read().split()))", stdin="1 2 3\n4", **QUICK)
    assert r.ok and r.stdout.strip() == "10"


def test_errors_and_exit_codes_are_reported_not_killed(layer: str) -> None:
    r = run_python("import sys\nprint('partial')\nsys.exit(3)", **QUICK)
    assert (r.ok, r.exit_code, r.killed_reason, r.stdout) == (False, 3, None, "partial\n")
    r = run_python("def f(:\n  pass", **QUICK)
    assert not r.ok and r.exit_code == 1 and "SyntaxError" in r.stderr and r.killed_reason is None


def test_files_are_written_into_a_private_work_dir_that_is_removed(layer: str) -> None:
    code = "import os\nprint(os.getcwd())\nprint(open('data/in.txt').read())\nopen('out.txt', 'w').write('x')"
    r = run_python(code, files={"data/in.txt": "payload"}, **QUICK)
    assert r.ok, r.stderr
    workdir, content = r.stdout.splitlines()[:2]
    assert content == "payload"
    assert not os.path.exists(workdir)
    with pytest.raises(ValueError, match="relative path"):
        run_python("pass", files={"../escape.txt": "x"})


# -- hostile programs ------------------------------------------------------------------------------------


def test_fork_bomb_is_blocked(layer: str) -> None:
    r = run_python("import os\nwhile True:\n    os.fork()", **QUICK)
    _blocked(r, "process creation")


def test_subprocess_is_blocked(layer: str) -> None:
    r = run_python("import subprocess\nsubprocess.run(['echo', 'hi'])", **QUICK)
    _blocked(r, "process creation")
    assert "hi" not in r.stdout


def test_infinite_loop_times_out(layer: str) -> None:
    t0 = time.monotonic()
    r = run_python("while True:\n    pass", timeout=1.0, memory_mb=256)
    assert r.timed_out and r.killed_reason == "timeout" and not r.ok
    assert time.monotonic() - t0 < 3


def test_cpu_limit_kills_a_busy_program(layer: str) -> None:
    r = run_python("while True:\n    pass", timeout=8.0, cpu_seconds=1, memory_mb=256)
    assert r.killed_reason == "cpu limit" and not r.timed_out, r


def test_memory_bomb_is_stopped(layer: str) -> None:
    r = run_python("chunks = []\nwhile True:\n    chunks.append(bytearray(10**7))", timeout=3.0, memory_mb=128)
    assert not r.ok and r.killed_reason == "memory limit", r


def test_huge_output_is_capped_and_killed(layer: str) -> None:
    r = run_python("while True:\n    print('x' * 1000)", timeout=3.0, memory_mb=256, max_output_bytes=10_000)
    assert r.killed_reason == "output limit" and not r.ok
    assert len(r.stdout) <= 10_000 and r.seconds < 3


def test_writing_outside_the_work_dir_is_blocked(tmp_path: Path, layer: str) -> None:
    target = tmp_path / "pwned.txt"
    r = run_python(f"open({str(target)!r}, 'w').write('pwned')", **QUICK)
    _refused(r, "file write outside the work dir")
    assert not target.exists()


@pytest.mark.parametrize("action", ["os.remove(T)", "os.rename(T, 'stolen.txt')", "shutil.rmtree(D)",
                                    "os.truncate(T, 0)", "os.chmod(T, 0)"])
def test_deleting_or_changing_a_file_outside_the_work_dir_is_blocked(tmp_path: Path, action: str, layer: str) -> None:
    target = tmp_path / "keep.txt"
    target.write_text("precious")
    code = f"import os, shutil\nT = {str(target)!r}\nD = {str(tmp_path)!r}\n{action}"
    r = run_python(code, **QUICK)
    # rmtree is stopped earlier, when it opens the directory outside the work dir to walk it
    _refused(r, "file outside the readable trees" if "rmtree" in action else "file change outside the work dir")
    assert target.read_text() == "precious"


def test_opening_a_socket_is_blocked(layer: str) -> None:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(("127.0.0.1", 0))  # loopback only
        listener.listen(1)
        listener.setblocking(False)
        port = listener.getsockname()[1]
        code = f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=1).sendall(b'hi')"
        r = run_python(code, **QUICK)
        _blocked(r, "socket")
        with pytest.raises(BlockingIOError):
            listener.accept()  # nothing ever connected
    finally:
        listener.close()


def test_parent_environment_is_invisible(monkeypatch: pytest.MonkeyPatch, layer: str) -> None:
    monkeypatch.setenv("RLVR_TEST_SECRET", "hunter2-do-not-leak")
    code = ("import os\nprint(os.environ.get('RLVR_TEST_SECRET'))\nprint(os.environ['HOME'] == os.getcwd())\n"
            "print(open('/proc/self/environ').read())\nprint(open(f'/proc/{os.getppid()}/environ').read())")
    r = run_python(code, **QUICK)
    assert "hunter2" not in r.stdout + r.stderr
    assert r.stdout.splitlines()[:2] == ["None", "True"]
    _blocked(r, "another process's /proc")


def test_listing_host_directories_is_blocked_even_with_the_interpreter_under_tmp(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    import subprocess

    # The README path on a machine without bubblewrap, from a clone in /tmp: the Python guard alone, and an
    # interpreter whose trees (readable) lie under /tmp, which makes /tmp and / ancestors of readable trees.
    monkeypatch.setenv("RLVR_SANDBOX", "none")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    monkeypatch.setattr(sandbox, "INTERPRETER", str(venv / "bin" / "python"))
    planted = tmp_path / "planted-name-7f3a"
    planted.write_text("x")
    sandbox.close_servers()
    try:
        r = run_python("import sys\nprint(sys.prefix)", **QUICK)
        assert r.ok and r.stdout.strip() == str(venv), r  # the venv's interpreter runs the program
        for top in ("/tmp", "/", str(tmp_path), str(venv.parent)):
            r = run_python(f"import os\nprint(os.listdir({top!r}))", **QUICK)
            _blocked(r, f"directory listing outside the readable trees (os.listdir {top})")
            assert "planted-name" not in r.stdout + r.stderr
        walk = ("import os\nn = 0\nfor root in ('/tmp', '/'):\n    for top, dirs, files in os.walk(root):\n"
                "        n += len(files)\n        if 'planted-name-7f3a' in files:\n            print('found', top)\n"
                "print(n)")
        r = run_python(walk, **QUICK)
        assert r.stdout == "0\n", r  # os.walk swallows the PermissionError: it sees nothing
        _blocked(r, "directory listing outside the readable trees (os.scandir /tmp)")
        # inside the readable trees and the work dir, listing still works (the import system needs it)
        r = run_python(f"import os\nprint('python3' in os.listdir({str(venv / 'bin')!r}), os.listdir('.'))", **QUICK)
        assert r.ok and r.stdout == "True []\n", r
    finally:
        sandbox.close_servers()


def test_reading_files_outside_the_readable_trees_is_blocked(tmp_path: Path, layer: str) -> None:
    secret = tmp_path / "token"
    secret.write_text("hf_secret_token")
    r = run_python(f"print(open({str(secret)!r}).read())", **QUICK)
    _refused(r, "file outside the readable trees")
    assert "hf_secret" not in r.stdout


@pytest.mark.parametrize("code", ["import os, signal\nos.kill(os.getppid(), signal.SIGKILL)",
                                  "import os, signal\nos.killpg(os.getpgid(os.getppid()), signal.SIGKILL)",
                                  "import os, signal\nsignal.pidfd_send_signal(os.pidfd_open(os.getppid()), 9)"])
def test_killing_the_parent_is_blocked(code: str, layer: str) -> None:
    r = run_python(code, **QUICK)
    assert not r.ok and r.killed_reason.startswith("blocked: "), r
    assert os.getpid() > 0  # still alive


def test_ctypes_cannot_be_imported(layer: str) -> None:
    r = run_python("import ctypes\nctypes.CDLL(None)", **QUICK)
    assert not r.ok and "importing ctypes is not allowed" in r.stderr


def test_child_leads_its_own_session_and_process_group(layer: str) -> None:
    # so that the final killpg(SIGKILL) reaches everything it started, and nothing of ours
    r = run_python("import os\nprint(os.getsid(0) == os.getpid() == os.getpgid(0))", **QUICK)
    assert r.ok and r.stdout == "True\n"


def test_bad_arguments_name_the_fix() -> None:
    with pytest.raises(ValueError, match="timeout"):
        run_python("pass", timeout=0)
    with pytest.raises(ValueError, match="memory_mb"):
        run_python("pass", memory_mb=1)


def test_kernel_isolation_probes_do_not_crash(layer: str) -> None:
    assert isinstance(sandbox.server._netns_prefix(), tuple)
    assert sandbox.server._drop_uid(sandbox.INTERPRETER) in (None, sandbox.NOBODY)
    if layer == "os" or sandbox.server._netns_prefix():  # a fresh network namespace has only a loopback device
        r = run_python("print(open('/proc/self/net/dev').read())", **QUICK)
        names = [line.split(":")[0].strip() for line in r.stdout.splitlines()[2:] if line.strip()]
        assert names == ["lo"]


def test_runs_as_nobody_when_root_and_an_interpreter_allows_it(monkeypatch: pytest.MonkeyPatch, layer: str) -> None:
    candidate = "/usr/bin/python3"  # the venv's interpreter may live where `nobody` cannot read (/root)
    if os.geteuid() != 0 or not os.path.exists(candidate) or sandbox.server._drop_uid(candidate) is None:
        pytest.skip("needs root and an interpreter that `nobody` can run")
    monkeypatch.setattr(sandbox, "INTERPRETER", candidate)
    code = "import os, resource\nopen('x', 'w').write('1')\nprint(os.getuid(), resource.getrlimit(resource.RLIMIT_NPROC)[0])"
    r = run_python(code, files={"in.txt": "x"}, **QUICK)
    assert r.ok, r.stderr
    uid, nproc = r.stdout.split()
    assert uid == str(sandbox.NOBODY)
    if layer == "guard":  # without the OS layer RLIMIT_NPROC bounds the processes; with it, the PID namespace
        assert nproc == str(sandbox.NPROC_LIMIT)


def _gone(path: Path, pid: int, within: float) -> bool:
    """Whether `path` no longer exists and process `pid` has exited (a zombie counts as exited), polling up to
    `within` seconds."""
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            state = "gone"
        if not path.exists() and state in ("gone", "Z", "X"):
            return True
        time.sleep(0.05)
    return False


def test_nothing_of_a_verifier_killed_with_sigkill_is_left(monkeypatch: pytest.MonkeyPatch) -> None:
    import signal
    import subprocess

    monkeypatch.setenv("RLVR_SANDBOX", "none")  # without the OS layer the server's directory is on the host
    verifier = ("import sys, time\nfrom rlvr.rewards import sandbox\nfrom rlvr.rewards.code import run_unit_tests\n"
                "r = run_unit_tests('def f(x):\\n    return 3 * x + 2\\n', ['assert f(1) == 5'], timeout=60)\n"
                "server = sandbox._POOL.idle[-1]\n"
                "print(r.reward, server.host_root, server.proc.pid, flush=True)\ntime.sleep(600)\n")
    start = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-c", verifier], stdout=subprocess.PIPE, text=True)
    try:
        reward, root, server_pid = proc.stdout.readline().split()
        started = time.monotonic() - start  # the work of a verifier's start-up and one run, on this machine now
        assert reward == "1.0" and Path(root).is_dir() and Path(root).name.startswith(f"rlvr-sandbox-{proc.pid}-")
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    # the server sees its socket close, wipes its directory, removes it and exits
    assert _gone(Path(root), int(server_pid), within=max(10.0, 5 * started)), os.listdir(Path(root).parent)


def test_stale_server_dirs_are_swept_at_start_up_and_on_restart(monkeypatch: pytest.MonkeyPatch) -> None:
    import signal
    import subprocess
    import tempfile

    monkeypatch.setenv("RLVR_SANDBOX", "none")
    dead = subprocess.Popen(["true"])
    dead.wait()  # a pid whose process is gone
    alive = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    base = Path(tempfile.gettempdir())
    stale, kept = base / f"rlvr-sandbox-{dead.pid}-test", base / f"rlvr-sandbox-{alive.pid}-test"
    legacy = base / "rlvr-sandbox-12345678"  # an older name with no owner pid (digits by chance): not touched
    try:
        legacy.mkdir()
        for d in (stale, kept):
            (d / "w1" / "sub").mkdir(parents=True)
            (d / "w1" / "sub" / "f").write_text("left by a killed verifier")
        (stale / "w1" / "sub").chmod(0)  # even a tree a program made unreadable
        sandbox.close_servers()
        assert run_python("print(1)", **QUICK).stdout == "1\n"  # a fresh server: the start-up sweep ran
        assert not stale.exists()
        assert kept.is_dir()  # its owner lives: another run on this machine
        assert legacy.is_dir()
        # a server killed while idle: the pool's restart removes its directory
        server = sandbox._POOL.idle[-1]
        old_root = Path(server.host_root)
        os.kill(server.proc.pid, signal.SIGKILL)
        server.proc.wait()
        assert run_python("print(2)", **QUICK).stdout == "2\n"
        assert not old_root.exists()
        assert sandbox._POOL.idle[-1].host_root != str(old_root)
    finally:
        alive.kill()
        alive.wait()
        import shutil
        shutil.rmtree(kept, ignore_errors=True)
        shutil.rmtree(legacy, ignore_errors=True)
        if stale.exists():
            (stale / "w1" / "sub").chmod(0o700)
            shutil.rmtree(stale, ignore_errors=True)
        sandbox.close_servers()
