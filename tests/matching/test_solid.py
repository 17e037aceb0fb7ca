"""Verification without a plane (objrec.matching.solid) against scenes whose geometry is known."""

from __future__ import annotations

import dataclasses

import cv2
import numpy as np
import pytest

from objrec.matching.solid import SOLID_REASONS, SolidParams, local_consistency, verify_solid
from objrec.types import Failure

K = np.array([[500.0, 0, 320], [0, 500.0, 240], [0, 0, 1]])
SCENE = (480, 640)


def _camera(yaw_deg: float, t: tuple[float, float, float]) -> np.ndarray:
    """3x4 projection of a camera turned by ``yaw_deg`` about y and moved by ``t``."""
    a = np.radians(yaw_deg)
    R = np.array([[np.cos(a), 0, np.sin(a)], [0, 1, 0], [-np.sin(a), 0, np.cos(a)]])
    return K @ np.c_[R, np.asarray(t, np.float64)]


def _project(P: np.ndarray, X: np.ndarray) -> np.ndarray:
    h = np.c_[X, np.ones(len(X))] @ P.T
    return h[:, :2] / h[:, 2:3]


def _frames(P: np.ndarray, X: np.ndarray, tangent: np.ndarray) -> np.ndarray:
    """(size, angle) of each point's keypoint: the image of a short vector along the surface at the point."""
    d = _project(P, X + tangent) - _project(P, X)
    return np.c_[2.0 * np.linalg.norm(d, axis=1), np.degrees(np.arctan2(d[:, 1], d[:, 0])) % 360]


