"""View synthesis at enrolment: the views' geometry against OpenCV's own transforms, and storage.

References: ``cv2.transform`` with the view's affine map (and its inverse from ``cv2.invertAffineTransform``),
the pixel content of warped images, and features detected on the model image itself.
"""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from objrec import ModelDB
from objrec.cli import main
from objrec.data import sample_photos
from objrec.features import SIFT
from objrec.modeldb.views import (
    AFFINE_TILTS,
    TILT_TOLERANCE,
    View,
    affine_views,
    check_views,
    covered_tilt,
    map_to_model,
    view_affine,
    warp_view,
)


@pytest.fixture(scope="module")
def photo() -> np.ndarray:
    """A real photograph (scikit-learn's sample image of a temple in China), gray, 400 px wide."""
    img = next(iter(sample_photos().values()))
    h, w = img.shape[:2]
    return cv2.resize(cv2.cvtColor(img, cv2.COLOR_BGR2GRAY), (400, round(400 * h / w)), interpolation=cv2.INTER_AREA)


def test_affine_views_follow_asift_sampling():
    views = affine_views((2.0, 4.0), 72.0)
    assert [v.longitude for v in views if v.tilt == 2.0] == pytest.approx([0, 36, 72, 108, 144])
    assert len([v for v in views if v.tilt == 4.0]) == 10
    assert all(0 <= v.longitude < 180 for v in views)


def test_default_tilts_are_the_geometric_series_to_16():
    assert AFFINE_TILTS == pytest.approx([2 ** (k / 2) for k in range(1, 9)])
    views = affine_views()
    assert len([v for v in views if v.tilt == 16.0]) == 40  # ceil(180 * 16 / 72) longitudes


def test_covered_tilt_follows_the_largest_simulated_tilt():
    table = {"views": [[1.0, 0.0], [4.0, 0.0], [8.0, 9.0]], "n_features": {}}
    assert covered_tilt(table) == pytest.approx(TILT_TOLERANCE * 8.0)
    assert covered_tilt(None) == pytest.approx(TILT_TOLERANCE)


@pytest.mark.parametrize("view", [View(2.0, 30.0), View(4.0, 117.0), View(1.0, 90.0)])
def test_view_affine_agrees_with_the_warped_pixels(view):
    """Gaussian blobs at known model positions are found in the view where cv2.transform puts them."""
    h, w = 240, 320
    pts = np.array([[60.0, 50.0], [250.0, 70.0], [160.0, 120.0], [90.0, 200.0], [270.0, 190.0]])
    ys, xs = np.mgrid[0:h, 0:w]
    img = np.zeros((h, w))
    for x, y in pts:
        img += 200 * np.exp(-((xs - x) ** 2 + (ys - y) ** 2) / (2 * 6.0**2))
    out, A = warp_view(np.clip(img, 0, 255).astype(np.uint8), view)
    assert out.shape == (view_affine(view, w, h)[1][1], view_affine(view, w, h)[1][0])
    want = cv2.transform(pts.reshape(-1, 1, 2), A).reshape(-1, 2)
    f = out.astype(np.float64)
    for x, y in want:
        x0, y0 = int(round(x)), int(round(y))
        win = f[y0 - 8 : y0 + 9, x0 - 8 : x0 + 9]
        wy, wx = np.mgrid[y0 - 8 : y0 + 9, x0 - 8 : x0 + 9]
        cx, cy = (win * wx).sum() / win.sum(), (win * wy).sum() / win.sum()
        assert np.hypot(cx - x, cy - y) < 0.35, (view, (x, y), (cx, cy))


@pytest.mark.parametrize("view", [View(1.5, 30.0), View(2.0, 140.0)])
def test_view_keypoints_map_back_to_model_coordinates(photo, view):
    """Keypoints found on a view go back through the inverse affine map (cv2.transform as reference),
    those outside the model image are dropped, and they land where the same points are found on the model
    image itself."""
    h, w = photo.shape
    out, A = warp_view(photo, view)
    raw = SIFT(backend="cpu").detect_and_compute(out)
    mapped = map_to_model(raw, A, w, h)
    ref = cv2.transform(raw.xy.reshape(-1, 1, 2).astype(np.float64), cv2.invertAffineTransform(A)).reshape(-1, 2)
    inside = (ref[:, 0] >= 0) & (ref[:, 0] <= w - 1) & (ref[:, 1] >= 0) & (ref[:, 1] <= h - 1)
    assert len(mapped) == int(inside.sum()) > 50
    np.testing.assert_allclose(mapped.xy, ref[inside], atol=1e-3)
    np.testing.assert_array_equal(mapped.descriptors, raw.descriptors[inside])
    # Distinctive mutual nearest neighbours with the model image's own features (ratio 0.7): the same
    # points, within a pixel or two.
    own = SIFT(backend="cpu").detect_and_compute(photo)
    d = ((mapped.descriptors[:, None, :] - own.descriptors[None, :, :]) ** 2).sum(axis=2)
    nn, back = d.argmin(axis=1), d.argmin(axis=0)
    two = np.sort(d, axis=1)[:, :2]
    mutual = np.flatnonzero((back[nn] == np.arange(len(mapped))) & (two[:, 0] < 0.49 * two[:, 1]))
    dist = np.linalg.norm(mapped.xy[mutual] - own.xy[nn[mutual]], axis=1)
    assert len(mutual) >= 10 and np.median(dist) < 2.0, (len(mutual), np.median(dist))


