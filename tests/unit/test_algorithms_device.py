"""Algorithms run on whatever device their inputs are on.

A tensor made inside an algorithm without `device=` lands on the CPU, and mixing it with CUDA inputs fails
only on a GPU ("index is on cuda:0, different from other tensors on cpu"), which the CPU suite cannot see by
running the code. So every tensor factory call in src/rlvr/algorithms names its device (or copies one from an
input with a *_like factory or `new_*`), checked here over the source.
"""

from __future__ import annotations

import ast
from pathlib import Path

import torch

import rlvr.algorithms

FACTORIES = {"zeros", "ones", "full", "empty", "arange", "tensor", "as_tensor", "eye", "linspace", "rand",
             "randn", "randint", "randperm"}


def _factory_calls_without_device(tree: ast.AST) -> list[int]:
    lines = []
    for node in ast.walk(tree):
        if (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in FACTORIES
                and isinstance(node.func.value, ast.Name) and node.func.value.id == "torch"
                and not any(k.arg == "device" for k in node.keywords)):
            lines.append(node.lineno)
    return lines


def test_the_check_finds_a_factory_call_without_a_device():
    tree = ast.parse("import torch\nx = torch.zeros(3, dtype=torch.float64)\ny = torch.ones(2, device=x.device)\n")
    assert _factory_calls_without_device(tree) == [2]


def test_every_tensor_made_in_algorithms_names_its_device():
    root = Path(rlvr.algorithms.__file__).parent
    found = {}
    for path in sorted(root.rglob("*.py")):
        lines = _factory_calls_without_device(ast.parse(path.read_text(), filename=str(path)))
        if lines:
            found[str(path.relative_to(root))] = lines
    assert not found, f"torch factory calls without device= (they break on CUDA inputs): {found}"


def test_scalar_where_keeps_the_values_of_the_tensor_constants_it_replaced():
    from rlvr.algorithms.advantages.oreal import oreal_advantages  # noqa: F401  (import: the module loads)
    from rlvr.algorithms.advantages.reinforce import weighted_reinforce_advantages

    correct = torch.tensor([1.0, 0.0, 1.0])
    out = weighted_reinforce_advantages(correct, positive_weight=0.1)
    assert out.dtype == torch.float32
    assert torch.equal(out, torch.tensor([0.1, -1.0, 0.1], dtype=torch.float32))
