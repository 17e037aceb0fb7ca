"""Realigning a track with its model (Lucas-Kanade from the rendered model) against ground-truth homographies."""

from __future__ import annotations

from types import SimpleNamespace

import cv2
import numpy as np
import pytest

from objrec.data import sample_background, sample_objects
from objrec.geometry import map_points, model_corners
from objrec.realtime.align import DEFAULT_ALIGN, ModelTemplates, due, realign, realign_in, seen_move, significant
from objrec.realtime.tracker import Tracker, TrackParams
from objrec.types import Detection

W, H = 640, 480
AGAIN_PX = DEFAULT_ALIGN.again_px


@pytest.fixture(scope="module")
def scene():
    """A tilted view of the cover, printed and photographed: another gamma, contrast and brightness, noise."""
    return _render(0)


def _render(seed):
    """:func:`scene` with the sensor noise drawn from ``seed``."""
    model = cv2.cvtColor(sample_objects()["cover"], cv2.COLOR_BGR2GRAY)
    h, w = model.shape
    bg = cv2.cvtColor(sample_background((W, H), seed=5), cv2.COLOR_BGR2GRAY)
    src = model_corners(w, h).astype(np.float32)
    dst = np.float32([[200, 110], [420, 130], [430, 380], [190, 360]])
    Ht = cv2.getPerspectiveTransform(src, dst).astype(np.float64)
    warped = cv2.warpPerspective(model, Ht, (W, H), flags=cv2.INTER_LINEAR)
    inside = cv2.warpPerspective(np.full((h, w), 255, np.uint8), Ht, (W, H), flags=cv2.INTER_NEAREST)
    img = bg.copy()
    img[inside > 0] = warped[inside > 0]
    img = 30 + 0.8 * 255 * (img / 255.0) ** 0.8
    img = np.clip(img + np.random.default_rng(seed).normal(0, 3, img.shape), 0, 255).astype(np.uint8)
    return img, model, Ht, (w, h)


def _err(Ha, Hb, size):
    a, b = map_points(Ha, model_corners(*size)), map_points(Hb, model_corners(*size))
    return float(np.linalg.norm(a - b, axis=1).max())


def _drifted(Ht, dx, dy, grow=1.02):
    return np.array([[grow, 0, dx - 6.0], [0, grow, dy - 5.0], [0, 0, 1.0]]) @ Ht


@pytest.mark.parametrize("shift", [(0.0, 0.0), (4.0, -3.0), (8.0, 6.0), (-10.0, 5.0), (15.0, -12.0)])
def test_a_drifted_homography_is_brought_back_to_the_truth(scene, shift):
    """Off by up to about 20 px (a shift and 2% of scale), through a change of brightness, contrast and gamma:
    back within a pixel of the true corners."""
    img, model, Ht, size = scene
    start = _drifted(Ht, *shift)
    out = realign(img, ModelTemplates(lambda n: model).get("cover"), start, size)[0]
    assert out is not None and _err(out, Ht, size) < 1.0 < _err(start, Ht, size)


def test_a_track_on_its_object_is_left_where_it_is_through_new_sensor_noise(scene):
    """Realigned until it stops moving, the track sits on the model within the points' noise; realigned again
    in frames of the same still scene with other noise, one after the other as a track is, it keeps its
    homography in nearly every frame (its own estimate carries the noise of the frame it came from, so one
    move may be called for), where a refit would move its corners by the refit's own noise in every frame."""
    img, model, Ht, size = scene
    templates = ModelTemplates(lambda n: model)
    H1 = _drifted(Ht, 4.0, -3.0)
    for _ in range(3):
        H1 = realign(img, templates.get("cover"), H1, size)[0]
    assert H1 is not None and _err(H1, Ht, size) < 0.5
    moves = 0
    for seed in range(1, 7):
        again, n = realign(_render(seed)[0], templates.get("cover"), H1, size)
        assert n > 0 and _err(again, Ht, size) < 0.5
        moves += not np.array_equal(again, H1)
        H1 = again
    assert moves <= 1


