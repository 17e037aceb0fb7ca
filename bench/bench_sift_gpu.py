"""Benchmark: our SIFT kernels (GPU build and CPU twin) against OpenCV's SIFT, and 2k x 2k GPU matching.

Usage::

    .venv/bin/python bench/bench_sift_gpu.py [--repeats 10] [--threads N] [--data ../shared/data] [--json out.json]

CPU (always): OpenCV SIFT (the anchor) and ``SIFT(backend="numba")`` on a 640x480 and a 1920x1080 real image
(graf img1 and boat img1 resized), medians after a warm-up, keypoint counts and the ratio twin / OpenCV.
GPU (where CuPy sees a device): per frame size the CUDA-event time of the device-resident pipeline (frame
already on the device, results left there), the wall time of ``detect_and_compute`` (upload, pipeline,
download of the Features), kernel launches (ours; CuPy's compaction calls come on top) and host<->device
bytes per frame; then brute-force 2-NN + ratio test of 2000 x 2000 SIFT descriptors resident on the
device, including the read-back of the matches.
"""

from __future__ import annotations

import argparse
import json
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

from objrec.backend import gpu_available  # noqa: E402
from objrec.features import SIFT, sift_gpu  # noqa: E402
from objrec.knn import BruteForceIndex, ratio_match  # noqa: E402

SIZES = {"640x480": (640, 480, "oxford_affine/graf/img1.png"), "1920x1080": (1920, 1080, "oxford_affine/boat/img1.png")}


def median_ms(fn, repeats: int, warmup: int = 2) -> float:
    for _ in range(warmup):
        fn()
    ts = []
    for _ in range(repeats):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return 1000.0 * float(np.median(ts))


def find_data(arg: str | None) -> Path:
    cands = [Path(arg)] if arg else []
    if os.environ.get("OBJREC_SHARED_DATA"):
        cands.append(Path(os.environ["OBJREC_SHARED_DATA"]))
    cands += [p / "shared" / "data" for p in Path(__file__).resolve().parents]
    for c in cands:
        if (c / "oxford_affine").is_dir():
            return c
    sys.exit("shared data not found; pass --data")


def load(data: Path, w: int, h: int, rel: str) -> np.ndarray:
    img = cv2.imread(str(data / rel), cv2.IMREAD_GRAYSCALE)
    interp = cv2.INTER_AREA if w * h < img.size else cv2.INTER_CUBIC
    return cv2.resize(img, (w, h), interpolation=interp)


def bench_cpu(images: dict, repeats: int) -> dict:
    out = {}
    print("\n== CPU: OpenCV SIFT (anchor) vs numba twin of the GPU kernels")
    for name, img in images.items():
        ocv = cv2.SIFT_create()
        twin = SIFT(backend="numba")
        n_ocv = len(ocv.detect(img, None))
        n_twin = len(twin.detect_and_compute(img))  # also compiles the kernels (once per process)
        t_ocv = median_ms(lambda ocv=ocv, img=img: ocv.detectAndCompute(img, None), repeats)
        t_twin = median_ms(lambda twin=twin, img=img: twin.detect_and_compute(img), repeats)
        print(
            f"{name:>10}: OpenCV {t_ocv:8.1f} ms ({n_ocv} kp)   numba twin {t_twin:8.1f} ms ({n_twin} kp)   "
            f"twin/OpenCV {t_twin / t_ocv:5.2f}x"
        )
        out[name] = {"opencv_ms": t_ocv, "opencv_kp": n_ocv, "twin_ms": t_twin, "twin_kp": n_twin}
    return out


