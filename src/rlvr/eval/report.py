"""`rlvr report RUN_DIR`: one self-contained HTML file about a training run.

The page needs no server and no network: plots are inline SVG drawn here, the rollout browser is a little
vanilla JavaScript, and its data sit in a `<script type="application/json">` tag. Model output is untrusted
text: it only ever reaches the page as JSON (with `<`, `>` and `&` escaped, so it cannot close the tag) and is
put on screen with `textContent`, never as HTML. A Content-Security-Policy allows no network access and no
script but the page's own (by hash), so even a bug in that escaping could not run injected code.

Everything is optional: a run directory without metrics, evaluations, rollouts or config gets a page that
says which files were missing.

Sections: summary, training curves (metrics.jsonl), held-out evaluation (eval_*.json: pass@k and maj@k tables,
before/after, per difficulty), rollouts (rollouts.jsonl; filter by correctness, step and text; the state is
kept in the URL hash, e.g. report.html#filter=correct&step=10&q=carry), config (config.yaml, versions.json).
"""

from __future__ import annotations

import base64
import datetime as _dt
import hashlib
import html
import json
import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from rlvr.tracking import METRICS_FILE, ROLLOUTS_FILE, read_rollouts

# Which metrics.jsonl keys each training plot draws; a plot whose keys are all absent is left out.
PLOTS: list[tuple[str, list[str]]] = [
    ("Reward", ["reward_mean"]),
    ("Accuracy (training samples)", ["accuracy"]),
    ("Entropy", ["entropy"]),
    ("Response length (tokens)", ["response_length_mean", "response_length_max"]),
    ("KL to reference", ["kl"]),
    ("Clip fraction", ["clip_frac"]),
    ("Throughput (tokens/s)", ["rollout_tokens_per_s", "train_tokens_per_s"]),
    ("Step time (s)", ["step_s", "rollout_s", "train_s"]),
    ("Loss", ["pg_loss", "loss"]),
    ("Gradient norm", ["grad_norm"]),
]
HACK_TELEMETRY = ("blocked_frac", "anomaly_frac")
COLORS = ["#1f6fb4", "#d62728", "#2ca02c", "#9467bd", "#ff7f0e", "#8c564b", "#17becf", "#7f7f7f"]
MAX_ROLLOUTS = 5000


