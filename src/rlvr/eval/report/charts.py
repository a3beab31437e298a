"""Small line charts as inline SVG (no plotting library, no network): axes with round ticks, a legend, and
a tooltip per point when there are few."""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from rlvr.eval.report.embed import _e

COLORS = ["#1f6fb4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f"]


def _fmt(v: float | None, digits: int = 4) -> str:
    if v is None or isinstance(v, bool) or not isinstance(v, (int, float)):
        return "–" if v is None else str(v)
    if not math.isfinite(v):
        return "–"
    if float(v).is_integer() and abs(v) < 1e6:
        return str(int(v))
    return f"{v:.{digits}g}"


def nice_ticks(lo: float, hi: float, count: int = 5, integer: bool = False) -> list[float]:
    """About `count` round tick values covering [lo, hi] (whole numbers only with `integer`)."""
    if not (math.isfinite(lo) and math.isfinite(hi)) or hi <= lo:
        return [lo]
    raw = (hi - lo) / count
    if integer:
        raw = max(raw, 1.0)
    mag = 10 ** math.floor(math.log10(raw))
    step = next(m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw)
    start = math.ceil(lo / step - 1e-9) * step
    ticks, t = [], start
    while t <= hi + step * 1e-9:
        ticks.append(round(t, 12))
        t += step
    return ticks


def svg_line_plot(title: str, series: Sequence[tuple[str, Sequence[tuple[float, float | None]]]], *,
                  xlabel: str = "step", xlog2: bool = False, width: int = 390, height: int = 250,
                  plot_id: str = "", percent: bool = False) -> str:
    """A small line chart as inline SVG. `series` is [(label, [(x, y or None)])]; None breaks the line."""
    pts = [(x, y) for _, s in series for x, y in s if y is not None and math.isfinite(y) and math.isfinite(x)]
    if not pts:
        return ""
    left, right, bottom = 58, 14, 38
    pw = width - left - right
    legend = _legend_layout([label for label, _ in series], left, pw) if len(series) > 1 else []
    rows = max((row for _, row in legend), default=-1) + 1
    top = 28 + 14 * rows  # room for the legend's rows under the title
    ph = height - top - bottom

    def tx(x: float) -> float:
        return math.log2(x) if xlog2 else x

    xs = [tx(x) for x, _ in pts]
    ys = [y for _, y in pts]
    x0, x1 = min(xs), max(xs)
    y0, y1 = min(ys), max(ys)
    if x1 == x0:
        x0, x1 = x0 - 1, x1 + 1
    if y1 == y0:
        pad = abs(y0) * 0.1 or 0.5
        y0, y1 = y0 - pad, y1 + pad
    else:
        pad = (y1 - y0) * 0.05
        y0, y1 = y0 - pad, y1 + pad

    def px(x: float) -> float:
        return left + (tx(x) - x0) / (x1 - x0) * pw

    def py(y: float) -> float:
        return top + (1 - (y - y0) / (y1 - y0)) * ph

    out = [f'<svg class="plot" data-plot="{_e(plot_id or title)}" viewBox="0 0 {width} {height}" width="{width}" '
           f'height="{height}" role="img" aria-label="{_e(title)}" xmlns="http://www.w3.org/2000/svg">',
           f'<text x="{width / 2:.1f}" y="17" class="ptitle" text-anchor="middle">{_e(title)}</text>',
           f'<rect x="{left}" y="{top}" width="{pw}" height="{ph}" class="frame"/>']
    for t in nice_ticks(y0, y1):
        y = py(t)
        label = f"{100 * t:.0f}%" if percent else _fmt(t, 3)
        out.append(f'<line x1="{left}" x2="{left + pw}" y1="{y:.1f}" y2="{y:.1f}" class="grid"/>'
                   f'<text x="{left - 5}" y="{y + 3.5:.1f}" class="tick" text-anchor="end">{_e(label)}</text>')
    if xlog2:
        xt = [2.0 ** e for e in range(math.floor(x0), math.ceil(x1) + 1) if x0 - 1e-9 <= e <= x1 + 1e-9]
        stride = max(1, math.ceil(len(xt) / 9))
        xt = xt[::stride]
    else:
        xt = [t for t in nice_ticks(x0, x1, 6, integer=xlabel == "step") if x0 - 1e-9 <= t <= x1 + 1e-9]
    for t in xt:
        x = px(t)
        out.append(f'<line x1="{x:.1f}" x2="{x:.1f}" y1="{top + ph}" y2="{top + ph + 4}" class="axis"/>'
                   f'<text x="{x:.1f}" y="{top + ph + 16}" class="tick" text-anchor="middle">{_e(_fmt(t))}</text>')
    out.append(f'<text x="{left + pw / 2:.1f}" y="{height - 4}" class="tick" text-anchor="middle">'
               f'{_e(xlabel + (" (log scale)" if xlog2 else ""))}</text>')
    for i, (label, s) in enumerate(series):
        color = COLORS[i % len(COLORS)]
        segments: list[list[tuple[float, float]]] = [[]]
        for x, y in sorted(s, key=lambda p: p[0]):
            if y is None or not math.isfinite(y):
                segments.append([])
            else:
                segments[-1].append((x, y))
        for seg in segments:
            if len(seg) > 1:
                coords = " ".join(f"{px(x):.1f},{py(y):.1f}" for x, y in seg)
                out.append(f'<polyline points="{coords}" fill="none" stroke="{color}" stroke-width="1.6"/>')
        valid = [(x, y) for seg in segments for x, y in seg]
        if len(valid) <= 40:
            for x, y in valid:
                out.append(f'<circle cx="{px(x):.1f}" cy="{py(y):.1f}" r="2.6" fill="{color}">'
                           f'<title>{_e(label)} @ {_e(_fmt(x))}: {_e(_fmt(y))}</title></circle>')
        if legend:
            lx, row = legend[i]
            ly = 30 + 14 * row
            out.append(f'<line x1="{lx:.1f}" x2="{lx + 14:.1f}" y1="{ly}" y2="{ly}" stroke="{color}" '
                       f'stroke-width="2"/><text x="{lx + 18:.1f}" y="{ly + 3.5}" class="legend">{_e(label)}</text>')
    out.append("</svg>")
    return "".join(out)


def _legend_layout(labels: Sequence[str], left: float, width: float) -> list[tuple[float, int]]:
    """(x, row) of each legend entry: evenly spaced in one row when the labels fit (about 5.6 px per character
    at the legend's 10 px font), else flowed left to right over as many rows as needed."""
    need = [18 + 5.6 * len(label) + 10 for label in labels]
    if max(need) <= width / len(labels):
        return [(left + i * width / len(labels), 0) for i in range(len(labels))]
    out, x, row = [], 0.0, 0
    for w in need:
        if x > 0 and x + w > width:
            x, row = 0.0, row + 1
        out.append((left + x, row))
        x += w
    return out


def _metric_series(metrics: list[dict[str, Any]], key: str) -> list[tuple[float, float | None]]:
    out = []
    for row in metrics:
        v = row.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or abs(v) >= 1e300:
            continue  # absent on this step (e.g. eval/* only on eval steps), or a clamped infinity
        out.append((float(row["step"]), float(v)))
    return out