def test_rotated_view_keeps_sizes_and_turns_angles_back(photo):
    """A pure rotation (tilt 1): back-mapped sizes and orientations agree with the model image's own."""
    h, w = photo.shape
    out, A = warp_view(photo, View(1.0, 90.0))
    mapped = map_to_model(SIFT(backend="cpu").detect_and_compute(out), A, w, h)
    own = SIFT(backend="cpu").detect_and_compute(photo)
    d = ((mapped.descriptors[:, None, :] - own.descriptors[None, :, :]) ** 2).sum(axis=2)
    nn = d.argmin(axis=1)
    same = np.linalg.norm(mapped.xy - own.xy[nn], axis=1) < 1.0
    assert same.sum() > 50
    dang = (mapped.angle[same] - own.angle[nn[same]] + 180.0) % 360.0 - 180.0
    assert np.median(np.abs(dang)) < 3.0
    assert np.median(np.abs(mapped.size[same] / own.size[nn[same]] - 1)) < 0.05


def test_check_views_names_the_allowed_values():
    assert check_views(None) is None and check_views("none") is None and check_views("affine") == "affine"
    with pytest.raises(ValueError, match="'none', 'affine'"):
        check_views("perspective")


def test_enroll_with_views_round_trips(tmp_path, photo):
    db = ModelDB.create(tmp_path / "db")
    plain = db.enroll("plain", photo)
    obj = db.enroll("viewed", photo, views="affine")
    assert obj.views == "affine" and plain.views is None
    for kind, f in obj.features.items():
        assert len(f) > 2 * len(plain.features[kind])
        np.testing.assert_array_equal(f.xy[: len(plain.features[kind])], plain.features[kind].xy)
        assert f.xy.min() >= 0 and np.all(f.xy.max(axis=0) <= [obj.width - 1, obj.height - 1])
        assert sum(obj.view_table["n_features"][kind]) == len(f)
    again = ModelDB.open(tmp_path / "db")
    assert again.info("viewed").views == "affine" and again.info("plain").views is None
    assert again.verify() == []
    for kind, f in again.get("viewed").features.items():
        np.testing.assert_array_equal(f.descriptors, obj.features[kind].descriptors)
        np.testing.assert_array_equal(f.xy, obj.features[kind].xy)
    with pytest.raises(ValueError, match="views"):
        db.enroll("bad", photo, views="projective")
    assert "bad" not in db


def test_enroll_many_with_views_skips_only_same_views(tmp_path, photo):
    path = tmp_path / "photo.png"
    cv2.imwrite(str(path), photo)
    db = ModelDB.create(tmp_path / "db")
    assert db.enroll_many([("p", path)], progress=False).enrolled == ["p"]
    again = db.enroll_many([("p", path)], progress=False, views="affine")
    assert again.failed and again.failed[0].name == "p"
    rep = db.enroll_many([("p", path)], progress=False, views="affine", replace=True)
    assert rep.enrolled == ["p"] and db.info("p").views == "affine"
    assert db.enroll_many([("p", path)], progress=False, views="affine").skipped == ["p"]


def test_cli_enroll_with_views(tmp_path, photo, capsys):
    path = tmp_path / "photo.png"
    cv2.imwrite(str(path), photo)
    folder = tmp_path / "dir"
    folder.mkdir()
    cv2.imwrite(str(folder / "other.png"), photo)
    db = str(tmp_path / "db")
    assert main(["enroll", "--db", db, "--views", "affine", f"p={path}", "--from", str(folder), "--no-progress"]) == 0
    assert "views affine" in capsys.readouterr().out
    opened = ModelDB.open(db)
    assert opened.info("p").views == "affine" and opened.info("other").views == "affine"
    assert main(["enroll", "--db", db, "--views", "tilted", f"q={path}"]) == 2
    err = capsys.readouterr().err
    assert "'none', 'affine'" in err and len(err.strip().splitlines()) == 1