def write_report(run_dir: str | Path, out: str | Path | None = None, *, max_rollouts: int = MAX_ROLLOUTS) -> Path:
    """Write the report of `run_dir` to `out` (default RUN_DIR/report.html) and return its path."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise FileNotFoundError(f"report: '{run_dir}' is not a directory (expected a run directory with "
                                f"config.yaml and metrics.jsonl)")
    out = Path(out) if out is not None else run_dir / "report.html"
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render_report(run_dir, max_rollouts=max_rollouts), encoding="utf-8")
    return out


def render_report(run_dir: Path, *, max_rollouts: int = MAX_ROLLOUTS) -> str:
    notes: list[str] = []
    metrics = _read_jsonl(run_dir / METRICS_FILE, notes)
    evals = _read_evals(run_dir, notes)
    rollouts, dropped_steps = _thin_rollouts(read_rollouts(run_dir), max_rollouts)
    if not (run_dir / ROLLOUTS_FILE).exists():
        notes.append(f"{ROLLOUTS_FILE} not found: no rollout samples (set logging.rollouts_every to store some)")
    if dropped_steps:
        notes.append(f"{ROLLOUTS_FILE} holds more than {max_rollouts} samples: the browser shows an evenly spaced "
                     f"subset of steps ({dropped_steps} steps left out)")
    config_text = _read_text(run_dir / "config.yaml", notes)
    versions_text = _read_text(run_dir / "versions.json", notes, quiet=True)
    run_name = _run_name(config_text) or run_dir.resolve().name

    sections = [
        _summary_section(run_dir, metrics, evals),
        _curves_section(metrics),
        _eval_section(evals),
        _rollout_section(rollouts),
        _config_section(config_text, versions_text),
    ]
    notes_html = "".join(f"<li>{_e(n)}</li>" for n in notes)
    body = (f'<header><h1>{_e(run_name)}</h1><p class="muted">Run directory <code>{_e(str(run_dir))}</code> '
            f'&middot; report written {_e(_dt.datetime.now().strftime("%Y-%m-%d %H:%M"))}</p>'
            '<nav><a href="#summary">Summary</a><a href="#curves">Training curves</a>'
            '<a href="#evaluation">Evaluation</a><a href="#rollouts">Rollouts</a><a href="#config">Config</a></nav>'
            + (f'<ul class="notes" id="notes">{notes_html}</ul>' if notes else "") + "</header>"
            + "".join(sections))
    script_hash = base64.b64encode(hashlib.sha256(_SCRIPT.encode("utf-8")).digest()).decode()
    csp = (f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'sha256-{script_hash}'; "
           "base-uri 'none'; form-action 'none'")
    return (_TEMPLATE.replace("%CSP%", csp).replace("%TITLE%", _e(f"rlvr report: {run_name}"))
            .replace("%STYLE%", _STYLE).replace("%BODY%", body)
            .replace("%DATA%", json_for_script(rollouts)).replace("%SCRIPT%", _SCRIPT))


# --------------------------------------------------------------------------------------------------------------
# Reading the run directory (every file optional, every line may be broken)


def _read_jsonl(path: Path, notes: list[str]) -> list[dict[str, Any]]:
    if not path.exists():
        notes.append(f"{path.name} not found: no training curves")
        return []
    rows, bad = [], 0
    for line in path.read_text(encoding="utf-8", errors="replace").splitlines():
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            if isinstance(row, dict) and isinstance(row.get("step"), (int, float)):
                rows.append(row)
                continue
        except json.JSONDecodeError:
            pass
        bad += 1
    if bad:
        notes.append(f"{path.name}: skipped {bad} unreadable lines")
    return rows


def _eval_order(tag: str) -> tuple[int, str]:
    return (0, tag) if tag == "before" else (2, tag) if tag == "after" else (1, tag)


def _read_evals(run_dir: Path, notes: list[str]) -> dict[str, dict[str, Any]]:
    evals: dict[str, dict[str, Any]] = {}
    for path in run_dir.glob("eval_*.json"):
        try:
            result = json.loads(path.read_text(encoding="utf-8"))
            if not isinstance(result, dict) or "pass@k" not in result:
                raise ValueError("no pass@k in it")
        except (ValueError, OSError) as err:
            notes.append(f"{path.name}: not an evaluation result ({err})")
            continue
        evals[path.stem[len("eval_"):]] = result
    if not evals:
        notes.append("no eval_*.json: no held-out evaluation (set eval.before / eval.after / eval.every)")
    return dict(sorted(evals.items(), key=lambda kv: _eval_order(kv[0])))


def _read_text(path: Path, notes: list[str], quiet: bool = False) -> str | None:
    if not path.exists():
        if not quiet:
            notes.append(f"{path.name} not found")
        return None
    return path.read_text(encoding="utf-8", errors="replace")


def _run_name(config_text: str | None) -> str | None:
    if not config_text:
        return None
    try:
        import yaml

        name = (yaml.safe_load(config_text) or {}).get("run", {}).get("name")
        return str(name) if name else None
    except Exception:
        return None


def _thin_rollouts(rollouts: list[dict[str, Any]], limit: int) -> tuple[list[dict[str, Any]], int]:
    """At most `limit` samples, keeping whole steps evenly spaced over the run (first and last included)."""
    if len(rollouts) <= limit:
        return rollouts, 0
    steps = sorted({r.get("step") for r in rollouts}, key=lambda s: (s is None, s))
    per_step = max(1, len(rollouts) // max(len(steps), 1))
    keep_n = max(1, min(len(steps), limit // per_step))
    idx = {round(i * (len(steps) - 1) / max(keep_n - 1, 1)) for i in range(keep_n)}
    keep = {steps[i] for i in idx}
    kept = [r for r in rollouts if r.get("step") in keep][:limit]
    return kept, len(steps) - len(keep)


# --------------------------------------------------------------------------------------------------------------
# Safe embedding


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


# --------------------------------------------------------------------------------------------------------------
# SVG plots


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
    top = 42 if len(series) > 1 else 28  # room for a one-row legend under the title
    pw, ph = width - left - right, height - top - bottom

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
        if len(series) > 1:
            lx = left + i * pw / len(series)
            out.append(f'<line x1="{lx:.1f}" x2="{lx + 14:.1f}" y1="30" y2="30" stroke="{color}" stroke-width="2"/>'
                       f'<text x="{lx + 18:.1f}" y="33.5" class="legend">{_e(label)}</text>')
    out.append("</svg>")
    return "".join(out)


def _metric_series(metrics: list[dict[str, Any]], key: str) -> list[tuple[float, float | None]]:
    out = []
    for row in metrics:
        v = row.get(key)
        if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or abs(v) >= 1e300:
            continue  # absent on this step (e.g. eval/* only on eval steps), or a clamped infinity
        out.append((float(row["step"]), float(v)))
    return out


# --------------------------------------------------------------------------------------------------------------
# Sections


def _last(metrics: list[dict[str, Any]], key: str) -> float | None:
    s = _metric_series(metrics, key)
    return s[-1][1] if s else None


def _summary_section(run_dir: Path, metrics: list[dict[str, Any]], evals: dict[str, dict[str, Any]]) -> str:
    cards = []
    if metrics:
        cards.append(("steps logged", str(len(metrics)), f"last step {_fmt(metrics[-1]['step'])}"))
        for key, label in (("reward_mean", "reward (last step)"), ("accuracy", "train accuracy (last step)"),
                           ("response_length_mean", "mean length (last step)")):
            v = _last(metrics, key)
            if v is not None:
                cards.append((label, _fmt(v, 3), ""))
    before, after = evals.get("before"), evals.get("after")
    if before and after and "1" in before["pass@k"] and "1" in after["pass@k"]:
        b, a = before["pass@k"]["1"], after["pass@k"]["1"]
        cards.append(("held-out pass@1", f"{_pct(b)} → {_pct(a)}", f"{100 * (a - b):+.1f} pts"))
    elif evals:
        tag, res = list(evals.items())[-1]
        k = next(iter(res["pass@k"]))
        cards.append((f"held-out pass@{k} ({tag})", _pct(res["pass@k"][k]), ""))
    if not cards:
        return '<section id="summary"><h2>Summary</h2><p class="muted">Nothing recorded yet.</p></section>'
    inner = "".join(f'<div class="card"><div class="label">{_e(label)}</div><div class="value">{_e(value)}</div>'
                    f'<div class="muted">{_e(sub)}</div></div>' for label, value, sub in cards)
    return f'<section id="summary"><h2>Summary</h2><div class="cards">{inner}</div></section>'


def _pct(v: Any) -> str:
    return f"{100 * v:.1f}%" if isinstance(v, (int, float)) and math.isfinite(v) else "–"


def _curves_section(metrics: list[dict[str, Any]]) -> str:
    plots = []
    keys = {k for row in metrics for k in row}
    for title, wanted in PLOTS:
        series = [(k, _metric_series(metrics, k)) for k in wanted if k in keys]
        series = [(k, s) for k, s in series if s]
        if series:
            plots.append(svg_line_plot(title, series, plot_id=wanted[0]))
    # reward/<name> is a component's mean reward; reward/<name>/<stat> are the component's own statistics
    # (calls per second, counts, fractions), which do not belong on the rewards' axis
    components = sorted(k for k in keys if k.startswith("reward/") and k.count("/") == 1)
    if len(components) > 1:
        plots.append(svg_line_plot("Reward components", [(k[7:], _metric_series(metrics, k)) for k in components],
                                   plot_id="reward_components"))
    telemetry = sorted(k for k in keys if k.startswith("reward/") and k.rsplit("/", 1)[-1] in HACK_TELEMETRY)
    if telemetry:
        plots.append(svg_line_plot("Reward hacking: blocked / anomalous samples",
                                   [(k[7:], _metric_series(metrics, k)) for k in telemetry],
                                   plot_id="hack_telemetry", percent=True))
    rates = sorted(k for k in keys if k.startswith("reward/") and k.endswith("/verify_calls_per_s"))
    if rates:
        plots.append(svg_line_plot("Verifier throughput (calls/s)", [(k[7:], _metric_series(metrics, k)) for k in rates],
                                   plot_id="verifier_throughput"))
    evals = sorted((k for k in keys if k.startswith("eval/pass@")), key=lambda k: _int(k.split("@")[-1]))
    if evals:
        plots.append(svg_line_plot("Held-out pass@k during training",
                                   [(k[5:], _metric_series(metrics, k)) for k in evals], plot_id="eval_passk",
                                   percent=True))
    plots = [p for p in plots if p]
    if not plots:
        return ('<section id="curves"><h2>Training curves</h2><p class="muted">No metrics to plot '
                f'({METRICS_FILE} is missing or empty).</p></section>')
    return f'<section id="curves"><h2>Training curves</h2><div class="plots">{"".join(plots)}</div></section>'


def _int(s: str) -> int:
    try:
        return int(s)
    except ValueError:
        return 10**9


def _table(header: list[str], rows: list[list[str]], cls: str = "") -> str:
    head = "".join(f"<th>{_e(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in row) + "</tr>" for row in rows)
    return f'<table class="{cls}"><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>'


def _eval_section(evals: dict[str, dict[str, Any]]) -> str:
    if not evals:
        return ('<section id="evaluation"><h2>Held-out evaluation</h2><p class="muted">No eval_*.json in the run '
                'directory.</p></section>')
    parts = []
    ks = sorted({k for r in evals.values() for k in r["pass@k"]}, key=_int)
    mks = sorted({k for r in evals.values() for k in r.get("maj@k", {})}, key=_int)
    header = ["eval", "prompts", "n", "T", *(f"pass@{k}" for k in ks), *(f"maj@{k}" for k in mks),
              "accuracy", "mean length", "truncated"]
    rows = []
    for tag, r in evals.items():
        rows.append([tag, _fmt(r.get("num_prompts")), _fmt(r.get("n")), _fmt(r.get("temperature")),
                     *(_pct(r["pass@k"].get(k)) for k in ks), *(_pct(r.get("maj@k", {}).get(k)) for k in mks),
                     _pct(r.get("accuracy")), _fmt(r.get("mean_length"), 4), _pct(r.get("truncated_frac"))])
    parts.append(_table(header, rows, "evals"))

    row: list[str] = []  # side by side: before/after, pass@k against k, breakdowns
    before, after = evals.get("before"), evals.get("after")
    if before and after:
        rows = []
        for name in ("pass@k", "maj@k"):
            for k in sorted(set(before.get(name, {})) & set(after.get(name, {})), key=_int):
                b, a = before[name][k], after[name][k]
                rows.append([f"{name[:-1]}{k}", _pct(b), _pct(a), _pts(b, a)])
        for key, label in (("accuracy", "accuracy"), ("truncated_frac", "truncated")):
            if key in before and key in after:
                rows.append([label, _pct(before[key]), _pct(after[key]), _pts(before[key], after[key])])
        if "mean_length" in before and "mean_length" in after:
            rows.append(["mean length (tokens)", _fmt(before["mean_length"], 4), _fmt(after["mean_length"], 4),
                         f"{after['mean_length'] - before['mean_length']:+.1f}"])
        row.append("<div><h3>Before vs after training</h3>"
                   + _table(["metric", "before", "after", "change"], rows, "beforeafter") + "</div>")

    chosen = {t: evals[t] for t in ("before", "after") if t in evals} or dict([list(evals.items())[-1]])
    curves = [(tag, [(float(k), r["pass@k"][k]) for k in sorted(r["pass@k"], key=_int)]) for tag, r in chosen.items()]
    if any(len(s) > 1 for _, s in curves):
        plot = svg_line_plot("", curves, xlabel="k", xlog2=True, plot_id="passk_vs_k", percent=True)
        row.append(f"<div><h3>pass@k against k</h3>{plot}</div>")
    for key, label in (("by_difficulty", "difficulty"), ("by_source", "source")):
        tags = [t for t, r in chosen.items() if r.get(key)]
        if not tags:
            continue
        buckets = sorted({b for t in tags for b in chosen[t][key]}, key=lambda b: (_num(b) is None, _num(b) or 0, b))
        cols = [(t, k) for t in tags for k in ks if k in chosen[t]["pass@k"]]
        header = [label, *(f"{t} pass@{k}" for t, k in cols)]
        rows = [[b, *(_pct(chosen[t][key].get(b, {}).get("pass@k", {}).get(k)) for t, k in cols)] for b in buckets]
        row.append(f"<div><h3>By {label}</h3>" + _table(header, rows, key) + "</div>")
    parts.append(f'<div class="row">{"".join(row)}</div>')
    return f'<section id="evaluation"><h2>Held-out evaluation</h2>{"".join(parts)}</section>'


def _num(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:
        return None


def _pts(b: Any, a: Any) -> str:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return f"{100 * (a - b):+.1f} pts"
    return "–"


def _rollout_section(rollouts: list[dict[str, Any]]) -> str:
    if not rollouts:
        return ('<section id="rollouts"><h2>Rollouts</h2><p class="muted">No rollout samples in this run '
                f'({ROLLOUTS_FILE}).</p><div id="rollout-list"></div><span id="rollout-count" data-matched="0" '
                'data-shown="0"></span></section>')
    return """<section id="rollouts"><h2>Rollouts</h2>
