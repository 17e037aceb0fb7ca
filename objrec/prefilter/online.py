"""A prefilter that learns the camera's scene while it runs.

:class:`OnlinePrefilter` wraps a fitted :class:`~objrec.prefilter.estimator.RegionPrefilter` (the
database's, or one trained on the built-in backgrounds) and refits its trees on what the stream shows:

* **Negatives** are harvested from the live frames: cells far from every verified detection, tracking
  window and unsure candidate (``guard_px`` around each), half of them among the cells the current model
  keeps (its false alarms, the informative ones), into a bounded store (oldest out first).
* **Positives** come from the enrolled models, composited into recent live frames as in training
  (:func:`~objrec.prefilter.scenes.generate_scenes`); their background cells join the negatives.
* **Refits** (:func:`refit_job`) run at most every ``refit_every`` frames in one worker process at the
  lowest scheduling priority, stopped while a frame is processed (:meth:`OnlinePrefilter.hold`,
  :meth:`OnlinePrefilter.release`), so they use the time between frames only. The colour and texture
  tables and the feature parameters stay those of the base model, so the features of a frame mean the
  same to every refit.
  Thresholds keep ``target_recall`` of held-out composites' object area, after grouping into boxes. The
  new trees are swapped in between frames, in one assignment.
* **A change of scene** (the camera moved: over 70% of a 32x24 thumbnail of the frame, outside the boxes
  to keep away from, differs from its running average by more than ``scene_change`` of the grey range,
  for ``scene_change_frames`` frames) drops the harvested negatives and returns to the base model. A
  camera move changes most of the view, an object coming into it only its part; the average follows a
  slow pan where the view did not change.
* **A safety net**: every ``safety_every`` frames the recognizer searches the whole frame as an optional
  unit; a verified detection the prefilter would have rejected (:meth:`OnlinePrefilter.report_miss`)
  halves the threshold, drops the negatives of the last ``refit_every`` frames, adds the detection's cells
  as positives and asks for a refit.

The live model is a plain :class:`RegionPrefilter` (:attr:`OnlinePrefilter.current`), tied to the
database id, that :meth:`RegionPrefilter.save` writes in the usual format.
"""

from __future__ import annotations

import logging
import os
from collections import deque
from dataclasses import dataclass
from typing import Any

import cv2
import numpy as np

from objrec.boxes import regions_to_mask
from objrec.prefilter._refit_worker import RefitWorker
from objrec.prefilter.estimator import RegionPrefilter
from objrec.prefilter.features import CellGrid, cell_features
from objrec.prefilter.fitting import sklearn_positive_proba
from objrec.prefilter.tree import FlatCascade
from objrec.types import Regions

__all__ = ["AdaptParams", "OnlinePrefilter", "adaptive_prefilter", "refit_job"]

log = logging.getLogger("objrec")


@dataclass(frozen=True)
class AdaptParams:
    """Settings of :class:`OnlinePrefilter` (frame counts, cell counts, pixels of the frame)."""

    refit_every: int = 30
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


class _Store:
    """Bounded rows of cell features with a weight and the frame they came from."""

    def __init__(self, size: int) -> None:
        self.rows: deque[tuple[np.ndarray, np.ndarray, int]] = deque()
        self.size, self.n = size, 0

    def add(self, X: np.ndarray, w: np.ndarray, frame: int) -> None:
        if len(X):
            self.rows.append((X, w, frame))
            self.n += len(X)
        while self.n > self.size and self.rows:
            self.n -= len(self.rows.popleft()[0])

    def drop_since(self, frame: int) -> None:
        kept = [r for r in self.rows if r[2] < frame]
        self.rows, self.n = deque(kept), sum(len(r[0]) for r in kept)

    def clear(self) -> None:
        self.rows.clear()
        self.n = 0

    def arrays(self, dim: int) -> tuple[np.ndarray, np.ndarray]:
        if not self.rows:
            return np.zeros((0, dim), np.float32), np.zeros(0, np.float64)
        return np.concatenate([r[0] for r in self.rows]), np.concatenate([r[1] for r in self.rows])


