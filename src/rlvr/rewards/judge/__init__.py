"""The code judge: run one test of a model-written program so that the program cannot fool the verdict.

Every test gets a fresh sandboxed process (`rlvr.rewards.sandbox`), forked from a warm server, that holds the
program and nothing else: no test source, no expected value, no other test's input. The verdict is computed
here, in the trusted process, from plain data. Three formats:

- **assert-style** (`"assert f(3) == 11"`, any Python test code): the test code runs *here*. Each name the
  program defines is bound to a `ProgramObject` proxy (or, for small plain-data globals, to the value); a call
  on a proxy sends its plain-data arguments to the program's process, which runs the call and sends back the
  result. `f(3) == 11` is then evaluated here on a plain `int`. Builtins and standard modules (`math`, `re`,
  ...) are always this process's own, never the program's, so a program cannot redefine `abs` or
  `math.isclose` to fake a check.
- **function-call** (`{"call": "f", "args": [3], "expected": 11}`, also LiveCodeBench's `fn_name`/`input`/
  `output` form and LeetCode-style `class Solution`): the same channel, one call; the result is compared with
  `expected` after tuples become lists (the data came from JSON).
- **stdin/stdout** (`{"input": "1 2\\n", "output": "3\\n"}`): the program runs as a script with that stdin only;
  its stdout is compared here line by line, token by token (whitespace-tolerant, as the usual judges do).

What crosses back is JSON, decoded by exact type into `None, bool, int, float, str, list, tuple, dict, set,
frozenset, bytes, complex`; anything else stays in the program's process and is represented here by a
`ProgramObject`, which refuses to be compared, hashed, truth-tested or converted (it may be iterated, item by
item as plain data, and measured with `len`). Using one where plain data is needed is an *anomaly*: the test fails even if the test code swallows the exception.
Other anomalies: a malformed or oversized message on the call channel, the program's process exiting in the
middle of a call, processes left behind after the test. A program the guard *blocked* (a socket, a write
outside its work dir, ...) fails too. `TestOutcome.flag` says which ("blocked", "anomaly"), for telemetry.

Test code itself is trusted (it comes from the task's data, like a recipe) and runs in the verifier process.

Layout: `formats.py` (test kinds, their parts, output comparison), `channel.py` (plain data across the call
channel, `ProgramObject`), `driver.py` (`run_test`: one test, one sandboxed process, one verdict).
"""

from rlvr.rewards.judge.channel import (
    Channel,
    NotPlainData,
    ProgramAnomaly,
    ProgramError,
    ProgramObject,
    encode,
)
from rlvr.rewards.judge.driver import TRUSTED_MODULES, TestOutcome, run_test
from rlvr.rewards.judge.formats import (
    REPR_LIMIT,
    describe_test,
    output_lines,
    outputs_match,
    short,
    test_kind,
)

__all__ = [
    "REPR_LIMIT", "TRUSTED_MODULES", "Channel", "NotPlainData", "ProgramAnomaly", "ProgramError", "ProgramObject",
    "TestOutcome", "describe_test", "encode", "output_lines", "outputs_match", "run_test", "short", "test_kind",
]
