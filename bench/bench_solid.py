"""Verification without a plane (:func:`objrec.matching.solid.verify_solid`) on objrec's own candidates.

Right pairs: each UKBench query (objects ``0-119``, image 4k enrolled, 4k+1..4k+3 queries) with its own object's
ratio-test matches, as objrec's matcher gives them (``bench/analyse_ukbench_misses.py`` captures them). Wrong
pairs: the same queries' other shortlisted objects, and every candidate objrec's matcher offers on photos without
any enrolled object: the 1692 ``ukbench_small`` photos and 200 frames of ``vtest.avi`` (evenly spaced) against a
database of the 120 UKBench objects, the 100 ``smvs_dvd`` references and the 234 ``dvd_covers``
(``--capture-negatives``, which builds that database at ``--db``).

The solid verifier's least support (``min_inliers``) is tuned on objects 0-79 (their right and wrong pairs) and on
the even-numbered negative frames: the smallest value from the default (10) up with no wrong pair accepted; the
accepts at other values are printed beside it. It is reported on objects 80-119 and on the odd-numbered negative
frames. Also reported: how many right pairs the homography verifier
(objrec's ``CandidateVerifier``, appearance check included) accepts, how many the solid verifier accepts, and how
many only the solid one does; the cost of :func:`verify_solid` per candidate (median and p90 ms, one thread).

    PYTHONPATH=$PWD taskset -c 1 python bench/bench_solid.py --out /tmp/uk_solid --db /tmp/uk_solid/db454 \\
        --capture-negatives 0-946
    PYTHONPATH=$PWD taskset -c 1 python bench/bench_solid.py --out /tmp/uk_solid --db /tmp/uk_solid/db454 \\
        --capture-negatives 946-1892
    PYTHONPATH=$PWD taskset -c 1 python bench/bench_solid.py --out /tmp/uk_solid [--sift]

``--sift``: the same figures on pairs matched by OpenCV SIFT with a looser ratio test (:func:`sift_pairs`), whose
wrong pairs carry many more matches (and fundamental-matrix inliers) than objrec's candidates do.
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
import time
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))

from solid_pairs import PairCapture, load_pairs, save_pairs  # noqa: E402

from objrec import ModelDB  # noqa: E402
from objrec.matching.solid import SolidParams, verify_solid  # noqa: E402
from objrec.matching.verify import verify_homography  # noqa: E402
from objrec.types import Failure  # noqa: E402

TUNE_OBJECTS = range(0, 80)
VTEST_FRAMES = np.linspace(0, 794, 200).astype(int)


def shared_data() -> Path:
    return Path(os.environ.get("OBJREC_SHARED_DATA", Path(__file__).resolve().parents[2] / "shared" / "data"))


def catalogue_db(path: Path) -> ModelDB:
    """The 454-object database (UKBench 4k images, SMVS references, DVD covers), created when missing."""
    if not (path / "manifest.json").exists():
        d = shared_data()
        items = [(f"uk{k:03d}", str(d / "ukbench" / f"ukbench{4 * k:05d}.jpg")) for k in range(120)]
        items += [(f"smvs_{p.stem}", str(p)) for p in sorted((d / "smvs_dvd" / "reference").glob("*.jpg"))]
        items += [(f"dvd_{p.stem}", str(p)) for p in sorted((d / "dvd_covers").glob("*.jpg"))]
        ModelDB.create(path).enroll_many(items, progress=False)
    return ModelDB.open(path)


def negative_frames() -> list[tuple[str, np.ndarray]]:
    """(id, loader) of the frames without enrolled objects: ukbench_small photos, then vtest.avi frames."""
    d = shared_data()
    out = [(f"small_{i}", p) for i, p in enumerate(sorted((d / "ukbench_small").glob("*.jpg")))]
    out += [(f"vtest_{i}", int(f)) for i, f in enumerate(VTEST_FRAMES)]
    return out


def capture_negatives(db_path: Path, out: Path, lo: int, hi: int) -> None:
    cap = PairCapture(catalogue_db(db_path))
    video = cv2.VideoCapture(str(shared_data() / "opencv_samples" / "vtest.avi"))
    records, pairs = [], []
    t0 = time.perf_counter()
    for j, (fid, src) in enumerate(negative_frames()[lo:hi]):
        if isinstance(src, int):
            video.set(cv2.CAP_PROP_POS_FRAMES, src)
            img = video.read()[1]
        else:
            img = cv2.imread(str(src))
        rec, p = cap.process(fid, img, None)
        records.append(rec)
        pairs += p
        if j % 100 == 0:
            print(f"{lo + j}: {time.perf_counter() - t0:.0f} s", file=sys.stderr, flush=True)
    save_pairs(out / f"negatives_{lo}_{hi}.npz", pairs, records)
    found = sum(len(r.found) for r in records)
    print(f"frames {lo}-{hi}: objrec's own detections {found} (false: no enrolled object is in these frames)")


def tune_split(p) -> bool:
    """Whether a pair belongs to the tuning split."""
    if p.frame.startswith(("small_", "vtest_")):
        return int(p.frame.split("_")[1]) % 2 == 0
    return int(p.frame) // 4 in TUNE_OBJECTS


def support(pairs: list, params: SolidParams) -> tuple[np.ndarray, np.ndarray]:
    """Each pair's solid support (0 when rejected) and its verification time in ms."""
    n, ms = np.zeros(len(pairs), np.int64), np.zeros(len(pairs))
    for i, p in enumerate(pairs):
        t = time.perf_counter()
        v = verify_solid(p.model_xy, p.scene_xy, p.model_size, p.scene_shape, params, p.model_frames, p.scene_frames)
        ms[i] = (time.perf_counter() - t) * 1e3
        n[i] = v.n_inliers if v else 0
    return n, ms


