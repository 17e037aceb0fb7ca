"""The searches of a frame beyond the primary one, each an optional unit of the frame's scheduler.

* the **safety search** of an adapting prefilter: the whole frame, so the prefilter learns what it missed;
* the **escalation**: the secondary detectors (SIFT after SURF) on the boxes where candidates had too little
  evidence, with guided matching of their own candidates; without a budget, when asked for, tilted views of
  the region where candidates stay unsure (:mod:`objrec.realtime.tilts`);
* the **hints**: the primary detector on the boxes where the last frame's unverified candidates placed their
  objects (:func:`~objrec.matching.extent.predicted_extent`), before the frame's own search;
* the **confirmation** of one track: its box searched again at full quality, which confirms the track,
  re-anchors it, or (for a track no such search has confirmed yet) ends it;
* the tracks' **re-acquisition** and **realignment** with their models.

The searches add their verdicts to the frame's :class:`~objrec.matching.verdicts.FrameVerdicts` (through its
methods) and return what else they found (detections, ended tracks, tracks moved, objects looked for), which the
recognizer records in the frame's and the stream's state.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

import cv2
import numpy as np

from objrec.boxes import outline_box
from objrec.matching.verdicts import UNSURE_REASONS
from objrec.modeldb.records import split_key
from objrec.realtime.align import due, realign_in, unsettled
from objrec.realtime.frame import FrameState
from objrec.realtime.planner import HINT_MATCHING, plan_work
from objrec.realtime.reacquire import reacquire, waiting
from objrec.realtime.tilts import search as tilt_search
from objrec.types import Detection, Features, LostTrack, SkipRecord

if TYPE_CHECKING:
    from objrec.features.extract import FeatureStage
    from objrec.matching.second_chance import GuidedStage
    from objrec.matching.verdicts import FrameVerdicts
    from objrec.matching.verifier import CandidateVerifier
    from objrec.realtime.planner import SearchPlanner
    from objrec.realtime.scheduler import FrameScheduler
    from objrec.realtime.solid_track import SolidTrack
    from objrec.realtime.tracker import Track, Tracker, TrackLike

__all__ = ["SecondLooks", "CONFIRM_PIXELS", "RETRIEVED", "confirm_box"]

#: Without a budget, an escalation's second matching (as the matcher chooses, after its suspects were not
#: found) is learned as its kind's escalation stage with this suffix: a budget never runs it.
RETRIEVED = "_retrieved"

#: Under a budget, a confirmation searches its box at full resolution up to this many pixels, and larger
#: boxes scaled down to it: an object that large keeps a few hundred pixels of detail, and the search's time
#: stays bounded. Only a search at full resolution that does not find a roughly anchored track ends it.
CONFIRM_PIXELS = 25_000

#: At most this many tracks are realigned with their models in one frame.
MAX_REALIGNS = 4


class SecondLooks:
    """The recognizer's searches beyond the primary one (see the module notes).

    Parameters
    ----------
    features : FeatureStage
    matchers : dict of str -> matcher
        Per detector kind, ``candidates(features, among=None) -> [Candidate]``.
    verifier : CandidateVerifier
    guided : GuidedStage
    planner : SearchPlanner
    kinds : list of str
        The detector kinds, the primary first.
    names : list of str
        The database's record keys (one per enrolled view), in its order (a candidate's ``object_index``).
    tilts : tuple of float
        The tilts of the frame searched after the escalation, without a budget, where candidates stay unsure
        (:mod:`objrec.realtime.tilts`; :func:`~objrec.realtime.tilts.check_tilts`); empty: none.
    """

    def __init__(
        self,
        features: FeatureStage,
        matchers: dict,
        verifier: CandidateVerifier,
        guided: GuidedStage,
        planner: SearchPlanner,
        kinds: list[str],
        names: list,
        tilts: tuple[float, ...] = (),
    ) -> None:
        self.features = features
        self.matchers = matchers
        self.verifier = verifier
        self.guided = guided
        self.planner = planner
        self.kinds = list(kinds)
        self.primary = self.kinds[0]
        self._names = names
        self.tilts = tuple(tilts)
        self._indexes: dict[str, int] | None = None
        self._views: dict[str, list[int]] | None = None  # object name -> its record indices

    def search(self, image: Any, kind: str, plan: Any, among: list[int] | None = None) -> tuple[Features, list]:
        """Features of ``kind`` where ``plan`` says and their candidates: a unit of the safety search and of
        the escalation. With ``among`` (record indices, best first) only those records are matched, without
        retrieval. ``image``: the frame's image."""
        feats = self.features.extract(image, kind, plan)
        return feats, self.matchers[kind].candidates(feats, among)

    def suspects(self, state: FrameState) -> list[int] | None:
        """What an escalation matches its boxes against: every enrolled view of the objects of the frame's
        candidates, those rejected for too little evidence first (their matches made the boxes), then the
        primary search's others in their order (competitors in the ratio test, as in the primary's
        shortlist); None when the frame has none (retrieval then chooses)."""
        unsure = [r.name for r in state.verdicts.rejections if r.reason in UNSURE_REASONS]
        return self.views_of(unsure + [c.name for c in state.candidates]) or None

    def views_of(self, keys: list[str]) -> list[int]:
        """The record indices of every view of the objects of ``keys`` (record keys or object names), object
        by object in the order of their first key."""
        if self._views is None:
            self._views = {}
            for i, key in enumerate(self._names):
                self._views.setdefault(split_key(key)[0], []).append(i)
        wanted = dict.fromkeys(split_key(k)[0] for k in keys)
        return [i for name in wanted for i in self._views.get(name, ())]

    def safety(self, state: FrameState, sched: FrameScheduler) -> list[np.ndarray] | None:
        """The whole frame searched as an optional unit, for an adapting prefilter to learn from what it finds
        (a detection all the same): the outlines of the objects it found that the frame had not (None when it
        was left out). ``state``, ``sched``: the frame's state and scheduler."""
        plan = self.planner.safety_plan(state.shape, state.plan, sched)
        kind = self.primary
        out = sched.run(
            "safety", self.search, state.image, kind, plan,
            size=plan_work(plan), stage=f"features_{kind}", timing="safety",
        )  # fmt: skip
        if isinstance(out, SkipRecord):
            return None
        verdicts = state.verdicts
        known = set(verdicts.found)
        self.verifier.run([c for c in out[1] if c.name not in known], verdicts, sched, first_mandatory=False)
        return [verdicts.found[n].corners for n in verdicts.found if n not in known]

    def escalate(self, state: FrameState, sched: FrameScheduler) -> None:
        """The secondary detectors on the boxes where candidates had too little evidence (outside the objects
        found or tracked), each box an optional unit at the resolution the planner gives it
        (:meth:`~objrec.realtime.planner.SearchPlanner.escalation_plan`: lower under a budget, down to what a
        large object needs) and run only if its predicted cost fits; their candidates with too little
        evidence get guided matching against the box's features, as the primary detector's do.

        A box is matched against the frame's suspects (:meth:`suspects`), without retrieval: the box is where
        those objects had too little evidence, the stronger detector is there to settle them, and a retrieval
        over a box's few features would cost about as much again as their matching. Without a budget, a box in
        which the suspects are not found is matched again, as the matcher chooses (its retrieval's shortlist
        for a catalogue): the primary search's retrieval may have missed the object the box holds. That
        second matching is learned as a stage of its own (``escalate_<kind>`` + :data:`RETRIEVED`). Where
        candidates stay unsure after it, a frame without a budget searches tilted views of their region when the
        recognizer was given ``tilts`` (:func:`objrec.realtime.tilts.search`).
        ``state``, ``sched``: the frame's state and scheduler."""
        verdicts = state.verdicts
        boxes = verdicts.open_unsure()
        among = self.suspects(state) if boxes else None
        fallback = among is not None and sched.budget_ms is None
        for kind in self.kinds[1:]:
            stage = f"escalate_{kind}"
            for i, box in enumerate(boxes):
                plan = self.planner.escalation_plan(box, sched, stage)
                out = sched.run(
                    "escalate", self.search, state.image, kind, plan, among,
                    size=plan_work(plan), stage=stage, subject=f"{kind}:{i}",
                )  # fmt: skip
                if isinstance(out, SkipRecord):
                    continue
                sched.record(plan.skipped)
                known = set(verdicts.found) if fallback else None
                self.settle(out[0], out[1], kind, verdicts, sched)
                if known is not None and set(verdicts.found) <= known:
                    more = sched.run(
                        "escalate", self.matchers[kind].candidates, out[0],
                        size=len(out[0]), stage=stage + RETRIEVED, timing=stage, subject=f"{kind}:{i}",
                    )  # fmt: skip
                    self.settle(out[0], more, kind, verdicts, sched)
        if self.tilts:
            tilt_search(self, state, sched, self.tilts)

    def hinted(
        self, state: FrameState, sched: FrameScheduler, hints: list[tuple[str, tuple[int, int, int, int]]]
    ) -> None:
        """The boxes where the last frame's unverified candidates placed their objects (``hints``: record key
        and box, :meth:`~objrec.matching.verdicts.FrameVerdicts.open_hints`), each searched by the primary
        detector as an optional unit, admitted only with the time its matching and first verification take
        after it (:meth:`~objrec.realtime.plan_cost.PlanCosts.hint_after`: an extraction that fits the time
        left alone would leave them over the budget), matched against that object's views only (a mandatory
        unit of its own, :data:`~objrec.realtime.planner.HINT_MATCHING`), and verified.

        Under a budget the sweep searches one part of the frame at a time, and an object that lies across two
        parts gives each only some of its matches: too few to verify, but enough to say where all of it lies.
        Looked for there, at the resolution of :meth:`~objrec.realtime.planner.SearchPlanner.escalation_plan`,
        it is found in the next frame rather than when the sweep comes back with the object inside one part.
        ``state``, ``sched``: the frame's state and scheduler."""
        kind, verdicts = self.primary, state.verdicts
        stage = f"features_{kind}"
        for key, box in hints:
            name = split_key(key)[0]
            if name in verdicts.shown():
                continue
            after = self.planner.costs.hint_after(sched, (box[2] - box[0]) * (box[3] - box[1]))
            plan = self.planner.escalation_plan(box, sched, stage, after)
            plan = dataclasses.replace(plan, crop=box)
            feats = sched.run(
                "hint", self.features.extract, state.image, kind, plan,
                size=plan_work(plan), stage=stage, subject=name, timing="hint", after_ms=after,
            )  # fmt: skip
            if isinstance(feats, SkipRecord):
                continue
            sched.record(plan.skipped)
            found = sched.run(
                "hint_matching", self.matchers[kind].candidates, feats, self.views_of([key]),
                size=len(feats), stage=HINT_MATCHING, subject=name, timing="hint", mandatory=True,
            )  # fmt: skip
            self.settle(feats, found, kind, verdicts, sched)

    def settle(
        self, feats: Features, candidates: list, kind: str, verdicts: FrameVerdicts, sched: FrameScheduler
    ) -> None:
        """An escalation's ``candidates`` verified into ``verdicts``, and guided matching of those with too little
        evidence against ``feats`` (the search's features, of detector ``kind``); ``sched``: the frame's
        scheduler."""
        self.verifier.run(candidates, verdicts, sched, first_mandatory=False)
        self.guided.run(verdicts, self.matchers[kind], feats, sched)

    def turn_reserve(self, state: FrameState, sched: FrameScheduler, tracker: Tracker, frame: int) -> float:
        """What a frame given to the tracks keeps for their realignment and confirmation due: each one's
        predicted time (the high quantile, sized as :meth:`realign` and :meth:`confirm` size them) where it
        fits the time left after the one before, as the scheduler will admit them; none where it does not.
        ``state``, ``sched``, ``tracker``: the frame's state, scheduler and tracker."""
        units = []
        t = due(tracker, frame)
        if t is not None:
            units.append(("realign", _area(t)))
        box, _, size = confirm_box(state, tracker.confirmation_due(frame))
        if box is not None:
            units.append(("confirm", size))
        ms, left = 0.0, sched.remaining()
        for stage, size in units:
            p = sched.cost.predict(stage, size)
            if p <= left - ms:
                ms += p
        return ms

    def confirm(
        self, state: FrameState, sched: FrameScheduler, tracker: Tracker, frame: int
    ) -> tuple[list[Detection], list[LostTrack]]:
        """The track due for confirmation (:meth:`~objrec.realtime.tracker.Tracker.confirmation`) searched for
        in its box at the models' own sampling, as an optional unit; what is found confirms or re-anchors it
        (:meth:`~objrec.realtime.tracker.Tracker.reanchor`, with the tolerance of the box's resolution). A
        track not yet confirmed (``rough``) that a full-resolution search does not find ends
        (``"unconfirmed"``): its detection was wrong, and a track would repeat it frame after frame. A
        confirmation left out for the budget keeps the track first in line. Returns the frame's detections
        (those of a re-anchored track replaced, those of an ended one left out) and the tracks ended.
        ``state``, ``sched``, ``tracker``: the frame's state, scheduler and tracker."""
        t = tracker.confirmation(frame)
        box, scale, size = confirm_box(state, t)
        if t is None or box is None:
            return state.detections, []
        args = (state, box, t, scale, tracker, frame)
        out = sched.run("confirm", self.confirmed, *args, size=size, subject=t.name, relearn=True)
        if isinstance(out, SkipRecord):
            tracker.postpone(t)  # it stays first in line
            return state.detections, []
        v, detections = out
        if v is None and t.rough and scale == 1.0:
            lost = tracker.drop(t, "unconfirmed", frame)
            return [d for d in detections if d.track_id != t.track_id], [lost]
        return detections, []

    def reacquire(
        self, state: FrameState, sched: FrameScheduler, tracker: Tracker, frame: int, sought: dict[str, int]
    ) -> tuple[list[Detection], list[LostTrack], list[str]]:
        """The objects of tracks lost lately looked for where they were (:mod:`objrec.realtime.reacquire`), the
        least recently looked for first (``sought``: object name to the frame it was last looked for), each an
        optional unit sized by its outline's area, while they fit and until :data:`MAX_REALIGNS` were not found
        (a view still blurred or covered costs no more than that; a sharp view back after a swing of the camera
        gives back every object that fits). Returns the tracked detections of the new tracks those found start,
        the tracks that gave way to them, and the names of the objects looked for in this frame.
        ``state``, ``sched``, ``tracker``: the frame's state, scheduler and tracker."""
        gray = state.image.host
        failed = 0
        found: list[Detection] = []
        lost: list[LostTrack] = []
        looked: list[str] = []
        for t in waiting(tracker, frame, sought, gray.shape[:2]):
            if failed >= MAX_REALIGNS:
                break
            looked.append(t.name)
            d = sched.run("reacquire", reacquire, tracker, t, gray, size=_area(t), subject=t.name)
            if isinstance(d, SkipRecord):
                break
            if d is None:
                failed += 1
                continue
            new, ended = tracker.absorb([d], [], gray, frame, _sized(t.model_size))
            found, lost = found + new, lost + ended
            _aligned_now(tracker, new, frame)
        return found, lost, looked

    def realign(
        self, state: FrameState, sched: FrameScheduler, tracker: Tracker, frame: int, new_only: bool = False
    ) -> list[Track]:
        """The tracks due for realignment with their models, in :func:`~objrec.realtime.align.due`'s order, each
        an optional unit sized by its outline's area, up to :data:`MAX_REALIGNS` while they fit; ``new_only``:
        only tracks not yet realigned onto their models (:func:`~objrec.realtime.align.unsettled`). Returns the
        tracks realigned, whose detections in the frame (tracked or final) move with them
        (:meth:`~objrec.realtime.frame.FrameState.moved`). ``state``, ``sched``, ``tracker``: the
        frame's state, scheduler and tracker."""
        moved: list[Track] = []
        for _ in range(MAX_REALIGNS):
            t = due(tracker, frame)
            if t is None or new_only and not unsettled(t):
                break
            args = (tracker, t, state.image.host, frame)
            done = sched.run("realign", realign_in, *args, size=_area(t), subject=t.name, relearn=True)
            if isinstance(done, SkipRecord):
                break
            if done:
                moved.append(t)
        return moved

    def confirmed(
        self,
        state: FrameState,
        box: tuple[int, int, int, int],
        t: Track | SolidTrack,
        scale: float,
        tracker: Tracker,
        frame: int,
    ) -> tuple[Detection | None, list[Detection]]:
        """The confirmation's search: the primary features of one ``box`` of the frame ``state`` at the models'
        sampling (resized by ``scale``), their candidates against track ``t``'s object alone, verified; the
        detection found (or None) and the frame's detections after it. A detection confirms or re-anchors the
        track here (``tracker``'s, in frame number ``frame``), inside the unit, so that the cost model learns the
        outcome's work (the appearance checks that arbitrate, the new track's points) with the search's."""
        feats = self.features.extract_box(state.image, self.primary, box, scale)
        for c in self.matchers[self.primary].candidates(feats, [self._index(t.name)]):
            v = self.verifier.verify(c, state.shape, state.verdicts) if c.name == t.name else None
            if isinstance(v, Detection):
                return v, tracker.reanchor(t, v, state.detections, state.image.host, frame, scale)
        return None, state.detections

    def _index(self, name: str) -> int:
        if self._indexes is None:
            self._indexes = {n: i for i, n in enumerate(self._names)}
        return self._indexes[name]


