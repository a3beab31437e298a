"""Rendering the whole report: read the run directory, build the sections, and fill the page template
under a Content-Security-Policy that allows no network and no script but the page's own."""

from __future__ import annotations

import base64
import datetime as _dt
import hashlib
from pathlib import Path

from rlvr.eval.report.assets import _SCRIPT, _STYLE, _TEMPLATE
from rlvr.eval.report.data import (
    _index_images,
    _read_evals,
    _read_jsonl,
    _read_searches,
    _read_text,
    _run_name,
    _share_group_images,
    _thin_rollouts,
)
from rlvr.eval.report.embed import _e, json_for_script
from rlvr.eval.report.sections import (
    _config_section,
    _curves_section,
    _eval_section,
    _rollout_section,
    _search_section,
    _summary_section,
)
from rlvr.tracking import METRICS_FILE, ROLLOUTS_FILE, read_rollouts

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
    searches = _read_searches(run_dir, notes)
    all_rollouts = read_rollouts(run_dir)
    _share_group_images(all_rollouts, notes)
    rollouts, dropped_steps = _thin_rollouts(all_rollouts, max_rollouts)
    images = _index_images(rollouts)
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
        _search_section(searches),
        _rollout_section(rollouts, images),
        _config_section(config_text, versions_text),
    ]
    notes_html = "".join(f"<li>{_e(n)}</li>" for n in notes)
    body = (f'<header><h1>{_e(run_name)}</h1><p class="muted">Run directory <code>{_e(str(run_dir))}</code> '
            f'&middot; report written {_e(_dt.datetime.now().strftime("%Y-%m-%d %H:%M"))}</p>'
            '<nav><a href="#summary">Summary</a><a href="#curves">Training curves</a>'
            '<a href="#evaluation">Evaluation</a>' + ('<a href="#search">Search</a>' if searches else "")
            + '<a href="#rollouts">Rollouts</a><a href="#config">Config</a></nav>'
            + (f'<ul class="notes" id="notes">{notes_html}</ul>' if notes else "") + "</header>"
            + "".join(sections))
    script_hash = base64.b64encode(hashlib.sha256(_SCRIPT.encode("utf-8")).digest()).decode()
    csp = (f"default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'sha256-{script_hash}'; "
           "base-uri 'none'; form-action 'none'")
    return (_TEMPLATE.replace("%CSP%", csp).replace("%TITLE%", _e(f"rlvr report: {run_name}"))
            .replace("%STYLE%", _STYLE).replace("%BODY%", body)
            .replace("%DATA%", json_for_script(rollouts)).replace("%SCRIPT%", _SCRIPT))
