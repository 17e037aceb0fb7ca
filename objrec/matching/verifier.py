"""The verification unit: one candidate in, a detection or a rejection with its reason out.

Every path of the frame pipeline (tracked objects, the prefilter's regions, escalation) verifies through
:meth:`CandidateVerifier.run`, which offers each candidate to the frame's scheduler as a unit, so no
verification runs outside the budget.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np

from objrec.boxes import points_box
from objrec.matching.guided import tentative_homography
from objrec.matching.verify import VerifyParams, edge_agreement, verify_homography
from objrec.types import Candidate, Detection, Failure, Rejection

__all__ = ["CandidateVerifier", "FrameVerdicts", "UNSURE_REASONS", "RETRY_REASONS", "aspect_limits"]

#: Rejections that say "too little evidence" rather than "wrong geometry": the matches' area is worth a
#: second look with a stronger detector.
UNSURE_REASONS = frozenset({"too_few_inliers", "low_inlier_ratio", "too_few_matches"})
#: Rejections whose few inliers may define a tentative homography for guided matching.
RETRY_REASONS = frozenset({"too_few_inliers", "low_inlier_ratio"})
#: Guided matching windows as multiples of the verification threshold: around the tentative map (fitted with
#: twice the threshold, so it predicts about that well), then around the verified homography. A wider window
#: holds more look-alike keypoints, whose competition in the in-window ratio test loses true matches.
GUIDED_RADIUS = (2.5, 1.5)
#: A guided result needs this many times the usual inlier count: the window makes chance matches agree with
#: the tentative map, so agreement alone is weaker evidence than after a global search.
GUIDED_SUPPORT = 2
#: Rounds of guided matching around a detection's homography when it is refined (each round's refit predicts
#: the keypoints better, so its window holds more of the true matches); they stop once the inliers stop growing.
REFINE_ROUNDS = 3


#: A detection is explained by a stronger one when at least this share of its inliers are (within
#: ``SAME_POINT_PX``) scene positions of the stronger one's inliers.
EXPLAINED_SHARE = 0.5
SAME_POINT_PX = 2.0


def shared_support(weak: Detection, strong: Detection) -> float:
    """Share of ``weak``'s inliers that lie within ``SAME_POINT_PX`` of one of ``strong``'s inliers (0 when
    either has no recorded inliers)."""
    a, b = weak.inlier_xy, strong.inlier_xy
    if a is None or b is None or not len(a) or not len(b):
        return 0.0
    d2 = ((a[:, None, :] - b[None, :, :]) ** 2).sum(-1)
    return float((d2.min(axis=1) <= SAME_POINT_PX**2).mean())


def guided_work(matcher: Any, candidate: Candidate, scene: Any) -> float:
    """The size guided matching units are costed at: the object's keypoints times the frame's, in millions.
    Guided matching compares every keypoint of the object with every keypoint of the frame (descriptor
    distances and windows), so its time follows that product."""
    return float(matcher.object_counts()[candidate.object_index]) * len(scene) / 1e6


#: An unsure box with this share of its area inside a larger unsure box is searched as part of that one.
UNSURE_COVERED = 0.5


def _area(box: tuple[int, int, int, int]) -> int:
    return max(0, box[2] - box[0]) * max(0, box[3] - box[1])


def _covered(box: tuple[int, int, int, int], other: tuple[int, int, int, int]) -> float:
    """The share of ``box``'s area inside ``other``."""
    w = min(box[2], other[2]) - max(box[0], other[0])
    h = min(box[3], other[3]) - max(box[1], other[1])
    return max(0, w) * max(0, h) / max(1, _area(box))


