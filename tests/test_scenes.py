"""The scene generator's ground truth is exact, and its distortions do what they say."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from objrec.data import sample_background, sample_objects
from objrec.geometry import model_corners
from objrec.scenes import (
    Distortion,
    apply_photometric,
    compose_scene,
    place_homography,
    random_homography,
    warp_object,
)

FRAME = (640, 480)  # (w, h)
BASE = 20  # the marker model's background level

#: Marker centres in model pixels (x, y); deliberately off the pixel grid.
MARKERS = np.array([[30.5, 25.25], [170.0, 30.75], [101.25, 75.5], [40.75, 122.0], [160.5, 124.25]])


def _project(H: np.ndarray, pts: np.ndarray) -> np.ndarray:
    hom = np.c_[pts, np.ones(len(pts))] @ H.T
    return hom[:, :2] / hom[:, 2:3]


def _marker_model(w: int = 200, h: int = 150, sigma: float = 2.0) -> np.ndarray:
    """A dark model image with bright Gaussian dots centred exactly at ``MARKERS`` (pixel centres at
    integer coordinates, OpenCV's convention)."""
    yy, xx = np.mgrid[0:h, 0:w].astype(np.float64)
    img = np.full((h, w), float(BASE))
    for x, y in MARKERS:
        img += 230.0 * np.exp(-((xx - x) ** 2 + (yy - y) ** 2) / (2 * sigma**2))
    return np.clip(img + 0.5, 0, 255).astype(np.uint8)


def _blob_centroids(gray: np.ndarray, threshold: int = 90) -> np.ndarray:
    """Intensity-weighted centroids of the bright blobs (found without knowing where they should be)."""
    n, labels = cv2.connectedComponents((gray > threshold).astype(np.uint8))
    yy, xx = np.mgrid[0 : gray.shape[0], 0 : gray.shape[1]]
    wgt = gray.astype(np.float64) - BASE
    out = []
    for k in range(1, n):
        m = labels == k
        # Grow the blob a little so its whole profile above the base counts.
        m = cv2.dilate(m.astype(np.uint8), np.ones((5, 5), np.uint8)).astype(bool)
        w = np.clip(wgt[m], 0, None)
        out.append([(xx[m] * w).sum() / w.sum(), (yy[m] * w).sum() / w.sum()])
    return np.array(out)


@pytest.mark.parametrize(
    "center, scale, rotation, tilt",
    [
        ((320, 240), 1.0, 0.0, (0.0, 0.0)),
        ((300, 250), 1.7, 23.0, (0.0, 0.0)),
        ((350, 220), 1.5, -35.0, (0.12, -0.08)),
    ],
)
def test_markers_land_at_h_times_p(center, scale, rotation, tilt):
    model = _marker_model()
    H = place_homography((200, 150), center, scale, rotation, tilt)
    scene = compose_scene(np.zeros((480, 640, 3), np.uint8), {"m": model}, rng=0, homographies={"m": H})
    gray = cv2.cvtColor(scene.image, cv2.COLOR_BGR2GRAY)
    found = _blob_centroids(gray)
    want = _project(H, MARKERS)
    assert len(found) == len(MARKERS)
    dist = np.linalg.norm(found[:, None, :] - want[None, :, :], axis=2)
    assert np.all(dist.min(axis=0) < 1.0), dist.min(axis=0)
    truth = scene.truth("m")
    np.testing.assert_allclose(truth.homography, H / H[2, 2], atol=1e-12)
    np.testing.assert_allclose(truth.corners, _project(H, model_corners(200, 150)), atol=1e-9)
    assert truth.model_size == (200, 150)


def test_place_homography_puts_centre_scale_and_rotation():
    H = place_homography((200, 100), (300, 200), 2.0, 90.0)
    q = _project(H, model_corners(200, 100))
    np.testing.assert_allclose(q.mean(axis=0), [300, 200], atol=1e-9)
    # Rotated 90° (image y down: x axis turns onto +y) and doubled: the top edge now runs downwards.
    np.testing.assert_allclose(q[1] - q[0], [0, 400], atol=1e-9)
    np.testing.assert_allclose(q[3] - q[0], [-200, 0], atol=1e-9)


def _quad_area(q: np.ndarray) -> float:
    x, y = q[:, 0], q[:, 1]
    return 0.5 * abs(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1)))


