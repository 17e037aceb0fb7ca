"""Real wide-baseline planar pairs: objrec against the find_obj-style anchor, in the same run.

For each pair of ``../shared/data/homography_pairs`` (the 9 "homogr" pairs at the top level, the 15 EVD
extreme-view pairs in ``extremeview/``), image A is enrolled and recognised in image B. The error of a
detection is the median distance, in B, of the pair's annotated points of A mapped by the recovered
homography to their annotated positions in B (the points the data marks as verified: flag 1). A pair counts
as solved within 5 px. Both recognisers see the same images; the anchor is OpenCV SIFT, brute-force knn 2,
ratio 0.75, RANSAC 5 px (:class:`objrec.evaluation.baseline.FindObjBaseline` with its defaults).

    python bench/bench_pairs.py [--set homogr|evd|all] [--tilts 2,4] [--json out.json]

``--tilts`` gives the recognizer tilted views of B to search where a candidate stays unsure
(``Recognizer(tilts=...)``, :mod:`objrec.realtime.tilts`).

``objrec eval pairs:ROOT`` runs the objrec side alone, with the evaluation reports.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from objrec import ModelDB, Recognizer
from objrec.datasets import load_annotated_pairs
from objrec.evaluation.baseline import FindObjBaseline
from objrec.evaluation.kinds.pairs import median_error as annotated_median_error


def pairs(root: Path, which: str) -> list[tuple[str, Path, Path, np.ndarray, np.ndarray]]:
    """``(label, A, B, points in A, points in B)`` of the chosen set(s), read by the evaluation package."""
    sets = None if which == "all" else [which]
    return [(p.label, p.path_a, p.path_b, p.points_a, p.points_b) for p in load_annotated_pairs(root, sets)]


def median_error(H: np.ndarray | None, pa: np.ndarray, pb: np.ndarray) -> float:
    e = annotated_median_error(H, pa, pb)
    return float("inf") if e is None else e


def run_pair(a: Path, b: Path, pa: np.ndarray, pb: np.ndarray, views: str | None, tilts: Any = False) -> dict:
    A, B = cv2.imread(str(a)), cv2.imread(str(b))
    with tempfile.TemporaryDirectory() as tmp:
        db = ModelDB.create(Path(tmp) / "db")
        kw = {"views": views} if views else {}
        db.enroll("a", A, **kw)
        rec = Recognizer(db, track=False, tilts=tilts)
        rec.process(B)  # warm (compilation, buffers)
        t0 = time.perf_counter()
        r = rec.process(B)
        ms = (time.perf_counter() - t0) * 1e3
    det = r.detections[0] if r.detections else None
    why = ",".join(sorted({x.reason for x in rec.last_rejections})) or "no candidate"
    base = FindObjBaseline({"a": A})
    t0 = time.perf_counter()
    found = base.process(B).detections
    base_ms = (time.perf_counter() - t0) * 1e3
    return {
        "objrec_err": median_error(det.homography if det else None, pa, pb),
        "objrec_visible": det.visible_fraction if det else None,
        "objrec_ms": ms,
        "objrec_why": "" if det else why,
        "anchor_err": median_error(found[0].homography if found else None, pa, pb),
        "anchor_ms": base_ms,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = Path(__file__).resolve().parents[1]
    default = Path(os.environ.get("OBJREC_SHARED_DATA", here.parent / "shared" / "data")) / "homography_pairs"
    ap.add_argument("--root", type=Path, default=default)
    ap.add_argument("--set", choices=["homogr", "evd", "all"], default="all")
    ap.add_argument("--views", default=None, help="enrol with synthesised views (e.g. affine), if supported")
    ap.add_argument("--tilts", help="tilted views searched where a candidate stays unsure (Recognizer(tilts=...): 2,4)")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    tilts = tuple(float(t) for t in args.tilts.split(",")) if args.tilts else False
    print("command:", shlex.join([sys.executable, *sys.argv]))
    print(f"machine: {os.cpu_count()} cores; cv2 threads {cv2.getNumThreads()}")
    rows = {}
    for name, a, b, pa, pb in pairs(args.root, args.set):
        rows[name] = r = run_pair(a, b, pa, pb, args.views, tilts)
        obj = f"{r['objrec_err']:8.2f}" if np.isfinite(r["objrec_err"]) else f"  -  ({r['objrec_why']})"
        anc = f"{r['anchor_err']:8.2f}" if np.isfinite(r["anchor_err"]) else "     -  "
        print(f"{name:24s} objrec {obj:>10s}  anchor {anc}   ({r['objrec_ms']:.0f} / {r['anchor_ms']:.0f} ms)")
    for s in ("homogr", "evd"):
        sel = {k: v for k, v in rows.items() if k.startswith(s + "/")}
        if sel:
            ours = sum(v["objrec_err"] <= 5 for v in sel.values())
            anchor = sum(v["anchor_err"] <= 5 for v in sel.values())
            worse = [k for k, v in sel.items() if v["anchor_err"] <= 5 and not v["objrec_err"] <= v["anchor_err"] + 1]
            print(f"{s}: objrec {ours}/{len(sel)} within 5 px, anchor {anchor}/{len(sel)}; worse than anchor: {worse}")
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2, default=float))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