@dataclass
class FrameVerdicts:
    """What the verification units of one frame decided.

    Attributes
    ----------
    shape : (int, int)
        The frame's (rows, cols).
    gray : ndarray, optional
        The frame in gray, for the appearance check of verification (none without it).
    found : dict
        Object name to its :class:`~objrec.types.Detection`.
    rejections : list of Rejection
    unsure : list of (x0, y0, x1, y1)
        Where candidates rejected for too little evidence had their matches (frame pixels).
    retry : list of Candidate
        Candidates whose few inliers deserve guided matching.
    refine : list of Candidate
        Candidates whose detections are refined by guided matching around their homography.
    """

    shape: tuple[int, int]
    gray: np.ndarray | None = None
    found: dict[str, Detection] = field(default_factory=dict)
    rejections: list[Rejection] = field(default_factory=list)
    unsure: list[tuple[int, int, int, int]] = field(default_factory=list)
    retry: list[Candidate] = field(default_factory=list)
    refine: list[Candidate] = field(default_factory=list)

    def add(self, candidate: Candidate, verdict: Detection | Rejection) -> None:
        if isinstance(verdict, Detection):
            verdict = self._explain_away(candidate, verdict)
        if isinstance(verdict, Detection):
            self.found[verdict.name] = verdict
            self.rejections = [r for r in self.rejections if r.name != verdict.name]
            return
        self.rejections.append(verdict)
        if verdict.reason in RETRY_REASONS:
            self.retry.append(candidate)
        if verdict.reason in UNSURE_REASONS:
            h, w = self.shape
            box = points_box(candidate.scene_xy, w, h)
            if box is not None and box not in self.unsure:
                self.unsure.append(box)

    def _explain_away(self, candidate: Candidate, new: Detection) -> Detection | Rejection:
        """Two detections resting on the same scene keypoints (two covers sharing a logo or a banner): the
        one with fewer inliers is rejected as ``explained``, whichever was verified first. Objects that only
        overlap (one in front of the other) keep their own keypoints and are both kept."""
        for name, old in list(self.found.items()):
            weak, strong = (new, old) if new.inliers <= old.inliers else (old, new)
            share = shared_support(weak, strong)
            if share < EXPLAINED_SHARE:
                continue
            detail = f"{share:.0%} of its {weak.inliers} inliers are inliers of {strong.name} ({strong.inliers})"
            rejection = Rejection(weak.name, "explained", weak.inliers, detail)
            if weak is new:
                return rejection
            del self.found[name]
            self.rejections.append(rejection)
        return new

    def in_front_of(self, name: str) -> list[np.ndarray]:
        """The outlines of the objects found so far other than ``name``: where they are, ``name`` may be hidden
        behind them, so the appearance check does not judge it there."""
        return [np.asarray(d.corners, np.float64) for n, d in self.found.items() if n != name]

    def open_unsure(self) -> list[tuple[int, int, int, int]]:
        """The unsure boxes still worth a second look, in their order.

        A box whose centre lies inside a found object's outline is explained by it: rejected candidates'
        matches there are that object's features matched to look-alikes, and a stronger detector would
        find the same object. A box lying mostly (:data:`UNSURE_COVERED`) inside a larger open box is left
        to that one: the larger box's features include its own.
        """
        outlines = [np.asarray(d.corners, np.float32).reshape(-1, 1, 2) for d in self.found.values()]
        boxes = []
        for box in self.unsure:
            centre = ((box[0] + box[2]) / 2.0, (box[1] + box[3]) / 2.0)
            if not any(cv2.pointPolygonTest(q, centre, False) >= 0 for q in outlines):
                boxes.append(box)
        return [b for b in boxes if not any(_area(a) > _area(b) and _covered(b, a) >= UNSURE_COVERED for a in boxes)]

    def detections(self) -> list[Detection]:
        """The detections, highest score first."""
        return sorted(self.found.values(), key=lambda d: -d.score)


def aspect_limits(objects: Iterable[Any]) -> dict[str, float]:
    """Object name to the tilt its synthesised views cover (:func:`objrec.modeldb.views.covered_tilt`), for the
    objects enrolled with views: the limit of their aspect-ratio change and of their foreshortening
    (:meth:`CandidateVerifier.params_for`); objects without views keep the verifier's own limits."""
    from objrec.modeldb.views import covered_tilt

    return {o.name: covered_tilt(o.view_table) for o in objects if getattr(o, "view_table", None)}


