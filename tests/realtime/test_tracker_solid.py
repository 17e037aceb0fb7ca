"""Tracks of objects verified without a plane against the known motion of a synthetic solid (two textured faces
meeting at an edge, as a box corner is seen): following, losing, confirming, re-anchoring, beside planar tracks."""

from __future__ import annotations

import itertools

import cv2
import numpy as np
import pytest

from objrec.data import sample_background, sample_objects
from objrec.geometry import map_points, model_corners
from objrec.realtime.solid_track import SolidTrack, spread_subset
from objrec.realtime.tracker import Tracker, TrackParams
from objrec.types import Detection

W, H = 640, 480


@pytest.fixture(scope="module")
def background():
    return cv2.cvtColor(sample_background((W, H), seed=5), cv2.COLOR_BGR2GRAY)


@pytest.fixture(scope="module")
def solid():
    """A box corner on a 300x260 canvas: two textured faces, each through its own homography (one bends away to
    the left, the other to the right), and the mask of what they cover."""
    objs = {k: cv2.cvtColor(v, cv2.COLOR_BGR2GRAY) for k, v in sample_objects().items()}
    canvas, mask = np.zeros((260, 300), np.uint8), np.zeros((260, 300), np.uint8)
    faces = (
        ("pagoda", [[10, 30], [150, 10], [150, 250], [10, 230]]),
        ("dahlia", [[150, 10], [290, 40], [290, 220], [150, 250]]),
    )
    for name, quad in faces:
        img = objs[name]
        Hf = cv2.getPerspectiveTransform(model_corners(img.shape[1], img.shape[0]).astype(np.float32), np.float32(quad))
        warped = cv2.warpPerspective(img, Hf, (300, 260))
        inside = cv2.warpPerspective(np.full(img.shape, 255, np.uint8), Hf, (300, 260), flags=cv2.INTER_NEAREST)
        canvas[inside > 0], mask[inside > 0] = warped[inside > 0], 255
    return canvas, mask


@pytest.fixture(scope="module")
def cover():
    return cv2.cvtColor(sample_objects()["cover"], cv2.COLOR_BGR2GRAY)


def _similarity(x, y, angle=0.0, scale=1.0, size=(300, 260)) -> np.ndarray:
    """The canvas's centre to (x, y), rotated by ``angle`` degrees and scaled: (3, 3)."""
    A = cv2.getRotationMatrix2D((size[0] / 2, size[1] / 2), angle, scale)
    A[:, 2] += (x - size[0] / 2, y - size[1] / 2)
    return np.vstack([A, [0, 0, 1]])


def _paste(frame, img, mask, M):
    warped = cv2.warpAffine(img, M[:2], (W, H), flags=cv2.INTER_LINEAR)
    inside = cv2.warpAffine(mask, M[:2], (W, H), flags=cv2.INTER_NEAREST)
    frame[inside > 0] = warped[inside > 0]


def _noisy(img, seed):
    return np.clip(img + np.random.default_rng(seed).normal(0, 2.0, img.shape), 0, 255).astype(np.uint8)


def _render(background, solid, M, seed, planar=None):
    img = background.copy()
    _paste(img, *solid, M)
    if planar is not None:
        model, Hm = planar
        _paste(img, model, np.full(model.shape, 255, np.uint8), Hm)
    return _noisy(img, seed)


def _solid_detection(gray, solid_mask_in_frame, name="corner") -> Detection:
    """What the verifier reports for the solid: the scene positions of SIFT keypoints on it as the inliers, their
    convex hull as the outline, the box around it as the corners."""
    kps = cv2.SIFT_create(300).detect(gray, solid_mask_in_frame)
    xy = np.float64([k.pt for k in kps])
    hull = cv2.convexHull(np.float32(xy)).reshape(-1, 2).astype(np.float64)
    (x0, y0), (x1, y1) = hull.min(axis=0), hull.max(axis=0)
    box = np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]])
    return Detection(name, 0.9, len(xy), None, box, inlier_xy=xy, outline=hull)


