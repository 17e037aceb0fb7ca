"""The ``ukbench`` section of an ``objrec eval`` report: summary, tables and plots (see
:mod:`objrec.evaluation.kinds.ukbench` for what the tasks measure)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from objrec.evaluation.document import ReportDoc
from objrec.evaluation.stats import percentile_defined
from objrec.metrics.retrieval import ns_score

__all__ = ["image_group", "ukbench_section", "render_ukbench", "plot_ukbench"]

_NUMBER = re.compile(r"(\d+)$")


def image_group(name: str) -> int:
    """The object of a UKBench image named ``ukbenchNNNNN`` (its number divided by 4)."""
    m = _NUMBER.search(name)
    if m is None:
        raise ValueError(f"{name!r}: not a UKBench image name (ukbenchNNNNN)")
    return int(m.group(1)) // 4


def _retrieval(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Per detector kind: the N-S score of the index and of exact voting, and their times per query."""
    out: dict[str, Any] = {}
    for kind in dict.fromkeys(r["meta"]["kind"] for r in records):
        res = [r["result"] for r in records if r["meta"]["kind"] == kind]
        queries = [q for r in res for q in r["query"]]
        pos = {q: i for i, q in enumerate(queries)}
        groups = [image_group(q) for q in queries]
        entry: dict[str, Any] = {
            "n_images": len(queries),
            "voters_mean": round(float(np.mean([v for r in res for v in r["voters"]])), 1),
        }
        for method in ("index", "exact"):
            ranked = [[pos[n] for n in ranks] for r in res for ranks in r[method]]
            times = [t for r in res for t in r[f"{method}_ms"]]
            score = ns_score(ranked, groups)
            entry[method] = {"ns_score": round(score, 4), "ms_per_query_p50": percentile_defined(times, 50)}
        entry["index_minus_exact"] = round(entry["index"]["ns_score"] - entry["exact"]["ns_score"], 4)
        out[kind] = entry
    return out


def _recognition_stats(rows: list[dict[str, Any]], budget_ms: float | None) -> dict[str, Any]:
    n = len(rows)
    lat = [r["latency_ms"] for r in rows]
    out = {
        "n_queries": n,
        "found": sum(r["found"] for r in rows),
        "found_fraction": round(sum(r["found"] for r in rows) / n, 6),
        "wrong_top1": sum(r["wrong_top1"] for r in rows),
        "wrong_top1_fraction": round(sum(r["wrong_top1"] for r in rows) / n, 6),
        "wrong": sum(r["wrong"] for r in rows),
        "latency_ms": {q: percentile_defined(lat, v) for q, v in (("p50", 50), ("p90", 90), ("p99", 99), ("max", 100))},
    }
    if budget_ms is not None:
        out["late"] = sum(not r["deadline_met"] for r in rows)
        out["late_fraction"] = round(out["late"] / n, 6)
    return out


def ukbench_section(records: list[dict[str, Any]], detectors: list[str], budget_ms: float | None) -> dict[str, Any]:
    """The report's ``ukbench`` section: ``retrieval`` (per detector kind), ``recognition`` (per setting and
    recognizer; a setting that could not be enrolled is absent, its reason in the report's notes) and one row
    per recognition query.
    ``records``: the run's task records; ``detectors``: the recognizers (detector names) evaluated, in report order;
    ``budget_ms``: the frame budget in ms (None: none)."""
    rec = [r for r in records if r["meta"]["part"] == "recognition"]
    rows = [{"detector": r["detector"], "query": r["label"], **r["meta"], **r["result"]} for r in rec]
    recognition: dict[str, Any] = {}
    for setting in dict.fromkeys(r["setting"] for r in rows):
        for d in [d for d in detectors if any(r["detector"] == d and r["setting"] == setting for r in rows)]:
            sel = [r for r in rows if r["detector"] == d and r["setting"] == setting]
            recognition.setdefault(setting, {})[d] = _recognition_stats(sel, budget_ms)
    keys = ("detector", "setting", "query", "truth", "found", "wrong_top1", "latency_ms", "deadline_met", "detections")
    return {
        "retrieval": _retrieval([r for r in records if r["meta"]["part"] == "retrieval"]),
        "recognition": recognition,
        "queries": [{k: r.get(k) for k in keys} for r in rows],
    }


