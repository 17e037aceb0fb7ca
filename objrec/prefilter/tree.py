"""Compiled decision-tree inference from scikit-learn's flat node arrays.

A fitted ``DecisionTreeClassifier.tree_`` is a set of parallel arrays (``children_left``,
``children_right``, ``feature``, ``threshold``, ``missing_go_to_left``, ``value``). Walking them is what
scikit-learn's ``Tree._apply_dense`` does (``sklearn/tree/_tree.pyx``): the sample is cast to float32, a
NaN goes to the side recorded in ``missing_go_to_left``, any other value goes left when
``x[feature] <= threshold`` (float32 promoted to float64, exactly), and ``predict_proba`` is the leaf's
``value`` divided by its sum. Doing the same in one Numba call over all cells gives bit-identical
probabilities at a tiny fraction of ``predict``'s per-call overhead; a cascade of such trees is evaluated
in the same call, each stage rejecting cells below its threshold (Viola & Jones 2001).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any

import numba
import numpy as np

from objrec.kernel_cache import njit as cached_njit

__all__ = ["FlatTree", "FlatCascade", "cascade_scores"]


@dataclass(frozen=True)
class FlatTree:
    """One fitted tree as flat arrays (leaves have ``left == right == -1``).

    ``proba`` is (n_nodes, n_classes) float64: each node's ``value`` divided by its sum, as in
    ``DecisionTreeClassifier.predict_proba``; ``positive`` is the column of the positive class (-1: absent).

    Attributes
    ----------
    left, right : np.ndarray
        (n_nodes,) int: each node's children (-1 at a leaf).
    feature, threshold : np.ndarray
        (n_nodes,) each split's feature column and threshold: a row goes left where ``X[:, feature] <= threshold``.
    missing_go_to_left : np.ndarray
        (n_nodes,) where a NaN feature value goes (1: left).
    proba : np.ndarray
        See above.
    classes : np.ndarray
        The classes, in ``proba``'s column order.
    positive : int
        See above.
    """

    left: np.ndarray
    right: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    missing_go_to_left: np.ndarray
    proba: np.ndarray
    classes: np.ndarray
    positive: int

    @classmethod
    def from_sklearn(cls, estimator: Any, positive_class: Any = 1) -> FlatTree:
        """Read the arrays of a fitted single-output ``DecisionTreeClassifier``.
        ``estimator``: the fitted tree; ``positive_class``: the label counted as positive."""
        from sklearn.utils.validation import check_is_fitted

        check_is_fitted(estimator, "tree_")
        t = estimator.tree_
        if t.n_outputs != 1:
            raise ValueError(f"estimator: expected a single-output tree, got {t.n_outputs} outputs")
        value = np.asarray(t.value, np.float64)[:, 0, :]
        if _sklearn_normalizes():
            # Older scikit-learn divides by the row sum in predict_proba: same operation, same bits.
            norm = value.sum(axis=1)
            norm[norm == 0.0] = 1.0
            proba = value / norm[:, np.newaxis]
        else:
            proba = value.copy()  # recent scikit-learn: value holds the class fractions predict_proba returns
        mgl = getattr(t, "missing_go_to_left", None)
        mgl = np.zeros(t.node_count, np.uint8) if mgl is None else np.asarray(mgl, np.uint8)
        classes = np.asarray(estimator.classes_)
        pos = np.flatnonzero(classes == positive_class)
        return cls(
            left=np.ascontiguousarray(t.children_left, np.int64),
            right=np.ascontiguousarray(t.children_right, np.int64),
            feature=np.ascontiguousarray(np.maximum(t.feature, 0), np.int64),
            threshold=np.ascontiguousarray(t.threshold, np.float64),
            missing_go_to_left=np.ascontiguousarray(mgl),
            proba=np.ascontiguousarray(proba),
            classes=classes,
            positive=int(pos[0]) if len(pos) else -1,
        )

    @property
    def node_count(self) -> int:
        return int(self.left.shape[0])

    @property
    def positive_proba(self) -> np.ndarray:
        """P(positive) per node (0 when the positive class was never seen)."""
        if self.positive < 0:
            return np.zeros(self.node_count, np.float64)
        return np.ascontiguousarray(self.proba[:, self.positive])

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Class probabilities for every row of ``X`` (cast to float32, as scikit-learn does)."""
        X = _as_float32_2d(X)
        if X.shape[0] and int(self.feature.max(initial=0)) >= X.shape[1]:
            raise ValueError(f"X: tree uses feature {int(self.feature.max())}, X has {X.shape[1]} columns")
        out = np.empty((X.shape[0], self.proba.shape[1]), np.float64)
        _predict_proba_nb(
            X, self.left, self.right, self.feature, self.threshold, self.missing_go_to_left, self.proba, out
        )
        return out


