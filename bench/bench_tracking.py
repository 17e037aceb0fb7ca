"""Tracking benchmark: many enrolled covers on a shelf, filmed live, with and without the tracking stage.

Scenes (``bench/tracking_scenes.py``, deterministic per ``--seed``): a board holding 1, 3, 12 or 20 SMVS DVD
covers (references 001-050, each "printed and photographed": gamma, colour cast, slight blur, JPEG round
trip) in a grid over ``vtest.avi``'s frames (each shown for 3 frames), at ``--size``; one homography per
frame (the camera) and sensor noise (sigma 3). ``shelfN``: hand-held shake (low-frequency sinusoids on
translation, rotation, scale); ``still``: no shake; ``occlusion``: a hand crossing the middle row;
``pan``: a quick motion-blurred swing out and back, then sharp; ``leave``: the shelf pans out of the frame
and back. ``still``, ``occlusion``, ``pan`` and ``leave`` hold 12 covers unless a count follows the name.

Modes, fed the same frames one after the other (not paced): ``track`` (``Recognizer(track=True)``,
``--smooth`` for corner smoothing), ``no-track`` (``track=False``) and ``baseline`` (the find_obj-style
anchor, ``objrec.evaluation.baseline.FindObjBaseline``, on every ``--baseline-step``-th frame). Each frame is
handed over at its capture time on a 30 fps camera's timeline (frame i at i x 33.3 ms on the recognizer's
clock) as soon as the previous one is done, so latency is the frame's own processing time and corner
smoothing sees the camera's time steps.

Metrics per scene and mode (definitions in ``bench/tracking_metrics.py``): found share of fully visible
object-frames at 3 px and 10 px, overall and from frame 30 on; median and p95 corner error; jitter on
``still`` (``corners`` and ``raw_corners``); latency p50/p99 and late frames, each late frame put down to the
unit that ran furthest over its prediction or to the work outside the units
(``tracking_metrics.late_cause``); tracking ms per tracked object
beside a full-frame detection of the primary detector measured in the same run; false detections and
detections drawn while hidden; frames to report lost (``occlusion``, ``leave``); frames to re-acquire
(``pan``, ``occlusion``, ``leave``).

``--catalogue none`` enrols the scenes' covers; ``334`` the 100 SMVS references and the 234 ``dvd_covers``
(as ``objrec eval catalogue:`` names them); ``--db PATH`` uses an existing database holding covers 001-050 and
nothing drawn from ``vtest.avi``, which the scenes play behind the covers (a detection of such an object counts as
false): ``bench/bench_catalogue_sizes.py --vtest-step 0`` builds one. ``--cold`` drops the database's files from the
page cache before each scene (``posix_fadvise(POSIX_FADV_DONTNEED)`` on each), as after a reboot.
Writes ``--out/results.json``, ``results.md``, ``tracking.png`` and annotated frames in ``frames/``.

    python bench/bench_tracking.py --scenes shelf3,still --frames 40 --size 640x480 --out /tmp/bt
    python bench/bench_tracking.py --size 1280x720 --frames 300 [--catalogue 334 | --db PATH] [--smooth]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import cv2
import numpy as np

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(HERE))

from procmem import drop_page_cache, tree_files  # noqa: E402
from tracking_metrics import TOLERANCES, Det, FrameLog, late_cause, scene_metrics  # noqa: E402
from tracking_scenes import (  # noqa: E402
    SWING_FRAMES,
    ShelfStream,
    load_backgrounds,
    parse_scene,
    shelf_cover_names,
)

MODES = ("track", "no-track", "baseline")
DEFAULT_SCENES = "shelf1,shelf3,shelf12,shelf20,still,occlusion,pan,leave"
FPS = 30.0


def shared_data(arg: str | None) -> Path:
    env = os.environ.get("OBJREC_SHARED_DATA")
    cands = [Path(arg)] if arg else ([Path(env)] if env else []) + [p / "shared" / "data" for p in HERE.parents]
    for c in cands:
        if (c / "opencv_samples" / "vtest.avi").exists() and (c / "smvs_dvd" / "reference").is_dir():
            return c
    sys.exit("shared data (opencv_samples/vtest.avi, smvs_dvd/reference) not found; pass --data or OBJREC_SHARED_DATA")


def parse_size(text: str) -> tuple[int, int]:
    try:
        w, h = (int(v) for v in text.lower().split("x"))
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT (1280x720), got {text!r}") from None
    return w, h


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenes", default=DEFAULT_SCENES, help="comma list of <kind>[<covers>]")
    ap.add_argument("--frames", type=int, default=300, help="frames per scene")
    ap.add_argument("--budget-ms", type=float, default=33.0, help="per-frame budget (0: none)")
    ap.add_argument("--size", type=parse_size, default=(1280, 720), help="frame size WIDTHxHEIGHT")
    ap.add_argument("--catalogue", choices=("none", "334"), default="none", help="distractors enrolled")
    ap.add_argument("--db", help="an existing model database (names 001 .. 050 for the covers)")
    ap.add_argument("--db-cache", help="where enrolled databases are kept and reused (default: OUT/db)")
    ap.add_argument("--modes", default=",".join(MODES), help=f"comma list of {', '.join(MODES)}")
    ap.add_argument("--no-track", action="store_true", help="leave the tracking mode out")
    ap.add_argument("--smooth", action="store_true", help="the tracking mode smooths corners (One-Euro)")
    ap.add_argument("--baseline-step", type=int, default=10, help="the baseline on every N-th frame (0: never)")
    ap.add_argument("--baseline-max", type=int, default=1000, help="no baseline for a --db with more objects")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backend", default="auto")
    ap.add_argument("--data", help="the shared data folder (default: OBJREC_SHARED_DATA or ../shared/data)")
    ap.add_argument("--annotate", type=int, default=3, help="annotated frames per scene (0: none)")
    ap.add_argument("--out", default="bench-tracking-out")
    ap.add_argument("--no-progress", action="store_true")
    ap.add_argument(
        "--cold",
        action="store_true",
        help="drop the database's files from the page cache before each scene (posix_fadvise DONTNEED on each)",
    )
    args = ap.parse_args(argv)
    args.modes = [m.strip() for m in args.modes.split(",") if m.strip()]
    unknown = [m for m in args.modes if m not in MODES]
    if unknown:
        ap.error(f"--modes: unknown {unknown}; expected a comma list of {MODES}")
    if args.no_track:
        args.modes = [m for m in args.modes if m != "track"]
    if args.baseline_step <= 0:
        args.modes = [m for m in args.modes if m != "baseline"]
    if not args.modes:
        ap.error("no mode left to run")
    args.specs = [parse_scene(s) for s in args.scenes.split(",") if s.strip()]
    return args


# -- the database ------------------------------------------------------------------------------------------------
def catalogue_items(data: Path, catalogue: str, covers: list[str]) -> list[tuple[str, str]]:
    """(name, path) of the objects to enrol: the scenes' covers, or the 334-cover catalogue."""
    if catalogue == "none":
        return [(n, str(data / "smvs_dvd" / "reference" / f"{n}.jpg")) for n in covers]
    from objrec.datasets import load_catalogue
    from objrec.evaluation.kinds.catalogue import catalogue_objects

    cfg = SimpleNamespace(distractors=[str(data / "dvd_covers")], without_query_objects=False)
    return catalogue_objects(cfg, load_catalogue(data / "smvs_dvd"))


