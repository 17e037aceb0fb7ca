"""Benchmark: a track's realignment with its model (``objrec.realtime.align.realign``), time and accuracy.

Usage::

    PYTHONPATH=. python bench/bench_realign.py [--cases 120] [--size 1280x720] [--data DIR] [--seed 1]

Each case renders one SMVS reference cover (``../shared/data/smvs_dvd/reference``; objrec's embedded covers
without it) into a frame of ``--size`` over an embedded background, through a known homography: a size drawn
from the kind's range, an in-plane turn up to 60 degrees, a tilt; antialiased (``objrec.scenes.warp_object``),
blurred slightly, another gamma and contrast, sensor noise. The track starts off the truth by a drift (a shift
and 1% of scale) and is realigned once. Kinds: ``in view`` (70-600 px, drift up to 4% of the side), ``small``
(45-140 px), ``steep`` (stronger tilt, drift up to 9%), ``edge`` (the cover 20-70% out of the frame).

Reported per kind: time per realignment (median over the cases, each call timed alone), and as a ratio to the
anchor measured in the same run (OpenCV's ``goodFeaturesToTrack`` of 500 corners over the whole frame, median of
21); the largest corner error against the truth after realignment (median, p90; corners outside the frame
included), the share beyond 2 px, and the realignments that gave up (``None``).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import cv2
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from objrec.data import sample_background, sample_objects  # noqa: E402
from objrec.geometry import map_points, model_corners  # noqa: E402
from objrec.realtime.align import ModelTemplates, realign  # noqa: E402
from objrec.scenes import warp_object  # noqa: E402

HERE = Path(__file__).resolve().parent
#: (side range in pixels, tilt range, drift as a share of the side, out of the frame share range or None)
KINDS = {
    "in view": ((70.0, 600.0), (0.0, 0.35), 0.04, None),
    "small": ((45.0, 140.0), (0.0, 0.35), 0.04, None),
    "steep": ((70.0, 600.0), (0.2, 0.7), 0.09, None),
    "edge": ((70.0, 600.0), (0.0, 0.35), 0.04, (0.2, 0.7)),
}


def covers(arg: str | None) -> list[np.ndarray]:
    """The SMVS reference covers in gray (objrec's embedded covers when the shared data is absent)."""
    env = os.environ.get("OBJREC_SHARED_DATA")
    cands = [Path(arg)] if arg else ([Path(env)] if env else []) + [p / "shared" / "data" for p in HERE.parents]
    for c in cands:
        refs = sorted((c / "smvs_dvd" / "reference").glob("*.jpg"))
        if refs:
            return [cv2.imread(str(p), cv2.IMREAD_GRAYSCALE) for p in refs[:20]]
    print("shared data not found: objrec's embedded covers instead")
    return [cv2.cvtColor(img, cv2.COLOR_BGR2GRAY) for img in sample_objects().values()]


def render(model: np.ndarray, kind: str, size: tuple[int, int], rng: np.random.Generator, seed: int):
    """A frame with ``model`` placed as ``kind`` says, the true homography and the drifted start."""
    (lo, hi), (t0, t1), drift, out = KINDS[kind]
    W, H = size
    h, w = model.shape
    side, angle, tilt = rng.uniform(lo, hi), np.radians(rng.uniform(-60, 60)), rng.uniform(t0, t1)
    q = (model_corners(w, h) - [w / 2, h / 2]) * side / np.sqrt(w * h)
    q[:, 0] *= 1 + 0.5 * tilt * np.sign(q[:, 1])
    q = q @ np.array([[np.cos(angle), np.sin(angle)], [-np.sin(angle), np.cos(angle)]])
    if out is None:
        c = np.array([rng.uniform(0.2 * W, 0.8 * W), rng.uniform(0.25 * H, 0.75 * H)])
    else:  # the share ``f`` of the cover's width beyond the left or right edge
        f, width = rng.uniform(*out), np.ptp(q[:, 0])
        c = np.array([width * (0.5 - f), rng.uniform(0.25 * H, 0.75 * H)])
        if rng.random() < 0.5:
            c[0] = W - c[0]
    truth = cv2.getPerspectiveTransform(model_corners(w, h).astype(np.float32), (q + c).astype(np.float32))
    truth = truth.astype(np.float64)
    canvas = sample_background((W, H), seed=seed)
    warp_object(canvas, cv2.cvtColor(model, cv2.COLOR_GRAY2BGR), truth, antialias=True)
    img = cv2.GaussianBlur(cv2.cvtColor(canvas, cv2.COLOR_BGR2GRAY), (0, 0), 0.8).astype(np.float64)
    img = 30 + 0.8 * 255 * (img / 255.0) ** 0.8 + rng.normal(0, 3, img.shape)
    d = rng.uniform(-1, 1, 2) * side * drift
    centre = np.array([[1.0, 0.0, -0.01 * c[0]], [0.0, 1.0, -0.01 * c[1]], [0.0, 0.0, 1.0]])
    start = centre @ np.array([[1.01, 0.0, d[0]], [0.0, 1.01, d[1]], [0.0, 0.0, 1.0]]) @ truth
    return np.clip(img, 0, 255).astype(np.uint8), truth, start


def anchor_ms(frame: np.ndarray, repeats: int = 21) -> float:
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        cv2.goodFeaturesToTrack(frame, 500, 0.01, 5.0, blockSize=5)
        times.append(time.perf_counter() - t)
    return 1e3 * float(np.median(times))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=120, help="cases per kind")
    ap.add_argument("--size", default="1280x720")
    ap.add_argument("--data", default=None)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    size = tuple(int(v) for v in args.size.lower().split("x"))
    models = covers(args.data)
    print(
        f"realignment of {len(models)} covers at {size[0]}x{size[1]}, {args.cases} cases per kind; cv2 threads "
        f"{cv2.getNumThreads()}"
    )
    rows = []
    for kind in KINDS:
        rng = np.random.default_rng(args.seed)
        ms, errs, failed, frame = [], [], 0, None
        for i in range(args.cases):
            model = models[i % len(models)]
            frame, truth, start = render(model, kind, size, rng, i)
            template = ModelTemplates(lambda n, m=model: m).get("cover")
            realign(frame, template, start, model.shape[::-1])  # the template's corners, found once per object
            t = time.perf_counter()
            out = realign(frame, template, start, model.shape[::-1])[0]
            ms.append(1e3 * (time.perf_counter() - t))
            if out is None:
                failed += 1
                continue
            corners = model_corners(model.shape[1], model.shape[0])
            errs.append(float(np.linalg.norm(map_points(out, corners) - map_points(truth, corners), axis=1).max()))
        a = anchor_ms(frame)
        e = np.array(errs) if errs else np.array([np.nan])
        rows.append((kind, np.median(ms), np.median(ms) / a, a, np.median(e), np.percentile(e, 90), np.mean(e > 2),
                     failed))  # fmt: skip
    print(f"{'kind':8s} {'ms/call':>8s} {'x anchor':>9s} {'anchor ms':>9s} {'err p50':>8s} {'err p90':>8s} "
          f"{'> 2 px':>7s} {'gave up':>8s}")  # fmt: skip
    for kind, m, r, a, e50, e90, over, failed in rows:
        print(f"{kind:8s} {m:8.2f} {r:9.2f} {a:9.2f} {e50:8.2f} {e90:8.2f} {over:7.1%} {failed:8d}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
