"""``RegionPrefilter``: a decision tree (or short cascade) on cell features that proposes regions.

The estimator in the scikit-learn sense: :meth:`RegionPrefilter.fit` learns from cell features ``X`` and
labels ``y`` alone, :meth:`~RegionPrefilter.predict_proba` and :meth:`~RegionPrefilter.predict` score
cells, and :meth:`~RegionPrefilter.propose` turns a frame into :class:`~objrec.types.Regions`. Training on
scenes generated from a model database is :func:`objrec.prefilter.training.train_prefilter`; files are
:mod:`objrec.prefilter.storage`; the methods of the same names are thin wrappers over them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from objrec.backend import get_array_module, to_numpy
from objrec.imageio import check_frame, to_bgr
from objrec.prefilter.features import (
    CellGrid,
    FeatureParams,
    cell_features,
    cell_features_xp,
    check_luts,
    work_image,
)
from objrec.prefilter.regions import cells_to_regions
from objrec.prefilter.tree import FlatCascade, FlatTree, cascade_scores
from objrec.types import Failure, Regions

__all__ = ["RegionPrefilter", "calibration_split", "recall_threshold"]


def recall_threshold(scores: np.ndarray, weights: np.ndarray, recall: float) -> float:
    """Largest threshold ``t`` with ``sum(weights[scores >= t]) >= recall * sum(weights)``.

    Returns 0 when there are no scores or no weight (threshold 0 keeps every non-negative score).
    """
    total = float(weights.sum())
    if total <= 0 or len(scores) == 0:
        return 0.0
    order = np.argsort(-scores, kind="stable")
    s, cw = scores[order], np.cumsum(weights[order])
    k = int(np.searchsorted(cw, recall * total - 1e-12 * total))
    return float(s[min(k, len(s) - 1)])


def calibration_split(
    n_samples: int, fraction: float, groups: Any = None, random_state: int | None = 0
) -> tuple[np.ndarray, np.ndarray]:
    """Row indices (fit, calibration): a share ``fraction`` held out to choose thresholds.

    With ``groups`` (e.g. the scene of every cell) whole groups are held out, so thresholds are chosen
    on scenes the trees never saw. With ``fraction == 0`` every row is used for both.
    """
    from sklearn.model_selection import GroupShuffleSplit, ShuffleSplit

    if fraction <= 0:
        every = np.arange(n_samples)
        return every, every
    rows = np.zeros((n_samples, 1))
    if groups is None:
        return next(ShuffleSplit(1, test_size=fraction, random_state=random_state).split(rows))
    groups = np.asarray(groups)
    if groups.shape != (n_samples,):
        raise ValueError(f"groups: expected shape ({n_samples},), got {groups.shape}")
    return next(GroupShuffleSplit(1, test_size=fraction, random_state=random_state).split(rows, groups=groups))


def _check_fit_input(
    X: Any, y: Any, sample_weight: Any, recall_weight: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
    """``X`` float32, ``y`` int64 0/1, sample weights (or None) and recall weights, checked."""
    X = np.asarray(X, dtype=np.float32)
    if X.ndim != 2 or X.shape[0] < 2 or X.shape[1] < 1:
        raise ValueError(f"X: expected a 2-d array with at least 2 rows and 1 column, got shape {X.shape}")
    if np.isinf(X).any():
        raise ValueError("X: contains infinite values (NaN is allowed, inf is not)")
    n = X.shape[0]
    y = np.asarray(y)
    if y.shape != (n,):
        raise ValueError(f"y: expected shape ({n},), got {y.shape}")
    labels = np.unique(y)
    if not set(labels.tolist()) <= {0, 1}:
        raise ValueError(f"y: expected labels 0/1 (or bool), got {labels[:10].tolist()}")
    sw = None if sample_weight is None else np.asarray(sample_weight, np.float64)
    if sw is not None and sw.shape != (n,):
        raise ValueError(f"sample_weight: expected shape ({n},), got {sw.shape}")
    rw = np.asarray(recall_weight, np.float64) if recall_weight is not None else sw
    rw = np.ones(n) if rw is None else rw
    if rw.shape != (n,):
        raise ValueError(f"recall_weight: expected shape ({n},), got {rw.shape}")
    return X, y.astype(np.int64), sw, rw


def _positive_proba(tree: FlatTree, X: np.ndarray) -> np.ndarray:
    return tree.predict_proba(X)[:, tree.positive] if tree.positive >= 0 else np.zeros(len(X))


class RegionPrefilter(BaseEstimator):
    """Reject cells that cannot hold an enrolled object; propose the rest as regions.

    A frame is reduced to a working resolution (longer side ``work_size``) and cut into cells of about
    ``cell_size`` working pixels. Each cell gets cheap features from integral images (gray mean and
    variance, gradient energy, edge and corner density, colour, and colour/texture similarity to the
    enrolled objects, see :mod:`objrec.prefilter.features`). A scikit-learn decision tree, or a short
    cascade of trees (Viola & Jones 2001), scores the cells; its flat node arrays are evaluated for all
    cells in one compiled call that gives exactly ``predict_proba``'s numbers. Kept cells are grouped
    into boxes by :func:`objrec.prefilter.regions.cells_to_regions`.

    Parameters
    ----------
    cell_size : int
        Cell side in working-resolution pixels.
    work_size : int
        Longer side of the working resolution (frames are never upscaled).
    threshold : float or "auto"
        A cell is kept when its score (P(object) of the last stage) is at least this. ``"auto"`` uses
        the threshold chosen at fit time for ``target_recall``. Lower keeps more area (higher recall).
    target_recall : float
        Share of the object area (cells weighted by their object fraction) the fitted thresholds keep
        on held-out calibration samples; split evenly (geometrically) across cascade stages.
    max_depth : int or tuple of int
        Depth of each tree (a tuple gives one per stage).
    cascade : int
        Number of stages; stage ``k + 1`` is fitted on the cells stage ``k`` kept.
    min_samples_leaf : int
    label_overlap : float
        In training on scenes, a cell is positive when at least this fraction of it is object.
    dilate : int
        Kept cells grow by this many cells before grouping.
    min_fill : float
        A group of kept cells whose bounding box is less than this full is split into smaller boxes.
    margin : int
        Pixels added around each box in the frame (before overlapping boxes are merged).
    calibration_fraction : float
        Share of the samples (whole scenes when ``groups`` are given) held out to choose thresholds.
    random_state : int or None

    Attributes
    ----------
    cascade_ : FlatCascade
        The fitted trees as flat arrays (what :meth:`propose` evaluates).
    estimators_ : list of DecisionTreeClassifier or None
        The scikit-learn trees (None after :meth:`load`: files hold arrays only).
    threshold_ : float
        Threshold of the last stage in use.
    stage_thresholds_ : ndarray
        Fitted threshold of every stage.
    n_features_in_ : int
    color_lut_, texture_lut_ : ndarray
        Back-projection tables (log-likelihood ratios) the cell features are computed with.
    feature_params_ : FeatureParams
    database_id_ : str or None
        ``ModelDB.database_id`` of the database it was trained for (None after :meth:`fit` alone).
    object_names_ : list of str
        The objects it was trained for (empty after :meth:`fit` alone).
    training_report_ : dict
        Calibration figures (area recall, rejected share) measured during fitting.

    Notes
    -----
    scikit-learn conventions: the constructor stores parameters only; fitted state ends in ``_`` and is
    set by :meth:`fit` from its arguments alone (refitting forgets the database it was trained for);
    using an unfitted prefilter raises ``sklearn.exceptions.NotFittedError``.

    References
    ----------
    P. Viola and M. Jones, "Rapid object detection using a boosted cascade of simple features",
    CVPR 2001. doi:10.1109/CVPR.2001.990517
    M. J. Swain and D. H. Ballard, "Color indexing", IJCV 7(1), 1991. doi:10.1007/BF00130487

    Examples
    --------
    >>> import numpy as np
    >>> from objrec.prefilter import RegionPrefilter
    >>> rng = np.random.default_rng(0)
    >>> X = rng.random((400, 17)).astype(np.float32)
    >>> y = (X[:, 2] > 0.6).astype(int)
    >>> pf = RegionPrefilter(max_depth=3).fit(X, y)
    >>> bool(np.all(pf.predict_proba(X[:5])[:, 1] >= 0))
    True
    """

    def __init__(
        self,
        cell_size: int = 16,
        work_size: int = 320,
        threshold: float | str = "auto",
        target_recall: float = 0.99,
        max_depth: int | tuple[int, ...] = 8,
        cascade: int = 2,
        min_samples_leaf: int = 50,
        label_overlap: float = 0.25,
        dilate: int = 0,
        min_fill: float = 0.5,
        margin: int = 8,
        calibration_fraction: float = 0.25,
        random_state: int | None = 0,
    ) -> None:
        self.cell_size = cell_size
        self.work_size = work_size
        self.threshold = threshold
        self.target_recall = target_recall
        self.max_depth = max_depth
        self.cascade = cascade
        self.min_samples_leaf = min_samples_leaf
        self.label_overlap = label_overlap
        self.dilate = dilate
        self.min_fill = min_fill
        self.margin = margin
        self.calibration_fraction = calibration_fraction
        self.random_state = random_state

    # -- parameters -----------------------------------------------------------------------------------
    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "cascade_")

    def _check_params(self) -> None:
        """Raise ``ValueError`` naming the first parameter out of range."""

        def positive_int(name: str, v: Any) -> None:
            if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name}: expected a positive integer, got {v!r}")

        positive_int("cell_size", self.cell_size)
        positive_int("work_size", self.work_size)
        positive_int("cascade", self.cascade)
        positive_int("min_samples_leaf", self.min_samples_leaf)
        if self.work_size < 16:
            raise ValueError(f"work_size: expected at least 16, got {self.work_size}")
        if not (self.threshold == "auto" or (isinstance(self.threshold, (int, float)) and 0 <= self.threshold <= 1)):
            raise ValueError(f"threshold: expected 'auto' or a number in [0, 1], got {self.threshold!r}")
        if not 0 < self.target_recall <= 1:
            raise ValueError(f"target_recall: expected a value in (0, 1], got {self.target_recall!r}")
        if not 0 <= self.calibration_fraction < 1:
            raise ValueError(f"calibration_fraction: expected a value in [0, 1), got {self.calibration_fraction!r}")
        if not 0 <= self.min_fill <= 1:
            raise ValueError(f"min_fill: expected a value in [0, 1], got {self.min_fill!r}")
        if not 0 <= self.label_overlap <= 1:
            raise ValueError(f"label_overlap: expected a value in [0, 1], got {self.label_overlap!r}")
        for name in ("dilate", "margin"):
            v = getattr(self, name)
            if not isinstance(v, (int, np.integer)) or v < 0:
                raise ValueError(f"{name}: expected a non-negative integer, got {v!r}")
        self._depths()

    def _depths(self) -> list[int | None]:
        d = self.max_depth
        depths = list(d) if isinstance(d, (tuple, list)) else [d] * int(self.cascade)
        if len(depths) != self.cascade:
            raise ValueError(f"max_depth: expected an int or {self.cascade} values (one per stage), got {d!r}")
        for v in depths:
            if v is not None and (not isinstance(v, (int, np.integer)) or v < 1):
                raise ValueError(f"max_depth: expected positive integers or None, got {d!r}")
        return depths

    # -- fitting --------------------------------------------------------------------------------------
    def fit(
        self,
        X: Any,
        y: Any,
        sample_weight: Any = None,
        groups: Any = None,
        recall_weight: Any = None,
        *,
        calibration: Any = None,
        color_lut: Any = None,
        texture_lut: Any = None,
        feature_params: FeatureParams | None = None,
    ) -> RegionPrefilter:
        """Fit the tree(s) on cell features ``X`` (n_cells, n_features) and labels ``y`` (1 = object).

        Parameters
        ----------
        X : array-like (n_samples, n_features)
            NaN is allowed (scikit-learn's trees learn where missing values go).
        y : array-like (n_samples,) of {0, 1} or bool
        sample_weight : array-like, optional
            Passed to the trees.
        groups : array-like, optional
            Scene id of every sample: calibration holds out whole scenes (:func:`calibration_split`).
        recall_weight : array-like, optional
            Weight of every positive when thresholds are chosen for recall (e.g. its object area;
            default: ``sample_weight`` or 1).
        calibration : array-like of int, optional
            Rows held out to choose the stage thresholds; the trees are fitted on the others. Default:
            drawn by :func:`calibration_split` from ``calibration_fraction``, ``groups`` and
            ``random_state``.
        color_lut, texture_lut : ndarray, optional
            Back-projection tables ``X`` was computed with; :meth:`propose` computes features with them
            too. Default: zero tables, as :func:`~objrec.prefilter.features.cell_features` uses.
        feature_params : FeatureParams, optional
            Per-pixel map parameters ``X`` was computed with (default: ``FeatureParams()``).

        Returns
        -------
        self
        """
        self._check_params()
        X, y, sw, rw = _check_fit_input(X, y, sample_weight, recall_weight)
        cl, tl = check_luts(color_lut, texture_lut)
        n = X.shape[0]
        if calibration is None:
            tr, cal = calibration_split(n, self.calibration_fraction, groups, self.random_state)
        else:
            cal = np.unique(np.asarray(calibration, np.int64))
            if cal.size == 0 or cal[0] < 0 or cal[-1] >= n:
                got = f"{cal[0]}..{cal[-1]}" if cal.size else "none"
                raise ValueError(f"calibration: expected row indices in 0..{n - 1}, got {got}")
            tr = np.setdiff1d(np.arange(n), cal) if cal.size < n else cal
        (trees, thresholds), estimators = self._fit_stages(X, y, sw, rw, tr, cal)
        self._set_fitted(
            FlatCascade.from_trees(trees, thresholds),
            None if self.threshold == "auto" else float(self.threshold),
            X.shape[1],
            cl,
            tl,
            feature_params or FeatureParams(),
            estimators=estimators,
        )
        s = self.cell_scores(X[cal])
        kept, pos, w = s >= self.threshold_, y[cal] == 1, rw[cal]
        self.training_report_ = {
            "n_samples": int(n),
            "n_positive": int(y.sum()),
            "n_calibration": int(len(cal)),
            "calibration_area_recall": float(w[pos & kept].sum() / max(w[pos].sum(), 1e-12)),
            "calibration_negatives_rejected": float((~kept[~pos]).mean()) if (~pos).any() else float("nan"),
            "stage_thresholds": [float(v) for v in self.stage_thresholds_],
            "node_counts": [t.node_count for t in trees],
        }
        return self

    def _fit_stages(
        self,
        X: np.ndarray,
        y: np.ndarray,
        sw: np.ndarray | None,
        rw: np.ndarray,
        tr: np.ndarray,
        cal: np.ndarray,
        proba: Callable[[FlatTree, Any, np.ndarray], np.ndarray] | None = None,
    ) -> tuple[tuple[list[FlatTree], list[float]], list[Any]]:
        """Fit the stages in turn, each on the fit rows the previous ones kept; thresholds from ``cal``.

        ``proba(flat_tree, sklearn_tree, X)`` scores rows for the next stage (default: the compiled flat
        tree, which runs in parallel; a caller on another thread than the frames' passes scikit-learn's
        own ``predict_proba``, which gives the same numbers without Numba's threading layer).
        """
        from sklearn.tree import DecisionTreeClassifier

        score = proba or (lambda flat, _clf, rows: _positive_proba(flat, rows))

        stage_recall = self.target_recall ** (1.0 / self.cascade)
        trees: list[FlatTree] = []
        thresholds: list[float] = []
        estimators = []
        keep_tr = np.ones(len(tr), bool)
        keep_cal = np.ones(len(cal), bool)
        for k, depth in enumerate(self._depths()):
            idx = tr[keep_tr]
            if len(np.unique(y[idx])) < 2 and k > 0:
                break  # earlier stages already separate the classes on the fit rows
            clf = DecisionTreeClassifier(
                max_depth=depth,
                min_samples_leaf=self.min_samples_leaf,
                class_weight="balanced",
                random_state=self.random_state,
            )
            clf.fit(X[idx], y[idx], sample_weight=None if sw is None else sw[idx])
            flat = FlatTree.from_sklearn(clf)
            cal_idx = cal[keep_cal]
            p_cal = score(flat, clf, X[cal_idx])
            pos = y[cal_idx] == 1
            t = recall_threshold(p_cal[pos], rw[cal_idx][pos], stage_recall)
            trees.append(flat)
            estimators.append(clf)
            thresholds.append(t)
            keep_tr &= score(flat, clf, X[tr]) >= t
            keep_cal[keep_cal] = p_cal >= t
        return (trees, thresholds), estimators

    def _set_fitted(
        self,
        cascade: FlatCascade,
        threshold: float | None,
        n_features: int,
        color_lut: np.ndarray,
        texture_lut: np.ndarray,
        feature_params: FeatureParams,
        estimators: list[Any] | None = None,
        database_id: str | None = None,
        object_names: list[str] | None = None,
        training_report: dict[str, Any] | None = None,
    ) -> None:
        """Set every fitted attribute at once (from :meth:`fit` and from a file), so none is left over."""
        self.cascade_ = cascade
        self.estimators_ = estimators
        self.stage_thresholds_ = cascade.stage_thresholds.copy()
        self.threshold_ = float(self.stage_thresholds_[-1] if threshold is None else threshold)
        self.n_features_in_ = int(n_features)
        self.color_lut_, self.texture_lut_ = check_luts(color_lut, texture_lut)
        self.feature_params_ = feature_params
        self.database_id_ = database_id
        self.object_names_ = list(object_names or [])
        self.training_report_ = dict(training_report or {})

    def train(self, db: Any, backgrounds: Any = None, **options: Any) -> RegionPrefilter:
        """Fit on scenes generated from ``db``'s enrolled objects and ``backgrounds``; ``options`` are those of
        :func:`objrec.prefilter.training.train_prefilter` (``n_scenes``, ``frame_size``, ``seed``,
        ``progress``, ``video_step``), which this calls with ``prefilter=self``."""
        from objrec.prefilter.training import train_prefilter

        return train_prefilter(db, backgrounds, prefilter=self, **options)

    # -- inference ------------------------------------------------------------------------------------
    def cell_scores(self, X: Any) -> np.ndarray:
        """Score of every row of cell features (negative: stopped by an early cascade stage)."""
        check_is_fitted(self, "cascade_")
        X = np.asarray(X, dtype=np.float32)
        if X.ndim != 2 or X.shape[1] != self.n_features_in_:
            raise ValueError(f"X: expected shape (n, {self.n_features_in_}), got {X.shape}")
        return cascade_scores(X, self.cascade_)

    def predict_proba(self, X: Any) -> np.ndarray:
        """(n, 2) probabilities [rejected, kept-object] from the compiled cascade (last stage reached)."""
        s = self.cell_scores(X)
        p = np.where(s < 0, s + 1.0, s)
        return np.stack([1.0 - p, p], axis=1)

    def predict(self, X: Any) -> np.ndarray:
        """1 where a cell is kept (score >= ``threshold_``), else 0."""
        return (self.cell_scores(X) >= self.threshold_).astype(np.int64)

    def frame_features(self, frame: Any) -> tuple[Any, CellGrid, tuple[int, int]]:
        """Cell features of a frame: ``(X, grid, (h, w) of the frame)``; CuPy frames stay on the GPU."""
        check_is_fitted(self, "cascade_")
        xp = get_array_module(frame)
        if xp is np:
            frame = to_bgr(check_frame(frame))
        elif frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != xp.uint8:
            raise ValueError(f"frame: expected a BGR uint8 CuPy array (H, W, 3), got {frame.shape} {frame.dtype}")
        small = work_image(frame, self.work_size, xp)
        luts = (self.color_lut_, self.texture_lut_, self.feature_params_)
        if xp is np:
            X, grid = cell_features(small, self.cell_size, *luts)
        else:
            X, grid = cell_features_xp(small, self.cell_size, *luts, xp)
        return X, grid, (int(frame.shape[0]), int(frame.shape[1]))

    def propose(self, frame: Any) -> Regions:
        """Regions of ``frame`` (BGR or gray uint8, NumPy or CuPy) that may hold an enrolled object, best first.

        Boxes are ``(x0, y0, x1, y1)`` frame pixels (x1, y1 exclusive): groups of kept cells, grown by
        ``dilate`` cells and ``margin`` pixels, overlapping boxes merged. A frame with no kept cell gives
        ``Regions.empty()``.
        """
        return self.propose_cells(frame)[0]

    def propose_cells(self, frame: Any) -> tuple[Regions, np.ndarray, np.ndarray, CellGrid, tuple[int, int]]:
        """:meth:`propose` with what it computed on the way: ``(regions, X, scores, grid, frame (h, w))``, the
        cells' features (host float32) and scores in row-major order (what an adapting prefilter learns from)."""
        X, grid, frame_shape = self.frame_features(frame)
        # The trees walk on the host: a frame has a few hundred cells, so their features are one small
        # copy, and the boxes are built on the host anyway.
        X = np.asarray(to_numpy(X), np.float32)
        regions, scores = self.cell_regions(X, grid, frame_shape)
        return regions, X, scores, grid, frame_shape

    def cell_regions(self, X: np.ndarray, grid: CellGrid, frame_shape: tuple[int, int]) -> tuple[Regions, np.ndarray]:
        """Regions of a frame from its cell features (:meth:`frame_features`, on the host), and the cells'
        scores: the second half of :meth:`propose`, for features computed once and scored by several models."""
        scores = self.cell_scores(X)
        regions = cells_to_regions(
            scores.reshape(grid.shape),
            grid,
            frame_shape,
            self.threshold_,
            int(self.dilate),
            float(self.min_fill),
            int(self.margin),
        )
        return regions, scores

    # -- files ----------------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> tuple[Path, Path]:
        """Write ``<stem>.json`` and ``<stem>.npz`` (:func:`objrec.prefilter.storage.save_prefilter`)."""
        from objrec.prefilter.storage import save_prefilter

        return save_prefilter(self, path)

    @classmethod
    def load(cls, path: str | os.PathLike, database_id: str | None = None) -> RegionPrefilter:
        """Read a prefilter written by :meth:`save` (:func:`objrec.prefilter.storage.load_prefilter`)."""
        from objrec.prefilter.storage import load_prefilter

        return load_prefilter(path, database_id)

    @classmethod
    def default_path(cls, db: Any) -> Path:
        """Where a database's prefilter lives (:func:`objrec.prefilter.storage.default_path`)."""
        from objrec.prefilter.storage import default_path

        return default_path(db)

    @classmethod
    def load_for(
        cls, db: Any, path: str | os.PathLike | None = None, on_stale: str = "warn"
    ) -> RegionPrefilter | Failure:
        """The prefilter trained for ``db``, or a falsy :class:`~objrec.types.Failure` saying why not
        (:func:`objrec.prefilter.storage.load_for`).

        Use as ``pf = RegionPrefilter.load_for(db); if pf: regions = pf.propose(frame)``.
        """
        from objrec.prefilter.storage import load_for

        return load_for(db, path, on_stale)
