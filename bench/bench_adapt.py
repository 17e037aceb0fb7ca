"""The adapting prefilter on a stream whose background it never saw: adaptation vs none vs no prefilter.

The stream is ``vtest.avi`` (OpenCV's samples, ``../shared/data/opencv_samples``) at 640x480, played forwards
and backwards to ``--frames`` frames. The prefilter is trained on the built-in backgrounds only (what
``objrec train-prefilter`` does without ``--backgrounds``), so no vtest frame was seen in training. Frames
0-519 are empty; from frame 520 the three enrolled objects (the demo objects: two crops of photos, a pagoda
among trees and a dahlia among leaves, and a generated cover; or ``--objects smvs``: three SMVS DVD covers)
take turns: each slides in from the left border, stays fully visible for a while,
slides out, then the scene is empty for a while. Ground truth is exact (the compositing homographies).

Three runs of the same frames, each a ``Recognizer`` with a 33 ms budget processing every frame in turn,
as ``objrec run`` does on a camera: a frame is handed over every ``1/--fps`` s (30 per second by default;
``--fps 0`` hands them over back to back, as from a video file read as fast as it is processed):
``adapt`` (``objrec run``, its default), ``no-adapt`` (``--no-adapt``) and ``no-prefilter``. Over each
window of frames (``--windows``):

* empty frames' area rejected: the mean of ``1 - area of the prefilter's kept boxes / frame area`` (frames
  150-299, all empty, show how fast the adapting prefilter learns the scene: its refits run on idle CPU);
* object area kept: fully visible objects' pixels inside the prefilter's kept boxes / their pixels;
* recall (fully visible objects detected by name, centre inside the true outline), false detections;
* latency p50/p99/mean, deadline misses; peak resident memory;
* the first object's appearance: frames from fully visible to first detected;
* in the JSON output (``--json``), each late frame with its latency and time per stage.

    python bench/bench_adapt.py [--frames 1000] [--budget-ms 33] [--json out.json]
"""

from __future__ import annotations

import argparse
import atexit
import json
import os
import shlex
import shutil
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
        refs = sorted((data / "smvs_dvd" / "reference").glob("*.jpg"))[:3]
        if len(refs) < 3:
            sys.exit(f"{data / 'smvs_dvd' / 'reference'}: expected the SMVS DVD reference images")
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


class Stream:
    """The frames and their ground truth, composed when asked for (10,000 frames would not fit in memory)."""

    def __init__(self, base: list[np.ndarray], plan: list, objs: dict[str, np.ndarray]) -> None:
        self.base, self.plan, self.objs = base, plan, objs

    def __len__(self) -> int:
        return len(self.plan)

    def __getitem__(self, i: int):
        return compose(self.base[i % len(self.base)], self.plan[i], self.objs)


class Window:
    """Figures over a range of frames."""

    def __init__(self, lo: int, hi: int) -> None:
        self.lo, self.hi = lo, hi
        self.lat: list[float] = []
        self.rejected: list[float] = []
        self.kept = self.total = self.found = self.visible = self.false = 0

    def add(self, r, truth) -> None:
        self.lat.append(r.latency_ms)
        names = [d.name for d in r.detections]
        if truth is None:
            self.false += len(names)
            if r.prefilter_rejected is not None:
                self.rejected.append(r.prefilter_rejected)
            return
        name, corners, mask, full = truth
        self.false += sum(n != name for n in names)
        if not full:
            return
        self.visible += 1
        self.found += _hit(r, name, corners)
        if r.prefilter_boxes is not None:
            m = regions_to_mask(Regions.from_boxes([tuple(b) for b in r.prefilter_boxes]), mask.shape)
            self.kept, self.total = self.kept + int((m & mask).sum()), self.total + int(mask.sum())

    def figures(self, budget: float) -> dict:
        lat = np.array(self.lat)
        return {
            "frames": [self.lo, self.hi],
            "empty_area_rejected": float(np.mean(self.rejected)) if self.rejected else None,
            "object_area_kept": self.kept / self.total if self.total else None,
            "recall": self.found / max(self.visible, 1),
            "visible_frames": self.visible,
            "false_detections": self.false,
            "latency_ms": {
                "p50": float(np.percentile(lat, 50)),
                "p99": float(np.percentile(lat, 99)),
                "mean": float(lat.mean()),
            },
            "deadline_misses": int((lat > budget).sum()),
        }


def _hit(r, name: str, corners: np.ndarray) -> bool:
    poly = corners.astype(np.float32)
    return any(
        d.name == name and cv2.pointPolygonTest(poly, tuple(float(v) for v in d.corners.mean(0)), False) >= 0
        for d in r.detections
    )