def _sized(size: tuple[int, int]) -> Callable[[str], tuple[int, int]]:
    """``model_size(name)`` for one object's track: ``size`` whatever the name."""
    return lambda name: size


def _aligned_now(tracker: Tracker, detections: list, frame: int) -> None:
    """The tracks of ``detections`` (new ones, from re-acquisitions) count as realigned with their models in
    ``frame`` (:meth:`~objrec.realtime.tracker.Tracker.mark_aligned`): a re-acquisition is that alignment,
    confirmed by the appearance check, so they are reported at once and not realigned again before their turn."""
    ids = {d.track_id for d in detections}
    for t in tracker.tracks:
        if t.track_id in ids and hasattr(t, "aligned"):  # planar tracks only
            tracker.mark_aligned(cast("Track", t), frame)


def _area(t: TrackLike) -> float:
    """The area of track ``t``'s outline: the size a realignment or a re-acquisition is costed at."""
    return float(cv2.contourArea(np.asarray(t.corners, np.float32)))


def confirm_box(state: FrameState, t: TrackLike | None) -> tuple[tuple[int, int, int, int] | None, float, float]:
    """Track ``t``'s box searched by its confirmation in the frame ``state``, the resolution it is searched at
    (under the frame's budget at most :data:`CONFIRM_PIXELS`) and the pixels searched, the size the unit is costed
    at; ``(None, 1.0, 0.0)`` without a track or a box."""
    h, w = state.shape
    box = None if t is None else outline_box(t.corners, 0.1, w, h)
    if box is None:
        return None, 1.0, 0.0
    px = (box[2] - box[0]) * (box[3] - box[1])
    scale = 1.0 if state.budget_ms is None else min(1.0, float(np.sqrt(CONFIRM_PIXELS / px)))
    return box, scale, px * scale * scale
