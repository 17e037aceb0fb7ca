"""The measured processes of ``bench_catalogue_sizes.py``: enrolment, recognition passes, open + ready, anchor.

Each function here is the whole work of one child process, started by the benchmark while it samples the
child's ``RssAnon``; each writes what it measured as JSON (a file named by the parent, or a line per chunk), so
the parent never imports the library's database code and never maps a database file itself.
"""

from __future__ import annotations

import json
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np
from procmem import drop_page_cache, rss_anon_kb, thread_report, tree_files

__all__ = ["warm_kernels", "enrol", "recognise", "linked_copy", "without", "open_ready", "anchor", "pass_summary"]


def warm_kernels() -> None:
    """Load the detectors' compiled kernels and the imports on a one-object database of its own, so that no
    measurement below counts them."""
    from objrec import ModelDB, Recognizer
    from objrec.data import synthetic_cover

    with tempfile.TemporaryDirectory() as tmp:
        small = ModelDB.create(Path(tmp) / "db")
        small.enroll("warm", synthetic_cover(0, (300, 400)))
        Recognizer(small, budget_ms=33, prefilter=None, track=False).warmup((480, 640), repeats=1)


def enrol(db_path: Path, items_file: Path, segments: Path, chunk: int) -> None:
    """Enrol the listed (name, path) objects missing from the database (created when absent) with
    ``ModelDB.enroll_many``, ``chunk`` objects per call; after each call one JSON line is appended to
    ``segments``: objects enrolled (and how many per source: the name's prefix), skipped and failed (with
    reasons), wall and CPU seconds (every thread of this process) and the database's size."""
    from objrec import ModelDB

    warm_kernels()
    db = ModelDB.create(db_path, exist_ok=True)
    items = [(n, p) for n, p in json.loads(items_file.read_text()) if n not in db]
    if not items:  # nothing to do: one line all the same, with the database's size
        doc = {"enrolled": 0, "sources": {}, "skipped": 0, "failed": [], "seconds": 0.0, "cpu_s": 0.0}
        with open(segments, "a") as f:
            f.write(json.dumps({**doc, "objects": len(db)}) + "\n")
    for i in range(0, len(items), chunk):
        part = items[i : i + chunk]
        t0, c0 = time.perf_counter(), time.process_time()
        rep = db.enroll_many(part, progress=False)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        doc = {
            "enrolled": len(rep.enrolled),
            # The SMVS references keep their own names (001..100); every other source prefixes its name.
            "sources": dict(Counter(name.split("_", 1)[0] if "_" in name else "smvs" for name in rep.enrolled)),
            "skipped": len(rep.skipped),
            "failed": [[f.name, f.reason] for f in rep.failed],
            "seconds": seconds,
            "cpu_s": cpu,
            "objects": len(db),
        }
        with open(segments, "a") as f:
            f.write(json.dumps(doc) + "\n")
        print(f"{len(db)} objects, {len(part) / seconds:.2f}/s", flush=True)


def _photo(path: str, side: int) -> np.ndarray:
    import cv2

    img = cv2.imread(path, cv2.IMREAD_COLOR)
    if img is None:
        raise OSError(f"{path}: not a readable image")
    s = side / max(img.shape[:2])
    return cv2.resize(img, None, fx=s, fy=s, interpolation=cv2.INTER_AREA) if s != 1 else img


def shown(path: str, label: str) -> set[str]:
    """The covers a photo is known to show: its label, and in a Palm photo the next cover too
    (``smvs_dvd/SOURCES.md``: most Palm photos have it beside the labelled one, and a detection of it is not a
    wrong one). Other covers that a photo happens to show are counted as wrong detections."""
    out = {label}
    if Path(path).name.startswith("Palm_") and label.isdigit():
        out.add(f"{int(label) + 1:0{len(label)}d}")
    return out