@dataclass(frozen=True)
class FlatCascade:
    """Trees concatenated into one set of arrays (child indices global), with each stage's root node.

    A cell's score is the positive probability of the last stage it reached; a stage other than the
    last stops a cell whose probability is below its threshold (the cell then counts as rejected).

    Attributes
    ----------
    roots : np.ndarray
        (n_stages,) each stage's root node.
    left, right, feature, threshold, missing_go_to_left : np.ndarray
        The concatenated trees' node arrays, as :class:`FlatTree`'s, child indices global.
    positive_proba : np.ndarray
        (n_nodes,) each node's positive probability.
    stage_thresholds : np.ndarray
        (n_stages,) float64 each stage's threshold.
    """

    roots: np.ndarray
    left: np.ndarray
    right: np.ndarray
    feature: np.ndarray
    threshold: np.ndarray
    missing_go_to_left: np.ndarray
    positive_proba: np.ndarray
    stage_thresholds: np.ndarray

    @classmethod
    def from_trees(cls, trees: list[FlatTree], stage_thresholds: Any) -> FlatCascade:
        """The cascade of ``trees`` (one per stage, in order) with their ``stage_thresholds``."""
        if not trees:
            raise ValueError("trees: need at least one tree")
        st = np.ascontiguousarray(stage_thresholds, np.float64)
        if st.shape != (len(trees),):
            raise ValueError(f"stage_thresholds: expected {len(trees)} values, got shape {st.shape}")
        roots: list[int] = []
        parts: dict[str, list[np.ndarray]] = {k: [] for k in ("left", "right", "feature", "threshold", "mgl", "pp")}
        off = 0
        for t in trees:
            roots.append(off)
            parts["left"].append(np.where(t.left >= 0, t.left + off, -1))
            parts["right"].append(np.where(t.right >= 0, t.right + off, -1))
            parts["feature"].append(t.feature)
            parts["threshold"].append(t.threshold)
            parts["mgl"].append(t.missing_go_to_left)
            parts["pp"].append(t.positive_proba)
            off += t.node_count
        cat = np.concatenate
        return cls(
            roots=np.asarray(roots, np.int64),
            left=cat(parts["left"]).astype(np.int64),
            right=cat(parts["right"]).astype(np.int64),
            feature=cat(parts["feature"]).astype(np.int64),
            threshold=cat(parts["threshold"]).astype(np.float64),
            missing_go_to_left=cat(parts["mgl"]).astype(np.uint8),
            positive_proba=cat(parts["pp"]).astype(np.float64),
            stage_thresholds=st,
        )

    def to_arrays(self) -> dict[str, np.ndarray]:
        return {
            "tree_roots": self.roots,
            "tree_left": self.left,
            "tree_right": self.right,
            "tree_feature": self.feature,
            "tree_threshold": self.threshold,
            "tree_missing_go_to_left": self.missing_go_to_left,
            "tree_positive_proba": self.positive_proba,
            "stage_thresholds": self.stage_thresholds,
        }

    @classmethod
    def from_arrays(cls, a: dict[str, np.ndarray]) -> FlatCascade:
        c = cls(
            roots=np.ascontiguousarray(a["tree_roots"], np.int64),
            left=np.ascontiguousarray(a["tree_left"], np.int64),
            right=np.ascontiguousarray(a["tree_right"], np.int64),
            feature=np.ascontiguousarray(a["tree_feature"], np.int64),
            threshold=np.ascontiguousarray(a["tree_threshold"], np.float64),
            missing_go_to_left=np.ascontiguousarray(a["tree_missing_go_to_left"], np.uint8),
            positive_proba=np.ascontiguousarray(a["tree_positive_proba"], np.float64),
            stage_thresholds=np.ascontiguousarray(a["stage_thresholds"], np.float64),
        )
        c.validate()
        return c

    def validate(self, n_features: int | None = None) -> None:
        """Structural checks, so a damaged model cannot send the walk out of bounds or into a loop."""
        n = self.left.shape[0]
        same = [self.right, self.feature, self.threshold, self.missing_go_to_left, self.positive_proba]
        if n == 0 or any(a.ndim != 1 or a.shape[0] != n for a in [self.left, *same]):
            raise ValueError("tree arrays: empty or of different lengths")
        if self.roots.ndim != 1 or self.roots.shape != self.stage_thresholds.shape or len(self.roots) == 0:
            raise ValueError("tree arrays: roots and stage_thresholds must be 1-d of the same non-zero length")
        if np.any((self.roots < 0) | (self.roots >= n)):
            raise ValueError("tree arrays: root index out of range")
        leaf = self.left < 0
        if np.any(leaf != (self.right < 0)):
            raise ValueError("tree arrays: a node has exactly one child")
        idx = np.arange(n)
        # Children always come after their parent in scikit-learn's depth-first layout: no cycles possible.
        if np.any(~leaf & ((self.left <= idx) | (self.right <= idx) | (self.left >= n) | (self.right >= n))):
            raise ValueError("tree arrays: child index out of range or not after its parent")
        if n_features is not None and np.any(~leaf & ((self.feature < 0) | (self.feature >= n_features))):
            raise ValueError(f"tree arrays: feature index outside 0..{n_features - 1}")