def open_database(args: argparse.Namespace, data: Path, covers: list[str]) -> tuple[object, dict, list]:
    """The model database, its description, and its (name, path) items when this run enrolled it."""
    from objrec import ModelDB

    if args.db:
        db = ModelDB.open(args.db)
        missing = [n for n in covers if n not in db]
        if missing:
            sys.exit(f"{args.db}: the scenes' covers {missing[:5]} are not enrolled (names 001 .. 050 expected)")
        return db, {"path": str(args.db), "objects": len(db), "catalogue": "--db"}, []
    from objrec.evaluation.kinds.catalogue import build_database

    items = catalogue_items(data, args.catalogue, covers)
    cache = Path(args.db_cache) if args.db_cache else Path(args.out) / "db"
    db = build_database(cache, items, progress=not args.no_progress)
    return db, {"path": str(db.path), "objects": len(db), "catalogue": args.catalogue}, items


def baseline_for(args: argparse.Namespace, db, items: list) -> tuple[object | None, str]:
    """The find_obj-style anchor over the database's objects: find_obj.py's settings for the scenes' covers
    alone, the catalogue anchor of ``objrec eval`` (FLANN, ratio 0.8, 5 candidates, 10 inliers) otherwise."""
    from objrec.evaluation.baseline import FindObjBaseline

    if "baseline" not in args.modes:
        return None, "not run"
    if not items and len(db) > args.baseline_max:
        return None, f"not run: {len(db)} objects > --baseline-max {args.baseline_max}"
    if items:
        objects = {n: cv2.imread(p, cv2.IMREAD_COLOR) for n, p in items}
    else:
        objects = {n: db.image(n) for n in db.names}
    if args.catalogue == "none" and not args.db:
        return FindObjBaseline(objects), "find_obj.py: OpenCV SIFT, BF 2-NN, ratio 0.75, RANSAC 5 px, 4 inliers"
    base = FindObjBaseline(objects, matcher="flann", ratio=0.8, candidates=5, min_inliers=10)
    return base, "catalogue anchor: OpenCV SIFT, one FLANN index, ratio 0.8, 5 candidates, RANSAC 5 px, 10 inliers"


