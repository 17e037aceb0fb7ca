"""The verification unit: its verdicts equal verify_homography's, and every candidate is a scheduler unit."""

from __future__ import annotations

import numpy as np
import pytest

from objrec.matching.verifier import CandidateVerifier, FrameVerdicts
from objrec.matching.verify import VerifyParams, verify_homography
from objrec.realtime.scheduler import CostModel, FakeClock, FrameScheduler
from objrec.types import Candidate, Detection, Failure, Rejection


def _candidate(name: str, n_true: int, n_noise: int, seed: int) -> tuple[Candidate, np.ndarray]:
    """Matches of a 200x100 model under a known homography, plus uniform outliers."""
    rng = np.random.default_rng(seed)
    H = np.array([[1.2, 0.1, 150.0], [-0.05, 1.1, 90.0], [1e-4, 0.0, 1.0]])
    m = rng.uniform([0, 0], [200, 100], (n_true, 2))
    hom = np.c_[m, np.ones(n_true)] @ H.T
    s = hom[:, :2] / hom[:, 2:]
    mo = rng.uniform([0, 0], [200, 100], (n_noise, 2))
    so = rng.uniform([0, 0], [640, 480], (n_noise, 2))
    model_xy = np.vstack([m, mo]).astype(np.float32)
    scene_xy = np.vstack([s, so]).astype(np.float32)
    n = n_true + n_noise
    return Candidate(0, model_xy, scene_xy, np.full(n, 0.5, np.float32), name, (200, 100)), H


def test_verdict_equals_verify_homography():
    params = VerifyParams()
    v = CandidateVerifier(params)
    good, H = _candidate("good", 60, 20, 0)
    det = v.verify(good, (480, 640))
    ref = verify_homography(good.model_xy, good.scene_xy, 200, 100, (480, 640), params)
    assert isinstance(det, Detection) and not isinstance(ref, Failure)
    assert det.name == "good" and det.inliers == ref.n_inliers
    np.testing.assert_allclose(det.homography, ref.homography)
    truth = np.c_[[[0, 0], [200, 0], [200, 100], [0, 100]], np.ones(4)] @ H.T
    np.testing.assert_allclose(det.corners, truth[:, :2] / truth[:, 2:], atol=0.5)
    weak, _ = _candidate("weak", 4, 30, 1)
    rej = v.verify(weak, (480, 640))
    ref = verify_homography(weak.model_xy, weak.scene_xy, 200, 100, (480, 640), params)
    assert isinstance(rej, Rejection) and rej.reason == ref.reason and rej.matches == 34


def test_every_candidate_is_a_scheduler_unit_and_weak_ones_mark_unsure_boxes():
    clock = FakeClock()
    cost = CostModel(prior_ms={"verify": 50.0}, min_samples=1000)  # optional verifications never fit
    sched = FrameScheduler(30.0, cost, clock, safety_ms=0.0)
    sched.start()
    weak, _ = _candidate("weak", 3, 40, 2)
    good, _ = _candidate("good", 60, 10, 3)
    other, _ = _candidate("other", 60, 10, 4)
    verdicts = FrameVerdicts((480, 640))
    CandidateVerifier().run([weak, good, other], verdicts, sched, first_mandatory=True)
    # The first is mandatory (runs though predicted over budget), the others are left out and recorded.
    assert [(r.unit, r.subject, r.admitted) for r in sched.records] == [
        ("verify", "weak", True),
        ("verify", "good", False),
        ("verify", "other", False),
    ]
    assert [(r.unit, r.reason, r.subject) for r in sched.skipped] == [
        ("verify", "budget", "good"),
        ("verify", "budget", "other"),
    ]
    assert verdicts.found == {} and [r.name for r in verdicts.rejections] == ["weak"]
    # Where the weak candidate's matches lie is marked for a second look, inside the frame.
    assert len(verdicts.unsure) == 1
    x0, y0, x1, y1 = verdicts.unsure[0]
    assert 0 <= x0 < x1 <= 640 and 0 <= y0 < y1 <= 480


@pytest.mark.parametrize("budget", [None, 1e6])
def test_with_room_every_candidate_is_verified_and_found_objects_are_not_verified_twice(budget):
    sched = FrameScheduler(budget, CostModel(prior_ms={"verify": 1.0}), FakeClock())
    sched.start()
    good, _ = _candidate("good", 60, 10, 5)
    verdicts = FrameVerdicts((480, 640))
    v = CandidateVerifier()
    v.run([good], verdicts, sched, first_mandatory=False)
    v.run([good], verdicts, sched, first_mandatory=False)
    assert list(verdicts.found) == ["good"] and len(sched.records) == 1
    assert [d.name for d in verdicts.detections()] == ["good"]


