"""A real two-node Ray cluster on this machine, for the multi-node tests (tests/e2e/test_ray_cluster.py).

Each `ray start` launches its own raylet and object store and declares its own resources, so two of them on one
machine are two Ray nodes: objects move between their object stores as between machines. Each node gets
1 CPU, a custom resource that names it (`head_node`, `second_node`), its own temp dir, and its own working
directory; every port is taken free, so the cluster never collides with another Ray runtime on the machine.

Nodes are stopped by killing their process trees by id (never `ray stop`, which stops every Ray node on the
machine, including other users').
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

RAY = str(Path(sys.executable).with_name("ray"))
START_TIMEOUT_S = 120.0  # a node's start-up on 2 loaded cores (imports, GCS, raylet); a healthy one takes ~10 s
HEAD, SECOND = "head_node", "second_node"  # the custom resources naming the nodes


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _ports() -> list[str]:
    """Every port a node listens on, taken free (the defaults, e.g. 10001 and 52365, may be another node's)."""
    args = []
    for flag in ("--node-manager-port", "--object-manager-port", "--dashboard-agent-listen-port",
                 "--dashboard-agent-grpc-port", "--runtime-env-agent-port", "--metrics-export-port"):
        args += [flag, str(_free_port())]
    return args


class Node:
    """One `ray start --block` process and the processes it starts (raylet, object store, agents, workers)."""

    def __init__(self, name: str, args: list[str], cwd: Path, temp_dir: Path, env: dict[str, str]):
        self.name, self.cwd = name, cwd
        self.log = temp_dir.parent / f"{name}.log"
        with self.log.open("ab") as out:
            self.proc = subprocess.Popen([RAY, "start", "--block", "--disable-usage-stats",
                                          "--num-cpus=1",
                                          f"--resources={json.dumps({name: 1})}", f"--temp-dir={temp_dir}",
                                          "--object-store-memory=300000000", *_ports(), *args],
                                         cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT,
                                         start_new_session=True)

    def tree(self) -> list[psutil.Process]:
        with contextlib.suppress(psutil.NoSuchProcess):
            root = psutil.Process(self.proc.pid)
            return [root, *root.children(recursive=True)]
        return []

    def raylet(self) -> psutil.Process:
        for p in self.tree():
            with contextlib.suppress(psutil.NoSuchProcess):
                if p.name().startswith("raylet"):
                    return p
        raise RuntimeError(f"{self.name}: no raylet process; see {self.log}")

    def kill(self) -> None:
        """SIGKILL the node's whole process tree (raylet, object store, workers) and wait for it."""
        procs = self.tree()
        for p in procs:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        psutil.wait_procs(procs, timeout=30)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=5)


class TwoNodeCluster:
    """Head (`head_node`) and a second node (`second_node`), 1 CPU each. `address` is what rlvr joins with
    `distributed.address`."""

    def __init__(self, root: Path, second_cwd: Path):
        self.root = root
        self.second_cwd = second_cwd
        self.port = _free_port()
        self.address = f"127.0.0.1:{self.port}"
        (root / "home").mkdir()
        # HOME: a Ray token left in ~/.ray by other work on the machine must not switch this cluster's auth on
        # RAY_AUTH_MODE: a process that started a local Ray runtime before (another test in this pytest worker)
        # has RAY_AUTH_MODE=token in its environment, which a copy of it would hand to these nodes
        self.env = {**os.environ, "HOME": str(root / "home"), "RAY_USAGE_STATS_ENABLED": "0",
                    "RAY_AUTH_MODE": "disabled",
                    # a lost node is declared dead after ~3 s without heartbeats, not the default ~30 s
                    "RAY_health_check_period_ms": "1000", "RAY_health_check_failure_threshold": "3",
                    "RAY_health_check_initial_delay_ms": "1000"}
        self.last_probe_error = ""
        self.second: Node | None = None
        self.head = Node(HEAD, ["--head", "--include-dashboard=false", f"--port={self.port}", "--node-ip-address=127.0.0.1",
                                f"--ray-client-server-port={_free_port()}"], root, root / "h", self.env)
        self.wait_nodes({HEAD})
        self.start_second()

    def start_second(self) -> None:
        self.second = Node(SECOND, [f"--address={self.address}", "--node-ip-address=127.0.0.1"],
                           self.second_cwd, self.root / "s", self.env)
        self.wait_nodes({HEAD, SECOND})

    def kill_second(self) -> None:
        assert self.second is not None
        self.second.kill()
        self.second = None

    def alive_nodes(self) -> set[str]:
        """The node names (custom resources) the GCS reports alive, read with a short-lived driver."""
        code = ("import ray, json; ray.init(address=%r, log_to_driver=False, logging_level='ERROR');"
                "print('NODES', json.dumps([sorted(n['Resources']) for n in ray.nodes() if n['Alive']]))" % self.address)
        out = subprocess.run([sys.executable, "-c", code], env=self.env, capture_output=True, text=True,
                             timeout=START_TIMEOUT_S, cwd=self.root)
        if out.returncode != 0:
            self.last_probe_error = out.stderr[-2000:]
            return set()
        line = [x for x in out.stdout.splitlines() if x.startswith("NODES ")]
        names = json.loads(line[-1].removeprefix("NODES ")) if line else []
        return {r for res in names for r in res if r in (HEAD, SECOND)}

    def wait_nodes(self, names: set[str]) -> None:
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            for node in (self.head, self.second):
                if node is not None and node.proc.poll() is not None:
                    raise RuntimeError(f"ray node {node.name} exited at start-up; see {node.log}:\n"
                                       + node.log.read_text()[-3000:])
            if names <= self.alive_nodes():
                return
            time.sleep(1.0)
        logs = "\n".join(f"--- {n.name}:\n{n.log.read_text()[-2000:]}" for n in (self.head, self.second) if n)
        raise RuntimeError(f"the Ray nodes {sorted(names)} were not all up within {START_TIMEOUT_S:g}s.\n{logs}\n"
                           f"--- the last probe:\n{self.last_probe_error}")

    def stop(self) -> None:
        for node in (self.second, self.head):
            if node is not None:
                node.kill()


@contextlib.contextmanager
def two_node_cluster(second_cwd: Path):
    """Start the cluster; stop both nodes and remove their temp dirs afterwards, also when the body fails.
    The temp root is short (Ray's Unix socket paths must fit in 107 bytes)."""
    root = Path(tempfile.mkdtemp(prefix="rlvr-rc-", dir="/tmp"))
    cluster = None
    try:
        cluster = TwoNodeCluster(root, second_cwd)
        yield cluster
    finally:
        if cluster is not None:
            cluster.stop()
        else:  # a failed start: kill whatever was started under this root
            for p in psutil.process_iter(["cmdline"]):
                with contextlib.suppress(psutil.Error):
                    if any(str(root) in a for a in (p.info["cmdline"] or [])):
                        p.kill()
        shutil.rmtree(root, ignore_errors=True)
