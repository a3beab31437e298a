"""`sql`: read-only SELECT queries on a local SQLite file.

Three locks keep it read-only: the file is opened with a `file:...?mode=ro` URI, `PRAGMA query_only` is on,
and an authorizer allows only reading (SELECT, reading columns, functions, recursive CTEs), so ATTACH, PRAGMA
and every write are refused. A progress handler interrupts a query past its timeout.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path
from typing import Annotated, Any
from urllib.parse import quote

from pydantic import Field

from rlvr.rollout.tools.base import TOOLS, Tool, ToolError

_ALLOWED = {sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_FUNCTION,
            getattr(sqlite3, "SQLITE_RECURSIVE", 33)}


def _authorize(action: int, *_: Any) -> int:
    return sqlite3.SQLITE_OK if action in _ALLOWED else sqlite3.SQLITE_DENY


def read_only_uri(path: str | Path) -> str:
    return f"file:{quote(str(Path(path).resolve()))}?mode=ro"


@TOOLS.register("sql")
class SQLTool(Tool):
    """Runs one SELECT on the database at `path` (opened read-only) and returns at most `max_rows` rows as
    `col | col` lines."""

    name = "sql"
    description = "Run one read-only SQL SELECT query on the database and return the rows."
    parameters = {
        "type": "object",
        "properties": {"query": {"type": "string", "description": "One SQLite SELECT statement."}},
        "required": ["query"],
    }

    def __init__(self, *, path: str, max_rows: Annotated[int, Field(ge=1)] = 20,
                 max_cell_chars: Annotated[int, Field(ge=8)] = 200, timeout: Annotated[float, Field(gt=0)] = 2.0):
        p = Path(path).expanduser()
        if not p.is_file():
            raise ValueError(f"agent.tools.sql.path: SQLite file '{path}' does not exist")
        self.path, self.max_rows, self.max_cell_chars, self.timeout = p, max_rows, max_cell_chars, timeout
        self.connect().close()  # fails now, naming the file, if it is not a database we can open

    def connect(self) -> sqlite3.Connection:
        try:
            conn = sqlite3.connect(read_only_uri(self.path), uri=True, timeout=self.timeout, check_same_thread=False)
            conn.execute("PRAGMA query_only = ON")
            conn.execute("SELECT name FROM sqlite_master LIMIT 1").fetchall()
        except sqlite3.DatabaseError as err:
            raise ValueError(f"agent.tools.sql.path: cannot open '{self.path}' as SQLite: {err}") from None
        conn.set_authorizer(_authorize)
        return conn

    def call(self, args: dict[str, Any]) -> str:
        deadline = time.monotonic() + self.timeout
        conn = self.connect()
        conn.set_progress_handler(lambda: int(time.monotonic() > deadline), 1000)
        try:
            cursor = conn.execute(args["query"])
            rows = cursor.fetchmany(self.max_rows + 1)
            columns = [c[0] for c in cursor.description or []]
        except sqlite3.Error as err:
            message = "query timed out" if "interrupted" in str(err) else str(err)
            raise ToolError(f"SQL error: {message}") from None
        except sqlite3.Warning as err:  # e.g. more than one statement
            raise ToolError(f"SQL error: {err}") from None
        finally:
            conn.close()
        if not columns:
            return "(no result set)"
        lines = [" | ".join(columns)]
        for row in rows[: self.max_rows]:
            lines.append(" | ".join(self._cell(v) for v in row))
        if len(rows) > self.max_rows:
            lines.append(f"(more than {self.max_rows} rows; only the first {self.max_rows} shown)")
        if len(lines) == 1:
            lines.append("(no rows)")
        return "\n".join(lines)

    def _cell(self, value: Any) -> str:
        text = "NULL" if value is None else str(value)
        return text if len(text) <= self.max_cell_chars else text[: self.max_cell_chars - 3] + "..."
