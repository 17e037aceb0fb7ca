"""Benchmark: our SURF (Numba, CPU) against OpenCV's SIFT measured in the same run (the anchor).

Usage::

    PYTHONPATH=. python bench/bench_surf.py [--repeats 15] [--threads N] [--data ../shared/data]

Reports, for a 640x480 real image and a 1920x1080 one: SIFT time and keypoints; SURF at a threshold tuned so
its keypoint count is within 20% of SIFT's, and at OpenCV's 400; full, detection and description time; the
same with a mask of 25% of the frame; the ratio to SIFT. Also how many of OpenCV's own SURF keypoints we
reproduce (reference files made with a nonfree OpenCV build). Medians over ``--repeats`` after a warm-up.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import time
from pathlib import Path

import cv2
import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from objrec.features.surf import SURF  # noqa: E402


def median_ms(fn, repeats: int) -> float:
    fn()  # warm-up (JIT, buffers)
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return 1000.0 * float(np.median(ts))


def find_data(arg: str | None) -> Path:
    cands = [Path(arg)] if arg else []
    cands += [p / "shared" / "data" for p in Path(__file__).resolve().parents]
    for c in cands:
        if (c / "oxford_affine").is_dir():
            return c
    sys.exit("shared data not found; pass --data")


def tune_threshold(img: np.ndarray, target: int) -> tuple[float, int]:
    """Hessian threshold whose keypoint count is closest to ``target`` (bisection on log threshold)."""
    lo, hi = 5.0, 20000.0
    best = (400.0, len(SURF(400, backend="cpu").detect_and_compute(img)))
    for _ in range(16):
        mid = float(np.sqrt(lo * hi))
        n = len(SURF(mid, backend="cpu").detect_and_compute(img))
        if abs(n - target) < abs(best[1] - target):
            best = (mid, n)
        if abs(n - target) <= 0.05 * target:
            break
        lo, hi = (mid, hi) if n > target else (lo, mid)
    return best


def bench_image(name: str, img: np.ndarray, repeats: int) -> None:
    h, w = img.shape
    sift = cv2.SIFT_create()
    n_sift = len(sift.detect(img, None))
    t_sift = median_ms(lambda: sift.detectAndCompute(img, None), repeats)
    mask = np.zeros_like(img)
    mask[h // 4 : h // 4 + h // 2, w // 4 : w // 4 + w // 2] = 255  # 25% of the frame
    t_sift_mask = median_ms(lambda: sift.detectAndCompute(img, mask), repeats)
    thr, n_tuned = tune_threshold(img, n_sift)
    print(f"\n== {name}: {w}x{h}")
    print(f"OpenCV SIFT                 {t_sift:8.1f} ms  {n_sift:5d} kp   (25% mask: {t_sift_mask:6.1f} ms)")
    for label, t in ((f"SURF({thr:.0f}) ~SIFT count", thr), ("SURF(400)", 400.0), ("SURF(400) upright", -400.0)):
        s = SURF(abs(t), upright=t < 0, backend="cpu")
        f = s.detect_and_compute(img)
        full = median_ms(lambda s=s: s.detect_and_compute(img), repeats)
        desc = median_ms(lambda s=s, f=f: s._describe_host(img, f.xy, f.size, "cpu"), repeats)
        fm = s.detect_and_compute(img, mask)
        full_m = median_ms(lambda s=s: s.detect_and_compute(img, mask), repeats)
        print(
            f"{label:27s} {full:8.1f} ms  {len(f):5d} kp   ratio to SIFT {full / t_sift:5.2f}   "
            f"detect {full - desc:6.1f} + describe {desc:6.1f} ms   "
            f"25% mask: {full_m:6.1f} ms {len(fm):5d} kp (ratio to SIFT+mask {full_m / t_sift_mask:5.2f})"
        )


def reference_agreement(data: Path) -> None:
    from scipy.spatial import cKDTree

    print("\n== agreement with OpenCV's SURF(400) (reference files): reproduced within 1 px / 10% size / sign")
    for seq in ("graf", "boat", "bikes", "wall"):
        img = cv2.imread(str(data / "oxford_affine" / seq / "img1.png"), cv2.IMREAD_GRAYSCALE)
        ref = np.load(data / "reference" / "opencv_surf" / f"{seq}_img1.npz")
        f = SURF(400, backend="cpu").detect_and_compute(img)
        tree = cKDTree(f.xy)
        hit = 0
        for i, cand in enumerate(tree.query_ball_point(ref["xy"], 1.0)):
            hit += any(
                abs(f.size[j] - ref["size"][i]) <= 0.1 * ref["size"][i] and f.laplacian[j] == ref["laplacian"][i]
                for j in cand
            )
        print(f"{seq:6s} ours {len(f):5d}  OpenCV {len(ref['xy']):5d}  reproduced {hit / len(ref['xy']):.4f}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=15)
    ap.add_argument("--threads", type=int, default=None, help="Numba and OpenCV threads (default: all cores)")
    ap.add_argument("--data", default=None)
    args = ap.parse_args()
    if args.threads:
        numba.set_num_threads(args.threads)
        cv2.setNumThreads(args.threads)
    data = find_data(args.data)
    print("command:", shlex.join([sys.executable, *sys.argv]))
    print(
        f"cores {os.cpu_count()}, numba threads {numba.get_num_threads()}, OpenCV threads {cv2.getNumThreads()}, "
        f"OpenCV {cv2.__version__}, numba {numba.__version__}, numpy {np.__version__}, {platform.processor()}"
    )
    if os.name == "posix":
        print(f"load average at start: {os.getloadavg()}")
    boat = cv2.imread(str(data / "oxford_affine" / "boat" / "img1.png"), cv2.IMREAD_GRAYSCALE)
    img640 = np.ascontiguousarray(boat[100:580, 105:745])  # a 640x480 crop of a real photo
    graf = cv2.imread(str(data / "oxford_affine" / "graf" / "img1.png"), cv2.IMREAD_GRAYSCALE)
    img1080 = cv2.resize(graf, (1920, 1080), interpolation=cv2.INTER_CUBIC)
    t = time.perf_counter()
    SURF(400, backend="cpu").detect_and_compute(img640)
    print(f"first call (Numba compilation included): {time.perf_counter() - t:.1f} s")
    bench_image("Oxford boat img1, 640x480 crop", img640, args.repeats)
    bench_image("Oxford graf img1 resized to 1920x1080", img1080, max(3, args.repeats // 3))
    reference_agreement(data)
    if os.name == "posix":
        print(f"\nload average at end: {os.getloadavg()} (other processes on the machine inflate both timings)")


if __name__ == "__main__":
    main()