def _det(name: str, inliers: np.ndarray, x0: float) -> Detection:
    corners = np.array([[x0, 0], [x0 + 100, 0], [x0 + 100, 100], [x0, 100]], float)
    return Detection(name, 0.5, len(inliers), np.eye(3), corners, inlier_xy=inliers)


def _cand(name: str) -> Candidate:
    z = np.zeros((0, 2), np.float32)
    return Candidate(0, z, z, np.zeros(0, np.float32), name, (100, 100))


@pytest.mark.parametrize("strong_first", [True, False])
def test_a_detection_resting_on_a_stronger_ones_keypoints_is_explained_away(strong_first):
    """Two covers sharing a logo: the weaker detection's inliers are the stronger one's scene points; it is
    rejected as 'explained' whichever was verified first. Objects that only overlap keep their keypoints."""
    rng = np.random.default_rng(0)
    strong_pts = rng.uniform(0, 300, (60, 2))
    logo = strong_pts[:20] + rng.normal(0, 0.5, (20, 2))  # the same keypoints, within a pixel
    weak_pts = np.concatenate([logo, rng.uniform(0, 300, (6, 2))])
    strong, weak = _det("cover_a", strong_pts, 0), _det("cover_b", weak_pts, 50)
    v = FrameVerdicts((480, 640))
    for d in (strong, weak) if strong_first else (weak, strong):
        v.add(_cand(d.name), d)
    assert list(v.found) == ["cover_a"]
    (r,) = [r for r in v.rejections if r.name == "cover_b"]
    assert r.reason == "explained" and "cover_a" in r.detail
    # An object in front of another: the same area, its own keypoints.
    v2 = FrameVerdicts((480, 640))
    v2.add(_cand("poster"), _det("poster", strong_pts, 0))
    v2.add(_cand("sticker"), _det("sticker", rng.uniform(100, 150, (25, 2)), 100))
    assert sorted(v2.found) == ["poster", "sticker"]


def test_verified_detections_carry_their_inlier_positions():
    good, H = _candidate("good", 60, 20, 0)
    d = CandidateVerifier().verify(good, (480, 640))
    assert isinstance(d, Detection) and d.inlier_xy.shape == (d.inliers, 2)
    true_scene = good.scene_xy[:60].astype(np.float64)
    near = np.sqrt(((d.inlier_xy[:, None] - true_scene[None]) ** 2).sum(-1)).min(axis=1)
    assert np.all(near < 1e-3)  # every inlier is one of the true matches' scene points


def test_open_unsure_leaves_out_boxes_explained_by_a_detection_or_a_larger_box():
    verdicts = FrameVerdicts((480, 640))
    corners = np.array([[300, 200], [600, 200], [600, 460], [300, 460]], np.float64)
    verdicts.found["obj"] = Detection("obj", 0.9, 50, np.eye(3), corners)
    verdicts.unsure = [
        (10, 10, 110, 110),  # open
        (400, 250, 500, 350),  # centre inside the detection
        (20, 20, 90, 90),  # wholly inside the first, smaller
        (60, 60, 200, 200),  # a quarter of it inside the first (under half): open
        (0, 300, 100, 400),  # open
    ]
    assert verdicts.open_unsure() == [(10, 10, 110, 110), (60, 60, 200, 200), (0, 300, 100, 400)]
    verdicts.found.clear()
    assert (400, 250, 500, 350) in verdicts.open_unsure()


def test_aspect_limit_of_an_object_with_views():
    """A 400x200 model seen with its width compressed 7 times against its height (a tilt of 7): the default
    aspect limit rejects the exact matches, the limit given for the object accepts them, with the true
    homography; other objects keep the default limit."""
    rng = np.random.default_rng(3)
    H = np.array([[0.3, 0.0, 100.0], [0.0, 2.1, 50.0], [0.0, 0.0, 1.0]])
    m = rng.uniform([0, 0], [400, 200], (80, 2))
    s = m @ H[:2, :2].T + H[:2, 2]
    c = Candidate(0, m.astype(np.float32), s.astype(np.float32), np.full(80, 0.5, np.float32), "tilted", (400, 200))
    params = VerifyParams()
    ref = verify_homography(c.model_xy, c.scene_xy, 400, 200, (480, 640), params)
    assert isinstance(ref, Failure) and ref.reason == "aspect"
    assert CandidateVerifier(params, {"other": 16.0}).verify(c, (480, 640)).reason == "aspect"
    det = CandidateVerifier(params, {"tilted": 16.0}).verify(c, (480, 640))
    assert isinstance(det, Detection) and det.inliers == 80
    np.testing.assert_allclose(det.homography, H, atol=1e-6)
    # A limit below the verifier's own never tightens it.
    assert CandidateVerifier(params, {"tilted": 2.0}).params_for(c) is params
