"""rlvr.tempdirs: directories owned by one process, swept when their owner died."""

from __future__ import annotations

import os
import subprocess
import sys

from rlvr.tempdirs import owned_tempdir, remove_tree, sweep_stale


def test_an_owned_dir_names_its_owner_and_is_removed_even_if_unreadable(tmp_path):
    d = owned_tempdir("rlvr-test-", base=str(tmp_path))
    assert os.path.basename(d).startswith(f"rlvr-test-{os.getpid()}-") and os.path.isdir(d)
    inner = os.path.join(d, "locked")
    os.makedirs(os.path.join(inner, "x"))
    os.chmod(inner, 0)
    remove_tree(d)
    assert not os.path.exists(d)


def test_the_sweep_removes_the_dirs_of_dead_owners_only(tmp_path):
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True,
                          text=True, check=True)
    dead_pid = int(dead.stdout)  # exited: its pid is gone (unless reused within this test: then it is kept)
    stale = tmp_path / f"rlvr-test-{dead_pid}-abc"
    (stale / "sock").mkdir(parents=True)
    live = tmp_path / f"rlvr-test-{os.getppid()}-def"  # our parent is alive
    live.mkdir()
    mine = owned_tempdir("rlvr-test-", base=str(tmp_path))
    old_style = tmp_path / "rlvr-test-nopid"
    old_style.mkdir()
    other = tmp_path / "something-else-1-x"
    other.mkdir()
    removed = sweep_stale("rlvr-test-", base=str(tmp_path))
    if os.path.exists(f"/proc/{dead_pid}"):  # the pid was reused meanwhile: nothing can be said
        return
    assert removed == [str(stale)] and not stale.exists()
    assert live.exists() and os.path.isdir(mine) and old_style.exists() and other.exists()


def test_a_killed_owner_leaves_a_dir_that_the_next_sweep_removes(tmp_path):
    code = ("import sys, time; sys.path.insert(0, sys.argv[2]); from rlvr.tempdirs import owned_tempdir; "
            "print(owned_tempdir('rlvr-test-', base=sys.argv[1]), flush=True); time.sleep(60)")
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))), "src")
    proc = subprocess.Popen([sys.executable, "-c", code, str(tmp_path), src], stdout=subprocess.PIPE, text=True)
    made = proc.stdout.readline().strip()
    assert os.path.isdir(made)
    proc.kill()  # SIGKILL: no cleanup runs
    proc.wait()
    assert os.path.isdir(made)
    assert sweep_stale("rlvr-test-", base=str(tmp_path)) == [made] and not os.path.exists(made)
