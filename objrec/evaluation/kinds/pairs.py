"""``pairs:ROOT``: annotated image pairs (enrol image A, recognise in image B, score on annotated points).

The layout of ``ROOT`` is that of :mod:`objrec.datasets.pairs` (MAGSAC's ``data/homography`` pairs and the EVD
extreme-view pairs). For each pair the object is image A, enrolled in a fresh model database (``--views NAME`` is
passed on as ``ModelDB.enroll(..., views=NAME)``), and the scene is image B, given to a
:class:`~objrec.recognizer.Recognizer` without tracking or budget (``--tilts T1,T2`` as its ``tilts``). The error of
a detection is the median distance, in B, between A's annotated points mapped by the recovered homography and their
annotated positions in B; a pair is solved when it is at most :data:`SOLVED_PX` pixels. A pair without a detection
records the recognizer's rejection reasons.
"""

from __future__ import annotations

import inspect
import math
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

from objrec.datasets import AnnotatedPair, image_sizes, load_annotated_pairs, load_image
from objrec.evaluation.config import EvalConfig, finish_task
from objrec.evaluation.detectors import detector_status
from objrec.evaluation.document import ReportDoc
from objrec.evaluation.kinds.base import EvalKind

__all__ = [
    "KIND",
    "SOLVED_PX",
    "PAIR_DETECTORS",
    "median_error",
    "build",
    "evaluate_annotated_pair",
    "pairs_section",
    "render_pairs",
    "plot_pairs",
]

#: A pair is solved when the median error on its annotated points is at most this (pixels).
SOLVED_PX = 5.0
#: ``--detectors`` for pairs: ``objrec`` is the Recognizer with the database's default detectors.
PAIR_DETECTORS = ("objrec", "surf", "sift", "surf-gpu", "sift-numba", "sift-gpu")


def median_error(H: np.ndarray | None, points_a: np.ndarray, points_b: np.ndarray) -> float | None:
    """Median distance between ``points_a`` mapped by ``H`` and ``points_b``; None without a homography."""
    if H is None:
        return None
    from objrec.geometry import map_points

    mapped = map_points(np.asarray(H, np.float64), np.asarray(points_a, np.float64))
    e = float(np.median(np.linalg.norm(mapped - points_b, axis=1)))
    return e if math.isfinite(e) else None


def _select(pairs: list[AnnotatedPair], wanted: list[str] | None) -> list[AnnotatedPair]:
    """``wanted`` entries name a set (``evd``), a pair (``graf``, in every set) or a label (``evd/graf``)."""
    if not wanted:
        return pairs
    keep = [p for p in pairs if p.set in wanted or p.name in wanted or p.label in wanted]
    known = {p.set for p in pairs} | {p.name for p in pairs} | {p.label for p in pairs}
    bad = [w for w in wanted if w not in known]
    if bad:
        raise ValueError(f"--sequences: no set or pair {bad[0]!r} (sets: {', '.join(sorted({p.set for p in pairs}))})")
    return keep


def _check_views(views: str | None) -> None:
    """A clear error when ``--views`` is asked of a ModelDB.enroll that has no ``views`` parameter."""
    if views is None:
        return
    from objrec.modeldb import ModelDB

    if "views" not in inspect.signature(ModelDB.enroll).parameters:
        raise ValueError(f"--views {views}: this objrec's ModelDB.enroll has no 'views' parameter")