def _cover_and_background():
    return sample_objects()["cover"], sample_background(FRAME, seed=2)


def test_fully_inside_object_is_fully_visible_and_mask_matches_outline():
    cover, bg = _cover_and_background()
    H = place_homography((300, 400), (320, 240), 0.8, 10.0, (0.05, 0.05))
    scene = compose_scene(bg, {"cover": cover}, rng=1, homographies={"cover": H})
    t = scene.truth("cover")
    assert t.visible_fraction == pytest.approx(1.0, abs=0.01)
    area = _quad_area(t.corners)
    assert t.area_fraction == pytest.approx(area / (FRAME[0] * FRAME[1]), rel=0.01)
    # The mask is the outline polygon (up to its boundary pixels).
    poly = np.zeros((FRAME[1], FRAME[0]), np.uint8)
    cv2.fillPoly(poly, [np.round(t.corners * 16).astype(np.int32)], 1, cv2.LINE_8, shift=4)
    disagree = np.sum((scene.object_mask == 1) != poly.astype(bool))
    assert disagree < 0.01 * area
    assert scene.image.shape == (FRAME[1], FRAME[0], 3) and scene.image.dtype == np.uint8


def test_object_half_outside_the_frame_is_half_visible():
    cover, bg = _cover_and_background()
    # Model centre on the left frame edge: its left half lies outside.
    H = place_homography((300, 400), (0, 240), 1.0)
    scene = compose_scene(bg, {"cover": cover}, rng=1, homographies={"cover": H}, inside=False)
    t = scene.truth("cover")
    assert t.visible_fraction == pytest.approx(0.5, abs=0.01)
    assert t.corners[:, 0].min() == pytest.approx(-150.0)
    # A quarter (corner of the frame).
    H = place_homography((300, 400), (0, 0), 1.0)
    scene = compose_scene(bg, {"cover": cover}, rng=1, homographies={"cover": H}, inside=False)
    assert scene.truth("cover").visible_fraction == pytest.approx(0.25, abs=0.01)


@pytest.mark.parametrize("occlusion", [0.15, 0.3, 0.5])
def test_occlusion_lowers_visible_fraction_to_what_is_covered(occlusion):
    cover = sample_objects()["cover"]
    # A background larger than the frame, so compose_scene works on a crop (see the aliasing test below).
    bg = sample_background((960, 540), seed=2)
    H = place_homography((300, 400), (320, 240), 0.9, 5.0)
    kw = dict(rng=7, homographies={"cover": H}, frame_size=FRAME)
    clean = compose_scene(bg, {"cover": cover}, **kw)
    occl = compose_scene(bg, {"cover": cover}, occlusion=occlusion, **kw)
    vf = occl.truth("cover").visible_fraction
    assert 1.0 - occlusion - 0.03 <= vf < 1.0 - 0.3 * occlusion
    # Independent estimate: object pixels of the clean scene that the occluder changed.
    changed = np.any(clean.image != occl.image, axis=2)
    obj = clean.object_mask == 1
    est = (obj & ~changed).sum() / _quad_area(clean.truth("cover").corners)
    assert vf == pytest.approx(est, abs=0.03)


def test_compose_scene_leaves_the_background_untouched():
    cover, bg = _cover_and_background()  # bg already has the frame size
    before = bg.copy()
    first = compose_scene(bg, {"cover": cover}, rng=1)
    first_image = first.image.copy()
    compose_scene(bg, {"cover": cover}, rng=2)
    assert np.array_equal(bg, before)
    assert np.array_equal(first.image, first_image)


