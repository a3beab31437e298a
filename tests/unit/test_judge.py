"""The judge: three test formats, plain data by exact type, and what the program can and cannot see."""

from __future__ import annotations

import sys
import time

import pytest

from rlvr.rewards.code import run_unit_tests
from rlvr.rewards.judge import Channel, ProgramAnomaly, ProgramObject, outputs_match, run_test
from rlvr.rewards.judge import channel

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the sandbox targets Linux")

T = {"timeout": 5.0, "memory_mb": 256}


# -- assert-style ------------------------------------------------------------------------------------------------


def test_plain_data_of_every_kind_crosses_with_its_exact_type(layer: str) -> None:
    program = ("def f():\n    return (1, [2.5, None, True], {'k': {3, 4}}, frozenset({5}), b'x\\x00', 2**2000, "
               "complex(1, -2), float('inf'), -0.0, 'é')\n")
    test = ("v = f()\nassert type(v) is tuple and type(v[1]) is list and type(v[2]['k']) is set\n"
            "assert v == (1, [2.5, None, True], {'k': {3, 4}}, frozenset({5}), b'x\\x00', 2**2000, complex(1, -2), "
            "float('inf'), -0.0, 'é')\nassert type(v[6]) is complex and type(v[5]) is int")
    r = run_test(program, test, **T)
    assert r.passed, r.reason
    r = run_test("def f():\n    return float('nan')\n", "import math\nassert math.isnan(f())", **T)
    assert r.passed, r.reason


def test_the_program_sees_no_test_no_expected_value_and_no_other_tests_input(layer: str) -> None:
    spy = '''
import os, sys
def spy(x):
    seen = [repr(sys.argv), repr(dict(os.environ)), sys.stdin.read()]
    frame = sys._getframe()
    while frame is not None:
        seen.append(repr(frame.f_locals))
        frame = frame.f_back
    for root in (os.getcwd(),):
        try:
            for top, dirs, files in os.walk(root):
                for name in files:
                    seen.append(name + open(os.path.join(top, name), errors="replace").read())
        except OSError as err:
            seen.append(repr(err))
    open("note-%d.txt" % x, "w").write(str(x))  # for a later test to find, if it could
    return "\\n".join(seen)
'''
    tests = [
        "assert spy(31337) != 'x'",  # an input only test 1 has
        "assert spy(1) != 'EXPECTED-54321'",  # an expected value in the test's source
        "seen = spy(2)\nfor secret in ('31337', '54321', 'EXPECTED', 'assert'):\n    assert secret not in seen, secret",
    ]
    r = run_unit_tests(spy, tests, mode="fraction", **T)
    assert r.reward == 1.0, r.reason


def test_exceptions_cross_as_builtin_types_and_never_as_control_flow(layer: str) -> None:
    program = ("class Bad(ValueError):\n    pass\ndef f(x):\n    if x < 0:\n        raise Bad('negative')\n"
               "    if x == 0:\n        raise StopIteration\n    return x\n")
    ok = "try:\n    f(-1)\nexcept ValueError as err:\n    assert 'negative' in str(err)\nelse:\n    assert False"
    assert run_test(program, ok, **T).passed
    r = run_test(program, "assert f(0) == 0", **T)
    assert not r.passed and r.reason == "StopIteration" and r.flag is None
    r = run_test(program, "assert f(-5) == 5", **T)
    assert r.reason == "ValueError: negative" or r.reason.startswith("Bad"), r.reason


def test_in_place_changes_to_arguments_come_back(layer: str) -> None:
    program = "def sort_in_place(xs):\n    xs.sort()\ndef add(d):\n    d['n'] = 1\n"
    test = "xs = [3, 1, 2]\nsort_in_place(xs)\nassert xs == [1, 2, 3]\nd = {}\nadd(d)\nassert d == {'n': 1}"
    assert run_test(program, test, **T).passed