def _placed(side, angle, seed=0):
    """The cover at ``side`` pixels (the square root of its area) turned by ``angle`` degrees about the frame's
    centre, printed and photographed as in :func:`scene`; the image and the true homography."""
    model = cv2.cvtColor(sample_objects()["cover"], cv2.COLOR_BGR2GRAY)
    h, w = model.shape
    a, s = np.radians(angle), side / np.sqrt(w * h)
    R = np.array([[np.cos(a), -np.sin(a)], [np.sin(a), np.cos(a)]])
    dst = ((model_corners(w, h) - [w / 2, h / 2]) * s) @ R.T + [W / 2, H / 2]
    Ht = cv2.getPerspectiveTransform(model_corners(w, h).astype(np.float32), dst.astype(np.float32))
    bg = cv2.cvtColor(sample_background((W, H), seed=5), cv2.COLOR_BGR2GRAY)
    warped = cv2.warpPerspective(model, Ht, (W, H), flags=cv2.INTER_AREA if s < 1 else cv2.INTER_LINEAR)
    inside = cv2.warpPerspective(np.full((h, w), 255, np.uint8), Ht, (W, H), flags=cv2.INTER_NEAREST)
    img = np.where(inside > 0, warped, bg).astype(np.float64)
    img = 30 + 0.8 * 255 * (img / 255.0) ** 0.8
    img = np.clip(img + np.random.default_rng(seed).normal(0, 3, img.shape), 0, 255).astype(np.uint8)
    return img, model, Ht.astype(np.float64), (w, h)


def _placed_at(Ht, seed):
    """The cover placed by ``Ht`` (model to frame) in a frame of :func:`_placed`'s kind, with the sensor
    noise drawn from ``seed``."""
    model = cv2.cvtColor(sample_objects()["cover"], cv2.COLOR_BGR2GRAY)
    h, w = model.shape
    bg = cv2.cvtColor(sample_background((W, H), seed=5), cv2.COLOR_BGR2GRAY)
    warped = cv2.warpPerspective(model, Ht, (W, H), flags=cv2.INTER_LINEAR)
    inside = cv2.warpPerspective(np.full((h, w), 255, np.uint8), Ht, (W, H), flags=cv2.INTER_NEAREST)
    img = np.where(inside > 0, warped, bg).astype(np.float64)
    img = 30 + 0.8 * 255 * (img / 255.0) ** 0.8
    return np.clip(img + np.random.default_rng(seed).normal(0, 3, img.shape), 0, 255).astype(np.uint8)


@pytest.mark.parametrize("side, angle", [(80.0, 0.0), (120.0, 35.0), (230.0, -60.0), (400.0, 15.0)])
def test_a_drifted_track_comes_back_at_every_size_and_turn(side, angle):
    """A rendering at a quarter of the template's size or at full size, turned or not: the template's corners
    are taken from the level of its pyramid that matches the rendering, and the track comes back within a
    pixel from a drift of 5% of its side."""
    img, model, Ht, size = _placed(side, angle)
    shift = 0.05 * side
    start = np.array([[1.0, 0.0, shift], [0.0, 1.0, -0.6 * shift], [0.0, 0.0, 1.0]]) @ Ht
    out = realign(img, ModelTemplates(lambda n: model).get("cover"), start, size)[0]
    assert out is not None and _err(out, Ht, size) < 1.0 < _err(start, Ht, size)


def test_template_corners_come_from_the_pyramid_level_of_the_rendering():
    """Each level's corners are corners of that level (a strong response of the Shi-Tomasi measure there),
    given in template pixels; the level chosen for a rendering is the one nearest its scale."""
    model = cv2.cvtColor(sample_objects()["cover"], cv2.COLOR_BGR2GRAY)
    tpl = ModelTemplates(lambda n: model).get("cover")
    assert tpl.level(1.0) == 0 and tpl.level(0.5) == 1 and tpl.level(0.24) == 2 and tpl.level(0.001) <= 3
    for level in range(3):
        img = model
        for _ in range(level):
            img = cv2.pyrDown(img)
        pts = tpl.corners(level)
        assert len(pts) >= 50 and tpl.corners(level) is pts
        at = np.round((pts + 0.5) / 2.0**level - 0.5).astype(int)
        assert np.all((at >= 0) & (at < [img.shape[1], img.shape[0]]))
        response = cv2.cornerMinEigenVal(img, 5)
        strong = response[at[:20, 1], at[:20, 0]]
        assert np.median(strong) > np.percentile(response, 99)


@pytest.mark.parametrize("shift", [(1.5, 0.0), (0.0, -1.5)])
def test_a_small_drift_is_still_taken_out(scene, shift):
    """A track off by a pixel and a half (well within what a detection's tolerance lets stand) is moved back
    onto the object: the points' noise does not hide a shift of the whole object."""
    img, model, Ht, size = scene
    start = np.array([[1.0, 0.0, shift[0]], [0.0, 1.0, shift[1]], [0.0, 0.0, 1.0]]) @ Ht
    out = realign(img, ModelTemplates(lambda n: model).get("cover"), start, size)[0]
    assert out is not None and _err(out, Ht, size) < 0.5 * _err(start, Ht, size)


