"""The primary search's units: the prefilter's regions, the primary features where a plan says, their
candidates (retrieval first for a catalogue), and the sweep's further parts in the time a frame leaves.

The recognizer plans a frame's search (:class:`~objrec.realtime.planner.SearchPlanner`) and records what it
found in the frame's state; :class:`PrimarySearch` runs each step as a unit of the frame's scheduler and adds
its verdicts to the frame's :class:`~objrec.matching.verdicts.FrameVerdicts`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from objrec.backend import to_numpy
from objrec.boxes import covered_region, inside_polygons
from objrec.matching.shortlist import ShortlistMatcher
from objrec.realtime.align import lost_points
from objrec.realtime.planner import plan_work
from objrec.types import Features, Regions, SearchPlan, SkipRecord

if TYPE_CHECKING:
    from objrec.features.extract import FeatureStage
    from objrec.matching.second_chance import GuidedStage
    from objrec.matching.verifier import CandidateVerifier
    from objrec.realtime.frame import FrameState
    from objrec.realtime.planner import SearchPlanner
    from objrec.realtime.scheduler import FrameScheduler
    from objrec.realtime.tracker import Tracker

__all__ = ["PrimarySearch", "read_shortlist", "explained", "unexplained", "MAX_EXTRA_TILES"]

#: At most this many more tiles of the sweep are searched in a frame's remaining time.
MAX_EXTRA_TILES = 3


class PrimarySearch:
    """The primary detector's search of a frame, unit by unit.

    Parameters
    ----------
    kind : str
        The primary detector kind.
    features : FeatureStage
    matcher : matcher
        The primary kind's matcher (``candidates(features, among=None)``; a
        :class:`~objrec.matching.shortlist.ShortlistMatcher` retrieves first).
    planner : SearchPlanner
    verifier : CandidateVerifier
    guided : GuidedStage
    tracker : Tracker
        Its outlines are left out of the search, and it orders the candidates (``prioritise``).
    prefilter : object with ``propose(frame) -> Regions``, or None
    adapts : bool
        The prefilter adapts to the scene (it runs on every frame: it learns from each).
    """

    def __init__(
        self,
        kind: str,
        features: FeatureStage,
        matcher: Any,
        planner: SearchPlanner,
        verifier: CandidateVerifier,
        guided: GuidedStage,
        tracker: Tracker,
        prefilter: Any = None,
        adapts: bool = False,
    ) -> None:
        self.kind = kind
        self.features = features
        self.matcher = matcher
        self.planner = planner
        self.verifier = verifier
        self.guided = guided
        self.tracker = tracker
        self.prefilter = prefilter
        self.adapts = adapts

    def waits(self, state: FrameState, sched: FrameScheduler, tile_work: float) -> SkipRecord | None:
        """The record of this frame's search left for a later frame, or None when it runs: the tracks took the
        whole frame (the sweep waits), or their upkeep took so much of it that the search's least part no
        longer fits (:meth:`~objrec.realtime.planner.SearchPlanner.waits`; once begun, a search runs at least
        that part).

        Parameters
        ----------
        state : FrameState
            The frame's state (its shape and the ms its tracks' upkeep took).
        sched : FrameScheduler
            The frame's scheduler (the time left).
        tile_work : float
            The cost-model size of the sweep's last part (see :meth:`propose`).
        """
        if self.tracker.tracks and sched.remaining() <= 0.0:
            return SkipRecord("features", "budget", "tracking took the frame")
        if self.planner.waits(state.shape, sched, state.upkeep_ms, tile_work):
            return SkipRecord("features", "budget", "the tracks' upkeep took the frame")
        return None

    def propose(self, state: FrameState, sched: FrameScheduler, tile_work: float) -> tuple[Regions, Regions | None]:
        """The frame's regions to search, best first, and the prefilter's proposals (None when it did not run):
        the whole frame without a prefilter, or where the sweep's tile is cheaper to search whole (the sweep's
        last part of ``tile_work``: :meth:`~objrec.realtime.planner.SearchPlanner.prefilter_pays`; an adapting
        prefilter runs on every frame, it learns from each).

        Parameters
        ----------
        state : FrameState
            The frame's state (its shape and image).
        sched : FrameScheduler
            The frame's scheduler; the prefilter runs as its mandatory unit.
        tile_work : float
            The cost-model size of the sweep's last part, 0 when the last plan searched none.
        """
        h, w = state.shape
        if self.prefilter is None:
            return Regions.full(w, h), None
        if not self.adapts and not self.planner.prefilter_pays(sched, tile_work):
            sched.record([SkipRecord("prefilter", "sweep", "the tile is cheaper to search whole")])
            return Regions.full(w, h), None
        proposals = sched.run("prefilter", self.prefilter.propose, state.frame, mandatory=True)
        return proposals, proposals

    def extract(self, state: FrameState, sched: FrameScheduler, plan: SearchPlan) -> Features:
        """The primary features where ``plan`` says (the planner learns their density and moves its sweep on),
        less those inside tracked outlines (``state.explained``), each a mandatory unit.

        Parameters
        ----------
        state : FrameState
            The frame's state (its image and the tracked outlines).
        sched : FrameScheduler
            The frame's scheduler.
        plan : SearchPlan
            The boxes, resolution, feature cap and sampling step to extract at.
        """
        feats = sched.run(
            "features", self.features.extract, state.image, self.kind, plan,
            size=plan_work(plan), mandatory=True, stage=f"features_{self.kind}",
        )  # fmt: skip
        self.planner.observe(plan, len(feats))
        self.planner.rounds.advance(plan)
        return sched.run("explained", unexplained, feats, *state.explained, size=len(feats), mandatory=True)

    def match(self, feats: Features, sched: FrameScheduler) -> list:
        """The primary features' candidates: retrieval first for a catalogue, each a mandatory unit.

        Parameters
        ----------
        feats : Features
            The frame's primary features, tracked objects' ones already left out.
        sched : FrameScheduler
            The frame's scheduler.
        """
        matcher = self.matcher
        if not isinstance(matcher, ShortlistMatcher):
            return sched.run("matching", matcher.candidates, feats, size=len(feats), mandatory=True)
        voters = self.planner.costs.voters(len(feats), sched)
        shortlist = sched.run("retrieval", matcher.shortlist, feats, voters, size=voters, mandatory=True)
        shortlist = read_shortlist(matcher, shortlist, sched)
        return sched.run("matching", matcher.candidates, feats, shortlist, size=len(feats), mandatory=True)

    def more_tiles(
        self, state: FrameState, sched: FrameScheduler, proposals: Regions, step: int, reserve: float = 0.0
    ) -> None:
        """The time the frame's search leaves (less ``reserve`` ms for later units) goes to the sweep's next
        tiles, one after another while the next is predicted to fit with the mandatory units after it
        (:meth:`~objrec.realtime.planner.SearchPlanner.next_tile`; their verification is optional): a frame's
        search plans for the typical tail, so most frames end with room.

        Parameters
        ----------
        state : FrameState
            The frame's state (its shape, the tracked outlines, its verdicts).
        sched : FrameScheduler
            The frame's scheduler (the time left).
        proposals : Regions
            The frame's proposals, the tiles are cut from.
        step : int
            SURF's sampling step of the frame's plan.
        reserve : float
            Time in ms kept for the units after these.
        """
        for _ in range(MAX_EXTRA_TILES):
            # Planning a part (its regions less the tracked outlines, their pixels, its resolution) is a unit of
            # its own: its time varies with the tracks and proposals, and learned as a unit it is budgeted.
            plan = sched.run(
                "plan_tile", self.planner.next_tile, state.shape, proposals, sched, step, *state.explained, reserve
            )
            if not isinstance(plan, SearchPlan):
                return
            sched.record(plan.skipped)  # which part of the sweep it searched, as for the frame's own plan
            feats = self.extract(state, sched, plan)
            candidates = self.tracker.prioritise(self.match(feats, sched))
            self.verifier.run(candidates, state.verdicts, sched, first_mandatory=False)
            self.guided.run(state.verdicts, self.matcher, feats, sched)


def read_shortlist(matcher: ShortlistMatcher, shortlist: np.ndarray, sched: FrameScheduler) -> np.ndarray:
    """The shortlisted objects to match in this frame: those whose descriptors are in memory, and the others once
    read. Reading one from the database is a unit of its own (``read``): from the page cache an object takes a
    millisecond or two, from the disk up to tens, more than a frame can wait for several. The objects are read
    best first while the next is predicted to fit (a unit left out frame after frame is tried again where its
    typical time fits, so that it learns when the disk has become quicker); the kernel is asked to fetch the rest
    without the frame waiting (:meth:`~objrec.matching.stored.StoredMatcher.read_ahead`), this frame matches
    without them, and a later frame that shortlists them reads them from the page cache: such reads are
    learned apart (stage ``read_ahead``), since they do not wait on the disk.

    Parameters
    ----------
    matcher : ShortlistMatcher
        The primary kind's matcher, which reads its objects from the database.
    shortlist : np.ndarray
        The shortlisted objects' indices, best first.
    sched : FrameScheduler
        The frame's scheduler; each read is a unit of it.
    """
    unread = matcher.unread(shortlist)
    for k, i in enumerate(unread):
        stage = "read_ahead" if matcher.read_ahead_before(i) else "read"
        done = sched.run("read", matcher.read, [i], stage=stage, subject=f"object {i}", timing="matching", relearn=True)
        if isinstance(done, SkipRecord):
            matcher.read_ahead(unread[k:])
            later = set(unread[k:])
            return np.asarray([j for j in np.asarray(shortlist).tolist() if j not in later], np.int64)
    return shortlist


def explained(tracker: Tracker) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The tracked objects' outlines, which the search leaves out and whose features it drops as explained, and
    the parts of them other objects may cover (where the tracks lost points lately,
    :func:`~objrec.boxes.covered_region`), which it still searches: an object in front of a tracked one is
    then found."""
    regions = [covered_region(lost_points(t)) for t in tracker.tracks]
    return [t.corners for t in tracker.tracks], [r for r in regions if r is not None]


def unexplained(feats: Features, outlines: list[np.ndarray], covered: Sequence[np.ndarray] = ()) -> Features:
    """``feats`` less those inside any of the tracked ``outlines`` ((N, 2) convex polygons) but not inside any of
    the ``covered`` parts: what the tracked objects do not already explain, for retrieval and matching to look
    for other objects in (a second copy of a tracked object among them, an object in front of one)."""
    if not outlines or not len(feats):
        return feats
    xy = to_numpy(feats.xy)
    drop = inside_polygons(xy, outlines)
    if covered and drop.any():
        drop &= ~inside_polygons(xy, covered)
    if not drop.any():
        return feats
    return feats.subset(feats.xp.asarray(np.flatnonzero(~drop)))
