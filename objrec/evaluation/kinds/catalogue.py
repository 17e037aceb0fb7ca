"""``catalogue:PATH``: reference images enrolled, labelled photos recognised one by one.

The layouts of ``PATH`` are those of :mod:`objrec.datasets.catalogue`. The references, plus every image of each
``--distractors DIR`` (named ``<DIR name>_<stem>``), are enrolled once into a model database in ``--out``
(reused by a rerun). ``--without-query-objects`` leaves the labelled references out, so every detection is a
wrong one. Each photo is resized to ``--query-side`` pixels on its long side (area averaging) and recognised as
one unrelated still frame.

Recognizers (``--detectors``): ``objrec`` (:class:`~objrec.recognizer.Recognizer` with the database's
detectors, no prefilter, no tracking, retrieval chosen by database size), ``objrec-coarse`` (the same with
SURF sampling frames every other pixel, ``sample_step=2``), ``objrec-exact`` (the same with exact matching
against every object), ``findobj`` (the anchor, :class:`~objrec.evaluation.baseline.FindObjBaseline` after
Find-Object: OpenCV SIFT, one FLANN kd-tree over every reference descriptor, Lowe's ratio 0.8, RANSAC at 5 px
on the :data:`ANCHOR_CANDIDATES` objects with most ratio-test matches, a detection from
:data:`ANCHOR_MIN_INLIERS` inliers on).

Metrics per recognizer: found (the label among the detections), top-1 (the best-scored detection is the
label), wrong detections (detections of any other object; a photo may show other covers beside the
labelled one), latency percentiles, deadline misses with ``--budget-ms``, and the mean time per stage.
"""

from __future__ import annotations

import functools
import hashlib
import json
import time
import weakref
from pathlib import Path
from typing import Any

import numpy as np

from objrec.datasets import CatalogueSet, DatasetError, image_files, load_catalogue, load_image, object_name
from objrec.evaluation.baseline import FindObjBaseline
from objrec.evaluation.config import EvalConfig, finish_task
from objrec.evaluation.document import ReportDoc
from objrec.evaluation.kinds.base import EvalKind
from objrec.evaluation.stats import percentile_defined

__all__ = [
    "KIND",
    "CATALOGUE_DETECTORS",
    "catalogue_objects",
    "build_database",
    "build",
    "evaluate_query",
    "score_query",
    "catalogue_section",
    "render_catalogue",
    "plot_catalogue",
]

CATALOGUE_DETECTORS = ("objrec", "objrec-coarse", "objrec-exact", "findobj")
DEFAULT_CATALOGUE_DETECTORS = ("objrec", "findobj")
#: Objects the anchor verifies per photo (those with most ratio-test matches), and its smallest detection.
ANCHOR_CANDIDATES = 5
ANCHOR_MIN_INLIERS = 10


def catalogue_objects(cfg: Any, cat: CatalogueSet) -> list[tuple[str, str]]:
    """The objects to enrol: references (less the labelled ones with ``without_query_objects``), distractors.

    ``cfg`` needs ``distractors`` and ``without_query_objects`` (an :class:`EvalConfig` or any namespace).
    ``cat``: the catalogue dataset.
    """
    labelled = {lab for _, lab, _ in cat.queries if lab is not None}
    objects = [(n, p) for n, p in cat.references if not (cfg.without_query_objects and n in labelled)]
    seen = {n for n, _ in cat.references}
    for d in cfg.distractors or []:
        folder = Path(d)
        if not folder.is_dir():
            raise DatasetError(f"{folder}: distractor folder not found")
        for p in image_files(folder):
            name = object_name(f"{folder.name}_{p.stem}")
            while name in seen:
                name += "_"
            seen.add(name)
            objects.append((name, str(p.resolve())))
    return objects


def build_database(out: Path, objects: list[tuple[str, str]], progress: bool) -> Any:
    """The model database of ``objects`` in ``out`` (named by a digest of the list, so a rerun reuses it), with
    its retrieval indexes built here once rather than by every worker.
    ``out``: the folder the database is made in; ``objects``: (name, image path) pairs; ``progress``: show progress bars
    on stderr."""
    from objrec.matching.shortlist import prepare_indexes
    from objrec.modeldb import ModelDB

    digest = hashlib.sha1(json.dumps(objects).encode()).hexdigest()[:12]
    db = ModelDB.create(out / f"db-{digest}", exist_ok=True)
    missing = [(n, p) for n, p in objects if n not in db]
    if missing:
        report = db.enroll_many(missing, progress=progress)
        if report.failed:
            f = report.failed[0]
            raise DatasetError(f"{f.name}: could not be enrolled ({f.reason})")
    prepare_indexes(db, rebuild=False)
    return db