def test_later_objects_cover_earlier_ones():
    objs = sample_objects()
    bg = sample_background(FRAME, seed=1)
    Ha = place_homography((310, 305), (300, 240), 0.8)
    Hb = place_homography((300, 400), (300, 240), 0.5)  # smaller, drawn on top, in the middle
    scene = compose_scene(
        bg, {"pagoda": objs["pagoda"], "cover": objs["cover"]}, rng=0, homographies={"pagoda": Ha, "cover": Hb}
    )
    a, b = scene.truth("pagoda"), scene.truth("cover")
    assert b.visible_fraction == pytest.approx(1.0, abs=0.01)
    expected = 1.0 - _quad_area(b.corners) / _quad_area(a.corners)
    assert a.visible_fraction == pytest.approx(expected, abs=0.02)


def _flat(value: int, shape=(120, 160, 3)) -> np.ndarray:
    return np.full(shape, value, np.uint8)


def test_distortion_gain_and_gamma():
    rng = np.random.default_rng(0)
    assert np.all(apply_photometric(_flat(200), Distortion(gain=0.5), rng) == 100)
    out = apply_photometric(_flat(128), Distortion(gamma=2.0), rng)
    assert abs(int(out[0, 0, 0]) - 255 * (128 / 255) ** 2) <= 1
    out = apply_photometric(_flat(200), Distortion(gain=2.0), rng)
    assert np.all(out == 255)  # saturates, no wrap-around
    img = (np.random.default_rng(1).random((50, 60, 3)) * 255).astype(np.uint8)
    assert np.array_equal(apply_photometric(img, Distortion(), rng), img)


def test_distortion_noise_has_the_requested_sigma():
    for sigma in (3.0, 10.0):
        out = apply_photometric(_flat(128, (200, 200, 3)), Distortion(noise_sigma=sigma), np.random.default_rng(2))
        diff = out.astype(np.float64) - 128
        # uint8 rounding adds 1/12 to the variance.
        assert np.sqrt(max(diff.var() - 1 / 12, 0)) == pytest.approx(sigma, rel=0.03)


def test_distortion_noise_has_zero_mean():
    out = apply_photometric(_flat(128, (200, 200, 3)), Distortion(noise_sigma=5.0), np.random.default_rng(2))
    assert abs(out.astype(np.float64).mean() - 128) < 0.1


def _edge_profile_sigma(profile: np.ndarray) -> float:
    """Standard deviation of the derivative of a blurred step: the blur's sigma."""
    d = np.diff(profile.astype(np.float64))
    x = np.arange(len(d)) + 0.5
    mu = (x * d).sum() / d.sum()
    return float(np.sqrt(((x - mu) ** 2 * d).sum() / d.sum()))


@pytest.mark.parametrize("sigma", [1.5, 3.0])
def test_distortion_blur_widens_an_edge_by_sigma(sigma):
    img = np.zeros((100, 100, 3), np.uint8)
    img[:, 50:] = 250
    out = apply_photometric(img, Distortion(blur_sigma=sigma), np.random.default_rng(0))
    # uint8 quantisation of the profile biases the estimate slightly.
    assert _edge_profile_sigma(out[50, :, 0]) == pytest.approx(sigma, rel=0.08)
    # Only across the edge: a horizontal row far from it is untouched.
    assert np.all(out[:, :30] == 0)


def test_distortion_motion_blur_is_horizontal():
    img = np.zeros((100, 100, 3), np.uint8)
    img[:, 50:] = 240
    img2 = np.zeros((100, 100, 3), np.uint8)
    img2[50:, :] = 240
    d = Distortion(motion_blur=9)
    rng = np.random.default_rng(0)
    ramp = apply_photometric(img, d, rng)[50, :, 0].astype(int)
    # A vertical edge becomes a ramp of 9 px (plus one for rounding), a horizontal edge stays sharp.
    assert 8 <= np.count_nonzero((ramp > 5) & (ramp < 235)) <= 10
    assert np.array_equal(apply_photometric(img2, d, rng), img2)


