"""Benchmark: our SURF's CUDA build (Numba CUDA kernels on CuPy arrays) against its CPU build, same run.

Usage::

    PYTHONPATH=. python bench/bench_surf_gpu.py [--repeats 50] [--threshold T] [--data DIR]

Needs a CUDA device visible to CuPy; without one it prints why and exits with status 1. For 640x480 and
1920x1080 (Oxford graf img1 resized; a synthetic texture when the shared data is absent) it reports, after a
warm-up (JIT compilation, per-resolution buffers):

- device-resident: the frame already on the device, keypoints and descriptors left there (what the recognizer
  does until the verdict): median CUDA-event time and median wall time per frame;
- from the host: upload, all stages, download of the ``Features`` (what ``detect_and_compute`` costs a caller
  holding NumPy frames);
- Numba kernel launches per frame (CuPy's own kernels for the integral image, compaction, sort and gathers are
  not counted), host<->device bytes per frame (image up, results and the counts that size the next stage down),
  keypoints, and the CPU build's time on the same frame with its thread count;
- agreement with the CPU build: keypoint counts and the largest position difference.

``NUMBA_CUDA_ARRAY_INTERFACE_SYNC`` is set to 0 (unless already set): Numba would otherwise synchronise CuPy's
stream at every launch for every array argument; both libraries use the default stream here, so the order of
work is already guaranteed.
"""

from __future__ import annotations

import argparse
import os
import shlex
import sys
import time
from pathlib import Path

os.environ.setdefault("NUMBA_CUDA_ARRAY_INTERFACE_SYNC", "0")

import numpy as np  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def gpu_or_exit():
    """CuPy with at least one device, or exit with a one-line reason."""
    if os.environ.get("NUMBA_ENABLE_CUDASIM") == "1":
        sys.exit("bench_surf_gpu: no GPU: NUMBA_ENABLE_CUDASIM=1 is set (the simulator is not a device)")
    try:
        import cupy as cp
    except Exception as exc:  # ImportError, or CUDA libraries that fail to load
        sys.exit(f"bench_surf_gpu: no GPU: CuPy is not importable ({type(exc).__name__}: {exc})")
    try:
        n = cp.cuda.runtime.getDeviceCount()
    except Exception as exc:
        sys.exit(f"bench_surf_gpu: no GPU: CuPy found no usable CUDA driver ({type(exc).__name__}: {exc})")
    if n < 1:
        sys.exit("bench_surf_gpu: no GPU: CuPy reports no CUDA device")
    return cp