def pass_summary(rows: list[dict], budget_ms: float | None) -> dict:
    """Found (the label among the detections), top-1, photos with a wrong detection, latency percentiles and
    late photos (latency over the budget) of one pass over the photos."""
    lat = np.array([r["latency_ms"] for r in rows], float)
    out = {
        "photos": len(rows),
        "found": int(sum(r["found"] for r in rows)),
        "top1": int(sum(r["top1"] for r in rows)),
        "photos_with_wrong": int(sum(r["wrong"] > 0 for r in rows)),
        "latency_ms": {f"p{q}": round(float(np.percentile(lat, q)), 2) for q in (50, 90, 99)},
        "late": None if budget_ms is None else int(np.sum(lat > budget_ms)),
    }
    out["latency_ms"]["max"] = round(float(lat.max()), 2)
    out["found_fraction"] = round(out["found"] / max(1, len(rows)), 4)
    return out


def _one_pass(rec, photos: list[tuple[str, str]], side: int, budget_ms: float | None) -> dict:
    rows = []
    for path, label in photos:
        img = _photo(path, side)
        r = rec.process(img)
        names = [d.name for d in r.detections]
        rows.append(
            {
                "latency_ms": float(r.latency_ms),
                "found": label in names,
                "top1": bool(names) and names[0] == label,
                "wrong": sum(n not in shown(path, label) for n in names),
            }
        )
    return pass_summary(rows, budget_ms)


def recognise(
    db_path: Path,
    photos: list[tuple[str, str]],
    side: int,
    budget_ms: float | None,
    result: Path,
    cpu_clock: bool,
    warm_limit: int | None = None,
) -> None:
    """Two passes of a fresh ``Recognizer`` over the photos: the first after every database file was dropped
    from the page cache (``cold``), the second right after it (``warm``); with the time of ``ModelDB.open``
    plus a ready ``Recognizer`` on the cold cache. No prefilter, no tracking: each photo is a still frame.

    With ``cpu_clock`` the recognizer times frames (latency and its budget) by this process's CPU time, which
    other processes' use of the core does not inflate; waiting for a cold read does not count either, so the
    cold pass is then not a measure of reads.

    With ``warm_limit`` (bytes) the recognizer warms at most that much of the database
    (``Recognizer(warm_cache=warm_limit)``: the leading files of ``ModelDB.cache_files``), and before each pass
    every other database file is dropped from the page cache again: a machine whose memory keeps only the
    warmed part, every other read waiting on the disk at its first use in a pass. (Within a pass, a file read
    once stays cached.)"""
    from bench_budget_losses import CpuClock

    from objrec import ModelDB, Recognizer
    from objrec.modeldb.warm import files_within

    warm_kernels()
    base_kb = rss_anon_kb()
    every = tree_files(db_path)
    dropped = drop_page_cache(every)
    t0 = time.perf_counter()
    clock = CpuClock() if cpu_clock else None
    warm = True if warm_limit is None else int(warm_limit)
    db = ModelDB.open(db_path)
    rec = Recognizer(db, budget_ms=budget_ms, prefilter=None, track=False, clock=clock, warm_cache=warm)
    open_ready_s = time.perf_counter() - t0
    rec.warmup((480, 640))
    doc = {
        "budget_ms": budget_ms,
        "clock": "cpu" if cpu_clock else "wall",
        "objects": len(rec.db),
        "open_ready_cold_s": round(open_ready_s, 3),
        "dropped_bytes": dropped,
        "baseline_rss_anon_kb": base_kb,
        "threads": thread_report(),
    }
    others: list[Path] = []
    if warm_limit is not None:
        kept = {p.resolve() for p in files_within(db.cache_files(), int(warm_limit))}
        others = [p for p in every if p.resolve() not in kept]
        doc["warm_limit_bytes"] = int(warm_limit)
        doc["warmed_bytes"] = sum(p.stat().st_size for p in kept)
        doc["database_bytes"] = dropped
    for name in ("cold", "warm"):
        if others:
            if rec.warming is not None:
                rec.warming.join()  # the kernel has been asked for the warmed files; the rest go again
            drop_page_cache(others)
        doc[name] = _one_pass(rec, photos, side, budget_ms)
    result.write_text(json.dumps(doc, indent=1))


