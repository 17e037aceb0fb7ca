"""A refit of the adapting prefilter for the live scene: what the refit worker process runs.

:class:`RefitSession` holds what refits share, received once: the base prefilter (as plain data, the
form a file holds, :func:`~objrec.prefilter.storage.prefilter_state`), the enrolled objects' images, and
mirrors of the adapting prefilter's stores (harvested negatives, cells of missed detections, recent live
frames), which each job brings up to date with the changes since the previous one (:data:`ADD_NEGATIVES`
and the other operations). :meth:`RefitSession.run` fits new trees (:func:`refit_job`) and returns them as
flat arrays (:meth:`~objrec.prefilter.tree.FlatCascade.to_arrays`).

The trees are scored with scikit-learn's own ``predict_proba`` while they are fitted
(:func:`~objrec.prefilter.fitting.sklearn_positive_proba`), so the worker starts no Numba thread pool of
its own for that.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

import numpy as np

from objrec.prefilter.estimator import RegionPrefilter
from objrec.prefilter.features import cell_features
from objrec.prefilter.fitting import sklearn_positive_proba
from objrec.prefilter.scenes import SceneSet, generate_scenes
from objrec.prefilter.storage import stored_from_state
from objrec.prefilter.training import SceneCells, calibrate_region_threshold
from objrec.prefilter.tree import FlatCascade

__all__ = [
    "ADD_NEGATIVES",
    "ADD_POSITIVES",
    "ADD_LIVE",
    "DROP_SINCE",
    "CLEAR",
    "RowStore",
    "RefitSession",
    "refit_job",
]

#: Store operations a job carries, applied in order: ``(ADD_NEGATIVES, X, frame)``, ``(ADD_POSITIVES, X,
#: frame)``, ``(ADD_LIVE, half-size BGR frame)``, ``(DROP_SINCE, frame)`` (negatives of that frame and later),
#: ``(CLEAR,)`` (every store).
ADD_NEGATIVES, ADD_POSITIVES, ADD_LIVE, DROP_SINCE, CLEAR = "negatives", "positives", "live", "drop_since", "clear"


class RowStore:
    """Bounded rows of cell features with the frame they came from (oldest out first)."""

    def __init__(self, size: int) -> None:
        self.rows: deque[tuple[np.ndarray, int]] = deque()
        self.size, self.n = size, 0

    def add(self, X: np.ndarray, frame: int) -> None:
        """Keep the rows ``X`` of frame number ``frame``, dropping the oldest beyond the store's size."""
        if len(X):
            self.rows.append((X, frame))
            self.n += len(X)
        while self.n > self.size and self.rows:
            self.n -= len(self.rows.popleft()[0])

    def drop_since(self, frame: int) -> None:
        kept = [r for r in self.rows if r[1] < frame]
        self.rows, self.n = deque(kept), sum(len(r[0]) for r in kept)

    def clear(self) -> None:
        self.rows.clear()
        self.n = 0

    def array(self, dim: int) -> np.ndarray:
        if not self.rows:
            return np.zeros((0, dim), np.float32)
        return np.concatenate([r[0] for r in self.rows])

    def sample(self, dim: int, n: int, rng: np.random.Generator) -> np.ndarray:
        """At most ``n`` rows drawn without replacement, in store order (all of them when there are fewer).
        ``dim``: the rows' length (for an empty result); ``rng``: draws the rows."""
        X = self.array(dim)
        return X if len(X) <= n else X[np.sort(rng.choice(len(X), n, replace=False))]


