"""``RegionPrefilter``: a decision tree (or short cascade) on cell features that proposes regions."""

from __future__ import annotations

import os
import warnings
from pathlib import Path
from typing import Any

import cv2
import numpy as np
from sklearn.base import BaseEstimator
from sklearn.utils.validation import check_is_fitted

from objrec import __version__
from objrec.backend import get_array_module, to_numpy
from objrec.fileio import (
    FileFormatError,
    atomic_write_bytes,
    atomic_write_json,
    check_manifest_header,
    load_npz_verified,
    npz_bytes,
    read_json,
    sha256_bytes,
)
from objrec.imageio import check_frame, to_bgr
from objrec.prefilter.features import (
    FEATURE_NAMES,
    N_COLOR_CODES,
    N_TEXTURE_CODES,
    CellGrid,
    FeatureParams,
    cell_features,
    cell_features_xp,
    work_shape,
)
from objrec.prefilter.tree import FlatCascade, FlatTree, cascade_scores
from objrec.types import Failure, Regions

__all__ = [
    "RegionPrefilter",
    "PrefilterError",
    "StalePrefilterError",
    "StalePrefilterWarning",
    "SCHEMA_VERSION",
    "DEFAULT_FILENAME",
    "regions_to_mask",
    "expand_regions",
]

SCHEMA_VERSION = 1
FORMAT = "objrec-prefilter"
#: Where ``train-prefilter`` stores a database's prefilter by default (``DB/prefilter.json`` + ``.npz``).
DEFAULT_FILENAME = "prefilter.json"


class PrefilterError(FileFormatError):
    """A prefilter file is missing, damaged, tampered with or of an unknown format; names the file."""


class StalePrefilterError(PrefilterError):
    """The prefilter was trained for another database (another ``database_id``)."""


class StalePrefilterWarning(UserWarning):
    """The database changed since its prefilter was trained; it is not used until retrained."""


def _files(path: str | os.PathLike) -> tuple[Path, Path]:
    """(manifest.json, arrays.npz) for ``path`` given as either file or as a stem."""
    p = Path(path)
    stem = p.with_suffix("") if p.suffix.lower() in (".json", ".npz") else p
    return stem.with_name(stem.name + ".json"), stem.with_name(stem.name + ".npz")


def _recall_threshold(scores: np.ndarray, weights: np.ndarray, recall: float) -> float:
    """Largest threshold ``t`` with ``sum(w[s >= t]) >= recall * sum(w)`` (0 when there is no weight)."""
    total = float(weights.sum())
    if total <= 0 or len(scores) == 0:
        return 0.0
    order = np.argsort(-scores, kind="stable")
    s, cw = scores[order], np.cumsum(weights[order])
    k = int(np.searchsorted(cw, recall * total - 1e-12 * total))
    return float(s[min(k, len(s) - 1)])