<div class="controls">
  <label>step <select id="rollout-step"><option value="all">all steps</option></select></label>
  <label>show <select id="rollout-filter"><option value="all">all</option><option value="correct">correct</option>
  <option value="incorrect">incorrect</option></select></label>
  <label>search <input id="rollout-search" type="search" placeholder="text in prompt, response or answer"></label>
  <span id="rollout-count" class="muted"></span>
</div>
<div id="rollout-list"></div>
</section>"""


def _config_section(config_text: str | None, versions_text: str | None) -> str:
    parts = ['<section id="config"><h2>Config</h2>']
    if config_text is not None:
        parts.append(f'<pre class="config">{_e(config_text)}</pre>')
    else:
        parts.append('<p class="muted">config.yaml not found.</p>')
    if versions_text is not None:
        parts.append(f'<details><summary>Package versions</summary><pre>{_e(versions_text)}</pre></details>')
    parts.append("</section>")
    return "".join(parts)


# --------------------------------------------------------------------------------------------------------------
# Page template, style and script

_TEMPLATE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta http-equiv="Content-Security-Policy" content="%CSP%">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>%TITLE%</title>
<style>%STYLE%</style>
</head><body>
%BODY%
<script type="application/json" id="rollout-data">%DATA%</script>
<script>%SCRIPT%</script>
</body></html>
"""

