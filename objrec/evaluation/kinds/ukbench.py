"""``ukbench:PATH``: the University of Kentucky benchmark (Nistér & Stewénius 2006) as objrec meets it.

``PATH`` is a folder of ``ukbenchNNNNN.jpg`` files numbered from 00000 without gaps; images ``4k`` to ``4k+3``
show object ``k`` from four viewpoints. ``--objects N`` keeps the first ``N`` objects (one number).

Two parts, in one run:

* **Retrieval**: every image is enrolled as an object of its own in a model database (the database's
  detectors), and each image queries all of them with its :data:`~objrec.matching.shortlist.RETRIEVAL_QUERIES`
  strongest enrolled descriptors (by detector response), as the recognizer's shortlist votes with a frame's
  strongest descriptors. Rankings come from objrec's retrieval index
  (:class:`~objrec.matching.retrieval.RetrievalIndex`, the database's saved index, searched with the
  recognizer's :data:`~objrec.matching.shortlist.RETRIEVAL_PROBES` cells) and from exact voting on the same
  descriptors (brute-force nearest neighbours, FAISS ``IndexFlatL2``; the same ``k`` neighbours and the same
  vote, :func:`~objrec.matching.retrieval.vote`). Each is scored by
  :func:`~objrec.metrics.retrieval.ns_score`, per detector kind (``surf``, ``sift``); as both see the same
  features, the gap between the index's score and exact voting's is the index's approximation alone.
* **Recognition**: with one enrolled view (image ``4k`` enrolled as object ``k``, ``4k+1..4k+3`` as queries)
  and with two (``4k`` and ``4k+2`` enrolled as one object, ``ModelDB.enroll(name, [view_1, view_2])``;
  queries ``4k+1`` and ``4k+3``). Each query is one still frame for ``objrec`` (the
  :class:`~objrec.recognizer.Recognizer` of :mod:`~objrec.evaluation.kinds.catalogue`, no prefilter or tracking,
  ``--budget-ms`` as given) and for ``findobj``, the catalogue's find_obj anchor on the same enrolled views
  (each view a model of its own, named ``<object>@<view>``, a detection of a view counting for its object).
  ``--shape flat|solid`` is passed to the enrolment; the default is ``solid`` (:data:`DEFAULT_SHAPE`), since
  UKBench mixes flat objects (CD covers, books) with shoes, toys and plants, and a solid object is verified as a
  flat one first (see :class:`~objrec.matching.verifier.CandidateVerifier`). Metrics: found (the query's object
  among the detections), wrong top-1 (the best detection names another object), latency p50/p99 and, with a
  budget, the late share.

Images are read by :func:`objrec.imageio.read_image` for enrolment, queries and the anchor alike, which decodes
with ``cv2.IMREAD_UNCHANGED``: an EXIF orientation tag is not applied (``cv2.imread``'s default would turn a
tagged 640x480 file into 480x640), so every image is used in its stored pixel layout, the same for an enrolled
view and a query.

References
----------
.. [1] D. Nistér, H. Stewénius, "Scalable recognition with a vocabulary tree", CVPR 2006.
   DOI: 10.1109/CVPR.2006.264
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
import time
from pathlib import Path
from typing import Any

import numpy as np

from objrec.datasets import DatasetError
from objrec.evaluation.config import EvalConfig, finish_task
from objrec.evaluation.kinds.base import EvalKind
from objrec.evaluation.kinds.catalogue import evaluate_query, score_query
from objrec.evaluation.kinds.ukbench_report import plot_ukbench, render_ukbench, ukbench_section

__all__ = [
    "KIND",
    "UKBENCH_RECOGNIZERS",
    "SETTINGS",
    "RETRIEVAL_BLOCK",
    "ukbench_groups",
    "build",
    "evaluate_ukbench",
    "retrieval_rankings",
]

#: ``--detectors`` of a ukbench run: objrec's recognizer and the find_obj anchor (recognition), and the retrieval
#: scores of each detector kind's descriptors (``retrieval-<kind>``); all by default.
UKBENCH_RECOGNIZERS = ("objrec", "findobj", "retrieval-surf", "retrieval-sift")
#: Recognition settings: the views enrolled per object and those that query (indices 0-3 within an object).
SETTINGS: dict[str, dict[str, tuple[int, ...]]] = {
    "1-view": {"enrolled": (0,), "queries": (1, 2, 3)},
    "2-view": {"enrolled": (0, 2), "queries": (1, 3)},
}
#: Query images per retrieval task (a resumed run redoes at most one block).
RETRIEVAL_BLOCK = 40
_FILE = re.compile(r"^ukbench(\d{5})\.jpg$", re.IGNORECASE)
_VIEW_SEP = "@"


def ukbench_groups(folder: str | Path, n_objects: int | None = None) -> list[list[Path]]:
    """The four image paths of each object of a UKBench folder, object ``k`` holding ``ukbench{4k..4k+3}``.

    Parameters
    ----------
    folder : path
        A folder of ``ukbenchNNNNN.jpg`` files (other files are ignored).
    n_objects : int, optional
        Keep the first ``n_objects`` objects (all when None).

    Raises
    ------
    DatasetError
        Naming the folder when it is missing, holds no UKBench file, a number is missing below the highest
        one, the count is not a multiple of 4, or fewer than ``n_objects`` objects are present.
    """
    folder = Path(folder)
    if not folder.is_dir():
        raise DatasetError(f"{folder}: UKBench folder not found")
    numbered = {int(m.group(1)): p for p in folder.iterdir() if (m := _FILE.match(p.name)) and p.is_file()}
    if not numbered:
        raise DatasetError(f"{folder}: no ukbenchNNNNN.jpg file (UKBench images are named ukbench00000.jpg ...)")
    top = max(numbered)
    missing = [i for i in range(top + 1) if i not in numbered]
    if missing:
        shown = ", ".join(f"ukbench{i:05d}.jpg" for i in missing[:5]) + (" ..." if len(missing) > 5 else "")
        raise DatasetError(f"{folder}: {len(missing)} UKBench image(s) missing below ukbench{top:05d}.jpg: {shown}")
    if len(numbered) % 4:
        raise DatasetError(
            f"{folder}: {len(numbered)} UKBench images, not a multiple of 4 (4 views per object); "
            f"ukbench{top:05d}.jpg starts an incomplete object"
        )
    groups = [[numbered[4 * k + v] for v in range(4)] for k in range(len(numbered) // 4)]
    if n_objects is not None:
        if not 1 <= n_objects <= len(groups):
            raise DatasetError(f"{folder}: --objects {n_objects} asked for, the folder has 1 to {len(groups)}")
        groups = groups[:n_objects]
    return groups


# --- databases -------------------------------------------------------------------------------------------
def _object_name(k: int) -> str:
    return f"ukb{k:05d}"


#: What the objects are enrolled as without ``--shape``: most UKBench objects have depth.
DEFAULT_SHAPE = "solid"


def _enrol_kwargs(shape: str | None) -> dict[str, Any]:
    return {"shape": shape or DEFAULT_SHAPE}


def _database(out: Path, tag: str, items: list[tuple[str, Any]], shape: str | None, progress: bool) -> Any:
    """The model database of ``items`` in ``out`` (named by a digest of them, so a rerun reuses it) with its
    retrieval indexes saved; a :class:`DatasetError` names the first image that could not be enrolled."""
    from objrec.matching.shortlist import prepare_indexes
    from objrec.modeldb import ModelDB

    key = json.dumps([tag, shape, [(n, [str(p) for p in v] if isinstance(v, list) else str(v)) for n, v in items]])
    db = ModelDB.create(out / f"db-{tag}-{hashlib.sha1(key.encode()).hexdigest()[:12]}", exist_ok=True)
    missing = [(n, v) for n, v in items if n not in db]
    if missing:
        report = db.enroll_many(missing, progress=progress, **_enrol_kwargs(shape))
        if report.failed:
            f = report.failed[0]
            raise DatasetError(f"{f.name}: could not be enrolled ({f.reason})")
    # The retrieval scores search every kind's index, however few its descriptors (a small run's SIFT).
    prepare_indexes(db, rebuild=False, kinds=list(db.detectors) if tag == "retrieval" else None)
    return db


def _recognition_db(cfg: EvalConfig, groups: list[list[Path]], setting: str) -> tuple[Any, list[tuple[str, str]]]:
    """The database of one setting and the anchor's listing ``(object@view, path)``."""
    views = SETTINGS[setting]["enrolled"]
    if len(views) == 1:
        items: list[tuple[str, Any]] = [(_object_name(k), str(g[views[0]])) for k, g in enumerate(groups)]
    else:
        items = [(_object_name(k), [str(g[v]) for v in views]) for k, g in enumerate(groups)]
    db = _database(Path(cfg.out), setting, items, getattr(cfg, "shape", None), cfg.progress)
    listing = [(f"{_object_name(k)}{_VIEW_SEP}{v}", str(g[v])) for k, g in enumerate(groups) for v in views]
    return db, listing