def _cell_boxes(grid: CellGrid, frame_shape: tuple[int, int]) -> np.ndarray:
    """(ny*nx, 4) frame-pixel boxes of the cells, row-major like the features."""
    fh, fw = frame_shape
    wh, ww = float(grid.ys[-1]), float(grid.xs[-1])
    ys, xs = np.asarray(grid.ys, np.float64), np.asarray(grid.xs, np.float64)
    y0, x0 = np.meshgrid(ys[:-1] * fh / wh, xs[:-1] * fw / ww, indexing="ij")
    y1, x1 = np.meshgrid(ys[1:] * fh / wh, xs[1:] * fw / ww, indexing="ij")
    return np.stack([x0.ravel(), y0.ravel(), x1.ravel(), y1.ravel()], 1)


def _near(cells: np.ndarray, boxes: list[tuple[float, float, float, float]], guard: float) -> np.ndarray:
    """Cells within ``guard`` pixels of any box."""
    near = np.zeros(len(cells), bool)
    for x0, y0, x1, y1 in boxes:
        near |= (
            (cells[:, 0] < x1 + guard)
            & (cells[:, 2] > x0 - guard)
            & (cells[:, 1] < y1 + guard)
            & (cells[:, 3] > y0 - guard)
        )
    return near


def _inside(cells: np.ndarray, box: tuple[float, float, float, float]) -> np.ndarray:
    x0, y0, x1, y1 = box
    return (cells[:, 0] < x1) & (cells[:, 2] > x0) & (cells[:, 1] < y1) & (cells[:, 3] > y0)


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
        self.params = params or AdaptParams()
        self.objects = objects
        self.negatives = _Store(self.params.store_size)
        self.positives = _Store(self.params.store_size)  # cells of detections the prefilter missed
        self.live: deque[np.ndarray] = deque(maxlen=self.params.live_frames)
        self.rng = np.random.default_rng(self.params.seed)
        self.frame = 0
        self.refits = 0
        self.refits_taken = 0  # refits whose new trees replaced the live ones
        self.last_refit_frame: int | None = None
        self.backoffs = 0
        self.scene_resets = 0
        self._pending: RegionPrefilter | None = None
        self._worker: RefitWorker | None = None  # started with the first refit
        self._job = (0, 1.0)  # the scene generation and threshold scale the refit in progress started from
        self._token = os.urandom(8).hex()  # names the composites the worker keeps for this prefilter
        self._generation = 0
        self._n_positive = 0
        self._scale = 1.0
        self._reference: np.ndarray | None = None
        self._drift = 0
        self._last: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None  # the frame's X, scores, cell boxes
        self._cells: tuple[Any, np.ndarray] | None = None  # cell boxes of the last grid and frame size

    # -- the prefilter interface -------------------------------------------------------------------
    @property
    def database_id_(self) -> str | None:
        return self.base.database_id_

    def hold(self) -> None:
        """A frame starts: a refit in progress stops until :meth:`release` (it would compete with the frame)."""
        if self._worker is not None:
            self._worker.pause()

    def release(self) -> None:
        """The frame is done: a refit in progress continues, and a finished one is taken for the next frame."""
        if self._worker is not None:
            self._worker.resume()
            self._collect()

    def propose(self, frame: np.ndarray) -> Regions:
        """The live model's regions of ``frame``; a refit finished before this frame is swapped in first."""
        if self._pending is not None:
            self.current, self._pending = self._pending, None
        regions, X, scores, grid, shape = self.current.propose_cells(frame)
        if self._cells is None or self._cells[0] != (grid.shape, shape):
            self._cells = ((grid.shape, shape), _cell_boxes(grid, shape))
        self._last = (X, scores, self._cells[1])
        return regions

    # -- learning ----------------------------------------------------------------------------------
    def observe(
        self,
        frame: np.ndarray,
        found: list[tuple[float, float, float, float]],
    ) -> None:
        """Learn from the frame just processed: ``found`` are the boxes to keep away from (verified
        detections, tracking windows, unsure candidates). Only cheap bookkeeping runs here; refits run in
        the worker process."""
        self.frame += 1
        if self._last is None:
            return
        if self._scene_changed(frame, found):
            self._reset_scene()
            return
        X, scores, cells = self._last
        self._harvest(X, scores, cells, found)
        if self.frame % 4 == 0 or not self.live:
            self.live.append(_half_bgr(frame))
        self._maybe_refit()

    def _harvest(self, X: np.ndarray, scores: np.ndarray, cells: np.ndarray, found: list) -> None:
        far = ~_near(cells, found, float(self.params.guard_px))
        kept = far & (scores >= self.current.threshold_)
        dropped = far & ~kept
        half = self.params.per_frame // 2
        pick = []
        for mask in (kept, dropped):
            idx = np.flatnonzero(mask)
            if len(idx):
                pick.append(self.rng.choice(idx, min(half, len(idx)), replace=False))
        if pick:
            rows = np.concatenate(pick)
            self.negatives.add(X[rows], np.ones(len(rows)), self.frame)

    def _maybe_refit(self) -> None:
        p = self.params
        due = self.last_refit_frame is None or self.frame - self.last_refit_frame >= p.refit_every
        busy = self._worker is not None and self._worker.busy
        if not due or busy or self.negatives.n < p.min_negatives or len(self.live) < 2:
            return
        Xn, _ = self.negatives.arrays(self.base.n_features_in_)
        if len(Xn) > p.fit_negatives:  # a fresh sample of the store each refit: fitting time grows with rows
            Xn = Xn[np.sort(self.rng.choice(len(Xn), p.fit_negatives, replace=False))]
        Xm, _ = self.positives.arrays(self.base.n_features_in_)
        pool = (f"{self._token}:{self._generation}", p.fit_scenes, p.calibration_scenes)
        seed = int(self.rng.integers(1 << 31))
        job = (self.base, self.objects, list(self.live), Xm, Xn, p.refit_scenes, seed, pool, self.current.cascade_)
        self.last_refit_frame = self.frame
        if self._worker is None or not self._worker.alive:
            self._worker = RefitWorker()
        self._worker.submit(job)
        self._job = (self._generation, self._scale)

    def _collect(self, timeout: float | None = 0.0) -> None:
        """Take a finished refit: its trees become the next frame's model (unless the scene changed since)."""
        msg = None if self._worker is None else self._worker.poll(timeout)
        if msg is None:
            return
        generation, scale = self._job
        if msg[0] != "ok":
            log.warning("prefilter refit failed (%s); keeping the current model", msg[1])
            return
        cascade, threshold, n_positive, n_negative, new = msg[1]
        if generation != self._generation or cascade is None:
            return
        self.refits_taken += int(new)
        report = {"online_refit": self.refits + 1, "n_positive": n_positive, "n_negative": n_negative}
        pf = self.base.with_cascade(cascade, threshold * scale, report)
        self._pending, self._n_positive = pf, n_positive
        self.refits += 1

    # -- scene changes and misses ------------------------------------------------------------------
    def _scene_changed(self, frame: np.ndarray, found: list) -> bool:
        t = _thumbnail(frame)
        if self._reference is None or self._reference.shape != t.shape:
            self._reference = t
            return False
        diff = np.abs(t - self._reference)
        diff = diff.mean(axis=2) if diff.ndim == 3 else diff
        away = _away_from(found, frame.shape[:2], diff.shape)
        # The view's 30% least changed: an object the camera did not move with holds less than 70% of it.
        d = float(np.quantile(diff[away] if away.sum() >= diff.size // 5 else diff, 0.3)) / 255.0
        level = self.params.scene_change * 255.0
        if d > self.params.scene_change:
            self._drift += 1  # the reference waits where the view changed: a lasting change keeps counting
            still = (diff <= level)[..., None] if t.ndim == 3 else diff <= level
            self._reference = np.where(still, 0.9 * self._reference + 0.1 * t, self._reference)
        else:
            self._drift = 0
            self._reference = 0.9 * self._reference + 0.1 * t
        return self._drift >= self.params.scene_change_frames

    def _reset_scene(self) -> None:
        self.negatives.clear()
        self.positives.clear()
        self.live.clear()
        self._generation += 1  # a refit in progress learned the old scene
        self.current, self._pending = self.base, None
        self._reference, self._drift = None, 0
        self.last_refit_frame = None
        self.scene_resets += 1

    def reset(self) -> None:
        """Forget everything learned (the base model again, empty stores, frame count 0)."""
        self.wait()
        self._reset_scene()
        self.frame, self.scene_resets, self._scale = 0, 0, 1.0

    def safety_due(self) -> bool:
        """Whether this frame's whole-frame safety search is due (every ``safety_every`` frames)."""
        return self.params.safety_every > 0 and self.frame % self.params.safety_every == self.params.safety_every - 1

    def report_miss(self, box: tuple[float, float, float, float]) -> None:
        """A verified detection in ``box`` (frame pixels) lay outside the kept regions: back off."""
        self._scale *= 0.5
        cur = self.current
        self.current = cur.with_cascade(cur.cascade_, float(cur.threshold_) * 0.5, cur.training_report_)
        self.negatives.drop_since(self.frame - self.params.refit_every)
        if self._last is not None:
            X, _, cells = self._last
            inside = _inside(cells, box)
            self.positives.add(X[inside], np.ones(int(inside.sum())), self.frame)
        self.last_refit_frame = None
        self.backoffs += 1

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


def _region_threshold(pf: RegionPrefilter, scenes: list) -> float:
    """The region-level threshold of ``pf`` for ``target_recall`` of the object area of ``scenes``
    (:func:`~objrec.prefilter.training.calibrate_region_threshold`; the trees run serially here)."""
    from objrec.prefilter.scenes import SceneSet
    from objrec.prefilter.training import SceneCells, calibrate_region_threshold

    images, fracs, masks, xs, sizes = zip(*scenes, strict=True)
    n_objects = [int(m.max() > 0) for m in masks]
    cells = SceneCells(
        SceneSet(list(images), list(fracs), list(masks), n_objects),
        np.concatenate(xs),
        np.concatenate([np.full(len(x), i, np.int64) for i, x in enumerate(xs)]),
        sizes[0],
    )
    return calibrate_region_threshold(pf, cells, range(len(scenes)))


def _composite(base: RegionPrefilter, objects: dict, bg: np.ndarray, seed: int) -> tuple:
    """One or two enrolled objects composited into a live frame (half size) as in training: the work image,
    cell object fractions, coverage mask, cell features and the frame size."""
    from objrec.prefilter.scenes import generate_scenes

    size = (bg.shape[1] * 2, bg.shape[0] * 2)
    sc = generate_scenes(
        objects, [bg], 1, base.work_size, base.cell_size, size, empty_fraction=0.0, max_objects=2, seed=seed
    )
    X, _ = cell_features(sc.images[0], base.cell_size, base.color_lut_, base.texture_lut_, base.feature_params_)
    return sc.images[0], sc.fractions[0], sc.masks[0], np.asarray(X, np.float32), size


_KEPT: dict[tuple[str, str], deque] = {}  # the worker's composites of the scene it last refitted


def _kept(key: str | None, role: str, new: list, size: int) -> list:
    """``new`` composites plus those kept from earlier refits of the same scene (``key``) in the same role
    (``"fit"`` or ``"held"``), the newest ``size``; another key starts again. Making composites is most of
    a refit's work, and a few scenes calibrate a threshold badly (one object the trees score low holds a
    large share of their object area), so the worker keeps them."""
    if key is None or size <= len(new):
        return new
    pool = deque(_KEPT.get((key, role), ()), maxlen=size)
    pool.extend(new)
    for k in [k for k in _KEPT if k[0] != key]:
        del _KEPT[k]
    _KEPT[(key, role)] = pool
    return list(pool)


def refit_job(
    base: RegionPrefilter,
    objects: dict,
    live: list,
    Xm: np.ndarray,
    Xn: np.ndarray,
    n_scenes: int,
    seed: int,
    pool: tuple[str, int, int] | None = None,
    current: FlatCascade | None = None,
) -> tuple[FlatCascade | None, float, int, int, bool]:
    """Fit new trees for the live scene (runs in the worker process).

    ``n_scenes`` scenes composite the enrolled objects into the live frames; their object cells (and
    ``Xm``, cells of missed detections) are the positives, their background cells join the harvested
    negatives ``Xn``. Every third scene is held out. With ``pool = (key, fit, held)`` the scenes join
    those of earlier refits of the same scene, up to ``fit`` and ``held`` of them (:func:`_kept`). The
    stage thresholds keep ``target_recall`` of the held-out positive cells, and the last threshold is then
    chosen on the held-out regions (as in training, after grouping kept cells into boxes) to keep
    ``target_recall`` of their object area.

    The new trees replace ``current`` (the live model's trees) only if, calibrated alike, they reject more
    of the live frames (:func:`_best`).

    Returns
    -------
    (cascade or None, threshold, positives, negatives, whether the cascade is the new one)
    """
    rng = np.random.default_rng(seed)
    made = [
        _composite(base, objects, live[int(rng.integers(len(live)))], int(rng.integers(1 << 31)))
        for _ in range(n_scenes)
    ]
    key, n_fit, n_held = pool if pool is not None else (None, 0, 0)
    fitted = _kept(key, "fit", [sc for i, sc in enumerate(made) if i % 3], n_fit)
    scenes = fitted + _kept(key, "held", made[::3], n_held)
    fit, held_idx = range(len(fitted)), range(len(fitted), len(scenes))
    label = base.label_overlap
    Xp = np.concatenate([scenes[i][3][scenes[i][1] >= label] for i in fit] + [Xm])
    wp = np.concatenate([scenes[i][1][scenes[i][1] >= label] for i in fit] + [np.ones(len(Xm))])
    Xb = np.concatenate([scenes[i][3][scenes[i][1] <= 0.0] for i in fit])
    Xn = np.concatenate([Xn, Xb])
    Xc = np.concatenate([scenes[i][3] for i in held_idx])
    fc = np.concatenate([scenes[i][1] for i in held_idx])
    X = np.concatenate([Xp, Xn, Xc]).astype(np.float32)
    y = np.concatenate([np.ones(len(Xp), np.int64), np.zeros(len(Xn), np.int64), (fc >= label).astype(np.int64)])
    rw = np.concatenate([wp, np.ones(len(Xn)), fc])
    tr, cal = np.arange(len(Xp) + len(Xn)), np.arange(len(Xp) + len(Xn), len(X))
    fitted, _ = base.fit_cascade(X, y, rw, tr, cal, proba=sklearn_positive_proba)
    if fitted is None:
        return None, 0.0, len(Xp), len(Xn), False
    calibration = [scenes[i] for i in held_idx]
    options = [fitted] + ([current] if current is not None else [])
    cascade, threshold = _best(base, options, calibration, live)
    return cascade, threshold, len(Xp), len(Xn), cascade is options[0]


def _best(base: RegionPrefilter, options: list, calibration: list, live: list) -> tuple[FlatCascade, float]:
    """Of the new trees and the live ones, each with its threshold calibrated on the same held-out
    composites (the same object area kept), the one that rejects most of the live frames' area. A refit
    is a fit on a few hundred harvested cells: some come out worse than the model they would replace."""
    cells = [base.frame_features(f) for f in live]  # the features are the same for every option
    best = None
    for cascade in options:
        threshold = _region_threshold(base.with_cascade(cascade, None), calibration)
        pf = base.with_cascade(cascade, threshold)
        kept = [
            pf.cell_regions(np.asarray(X, np.float32), g, shape)[0].area_fraction(shape[1], shape[0])
            for X, g, shape in cells
        ]
        rejected = 1.0 - float(np.mean(kept))
        if best is None or rejected > best[0]:
            best = (rejected, cascade, threshold)
    return best[1], best[2]


def adaptive_prefilter(db: Any, prefilter: Any, status: str, params: AdaptParams | None = None) -> tuple[Any, str]:
    """The :class:`OnlinePrefilter` a recognizer of ``db`` uses, and its status.

    ``prefilter``/``status`` are what :func:`~objrec.prefilter.storage.resolve_prefilter` gave. A
    :class:`RegionPrefilter` is wrapped; with none (``"absent"`` or ``"stale"``) one is first trained on the
    built-in backgrounds, with a progress bar. A prefilter switched off (``"off"``) stays off.
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
    names = list(db.names)
    step = max(1, len(names) // 32)  # at most 32 objects' images are kept for composited positives
    objects = {n: db.image(n) for n in names[::step][:32]}
    return OnlinePrefilter(prefilter, objects, params), f"{status}, adapting"
