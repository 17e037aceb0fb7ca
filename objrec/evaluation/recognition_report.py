"""The ``recognition`` section of a report (``coil``, ``objects``, ``synthetic``): aggregates, tables, plots.

Aggregates are computed from the records in task order, so a run on a Dask cluster gives the same numbers as a
single-process run (timings aside).
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np

from objrec.evaluation.document import ReportDoc
from objrec.evaluation.stats import mean_defined, percentile_defined

__all__ = ["recognition_stats", "recognition_section", "render_recognition", "plot_recognition"]


def recognition_stats(rows: list[dict[str, Any]], budget_ms: float | None) -> dict[str, Any]:
    """Counts, precision, recall, corner errors and latency percentiles of scene rows.
    ``rows``: the scene rows; ``budget_ms``: the frame budget in ms (None: none)."""
    tp = sum(r["tp"] for r in rows)
    fp = sum(r["fp"] for r in rows)
    fn = sum(r["fn"] for r in rows)
    errs = [e for r in rows for e in r["corner_errors"]]
    lat = [r["latency_ms"] for r in rows]
    out = {
        "n_scenes": len(rows),
        "n_objects": sum(r["n_truth"] for r in rows),
        "tp": tp,
        "fp": fp,
        "fn": fn,
        "precision": round(tp / (tp + fp), 6) if tp + fp else None,
        "recall": round(tp / (tp + fn), 6) if tp + fn else None,
        "corner_error_mean": mean_defined(errs),
        "corner_error_median": percentile_defined(errs, 50),
        "latency_ms": {
            "p50": percentile_defined(lat, 50),
            "p90": percentile_defined(lat, 90),
            "p99": percentile_defined(lat, 99),
            "max": percentile_defined(lat, 100),
        },
    }
    if budget_ms is not None:
        out["deadline_met_fraction"] = mean_defined([float(bool(r["deadline_met"])) for r in rows])
    return out


def recognition_section(records: list[dict[str, Any]], detectors: list[str], budget_ms: float | None) -> dict:
    """The report's ``recognition`` section: summary per detector, groups per distortion and level, scenes.
    ``records``: the run's task records; ``detectors``: the recognizers (detector names) evaluated, in report order;
    ``budget_ms``: the frame budget in ms (None: none)."""
    rows = []
    for rec in records:
        rows.append({"detector": rec["detector"], "scene": rec["label"], **rec["meta"], **rec["result"]})
    present = [d for d in detectors if any(r["detector"] == d for r in rows)]
    summary = {d: recognition_stats([r for r in rows if r["detector"] == d], budget_ms) for d in present}
    groups = []
    keys = list(dict.fromkeys((r["distortion"], json.dumps(r["level"])) for r in rows))
    for dist, lvl in keys:
        for d in present:
            sel = [r for r in rows if r["detector"] == d and r["distortion"] == dist and json.dumps(r["level"]) == lvl]
            if sel:
                groups.append(
                    {"distortion": dist, "level": json.loads(lvl), "detector": d, **recognition_stats(sel, budget_ms)}
                )
    scenes = [
        {k: r[k] for k in ("detector", "scene", "distortion", "level", "n_truth", "tp", "fp", "fn", "latency_ms")}
        for r in rows
    ]
    return {"summary": summary, "groups": groups, "scenes": scenes}


def plot_recognition(report: dict[str, Any], out: Path, plt: Any) -> list[tuple[str, str]]:
    """Recall against the distortion level (one panel per distortion) and latency against recall.
    ``report``: the report document; ``out``: the report folder; ``plt``: ``matplotlib.pyplot``."""
    rec = report["recognition"]
    dets = list(rec["summary"])
    dists = [d for d in dict.fromkeys(g["distortion"] for g in rec["groups"]) if d != "negative"]
    made = []
    if dists:
        ncol = min(3, len(dists))
        nrow = math.ceil(len(dists) / ncol)
        fig, axes = plt.subplots(nrow, ncol, figsize=(4.4 * ncol, 3.4 * nrow), squeeze=False)
        for ax, dist in zip(axes.ravel(), dists, strict=False):
            for d in dets:
                gs = [g for g in rec["groups"] if g["distortion"] == dist and g["detector"] == d]
                levels = [g["level"] for g in gs]
                numeric = all(isinstance(x, int | float) for x in levels)
                xs = levels if numeric else list(range(len(levels)))
                order = np.argsort(xs, kind="stable") if numeric else np.arange(len(xs))
                ax.plot(
                    [xs[i] for i in order],
                    [np.nan if gs[i]["recall"] is None else gs[i]["recall"] for i in order],
                    marker="o",
                    label=d,
                )
                if not numeric:
                    ax.set_xticks(range(len(levels)), [str(x) for x in levels], rotation=45, fontsize=7)
            ax.set(title=dist, xlabel="level", ylabel="recall", ylim=(-0.02, 1.02))
            ax.grid(alpha=0.3)
        for ax in axes.ravel()[len(dists) :]:
            ax.axis("off")
        axes.ravel()[0].legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / "plots/recall_by_distortion.png", dpi=90)
        plt.close(fig)
        made.append(("plots/recall_by_distortion.png", "recall vs distortion level"))
    fig, ax = plt.subplots(figsize=(6.5, 4.5))
    for i, d in enumerate(dets):
        color = f"C{i}"
        gs = [g for g in rec["groups"] if g["detector"] == d and g["recall"] is not None]
        ax.scatter([g["latency_ms"]["p50"] for g in gs], [g["recall"] for g in gs], color=color, s=12, alpha=0.5)
        sm = rec["summary"][d]
        if sm["recall"] is not None:
            ax.scatter([sm["latency_ms"]["p50"]], [sm["recall"]], color=color, s=90, marker="D", label=d)
    if report["config"].get("budget_ms"):
        ax.axvline(report["config"]["budget_ms"], color="k", ls="--", lw=1, label="budget")
    ax.set(
        xlabel="latency p50 (ms)",
        ylabel="recall",
        title="latency vs recall (small: per distortion level)",
        ylim=(-0.02, 1.02),
    )
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "plots/latency_vs_recall.png", dpi=90)
    plt.close(fig)
    made.append(("plots/latency_vs_recall.png", "latency vs recall"))
    return made


def _accuracy_latency_cells(s: dict[str, Any], latency: tuple[str, ...]) -> list[Any]:
    """Precision, recall, mean corner error and the ``latency`` statistics of a recognition summary.

    Parameters
    ----------
    s : dict
        A per-detector summary or a per-group row of the report's ``recognition`` section.
    latency : tuple of str
        Keys of ``s["latency_ms"]`` to list, in order (e.g. ``("p50", "p90", "p99")``).

    Returns
    -------
    list
        The table cells, in the order of the column names ``precision``, ``recall``, ``corner err mean``,
        then one per ``latency`` key.
    """
    return [s["precision"], s["recall"], s["corner_error_mean"]] + [s["latency_ms"][q] for q in latency]


def render_recognition(doc: ReportDoc, r: dict[str, Any], budget_ms: float | None) -> None:
    """Add the recognition tables to ``doc``: summary per detector, then per distortion and level.

    ``doc`` is the document being built; the other arguments are parts of the report.
    ``r``: the report's recognition section; ``budget_ms``: the frame budget in ms (None: none).
    """
    accuracy = ["precision", "recall", "corner err mean", "latency p50", "p90", "p99"]
    doc.h(2, "Recognition summary")
    doc.table(
        ["detector", "scenes", "objects", "TP", "FP", "FN"]
        + accuracy
        + ["max"]
        + (["deadline met"] if budget_ms else []),
        [
            [d, s["n_scenes"], s["n_objects"], s["tp"], s["fp"], s["fn"]]
            + _accuracy_latency_cells(s, ("p50", "p90", "p99", "max"))
            + ([s.get("deadline_met_fraction")] if budget_ms else [])
            for d, s in r["summary"].items()
        ],
    )
    doc.h(2, "Per distortion and level")
    doc.table(
        ["distortion", "level", "detector", "scenes"] + accuracy,
        [
            [
                g["distortion"],
                f"{g['level']:g}" if isinstance(g["level"], int | float) else str(g["level"]),
                g["detector"],
                g["n_scenes"],
            ]
            + _accuracy_latency_cells(g, ("p50", "p90", "p99"))
            for g in r["groups"]
        ],
    )
