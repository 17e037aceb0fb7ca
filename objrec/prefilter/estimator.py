"""``RegionPrefilter``: a decision tree (or short cascade) on cell features that proposes regions.

The estimator in the scikit-learn sense: :meth:`RegionPrefilter.fit` learns from cell features ``X`` and
labels ``y`` alone (the stages are fitted by :mod:`objrec.prefilter.fitting`),
:meth:`~RegionPrefilter.predict_proba` and :meth:`~RegionPrefilter.predict` score cells, and
:meth:`~RegionPrefilter.propose` turns a frame into :class:`~objrec.types.Regions`. Training on scenes
generated from a model database is :func:`train_prefilter` (:mod:`objrec.prefilter.training`); files are
:mod:`objrec.prefilter.storage`; the methods of the same names are thin wrappers over them.
:func:`~objrec.prefilter.resolve.resolve_prefilter` is the prefilter a recognizer uses.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
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
from objrec.prefilter.fitting import (
    calibration_report,
    check_fit_input,
    check_params,
    fit_and_calibration_rows,
    fit_stages,
    positive_proba,
)
from objrec.prefilter.regions import cells_to_regions
from objrec.prefilter.storage import PrefilterFiles
from objrec.prefilter.training import fit_to_database
from objrec.prefilter.tree import FlatCascade, FlatTree, cascade_scores
from objrec.types import Regions

__all__ = ["RegionPrefilter", "train_prefilter"]


class RegionPrefilter(PrefilterFiles, BaseEstimator):
    """Reject cells that cannot hold an enrolled object; propose the rest as regions.

    A frame is reduced to a working resolution (longer side ``work_size``) and cut into cells of about
    ``cell_size`` working pixels, each with cheap features from integral images
    (:mod:`objrec.prefilter.features`). A scikit-learn decision tree, or a short cascade of trees (Viola &
    Jones 2001), scores the cells; its flat node arrays are evaluated for all cells in one compiled call that
    gives exactly ``predict_proba``'s numbers. Kept cells are grouped into boxes
    (:func:`objrec.prefilter.regions.cells_to_regions`).

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
    scikit-learn conventions: the constructor stores parameters only; fitted state ends in ``_`` and is set
    at once by :meth:`set_fitted` (from :meth:`fit`'s arguments alone, a file, or a refit); using an unfitted
    prefilter raises ``sklearn.exceptions.NotFittedError``.

    References
    ----------
    P. Viola and M. Jones, "Rapid object detection using a boosted cascade of simple features",
    CVPR 2001. doi:10.1109/CVPR.2001.990517

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

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "cascade_")

    def validate_params(self) -> None:
        """Raise ``ValueError`` naming the first parameter out of range (:func:`.fitting.check_params`)."""
        check_params(self.get_params())

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
            Scene id of every sample: calibration holds out whole scenes (:func:`.fitting.calibration_split`).
        recall_weight : array-like, optional
            Weight of every positive when thresholds are chosen for recall (e.g. its object area;
            default: ``sample_weight`` or 1).
        calibration : array-like of int, optional
            Rows held out to choose the stage thresholds, the trees fitted on the others (default: drawn
            from ``calibration_fraction``, ``groups`` and ``random_state``).
        color_lut, texture_lut : ndarray, optional
            Back-projection tables ``X`` was computed with; :meth:`propose` computes features with them
            too. Default: zero tables, as :func:`~objrec.prefilter.features.cell_features` uses.
        feature_params : FeatureParams, optional
            Per-pixel map parameters ``X`` was computed with (default: ``FeatureParams()``).

        Returns
        -------
        self
        """
        self.validate_params()
        X, y, sw, rw = check_fit_input(X, y, sample_weight, recall_weight)
        cl, tl = check_luts(color_lut, texture_lut)
        tr, cal = fit_and_calibration_rows(len(X), calibration, self.calibration_fraction, groups, self.random_state)
        cascade, estimators = self.fit_cascade(X, y, rw, tr, cal, sample_weight=sw)
        assert cascade is not None  # fit_stages always fits the first stage
        threshold = None if self.threshold == "auto" else float(self.threshold)
        self.set_fitted(cascade, threshold, X.shape[1], cl, tl, feature_params or FeatureParams(), estimators)
        scores = self.cell_scores(X[cal])
        n = (len(X), y.sum())
        self.training_report_ = calibration_report(scores, y[cal], rw[cal], cascade, self.threshold_, n)
        return self

    def fit_cascade(
        self,
        X: np.ndarray,
        y: np.ndarray,
        recall_weight: np.ndarray,
        fit_rows: np.ndarray,
        calibration_rows: np.ndarray,
        sample_weight: np.ndarray | None = None,
        proba: Callable[[FlatTree, Any, np.ndarray], np.ndarray] = positive_proba,
    ) -> tuple[FlatCascade | None, list[Any]]:
        """The stages this prefilter's parameters describe, fitted on rows ``fit_rows`` of checked ``X``
        (float32) and ``y`` (0/1), each stage's threshold chosen on ``calibration_rows``
        (:func:`~objrec.prefilter.fitting.fit_stages`); fitted state is left as it was.
        ``recall_weight``: the rows' recall weights; ``sample_weight``: fit weights (None: equal); ``proba``: as there.

        Returns
        -------
        (FlatCascade or None, scikit-learn trees)
            None when no stage could be fitted.
        """
        trees, thresholds, estimators = fit_stages(
            X, y, sample_weight, recall_weight, fit_rows, calibration_rows, self.get_params(), proba
        )
        return (FlatCascade.from_trees(trees, thresholds) if trees else None), estimators

    def set_fitted(
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
    ) -> RegionPrefilter:
        """Set every fitted attribute at once, so none is left over from an earlier fit; returns self. Each of
        ``cascade``, ``estimators``, ``color_lut``, ``texture_lut``, ``feature_params``, ``database_id``,
        ``object_names``, ``training_report`` becomes the attribute of its name with a trailing ``_``, ``n_features``
        becomes ``n_features_in_``; ``threshold`` None takes the last stage's threshold."""
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
        return self

    def with_cascade(
        self, cascade: FlatCascade, threshold: float | None, training_report: dict[str, Any] | None = None
    ) -> RegionPrefilter:
        """A copy with other trees ``cascade`` and threshold (None: the last stage's), a new ``training_report``
        and the same parameters, appearance tables, feature parameters, database and objects: what a refit for
        the live scene makes."""
        same = (self.n_features_in_, self.color_lut_, self.texture_lut_, self.feature_params_)
        pf = copy.copy(self)
        return pf.set_fitted(cascade, threshold, *same, None, self.database_id_, self.object_names_, training_report)

    def train(self, db: Any, backgrounds: Any = None, **options: Any) -> RegionPrefilter:
        """Fit on scenes generated from ``db``'s enrolled objects and ``backgrounds``; ``options`` are those of
        :func:`train_prefilter` (``n_scenes``, ``frame_size``, ``seed``, ``progress``, ``video_step``)."""
        return fit_to_database(self, db, backgrounds, **options)

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
        cs, luts = self.cell_size, (self.color_lut_, self.texture_lut_, self.feature_params_)
        X, grid = cell_features(small, cs, *luts) if xp is np else cell_features_xp(small, cs, *luts, xp)
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
        """Regions of a frame of ``frame_shape`` from its cell features ``X`` (:meth:`frame_features`, on the host)
        on ``grid``, and the cells' scores: the second half of :meth:`propose`, for features computed once and
        scored by several models."""
        scores = self.cell_scores(X)
        grouping = (self.threshold_, int(self.dilate), float(self.min_fill), int(self.margin))
        regions = cells_to_regions(scores.reshape(grid.shape), grid, frame_shape, *grouping)
        return regions, scores


def train_prefilter(
    db: Any, backgrounds: Any = None, prefilter: RegionPrefilter | None = None, **options: Any
) -> RegionPrefilter:
    """Fit ``prefilter`` (default: ``RegionPrefilter()``) on scenes generated from a database's enrolled objects
    and ``backgrounds``: :func:`objrec.prefilter.training.fit_to_database`, whose options this takes.
    ``db``: the model database.

    Returns
    -------
    RegionPrefilter
        ``prefilter``, fitted, with ``database_id_``, ``object_names_`` and a ``training_report_``.
    """
    return fit_to_database(RegionPrefilter() if prefilter is None else prefilter, db, backgrounds, **options)
