"""The package structure: no import cycles between modules (lazy imports inside functions included), the layer
contracts of pyproject.toml hold, and the roles placed for a config satisfy their protocols."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

grimp = pytest.importorskip("grimp")


def _cycles(graph) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan, iterative)."""
    adj = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index, low, on_stack, stack, out, counter = {}, {}, set(), [], [], 0
    for root in sorted(adj):
        if root in index:
            continue
        work = [(root, iter(adj[root]))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(adj[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_the_cycle_finder_finds_a_cycle():
    class Graph:
        modules = {"a", "b", "c", "d"}
        edges = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}

        def find_modules_directly_imported_by(self, m):
            return self.edges.get(m, set())

    assert _cycles(Graph()) == [["a", "b", "c"]]


def test_no_module_imports_itself_back():
    graph = grimp.build_graph("rlvr", exclude_type_checking_imports=True)
    assert _cycles(graph) == []


def test_the_layer_contracts_hold():
    # In a child process: import-linter's CLI configures logging (dictConfig), which would disable the loggers
    # of modules already imported in this process and break later tests that read their records.
    pytest.importorskip("importlinter.cli")
    done = subprocess.run([sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; "
                           f"sys.exit(lint_imports(config_filename={str(ROOT / 'pyproject.toml')!r}))"],
                          capture_output=True, text=True, cwd=ROOT, timeout=600)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]


def test_placed_roles_satisfy_their_protocols(tmp_path):
    from rlvr.config import load_config
    from rlvr.models import load_tokenizer, resolve_device
    from rlvr.roles import Generator, Scorer, Trainable, place_roles
    from rlvr.roles.protocols import LogProbModel

    cfg = load_config(ROOT / "recipes" / "grpo.yaml", ["algorithm.kl_coef=0.01", f"run.dir={tmp_path}"])
    roles = place_roles(cfg, load_tokenizer("builtin"), resolve_device("cpu"), checkpoint=None)
    try:
        assert isinstance(roles.generator, Generator)
        assert isinstance(roles.scorer, Scorer)
        assert isinstance(roles.trainable, Trainable)
        assert isinstance(roles.reference, LogProbModel)  # kl_coef > 0: a frozen reference is placed
    finally:
        roles.close()
    assert roles._opened == []  # everything placed was closed


def test_every_package_has_a_place_in_the_layers():
    """A new top-level package or module must be put in the layer order, or the contract would not see it."""
    import pkgutil

    import tomllib

    import rlvr

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    layers = next(c for c in contracts if c["type"] == "layers")["layers"]
    placed = {name.strip() for layer in layers for name in layer.replace(":", "|").split("|")}
    present = {f"rlvr.{m.name}" for m in pkgutil.iter_modules(rlvr.__path__)}
    assert present - placed == set(), "add these to [tool.importlinter] layers in pyproject.toml"