def build(cfg: EvalConfig) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The ``annotated_pair`` task specs of a ``pairs:ROOT`` run and the status of each detector.

    ``cfg.path`` is the root, ``cfg.sequences`` selects sets or pairs, ``cfg.detectors`` (default ``objrec``)
    and ``cfg.views`` and ``cfg.tilts`` choose the recognizer.
    """
    names = list(dict.fromkeys(cfg.detectors or ["objrec"]))
    for n in names:
        if n not in PAIR_DETECTORS:
            raise ValueError(f"--detectors: {n!r} cannot run on pairs (choose from {', '.join(PAIR_DETECTORS)})")
    views = getattr(cfg, "views", None)
    _check_views(views)
    tilts = list(getattr(cfg, "tilts", None) or [])
    status = {
        n: {"available": True, "note": "Recognizer defaults" + (f", tilts {tilts}" if tilts else "")}
        if n == "objrec"
        else detector_status(n).to_json()
        for n in names
    }
    pairs = _select(load_annotated_pairs(cfg.path), cfg.sequences)
    image_sizes([p.path_a for p in pairs] + [p.path_b for p in pairs])
    tasks = []
    for det in names:
        if not status[det]["available"]:
            continue
        for p in pairs:
            spec = {
                "type": "annotated_pair",
                "detector": det,
                "label": p.label,
                "image_a": str(p.path_a.resolve()),
                "image_b": str(p.path_b.resolve()),
                "points_a": p.points_a.tolist(),
                "points_b": p.points_b.tolist(),
                "views": views,
                **({"tilts": tilts} if tilts else {}),
                "meta": {"set": p.set, "pair": p.name, "n_points": len(p.points_a)},
            }
            tasks.append(finish_task(spec))
    return tasks, status


def _recognizer(
    detector: str, image_a: np.ndarray, views: str | None, folder: Path, tilts: list[float] | None = None
) -> Any:
    """A recognizer of image A alone (enrolled with ``views``) for ``detector``, searching ``tilts``."""
    from objrec.modeldb import ModelDB
    from objrec.recognizer import Recognizer

    if detector == "objrec":
        db = ModelDB.create(folder / "db")
        kw: dict[str, Any] = {"track": False}
    else:
        kind, _, backend = detector.partition("-")
        db = ModelDB.create(folder / "db", detectors={kind: {}})
        kw = {"track": False, "detectors": [kind], "backend": backend or "cpu"}
    enrol_kw: dict[str, Any] = {"views": views} if views is not None else {}
    db.enroll("a", image_a, **enrol_kw)
    if tilts:
        kw["tilts"] = tuple(tilts)
    return Recognizer(db, **kw)


def evaluate_annotated_pair(spec: dict[str, Any]) -> dict[str, Any]:
    """Enrol A, recognise in B (once to warm up, once measured), score on the annotated points.

    Returns ``{found, solved, error, n_points, inliers, score, visible_fraction, rejections: [{reason,
    matches, detail}], latency_ms, timings_ms}`` (``error`` None when nothing was found).
    """
    image_a, image_b = load_image(Path(spec["image_a"])), load_image(Path(spec["image_b"]))
    pa, pb = np.asarray(spec["points_a"], np.float64), np.asarray(spec["points_b"], np.float64)
    tmp = Path(tempfile.mkdtemp(prefix="objrec-eval-pair-"))
    try:
        rec = _recognizer(spec["detector"], image_a, spec.get("views"), tmp, spec.get("tilts"))
        rec.process(image_b)  # compilation and buffers for this frame size
        t0 = time.perf_counter()
        r = rec.process(image_b)
        latency = (time.perf_counter() - t0) * 1e3
        rejections = list(rec.last_rejections)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    det = max(r.detections, key=lambda d: d.score) if r.detections else None
    err = median_error(det.homography if det else None, pa, pb)
    return {
        "found": det is not None,
        "solved": err is not None and err <= SOLVED_PX,
        "error": None if err is None else round(err, 4),
        "n_points": int(len(pa)),
        "inliers": int(det.inliers) if det else None,
        "score": round(float(det.score), 6) if det else None,
        "visible_fraction": round(float(det.visible_fraction), 4) if det else None,
        "rejections": []
        if det
        else [{"reason": x.reason, "matches": int(x.matches), "detail": x.detail} for x in rejections],
        "latency_ms": round(float(latency), 3),
        "timings_ms": {k: round(float(v), 3) for k, v in r.timings_ms.items()},
    }


def _set_stats(rows: list[dict[str, Any]]) -> dict[str, Any]:
    errs = [r["error"] for r in rows if r["error"] is not None]
    lat = [r["latency_ms"] for r in rows]
    return {
        "n_pairs": len(rows),
        "found": sum(r["found"] for r in rows),
        "solved": sum(r["solved"] for r in rows),
        "solved_fraction": round(sum(r["solved"] for r in rows) / len(rows), 6),
        "error_median": round(float(np.median(errs)), 4) if errs else None,
        "latency_ms": {"p50": round(float(np.percentile(lat, 50)), 3), "max": round(float(max(lat)), 3)},
    }


def pairs_section(records: list[dict[str, Any]], detectors: list[str], budget_ms: float | None = None) -> dict:
    """The report's ``pairs`` section: ``{solved_px, summary: {detector: {set: STATS}}, pairs: [rows]}``.

    STATS = ``{n_pairs, found, solved, solved_fraction, error_median (found pairs), latency_ms: {p50, max}}``;
    a row is the task's result with ``detector``, ``set`` and ``pair``. ``budget_ms`` plays no part (the
    recognizer runs without a budget).
    ``records``: the run's task records; ``detectors``: the recognizers evaluated, in report order.
    """
    rows = [
        {"detector": r["detector"], "set": r["meta"]["set"], "pair": r["meta"]["pair"], **r["result"]} for r in records
    ]
    summary: dict[str, Any] = {}
    for d in detectors:
        mine = [r for r in rows if r["detector"] == d]
        sets = list(dict.fromkeys(r["set"] for r in mine))
        if mine:
            summary[d] = {s: _set_stats([r for r in mine if r["set"] == s]) for s in sets}
    return {"solved_px": SOLVED_PX, "summary": summary, "pairs": rows}


def _why(row: dict[str, Any]) -> str:
    if row["found"]:
        return ""
    reasons = dict.fromkeys(f"{x['reason']} ({x['detail']})" if x["detail"] else x["reason"] for x in row["rejections"])
    return "; ".join(reasons) or "no candidate"


def render_pairs(doc: ReportDoc, section: dict[str, Any], budget_ms: float | None = None) -> None:
    """Add the per-set summary and the per-pair table to ``doc`` (``budget_ms`` is not shown).
    ``section``: the report's pairs section."""
    px = f"{section['solved_px']:g}"
    doc.h(2, f"Annotated pairs: solved within {px} px")
    doc.table(
        ["detector", "set", "pairs", "found", f"solved (<= {px} px)", "median error (found)", "latency p50", "max"],
        [
            [d, s, v["n_pairs"], v["found"], f"{v['solved']}/{v['n_pairs']}", v["error_median"]]
            + [v["latency_ms"]["p50"], v["latency_ms"]["max"]]
            for d, sets in section["summary"].items()
            for s, v in sets.items()
        ],
    )
    doc.h(2, "Per pair")
    doc.table(
        ["detector", "pair", "points", "found", "median error (px)", "inliers", "visible", "latency ms", "not found"],
        [
            [r["detector"], f"{r['set']}/{r['pair']}", r["n_points"], r["found"], r["error"], r["inliers"]]
            + [r["visible_fraction"], r["latency_ms"], _why(r)]
            for r in section["pairs"]
        ],
    )


