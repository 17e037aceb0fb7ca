"""Benchmark: our SURF (Numba, CPU) against OpenCV's SIFT measured in the same run (the anchor).

Usage::

    PYTHONPATH=. python bench/bench_surf.py [--repeats 21] [--threads 2] [--images graf,bikes,...] [--data DIR]

For each Oxford img1 resized to 640x480 (and graf at 1920x1080): SIFT's time and keypoints; SURF at a Hessian
threshold tuned so its keypoint count is within 20% of SIFT's (reported as ``n/a`` when no threshold gets there);
full, detection and description time and the ratio to SIFT; the same with a mask of the central 25% of the
frame, and with that box passed as ``regions`` (the detector then visits only the columns its filters reach);
``max_features=500`` (the strongest are chosen before description). Timings are medians over ``--repeats``
after a warm-up, with SIFT and SURF calls interleaved so that load from other processes hits both alike. Also
how many of OpenCV's own SURF keypoints we reproduce (reference files made with a nonfree OpenCV build).
``--coverage`` instead times boxes covering 10% to 90% of graf's first image against the whole frame;
``--sample-step`` the first-octave sampling step 2 against 1 on each image, whole frames and a central box,
with and without a feature cap (the planner's ``COARSE_SAMPLING_COST``).
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import sys
import time
from collections.abc import Callable
from pathlib import Path

import cv2
import numba
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from objrec.features.surf import SURF  # noqa: E402
from objrec.types import Regions  # noqa: E402

TOLERANCE = 0.20  # keypoint count within 20% of SIFT's (the rule for choosing the threshold)


def interleaved_ms(fns: dict[str, Callable[[], object]], repeats: int) -> dict[str, float]:
    """Median milliseconds of each function, calls interleaved round-robin after one warm-up call each."""
    for fn in fns.values():
        fn()
    ts: dict[str, list[float]] = {k: [] for k in fns}
    for _ in range(repeats):
        for k, fn in fns.items():
            t = time.perf_counter()
            fn()
            ts[k].append(time.perf_counter() - t)
    return {k: 1000.0 * float(np.median(v)) for k, v in ts.items()}


def find_data(arg: str | None) -> Path:
    cands = [Path(arg)] if arg else []
    cands += [p / "shared" / "data" for p in Path(__file__).resolve().parents]
    for c in cands:
        if (c / "oxford_affine").is_dir():
            return c
    sys.exit("shared data not found; pass --data")


def tune_threshold(img: np.ndarray, target: int) -> tuple[float, int]:
    """Hessian threshold whose keypoint count is closest to ``target`` (bisection on log threshold)."""
    lo, hi = 0.5, 20000.0
    best = (400.0, len(SURF(400, backend="cpu").detect_and_compute(img)))
    for _ in range(24):
        mid = float(np.sqrt(lo * hi))
        n = len(SURF(mid, backend="cpu").detect_and_compute(img))
        if abs(n - target) < abs(best[1] - target):
            best = (mid, n)
        if abs(n - target) <= 0.03 * target:
            break
        lo, hi = (mid, hi) if n > target else (lo, mid)
    return best


def bench_image(name: str, img: np.ndarray, repeats: int) -> dict[str, float] | None:
    h, w = img.shape
    sift = cv2.SIFT_create()
    n_sift = len(sift.detect(img, None))
    thr, n_surf = tune_threshold(img, n_sift)
    within = abs(n_surf - n_sift) <= TOLERANCE * n_sift
    mask = np.zeros_like(img)
    box = (w // 4, h // 4, w // 4 + w // 2, h // 4 + h // 2)
    mask[box[1] : box[3], box[0] : box[2]] = 255  # 25% of the frame
    regions = Regions(np.array([box], np.int32), np.ones(1, np.float32))
    s = SURF(thr, backend="cpu")
    s_top = SURF(thr, max_features=500, backend="cpu")
    f = s.detect_and_compute(img)
    t = interleaved_ms(
        {
            "sift": lambda: sift.detectAndCompute(img, None),
            "surf": lambda: s.detect_and_compute(img),
            "describe": lambda: s._describe_host(img, f.xy, f.size, "cpu"),
            "sift_mask": lambda: sift.detectAndCompute(img, mask),
            "surf_mask": lambda: s.detect_and_compute(img, mask),
            "surf_regions": lambda: s.detect_and_compute(img, regions=regions),
            "surf_top500": lambda: s_top.detect_and_compute(img),
        },
        repeats,
    )
    n_mask = len(s.detect_and_compute(img, mask))
    s.detect_and_compute(img, regions=regions)
    visited = s.last_stats_["det_visited"] / s.last_stats_["det_samples_frame"]
    ratio = t["surf"] / t["sift"]
    print(f"\n== {name}: {w}x{h}")
    print(f"OpenCV SIFT                  {t['sift']:7.1f} ms  {n_sift:5d} kp   (25% mask: {t['sift_mask']:6.1f} ms)")
    rule = f"within {TOLERANCE:.0%}" if within else f"n/a: closest count {n_surf} is outside {TOLERANCE:.0%}"
    print(
        f"SURF({thr:7.1f}) ~SIFT count   {t['surf']:7.1f} ms  {n_surf:5d} kp   ratio to SIFT {ratio:5.3f} ({rule})   "
        f"detect {t['surf'] - t['describe']:5.1f} + describe {t['describe']:5.1f} ms"
    )
    print(
        f"  25% mask                   {t['surf_mask']:7.1f} ms  {n_mask:5d} kp   ratio to SIFT+mask "
        f"{t['surf_mask'] / t['sift_mask']:5.3f}"
    )
    print(
        f"  25% box as regions         {t['surf_regions']:7.1f} ms  {n_mask:5d} kp   ratio to SIFT+mask "
        f"{t['surf_regions'] / t['sift_mask']:5.3f}   detector visited {visited:.1%} of the frame's samples"
    )
    top = t["surf_top500"]
    print(f"  max_features=500           {top:7.1f} ms    500 kp   ratio to SIFT {top / t['sift']:5.3f}")
    return {"ratio": ratio, "within": within}


def coverage(img: np.ndarray, repeats: int) -> None:
    """SURF(400) on boxes covering a growing share of the frame (``regions``) against the whole frame without
    regions, at full and 0.75 resolution: where a masked pass stops paying (the planner's
    ``whole_frame_fraction``)."""
    print("\n== regions against the whole frame: SURF(400) ms, one box from the top-left corner")
    for scale in (1.0, 0.75):
        im = img if scale == 1.0 else cv2.resize(img, None, fx=scale, fy=scale, interpolation=cv2.INTER_AREA)
        h, w = im.shape
        s = SURF(400, backend="cpu")
        calls: dict[str, Callable[[], object]] = {"whole": lambda s=s, im=im: s.detect_and_compute(im)}
        for share in (0.1, 0.3, 0.5, 0.6, 0.75, 0.9):
            box = np.array([[0, 0, int(w * share**0.5), int(h * share**0.5)]], np.int32)
            regions = Regions(box, np.ones(1, np.float32))
            calls[f"{share:.0%}"] = lambda s=s, im=im, r=regions: s.detect_and_compute(im, regions=r)
        t = interleaved_ms(calls, repeats)
        print(f"{w}x{h}: " + ", ".join(f"{k} {v:.1f}" for k, v in t.items()))


def sample_steps(images: dict[str, np.ndarray], repeats: int) -> None:
    """SURF(400) at sample step 2 against step 1 on the same pixels: whole frame, a central box of a quarter
    of the frame, each without and with ``max_features=300``; the time ratios and keypoint counts."""
    print("\n== sample step 2 against 1: SURF(400) ms (keypoints), ratio step 2 / step 1")
    ratios = []
    for name, img in images.items():
        h, w = img.shape
        box = Regions(np.array([[w // 4, h // 4, 3 * w // 4, 3 * h // 4]], np.int32), np.ones(1, np.float32))
        row = []
        for label, kw in (("frame", {}), ("frame cap300", {"max_features": 300}), ("box", {"regions": box})):
            fine, coarse = SURF(400, backend="cpu"), SURF(400, backend="cpu", sample_step=2)
            t = interleaved_ms(
                {
                    "1": lambda d=fine, k=kw, im=img: d.detect_and_compute(im, **k),
                    "2": lambda d=coarse, k=kw, im=img: d.detect_and_compute(im, **k),
                },
                repeats,
            )
            n1, n2 = len(fine.detect_and_compute(img, **kw)), len(coarse.detect_and_compute(img, **kw))
            ratios.append(t["2"] / t["1"])
            row.append(f"{label} {t['1']:.1f} ({n1}) -> {t['2']:.1f} ({n2}) x{t['2'] / t['1']:.2f}")
        print(f"{name:7s} " + "; ".join(row))
    print(f"time ratio step 2 / step 1: median {np.median(ratios):.3f}, max {max(ratios):.3f}")


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
    ap.add_argument("--repeats", type=int, default=21)
    ap.add_argument("--threads", type=int, default=None, help="Numba and OpenCV threads (default: all cores)")
    ap.add_argument("--images", default="graf,bikes,leuven,boat,wall,ubc,bark,trees", help="Oxford sequences")
    ap.add_argument("--no-1080p", action="store_true")
    ap.add_argument("--coverage", action="store_true", help="only: regions covering 10-90%% vs the whole frame")
    ap.add_argument("--sample-step", action="store_true", help="only: first-octave sampling step 2 against 1")
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
    t = time.perf_counter()
    SURF(400, backend="cpu").detect_and_compute(np.zeros((64, 64), np.uint8))
    print(f"first call (Numba compilation included): {time.perf_counter() - t:.1f} s")
    if args.coverage:
        full = cv2.imread(str(data / "oxford_affine" / "graf" / "img1.png"), cv2.IMREAD_GRAYSCALE)
        coverage(np.ascontiguousarray(cv2.resize(full, (640, 480), interpolation=cv2.INTER_AREA)), args.repeats)
        return
    if args.sample_step:
        imgs = {}
        for seq in args.images.split(","):
            full = cv2.imread(str(data / "oxford_affine" / seq / "img1.png"), cv2.IMREAD_GRAYSCALE)
            imgs[seq] = np.ascontiguousarray(cv2.resize(full, (640, 480), interpolation=cv2.INTER_AREA))
        sample_steps(imgs, args.repeats)
        return
    results = {}
    for seq in args.images.split(","):
        full = cv2.imread(str(data / "oxford_affine" / seq / "img1.png"), cv2.IMREAD_GRAYSCALE)
        img = np.ascontiguousarray(cv2.resize(full, (640, 480), interpolation=cv2.INTER_AREA))
        results[seq] = bench_image(f"Oxford {seq} img1 resized to 640x480", img, args.repeats)
    ok = [r["ratio"] for r in results.values() if r and r["within"]]
    if ok:
        print(
            f"\n640x480 summary over {len(ok)} images with the count rule met: SURF/SIFT time ratio median "
            f"{np.median(ok):.3f}, max {max(ok):.3f}"
        )
    if not args.no_1080p:
        graf = cv2.imread(str(data / "oxford_affine" / "graf" / "img1.png"), cv2.IMREAD_GRAYSCALE)
        img1080 = cv2.resize(graf, (1920, 1080), interpolation=cv2.INTER_CUBIC)
        bench_image("Oxford graf img1 resized to 1920x1080", img1080, max(3, args.repeats // 3))
    reference_agreement(data)
    if os.name == "posix":
        print(f"\nload average at end: {os.getloadavg()} (other processes on the machine inflate both timings)")


if __name__ == "__main__":
    main()
