"""Tools: calculator (AST, no eval), python (sandbox only), search (BM25), sql (read-only), and the ToolSet that
turns every failure (unknown tool, bad arguments, exception, timeout) into an error result."""

from __future__ import annotations

import json
import sqlite3
import sys
import time

import pytest

from rlvr.rollout.format import format_tool_call, parse_tool_calls
from rlvr.rollout.tools import (
    TOOLS,
    MalformedCall,
    Tool,
    ToolCall,
    ToolError,
    ToolSet,
    build_tool,
    validate_arguments,
)
from rlvr.rollout.tools.calculator import Calculator

# -- calculator ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("expr, expected", [
    ("48213+9921", "58134"),
    ("12345678+87654321", "99999999"),
    ("2**100", str(2**100)),
    ("(3.5*2)**2", "49"),
    ("7/2", "3.5"),
    ("7//2", "3"),
    ("-7 % 3", "2"),
    ("sqrt(16) + abs(-2)", "6"),
    ("max(1, 5, 3)", "5"),
    ("1/3", "0.333333333333"),
    ("  1 + 1 ", "2"),
])
def test_calculator_evaluates(expr, expected):
    assert Calculator().call({"expression": expr}) == expected


@pytest.mark.parametrize("expr, fragment", [
    ("1/0", "division by zero"),
    ("2^10", "use **"),
    ("__import__('os').system('true')", "unsupported"),
    ("(1).__class__", "unsupported"),
    ("x + 1", "unsupported"),
    ("9**9**9", "too large"),
    ("10**5000", "too large"),
    ("1 +", "cannot parse"),
    ("", "empty"),
    ("1" * 300, "longer than"),
    ("[1, 2]", "unsupported"),
    ("True + 1", "unsupported"),
])
def test_calculator_refuses_what_is_not_arithmetic(expr, fragment):
    with pytest.raises(ToolError) as err:
        Calculator().call({"expression": expr})
    assert fragment in str(err.value)


def test_calculator_never_calls_eval(monkeypatch):
    import builtins

    def no_eval(*a, **k):
        raise AssertionError("eval called")

    monkeypatch.setattr(builtins, "eval", no_eval)
    monkeypatch.setattr(builtins, "exec", no_eval)
    assert Calculator().call({"expression": "2*(3+4)"}) == "14"


# -- python (sandbox) ----------------------------------------------------------------------------------


def test_python_tool_runs_only_through_the_sandbox(monkeypatch):
    import rlvr.rewards.sandbox as sandbox

    seen = []
    real = sandbox.run_python

    def spy(code, **kwargs):
        seen.append((code, kwargs))
        return real(code, **kwargs)

    monkeypatch.setattr(sandbox, "run_python", spy)
    tool = build_tool("python", {"timeout": 5})
    assert tool.call({"code": "print(6*7)"}).strip() == "42"
    assert seen and seen[0][0] == "print(6*7)" and seen[0][1]["timeout"] == 5


def test_python_tool_reports_failures_as_tool_errors():
    tools = ToolSet([build_tool("python", {"timeout": 1.0})])
    crashed = tools.execute(ToolCall("python", {"code": "print('partial'); raise ValueError('boom')"}))
    assert not crashed.ok and "ValueError" in crashed.output and "partial" in crashed.output
    started = time.perf_counter()
    hung = tools.execute(ToolCall("python", {"code": "while True: pass"}))
    assert not hung.ok and "timed out" in hung.output
    assert time.perf_counter() - started < 6
    blocked = tools.execute(ToolCall("python", {"code": "import socket; socket.socket()"}))
    assert not blocked.ok and blocked.output.startswith("Error:")
    assert tools.execute(ToolCall("python", {"code": "x = 1"})).output == "(no output)"


# -- search (BM25) -------------------------------------------------------------------------------------


@pytest.fixture
def corpus(tmp_path):
    docs = [
        {"id": "paris", "title": "Paris", "text": "Paris is the capital and largest city of France."},
        {"id": "berlin", "title": "Berlin", "text": "Berlin is the capital of Germany, on the river Spree."},
        {"id": "rome", "title": "Rome", "text": "Rome is the capital city of Italy, founded on seven hills."},
        {"id": "nile", "title": "Nile", "text": "The Nile is a major river in northeastern Africa."},
    ]
    path = tmp_path / "corpus.jsonl"
    path.write_text("\n".join(json.dumps(d) for d in docs) + "\n")
    return path