def build(cfg: EvalConfig) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The tasks of a catalogue run (one per recognizer and photo) and the recognizers' status."""
    from objrec.fileio import atomic_write_json

    names = _catalogue_detectors(cfg.detectors)
    cat = load_catalogue(cfg.path)
    if cfg.query_side < 0:
        raise ValueError(f"--query-side: expected 0 (as stored) or a positive number of pixels, got {cfg.query_side}")
    objects = catalogue_objects(cfg, cat)
    if not objects:
        raise DatasetError(f"{cfg.path}: no object left to enrol")
    out = Path(cfg.out)
    out.mkdir(parents=True, exist_ok=True)
    db = build_database(out, objects, cfg.progress)
    listing = out / "catalogue.json"
    atomic_write_json(listing, {"objects": objects})
    status = {n: {"available": True, "note": _NOTES[n]} for n in names}
    tasks = []
    for det in names:
        for image, label, group in cat.queries:
            spec = {
                "type": "catalogue",
                "detector": det,
                "label": f"{group}/{Path(image).stem}",
                "image": image,
                "truth": label,
                "query_side": int(cfg.query_side),
                "budget_ms": cfg.budget_ms,
                "database": str(db.path.resolve()),
                "database_id": db.database_id,
                "objects": str(listing.resolve()),
                "meta": {"group": group, "truth": label, "layout": cat.layout, "n_objects": len(objects)},
            }
            tasks.append(finish_task(spec))
    cfg.notes.append(f"catalogue: {len(objects)} objects enrolled ({cat.layout} layout), {len(cat.queries)} photos")
    return tasks, status


_NOTES = {
    "objrec": "objrec Recognizer, the database's detectors, retrieval by database size, no prefilter or tracking",
    "objrec-coarse": "objrec Recognizer, SURF sampling frames every other pixel (sample_step=2)",
    "objrec-exact": "objrec Recognizer with exact matching against every object (no retrieval)",
    "findobj": f"anchor: OpenCV SIFT, one FLANN kd-tree over all references, ratio 0.8, RANSAC 5 px on the "
    f"{ANCHOR_CANDIDATES} best-voted objects, >= {ANCHOR_MIN_INLIERS} inliers",
}


def _catalogue_detectors(names: list[str] | None) -> list[str]:
    if not names:
        return list(DEFAULT_CATALOGUE_DETECTORS)
    out = list(CATALOGUE_DETECTORS) if "all" in names else list(dict.fromkeys(names))
    for n in out:
        if n not in CATALOGUE_DETECTORS:
            raise ValueError(f"--detectors: {n!r} is not a catalogue recognizer (choose from {CATALOGUE_DETECTORS})")
    return out


#: The anchors that have processed a photo once (their first call sets up FLANN and SIFT and is not timed).
_warmed: weakref.WeakSet[FindObjBaseline] = weakref.WeakSet()


@functools.lru_cache(maxsize=2)
def _recognizer(detector: str, database: str, database_id: str, objects: str, budget_ms: float | None) -> Any:
    if detector == "findobj":
        listing = json.loads(Path(objects).read_text(encoding="utf-8"))["objects"]
        images = {name: load_image(Path(path), gray=True) for name, path in listing}
        return FindObjBaseline(
            images,
            matcher="flann",
            ratio=0.8,
            candidates=ANCHOR_CANDIDATES,
            ransac_px=5.0,
            min_inliers=ANCHOR_MIN_INLIERS,
        )
    from objrec.modeldb import ModelDB
    from objrec.recognizer import Recognizer

    db = ModelDB.open(database)
    if db.database_id != database_id:
        raise DatasetError(f"{database}: changed since the tasks were made (database id {db.database_id})")
    retrieval = False if detector == "objrec-exact" else None
    step = 2 if detector == "objrec-coarse" else None
    rec = Recognizer(db, budget_ms=budget_ms, prefilter=None, track=False, retrieval=retrieval, sample_step=step)
    rec.warmup((480, 640))
    return rec


