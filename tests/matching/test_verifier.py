"""The verification unit: its verdicts equal verify_homography's, and every candidate is a scheduler unit."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from objrec.boxes import points_box
from objrec.matching.guided import guided_matches
from objrec.matching.second_chance import GuidedStage
from objrec.matching.verdicts import UNSURE_MIN_MATCHES, FrameVerdicts
from objrec.matching.verifier import CandidateVerifier
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


def test_only_rejections_with_some_evidence_mark_unsure_boxes():
    """Too few matches for the verification, but at least UNSURE_MIN_MATCHES of them: worth a second look; fewer
    (what chance gives any object): not; a wrong geometry never."""
    verdicts = FrameVerdicts((480, 640))
    for k, (n, reason) in enumerate(
        [(UNSURE_MIN_MATCHES - 1, "too_few_matches"), (UNSURE_MIN_MATCHES, "too_few_matches"), (30, "inconsistent")]
    ):
        c, _ = _candidate(f"c{k}", n, 0, k)
        verdicts.add(c, Rejection(c.name, reason, n))
    assert verdicts.unsure == [points_box(_candidate("c1", UNSURE_MIN_MATCHES, 0, 1)[0].scene_xy, 640, 480)]


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


def _project(H: np.ndarray, pts: np.ndarray) -> np.ndarray:
    hom = np.c_[pts, np.ones(len(pts))] @ H.T
    return hom[:, :2] / hom[:, 2:3]


def _to_quad(quad: list[list[float]], w: float, h: float) -> np.ndarray:
    src = np.float32([[0, 0], [w, 0], [w, h], [0, h]])
    return cv2.getPerspectiveTransform(src, np.float32(quad)).astype(np.float64)


def test_perspective_limit_of_an_object_with_views():
    """A 400x200 model mapped onto a trapezoid whose far side is 10 times shorter than its near side: the
    default limit (0.8: 5 times) rejects the exact matches, an object whose views cover a tilt of 16 is
    accepted with the true homography, one covering 8 is not; other objects keep the default limit."""
    rng = np.random.default_rng(4)
    H = _to_quad([[305, 100], [335, 100], [470, 400], [170, 400]], 400, 200)  # sides 30 and 300 px
    m = rng.uniform([0, 0], [400, 200], (80, 2))
    s = _project(H, m).astype(np.float32)
    c = Candidate(0, m.astype(np.float32), s, np.full(80, 0.5, np.float32), "far", (400, 200))
    params = VerifyParams()
    assert CandidateVerifier(params, {"other": 16.0}).verify(c, (480, 640)).reason == "perspective"
    assert CandidateVerifier(params, {"far": 8.0}).verify(c, (480, 640)).reason == "perspective"
    det = CandidateVerifier(params, {"far": 16.0}).verify(c, (480, 640))
    assert isinstance(det, Detection) and det.inliers == 80
    np.testing.assert_allclose(det.homography / det.homography[2, 2], H / H[2, 2], atol=1e-6)
    p = CandidateVerifier(params, {"far": 16.0}).params_for(c)
    assert p.max_aspect_change == 16.0 and p.max_perspective == pytest.approx(1.0 - 1.0 / 16.0)


@pytest.mark.parametrize("seed", range(5))
def test_side_ratio_is_the_depth_ratio_and_bounded_by_the_local_tilts(seed):
    """The geometry behind the perspective limit of objects with views, on random cameras (K [r1 r2 t])
    looking at a plane: the sides parallel to the horizon differ in length by the ratio of their depths
    (the third coordinate of H x), and that ratio is at most the largest local tilt over the outline divided
    by the cosine of the largest off-axis angle of its rays."""
    rng = np.random.default_rng(seed)
    f, w, h = 800.0, 400.0, 300.0
    K = np.array([[f, 0, 320.0], [0, f, 240.0], [0, 0, 1.0]])
    lat = np.radians(rng.uniform(50, 80))  # the plane's latitude seen from the camera
    R = cv2.Rodrigues(np.array([lat, 0.0, 0.0]))[0]
    t = np.array([-w / 2 + rng.uniform(-50, 50), -h / 2, rng.uniform(900, 1500)])
    H = K @ np.c_[R[:, 0], R[:, 1], t]
    corners = np.array([[0, 0], [w, 0], [w, h], [0, h]], float)
    depth = (np.c_[corners, np.ones(4)] @ H.T)[:, 2]
    q = _project(H, corners)
    top, bottom = np.linalg.norm(q[1] - q[0]), np.linalg.norm(q[2] - q[3])
    np.testing.assert_allclose(max(top, bottom) / min(top, bottom), depth.max() / depth.min(), rtol=1e-9)
    # Local tilt at a corner: 1 / cos of the angle between its ray and the plane's normal.
    X = np.c_[corners, np.ones(4)] @ np.c_[R[:, 0], R[:, 1], t].T  # camera coordinates
    rays = X / np.linalg.norm(X, axis=1, keepdims=True)
    tilt = 1.0 / np.abs(rays @ R[:, 2])
    cos_off_axis = rays[:, 2]
    assert depth.max() / depth.min() <= tilt.max() / cos_off_axis.min() + 1e-9


class _GuidedMatcher:
    """A matcher whose ``guided`` is :func:`~objrec.matching.guided.guided_matches` over fixed model
    keypoints (what ``DatabaseMatcher.guided`` does for one object)."""

    def __init__(self, model_xy: np.ndarray, model_desc: np.ndarray) -> None:
        self.model_xy, self.model_desc = model_xy, model_desc

    def object_counts(self) -> np.ndarray:
        return np.array([len(self.model_xy)])

    def guided(self, c: Candidate, scene: tuple, H: np.ndarray, radius: float = 12.0) -> Candidate:
        mi, si = guided_matches(H, self.model_xy, self.model_desc, scene[0], scene[1], radius)
        n = len(mi)
        return Candidate(0, self.model_xy[mi], scene[0][si], np.full(n, np.nan, np.float32), c.name, c.model_size)


def _refinement_case(name: str):
    """300 model keypoints, each in the scene under a foreshortening homography with 0.5 px noise and a noisy
    copy of its descriptor, among as many clutter keypoints; the global search found only 16 of them, 2 px
    off, and 6 wrong matches."""
    rng = np.random.default_rng(7)
    H = _to_quad([[120, 100], [420, 130], [470, 330], [90, 400]], 300, 200)
    model_xy = rng.uniform([0, 0], [300, 200], (300, 2)).astype(np.float32)
    model_desc = rng.normal(size=(300, 64)).astype(np.float32)
    true_xy = _project(H, model_xy) + rng.normal(0, 0.5, (300, 2))
    clutter = rng.uniform([0, 0], [640, 480], (300, 2))
    scene_xy = np.vstack([true_xy, clutter]).astype(np.float32)
    scene_desc = np.vstack([model_desc + rng.normal(0, 0.05, (300, 64)), rng.normal(size=(300, 64))])
    few = rng.choice(300, 16, replace=False)
    m = np.vstack([model_xy[few], rng.uniform([0, 0], [300, 200], (6, 2))])
    s = np.vstack([true_xy[few] + rng.normal(0, 2.0, (16, 2)), rng.uniform([0, 0], [640, 480], (6, 2))])
    c = Candidate(0, m.astype(np.float32), s.astype(np.float32), np.full(22, 0.5, np.float32), name, (300, 200))
    return c, H, _GuidedMatcher(model_xy, model_desc), (scene_xy, scene_desc.astype(np.float32))


def _corner_error(H: np.ndarray, truth: np.ndarray) -> float:
    corners = np.array([[0, 0], [300, 0], [300, 200], [0, 200]], float)
    return float(np.abs(_project(H, corners) - _project(truth, corners)).max())


def test_detections_of_objects_with_views_are_refined_by_guided_matching():
    """A detection from a handful of noisy matches is matched again around its homography: the refined one
    rests on most of the true keypoints and its corners lie within a pixel of the true homography's, closer
    than the first fit's. An object without views keeps its first detection and gets no refine unit."""
    c, H, matcher, scene = _refinement_case("tilted")
    sched = FrameScheduler(None, CostModel(), FakeClock())
    sched.start()
    verdicts = FrameVerdicts((480, 640))
    v = CandidateVerifier(VerifyParams(), {"tilted": 32.0})
    v.run([c], verdicts, sched, first_mandatory=True)
    first = verdicts.found["tilted"]
    GuidedStage(v).run(verdicts, matcher, scene, sched)
    refined = verdicts.found["tilted"]
    assert refined.inliers >= 250 and refined.inliers > first.inliers
    assert _corner_error(refined.homography, H) < 1.0 < _corner_error(first.homography, H)
    assert ("refine", "tilted") in [(r.unit, r.subject) for r in sched.records]
    assert verdicts.refine == []

    c, H, matcher, scene = _refinement_case("flat")
    verdicts = FrameVerdicts((480, 640))
    sched.start()
    v.run([c], verdicts, sched, first_mandatory=True)
    first = verdicts.found["flat"]
    GuidedStage(v).run(verdicts, matcher, scene, sched)
    assert verdicts.found["flat"] is first
    assert "refine" not in [r.unit for r in sched.records]


