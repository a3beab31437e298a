"""The page's sections as HTML: summary cards, training curves, held-out evaluation tables and plots, the
rollout browser's controls, and the config."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from rlvr.eval.evaluate import graded
from rlvr.eval.report.charts import _fmt, _metric_series, svg_line_plot
from rlvr.eval.report.embed import _e
from rlvr.tracking import METRICS_FILE, ROLLOUTS_FILE

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
    # a reward model learning beside the policy (coevolve): its accuracy on each refresh's fresh examples
    judged = [k for k in ("rm/accuracy", "rm/accuracy_correct", "rm/accuracy_incorrect", "rm/pairwise_accuracy",
                          "rm/pairwise_accuracy_first", "rm/pairwise_accuracy_second") if k in keys]
    if judged:
        plots.append(svg_line_plot("Co-evolving reward model: accuracy on fresh rollouts",
                                   [(k[3:], _metric_series(metrics, k)) for k in judged], plot_id="rm_accuracy",
                                   percent=True))
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
        if graded(before) and graded(after):  # a graded verifier (IoU, partial credit)
            rows.append(["mean verifier reward", _fmt(before["mean_reward"], 3), _fmt(after["mean_reward"], 3),
                         f"{after['mean_reward'] - before['mean_reward']:+.3f}"])
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


BUDGET_KEYS = ("max_tokens", "max_nodes")


def _search_series_labels(searches: dict[str, dict[str, Any]]) -> dict[str, str]:
    """A series label per file: the strategy's name, then the answer selection (when some file chose without the
    verifier), then the settings (budget excluded) that differ between files of the same strategy."""
    settings = {tag: {k: v for k, v in r["search"].items() if k not in BUDGET_KEYS} for tag, r in searches.items()}
    any_oracle_free = any(st.get("select", "verifier") != "verifier" for st in settings.values())
    labels = {}
    for tag, st in settings.items():
        same_name = [o for o in settings.values() if o.get("name") == st.get("name")]
        varying = sorted(k for k in st if k not in ("name", "select") and any(o.get(k) != st[k] for o in same_name))
        parts = [str(st.get("name", tag))]
        if any_oracle_free:  # then say which lines used the verifier to choose
            parts.append(f"by {st.get('select', 'verifier')}")
        parts += [f"{k}={st[k]}" for k in varying]
        labels[tag] = ", ".join(parts)
    return labels


def _search_section(searches: dict[str, dict[str, Any]]) -> str:
    """Test-time search: the searched answer's pass@1 against the tokens spent per problem, one line per
    strategy (points: the token budgets), and the numbers in a table."""
    if not searches:
        return ""
    labels = _search_series_labels(searches)
    series: dict[str, list[tuple[float, float | None]]] = {}
    rows = []
    for tag, r in sorted(searches.items(), key=lambda kv: (labels[kv[0]], kv[1]["tokens_per_problem"])):
        series.setdefault(labels[tag], []).append((float(r["tokens_per_problem"]), float(r["solve_rate"])))
        s = r["search"]
        rows.append([tag, labels[tag], _fmt(s.get("max_tokens")), _fmt(r.get("num_prompts")), _pct(r["solve_rate"]),
                     _fmt(r["tokens_per_problem"], 4), _fmt(r.get("tokens_per_solved"), 4),
                     str(r.get("split", "heldout"))])
    plot = svg_line_plot("Searched answer pass@1 against tokens spent", list(series.items()),
                         xlabel="tokens generated per problem", width=620, height=300, plot_id="search_tokens",
                         percent=True)
    table = _table(["file", "method", "budget (tokens)", "problems", "pass@1", "tokens/problem", "tokens/solved",
                    "split"], rows, "searches")
    note = ('<p class="muted">Answer by verifier: the verifier scores responses during the search, an oracle; '
            'by value / by vote: chosen without it (docs/search.md).</p>')
    return (f'<section id="search"><h2>Test-time search</h2><div class="row"><div>{plot}</div></div>'
            f"{table}{note}</section>")


def _num(s: str) -> float | None:
    try:
        return float(s)
    except ValueError:
        return None


def _pts(b: Any, a: Any) -> str:
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return f"{100 * (a - b):+.1f} pts"
    return "–"


def _image_store(images: list[str]) -> str:
    """The prompts' thumbnails, each once, as hidden `<img id="rimg-N">` elements the script clones into the
    rollout cards (a sample's `images` holds the indices N). The URIs were checked to be base64 image data URIs
    (`data._safe_uri`) and are escaped all the same; the page's CSP allows images from data: URIs only."""
    if not images:
        return ""
    imgs = "".join(f'<img id="rimg-{i}" src="{_e(uri)}" alt="">' for i, uri in enumerate(images))
    return f'<div id="rollout-images" hidden>{imgs}</div>'


def _rollout_section(rollouts: list[dict[str, Any]], images: list[str] | None = None) -> str:
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
""" + _image_store(images or []) + "</section>"


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
