"""A frame's verdicts: what the verification units decided, and what deserves a second look.

The verification stage adds each verdict; the orchestrator reads the detections, the unsure boxes for the
escalation, and takes the candidates queued for guided matching. Only this record's own methods change it.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import cv2
import numpy as np

from objrec.boxes import box_area, covered_share, points_box
from objrec.matching.extent import Extent, predicted_extent
from objrec.modeldb.records import split_key
from objrec.types import Candidate, Detection, Rejection

__all__ = ["FrameVerdicts", "UNSURE_REASONS", "UNSURE_MIN_MATCHES", "RETRY_REASONS", "shared_support"]

#: Rejections that say "too little evidence" rather than "wrong geometry": the matches' area is worth a
#: second look with a stronger detector.
UNSURE_REASONS = frozenset({"too_few_inliers", "low_inlier_ratio", "too_few_matches"})
#: Such a rejection marks its matches' area for the second look only with at least this many matches: half the
#: verification's default minimum (``VerifyParams.min_matches``). A candidate of one to three matches is what
#: chance gives any object in a frame; the stronger detector would have to more than double its matches to
#: reach the minimum, and the second look costs a multiple of the frame's own search.
UNSURE_MIN_MATCHES = 4
#: Rejections whose few inliers may define a tentative homography for guided matching.
RETRY_REASONS = frozenset({"too_few_inliers", "low_inlier_ratio"})

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


def same_object_in_place(a: Detection, b: Detection) -> bool:
    """Whether ``a`` and ``b`` are two views of one object (record keys of one name) where most of ``a``'s
    outline box lies inside ``b``'s: one physical object seen once, matched through two of its photos."""
    if a.name == b.name or split_key(a.name)[0] != split_key(b.name)[0]:
        return False
    lo_a, hi_a = a.corners.min(axis=0), a.corners.max(axis=0)
    lo_b, hi_b = b.corners.min(axis=0), b.corners.max(axis=0)
    return covered_share((*lo_a, *hi_a), (*lo_b, *hi_b)) >= EXPLAINED_SHARE


