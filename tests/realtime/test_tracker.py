"""The tracking stage against ground-truth homographies: following, losing, re-anchoring, capacity."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from objrec.boxes import inner_boxes, regions_to_mask, subtract_boxes, union_area
from objrec.data import sample_background, sample_objects
from objrec.geometry import map_points, model_corners
from objrec.realtime.flow import FlowParams, PointFlow
from objrec.realtime.tracker import Tracker, TrackParams, TrackState, fit_homography
from objrec.recognizer import explained, unexplained
from objrec.types import Candidate, Detection, Features

W, H = 640, 480


@pytest.fixture(scope="module")
def model():
    return cv2.cvtColor(sample_objects()["cover"], cv2.COLOR_BGR2GRAY)


@pytest.fixture(scope="module")
def background():
    return cv2.cvtColor(sample_background((W, H), seed=3), cv2.COLOR_BGR2GRAY)


def _place(model, x, y, scale=0.8, angle=0.0) -> np.ndarray:
    h, w = model.shape
    A = cv2.getRotationMatrix2D((w / 2, h / 2), angle, scale)
    A[:, 2] += (x - w / 2, y - h / 2)
    return np.vstack([A, [0, 0, 1]])


def _render(model, background, Hm, seed, occluder=None) -> np.ndarray:
    h, w = model.shape
    img = background.copy()
    warped = cv2.warpPerspective(model, Hm, (W, H), flags=cv2.INTER_LINEAR)
    inside = cv2.warpPerspective(np.full((h, w), 255, np.uint8), Hm, (W, H), flags=cv2.INTER_NEAREST)
    img[inside > 0] = warped[inside > 0]
    if occluder is not None:
        x0, y0, patch = occluder
        part = img[y0 : y0 + patch.shape[0], x0 : x0 + patch.shape[1]]
        part[...] = patch[: part.shape[0], : part.shape[1]]
    noise = np.random.default_rng(seed).normal(0, 2.0, img.shape)
    return np.clip(img + noise, 0, 255).astype(np.uint8)


def _detection(name, Hm, size, visible=1.0) -> Detection:
    return Detection(name, 0.9, 40, Hm, map_points(Hm, model_corners(*size)), visible)


def _size(model):
    return model.shape[1], model.shape[0]


def _start(tracker, model, gray, Hm, name="cover", frame=0):
    out, lost = tracker.absorb([_detection(name, Hm, _size(model))], [], gray, frame, lambda n: _size(model))
    return out, lost


def test_a_moving_object_is_followed_within_a_pixel_and_a_half(model, background):
    """40 frames of fast motion (160 px, 24 degrees, 16% in scale) by flow alone, no detector: the corners stay
    within 1.5 px of the truth (flow drifts a few hundredths of a pixel per frame under such motion; the
    detector's confirmations bound it in a stream)."""
    t = Tracker(params=TrackParams())
    path = [_place(model, 200 + 4 * k, 220 + 1.5 * k, 0.8 + 0.004 * k, 0.6 * k) for k in range(40)]
    out, _ = _start(t, model, _render(model, background, path[0], 0), path[0])
    assert [d.state for d in out] == ["detected"]
    tid = out[0].track_id
    errors = []
    for k in range(1, len(path)):
        dets, lost = t.step(_render(model, background, path[k], k), k)
        assert not lost and len(dets) == 1
        assert dets[0].state == "tracked" and dets[0].track_id == tid
        errors.append(np.linalg.norm(dets[0].corners - map_points(path[k], model_corners(*_size(model))), axis=1).max())
    assert max(errors) < 1.5, errors
    assert np.median(errors[:10]) < 0.5, errors


def test_an_object_covered_is_lost_within_two_frames_and_never_reported_hidden(model, background):
    t = Tracker(params=TrackParams())
    Hm = _place(model, 320, 240, 0.8)
    _start(t, model, _render(model, background, Hm, 0), Hm)
    corners = map_points(Hm, model_corners(*_size(model)))
    x_lo, y_lo = corners.min(axis=0).astype(int)
    x_hi, y_hi = corners.max(axis=0).astype(int)
    patch = cv2.resize(background[:200, :200], (x_hi - x_lo + 40, y_hi - y_lo + 40))
    first_hidden, lost_at = None, None
    for k in range(1, 16):
        # A textured hand-sized patch slides in from the left by a tenth of the object per frame.
        x0 = int(x_lo - patch.shape[1] + (k / 10.0) * (x_hi - x_lo))
        visible = 1.0 - np.clip((x0 + patch.shape[1] - x_lo) / (x_hi - x_lo), 0, 1)
        gray = _render(model, background, Hm, k, (max(x0, 0), y_lo - 20, patch[:, max(0, -x0) :]))
        dets, lost = t.step(gray, k)
        if visible < 0.25 and first_hidden is None:
            first_hidden = k
        if lost and lost_at is None:
            lost_at = k
        if first_hidden is not None and k > first_hidden + 2:
            assert not dets
    assert lost_at is not None and lost_at <= first_hidden + 2, (lost_at, first_hidden)


def test_an_object_leaving_the_frame_is_lost_for_visibility(model, background):
    t = Tracker(params=TrackParams())
    path = [_place(model, 320 + 25 * k, 240) for k in range(20)]
    _start(t, model, _render(model, background, path[0], 0), path[0])
    reasons = []
    for k in range(1, 20):
        dets, lost = t.step(_render(model, background, path[k], k), k)
        reasons += [x.reason for x in lost]
        if dets:
            assert dets[0].visible_fraction >= TrackParams().min_visible
    assert reasons == ["visibility"] or reasons == ["support"]


def test_a_detection_confirms_within_tolerance_and_re_anchors_beyond(model, background):
    t = Tracker(params=TrackParams(reanchor_px=2.0))
    Hm = _place(model, 300, 240)
    gray = _render(model, background, Hm, 0)
    out, _ = _start(t, model, gray, Hm)
    tid = out[0].track_id
    tracked, _ = t.step(_render(model, background, Hm, 1), 1)
    size = _size(model)
    near = np.array([[1, 0, 1.0], [0, 1, 0.5], [0, 0, 1]]) @ Hm
    dets, _ = t.absorb([_detection("cover", near, size)], tracked, gray, 1, lambda n: size)
    assert [(d.state, d.track_id) for d in dets] == [("tracked", tid)]  # confirmed: the track's own corners
    far = np.array([[1, 0, 5.0], [0, 1, 0], [0, 0, 1]]) @ Hm
    t.tracks[0].shown = True  # reported in a frame's result
    dets, _ = t.absorb([_detection("cover", far, size)], tracked, gray, 1, lambda n: size)
    assert [(d.state, d.track_id) for d in dets] == [("detected", tid)]  # re-anchored, same track
    assert np.allclose(dets[0].corners, map_points(far, model_corners(*size)))
    assert t.tracks[0].shown  # ... still reported (objrec.recognizer.reportable)


def test_a_track_goes_through_its_states_by_the_tracker_s_transitions(model, background):
    """Anchored: STARTED; reported under a budget: SHOWN; found by its confirmation: CONFIRMED; re-anchored by a
    detection beyond the tolerance: rough again, SHOWN since it was reported (STARTED had it never been);
    ended: LOST with its reason, in the tracker's ended tracks."""
    t = Tracker(params=TrackParams(reanchor_px=2.0))
    Hm = _place(model, 300, 240)
    gray = _render(model, background, Hm, 0)
    size = _size(model)
    out, _ = t.absorb([_detection("cover", Hm, size)], [], gray, 0, lambda n: size)
    track = t.tracks[0]
    assert track.state is TrackState.STARTED and track.lost_reason is None
    t.mark_shown(track)
    assert track.state is TrackState.SHOWN
    assert t.confirmation(1) is track and track.asked == 1
    t.reanchor(track, _detection("cover", Hm, size), out, gray, 1)
    assert t.tracks[0] is track and track.state is TrackState.CONFIRMED
    far = np.array([[1, 0, 5.0], [0, 1, 0], [0, 0, 1]]) @ Hm
    t.absorb([_detection("cover", far, size)], out, gray, 2, lambda n: size)
    again = t.tracks[0]
    assert again is not track and again.track_id == track.track_id and again.state is TrackState.SHOWN
    assert again.asked == 1  # it keeps its place in the confirmations' line
    unseen = Tracker(params=TrackParams(reanchor_px=2.0))
    unseen.absorb([_detection("cover", Hm, size)], [], gray, 0, lambda n: size)
    unseen.mark_confirmed(unseen.tracks[0])
    unseen.absorb([_detection("cover", far, size)], [], gray, 1, lambda n: size)
    assert unseen.tracks[0].state is TrackState.STARTED
    lost = t.drop(again, "unconfirmed", 3)
    assert again.state is TrackState.LOST and again.lost_reason == lost.reason == "unconfirmed"
    assert t.ended["cover"][0] is again and not t.tracks


def test_a_track_given_up_for_a_detection_it_cannot_follow_ends_with_its_lost_track(model, background):
    """A detection beyond the re-anchoring tolerance replaces its object's track; when no track can start on it
    (too little of it in view to anchor), the old track has ended: the frame reports it as lost, with its id and
    reason. The detection of this same frame places the object, so the end is not handed to re-acquisition."""
    t = Tracker(params=TrackParams(reanchor_px=2.0))
    Hm = _place(model, 300, 240)
    gray = _render(model, background, Hm, 0)
    size = _size(model)
    out, _ = t.absorb([_detection("cover", Hm, size)], [], gray, 0, lambda n: size)
    tid = out[0].track_id
    assert tid is not None and len(t.tracks) == 1
    far = np.array([[1, 0, 5.0], [0, 1, 0], [0, 0, 1]]) @ Hm
    sliver = _detection("cover", far, size, visible=0.5 * TrackParams().min_anchor_visible)
    dets, lost = t.absorb([sliver], out, gray, 1, lambda n: size)
    assert [(d.name, d.track_id) for d in dets] == [("cover", None)]  # reported as found, untracked
    assert [(x.track_id, x.name, x.reason) for x in lost] == [(tid, "cover", "visibility")] and not t.tracks
    assert "cover" not in t.ended


def test_two_copies_are_two_tracks_and_capacity_gives_way_to_the_new(model, background):
    t = Tracker(params=TrackParams(max_tracked=2))
    size = _size(model)
    a, b, c = (_place(model, x, 240, 0.5) for x in (120, 320, 520))
    gray = _render(model, background, a, 0)
    for Hm in (b, c):
        gray = np.where(
            cv2.warpPerspective(np.full(model.shape, 255, np.uint8), Hm, (W, H)) > 0,
            cv2.warpPerspective(model, Hm, (W, H)),
            gray,
        ).astype(np.uint8)
    out, lost = t.absorb([_detection("cover", a, size)], [], gray, 0, lambda n: size)
    out2, lost2 = t.absorb([_detection("cover", b, size)], [], gray, 1, lambda n: size)
    assert out[0].track_id != out2[0].track_id and len(t.tracks) == 2 and not lost + lost2
    out3, lost3 = t.absorb([_detection("cover", c, size)], [], gray, 2, lambda n: size)
    assert [(x.track_id, x.reason) for x in lost3] == [(out[0].track_id, "capacity")]  # confirmed least recently
    assert {tr.track_id for tr in t.tracks} == {out2[0].track_id, out3[0].track_id}


def test_features_inside_tracked_outlines_are_explained(model, background):
    t = Tracker()
    Hm = _place(model, 300, 240, 0.7, 30.0)
    _start(t, model, _render(model, background, Hm, 0), Hm)
    rng = np.random.default_rng(1)
    xy = rng.uniform(0, [W, H], (400, 2)).astype(np.float32)
    n = len(xy)
    feats = Features(xy, np.ones(n), np.zeros(n), np.ones(n), np.zeros(n), np.ones(n), np.zeros((n, 64)), "surf")
    kept = unexplained(feats, t.outlines())
    q = np.float32(t.outlines()[0]).reshape(-1, 1, 2)
    outside = np.array([cv2.pointPolygonTest(q, (float(x), float(y)), False) < 0 for x, y in xy])
    assert sorted(map(tuple, kept.xy.tolist())) == sorted(map(tuple, xy[outside].tolist()))


def test_without_tracking_every_frame_stands_alone(model, background):
    t = Tracker(enabled=False)
    Hm = _place(model, 300, 240)
    d = _detection("cover", Hm, _size(model))
    out, lost = t.absorb([d], [], _render(model, background, Hm, 0), 0, lambda n: _size(model))
    assert out == [d] and not lost and not t.tracks
    assert t.step(background, 1) == ([], [])
    assert len(t.windows(W, H)) == 0 and t.confirmation(5) is None
    z = np.zeros((3, 2), np.float32)
    cands = [Candidate(0, z[:k], z[:k], np.zeros(k, np.float32), n, (9, 9)) for n, k in (("a", 1), ("b", 3))]
    assert [c.name for c in t.prioritise(cands)] == ["b", "a"]


def test_new_objects_are_verified_before_tracked_ones_and_after_recently_lost_ones(model, background):
    """The verification order under a budget: a recently lost object first, then an object not tracked, then a
    candidate of a tracked object (a second copy at most), whatever their matches; by matches within a group."""
    t = Tracker()
    Hm = _place(model, 300, 240)
    _start(t, model, _render(model, background, Hm, 0), Hm, name="cover")
    t.recent["gone"] = (model_corners(*_size(model)), 0)
    z = np.zeros((40, 2), np.float32)
    counts = (("cover", 40), ("new_few", 6), ("new_many", 12), ("gone", 5))
    cands = [Candidate(0, z[:k], z[:k], np.zeros(k, np.float32), n, (9, 9)) for n, k in counts]
    assert [c.name for c in t.prioritise(cands)] == ["gone", "new_many", "new_few", "cover"]


def test_flow_follows_a_shift_and_drops_what_does_not_come_back(background):
    shift = np.float32([2.5, -1.5])
    M = np.float32([[1, 0, shift[0]], [0, 1, shift[1]]])
    moved = cv2.warpAffine(background, M, (W, H), flags=cv2.INTER_CUBIC)
    corners = cv2.goodFeaturesToTrack(background[100:380, 100:540], 60, 0.01, 10).reshape(-1, 2) + 100
    flow = PointFlow(FlowParams())
    flow.remember(background)
    out, good = flow.track(moved, corners)
    assert good.mean() > 0.8
    assert np.abs(out[good] - corners[good] - shift).max() < 0.1
    # The next frame is unrelated noise: nothing converges back.
    _, good2 = flow.track(np.random.default_rng(0).integers(0, 255, (H, W), np.uint8), out)
    assert good2.mean() < 0.2


def test_homography_fit_agrees_with_opencv_least_squares():
    rng = np.random.default_rng(2)
    src = rng.uniform(0, 300, (40, 2))
    Hm = np.array([[0.9, 0.2, 40.0], [-0.1, 1.1, 25.0], [2e-4, -3e-4, 1.0]])
    dst = map_points(Hm, src) + rng.normal(0, 0.3, (40, 2))
    ours = fit_homography(src, dst)
    ref, _ = cv2.findHomography(src, dst, 0)
    grid = np.array([[x, y] for x in (0, 150, 300) for y in (0, 150, 300)], np.float64)
    assert np.abs(map_points(ours, grid) - map_points(ref / ref[2, 2], grid)).max() < 0.05
    assert fit_homography(src[:3], dst[:3]) is None


def test_homography_fit_is_exact_on_four_points_and_rejects_collinear_ones():
    # Four correspondences determine a homography: the fit must reproduce it (the minimal case, where the
    # direct linear transform's matrix has fewer rows than unknowns), as OpenCV's four-point solution does.
    src = np.array([[10.0, 20.0], [300.0, 15.0], [320.0, 240.0], [5.0, 260.0]])
    dst = np.array([[40.0, 30.0], [280.0, 60.0], [300.0, 250.0], [20.0, 230.0]])
    ref = cv2.getPerspectiveTransform(src.astype(np.float32), dst.astype(np.float32))
    ours = fit_homography(src, dst)
    assert np.abs(map_points(ours, src) - dst).max() < 1e-6
    assert np.abs(ours - ref / ref[2, 2]).max() < 1e-6
    line = np.stack([np.linspace(0, 100, 6), np.linspace(0, 50, 6)], 1)
    assert fit_homography(line, line * 2.0 + 5.0) is None


def test_subtracted_boxes_cover_exactly_the_box_less_the_holes():
    rng = np.random.default_rng(3)
    for _ in range(20):
        boxes = np.sort(rng.integers(0, 300, (3, 2, 2)), axis=1).transpose(0, 2, 1).reshape(-1, 4)[:, [0, 2, 1, 3]]
        boxes[:, 2:] += 1
        holes = [tuple(b) for b in np.sort(rng.integers(0, 300, (2, 2, 2)), axis=1).reshape(-1, 4)[:, [0, 2, 1, 3]]]
        holes = [(x0, y0, x1 + 1, y1 + 1) for x0, y0, x1, y1 in holes]
        pieces, parent = subtract_boxes(boxes, holes, min_side=1)
        want = regions_to_mask(boxes, (310, 310)) & ~regions_to_mask(np.array(holes), (310, 310))
        assert (regions_to_mask(pieces, (310, 310)) == want).all()
        assert len(parent) == len(pieces) and all(0 <= i < len(boxes) for i in parent)


def test_inner_boxes_lie_inside_a_convex_outline_and_cover_most_of_it():
    """Against the outline rasterised by OpenCV: random convex quadrilaterals (homographies of a rectangle)
    and rotated rectangles, at least 100 px a side; every pixel of the boxes lies inside the outline (1 px
    for the rounding), an upright rectangle is covered whole and a rotated one for the most part."""
    rng = np.random.default_rng(7)
    for k in range(200):
        if k % 2:
            c = np.array([200.0, 160.0]) + rng.uniform(-20, 20, 2)
            w, h, a = rng.uniform(100, 250), rng.uniform(100, 200), rng.uniform(0, 180)
            q = cv2.boxPoints(((float(c[0]), float(c[1])), (w, h), a))
        else:
            q = model_corners(200, 150) + np.array([100, 80]) + rng.uniform(-25, 25, (4, 2))
        inside = np.zeros((H, W), np.uint8)
        cv2.fillConvexPoly(inside, np.round(q).astype(np.int32), 1)
        inside = cv2.dilate(inside, np.ones((3, 3), np.uint8)).astype(bool)  # the rounding's pixel
        boxes = inner_boxes(q, W, H)
        mask = regions_to_mask(np.array(boxes).reshape(-1, 4), (H, W))
        assert not (mask & ~inside).any()
        assert mask.sum() >= 0.5 * cv2.contourArea(q.astype(np.float32))
    upright = model_corners(200, 100) + np.array([50, 60])
    assert inner_boxes(upright, W, H) == [(50, 60, 250, 160)]


def _other_slid_over_the_right_half(model, background):
    """A tracker following a cover while another object (textured, not tracked) slides in from the right over
    five frames until its left edge reaches the middle of the cover: the tracker, the cover's outline, its
    middle, the other object's left edge and the last frame."""
    t = Tracker()
    Hm = _place(model, 320, 240, 0.7)
    _start(t, model, _render(model, background, Hm, 0), Hm)
    q = t.outlines()[0]
    mid = float(q[:, 0].mean())
    other = cv2.cvtColor(sample_objects()["pagoda"], cv2.COLOR_BGR2GRAY)
    patch = cv2.resize(other, (220, int(q[:, 1].max() - q[:, 1].min()) + 40))
    for k in range(1, 6):
        x0 = int(q[:, 0].max() - (q[:, 0].max() - mid) * k / 5)
        gray = _render(model, background, Hm, k, occluder=(x0, int(q[:, 1].min()) - 20, patch))
        t.step(gray, k)
    return t, q, mid, x0, gray


def test_features_where_a_track_lost_points_are_left_for_the_search(model, background):
    """A tracked cover with another object sliding over its right half: the track loses its points there, and
    the features in that part (the other object's) are no longer explained by the track, while those of the
    part still in view are; the region where it lost points lies in the covered half."""
    t, q, mid, _, _ = _other_slid_over_the_right_half(model, background)
    outlines, covered = explained(t)
    assert len(covered) == 1 and covered[0][:, 0].mean() > mid
    rng = np.random.default_rng(3)
    xy = rng.uniform(q.min(axis=0) + 10, q.max(axis=0) - 10, (300, 2)).astype(np.float32)
    n = len(xy)
    feats = Features(xy, np.ones(n), np.zeros(n), np.ones(n), np.zeros(n), np.ones(n), np.zeros((n, 64)), "surf")
    kept = unexplained(feats, outlines, covered).xy
    assert (kept[:, 0] > mid).mean() > 0.75 and len(kept) > 0.2 * n  # what is kept lies mostly in the covered half
    assert len(kept) < 0.8 * n  # the half still in view stays explained


def test_union_area_counts_the_pixels_a_mask_of_the_boxes_covers():
    rng = np.random.default_rng(4)
    for _ in range(300):
        h, w = (int(v) for v in rng.integers(1, 120, 2))
        boxes = rng.integers(-20, 140, (int(rng.integers(0, 40)), 4))  # some empty, inverted or outside
        assert union_area(boxes, (h, w)) == int(regions_to_mask(boxes, (h, w)).sum())


def test_roughly_anchored_tracks_are_confirmed_first_and_re_anchored_on_a_full_search(model, background):
    t = Tracker(params=TrackParams(confirm_every_ms=500.0))
    size = _size(model)
    a, b = _place(model, 160, 240, 0.5), _place(model, 480, 240, 0.5)
    gray = _render(model, background, a, 0)
    out, _ = t.absorb([_detection("cover", a, size), _detection("cover", b, size)], [], gray, 0, lambda n: size)
    first = t.confirmation(0)
    assert first is not None and first.rough and t.confirmation(0).track_id != first.track_id
    assert t.confirmation(0) is None  # at most each track once per frame, and both asked
    near = np.array([[1, 0, 1.0], [0, 1, 0], [0, 0, 1]]) @ first.homography
    dets = t.reanchor(first, _detection("cover", near, size), out, gray, 0)
    assert dets == out and not first.rough  # within 2 px: confirmed as it is
    far = np.array([[1, 0, 6.0], [0, 1, 0], [0, 0, 1]]) @ first.homography
    dets = t.reanchor(t.tracks[0], _detection("cover", far, size), out, gray, 1)
    assert [d.track_id for d in dets] == [d.track_id for d in out]
    moved = next(d for d in dets if d.track_id == first.track_id)
    assert np.allclose(moved.corners, map_points(far, model_corners(*size))) and moved.state == "detected"
    lost = t.drop(t.tracks[1], "unconfirmed", 2)
    assert lost.reason == "unconfirmed" and len(t.tracks) == 1
    assert t.confirmation(3) is None and t.confirmation(1 + 15) is not None  # then every confirm_every_ms (15 frames)


def test_a_tracked_object_passing_in_front_does_not_carry_the_track_behind_away(model, background):
    """A second tracked object (the pagoda) slides over half the cover, stays, and slides away. The appearance
    check does not judge the cover where the pagoda is (it may be in front), so new points must not be taken
    there either: the cover's track stays on the cover, or ends, and is never reported away from it."""
    from objrec.matching.verify import edge_agreement

    other = cv2.cvtColor(sample_objects()["pagoda"], cv2.COLOR_BGR2GRAY)
    thumbs = {
        n: cv2.resize(m, (128, 128), interpolation=cv2.INTER_AREA) for n, m in (("cover", model), ("pagoda", other))
    }

    def appearance(gray, name, Hm, size, hidden):
        return edge_agreement(gray, thumbs[name], Hm, size, hidden)[0]

    t = Tracker(params=TrackParams(), appearance=appearance)
    Hc = _place(model, 380, 240, 0.8)
    truth = map_points(Hc, model_corners(*_size(model)))
    span = float(truth[:, 0].max() - truth[:, 0].min())
    oh, ow = other.shape
    s = 1.1 * (truth[:, 1].max() - truth[:, 1].min()) / oh
    shifts = np.r_[np.linspace(0, 0.55, 10), np.full(25, 0.55), np.linspace(0.55, 0.0, 15)] * span

    def pagoda_at(dx):
        return _place(other, truth[:, 0].min() - 0.5 * s * ow + dx, 240, s)

    def render(dx, k):
        img = _render(model, background, Hc, k)
        Ho = pagoda_at(dx)
        warped = cv2.warpPerspective(other, Ho, (W, H))
        inside = cv2.warpPerspective(np.full(other.shape, 255, np.uint8), Ho, (W, H)) > 0
        img[inside] = warped[inside]
        return img

    gray = render(shifts[0], 0)
    t.absorb(
        [_detection("cover", Hc, _size(model)), _detection("pagoda", pagoda_at(shifts[0]), (ow, oh))],
        [], gray, 0, lambda n: _size(model) if n == "cover" else (ow, oh),
    )  # fmt: skip
    assert len(t.tracks) == 2
    errors = []
    for k, dx in enumerate(shifts[1:], 1):
        dets, _ = t.step(render(dx, k), k)
        errors += [float(np.linalg.norm(d.corners - truth, axis=1).max()) for d in dets if d.name == "cover"]
    assert errors and max(errors) < 3.0, max(errors)


def test_appearance_checks_of_tracks_anchored_together_are_spread_over_the_frames(model, background):
    """Six copies anchored in one frame, checked every 5 frames: at most two checks per frame (the quota that
    keeps every track on its cadence), never all six in one frame, and each track checked at least once a
    cadence plus the wait of the others."""
    calls: list[int] = []
    frame_no = [0]

    def appearance(gray, name, Hm, size, hidden):
        calls.append(frame_no[0])
        return 1.0

    p = TrackParams(appearance_every_ms=170.0)
    t = Tracker(params=p, appearance=appearance)
    size = _size(model)
    places = [_place(model, 110 + 210 * (i % 3), 130 + 220 * (i // 3), 0.3) for i in range(6)]
    gray = background.copy()
    for Hm in places:
        gray = np.where(
            cv2.warpPerspective(np.full(model.shape, 255, np.uint8), Hm, (W, H)) > 0,
            cv2.warpPerspective(model, Hm, (W, H)),
            gray,
        ).astype(np.uint8)
    t.absorb([_detection("cover", Hm, size) for Hm in places], [], gray, 0, lambda n: size)
    assert len(t.tracks) == 6
    last = {tr.track_id: 0 for tr in t.tracks}
    gaps = []
    for k in range(1, 41):
        frame_no[0] = k
        n = len(calls)
        t.step(gray, k)
        assert len(calls) - n <= 2  # the quota of 2 (6 tracks / 5 frames, rounded up)
        for tr in t.tracks:
            if tr.checked == k:
                gaps.append(k - last[tr.track_id])
                last[tr.track_id] = k
    assert len(t.tracks) == 6 and max(gaps) <= t.frames(p.appearance_every_ms) + 2


def test_a_confirmation_left_out_for_the_budget_keeps_its_place_in_line(model, background):
    """:meth:`Tracker.postpone` undoes the choice of :meth:`Tracker.confirmation`: the same track is due
    first in the next frame, instead of waiting ``confirm_every_ms`` as if it had been confirmed."""
    t = Tracker(params=TrackParams(confirm_every_ms=500.0))
    size = _size(model)
    a, b = _place(model, 160, 240, 0.5), _place(model, 480, 240, 0.5)
    gray = _render(model, background, a, 0)
    t.absorb([_detection("cover", a, size), _detection("cover", b, size)], [], gray, 0, lambda n: size)
    for x in t.tracks:
        x.rough = False
    first = t.confirmation(15)
    assert first is not None
    t.postpone(first)
    assert t.confirmation(16) is first
    assert t.confirmation(17) is not first  # asked at 16: the other track's turn


@pytest.mark.parametrize("scale, moves", [(1.0, True), (0.5, False)])
def test_a_confirmation_at_a_lower_resolution_re_anchors_only_beyond_its_own_uncertainty(
    model, background, scale, moves
):
    """A confirmation that searched its box at resolution ``scale`` places corners ``1 / scale`` times as
    coarsely in frame pixels: a 3 px disagreement re-anchors the track after a search at full resolution
    (beyond ``reanchor_px`` = 2), and confirms it as it is after one at half resolution (within 4 px)."""
    t = Tracker(params=TrackParams(reanchor_px=2.0))
    size = _size(model)
    a = _place(model, 320, 240, 0.5)
    gray = _render(model, background, a, 0)
    out, _ = t.absorb([_detection("cover", a, size)], [], gray, 0, lambda n: size)
    track = t.tracks[0]
    off = np.array([[1, 0, 3.0], [0, 1, 0], [0, 0, 1]]) @ track.homography
    dets = t.reanchor(track, _detection("cover", off, size), out, gray, 1, scale)
    corners = map_points(off if moves else a, model_corners(*size))
    assert len(dets) == 1 and np.allclose(dets[0].corners, corners, atol=1e-6)
    assert dets[0].state == ("detected" if moves else out[0].state)


def test_new_points_are_not_seeded_where_the_track_lost_points_lately(model, background):
    """A tracked cover with another (untracked, textured) object slid over its right half: when the track is
    topped up with new points, they are taken from the part still in view, not from where it lost its points
    (the other object's): those would follow the other object and carry the track away as it moves."""
    t, _, _, x0, gray = _other_slid_over_the_right_half(model, background)
    (track,) = t.tracks
    n = len(track.pts) // 2
    track.pts, track.model_pts = track.pts[::2][:n], track.model_pts[::2][:n]  # more gone: a top-up is due
    t._replenish(track, gray)
    new = track.pts[n:]
    assert len(new) >= 5  # the part still in view gives new points
    # Beside a point kept at the other object's edge a corner may sit a few pixels over it; none further in.
    on = new[:, 0] >= x0
    assert on.sum() <= 1 and (new[:, 0] < x0 + 10).all()


def test_an_object_sliding_over_most_of_a_tracked_cover_does_not_carry_the_track_away(model, background):
    """A textured, untracked object slides over two thirds of a still, tracked cover (the track tops itself up
    as it loses points), then moves away: the track follows the cover, whose corners stay within a few pixels
    of the truth (a third of it in view, extrapolated), or is lost; it never follows the other object."""
    t = Tracker()
    Hm = _place(model, 320, 240, 0.7)
    _start(t, model, _render(model, background, Hm, 0), Hm)
    q = t.outlines()[0]
    truth = map_points(Hm, model_corners(*_size(model)))
    other = cv2.cvtColor(sample_objects()["pagoda"], cv2.COLOR_BGR2GRAY)
    patch = cv2.resize(other, (300, int(q[:, 1].max() - q[:, 1].min()) + 40))
    right, top = float(q[:, 0].max()), int(q[:, 1].min()) - 20
    stop = right - 0.65 * (right - float(q[:, 0].min()))
    errors = []
    for k in range(1, 41):
        if k <= 20:  # in from the right, 7 px a frame
            x0, y0 = int(right - (right - stop) * k / 20), top
        else:  # away down and to the right
            x0, y0 = int(stop + 6 * (k - 20)), top + 8 * (k - 20)
        _, lost = t.step(_render(model, background, Hm, k, occluder=(x0, y0, patch)), k)
        if lost:
            break
        errors.append(float(np.linalg.norm(t.tracks[0].corners - truth, axis=1).max()))
    assert len(errors) >= 10  # followed while the other object came in
    assert max(errors) <= 5.0
