"""Compiled tree inference against scikit-learn's own predict_proba, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.tree import DecisionTreeClassifier

from objrec.prefilter.tree import FlatCascade, FlatTree, cascade_scores


def _data(seed: int, n: int = 2000, d: int = 6, nan: float = 0.0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    y = ((X[:, 0] + 0.5 * X[:, 1] ** 2 - X[:, 2] * X[:, 3] + 0.3 * rng.normal(size=n)) > 0.2).astype(int)
    if nan:
        X[rng.random(X.shape) < nan] = np.nan
    return X, y


@pytest.mark.parametrize("depth", [1, 3, 8, None])
def test_predict_proba_matches_sklearn_exactly(depth):
    X, y = _data(0)
    clf = DecisionTreeClassifier(max_depth=depth, random_state=0).fit(X[:1500], y[:1500])
    flat = FlatTree.from_sklearn(clf)
    Xt = np.random.default_rng(1).normal(size=(5000, X.shape[1])) * 2  # float64: cast like sklearn
    np.testing.assert_array_equal(flat.predict_proba(Xt), clf.predict_proba(Xt))


def test_multiclass_and_weights():
    X, _ = _data(2)
    y = np.digitize(X[:, 0], [-0.5, 0.5])
    w = np.random.default_rng(3).random(len(y))
    clf = DecisionTreeClassifier(max_depth=6, class_weight="balanced", random_state=0).fit(X, y, sample_weight=w)
    np.testing.assert_array_equal(FlatTree.from_sklearn(clf).predict_proba(X), clf.predict_proba(X))


def test_values_next_to_every_threshold():
    X, y = _data(4)
    clf = DecisionTreeClassifier(max_depth=10, random_state=0).fit(X, y)
    flat = FlatTree.from_sklearn(clf)
    t = clf.tree_
    inner = np.flatnonzero(t.children_left >= 0)
    rows = []
    rng = np.random.default_rng(5)
    for node in inner:
        thr32 = np.float32(t.threshold[node])
        for v in (np.nextafter(thr32, np.float32(-np.inf)), thr32, np.nextafter(thr32, np.float32(np.inf))):
            for _ in range(3):
                r = rng.normal(size=X.shape[1]).astype(np.float32)
                r[t.feature[node]] = v
                rows.append(r)
    Xt = np.array(rows)
    # float64 values straddling the float32 rounding too: sklearn casts to float32 before comparing.
    X64 = Xt.astype(np.float64) + rng.choice([-1e-9, 0.0, 1e-9], size=Xt.shape)
    for A in (Xt, X64):
        np.testing.assert_array_equal(flat.predict_proba(A), clf.predict_proba(A))


def test_missing_values_follow_missing_go_to_left():
    X, y = _data(6, nan=0.15)
    clf = DecisionTreeClassifier(max_depth=8, random_state=0).fit(X, y)
    mgl = clf.tree_.missing_go_to_left[clf.tree_.children_left >= 0]
    assert mgl.any() and not mgl.all(), "test needs NaNs sent both ways"
    flat = FlatTree.from_sklearn(clf)
    Xt, _ = _data(7, nan=0.3)
    np.testing.assert_array_equal(flat.predict_proba(Xt), clf.predict_proba(Xt))
    Xt[:50] = np.nan
    np.testing.assert_array_equal(flat.predict_proba(Xt), clf.predict_proba(Xt))


def test_cascade_single_stage_and_two_stages():
    X, y = _data(8, nan=0.05)
    a = DecisionTreeClassifier(max_depth=3, random_state=0).fit(X, y)
    b = DecisionTreeClassifier(max_depth=7, random_state=1).fit(X[::2], y[::2])
    fa, fb = FlatTree.from_sklearn(a), FlatTree.from_sklearn(b)
    one = FlatCascade.from_trees([fa], [0.5])
    np.testing.assert_array_equal(cascade_scores(X, one), a.predict_proba(X)[:, 1])
    two = FlatCascade.from_trees([fa, fb], [0.3, 0.5])
    s = cascade_scores(X, two)
    pa, pb = a.predict_proba(X)[:, 1], b.predict_proba(X)[:, 1]
    np.testing.assert_array_equal(s, np.where(pa < 0.3, pa - 1.0, pb))
    rt = FlatCascade.from_arrays(two.to_arrays())
    np.testing.assert_array_equal(cascade_scores(X, rt), s)


def test_damaged_arrays_are_refused():
    X, y = _data(9)
    c = FlatCascade.from_trees([FlatTree.from_sklearn(DecisionTreeClassifier(max_depth=3).fit(X, y))], [0.5])
    a = c.to_arrays()
    bad = dict(a, tree_left=a["tree_left"].copy())
    bad["tree_left"][0] = 0  # a self-loop
    with pytest.raises(ValueError, match="child index"):
        FlatCascade.from_arrays(bad)
    with pytest.raises(ValueError, match="feature index"):
        c.validate(n_features=1)
