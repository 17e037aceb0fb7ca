"""Aggregating records into ``report.json`` and rendering ``report.md``, ``report.html`` and PNG plots.

Aggregates are computed from the records in task order, never in completion order, so a run on a Dask
cluster gives the same numbers as a single-process run (timings aside).
"""

from __future__ import annotations

import html
import json
import math
import os
import platform
import time
from pathlib import Path
from typing import Any

import numpy as np

from objrec.evaluation.feature_eval import HOMOGRAPHY_THRESHOLDS, MMA_THRESHOLDS
from objrec.evaluation.tasks import FEATURE_KINDS, EvalConfig

__all__ = ["SCHEMA", "build_report", "write_reports", "numbers_only"]

SCHEMA = "objrec-eval/1"


def _mean(xs: list[float | None]) -> float | None:
    v = [x for x in xs if x is not None]
    return round(float(np.mean(v)), 6) if v else None


def _pct(xs: list[float | None], q: float) -> float | None:
    v = [x for x in xs if x is not None]
    return round(float(np.percentile(v, q)), 3) if v else None


def _median_inf(xs: list[float | None]) -> float | None:
    """Median where ``None`` means a failed estimate (infinite error); None when at least half failed."""
    if not xs:
        return None
    v = np.array([math.inf if x is None else x for x in xs], np.float64)
    m = float(np.median(v))
    return round(m, 4) if math.isfinite(m) else None


# --- features --------------------------------------------------------------------------------------------
def _feature_summary(rows: list[dict[str, Any]], budget_ms: float | None) -> dict[str, Any]:
    times = [t for r in rows for t in (r["time_ms"]["detect_1"], r["time_ms"]["detect_N"]) if t is not None]
    out = {
        "n_pairs": len(rows),
        "n_features_mean": _mean([float(np.mean(r["n_features"])) for r in rows]),
        "repeatability": _mean([r["repeatability"] for r in rows]),
        "matching_score": _mean([r["matching_score"] for r in rows]),
        "mma": [_mean([r["mma"][i] for r in rows]) for i in range(len(MMA_THRESHOLDS))],
        "homography_accuracy": {
            f"{t:g}": _mean([float(r["homography"]["correct"][f"{t:g}"]) for r in rows]) for t in HOMOGRAPHY_THRESHOLDS
        },
        "corner_error_median": _median_inf([r["homography"]["corner_error"] for r in rows]),
        "detect_ms": {"p50": _pct(times, 50), "p90": _pct(times, 90), "max": _pct(times, 100)},
    }
    if budget_ms is not None:
        out["detect_within_budget"] = _mean([float(t <= budget_ms) for t in times])
    return out


def _features_section(records: list[dict[str, Any]], detectors: list[str], budget_ms: float | None) -> dict:
    rows = []
    for rec in records:
        m, r = rec["meta"], rec["result"]
        rows.append(
            {
                "detector": rec["detector"],
                "seq": m["seq"],
                "kind": m["kind"],
                "index": m["index"],
                "pair": rec["label"],
                **r,
            }
        )
    present = [d for d in detectors if any(r["detector"] == d for r in rows)]
    summary = {d: _feature_summary([r for r in rows if r["detector"] == d], budget_ms) for d in present}
    seqs: dict[str, Any] = {}
    for r in rows:
        s = seqs.setdefault(r["seq"], {"kind": r["kind"], "detectors": {}})
        d = s["detectors"].setdefault(
            r["detector"],
            {"index": [], "repeatability": [], "matching_score": [], "mma3": [], "corner_error": [], "n_features": []},
        )
        d["index"].append(r["index"])
        d["repeatability"].append(r["repeatability"])
        d["matching_score"].append(r["matching_score"])
        d["mma3"].append(r["mma"][2])
        d["corner_error"].append(r["homography"]["corner_error"])
        d["n_features"].append(r["n_features"])
    kinds: dict[str, Any] = {}
    for k in dict.fromkeys(r["kind"] for r in rows):
        kinds[k] = {
            d: _feature_summary([r for r in rows if r["kind"] == k and r["detector"] == d], budget_ms)
            for d in present
            if any(r["kind"] == k and r["detector"] == d for r in rows)
        }
    return {"pairs": rows, "summary": summary, "sequences": seqs, "by_kind": kinds}