@pytest.mark.parametrize("level", [0.9, 0.99])
def test_significance_holds_its_level_on_points_that_only_carry_noise(level):
    """Points on a homography plus Gaussian noise, seen twice: the track's homography is the least-squares fit
    to the first sight, the refit that to the second. The refit is called significant in about ``1 - level``
    of the trials (the F distribution's own rate), and a shift of the whole second sight by twice the
    noise's size is called significant every time."""
    rng = np.random.default_rng(7)
    Ht = np.array([[0.9, 0.1, 200.0], [-0.05, 1.1, 120.0], [1e-4, 2e-4, 1.0]])
    trials, hits, shifted = 1500, 0, 0
    for _ in range(trials):
        src = rng.uniform(0, 300, (40, 2))
        H1, _ = cv2.findHomography(src, map_points(Ht, src) + rng.normal(0, 0.3, (40, 2)), 0)
        dst = map_points(Ht, src) + rng.normal(0, 0.3, (40, 2))
        H2, _ = cv2.findHomography(src, dst, 0)
        hits += significant(src, dst, H1, H2, level)
        moved = dst + [0.6, 0.0]
        H3, _ = cv2.findHomography(src, moved, 0)
        shifted += significant(src, moved, H1, H3, level)
    assert abs(hits / trials - (1 - level)) < 3 * np.sqrt(level * (1 - level) / trials) + 0.01
    assert shifted == trials


def test_an_outline_far_from_the_object_is_not_realigned(scene):
    """Where the model does not meet its object, nothing agrees or the move exceeds max_shift: no realignment."""
    img, model, Ht, size = scene
    away = np.array([[1.0, 0.0, 180.0], [0.0, 1.0, 40.0], [0.0, 0.0, 1.0]]) @ Ht
    assert realign(img, ModelTemplates(lambda n: model).get("cover"), away, size)[0] is None


def test_a_hidden_object_is_not_realigned(scene):
    img, model, Ht, size = scene
    outline = map_points(Ht, model_corners(*size))
    assert realign(img, ModelTemplates(lambda n: model).get("cover"), _drifted(Ht, 4, 4), size, [outline])[0] is None


def test_templates_are_read_once_and_kept_small():
    reads = []
    big = np.zeros((1200, 900, 3), np.uint8)
    t = ModelTemplates(lambda n: reads.append(n) or big, capacity=2)
    tpl = t.get("a")
    assert tpl.gray.ndim == 2 and max(tpl.gray.shape) == 512 and tpl.scale == pytest.approx(512 / 1200)
    t.get("a"), t.get("b"), t.get("c"), t.get("a")
    assert reads == ["a", "b", "c", "a"]  # "a" gave way to "c" beyond the capacity


def test_a_drifted_track_is_realigned_when_due_and_its_points_follow(scene):
    """The tracker's track with a drifted homography: due at once, realigned within a pixel, its points on the
    realigned homography; moved that far, due again at once, first in line before a track waiting for its
    turn; left where it is by that one, not due again for realign_every_ms (5 frames)."""
    img, model, Ht, size = scene
    tracker = Tracker(params=TrackParams(realign_every_ms=170.0), templates=ModelTemplates(lambda n: model))
    start = _drifted(Ht, 8.0, -6.0)
    d = Detection("cover", 0.9, 40, start, map_points(start, model_corners(*size)), 1.0)
    tracker.absorb([d], [], img, 0, lambda n: size)
    t = due(tracker, 10)
    assert t is tracker.tracks[0]
    assert realign_in(tracker, t, img, 10)
    assert _err(t.homography, Ht, size) < 1.0
    assert np.allclose(t.pts, map_points(t.homography, t.model_pts), atol=1e-3)  # new points, on the model
    assert t.again and due(tracker, 10) is t
    other = SimpleNamespace(realigned=3, again=False)  # realigned before t, and waiting for its turn in frame 10
    tracker.tracks.append(other)
    assert due(tracker, 10) is t
    tracker.tracks.remove(other)
    assert realign_in(tracker, t, img, 10) and not t.again
    assert due(tracker, 14) is None and due(tracker, 15) is t
    assert due(Tracker(params=TrackParams(realign_every_ms=0.0), templates=tracker.templates), 9) is None


