"""Time the find_obj-style baseline (:class:`objrec.evaluation.baseline.FindObjBaseline`) on a generated stream.

The baseline follows OpenCV's ``samples/python/find_obj.py``: OpenCV SIFT with default parameters, a
brute-force L2 matcher with ``knnMatch(k=2)`` from each object's descriptors to the frame's, Lowe's ratio test
at 0.75, ``cv2.findHomography`` with RANSAC at 5 px once there are at least 4 ratio matches, and an object
reported whenever a homography with at least 4 inliers comes back (the class's defaults).

Run as a script, it times the baseline on a generated 640x480 stream of scenes (objrec.scenes over
objrec.data images) and prints p50/p90 latency, detections and false detections::

    python bench/baseline_findobj.py --frames 40 --seed 0

:func:`generate_stream`, :func:`corner_error` and :func:`thread_report` are shared with the other benchmarks.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shlex
import sys
import time

import cv2
import numpy as np

from objrec.evaluation.baseline import FindObjBaseline

__all__ = ["generate_stream", "stream_objects", "corner_error", "thread_report"]


def corner_error(H_est: np.ndarray, H_true: np.ndarray, size: tuple[int, int]) -> float:
    """Mean distance in pixels between the model corners mapped by the estimated and the true homography."""
    w, h = size
    c = np.array([[0, 0, 1], [w, 0, 1], [w, h, 1], [0, h, 1]], np.float64)

    def proj(H):
        p = c @ np.asarray(H, np.float64).T
        with np.errstate(divide="ignore", invalid="ignore"):
            return p[:, :2] / p[:, 2:3]

    err = np.linalg.norm(proj(H_est) - proj(H_true), axis=1).mean()
    return float(err) if np.isfinite(err) else float("inf")


def generate_stream(n_frames: int, seed: int = 0, frame_size: tuple[int, int] = (640, 480), p_present: float = 0.5):
    """Scenes over objrec's embedded images: each object present in a frame with probability ``p_present``.

    Yields ``objrec.scenes.Scene`` objects (ground truth in ``scene.objects``); :func:`stream_objects` gives
    the images to enroll. Backgrounds are larger than the frame, photometric changes and occlusion vary.
    """
    from objrec.data import sample_background, sample_objects
    from objrec.scenes import Distortion, compose_scene

    objects = sample_objects()
    rng = np.random.default_rng(seed)
    for _ in range(n_frames):
        present = {k: v for k, v in objects.items() if rng.random() < p_present}
        bg = sample_background((960, 540), seed=int(rng.integers(0, 8)))
        dist = Distortion(
            gain=float(rng.uniform(0.8, 1.2)),
            blur_sigma=float(rng.choice([0.0, 0.0, 0.8])),
            noise_sigma=float(rng.uniform(0.0, 4.0)),
        )
        yield compose_scene(
            bg,
            present,
            rng=int(rng.integers(0, 2**31)),
            frame_size=frame_size,
            area_fraction=(0.04, 0.15),
            max_rotation=30.0,
            max_tilt=0.12,
            occlusion=float(rng.choice([0.0, 0.0, 0.2])),
            distortion=dist,
        )


def stream_objects() -> dict[str, np.ndarray]:
    """The images enrolled for :func:`generate_stream` (objrec.data's sample objects)."""
    from objrec.data import sample_objects

    return sample_objects()


def thread_report() -> dict[str, object]:
    """Thread counts of OpenCV, Numba and the BLAS libraries, and the CPU count."""
    info: dict[str, object] = {"cv2": cv2.getNumThreads(), "cpu_count": os.cpu_count()}
    try:
        import numba

        info["numba"] = numba.get_num_threads()
    except ImportError:
        pass
    try:
        from threadpoolctl import threadpool_info

        info["blas"] = {p["internal_api"]: p["num_threads"] for p in threadpool_info()}
    except ImportError:
        pass
    return info


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--frames", type=int, default=40, help="timed frames (default 40)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed frames first (default 3)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--budget-ms", type=float, default=33.0, help="budget for the deadline count (default 33)")
    ap.add_argument("--max-corner-error", type=float, default=10.0, help="px; a correct detection (default 10)")
    ap.add_argument("--json", help="also write the summary to this file")
    args = ap.parse_args(argv)

    base = FindObjBaseline(stream_objects())
    scenes = list(generate_stream(args.warmup + args.frames, args.seed))
    for s in scenes[: args.warmup]:
        base.process(s.image)

    lat, correct, wrong_place, false_det, missed, absent_frames, present_total = [], 0, 0, 0, 0, 0, 0
    for s in scenes[args.warmup :]:
        t0 = time.perf_counter()
        dets = base.process(s.image).detections
        lat.append((time.perf_counter() - t0) * 1e3)
        truth = {o.name: o for o in s.objects}
        found = set()
        for d in dets:
            name = d.name
            found.add(name)
            if name not in truth:
                false_det += 1
            elif corner_error(d.homography, truth[name].homography, base.model_size(name)) <= args.max_corner_error:
                correct += 1
            else:
                wrong_place += 1
        present_total += len(truth)
        missed += sum(1 for n in truth if n not in found)
        absent_frames += sum(1 for n in base.models if n not in truth)

    lat_a = np.array(lat)
    summary = {
        "command": " ".join(shlex.quote(a) for a in [sys.executable, *sys.argv]),
        "frames": args.frames,
        "frame_size": [640, 480],
        "objects": sorted(base.models),
        "model_features": {k: len(v[0]) for k, v in base.models.items()},
        "latency_ms": {
            "p50": float(np.percentile(lat_a, 50)),
            "p90": float(np.percentile(lat_a, 90)),
            "max": float(lat_a.max()),
        },
        "deadline_misses": int((lat_a > args.budget_ms).sum()),
        "budget_ms": args.budget_ms,
        "present": present_total,
        "correct_detections": correct,
        "misplaced_detections": wrong_place,
        "missed": missed,
        "object_absent_cases": absent_frames,
        "false_detections": false_det,
        "threads": thread_report(),
        "platform": platform.platform(),
        "opencv": cv2.__version__,
    }
    print(f"command: {summary['command']}")
    print(f"opencv {cv2.__version__}, threads {summary['threads']}, frames {args.frames} at 640x480")
    print(f"objects {summary['model_features']} (SIFT features per model)")
    lm = summary["latency_ms"]
    print(f"latency per frame: p50 {lm['p50']:.1f} ms, p90 {lm['p90']:.1f} ms, max {lm['max']:.1f} ms")
    print(f"over the {args.budget_ms:g} ms budget: {summary['deadline_misses']}/{args.frames} frames")
    print(
        f"detections: {correct} correct (corner error <= {args.max_corner_error:g} px) of {present_total} present, "
        f"{wrong_place} misplaced, {missed} missed"
    )
    print(f"false detections: {false_det} in {absent_frames} (frame, absent object) cases")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(summary, fh, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