def test_search_ranks_with_bm25(corpus):
    tool = build_tool("search", {"corpus": str(corpus), "k": 2})
    out = tool.call({"query": "capital of Germany"})
    assert out.splitlines()[0].startswith("[1] Berlin:")
    assert len(out.splitlines()) == 2
    assert tool.call({"query": "river Africa", "k": 1}).startswith("[1] Nile:")
    assert tool.call({"query": "zebra"}) == "No results."
    with pytest.raises(ToolError):
        tool.call({"query": "!!!"})


def test_search_reads_a_directory_of_text_files(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "tea.md").write_text("Green tea comes from Camellia sinensis leaves.")
    (tmp_path / "docs" / "coffee.txt").write_text("Coffee is brewed from roasted beans.")
    tool = build_tool("search", {"corpus": str(tmp_path / "docs")})
    assert tool.call({"query": "roasted beans"}).startswith("[1] coffee:")


def test_search_without_the_library_names_the_package(corpus, monkeypatch):
    monkeypatch.setitem(sys.modules, "rank_bm25", None)
    with pytest.raises(ImportError, match="pip install rank-bm25"):
        build_tool("search", {"corpus": str(corpus)})


def test_search_missing_corpus_names_the_key(tmp_path):
    with pytest.raises(ValueError, match="agent.tools.search.corpus"):
        build_tool("search", {"corpus": str(tmp_path / "nope.jsonl")})


# -- sql (read-only) -----------------------------------------------------------------------------------


@pytest.fixture
def database(tmp_path):
    path = tmp_path / "shop.db"
    conn = sqlite3.connect(path)
    conn.execute("CREATE TABLE items (id INTEGER PRIMARY KEY, name TEXT, price REAL)")
    conn.executemany("INSERT INTO items (name, price) VALUES (?, ?)",
                     [("apple", 0.5), ("bread", 2.25), ("cheese", 7.0)])
    conn.commit()
    conn.close()
    return path


def test_sql_selects(database):
    tool = build_tool("sql", {"path": str(database), "max_rows": 2})
    assert tool.call({"query": "SELECT name, price FROM items WHERE price > 1 ORDER BY price"}) == \
        "name | price\nbread | 2.25\ncheese | 7.0"
    assert "more than 2 rows" in tool.call({"query": "SELECT * FROM items"})
    assert tool.call({"query": "SELECT name FROM items WHERE price > 100"}).endswith("(no rows)")