# --- recognition -----------------------------------------------------------------------------------------
def _recognition_stats(rows: list[dict[str, Any]], budget_ms: float | None) -> dict[str, Any]:
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
        "corner_error_mean": _mean(errs),
        "corner_error_median": _pct(errs, 50),
        "latency_ms": {"p50": _pct(lat, 50), "p90": _pct(lat, 90), "p99": _pct(lat, 99), "max": _pct(lat, 100)},
    }
    if budget_ms is not None:
        out["deadline_met_fraction"] = _mean([float(bool(r["deadline_met"])) for r in rows])
    return out


def _recognition_section(records: list[dict[str, Any]], detectors: list[str], budget_ms: float | None) -> dict:
    rows = []
    for rec in records:
        rows.append({"detector": rec["detector"], "scene": rec["label"], **rec["meta"], **rec["result"]})
    present = [d for d in detectors if any(r["detector"] == d for r in rows)]
    summary = {d: _recognition_stats([r for r in rows if r["detector"] == d], budget_ms) for d in present}
    groups = []
    keys = list(dict.fromkeys((r["distortion"], json.dumps(r["level"])) for r in rows))
    for dist, lvl in keys:
        for d in present:
            sel = [r for r in rows if r["detector"] == d and r["distortion"] == dist and json.dumps(r["level"]) == lvl]
            if sel:
                groups.append(
                    {"distortion": dist, "level": json.loads(lvl), "detector": d, **_recognition_stats(sel, budget_ms)}
                )
    scenes = [
        {k: r[k] for k in ("detector", "scene", "distortion", "level", "n_truth", "tp", "fp", "fn", "latency_ms")}
        for r in rows
    ]
    return {"summary": summary, "groups": groups, "scenes": scenes}


def _environment() -> dict[str, Any]:
    import cv2

    return {
        "python": platform.python_version(),
        "platform": platform.platform(),
        "cpu_count": os.cpu_count(),
        "opencv": cv2.__version__,
        "numpy": np.__version__,
        "opencv_threads": cv2.getNumThreads(),
    }


def build_report(
    cfg: EvalConfig,
    status: dict[str, dict[str, Any]],
    tasks: list[dict[str, Any]],
    records: list[dict[str, Any]],
    run: dict[str, Any],
) -> dict[str, Any]:
    """The ``report.json`` document (schema in :mod:`objrec.evaluation`)."""
    from objrec import __version__

    detectors = list(status)
    report: dict[str, Any] = {
        "schema": SCHEMA,
        "objrec_version": __version__,
        "dataset": {"kind": cfg.kind, "path": cfg.path},
        "config": cfg.to_json(),
        "detectors": status,
        "features": None,
        "recognition": None,
        "pairs": None,
        "catalogue": None,
        "run": {**run, "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z")},
        "environment": _environment(),
        "notes": list(cfg.notes),
    }
    for name, s in status.items():
        if not s["available"]:
            report["notes"].append(f"{name}: not evaluated ({s['note']})")
    if cfg.kind in FEATURE_KINDS:
        report["features"] = _features_section(records, detectors, cfg.budget_ms)
    elif cfg.kind == "pairs":
        from objrec.evaluation.pairs import pairs_section

        report["pairs"] = pairs_section(records, detectors)
    elif cfg.kind == "catalogue":
        from objrec.evaluation.catalogue import catalogue_section

        report["catalogue"] = catalogue_section(records, detectors, cfg.budget_ms)
    else:
        report["recognition"] = _recognition_section(records, detectors, cfg.budget_ms)
    if run.get("workers", 1) and run.get("workers", 1) > 1:
        report["notes"].append(
            f"timings measured with {run['workers']} workers running side by side on {os.cpu_count()} CPU(s): "
            "they compete for cores and memory bandwidth"
        )
    return report


_TIMING_KEYS = (
    "time_ms",
    "detect_ms",
    "latency_ms",
    "timings_ms",
    "deadline_met",
    "deadline_met_fraction",
    "detect_within_budget",
    "elapsed_s",
    "stage_ms_mean",
    "deadline_misses",
)