def linked_copy(src: Path, dst: Path) -> None:
    """``dst`` as a copy of the database folder ``src`` whose files are hard links to ``src``'s (no bytes copied).
    Every database write makes a new file and renames it into place (``objrec.fileio``), never writes into an
    existing one, so changing the copy leaves ``src`` as it was."""
    import os
    import shutil

    shutil.rmtree(dst, ignore_errors=True)
    for folder, _, files in os.walk(src):
        here = dst / Path(folder).relative_to(src)
        here.mkdir(parents=True, exist_ok=True)
        for f in files:
            os.link(Path(folder) / f, here / f)


def without(db_path: Path, photos: list[tuple[str, str]], side: int, covers: list[str], result: Path) -> None:
    """Wrong detections with the photos' covers absent: the ``covers`` removed from a hard-linked copy of the
    database (``ModelDB.remove``, whose commit keeps the retrieval index current by tombstoning their rows, as
    after ``objrec db remove``; an index found not current is built), one pass of a ``Recognizer`` with no
    budget; every detection is a wrong one. The copy is deleted after: the measured database keeps its covers
    where they were (removing and enrolling them again would put them last, side by side in a shard of their
    own, and a later cold pass would read them with the kernel's read-ahead)."""
    import shutil

    from objrec import ModelDB, Recognizer
    from objrec.matching.shortlist import prepare_indexes

    copy = db_path.with_name(db_path.name + "-without")
    linked_copy(db_path, copy)
    try:
        db = ModelDB.open(copy)
        present = [c for c in covers if c in db]
        if present:
            db.remove(present)
        t0 = time.perf_counter()
        prepare_indexes(db, rebuild=False)
        reindex_s = time.perf_counter() - t0
        warm_kernels()
        rec = Recognizer(ModelDB.open(copy), budget_ms=None, prefilter=None, track=False)
        rec.warmup((480, 640))
        doc = {"objects": len(rec.db), "removed": len(present), "index_check_s": round(reindex_s, 2)}
        doc["warm"] = _one_pass(rec, photos, side, None)
        result.write_text(json.dumps(doc, indent=1))
    finally:
        shutil.rmtree(copy, ignore_errors=True)


def open_ready(db_path: Path, result: Path) -> None:
    """``ModelDB.open`` plus a ready ``Recognizer`` (33 ms budget) in a process whose imports and kernels are
    loaded, on the page cache as the runs before left it (warm)."""
    from objrec import ModelDB, Recognizer

    warm_kernels()
    t0 = time.perf_counter()
    Recognizer(ModelDB.open(db_path), budget_ms=33, prefilter=None, track=False)
    result.write_text(json.dumps({"open_ready_warm_s": round(time.perf_counter() - t0, 3)}))


def anchor(items: list[tuple[str, str]], photos: list[tuple[str, str]], side: int, result: Path) -> None:
    """The find_obj-style anchor (``FindObjBaseline``: OpenCV SIFT, one FLANN kd-tree over every reference,
    ratio 0.8, RANSAC 5 px on the 5 best-voted objects, >= 10 inliers) on the same objects and photos: its build
    time per object and one pass after a first untimed photo."""
    import cv2

    from objrec.evaluation.baseline import FindObjBaseline

    t0 = time.perf_counter()
    objects = {n: cv2.imread(p, cv2.IMREAD_GRAYSCALE) for n, p in items}
    base = FindObjBaseline(objects, matcher="flann", ratio=0.8, candidates=5, ransac_px=5.0, min_inliers=10)
    gray = [(cv2.cvtColor(_photo(p, side), cv2.COLOR_BGR2GRAY), lab, p) for p, lab in photos]
    base.process(gray[0][0])
    build_s = time.perf_counter() - t0
    rows = []
    for img, label, path in gray:
        t = time.perf_counter()
        names = [d.name for d in base.process(img).detections]
        ms = (time.perf_counter() - t) * 1e3
        rows.append({"latency_ms": ms, "found": label in names, "top1": names[:1] == [label], "wrong": 0})
        rows[-1]["wrong"] = sum(n not in shown(path, label) for n in names)
    doc = {"objects": len(objects), "build_s": round(build_s, 2), "warm": pass_summary(rows, None)}
    result.write_text(json.dumps(doc, indent=1))