def report(out: Path, params: SolidParams, sift: bool = False) -> None:
    if sift:
        pairs = sift_pairs(out)
        uk, neg = pairs, []
        print("OpenCV SIFT pairs, ratio 0.8, each object alone")
    else:
        uk, _ = load_pairs(out / "ukbench_pairs.npz")
        neg = [p for f in sorted(out.glob("negatives_*.npz")) for p in load_pairs(f)[0]]
        pairs = uk + neg
    probe = dataclasses.replace(params, min_inliers=8)  # every support from 8 on, to set the threshold after
    n, ms = support(pairs, probe)
    right = np.array([p.right for p in pairs])
    tune = np.array([tune_split(p) for p in pairs])
    flat = np.array([p.verdict == "ok" for p in pairs])
    negative = np.array([p.frame.startswith(("small_", "vtest_")) for p in pairs])
    wrong_tune = n[tune & ~right]
    # The fewest supporting matches with no wrong pair accepted on the tuning split, and never below the default
    # (3 matches beyond the 7 that a fundamental matrix is fitted to exactly).
    threshold = int(max(params.min_inliers, wrong_tune.max() + 1))
    print("| min_inliers | right accepted (tune / hold-out) | wrong accepted (tune / hold-out) |")
    print("| --- | --- | --- |")
    for t in (8, 10, 12, 14, 16, 20, 25, 30):
        a = n >= t
        print(f"| {t} | {(a & right & tune).sum()} / {(a & right & ~tune).sum()} | "
              f"{(a & ~right & tune).sum()} / {(a & ~right & ~tune).sum()} |")  # fmt: skip
    print(f"pairs: {len(uk)} UKBench ({right.sum()} right), {len(neg)} from negative frames")
    print(f"min_inliers tuned: {threshold} (largest wrong support on the tuning split {wrong_tune.max()})")
    final = dataclasses.replace(params, min_inliers=threshold)
    acc = np.array([bool(a) for a in _verdicts(pairs, final)])
    print(
        "| split | right pairs | flat accepts | solid accepts | solid only | either | wrong pairs (UK / negatives) | "
        "solid false accepts | flat false accepts | max wrong support |"
    )
    print("| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |")
    for name, s in (("tune (0-79, even negatives)", tune), ("hold-out (80-119, odd negatives)", ~tune)):
        r, w = s & right, s & ~right
        print(
            f"| {name} | {r.sum()} | {(flat & r).sum()} | {(acc & r).sum()} | {(acc & r & ~flat).sum()} | "
            f"{((acc | flat) & r).sum()} | {(w & ~negative).sum()} / {(w & negative).sum()} | {(acc & w).sum()} | "
            f"{(flat & w).sum()} | {n[w].max()} |"
        )
    sizes = [len(p.model_xy) for p in pairs]
    print(f"verify_solid ms per candidate: median {np.median(ms):.2f}, p90 {np.percentile(ms, 90):.2f}, ", end="")
    print(f"max {ms.max():.1f} (matches per candidate: median {np.median(sizes):.0f}, max {max(sizes)})")
    big = np.array(sizes) >= params.min_matches
    print(
        f"  candidates with >= {params.min_matches} matches ({big.sum()}): median {np.median(ms[big]):.2f} ms, ", end=""
    )
    print(f"p90 {np.percentile(ms[big], 90):.2f} ms (cv2 threads: {cv2.getNumThreads()})")