# --- tasks -----------------------------------------------------------------------------------------------
def _recognizers(names: list[str] | None) -> list[str]:
    out = list(UKBENCH_RECOGNIZERS) if not names or "all" in names else list(dict.fromkeys(names))
    for n in out:
        if n not in UKBENCH_RECOGNIZERS:
            raise ValueError(f"--detectors: {n!r} is not a ukbench recognizer (choose from {UKBENCH_RECOGNIZERS})")
    return out


def _recognition_tasks(cfg: EvalConfig, groups: list[list[Path]], setting: str, names: list[str]) -> list[dict]:
    if not names:
        return []
    from objrec.fileio import atomic_write_json

    db, listing = _recognition_db(cfg, groups, setting)
    listing_file = Path(cfg.out) / f"ukbench-{setting}-objects.json"
    atomic_write_json(listing_file, {"objects": listing})
    tasks = []
    for det in names:
        for k, g in enumerate(groups):
            for v in SETTINGS[setting]["queries"]:
                spec = {
                    "type": "ukbench",
                    "part": "recognition",
                    "detector": det,
                    "label": f"{setting}/{g[v].stem}",
                    "image": str(g[v].resolve()),
                    "truth": _object_name(k),
                    "query_side": int(cfg.query_side),
                    "budget_ms": cfg.budget_ms,
                    "database": str(db.path.resolve()),
                    "database_id": db.database_id,
                    "objects": str(listing_file.resolve()),
                    "meta": {"part": "recognition", "setting": setting, "object": k, "view": v},
                }
                tasks.append(finish_task(spec))
    return tasks


