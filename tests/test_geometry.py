"""objrec.geometry against OpenCV and against areas known by construction."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from objrec.geometry import (
    check_homography,
    map_points,
    model_corners,
    outline_in_frame,
    polygon_area,
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
    with pytest.raises(ValueError, match="H_true: expected a finite 3x3 homography"):
        check_homography(np.eye(2), "H_true")
    singular = np.ones((3, 3))
    assert singular_homography(singular)
    with pytest.raises(ValueError, match="H: the homography is singular"):
        check_homography(singular)