def test_objects_of_the_program_can_be_called_and_read_but_not_compared(layer: str) -> None:
    program = ("class Node:\n    def __init__(self, val, nxt=None):\n        self.val, self.next = val, nxt\n"
               "def build(n):\n    head = None\n    for v in range(1, n + 1):\n        head = Node(v, head)\n"
               "    return head\n"
               "class Solution:\n    def twoSum(self, nums, target):\n"
               "        seen = {}\n        for i, n in enumerate(nums):\n            if target - n in seen:\n"
               "                return [seen[target - n], i]\n            seen[n] = i\n")
    assert run_test(program, "node = build(3)\nassert node.val == 3 and node.next.next.val == 1", **T).passed
    assert run_test(program, "assert Solution().twoSum([2, 7, 11, 15], 9) == [0, 1]", **T).passed
    assert run_test(program, {"call": "twoSum", "args": [[3, 3], 6], "expected": [0, 1]}, **T).passed
    r = run_test(program, "assert build(1) == build(1)", **T)
    assert r.flag == "anomaly" and "object of type Node" in r.reason and "(==)" in r.reason
    # a test that swallows the refusal still fails: the anomaly is sticky
    r = run_test(program, "try:\n    bool(build(2))\nexcept Exception:\n    pass", **T)
    assert not r.passed and r.flag == "anomaly" and "(truth value)" in r.reason


