"""``video:PATH``: real footage with ground-truth corners, as the planar-tracking benchmarks evaluate it.

The layouts of ``PATH`` are those of :mod:`objrec.datasets.video` (``real_video``, POT-210, POIC/TMT; detected,
or named with ``--layout``); ``--sequences`` keeps some clips. One task per recognizer and clip:

- ``objrec``: :class:`~objrec.recognizer.Recognizer` as ``objrec run`` makes it by default (tracking, corner
  smoothing, the database's prefilter adapting to the scene), frames handed over with their footage time,
  ``--budget-ms`` as the budget;
- ``objrec-plain``: the same without a prefilter (nothing trained before the first frame);
- ``findobj``: the anchor, OpenCV SIFT detection in every frame (find_obj.py's settings:
  :class:`~objrec.evaluation.baseline.FindObjBaseline`), no budget, no tracking: the classic baseline of
  these benchmarks.

Two protocols (``--protocol``): ``recognition`` enrols the clip's reference image and gives nothing at frame 0
(what objrec is for); ``tracking`` enrols frame 0 rectified through its ground truth, as the benchmarks
initialise trackers (a clip without a reference image uses that in both). Frames are handed over as fast as
they are processed, or with ``--realtime`` at the footage's rate, a frame that comes while the recognizer is
busy being dropped (a dropped frame is scored with what was last shown).

Metrics (:mod:`objrec.metrics.alignment`), per clip, per challenge kind and pooled over every scored frame:
alignment error of the drawn corners and of the raw ones (median, p90), precision at 0-20 px (p@5, p@15),
success over homography-discrepancy thresholds, found within :data:`FOUND_PX`, misplaced (an estimate more
than :data:`MISPLACED_PX` off), frames lost (scored, no estimate) and the longest run of them, scored frames
until found again after each unscored stretch, late frames (over the budget), time per frame. Precision and
success plots, and an annotated video per clip (``videos/``, the ground truth in white, the estimate in green).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from objrec.datasets.video import (
    VideoClip,
    clip_frames,
    load_video_clips,
    rectified_reference,
    reference_image,
)
from objrec.evaluation.config import EvalConfig, finish_task
from objrec.evaluation.document import ReportDoc
from objrec.evaluation.kinds.base import EvalKind

if TYPE_CHECKING:
    from objrec.evaluation.baseline import FindObjBaseline
    from objrec.recognizer import Recognizer
    from objrec.types import Detection

__all__ = [
    "KIND",
    "VIDEO_DETECTORS",
    "PROTOCOLS",
    "FOUND_PX",
    "MISPLACED_PX",
    "build",
    "evaluate_clip",
    "score_frames",
    "video_section",
    "render_video",
    "plot_video",
]

VIDEO_DETECTORS = ("objrec", "objrec-plain", "findobj")
DEFAULT_VIDEO_DETECTORS = ("objrec", "findobj")
PROTOCOLS = ("recognition", "tracking")
#: A frame counts as found when its alignment error is at most this (pixels).
FOUND_PX = 10.0
#: An estimate further off than this (alignment error, pixels) is a misplaced detection.
MISPLACED_PX = 50.0
_NAME = "target"


def build(cfg: EvalConfig) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The ``video_clip`` tasks of a ``video:PATH`` run (one per recognizer and clip) and their status."""
    names = list(dict.fromkeys(cfg.detectors or DEFAULT_VIDEO_DETECTORS))
    bad = [n for n in names if n not in VIDEO_DETECTORS]
    if bad:
        raise ValueError(f"--detectors: {bad[0]!r} cannot run on video (choose from {', '.join(VIDEO_DETECTORS)})")
    protocol = cfg.protocol
    if protocol not in PROTOCOLS:
        raise ValueError(f"--protocol: expected one of {', '.join(PROTOCOLS)}, got {protocol!r}")
    clips = load_video_clips(cfg.path, cfg.layout, cfg.sequences)
    status = {n: {"available": True, "note": _NOTES[n]} for n in names}
    tasks = []
    for det in names:
        for c in clips:
            spec = {
                "type": "video_clip",
                "detector": det,
                "label": c.name,
                "path": str(Path(cfg.path).resolve()),
                "layout": c.layout,
                "clip": c.name,
                "protocol": protocol,
                "budget_ms": None if det == "findobj" else cfg.budget_ms,
                "realtime": bool(cfg.realtime),
                "video_out": str((Path(cfg.out) / "videos").resolve()) if cfg.plots else None,
                "meta": {"clip": c.name, "challenge": c.challenge, "layout": c.layout, "protocol": protocol},
            }
            tasks.append(finish_task(spec))
    cfg.notes.append(f"video: {len(clips)} clip(s) ({clips[0].layout} layout), protocol {protocol}")
    return tasks, status