def numbers_only(report: dict[str, Any]) -> dict[str, Any]:
    """The parts of a report that must not depend on how it was run: detectors, features, recognition,
    without timing fields (for comparing a Dask run with a single-process one)."""

    def strip(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: strip(v) for k, v in x.items() if k not in _TIMING_KEYS}
        if isinstance(x, list):
            return [strip(v) for v in x]
        return x

    return strip({k: report.get(k) for k in ("dataset", "detectors", "features", "recognition", "pairs", "catalogue")})


# --- rendering -------------------------------------------------------------------------------------------
def _fmt(x: Any, nd: int = 3) -> str:
    if x is None:
        return "–"
    if isinstance(x, bool):
        return "yes" if x else "no"
    if isinstance(x, float):
        return f"{x:.{nd}f}"
    return str(x)


class _Doc:
    """A list of blocks rendered to Markdown and to HTML."""

    def __init__(self) -> None:
        self.blocks: list[tuple] = []

    def h(self, level: int, text: str) -> None:
        self.blocks.append(("h", level, text))

    def p(self, text: str) -> None:
        self.blocks.append(("p", text))

    def pre(self, text: str) -> None:
        self.blocks.append(("pre", text))

    def table(self, headers: list[str], rows: list[list[Any]]) -> None:
        self.blocks.append(("table", headers, [[_fmt(c) for c in r] for r in rows]))

    def img(self, path: str, caption: str) -> None:
        self.blocks.append(("img", path, caption))

    def markdown(self) -> str:
        out = []
        for b in self.blocks:
            if b[0] == "h":
                out.append("#" * b[1] + " " + b[2])
            elif b[0] == "p":
                out.append(b[1])
            elif b[0] == "pre":
                out.append("```\n" + b[1].rstrip() + "\n```")
            elif b[0] == "table":
                lines = ["| " + " | ".join(b[1]) + " |", "|" + "---|" * len(b[1])]
                lines += ["| " + " | ".join(r) + " |" for r in b[2]]
                out.append("\n".join(lines))
            elif b[0] == "img":
                out.append(f"![{b[2]}]({b[1]})")
        return "\n\n".join(out) + "\n"

    def html(self, title: str) -> str:
        e = html.escape
        out = [
            "<!DOCTYPE html>",
            f"<html><head><meta charset='utf-8'><title>{e(title)}</title>",
            "<style>body{font-family:sans-serif;max-width:1200px;margin:2em auto}"
            "table{border-collapse:collapse;margin:1em 0}td,th{border:1px solid #ccc;padding:2px 8px;"
            "text-align:right}th{background:#eee}td:first-child{text-align:left}img{max-width:100%}"
            "pre{background:#f6f6f6;padding:1em;overflow:auto}</style></head><body>",
        ]
        for b in self.blocks:
            if b[0] == "h":
                out.append(f"<h{b[1]}>{e(b[2])}</h{b[1]}>")
            elif b[0] == "p":
                out.append(f"<p>{e(b[1])}</p>")
            elif b[0] == "pre":
                out.append(f"<pre>{e(b[1])}</pre>")
            elif b[0] == "table":
                out.append("<table><tr>" + "".join(f"<th>{e(h)}</th>" for h in b[1]) + "</tr>")
                for r in b[2]:
                    out.append("<tr>" + "".join(f"<td>{e(c)}</td>" for c in r) + "</tr>")
                out.append("</table>")
            elif b[0] == "img":
                out.append(f"<figure><img src='{e(b[1])}' alt='{e(b[2])}'><figcaption>{e(b[2])}</figcaption></figure>")
        out.append("</body></html>")
        return "\n".join(out) + "\n"


