"""Fitting a cascade of decision trees on cell features: checks, calibration rows, thresholds, stages.

The functions :class:`~objrec.prefilter.estimator.RegionPrefilter` fits with, free of the estimator, so
that a refit in another process runs the same code on plain arrays: :func:`fit_stages` fits the stages in
turn (Viola & Jones 2001), each on the rows the previous ones kept, and gives each the threshold that
keeps a share of the positive weight on held-out rows (:func:`recall_threshold`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import numpy as np

from objrec.prefilter.tree import FlatCascade, FlatTree

__all__ = [
    "check_params",
    "stage_depths",
    "check_fit_input",
    "recall_threshold",
    "calibration_split",
    "fit_and_calibration_rows",
    "calibration_report",
    "positive_proba",
    "sklearn_positive_proba",
    "fit_stages",
]


def _positive_int(name: str, v: Any) -> None:
    if not isinstance(v, (int, np.integer)) or isinstance(v, bool) or v < 1:
        raise ValueError(f"{name}: expected a positive integer, got {v!r}")


def _in_range(name: str, v: Any, lo: float, hi: float, lo_open: bool, hi_open: bool) -> None:
    ok = isinstance(v, (int, float, np.integer, np.floating)) and not isinstance(v, bool)
    ok = ok and (lo < v if lo_open else lo <= v) and (v < hi if hi_open else v <= hi)
    if not ok:
        left, right = "(" if lo_open else "[", ")" if hi_open else "]"
        raise ValueError(f"{name}: expected a value in {left}{lo:g}, {hi:g}{right}, got {v!r}")


def check_params(params: Mapping[str, Any]) -> None:
    """Raise ``ValueError`` naming the first of a prefilter's parameters out of range.

    Parameters
    ----------
    params : mapping
        ``RegionPrefilter.get_params()``, or the parameters of a prefilter file; names that are absent
        are not checked, names the estimator does not know are ignored.
    """
    for name in ("cell_size", "work_size", "cascade", "min_samples_leaf"):
        if name in params:
            _positive_int(name, params[name])
    if params.get("work_size", 16) < 16:
        raise ValueError(f"work_size: expected at least 16, got {params['work_size']}")
    t = params.get("threshold", "auto")
    if not (t == "auto" or (isinstance(t, (int, float)) and 0 <= t <= 1)):
        raise ValueError(f"threshold: expected 'auto' or a number in [0, 1], got {t!r}")
    ranges = {
        "target_recall": (0, 1, True, False),
        "calibration_fraction": (0, 1, False, True),
        "min_fill": (0, 1, False, False),
        "label_overlap": (0, 1, False, False),
    }
    for name, bounds in ranges.items():
        if name in params:
            _in_range(name, params[name], *bounds)
    for name in ("dilate", "margin"):
        v = params.get(name, 0)
        if not isinstance(v, (int, np.integer)) or v < 0:
            raise ValueError(f"{name}: expected a non-negative integer, got {v!r}")
    if "max_depth" in params and "cascade" in params:
        stage_depths(params["max_depth"], params["cascade"])


def stage_depths(max_depth: int | tuple[int, ...] | None, cascade: int) -> list[int | None]:
    """The depth of every stage: ``max_depth`` repeated, or one value per stage (checked).
    ``cascade``: the number of stages."""
    depths: list[int | None] = list(max_depth) if isinstance(max_depth, (tuple, list)) else [max_depth] * int(cascade)
    if len(depths) != cascade:
        raise ValueError(f"max_depth: expected an int or {cascade} values (one per stage), got {max_depth!r}")
    for v in depths:
        if v is not None and (not isinstance(v, (int, np.integer)) or v < 1):
            raise ValueError(f"max_depth: expected positive integers or None, got {max_depth!r}")
    return depths


def check_fit_input(
    X: Any, y: Any, sample_weight: Any, recall_weight: Any
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, np.ndarray]:
    """``X`` float32, ``y`` int64 0/1, sample weights (or None) and recall weights, checked.
    ``recall_weight``: each row's weight in the positive recall (None: as said below).

    Returns
    -------
    (X, y, sample_weight or None, recall_weight)
        Recall weights default to the sample weights, else 1.
    """
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


def recall_threshold(scores: np.ndarray, weights: np.ndarray, recall: float) -> float:
    """Largest threshold ``t`` with ``sum(weights[scores >= t]) >= recall * sum(weights)``.

    Returns 0 when there are no scores or no weight (threshold 0 keeps every non-negative score).
    ``scores``: the rows' scores; ``weights``: their recall weights; ``recall``: the share of weight kept.
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
    ``n_samples``: the rows; ``random_state``: seeds the draw.
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


def fit_and_calibration_rows(
    n_samples: int, calibration: Any, fraction: float, groups: Any, random_state: int | None
) -> tuple[np.ndarray, np.ndarray]:
    """Row indices (fit, calibration): the rows ``calibration`` names (checked) and the others, or when it is
    None those :func:`calibration_split` draws.
    ``n_samples``: the rows; ``fraction``, ``groups``, ``random_state``: as for :func:`calibration_split`."""
    if calibration is None:
        return calibration_split(n_samples, fraction, groups, random_state)
    cal = np.unique(np.asarray(calibration, np.int64))
    if cal.size == 0 or cal[0] < 0 or cal[-1] >= n_samples:
        got = f"{cal[0]}..{cal[-1]}" if cal.size else "none"
        raise ValueError(f"calibration: expected row indices in 0..{n_samples - 1}, got {got}")
    return (np.setdiff1d(np.arange(n_samples), cal) if cal.size < n_samples else cal), cal


