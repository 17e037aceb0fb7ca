"""False detections at catalogue scale: unrelated photos and video frames against objects they do not show.

The database holds the 100 SMVS DVD references and the 234 other DVD covers (334 objects, default detectors),
and with ``--ukbench-objects N`` also the first view (image ``4k``) of the first N real UKBench objects
(``ukbench/``: shoes, toys, tins, CD covers), enrolled as ``--shape`` (default solid: verified without a plane
where no homography holds, the weaker geometric test, so the one that must be shown not to accept wrong
photos). Enrolment goes into ``--db-dir``, reused on the next run (it resumes and skips what is there). The
scenes are the 1692 unrelated web photos of ``ukbench_small`` (household objects, no object of the database) and
the first ``--vtest`` frames of ``vtest.avi`` (a street scene); each is a still for a
:class:`~objrec.recognizer.Recognizer` with its defaults and no tracking. Every detection is a false detection;
the count must be 0. For each one the script prints the object, the verification figures (inliers, score,
visible fraction) and the rejection reasons of the other candidates of that frame.

Run from the repository root, e.g.::

    OMP_NUM_THREADS=1 python bench/bench_false_detections.py --db-dir /tmp/objrec-454 --ukbench-objects 120 \
        --vtest 200 [--tilts 2,4] [--json out.json]

``--tilts`` searches tilted views where a candidate stays unsure (``Recognizer(tilts=...)``): its false
detections and its cost per scene.
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


def ukbench_objects(data: Path, n: int) -> list[tuple[str, Path]]:
    """``(ukNNN, path)`` of the first view (image ``4k``) of the first ``n`` UKBench objects."""
    return [(f"uk{k:03d}", data / "ukbench" / f"ukbench{4 * k:05d}.jpg") for k in range(n)]


def open_database(
    folder: Path, items: list[tuple[str, Path]], workers: int | None, solid: list[tuple[str, Path]], shape: str
) -> ModelDB:
    db = ModelDB.create(folder, exist_ok=True)
    t0 = time.perf_counter()
    report = db.enroll_many(items, workers=workers, progress=True)
    if solid:
        more = db.enroll_many(solid, workers=workers, progress=True, shape=shape)
        report.enrolled += more.enrolled
        report.skipped += more.skipped
        report.failed += more.failed
    print(
        f"database {folder}: {len(db)} objects ({len(report.enrolled)} enrolled now, {len(report.skipped)} "
        f"already there) in {time.perf_counter() - t0:.1f} s"
    )
    for f in report.failed:
        print(f"  enrolment failed: {f}")
    return db


def video_frames(path: Path, n: int) -> list[tuple[str, np.ndarray]]:
    """The first ``n`` frames of a video, named ``<stem>:<index>``."""
    cap = cv2.VideoCapture(str(path))
    out = []
    while len(out) < n:
        ok, frame = cap.read()
        if not ok:
            break
        out.append((f"{path.stem}:{len(out)}", frame))
    return out


def scan(rec: Recognizer, scenes: list[Path | tuple[str, np.ndarray]]) -> tuple[list[dict], list[float]]:
    """Process every scene (an image file, or a named frame); returns the false detections (with the frame's
    other rejections) and latencies."""
    from tqdm import tqdm

    found, latencies = [], []
    for p in tqdm(scenes, desc="scenes", unit="img", file=sys.stderr, dynamic_ncols=True):
        name, img = p if isinstance(p, tuple) else (p.name, cv2.imread(str(p)))
        if img is None:
            sys.exit(f"{p}: cannot read the image")
        r = rec.process(img)
        latencies.append(r.latency_ms)
        for d in r.detections:
            found.append(
                {
                    "scene": name,
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
    ap.add_argument("--ukbench-objects", type=int, default=0, help="also enrol the first N UKBench objects (0: none)")
    ap.add_argument("--shape", choices=("flat", "solid"), default="solid", help="the UKBench objects' shape")
    ap.add_argument("--vtest", type=int, default=0, help="also the first N frames of vtest.avi as scenes")
    ap.add_argument("--workers", type=int, default=None, help="enrolment threads (default: the usable cores)")
    ap.add_argument("--tilts", help="Recognizer(tilts=...): the tilts searched where a candidate stays unsure (2,4)")
    ap.add_argument("--json", type=Path, help="write the counts and every false detection here")
    args = ap.parse_args()
    print("command:", shlex.join([sys.executable, *sys.argv]))
    omp = os.environ.get("OMP_NUM_THREADS")
    print(f"machine: {os.cpu_count()} cores; cv2 threads {cv2.getNumThreads()}; OMP_NUM_THREADS={omp}")
    data = data_root(args.data)
    items = covers(data)
    db = open_database(args.db_dir, items, args.workers, ukbench_objects(data, args.ukbench_objects), args.shape)
    scenes: list = sorted((data / "ukbench_small").glob("ukbench*.jpg"))
    if args.limit:
        scenes = scenes[: args.limit]
    scenes += video_frames(data / "opencv_samples" / "vtest.avi", args.vtest)
    tilts = tuple(float(t) for t in args.tilts.split(",")) if args.tilts else False
    rec = Recognizer(db, track=False, tilts=tilts)
    rec.process(cv2.imread(str(scenes[0])))  # compilation and buffers before the first counted frame
    found, lat = scan(rec, scenes)
    print(
        f"{len(scenes)} scenes against {len(db)} objects: {len(found)} false detection(s) in "
        f"{len({f['scene'] for f in found})} scene(s); latency p50 {np.percentile(lat, 50):.1f} ms, "
        f"p90 {np.percentile(lat, 90):.1f} ms, mean {np.mean(lat):.1f} ms"
    )
    for f in found:
        print(
            f"  {f['scene']}: {f['object']} inliers {f['inliers']} score {f['score']} visible {f['visible_fraction']}"
            f"; other candidates: {'; '.join(f['other_rejections']) or 'none'}"
        )
    if args.json:
        summary = {"scenes": len(scenes), "objects": len(db), "tilts": tilts, "false_detections": found}
        args.json.write_text(json.dumps({**summary, "latency_ms_p50": float(np.percentile(lat, 50))}, indent=1))
    return 0 if not found else 1


if __name__ == "__main__":
    raise SystemExit(main())