@pytest.mark.parametrize("query", [
    "INSERT INTO items (name, price) VALUES ('x', 1)",
    "DELETE FROM items",
    "DROP TABLE items",
    "UPDATE items SET price = 0",
    "CREATE TABLE t (x)",
    "PRAGMA query_only = OFF",
    "ATTACH DATABASE 'other.db' AS other",
    "SELECT 1; DELETE FROM items",
])
def test_sql_is_read_only(database, query, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    before = database.read_bytes()
    tools = ToolSet([build_tool("sql", {"path": str(database)})])
    result = tools.execute(ToolCall("sql", {"query": query}))
    assert not result.ok and result.output.startswith("Error: SQL error")
    assert database.read_bytes() == before
    assert not (tmp_path / "other.db").exists()


def test_sql_query_past_its_timeout_is_interrupted(database):
    tools = ToolSet([build_tool("sql", {"path": str(database), "timeout": 0.3})])
    slow = ("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 100000000) "
            "SELECT count(*) FROM c")
    started = time.perf_counter()
    result = tools.execute(ToolCall("sql", {"query": slow}))
    assert not result.ok and "timed out" in result.output
    assert time.perf_counter() - started < 3


def test_sql_opens_the_file_read_only_by_uri(database, monkeypatch):
    import rlvr.rollout.tools.sql as sql_module

    uris = []
    real = sqlite3.connect
    monkeypatch.setattr(sql_module.sqlite3, "connect", lambda target, **kw: uris.append((target, kw)) or real(target, **kw))
    build_tool("sql", {"path": str(database)}).call({"query": "SELECT 1"})
    assert uris and all(u.startswith("file:") and u.endswith("?mode=ro") and kw["uri"] for u, kw in uris)


def test_sql_missing_file(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        build_tool("sql", {"path": str(tmp_path / "none.db")})


# -- the ToolSet: errors never raise -------------------------------------------------------------------


class _Sleepy(Tool):
    name = "sleepy"
    description = "sleeps"
    parameters = {"type": "object", "properties": {"seconds": {"type": "number"}}, "required": ["seconds"]}

    def __init__(self, timeout=0.2):
        self.timeout = timeout

    def call(self, args):
        time.sleep(args["seconds"])
        return "slept"


class _Broken(Tool):
    name = "broken"
    parameters = {"type": "object", "properties": {}}

    def call(self, args):
        raise RuntimeError("kaput")


class _Structured(Tool):
    name = "structured"
    parameters = {"type": "object", "properties": {}}

    def call(self, args):
        return {"a": 1}


def test_toolset_turns_every_failure_into_an_error_result():
    tools = ToolSet([Calculator(), _Sleepy(timeout=0.2), _Broken(), _Structured()])
    unknown = tools.execute(ToolCall("calc", {"expression": "1"}))
    assert not unknown.ok and "unknown tool 'calc'" in unknown.output and "calculator" in unknown.output
    missing = tools.execute(ToolCall("calculator", {}))
    assert not missing.ok and "missing required argument 'expression'" in missing.output
    extra = tools.execute(ToolCall("calculator", {"expression": "1", "mode": "x"}))
    assert not extra.ok and "unknown argument 'mode'" in extra.output
    wrong = tools.execute(ToolCall("calculator", {"expression": 12}))
    assert not wrong.ok and "must be string" in wrong.output
    broken = tools.execute(ToolCall("broken", {}))
    assert not broken.ok and "RuntimeError: kaput" in broken.output
    bad_expr = tools.execute(ToolCall("calculator", {"expression": "1/0"}))
    assert bad_expr.output == "Error: division by zero"
    malformed = tools.execute(MalformedCall("tool call is not valid JSON"))
    assert not malformed.ok and malformed.output == "Error: tool call is not valid JSON"
    assert tools.execute(ToolCall("structured", {})).output == '{"a": 1}'
    ok = tools.execute(ToolCall("calculator", {"expression": "2+2"}))
    assert ok.ok and ok.output == "4" and ok.latency_s >= 0


def test_a_call_past_its_timeout_returns_on_time():
    tools = ToolSet([_Sleepy(timeout=0.2)])
    started = time.perf_counter()
    result = tools.execute(ToolCall("sleepy", {"seconds": 5}))
    elapsed = time.perf_counter() - started
    assert result.timed_out and not result.ok and "timed out after 0.2s" in result.output
    assert elapsed < 1.5
    assert tools.execute(ToolCall("sleepy", {"seconds": 0.01})).output == "slept"


def test_validate_arguments_subset():
    schema = {"type": "object", "properties": {"n": {"type": "integer"}, "mode": {"type": "string", "enum": ["a"]},
                                               "x": {"type": ["number", "null"]}}, "required": ["n"]}
    assert validate_arguments(schema, {"n": 1, "mode": "a", "x": None}) == []
    assert validate_arguments(schema, {"n": True})  # a JSON boolean is not an integer
    assert validate_arguments(schema, {"n": 1.5})
    assert validate_arguments(schema, {"n": 1, "mode": "b"})
    assert validate_arguments(schema, [1])


def test_tools_registry_and_schema():
    assert {"calculator", "python", "search", "sql"} <= set(TOOLS.names())
    schema = Calculator().schema()
    assert schema["type"] == "function" and schema["function"]["name"] == "calculator"
    assert schema["function"]["parameters"]["required"] == ["expression"]


# -- parsing -------------------------------------------------------------------------------------------


def test_parse_tool_calls():
    text = ('thinking <tool_call>{"name": "calculator", "arguments": {"expression": "1+2"}}</tool_call> and '
            '<tool_call>\n{"name": "sql", "arguments": "{\\"query\\": \\"SELECT 1\\"}"}\n</tool_call>')
    calls = parse_tool_calls(text)
    assert [type(c) for c in calls] == [ToolCall, ToolCall]
    assert calls[0].name == "calculator" and calls[0].arguments == {"expression": "1+2"}
    assert calls[1].arguments == {"query": "SELECT 1"}
    assert parse_tool_calls("A:42") == []
    assert parse_tool_calls(format_tool_call("calculator", {"expression": "9+9"}))[0].arguments == {"expression": "9+9"}


@pytest.mark.parametrize("body, fragment", [
    ('{"name": "calculator", "arguments": {"expression": "1+2"}', "not valid JSON"),
    ("[1, 2]", "JSON object"),
    ('{"arguments": {}}', 'no "name"'),
    ('{"name": "calculator", "arguments": [1]}', "must be a JSON object"),
    ('{"name": "calculator", "arguments": "not json"}', "not a JSON object"),
])
def test_parse_malformed_calls(body, fragment):
    (call,) = parse_tool_calls(f"<tool_call>{body}</tool_call>")
    assert isinstance(call, MalformedCall) and fragment in call.error


def test_parse_unclosed_call():
    calls = parse_tool_calls('<tool_call>{"name": "calculator"}</tool_call><tool_call>{"name": ')
    assert isinstance(calls[0], ToolCall) and isinstance(calls[1], MalformedCall)
    assert "unclosed" in calls[1].error