def calibration_report(
    scores: np.ndarray, y: np.ndarray, recall_weight: np.ndarray, cascade: FlatCascade, threshold: float, n: tuple
) -> dict[str, Any]:
    """Figures of a fitted ``cascade`` on its calibration rows (their ``scores``, labels and recall weights):
    the share of positive weight kept at ``threshold`` and of negatives rejected, the stages' thresholds and
    sizes; ``n`` is (samples, positives) of the whole fit.
    ``y``: the calibration rows' labels (0/1); ``recall_weight``: their recall weights."""
    kept, pos, w = scores >= threshold, y == 1, recall_weight
    return {
        "n_samples": int(n[0]),
        "n_positive": int(n[1]),
        "n_calibration": int(len(scores)),
        "calibration_area_recall": float(w[pos & kept].sum() / max(w[pos].sum(), 1e-12)),
        "calibration_negatives_rejected": float((~kept[~pos]).mean()) if (~pos).any() else float("nan"),
        "stage_thresholds": [float(v) for v in cascade.stage_thresholds],
        "node_counts": [int(c) for c in np.diff(np.append(cascade.roots, len(cascade.left)))],
    }


def positive_proba(flat: FlatTree, _clf: Any, X: np.ndarray) -> np.ndarray:
    """P(object) of every row of ``X`` from the compiled flat tree (runs Numba's parallel loop).
    ``flat``: the compiled tree; ``_clf``: unused (scikit-learn's tree, for :func:`sklearn_positive_proba`'s
    signature)."""
    return flat.predict_proba(X)[:, flat.positive] if flat.positive >= 0 else np.zeros(len(X))


def sklearn_positive_proba(_flat: FlatTree, clf: Any, X: np.ndarray) -> np.ndarray:
    """P(object) from scikit-learn's own tree: the flat tree's numbers, without Numba's threading layer
    (for a process that must not start Numba's threads).
    ``_flat``: unused (the flat tree, for :func:`positive_proba`'s signature); ``clf``: scikit-learn's fitted tree;
    ``X``: the rows."""
    proba = clf.predict_proba(X)
    classes = list(clf.classes_)
    return proba[:, classes.index(1)] if 1 in classes else np.zeros(len(X))


def fit_stages(
    X: np.ndarray,
    y: np.ndarray,
    sw: np.ndarray | None,
    rw: np.ndarray,
    tr: np.ndarray,
    cal: np.ndarray,
    params: Mapping[str, Any],
    proba: Callable[[FlatTree, Any, np.ndarray], np.ndarray] = positive_proba,
) -> tuple[list[FlatTree], list[float], list[Any]]:
    """Fit the stages in turn, each on the fit rows ``tr`` the previous ones kept; thresholds from ``cal``.

    ``params`` are the prefilter's (``max_depth``, ``cascade``, ``min_samples_leaf``, ``target_recall``,
    ``random_state`` are used). Every stage keeps ``target_recall ** (1 / n_stages)`` of the positive recall
    weight ``rw`` of the calibration rows that reached it. A stage is left out once the fit rows that reached
    it hold one class only. ``proba(flat_tree, sklearn_tree, X)`` scores rows (:func:`positive_proba` or
    :func:`sklearn_positive_proba`, same numbers).
    ``X``: the rows' features, float32; ``y``: their labels (0/1); ``sw``: their sample weights (None: equal); ``proba``
    as said above.

    Returns
    -------
    (flat trees, stage thresholds, scikit-learn trees)
    """
    from sklearn.tree import DecisionTreeClassifier

    depths = stage_depths(params["max_depth"], params["cascade"])
    stage_recall = params["target_recall"] ** (1.0 / len(depths))
    trees: list[FlatTree] = []
    thresholds: list[float] = []
    estimators = []
    keep_tr = np.ones(len(tr), bool)
    keep_cal = np.ones(len(cal), bool)
    for k, depth in enumerate(depths):
        idx = tr[keep_tr]
        if len(np.unique(y[idx])) < 2 and k > 0:
            break  # earlier stages already separate the classes on the fit rows
        clf = DecisionTreeClassifier(
            max_depth=depth,
            min_samples_leaf=params["min_samples_leaf"],
            class_weight="balanced",
            random_state=params["random_state"],
        )
        clf.fit(X[idx], y[idx], sample_weight=None if sw is None else sw[idx])
        flat = FlatTree.from_sklearn(clf)
        cal_idx = cal[keep_cal]
        p_cal = proba(flat, clf, X[cal_idx])
        pos = y[cal_idx] == 1
        t = recall_threshold(p_cal[pos], rw[cal_idx][pos], stage_recall)
        trees.append(flat)
        estimators.append(clf)
        thresholds.append(t)
        keep_tr &= proba(flat, clf, X[tr]) >= t
        keep_cal[keep_cal] = p_cal >= t
    return trees, thresholds, estimators