_STYLE = """
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0 auto;max-width:1240px;padding:0 18px 40px;
color:#1d1d1f;background:#fff}
header{border-bottom:1px solid #ddd;margin-bottom:8px}h1{margin:18px 0 2px;font-size:22px}
h2{font-size:18px;margin:26px 0 10px;border-bottom:1px solid #eee;padding-bottom:4px}h3{font-size:15px;margin:18px 0 6px}
nav a{margin-right:14px;color:#1f6fb4;text-decoration:none}nav{margin:8px 0 10px}
.muted{color:#6e6e73}.notes{background:#fff8e1;border:1px solid #f0d98c;padding:6px 6px 6px 26px;border-radius:4px;
font-size:13px}
.cards{display:flex;flex-wrap:wrap;gap:10px}.card{border:1px solid #ddd;border-radius:6px;padding:8px 12px;
min-width:150px}.card .label{font-size:12px;color:#6e6e73}.card .value{font-size:20px;font-weight:600}
.row{display:flex;flex-wrap:wrap;gap:8px 28px;align-items:flex-start}.plots{display:flex;flex-wrap:wrap;gap:12px}svg.plot{border:1px solid #e5e5e5;border-radius:4px;background:#fff}
svg .frame{fill:none;stroke:#bbb}svg .grid{stroke:#eee}svg .axis{stroke:#999}svg .tick{font-size:10px;fill:#555}
svg .ptitle{font-size:13px;font-weight:600;fill:#222}svg .legend{font-size:10px;fill:#333}
table{border-collapse:collapse;margin:6px 0 12px;font-size:13px}th,td{border:1px solid #ddd;padding:3px 8px;
text-align:right}th:first-child,td:first-child{text-align:left}thead th{background:#f5f5f7}
pre{white-space:pre-wrap;word-break:break-word;background:#f7f7f9;border:1px solid #e5e5e5;padding:8px;
border-radius:4px;font:12px/1.4 ui-monospace,SFMono-Regular,Menlo,monospace;margin:4px 0}
.controls{display:flex;flex-wrap:wrap;gap:14px;align-items:center;margin-bottom:10px;position:sticky;top:0;
background:#fff;padding:6px 0;border-bottom:1px solid #eee}
.controls input{width:280px}
.rollout{border:1px solid #ddd;border-left:5px solid #bbb;border-radius:4px;padding:6px 10px;margin:8px 0}
.rollout.ok{border-left-color:#2ca02c}.rollout.bad{border-left-color:#d62728}
.rollout .meta{display:flex;flex-wrap:wrap;gap:4px 14px;font-size:12px;color:#444}
.rollout .meta b{color:#111}.badge{font-weight:600}.ok .badge{color:#1b7a1b}.bad .badge{color:#b31b1b}
.rollout summary{cursor:pointer;font-size:12px;color:#555}
"""

