"""Scores of the tracking benchmark: what each mode reported in a scene, against the scene's ground truth.

Definitions (``tol`` in pixels; an object-frame is one cover in one processed frame):

- *found*: a detection with the cover's name whose four corners are all within ``tol`` of the truth; the
  found share counts the object-frames where the cover is at least :data:`FULL` visible, over all processed
  frames and from frame :data:`SETTLE` on;
- *corner error*: the mean distance of the four corners to the truth, for object-frames found at 10 px;
- *jitter* (``still`` scenes): each corner's distance from its mean position over the frames where its
  cover is found at 10 px, averaged over corners and frames per cover, then over covers; also the largest
  single deviation; for ``corners`` and, when every detection has them, ``raw_corners``;
- *false detections*: a detection of a cover that is not on the shelf or not in view (visible share 0), or
  with a corner more than :data:`FAR_PX` from the truth; *drawn while hidden*: a detection of a cover less
  than :data:`HIDDEN` visible;
- *late frames*: frames over the budget, their indices, and their number from frame :data:`SETTLE` on;
- *frames to report lost*: from the first frame where a reported cover is less than :data:`HIDDEN` visible,
  the frames in which it is still reported (0: dropped at once); a cover reported until it is visible again
  counts as *kept*;
- *frames to re-acquire*: from the first sharp frame after the ``pan`` scene's swing, or the first frame a
  cover is at least :data:`FULL` visible again after being less than :data:`HIDDEN` visible, the frames
  until it is found at 3 px (0: found in that frame);
- *tracking ms per object*: per frame with tracked detections (``state == "tracked"``), the ``"track"``
  stage's time (``timings_ms["track"]``, 0 when absent) over their number; the median over those frames;
  also the share of detections that are tracked, the tracks seen (distinct name and ``track_id``) and the
  tracks reported lost (``FrameResult.lost``).

Lost and re-acquired frames need every frame processed; for a mode that skips frames they are None.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

__all__ = ["Det", "FrameLog", "Truth", "scene_metrics", "FULL", "HIDDEN", "FAR_PX", "SETTLE", "TOLERANCES"]

FULL = 0.95
HIDDEN = 0.25
FAR_PX = 50.0
SETTLE = 30
TOLERANCES = (3.0, 10.0)

Truth = dict  # name -> (corners (4, 2), visible fraction)


@dataclass(frozen=True)
class Det:
    """One reported detection, as scored."""

    name: str
    corners: np.ndarray
    raw_corners: np.ndarray | None = None
    state: str = "detected"
    track_id: int | None = None


@dataclass
class FrameLog:
    """What a mode reported for one frame."""

    index: int
    dets: list[Det]
    latency_ms: float
    late: bool
    track_ms: float = 0.0
    lost: list[str] = field(default_factory=list)
    cause: str | None = None  # a late frame's cause (:func:`late_cause`)


def _best(dets: list[Det], name: str, truth: np.ndarray, attr: str = "corners") -> tuple[float, float, Det | None]:
    """(largest corner distance, mean corner distance, detection) of the detection of ``name`` nearest the
    truth; (inf, inf, None) when there is none."""
    best = (np.inf, np.inf, None)
    for d in dets:
        if d.name != name:
            continue
        dist = np.linalg.norm(getattr(d, attr) - truth, axis=1)
        if dist.max() < best[0]:
            best = (float(dist.max()), float(dist.mean()), d)
    return best


def _pct(values: list[float], q: float) -> float | None:
    return float(np.percentile(values, q)) if values else None


def found_shares(logs: list[FrameLog], truths: list[Truth]) -> dict:
    """Found shares at each tolerance (overall and from :data:`SETTLE` on) and corner errors at 10 px."""
    counts = {f"{k}_{int(t)}px": 0 for t in TOLERANCES for k in ("found", "found_settled")}
    visible = settled = 0
    errors = []
    for log in logs:
        for name, (q, vis) in truths[log.index].items():
            if vis < FULL:
                continue
            visible += 1
            settled += log.index >= SETTLE
            worst, mean, _ = _best(log.dets, name, q)
            for t in TOLERANCES:
                if worst <= t:
                    counts[f"found_{int(t)}px"] += 1
                    counts[f"found_settled_{int(t)}px"] += log.index >= SETTLE
            if worst <= TOLERANCES[-1]:
                errors.append(mean)
    out = {"object_frames": visible, "object_frames_settled": settled, **counts}
    for t in TOLERANCES:
        out[f"share_{int(t)}px"] = counts[f"found_{int(t)}px"] / visible if visible else None
        out[f"share_settled_{int(t)}px"] = counts[f"found_settled_{int(t)}px"] / settled if settled else None
    out["corner_error_px"] = {"p50": _pct(errors, 50), "p95": _pct(errors, 95), "n": len(errors)}
    return out


def false_detections(logs: list[FrameLog], truths: list[Truth]) -> dict:
    """False detections (not in view, or far from the truth) and detections of covers mostly hidden."""
    false = hidden = 0
    examples = []
    for log in logs:
        truth = truths[log.index]
        for d in log.dets:
            t = truth.get(d.name)
            far = t is not None and np.linalg.norm(d.corners - t[0], axis=1).max() > FAR_PX
            if t is None or t[1] <= 0.0 or far:
                false += 1
                if len(examples) < 10:
                    why = "not on the shelf" if t is None else "not in view" if t[1] <= 0.0 else "far"
                    examples.append({"frame": log.index, "name": d.name, "why": why})
            if t is not None and t[1] < HIDDEN:
                hidden += 1
    n = len(logs)
    return {
        "false": false,
        "false_per_1000_frames": 1000.0 * false / n if n else None,
        "drawn_while_hidden": hidden,
        "examples": examples,
    }


def _spread(seqs: dict[str, list[np.ndarray]]) -> dict | None:
    """Mean (per cover, then over covers) and largest distance of corners from their mean positions."""
    per_object, peak = [], 0.0
    for seq in seqs.values():
        if len(seq) < 2:
            continue
        a = np.stack(seq)
        dev = np.linalg.norm(a - a.mean(axis=0), axis=2)
        per_object.append(float(dev.mean()))
        peak = max(peak, float(dev.max()))
    return {"mean_px": float(np.mean(per_object)), "max_px": peak, "objects": len(per_object)} if per_object else None


def jitter(logs: list[FrameLog], truths: list[Truth]) -> dict:
    """Corner jitter about each corner's mean position, for ``corners`` and ``raw_corners`` (when every
    detection scored has them)."""
    seqs: dict[str, dict[str, list[np.ndarray]]] = {"corners": {}, "raw_corners": {}}
    raw_complete = True
    for log in logs:
        for name, (q, _) in truths[log.index].items():
            worst, _, d = _best(log.dets, name, q)
            if d is None or worst > TOLERANCES[-1]:
                continue
            seqs["corners"].setdefault(name, []).append(d.corners)
            if d.raw_corners is None:
                raw_complete = False
            else:
                seqs["raw_corners"].setdefault(name, []).append(d.raw_corners)
    return {"corners": _spread(seqs["corners"]), "raw_corners": _spread(seqs["raw_corners"]) if raw_complete else None}


def latency(logs: list[FrameLog]) -> dict:
    """Latency percentiles and late frames: their number, their indices, and their number from frame
    :data:`SETTLE` on (a stream's first frames teach the cost model the units it has not yet run)."""
    lat = [g.latency_ms for g in logs]
    late = [g.index for g in logs if g.late]
    return {
        "frames": len(logs),
        "p50_ms": _pct(lat, 50),
        "p99_ms": _pct(lat, 99),
        "max_ms": max(lat) if lat else None,
        "late": len(late),
        "late_frames": late,
        "late_settled": sum(i >= SETTLE for i in late),
        "frames_settled": sum(g.index >= SETTLE for g in logs),
    }


def tracking(logs: list[FrameLog]) -> dict:
    """The tracking stage's time per tracked object, the share of detections it followed, and its tracks."""
    per_object = [g.track_ms / n for g in logs if (n := sum(d.state == "tracked" for d in g.dets))]
    dets = sum(len(g.dets) for g in logs)
    return {
        "track_ms_per_object": _pct(per_object, 50),
        "track_ms_per_frame": _pct([g.track_ms for g in logs], 50),
        "tracked_share": sum(d.state == "tracked" for g in logs for d in g.dets) / dets if dets else None,
        "track_ids": len({(d.name, d.track_id) for g in logs for d in g.dets if d.track_id is not None}),
        "lost_reports": sum(len(g.lost) for g in logs),
    }


def _reported(log: FrameLog, name: str) -> bool:
    return any(d.name == name for d in log.dets)


def frames_to_lost(logs: list[FrameLog], truths: list[Truth]) -> dict:
    """Frames a cover stays reported once it is less than :data:`HIDDEN` visible (see the module notes)."""
    frames, kept = [], 0
    for name in sorted({n for t in truths for n in t}):
        vis = [truths[g.index].get(name, (None, 0.0))[1] for g in logs]
        rep = [_reported(g, name) for g in logs]
        i = 1
        while i < len(logs):
            if vis[i] < HIDDEN <= vis[i - 1] and rep[i - 1]:
                k = 0
                while i + k < len(logs) and vis[i + k] < HIDDEN and rep[i + k]:
                    k += 1
                if i + k < len(logs) and vis[i + k] < HIDDEN:
                    frames.append(k)  # no longer reported while still hidden
                else:
                    kept += 1  # reported until visible again, or to the end
                i += k
            i += 1
    return _event_summary(frames, kept, "kept")


def frames_to_reacquire(logs: list[FrameLog], truths: list[Truth], sharp_from: int | None) -> dict:
    """Frames until a cover is found at 3 px after the swing or after coming back into view."""
    starts: list[tuple[str, int]] = []
    names = sorted({n for t in truths for n in t})
    if sharp_from is not None:
        starts = [(n, sharp_from) for n in names if truths[sharp_from].get(n, (None, 0.0))[1] >= FULL]
    else:
        for name in names:
            hidden = False
            for i, t in enumerate(truths):
                vis = t.get(name, (None, 0.0))[1]
                if vis < HIDDEN:
                    hidden = True
                elif vis >= FULL and hidden:
                    starts.append((name, i))
                    hidden = False
    frames, never = [], 0
    for name, i in starts:
        for k in range(len(logs) - i):
            if _best(logs[i + k].dets, name, truths[i + k][name][0])[0] <= TOLERANCES[0]:
                frames.append(k)
                break
        else:
            never += 1
    return _event_summary(frames, never, "never")


def _event_summary(frames: list[int], censored: int, label: str) -> dict:
    return {
        "events": len(frames) + censored,
        "median": _pct(frames, 50),
        "max": max(frames) if frames else None,
        label: censored,
    }


#: A late frame's cause when its time outside the units was more over the frame's typical such time than any
#: unit was over its prediction.
OUTSIDE_UNITS = "outside units"


def late_cause(units: list[tuple[str, float, float, bool]], outside_ms: float, typical_outside_ms: float) -> str:
    """What made a late frame late: the unit that ran furthest over its prediction (``units``: name, predicted
    ms, actual ms, mandatory; ``"<name> (mandatory)"`` for a unit run whatever its prediction), or
    :data:`OUTSIDE_UNITS` when the frame's time outside its units (``outside_ms``) exceeded the typical
    (``typical_outside_ms``) by more."""
    best, over = OUTSIDE_UNITS, outside_ms - typical_outside_ms
    for name, predicted, actual, mandatory in units:
        if actual - predicted > over:
            best, over = name + (" (mandatory)" if mandatory else ""), actual - predicted
    return best


def late_causes(logs: list[FrameLog]) -> dict[str, int]:
    """Late frames per cause (:func:`late_cause`), most frequent first."""
    counts: dict[str, int] = {}
    for g in logs:
        if g.late and g.cause:
            counts[g.cause] = counts.get(g.cause, 0) + 1
    return dict(sorted(counts.items(), key=lambda kv: -kv[1]))


def scene_metrics(
    logs: list[FrameLog], truths: list[Truth], kind: str, n_frames: int, sharp_from: int | None = None
) -> dict:
    """Every score of one mode in one scene (``logs`` in frame order; ``truths`` of every frame)."""
    out = {
        "found": found_shares(logs, truths),
        "false": false_detections(logs, truths),
        "latency": latency(logs),
        "tracking": tracking(logs),
        "late_causes": late_causes(logs),
    }
    every = len(logs) == n_frames and all(g.index == i for i, g in enumerate(logs))
    if kind == "still":
        out["jitter"] = jitter(logs, truths)
    if kind in ("occlusion", "leave"):
        out["lost"] = frames_to_lost(logs, truths) if every else None
    if kind in ("occlusion", "leave", "pan"):
        out["reacquire"] = frames_to_reacquire(logs, truths, sharp_from) if every else None
    return out