class CandidateVerifier:
    """Geometric verification of candidates (:func:`~objrec.matching.verify.verify_homography`).

    Parameters
    ----------
    params : VerifyParams, optional
    aspect_limits : dict of str -> float, optional
        Per object name, the tilt its synthesised views cover (:func:`objrec.modeldb.views.covered_tilt`): objects
        enrolled with views are meant to be found at tilts beyond the default limits, so it bounds their
        aspect-ratio change and their foreshortening instead (:meth:`params_for`), and their detections are
        refined by guided matching (:meth:`second_chance`).
    thumbnails : callable, optional
        Object name to its gray thumbnail (:meth:`objrec.modeldb.ModelDB.thumbnail`), for the appearance check
        (:func:`~objrec.matching.verify.edge_agreement`) of candidates verified with their frame; without it
        only the geometry is checked.
    """

    def __init__(
        self,
        params: VerifyParams | None = None,
        aspect_limits: dict[str, float] | None = None,
        thumbnails: Callable[[str], np.ndarray] | None = None,
    ) -> None:
        self.params = params or VerifyParams()
        self.aspect_limits = dict(aspect_limits or {})
        self.thumbnails = thumbnails

    def params_for(self, candidate: Candidate) -> VerifyParams:
        """The verification parameters of the candidate's object: ``params``, with the limits of an object
        whose views cover a tilt ``T`` (``aspect_limits``) widened to what that tilt allows.

        A planar object at tilt ``T`` changes its aspect ratio by up to ``T``. Its opposite sides differ in
        length by the ratio of their depths (for sides parallel to the horizon, exactly: with
        ``H = K [r1 r2 t]`` the third coordinate of ``H x`` is the depth of model point ``x``), and the depth
        of a point of the plane is ``d · t(x) · cos α(x)``, where ``t(x)`` is the local tilt there, ``d`` the
        plane's distance and ``α(x)`` the ray's angle off the optical axis: so the far side is at most about
        ``T`` times shorter than the near one when no part of the object is seen at a tilt beyond ``T``.
        Hence ``max_aspect_change = T`` and ``max_perspective = 1 - 1/T``; a limit below the verifier's own
        never tightens it.
        """
        limit = self.aspect_limits.get(candidate.name)
        if limit is None:
            return self.params
        aspect = max(self.params.max_aspect_change, float(limit))
        perspective = max(self.params.max_perspective, 1.0 - 1.0 / max(float(limit), 1.0))
        if aspect == self.params.max_aspect_change and perspective == self.params.max_perspective:
            return self.params
        return dataclasses.replace(self.params, max_aspect_change=aspect, max_perspective=perspective)

    def verify(
        self, candidate: Candidate, frame_shape: tuple[int, int], verdicts: FrameVerdicts | None = None
    ) -> Detection | Rejection:
        """The candidate's detection, or its rejection with the reason code.

        With ``verdicts`` holding the frame (``gray``) and ``thumbnails`` given, a geometrically sound view
        must also pass the appearance check, away from the objects already found in front of it.
        """
        w, h = candidate.model_size
        p = self.params_for(candidate)
        v = verify_homography(candidate.model_xy, candidate.scene_xy, w, h, frame_shape, p)
        if isinstance(v, Failure):
            return Rejection(candidate.name, v.reason, len(candidate), v.detail)
        frame = verdicts.gray if verdicts is not None else None
        if p.min_edge_agreement is not None and self.thumbnails is not None and frame is not None:
            hidden = verdicts.in_front_of(candidate.name)
            share, n = edge_agreement(frame, self.thumbnails(candidate.name), v.homography, (w, h), hidden)
            if share < p.min_edge_agreement:  # NaN (too little in view to judge) passes
                detail = f"{share:.0%} of {n} strong model edges confirmed < {p.min_edge_agreement:.0%}"
                return Rejection(candidate.name, "appearance", len(candidate), detail)
        d = v.to_detection(candidate.name)
        return dataclasses.replace(d, inlier_xy=np.asarray(candidate.scene_xy, np.float64)[v.inliers])

    def run(self, candidates: list[Candidate], verdicts: FrameVerdicts, sched: Any, first_mandatory: bool) -> None:
        """Verify ``candidates`` in order, each as a scheduler unit; objects already found are passed over.

        The first candidate is mandatory when ``first_mandatory`` (the frame's best candidate); the others
        run only while the scheduler predicts they fit.
        """
        for j, c in enumerate(candidates):
            if c.name in verdicts.found:
                continue
            ran, v = sched.run(
                "verify",
                lambda c=c: self.verify(c, verdicts.shape, verdicts),
                size=len(c),
                mandatory=first_mandatory and j == 0,
                subject=c.name,
                timing="verification",
            )
            if ran:
                verdicts.add(c, v)
                if verdicts.found.get(c.name) is v and c.name in self.aspect_limits:
                    verdicts.refine.append(c)

    def second_chance(self, verdicts: FrameVerdicts, matcher: Any, scene: Any, sched: Any) -> None:
        """Guided matching for the candidates with too little evidence, then for the detections to refine,
        each an optional scheduler unit.

        A tentative homography from the candidate's few inliers guides ``matcher.guided`` (the object's
        keypoints matched again against ``scene`` near their predicted positions); the new matches are
        verified like any candidate, and only a detection changes the frame's verdicts. The detections of
        objects with synthesised views (``verdicts.refine``) are matched again around their own homography
        and replaced when that verifies with more inliers: their global matches compete with the
        near-duplicates of every view, while :meth:`~objrec.matching.database.DatabaseMatcher.guided` takes
        only the views nearest to the frame's, inside a window, so it recovers matches the global search
        lost, and a homography fitted to more of them is more accurate.

        Both units are costed by :func:`guided_work`, not by the candidate's few matches.
        """
        retry, verdicts.retry = verdicts.retry, []
        for c in retry:
            if c.name in verdicts.found:
                continue

            def unit(c: Candidate = c) -> tuple[Candidate, Detection | Rejection] | None:
                H = tentative_homography(c.model_xy, c.scene_xy, c.model_size, verdicts.shape, self.params_for(c))
                if H is None:
                    return None
                # A wide window around a tentative map, then a narrow one around the verified homography: one
                # round only, since these matches were never confirmed by a global search and each round
                # lets more chance agreement inside the window count.
                g = matcher.guided(c, scene, H, radius=GUIDED_RADIUS[0] * self.params.reproj_threshold)
                v = self.verify(g, verdicts.shape, verdicts)
                if not isinstance(v, Detection):
                    return g, v
                return self._narrowed(c, g, v, matcher, scene, verdicts.shape, rounds=1)

            size = guided_work(matcher, c, scene)
            ran, out = sched.run("guided", unit, size=size, subject=c.name, timing="verification")
            if ran and out is not None and isinstance(out[1], Detection):
                if out[1].inliers >= GUIDED_SUPPORT * self.params.min_inliers:
                    verdicts.add(*out)
        self._refine(verdicts, matcher, scene, sched)

    def _refine(self, verdicts: FrameVerdicts, matcher: Any, scene: Any, sched: Any) -> None:
        """The detections of ``verdicts.refine`` matched again around their homography (``refine`` units);
        a detection is replaced when the guided matches verify with more inliers."""
        refine, verdicts.refine = verdicts.refine, []
        for c in refine:
            d = verdicts.found.get(c.name)
            if d is None:
                continue

            def unit(c: Candidate = c, d: Detection = d) -> tuple[Candidate, Detection]:
                return self._narrowed(c, c, d, matcher, scene, verdicts.shape, REFINE_ROUNDS)

            size = guided_work(matcher, c, scene)
            ran, out = sched.run("refine", unit, size=size, subject=c.name, timing="verification")
            if ran and out[1].inliers > d.inliers and verdicts.found.get(c.name) is d:
                del verdicts.found[c.name]
                verdicts.add(*out)

    def _narrowed(
        self, c: Candidate, g: Candidate, v: Detection, matcher: Any, scene: Any, shape: tuple[int, int], rounds: int
    ) -> tuple[Candidate, Detection]:
        """Guided matching of ``c``'s object in a narrow window around the verified homography of ``v`` (found
        from the matches ``g``), up to ``rounds`` times while the inlier count grows: the last matches and
        detection that verified with at least as many inliers as the one before. ``v`` passed the appearance
        check; the refits of its homography in the same frame are checked for geometry only."""
        radius = GUIDED_RADIUS[1] * self.params.reproj_threshold
        for _ in range(rounds):
            g2 = matcher.guided(c, scene, v.homography, radius=radius)
            v2 = self.verify(g2, shape)
            if not isinstance(v2, Detection) or v2.inliers < v.inliers:
                break
            grew = v2.inliers > v.inliers
            g, v = g2, v2
            if not grew:
                break
        return g, v