def render_ukbench(doc: ReportDoc, c: dict[str, Any], budget_ms: float | None) -> None:
    """Add the ukbench tables to ``doc``: retrieval scores per detector kind, recognition per setting.
    ``c``: the report's ukbench section; ``budget_ms``: the frame budget in ms (None: none)."""
    if c["retrieval"]:
        _render_retrieval(doc, c["retrieval"])
    if c["recognition"]:
        _render_recognition(doc, c["recognition"], budget_ms)


def _render_retrieval(doc: ReportDoc, retrieval: dict[str, Any]) -> None:
    doc.h(2, "UKBench retrieval (Nistér-Stewénius score, 4.0 perfect)")
    doc.table(
        [
            "descriptors",
            "images",
            "voters per image",
            "index N-S",
            "exact N-S",
            "index - exact",
            "index ms",
            "exact ms",
        ],
        [
            [k, e["n_images"], e["voters_mean"], e["index"]["ns_score"], e["exact"]["ns_score"], e["index_minus_exact"]]
            + [e["index"]["ms_per_query_p50"], e["exact"]["ms_per_query_p50"]]
            for k, e in retrieval.items()
        ],
    )


def _render_recognition(doc: ReportDoc, recognition: dict[str, Any], budget_ms: float | None) -> None:
    late = ["late"] if budget_ms else []
    doc.h(2, "UKBench recognition")
    doc.table(
        ["setting", "recognizer", "queries", "found", "wrong top-1", "wrong detections", "p50 ms", "p99 ms"] + late,
        [
            [setting, d, s["n_queries"], s["found_fraction"], s["wrong_top1_fraction"], s["wrong"]]
            + [s["latency_ms"]["p50"], s["latency_ms"]["p99"]]
            + ([s["late_fraction"]] if budget_ms else [])
            for setting, per in recognition.items()
            for d, s in per.items()
        ],
    )
    if "2-view" not in recognition:
        doc.p("2-view recognition was not run: multi-view enrolment is not available (see the notes).")


def plot_ukbench(report: dict[str, Any], out: Path, plt: Any) -> list[tuple[str, str]]:
    """Found share per setting and recognizer, the latency histogram, and the N-S score bars.
    ``report``: the report document; ``out``: the report folder; ``plt``: ``matplotlib.pyplot``."""
    c = report["ukbench"]
    if not c["recognition"] and not c["retrieval"]:
        return []
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    bars = [(f"{s}\n{d}", v["found_fraction"]) for s, per in c["recognition"].items() for d, v in per.items()]
    axes[0].bar([b[0] for b in bars], [b[1] for b in bars], color="tab:blue")
    axes[0].set(ylim=(0, 1), ylabel="share of queries found", title="recognition: found")
    bins = np.geomspace(1, max(2.0, max((q["latency_ms"] for q in c["queries"]), default=2.0)) * 1.1, 40)
    for s, per in c["recognition"].items():
        for d in per:
            lat = [q["latency_ms"] for q in c["queries"] if q["setting"] == s and q["detector"] == d]
            axes[1].hist(lat, bins=bins, histtype="step", label=f"{s} {d}")
    budget = report["config"].get("budget_ms")
    if budget:
        axes[1].axvline(budget, color="k", ls="--", lw=1, label="budget")
    axes[1].set(xscale="log", xlabel="latency (ms)", ylabel="queries", title="latency")
    axes[1].legend(fontsize=7)
    kinds = list(c["retrieval"])
    x = np.arange(len(kinds))
    for i, method in enumerate(("index", "exact")):
        axes[2].bar(x + (i - 0.5) * 0.4, [c["retrieval"][k][method]["ns_score"] for k in kinds], 0.4, label=method)
    axes[2].set_xticks(x, kinds)
    axes[2].set(ylim=(0, 4), ylabel="N-S score", title="retrieval: Nistér-Stewénius score")
    if kinds:
        axes[2].legend(fontsize=8)
    else:
        ax = axes[2]
        ax.text(0.5, 0.5, "retrieval not scored in this run", ha="center", va="center", transform=ax.transAxes)
    fig.tight_layout()
    fig.savefig(out / "plots/ukbench.png", dpi=90)
    plt.close(fig)
    return [("plots/ukbench.png", "found share per setting, latency histogram, N-S score of index and exact voting")]