class RefitSession:
    """The worker's side of the adapting prefilter: its base model, objects and store mirrors.

    Parameters
    ----------
    manifest, arrays : dict
        The base prefilter as :func:`~objrec.prefilter.storage.prefilter_state` gives it.
    objects : dict of name -> image
        Enrolled objects' images, composited into live frames for positives.
    store_size, live_frames : int
        Sizes of the stores, as the adapting prefilter's own.
    """

    def __init__(
        self, manifest: dict, arrays: dict, objects: dict[str, np.ndarray], store_size: int, live_frames: int
    ) -> None:
        self.base = RegionPrefilter.from_stored(stored_from_state(manifest, arrays))
        self.objects = objects
        self.negatives = RowStore(store_size)
        self.positives = RowStore(store_size)
        self.live: deque[np.ndarray] = deque(maxlen=live_frames)
        self.pools: dict[tuple[str, str], deque] = {}  # composites kept for the scene last refitted

    def apply(self, ops: Iterable[tuple]) -> None:
        """Bring the stores up to date (:data:`ADD_NEGATIVES` and the other operations, in order)."""
        for op in ops:
            if op[0] == ADD_NEGATIVES:
                self.negatives.add(op[1], op[2])
            elif op[0] == ADD_POSITIVES:
                self.positives.add(op[1], op[2])
            elif op[0] == ADD_LIVE:
                self.live.append(op[1])
            elif op[0] == DROP_SINCE:
                self.negatives.drop_since(op[1])
            elif op[0] == CLEAR:
                self.negatives.clear()
                self.positives.clear()
                self.live.clear()
            else:
                raise ValueError(f"unknown store operation {op[0]!r}")

    def run(self, job: dict[str, Any]) -> dict[str, Any]:
        """Apply the job's store operations and refit.

        ``job`` holds ``ops``, ``seed``, ``fit_negatives``, ``n_scenes``, ``pool`` (``(key, fit, held)``) and
        ``current`` (the live model's cascade as arrays, or None). Returns ``cascade`` (arrays, or None when
        no tree could be fitted), ``threshold``, ``n_positive``, ``n_negative`` and ``new`` (whether the
        cascade is the new one rather than ``current``).
        """
        self.apply(job["ops"])
        rng = np.random.default_rng(job["seed"])
        dim = self.base.n_features_in_
        Xn = self.negatives.sample(dim, int(job["fit_negatives"]), rng)
        current = None if job.get("current") is None else FlatCascade.from_arrays(job["current"])
        cascade, threshold, n_pos, n_neg, new = refit_job(
            self.base,
            self.objects,
            list(self.live),
            self.positives.array(dim),
            Xn,
            int(job["n_scenes"]),
            int(rng.integers(1 << 31)),
            self._kept(job.get("pool")),
            current,
        )
        arrays = None if cascade is None else cascade.to_arrays()
        return {"cascade": arrays, "threshold": threshold, "n_positive": n_pos, "n_negative": n_neg, "new": new}

    def _kept(self, pool: tuple[str, int, int] | None) -> Any:
        """The composites-keeping function of the scene ``pool`` names (None: keep none)."""
        if pool is None:
            return None
        key, n_fit, n_held = pool
        for k in [k for k in self.pools if k[0] != key]:
            del self.pools[k]

        def kept(role: str, new: list) -> list:
            size = n_fit if role == "fit" else n_held
            if size <= len(new):
                return new
            pool = self.pools.setdefault((key, role), deque(maxlen=size))
            pool.extend(new)
            return list(pool)

        return kept


def _region_threshold(pf: RegionPrefilter, scenes: list) -> float:
    """The region-level threshold of ``pf`` for ``target_recall`` of the object area of ``scenes``
    (:func:`~objrec.prefilter.training.calibrate_region_threshold`; the trees run serially here)."""
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
    size = (bg.shape[1] * 2, bg.shape[0] * 2)
    sc = generate_scenes(
        objects, [bg], 1, base.work_size, base.cell_size, size, empty_fraction=0.0, max_objects=2, seed=seed
    )
    X, _ = cell_features(sc.images[0], base.cell_size, base.color_lut_, base.texture_lut_, base.feature_params_)
    return sc.images[0], sc.fractions[0], sc.masks[0], np.asarray(X, np.float32), size


def refit_job(
    base: RegionPrefilter,
    objects: dict,
    live: list,
    Xm: np.ndarray,
    Xn: np.ndarray,
    n_scenes: int,
    seed: int,
    kept: Any = None,
    current: FlatCascade | None = None,
) -> tuple[FlatCascade | None, float, int, int, bool]:
    """Fit new trees for the live scene.

    ``n_scenes`` scenes composite the enrolled objects into the live frames; their object cells (and
    ``Xm``, cells of missed detections) are the positives, their background cells join the harvested
    negatives ``Xn``. Every third scene is held out. ``kept(role, new)`` (role ``"fit"`` or ``"held"``)
    adds the scenes of earlier refits of the same scene: making composites is most of a refit's work, and a
    few scenes calibrate a threshold badly (one object the trees score low holds a large share of their
    object area). The stage thresholds keep ``target_recall`` of the held-out positive cells, and the last
    threshold is then chosen on the held-out regions (as in training, after grouping kept cells into boxes)
    to keep ``target_recall`` of their object area.

    The new trees replace ``current`` (the live model's trees) only if, calibrated alike, they reject more
    of the live frames (:func:`_best`).
    ``base``: the prefilter whose parameters, appearance tables and features the new trees use; ``objects``: the
    enrolled objects' images by name; ``live``: the live frames; ``seed``: seeds the scenes and the fit.

    Returns
    -------
    (cascade or None, threshold, positives, negatives, whether the cascade is the new one)
    """
    rng = np.random.default_rng(seed)
    made = [
        _composite(base, objects, live[int(rng.integers(len(live)))], int(rng.integers(1 << 31)))
        for _ in range(n_scenes)
    ]
    fit_new, held_new = [sc for i, sc in enumerate(made) if i % 3], made[::3]
    fitted = fit_new if kept is None else kept("fit", fit_new)
    scenes = fitted + (held_new if kept is None else kept("held", held_new))
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
    new, _ = base.fit_cascade(X, y, rw, tr, cal, proba=sklearn_positive_proba)
    if new is None:
        return None, 0.0, len(Xp), len(Xn), False
    options = [new] + ([current] if current is not None else [])
    cascade, threshold = _best(base, options, [scenes[i] for i in held_idx], live)
    return cascade, threshold, len(Xp), len(Xn), cascade is new


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
    assert best is not None  # options hold the new trees at least
    return best[1], best[2]