def sift_pairs(out: Path) -> list:
    """Right and wrong UKBench pairs from OpenCV SIFT with a looser ratio test (0.8, each object alone, as the
    find_obj anchor matches): wrong pairs with many more matches than objrec's shortlist leaves them, the harder
    case for a verifier. Each query 4k+v against its own object and against objects k+1, k+2, k+3 and k+40."""
    path = out / "sift_pairs.npz"
    if path.exists():
        return load_pairs(path)[0]
    from solid_pairs import Pair

    sift, bf = cv2.SIFT_create(), cv2.BFMatcher()
    feats = {}
    for i in range(480):
        kp, desc = sift.detectAndCompute(cv2.imread(str(shared_data() / "ukbench" / f"ukbench{i:05d}.jpg"), 0), None)
        feats[i] = (np.array([k.pt for k in kp]), np.array([(k.size, k.angle) for k in kp]), desc)
    pairs = []
    for q in range(480):
        k = q // 4
        if q % 4 == 0:
            continue
        for o in (k, (k + 1) % 120, (k + 2) % 120, (k + 3) % 120, (k + 40) % 120):
            (xm, fm, dm), (xs, fs, ds) = feats[4 * o], feats[q]
            m = [a for a, b in bf.knnMatch(dm, ds, k=2) if a.distance < 0.8 * b.distance]
            mi, si = np.array([a.queryIdx for a in m], int), np.array([a.trainIdx for a in m], int)
            v = verify_homography(xm[mi], xs[si], 640, 480, (480, 640)) if len(m) >= 4 else Failure("too_few_matches")
            verdict = "ok" if v else v.reason  # geometry only: no frame is kept for the appearance check
            pairs.append(
                Pair(f"{q:05d}", f"uk{o:03d}", o == k, xm[mi], xs[si], fm[mi], fs[si], (640, 480), (480, 640), verdict)
            )
    save_pairs(path, pairs, [])
    return pairs


def _verdicts(pairs: list, params: SolidParams) -> list:
    return [
        verify_solid(p.model_xy, p.scene_xy, p.model_size, p.scene_shape, params, p.model_frames, p.scene_frames)
        for p in pairs
    ]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="folder of ukbench_pairs.npz and negatives_*.npz")
    ap.add_argument("--db", type=Path, help="the 454-object database (for --capture-negatives)")
    ap.add_argument("--capture-negatives", metavar="LO-HI", help="capture negative frames LO..HI-1 and stop")
    ap.add_argument("--sift", action="store_true", help="the OpenCV SIFT pairs instead of objrec's candidates")
    a = ap.parse_args()
    print(" ".join(sys.argv))
    cv2.setNumThreads(1)
    if a.capture_negatives:
        lo, hi = (int(v) for v in a.capture_negatives.split("-"))
        capture_negatives(a.db, a.out, lo, hi)
        return
    report(a.out, SolidParams(), a.sift)


if __name__ == "__main__":
    main()
