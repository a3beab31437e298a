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
kept in the URL hash, e.g. report.html#filter=correct&step=10&q=carry; on image tasks each prompt's thumbnails
beside its samples, embedded once each as checked data-URI `<img>`s), config (config.yaml, versions.json).

Modules: `data.py` reads the run directory, `charts.py` draws the SVG plots, `sections.py` builds each
section's HTML, `embed.py` escapes untrusted text, `assets.py` holds the template, CSS and script, and
`page.py` puts them together (`write_report`, `render_report`).
"""

from rlvr.eval.report.charts import COLORS, nice_ticks, svg_line_plot
from rlvr.eval.report.embed import json_for_script
from rlvr.eval.report.page import MAX_ROLLOUTS, render_report, write_report
from rlvr.eval.report.sections import HACK_TELEMETRY, PLOTS

__all__ = [
    "COLORS",
    "HACK_TELEMETRY",
    "MAX_ROLLOUTS",
    "PLOTS",
    "json_for_script",
    "nice_ticks",
    "render_report",
    "svg_line_plot",
    "write_report",
]