def test_distortion_jpeg_quality_orders_the_error():
    img = sample_background((320, 240), seed=0)
    rng = np.random.default_rng(0)
    errs = []
    for q in (10, 50, 95):
        out = apply_photometric(img, Distortion(jpeg_quality=q), rng)
        assert out.shape == img.shape and out.dtype == np.uint8
        errs.append(np.abs(out.astype(int) - img).mean())
    assert errs[0] > errs[1] > errs[2] > 0


def test_compose_scene_applies_the_distortion_to_the_whole_frame():
    cover, bg = _cover_and_background()
    H = place_homography((300, 400), (320, 240), 0.7)
    plain = compose_scene(bg, {"cover": cover}, rng=3, homographies={"cover": H})
    dark = compose_scene(bg, {"cover": cover}, rng=3, homographies={"cover": H}, distortion=Distortion(gain=0.5))
    lut = np.clip(np.arange(256) * 0.5, 0, 255).astype(np.uint8)
    np.testing.assert_array_equal(dark.image, lut[plain.image])
    assert dark.params["distortion"]["gain"] == 0.5


def test_compose_scene_is_reproducible_with_a_seed():
    objs = sample_objects()
    bg = sample_background((960, 540), seed=0)
    kw = dict(frame_size=FRAME, occlusion=0.2, distortion=Distortion(noise_sigma=4.0, blur_sigma=0.8))
    a = compose_scene(bg, objs, rng=42, **kw)
    b = compose_scene(bg, objs, rng=42, **kw)
    c = compose_scene(bg, objs, rng=43, **kw)
    assert np.array_equal(a.image, b.image)
    assert np.array_equal(a.object_mask, b.object_mask)
    for oa, ob in zip(a.objects, b.objects, strict=True):
        assert oa.name == ob.name and np.array_equal(oa.homography, ob.homography)
        assert oa.visible_fraction == ob.visible_fraction
    assert not np.array_equal(a.image, c.image)
    assert not np.allclose(a.objects[0].homography, c.objects[0].homography)
    assert [o.name for o in a.objects] == list(objs)
    assert a.objects[0].to_json()["name"] == "pagoda"


@pytest.mark.parametrize("model_size", [(300, 400), (310, 305), (400, 120)])
def test_random_homography_inside_the_frame_and_near_the_requested_area(model_size):
    w, h = model_size
    for seed in range(100):
        rng = np.random.default_rng(seed)
        H = random_homography(model_size, FRAME, rng, area_fraction=(0.05, 0.25), max_rotation=45, max_tilt=0.15)
        q = _project(H, model_corners(w, h))
        assert np.all(q >= -1e-6) and np.all(q[:, 0] <= FRAME[0] + 1e-6) and np.all(q[:, 1] <= FRAME[1] + 1e-6)
        af = _quad_area(q) / (FRAME[0] * FRAME[1])
        # The area is drawn before the tilt, which changes it by a few percent.
        assert 0.05 * 0.9 <= af <= 0.25 * 1.1, (seed, af)
        assert H[2, 2] == pytest.approx(1.0)
    # Same seed, same homography.
    Ha = random_homography(model_size, FRAME, np.random.default_rng(5))
    Hb = random_homography(model_size, FRAME, np.random.default_rng(5))
    assert np.array_equal(Ha, Hb)


def test_random_homography_area_is_within_the_requested_bounds():
    for seed in range(300):
        H = random_homography((300, 400), FRAME, np.random.default_rng(seed), area_fraction=(0.05, 0.25))
        af = _quad_area(_project(H, model_corners(300, 400))) / (FRAME[0] * FRAME[1])
        assert 0.05 <= af <= 0.25 + 1e-9, (seed, af)