def _plots_features(report: dict[str, Any], out: Path, plt: Any) -> list[tuple[str, str]]:
    feats = report["features"]
    made = []
    dets = list(feats["summary"])
    for seq, s in feats["sequences"].items():
        fig, axes = plt.subplots(1, 3, figsize=(13, 3.6))
        for d in dets:
            if d not in s["detectors"]:
                continue
            v = s["detectors"][d]
            for ax, key in zip(axes, ("repeatability", "matching_score", "mma3"), strict=True):
                ys = [np.nan if y is None else y for y in v[key]]
                ax.plot(v["index"], ys, marker="o", label=d)
        for ax, title in zip(axes, ("repeatability", "matching score", "MMA @ 3 px"), strict=True):
            ax.set_title(f"{seq} ({s['kind']}): {title}")
            ax.set_xlabel("image N of pair 1→N (growing change)")
            ax.set_xticks(sorted({i for v in s["detectors"].values() for i in v["index"]}))
            ax.set_ylim(0, 1)
            ax.grid(alpha=0.3)
        axes[0].legend(fontsize=8)
        fig.tight_layout()
        path = f"plots/seq_{seq}.png"
        fig.savefig(out / path, dpi=90)
        plt.close(fig)
        made.append((path, f"{seq}: scores vs change"))
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    for d in dets:
        sm = feats["summary"][d]
        axes[0].plot(MMA_THRESHOLDS, [np.nan if a is None else a for a in sm["mma"]], marker=".", label=d)
        t = sm["detect_ms"]["p50"]
        if t is not None and sm["matching_score"] is not None:
            axes[1].scatter([t], [sm["matching_score"]], label=d, s=50)
            axes[1].annotate(d, (t, sm["matching_score"]), fontsize=8)
    axes[0].set(title="mean matching accuracy (all pairs)", xlabel="threshold (px)", ylabel="MMA", ylim=(0, 1))
    axes[1].set(
        title="detection time vs matching score",
        xlabel="median detection time per image (ms)",
        ylabel="mean matching score",
    )
    axes[1].set_xscale("log")
    for ax in axes:
        ax.grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "plots/mma_and_time.png", dpi=90)
    plt.close(fig)
    made.append(("plots/mma_and_time.png", "MMA vs threshold; detection time vs matching score"))
    return made


def _plots_recognition(report: dict[str, Any], out: Path, plt: Any) -> list[tuple[str, str]]:
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


def _render_header(doc: _Doc, report: dict[str, Any], plot_note: str | None) -> None:
    """Add the title, the run line, the detector table and the notes to ``doc``.

    ``doc`` is the document being built; the other arguments are parts of the report.
    """
    ds = report["dataset"]
    doc.h(1, f"objrec eval: {ds['kind']}:{ds['path']}")
    run = report["run"]
    doc.p(
        f"objrec {report['objrec_version']}, {run['tasks']} tasks ({run['ran']} run now, {run['resumed']} from "
        f"earlier records), {run['mode']}, {run['workers']} worker(s), wall time {run['wall_s']:.1f} s. "
        f"OpenCV {report['environment']['opencv']}, {report['environment']['cpu_count']} CPU(s)."
    )
    doc.h(2, "Detectors")
    doc.table(
        ["detector", "evaluated", "note"], [[n, s["available"], s["note"]] for n, s in report["detectors"].items()]
    )
    for n in report["notes"]:
        doc.p("Note: " + n)
    if plot_note:
        doc.p("Note: " + plot_note)


def _render_features(doc: _Doc, f: dict[str, Any]) -> None:
    """Add the feature tables to ``doc``: summary, by kind of change, and per sequence and pair.

    ``doc`` is the document being built; the other arguments are parts of the report.
    """
    doc.h(2, "Summary over all pairs")
    th = [f"{t:g}" for t in HOMOGRAPHY_THRESHOLDS]
    doc.table(
        ["detector", "pairs", "features", "repeatability", "matching score", "MMA@1", "MMA@3", "MMA@5", "MMA@10"]
        + [f"H acc@{t}px" for t in th]
        + ["corner err median", "detect ms p50"],
        [
            [
                d,
                s["n_pairs"],
                s["n_features_mean"],
                s["repeatability"],
                s["matching_score"],
                s["mma"][0],
                s["mma"][2],
                s["mma"][4],
                s["mma"][9],
            ]
            + [s["homography_accuracy"][t] for t in th]
            + [s["corner_error_median"], s["detect_ms"]["p50"]]
            for d, s in f["summary"].items()
        ],
    )
    doc.h(2, "By kind of change")
    doc.table(
        ["kind", "detector", "repeatability", "matching score", "MMA@3", "H acc@3px"],
        [
            [k, d, s["repeatability"], s["matching_score"], s["mma"][2], s["homography_accuracy"]["3"]]
            for k, v in f["by_kind"].items()
            for d, s in v.items()
        ],
    )
    for key, title in (
        ("repeatability", "Repeatability"),
        ("matching_score", "Matching score"),
        ("mma3", "MMA @ 3 px"),
        ("corner_error", "Homography corner error (px; – = failed)"),
    ):
        doc.h(2, f"{title} per sequence and pair")
        idx = sorted({i for s in f["sequences"].values() for v in s["detectors"].values() for i in v["index"]})
        rows = []
        for seq, s in f["sequences"].items():
            for d, v in s["detectors"].items():
                vals = dict(zip(v["index"], v[key], strict=True))
                rows.append([f"{seq} ({s['kind']})", d] + [vals.get(i) for i in idx])
        doc.table(["sequence", "detector"] + [f"1→{i}" for i in idx], rows)


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


