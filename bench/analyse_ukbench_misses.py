"""Why objrec misses UKBench objects: each missed query attributed to the stage that lost it.

UKBench objects ``--objects`` (image 4k enrolled, 4k+1..4k+3 queries, 640x480) are recognised by objrec's
:class:`~objrec.Recognizer` (no budget, no tracking, the database's detectors) and by the find_obj-style anchor
(:class:`~objrec.evaluation.baseline.FindObjBaseline`: OpenCV SIFT, FLANN, ratio 0.8, RANSAC 5 px on the 5
best-voted objects, 10 inliers). For every query objrec misses, the cause is the first stage that lost the object:

- ``not shortlisted``: retrieval did not put the object among the objects matched;
- a reason code of :data:`objrec.matching.verify.REASONS` for the object's primary candidate (``too_few_matches``:
  fewer ratio-test matches than verification needs; ``appearance``: :func:`~objrec.matching.verify.edge_agreement`
  rejected a sound homography; the others: the homography verifier's geometry checks).

Beside each cause: how many of those misses the anchor finds, and two measures of depth on the object's own matches
(the shortlist's, or the object's alone when not shortlisted): the median inliers of a homography and of a
fundamental matrix (OpenCV USAC MAGSAC, 3 px and 1.5 px), and how many pairs the solid verifier
(:func:`objrec.matching.solid.verify_solid`) accepts, i.e. how many a verification without a plane could recover.

The candidates of every query (matches with both ends' keypoint size and angle, and the flat verdict) are saved to
``--out/ukbench_pairs.npz`` for ``bench/bench_solid.py``; a second run with the same ``--out`` reuses them.

    PYTHONPATH=$PWD taskset -c 1 python bench/analyse_ukbench_misses.py --db /tmp/uk_solid/db1 --out /tmp/uk_solid
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from collections import Counter, defaultdict
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from solid_pairs import PairCapture, load_pairs, save_pairs  # noqa: E402

from objrec import ModelDB  # noqa: E402
from objrec.evaluation.baseline import FindObjBaseline  # noqa: E402


def shared_data() -> Path:
    return Path(os.environ.get("OBJREC_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def uk_path(i: int) -> Path:
    return shared_data() / "ukbench" / f"ukbench{i:05d}.jpg"


def open_db(path: Path, objects: range) -> ModelDB:
    """The database of the objects' first images (``ukNNN``), created when missing."""
    if not (path / "manifest.json").exists():
        db = ModelDB.create(path)
        db.enroll_many([(f"uk{k:03d}", str(uk_path(4 * k))) for k in objects], progress=False)
    return ModelDB.open(path)


