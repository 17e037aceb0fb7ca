"""RegionPrefilter as an estimator: parameters, fit on its own, thresholds, compiled scores, propose."""

from __future__ import annotations

import numpy as np
import pytest
from sklearn.exceptions import NotFittedError

from objrec.data import sample_background, sample_objects
from objrec.imageio import InputError
from objrec.prefilter import FEATURE_NAMES, RegionPrefilter
from objrec.prefilter.features import N_COLOR_CODES, N_TEXTURE_CODES, FeatureParams, cell_features, work_shape
from objrec.prefilter.fitting import calibration_split, recall_threshold
from objrec.prefilter.scenes import cell_fractions
from objrec.scenes import compose_scene


def _synthetic(seed: int = 0, n: int = 3000, d: int = 5):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d)).astype(np.float32)
    y = ((X[:, 0] + 0.5 * X[:, 1] * X[:, 2] + 0.3 * rng.normal(size=n)) > 0.8).astype(int)
    return X, y


def test_unfitted_prefilter_raises(tmp_path):
    pf = RegionPrefilter()
    with pytest.raises(NotFittedError):
        pf.propose(np.zeros((64, 64, 3), np.uint8))
    with pytest.raises(NotFittedError):
        pf.predict(np.zeros((2, len(FEATURE_NAMES)), np.float32))
    with pytest.raises(NotFittedError):
        pf.save(tmp_path / "never")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    ("params", "name"),
    [
        ({"cell_size": -3}, "cell_size"),
        ({"work_size": 8}, "work_size"),
        ({"threshold": 1.5}, "threshold"),
        ({"target_recall": 0.0}, "target_recall"),
        ({"max_depth": (3,), "cascade": 2}, "max_depth"),
        ({"calibration_fraction": 1.0}, "calibration_fraction"),
        ({"min_fill": 2.0}, "min_fill"),
        ({"label_overlap": -0.1}, "label_overlap"),
        ({"margin": -1}, "margin"),
    ],
)
def test_params_are_stored_in_init_and_checked_in_fit(params, name):
    pf = RegionPrefilter(**params)
    assert pf.get_params()[name] == params[name]
    X, y = _synthetic(n=40)
    with pytest.raises(ValueError, match=name):
        pf.fit(X, y)


def test_fit_alone_equals_sklearn_trees():
    """No train: fit sets every fitted attribute; scores are the sklearn trees' predict_proba, cascaded."""
    X, y = _synthetic()
    one = RegionPrefilter(max_depth=4, cascade=1, min_samples_leaf=5).fit(X, y)
    proba = one.predict_proba(X)
    np.testing.assert_array_equal(proba[:, 1], one.estimators_[0].predict_proba(X)[:, 1])
    np.testing.assert_array_equal(proba[:, 0], 1.0 - proba[:, 1])
    assert one.n_features_in_ == 5 and one.threshold_ == one.stage_thresholds_[-1]
    assert one.database_id_ is None and one.object_names_ == []
    np.testing.assert_array_equal(one.color_lut_, np.zeros(N_COLOR_CODES, np.float32))
    assert one.texture_lut_.shape == (N_TEXTURE_CODES,) and one.feature_params_ == FeatureParams()
    np.testing.assert_array_equal(one.predict(X), one.cell_scores(X) >= one.threshold_)

    two = RegionPrefilter(max_depth=(2, 6), cascade=2, min_samples_leaf=5).fit(X, y)
    assert len(two.estimators_) == 2
    p0, p1 = (est.predict_proba(X)[:, 1] for est in two.estimators_)
    expect = np.where(p0 < two.stage_thresholds_[0], p0 - 1.0, p1)
    np.testing.assert_array_equal(two.cell_scores(X), expect)


def test_refit_depends_on_its_arguments_only():
    X, y = _synthetic(1)
    rng = np.random.default_rng(2)
    pf = RegionPrefilter(max_depth=3, min_samples_leaf=5)
    pf.fit(rng.normal(size=(500, 7)), rng.integers(0, 2, 500), color_lut=rng.normal(size=N_COLOR_CODES))
    pf.database_id_, pf.object_names_ = "0123456789abcdef", ["cover"]
    pf.fit(X, y)
    fresh = RegionPrefilter(max_depth=3, min_samples_leaf=5).fit(X, y)
    for k, v in fresh.cascade_.to_arrays().items():
        np.testing.assert_array_equal(pf.cascade_.to_arrays()[k], v, err_msg=k)
    assert pf.n_features_in_ == 5 and pf.database_id_ is None and pf.object_names_ == []
    assert not pf.color_lut_.any() and pf.threshold_ == fresh.threshold_


def test_stage_thresholds_are_the_largest_meeting_recall():
    """With given calibration rows, each stage's threshold keeps its share of the weighted positives,
    and the next larger score on those rows would not."""
    X, y = _synthetic(3, n=4000)
    w = np.random.default_rng(4).random(len(y))
    cal = np.arange(0, len(y), 4)
    pf = RegionPrefilter(max_depth=(3, 5), cascade=2, min_samples_leaf=5, target_recall=0.95)
    pf.fit(X, y, recall_weight=w, calibration=cal)
    stage_recall = 0.95**0.5
    rows = cal
    for est, t in zip(pf.estimators_, pf.stage_thresholds_, strict=True):
        p = est.predict_proba(X[rows])[:, 1]
        pos = y[rows] == 1
        total = w[rows][pos].sum()
        assert w[rows][pos & (p >= t)].sum() >= stage_recall * total - 1e-9
        above = p[pos & (p > t)]
        if above.size:
            assert w[rows][pos & (p >= above.min())].sum() < stage_recall * total
        rows = rows[p >= t]