def _render_recognition(doc: _Doc, r: dict[str, Any], budget_ms: float | None) -> None:
    """Add the recognition tables to ``doc``: summary per detector, then per distortion and level.

    ``doc`` is the document being built; the other arguments are parts of the report.
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


def _render_files(doc: _Doc, plots: list[tuple[str, str]]) -> None:
    """Add the plots (if any) and the file and ``report.json`` schema description to ``doc``.

    ``doc`` is the document being built; the other arguments are parts of the report.
    """
    if plots:
        doc.h(2, "Plots")
        for path, caption in plots:
            doc.img(path, caption)
    doc.h(2, "Files and schema")
    import objrec.evaluation as ev

    schema = ev.__doc__.split("report.json schema", 1)[-1].lstrip("\n") if ev.__doc__ else ""
    doc.pre(schema.split("\n", 1)[-1] if schema.startswith("---") else schema)


def _render(report: dict[str, Any], plots: list[tuple[str, str]], plot_note: str | None) -> _Doc:
    """The document of ``report.md`` and ``report.html``, one section after the other.

    Parameters
    ----------
    report : dict
        The report (:func:`build_report`).
    plots : list of (str, str)
        Relative PNG path and caption of each plot.
    plot_note : str or None
        A note on the plots, added after the report's own notes.

    Returns
    -------
    _Doc
        The rendered document.
    """
    doc = _Doc()
    _render_header(doc, report, plot_note)
    if report["features"] is not None:
        _render_features(doc, report["features"])
    if report["recognition"] is not None:
        _render_recognition(doc, report["recognition"], report["config"].get("budget_ms"))
    if report.get("pairs") is not None:
        from objrec.evaluation.pairs import render_pairs

        render_pairs(doc, report["pairs"])
    if report.get("catalogue") is not None:
        from objrec.evaluation.catalogue import render_catalogue

        render_catalogue(doc, report["catalogue"], report["config"].get("budget_ms"))
    _render_files(doc, plots)
    return doc


def write_reports(report: dict[str, Any], out: str | os.PathLike, plots: bool = True) -> list[str]:
    """Write ``report.json``, the PNG plots, ``report.md`` and ``report.html`` into ``out`` (atomically)."""
    from objrec.fileio import atomic_write_bytes

    out = Path(out)
    made: list[tuple[str, str]] = []
    note = None
    if plots:
        try:
            import matplotlib

            matplotlib.use("Agg", force=True)
            import matplotlib.pyplot as plt
        except ImportError:
            note = "matplotlib is not installed (pip install 'objrec[plot]'): no plots"
        else:
            (out / "plots").mkdir(exist_ok=True)
            if report["features"] is not None:
                made = _plots_features(report, out, plt)
            elif report.get("pairs") is not None:
                from objrec.evaluation.pairs import plot_pairs

                made = plot_pairs(report, out, plt)
            elif report.get("catalogue") is not None:
                from objrec.evaluation.catalogue import plot_catalogue

                made = plot_catalogue(report, out, plt)
            else:
                made = _plots_recognition(report, out, plt)
    else:
        note = "plots turned off (--no-plots)"
    report["plots"] = [p for p, _ in made]
    if note:
        report["notes"].append(note)
    atomic_write_bytes(out / "report.json", (json.dumps(report, indent=1, allow_nan=False) + "\n").encode())
    doc = _render(report, made, None)
    atomic_write_bytes(out / "report.md", doc.markdown().encode())
    atomic_write_bytes(out / "report.html", doc.html(f"objrec eval {report['dataset']['kind']}").encode())
    return ["report.json", "report.md", "report.html"] + report["plots"]