def test_a_candidate_with_fewer_matches_than_any_verification_needs_is_rejected_without_a_unit():
    """Below the homography's minimum the verdict is verify_homography's own, at once: no scheduler unit, so the
    cost model learns only verifications that do their work."""
    sched = FrameScheduler(30.0, CostModel(prior_ms={"verify": 1.0}, min_samples=1), FakeClock(), safety_ms=0.0)
    sched.start()
    params = VerifyParams()
    few, _ = _candidate("few", params.min_matches - 1, 0, 7)
    enough, _ = _candidate("enough", params.min_matches, 0, 8)
    verdicts = FrameVerdicts((480, 640))
    CandidateVerifier(params).run([few, enough], verdicts, sched, first_mandatory=True)
    ref = verify_homography(few.model_xy, few.scene_xy, 200, 100, (480, 640), params)
    [rej] = [r for r in verdicts.rejections if r.name == "few"]
    assert (rej.reason, rej.matches, rej.detail) == (ref.reason, len(few), ref.detail)
    assert [(r.unit, r.subject) for r in sched.records] == [("verify", "enough")]
    assert sched.cost.samples("verify") == 1


def _placed(name: str, n: int, centre: tuple[float, float], seed: int) -> Candidate:
    """``n`` matches of a 200x100 model placed at scale 0.5, unrotated, with its centre at ``centre``."""
    rng = np.random.default_rng(seed)
    m = rng.uniform([0, 0], [200, 100], (n, 2))
    s = np.asarray(centre) + 0.5 * (m - [100, 50])
    frames_m = np.c_[np.full(n, 20.0), np.full(n, 30.0)].astype(np.float32)
    frames_s = np.c_[np.full(n, 10.0), np.full(n, 30.0)].astype(np.float32)
    return Candidate(0, m.astype(np.float32), s.astype(np.float32), np.full(n, 0.5, np.float32), name, (200, 100),
                     frames_m, frames_s)  # fmt: skip


