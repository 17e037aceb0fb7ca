"""A prefilter that learns the camera's scene while it runs.

:class:`OnlinePrefilter` wraps a fitted :class:`~objrec.prefilter.estimator.RegionPrefilter` (the
database's, or one trained on the built-in backgrounds) and refits its trees on what the stream shows:

* **Negatives** are harvested from the live frames: cells far from every verified detection, tracking
  window and unsure candidate (``guard_px`` around each), half of them among the cells the current model
  keeps (its false alarms, the informative ones), into a bounded store (oldest out first).
* **Positives** come from the enrolled models, composited into recent live frames as in training
  (:func:`~objrec.prefilter.scenes.generate_scenes`); their background cells join the negatives.
* **Refits** (:func:`~objrec.prefilter.refit.refit_job`) run in one worker process that gets only otherwise
  idle CPU (:mod:`objrec.prefilter.worker`), at most every ``refit_every`` frames (``first_refit_every``
  while the model is young). The worker holds the base model, the objects and mirrors of the stores; a
  refit sends it only what the stores gained or lost since the last one. The colour and texture tables and
  the feature parameters stay those of the base model, so the features of a frame mean the same to every
  refit. Thresholds keep ``target_recall`` of held-out composites' object area, after grouping into boxes.
  The new trees are swapped in at the start of a frame, in one assignment. A worker that stops is started
  again once; after a second stop the prefilter keeps its last model and says so once.
* **A change of scene** (the camera moved: over 70% of a 32x24 thumbnail of the frame, outside the boxes
  to keep away from, differs from its running average by more than ``scene_change`` of the grey range,
  for ``scene_change_frames`` frames) drops the harvested negatives and returns to the base model. A
  camera move changes most of the view, an object coming into it only its part; the average follows a
  slow pan where the view did not change.
* **A safety net**: every ``safety_every`` frames the recognizer searches the whole frame as an optional
  unit; a verified detection lying mostly outside the proposals (:meth:`OnlinePrefilter.found_in_safety_search`)
  halves the threshold, drops the negatives of the last ``refit_every`` frames, adds the detection's cells
  as positives and asks for a refit.

A frame's data travels explicitly: :meth:`OnlinePrefilter.propose` returns :class:`LiveRegions`, regions
with the cells they were made from, which :meth:`OnlinePrefilter.observe` learns from. The live model is a
plain :class:`RegionPrefilter` (:attr:`OnlinePrefilter.current`), tied to the database id, that
:meth:`RegionPrefilter.save` writes in the usual format.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np

from objrec.boxes import outline_box, outside_share, regions_to_mask
from objrec.prefilter.estimator import RegionPrefilter
from objrec.prefilter.features import CellGrid
from objrec.prefilter.refit import ADD_LIVE, ADD_NEGATIVES, ADD_POSITIVES, CLEAR, DROP_SINCE, RowStore
from objrec.prefilter.storage import prefilter_state
from objrec.prefilter.tree import FlatCascade
from objrec.prefilter.worker import RefitWorker
from objrec.types import Regions

__all__ = ["AdaptParams", "LiveRegions", "OnlinePrefilter", "adaptive_prefilter"]

log = logging.getLogger("objrec")

Box = tuple[float, float, float, float]


@dataclass(frozen=True)
class AdaptParams:
    """Settings of :class:`OnlinePrefilter` (frame counts, cell counts, pixels of the frame).

    The first ``first_refits`` refits of a scene are due every ``first_refit_every`` frames, later ones every
    ``refit_every``: a young model gains most from each refit, and a refit costs a fraction of a second of
    otherwise idle CPU.

    Attributes
    ----------
    refit_every, first_refits, first_refit_every : int
        See above.
    min_negatives : int
        A refit waits until this many negative cells were harvested.
    store_size : int
        The most cell rows each store (harvested negatives, cells of missed detections) keeps, oldest out first.
    fit_negatives : int
        Harvested negatives a refit samples.
    per_frame : int
        Negative cells harvested per frame (half of them kept by the live model, half rejected), away from the
        objects found.
    refit_scenes : int
        Scenes a refit composites the enrolled objects into the live frames for.
    fit_scenes, calibration_scenes : int
        The composites kept from earlier refits of the same scene, for fitting and for calibration.
    live_frames : int
        The recent frames kept to composite into.
    guard_px : int
        Harvested negatives keep this many pixels away from objects found or tracked.
    safety_every : int
        Frames between whole-frame safety searches (0: none).
    scene_change, scene_change_frames : float, int
        The camera has moved when over 70% of the view has changed by more than ``scene_change`` of full scale
        for ``scene_change_frames`` frames in a row.
    seed : int
        Seeds the harvest's draws.
    """

    refit_every: int = 30
    first_refits: int = 3
    first_refit_every: int = 10
    min_negatives: int = 600
    store_size: int = 12000
    fit_negatives: int = 4000
    per_frame: int = 48
    refit_scenes: int = 6
    fit_scenes: int = 16
    calibration_scenes: int = 24
    live_frames: int = 12
    guard_px: int = 24
    safety_every: int = 15
    scene_change: float = 0.08
    scene_change_frames: int = 3
    seed: int = 0


@dataclass(frozen=True, eq=False)
class LiveRegions(Regions):
    """The regions :meth:`OnlinePrefilter.propose` gives, with the cells they were made from.
    ``boxes`` and ``scores`` are those of :class:`~objrec.types.Regions`.

    Attributes
    ----------
    features : (n_cells, n_features) float32
        The frame's cell features, row-major.
    cell_scores : (n_cells,) float64
        The live model's score of every cell.
    cell_boxes : (n_cells, 4) float64
        Every cell's box in frame pixels.
    """

    features: np.ndarray = field(repr=False)
    cell_scores: np.ndarray = field(repr=False)
    cell_boxes: np.ndarray = field(repr=False)


def _cell_boxes(grid: CellGrid, frame_shape: tuple[int, int]) -> np.ndarray:
    """(ny*nx, 4) frame-pixel boxes of the cells, row-major like the features."""
    fh, fw = frame_shape
    wh, ww = float(grid.ys[-1]), float(grid.xs[-1])
    ys, xs = np.asarray(grid.ys, np.float64), np.asarray(grid.xs, np.float64)
    y0, x0 = np.meshgrid(ys[:-1] * fh / wh, xs[:-1] * fw / ww, indexing="ij")
    y1, x1 = np.meshgrid(ys[1:] * fh / wh, xs[1:] * fw / ww, indexing="ij")
    return np.stack([x0.ravel(), y0.ravel(), x1.ravel(), y1.ravel()], 1)


def near_boxes(cells: np.ndarray, boxes: Sequence[Box], guard: float) -> np.ndarray:
    """Which cells (rows of ``(x0, y0, x1, y1)``) lie within ``guard`` pixels of any box."""
    near = np.zeros(len(cells), bool)
    for x0, y0, x1, y1 in boxes:
        near |= (
            (cells[:, 0] < x1 + guard)
            & (cells[:, 2] > x0 - guard)
            & (cells[:, 1] < y1 + guard)
            & (cells[:, 3] > y0 - guard)
        )
    return near


def _half_bgr(frame: np.ndarray) -> np.ndarray:
    """A half-size BGR copy of a frame, kept as a background for composited positives."""
    small = cv2.resize(frame, (frame.shape[1] // 2, frame.shape[0] // 2), interpolation=cv2.INTER_AREA)
    return small if small.ndim == 3 else cv2.cvtColor(small, cv2.COLOR_GRAY2BGR)


def _thumbnail(frame: np.ndarray) -> np.ndarray:
    return cv2.resize(frame, (32, 24), interpolation=cv2.INTER_AREA).astype(np.float32)


def _away_from(boxes: list, frame_shape: tuple[int, int], shape: tuple[int, int]) -> np.ndarray:
    """Pixels of a ``shape`` thumbnail of a ``frame_shape`` frame outside every box (frame pixels)."""
    if not boxes:
        return np.ones(shape, bool)
    scale = np.array([shape[1] / frame_shape[1], shape[0] / frame_shape[0]] * 2)
    b = np.asarray(boxes, np.float64).reshape(-1, 4) * scale
    outward = np.concatenate([np.floor(b[:, :2]), np.ceil(b[:, 2:])], axis=1).astype(np.int64)
    return ~regions_to_mask(Regions.from_boxes([tuple(r) for r in outward]), shape)


class SceneChange:
    """Whether the camera moved: a lasting difference of most of the view from its running average."""

    def __init__(self, level: float, frames: int) -> None:
        self.level, self.frames = level, frames
        self.reference: np.ndarray | None = None
        self.drift = 0

    def reset(self) -> None:
        self.reference, self.drift = None, 0

    def changed(self, frame: np.ndarray, keep_away: list) -> bool:
        """Update with ``frame``; True once over 70% of the view outside ``keep_away`` boxes has differed for
        ``frames`` frames in a row."""
        t = _thumbnail(frame)
        if self.reference is None or self.reference.shape != t.shape:
            self.reference = t
            return False
        diff = np.abs(t - self.reference)
        diff = diff.mean(axis=2) if diff.ndim == 3 else diff
        away = _away_from(keep_away, frame.shape[:2], diff.shape)
        # The view's 30% least changed: an object the camera did not move with holds less than 70% of it.
        d = float(np.quantile(diff[away] if away.sum() >= diff.size // 5 else diff, 0.3)) / 255.0
        level = self.level * 255.0
        if d > self.level:
            self.drift += 1  # the reference waits where the view changed: a lasting change keeps counting
            still = (diff <= level)[..., None] if t.ndim == 3 else diff <= level
            self.reference = np.where(still, 0.9 * self.reference + 0.1 * t, self.reference)
        else:
            self.drift = 0
            self.reference = 0.9 * self.reference + 0.1 * t
        return self.drift >= self.frames


class OnlinePrefilter:
    """A :class:`RegionPrefilter` that adapts to the live scene (see the module documentation).

    Parameters
    ----------
    base : RegionPrefilter
        Fitted; the starting model and the one a change of scene returns to.
    objects : dict of name -> image
        Enrolled model images, composited into live frames for positives.
    params : AdaptParams, optional
    """

    def __init__(self, base: RegionPrefilter, objects: dict[str, np.ndarray], params: AdaptParams | None = None):
        if not objects:
            raise ValueError("objects: need at least one enrolled object image to adapt a prefilter")
        self.base = base
        self.current = base
        self.params = p = params or AdaptParams()
        self.objects = objects
        self.negatives = RowStore(p.store_size)
        self.positives = RowStore(p.store_size)  # cells of detections the prefilter missed
        self.live: deque[np.ndarray] = deque(maxlen=p.live_frames)
        self.scene = SceneChange(p.scene_change, p.scene_change_frames)
        self.rng = np.random.default_rng(p.seed)
        self.frame = 0  # frames observed: one past the stream index of the last (observe)
        self.refits = 0
        self.refits_taken = 0  # refits whose new trees replaced the live ones
        self.last_refit_frame: int | None = None
        self.backoffs = 0
        self.scene_resets = 0
        self.worker_stops = 0  # times the refit worker ended unasked
        self._pending: RegionPrefilter | None = None
        self._worker: RefitWorker | None = None  # started with the first refit
        self._outbox: list[tuple] = []  # store changes the worker has not been sent yet
        self._job = (0, 1.0)  # the scene generation and threshold scale the refit in progress started from
        self._token = os.urandom(8).hex()  # names the composites the worker keeps for this prefilter
        self._generation = 0
        self._scene_refits = 0  # refits before this scene's first
        self._n_positive = 0
        self._scale = 1.0
        self._cells: tuple[Any, np.ndarray] | None = None  # cell boxes of the last grid and frame size

    @property
    def database_id_(self) -> str | None:
        return self.base.database_id_

    @property
    def adapting(self) -> bool:
        """False once the refit worker stopped twice: the last model is kept from then on."""
        return self.worker_stops < 2

    def propose(self, frame: np.ndarray) -> LiveRegions:
        """The live model's regions of ``frame`` with their cells; a refit finished before this frame is
        swapped in first."""
        self._collect()
        if self._pending is not None:
            self.current, self._pending = self._pending, None
        regions, X, scores, grid, shape = self.current.propose_cells(frame)
        if self._cells is None or self._cells[0] != (grid.shape, shape):
            self._cells = ((grid.shape, shape), _cell_boxes(grid, shape))
        return LiveRegions(regions.boxes, regions.scores, X, scores, self._cells[1])

    # -- learning ----------------------------------------------------------------------------------
    def observe(
        self,
        frame: np.ndarray,
        proposals: Regions | None,
        detected_corners: Sequence[np.ndarray] = (),
        avoid_boxes: Sequence[Box] = (),
        index: int | None = None,
    ) -> None:
        """Learn from the frame just processed. Only cheap bookkeeping runs here; refits run in the worker
        process.

        Parameters
        ----------
        frame : ndarray
            The frame (gray or BGR uint8).
        proposals : LiveRegions or None
            What :meth:`propose` gave for it (None or plain regions: nothing to learn, the frame counts).
        detected_corners : sequence of (4, 2) arrays
            Outlines of the frame's verified detections: their boxes are kept away from.
        avoid_boxes : sequence of (x0, y0, x1, y1)
            Other boxes to keep away from (tracking windows, unsure candidates).
        index : int, optional
            The frame's index in its stream (a recognizer's, :class:`~objrec.realtime.frame.StreamState`), which
            the adaptation's frame count (:attr:`frame`) follows; default: the frame after the last observed.
        """
        self.frame = self.frame + 1 if index is None else index + 1
        if not isinstance(proposals, LiveRegions):
            return
        h, w = frame.shape[:2]
        keep_away = [tuple(b) for b in avoid_boxes]
        keep_away += [b for c in detected_corners if (b := outline_box(np.asarray(c), 0.0, w, h)) is not None]
        if self.scene.changed(frame, keep_away):
            self._reset_scene()
            return
        self._harvest(proposals, keep_away)
        if self.frame % 4 == 0 or not self.live:
            self.live.append(_half_bgr(frame))
            self._outbox.append((ADD_LIVE, self.live[-1]))
        self._maybe_refit()

    def found_in_safety_search(
        self, proposals: Regions | None, corners_list: Sequence[np.ndarray], shape: tuple[int, int]
    ) -> int:
        """Verified detections of the whole-frame safety search (their outlines, ``shape`` the frame's (h, w)):
        each lying mostly (over half its box) outside ``proposals`` is a miss (:meth:`report_miss`).
        Returns the number of misses.
        ``corners_list``: the detections' outlines, (4, 2) frame points each."""
        h, w = shape[:2]
        kept = proposals if proposals is not None else Regions.empty()
        misses = 0
        for corners in corners_list:
            box = outline_box(np.asarray(corners), 0.0, w, h)
            if box is not None and outside_share(box, kept, (h, w)) > 0.5:
                self.report_miss(box, proposals)
                misses += 1
        return misses

    def report_miss(self, box: Box, proposals: Regions | None = None) -> None:
        """A verified detection in ``box`` (frame pixels) lay outside the kept regions: back off (the
        threshold halves, recent negatives go, the detection's cells in ``proposals`` become positives)."""
        self._scale *= 0.5
        cur = self.current
        self.current = cur.with_cascade(cur.cascade_, float(cur.threshold_) * 0.5, cur.training_report_)
        since = self.frame - self.params.refit_every
        self.negatives.drop_since(since)
        self._outbox.append((DROP_SINCE, since))
        if isinstance(proposals, LiveRegions):
            inside = near_boxes(proposals.cell_boxes, [box], 0.0)
            self.positives.add(proposals.features[inside], self.frame)
            self._outbox.append((ADD_POSITIVES, proposals.features[inside], self.frame))
        self.last_refit_frame = None
        self.backoffs += 1

    def safety_due(self, index: int | None = None) -> bool:
        """Whether the whole-frame safety search of frame ``index`` (of the stream, as :meth:`observe` is given
        it; default: the frame after the last observed) is due (every ``safety_every`` frames)."""
        i = self.frame if index is None else index
        return self.params.safety_every > 0 and i % self.params.safety_every == self.params.safety_every - 1

    def _harvest(self, proposals: LiveRegions, keep_away: list) -> None:
        far = ~near_boxes(proposals.cell_boxes, keep_away, float(self.params.guard_px))
        kept = far & (proposals.cell_scores >= self.current.threshold_)
        dropped = far & ~kept
        half = self.params.per_frame // 2
        pick = []
        for mask in (kept, dropped):
            idx = np.flatnonzero(mask)
            if len(idx):
                pick.append(self.rng.choice(idx, min(half, len(idx)), replace=False))
        if pick:
            rows = proposals.features[np.concatenate(pick)]
            self.negatives.add(rows, self.frame)
            self._outbox.append((ADD_NEGATIVES, rows, self.frame))

    # -- refits --------------------------------------------------------------------------------------
    def _maybe_refit(self) -> None:
        p = self.params
        young = self.refits - self._scene_refits < p.first_refits
        every = min(p.first_refit_every, p.refit_every) if young else p.refit_every
        due = self.last_refit_frame is None or self.frame - self.last_refit_frame >= every
        busy = self._worker is not None and self._worker.busy
        if not due or busy or self.negatives.n < p.min_negatives or len(self.live) < 2 or not self.adapting:
            return
        job = {
            "seed": int(self.rng.integers(1 << 31)),
            "fit_negatives": p.fit_negatives,
            "n_scenes": p.refit_scenes,
            "pool": (f"{self._token}:{self._generation}", p.fit_scenes, p.calibration_scenes),
            "current": self.current.cascade_.to_arrays(),
        }
        self.last_refit_frame = self.frame
        if self._worker is not None and not self._worker.alive:
            self._worker_stopped("the prefilter's refit worker stopped")
            if not self.adapting:
                return
        if self._worker is None:
            self._start_worker()
        assert self._worker is not None  # _start_worker starts one (or raises)
        job["ops"], self._outbox = self._outbox, []
        if self._worker.submit(job):
            self._job = (self._generation, self._scale)
        else:
            self._worker_stopped("the prefilter's refit worker stopped")

    def _start_worker(self) -> None:
        """Start the worker with the base model, the objects and the stores as they are now."""
        manifest, arrays = prefilter_state(self.base)
        p = self.params
        start = {"manifest": manifest, "arrays": arrays, "objects": self.objects}
        self._worker = RefitWorker({**start, "store_size": p.store_size, "live_frames": p.live_frames})
        ops: list[tuple] = [(ADD_NEGATIVES, X, f) for X, f in self.negatives.rows]
        ops += [(ADD_POSITIVES, X, f) for X, f in self.positives.rows] + [(ADD_LIVE, img) for img in self.live]
        self._outbox = ops

    def _collect(self, timeout: float | None = 0.0) -> None:
        """Take a finished refit: its trees become the next frame's model (unless the scene changed since)."""
        msg = None if self._worker is None else self._worker.poll(timeout)
        if msg is None:
            return
        generation, scale = self._job
        if msg[0] == "crashed":
            self._worker_stopped(msg[1])
            return
        if msg[0] != "ok":
            log.warning("prefilter refit failed (%s); keeping the current model", msg[1])
            return
        r = msg[1]
        if generation != self._generation or r["cascade"] is None:
            return
        self.refits_taken += int(r["new"])
        report = {"online_refit": self.refits + 1, "n_positive": r["n_positive"], "n_negative": r["n_negative"]}
        cascade = FlatCascade.from_arrays(r["cascade"])
        self._pending = self.base.with_cascade(cascade, r["threshold"] * scale, report)
        self._n_positive = r["n_positive"]
        self.refits += 1

    def _worker_stopped(self, why: str) -> None:
        """The worker process ended unasked: another starts at the next refit, once; after a second stop the
        prefilter keeps its current model (and says so, once)."""
        self.worker_stops += 1
        self.last_refit_frame = None
        if self._worker is not None:
            worker, self._worker = self._worker, None
            worker.close()
        if self.adapting:
            log.info("%s; starting another for the next refit", why)
        else:
            log.warning("%s again; the prefilter stops adapting and keeps its current model", why)

    # -- scene changes -------------------------------------------------------------------------------
    def _reset_scene(self) -> None:
        self.negatives.clear()
        self.positives.clear()
        self.live.clear()
        self._outbox.append((CLEAR,))
        self._generation += 1  # a refit in progress learned the old scene
        self._scene_refits = self.refits
        self.current, self._pending = self.base, None
        self.scene.reset()
        self.last_refit_frame = None
        self.scene_resets += 1

    def reset(self) -> None:
        """Forget everything learned (the base model again, empty stores, frame count 0)."""
        self.wait()
        self._reset_scene()
        self.frame, self.scene_resets, self._scale = 0, 0, 1.0

    def status(self) -> dict[str, Any]:
        """Refits, the frame of the last one, store sizes, back-offs and scene resets, the live threshold."""
        return {
            "refits": self.refits,
            "refits_taken": self.refits_taken,
            "last_refit_frame": self.last_refit_frame,
            "negatives": self.negatives.n,
            "positives": self._n_positive,
            "backoffs": self.backoffs,
            "scene_resets": self.scene_resets,
            "threshold": float(self.current.threshold_),
            "adapting": self.adapting,
        }

    def wait(self, timeout: float | None = None) -> None:
        """Wait for a refit in progress and take it (tests, and before saving); the next frame uses it."""
        if self._worker is not None and self._worker.busy:
            self._collect(timeout)

    def close(self) -> None:
        """End the worker process (a later refit starts another)."""
        if self._worker is not None:
            worker, self._worker = self._worker, None
            worker.close()


def adaptive_prefilter(db: Any, prefilter: Any, status: str, params: AdaptParams | None = None) -> tuple[Any, str]:
    """The :class:`OnlinePrefilter` a recognizer of ``db`` uses, and its status.

    ``prefilter``/``status`` are what :func:`~objrec.prefilter.resolve.resolve_prefilter` gave. A
    :class:`RegionPrefilter` is wrapped; with none (``"absent"`` or ``"stale"``) one is first trained on the
    built-in backgrounds, with a progress bar. A prefilter switched off (``"off"``) stays off.
    ``params``: the adaptation's settings (default: :class:`AdaptParams`'s).
    """
    if status == "off":
        return None, "off"
    if isinstance(prefilter, OnlinePrefilter):
        return prefilter, status
    if prefilter is None:
        import sys

        print(f"objrec: training a prefilter for {db.path} on the built-in backgrounds (first use)", file=sys.stderr)
        prefilter, status = RegionPrefilter().train(db, None, progress=True), "trained"
    if not isinstance(prefilter, RegionPrefilter):
        raise ValueError(f"adapt_prefilter: needs a RegionPrefilter to adapt, got {type(prefilter).__name__}")
    names = list(db.records)  # every view of every object
    step = max(1, len(names) // 32)  # at most 32 objects' images are kept for composited positives
    objects = {n: db.image(n) for n in names[::step][:32]}
    return OnlinePrefilter(prefilter, objects, params), f"{status}, adapting"
