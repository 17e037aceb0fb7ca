"""The operating envelope: a fixed grid of rendered views, exact ground truth, and what it finds."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from objrec.data import sample_background, sample_objects
from objrec.envelope import (
    CALIBRATION_VIEWS,
    FOCAL_PX,
    FRAME_SIZE,
    GRID,
    Envelope,
    measure_envelope,
    view_homography,
)
from objrec.geometry import model_corners
from objrec.imageio import InputError
from objrec.scenes import compose_scene


def _views(**wanted) -> list[int]:
    """Indices of the grid views whose axis is a key of ``wanted`` and value in its list (None: all values)."""
    return [i for i, v in enumerate(GRID) if v.axis in wanted and (wanted[v.axis] is None or v.value in wanted[v.axis])]


def _fine_detail(n: int = 40, cell: int = 16, seed: int = 0) -> np.ndarray:
    """A grid of n x n small shapes, each 1/n of the image wide: legible at 240 px, a grey blur at 60 px."""
    rng = np.random.default_rng(seed)
    img = np.full((n * cell, n * cell, 3), 255, np.uint8)
    for i in range(n):
        for j in range(n):
            c = tuple(int(v) for v in rng.integers(0, 200, 3))
            x, y = j * cell, i * cell
            if (i + j) % 2:
                cv2.circle(img, (x + cell // 2, y + cell // 2), int(rng.integers(3, cell // 2)), c, -1)
            else:
                p, q = rng.integers(1, 6, 2), rng.integers(10, 15, 2)
                cv2.rectangle(img, (x + int(p[0]), y + int(p[1])), (x + int(q[0]), y + int(q[1])), c, -1)
    return img


def test_grid_is_fixed_and_covers_the_ranges():
    assert len(GRID) >= 60
    assert sum(v.axis == "base" for v in GRID) == 1
    sizes = [v.size_px for v in GRID if v.axis == "size"]
    assert min(sizes) == 60 and max(sizes) == 400
    assert max(v.tilt_deg for v in GRID if v.axis == "tilt") == 70
    assert max(v.distortion.blur_sigma for v in GRID if v.axis == "blur") == 3
    # every single-axis view differs from the base in exactly its own parameter
    base = GRID[0]
    for v in GRID:
        if v.axis == "size":
            assert (v.rotation_deg, v.tilt_deg, v.distortion) == (base.rotation_deg, base.tilt_deg, base.distortion)
        if v.axis in ("blur", "gamma", "jpeg"):
            assert (v.size_px, v.rotation_deg, v.tilt_deg) == (base.size_px, 0, 0)
    assert set(CALIBRATION_VIEWS) <= set(range(len(GRID))) and 0 in CALIBRATION_VIEWS
    # the same frames on every call: the grid and the rendering are deterministic for a seed
    img = sample_objects()["cover"]
    bg = sample_background(FRAME_SIZE, seed=0)
    i = _views(combined=[3])[0]
    H = view_homography((img.shape[1], img.shape[0]), GRID[i])
    frames = [
        compose_scene(
            bg, {"x": img}, np.random.default_rng([0, i]), homographies={"x": H}, distortion=GRID[i].distortion
        ).image
        for _ in range(2)
    ]
    np.testing.assert_array_equal(frames[0], frames[1])


@pytest.mark.parametrize("index", range(0, len(GRID), 3))
def test_ground_truth_corners_match_opencv(index):
    """compose_scene's corners are cv2.perspectiveTransform of the model's corners under the view's homography,
    and the shape is the one cv2.projectPoints gives for the tilted plane (up to the in-plane rotation and the
    recentring translation)."""
    view = GRID[index]
    w, h = 300, 200
    H = view_homography((w, h), view)
    img = np.zeros((h, w, 3), np.uint8)
    scene = compose_scene(np.zeros((480, 640, 3), np.uint8), {"x": img}, 0, homographies={"x": H})
    corners = model_corners(w, h).reshape(-1, 1, 2).astype(np.float64)
    np.testing.assert_allclose(scene.objects[0].corners, cv2.perspectiveTransform(corners, H)[:, 0], atol=1e-6)

    s = view.size_px / max(w, h)
    plane = np.column_stack([(corners[:, 0] - [w / 2, h / 2]) * s, np.zeros(4)])
    axis = [0.0, 1.0, 0.0] if view.tilt_axis == "y" else [1.0, 0.0, 0.0]
    rvec = np.deg2rad(view.tilt_deg) * np.array(axis)
    K = np.array([[FOCAL_PX, 0, 0], [0, FOCAL_PX, 0], [0, 0, 1]])
    proj, _ = cv2.projectPoints(plane, rvec, np.array([0.0, 0.0, FOCAL_PX]), K, None)
    a = np.deg2rad(view.rotation_deg)  # counter-clockwise on screen (y down)
    R2 = np.array([[np.cos(a), np.sin(a)], [-np.sin(a), np.cos(a)]])
    expected = proj[:, 0] @ R2.T
    got = scene.objects[0].corners
    np.testing.assert_allclose(got - got.mean(0), expected - expected.mean(0), atol=1e-6)
    np.testing.assert_allclose(got.mean(0), [320, 240], atol=1e-6)


def test_rich_image_is_found_at_base_and_large():
    env = measure_envelope(sample_objects()["cover"], views=_views(base=None, size=[400], tilt=[30]))
    assert env.error is None
    assert [r.found for r in env.views] == [True, True, True]
    assert all(r.corner_error <= r.tolerance for r in env.views)
    assert env.smallest_size_px == 240  # no smaller view measured: the limit stays at the base
    assert env.steepest_tilt_deg == 30


def test_small_detail_is_lost_when_small():
    env = measure_envelope(_fine_detail(), views=_views(base=None, size=[60, 400]))
    found = {(r.view.axis, r.view.value): r.found for r in env.views}
    assert found[("base", 0.0)] and found[("size", 400)]
    assert not found[("size", 60)]
    assert env.smallest_size_px > 60


@pytest.mark.parametrize(
    "img",
    [np.full((300, 400, 3), 128, np.uint8), np.tile(np.linspace(0, 255, 400).astype(np.uint8), (300, 1))],
    ids=["blank", "gradient"],
)
def test_textureless_image_is_never_found(img):
    env = measure_envelope(img)
    assert env.error is not None and "no features" in env.error
    assert len(env.views) == len(GRID) and env.found_share == 0.0
    assert env.smallest_size_px is None and env.steepest_tilt_deg is None and env.strongest_blur_sigma is None
    d = env.to_dict()
    assert d["found_share"] == 0.0 and len(d["views"]) == len(GRID)


def test_limits_walk_from_the_base(tmp_path):
    """A limit stops at the first miss on the way out, even when a harder view is found again."""
    from objrec.envelope import ViewResult

    def r(i, found):
        return ViewResult(i, GRID[i], found, found, 1.0 if found else None, 5.0, 10, 1.0)

    sizes = {GRID[i].value: i for i in _views(size=None)}
    results = [r(0, True), r(sizes[60], True), r(sizes[80], False), r(sizes[100], True), r(sizes[400], True)]
    env = Envelope((300, 400), results)
    assert env.smallest_size_px == 100
    assert env.smallest_width_px == pytest.approx(75)
    assert env.found_share == pytest.approx(0.8)
    assert env.limit("blur") == 0.0
    env.views[0] = r(0, False)
    assert env.smallest_size_px is None
    out = env.plot(tmp_path / "env.png")
    assert cv2.imread(str(out)).shape[2] == 3
    with pytest.raises(ValueError, match="axis"):
        env.limit("rotation")


def test_bad_input_names_the_file(tmp_path):
    p = tmp_path / "broken.jpg"
    p.write_bytes(b"not an image")
    with pytest.raises(InputError, match="broken.jpg"):
        measure_envelope(p)
    with pytest.raises(ValueError, match="views"):
        measure_envelope(sample_objects()["cover"], views=[len(GRID)])


def test_runs_are_single_runs_of_successive_seeds_and_a_view_counts_when_most_runs_find_it(tmp_path):
    """Run ``k`` of a measurement with ``runs`` is what a single run with seed ``seed + k`` measures: the found
    share is the share of all the runs' views found, and a view is found (for limits and plot) in a majority."""
    img = _fine_detail(n=24, cell=16, seed=3)  # fine detail: found large, lost small, uncertain in between
    views = _views(base=None, size=[60, 115, 130], combined=[3])  # size 115 and combined 3 differ between seeds
    singles = [measure_envelope(img, views=views, seed=s) for s in (5, 6, 7)]
    env = measure_envelope(img, views=views, seed=5, runs=3)
    assert env.runs == 3 and len(env.views) == len(views)
    assert any(0 < r.found_runs < 3 for r in env.views)  # views the runs disagree on: the counts are tested
    for j, r in enumerate(env.views):
        hits = [s.views[j].found for s in singles]
        assert r.runs == 3 and r.found_runs == sum(hits)
        assert r.found == (sum(hits) >= 2)
        assert r.reported == any(s.views[j].reported for s in singles)
    assert env.found_share == pytest.approx(np.mean([s.found_share for s in singles]))
    axis = [r for r in env.views if r.view.axis == "size"]
    assert env.axis_share("size") == pytest.approx(sum(r.found_runs for r in axis) / (3 * len(axis)))
    d = env.to_dict()
    assert d["runs"] == 3 and d["views"][0]["found_runs"] == env.views[0].found_runs
    assert cv2.imread(str(env.plot(tmp_path / "env.png"))).shape[2] == 3
    for bad in (0, -1, 1.5, True):
        with pytest.raises(ValueError, match="runs"):
            measure_envelope(img, views=views, runs=bad)
