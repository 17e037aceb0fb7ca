"""The ``features`` section of a report (``oxford``, ``hpatches``): aggregates, tables and plots.

Aggregates are computed from the records in task order, so a run on a Dask cluster gives the same numbers as a
single-process run (timings aside).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from objrec.evaluation.document import ReportDoc
from objrec.evaluation.feature_eval import HOMOGRAPHY_THRESHOLDS, MMA_THRESHOLDS
from objrec.evaluation.stats import mean_defined, median_with_failures, percentile_defined

__all__ = ["feature_summary", "features_section", "render_features", "plot_features"]


def feature_summary(rows: list[dict[str, Any]], budget_ms: float | None) -> dict[str, Any]:
    """Means over ``rows`` (pair rows of one detector) of the feature metrics, and detection-time percentiles.
    ``budget_ms``: the frame budget in ms (None: none)."""
    times = [t for r in rows for t in (r["time_ms"]["detect_1"], r["time_ms"]["detect_N"]) if t is not None]
    out = {
        "n_pairs": len(rows),
        "n_features_mean": mean_defined([float(np.mean(r["n_features"])) for r in rows]),
        "repeatability": mean_defined([r["repeatability"] for r in rows]),
        "matching_score": mean_defined([r["matching_score"] for r in rows]),
        "mma": [mean_defined([r["mma"][i] for r in rows]) for i in range(len(MMA_THRESHOLDS))],
        "homography_accuracy": {
            f"{t:g}": mean_defined([float(r["homography"]["correct"][f"{t:g}"]) for r in rows])
            for t in HOMOGRAPHY_THRESHOLDS
        },
        "corner_error_median": median_with_failures([r["homography"]["corner_error"] for r in rows]),
        "detect_ms": {
            "p50": percentile_defined(times, 50),
            "p90": percentile_defined(times, 90),
            "max": percentile_defined(times, 100),
        },
    }
    if budget_ms is not None:
        out["detect_within_budget"] = mean_defined([float(t <= budget_ms) for t in times])
    return out


def features_section(records: list[dict[str, Any]], detectors: list[str], budget_ms: float | None) -> dict:
    """The report's ``features`` section: pair rows, summary per detector, per sequence and per kind of change.
    ``records``: the run's task records; ``detectors``: the recognizers (detector names) evaluated, in report order;
    ``budget_ms``: the frame budget in ms (None: none)."""
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
    summary = {d: feature_summary([r for r in rows if r["detector"] == d], budget_ms) for d in present}
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
            d: feature_summary([r for r in rows if r["kind"] == k and r["detector"] == d], budget_ms)
            for d in present
            if any(r["kind"] == k and r["detector"] == d for r in rows)
        }
    return {"pairs": rows, "summary": summary, "sequences": seqs, "by_kind": kinds}


def plot_features(report: dict[str, Any], out: Path, plt: Any) -> list[tuple[str, str]]:
    """Scores against the change per sequence, MMA against its threshold, detection time against matching
    score (into ``out/plots``).
    ``report``: the report document; ``out``: the report folder; ``plt``: ``matplotlib.pyplot``."""
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


def render_features(doc: ReportDoc, f: dict[str, Any], budget_ms: float | None = None) -> None:
    """Add the feature tables to ``doc``: summary, by kind of change, and per sequence and pair.

    ``doc`` is the document being built, ``f`` the report's ``features`` section; ``budget_ms`` is not shown.
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
