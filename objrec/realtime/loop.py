"""The streaming loop: frames from a source through the recognizer, with statistics, overlays, video out."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import cv2
import numpy as np

from objrec.draw import draw_detections
from objrec.fileio import atomic_write_json
from objrec.memory import report as memory_report
from objrec.types import FrameResult

if TYPE_CHECKING:
    from objrec.pose import Camera

__all__ = ["RunStats", "StreamRecognizer", "run_stream", "overlay_lines", "display_available"]


class StreamRecognizer(Protocol):
    """What :func:`run_stream` needs of a recognizer (:class:`~objrec.recognizer.Recognizer`); an ``adapter``
    attribute (an adapting prefilter), where it has one, is reported on too."""

    @property
    def budget_ms(self) -> float | None: ...

    def warmup(self, frame_shape: tuple[int, int] = ...) -> None: ...

    def process(self, frame: np.ndarray, t0: float | None = None, t_frame: float | None = None) -> FrameResult:
        """The result of one ``frame`` (gray or BGR uint8), handed over at ``t0`` (ms on the recognizer's clock,
        default now) at footage time ``t_frame`` (ms, default ``t0``): :meth:`objrec.recognizer.Recognizer.process`."""
        ...


def display_available() -> bool:
    """A window can be opened: a desktop OS, or an X/Wayland display on Linux."""
    import sys

    if sys.platform in ("win32", "darwin"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))


@dataclass
class RunStats:
    """Statistics of a run, in the ``objrec run --stats`` JSON schema (``docs/formats.md``), plus extras.

    Each frame's detections are recorded as drawn: with a recognizer that smooths corners, ``corners`` are the
    smoothed ones and ``raw_corners`` the frame's own beside them (:meth:`objrec.types.Detection.to_json`).

    Attributes
    ----------
    budget_ms : float or None
        The recognizer's frame budget (None: none).
    per_frame : list of dict
        Each frame's record (:meth:`add`).
    stage_ms : dict of str -> float
        Total milliseconds per stage over the run.
    skipped : dict of str -> int
        How many times each unit was left out.
    dropped : int
        Frames the source dropped (a live source's reader keeps only the latest frame).
    wall_s : float
        The run's wall-clock time in seconds.
    adaptation : dict or None
        The adapting prefilter's status at the end (None without one).
    """

    budget_ms: float | None
    per_frame: list[dict[str, Any]] = field(default_factory=list)
    stage_ms: dict[str, float] = field(default_factory=dict)
    skipped: dict[str, int] = field(default_factory=dict)
    dropped: int = 0
    wall_s: float = 0.0
    adaptation: dict[str, Any] | None = None

    def add(self, index: int, r: FrameResult) -> None:
        """Record frame number ``index``'s result ``r`` and add its timings and units left out to the totals."""
        self.per_frame.append(
            {
                "index": int(index),
                "latency_ms": round(r.latency_ms, 3),
                "deadline_met": bool(r.deadline_met),
                "detections": [d.to_json() for d in r.detections],
                "skipped": [s.to_json() for s in r.skipped],
                "prefilter_boxes": r.prefilter_boxes,
                "prefilter_rejected": None if r.prefilter_rejected is None else round(r.prefilter_rejected, 4),
                "lost": [t.to_json() for t in r.lost],
            }
        )
        for k, v in r.timings_ms.items():
            self.stage_ms[k] = self.stage_ms.get(k, 0.0) + v
        for s in r.skipped:
            self.skipped[s.unit] = self.skipped.get(s.unit, 0) + 1

    @property
    def latencies(self) -> np.ndarray:
        return np.array([f["latency_ms"] for f in self.per_frame], np.float64)

    def to_json(self) -> dict[str, Any]:
        lat = self.latencies
        pct = {k: float(np.percentile(lat, q)) if lat.size else 0.0 for k, q in (("p50", 50), ("p90", 90), ("p99", 99))}
        pct["max"] = float(lat.max()) if lat.size else 0.0
        total = sum(self.stage_ms.values()) or 1.0
        return {
            "frames": len(self.per_frame),
            "budget_ms": self.budget_ms,
            "deadline_misses": int(sum(not f["deadline_met"] for f in self.per_frame)),
            "dropped": int(self.dropped),
            "latency_ms": {k: round(v, 3) for k, v in pct.items()},
            "jitter_ms": round(float(lat.std()), 3) if lat.size else 0.0,
            "stage_share": {k: round(v / total, 4) for k, v in sorted(self.stage_ms.items())},
            "memory": memory_report(),
            "prefilter_adaptation": self.adaptation,
            "skipped_units": dict(sorted(self.skipped.items())),
            "wall_s": round(self.wall_s, 3),
            "per_frame": self.per_frame,
        }

    def write(self, path: str | Path) -> None:
        atomic_write_json(path, self.to_json())

    def summary(self) -> str:
        j = self.to_json()
        lat = j["latency_ms"]
        return (
            f"{j['frames']} frames, budget {j['budget_ms']} ms: {j['deadline_misses']} deadline misses, "
            f"{j['dropped']} dropped; latency p50 {lat['p50']:.1f} / p90 {lat['p90']:.1f} / p99 {lat['p99']:.1f} / "
            f"max {lat['max']:.1f} ms"
            + (f"; peak resident memory {j['memory']['peak_rss_mb']:.0f} MiB" if j["memory"]["peak_rss_mb"] else "")
        )


def overlay_lines(
    r: FrameResult, budget_ms: float | None, fps: float | None, adaptation: dict[str, Any] | None = None
) -> list[str]:
    """The text lines drawn over a frame: result ``r``'s latency (and its share of ``budget_ms``, None without
    a budget) with the frame rate ``fps`` (None before it is known), the prefilter's rejected share with the
    ``adaptation`` status of an adapting prefilter (None without one), and the units left out."""
    use = f" ({100 * r.latency_ms / budget_ms:.0f}% of {budget_ms:g} ms)" if budget_ms else ""
    lines = [f"latency {r.latency_ms:.1f} ms{use}" + (f"  {fps:.1f} fps" if fps else "")]
    if r.prefilter_rejected is not None:
        line = f"prefilter: {100 * r.prefilter_rejected:.0f}% of the frame rejected"
        if adaptation is not None:
            last = adaptation.get("last_refit_frame")
            line += f"; {adaptation['refits']} refit(s)" + (f", last at frame {last}" if last is not None else "")
        lines.append(line)
    if r.skipped:
        lines.append("skipped: " + ", ".join(sorted({s.unit for s in r.skipped}))[:80])
    return lines


def run_stream(
    recognizer: StreamRecognizer,
    source: Any,
    max_frames: int | None = None,
    display: bool = False,
    out_video: str | Path | None = None,
    on_result: Callable[[Any, FrameResult], None] | None = None,
    warmup_shape: tuple[int, int] | None = None,
    camera: Camera | None = None,
    widths_m: Mapping[str, float] | None = None,
) -> RunStats:
    """Process ``source`` frame by frame; latency runs from each frame's capture time to its result.

    The recognizer is warmed up (JIT, buffers, cost model) before the first frame, so every frame counts.
    With ``camera``, the drawn frames show the axes of each detection with a pose whose object has a width
    in ``widths_m`` (object name -> metres; see :func:`~objrec.draw.draw_detections`). ``max_frames``: stop
    after that many (None: the source's end); ``display``: show the frames in a window (q or Esc stops);
    ``out_video``: write the drawn frames to that MP4 file; ``on_result``: called with each source frame and
    its result; ``warmup_shape``: the (rows, cols) warmed up at (default 480 x 640).
    """
    recognizer.warmup(warmup_shape or (480, 640))
    stats = RunStats(recognizer.budget_ms)
    writer = None
    window = "objrec" if display else None
    t_start = time.perf_counter()
    last = None
    fps = None
    try:
        for frame in source:
            if max_frames is not None and len(stats.per_frame) >= max_frames:
                break
            r = recognizer.process(frame.image, t0=frame.t_capture, t_frame=frame.footage_ms)
            stats.add(frame.index, r)
            if on_result is not None:
                on_result(frame, r)
            now = time.perf_counter()
            if last is not None:
                fps = 0.9 * fps + 0.1 / max(now - last, 1e-6) if fps else 1.0 / max(now - last, 1e-6)
            last = now
            if window or out_video:
                adapter = getattr(recognizer, "adapter", None)
                lines = overlay_lines(r, recognizer.budget_ms, fps, adapter.status() if adapter is not None else None)
                shown = draw_detections(frame.image, r.detections, lines=lines, camera=camera, widths_m=widths_m)
                if out_video:
                    if writer is None:
                        h, w = shown.shape[:2]
                        writer = cv2.VideoWriter(
                            str(out_video),
                            cv2.VideoWriter.fourcc(*"mp4v"),
                            float(getattr(source, "fps", None) or 30.0),
                            (w, h),
                        )
                        if not writer.isOpened():
                            raise OSError(f"{out_video}: cannot open for writing a video")
                    writer.write(shown)
                if window:
                    cv2.imshow(window, shown)
                    if cv2.waitKey(1) & 0xFF in (ord("q"), 27):
                        break
    finally:
        stats.dropped = int(getattr(source, "dropped", 0))
        stats.wall_s = time.perf_counter() - t_start
        adapter = getattr(recognizer, "adapter", None)
        if adapter is not None:
            stats.adaptation = adapter.status()
        if writer is not None:
            writer.release()
        if window:
            cv2.destroyAllWindows()
        if hasattr(source, "close"):
            source.close()
    return stats