def _mask_in_frame(solid, M):
    return cv2.warpAffine(solid[1], M[:2], (W, H), flags=cv2.INTER_NEAREST)


def _moved(M, M0, xy):
    return map_points(M @ np.linalg.inv(M0), xy)


def test_the_outline_follows_a_solid_moving_by_a_known_similarity(background, solid):
    """30 frames (90 px across, 15 degrees, 9% in scale) by flow alone: every vertex of the tracked outline stays
    within 1 px of the first outline moved by the true motion, and the box is the box around the outline."""
    path = [_similarity(220 + 3 * k, 230 + 1 * k, 0.5 * k, 1.0 + 0.003 * k) for k in range(30)]
    t = Tracker(params=TrackParams())
    gray = _render(background, solid, path[0], 0)
    d = _solid_detection(gray, _mask_in_frame(solid, path[0]))
    out, lost = t.absorb([d], [], gray, 0, lambda n: (300, 260))
    assert not lost and [(x.state, x.homography) for x in out] == [("detected", None)]
    tid = out[0].track_id
    assert tid is not None and isinstance(t.tracks[0], SolidTrack)
    errors = []
    for k in range(1, len(path)):
        dets, lost = t.step(_render(background, solid, path[k], k), k)
        assert not lost and len(dets) == 1
        x = dets[0]
        assert (x.state, x.track_id, x.homography) == ("tracked", tid, None)
        assert np.allclose(x.corners[0], x.outline.min(axis=0)) and np.allclose(x.corners[2], x.outline.max(axis=0))
        errors.append(np.linalg.norm(x.outline - _moved(path[k], path[0], d.outline), axis=1).max())
    assert max(errors) < 1.0, errors


def test_a_covered_solid_ends_for_support_and_is_not_reported_hidden(background, solid):
    M = _similarity(320, 240)
    t = Tracker(params=TrackParams())
    gray = _render(background, solid, M, 0)
    t.absorb([_solid_detection(gray, _mask_in_frame(solid, M))], [], gray, 0, lambda n: (300, 260))
    x_lo, y_lo = t.tracks[0].outline.min(axis=0).astype(int)
    x_hi, y_hi = t.tracks[0].outline.max(axis=0).astype(int)
    patch = cv2.resize(background[:200, :200], (x_hi - x_lo + 40, y_hi - y_lo + 40))
    lost_at, reasons = None, []
    for k in range(1, 16):
        # A textured hand-sized patch slides in from the left by a tenth of the object per frame.
        x0 = int(x_lo - patch.shape[1] + (k / 10.0) * (x_hi - x_lo))
        covered = np.clip((x0 + patch.shape[1] - x_lo) / (x_hi - x_lo), 0, 1)
        img = background.copy()
        _paste(img, *solid, M)
        src = patch[:, max(0, -x0) :]
        part = img[y_lo - 20 : y_lo - 20 + src.shape[0], max(x0, 0) : max(x0, 0) + src.shape[1]]
        part[...] = src[: part.shape[0], : part.shape[1]]
        dets, lost = t.step(_noisy(img, k), k)
        reasons += [x.reason for x in lost]
        if lost and lost_at is None:
            lost_at = k
        if covered > 0.8:
            assert not dets, (k, covered)
    assert reasons == ["support"]
    assert lost_at is not None and lost_at <= 9  # by the time four fifths of it are covered