def test_random_homography_that_cannot_fit_does_not_silently_leave_the_frame():
    # A 10:1 strip covering half of a square frame cannot lie inside it.
    rng = np.random.default_rng(0)
    try:
        H = random_homography((100, 10), (100, 100), rng, area_fraction=(0.5, 0.6), max_rotation=0.0)
    except ValueError:
        return
    q = _project(H, model_corners(100, 10))
    assert np.all(q >= -1e-6) and np.all(q <= 100 + 1e-6), q


def test_random_placement_in_compose_scene_stays_inside():
    objs = sample_objects()
    bg = sample_background(FRAME, seed=0)
    for seed in range(5):
        scene = compose_scene(bg, objs, rng=seed, area_fraction=(0.05, 0.15))
        for o in scene.objects:
            assert np.all(o.corners >= -1e-6)
            assert np.all(o.corners <= np.array(FRAME) + 1e-6)


@pytest.mark.parametrize("outside", [0.2, 0.4, 0.6])
@pytest.mark.parametrize("model_size", [(800, 640), (324, 223), (500, 500)])
def test_partly_outside_placement_leaves_the_asked_share_outside(model_size, outside):
    from objrec.scenes import outside_fraction, place_partly_outside

    rng = np.random.default_rng(4)
    obj = np.full((model_size[1], model_size[0], 3), 200, np.uint8)
    fit = min(FRAME[0] / model_size[0], FRAME[1] / model_size[1])
    for _ in range(3):
        H = place_partly_outside(model_size, FRAME, outside, rng)
        assert outside_fraction(H, model_size, FRAME) == pytest.approx(outside, abs=1e-3)
        # Independent count: the composited object's pixels in the frame over its outline's area.
        t = compose_scene(np.zeros((480, 640, 3), np.uint8), {"o": obj}, rng=0, homographies={"o": H}, inside=False)
        assert t.truth("o").visible_fraction == pytest.approx(1 - outside, abs=0.01)
        # Scale within 0.8-1.5 of the size that fits the frame (the outline's area, tilt aside).
        q = t.truth("o").corners
        d1, d2 = q[2] - q[0], q[3] - q[1]
        area = 0.5 * abs(d1[0] * d2[1] - d1[1] * d2[0])
        s = np.sqrt(area / (model_size[0] * model_size[1])) / fit
        assert 0.75 < s < 1.6


def test_partly_outside_placement_refuses_what_cannot_fit():
    from objrec.scenes import place_partly_outside

    with pytest.raises(ValueError, match="no placement"):
        place_partly_outside((500, 500), FRAME, 0.05, np.random.default_rng(0), scale=(1.4, 1.5), tries=50)
    with pytest.raises(ValueError, match="outside"):
        place_partly_outside((500, 500), FRAME, 1.0, np.random.default_rng(0))


def _full_frame_warp(canvas: np.ndarray, obj: np.ndarray, H: np.ndarray) -> np.ndarray:
    """Reference compositing: the whole frame warped and blended (what warp_object restricts to a box)."""
    size = (canvas.shape[1], canvas.shape[0])
    warped = cv2.warpPerspective(obj, H, size, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)
    alpha = cv2.warpPerspective(np.full(obj.shape[:2], 255, np.uint8), H, size, flags=cv2.INTER_LINEAR)
    a = (alpha.astype(np.float32) / 255.0)[:, :, None]
    canvas[:] = (canvas.astype(np.float32) * (1 - a) + warped.astype(np.float32) * a + 0.5).astype(np.uint8)
    return alpha >= 128