def test_recall_threshold_matches_brute_force():
    rng = np.random.default_rng(5)
    for _ in range(50):
        n = int(rng.integers(1, 40))
        s = np.round(rng.random(n), 1)  # ties on purpose
        w = rng.random(n)
        r = float(rng.uniform(0.1, 1.0))
        ok = [t for t in np.unique(s) if w[s >= t].sum() >= r * w.sum() - 1e-12 * w.sum()]
        assert recall_threshold(s, w, r) == max(ok)
    assert recall_threshold(np.zeros(0), np.zeros(0), 0.9) == 0.0


def test_calibration_split_holds_out_whole_groups():
    groups = np.repeat(np.arange(20), 7)
    fit_rows, cal_rows = calibration_split(len(groups), 0.25, groups, random_state=0)
    assert not set(groups[fit_rows]) & set(groups[cal_rows])
    assert len(set(groups[cal_rows])) == 5
    np.testing.assert_array_equal(np.sort(np.concatenate([fit_rows, cal_rows])), np.arange(len(groups)))
    every, same = calibration_split(10, 0.0)
    np.testing.assert_array_equal(every, same)
    with pytest.raises(ValueError, match="groups"):
        calibration_split(10, 0.5, groups=np.zeros(3))


def test_fit_rejects_bad_input_naming_it():
    X, y = _synthetic(n=50)
    pf = RegionPrefilter(min_samples_leaf=1)
    with pytest.raises(ValueError, match="labels"):
        pf.fit(X, np.arange(len(X)))
    with pytest.raises(ValueError, match="^y: expected shape"):
        pf.fit(X, y[:-1])
    bad = X.copy()
    bad[3, 1] = np.inf
    with pytest.raises(ValueError, match="infinite"):
        pf.fit(bad, y)
    with pytest.raises(ValueError, match="sample_weight"):
        pf.fit(X, y, sample_weight=np.ones(3))
    with pytest.raises(ValueError, match="calibration"):
        pf.fit(X, y, calibration=[0, len(X)])
    with pytest.raises(ValueError, match="color_lut"):
        pf.fit(X, y, color_lut=np.zeros(5))
    with pytest.raises(ValueError, match="X: expected shape"):
        pf.fit(X, y).cell_scores(X[:, :2])


def _scene(seed: int, size=(640, 480)):
    bg = sample_background((960, 540), seed=seed)
    return compose_scene(bg, sample_objects(), rng=seed, frame_size=size, area_fraction=(0.05, 0.2))


def test_fit_alone_on_cell_features_then_propose_covers_kept_cells():
    """A prefilter fitted on cell features alone proposes boxes covering every cell it keeps."""
    xs, ys = [], []
    for seed in range(4):
        sc = _scene(seed)
        wh, ww = work_shape(480, 640, 320)
        small = np.ascontiguousarray(sc.image[::2, ::2])
        assert small.shape[:2] == (wh, ww)
        X, _ = cell_features(small, 16)
        xs.append(X)
        mask = (sc.object_mask[::2, ::2] > 0).astype(np.float32)
        ys.append(cell_fractions(mask, 16) >= 0.25)
    pf = RegionPrefilter(max_depth=5, min_samples_leaf=5, margin=0).fit(np.concatenate(xs), np.concatenate(ys))
    frame = _scene(9, (641, 479)).image
    regions = pf.propose(frame)
    X, grid, (fh, fw) = pf.frame_features(frame)
    assert (fh, fw) == (479, 641)
    kept = pf.predict(X).reshape(grid.shape).astype(bool)
    assert kept.any()
    covered = np.zeros((fh, fw), bool)
    for x0, y0, x1, y1 in regions.boxes:
        covered[y0:y1, x0:x1] = True
    wh, ww = int(grid.ys[-1]), int(grid.xs[-1])
    for i, j in zip(*np.nonzero(kept), strict=True):
        y0, y1 = grid.ys[i] * fh // wh, -(-grid.ys[i + 1] * fh // wh)
        x0, x1 = grid.xs[j] * fw // ww, -(-grid.xs[j + 1] * fw // ww)
        assert covered[y0:y1, x0:x1].all(), (i, j)
    b = regions.boxes
    assert np.all((b[:, 0] >= 0) & (b[:, 1] >= 0) & (b[:, 2] <= fw) & (b[:, 3] <= fh))
    assert np.all(np.diff(regions.scores) <= 0)


def test_propose_gray_blank_and_bad_frames(trained):
    gray = np.full((480, 640), 128, np.uint8)
    r = trained.propose(gray)
    assert r.area_fraction(640, 480) <= 0.5
    bgr = _scene(3).image
    a = trained.propose(bgr)
    b = trained.propose(np.dstack([bgr, np.full(bgr.shape[:2], 255, np.uint8)]))  # BGRA: alpha ignored
    np.testing.assert_array_equal(a.boxes, b.boxes)
    with pytest.raises(InputError, match="frame"):
        trained.propose(np.zeros((48, 64, 3), np.float32))


def test_compiled_inference_on_real_frame_features(trained, shared_data):
    """Cell features of a real video frame through the compiled cascade == each sklearn tree's output."""
    import cv2

    cap = cv2.VideoCapture(str(shared_data / "opencv_samples" / "vtest.avi"))
    ok, frame = cap.read()
    cap.release()
    assert ok
    X, *_ = trained.frame_features(frame)
    probs = [est.predict_proba(X)[:, 1] for est in trained.estimators_]
    expect = probs[-1]
    for k in range(len(probs) - 2, -1, -1):
        expect = np.where(probs[k] < trained.stage_thresholds_[k], probs[k] - 1.0, expect)
    np.testing.assert_array_equal(trained.cell_scores(X), expect)