def _box_corner(n: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Points on three faces of a cube seen corner-on (depth about 2 units at 6 units away) and a tangent of each."""
    face = rng.integers(0, 3, n)
    u, v = rng.uniform(0, 2, n), rng.uniform(0, 2, n)
    X = np.zeros((n, 3))
    X[face == 0] = np.c_[u, v, np.zeros(n)][face == 0]  # front face z = 0
    X[face == 1] = np.c_[np.zeros(n), v, u][face == 1]  # side face x = 0
    X[face == 2] = np.c_[u, np.zeros(n), v][face == 2]  # top face y = 0
    R = cv2.Rodrigues(np.array([0.5, -0.7, 0.0]))[0]
    X = X @ R.T + np.array([-0.5, -0.5, 6.0])
    tangent = np.array([[0.05, 0.02, 0], [0, 0.02, 0.05], [0.05, 0, 0.02]])[face] @ R.T
    return X, tangent


def _views(X: np.ndarray, tangent: np.ndarray, rng: np.random.Generator, noise: bool = True):
    P1, P2 = _camera(0, (0, 0, 0)), _camera(-25, (1.5, 0.2, 0.5))
    x1, x2 = _project(P1, X), _project(P2, X)
    f1, f2 = _frames(P1, X, tangent), _frames(P2, X, tangent)
    if noise:
        x2 = x2 + rng.normal(0, 0.5, x2.shape)
        f2 = f2 * np.c_[np.exp(rng.normal(0, 0.08, len(f2))), np.ones(len(f2))]
        f2[:, 1] = (f2[:, 1] + rng.normal(0, 4, len(f2))) % 360
    return x1, x2, f1, f2


def _model_size(x1: np.ndarray) -> tuple[int, int]:
    return int(np.ceil(x1[:, 0].max())) + 10, int(np.ceil(x1[:, 1].max())) + 10


def _homography_share(x1: np.ndarray, x2: np.ndarray) -> float:
    cv2.setRNGSeed(0)
    _, mask = cv2.findHomography(x1, x2, cv2.USAC_MAGSAC, 3.0)
    return 0.0 if mask is None else float(mask.mean())


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_object_with_depth_is_accepted_where_no_homography_holds(seed):
    rng = np.random.default_rng(seed)
    X, t = _box_corner(120, rng)
    x1, x2, f1, f2 = _views(X, t, rng)
    assert _homography_share(x1, x2) < 0.6  # the premise: one plane explains few of the matches
    v = verify_solid(x1, x2, _model_size(x1), SCENE, model_frames=f1, scene_frames=f2)
    assert v, v
    assert v.mode == "epipolar"
    assert v.n_inliers >= 0.8 * len(x1)
    # The fundamental matrix is the true one: the points' epipolar distances under it stay within the noise.
    lines = np.c_[x1, np.ones(len(x1))] @ v.fundamental.T
    dist = np.abs(np.einsum("ij,ij->i", lines, np.c_[x2, np.ones(len(x2))])) / np.hypot(lines[:, 0], lines[:, 1])
    assert np.median(dist) < 1.5


@pytest.mark.parametrize("seed", [0, 1])
def test_true_matches_among_outliers_are_the_support(seed):
    rng = np.random.default_rng(seed)
    X, t = _box_corner(80, rng)
    x1, x2, f1, f2 = _views(X, t, rng)
    m = 60  # wrong matches: a model point sent to a random scene keypoint with a random frame
    x1 = np.r_[x1, rng.uniform(0, 400, (m, 2))]
    f1 = np.r_[f1, np.c_[rng.uniform(5, 40, m), rng.uniform(0, 360, m)]]
    x2 = np.r_[x2, rng.uniform(0, 640, (m, 2)) * [1, 0.75]]
    f2 = np.r_[f2, np.c_[rng.uniform(5, 40, m), rng.uniform(0, 360, m)]]
    v = verify_solid(x1, x2, _model_size(x1), SCENE, model_frames=f1, scene_frames=f2)
    assert v, v
    truth = np.r_[np.ones(80, bool), np.zeros(m, bool)]
    assert (v.inliers & truth).sum() >= 0.8 * 80
    assert (v.inliers & ~truth).sum() <= 3
    hull = cv2.convexHull(np.float32(x2[v.inliers])).reshape(-1, 2)
    assert cv2.contourArea(np.float32(v.outline)) == pytest.approx(cv2.contourArea(hull))
    assert v.box[0] <= x2[v.inliers, 0].min() and v.box[2] >= x2[v.inliers, 0].max()


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_shuffled_matches_are_rejected(seed):
    rng = np.random.default_rng(seed)
    X, t = _box_corner(120, rng)
    x1, x2, f1, f2 = _views(X, t, rng)
    perm = rng.permutation(len(x2))  # every scene keypoint keeps its own frame, paired with the wrong model point
    v = verify_solid(x1, x2[perm], _model_size(x1), SCENE, model_frames=f1, scene_frames=f2[perm])
    assert not v and v.reason in SOLID_REASONS


def test_random_matches_with_the_same_count_are_rejected():
    rng = np.random.default_rng(5)
    for _ in range(20):
        n = 120
        x1, x2 = rng.uniform(0, 400, (n, 2)), rng.uniform(0, 1, (n, 2)) * [640, 480]
        f1 = np.c_[rng.uniform(5, 40, n), rng.uniform(0, 360, n)]
        f2 = np.c_[rng.uniform(5, 40, n), rng.uniform(0, 360, n)]
        v = verify_solid(x1, x2, (400, 400), SCENE, model_frames=f1, scene_frames=f2)
        assert not v, v.info


def test_random_matches_fit_a_fundamental_matrix_but_not_the_local_frames():
    """The reason counting epipolar inliers alone does not do: MAGSAC finds many among random matches."""
    rng = np.random.default_rng(0)
    n = 300
    x1, x2 = rng.uniform(0, 400, (n, 2)), rng.uniform(0, 1, (n, 2)) * [640, 480]
    cv2.setRNGSeed(0)
    _, mask = cv2.findFundamentalMat(x1, x2, cv2.USAC_MAGSAC, 2.0, 0.999, 2000)
    assert mask.sum() >= SolidParams().min_inliers + 4  # epipolar inliers alone would accept
    f = np.c_[rng.uniform(5, 40, n), rng.uniform(0, 360, n)]
    v = verify_solid(x1, x2, (400, 400), SCENE, model_frames=f, scene_frames=np.roll(f, 1, axis=0))
    assert v.reason == "inconsistent"


def test_planar_scene_is_accepted_as_planar():
    rng = np.random.default_rng(3)
    n = 100
    X = np.c_[rng.uniform(-1, 1, (n, 2)), np.full(n, 5.0)]
    t = np.tile([0.05, 0.02, 0.0], (n, 1))
    x1, x2, f1, f2 = _views(X, t, rng)
    assert _homography_share(x1, x2) > 0.9
    v = verify_solid(x1 - x1.min(axis=0), x2, (400, 400), SCENE, model_frames=f1, scene_frames=f2)
    assert v, v
    assert v.mode == "planar" and v.homography is not None and v.fundamental is None
    assert v.n_inliers >= 0.9 * n


def test_local_consistency_matches_a_loop():
    rng = np.random.default_rng(11)
    X, t = _box_corner(40, rng)
    x1, x2, f1, f2 = _views(X, t, rng)
    x2[:10] = rng.uniform(0, 400, (10, 2))
    p = SolidParams()
    got = local_consistency(x1, x2, f1, f2, p)
    want = np.zeros(40, int)
    for i in range(40):
        d = np.linalg.norm(x1 - x1[i], axis=1)
        d[i] = np.inf
        s = f2[i, 0] / f1[i, 0]
        r = np.radians(f2[i, 1] - f1[i, 1])
        R = np.array([[np.cos(r), -np.sin(r)], [np.sin(r), np.cos(r)]])
        for j in np.argsort(d, kind="stable")[: p.neighbours]:
            sj = f2[j, 0] / f1[j, 0]
            rj = np.radians(f2[j, 1] - f1[j, 1])
            pred = s * R @ (x1[j] - x1[i])
            ok = abs(np.log(s / sj)) <= np.log(p.max_scale_change)
            ok &= abs((np.degrees(r - rj) + 180) % 360 - 180) <= p.max_angle_change
            ok &= np.linalg.norm(x2[j] - x2[i] - pred) <= p.position_tolerance * np.linalg.norm(pred) + p.position_px
            want[i] += ok
    assert np.array_equal(got, want)
    assert got[10:].mean() > got[:10].mean()


def test_opencv_keypoint_angles_follow_the_rotation_convention():
    """A textured image rotated by OpenCV: SIFT matches between the two agree with their neighbours'
    similarity, which holds only if keypoint angles turn with the image as :func:`local_consistency` assumes."""
    noise = np.random.default_rng(0).uniform(0, 255, (320, 320)).astype(np.float32)
    img = cv2.normalize(cv2.GaussianBlur(noise, (0, 0), 3), None, 0, 255, cv2.NORM_MINMAX).astype(np.uint8)
    h, w = img.shape[:2]
    A = cv2.getRotationMatrix2D((w / 2, h / 2), 35, 0.8)  # 35 degrees anticlockwise on screen, scale 0.8
    rot = cv2.warpAffine(img, A, (w, h))
    sift = cv2.SIFT_create()
    k1, d1 = sift.detectAndCompute(img, None)
    k2, d2 = sift.detectAndCompute(rot, None)
    m = [a for a, b in cv2.BFMatcher().knnMatch(d1, d2, k=2) if a.distance < 0.7 * b.distance]
    x1 = np.array([k1[a.queryIdx].pt for a in m])
    x2 = np.array([k2[a.trainIdx].pt for a in m])
    true = np.linalg.norm(x1 @ A[:, :2].T + A[:, 2] - x2, axis=1) < 2
    assert true.sum() >= 30
    f1 = np.array([(k1[a.queryIdx].size, k1[a.queryIdx].angle) for a in m])
    f2 = np.array([(k2[a.trainIdx].size, k2[a.trainIdx].angle) for a in m])
    agree = local_consistency(x1[true], x2[true], f1[true], f2[true])
    assert np.mean(agree >= 2) > 0.8
    mirrored = f2[true] * [1, -1]  # angles of the opposite sense: the similarities no longer agree
    assert np.mean(local_consistency(x1[true], x2[true], f1[true], mirrored) >= 2) < 0.3


def test_without_frames_only_the_epipolar_test_remains():
    rng = np.random.default_rng(0)
    X, t = _box_corner(100, rng)
    x1, x2, _, _ = _views(X, t, rng)
    v = verify_solid(x1, x2, _model_size(x1), SCENE)
    assert v and v.info["consistent"] == len(x1)


def test_bad_inputs_name_the_argument():
    xy = np.zeros((20, 2))
    with pytest.raises(ValueError, match="model_xy and scene_xy"):
        verify_solid(xy, xy[:10], (10, 10), SCENE)
    with pytest.raises(ValueError, match="scene_frames"):
        verify_solid(xy, xy, (10, 10), SCENE, model_frames=np.ones((20, 2)), scene_frames=np.ones((19, 2)))
    v = verify_solid(xy[:5], xy[:5], (10, 10), SCENE)
    assert isinstance(v, Failure) and v.reason == "too_few_matches" and not v


#: UKBench objects with depth (a shoe, toys, a plant...) whose second photo OpenCV SIFT matches to the first.
UKBENCH_SOLID = (6, 11, 21, 24, 26)


def _sift_pair(shared_data, a: int, b: int):
    sift, out = cv2.SIFT_create(), []
    for i in (a, b):
        img = cv2.imread(str(shared_data / "ukbench" / f"ukbench{i:05d}.jpg"), cv2.IMREAD_GRAYSCALE)
        if img is None:
            pytest.skip(f"ukbench{i:05d}.jpg not in the shared data folder")
        kp, desc = sift.detectAndCompute(img, None)
        out.append((np.array([k.pt for k in kp]), np.array([(k.size, k.angle) for k in kp]), desc))
    (xa, fa, da), (xb, fb, db) = out
    m = [p for p, q in cv2.BFMatcher().knnMatch(da, db, k=2) if p.distance < 0.8 * q.distance]
    qi, ti = np.array([p.queryIdx for p in m], int), np.array([p.trainIdx for p in m], int)
    return xa[qi], xb[ti], fa[qi], fb[ti]


@pytest.mark.parametrize("k", UKBENCH_SOLID)
def test_ukbench_objects_with_depth(shared_data, k):
    """The object's first two photos verify (more support than one homography's inliers: the view is not a
    plane's); the first photo against other objects' photos does not."""
    x1, x2, f1, f2 = _sift_pair(shared_data, 4 * k, 4 * k + 1)
    v = verify_solid(x1, x2, (640, 480), SCENE, model_frames=f1, scene_frames=f2)
    assert v, v
    cv2.setRNGSeed(0)
    _, mask = cv2.findHomography(x1, x2, cv2.USAC_MAGSAC, 2.0)
    assert v.mode == "epipolar" and v.n_inliers > mask.sum()
    for other in ((k + 1) % 120, (k + 7) % 120):
        x1, x2, f1, f2 = _sift_pair(shared_data, 4 * k, 4 * other + 1)
        w = verify_solid(x1, x2, (640, 480), SCENE, model_frames=f1, scene_frames=f2)
        assert not w, (other, w.info)


def _candidate(name: str, seed: int):
    from objrec.types import Candidate

    rng = np.random.default_rng(seed)
    X, t = _box_corner(120, rng)
    x1, x2, f1, f2 = _views(X, t, rng)
    c = Candidate(0, x1.astype(np.float32), x2.astype(np.float32), np.full(len(x1), 0.5, np.float32), name,
                  _model_size(x1), f1.astype(np.float32), f2.astype(np.float32))  # fmt: skip
    return c, x2


def test_the_verifier_verifies_a_solid_object_without_a_plane():
    from objrec.matching.verifier import CandidateVerifier
    from objrec.types import Detection

    c, x2 = _candidate("toy", 0)
    flat = CandidateVerifier().verify(c, SCENE)
    # A homography holds for one face of the box corner at most: as a flat object, most matches are lost.
    assert not isinstance(flat, Detection) or flat.inliers < 0.6 * len(c)
    d = CandidateVerifier(solid={"toy"}).verify(c, SCENE)
    assert isinstance(d, Detection), d
    assert d.homography is None and d.to_json()["homography"] is None
    hull = cv2.convexHull(x2.astype(np.float32)).reshape(-1, 2)
    # The outline is the hull of the inliers: inside the hull of all the true matches, and most of its area.
    assert cv2.contourArea(d.outline.astype(np.float32)) >= 0.8 * cv2.contourArea(hull)
    assert d.corners.min(axis=0) == pytest.approx(d.outline.min(axis=0), abs=1.0)
    assert d.corners.max(axis=0) == pytest.approx(d.outline.max(axis=0), abs=1.0)


def test_the_verifier_rejects_shuffled_matches_of_a_solid_object():
    from objrec.matching.verifier import CandidateVerifier

    c, _ = _candidate("toy", 1)
    rng = np.random.default_rng(5)
    perm = rng.permutation(len(c))
    wrong = dataclasses.replace(c, scene_xy=c.scene_xy[perm], scene_frames=c.scene_frames[perm])
    r = CandidateVerifier(solid={"toy"}).verify(wrong, SCENE)
    assert r.reason in {"inconsistent", "too_few_inliers"} and "as flat" in r.detail


def test_a_flat_view_of_a_solid_object_keeps_its_homography():
    from objrec.matching.verifier import CandidateVerifier
    from objrec.types import Candidate, Detection

    rng = np.random.default_rng(3)
    x1 = rng.uniform(0, 300, (80, 2))
    H = np.array([[0.9, 0.1, 40], [-0.1, 0.9, 30], [2e-4, 1e-4, 1]])
    x2 = cv2.perspectiveTransform(x1.reshape(-1, 1, 2), H).reshape(-1, 2) + rng.normal(0, 0.3, x1.shape)
    frames1 = np.c_[np.full(80, 12.0), np.full(80, 30.0)]
    frames2 = np.c_[np.full(80, 12.0 * 0.9), np.full(80, 30.0 - 6.3)]  # the similarity's scale and rotation
    c = Candidate(0, x1.astype(np.float32), x2.astype(np.float32), np.full(80, 0.5, np.float32), "box", (300, 300),
                  frames1.astype(np.float32), frames2.astype(np.float32))  # fmt: skip
    d = CandidateVerifier(solid={"box"}).verify(c, SCENE)
    assert isinstance(d, Detection) and d.homography is not None
    corners = np.array([[0, 0], [300, 0], [300, 300], [0, 300]], np.float64).reshape(-1, 1, 2)
    truth = cv2.perspectiveTransform(corners, H).reshape(-1, 2)
    assert np.abs(d.corners - truth).max() < 2.0
