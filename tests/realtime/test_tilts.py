"""Tilted views of the frame (objrec.realtime.tilts): the views' geometry against the affine maps they report, the
features mapped back to frame pixels, the option's checks, and real wide-baseline pairs found only with it."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from objrec import ModelDB, Recognizer
from objrec.datasets import load_annotated_pairs
from objrec.realtime.tilts import DEFAULT_TILTS, check_tilts, search_region, tilted_views, to_frame
from objrec.types import Features


def _texture(h: int = 160, w: int = 200, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    noise = rng.integers(0, 256, (h // 8, w // 8), dtype=np.uint8)
    return cv2.GaussianBlur(cv2.resize(noise, (w, h), interpolation=cv2.INTER_CUBIC), (0, 0), 1.5)


def _anisotropy(lin: np.ndarray) -> float:
    s = np.linalg.svd(lin, compute_uv=False)
    return float(s[0] / s[1])


def test_the_views_sample_each_tilt_at_asift_rotations():
    """ASIFT's sampling: at tilt t the directions are 72/t degrees apart over half a turn (5 views at 2, 10 at 4),
    and each view is foreshortened by t relative to the frame while keeping its area."""
    gray = _texture()
    views = list(tilted_views(gray, (0, 0, 200, 160), (2.0, 4.0)))
    assert len(views) == 5 + 10
    for i, (view, back) in enumerate(views):
        t = 2.0 if i < 5 else 4.0
        lin = back[:, :2]
        assert _anisotropy(lin) == pytest.approx(t, rel=0.03)
        assert abs(np.linalg.det(lin)) == pytest.approx(1.0, rel=0.03)
        assert view.dtype == np.uint8 and view.ndim == 2


def test_each_view_is_the_frame_seen_through_its_reported_map():
    """The view's pixels are the frame's at the positions its map ``back`` gives (an independent resampling of
    the frame by OpenCV's inverse-map warp): the same picture, up to the view's anti-aliasing."""
    gray = _texture(seed=1)
    box = (20, 10, 180, 150)
    for view, back in tilted_views(gray, box, (2.0,)):
        direct = cv2.warpAffine(gray, back, view.shape[::-1], flags=cv2.INTER_LINEAR | cv2.WARP_INVERSE_MAP)
        # compare inside the box's image, away from its borders
        ys, xs = np.mgrid[0 : view.shape[0], 0 : view.shape[1]]
        fx = back[0, 0] * xs + back[0, 1] * ys + back[0, 2]
        fy = back[1, 0] * xs + back[1, 1] * ys + back[1, 2]
        inside = (fx > box[0] + 4) & (fx < box[2] - 4) & (fy > box[1] + 4) & (fy < box[3] - 4)
        assert inside.sum() > 0.3 * view.size
        a, b = view[inside].astype(float), direct[inside].astype(float)
        assert np.corrcoef(a, b)[0, 1] > 0.95
        assert np.abs(a - b).mean() < 6.0


def test_a_foreshortened_picture_has_a_view_that_looks_head_on():
    """A picture foreshortened by 3.5 along 40 degrees: one of the views at tilts 2 and 4 undoes most of it (the
    picture-to-view map is close to a similarity), which the frame itself is far from."""
    phi = np.deg2rad(40.0)
    rot = np.array([[np.cos(phi), -np.sin(phi)], [np.sin(phi), np.cos(phi)]])
    squash = rot @ np.diag([1.0, 1.0 / 3.5]) @ rot.T  # the picture to the frame
    best = min(
        _anisotropy(np.linalg.inv(np.vstack([back, [0, 0, 1]]))[:2, :2] @ squash)
        for _, back in tilted_views(_texture(), (0, 0, 200, 160), DEFAULT_TILTS)
    )
    assert _anisotropy(squash) == pytest.approx(3.5)
    assert best < 1.45


def test_features_of_a_view_map_to_frame_pixels_sizes_and_orientations():
    """Positions through the map (OpenCV's ``cv2.transform`` as the reference), orientations through its linear
    part, sizes by its area factor; an undefined orientation (-1) stays undefined."""
    back = np.array([[0.0, -2.0, 30.0], [2.0, 0.0, 5.0]])  # a quarter turn, twice the size, then a shift
    xy = np.array([[1.0, 2.0], [10.0, 0.0], [3.5, 7.25]], np.float32)
    f = Features(
        xy=xy,
        size=np.array([4.0, 6.0, 8.0], np.float32),
        angle=np.array([0.0, 45.0, -1.0], np.float32),
        response=np.ones(3, np.float32),
        octave=np.zeros(3, np.int32),
        laplacian=np.ones(3, np.int8),
        descriptors=np.eye(3, 64, dtype=np.float32),
        kind="surf",
    )
    g = to_frame(f, back)
    np.testing.assert_allclose(g.xy, cv2.transform(xy[:, None], back)[:, 0], atol=1e-4)
    np.testing.assert_allclose(g.angle, [90.0, 135.0, -1.0], atol=1e-3)
    np.testing.assert_allclose(g.size, [8.0, 12.0, 16.0], rtol=1e-5)
    np.testing.assert_array_equal(g.descriptors, f.descriptors)


def test_the_option_is_checked():
    assert check_tilts(True, None) == DEFAULT_TILTS
    assert check_tilts(False, None) == () and check_tilts(None, 33.0) == () and check_tilts((), None) == ()
    assert check_tilts([4, 2.5], None) == (2.5, 4.0)
    for bad in ([1.0], [0.5, 2], ["x"], 3, [float("nan")]):
        with pytest.raises(ValueError, match="tilts"):
            check_tilts(bad, None)  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="without a budget"):
        check_tilts(True, 33.0)
    assert search_region([(10, 20, 50, 60), (40, 30, 90, 100)], (120, 100)) == (0, 0, 100, 120)
    assert search_region([(40, 40, 60, 60)], (480, 640)) == (35, 35, 65, 65)


def test_a_recognizer_with_a_budget_refuses_tilts(sample_db):
    with pytest.raises(ValueError, match="without a budget"):
        Recognizer(sample_db, budget_ms=33.0, tilts=True)


@pytest.mark.slow
def test_extreme_view_pairs_are_found_with_tilts_and_not_without(shared_data, tmp_path):
    """Real extreme-view pairs (``homography_pairs/extremeview``, adam and graf: a poster and a painting seen at
    strong angles): not found with the defaults, found with ``tilts=True`` within 5 px of the annotated points,
    with tracking on as ``objrec detect`` runs."""
    pairs = {p.label: p for p in load_annotated_pairs(shared_data / "homography_pairs", ["evd"])}
    for label in ("evd/adam", "evd/graf"):
        p = pairs[label]
        a, b = cv2.imread(str(p.path_a)), cv2.imread(str(p.path_b))
        db = ModelDB.create(tmp_path / label.replace("/", "_"))
        db.enroll("a", a)
        assert Recognizer(db).process(b).detections == [], label
        r = Recognizer(db, tilts=True).process(b)
        assert [d.name for d in r.detections] == ["a"], label
        pa = np.asarray(p.points_a, np.float64).reshape(-1, 1, 2)
        mapped = cv2.perspectiveTransform(pa, r.detections[0].homography).reshape(-1, 2)
        assert float(np.median(np.linalg.norm(mapped - np.asarray(p.points_b), axis=1))) < 5.0, label
