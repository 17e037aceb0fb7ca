"""Guided matching as a stage of the frame: a second chance for candidates with too little evidence, and the
refinement of detections of objects enrolled with synthesised views.

A tentative homography from a candidate's few inliers (:func:`~objrec.matching.guided.tentative_homography`)
guides the matcher (the object's keypoints matched again against the frame's near their predicted
positions); the new matches are verified by the verification stage like any candidate, and only a detection
changes the frame's verdicts. The detections of objects with synthesised views are matched again around
their own homography and replaced when that verifies with more inliers: their global matches compete with
the near-duplicates of every view, while guided matching takes only the views nearest to the frame's, inside
a window, so it recovers matches the global search lost, and a homography fitted to more of them is more
accurate.
"""

from __future__ import annotations

from typing import Any

from objrec.matching.guided import tentative_homography
from objrec.matching.verdicts import FrameVerdicts
from objrec.matching.verifier import CandidateVerifier
from objrec.types import Candidate, Detection, Features, Rejection, SkipRecord, UnitScheduler

__all__ = ["GuidedStage", "guided_work", "GUIDED_RADIUS", "GUIDED_SUPPORT", "REFINE_ROUNDS"]

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


def guided_work(matcher: Any, candidate: Candidate, scene: Features) -> float:
    """The size guided matching units are costed at: the keypoints of ``candidate``'s object (``matcher``'s
    entry) times those of ``scene`` (the frame's features), in millions.
    Guided matching compares every keypoint of the object with every keypoint of the frame (descriptor
    distances and windows), so its time follows that product."""
    return float(matcher.object_counts()[candidate.object_index]) * len(scene) / 1e6


class GuidedStage:
    """Guided matching of a frame's unsure candidates and of its detections to refine, each an optional
    scheduler unit costed by :func:`guided_work`.

    Parameters
    ----------
    verifier : CandidateVerifier
        Verifies the guided matches (the same verification as every other path).
    """

    def __init__(self, verifier: CandidateVerifier) -> None:
        self.verifier = verifier

    def run(self, verdicts: FrameVerdicts, matcher: Any, scene: Features, sched: UnitScheduler) -> None:
        """Guided matching against ``scene`` (the features ``matcher``'s candidates came from) for the
        candidates ``verdicts`` queued for a retry, then for its detections to refine, each a unit of ``sched``."""
        for c in verdicts.take_retry():
            if c.name in verdicts.found:
                continue
            size = guided_work(matcher, c, scene)
            out = sched.run(
                "guided", self.retry, c, matcher, scene, verdicts, size=size, subject=c.name, timing="verification"
            )
            if isinstance(out, SkipRecord) or out is None or not isinstance(out[1], Detection):
                continue
            if out[1].inliers >= GUIDED_SUPPORT * self.verifier.params.min_inliers:
                verdicts.add(*out)
        for c in verdicts.take_refine():
            d = verdicts.found.get(c.name)
            if d is None:
                continue
            size = guided_work(matcher, c, scene)
            out = sched.run(
                "refine", self.narrowed, c, c, d, matcher, scene, verdicts.shape, REFINE_ROUNDS,
                size=size, subject=c.name, timing="verification",
            )  # fmt: skip
            if not isinstance(out, SkipRecord) and out[1].inliers > d.inliers and verdicts.found.get(c.name) is d:
                verdicts.replace(out[0], d, out[1])

    def retry(
        self, c: Candidate, matcher: Any, scene: Features, verdicts: FrameVerdicts
    ) -> tuple[Candidate, Detection | Rejection] | None:
        """Guided matching of one candidate ``c`` around its tentative homography: the guided matches and their
        verdict (None when its few matches give no tentative homography). ``matcher``: the matcher ``c`` came
        from; ``scene``: the frame's features it matched; ``verdicts``: the frame's verdicts (its shape).

        A wide window around the tentative map, then a narrow one around the verified homography: one round
        only, since these matches were never confirmed by a global search and each round lets more chance
        agreement inside the window count.
        """
        verifier = self.verifier
        H = tentative_homography(c.model_xy, c.scene_xy, c.model_size, verdicts.shape, verifier.params_for(c))
        if H is None:
            return None
        g = matcher.guided(c, scene, H, radius=GUIDED_RADIUS[0] * verifier.params.reproj_threshold)
        v = verifier.verify_flat(g, verdicts.shape, verdicts)
        if not isinstance(v, Detection):
            return g, v
        return self.narrowed(c, g, v, matcher, scene, verdicts.shape, rounds=1)

    def narrowed(
        self,
        c: Candidate,
        g: Candidate,
        v: Detection,
        matcher: Any,
        scene: Features,
        shape: tuple[int, int],
        rounds: int,
    ) -> tuple[Candidate, Detection]:
        """Guided matching of ``c``'s object in a narrow window around the verified homography of ``v`` (found
        from the matches ``g``), up to ``rounds`` times while the inlier count grows: the last matches and
        detection that verified with at least as many inliers as the one before. ``v`` passed the appearance
        check; the refits of its homography in the same frame are checked for geometry only. ``matcher`` and
        ``scene`` as in :meth:`retry`; ``shape``: the frame's (rows, cols)."""
        radius = GUIDED_RADIUS[1] * self.verifier.params.reproj_threshold
        for _ in range(rounds):
            g2 = matcher.guided(c, scene, v.homography, radius=radius)
            v2 = self.verifier.verify_flat(g2, shape)
            if not isinstance(v2, Detection) or v2.inliers < v.inliers:
                break
            grew = v2.inliers > v.inliers
            g, v = g2, v2
            if not grew:
                break
        return g, v