#: An unsure box with this share of its area inside a larger unsure box is searched as part of that one.
UNSURE_COVERED = 0.5


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
        Where candidates rejected for too little evidence, with at least :data:`UNSURE_MIN_MATCHES` matches, had
        their matches (frame pixels).
    retry : list of Candidate
        Candidates whose few inliers deserve guided matching (taken with :meth:`take_retry`).
    refine : list of Candidate
        Candidates whose detections are refined by guided matching around their homography (queued with
        :meth:`queue_refine`, taken with :meth:`take_refine`).
    tracked : list of (str, (4, 2) ndarray)
        Names and outlines of the objects the tracking stage followed into this frame (objects that may be in
        front, like ``found``; recorded with :meth:`follow`).
    unverified : list of Candidate
        Candidates rejected for too little evidence or whose verification was left out for the budget
        (:meth:`left_out`): where their matches place their objects (:attr:`hints`) the next frame's search can
        look (:meth:`open_hints`).
    """

    shape: tuple[int, int]
    gray: np.ndarray | None = None
    found: dict[str, Detection] = field(default_factory=dict)
    rejections: list[Rejection] = field(default_factory=list)
    unsure: list[tuple[int, int, int, int]] = field(default_factory=list)
    retry: list[Candidate] = field(default_factory=list)
    refine: list[Candidate] = field(default_factory=list)
    tracked: list[tuple[str, np.ndarray]] = field(default_factory=list)
    unverified: list[Candidate] = field(default_factory=list)

    def add(self, candidate: Candidate, verdict: Detection | Rejection) -> None:
        """Record ``candidate``'s ``verdict``: a detection (unless a stronger one explains it away) replaces the
        object's rejections; a rejection is kept, and queues the candidate for a retry, as unverified and its box
        as unsure, as its reason calls for."""
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
            self.unverified.append(candidate)
        if verdict.reason in UNSURE_REASONS and verdict.matches >= UNSURE_MIN_MATCHES:
            h, w = self.shape
            box = points_box(candidate.scene_xy, w, h)
            if box is not None and box not in self.unsure:
                self.unsure.append(box)

    def left_out(self, candidate: Candidate) -> None:
        """A candidate whose verification was left out for the budget: where it lies may be looked at again
        (:attr:`unverified`)."""
        self.unverified.append(candidate)

    def follow(self, tracked: list[Detection]) -> None:
        """The objects the tracking stage followed into this frame (their names and outlines): objects that may
        be in front of others, and explain the unsure boxes inside them."""
        self.tracked = [(d.name, d.corners) for d in tracked]

    def shown(self) -> set[str]:
        """The names of the objects found or followed in this frame (by any of their views)."""
        return {split_key(n)[0] for n in self.found} | {split_key(n)[0] for n, _ in self.tracked}

    @property
    def hints(self) -> dict[str, Extent]:
        """Per record key, where the matches of the :attr:`unverified` candidates place its whole object
        (:func:`~objrec.matching.extent.predicted_extent`) when enough of them agree; of two candidates of one
        record, the one with more agreeing matches. Computed when asked for: only a sweep looks at them."""
        h, w = self.shape
        out: dict[str, Extent] = {}
        for c in self.unverified:
            extent = predicted_extent(c, w, h)
            old = out.get(c.name)
            if extent is not None and (old is None or extent.support > old.support):
                out[c.name] = extent
        return out

    def open_hints(self, most: int, in_view: float) -> list[tuple[str, tuple[int, int, int, int]]]:
        """At most ``most`` of the :attr:`hints` whose objects were neither found nor followed in this frame
        (:meth:`shown`) and lie at least ``in_view`` in the frame, those with the most agreeing matches first:
        (record key, box)."""
        shown = self.shown()
        open_ = [(e.support, k, e.box) for k, e in self.hints.items() if e.in_view >= in_view]
        open_ = [x for x in open_ if split_key(x[1])[0] not in shown]
        return [(k, b) for _, k, b in sorted(open_, key=lambda x: -x[0])[:most]]

    def _explain_away(self, candidate: Candidate, new: Detection) -> Detection | Rejection:
        """Two detections resting on the same scene keypoints (two covers sharing a logo or a banner), or two
        views of one object in one place: the one with fewer inliers is rejected as ``explained``, whichever
        was verified first. Objects that only overlap (one in front of the other) keep their own keypoints and
        are both kept."""
        for name, old in list(self.found.items()):
            weak, strong = (new, old) if new.inliers <= old.inliers else (old, new)
            share = shared_support(weak, strong)
            if share < EXPLAINED_SHARE and not same_object_in_place(weak, strong):
                continue
            detail = f"{share:.0%} of its {weak.inliers} inliers are inliers of {strong.name} ({strong.inliers})"
            if share < EXPLAINED_SHARE:
                detail = f"another view of the object, {strong.name} ({strong.inliers} inliers), is found in its place"
            rejection = Rejection(weak.name, "explained", weak.inliers, detail)
            if weak is new:
                return rejection
            del self.found[name]
            self.rejections.append(rejection)
        return new

    def take_retry(self) -> list[Candidate]:
        """The candidates queued for guided matching, removing them from the queue."""
        out, self.retry = self.retry, []
        return out

    def queue_refine(self, candidate: Candidate) -> None:
        """Queue the candidate of a detection for refinement by guided matching."""
        self.refine.append(candidate)

    def take_refine(self) -> list[Candidate]:
        """The candidates queued for refinement, removing them from the queue."""
        out, self.refine = self.refine, []
        return out

    def replace(self, candidate: Candidate, old: Detection, new: Detection) -> None:
        """Replace the detection ``old`` by ``new`` (a refit of the same object with more inliers), found from
        the matches of ``candidate``."""
        if self.found.get(old.name) is old:
            del self.found[old.name]
        self.add(candidate, new)

    def in_front_of(self, name: str) -> list[np.ndarray]:
        """The outlines of the objects found so far other than ``name``: where they are, ``name`` may be hidden
        behind them, so the appearance check does not judge it there."""
        found = [np.asarray(d.corners, np.float64) for n, d in self.found.items() if n != name]
        return found + [np.asarray(q, np.float64) for n, q in self.tracked if n != name]

    def open_unsure(self) -> list[tuple[int, int, int, int]]:
        """The unsure boxes still worth a second look, in their order.

        A box whose centre lies inside a found or tracked object's outline is explained by it: rejected candidates'
        matches there are that object's features matched to look-alikes, and a stronger detector would
        find the same object. A box lying mostly (:data:`UNSURE_COVERED`) inside a larger open box is left
        to that one: the larger box's features include its own.
        """
        shown = [d.corners for d in self.found.values()] + [q for _, q in self.tracked]
        outlines = [np.asarray(q, np.float32).reshape(-1, 1, 2) for q in shown]
        boxes = []
        for box in self.unsure:
            centre = ((box[0] + box[2]) / 2.0, (box[1] + box[3]) / 2.0)
            if not any(cv2.pointPolygonTest(q, centre, False) >= 0 for q in outlines):
                boxes.append(box)
        return [
            b
            for b in boxes
            if not any(box_area(a) > box_area(b) and covered_share(b, a) >= UNSURE_COVERED for a in boxes)
        ]

    def detections(self) -> list[Detection]:
        """The detections, highest score first."""
        return sorted(self.found.values(), key=lambda d: -d.score)
