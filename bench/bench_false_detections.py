"""False detections at catalogue scale: UKBench thumbnails against a database of DVD covers they do not show.

The database holds the 100 SMVS DVD references and the 234 other DVD covers (334 objects, default detectors,
enrolled with ``ModelDB.enroll_many`` into ``--db-dir``, which is reused on the next run: enrolment resumes
and skips what is already there). Each of the 1692 UKBench thumbnails (household objects, CD covers, no DVD
cover of the database) is a scene for a :class:`~objrec.recognizer.Recognizer` with its defaults and no
tracking (every thumbnail is an unrelated still). Every detection is a false detection; the count must be 0.
For each one the script prints the object, the verification figures (inliers, score, visible fraction) and
the rejection reasons of the other candidates of that frame.

Run from the repository root, e.g.::

    OMP_NUM_THREADS=1 python bench/bench_false_detections.py --db-dir /tmp/objrec-dvd334 [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from objrec import ModelDB, Recognizer  # noqa: E402


def data_root(arg: Path | None) -> Path:
    env = os.environ.get("OBJREC_SHARED_DATA")
    for c in [arg] if arg else [Path(env)] if env else [ROOT.parent / "shared" / "data"]:
        if (c / "smvs_dvd").is_dir() and (c / "dvd_covers").is_dir() and (c / "ukbench_small").is_dir():
            return c
    sys.exit("shared data (smvs_dvd, dvd_covers, ukbench_small) not found; pass --data")


def covers(data: Path) -> list[tuple[str, Path]]:
    """``(name, path)`` of the 334 covers: ``smvs_NNN`` and ``dvd_<file stem>`` (unusable characters as ``_``)."""
    items = [(f"smvs_{p.stem}", p) for p in sorted((data / "smvs_dvd" / "reference").glob("*.jpg"))]
    items += [
        (f"dvd_{re.sub(r'[^A-Za-z0-9_.-]', '_', p.stem)}", p) for p in sorted((data / "dvd_covers").glob("*.jpg"))
    ]
    return items


def open_database(folder: Path, items: list[tuple[str, Path]], workers: int | None) -> ModelDB:
    db = ModelDB.create(folder, exist_ok=True)
    t0 = time.perf_counter()
    report = db.enroll_many(items, workers=workers, progress=True)
    print(
        f"database {folder}: {len(db)} objects ({len(report.enrolled)} enrolled now, {len(report.skipped)} "
        f"already there) in {time.perf_counter() - t0:.1f} s"
    )
    for f in report.failed:
        print(f"  enrolment failed: {f}")
    return db


def scan(rec: Recognizer, scenes: list[Path]) -> tuple[list[dict], list[float]]:
    """Process every scene; returns the false detections (with the frame's other rejections) and latencies."""
    from tqdm import tqdm

    found, latencies = [], []
    for p in tqdm(scenes, desc="ukbench scenes", unit="img", file=sys.stderr, dynamic_ncols=True):
        img = cv2.imread(str(p))
        if img is None:
            sys.exit(f"{p}: cannot read the image")
        r = rec.process(img)
        latencies.append(r.latency_ms)
        for d in r.detections:
            found.append(
                {
                    "scene": p.name,
                    "object": d.name,
                    "inliers": int(d.inliers),
                    "score": round(float(d.score), 4),
                    "visible_fraction": round(float(d.visible_fraction), 4),
                    "corners": np.round(d.corners, 1).tolist(),
                    "other_rejections": [f"{x.name}: {x.reason} ({x.detail})" for x in rec.last_rejections],
                }
            )
    return found, latencies


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", type=Path, help="shared data folder (default ../shared/data or $OBJREC_SHARED_DATA)")
    ap.add_argument(
        "--db-dir",
        type=Path,
        default=Path(tempfile.gettempdir()) / "objrec-false-detections-db",
        help="database folder, created or reused (default: %(default)s)",
    )
    ap.add_argument("--limit", type=int, default=0, help="only the first N thumbnails (0: all)")
    ap.add_argument("--workers", type=int, default=None, help="enrolment threads (default: the usable cores)")
    ap.add_argument("--json", type=Path, help="write the counts and every false detection here")
    args = ap.parse_args()
    print("command:", shlex.join([sys.executable, *sys.argv]))
    omp = os.environ.get("OMP_NUM_THREADS")
    print(f"machine: {os.cpu_count()} cores; cv2 threads {cv2.getNumThreads()}; OMP_NUM_THREADS={omp}")
    data = data_root(args.data)
    items = covers(data)
    db = open_database(args.db_dir, items, args.workers)
    scenes = sorted((data / "ukbench_small").glob("ukbench*.jpg"))
    if args.limit:
        scenes = scenes[: args.limit]
    rec = Recognizer(db, track=False)
    rec.process(cv2.imread(str(scenes[0])))  # compilation and buffers before the first counted frame
    found, lat = scan(rec, scenes)
    print(
        f"{len(scenes)} UKBench scenes against {len(db)} DVD covers: {len(found)} false detection(s) in "
        f"{len({f['scene'] for f in found})} scene(s); latency p50 {np.percentile(lat, 50):.1f} ms, "
        f"p90 {np.percentile(lat, 90):.1f} ms"
    )
    for f in found:
        print(
            f"  {f['scene']}: {f['object']} inliers {f['inliers']} score {f['score']} visible {f['visible_fraction']}"
            f"; other candidates: {'; '.join(f['other_rejections']) or 'none'}"
        )
    if args.json:
        summary = {"scenes": len(scenes), "objects": len(db), "false_detections": found}
        args.json.write_text(json.dumps({**summary, "latency_ms_p50": float(np.percentile(lat, 50))}, indent=1))
    return 0 if not found else 1


if __name__ == "__main__":
    raise SystemExit(main())