_SCRIPT = r"""
(function () {
  "use strict";
  var body = document.body;
  window.addEventListener("error", function (e) { body.setAttribute("data-js-error", String(e.message)); });
  var data = [];
  try {
    data = JSON.parse(document.getElementById("rollout-data").textContent || "[]");
  } catch (err) {
    body.setAttribute("data-js-error", "rollout data: " + err);
  }
  var LIMIT = 300;
  var list = document.getElementById("rollout-list");
  var count = document.getElementById("rollout-count");
  var fSel = document.getElementById("rollout-filter");
  var sSel = document.getElementById("rollout-step");
  var qBox = document.getElementById("rollout-search");

  function el(tag, cls, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (text !== undefined && text !== null) node.textContent = String(text);
    return node;
  }
  function fmt(x) {
    if (x === null || x === undefined) return "\u2013";
    if (typeof x !== "number") return String(x);
    if (Number.isInteger(x)) return String(x);
    return Math.abs(x) >= 1000 ? x.toFixed(0) : x.toPrecision(4).replace(/\.?0+$/, "");
  }
  function advText(a) {
    if (a === null || a === undefined) return "\u2013";
    if (!Array.isArray(a)) return fmt(a);
    if (!a.length) return "[] (no tokens)";
    var lo = Infinity, hi = -Infinity, sum = 0;
    a.forEach(function (v) { lo = Math.min(lo, v); hi = Math.max(hi, v); sum += v; });
    return "per token: mean " + fmt(sum / a.length) + ", min " + fmt(lo) + ", max " + fmt(hi) + " (" + a.length + ")";
  }
  function field(parent, label, value) {
    var span = el("span");
    span.appendChild(document.createTextNode(label + " "));
    span.appendChild(el("b", "", value));
    parent.appendChild(span);
  }
  function card(d) {
    var c = el("article", "rollout " + (d.correct === true ? "ok" : "bad"));
    c.setAttribute("data-step", String(d.step));
    var meta = el("div", "meta");
    meta.appendChild(el("span", "badge", d.correct === true ? "\u2713 correct" : (d.correct === false ? "\u2717 incorrect" : "? unverified")));
    field(meta, "step", fmt(d.step));
    field(meta, "prompt", fmt(d.group) + (d.prompt_id !== undefined && d.prompt_id !== null ? " (" + d.prompt_id + ")" : ""));
    field(meta, "sample", fmt(d.sample));
    field(meta, "reward", fmt(d.reward));
    field(meta, "advantage", advText(d.advantage));
    field(meta, "finish", fmt(d.finish_reason));
    field(meta, "length", fmt(d.length));
    if (d.answer !== null && d.answer !== undefined) field(meta, "reference answer", d.answer);
    c.appendChild(meta);
    var comps = d.rewards || {};
    var names = Object.keys(comps);
    if (names.length) {
      var cm = el("div", "meta components");
      names.forEach(function (k) {
        var span = el("span");
        span.appendChild(document.createTextNode(k + " "));
        span.appendChild(el("b", "", fmt(comps[k])));
        var why = (d.reasons || {})[k];
        if (why) span.appendChild(document.createTextNode(" (" + why + ")"));
        cm.appendChild(span);
      });
      c.appendChild(cm);
    }
    var det = el("details");
    det.appendChild(el("summary", "", "prompt"));
    det.appendChild(el("pre", "prompt", d.prompt));
    c.appendChild(det);
    c.appendChild(el("pre", "response", d.response));
    return c;
  }
  function matches(d, f, q, st) {
    if (f === "correct" && d.correct !== true) return false;
    if (f === "incorrect" && d.correct === true) return false;
    if (st !== "all" && String(d.step) !== st) return false;
    if (q) {
      var hay = [d.prompt, d.response, d.answer, d.prompt_id].join("\n").toLowerCase();
      if (hay.indexOf(q) < 0) return false;
    }
    return true;
  }
  function render() {
    if (!fSel) return;
    var f = fSel.value, st = sSel.value, q = qBox.value.trim().toLowerCase();
    var frag = document.createDocumentFragment();
    var matched = 0, shown = 0;
    data.forEach(function (d) {
      if (!matches(d, f, q, st)) return;
      matched += 1;
      if (shown < LIMIT) { frag.appendChild(card(d)); shown += 1; }
    });
    list.textContent = "";
    list.appendChild(frag);
    count.textContent = matched + " of " + data.length + " samples" + (matched > shown ? " (showing the first " + shown + ")" : "");
    count.setAttribute("data-matched", String(matched));
    count.setAttribute("data-shown", String(shown));
    count.setAttribute("data-total", String(data.length));
  }
  function parseHash() {
    var out = {};
    location.hash.replace(/^#/, "").split("&").forEach(function (part) {
      if (!part) return;
      var i = part.indexOf("=");
      var key = i < 0 ? part : part.slice(0, i);
      var val = i < 0 ? "" : part.slice(i + 1);
      try { out[decodeURIComponent(key)] = decodeURIComponent(val.replace(/\+/g, " ")); } catch (err) { /* bad escape */ }
    });
    return out;
  }
  function writeHash() {
    var parts = [];
    if (fSel.value !== "all") parts.push("filter=" + encodeURIComponent(fSel.value));
    if (sSel.value !== "all") parts.push("step=" + encodeURIComponent(sSel.value));
    if (qBox.value) parts.push("q=" + encodeURIComponent(qBox.value));
    try { history.replaceState(null, "", parts.length ? "#" + parts.join("&") : location.pathname + location.search); }
    catch (err) { /* some file:// setups refuse; the state still applies */ }
  }
  var steps = [];
  function fromHash() {
    var h = parseHash();
    fSel.value = (h.filter === "correct" || h.filter === "incorrect") ? h.filter : "all";
    sSel.value = steps.indexOf(h.step) >= 0 ? h.step : "all";
    qBox.value = h.q || "";
    render();
  }
  if (fSel) {
    data.forEach(function (d) { var s = String(d.step); if (steps.indexOf(s) < 0) steps.push(s); });
    steps.sort(function (a, b) { return Number(a) - Number(b); });
    steps.forEach(function (s) { var o = el("option", "", "step " + s); o.value = s; sSel.appendChild(o); });
    [fSel, sSel].forEach(function (n) { n.addEventListener("change", function () { writeHash(); render(); }); });
    qBox.addEventListener("input", function () { writeHash(); render(); });
    window.addEventListener("hashchange", fromHash);
    fromHash();
  }
  var drawn = 0;
  document.querySelectorAll("svg.plot").forEach(function (svg) {
    var box = svg.getBoundingClientRect();
    if (box.width > 0 && box.height > 0 && svg.querySelector("polyline, circle")) drawn += 1;
  });
  body.setAttribute("data-plots-rendered", String(drawn));
  body.setAttribute("data-ready", "1");
})();
"""