def load_frames(data_arg: str | None) -> dict[str, np.ndarray]:
    import cv2

    cands = [Path(data_arg)] if data_arg else []
    cands += [p / "shared" / "data" for p in Path(__file__).resolve().parents]
    for c in cands:
        f = c / "oxford_affine" / "graf" / "img1.png"
        if f.exists():
            img = cv2.imread(str(f), cv2.IMREAD_GRAYSCALE)
            return {
                "640x480 (graf img1)": cv2.resize(img, (640, 480), interpolation=cv2.INTER_AREA),
                "1920x1080 (graf img1)": cv2.resize(img, (1920, 1080), interpolation=cv2.INTER_CUBIC),
            }
    rng = np.random.default_rng(0)
    out = {}
    for w, h in ((640, 480), (1920, 1080)):
        noise = rng.normal(128, 40, (h // 4, w // 4)).astype(np.float32)
        out[f"{w}x{h} (synthetic)"] = np.clip(cv2.resize(noise, (w, h), interpolation=cv2.INTER_CUBIC), 0, 255)
        out[f"{w}x{h} (synthetic)"] = out[f"{w}x{h} (synthetic)"].astype(np.uint8)
    return out


def main() -> None:  # noqa: PLR0915 - the benchmark's sections in order, one script
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--repeats", type=int, default=50)
    ap.add_argument("--threshold", type=float, default=None, help="Hessian threshold (default: tuned to SIFT's count)")
    ap.add_argument("--data", default=None)
    args = ap.parse_args()
    print("command:", shlex.join([sys.executable, *sys.argv]))
    cp = gpu_or_exit()

    import cv2
    import numba

    from objrec.features.surf import SURF
    from objrec.kernels import get_target

    dev = cp.cuda.Device()
    props = cp.cuda.runtime.getDeviceProperties(dev.id)
    name = props["name"].decode() if isinstance(props["name"], bytes) else props["name"]
    print(
        f"device {dev.id}: {name}, CuPy {cp.__version__}, numba {numba.__version__}, "
        f"NUMBA_CUDA_ARRAY_INTERFACE_SYNC={os.environ['NUMBA_CUDA_ARRAY_INTERFACE_SYNC']}; "
        f"CPU build: {numba.get_num_threads()} numba threads on {os.cpu_count()} cores"
    )
    target = get_target("cuda")
    for label, img in load_frames(args.data).items():
        img = np.ascontiguousarray(img)
        if args.threshold is None:
            sys.path.insert(0, str(Path(__file__).resolve().parent))
            from bench_surf import tune_threshold

            thr, _ = tune_threshold(img, len(cv2.SIFT_create().detect(img, None)))
        else:
            thr = args.threshold
        gpu = SURF(thr, backend="gpu")
        cpu = SURF(thr, backend="cpu")
        d_img = cp.asarray(img)
        # warm-up: JIT compilation of the four kernels, per-resolution buffers, CuPy's memory pool
        for _ in range(3):
            gpu._pipeline(d_img, None, cp, "cuda")
        cp.cuda.Device().synchronize()

        start, end = cp.cuda.Event(), cp.cuda.Event()
        ev_ms, wall_ms, launches = [], [], []
        out = None
        for _ in range(args.repeats):
            before = target.launches
            t0 = time.perf_counter()
            start.record()
            out = gpu._pipeline(d_img, None, cp, "cuda")
            end.record()
            end.synchronize()
            wall_ms.append(1000.0 * (time.perf_counter() - t0))
            ev_ms.append(cp.cuda.get_elapsed_time(start, end))
            launches.append(target.launches - before)
        n = int(out["n"])
        # Bytes that cross the bus per frame, by construction of the pipeline: device-resident, only the sizes
        # that shape the next stage come down (candidates, kept, described: 8 bytes each); from the host, the
        # frame goes up and the Features come down.
        down_counts = 3 * 8
        feat_bytes = sum(int(v.nbytes) for k, v in out.items() if k != "n") if n else 0
        host_ms = []
        for _ in range(max(5, args.repeats // 5)):
            t0 = time.perf_counter()
            f_gpu = gpu.detect_and_compute(img)
            host_ms.append(1000.0 * (time.perf_counter() - t0))
        cpu_ms = []
        f_cpu = cpu.detect_and_compute(img)
        for _ in range(max(5, args.repeats // 5)):
            t0 = time.perf_counter()
            cpu.detect_and_compute(img)
            cpu_ms.append(1000.0 * (time.perf_counter() - t0))
        agree = "counts differ"
        if len(f_gpu) == len(f_cpu) and len(f_cpu):
            agree = f"max |xy| difference {float(np.abs(f_gpu.to_host().xy - f_cpu.xy).max()):.2e} px"
        print(f"\n== {label}: threshold {thr:.1f}, {n} keypoints (CPU build: {len(f_cpu)}; {agree})")
        print(
            f"device-resident  CUDA events {np.median(ev_ms):8.3f} ms   wall {np.median(wall_ms):8.3f} ms   "
            f"launches {int(np.median(launches))} (Numba)   host<->device {down_counts} B down"
        )
        print(
            f"from host        wall {np.median(host_ms):8.3f} ms   host->device {img.nbytes} B, "
            f"device->host {feat_bytes + down_counts} B"
        )
        print(
            f"CPU build        wall {np.median(cpu_ms):8.3f} ms   ratio CPU/GPU-resident "
            f"{np.median(cpu_ms) / np.median(ev_ms):6.1f}x"
        )


if __name__ == "__main__":
    main()