class RegionPrefilter(BaseEstimator):
    """Reject cells that cannot hold an enrolled object; propose the rest as regions.

    A frame is reduced to a working resolution (longer side ``work_size``) and cut into cells of about
    ``cell_size`` working pixels. Each cell gets cheap features from integral images (gray mean and
    variance, gradient energy, edge and corner density, colour, and colour/texture similarity to the
    enrolled objects, see :mod:`objrec.prefilter.features`). A scikit-learn decision tree, or a short
    cascade of trees (Viola & Jones 2001), scores the cells; its flat node arrays are evaluated for all
    cells in one compiled call that gives exactly ``predict_proba``'s numbers. Kept cells are dilated,
    grouped into 8-connected components and returned as boxes.

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
        on held-out calibration scenes; split evenly (geometrically) across cascade stages.
    max_depth : int or tuple of int
        Depth of each tree (a tuple gives one per stage).
    cascade : int
        Number of stages; stage ``k + 1`` is fitted on the cells stage ``k`` kept.
    min_samples_leaf : int
    label_overlap : float
        In :meth:`train`, a cell is positive when at least this fraction of it is object.
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
        Back-projection tables (log-likelihood ratios) of the appearance features.
    database_id_ : str or None
        ``ModelDB.database_id`` of the database :meth:`train` used.
    object_names_ : list of str
    training_report_ : dict
        Calibration figures (area recall, rejected share) measured during fitting.

    Notes
    -----
    scikit-learn conventions: the constructor stores parameters only; fitted state ends in ``_``;
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

    # -- sklearn plumbing -----------------------------------------------------------------------------
    _PARAMS = (
        "cell_size",
        "work_size",
        "threshold",
        "target_recall",
        "max_depth",
        "cascade",
        "min_samples_leaf",
        "label_overlap",
        "dilate",
        "min_fill",
        "margin",
        "calibration_fraction",
        "random_state",
    )

    def __sklearn_is_fitted__(self) -> bool:
        return hasattr(self, "cascade_")

    def _check_params(self) -> None:
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
            Scene id of every sample: calibration holds out whole scenes.
        recall_weight : array-like, optional
            Weight of every positive when thresholds are chosen for recall (e.g. its object area;
            default: ``sample_weight`` or 1).
        """
        from sklearn.model_selection import GroupShuffleSplit, ShuffleSplit
        from sklearn.tree import DecisionTreeClassifier

        self._check_params()
        X = np.asarray(X, dtype=np.float32)
        if X.ndim != 2 or X.shape[0] < 2 or X.shape[1] < 1:
            raise ValueError(f"X: expected a 2-d array with at least 2 rows and 1 column, got shape {X.shape}")
        if np.isinf(X).any():
            raise ValueError("X: contains infinite values (NaN is allowed, inf is not)")
        y = np.asarray(y)
        if y.shape != (X.shape[0],):
            raise ValueError(f"y: expected shape ({X.shape[0]},), got {y.shape}")
        labels = np.unique(y)
        if not set(labels.tolist()) <= {0, 1}:
            raise ValueError(f"y: expected labels 0/1 (or bool), got {labels[:10].tolist()}")
        y = y.astype(np.int64)
        n = X.shape[0]
        sw = None if sample_weight is None else np.asarray(sample_weight, np.float64)
        if sw is not None and sw.shape != (n,):
            raise ValueError(f"sample_weight: expected shape ({n},), got {sw.shape}")
        rw = np.asarray(recall_weight, np.float64) if recall_weight is not None else sw
        rw = np.ones(n) if rw is None else rw
        if rw.shape != (n,):
            raise ValueError(f"recall_weight: expected shape ({n},), got {rw.shape}")

        if self.calibration_fraction > 0:
            if groups is not None:
                groups = np.asarray(groups)
                if groups.shape != (n,):
                    raise ValueError(f"groups: expected shape ({n},), got {groups.shape}")
                splitter = GroupShuffleSplit(1, test_size=self.calibration_fraction, random_state=self.random_state)
                tr, cal = next(splitter.split(X, y, groups))
            else:
                splitter = ShuffleSplit(1, test_size=self.calibration_fraction, random_state=self.random_state)
                tr, cal = next(splitter.split(X))
        else:
            tr = cal = np.arange(n)
        self._calibration_index = cal

        depths = self._depths()
        stage_recall = self.target_recall ** (1.0 / self.cascade)
        trees: list[FlatTree] = []
        estimators = []
        stage_t = []
        keep_tr = np.ones(len(tr), bool)
        keep_cal = np.ones(len(cal), bool)
        for k, depth in enumerate(depths):
            idx = tr[keep_tr]
            if len(np.unique(y[idx])) < 2 and k > 0:
                break  # earlier stages already separate the classes on the training cells
            clf = DecisionTreeClassifier(
                max_depth=depth,
                min_samples_leaf=self.min_samples_leaf,
                class_weight="balanced",
                random_state=self.random_state,
            )
            clf.fit(X[idx], y[idx], sample_weight=None if sw is None else sw[idx])
            flat = FlatTree.from_sklearn(clf)
            cal_idx = cal[keep_cal]
            p_cal = flat.predict_proba(X[cal_idx])[:, flat.positive] if flat.positive >= 0 else np.zeros(len(cal_idx))
            pos = y[cal_idx] == 1
            t = _recall_threshold(p_cal[pos], rw[cal_idx][pos], stage_recall)
            trees.append(flat)
            estimators.append(clf)
            stage_t.append(t)
            p_tr = flat.predict_proba(X[tr])[:, flat.positive] if flat.positive >= 0 else np.zeros(len(tr))
            keep_tr &= p_tr >= t
            keep_cal[keep_cal] = p_cal >= t

        self.estimators_ = estimators
        self.stage_thresholds_ = np.asarray(stage_t, np.float64)
        self.cascade_ = FlatCascade.from_trees(trees, self.stage_thresholds_)
        self.n_features_in_ = int(X.shape[1])
        self.threshold_ = float(self.stage_thresholds_[-1] if self.threshold == "auto" else self.threshold)
        if not hasattr(self, "color_lut_"):
            self.color_lut_ = np.zeros(N_COLOR_CODES, np.float32)
            self.texture_lut_ = np.zeros(N_TEXTURE_CODES, np.float32)
            self.feature_params_ = FeatureParams()
        self.database_id_ = getattr(self, "database_id_", None)
        self.object_names_ = getattr(self, "object_names_", [])
        # Calibration figures with the threshold in use.
        s = self.cell_scores(X[cal])
        kept = s >= self.threshold_
        pos = y[cal] == 1
        w = rw[cal]
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

    def train(
        self,
        db: Any,
        backgrounds: Any = None,
        n_scenes: int = 400,
        frame_size: tuple[int, int] = (640, 480),
        seed: int | None = 0,
        progress: bool = False,
        video_step: int = 10,
    ) -> RegionPrefilter:
        """Fit on scenes generated from the database's enrolled objects and ``backgrounds``.

        Parameters
        ----------
        db : ModelDB
            Its objects' images are composited into the backgrounds (:func:`objrec.scenes.compose_scene`).
        backgrounds : sequence of arrays or paths (images, folders, videos), optional
            Default: :func:`objrec.prefilter.training.default_backgrounds` (embedded, no files).
        n_scenes : int
            Scenes to generate; half of them (by index parity) also estimate the appearance tables.
        frame_size : (w, h)
        progress : bool
            Show a tqdm progress bar.
        """
        from objrec.prefilter.training import (
            default_backgrounds,
            generate_scenes,
            learn_appearance,
            load_backgrounds,
            scene_features,
        )

        self._check_params()
        if not isinstance(n_scenes, (int, np.integer)) or n_scenes < 4:
            raise ValueError(f"n_scenes: expected an integer >= 4, got {n_scenes!r}")
        names = list(db.names)
        if not names:
            raise ValueError(f"{db.path}: the database has no enrolled objects; enroll some before training")
        objects = {n: db.image(n) for n in names}
        bgs = default_backgrounds() if backgrounds is None else load_backgrounds(backgrounds, video_step)
        prog = None
        if progress:
            from tqdm import tqdm

            def prog(it):
                return tqdm(it, desc="composing scenes", unit="scene")

        scenes = generate_scenes(
            objects, bgs, n_scenes, self.work_size, self.cell_size, frame_size=frame_size, seed=seed, progress=prog
        )
        fp = FeatureParams()
        # Appearance tables from half the scenes, so the tree also sees their effect on scenes they
        # were not estimated from (closer to what a new background does).
        cl, tl = learn_appearance(scenes, range(0, n_scenes, 2), fp)
        X, frac, groups = scene_features(scenes, self.cell_size, cl, tl, fp)
        y = (frac >= self.label_overlap).astype(np.int64)
        self.color_lut_, self.texture_lut_, self.feature_params_ = cl, tl, fp
        self.database_id_ = str(db.database_id)
        self.object_names_ = names
        self.fit(X, y, groups=groups, recall_weight=frac)
        cal_scenes = np.unique(groups[self._calibration_index])
        if self.threshold == "auto":
            self.threshold_ = self._calibrate_regions(scenes, X, groups, cal_scenes, frame_size)
        self.training_report_.update(self._region_report(scenes, X, groups, cal_scenes, frame_size))
        self.training_report_.update(
            {"n_scenes": int(n_scenes), "n_backgrounds": len(bgs), "frame_size": list(frame_size), "seed": seed}
        )
        return self

    def _scene_region_masks(self, scenes, X, groups, which, frame_size, threshold):
        """Kept-area masks (working resolution) of scenes ``which`` at ``threshold``."""
        from objrec.prefilter.features import cell_grid

        fw = frame_size[0]
        out = []
        for sidx in which:
            img = scenes.images[sidx]
            wh, ww = img.shape[:2]
            grid = cell_grid(wh, ww, self.cell_size)
            sc = self.cell_scores(X[groups == sidx]).reshape(grid.shape)
            margin = int(round(self.margin * ww / fw))
            regions = self._regions(sc, grid, wh, ww, wh, ww, threshold=threshold, margin=margin)
            out.append(regions_to_mask(regions, (wh, ww)))
        return out

    def _calibrate_regions(self, scenes, X, groups, which, frame_size) -> float:
        """Largest threshold whose regions keep ``target_recall`` of the object area on held-out scenes.

        Thresholds are chosen where they matter, after dilation and grouping into boxes: a missed cell
        inside an object is covered by its component's box, so cells alone would be too cautious.
        """
        which = [int(i) for i in which if scenes.n_objects[int(i)] > 0]
        if not which:
            return float(self.stage_thresholds_[-1])
        sel = np.isin(groups, which)
        cand = np.unique(self.cell_scores(X[sel]))
        cand = np.concatenate([[0.0], cand[cand > 0]])
        total = sum(float(scenes.masks[i].sum()) for i in which)

        def recall(t: float) -> float:
            masks = self._scene_region_masks(scenes, X, groups, which, frame_size, t)
            return sum(float((m * scenes.masks[i]).sum()) for m, i in zip(masks, which, strict=True)) / max(
                total, 1e-12
            )

        lo, hi = 0, len(cand) - 1  # recall(cand[lo]) >= target is assumed (threshold 0 keeps everything)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if recall(float(cand[mid])) >= self.target_recall:
                lo = mid
            else:
                hi = mid - 1
        return float(cand[lo])

    def _region_report(self, scenes, X, groups, which, frame_size) -> dict[str, Any]:
        which = [int(i) for i in which]
        masks = self._scene_region_masks(scenes, X, groups, which, frame_size, self.threshold_)
        obj = [(m, scenes.masks[i]) for m, i in zip(masks, which, strict=True) if scenes.n_objects[i] > 0]
        empty = [m for m, i in zip(masks, which, strict=True) if scenes.n_objects[i] == 0]
        kept = sum(float((m * o).sum()) for m, o in obj)
        total = sum(float(o.sum()) for _, o in obj)
        return {
            "calibration_scenes": len(which),
            "calibration_region_area_recall": kept / total if total else None,
            "calibration_empty_area_rejected": float(np.mean([1 - m.mean() for m in empty])) if empty else None,
            "threshold": self.threshold_,
        }

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

    def frame_features(self, frame: Any) -> tuple[Any, CellGrid, tuple[int, int], tuple[int, int]]:
        """Cell features of a frame: (X, grid, frame (h, w), working (h, w)). CuPy frames stay on the GPU."""
        check_is_fitted(self, "cascade_")
        xp = get_array_module(frame)
        if xp is np:
            frame = to_bgr(check_frame(frame))
        elif frame.ndim != 3 or frame.shape[2] != 3 or frame.dtype != xp.uint8:
            raise ValueError(f"frame: expected a BGR uint8 CuPy array (H, W, 3), got {frame.shape} {frame.dtype}")
        fh, fw = frame.shape[:2]
        wh, ww = work_shape(fh, fw, self.work_size)
        if xp is np:
            small = frame if (wh, ww) == (fh, fw) else cv2.resize(frame, (ww, wh), interpolation=cv2.INTER_AREA)
            X, grid = cell_features(small, self.cell_size, self.color_lut_, self.texture_lut_, self.feature_params_)
        else:
            small = _area_resize_xp(frame, wh, ww, xp)
            X, grid = cell_features_xp(
                small, self.cell_size, self.color_lut_, self.texture_lut_, self.feature_params_, xp
            )
        return X, grid, (fh, fw), (wh, ww)

    def score_frame(self, frame: Any) -> tuple[np.ndarray, CellGrid, tuple[int, int], tuple[int, int]]:
        """Scores of the frame's cells as a (ny, nx) grid, with the grid and the frame/working sizes."""
        X, grid, fshape, wshape = self.frame_features(frame)
        s = self.cell_scores(to_numpy(X))
        return s.reshape(grid.shape), grid, fshape, wshape

    def propose(self, frame: Any) -> Regions:
        """Regions of ``frame`` (BGR or gray uint8) that may hold an enrolled object, best first.

        Boxes are ``(x0, y0, x1, y1)`` frame pixels (x1, y1 exclusive): 8-connected groups of kept cells,
        grown by ``dilate`` cells and ``margin`` pixels, overlapping boxes merged. A frame with no kept
        cell gives ``Regions.empty()``.
        """
        scores, grid, (fh, fw), (wh, ww) = self.score_frame(frame)
        return self._regions(scores, grid, fh, fw, wh, ww)

    def keep_mask(self, frame: Any) -> np.ndarray:
        """Boolean (H, W) mask of the proposed regions (for detectors that take a mask, e.g. SURF)."""
        f = check_frame(frame) if isinstance(frame, np.ndarray) else frame
        return regions_to_mask(self.propose(f), f.shape[:2])

    def _regions(
        self,
        scores: np.ndarray,
        grid: CellGrid,
        fh: int,
        fw: int,
        wh: int,
        ww: int,
        threshold: float | None = None,
        margin: int | None = None,
    ) -> Regions:
        from scipy import ndimage

        kept = scores >= (self.threshold_ if threshold is None else threshold)
        if not kept.any():
            return Regions.empty()
        if self.dilate:
            kept = ndimage.binary_dilation(kept, np.ones((3, 3), bool), iterations=int(self.dilate))
        rects = _decompose(kept, float(self.min_fill))
        sy, sx = fh / wh, fw / ww
        m = int(self.margin if margin is None else margin)
        boxes = np.empty((len(rects), 4), np.int64)
        comp_score = np.empty(len(rects), np.float64)
        pos = np.maximum(scores, 0.0)
        for k, (r0, r1, c0, c1) in enumerate(rects):
            comp_score[k] = pos[r0:r1, c0:c1].max()
            boxes[k] = (
                np.floor(grid.xs[c0] * sx) - m,
                np.floor(grid.ys[r0] * sy) - m,
                np.ceil(grid.xs[c1] * sx) + m,
                np.ceil(grid.ys[r1] * sy) + m,
            )
        boxes[:, [0, 2]] = np.clip(boxes[:, [0, 2]], 0, fw)
        boxes[:, [1, 3]] = np.clip(boxes[:, [1, 3]], 0, fh)
        boxes, sc = _merge_overlapping(boxes, comp_score)
        order = np.argsort(-sc, kind="stable")
        return Regions(boxes[order].astype(np.int32), sc[order].astype(np.float32))

    # -- persistence ----------------------------------------------------------------------------------
    def save(self, path: str | os.PathLike) -> tuple[Path, Path]:
        """Write ``<stem>.npz`` (arrays) and ``<stem>.json`` (manifest with their sha256), atomically.

        ``path`` may name either file or the stem. Returns (manifest path, arrays path).
        """
        check_is_fitted(self, "cascade_")
        jpath, npath = _files(path)
        arrays = self.cascade_.to_arrays()
        arrays["color_lut"] = np.asarray(self.color_lut_, np.float32)
        arrays["texture_lut"] = np.asarray(self.texture_lut_, np.float32)
        data = npz_bytes(arrays)
        params = self.get_params()
        if isinstance(params["max_depth"], tuple):
            params["max_depth"] = list(params["max_depth"])
        manifest = {
            "format": FORMAT,
            "schema_version": SCHEMA_VERSION,
            "library_version": __version__,
            "database_id": self.database_id_,
            "object_names": list(self.object_names_),
            "params": params,
            "feature_names": list(FEATURE_NAMES),
            "feature_params": {
                "edge_threshold": self.feature_params_.edge_threshold,
                "corner_threshold": self.feature_params_.corner_threshold,
                "lbp_threshold": self.feature_params_.lbp_threshold,
                "contrast_levels": list(self.feature_params_.contrast_levels),
            },
            "n_features_in": self.n_features_in_,
            "threshold": self.threshold_,
            "stage_thresholds": [float(v) for v in self.stage_thresholds_],
            "arrays": {"file": npath.name, "sha256": sha256_bytes(data)},
            "training": _jsonable(getattr(self, "training_report_", {})),
        }
        atomic_write_bytes(npath, data)
        atomic_write_json(jpath, manifest)
        return jpath, npath

    @classmethod
    def load(cls, path: str | os.PathLike, database_id: str | None = None) -> RegionPrefilter:
        """Read a prefilter written by :meth:`save`; never unpickles.

        Raises :class:`PrefilterError` naming the file when it is missing, not a prefilter, from a newer
        schema, damaged or modified; :class:`StalePrefilterError` when ``database_id`` is given and the
        prefilter was trained for another database.
        """
        jpath, _ = _files(path)
        try:
            m = read_json(jpath, "prefilter manifest")
        except FileFormatError as exc:
            raise PrefilterError(str(exc)) from None
        check_manifest_header(jpath, m, FORMAT, SCHEMA_VERSION, "prefilter", PrefilterError)
        try:
            arrays_entry = m["arrays"]
            npath = jpath.parent / Path(arrays_entry["file"]).name
            params = dict(m["params"])
            n_features = int(m["n_features_in"])
            threshold = float(m["threshold"])
            fpm = m["feature_params"]
            fparams = FeatureParams(
                float(fpm["edge_threshold"]),
                float(fpm["corner_threshold"]),
                float(fpm["lbp_threshold"]),
                tuple(float(v) for v in fpm["contrast_levels"]),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise PrefilterError(f"{jpath}: manifest lacks or mangles a field ({type(exc).__name__}: {exc})") from None
        if list(m.get("feature_names", [])) != list(FEATURE_NAMES):
            raise PrefilterError(f"{jpath}: trained on other cell features ({m.get('feature_names')}); retrain it")
        try:
            arrays = load_npz_verified(npath, arrays_entry.get("sha256"))
        except FileFormatError as exc:
            raise PrefilterError(str(exc)) from None
        try:
            cascade = FlatCascade.from_arrays(arrays)
            cascade.validate(n_features)
            cl = np.ascontiguousarray(arrays["color_lut"], np.float32)
            tl = np.ascontiguousarray(arrays["texture_lut"], np.float32)
            if cl.shape != (N_COLOR_CODES,) or tl.shape != (N_TEXTURE_CODES,):
                raise ValueError(f"lookup tables of shape {cl.shape}, {tl.shape}")
            if isinstance(params.get("max_depth"), list):
                params["max_depth"] = tuple(params["max_depth"])
            pf = cls(**{k: v for k, v in params.items() if k in cls._PARAMS})
            pf._check_params()
        except (KeyError, ValueError, TypeError) as exc:
            raise PrefilterError(f"{npath}: arrays missing or malformed ({exc})") from None
        pf.cascade_ = cascade
        pf.estimators_ = None
        pf.stage_thresholds_ = cascade.stage_thresholds.copy()
        pf.threshold_ = threshold
        pf.n_features_in_ = n_features
        pf.color_lut_, pf.texture_lut_, pf.feature_params_ = cl, tl, fparams
        pf.database_id_ = m.get("database_id")
        pf.object_names_ = list(m.get("object_names", []))
        pf.training_report_ = dict(m.get("training", {}))
        pf.path_ = jpath
        if database_id is not None and pf.database_id_ != database_id:
            raise StalePrefilterError(
                f"{jpath}: trained for database {pf.database_id_}, not {database_id} "
                "(the database changed since; retrain with objrec train-prefilter)"
            )
        return pf

    @classmethod
    def default_path(cls, db: Any) -> Path:
        """Where a database's prefilter lives: ``DB/prefilter.json`` (+ ``DB/prefilter.npz``)."""
        return Path(db.path) / DEFAULT_FILENAME

    @classmethod
    def load_for(
        cls, db: Any, path: str | os.PathLike | None = None, on_stale: str = "warn"
    ) -> RegionPrefilter | Failure:
        """The prefilter trained for ``db``, or a falsy :class:`~objrec.types.Failure` saying why not.

        - no file: ``Failure("absent", ...)`` (run without a prefilter, silently);
        - trained for another database id (the database changed): with ``on_stale="warn"`` a
          :class:`StalePrefilterWarning` and ``Failure("stale", ...)``; with ``"raise"`` a
          :class:`StalePrefilterError`;
        - damaged, tampered or foreign file: :class:`PrefilterError` naming the file.

        Use as ``pf = RegionPrefilter.load_for(db); if pf: regions = pf.propose(frame)``.
        """
        if on_stale not in ("warn", "raise"):
            raise ValueError(f"on_stale: expected 'warn' or 'raise', got {on_stale!r}")
        jpath, _ = _files(path if path is not None else cls.default_path(db))
        if not jpath.exists():
            return Failure(
                "absent",
                f"{jpath}: no prefilter for this database (train one with objrec train-prefilter --db {db.path})",
            )
        try:
            return cls.load(jpath, database_id=db.database_id)
        except StalePrefilterError as exc:
            if on_stale == "raise":
                raise
            warnings.warn(f"{exc}; running without the prefilter", StalePrefilterWarning, stacklevel=2)
            return Failure("stale", str(exc))


def _jsonable(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {str(k): _jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [_jsonable(v) for v in obj]
    if isinstance(obj, np.generic):
        return obj.item()
    if isinstance(obj, float) and not np.isfinite(obj):
        return None
    return obj


def _area(b: np.ndarray) -> np.ndarray:
    return (b[..., 2] - b[..., 0]) * (b[..., 3] - b[..., 1])


def _merge_overlapping(boxes: np.ndarray, scores: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union pairs of overlapping boxes whose union is no larger than the two boxes together (the
    overlap would otherwise be processed twice); score = max. Repeated until nothing merges."""
    boxes = boxes.copy()
    scores = scores.copy()
    changed = True
    while changed and len(boxes) > 1:
        changed = False
        for i in range(len(boxes)):
            b = boxes[i]
            union = np.stack(
                [
                    np.minimum(boxes[:, 0], b[0]),
                    np.minimum(boxes[:, 1], b[1]),
                    np.maximum(boxes[:, 2], b[2]),
                    np.maximum(boxes[:, 3], b[3]),
                ],
                axis=1,
            )
            ov = (boxes[:, 0] < b[2]) & (b[0] < boxes[:, 2]) & (boxes[:, 1] < b[3]) & (b[1] < boxes[:, 3])
            ok = ov & (_area(union) <= _area(boxes) + _area(b))
            ok[i] = False
            if ok.any():
                j = int(np.flatnonzero(ok)[0])
                boxes[i] = union[j]
                scores[i] = max(scores[i], scores[j])
                boxes = np.delete(boxes, j, axis=0)
                scores = np.delete(scores, j)
                changed = True
                break
    return boxes, scores


def _decompose(mask: np.ndarray, min_fill: float) -> list[tuple[int, int, int, int]]:
    """Rectangles (r0, r1, c0, c1) covering the True cells of ``mask``: one per 8-connected component,
    split recursively along its longer side, at the line with the fewest kept cells, while less than
    ``min_fill`` of the rectangle is kept (a sparse diagonal component would otherwise box the frame)."""
    from scipy import ndimage

    labels, n = ndimage.label(mask, np.ones((3, 3), int))
    out: list[tuple[int, int, int, int]] = []
    for lab, sl in enumerate(ndimage.find_objects(labels), start=1):
        comp = labels == lab
        stack = [(sl[0].start, sl[0].stop, sl[1].start, sl[1].stop)]
        while stack:
            r0, r1, c0, c1 = stack.pop()
            sub = comp[r0:r1, c0:c1]
            rows = np.flatnonzero(sub.any(axis=1))
            cols = np.flatnonzero(sub.any(axis=0))
            if len(rows) == 0:
                continue
            r0, r1, c0, c1 = r0 + rows[0], r0 + rows[-1] + 1, c0 + cols[0], c0 + cols[-1] + 1
            sub = comp[r0:r1, c0:c1]
            if sub.mean() >= min_fill or sub.size <= 2:
                out.append((int(r0), int(r1), int(c0), int(c1)))
                continue
            if (r1 - r0) >= (c1 - c0):
                line = sub.sum(axis=1)
                cut = 1 + int(np.argmin(line[1:])) if len(line) > 2 else 1
                stack += [(r0, r0 + cut, c0, c1), (r0 + cut, r1, c0, c1)]
            else:
                line = sub.sum(axis=0)
                cut = 1 + int(np.argmin(line[1:])) if len(line) > 2 else 1
                stack += [(r0, r1, c0, c0 + cut), (r0, r1, c0 + cut, c1)]
    return out


def _area_resize_xp(frame: Any, wh: int, ww: int, xp: Any) -> Any:
    """Area-average downscale in array code (integer factor on a cropped frame; CuPy frames)."""
    fh, fw = frame.shape[:2]
    if (fh, fw) == (wh, ww):
        return frame
    f = max(1, min(fh // wh, fw // ww))
    crop = frame[: wh * f, : ww * f].astype(xp.float32)
    small = crop.reshape(wh, f, ww, f, 3).mean(axis=(1, 3))
    return (small + 0.5).astype(xp.uint8)


def regions_to_mask(regions: Regions, shape: tuple[int, int]) -> np.ndarray:
    """Boolean (H, W) mask that is True inside any box."""
    h, w = shape
    mask = np.zeros((h, w), bool)
    for x0, y0, x1, y1 in regions.boxes:
        mask[max(y0, 0) : max(y1, 0), max(x0, 0) : max(x1, 0)] = True
    return mask


def expand_regions(regions: Regions, shape: tuple[int, int], margin: int) -> Regions:
    """Boxes grown by ``margin`` pixels, clipped to the frame, overlapping ones merged (SIFT crops:
    ``margin`` about the largest descriptor radius, so keypoints near a box edge keep their support)."""
    if len(regions) == 0:
        return regions
    h, w = shape
    b = regions.boxes.astype(np.int64) + np.array([-margin, -margin, margin, margin])
    b[:, [0, 2]] = np.clip(b[:, [0, 2]], 0, w)
    b[:, [1, 3]] = np.clip(b[:, [1, 3]], 0, h)
    b, s = _merge_overlapping(b, regions.scores.astype(np.float64))
    order = np.argsort(-s, kind="stable")
    return Regions(b[order].astype(np.int32), s[order].astype(np.float32))