def capture(db_path: Path, out: Path, objects: range) -> None:
    """Run objrec and the anchor on every query; save pairs, records and the anchor's findings."""
    cap = PairCapture(open_db(db_path, objects))
    base = FindObjBaseline(
        {f"uk{k:03d}": cv2.imread(str(uk_path(4 * k)), cv2.IMREAD_GRAYSCALE) for k in objects},
        matcher="flann",
        ratio=0.8,
        candidates=5,
        ransac_px=5.0,
        min_inliers=10,
    )
    records, pairs, anchor = [], [], {}
    t0 = time.perf_counter()
    for k in objects:
        for v in (1, 2, 3):
            img = cv2.imread(str(uk_path(4 * k + v)))
            fid = f"{4 * k + v:05d}"
            rec, p = cap.process(fid, img, f"uk{k:03d}")
            records.append(rec)
            pairs += p
            anchor[fid] = [d.name for d in base.process(img).detections]
        print(f"object {k}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    save_pairs(out / "ukbench_pairs.npz", pairs, records)
    (out / "ukbench_anchor.json").write_text(json.dumps(anchor))


def inlier_counts(pair) -> tuple[int, int]:
    """Inliers of a MAGSAC homography (3 px) and fundamental matrix (1.5 px) on the pair's matches."""
    if len(pair.model_xy) < 8:
        return 0, 0
    cv2.setRNGSeed(0)
    _, mh = cv2.findHomography(pair.model_xy, pair.scene_xy, cv2.USAC_MAGSAC, 3.0, maxIters=2000)
    _, mf = cv2.findFundamentalMat(pair.model_xy, pair.scene_xy, cv2.USAC_MAGSAC, 1.5, 0.999, 2000)
    return int(0 if mh is None else mh.sum()), int(0 if mf is None else mf[:, 0].sum())


def cause_of(rec: dict) -> str:
    """The stage that lost the query's object in objrec's run."""
    if rec["target"] not in rec["shortlist"]:
        return "not shortlisted"
    mine = [r for n, _, r in rec["verdicts"] if n == rec["target"]]
    return mine[0] if mine else "too_few_matches"


def table(out: Path) -> None:
    from objrec.matching.solid import verify_solid

    pairs, records = load_pairs(out / "ukbench_pairs.npz")
    anchor = json.loads((out / "ukbench_anchor.json").read_text())
    right = {p.frame: p for p in pairs if p.right}
    found = [r for r in records if r["target"] in r["found"]]
    print(f"objrec found {len(found)}/{len(records)} = {len(found) / len(records):.1%}; ", end="")
    print(f"anchor found {sum(r['target'] in anchor[r['frame']] for r in records) / len(records):.1%}")
    rows: dict[str, list] = defaultdict(list)
    for r in records:
        if r["target"] in r["found"]:
            continue
        p = right.get(r["frame"])
        nh, nf = inlier_counts(p) if p is not None else (0, 0)
        solid = bool(
            p is not None
            and verify_solid(
                p.model_xy,
                p.scene_xy,
                p.model_size,
                p.scene_shape,
                model_frames=p.model_frames,
                scene_frames=p.scene_frames,
            )
        )
        rows[cause_of(r)].append(
            (r["target"] in anchor[r["frame"]], nh, nf, solid, 0 if p is None else len(p.model_xy))
        )
    print(
        "| cause of the miss | misses | anchor finds | median matches | median H inliers | median F inliers | "
        "solid accepts |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for cause, rs in sorted(rows.items(), key=lambda kv: -len(kv[1])):
        a = np.array(rs, np.float64)
        print(
            f"| {cause} | {len(rs)} | {int(a[:, 0].sum())} | {np.median(a[:, 4]):.0f} | {np.median(a[:, 1]):.0f} | "
            f"{np.median(a[:, 2]):.0f} | {int(a[:, 3].sum())} |"
        )
    total = sum(len(v) for v in rows.values())
    print(
        f"| all misses | {total} | {sum(int(x[0]) for v in rows.values() for x in v)} | | | | "
        f"{sum(int(x[3]) for v in rows.values() for x in v)} |"
    )
    print("wrong detections:", Counter(n for r in records for n in r["found"] if n != r["target"]))
    # What verification without a plane would add: the object's shortlisted candidate accepted by verify_solid
    # where objrec missed it (retrieval and matching unchanged).
    solid = {
        p.frame: bool(verify_solid(p.model_xy, p.scene_xy, p.model_size, p.scene_shape, None, p.model_frames,
                                   p.scene_frames))
        for p in pairs
        if p.right and p.shortlisted
    }  # fmt: skip
    for split, lo, hi in (("0-79", 0, 80), ("80-119", 80, 120), ("all", 0, 10**9)):
        rs = [r for r in records if lo <= int(r["frame"]) // 4 < hi]
        if rs:
            was = np.mean([r["target"] in r["found"] for r in rs])
            now = np.mean([r["target"] in r["found"] or solid.get(r["frame"], False) for r in rs])
            print(f"objects {split}: found {was:.1%}; with verify_solid on the shortlisted candidates {now:.1%}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--db", type=Path, required=True, help="UKBench database (created when missing)")
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--objects", default="0-119", help="first-last object")
    a = ap.parse_args()
    lo, hi = (int(v) for v in a.objects.split("-"))
    a.out.mkdir(parents=True, exist_ok=True)
    print(" ".join(sys.argv))
    if not (a.out / "ukbench_pairs.npz").exists():
        capture(a.db, a.out, range(lo, hi + 1))
    table(a.out)


if __name__ == "__main__":
    main()
