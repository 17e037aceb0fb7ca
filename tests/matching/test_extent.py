"""The predicted extent: a few matches of one part of an object place all of it, checked against the ground-truth
outline of a model warped into a frame (SURF keypoints of both images, OpenCV's brute-force matcher); matches of
nothing in particular place nothing."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from objrec.data import sample_objects
from objrec.features import SURF
from objrec.matching.extent import EXTENT_GROW, EXTENT_SUPPORT, predicted_extent
from objrec.types import Candidate

W, H = 640, 480


@pytest.fixture(scope="module")
def model():
    img = next(iter(sample_objects().values()))
    gray = cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)
    return gray, SURF().detect_and_compute(gray)


def _view(model, angle, scale, shift, tilt):
    """The model rotated, scaled and tilted (a perspective term) into a 640x480 frame: the frame's true matches
    (brute force, ratio 0.8, within 3 px of the ground truth) and the model's true outline in the frame."""
    gray, mf = model
    h, w = gray.shape
    A = np.vstack([cv2.getRotationMatrix2D((w / 2, h / 2), angle, scale), [0, 0, 1]])
    A[:2, 2] += shift
    P = np.array([[1, 0, 0], [0, 1, 0], [tilt / w, 0, 1]]) @ np.diag([1.0, 1.0, 1.0])
    Hm = A @ P
    frame = cv2.warpPerspective(gray, Hm, (W, H))
    sf = SURF().detect_and_compute(frame)
    pairs = cv2.BFMatcher(cv2.NORM_L2).knnMatch(
        np.asarray(sf.descriptors, np.float32), np.asarray(mf.descriptors, np.float32), k=2
    )
    good = [(a.queryIdx, a.trainIdx, a.distance / b.distance) for a, b in pairs if a.distance < 0.8 * b.distance]
    q, t, r = (np.array(v) for v in zip(*good, strict=True))
    true_xy = cv2.perspectiveTransform(mf.xy[t].reshape(-1, 1, 2).astype(np.float64), Hm).reshape(-1, 2)
    ok = np.linalg.norm(true_xy - sf.xy[q], axis=1) < 3.0
    q, t, r = q[ok], t[ok], r[ok]
    outline = cv2.perspectiveTransform(np.array([[[0, 0], [w, 0], [w, h], [0, h]]], np.float64), Hm).reshape(-1, 2)
    frames = (np.c_[mf.size[t], mf.angle[t]], np.c_[sf.size[q], sf.angle[q]])
    return (mf.xy[t], sf.xy[q], r.astype(np.float32), frames, (w, h)), outline


def _candidate(matches, keep):
    mxy, sxy, r, (mfr, sfr), size = matches
    return Candidate(0, mxy[keep], sxy[keep], r[keep], "cover", size, mfr[keep], sfr[keep])


@pytest.mark.parametrize(
    ("angle", "scale", "shift", "tilt"),
    [(0, 0.5, (200, 100), 0.0), (35, 0.45, (150, 60), 0.0), (-60, 0.4, (60, 120), 0.15), (170, 0.55, (120, 40), 0.1)],
)
def test_a_few_matches_of_one_half_place_the_whole_object(model, angle, scale, shift, tilt):
    """Matches only from the model's left half (the part of an object lying in one tile of the sweep): three to
    six of them place a box that holds the object's true outline and is not much larger than its bounding box
    grown by EXTENT_GROW."""
    matches, outline = _view(model, angle, scale, shift, tilt)
    w = matches[4][0]
    left = np.flatnonzero(matches[0][:, 0] < w / 2)
    rng = np.random.default_rng(0)
    lo, hi = outline.min(axis=0), outline.max(axis=0)
    size = hi - lo
    for n in (3, 4, 6):
        keep = rng.choice(left, n, replace=False)
        ext = predicted_extent(_candidate(matches, keep), W, H)
        assert ext is not None and ext.support == n
        x0, y0, x1, y1 = ext.box
        # Holds the outline (clipped to the frame), to within a few pixels.
        assert x0 <= max(lo[0], 0) + 4 and y0 <= max(lo[1], 0) + 4
        assert x1 >= min(hi[0], W) - 4 and y1 >= min(hi[1], H) - 4
        # And is about the grown box: each side within a quarter of the object's size of it.
        grown = np.r_[lo - EXTENT_GROW * size, hi + EXTENT_GROW * size]
        clipped = np.clip(grown, 0, [W, H, W, H])
        assert np.all(np.abs(np.array(ext.box) - clipped) <= 0.25 * np.r_[size, size])
        assert ext.in_view == pytest.approx(1.0)