def _retrieval_tasks(cfg: EvalConfig, groups: list[list[Path]], wanted: list[str]) -> tuple[list[dict], list[str]]:
    if not wanted:
        return [], []
    images = [p for g in groups for p in g]
    db = _database(Path(cfg.out), "retrieval", [(p.stem, str(p)) for p in images], None, cfg.progress)
    kinds = [k for k in wanted if k in db.detectors]
    tasks = []
    for kind in kinds:
        for lo in range(0, len(images), RETRIEVAL_BLOCK):
            hi = min(lo + RETRIEVAL_BLOCK, len(images))
            spec = {
                "type": "ukbench",
                "part": "retrieval",
                "detector": f"retrieval-{kind}",
                "label": f"retrieval/{kind}/{lo:05d}-{hi - 1:05d}",
                "kind": kind,
                "queries": [lo, hi],
                "database": str(db.path.resolve()),
                "database_id": db.database_id,
                "meta": {"part": "retrieval", "kind": kind, "n_images": len(images)},
            }
            tasks.append(finish_task(spec))
    return tasks, kinds


def build(cfg: EvalConfig) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The tasks of a ukbench run (recognition per setting, recognizer and query; retrieval per detector kind
    and block of queries) and the status of the recognizers and of each setting."""
    names = _recognizers(cfg.detectors)
    if cfg.objects is not None and len(cfg.objects) != 1:
        raise ValueError(f"--objects: ukbench takes one number (the first N objects), got {cfg.objects}")
    groups = ukbench_groups(cfg.path, cfg.objects[0] if cfg.objects else None)
    if cfg.query_side < 0:
        raise ValueError(f"--query-side: expected 0 (as stored) or a positive number of pixels, got {cfg.query_side}")
    Path(cfg.out).mkdir(parents=True, exist_ok=True)
    recognizers = [n for n in names if not n.startswith("retrieval-")]
    status = {n: {"available": True, "note": _NOTES[n]} for n in names}
    tasks: list[dict[str, Any]] = []
    for setting in SETTINGS if recognizers else ():
        tasks += _recognition_tasks(cfg, groups, setting, recognizers)
        status[setting] = {"available": True, "note": f"views {SETTINGS[setting]['enrolled']} enrolled"}
    wanted = [n.partition("-")[2] for n in names if n.startswith("retrieval-")]
    retrieval, kinds = _retrieval_tasks(cfg, groups, wanted)
    tasks += retrieval
    for kind in set(wanted) - set(kinds):
        status[f"retrieval-{kind}"] = {"available": False, "note": f"the database's detectors have no {kind}"}
    cfg.notes.append(
        f"ukbench: {len(groups)} objects, {4 * len(groups)} images; retrieval scored for {', '.join(kinds) or 'none'}"
        + f"; enrolled as shape={getattr(cfg, 'shape', None) or DEFAULT_SHAPE}"
    )
    return tasks, status


_NOTES = {
    "objrec": "objrec Recognizer, the database's detectors, retrieval by database size, no prefilter or tracking",
    "findobj": "anchor: OpenCV SIFT, one FLANN kd-tree over every enrolled view, ratio 0.8, RANSAC 5 px on the "
    "5 best-voted views",
    "retrieval-surf": "N-S score of the retrieval index and of exact voting on the enrolled SURF descriptors",
    "retrieval-sift": "N-S score of the retrieval index and of exact voting on the enrolled SIFT descriptors",
}


# --- running ---------------------------------------------------------------------------------------------
def evaluate_ukbench(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one ukbench task: a query recognised (``part="recognition"``) or a block of retrieval queries."""
    if spec["part"] == "retrieval":
        return retrieval_rankings(spec["database"], spec["database_id"], spec["kind"], *spec["queries"])
    out = evaluate_query(spec)
    names = [d["name"].partition(_VIEW_SEP)[0] for d in out["detections"]]
    out.update(score_query(names, spec["truth"]))
    out["wrong_top1"] = bool(names) and names[0] != spec["truth"]
    return out