def test_warp_object_matches_a_full_frame_warp():
    rng = np.random.default_rng(0)
    obj = cv2.resize(next(iter(sample_objects().values())), (90, 120), interpolation=cv2.INTER_AREA)
    behind = 0
    for _ in range(120):
        H = np.array(
            [
                [rng.uniform(-1.5, 1.5), rng.uniform(-1, 1), rng.uniform(-150, 350)],
                [rng.uniform(-1, 1), rng.uniform(-1.5, 1.5), rng.uniform(-150, 250)],
                [rng.uniform(-1e-2, 1e-2), rng.uniform(-1e-2, 1e-2), 1.0],
            ]
        )
        w = np.array([[0, 0, 1], [90, 0, 1], [90, 120, 1], [0, 120, 1]], float) @ H[2]
        behind += bool((w <= 0).any())
        ref = rng.integers(0, 256, (240, 320, 3), np.uint8)
        out = ref.copy()
        mask_ref = _full_frame_warp(ref, obj, H)
        mask = warp_object(out, obj, H)
        assert np.array_equal(mask, mask_ref)
        # Fixed-point interpolation weights depend on the offset of the warped window: a few levels at most,
        # except at a few outline pixels, where the coverage blends object and background.
        diff = np.abs(out.astype(int) - ref.astype(int))
        assert (diff > 3).sum() <= 0.001 * diff.size and diff.max() <= 32
    assert behind > 0  # homographies sending part of the model behind the camera were among the cases


def test_an_antialiased_shrink_on_the_pixel_grid_is_opencvs_area_reduction():
    """Shrunk by 3 with the model's pixels mapped onto whole pixels of the frame, the antialiased warp is
    OpenCV's area reduction of the object, placed where the homography puts it."""
    obj = sample_objects()["pagoda"][:300, :300]
    k = 3.0
    H = np.array([[1 / k, 0.0, (0.5 - 0.5 * k) / k + 20.0], [0.0, 1 / k, (0.5 - 0.5 * k) / k + 30.0], [0.0, 0.0, 1.0]])
    canvas = np.zeros((200, 200, 3), np.uint8)
    warp_object(canvas, obj, H, antialias=True)
    ref = cv2.resize(obj, (100, 100), interpolation=cv2.INTER_AREA)
    assert np.abs(canvas[30:130, 20:120].astype(int) - ref.astype(int)).max() <= 1


@pytest.mark.parametrize("antialias, limit", [(True, 0.06), (False, None)])
def test_a_shrunk_object_moves_as_its_homography_says_only_when_antialiased(antialias, limit):
    """The pagoda's fine texture shrunk to a third, turned, and moved by a fraction of a pixel, from nine
    sub-pixel starting points: Lucas-Kanade at its strongest corners measures the motion the homographies
    give within ``limit`` pixels on average when the warp is antialiased. By bilinear sampling alone the
    aliasing pattern moves differently from the object, by a good part of a pixel at some starting points."""
    obj = sample_objects()["pagoda"]
    h, w = obj.shape[:2]
    s, a, step = 0.33, 0.3, np.float32([-0.37, 0.21])
    worst = 0.0
    for start in np.linspace(0.0, 1.0, 9):
        frames = []
        for k in range(2):
            tx, ty = np.array([100.0 + start, 60.0]) + k * step
            H = np.array([[s * np.cos(a), -s * np.sin(a), tx], [s * np.sin(a), s * np.cos(a), ty], [0.0, 0.0, 1.0]])
            canvas = np.full((400, 400, 3), 90, np.uint8)
            warp_object(canvas, obj, H, antialias)
            frames.append(cv2.cvtColor(canvas, cv2.COLOR_BGR2GRAY))
        c = H @ np.array([w / 2, h / 2, 1.0])
        mask = np.zeros_like(frames[0])
        cv2.circle(mask, (int(c[0]), int(c[1])), int(0.3 * s * min(w, h)), 255, -1)
        p0 = cv2.goodFeaturesToTrack(frames[0], 40, 0.01, 5, mask=mask, blockSize=5).astype(np.float32)
        kw = {"winSize": (11, 11), "maxLevel": 2, "flags": cv2.OPTFLOW_USE_INITIAL_FLOW}
        p1, st, _ = cv2.calcOpticalFlowPyrLK(frames[0], frames[1], p0, p0 + step, **kw)
        bias = ((p1 - p0).reshape(-1, 2)[st.ravel() == 1] - step).mean(axis=0)
        worst = max(worst, float(np.abs(bias).max()))
    if limit is None:
        assert worst > 0.3
    else:
        assert worst < limit