def test_stray_matches_do_not_move_the_place(model):
    """Four true matches among eight random ones (other keypoints of the model, random places and frames in the
    frame): the four agree and place the object; the strays do not join them."""
    matches, outline = _view(model, 20, 0.5, (180, 90), 0.0)
    mxy, sxy, r, (mfr, sfr), size = matches
    rng = np.random.default_rng(1)
    true = rng.choice(len(mxy), 4, replace=False)
    n = 8
    c = Candidate(
        0,
        np.vstack([mxy[true], rng.uniform([0, 0], size, (n, 2))]).astype(np.float32),
        np.vstack([sxy[true], rng.uniform([0, 0], [W, H], (n, 2))]).astype(np.float32),
        np.full(4 + n, 0.7, np.float32),
        "cover",
        size,
        np.vstack([mfr[true], np.c_[rng.uniform(10, 40, n), rng.uniform(0, 360, n)]]).astype(np.float32),
        np.vstack([sfr[true], np.c_[rng.uniform(5, 30, n), rng.uniform(0, 360, n)]]).astype(np.float32),
    )
    ext = predicted_extent(c, W, H)
    assert ext is not None and ext.support == 4
    centre = np.array([(ext.box[0] + ext.box[2]) / 2, (ext.box[1] + ext.box[3]) / 2])
    assert np.linalg.norm(centre - outline.mean(axis=0)) < 0.1 * np.linalg.norm(np.ptp(outline, axis=0))


def test_matches_of_nothing_in_particular_seldom_agree():
    """Random positions, sizes and angles on both sides (what chance matches of other things are): at most one
    draw in twenty has EXTENT_SUPPORT of its eight matches agreeing."""
    rng = np.random.default_rng(2)
    placed = 0
    for _ in range(200):
        n = 8
        c = Candidate(
            0,
            rng.uniform([0, 0], [300, 400], (n, 2)).astype(np.float32),
            rng.uniform([0, 0], [W, H], (n, 2)).astype(np.float32),
            np.full(n, 0.7, np.float32),
            "cover",
            (300, 400),
            np.c_[rng.uniform(10, 40, n), rng.uniform(0, 360, n)].astype(np.float32),
            np.c_[rng.uniform(5, 30, n), rng.uniform(0, 360, n)].astype(np.float32),
        )
        placed += predicted_extent(c, W, H) is not None
    assert placed <= 10


def test_without_keypoint_frames_or_enough_matches_nothing_is_placed():
    xy = np.zeros((EXTENT_SUPPORT, 2), np.float32)
    frames = np.tile([[20.0, 0.0]], (EXTENT_SUPPORT, 1)).astype(np.float32)
    r = np.zeros(EXTENT_SUPPORT, np.float32)
    assert predicted_extent(Candidate(0, xy, xy, r, "a", (100, 100)), W, H) is None
    short = Candidate(0, xy[:-1], xy[:-1], r[:-1], "a", (100, 100), frames[:-1], frames[:-1])
    assert predicted_extent(short, W, H) is None
    assert predicted_extent(Candidate(0, xy, xy + 50, r, "a", (100, 100), frames, frames), W, H) is not None


def test_an_object_partly_outside_the_frame_says_how_much_is_in_view():
    """Three identical matches placing a 100x100 model at scale 1 with its centre on the frame's left edge: half
    of it is in view, and the box is clipped to the frame."""
    k = EXTENT_SUPPORT
    model_xy = np.tile([[50.0, 50.0]], (k, 1)).astype(np.float32)
    scene_xy = np.tile([[0.0, 240.0]], (k, 1)).astype(np.float32)
    frames = np.tile([[20.0, 10.0]], (k, 1)).astype(np.float32)
    c = Candidate(0, model_xy, scene_xy, np.zeros(k, np.float32), "a", (100, 100), frames, frames)
    ext = predicted_extent(c, W, H)
    assert ext.in_view == pytest.approx(0.5)
    assert ext.box[0] == 0 and ext.box[2] == pytest.approx(50 + 100 * EXTENT_GROW, abs=1)
    assert ext.box[1] == pytest.approx(190 - 100 * EXTENT_GROW, abs=1)