# -- the modes -----------------------------------------------------------------------------------------------------
class StreamClock:
    """The recognizer's clock: real time, shifted before each frame so that the frame is handed over at its
    capture time on the camera's timeline. Within a frame it runs with real time; between frames it may step
    back (a frame that took longer than a frame period)."""

    def __init__(self) -> None:
        self.offset = 0.0

    def now(self) -> float:
        return time.perf_counter() * 1e3 + self.offset

    def hand_over(self, t_ms: float) -> None:
        self.offset = t_ms - time.perf_counter() * 1e3


class ObjrecMode:
    """A recognizer fed frames at their capture times."""

    def __init__(self, db, args: argparse.Namespace, track: bool, frame_shape: tuple[int, int]) -> None:
        from objrec import Recognizer

        self.clock = StreamClock()
        budget = args.budget_ms if args.budget_ms > 0 else None
        smooth = bool(args.smooth and track)
        self.rec = Recognizer(db, budget_ms=budget, backend=args.backend, track=track, smooth=smooth, clock=self.clock)
        self.rec.warmup(frame_shape)
        self.outside: list[float] = []  # each frame's time outside its units

    def reset(self) -> None:
        self.rec.reset()
        self.outside = []

    def process(self, index: int, image: np.ndarray):
        t0 = index * 1000.0 / FPS
        self.clock.hand_over(t0)
        r = self.rec.process(image, t0=t0)
        dets = [Det(d.name, d.corners, d.raw_corners, d.state, d.track_id) for d in r.detections]
        lost = [t.name for t in r.lost]
        log = FrameLog(index, dets, r.latency_ms, not r.deadline_met, float(r.timings_ms.get("track", 0.0)), lost)
        ran = [(u.unit, u.predicted_ms, u.actual_ms, u.mandatory) for u in self.rec.scheduler.records if u.admitted]
        outside = r.latency_ms - sum(a for _, _, a, _ in ran)
        self.outside.append(outside)
        if log.late:
            log.cause = late_cause(ran, outside, float(np.median(self.outside)))
        return log, r.detections