def test_a_track_just_realigned_is_not_moved_by_a_confirmation_that_disagrees(scene):
    """Within realign_every_ms (5 frames) of a realignment the track is the more accurate of the two: a confirmation
    6 px off confirms it instead of moving it; later, with no appearance check to arbitrate, it moves it."""
    img, model, Ht, size = scene
    tracker = Tracker(params=TrackParams(realign_every_ms=170.0), templates=ModelTemplates(lambda n: model))
    start = _drifted(Ht, 5.0, 5.0)
    d = Detection("cover", 0.9, 40, start, map_points(start, model_corners(*size)), 1.0)
    out, _ = tracker.absorb([d], [], img, 0, lambda n: size)
    t = tracker.tracks[0]
    assert realign_in(tracker, t, img, 0) and t.aligned == 0
    off = np.array([[1.0, 0.0, 6.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]) @ Ht
    confirmation = Detection("cover", 0.9, 40, off, map_points(off, model_corners(*size)), 1.0)
    tracker.reanchor(t, confirmation, out, img, 3)
    assert tracker.tracks[0] is t and _err(t.homography, Ht, size) < 1.0
    dets = tracker.reanchor(t, confirmation, out, img, 6)
    assert dets[0].state == "detected" and np.allclose(dets[0].corners, confirmation.corners)


@pytest.mark.parametrize("judged, kept", [("alike", True), ("detection", False)])
def test_a_track_realigned_lately_stands_against_a_confirmation_far_off_unless_it_looks_worse(scene, judged, kept):
    """A confirmation 16 px off (beyond ALIGNED_TRUST times the tolerance) of a track realigned two frames
    before: where the appearance check cannot tell the two outlines apart the track stays; where it confirms
    the detection's outline clearly better the track is re-anchored on it. Without a recent realignment,
    an undecided check re-anchors it."""
    img, model, Ht, size = scene
    scores = {"alike": (0.9, 0.9), "detection": (0.6, 0.9)}[judged]
    off = np.array([[1.0, 0.0, 16.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]) @ Ht

    def appearance(gray, name, H, model_size, hidden):
        return scores[1] if np.allclose(H, off) else scores[0]

    tracker = Tracker(
        params=TrackParams(realign_every_ms=170.0), templates=ModelTemplates(lambda n: model), appearance=appearance
    )
    d = Detection("cover", 0.9, 40, Ht, map_points(Ht, model_corners(*size)), 1.0)
    out, _ = tracker.absorb([d], [], img, 0, lambda n: size)
    t = tracker.tracks[0]
    assert realign_in(tracker, t, img, 0) and t.aligned == 0
    confirmation = Detection("cover", 0.9, 60, off, map_points(off, model_corners(*size)), 1.0)
    dets = tracker.reanchor(t, confirmation, out, img, 2)
    moved = np.allclose(dets[0].corners, confirmation.corners)
    assert (tracker.tracks[0] is t and not moved) == kept and (moved != kept)
    if kept:
        dets = tracker.reanchor(t, confirmation, out, img, 9)
        assert tracker.tracks[0] is not t and np.allclose(dets[0].corners, confirmation.corners)


def test_before_the_search_only_tracks_never_realigned_are_realigned_and_their_detections_move(scene):
    """``SecondLooks.realign(..., new_only=True)`` (the frame's start): a new track, anchored 8 px off, is
    realigned to within a pixel of the truth and its tracked detection moves with it, and having moved that
    far is realigned again at once, until a realignment leaves it; a track settled before and due again
    waits for the frame's end."""
    from objrec.features.extract import FrameImage
    from objrec.realtime.frame import FrameState
    from objrec.realtime.planner import SearchPlanner
    from objrec.realtime.scheduler import FrameScheduler
    from objrec.realtime.searches import SecondLooks

    img, model, Ht, size = scene
    tracker = Tracker(params=TrackParams(realign_every_ms=170.0), templates=ModelTemplates(lambda n: model))
    start = _drifted(Ht, 8.0, -6.0)
    tracker.absorb(
        [Detection("cover", 0.9, 40, start, map_points(start, model_corners(*size)), 1.0)], [], img, 0, lambda n: size
    )
    looks = SecondLooks(None, {}, None, None, SearchPlanner("surf"), ["surf"], ["cover"])
    t = tracker.tracks[0]
    state = FrameState(img, FrameImage(img), None)
    state.tracked = [t.detection("tracked")]
    moves = []
    state.moved(looks.realign(state, _Counting(moves), tracker, 1, new_only=True))  # the recognizer records it
    assert _err(t.homography, Ht, size) < 1.0 and t.realigned == 1
    assert np.allclose(state.tracked[0].corners, map_points(t.homography, model_corners(*size)))
    assert moves == ["realign", "realign"] and not t.again  # moved 8 px: looked at again, and settled
    t.homography = _drifted(Ht, 8.0, -6.0)  # drifted again and due again (6 frames on), but settled before
    looks.realign(state, FrameScheduler(None), tracker, 7, new_only=True)
    assert t.realigned == 1 and _err(t.homography, Ht, size) > 5.0


class _Counting:
    """A scheduler without a budget that lists the units it runs."""

    def __init__(self, units):
        self.units = units

    def run(self, unit, fn, *args, **kw):
        self.units.append(unit)
        return fn(*args)


def test_a_move_is_measured_where_the_outline_is_in_view():
    """An outline reaching 100 px past the frame's right edge: a small growth about the middle of the part in
    view moves the corners outside the frame by more than AGAIN_PX and the part in view by less; it is
    measured as the largest move of the vertices of the outline clipped to the frame (brute force: the inner
    corners and the edge crossings). A shift of the whole outline by 1.5 px counts as that; an outline wholly
    outside the frame is measured at its corners."""
    w, h = 640, 480
    outline = np.array([[500.0, 100.0], [740.0, 100.0], [740.0, 300.0], [500.0, 300.0]])
    H0 = np.eye(3)
    c, k = np.array([570.0, 200.0]), 1.006
    grow = np.array([[k, 0.0, (1 - k) * c[0]], [0.0, k, (1 - k) * c[1]], [0.0, 0.0, 1.0]])
    far = float(np.linalg.norm(map_points(grow, outline) - outline, axis=1).max())
    seen = np.array([[500.0, 100.0], [640.0, 100.0], [640.0, 300.0], [500.0, 300.0]])
    expected = float(np.linalg.norm(map_points(grow, seen) - seen, axis=1).max())
    assert far > AGAIN_PX > expected
    assert seen_move(H0, grow, outline, (240, 200), (h, w)) == pytest.approx(expected, abs=1e-3)
    shift = np.array([[1.0, 0.0, 1.5], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    assert seen_move(H0, shift, outline, (240, 200), (h, w)) == pytest.approx(1.5)
    away = outline + [400.0, 0.0]
    assert seen_move(H0, grow, away, (240, 200), (h, w)) == pytest.approx(
        float(np.linalg.norm(map_points(grow, away) - away, axis=1).max())
    )


def test_a_track_half_out_of_the_frame_settles_on_its_object():
    """The cover with a third of it past the frame's edge, its track a few pixels off: realigned one frame after
    another on frames of the same scene with new noise, it is back on the object and no longer due again
    within three realignments, and stays so (the corners outside the frame, extrapolated from the points in
    view, do not keep it due)."""
    img, model, Ht, size = _placed(230.0, 20.0)
    shift = np.array([[1.0, 0.0, W / 2 - 60.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])  # a third out at the right
    Ht = shift @ Ht
    outline = map_points(Ht, model_corners(*size))
    assert outline[:, 0].max() > W + 40
    params = TrackParams(realign_every_ms=170.0)
    tracker = Tracker(True, params, None, ModelTemplates(lambda n: model))
    start = np.array([[1.0, 0.0, 3.0], [0.0, 1.0, -2.0], [0.0, 0.0, 1.0]]) @ Ht
    d = Detection("cover", 1.0, 40, start, map_points(start, model_corners(*size)), 0.66)
    frames = [_placed_at(Ht, seed) for seed in range(8)]
    tracker.absorb([d], [], frames[0], 0, lambda n: size)
    t = tracker.tracks[0]
    again = []
    for k, frame in enumerate(frames):
        realign_in(tracker, t, frame, k)
        again.append(t.again)
    in_view = np.array([[0.0, 0.0], [W, 0.0], [W, H], [0.0, H]], np.float32)
    _, seen = cv2.intersectConvexConvex(np.float32(outline), in_view)
    seen = seen.reshape(-1, 2).astype(np.float64)
    err = np.linalg.norm(map_points(t.homography @ np.linalg.inv(Ht), seen) - seen, axis=1).max()
    assert err < 1.0 and not any(again[3:]), again


def test_tabulated_f_thresholds_are_scipys():
    from scipy.special import fdtri

    from objrec.realtime.align import DEFAULT_ALIGN, F_THRESHOLDS, SIGNIFICANCE, f_threshold

    assert len(F_THRESHOLDS) == 2 * DEFAULT_ALIGN.points - 8
    for dof in range(1, len(F_THRESHOLDS) + 1):
        assert f_threshold(dof) == float(fdtri(8, dof, SIGNIFICANCE))
    assert f_threshold(200) == float(fdtri(8, 200, SIGNIFICANCE))  # beyond the table
    assert f_threshold(10, 0.99) == float(fdtri(8, 10, 0.99))
