"""Re-acquisition of lost tracks by alignment, against ground-truth homographies: an object back where its
track ended is found at its true place; one that is gone, covered, or another object is not."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from objrec.data import sample_background, sample_objects
from objrec.geometry import map_points, model_corners
from objrec.matching.verify import edge_agreement
from objrec.realtime.align import ModelTemplates
from objrec.realtime.footage import FrameRate
from objrec.realtime.reacquire import ReacquireParams, placed, reacquire, waiting
from objrec.realtime.tracker import Tracker, TrackParams
from objrec.types import Detection

W, H = 640, 480
# The default windows in frames at the nominal 30 frames a second (frames without a footage time).
_RP, _AT30 = ReacquireParams(), FrameRate()
REACQUIRE_FRAMES, REACQUIRE_EVERY = _AT30.frames(_RP.window_ms), _AT30.frames(_RP.first_ms)
REACQUIRE_RETRY, REACQUIRE_AGREEMENT = _AT30.frames(_RP.retry_ms), _RP.agreement
LAYOUT_FRAMES, LAYOUT_RETRY = _AT30.frames(_RP.layout_ms), _AT30.frames(_RP.layout_retry_ms)


@pytest.fixture(scope="module")
def models():
    return {n: cv2.cvtColor(sample_objects()[n], cv2.COLOR_BGR2GRAY) for n in ("cover", "pagoda")}


@pytest.fixture(scope="module")
def background():
    return cv2.cvtColor(sample_background((W, H), seed=5), cv2.COLOR_BGR2GRAY)


def _place(model, x, y, scale=0.7, angle=8.0):
    h, w = model.shape
    A = cv2.getRotationMatrix2D((w / 2, h / 2), angle, scale)
    A[:, 2] += (x - w / 2, y - h / 2)
    return np.vstack([A, [0, 0, 1]])


def _render(background, placed, seed, patch=None):
    """``background`` with each (model, H) of ``placed`` drawn, a grey patch (x0, y0, x1, y1) over it, noise."""
    img = background.copy()
    for model, Hm in placed:
        h, w = model.shape
        warped = cv2.warpPerspective(model, Hm, (W, H), flags=cv2.INTER_LINEAR)
        inside = cv2.warpPerspective(np.full((h, w), 255, np.uint8), Hm, (W, H), flags=cv2.INTER_NEAREST)
        img[inside > 0] = warped[inside > 0]
    if patch is not None:
        x0, y0, x1, y1 = patch
        img[y0:y1, x0:x1] = 90
    noise = np.random.default_rng(seed).normal(0, 2.0, img.shape)
    return np.clip(img + noise, 0, 255).astype(np.uint8)


def _tracker(models):
    thumbs = {n: cv2.resize(m, (128, 128), interpolation=cv2.INTER_AREA) for n, m in models.items()}

    def appearance(gray, name, Hm, size, hidden):
        return edge_agreement(gray, thumbs[name], Hm, size, hidden)[0]

    return Tracker(params=TrackParams(), appearance=appearance, templates=ModelTemplates(models.__getitem__))


def _lost(models, background, reason="support"):
    """A tracker whose track of the cover (placed at 320, 240) ended in frame 0 for ``reason``."""
    t = _tracker(models)
    model = models["cover"]
    size = model.shape[1], model.shape[0]
    Hm = _place(model, 320, 240)
    gray = _render(background, [(model, Hm)], 0)
    d = Detection("cover", 0.9, 40, Hm, map_points(Hm, model_corners(*size)), 1.0)
    t.absorb([d], [], gray, 0, lambda n: size)
    t.drop(t.tracks[0], reason, 0)
    return t, Hm, size


def _err(Ha, Hb, size):
    c = model_corners(*size)
    return float(np.linalg.norm(map_points(Ha, c) - map_points(Hb, c), axis=1).max())


@pytest.mark.parametrize("dx, dy", [(0.0, 0.0), (9.0, -6.0)])
def test_an_object_back_near_where_its_track_ended_is_found_at_its_true_place(models, background, dx, dy):
    t, Hm, size = _lost(models, background)
    truth = np.array([[1, 0, dx], [0, 1, dy], [0, 0, 1]]) @ Hm
    gray = _render(background, [(models["cover"], truth)], 3)
    (ghost,) = waiting(t, 5, {})
    d = reacquire(t, ghost, gray)
    assert d is not None and d.name == "cover" and d.score >= REACQUIRE_AGREEMENT
    assert _err(d.homography, truth, size) <= 1.0
    assert np.allclose(d.corners, map_points(d.homography, model_corners(*size)))


def test_an_object_gone_covered_or_replaced_is_not_found(models, background):
    t, Hm, size = _lost(models, background)
    (ghost,) = waiting(t, 5, {})
    assert reacquire(t, ghost, _render(background, [], 3)) is None  # gone
    c = map_points(Hm, model_corners(*size))
    x0, y0 = c.min(axis=0).astype(int)
    x1, y1 = c.max(axis=0).astype(int)
    half = (x0 - 5, y0 - 5, (x0 + x1) // 2, y1 + 5)  # the left half covered by a plain patch
    assert reacquire(t, ghost, _render(background, [(models["cover"], Hm)], 3, half)) is None
    pagoda = models["pagoda"]
    s = (y1 - y0) / pagoda.shape[0]
    other = _place(pagoda, 320, 240, s, 0.0)  # another object where the cover was
    assert reacquire(t, ghost, _render(background, [(pagoda, other)], 3)) is None


@pytest.mark.parametrize("reason", ["appearance", "visibility", "capacity", "unconfirmed"])
def test_tracks_ended_for_other_reasons_than_support_are_not_looked_for(models, background, reason):
    t, _, _ = _lost(models, background, reason)
    assert waiting(t, 1, {}) == []


def test_a_lost_object_is_looked_for_in_each_of_the_first_frames_then_at_intervals(models, background):
    t, _, _ = _lost(models, background)  # ended in frame 0
    sought = {}
    looked = []
    for frame in range(1, REACQUIRE_FRAMES + 1):
        if waiting(t, frame, sought):
            looked.append(frame)
            sought["cover"] = frame  # looked for, not found
    first = list(range(1, REACQUIRE_EVERY + 1))
    assert looked[: len(first)] == first
    gaps = np.diff(looked[len(first) - 1 :])
    assert len(gaps) and (gaps == REACQUIRE_RETRY).all()
    assert looked[-1] > REACQUIRE_FRAMES - REACQUIRE_RETRY  # looked for until the end of the while


def test_the_while_a_lost_object_is_looked_for_lasts_as_long_in_footage_time_at_any_frame_rate(models, background):
    """At 25 frames a second (frame times 40 ms apart) the second of ``window_ms`` is 25 frames, not 30; at
    60 it is 60."""
    for fps in (25.0, 60.0):
        t, _, _ = _lost(models, background)
        for i in range(20):
            t.rate.update(1000.0 * i / fps)
        window = round(fps * ReacquireParams().window_ms / 1000.0)
        assert t.frames(ReacquireParams().window_ms) == window
        assert [g.name for g in waiting(t, window, {})] == ["cover"]
        assert waiting(t, window + 1, {}) == []


def test_tracks_lost_for_support_are_looked_for_for_a_while_until_tracked_again(models, background):
    t, _, _ = _lost(models, background)
    assert [g.name for g in waiting(t, REACQUIRE_FRAMES, {})] == ["cover"]
    assert waiting(t, REACQUIRE_FRAMES + 1, {}) == []  # no object followed places it: no longer looked for
    assert waiting(t, LAYOUT_FRAMES + 1, {}) == [] and "cover" not in t.ended  # forgotten
    t, Hm, size = _lost(models, background)
    gray = _render(background, [(models["cover"], Hm)], 4)
    (ghost,) = waiting(t, 2, {})
    found, lost = t.absorb([reacquire(t, ghost, gray)], [], gray, 2, lambda n: size)
    assert [d.state for d in found] == ["detected"] and not lost
    assert waiting(t, 3, {}) == []  # tracked again: no longer looked for


def test_a_track_that_ended_mostly_out_of_view_is_not_looked_for(models, background):
    """An object last seen less in view than a new track needs (``min_anchor_visible``) was leaving the frame:
    aligning its model where it was could find it only too little in view to track, so it is not looked for."""
    t, _, _ = _lost(models, background)
    (ghost,) = waiting(t, 1, {})
    ghost.visible = t.params.min_anchor_visible - 0.01
    assert waiting(t, 2, {}) == []
    ghost.visible = t.params.min_anchor_visible
    assert [g.name for g in waiting(t, 3, {})] == ["cover"]


def _two(models, background):
    """A tracker following the cover and the pagoda, unmoved, in frames 0-6 (their histories), the placed
    homographies, the model sizes."""
    t = _tracker(models)
    sizes = {n: (m.shape[1], m.shape[0]) for n, m in models.items()}
    placed_at = {"cover": _place(models["cover"], 170, 200, 0.45), "pagoda": _place(models["pagoda"], 420, 220, 0.45)}
    gray = _render(background, [(models[n], Hm) for n, Hm in placed_at.items()], 0)
    dets = [Detection(n, 0.9, 40, Hm, map_points(Hm, model_corners(*sizes[n])), 1.0) for n, Hm in placed_at.items()]
    t.absorb(dets, [], gray, 0, sizes.__getitem__)
    for track in t.tracks:
        track.history.extend((f, track.homography) for f in range(7))
    return t, placed_at, sizes


def _found(t, name, H, sizes, gray, frame):
    d = Detection(name, 0.9, 40, H, map_points(H, model_corners(*sizes[name])), 1.0)
    t.absorb([d], [], gray, frame, sizes.__getitem__)


def test_objects_lost_together_are_looked_for_where_the_first_one_found_again_places_them(models, background):
    """Both tracks end in one frame (a swing of the camera), the view then moved by 70 px: aligned where its
    track ended, the pagoda is not found (too far for Lucas-Kanade); once the cover is found again (by a
    detection), it places the pagoda where the two were relative to each other, and the pagoda is found at
    its true place."""
    t, placed_at, sizes = _two(models, background)
    for track in list(t.tracks):
        t.drop(track, "support", 7)
    move = np.array([[1.0, 0.0, 70.0], [0.0, 1.0, 12.0], [0.0, 0.0, 1.0]])
    truth = {n: move @ Hm for n, Hm in placed_at.items()}
    gray = _render(background, [(models[n], Hm) for n, Hm in truth.items()], 1)
    ghost = {g.name: g for g in waiting(t, 9, {})}
    assert placed(t, ghost["pagoda"]) is None and reacquire(t, ghost["pagoda"], gray) is None
    _found(t, "cover", truth["cover"], sizes, gray, 9)
    assert np.allclose(placed(t, ghost["pagoda"]), truth["pagoda"], atol=1e-6)
    d = reacquire(t, ghost["pagoda"], gray)
    assert d is not None and _err(d.homography, truth["pagoda"], sizes["pagoda"]) <= 1.0


def test_an_object_followed_further_into_a_swing_is_placed_as_it_was_when_the_other_was_lost(models, background):
    """The cover's track ends in frame 7 (its last place is frame 6's); the pagoda's follows the swing 150 px
    further before it ends in frame 9. The view then settles 40 px from where it started. Once the cover is
    found again, the pagoda is looked for where it was relative to the cover in frame 6, and found; from its
    last place alone it is not."""
    t, placed_at, sizes = _two(models, background)
    cover, pagoda = sorted(t.tracks, key=lambda x: x.name)
    t.drop(cover, "support", 7)
    pagoda.homography = np.array([[1.0, 0.0, 150.0], [0.0, 1.0, 20.0], [0.0, 0.0, 1.0]]) @ placed_at["pagoda"]
    pagoda.history.append((7, pagoda.homography))
    t.drop(pagoda, "support", 9)
    move = np.array([[1.0, 0.0, 40.0], [0.0, 1.0, -8.0], [0.0, 0.0, 1.0]])
    truth = {n: move @ Hm for n, Hm in placed_at.items()}
    gray = _render(background, [(models[n], Hm) for n, Hm in truth.items()], 1)
    _found(t, "cover", truth["cover"], sizes, gray, 11)
    d = reacquire(t, pagoda, gray)
    assert d is not None and _err(d.homography, truth["pagoda"], sizes["pagoda"]) <= 1.0
    t.layout.clear()
    assert reacquire(t, pagoda, gray) is None


def test_an_object_that_left_the_view_is_looked_for_when_its_neighbour_places_it_back_in_view(models, background):
    """The pagoda's track ends as it leaves the view (visibility) while the cover is followed: it is not looked
    for while the cover places it out of view, is looked for once the cover places it back in view (long
    after REACQUIRE_FRAMES), at most once in LAYOUT_RETRY frames after a miss, and is forgotten after
    LAYOUT_FRAMES."""
    t, placed_at, sizes = _two(models, background)
    cover = next(x for x in t.tracks if x.name == "cover")
    pagoda = next(x for x in t.tracks if x.name == "pagoda")
    t.drop(pagoda, "visibility", 7)
    away = np.array([[1.0, 0.0, 400.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])  # the pagoda out past the right edge
    cover.homography = away @ placed_at["cover"]
    assert waiting(t, 60, {}, (H, W)) == []
    cover.homography = placed_at["cover"]
    assert [g.name for g in waiting(t, 60, {}, (H, W))] == ["pagoda"]
    assert waiting(t, 62, {"pagoda": 60}, (H, W)) == [] and waiting(t, 60 + LAYOUT_RETRY, {"pagoda": 60}, (H, W))
    assert waiting(t, LAYOUT_FRAMES + 8, {}, (H, W)) == [] and "pagoda" not in t.ended and not t.layout


def test_objects_that_did_not_keep_their_places_do_not_place_each_other(models, background):
    """The pagoda moved 12 px against the cover over the frames both were followed (a hand carrying it): when
    its track ends, the cover does not place it."""
    t, placed_at, sizes = _two(models, background)
    pagoda = next(x for x in t.tracks if x.name == "pagoda")
    pagoda.history.clear()
    for f in range(7):
        pagoda.history.append(
            (f, np.array([[1.0, 0.0, 2.0 * f], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]]) @ placed_at["pagoda"])
        )
    pagoda.homography = pagoda.history[-1][1]
    t.drop(pagoda, "support", 7)
    assert placed(t, pagoda) is None and not t.layout
