"""Real wide-baseline planar pairs: objrec against the find_obj-style anchor, in the same run.

For each pair of ``../shared/data/homography_pairs`` (the 9 "homogr" pairs at the top level, the 15 EVD
extreme-view pairs in ``extremeview/``), image A is enrolled and recognised in image B. The error of a
detection is the median distance, in B, of the pair's annotated points of A mapped by the recovered
homography to their annotated positions in B (the points the data marks as verified: flag 1). A pair counts
as solved within 5 px. Both recognisers see the same images; the anchor is OpenCV SIFT, brute-force knn 2,
ratio 0.75, RANSAC 5 px (``bench/baseline_findobj.py``).

    python bench/bench_pairs.py [--set homogr|evd|all] [--json out.json]
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

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from baseline_findobj import FindObjBaseline  # noqa: E402

from objrec import ModelDB, Recognizer  # noqa: E402


def pairs(root: Path, which: str) -> list[tuple[str, Path, Path, np.ndarray, np.ndarray]]:
    """``(name, A, B, points in A, points in B)`` of the chosen set(s)."""
    out = []
    if which in ("homogr", "all"):
        for a in sorted(root.glob("*A.png")):
            name = a.name[:-5]
            t = np.loadtxt(root / f"{name}_pts.txt")
            t = t[t[:, 6] == 1]
            out.append((f"homogr/{name}", a, root / f"{name}B.png", t[:, 0:2], t[:, 3:5]))
    if which in ("evd", "all"):
        evd = root / "extremeview"
        for a in sorted(evd.glob("*A.png")):
            name = a.name[:-5]
            rows = [ln.split() for ln in (evd / f"{name}_pts.txt").read_text().splitlines() if ln.strip()]
            t = np.array([[float(v) for v in r[:4]] for r in rows if r[-1] == "1"])
            out.append((f"evd/{name}", a, evd / f"{name}B.png", t[:, 0:2], t[:, 2:4]))
    return out


def median_error(H: np.ndarray | None, pa: np.ndarray, pb: np.ndarray) -> float:
    if H is None:
        return float("inf")
    mapped = cv2.perspectiveTransform(pa.reshape(-1, 1, 2).astype(np.float64), H).reshape(-1, 2)
    return float(np.median(np.linalg.norm(mapped - pb, axis=1)))


def run_pair(a: Path, b: Path, pa: np.ndarray, pb: np.ndarray, views: str | None) -> dict:
    A, B = cv2.imread(str(a)), cv2.imread(str(b))
    with tempfile.TemporaryDirectory() as tmp:
        db = ModelDB.create(Path(tmp) / "db")
        kw = {"views": views} if views else {}
        db.enroll("a", A, **kw)
        rec = Recognizer(db, track=False)
        rec.process(B)  # warm (compilation, buffers)
        t0 = time.perf_counter()
        r = rec.process(B)
        ms = (time.perf_counter() - t0) * 1e3
    det = r.detections[0] if r.detections else None
    why = ",".join(sorted({x.reason for x in rec.last_rejections})) or "no candidate"
    base = FindObjBaseline({"a": A})
    t0 = time.perf_counter()
    found = base.process(B)
    base_ms = (time.perf_counter() - t0) * 1e3
    return {
        "objrec_err": median_error(det.homography if det else None, pa, pb),
        "objrec_visible": det.visible_fraction if det else None,
        "objrec_ms": ms,
        "objrec_why": "" if det else why,
        "anchor_err": median_error(found[0][1] if found else None, pa, pb),
        "anchor_ms": base_ms,
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = Path(__file__).resolve().parents[1]
    default = Path(os.environ.get("OBJREC_SHARED_DATA", here.parent / "shared" / "data")) / "homography_pairs"
    ap.add_argument("--root", type=Path, default=default)
    ap.add_argument("--set", choices=["homogr", "evd", "all"], default="all")
    ap.add_argument("--views", default=None, help="enrol with synthesised views (e.g. affine), if supported")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    print("command:", shlex.join([sys.executable, *sys.argv]))
    print(f"machine: {os.cpu_count()} cores; cv2 threads {cv2.getNumThreads()}")
    rows = {}
    for name, a, b, pa, pb in pairs(args.root, args.set):
        rows[name] = r = run_pair(a, b, pa, pb, args.views)
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