@functools.cache
def _sklearn_normalizes() -> bool:
    """Whether this scikit-learn's ``DecisionTreeClassifier.predict_proba`` divides ``value`` by its sum
    (it did while ``tree_.value`` held weighted counts; recent versions store fractions and return them)."""
    import inspect

    from sklearn.tree import DecisionTreeClassifier

    try:
        return "normalizer" in inspect.getsource(DecisionTreeClassifier.predict_proba)
    except (OSError, TypeError):  # no source (frozen install): fractions are what recent versions return
        return False


def _as_float32_2d(X: Any) -> np.ndarray:
    X = np.ascontiguousarray(X, dtype=np.float32)
    if X.ndim != 2:
        raise ValueError(f"X: expected a 2-d array (n_samples, n_features), got shape {X.shape}")
    return X


@numba.njit(inline="always")
def _walk(X, i, node, left, right, feature, threshold, mgl):  # pragma: no cover
    while left[node] != -1:
        v = X[i, feature[node]]
        if np.isnan(v):
            node = left[node] if mgl[node] else right[node]
        elif v <= threshold[node]:
            node = left[node]
        else:
            node = right[node]
    return node


@cached_njit(parallel=True)
def _predict_proba_nb(X, left, right, feature, threshold, mgl, proba, out):  # pragma: no cover
    for i in numba.prange(X.shape[0]):
        leaf = _walk(X, i, 0, left, right, feature, threshold, mgl)
        for c in range(proba.shape[1]):
            out[i, c] = proba[leaf, c]


@cached_njit
def _cascade_nb(X, roots, left, right, feature, threshold, mgl, pp, st, out):  # pragma: no cover
    # Serial on purpose: a frame has a few hundred cells, less than a parallel launch costs.
    ns = roots.shape[0]
    for i in range(X.shape[0]):
        s = 0.0
        for k in range(ns):
            leaf = _walk(X, i, roots[k], left, right, feature, threshold, mgl)
            s = pp[leaf]
            if k < ns - 1 and s < st[k]:
                s = -1.0 + s  # rejected early: below every threshold in [0, 1]
                break
        out[i] = s


def cascade_scores(X: np.ndarray, cascade: FlatCascade) -> np.ndarray:
    """Positive-class score of every row of ``X`` through the cascade (one compiled call).

    A row stopped by an early stage gets ``p - 1`` (negative), so any threshold in [0, 1] rejects it.
    """
    X = _as_float32_2d(X)
    out = np.empty(X.shape[0], np.float64)
    c = cascade
    _cascade_nb(
        X,
        c.roots,
        c.left,
        c.right,
        c.feature,
        c.threshold,
        c.missing_go_to_left,
        c.positive_proba,
        c.stage_thresholds,
        out,
    )
    return out