class BaselineMode:
    """The find_obj-style anchor on every ``step``-th frame; a frame is late when it takes over the budget."""

    def __init__(self, base, step: int, budget_ms: float) -> None:
        self.base, self.step, self.budget_ms = base, step, budget_ms

    def reset(self) -> None:
        pass

    def process(self, index: int, image: np.ndarray):
        if index % self.step:
            return None, None
        t = time.perf_counter()
        out = self.base.process(image)
        ms = (time.perf_counter() - t) * 1e3
        dets = [Det(d.name, d.corners) for d in out.detections]
        return FrameLog(index, dets, ms, self.budget_ms > 0 and ms > self.budget_ms), out.detections


def detection_ms(db, image: np.ndarray, backend: str, repeats: int = 5) -> tuple[str, float]:
    """The primary detector's full-frame detection and description time (median of ``repeats`` after one)."""
    from objrec.features import make_detector
    from objrec.imageio import to_gray

    kind = "surf" if "surf" in db.detectors else next(iter(db.detectors))
    det = make_detector(kind, **{**db.detectors[kind], "backend": backend})
    gray = to_gray(image)
    det.detect_and_compute(gray)
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        det.detect_and_compute(gray)
        times.append((time.perf_counter() - t) * 1e3)
    return kind, float(np.median(times))


def scene_events(stream: ShelfStream) -> dict:
    """The frames where the scene's events happen (for the JSON report)."""
    kind = stream.spec.kind
    if kind == "pan":
        return {"swing": [stream.swing_start, stream.sharp_from], "sharp_from": stream.sharp_from}
    if kind == "occlusion":
        return {"hand": list(stream.hand_span)}
    if kind == "leave":
        return dict(zip(("pan_out", "out", "pan_back", "back"), stream.leave_phases(), strict=True))
    return {}


