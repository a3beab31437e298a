"""Putting untrusted text on the page safely: HTML-escaped in markup, and JSON that cannot close its
`<script>` element in the data block."""

from __future__ import annotations

import html
import json
import math
from typing import Any


def _e(text: Any) -> str:
    return html.escape(str(text), quote=True)


def _clean(value: Any) -> Any:
    """JSON-safe copy: non-finite floats become null (JSON.parse rejects NaN and Infinity)."""
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {str(k): _clean(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_clean(v) for v in value]
    return value


def json_for_script(data: Any) -> str:
    """JSON that is safe inside a `<script type="application/json">` element.

    `<`, `>` and `&` are written as \\u escapes, so no `</script>` or `<!--` can appear and the text reads
    back unchanged with `JSON.parse(element.textContent)`; U+2028/U+2029 are escaped for older parsers.
    """
    text = json.dumps(_clean(data), ensure_ascii=False, allow_nan=False, separators=(",", ":"))
    return (text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))
