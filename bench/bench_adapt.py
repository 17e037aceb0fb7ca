"""The adapting prefilter on a stream whose background it never saw: adaptation vs none vs no prefilter.

The stream is ``vtest.avi`` (OpenCV's samples, ``../shared/data/opencv_samples``) at 640x480, played forwards
and backwards to ``--frames`` frames. The prefilter is trained on the built-in backgrounds only (what
``objrec train-prefilter`` does without ``--backgrounds``), so no vtest frame was seen in training. Frames
0-519 are empty; from frame 520 the enrolled objects (three covers: the demo objects, or ``--objects smvs``
for three SMVS DVD covers) take turns: each slides in from the left border, stays fully visible for a while,
slides out, then the scene is empty for a while. Ground truth is exact (the compositing homographies).

Three runs of the same frames, each a ``Recognizer`` with a 33 ms budget processing every frame in turn,
as ``objrec run`` does on a video: ``adapt`` (the default of ``objrec run``), ``no-adapt`` and
``no-prefilter``. Over frames 150 to the end (``--from``):

* empty frames' area rejected: the mean of ``1 - area of the prefilter's kept boxes / frame area``;
* object area kept: fully visible objects' pixels inside the prefilter's kept boxes / their pixels;
* recall (fully visible objects detected by name, centre inside the true outline), false detections;
* latency p50/p99/mean, deadline misses; peak resident memory;
* the first object's appearance: frames from fully visible to first detected.

    python bench/bench_adapt.py [--frames 1000] [--budget-ms 33] [--json out.json]
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

from objrec import ModelDB, Recognizer
from objrec.boxes import regions_to_mask
from objrec.memory import report as memory_report
from objrec.prefilter import RegionPrefilter
from objrec.scenes import compose_scene
from objrec.types import Regions

FIRST_OBJECT = 520
SIZE = (640, 480)


def find_data(arg: str | None) -> Path:
    cands = [Path(arg)] if arg else []
    cands += [Path(os.environ["OBJREC_SHARED_DATA"])] if "OBJREC_SHARED_DATA" in os.environ else []
    cands += [p / "shared" / "data" for p in Path(__file__).resolve().parents]
    for c in cands:
        if (c / "opencv_samples" / "vtest.avi").exists():
            return c
    sys.exit("shared data (opencv_samples/vtest.avi) not found; pass --data")


def vtest(data: Path, n: int) -> list[np.ndarray]:
    cap = cv2.VideoCapture(str(data / "opencv_samples" / "vtest.avi"))
    frames = []
    while True:
        ok, f = cap.read()
        if not ok:
            break
        frames.append(cv2.resize(f, SIZE, interpolation=cv2.INTER_AREA))
    cap.release()
    loop = frames + frames[-2:0:-1]
    return [loop[i % len(loop)] for i in range(n)]


def objects(kind: str, data: Path) -> dict[str, np.ndarray]:
    if kind == "smvs":
        refs = sorted((data / "smvs_dvd" / "references").glob("*"))[:3]
        return {p.stem: cv2.imread(str(p)) for p in refs}
    from objrec.data import sample_objects

    return sample_objects()


def schedule(n: int, names: list[str], rng: np.random.Generator) -> list[tuple[str, np.ndarray] | None]:
    """Per frame: (name, model->frame homography) of the object shown, or None. Each appearance slides in
    from the left over 20 frames, stays 40, slides out over 20, then 60 empty frames."""
    out: list[tuple[str, np.ndarray] | None] = [None] * n
    t, k = FIRST_OBJECT, 0
    while t < n:
        name = names[k % len(names)]
        k += 1
        scale = rng.uniform(0.45, 0.6)
        y = rng.uniform(40, 140)
        x_stay = rng.uniform(120, 260)
        for i in range(120):
            if t + i >= n:
                break
            x = x_stay - 300 + 300 * min(i / 20, 1.0) if i < 60 else x_stay - 300 * min((i - 60) / 20, 1.0)
            if i >= 80:
                continue
            out[t + i] = (name, np.array([[scale, 0, x], [0, scale, y], [0, 0, 1]], np.float64))
        t += 140
    return out


def compose(frame: np.ndarray, shown, objs: dict[str, np.ndarray]):
    if shown is None:
        return frame, None
    name, H = shown
    sc = compose_scene(frame, {name: objs[name]}, 0, SIZE, homographies={name: H})
    truth = sc.objects[0]
    return sc.image, (name, truth.corners, sc.object_mask > 0, truth.visible_fraction >= 0.999)


def run(label: str, db: ModelDB, pf, frames, truths, budget: float, adapt: bool, start: int) -> dict:
    rec = Recognizer(db, budget_ms=budget, prefilter=pf, adapt_prefilter=adapt, track=True)
    rec.warmup(SIZE[::-1])
    lat, rejected, kept, total, found, visible, false, first = [], [], 0, 0, 0, 0, 0, None
    for i, (img, truth) in enumerate(zip(frames, truths, strict=True)):
        t0 = rec.clock.now()
        r = rec.process(img, t0)
        if i < start:
            continue
        lat.append(r.latency_ms)
        names = [d.name for d in r.detections]
        if truth is None:
            false += len(names)
            if r.prefilter_rejected is not None:
                rejected.append(r.prefilter_rejected)
            continue
        name, corners, mask, full = truth
        false += sum(n != name for n in names)
        hit = any(
            d.name == name and cv2.pointPolygonTest(corners.astype(np.float32), tuple(d.corners.mean(0)), False) >= 0
            for d in r.detections
        )
        if full:
            visible += 1
            found += hit
            if first is None and i >= FIRST_OBJECT:
                first = {"fully_visible": i, "found": None}
            if first is not None and first["found"] is None and hit:
                first["found"] = i
            if r.prefilter_boxes is not None:
                m = regions_to_mask(Regions.from_boxes([tuple(b) for b in r.prefilter_boxes]), mask.shape)
                kept, total = kept + int((m & mask).sum()), total + int(mask.sum())
    if rec.adapter is not None:
        rec.adapter.wait()
    lat_a = np.array(lat)
    res = {
        "label": label,
        "frames_measured": len(lat),
        "empty_area_rejected": float(np.mean(rejected)) if rejected else None,
        "object_area_kept": kept / total if total else None,
        "recall": found / max(visible, 1),
        "visible_frames": visible,
        "false_detections": false,
        "latency_ms": {
            "p50": float(np.percentile(lat_a, 50)),
            "p99": float(np.percentile(lat_a, 99)),
            "mean": float(lat_a.mean()),
        },
        "deadline_misses": int((lat_a > budget).sum()),
        "first_appearance": first,
        "memory": memory_report(),
        "adaptation": rec.adapter.status() if rec.adapter is not None else None,
    }
    return res


def _line(r: dict) -> str:
    rej = "-" if r["empty_area_rejected"] is None else f"{r['empty_area_rejected']:.1%}"
    kept = "-" if r["object_area_kept"] is None else f"{r['object_area_kept']:.2%}"
    lat = r["latency_ms"]
    fa = r["first_appearance"] or {}
    delay = "-" if fa.get("found") is None else str(fa["found"] - fa["fully_visible"])
    return (
        f"{r['label']:13s} rejected {rej:>6s}  kept {kept:>7s}  recall {r['recall']:.1%} ({r['visible_frames']})  "
        f"false {r['false_detections']}  p50 {lat['p50']:.1f} p99 {lat['p99']:.1f} mean {lat['mean']:.2f} ms  "
        f"misses {r['deadline_misses']}  first found after {delay} frame(s)"
    )


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data")
    ap.add_argument("--frames", type=int, default=1000)
    ap.add_argument("--from", dest="start", type=int, default=150, help="first frame measured (default 150)")
    ap.add_argument("--budget-ms", type=float, default=33.0)
    ap.add_argument("--objects", choices=["demo", "smvs"], default="demo")
    ap.add_argument("--runs", default="adapt,no-adapt,no-prefilter")
    ap.add_argument("--train-scenes", type=int, default=400)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    print("command:", shlex.join([sys.executable, *sys.argv]))
    data = find_data(args.data)
    objs = objects(args.objects, data)
    db = ModelDB.create(Path(tempfile.mkdtemp(prefix="bench-adapt-")) / "db")
    for n, img in objs.items():
        db.enroll(n, img)
    t = time.perf_counter()
    pf = RegionPrefilter(random_state=0).train(db, None, n_scenes=args.train_scenes, progress=True)
    print(f"prefilter trained on the built-in backgrounds in {time.perf_counter() - t:.0f} s (no vtest frame)")
    base = vtest(data, args.frames)
    plan = schedule(args.frames, list(objs), np.random.default_rng(0))
    composed = [compose(f, s, objs) for f, s in zip(base, plan, strict=True)]
    frames, truths = [c[0] for c in composed], [c[1] for c in composed]
    results = []
    for label in args.runs.split(","):
        prefilter = None if label == "no-prefilter" else pf
        results.append(run(label, db, prefilter, frames, truths, args.budget_ms, label == "adapt", args.start))
        print(_line(results[-1]), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"command": sys.argv, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