def _query_image(path: str, side: int) -> np.ndarray:
    import cv2

    img = load_image(Path(path))
    if side and max(img.shape[:2]) != side:
        s = side / max(img.shape[:2])
        img = cv2.resize(img, None, fx=s, fy=s, interpolation=cv2.INTER_AREA)
    return img


def evaluate_query(spec: dict[str, Any]) -> dict[str, Any]:
    """Recognise one photo with one recognizer and score it against its label (a ``"catalogue"`` task)."""
    from objrec.imageio import to_gray

    budget = spec.get("budget_ms")
    rec = _recognizer(spec["detector"], spec["database"], spec["database_id"], spec["objects"], budget)
    img = _query_image(spec["image"], int(spec["query_side"]))
    if isinstance(rec, FindObjBaseline):
        if rec not in _warmed:
            rec.process(to_gray(img))  # first call: FLANN's and SIFT's lazy set-up, not counted
            _warmed.add(rec)
        t0 = time.perf_counter()
        found = rec.process(to_gray(img))
        latency = (time.perf_counter() - t0) * 1e3
        timings = {"findobj": latency}
        dets = [(d.name, float(d.score), int(d.inliers)) for d in found.detections]
    else:
        r = rec.process(img)
        dets = [(d.name, float(d.score), int(d.inliers)) for d in r.detections]
        latency, timings = r.latency_ms, r.timings_ms
    out = score_query([n for n, _, _ in dets], spec.get("truth"))
    out["detections"] = [{"name": n, "score": round(s, 6), "inliers": k} for n, s, k in dets]
    out["latency_ms"] = round(float(latency), 3)
    out["deadline_met"] = None if budget is None else bool(latency <= budget)
    out["timings_ms"] = {k: round(float(v), 3) for k, v in timings.items()}
    return out


def score_query(names: list[str], truth: str | None) -> dict[str, Any]:
    """``found`` (``truth`` among ``names``), ``top1`` (``names[0]`` is ``truth``; names best first) and
    ``wrong`` (how many name another object)."""
    return {
        "found": truth is not None and truth in names,
        "top1": truth is not None and bool(names) and names[0] == truth,
        "wrong": sum(n != truth for n in names),
    }


# --- report ----------------------------------------------------------------------------------------------
def _stats(rows: list[dict[str, Any]], budget_ms: float | None) -> dict[str, Any]:
    labelled = [r for r in rows if r["truth"] is not None]
    lat = [r["latency_ms"] for r in rows]
    stages: dict[str, float] = {}
    for r in rows:
        for k, v in r["timings_ms"].items():
            stages[k] = stages.get(k, 0.0) + v / len(rows)
    out = {
        "n_queries": len(rows),
        "n_labelled": len(labelled),
        "found": sum(r["found"] for r in labelled),
        "top1": sum(r["top1"] for r in labelled),
        "found_fraction": round(sum(r["found"] for r in labelled) / len(labelled), 6) if labelled else None,
        "top1_fraction": round(sum(r["top1"] for r in labelled) / len(labelled), 6) if labelled else None,
        "wrong": sum(r["wrong"] for r in rows),
        "queries_with_wrong": sum(r["wrong"] > 0 for r in rows),
        "latency_ms": {q: percentile_defined(lat, v) for q, v in (("p50", 50), ("p90", 90), ("p99", 99), ("max", 100))},
        "stage_ms_mean": {k: round(v, 3) for k, v in sorted(stages.items(), key=lambda kv: -kv[1])},
    }
    if budget_ms is not None:
        out["deadline_misses"] = sum(not r["deadline_met"] for r in rows)
        out["deadline_met_fraction"] = round(1 - out["deadline_misses"] / max(1, len(rows)), 6)
    return out