_NOTES = {
    "objrec": "objrec Recognizer as objrec run makes it: tracking, corner smoothing, the prefilter adapting",
    "objrec-plain": "objrec Recognizer with tracking and corner smoothing, no prefilter",
    "findobj": "anchor: OpenCV SIFT detection in every frame, BF 2-NN, ratio 0.75, RANSAC 5 px, no tracking",
}


def _recognizer(detector: str, reference: np.ndarray, budget_ms: float | None, folder: Path) -> Any:
    if detector == "findobj":
        from objrec.evaluation.baseline import FindObjBaseline

        return FindObjBaseline({_NAME: reference})
    from objrec.modeldb import ModelDB
    from objrec.recognizer import Recognizer

    db = ModelDB.create(folder / "db")
    db.enroll(_NAME, reference)
    if detector == "objrec-plain":
        return Recognizer(db, budget_ms=budget_ms, prefilter=None, smooth=True)
    return Recognizer(db, budget_ms=budget_ms, prefilter="auto", adapt_prefilter=True, smooth=True)


def _frames(clip: VideoClip, realtime: bool) -> Any:
    """``(index, image, footage ms, hand-over ms or None)``: every frame, or with ``realtime`` those a camera
    at the footage's rate would hand over while the recognizer is busy (the newest one each time)."""
    if not realtime:
        for i, img, t in clip_frames(clip):
            yield i, img, t, None
        return
    from objrec.realtime.sources import ArraySource, PacedSource

    frames = list(clip_frames(clip))
    times = {i: t for i, _, t in frames}
    for f in PacedSource(ArraySource([img for _, img, _ in frames]), clip.fps):
        yield f.index, f.image, times[f.index], f.t_capture


def _corners(d: Any, attr: str) -> list[list[float]] | None:
    c = getattr(d, attr, None) if d is not None else None
    return None if c is None else np.round(np.asarray(c, np.float64), 3).tolist()


def _process(
    rec: Recognizer | FindObjBaseline, img: np.ndarray, t_footage: float, t_capture: float | None
) -> tuple[Detection | None, float, bool]:
    """One frame through ``rec``: its target detection (or None), latency and whether it met the budget."""
    from objrec.evaluation.baseline import FindObjBaseline

    if isinstance(rec, FindObjBaseline):
        t0 = time.perf_counter()
        found = rec.process(img)
        return (found.detections[0] if found.detections else None), (time.perf_counter() - t0) * 1e3, True
    r = rec.process(img, t0=t_capture, t_frame=t_footage)
    d = next((x for x in r.detections if x.name.split("#")[0] == _NAME), None)
    return d, r.latency_ms, r.deadline_met