def run(label: str, db: ModelDB, pf, stream: Stream, budget: float, adapt: bool, windows, params=None, fps=30.0):
    rec = Recognizer(db, budget_ms=budget, prefilter=pf, adapt_prefilter=adapt, adapt_params=params, track=True)
    rec.warmup(SIZE[::-1])
    wins = [Window(lo, hi) for lo, hi in windows]
    first, rss, late = None, {}, []
    period = 1.0 / fps if fps > 0 else 0.0
    due = time.perf_counter()
    for i in range(len(stream)):
        img, truth = stream[i]
        due += period
        wait = due - time.perf_counter()  # a camera hands over its next frame only when it has taken it
        if wait > 0:
            time.sleep(wait)
        else:
            due -= wait  # late: the camera's next frame is one period after this one
        r = rec.process(img, rec.clock.now())
        if r.latency_ms > budget:
            late.append({"frame": i, "latency_ms": round(r.latency_ms, 2), "timings_ms": r.timings_ms})
        for w in wins:
            if w.lo <= i < w.hi:
                w.add(r, truth)
        if truth is not None and truth[3] and i >= FIRST_OBJECT:
            if first is None:
                first = {"fully_visible": i, "found": None}
            if first["found"] is None and _hit(r, truth[0], truth[1]):
                first["found"] = i
        if i % 500 == 499:
            rss[i + 1] = memory_report()["rss_mb"]
    if rec.adapter is not None:
        rec.adapter.wait()
    return {
        "label": label,
        "windows": [w.figures(budget) for w in wins],
        "first_appearance": first,
        "rss_mb_every_500_frames": rss,
        "memory": memory_report(),
        "adaptation": rec.adapter.status() if rec.adapter is not None else None,
        "late_frames": late,
    }


def _lines(r: dict) -> list[str]:
    out = []
    fa = r["first_appearance"] or {}
    delay = "-" if fa.get("found") is None else str(fa["found"] - fa["fully_visible"])
    for w in r["windows"]:
        rej = "-" if w["empty_area_rejected"] is None else f"{w['empty_area_rejected']:.1%}"
        kept = "-" if w["object_area_kept"] is None else f"{w['object_area_kept']:.2%}"
        lat = w["latency_ms"]
        out.append(
            f"{r['label']:13s} frames {w['frames'][0]}-{w['frames'][1] - 1}: rejected {rej:>6s}  kept {kept:>7s}  "
            f"recall {w['recall']:.1%} ({w['visible_frames']})  false {w['false_detections']}  p50 {lat['p50']:.1f} "
            f"p99 {lat['p99']:.1f} mean {lat['mean']:.2f} ms  misses {w['deadline_misses']}"
        )
    rss = r["rss_mb_every_500_frames"]
    out.append(
        f"{'':13s} first object found {delay} frame(s) after fully visible; resident MiB every 500 frames: "
        + ", ".join(f"{v:.0f}" for v in rss.values())
    )
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data")
    ap.add_argument("--frames", type=int, default=1000)
    ap.add_argument(
        "--windows",
        default="150:300,150:1000",
        help="frame ranges reported, e.g. 150:1000,1000:10000 (default: how fast it adapts, and after)",
    )
    ap.add_argument("--budget-ms", type=float, default=33.0)
    ap.add_argument("--fps", type=float, default=30.0, help="frames handed over per second (0: back to back)")
    ap.add_argument("--objects", choices=["demo", "smvs"], default="demo")
    ap.add_argument("--runs", default="adapt,no-adapt,no-prefilter")
    ap.add_argument("--train-scenes", type=int, default=400)
    ap.add_argument("--safety-every", type=int, default=None, help="adapt: frames between safety searches")
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    print("command:", shlex.join([sys.executable, *sys.argv]))
    data = find_data(args.data)
    objs = objects(args.objects, data)
    work = tempfile.mkdtemp(prefix="bench-adapt-")
    atexit.register(shutil.rmtree, work, True)  # the database is the run's own
    db = ModelDB.create(Path(work) / "db")
    for n, img in objs.items():
        db.enroll(n, img)
    t = time.perf_counter()
    pf = RegionPrefilter(random_state=0).train(db, None, n_scenes=args.train_scenes, progress=True)
    print(f"prefilter trained on the built-in backgrounds in {time.perf_counter() - t:.0f} s (no vtest frame)")
    base = vtest(data, min(args.frames, 2000))
    stream = Stream(base, schedule(args.frames, list(objs), np.random.default_rng(0)), objs)
    windows = [tuple(int(v) for v in w.split(":")) for w in args.windows.split(",")]
    results = []
    for label in args.runs.split(","):
        prefilter = None if label == "no-prefilter" else pf
        params = None
        if args.safety_every is not None:
            from objrec.prefilter.online import AdaptParams

            params = AdaptParams(safety_every=args.safety_every)
        results.append(run(label, db, prefilter, stream, args.budget_ms, label == "adapt", windows, params, args.fps))
        print("\n".join(_lines(results[-1])), flush=True)
    if args.json:
        args.json.write_text(json.dumps({"command": sys.argv, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
