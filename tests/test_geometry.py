"""objrec.geometry against OpenCV and against areas known by construction."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from objrec.geometry import (
    check_homography,
    forward_backward,
    map_points,
    model_corners,
    outline_in_frame,
    polygon_area,
    robust_homography,
    singular_homography,
    usable_homography,
    visible_part,
)


def _homography(rng: np.random.Generator) -> np.ndarray:
    H = np.eye(3) + rng.normal(0, [[0.1, 0.1, 20.0], [0.1, 0.1, 20.0], [1e-4, 1e-4, 0.0]])
    return H / H[2, 2]


def test_points_map_as_opencv_maps_them():
    rng = np.random.default_rng(0)
    for _ in range(20):
        H, pts = _homography(rng), rng.uniform(0, 640, (50, 2))
        want = cv2.perspectiveTransform(pts.reshape(-1, 1, 2), H).reshape(-1, 2)
        assert np.allclose(map_points(H, pts), want, atol=1e-9)


def test_a_model_s_corners_are_its_outline_in_order():
    q = model_corners(40, 30)
    assert q.dtype == np.float64 and q.tolist() == [[0, 0], [40, 0], [40, 30], [0, 30]]
    assert polygon_area(q) == 1200.0
    assert polygon_area(q) == pytest.approx(cv2.contourArea(q.astype(np.float32)))


def test_an_outline_half_outside_the_frame_shows_half_the_model():
    """A 100 x 50 model doubled in size and shifted so that its left half lies left of the frame: half its
    area in view, measured back in model pixels whatever the scale."""
    H = np.array([[2.0, 0.0, -100.0], [0.0, 2.0, 10.0], [0.0, 0.0, 1.0]])
    q = map_points(H, model_corners(100, 50))
    poly, area, share = visible_part(H, q, 100, 50, (480, 640))
    assert area == pytest.approx(100 * 100) and share == pytest.approx(0.5)
    assert poly.min(axis=0)[0] == pytest.approx(0.0)
    inside, part = outline_in_frame(q, 640, 480)
    assert inside == pytest.approx(area) and part is not None
    whole = map_points(np.eye(3), model_corners(100, 50)) + 10
    assert visible_part(np.eye(3), whole, 100, 50, (480, 640))[2] == 1.0
    away = q + 1000
    assert outline_in_frame(away, 640, 480)[0] == 0.0


def test_only_finite_homographies_that_can_be_normalised_are_usable():
    assert usable_homography(np.eye(3))
    assert not usable_homography(None)
    assert not usable_homography(np.full((3, 3), np.nan))
    flat = np.eye(3)
    flat[2, 2] = 0.0
    assert not usable_homography(flat)


def test_a_homography_argument_is_checked_by_name():
    assert check_homography(np.eye(3).tolist()).dtype == np.float64
    with pytest.raises(ValueError, match=r"H_true: expected a 3x3 homography, got shape \(2, 2\)"):
        check_homography(np.eye(2), "H_true")
    with pytest.raises(ValueError, match="H: homography has non-finite entries"):
        check_homography(np.full((3, 3), np.nan))
    with pytest.raises(ValueError, match="H: homography has H.2,2. = 0.0, cannot normalise"):
        check_homography(np.array([[1.0, 0, 0], [0, 1, 0], [1, 0, 0]]), normalise=True)
    assert check_homography(2 * np.eye(3), normalise=True)[2, 2] == 1.0
    singular = np.ones((3, 3))
    assert singular_homography(singular)
    with pytest.raises(ValueError, match="H: the homography is singular"):
        check_homography(singular)


def _texture(seed=0, size=(240, 320)):
    rng = np.random.default_rng(seed)
    img = cv2.resize(rng.integers(0, 256, (size[0] // 8, size[1] // 8)).astype(np.uint8), size[::-1])
    return cv2.GaussianBlur(img, (0, 0), 1.5)


def test_forward_backward_follows_a_known_shift_and_drops_covered_points():
    """Points of a texture shifted by a known sub-pixel amount are found shifted by it; points whose
    neighbourhood the second image covers with a flat patch do not come back, and are not trusted."""
    a = _texture()
    shift = np.array([3.4, -2.2])
    b = cv2.warpAffine(
        a, np.float64([[1, 0, shift[0]], [0, 1, shift[1]]]), a.shape[::-1], borderMode=cv2.BORDER_REFLECT
    )
    b[150:230, 200:310] = 128  # a flat cover over the lower right
    xs, ys = np.meshgrid(np.arange(40, 300, 20), np.arange(40, 220, 20))
    p0 = np.stack([xs.ravel(), ys.ravel()], 1).astype(np.float32)
    for guess in (None, p0 + shift.astype(np.float32)):
        p1, good = forward_backward(a, b, p0, guess, 21, 2, (30, 0.01), 0.5)
        covered = (p0[:, 0] + shift[0] > 185) & (p0[:, 1] + shift[1] > 135)
        clear = (p0[:, 0] + shift[0] < 185) | (p0[:, 1] + shift[1] < 135)
        assert good[clear].mean() > 0.95 and not good[covered & (p0[:, 0] > 215) & (p0[:, 1] > 165)].any()
        np.testing.assert_allclose(p1[good & clear], p0[good & clear] + shift, atol=0.1)
    assert forward_backward(a, b, np.zeros((0, 2), np.float32), None, 21, 2, (30, 0.01), 0.5)[0].shape == (0, 2)


def test_robust_homography_recovers_the_true_one_among_outliers():
    """Correspondences under a known homography, a third of them replaced by random points: the fit maps the
    model's corners within a pixel of the true map (the pairs carry 0.2 px of noise), and its inliers are the
    true pairs."""
    rng = np.random.default_rng(3)
    H = np.array([[0.9, 0.12, 40.0], [-0.08, 1.1, 25.0], [2e-4, -1e-4, 1.0]])
    src = rng.uniform(0, 300, (90, 2))
    dst = map_points(H, src) + rng.normal(0, 0.2, (90, 2))
    bad = np.arange(90) % 3 == 0
    dst[bad] = rng.uniform(0, 400, (int(bad.sum()), 2))
    corners = model_corners(300, 300)
    for sampler in ("rho", "ransac"):
        est, inl = robust_homography(src, dst, 2.0, max_iters=500, sampler=sampler)
        assert est is not None and est[2, 2] == pytest.approx(1.0)
        assert np.abs(map_points(est, corners) - map_points(H, corners)).max() < 1.0
        assert (inl == ~bad).mean() > 0.97
    mirror = np.array([[-1.0, 0.0, 299.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])  # a left-right mirror
    est, inl = robust_homography(src[~bad], map_points(mirror, src[~bad]), 1.0, 500, sampler="ransac")
    assert est is not None and inl.all() and np.abs(map_points(est, corners) - map_points(mirror, corners)).max() < 1e-3
    with pytest.raises(ValueError, match="sampler: expected one of"):
        robust_homography(src, dst, 2.0, 100, sampler="lmeds")
    none, flags = robust_homography(src[:3], dst[:3], 2.0, 100)
    assert none is None and flags.shape == (3,) and not flags.any()