def evaluate_clip(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one recognizer over one clip; per frame the drawn and raw corners, state, latency and deadline."""
    (clip,) = load_video_clips(spec["path"], spec["layout"], [spec["clip"]])
    first = next(clip_frames(clip))[1]
    if spec["protocol"] == "recognition":
        reference = reference_image(clip, first)  # frame 0 rectified where the clip has no reference image
    else:
        reference = rectified_reference(first, clip.gt[0])
    tmp = Path(tempfile.mkdtemp(prefix="objrec-eval-video-"))
    writer = None
    try:
        rec = _recognizer(spec["detector"], reference, spec.get("budget_ms"), tmp)
        if hasattr(rec, "warmup"):
            rec.warmup(first.shape[:2])
        else:
            rec.process(first)  # the anchor's lazy set-up, not timed
        frames = []
        for i, img, t, t_cap in _frames(clip, bool(spec.get("realtime"))):
            d, latency, met = _process(rec, img, t, t_cap)
            frames.append({
                "index": int(i),
                "t_ms": round(float(t), 3),
                "corners": _corners(d, "corners"),
                "raw_corners": _corners(d, "raw_corners") or _corners(d, "corners"),
                "state": getattr(d, "state", None) if d is not None else None,
                "latency_ms": round(float(latency), 3),
                "deadline_met": bool(met),
            })  # fmt: skip
            if spec.get("video_out"):
                writer = _annotate(writer, spec, clip, img, d, i)
    finally:
        if writer is not None:
            writer.release()
        shutil.rmtree(tmp, ignore_errors=True)
    gt = [np.round(g, 3).tolist() if np.all(np.isfinite(g)) else None for g in clip.gt]
    size = [int(reference.shape[1]), int(reference.shape[0])]
    return {"frames": frames, "gt": gt, "fps": clip.fps, "reference_size": size}


def _annotate(writer: Any, spec: dict[str, Any], clip: VideoClip, img: np.ndarray, d: Any, i: int) -> Any:
    import cv2

    from objrec.imageio import to_bgr

    out = to_bgr(img).copy()
    if i < len(clip.gt) and np.all(np.isfinite(clip.gt[i])):
        cv2.polylines(out, [np.round(clip.gt[i]).astype(np.int32)], True, (255, 255, 255), 1, cv2.LINE_AA)
    if d is not None:
        cv2.polylines(out, [np.round(np.asarray(d.corners)).astype(np.int32)], True, (0, 220, 0), 2, cv2.LINE_AA)
    cv2.putText(out, f"{spec['detector']} {clip.name} #{i}", (8, 20), cv2.FONT_HERSHEY_SIMPLEX, 0.5, (0, 255, 255), 1)
    if writer is None:
        folder = Path(spec["video_out"])
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{spec['detector']}_{clip.name}.mp4"
        writer = cv2.VideoWriter(str(path), cv2.VideoWriter.fourcc(*"mp4v"), clip.fps, out.shape[1::-1])
    writer.write(out)
    return writer


# --- scoring ------------------------------------------------------------------------------------------------
def _shown(frames: list[dict[str, Any]], n: int) -> list[dict[str, Any] | None]:
    """Per frame index below ``n``, the record shown then: its own, or a dropped frame's predecessor's."""
    by_index = {f["index"]: f for f in frames}
    out: list[dict[str, Any] | None] = []
    last = None
    for i in range(n):
        last = by_index.get(i, last)
        out.append(last)
    return out


def score_frames(frames: list[dict[str, Any]], gt: np.ndarray, budget_ms: float | None) -> dict[str, Any]:
    """The metrics of one clip's frame records against its ground truth ``gt``, ``(n, 4, 2)`` corners (NaN: not
    scored).
    ``frames``: the clip's frame records; ``budget_ms``: the frame budget in ms (None: none)."""
    from objrec.metrics.alignment import (
        PRECISION_THRESHOLDS,
        SUCCESS_THRESHOLDS,
        alignment_error,
        corners_homography,
        homography_discrepancy,
        precision_curve,
        success_curve,
    )

    shown = _shown(frames, len(gt))
    scored = np.isfinite(gt).all(axis=(1, 2))
    unit = np.array([[0.0, 0.0], [1.0, 0.0], [1.0, 1.0], [0.0, 1.0]])
    e_al, e_raw, e_h = [], [], []
    for i in np.flatnonzero(scored):
        f = shown[i]
        c = None if f is None else f["corners"]
        e_al.append(alignment_error(c, gt[i]))
        e_raw.append(alignment_error(None if f is None else f["raw_corners"], gt[i]))
        H = None if c is None else corners_homography(unit, np.asarray(c))
        H_true = corners_homography(unit, gt[i])
        e_h.append(float("inf") if H_true is None else homography_discrepancy(H, H_true))
    e_al_a, e_raw_a = np.array(e_al), np.array(e_raw)
    found = e_al_a <= FOUND_PX
    estimated = np.isfinite(e_al_a)
    lat = np.array([f["latency_ms"] for f in frames]) if frames else np.zeros(0)

    def med(a: np.ndarray, q: float = 50) -> float | None:
        a = a[np.isfinite(a)]
        return round(float(np.percentile(a, q)), 4) if a.size else None

    return {
        "frames": int(len(gt)),
        "scored": int(scored.sum()),
        "found": int(found.sum()),
        "found_fraction": round(float(found.mean()), 6) if found.size else None,
        "p_at_5": round(float((e_al_a <= 5).mean()), 6) if e_al_a.size else None,
        "p_at_15": round(float((e_al_a <= 15).mean()), 6) if e_al_a.size else None,
        "error_median": med(e_al_a),
        "error_p90": med(e_al_a, 90),
        "raw_error_median": med(e_raw_a),
        "raw_error_p90": med(e_raw_a, 90),
        "misplaced": int((estimated & (e_al_a > MISPLACED_PX)).sum()),
        "lost": int((~estimated).sum()),
        "longest_lost": _longest(~found),
        "found_again": _found_again(scored, found),
        "late": int(sum(not f["deadline_met"] for f in frames)) if budget_ms else 0,
        "processed": int(len(frames)),
        "latency_ms": {"p50": med(lat), "p99": med(lat, 99)},
        "precision": precision_curve(e_al_a, PRECISION_THRESHOLDS).round(6).tolist(),
        "raw_precision": precision_curve(e_raw_a, PRECISION_THRESHOLDS).round(6).tolist(),
        "success": success_curve(np.array(e_h), SUCCESS_THRESHOLDS).round(6).tolist(),
        "errors": [None if not np.isfinite(e) else round(float(e), 4) for e in e_al_a],
    }


