"""Guided matching recovers the true matches of a candidate with too few inliers, and gains nothing from a
wrong tentative map."""

from __future__ import annotations

import numpy as np

from objrec.knn import BruteForceIndex
from objrec.matching.guided import guided_matches, tentative_homography
from objrec.matching.verify import VerifyParams

H_TRUE = np.array([[0.9, -0.3, 220.0], [0.25, 0.85, 60.0], [2e-4, -1e-4, 1.0]])


def _project(H, pts):
    hom = np.c_[pts, np.ones(len(pts))] @ H.T
    return hom[:, :2] / hom[:, 2:3]


def _scene(seed: int = 0, n: int = 300, d: int = 64):
    """Model keypoints with descriptors; the scene holds each one, moved by H_TRUE with 0.5 px noise and a
    noisy copy of its descriptor, plus as many clutter keypoints with random descriptors."""
    rng = np.random.default_rng(seed)
    model_xy = rng.uniform([0, 0], [300, 200], (n, 2)).astype(np.float32)
    model_desc = rng.normal(size=(n, d)).astype(np.float32)
    model_desc /= np.linalg.norm(model_desc, axis=1, keepdims=True)
    true_xy = _project(H_TRUE, model_xy) + rng.normal(0, 0.5, (n, 2))
    true_desc = model_desc + rng.normal(0, 0.06, (n, d)).astype(np.float32)
    clutter_xy = rng.uniform([0, 0], [640, 480], (n, 2))
    clutter_desc = rng.normal(size=(n, d)).astype(np.float32)
    clutter_desc /= np.linalg.norm(clutter_desc, axis=1, keepdims=True)
    scene_xy = np.vstack([true_xy, clutter_xy]).astype(np.float32)
    scene_desc = np.vstack([true_desc, clutter_desc]).astype(np.float32)
    return model_xy, model_desc, scene_xy, scene_desc


def test_guided_matching_recovers_the_true_matches_against_brute_force_truth():
    model_xy, model_desc, scene_xy, scene_desc = _scene()
    # A tentative map a few pixels off the truth, as from a handful of inliers.
    H0 = H_TRUE.copy()
    H0[:2, 2] += [3.0, -2.0]
    mi, si = guided_matches(H0, model_xy, model_desc, scene_xy, scene_desc, radius=12.0)
    correct = si == mi  # scene keypoint i is model keypoint i's true match
    assert correct.sum() >= 0.95 * len(model_xy)
    assert (~correct).sum() <= 0.02 * len(model_xy)
    # Every match lies within the window of its prediction (checked by a plain loop).
    pred = _project(H0, model_xy)
    for a, b in zip(mi, si, strict=True):
        assert np.linalg.norm(pred[a] - scene_xy[b]) <= 12.0


def test_guided_matches_follow_the_window_rule_on_the_exact_distances():
    """Each model keypoint matches the nearest frame descriptor inside its window, by the exact distances of
    :meth:`BruteForceIndex.distances`, when that is closer than ``0.9²`` times the nearest outside it (a plain
    loop over the keypoints); no other model keypoint is matched."""
    model_xy, model_desc, scene_xy, scene_desc = _scene(2)
    H0 = H_TRUE.copy()
    H0[:2, 2] += [2.0, 1.0]
    radius = np.float32(12.0)
    mi, si = guided_matches(H0, model_xy, model_desc, scene_xy, scene_desc, radius=12.0)
    D = BruteForceIndex(scene_desc).distances(model_desc)
    pred = _project(H0, model_xy).astype(np.float32)
    want = {}
    for a in range(len(model_xy)):
        inside = ((scene_xy - pred[a]) ** 2).sum(axis=1) <= radius * radius
        if not inside.any():
            continue
        b = int(np.flatnonzero(inside)[D[a, inside].argmin()])
        outside = D[a, ~inside].min() if (~inside).any() else np.inf
        if D[a, b] < 0.81 * outside:
            want[a] = b
    assert dict(zip(mi.tolist(), si.tolist(), strict=True)) == want
    assert len(want) > 0.9 * len(model_xy)


def test_a_wrong_map_finds_few_matches_and_signs_must_agree():
    model_xy, model_desc, scene_xy, scene_desc = _scene(1)
    wrong = np.array([[1.0, 0, 0], [0, 1.0, 0], [0, 0, 1.0]])
    mi, si = guided_matches(wrong, model_xy, model_desc, scene_xy, scene_desc, radius=12.0)
    assert np.sum(si == mi) <= 0.05 * len(model_xy)
    ms = np.ones(len(model_xy), np.int8)
    ss = -np.ones(len(scene_xy), np.int8)
    mi, _ = guided_matches(H_TRUE, model_xy, model_desc, scene_xy, scene_desc, 12.0, model_sign=ms, scene_sign=ss)
    assert len(mi) == 0


def test_tentative_map_from_a_few_matches_falls_back_to_affine():
    rng = np.random.default_rng(3)
    model = rng.uniform([0, 0], [300, 200], (6, 2))
    scene = _project(H_TRUE, model) + rng.normal(0, 4.0, (6, 2))  # six noisy true matches
    outliers_m = rng.uniform([0, 0], [300, 200], (7, 2))
    outliers_s = rng.uniform([0, 0], [640, 480], (7, 2))
    H = tentative_homography(
        np.vstack([model, outliers_m]), np.vstack([scene, outliers_s]), (300, 200), (480, 640), VerifyParams()
    )
    assert H is not None
    corners = np.array([[0, 0], [300, 0], [300, 200], [0, 200]], np.float64)
    assert np.abs(_project(H, corners) - _project(H_TRUE, corners)).max() < 40.0
    assert tentative_homography(model[:3], scene[:3], (300, 200), (480, 640), VerifyParams()) is None


def test_window_pairs_equal_the_dense_distance_test():
    """The k-d tree path gives exactly the pairs of the dense float32 test, points on the radius included."""
    from objrec.matching.guided import window_pairs

    rng = np.random.default_rng(11)
    for radius in (2.5, 7.5, 12.5):
        pred = rng.uniform(0, 640, (700, 2)).astype(np.float32)
        scene = rng.uniform(0, 640, (900, 2)).astype(np.float32)
        pred[:20] = scene[:20]  # the same positions
        pred[20:40] = scene[20:40] + np.float32([radius, 0.0])  # exactly on the radius
        pred[40:60] = np.round(scene[40:60] + rng.normal(0, radius, (20, 2))).astype(np.float32)
        dense = ((pred[:, None, :] - scene[None, :, :]) ** 2).sum(axis=2) <= np.float32(radius) ** 2
        got = window_pairs(pred, scene, radius)
        assert got.dtype == bool and got.shape == dense.shape
        np.testing.assert_array_equal(got, dense)
        assert dense[:40].any()
    assert window_pairs(np.zeros((0, 2), np.float32), scene, 5.0).shape == (0, 900)
