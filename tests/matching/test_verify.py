"""Geometric verification: recovery of a known homography among outliers, and one constructed case for
every rejection reason."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from objrec.matching.verify import (
    REASONS,
    Verified,
    VerifyParams,
    homography_condition,
    quad_checks,
    score_from_inliers,
    verify_homography,
)
from objrec.types import Detection, Failure

MODEL_W, MODEL_H = 320, 240
SCENE = (480, 640)  # (h, w)


def _project(H: np.ndarray, pts: np.ndarray) -> np.ndarray:
    hom = np.c_[pts, np.ones(len(pts))] @ H.T
    return hom[:, :2] / hom[:, 2:3]


def _corners(w: int = MODEL_W, h: int = MODEL_H) -> np.ndarray:
    return np.array([[0, 0], [w, 0], [w, h], [0, h]], np.float64)


def _h_to(quad, w: int = MODEL_W, h: int = MODEL_H) -> np.ndarray:
    """The homography taking the model outline onto ``quad`` (four scene points, in corner order)."""
    return cv2.getPerspectiveTransform(_corners(w, h).astype(np.float32), np.float32(quad)).astype(np.float64)


#: A moderate view: scaled, rotated, a little foreshortened.
H_TRUE = _h_to([[150, 90], [452, 120], [430, 370], [170, 340]])


def _correspondences(H, n_in, n_out, rng, noise=0.3, w=MODEL_W, h=MODEL_H):
    model = rng.uniform(0, [w, h], (n_in + n_out, 2))
    scene = _project(H, model)
    scene[:n_in] += rng.normal(0, noise, (n_in, 2))
    scene[n_in:] = rng.uniform(0, [SCENE[1], SCENE[0]], (n_out, 2))
    perm = rng.permutation(n_in + n_out)
    return model[perm], scene[perm], perm < n_in


@pytest.mark.parametrize("method", ["magsac", "ransac", "usac_default"])
@pytest.mark.parametrize("seed", [0, 1, 2])
def test_recovers_known_homography_among_60_percent_outliers(method, seed):
    rng = np.random.default_rng(seed)
    model, scene, truth = _correspondences(H_TRUE, 120, 180, rng)
    v = verify_homography(model, scene, MODEL_W, MODEL_H, SCENE, VerifyParams(method=method))
    assert isinstance(v, Verified), v
    err = np.linalg.norm(_project(v.homography, _corners()) - _project(H_TRUE, _corners()), axis=1)
    # 1 px; MAGSAC is allowed 1.5 px: its fit is not refined (see the least-squares test below).
    assert err.max() < (1.5 if method == "magsac" else 1.0)
    np.testing.assert_allclose(v.corners, _project(v.homography, _corners()), atol=1e-9)
    assert v.homography[2, 2] == pytest.approx(1.0)
    # Inlier mask: finds the true ones, admits few of the outliers (random points within 5 px by chance).
    assert v.inliers.shape == truth.shape and v.inliers.dtype == bool
    assert v.inliers[truth].mean() > 0.95
    assert v.inliers[~truth].sum() <= 5
    assert v.n_inliers == int(v.inliers.sum())
    assert 0 < v.score <= 1
    d = v.to_detection("thing")
    assert isinstance(d, Detection) and d.inliers == v.n_inliers and d.name == "thing"


def _reason(result) -> str:
    assert isinstance(result, Failure), f"expected a rejection, got {result!r}"
    assert not result
    assert result.reason in REASONS
    return result.reason


def test_too_few_matches():
    rng = np.random.default_rng(0)
    model, scene, _ = _correspondences(H_TRUE, 7, 0, rng)
    assert _reason(verify_homography(model, scene, MODEL_W, MODEL_H, SCENE)) == "too_few_matches"
    # Never fewer than the 4 a homography needs, whatever min_matches says.
    p = VerifyParams(min_matches=1, min_inliers=1)
    assert _reason(verify_homography(model[:3], scene[:3], MODEL_W, MODEL_H, SCENE, p)) == "too_few_matches"
    empty = np.zeros((0, 2))
    assert _reason(verify_homography(empty, empty, MODEL_W, MODEL_H, SCENE)) == "too_few_matches"


def test_too_few_inliers():
    # Nine perfect correspondences: enough matches (8), one inlier short of min_inliers (10).
    rng = np.random.default_rng(1)
    model, scene, _ = _correspondences(H_TRUE, 9, 0, rng, noise=0.0)
    assert _reason(verify_homography(model, scene, MODEL_W, MODEL_H, SCENE)) == "too_few_inliers"
    assert isinstance(verify_homography(model, scene, MODEL_W, MODEL_H, SCENE, VerifyParams(min_inliers=9)), Verified)


def test_low_inlier_ratio():
    # 100 true of 250 (40%): easily found, but below a demanded 50%.
    rng = np.random.default_rng(2)
    model, scene, _ = _correspondences(H_TRUE, 100, 150, rng)
    p = VerifyParams(min_inlier_ratio=0.5)
    assert _reason(verify_homography(model, scene, MODEL_W, MODEL_H, SCENE, p)) == "low_inlier_ratio"
    assert isinstance(verify_homography(model, scene, MODEL_W, MODEL_H, SCENE), Verified)


def test_too_few_distinct():
    # 25 matches, but only 5 distinct points repeated (repeated texture): not evidence.
    rng = np.random.default_rng(3)
    model = np.repeat(rng.uniform(0, [MODEL_W, MODEL_H], (5, 2)), 5, axis=0)
    scene = _project(H_TRUE, model)
    assert _reason(verify_homography(model, scene, MODEL_W, MODEL_H, SCENE)) == "too_few_distinct"


def test_estimation_failed():
    model = np.tile([[10.0, 20.0]], (20, 1))
    assert _reason(verify_homography(model, model + 5, MODEL_W, MODEL_H, SCENE)) == "estimation_failed"


def _collinear_cases():
    """Exact matches whose model points all lie on one line (a text baseline, an edge)."""
    t = np.linspace(0, 1, 20)[:, None]
    model = t * np.array([300.0, 200.0])
    yield model, model + 5
    for seed in range(30):
        rng = np.random.default_rng(seed)
        a, b = rng.uniform(0, [MODEL_W, MODEL_H], (2, 2))
        model = a + t * (b - a)
        yield model, model + rng.uniform(-50, 50, 2)
        yield model, 1.2 * model + 30


@pytest.mark.parametrize("method", ["magsac", "ransac"])
def test_collinear_matches_are_never_a_detection(method):
    accepted = [
        k
        for k, (model, scene) in enumerate(_collinear_cases())
        if verify_homography(model, scene, MODEL_W, MODEL_H, SCENE, VerifyParams(method=method))
    ]
    assert accepted == []


@pytest.mark.parametrize(
    "method",
    [
        "magsac",
        "ransac",
        "usac_default",
    ],
)
def test_homography_is_as_accurate_as_least_squares_on_its_inliers(method):
    for seed in range(5):
        rng = np.random.default_rng(seed)
        model, scene, truth = _correspondences(H_TRUE, 120, 180, rng)
        v = verify_homography(model, scene, MODEL_W, MODEL_H, SCENE, VerifyParams(method=method))
        assert isinstance(v, Verified), v
        lsq, _ = cv2.findHomography(model[truth], scene[truth], 0)
        truth_corners = _project(H_TRUE, _corners())
        err = np.abs(_project(v.homography, _corners()) - truth_corners).max()
        err_lsq = np.abs(_project(lsq, _corners()) - truth_corners).max()
        assert err <= 2 * err_lsq + 0.1, (seed, err, err_lsq)


def _verify_view(H, w=MODEL_W, h=MODEL_H, scene_shape=SCENE, params=None, n=60, seed=4):
    """Verify exact correspondences generated from ``H`` (points spread over the model)."""
    rng = np.random.default_rng(seed)
    model = rng.uniform(0, [w, h], (n, 2))
    return verify_homography(model, _project(H, model), w, h, scene_shape, params)


def test_mirrored_view_is_rejected():
    # Reflection about the vertical axis, placed inside the scene.
    H = np.array([[-1.0, 0, MODEL_W + 100], [0, 1, 100], [0, 0, 1]])
    for method in ("ransac", "lmeds"):
        assert _reason(_verify_view(H, params=VerifyParams(method=method))) == "mirrored"
    # OpenCV's USAC refuses orientation-reversing models itself: still a rejection.
    for method in ("magsac", "usac_default"):
        assert not _verify_view(H, params=VerifyParams(method=method))
    reason, corners = quad_checks(H, MODEL_W, MODEL_H, SCENE, VerifyParams())
    assert reason == "mirrored"
    np.testing.assert_allclose(corners, _project(H, _corners()))


def test_tiny_view_is_rejected_for_area():
    H = np.diag([0.05, 0.05, 1.0])  # 16 x 12 px: 192 px² < 400
    H[:2, 2] = 200
    assert _reason(_verify_view(H)) == "area"
    # A view much larger than the frame is judged by its geometry, not its size; a caller may cap it.
    big = np.diag([4.0, 4.0, 1.0])
    assert quad_checks(big, MODEL_W, MODEL_H, SCENE, VerifyParams())[0] is None
    assert quad_checks(big, MODEL_W, MODEL_H, SCENE, VerifyParams(max_area_fraction=1.5))[0] == "area"


def test_scale_change_is_rejected():
    # A 10x10 model seen 100x larger in area (10x per side): inside area limits, outside scale_range.
    H = np.array([[10.0, 0, 100], [0, 10.0, 100], [0, 0, 1]])
    assert quad_checks(H, 10, 10, SCENE, VerifyParams())[0] == "scale_change"
    assert quad_checks(H, 10, 10, SCENE, VerifyParams(scale_range=(1e-3, 200.0)))[0] is None


def test_aspect_change_is_rejected():
    H = np.array([[1.5, 0, 50], [0, 0.25, 100], [0, 0, 1]])  # aspect changes by 6 > 5
    assert _reason(_verify_view(H)) == "aspect"
    assert isinstance(_verify_view(H, params=VerifyParams(max_aspect_change=7.0)), Verified)


def test_extreme_perspective_is_rejected():
    # Top side 30 px, bottom side 300 px: a 90% foreshortening > max_perspective 0.8.
    H = _h_to([[285, 100], [315, 100], [450, 350], [150, 350]])
    assert _reason(_verify_view(H)) == "perspective"
    assert isinstance(_verify_view(H, params=VerifyParams(max_perspective=0.95)), Verified)


def test_bow_tie_view_is_rejected():
    # The model outline mapped onto a crossing quadrilateral. Any such homography sends part of the model
    # through the line at infinity, so it is caught before the
    # self-intersection test can see it (a corner has w <= 0: behind the camera).
    bow = [[100, 100], [400, 350], [400, 100], [100, 350]]
    H = _h_to(bow)
    w = (np.c_[_corners(), np.ones(4)] @ H.T)[:, 2]
    assert np.any(w <= 0)
    assert _reason(_verify_view(H)) in ("behind_camera", "self_intersecting")
    assert quad_checks(H, MODEL_W, MODEL_H, SCENE, VerifyParams())[0] == "behind_camera"


def test_degenerate_rank_deficient_h_is_not_convex():
    # A rank-2 H flattens the outline onto a line: four collinear corners make no convex quadrilateral.
    H = np.array([[1.0, 1.0, 100], [1.0, 1.0, 100], [0, 0, 1]])
    assert quad_checks(H, MODEL_W, MODEL_H, SCENE, VerifyParams())[0] == "not_convex"


@pytest.mark.parametrize(
    "quad",
    [
        [[100, 100], [420, 100], [420, 340], [100, 340]],  # axis-aligned, same size
        [[200, 50], [400, 200], [250, 400], [50, 250]],  # rotated 45° and scaled
        [[150, 90], [452, 120], [430, 370], [170, 340]],  # general perspective
        [[250, 150], [350, 150], [380, 300], [220, 300]],  # a trapezoid within the perspective limit
    ],
)
def test_quad_checks_accepts_plausible_quads_and_returns_them(quad):
    H = _h_to(quad)
    reason, corners = quad_checks(H, MODEL_W, MODEL_H, SCENE, VerifyParams())
    assert reason is None
    np.testing.assert_allclose(corners, np.float64(quad), atol=1e-6)


def test_quad_checks_perspective_limit_is_the_side_ratio():
    # Two trapezoids either side of the limit: short side 25% (passes 0.8) and 15% (fails) of the long one.
    p = VerifyParams(max_perspective=0.8)
    ok = _h_to([[250, 100], [350, 100], [500, 350], [100, 350]])  # 100 vs 400
    bad = _h_to([[270, 100], [330, 100], [500, 350], [100, 350]])  # 60 vs 400
    assert quad_checks(ok, MODEL_W, MODEL_H, SCENE, p)[0] is None
    assert quad_checks(bad, MODEL_W, MODEL_H, SCENE, p)[0] == "perspective"


def test_every_reason_has_a_description():
    for key in (
        "too_few_matches",
        "estimation_failed",
        "too_few_inliers",
        "low_inlier_ratio",
        "too_few_distinct",
        "not_convex",
        "self_intersecting",
        "mirrored",
        "behind_camera",
        "ill_conditioned",
        "inliers_clustered",
        "area",
        "scale_change",
        "aspect",
        "perspective",
    ):
        assert isinstance(REASONS[key], str) and REASONS[key]


def test_verify_params_rejects_unknown_method():
    with pytest.raises(ValueError, match="method"):
        VerifyParams(method="bogus")


def test_score_from_inliers_monotone_and_bounded():
    mi = 10
    for matches in (10, 50, 400):
        scores = [score_from_inliers(k, matches, mi) for k in range(0, matches + 1)]
        assert all(0.0 <= s <= 1.0 for s in scores)
        assert all(s == 0.0 for s in scores[:mi])
        assert scores[mi] > 0
        assert all(b >= a for a, b in zip(scores, scores[1:], strict=False))
    # More putative matches for the same inliers (a smaller inlier share) never raises the score.
    by_matches = [score_from_inliers(40, m, mi) for m in range(40, 2000, 37)]
    assert all(b <= a for a, b in zip(by_matches, by_matches[1:], strict=False))
    assert score_from_inliers(10_000, 10_000, mi) == pytest.approx(1.0, abs=1e-6)
    assert score_from_inliers(5, 0, mi) == 0.0


def _visible_fraction_by_sampling(H, frame_shape, n=400):
    """Share of a dense grid of model points that lands inside the frame (an independent estimate)."""
    xs, ys = np.meshgrid((np.arange(n) + 0.5) * MODEL_W / n, (np.arange(n) + 0.5) * MODEL_H / n)
    p = _project(H, np.c_[xs.ravel(), ys.ravel()])
    fh, fw = frame_shape
    return float(np.mean((p[:, 0] >= 0) & (p[:, 0] <= fw) & (p[:, 1] >= 0) & (p[:, 1] <= fh)))


@pytest.mark.parametrize(
    "quad",
    [
        [[-200, -150], [500, -100], [560, 420], [-150, 380]],  # a close-up: every corner outside the frame
        [[400, 100], [900, 150], [880, 420], [420, 400]],  # half outside on the right
        [[100, 300], [500, 280], [520, 700], [90, 650]],  # foreshortened, bottom part outside
    ],
)
def test_object_partly_outside_the_frame_is_a_detection_with_its_visible_fraction(quad):
    H = _h_to(quad)
    v = _verify_view(H)
    assert isinstance(v, Verified), v
    np.testing.assert_allclose(v.corners, np.float64(quad), atol=1.0)  # the full outline, beyond the frame
    assert v.visible_fraction == pytest.approx(_visible_fraction_by_sampling(H, SCENE), abs=0.01)
    assert 0.0 < v.visible_fraction < 1.0
    d = v.to_detection("x")
    assert d.visible_fraction == v.visible_fraction and d.to_json()["visible_fraction"] == round(d.visible_fraction, 4)


def test_part_of_the_model_behind_the_camera_is_rejected_with_its_own_reason():
    # Strong perspective: the model's right edge maps through the line at infinity.
    H = np.array([[1.0, 0, 100], [0, 1.0, 100], [-1.0 / 250, 0, 1.0]])
    w = (np.c_[_corners(), np.ones(4)] @ H.T)[:, 2]
    assert np.any(w <= 0) and np.any(w > 0)
    assert quad_checks(H, MODEL_W, MODEL_H, SCENE, VerifyParams())[0] == "behind_camera"


def test_ill_conditioned_homography_is_rejected():
    # Nearly rank-deficient: the model collapses onto a thin sliver along a diagonal.
    H = np.array([[1.0, 1.0, 100], [1.0, 1.0005, 100], [0, 0, 1]])
    assert homography_condition(H, MODEL_W, MODEL_H, SCENE) > 1e4
    assert quad_checks(H, MODEL_W, MODEL_H, SCENE, VerifyParams(scale_range=(1e-9, 1e9)))[0] == "ill_conditioned"
    for quad in ([[100, 100], [420, 100], [420, 340], [100, 340]], [[150, 90], [452, 120], [430, 370], [170, 340]]):
        assert homography_condition(_h_to(quad), MODEL_W, MODEL_H, SCENE) < 100


def test_inliers_in_one_small_patch_of_a_large_outline_are_rejected():
    """Matches from a 12 x 12 px corner of the model agree on a homography, but say nothing about the rest."""
    rng = np.random.default_rng(7)
    H = _h_to([[100, 100], [420, 100], [420, 340], [100, 340]])
    model = rng.uniform([5, 5], [17, 17], (40, 2))
    scene = _project(H, model) + rng.normal(0, 0.2, (40, 2))
    v = verify_homography(model, scene, MODEL_W, MODEL_H, SCENE, VerifyParams(min_spread=0.0))
    assert not v and v.reason in ("inliers_clustered", "too_few_distinct")
    spread = rng.uniform([5, 5], [MODEL_W - 5, MODEL_H - 5], (40, 2))
    assert verify_homography(spread, _project(H, spread), MODEL_W, MODEL_H, SCENE, VerifyParams())