def test_unverified_candidates_leave_hints_where_their_matches_place_their_objects():
    """A rejection for too little evidence and a verification left out for the budget each leave a hint (the
    whole model's box, grown); a wrong geometry does not; open hints leave out objects found or followed and
    those mostly outside the frame, and come most agreeing matches first."""
    clock = FakeClock()
    sched = FrameScheduler(30.0, CostModel(prior_ms={"verify": 50.0}, min_samples=1000), clock, safety_ms=0.0)
    sched.start()
    verdicts = FrameVerdicts((480, 640))
    verdicts.add(_placed("weak", 5, (300, 200), 1), Rejection("weak", "too_few_inliers", 5))
    verdicts.add(_placed("wrong", 9, (100, 100), 2), Rejection("wrong", "inconsistent", 9))
    verdicts.add(_placed("edge", 9, (0, 400), 3), Rejection("edge", "too_few_matches", 9))
    verdicts.tracked = [("followed", np.zeros((4, 2)))]
    verdicts.add(_placed("followed", 6, (500, 300), 4), Rejection("followed", "too_few_inliers", 6))
    late = _placed("late", 12, (450, 120), 5)
    CandidateVerifier().run([_placed("first", 20, (50, 50), 6), late], verdicts, sched, first_mandatory=True)
    assert [(r.unit, r.subject) for r in sched.skipped] == [("verify", "late")]
    assert set(verdicts.hints) == {"weak", "edge", "followed", "late"}
    # 100x50 at (300, 200), grown by a fifth per side (rounded outwards)
    assert np.abs(np.subtract(verdicts.hints["weak"].box, (230, 165, 370, 235))).max() <= 1
    assert verdicts.hints["edge"].in_view == pytest.approx(0.5)
    assert verdicts.open_hints(5, 0.5) == [("late", verdicts.hints["late"].box), ("edge", verdicts.hints["edge"].box),
                                           ("weak", verdicts.hints["weak"].box)]  # fmt: skip
    assert [k for k, _ in verdicts.open_hints(1, 0.6)] == ["late"]