def _longest(bad: np.ndarray) -> int:
    run = best = 0
    for b in bad:
        run = run + 1 if b else 0
        best = max(best, run)
    return int(best)


def _found_again(scored: np.ndarray, found: np.ndarray) -> list[int | None]:
    """After each stretch of unscored frames that follows a scored one and precedes another, the scored frames
    until the object is found again: 1 when found in the first scored frame after it, None when never.
    ``found`` has one entry per scored frame."""
    out: list[int | None] = []
    k = np.cumsum(scored)  # scored frames up to and including each frame
    for i in range(1, len(scored)):
        if scored[i] and not scored[i - 1] and k[i - 1] > 0:  # the first scored frame after a stretch
            hit = np.flatnonzero(found[k[i] - 1 :])
            out.append(int(hit[0]) + 1 if hit.size else None)
    return out


def _pool(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Pooled metrics over several clips' scored frames (errors and curves weighted by frames)."""
    from objrec.metrics.alignment import PRECISION_THRESHOLDS

    errs = np.array([np.inf if e is None else e for r in rows for e in r["errors"]], np.float64)
    w = np.array([r["scored"] for r in rows], np.float64)

    def wmean(key: str) -> list[float]:
        return (np.array([r[key] for r in rows]) * w[:, None]).sum(axis=0) / max(w.sum(), 1) if rows else []

    finite = errs[np.isfinite(errs)]
    return {
        "clips": len(rows),
        "scored": int(w.sum()),
        "found_fraction": round(float((errs <= FOUND_PX).mean()), 6) if errs.size else None,
        "p_at_5": round(float((errs <= 5).mean()), 6) if errs.size else None,
        "p_at_15": round(float((errs <= 15).mean()), 6) if errs.size else None,
        "error_median": round(float(np.median(finite)), 4) if finite.size else None,
        "misplaced": sum(r["misplaced"] for r in rows),
        "lost": sum(r["lost"] for r in rows),
        "late": sum(r["late"] for r in rows),
        "processed": sum(r["processed"] for r in rows),
        "precision": np.round(wmean("precision"), 6).tolist(),
        "raw_precision": np.round(wmean("raw_precision"), 6).tolist(),
        "success": np.round(wmean("success"), 6).tolist(),
        "thresholds": PRECISION_THRESHOLDS.tolist(),
    }


def video_section(records: list[dict[str, Any]], detectors: list[str], budget_ms: float | None) -> dict[str, Any]:
    """The report's ``video`` section: per clip rows, per detector pooled and per challenge kind.
    ``records``: the run's task records; ``detectors``: the recognizers (detector names) evaluated, in report order;
    ``budget_ms``: the frame budget in ms (None: none)."""
    from objrec.metrics.alignment import PRECISION_THRESHOLDS, SUCCESS_THRESHOLDS

    rows = []
    for r in records:
        gt = np.array([np.full((4, 2), np.nan) if g is None else g for g in r["result"]["gt"]], np.float64)
        budget = None if r["detector"] == "findobj" else budget_ms
        m = score_frames(r["result"]["frames"], gt.reshape(-1, 4, 2), budget)
        rows.append(
            {"detector": r["detector"], "clip": r["meta"]["clip"], "challenge": r["meta"].get("challenge"), **m}
        )
    summary = {}
    for d in detectors:
        mine = [x for x in rows if x["detector"] == d]
        if not mine:
            continue
        kinds = sorted({x["challenge"] for x in mine if x["challenge"]})
        summary[d] = {
            "all": _pool(mine),
            "by_challenge": {k: _pool([x for x in mine if x["challenge"] == k]) for k in kinds},
        }
    return {
        "found_px": FOUND_PX,
        "misplaced_px": MISPLACED_PX,
        "precision_thresholds": PRECISION_THRESHOLDS.tolist(),
        "success_thresholds": SUCCESS_THRESHOLDS.tolist(),
        "summary": summary,
        "clips": rows,
    }


def render_video(doc: ReportDoc, section: dict[str, Any], budget_ms: float | None) -> None:
    """The pooled table, per challenge kind, and per clip.
    ``doc``: the report document being built; ``section``: the report's video section; ``budget_ms``: the frame budget
    in ms (None: none)."""
    px = f"{section['found_px']:g}"
    doc.h(2, "Real footage: pooled over every scored frame")
    head = ["recognizer", "clips", "scored", f"found (<= {px} px)", "p@5", "p@15", "median e_AL", "misplaced"]
    doc.table(
        head + ["lost", "late"],
        [
            [d, s["all"]["clips"], s["all"]["scored"], s["all"]["found_fraction"], s["all"]["p_at_5"]]
            + [s["all"]["p_at_15"], s["all"]["error_median"], s["all"]["misplaced"], s["all"]["lost"], s["all"]["late"]]
            for d, s in section["summary"].items()
        ],
    )
    kinds = [(d, k, v) for d, s in section["summary"].items() for k, v in s["by_challenge"].items()]
    if kinds:
        doc.h(2, "Per challenge kind")
        doc.table(
            ["recognizer", "challenge", "clips", "p@5", "p@15", "median e_AL"],
            [[d, k, v["clips"], v["p_at_5"], v["p_at_15"], v["error_median"]] for d, k, v in kinds],
        )
    doc.h(2, "Per clip")
    doc.table(
        ["recognizer", "clip", "scored", "found", "p@5", "median e_AL drawn / raw", "p90 drawn / raw", "misplaced"]
        + ["lost", "longest lost", "found again after", "late", "p50 ms", "p99 ms"],
        [
            [r["detector"], r["clip"], r["scored"], r["found"], r["p_at_5"]]
            + [f"{r['error_median']} / {r['raw_error_median']}", f"{r['error_p90']} / {r['raw_error_p90']}"]
            + [r["misplaced"], r["lost"], r["longest_lost"], r["found_again"], r["late"]]
            + [r["latency_ms"]["p50"], r["latency_ms"]["p99"]]
            for r in section["clips"]
        ],
    )


def plot_video(report: dict[str, Any], out: Path, plt: Any) -> list[tuple[str, str]]:
    """Precision (drawn corners solid, raw dashed) and success plots, pooled per recognizer.
    ``report``: the report document; ``out``: the report folder; ``plt``: ``matplotlib.pyplot``."""
    section = report["video"]
    fig, axes = plt.subplots(1, 2, figsize=(11, 4))
    px, sx = section["precision_thresholds"], section["success_thresholds"]
    for i, (d, s) in enumerate(section["summary"].items()):
        a = s["all"]
        axes[0].plot(px, a["precision"], color=f"C{i}", label=f"{d} (p@5 {a['p_at_5']:.3f})")
        if d != "findobj":
            axes[0].plot(px, a["raw_precision"], color=f"C{i}", ls="--", lw=1, label=f"{d} raw corners")
        axes[1].plot(sx, a["success"], color=f"C{i}", label=d)
    axes[0].set(xlabel="alignment error threshold (px)", ylabel="precision", title="precision plot", ylim=(0, 1.02))
    axes[1].set(xlabel="homography discrepancy threshold", ylabel="success rate", title="success plot", ylim=(0, 1.02))
    for ax in axes:
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out / "plots/video_precision_success.png", dpi=90)
    plt.close(fig)
    return [("plots/video_precision_success.png", "precision and success plots, pooled over the scored frames")]


KIND = EvalKind(
    name="video",
    section="video",
    task_type="video_clip",
    build=build,
    run=evaluate_clip,
    summarise=video_section,
    render=render_video,
    plot=plot_video,
)