def bench_gpu(images: dict, repeats: int) -> dict:
    import cupy as cp

    out = {}
    dev = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
    print(f"\n== GPU: {dev['name'].decode()} (CuPy {cp.__version__}, numba-cuda kernels)")
    r = sift_gpu.runner("cuda")
    s = SIFT(backend="gpu")
    for name, img in images.items():
        d_img = cp.asarray(img)
        t0 = time.perf_counter()
        r.run(s, d_img)  # compile + buffers
        cp.cuda.Device().synchronize()
        first = (time.perf_counter() - t0) * 1e3
        for _ in range(3):
            r.run(s, d_img)
        start, stop = cp.cuda.Event(), cp.cuda.Event()
        ev, wall_dev = [], []
        for _ in range(repeats):
            t = time.perf_counter()
            start.record()
            r.run(s, d_img)
            stop.record()
            stop.synchronize()
            wall_dev.append((time.perf_counter() - t) * 1e3)
            ev.append(cp.cuda.get_elapsed_time(start, stop))
        stats = dict(r.last_stats_)
        t_full = median_ms(lambda img=img: s.detect_and_compute(img), repeats)
        full = dict(s.last_stats_)
        res = {
            "event_ms": float(np.median(ev)),
            "wall_resident_ms": float(np.median(wall_dev)),
            "wall_detect_and_compute_ms": t_full,
            "first_call_ms": first,
            "launches": stats["launches"],
            "keypoints": stats["keypoints"],
            "candidates": stats["candidates"],
            "h2d_bytes": full["h2d_bytes"],
            "d2h_bytes": full["d2h_bytes"],
        }
        print(
            f"{name:>10}: CUDA events {res['event_ms']:7.2f} ms   wall (resident) {res['wall_resident_ms']:7.2f} ms   "
            f"wall (host in/out) {t_full:7.2f} ms   launches {res['launches']}   kp {res['keypoints']}   "
            f"H2D {res['h2d_bytes']} B  D2H {res['d2h_bytes']} B   (first call {first:.0f} ms)"
        )
        out[name] = res
    # 2k x 2k matching, descriptors resident
    big = images["1920x1080"]
    s2k = SIFT(n_features=2000, backend="gpu")
    q = r.run(s2k, cp.asarray(big))["desc"][:2000]
    t = r.run(s2k, cp.asarray(cv2.rotate(big, cv2.ROTATE_180)))["desc"][:2000]
    index = BruteForceIndex(t)
    ratio_match(q, index)  # warm-up (cuBLAS, kernels)
    start, stop = cp.cuda.Event(), cp.cuda.Event()
    ev, wall = [], []
    for _ in range(max(repeats, 20)):
        tt = time.perf_counter()
        start.record()
        m = ratio_match(q, index, ratio=0.8)  # includes the read-back of the matches
        stop.record()
        stop.synchronize()
        wall.append((time.perf_counter() - tt) * 1e3)
        ev.append(cp.cuda.get_elapsed_time(start, stop))
    res = {"n_query": int(q.shape[0]), "n_train": int(t.shape[0]), "matches": len(m)}
    res.update(event_ms=float(np.median(ev)), wall_ms=float(np.median(wall)))
    print(
        f"  matching {res['n_query']}x{res['n_train']}: CUDA events {res['event_ms']:.3f} ms   "
        f"wall {res['wall_ms']:.3f} ms (incl. read-back of {res['matches']} matches)"
    )
    out["match_2k"] = res
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--threads", type=int, default=0, help="OpenCV and Numba threads (0: library default)")
    ap.add_argument("--data", default=None)
    ap.add_argument("--json", default=None)
    ap.add_argument("--no-gpu", action="store_true")
    ap.add_argument(
        "--threading-layer",
        default=None,
        help="Numba threading layer (omp, workqueue, tbb); on a shared 2-core machine the twin varies with it",
    )
    args = ap.parse_args()
    if args.threading_layer:
        numba.config.THREADING_LAYER = args.threading_layer
    if args.threads > 0:
        cv2.setNumThreads(args.threads)
        numba.set_num_threads(args.threads)
    data = find_data(args.data)
    print("command:", shlex.join([sys.executable] + sys.argv))
    print(
        f"machine: {platform.processor() or platform.machine()}, {os.cpu_count()} CPUs; OpenCV {cv2.__version__} "
        f"threads {cv2.getNumThreads()}; Numba {numba.__version__} threads {numba.get_num_threads()}"
    )
    images = {name: load(data, w, h, rel) for name, (w, h, rel) in SIZES.items()}
    for name, img in images.items():
        print(f"image {name}: {img.shape[1]}x{img.shape[0]} from {SIZES[name][2]}")
    result = {"cpu": bench_cpu(images, args.repeats)}
    print(f"Numba threading layer: {numba.threading_layer()}")
    if args.no_gpu:
        print("\nGPU part skipped (--no-gpu)")
    elif gpu_available():
        result["gpu"] = bench_gpu(images, args.repeats)
    else:
        from objrec.backend import _gpu_probe

        print(f"\nGPU part skipped: {_gpu_probe()[1]}")
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