@functools.lru_cache(maxsize=1)
def _retrieval_setup(database: str, database_id: str, kind: str) -> tuple[Any, Any, list[str], dict[str, np.ndarray]]:
    """The database's retrieval index, an exact index over the same descriptors, the object names (the exact
    index's labels, through the owner array, are positions in it) and each image's voting descriptors."""
    from objrec.knn import BruteForceIndex
    from objrec.matching.retrieval import RetrievalIndex
    from objrec.matching.shortlist import RETRIEVAL_QUERIES
    from objrec.modeldb import ModelDB

    db = ModelDB.open(database)
    if db.database_id != database_id:
        raise DatasetError(f"{database}: changed since the tasks were made (database id {db.database_id})")
    index = RetrievalIndex.for_database(db, kind)
    desc, owner = db.descriptor_table(kind)
    exact = (BruteForceIndex(np.ascontiguousarray(desc, np.float32)), owner)
    voters = {}
    for name in db.names:
        f = db.get(name).features[kind]
        strongest = np.argsort(-f.response, kind="stable")[:RETRIEVAL_QUERIES]
        voters[name] = np.ascontiguousarray(f.descriptors[strongest], np.float32)
    return index, exact, db.names, voters


def retrieval_rankings(database: str, database_id: str, kind: str, lo: int, hi: int) -> dict[str, Any]:
    """The first 4 images (names) retrieved for the query images ``lo..hi-1`` (by name order) of a retrieval
    database, by the index and by exact voting, with each one's time per query (ms); see the module notes.
    ``database``: the retrieval database's path; ``database_id``: the content it must hold; ``kind``: the detector kind;
    ``lo``, ``hi``: the query images' range."""
    from objrec.matching.retrieval import vote
    from objrec.matching.shortlist import RETRIEVAL_PROBES

    index, (exact, owner), names, voters = _retrieval_setup(database, database_id, kind)
    k = int(index.params.k)
    queries = sorted(names)[lo:hi]
    out: dict[str, Any] = {"query": queries, "index": [], "exact": [], "index_ms": [], "voters": []}
    for name in queries:
        v = voters[name]
        t1 = time.perf_counter()
        ids, _ = index.candidates(v, top=4, n_probe=RETRIEVAL_PROBES)
        out["index_ms"].append(round((time.perf_counter() - t1) * 1e3, 3))
        out["index"].append(index.objects.names_of(ids))
        out["voters"].append(len(v))
    # Exact neighbours of the whole block in one product (the cost is the same per query, the calls fewer).
    t0 = time.perf_counter()
    block = np.concatenate([voters[n] for n in queries])
    labels = owner[np.asarray(exact.knn(block, k)[0])] if len(block) else np.zeros((0, k), np.int64)
    for part in np.split(labels, np.cumsum(out["voters"])[:-1]):
        out["exact"].append([names[int(i)] for i in vote(part, 4)[0]])
    ms = (time.perf_counter() - t0) * 1e3 / max(1, len(queries))
    out["exact_ms"] = [round(ms, 3)] * len(queries)
    return out


KIND = EvalKind(
    name="ukbench",
    section="ukbench",
    task_type="ukbench",
    build=build,
    run=evaluate_ukbench,
    summarise=ukbench_section,
    render=render_ukbench,
    plot=plot_ukbench,
)