def plot_pairs(report: dict[str, Any], out: Path, plt: Any) -> list[tuple[str, str]]:
    """One panel per set: each pair's median error (log scale; not found at the top), the solved line.
    ``report``: the report document; ``out``: the report folder; ``plt``: ``matplotlib.pyplot``."""
    section = report["pairs"]
    sets = list(dict.fromkeys(r["set"] for r in section["pairs"]))
    fig, axes = plt.subplots(1, len(sets), figsize=(6 * len(sets), 4), squeeze=False)
    cap = 1e3
    for ax, s in zip(axes.ravel(), sets, strict=True):
        names = list(dict.fromkeys(r["pair"] for r in section["pairs"] if r["set"] == s))
        dets = list(section["summary"])
        for i, d in enumerate(dets):
            rows = {r["pair"]: r for r in section["pairs"] if r["set"] == s and r["detector"] == d}
            xs = [j + (i - (len(dets) - 1) / 2) * 0.8 / max(len(dets), 1) for j in range(len(names))]
            ys = [min(rows[n]["error"], cap) if n in rows and rows[n]["error"] is not None else cap for n in names]
            ax.bar(xs, ys, width=0.8 / max(len(dets), 1), label=d, color=f"C{i}")
        ax.axhline(section["solved_px"], color="k", ls="--", lw=1, label=f"{section['solved_px']:g} px")
        ax.set_yscale("log")
        ax.set_ylim(0.1, cap * 1.5)
        ax.set_xticks(range(len(names)), names, rotation=60, fontsize=7)
        ax.set(title=f"{s}: median error on annotated points (top = not found)", ylabel="px")
        ax.grid(alpha=0.3, axis="y")
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "plots/pairs_error.png", dpi=90)
    plt.close(fig)
    return [("plots/pairs_error.png", "median error on the annotated points per pair")]


KIND = EvalKind(
    name="pairs",
    section="pairs",
    task_type="annotated_pair",
    build=build,
    run=evaluate_annotated_pair,
    summarise=pairs_section,
    render=render_pairs,
    plot=plot_pairs,
)