def test_a_programs_iterables_can_be_iterated_item_by_item_as_plain_data(layer: str,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    gen = "def evens(n):\n    for i in range(n):\n        if i % 2 == 0:\n            yield i\n"
    for test in ("assert list(evens(7)) == [0, 2, 4, 6]", "assert sum(evens(7)) == 12",
                 "g = evens(5)\nassert next(g) == 0 and next(g) == 2 and next(g) == 4\nassert next(g, 'end') == 'end'",
                 "out = []\nfor x in evens(4):\n    out.append(x)\nassert out == [0, 2]",
                 "assert sorted(evens(6), reverse=True) == [4, 2, 0] and tuple(evens(0)) == ()"):
        r = run_test(gen, test, **T)
        assert r.passed, (test, r.reason)
    # a class with __iter__ (and __len__): a fresh iterator each time; len() crosses as an exact int
    bag = ("class Bag:\n    def __init__(self, *xs):\n        self.xs = list(xs)\n"
           "    def __iter__(self):\n        return iter(self.xs)\n    def __len__(self):\n        return len(self.xs)\n"
           "def make():\n    return Bag(3, (1, 'a'), [None])\n")
    r = run_test(bag, "b = make()\nassert list(b) == [3, (1, 'a'), [None]] and list(b) == list(b) and len(b) == 3", **T)
    assert r.passed, r.reason
    # items are decoded like any result: a program object among them still refuses to be compared
    fake = ("class Any:\n    def __eq__(self, other):\n        return True\n"
            "def g():\n    yield 1\n    yield Any()\n")
    r = run_test(fake, "assert list(g()) == [1, 2]", **T)
    assert r.flag == "anomaly" and "object of type Any" in r.reason and "(==)" in r.reason, r.reason
    # the cap on items (lowered here to keep the test short): a never-ending iterator fails on it; the time
    # limit is generous, 100x the time of the 1000 round trips that the cap allows
    monkeypatch.setattr(channel, "ITEM_LIMIT", 1000)
    start = time.monotonic()
    assert run_test("def g():\n    return iter(range(1000))\n", "assert sum(g()) == 499500", timeout=60,
                    memory_mb=256).passed
    limit = 100 * (time.monotonic() - start)
    r = run_test("import itertools\ndef g():\n    return itertools.count()\n", "assert list(g()) == []",
                 timeout=max(5.0, limit), memory_mb=256)
    assert not r.passed and "yielded more than 1000 items" in r.reason, r.reason
    # what cannot be iterated says so, as a wrong answer
    r = run_test("class P:\n    pass\ndef f():\n    return P()\n", "assert list(f()) == []", **T)
    assert not r.passed and r.flag is None and "not iterable" in r.reason, r.reason
    r = run_test("def f():\n    return iter([1])\n", "assert len(f()) == 1", **T)
    assert not r.passed and r.flag is None and "has no len()" in r.reason, r.reason


def test_library_objects_are_wrong_answers_not_anomalies_and_numpy_is_plain(layer: str) -> None:
    r = run_test("import collections\ndef f():\n    return collections.deque([1])\n", "assert f() == [1]", **T)
    assert not r.passed and r.flag is None and "object of type deque" in r.reason
    program = "import collections\ndef f():\n    return collections.Counter('aab')\n"
    assert run_test(program, "assert f() == {'a': 2, 'b': 1}", **T).passed
    pytest.importorskip("numpy")
    program = "import numpy as np\ndef f():\n    return np.int64(5), np.arange(3), np.float32(0.5)\n"
    r = run_test(program, "assert f() == (5, [0, 1, 2], 0.5)", **T)
    assert r.passed, r.reason


def test_builtins_and_standard_modules_are_the_judges_own(layer: str) -> None:
    program = "import math\ndef sorted(x):\n    return [0]\ndef f(x):\n    return math.sqrt(x)\n"
    assert run_test(program, "assert math.isclose(f(4.0), 2.0) and sorted([2, 1]) == [1, 2]", **T).passed


def test_load_errors_and_malformed_tests(layer: str) -> None:
    r = run_unit_tests("def f(:\n", ["assert f(1) == 1", "assert f(2) == 2"], mode="fraction", **T)
    assert r.reason.startswith("program failed to run: SyntaxError") and len(r.tests) == 1
    r = run_unit_tests("def f(x):\n    return x\n", [{"what": 1}], **T)
    assert r.reward == 0.0 and r.reason.startswith("malformed test")


def test_time_limit_is_per_test(layer: str) -> None:
    program = "import time\ndef f(x):\n    time.sleep(x)\n    return x\n"
    r = run_unit_tests(program, ["assert f(0) == 0", "assert f(30) == 30"], mode="fraction", timeout=1.0,
                       memory_mb=256)
    assert r.passed == 1 and r.tests[1].reason == "timeout after 1s" and r.tests[1].seconds < 3


# -- function-call and stdin/stdout -------------------------------------------------------------------------------


def test_function_call_tests(layer: str) -> None:
    program = "def f(a, b=0):\n    return (a + b, [a])\n"
    assert run_test(program, {"call": "f", "args": [1], "kwargs": {"b": 2}, "expected": [3, [1]]}, **T).passed
    assert run_test(program, {"fn_name": "f", "input": "1\n2", "output": "[3, [1]]"}, **T).passed  # LiveCodeBench
    r = run_test(program, {"call": "f", "args": [1], "expected": [9, [1]]}, **T)
    assert r.reason == "wrong result: expected [9, [1]], got (1, [1])"
    assert run_test(program, {"call": "g", "args": [], "expected": 1}, **T).reason == \
        "the program defines no function 'g'"


def test_stdin_stdout_tests(layer: str) -> None:
    program = "import sys\nnums = list(map(int, sys.stdin.read().split()))\nprint(sum(nums), ' ')\nprint()\n"
    assert run_test(program, {"input": "1 2\n3", "output": "6"}, **T).passed
    r = run_test(program, {"input": "1 2", "output": "4\n"}, **T)
    assert r.reason == "wrong output at line 1: expected '4', got '3'"
    r = run_test("import sys\nsys.exit(3)", {"input": "", "output": ""}, **T)
    assert r.reason == "program crashed (exit code 3)"


def test_output_comparison_is_whitespace_tolerant() -> None:
    assert outputs_match("1 2\r\n3  \n\n\n", "1  2\n3")[0]
    assert outputs_match("\n\nyes\n", "yes")[0]
    assert not outputs_match("1 2 3", "1 2\n3")[0]  # lines matter, spacing does not
    assert outputs_match("a\nb", "a\nc") == (False, "wrong output at line 2: expected 'c', got 'b'")


# -- the channel decodes strictly ---------------------------------------------------------------------------------


@pytest.mark.parametrize("bad", [{"x": 1}, {"__t": 1}, {"__d": [[[1], 2]]}, {"__s": [[1]]}, {"__f": "1e400"},
                                 {"__b": "zz"}, {"__h": -1}, {"__i": "0x", "__t": []}, {"__c": ["a", 1]}])
def test_channel_rejects_every_other_shape(bad: object) -> None:
    channel = Channel(run=None)  # type: ignore[arg-type]
    with pytest.raises(ProgramAnomaly):
        channel.decode(bad)
    assert channel.anomaly is not None


def test_channel_decodes_tags_and_handles() -> None:
    channel = Channel(run=None)  # type: ignore[arg-type]
    assert channel.decode({"__d": [[{"__t": [1, 2]}, {"__fs": ["a"]}]]}) == {(1, 2): frozenset({"a"})}
    obj = channel.decode({"__h": 3, "type": "Foo", "own": True})
    assert type(obj) is ProgramObject and repr(obj) == "<program object: Foo>"
    with pytest.raises(ProgramAnomaly, match="object of type Foo where plain data was needed \\(hash\\)"):
        hash(obj)