def test_a_detection_inside_confirms_a_solid_track_and_one_beyond_re_anchors_it(background, solid):
    M = _similarity(300, 240)
    t = Tracker(params=TrackParams(reanchor_px=2.0))
    gray = _render(background, solid, M, 0)
    d = _solid_detection(gray, _mask_in_frame(solid, M))
    out, _ = t.absorb([d], [], gray, 0, lambda n: (300, 260))
    tid = out[0].track_id
    gray1 = _render(background, solid, M, 1)
    tracked, _ = t.step(gray1, 1)
    tr = t.tracks[0]
    tr.pts, tr.ref_pts = tr.pts[:18], tr.ref_pts[:18]  # as if points had been lost on the way
    # The hull of fewer matches lies inside the track's outline: it confirms the track, which gets new points.
    c = d.outline.mean(axis=0)
    inner = c + 0.8 * (d.outline - c)
    box = np.array(
        [inner.min(0), [inner[:, 0].max(), inner[:, 1].min()], inner.max(0), [inner[:, 0].min(), inner[:, 1].max()]]
    )
    fewer = Detection("corner", 0.9, 20, None, box, inlier_xy=inner, outline=inner)
    dets, _ = t.absorb([fewer], tracked, gray1, 1, lambda n: (300, 260))
    assert [(x.state, x.track_id) for x in dets] == [("tracked", tid)]
    assert t.tracks[0].confirmed == 1 and t.tracks[0].support == 1.0 and len(t.tracks[0].pts) > 18
    # Shifted 10 px beyond the track's outline: the track moves onto the detection, same id.
    shifted = Detection(
        "corner", 0.9, 40, None, d.corners + [10, 0], inlier_xy=d.inlier_xy + [10, 0], outline=d.outline + [10, 0]
    )
    dets, _ = t.absorb([shifted], tracked, gray1, 1, lambda n: (300, 260))
    assert [(x.state, x.track_id) for x in dets] == [("detected", tid)]
    assert np.allclose(dets[0].outline, shifted.outline) and len(t.tracks) == 1


def test_solid_and_planar_tracks_coexist_in_one_flow(background, solid, cover):
    """A planar cover and a solid, each moving its own way: two tracks with their own ids, the cover's corners
    within 1.5 px of its homography's, the solid's outline within 1 px of its motion."""
    size = (cover.shape[1], cover.shape[0])
    solid_path = [_similarity(180 + 2 * k, 240, -0.4 * k) for k in range(15)]
    cover_path = [_similarity(480, 240 - 2 * k, 0.5 * k, 0.6, size) for k in range(15)]
    t = Tracker(params=TrackParams())
    gray = _render(background, solid, solid_path[0], 0, (cover, cover_path[0]))
    d_solid = _solid_detection(gray, _mask_in_frame(solid, solid_path[0]))
    d_flat = Detection("cover", 0.9, 40, cover_path[0], map_points(cover_path[0], model_corners(*size)))
    sizes = {"corner": (300, 260), "cover": size}
    out, lost = t.absorb([d_solid, d_flat], [], gray, 0, sizes.__getitem__)
    assert not lost and len({x.track_id for x in out}) == 2
    ids = {x.name: x.track_id for x in out}
    for k in range(1, 15):
        dets, lost = t.step(_render(background, solid, solid_path[k], k, (cover, cover_path[k])), k)
        assert not lost and {x.name: x.track_id for x in dets} == ids and {x.state for x in dets} == {"tracked"}
        by = {x.name: x for x in dets}
        truth = map_points(cover_path[k], model_corners(*size))
        assert np.linalg.norm(by["cover"].corners - truth, axis=1).max() < 1.5
        assert by["cover"].homography is not None and by["corner"].homography is None
        assert (
            np.linalg.norm(by["corner"].outline - _moved(solid_path[k], solid_path[0], d_solid.outline), axis=1).max()
            < 1.0
        )


def test_spread_subset_covers_within_twice_the_optimal_radius():
    """Farthest-point sampling is a 2-approximation of the k-centre problem: its covering radius is at most twice
    the best one, found here by brute force over every subset."""
    rng = np.random.default_rng(4)
    for _ in range(5):
        xy = rng.uniform(0, 100, (12, 2)).astype(np.float32)
        d = np.linalg.norm(xy[:, None] - xy[None], axis=2)
        for n in (2, 3, 4):
            chosen = spread_subset(xy, n)
            assert len(chosen) == n and len(np.unique(chosen, axis=0)) == n
            ours = np.linalg.norm(xy[:, None] - chosen[None], axis=2).min(axis=1).max()
            best = min(d[:, list(s)].min(axis=1).max() for s in itertools.combinations(range(12), n))
            assert ours <= 2 * best + 1e-4
    assert len(spread_subset(xy, 20)) == 12 and len(spread_subset(xy, 0)) == 0