def catalogue_section(records: list[dict[str, Any]], detectors: list[str], budget_ms: float | None) -> dict:
    """The report's ``catalogue`` section: summary per recognizer, per group, and one row per photo.
    ``records``: the run's task records; ``detectors``: the recognizers (detector names) evaluated, in report order;
    ``budget_ms``: the frame budget in ms (None: none)."""
    rows = [{"detector": r["detector"], "query": r["label"], **r["meta"], **r["result"]} for r in records]
    present = [d for d in detectors if any(r["detector"] == d for r in rows)]
    summary = {d: _stats([r for r in rows if r["detector"] == d], budget_ms) for d in present}
    groups = []
    for g in dict.fromkeys(r["group"] for r in rows):
        for d in present:
            sel = [r for r in rows if r["group"] == g and r["detector"] == d]
            if sel:
                groups.append({"group": g, "detector": d, **_stats(sel, budget_ms)})
    keys = ("detector", "query", "truth", "found", "top1", "wrong", "latency_ms", "deadline_met", "detections")
    return {"summary": summary, "groups": groups, "queries": [{k: r[k] for k in keys} for r in rows]}


def render_catalogue(doc: ReportDoc, c: dict[str, Any], budget_ms: float | None) -> None:
    """Add the catalogue tables to ``doc`` (a report document): summary, stage times, per group.
    ``c``: the report's catalogue section; ``budget_ms``: the frame budget in ms (None: none)."""
    head = ["recognizer", "photos", "found", "top-1", "wrong", "photos with wrong", "p50 ms", "p90", "p99", "max"]
    miss = ["deadline misses"] if budget_ms else []
    doc.h(2, "Catalogue summary")
    doc.table(
        head + miss,
        [
            [d, s["n_queries"], s["found_fraction"], s["top1_fraction"], s["wrong"], s["queries_with_wrong"]]
            + [s["latency_ms"][q] for q in ("p50", "p90", "p99", "max")]
            + ([s["deadline_misses"]] if budget_ms else [])
            for d, s in c["summary"].items()
        ],
    )
    doc.h(2, "Mean time per stage (ms per photo)")
    doc.table(
        ["recognizer", "stages"],
        [[d, ", ".join(f"{k} {v:.1f}" for k, v in s["stage_ms_mean"].items())] for d, s in c["summary"].items()],
    )
    doc.h(2, "Per group")
    doc.table(
        ["group", "recognizer", "photos", "found", "top-1", "wrong", "p50 ms", "p99"] + miss,
        [
            [g["group"], g["detector"], g["n_queries"], g["found_fraction"], g["top1_fraction"], g["wrong"]]
            + [g["latency_ms"]["p50"], g["latency_ms"]["p99"]]
            + ([g["deadline_misses"]] if budget_ms else [])
            for g in c["groups"]
        ],
    )


def plot_catalogue(report: dict[str, Any], out: Path, plt: Any) -> list[tuple[str, str]]:
    """Latency distribution per recognizer (with found and top-1 in the legend) and the mean stage times.
    ``report``: the report document; ``out``: the report folder; ``plt``: ``matplotlib.pyplot``."""
    c = report["catalogue"]
    fig, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    for d, s in c["summary"].items():
        lat = np.sort([q["latency_ms"] for q in c["queries"] if q["detector"] == d])
        found = "–" if s["found_fraction"] is None else f"{s['found_fraction']:.3f}"
        top1 = "–" if s["top1_fraction"] is None else f"{s['top1_fraction']:.3f}"
        label = f"{d} (found {found}, top-1 {top1})"
        axes[0].plot(lat, np.arange(1, len(lat) + 1) / len(lat), label=label)
    budget = report["config"].get("budget_ms")
    if budget:
        axes[0].axvline(budget, color="k", ls="--", lw=1, label="budget")
    axes[0].set(xlabel="latency (ms)", ylabel="fraction of photos", title="latency distribution", xscale="log")
    axes[0].grid(alpha=0.3)
    axes[0].legend(fontsize=8)
    dets = list(c["summary"])
    bottom = np.zeros(len(dets))
    for stage in dict.fromkeys(k for s in c["summary"].values() for k in s["stage_ms_mean"]):
        v = np.array([c["summary"][d]["stage_ms_mean"].get(stage, 0.0) for d in dets])
        axes[1].bar(dets, v, bottom=bottom, label=stage)
        bottom += v
    axes[1].set(ylabel="mean ms per photo", title="where the time goes")
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(out / "plots/catalogue.png", dpi=90)
    plt.close(fig)
    return [("plots/catalogue.png", "latency distribution and mean time per stage")]


KIND = EvalKind(
    name="catalogue",
    section="catalogue",
    task_type="catalogue",
    build=build,
    run=evaluate_query,
    summarise=catalogue_section,
    render=render_catalogue,
    plot=plot_catalogue,
)