def key_frames(stream: ShelfStream, count: int) -> list[int]:
    """Frames worth a picture: the scene's events first, then evenly spread ones."""
    n = stream.n_frames
    kind = stream.spec.kind
    if kind == "pan":
        events = [stream.swing_start + SWING_FRAMES // 2, stream.sharp_from]
    elif kind == "occlusion":
        events = [sum(stream.hand_span) // 2]
    elif kind == "leave":
        go, out, _, home = stream.leave_phases()
        events = [(go + out) // 2, home]
    else:
        events = []
    spread = [round(n * k / (count + 1)) for k in range(1, count + 1)]
    out = []
    for i in events + spread:
        if 0 <= i < n and i not in out:
            out.append(i)
    return sorted(out[:count])


def annotate(path: Path, image: np.ndarray, detections, truth, title: str) -> None:
    from objrec.draw import draw_detections

    drawn = draw_detections(
        image, detections or [], truth_corners=[q for q, v in truth.values() if v > 0], lines=[title]
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    cv2.imwrite(str(path), drawn, [cv2.IMWRITE_JPEG_QUALITY, 85])


def run_scene(stream: ShelfStream, modes: dict, args: argparse.Namespace, out: Path) -> tuple[dict, list]:
    """Every mode on every frame of ``stream`` (frames made once, fed to each mode in turn)."""
    from tqdm import tqdm

    for m in modes.values():
        m.reset()
    logs: dict[str, list[FrameLog]] = {k: [] for k in modes}
    truths = []
    keys = set(key_frames(stream, args.annotate)) if args.annotate > 0 else set()
    name = stream.spec.name
    bar = tqdm(total=stream.n_frames, desc=name, unit="frame", disable=args.no_progress, file=sys.stderr)
    try:
        for i in range(stream.n_frames):
            frame = stream.frame(i)
            truth = {c.name: (c.corners, c.visible) for c in frame.truth}
            truths.append(truth)
            for mode, runner in modes.items():
                log, dets = runner.process(i, frame.image)
                if log is None:
                    continue
                logs[mode].append(log)
                if i in keys:
                    title = f"{name} frame {i}, {mode}: {len(log.dets)} detections, {log.latency_ms:.0f} ms"
                    annotate(out / "frames" / f"{name}_{i:04d}_{mode}.jpg", frame.image, dets, truth, title)
            bar.update(1)
    finally:
        bar.close()
    return logs, truths


# -- the report ----------------------------------------------------------------------------------------------------
def _pct(x: float | None) -> str:
    return "-" if x is None else f"{100 * x:.1f}%"


def _num(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _pair(a: float | None, b: float | None, digits: int = 1) -> str:
    return f"{_num(a, digits)} / {_num(b, digits)}"


def _events(m: dict, key: str, censored: str) -> str:
    if key not in m:
        return "not measured in this scene"
    e = m[key]
    if e is None:
        return "n/a (frames skipped)"
    return f"{_pair(e['median'], e['max'], 0)} ({e['events']} events, {e[censored]} {censored})"


def _late_at(lat: dict) -> str:
    """`` (frames i, j, ...)`` for the late frames, at most five named."""
    frames = lat.get("late_frames") or []
    if not frames:
        return ""
    more = f", {len(frames) - 5} more" if len(frames) > 5 else ""
    return " (frames " + ", ".join(str(i) for i in frames[:5]) + more + ")"


def summary_line(mode: str, m: dict) -> str:
    f, lat, fd, tr = m["found"], m["latency"], m["false"], m["tracking"]
    return (
        f"  {mode:9s} found {_pct(f['share_3px'])} (3 px) {_pct(f['share_10px'])} (10 px), from frame 30 "
        f"{_pct(f['share_settled_3px'])}; latency p50 {_num(lat['p50_ms'])} p99 {_num(lat['p99_ms'])} ms, late "
        f"{lat['late']}/{lat['frames']}{_late_at(lat)}; track {_num(tr['track_ms_per_object'], 2)} ms/object; false "
        f"{fd['false']}, drawn while hidden {fd['drawn_while_hidden']}"
    )


def _header(doc: dict) -> list[str]:
    db = doc["database"]
    return [
        "# Tracking benchmark",
        "",
        f"- command: `{doc['command']}`",
        f"- machine: {doc['machine']}",
        f"- frames: {doc['frames']} per scene at {doc['size']}, budget {doc['budget_ms']} ms, seed {doc['seed']}",
        f"- database: {db['objects']} objects ({db['catalogue']}), {db['path']}",
        f"- modes: {', '.join(doc['modes'])}; smoothing in the tracking mode: {doc['smooth']}",
        f"- baseline: {doc['baseline']}"
        + (f" (every {doc['baseline_step']}th frame)" if "baseline" in doc["modes"] else ""),
        f"- full-frame detection ({doc['detector']['kind']}, {doc['size']}): {doc['detector']['median_ms']:.1f} ms",
        "",
    ]


def _table(title: str, columns: list[str], rows: list[list[str]]) -> list[str]:
    lines = [f"## {title}", "", "| " + " | ".join(columns) + " |", "|" + " --- |" * len(columns)]
    lines += ["| " + " | ".join(r) + " |" for r in rows]
    return lines + [""]


def _rows(doc: dict, cells, only: tuple[str, ...] | None = None) -> list[list[str]]:
    rows = []
    for scene, s in doc["scenes"].items():
        if only is not None and s["kind"] not in only:
            continue
        for mode, m in s["modes"].items():
            rows.append([scene, mode, *cells(m)])
    return rows


def render_markdown(doc: dict) -> str:
    lines = _header(doc)

    def recognition(m):
        f, fd = m["found"], m["false"]
        err = f["corner_error_px"]
        return [
            _pct(f["share_3px"]),
            _pct(f["share_10px"]),
            _pct(f["share_settled_3px"]),
            _pair(err["p50"], err["p95"], 2),
            str(fd["false"]),
            str(fd["drawn_while_hidden"]),
        ]

    cols = ["scene", "mode", "found 3 px", "found 10 px", "found 3 px from frame 30", "corner error p50 / p95 px"]
    lines += _table("Recognition", cols + ["false", "drawn while hidden"], _rows(doc, recognition))

    def timing(m):
        lat, tr = m["latency"], m["tracking"]
        return [
            str(lat["frames"]),
            _pair(lat["p50_ms"], lat["p99_ms"]),
            str(lat["late"]),
            f"{_num(tr['track_ms_per_object'], 2)} ({_num(tr['track_ms_per_frame'], 2)} per frame)",
            _pct(tr["tracked_share"]),
            f"{tr['track_ids']} / {tr['lost_reports']}",
            ", ".join(f"{k} {v}" for k, v in (m.get("late_causes") or {}).items()) or "-",
        ]

    cols = ["scene", "mode", "frames", "latency p50 / p99 ms", "late", "track ms per object", "tracked detections"]
    cols += ["tracks / reported lost", "late frames by cause"]
    lines += _table("Time", cols, _rows(doc, timing))
    events = _rows(
        doc, lambda m: [_events(m, "lost", "kept"), _events(m, "reacquire", "never")], ("occlusion", "leave", "pan")
    )
    if events:
        cols = ["scene", "mode", "frames to report lost: median / max", "frames to re-acquire: median / max"]
        lines += _table("Lost and re-acquired", cols, events)

    def still(m):
        j = m["jitter"]
        return [
            _pair(*(j[a]["mean_px"], j[a]["max_px"]) if j[a] else (None, None), 2) for a in ("corners", "raw_corners")
        ]

    rows = _rows(doc, still, ("still",))
    if rows:
        lines += _table("Jitter on the still scene (px: mean / max)", ["scene", "mode", "corners", "raw_corners"], rows)
    return "\n".join(lines)


def plot(doc: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib not installed: no plot")
        return
    scenes = list(doc["scenes"])
    modes = doc["modes"]
    x = np.arange(len(scenes))
    width = 0.8 / max(1, len(modes))
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(max(8, 1.6 * len(scenes) + 4), 4.2))
    for k, mode in enumerate(modes):
        ms = [doc["scenes"][s]["modes"].get(mode) for s in scenes]
        found = [100 * (m["found"]["share_3px"] or 0) if m else 0 for m in ms]
        p50 = [m["latency"]["p50_ms"] or 0 if m else 0 for m in ms]
        p99 = [m["latency"]["p99_ms"] or 0 if m else 0 for m in ms]
        pos = x - 0.4 + width * (k + 0.5)
        a1.bar(pos, found, width, label=mode)
        a2.bar(pos, p50, width, label=f"{mode} p50")
        a2.scatter(pos, p99, marker="_", s=120, color="k", zorder=3, label="p99" if k == 0 else None)
    if doc["budget_ms"]:
        a2.axhline(doc["budget_ms"], color="r", lw=1, ls="--", label="budget")
    a1.set_ylabel(f"found, {int(TOLERANCES[0])} px (% of fully visible object-frames)")
    a2.set_ylabel("latency (ms, log scale)")
    a2.set_yscale("log")
    for a in (a1, a2):
        a.set_xticks(x, scenes, rotation=30)
        a.grid(axis="y", alpha=0.3)
        a.legend(fontsize=8)
    a1.set_ylim(0, 100)
    fig.suptitle(f"{doc['size']}, {doc['database']['objects']} objects enrolled")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


# -- main ------------------------------------------------------------------------------------------------------------
def machine() -> str:
    threads = {k: os.environ.get(k) for k in ("NUMBA_NUM_THREADS", "OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS")}
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    env = ", ".join(f"{k}={v}" for k, v in threads.items() if v) or "no thread variables set"
    load = tuple(round(v, 2) for v in os.getloadavg())
    return f"{os.cpu_count()} cores ({usable} usable), load average {load}, cv2 threads {cv2.getNumThreads()}, {env}"


def scene_covers(data: Path, names: list[str], db) -> dict[str, np.ndarray]:
    """The covers' model images, at the size the database holds them (their outlines are what it reports)."""
    out = {}
    for n in names:
        img = cv2.imread(str(data / "smvs_dvd" / "reference" / f"{n}.jpg"), cv2.IMREAD_COLOR)
        info = db.info(n)
        if (img.shape[1], img.shape[0]) != (info.width, info.height):
            img = cv2.resize(img, (info.width, info.height), interpolation=cv2.INTER_AREA)
        out[n] = img
    return out


def make_modes(args: argparse.Namespace, db, items: list) -> tuple[dict, str]:
    w, h = args.size
    modes, base_desc = {}, "not run"
    for m in args.modes:
        if m == "baseline":
            base, base_desc = baseline_for(args, db, items)
            if base is not None:
                modes[m] = BaselineMode(base, args.baseline_step, args.budget_ms)
        else:
            t = time.perf_counter()
            modes[m] = ObjrecMode(db, args, m == "track", (h, w))
            print(f"{m}: recognizer ready (warm-up {time.perf_counter() - t:.1f} s)")
    return modes, base_desc


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    command = " ".join([sys.executable] + (sys.argv if argv is None else [sys.argv[0], *argv]))
    print("command:", command)
    print("machine:", machine())
    data = shared_data(args.data)
    names = {s.name: shelf_cover_names(s, args.seed) for s in args.specs}
    db, db_info, items = open_database(args, data, sorted(set().union(*names.values())))
    print(f"database: {db_info['objects']} objects ({db_info['catalogue']}) at {db_info['path']}")
    backgrounds = load_backgrounds(data / "opencv_samples" / "vtest.avi", args.frames // 3 + 1)
    modes, base_desc = make_modes(args, db, items)
    size = f"{args.size[0]}x{args.size[1]}"
    doc = {
        "command": command,
        "machine": machine(),
        "size": size,
        "frames": args.frames,
        "budget_ms": args.budget_ms or None,
        "seed": args.seed,
        "database": db_info,
        "modes": list(modes),
        "smooth": bool(args.smooth),
        "baseline": base_desc,
        "baseline_step": args.baseline_step,
        "scenes": {},
    }
    for spec in args.specs:
        stream = ShelfStream(
            spec, scene_covers(data, names[spec.name], db), backgrounds, args.frames, args.size, args.seed
        )
        if "detector" not in doc:
            kind, ms = detection_ms(db, stream.frame(0).image, args.backend)
            doc["detector"] = {"kind": kind, "median_ms": ms}
            print(f"full-frame detection ({kind}, {size}): {ms:.1f} ms (median of 5)")
        if args.cold:
            drop_page_cache(tree_files(Path(db.path)))
        logs, truths = run_scene(stream, modes, args, out)
        metrics = {m: scene_metrics(logs[m], truths, spec.kind, args.frames, stream.sharp_from) for m in logs}
        doc["scenes"][spec.name] = {
            "kind": spec.kind,
            "covers": names[spec.name],
            "events": scene_events(stream),
            "modes": metrics,
        }
        print(f"{spec.name} ({args.frames} frames, covers {', '.join(names[spec.name])}):")
        for m, res in metrics.items():
            print(summary_line(m, res))
    (out / "results.json").write_text(json.dumps(doc, indent=2))
    (out / "results.md").write_text(render_markdown(doc))
    plot(doc, out / "tracking.png")
    print(f"wrote {out / 'results.json'}, {out / 'results.md'}, {out / 'tracking.png'}")
    if args.annotate > 0:
        print(f"annotated frames (the truth dashed in white) in {out / 'frames'}/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
