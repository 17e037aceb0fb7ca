"""Enrolment speed: ``objrec enroll --from`` over the 334-object catalogue against a plain OpenCV SIFT pass.

The catalogue is the SMVS DVD references and ``dvd_covers`` (``../shared/data``), written as a ``name,path``
CSV and enrolled by the command line with its defaults into an empty database (start-up, extraction, rating,
storage and the retrieval index included), in a child process timed from outside. The anchor, in the same run
and alternating with it: one loop that reads each image (decoding timed), converts it to gray and calls
``cv2.SIFT_create().detectAndCompute`` with ``cv2.setNumThreads(2)``. Reported: objects per second, the ratio to
the anchor (median over ``--repeats`` alternating pairs), and with ``--profile`` the time of each stage of one
object's preparation (``prepare_object`` under cProfile over ``--profile`` objects on one thread).

Run from the repository root::

    python bench/bench_enrolment.py --repeats 3 --profile 60 --json enrol.json
"""

from __future__ import annotations

import argparse
import cProfile
import csv
import json
import os
import pstats
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent


def shared_data() -> Path:
    return Path(os.environ.get("OBJREC_SHARED_DATA", HERE.parent.parent / "shared" / "data"))


def catalogue_items(data: Path) -> list[tuple[str, str]]:
    """``(name, path)`` of the 334 catalogue objects, as the scorecard enrols them."""
    sys.path.insert(0, str(HERE))
    from scorecard_entries import _catalogue_items

    return [(str(n), str(p)) for n, p in _catalogue_items(data)]


def sift_pass(paths: list[str]) -> float:
    """Seconds for one loop: read each file, decode it to gray, OpenCV SIFT with its default parameters."""
    import cv2

    cv2.setNumThreads(2)
    sift = cv2.SIFT_create()
    t0 = time.perf_counter()
    for p in paths:
        gray = cv2.imread(p, cv2.IMREAD_GRAYSCALE)
        sift.detectAndCompute(gray, None)
    return time.perf_counter() - t0


def cli_enrolment(items: list[tuple[str, str]], work: Path) -> float:
    """Seconds of ``objrec enroll --db NEW --from LIST.csv --no-progress`` in a child process."""
    listing = work / "catalogue.csv"
    with open(listing, "w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(["name", "path"])
        w.writerows(items)
    db = work / "db"
    shutil.rmtree(db, ignore_errors=True)
    cmd = [sys.executable, "-m", "objrec", "enroll", "--db", str(db), "--from", str(listing), "--no-progress"]
    t0 = time.perf_counter()
    r = subprocess.run(cmd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if r.returncode != 0:
        raise RuntimeError(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr[-2000:]}")
    return dt


def profile(items: list[tuple[str, str]], n: int) -> dict[str, float]:
    """CPU milliseconds per object of each stage of ``prepare_object`` on one thread (cumulative times).
    SURF's kernels, OpenCV and BLAS run on one thread here, so that CPU time is the work itself."""
    import cv2
    import numba
    from threadpoolctl import threadpool_limits

    numba.set_num_threads(1)
    cv2.setNumThreads(1)
    threadpool_limits(1)
    from objrec.features.model import DEFAULT_DETECTORS
    from objrec.modeldb.preparation import prepare_object

    prepare_object(items[0][0], items[0][1], DEFAULT_DETECTORS)  # kernels loaded, plans made
    pr = cProfile.Profile(time.process_time)  # CPU time: the figures hold on a busy machine too
    t0 = time.process_time()
    pr.enable()
    for name, path in items[:n]:
        prepare_object(name, path, DEFAULT_DETECTORS)
    pr.disable()
    total = time.process_time() - t0
    stats = pstats.Stats(pr).stats  # type: ignore[attr-defined]
    stages = {
        "read and decode": ("preparation.py", "_load_source"),
        "model image encoding": ("preparation.py", "encode_model_image"),
        "feature extraction": ("model.py", "extract_model_features"),
        "rating": ("rater.py", "rate"),
        "cap and stored form": ("preparation.py", "_prepared"),
    }
    out = {"total": 1e3 * total / n}
    for label, (file, fn) in stages.items():
        cum = sum(v[3] for k, v in stats.items() if k[0].endswith(file) and k[2] == fn)
        out[label] = 1e3 * cum / n
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--repeats", type=int, default=3, help="alternating enrolment / SIFT pairs (default 3)")
    p.add_argument("--profile", type=int, default=0, metavar="N", help="profile N objects' preparation")
    p.add_argument("--json", type=Path, help="write the figures here")
    p.add_argument("--profile-only", action="store_true", help="only the profile (no enrolment or SIFT pass)")
    args = p.parse_args(argv)
    data = shared_data()
    if not (data / "smvs_dvd").is_dir():
        print(f"no {data / 'smvs_dvd'}: set OBJREC_SHARED_DATA", file=sys.stderr)
        return 2
    items = catalogue_items(data)
    paths = [path for _, path in items]
    rows = []
    with tempfile.TemporaryDirectory(prefix="bench_enrolment_") as tmp:
        for i in range(0 if args.profile_only else args.repeats):
            enrol_s = cli_enrolment(items, Path(tmp))
            sift_s = sift_pass(paths)
            rows.append({"enrol_s": enrol_s, "sift_s": sift_s, "ratio": enrol_s / sift_s})
            print(
                f"run {i + 1}: objrec enroll --from {enrol_s:.2f} s ({len(items) / enrol_s:.1f} objects/s), "
                f"SIFT pass {sift_s:.2f} s, ratio {enrol_s / sift_s:.2f}",
                flush=True,
            )
    doc: dict = {"objects": len(items), "runs": rows}
    if rows:
        doc["enrol_s"] = statistics.median(r["enrol_s"] for r in rows)
        doc["objects_per_s"] = len(items) / doc["enrol_s"]
        doc["ratio_to_sift"] = statistics.median(r["ratio"] for r in rows)
        print(
            f"median: {doc['objects_per_s']:.1f} objects/s, {doc['ratio_to_sift']:.2f}x the SIFT pass "
            f"({doc['objects']} objects)"
        )
    if args.profile:
        doc["profile_ms"] = profile(items, args.profile)
        print(f"one object's preparation on one thread ({args.profile} objects), CPU ms:")
        for k, v in doc["profile_ms"].items():
            print(f"  {k:24s} {v:7.1f}")
    if args.json:
        args.json.write_text(json.dumps(doc, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
