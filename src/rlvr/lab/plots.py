"""The lab's pictures: a finding's lab.png (its effect against 0 and the smallest effect that counts, the premise
beside it, then each arm per metric) and the suite's forest plot (one row per finding, on a scale of min_effect)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

COLOURS = {"reproduced": "#2a9d4b", "not reproduced": "#c0392b", "inconclusive": "#7f8c8d",
           "premise not met": "#d68910", "error": "#34495e"}


def base_verdict(verdict: str) -> str:
    """The verdict without its qualifier: "reproduced (unequal work: ...)" -> "reproduced"."""
    return verdict.split(" (", 1)[0]


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _effect_panel(ax: Any, result: dict[str, Any]) -> None:
    """The verdict's effect with its interval, 0 and the ±min_effect band, and the premise's checks as text."""
    m, effect = result["metric"], result.get("effects", {}).get(result["metric"])
    band = float(result.get("min_effect") or 0.0)
    if band > 0:
        ax.axvspan(-band, band, color="#f4d03f", alpha=0.3, label=f"±min_effect ({band:g})")
    ax.axvline(0.0, color="k", lw=0.8)
    if effect and effect.get("n"):
        lo = effect["lo"] if math.isfinite(effect["lo"]) else effect["mean"]
        hi = effect["hi"] if math.isfinite(effect["hi"]) else effect["mean"]
        colour = COLOURS.get(base_verdict(result["verdict"]), "k")
        ax.errorbar([effect["mean"]], [0], xerr=[[effect["mean"] - lo], [hi - effect["mean"]]], fmt="o",
                    color=colour, capsize=5, lw=2)
    ax.set_yticks([])
    ax.set_xlabel(f"{result['treatment']} − {result['control']} ({m})", fontsize=8)
    ax.set_title(f"effect ({result.get('direction')}): {base_verdict(result['verdict'])}", fontsize=9)
    premise = result.get("premise")
    if premise:
        lines = [("met: " if premise["met"] else "NOT met: ") + "premise"]
        lines += [f"{c['check']}: {c['value']:.3g}" if c.get("value") is not None else c["check"]
                  for c in premise["checks"]]
        ax.text(0.02, 0.02, "\n".join(lines), transform=ax.transAxes, fontsize=7, va="bottom",
                color="#2a9d4b" if premise["met"] else "#d68910")
    ax.legend(fontsize=7, loc="upper right")
    ax.grid(alpha=0.3, axis="x")


def plot_results(result: dict[str, Any], path: Path) -> None:
    """lab.png: the effect panel first, then one panel per metric with each arm's seeds and mean [95%]."""
    plt = _plt()
    arms_data = result.get("arms") or {}
    metrics = list(next(iter(arms_data.values()))) if arms_data else []
    arms = list(arms_data)
    fig, axes = plt.subplots(1, 1 + len(metrics), figsize=(3.6 * (1 + len(metrics)), 3.4), squeeze=False)
    _effect_panel(axes[0][0], result)
    for ax, m in zip(axes[0][1:], metrics):
        for i, arm in enumerate(arms):
            d = arms_data[arm][m]
            vals = list(d.get("values", {}).values())
            ax.scatter([i] * len(vals), vals, s=12, alpha=0.6)
            if d.get("n"):
                lo = d["lo"] if math.isfinite(d["lo"]) else d["mean"]
                hi = d["hi"] if math.isfinite(d["hi"]) else d["mean"]
                ax.errorbar([i + 0.15], [d["mean"]], yerr=[[d["mean"] - lo], [hi - d["mean"]]], fmt="o", color="k",
                            capsize=4)
        ax.set_xticks(range(len(arms)), arms, rotation=20, fontsize=8)
        ax.set_title(m + (" (verdict)" if m == result["metric"] else ""), fontsize=9)
        ax.grid(alpha=0.3)
    fig.suptitle(f"{result['finding']}: {result['verdict']}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def forest_rows(suite: dict[str, Any]) -> list[dict[str, Any]]:
    """Per finding: its effect and interval in units of min_effect, signed so the claimed direction is positive
    (an `equal` claim keeps its sign), and its verdict; findings without an effect are listed with none."""
    rows = []
    for row in suite["findings"]:
        effect, band = row.get("effect"), row.get("min_effect") or 0.0
        scaled = None
        if effect and effect.get("n") and band > 0:
            sign = -1.0 if row.get("direction") == "lower" else 1.0
            lo, hi = sorted((sign * effect["lo"] / band, sign * effect["hi"] / band))
            scaled = (sign * effect["mean"] / band, lo, hi)
        rows.append({"finding": row["finding"], "verdict": row["verdict"], "scaled": scaled,
                     "direction": row.get("direction")})
    return rows


def plot_forest(suite: dict[str, Any], path: Path) -> None:
    """suite.png: one row per finding, its effect [95%] / min_effect (claimed direction to the right), coloured
    by verdict, with 0 and ±1 (the smallest effect that counts) marked."""
    plt = _plt()
    rows = forest_rows(suite)
    fig, ax = plt.subplots(figsize=(7.5, 0.45 * len(rows) + 1.4))
    ax.axvline(0.0, color="k", lw=0.8)
    for x in (-1.0, 1.0):
        ax.axvline(x, color="#b7950b", lw=0.8, ls="--")
    for i, r in enumerate(reversed(rows)):
        colour = COLOURS.get(base_verdict(r["verdict"]), "k")
        if r["scaled"] is not None:
            mean, lo, hi = r["scaled"]
            finite_lo, finite_hi = (lo if math.isfinite(lo) else mean), (hi if math.isfinite(hi) else mean)
            ax.errorbar([mean], [i], xerr=[[mean - finite_lo], [finite_hi - mean]], fmt="o", color=colour,
                        capsize=4, lw=2)
        ax.text(1.01, i, r["verdict"], transform=ax.get_yaxis_transform(), fontsize=7, va="center", color=colour)
    ax.set_yticks(range(len(rows)), [r["finding"] for r in reversed(rows)], fontsize=8)
    ax.set_xlabel("effect / min_effect (claimed direction to the right; an 'equal' claim: inside ±1)", fontsize=8)
    ax.grid(alpha=0.3, axis="x")
    fig.tight_layout()
    fig.savefig(path, dpi=110, bbox_inches="tight")
    plt.close(fig)


CURVES = (("response_length_mean", "response length (tokens)"), ("accuracy", "training accuracy"))


def plot_curves(curves: dict[str, dict[int, dict[str, list[float]]]], path: Path, title: str) -> bool:
    """curves.png: per training arm, each seed's per-step curve (thin) and their mean (thick), one panel per
    metric in CURVES. `curves[arm][seed][metric]` is the per-step values. False (no file) when no arm trained."""
    if not any(seeds for seeds in curves.values()):
        return False
    plt = _plt()
    fig, axes = plt.subplots(1, len(CURVES), figsize=(5.0 * len(CURVES), 3.4), squeeze=False)
    colours = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    for ax, (key, label) in zip(axes[0], CURVES):
        for i, (arm, seeds) in enumerate(curves.items()):
            colour = colours[i % len(colours)]
            series = [s[key] for s in seeds.values() if s.get(key)]
            for values in series:
                ax.plot(range(1, len(values) + 1), values, color=colour, lw=0.6, alpha=0.35)
            if series:
                width = min(len(v) for v in series)
                mean = [sum(v[t] for v in series) / len(series) for t in range(width)]
                ax.plot(range(1, width + 1), mean, color=colour, lw=2, label=arm)
        ax.set_xlabel("step", fontsize=8)
        ax.set_title(label, fontsize=9)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
    fig.suptitle(f"{title}: per-step curves (thin: seeds; thick: their mean)", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return True
