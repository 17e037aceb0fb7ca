"""The recognizer: frame in, verified detections out, within an optional per-frame budget.

A frame travels as one record (:class:`~objrec.realtime.frame.FrameState`) through the stages of the
pipeline, each a unit of its own package:

    tracking of the objects already found (``objrec.realtime.tracker``)
    ->  the places the last frame's unverified candidates gave their objects (``objrec.realtime.searches``)
    ->  prefilter (``objrec.prefilter``)  ->  search plan (``objrec.realtime.planner``)
    ->  features (``objrec.features.extract``)  ->  retrieval, for a catalogue (``objrec.matching.shortlist``)
    ->  matching (``objrec.matching.database``)  ->  verification (``objrec.matching.verifier``)
    ->  guided matching (``objrec.matching.second_chance``)
    ->  safety search of an adapting prefilter  ->  escalation where unsure  (``objrec.realtime.searches``)
    ->  detections met with the tracks  ->  a track's confirmation (``objrec.realtime.searches``)
    ->  corner smoothing, when asked for (``objrec.realtime.smoothing``)  ->  metric pose (``objrec.pose``)

Every unit runs through the frame's scheduler (``objrec.realtime.scheduler``): tracking, the prefilter, the
primary extraction (sized by the planner to the time left; skipped only when tracking took the whole frame),
retrieval, matching and the best candidate's verification are mandatory; the other
candidates, the places of the last frame's unverified ones, guided matching, the escalation to the secondary
detector and a track's confirmation run only
while the cost model predicts they fit. This class wires the stages together and owns no algorithm and no
policy of its own.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from objrec.backend import resolve_backend, to_numpy
from objrec.boxes import covered_region, inside_polygons, outline_box
from objrec.features.extract import FeatureStage, detector_kinds
from objrec.imageio import check_frame, to_gray
from objrec.matching.second_chance import GuidedStage
from objrec.matching.shortlist import ShortlistMatcher, check_saved_indexes, make_matcher, uses_retrieval
from objrec.matching.verifier import CandidateVerifier, aspect_limits
from objrec.matching.verify import VerifyParams
from objrec.modeldb import ModelDB
from objrec.modeldb.records import split_key
from objrec.pose import Camera, with_pose
from objrec.realtime.align import ModelTemplates, lost_points
from objrec.realtime.degrade import DegradeController
from objrec.realtime.frame import FrameState
from objrec.realtime.guard import collect_in_slack, frame_guard
from objrec.realtime.planner import SearchPlanner, plan_work
from objrec.realtime.scheduler import LATE_RESERVE_START, CostModel, FrameScheduler, PerfClock
from objrec.realtime.searches import SecondLooks
from objrec.realtime.smoothing import CornerSmoother, SmoothParams
from objrec.realtime.tracker import Tracker, TrackParams
from objrec.types import Detection, Features, FrameResult, LostTrack, Regions, Rejection, SearchPlan, SkipRecord

__all__ = ["Recognizer"]

#: At most this many more tiles of the sweep are searched in a frame's remaining time.
MAX_EXTRA_TILES = 3


#: At most this many boxes where the last frame's unverified candidates placed their objects are looked at in a
#: frame (each costs about a small search and a verification).
MAX_HINTS = 2
#: An object whose hints were searched in vain in this many frames in a row is not hinted again until a frame
#: leaves it no hint (:meth:`Recognizer._next_hints`).
HINT_TRIES = 3

#: Units whose costs are learned from their first runs (their prior admits the first): a confirmation, a
#: realignment, a re-acquisition, a read of shortlisted objects (from the disk, or once read ahead), and the
#: planning of a sweep's next part.
FIRST_RUN_TEACHES = ("confirm", "realign", "reacquire", "read", "read_ahead", "plan_tile")


class Recognizer:
    """Recognise enrolled objects in frames, within an optional per-frame latency budget.

    Parameters
    ----------
    db : ModelDB or path
        The model database (opened once; descriptors kept in memory, on the GPU when used).
    budget_ms : float, optional
        Per-frame latency budget. Optional work is admitted only while predicted to fit;
        ``deadline_met`` is ``latency_ms <= budget_ms`` (True without a budget).
    backend : {"auto", "cpu", "gpu"}
    detectors : sequence of str, optional
        Detector kinds to use, a subset of the database's (default: all it has). The first of
        ``("surf", "sift")`` present is the primary detector; the next is the escalation where it is unsure.
    ratio : float
        Lowe's ratio for matching.
    mutual : bool
        Keep only mutual nearest neighbours.
    verify : VerifyParams, optional
        Geometric verification parameters.
    prefilter : RegionPrefilter, "auto" or None
        ``"auto"`` uses the database's trained prefilter when present and current; None searches the whole
        frame.
    track : bool
        Follow the objects found from frame to frame (:class:`~objrec.realtime.tracker.Tracker`: optical flow,
        a homography refit and the appearance check at a cadence), and spend detection on the rest of the
        frame. False turns all tracking off, smoothing included: every frame is searched from scratch, with
        no windows and no order from earlier frames.
    camera : Camera, optional
        The camera that takes the frames (:class:`~objrec.pose.Camera`): each detection of an object enrolled
        with its physical width (``width_m``) then carries its metric pose (:func:`~objrec.pose.object_pose`,
        from the homography as reported, smoothed when ``smooth``).
    track_params : TrackParams, optional
        Settings of the tracking stage (``max_tracked`` and the others; see
        :class:`~objrec.realtime.tracker.TrackParams`).
    clock : object with ``now() -> ms``, optional
        For tests (a fake clock); default ``time.perf_counter``.
    max_regions : int
        At most this many prefilter regions are searched per frame.
    scene_max_features : int, optional
        With a budget, at most this many of a frame's strongest primary keypoints are described.
    exact_matching : bool
        Exact brute-force 2-NN for every database (see :class:`~objrec.matching.DatabaseMatcher`), against
        every object unless ``retrieval=True``.
    retrieval : bool, optional
        Match each frame only against the objects a retrieval index shortlists
        (:class:`~objrec.matching.shortlist.ShortlistMatcher`). None (default): for databases with at least
        :data:`~objrec.matching.shortlist.RETRIEVAL_MIN_DESCRIPTORS` descriptors of a kind, unless
        ``exact_matching``. The index is
        saved with the database and brought up to date with its content when the recognizer opens it.
    adapt_prefilter : bool
        Adapt the prefilter to the live scene (:class:`~objrec.prefilter.online.OnlinePrefilter`): it starts
        from the database's prefilter, or from one trained on the built-in backgrounds now (with a progress
        bar), learns the stream's background on otherwise idle CPU, and every few frames searches the whole frame
        as an optional unit to catch what it would have missed.
    adapt_params : AdaptParams, optional
        Settings of the adaptation.
    sample_step : {None, 1, 2}
        SURF's first-octave sampling step in frames (see :class:`~objrec.features.SURF`). 1 is the models'
        own layout (OpenCV's); 2 halves the detector's cost, the largest part of a frame's work, for a few
        of the smallest and weakest keypoints (fewer inliers on small objects). None: 1, unless a budget
        needs the saving (the degrade level in force, or the cost model predicting that step 1 does not fit).
    smooth : bool or SmoothParams
        Smooth each object's corners over frames with the One-Euro filter
        (:class:`~objrec.realtime.smoothing.CornerSmoother`; True: :class:`SmoothParams`'s defaults), time steps
        from each frame's ``t0``: steadier outlines for display, with each detection's own corners kept as
        ``raw_corners``. Off by default: each frame's detections are its own.
    warm_cache : bool
        When objects are read from the database as frames shortlist them (a catalogue whose descriptors are not
        all held in memory), start reading the database's files into the page cache in the background at once,
        as far as half of the available memory allows (:meth:`ModelDB.warm_page_cache`): on a cold page cache a
        frame's reads of several objects would each wait on the disk. False leaves the page cache alone.

    Examples
    --------
    >>> from objrec import ModelDB, Recognizer  # doctest: +SKIP
    >>> rec = Recognizer(ModelDB.open("covers.db"), budget_ms=33)  # doctest: +SKIP
    >>> result = rec.process(frame)  # doctest: +SKIP
    >>> [(d.name, d.corners) for d in result.detections]  # doctest: +SKIP
    """

    def __init__(
        self,
        db: ModelDB | str,
        budget_ms: float | None = None,
        backend: str = "auto",
        detectors: list[str] | None = None,
        ratio: float = 0.75,
        mutual: bool = False,
        verify: VerifyParams | None = None,
        prefilter: Any = "auto",
        track: bool = True,
        clock: Any = None,
        max_regions: int = 8,
        scene_max_features: int | None = 1500,
        exact_matching: bool = False,
        retrieval: bool | None = None,
        adapt_prefilter: bool = False,
        adapt_params: Any = None,
        sample_step: int | None = None,
        smooth: bool | SmoothParams = False,
        track_params: TrackParams | None = None,
        camera: Camera | None = None,
        warm_cache: bool = True,
    ) -> None:
        self.db = db if isinstance(db, ModelDB) else ModelDB.open(db)
        if budget_ms is not None and not budget_ms > 0:
            raise ValueError(f"budget_ms: expected a positive number or None, got {budget_ms}")
        if len(self.db) == 0:
            raise ValueError(f"{self.db.path}: the model database is empty; enroll objects first")
        self.budget_ms = budget_ms
        self.backend = resolve_backend(backend, "Recognizer")
        self.kinds = detector_kinds(self.db, detectors)
        self.primary = self.kinds[0]
        xp = __import__("cupy") if self.backend == "gpu" else np
        if retrieval is None and exact_matching:
            retrieval = False
        check_saved_indexes(self.db, [k for k in self.kinds if uses_retrieval(self.db, k, retrieval)])
        self.matchers = {
            k: make_matcher(self.db, k, retrieval, ratio=ratio, mutual=mutual, xp=xp, exact=exact_matching)
            for k in self.kinds
        }
        self.warming = None  # the thread reading the database's files into the page cache, if any
        if warm_cache and any(reads_objects(m) for m in self.matchers.values()):
            self.warming = self.db.warm_page_cache()
        self.features = FeatureStage({k: self.db.detectors[k] for k in self.kinds}, backend)
        cap = self.db.detectors[self.primary].get("max_features") or scene_max_features
        primary = self.matchers[self.primary]
        voters = primary.queries if isinstance(primary, ShortlistMatcher) else 0
        self.planner = SearchPlanner(
            self.primary,
            max_regions,
            cap if budget_ms is not None else None,
            retrieval_voters=voters,
            sample_step=sample_step if self.primary == "surf" else 1,
            sweep=track,
        )
        infos = self.db.infos()
        solid = [i.name for i in infos if i.shape == "solid"]
        self.verifier = CandidateVerifier(verify, aspect_limits(infos), self.db.thumbnail, solid)
        self.guided = GuidedStage(self.verifier)
        self.looks = SecondLooks(
            self.features, self.matchers, self.verifier, self.guided, self.planner, self.kinds, self.db.records
        )
        self._set_prefilter(prefilter, adapt_prefilter, adapt_params)
        self.clock = clock or PerfClock()
        self.scheduler = FrameScheduler(
            budget_ms,
            CostModel(prior_ms=dict.fromkeys(FIRST_RUN_TEACHES, 0.0)),
            self.clock,
            safety_ms=2.0,
            late_start=LATE_RESERVE_START,
        )
        self.degrade = DegradeController(budget_ms)
        self.tracker = Tracker(track, track_params, self.verifier.appearance, ModelTemplates(self.db.image))
        if not isinstance(smooth, bool | SmoothParams):
            raise ValueError(f"smooth: expected a bool or SmoothParams, got {smooth!r}")
        params = SmoothParams() if smooth is True else smooth or None
        self.smoother = CornerSmoother(params, model_size=self._model_size) if params and track else None
        if camera is not None and not isinstance(camera, Camera):
            raise ValueError(f"camera: expected an objrec.pose.Camera or None, got {type(camera).__name__}")
        self.camera = camera
        self.last_rejections: list[Rejection] = []
        self._hints: list[tuple[str, tuple[int, int, int, int]]] = []  # the boxes the next frame looks at first
        self._hint_tries: dict[str, int] = {}  # object name -> frames in a row its hints were searched in vain
        self.frames = 0

    def _set_prefilter(self, prefilter: Any, adapt: bool, adapt_params: Any) -> None:
        """The prefilter stage (and the adapting prefilter's policy, ``adapter``, when ``adapt``)."""
        from objrec.prefilter.resolve import resolve_prefilter  # scikit-learn only when a stored one is loaded

        self.prefilter, self.prefilter_status = resolve_prefilter(self.db, prefilter)
        self.adapter = None
        if adapt:
            from objrec.prefilter.online import adaptive_prefilter

            self.prefilter, self.prefilter_status = adaptive_prefilter(
                self.db, self.prefilter, self.prefilter_status, adapt_params
            )
            self.adapter = self.prefilter

    def warmup(self, frame_shape: tuple[int, int] = (480, 640), repeats: int = 3) -> None:
        """Compile and allocate for ``frame_shape`` and teach the cost model, before the first frame counts."""
        from objrec.realtime.warmup import warm_up

        try:
            warm_up(self, frame_shape, repeats)
        finally:
            if self.smoother is not None:
                self.smoother.reset()  # the generated frames are no part of the stream

    def process(self, frame: np.ndarray, t0: float | None = None, t_frame: float | None = None) -> FrameResult:
        """Recognise objects in one frame (gray or BGR uint8).

        Parameters
        ----------
        frame : ndarray
            The frame, gray or BGR, uint8.
        t0 : float, optional
            When the frame was handed over, in ms on the recognizer's clock (default: now): latency, and the
            budget, run from it, so time spent queued before this call counts.
        t_frame : float, optional
            The frame's time on the footage's own timeline, in ms (a video file's timestamp, an image
            folder's index over its frame rate; default: ``t0``). Corner smoothing measures its time steps
            by it, and tracking counts its settings in footage time at the frame rate these times give (30
            frames a second without them), so a file gives the same corners however fast the machine reads
            it.

        Returns
        -------
        FrameResult
        """
        return self.process_with(frame, t0, self.budget_ms, None, t_frame)

    def process_with(
        self,
        frame: np.ndarray,
        t0: float | None,
        budget_ms: float | None,
        sample_step: int | None,
        t_frame: float | None = None,
    ) -> FrameResult:
        """:meth:`process` with the frame's budget and SURF step given (None: the planner's); the result is made
        in the frame guard too, or the frame's garbage would be collected at its first allocation, in the frame."""
        sched = self.scheduler
        sched.start(t0, budget_ms)
        with frame_guard():
            state = FrameState(frame, self.features.frame_image(to_gray(check_frame(frame))), budget_ms, sample_step)
            state.t_frame = sched.t0 if t_frame is None else float(t_frame)
            # the footage's frame rate, which tracking's settings in footage time are counted at (30 frames a
            # second for frames without a footage time)
            self.tracker.rate.update(t_frame)
            self._recognize(state, sched)
            return self._finish(state, sched)

    def _recognize(self, state: FrameState, sched: FrameScheduler) -> None:
        """The stages of one frame, each given what the frame record holds and its result written back."""
        tracker = self.tracker
        if tracker.tracks:
            state.tracked, state.lost = sched.run(
                "track", tracker.step, state.image.host, self.frames, size=tracker.n_points, mandatory=True
            )
        # Lost objects looked for where they were first, faster than the search finds them (while they are found);
        # and the tracks found last frame realigned: a search under a budget places corners a few pixels off.
        before = sched.unit_ms
        self.looks.reacquire(state, sched, tracker, self.frames)
        self.looks.realign(state, sched, tracker, self.frames, new_only=True)
        state.verdicts.tracked = [(d.name, d.corners) for d in state.tracked]
        if self._hints:  # objects the last frame's sweep saw in part, looked for where their matches place them
            self.looks.hinted(state, sched, self._hints)
        state.upkeep_ms = sched.unit_ms - before
        # Under a budget, every other frame goes to the tracks when a confirmation is due, instead of the search
        # for new objects: realignment, then the confirmation (both fit a frame's budget, seldom with a search).
        # A frame in which neither is predicted to fit searches as any other: the tracks would not use it.
        turn = state.budget_ms is not None and self.frames % 2 == 1 and tracker.confirmation_due(self.frames)
        reserve = self.looks.turn_reserve(state, sched, tracker, self.frames) if turn else 0.0
        if reserve <= 0.0:
            self._detect(state, sched)
        else:
            turn_tiles(self, state, sched, reserve)
        if self.adapter is not None and self.adapter.safety_due():
            self.looks.safety(state, sched, self.adapter)
        state.verdicts.take_retry()  # the primary detector's retries had their chance with its own features
        self.looks.escalate(state, sched)
        found = state.verdicts.detections()
        state.detections, lost = sched.run(
            "absorb", tracker.absorb, found, state.tracked, state.image.host, self.frames, self._model_size,
            size=len(found), mandatory=True,
        )  # fmt: skip
        state.lost += lost
        # Realignment first: cheaper than a confirmation, and more accurate (dense, at full resolution).
        self.looks.realign(state, sched, tracker, self.frames)
        self.looks.confirm(state, sched, tracker, self.frames)

    def _detect(self, state: FrameState, sched: FrameScheduler) -> None:
        """The primary search: the planner's plan (boxes inside tracked objects cut out; under a budget one part
        of the sweep sized to the time left), features, retrieval and matching, verification, guided matching."""
        (h, w), tracker = state.shape, self.tracker
        if tracker.tracks and sched.remaining() <= 0.0:  # the tracks took the frame; the sweep waits
            return sched.record([SkipRecord("features", "budget", "tracking took the frame")])
        if self.planner.waits(state.shape, sched, state.upkeep_ms):  # once begun, it runs its least part
            return sched.record([SkipRecord("features", "budget", "the tracks' upkeep took the frame")])
        proposals = propose(self, state, sched)
        state.explained = explained(tracker)
        args = (state.shape, tracker.windows(w, h), proposals, self.degrade, sched, state.sample_step)
        plan = state.plan = sched.run("plan", self.planner.plan, *args, *state.explained, mandatory=True)
        sched.record(plan.skipped)
        if plan.empty:
            return
        feats = state.features[self.primary] = search_features(self, state, sched, plan)
        state.candidates = tracker.prioritise(self._match(feats, sched))
        state.mandatory_ms = sched.elapsed()
        self.verifier.run(state.candidates, state.verdicts, sched, first_mandatory=True)
        self.guided.run(state.verdicts, self.matchers[self.primary], feats, sched)
        if any(r.reason == "sweep" for r in plan.skipped):  # the rest of the budget goes to more of the sweep
            more_tiles(self, state, sched, proposals, plan.sample_step)

    def _finish(self, state: FrameState, sched: FrameScheduler) -> FrameResult:
        """The frame's result, its corners smoothed when asked for; the degrade controller and an adapting
        prefilter learn from the frame (from the corners as verified)."""
        verdicts = state.verdicts
        found = reportable(self.tracker, state.detections, state.budget_ms)
        assert state.t_frame is not None  # process_with sets it before the frame's stages
        shown = found if self.smoother is None else self.smoother.update(found, state.t_frame)
        if self.camera is not None:
            shown = [with_pose(d, self.db.info(d.name), self.camera, state.shape[::-1]) for d in shown]
        latency = sched.finish()
        met = state.budget_ms is None or latency <= state.budget_ms
        shown, lost = by_object(shown, state.lost)
        result = FrameResult(shown, latency, met, dict(sched.timings), list(sched.skipped), lost=lost)
        h, w = state.shape
        if state.proposals is not None:
            result.prefilter_boxes = [[int(v) for v in b] for b in state.proposals.boxes]
            result.prefilter_rejected = 1.0 - state.proposals.area_fraction(w, h)
        self.last_rejections = verdicts.rejections
        # Only a sweep searches part of a frame at a time; without one, every frame's search sees the whole of it.
        # An object less in view than a track needs would be found again in every frame: it is left to the search.
        sweeping = self.planner.sweep and state.budget_ms is not None
        least = self.tracker.params.min_anchor_visible
        self._hints = self._next_hints(verdicts.open_hints(MAX_HINTS, least) if sweeping else [], state)
        self.degrade.observe(latency if state.mandatory_ms is None else state.mandatory_ms)
        if self.adapter is not None:
            avoid = [tuple(b) for b in self.tracker.windows(w, h).boxes] + list(verdicts.unsure)
            avoid += [b for b in (outline_box(q, 0.0, w, h) for q in self.tracker.outlines()) if b is not None]
            self.adapter.observe(state.frame, state.proposals, [d.corners for d in found], avoid)
        collect_in_slack(sched.remaining())
        self.frames += 1
        return result

    def _next_hints(self, hints: list, state: FrameState) -> list:
        """The ``hints`` the next frame looks at: those of objects whose hints were not searched in vain in each
        of the last :data:`HINT_TRIES` frames. A hint's own search leaves a hint when what it finds is not
        verified; an object whose hints keep failing (a wrong place, a view too poor) would otherwise take a
        search in every frame. It is hinted again once a frame leaves it no hint."""
        hinted = {split_key(k)[0] for k, _ in self._hints}
        shown = {split_key(d.name)[0] for d in state.detections}
        still = {split_key(k)[0] for k, _ in hints} - shown
        tries = {n: c for n, c in self._hint_tries.items() if n in still}
        for n in hinted & still:
            tries[n] = tries.get(n, 0) + 1
        self._hint_tries = tries
        return [(k, b) for k, b in hints if tries.get(split_key(k)[0], 0) < HINT_TRIES]

    def _match(self, feats: Features, sched: FrameScheduler) -> list:
        """The primary features' candidates: retrieval first for a catalogue, each a mandatory unit."""
        matcher = self.matchers[self.primary]
        if not isinstance(matcher, ShortlistMatcher):
            return sched.run("matching", matcher.candidates, feats, size=len(feats), mandatory=True)
        voters = self.planner.voters(len(feats), sched)
        shortlist = sched.run("retrieval", matcher.shortlist, feats, voters, size=voters, mandatory=True)
        shortlist = read_shortlist(matcher, shortlist, sched)
        return sched.run("matching", matcher.candidates, feats, shortlist, size=len(feats), mandatory=True)

    def _model_size(self, name: str) -> tuple[int, int]:
        """The (width, height) of ``name``'s model image."""
        info = self.db.info(name)
        return info.width, info.height

    def reset(self) -> None:
        """Forget tracked objects and their smoothed corners (a new, unrelated sequence of frames follows)."""
        self.tracker.reset()
        self._hints, self._hint_tries = [], {}
        if self.smoother is not None:
            self.smoother.reset()


def reads_objects(matcher: Any) -> bool:
    """Whether ``matcher`` reads shortlisted objects' rows from the database as frames need them."""
    return isinstance(matcher, ShortlistMatcher) and hasattr(matcher.matcher, "unread")


def propose(rec: Recognizer, state: FrameState, sched: FrameScheduler) -> Regions:
    """``rec``'s prefilter regions of the frame, best first: the whole frame without a prefilter, or where the
    sweep's tile is cheaper to search whole (``SearchPlanner.prefilter_pays``; an adapting prefilter runs on
    every frame, it learns from each)."""
    h, w = state.shape
    if rec.prefilter is None:
        return Regions.full(w, h)
    if rec.adapter is None and not rec.planner.prefilter_pays(sched):
        sched.record([SkipRecord("prefilter", "sweep", "the tile is cheaper to search whole")])
        return Regions.full(w, h)
    state.proposals = sched.run("prefilter", rec.prefilter.propose, state.frame, mandatory=True)
    return state.proposals


def read_shortlist(matcher: ShortlistMatcher, shortlist: np.ndarray, sched: FrameScheduler) -> np.ndarray:
    """The shortlisted objects to match in this frame: those whose descriptors are in memory, and the others once
    read. Reading one from the database is a unit of its own (``read``): from the page cache an object takes a
    millisecond or two, from the disk up to tens, more than a frame can wait for several. The objects are read
    best first while the next is predicted to fit (a unit left out frame after frame is tried again where its
    typical time fits, so that it learns when the disk has become quicker); the kernel is asked to fetch the rest
    without the frame waiting (:meth:`~objrec.matching.stored.StoredMatcher.read_ahead`), this frame matches
    without them, and a later frame that shortlists them reads them from the page cache: such reads are
    learned apart (stage ``read_ahead``), since they do not wait on the disk."""
    unread = matcher.unread(shortlist)
    for k, i in enumerate(unread):
        stage = "read_ahead" if matcher.read_ahead_before(i) else "read"
        done = sched.run("read", matcher.read, [i], stage=stage, subject=f"object {i}", timing="matching", relearn=True)
        if isinstance(done, SkipRecord):
            matcher.read_ahead(unread[k:])
            later = set(unread[k:])
            return np.asarray([j for j in np.asarray(shortlist).tolist() if j not in later], np.int64)
    return shortlist


def search_features(rec: Recognizer, state: FrameState, sched: FrameScheduler, plan: SearchPlan) -> Features:
    """The primary features where ``plan`` says (the planner learns their density and moves its sweep on), less
    those inside tracked outlines, each a mandatory unit."""
    feats = sched.run(
        "features", rec.features.extract, state.image, rec.primary, plan,
        size=plan_work(plan), mandatory=True, stage=f"features_{rec.primary}",
    )  # fmt: skip
    rec.planner.observe(plan, len(feats))
    rec.planner.rounds.advance(plan)
    return sched.run("explained", unexplained, feats, *state.explained, size=len(feats), mandatory=True)


def turn_tiles(rec: Recognizer, state: FrameState, sched: FrameScheduler, reserve: float) -> None:
    """A frame given to the tracks (their realignment and confirmation) searches the sweep's next parts in the
    time those leave (``reserve`` ms kept for them:
    :meth:`~objrec.realtime.searches.SecondLooks.turn_reserve`), as after a search."""
    if not rec.tracker.tracks or not rec.planner.sweep:
        return
    state.explained = explained(rec.tracker)
    h, w = state.shape
    more_tiles(rec, state, sched, Regions.full(w, h), rec.planner.rounds.step, reserve)


def more_tiles(
    rec: Recognizer, state: FrameState, sched: FrameScheduler, proposals: Regions, step: int, reserve: float = 0.0
) -> None:
    """The time ``rec``'s search of a frame leaves (less ``reserve`` ms for later units) goes to the sweep's next
    tiles, one after another while the next is predicted to fit with the mandatory units after it
    (``SearchPlanner.next_tile``; their verification is optional): a frame's search plans for the typical
    tail, so most frames end with room."""
    tracker = rec.tracker
    for _ in range(MAX_EXTRA_TILES):
        # Planning a part (its regions less the tracked outlines, their pixels, its resolution) is a unit of
        # its own: its time varies with the tracks and proposals, and learned as a unit it is budgeted.
        plan = sched.run(
            "plan_tile", rec.planner.next_tile, state.shape, proposals, sched, step, *state.explained, reserve
        )
        if not isinstance(plan, SearchPlan):
            return
        sched.record(plan.skipped)  # which part of the sweep it searched, as for the frame's own plan
        feats = search_features(rec, state, sched, plan)
        candidates = tracker.prioritise(rec._match(feats, sched))
        rec.verifier.run(candidates, state.verdicts, sched, first_mandatory=False)
        rec.guided.run(state.verdicts, rec.matchers[rec.primary], feats, sched)


def reportable(tracker: Tracker, found: list[Detection], budget_ms: float | None) -> list[Detection]:
    """The frame's detections to report. Under a budget a new track's detection waits until a look at full
    quality has agreed with it: a realignment that succeeded (``Track.aligned``) or a confirmation (no longer
    ``rough``). A search under a budget places a new object from few inliers at a lower resolution, at
    times tens of pixels off, and a track is never drawn where its object is not; the realignment comes first
    thing in the next frame. A track once reported stays reported; tracks without realignment (solid) are
    reported at once, as is everything without a budget."""
    if budget_ms is None:
        return found
    tracks = {t.track_id: t for t in tracker.tracks}
    out = []
    for d in found:
        t = None if d.track_id is None else tracks.get(d.track_id)
        if t is not None and not t.shown:
            if t.rough and getattr(t, "aligned", 0) < 0:
                continue
            tracker.mark_shown(t)
        out.append(d)
    return out


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


def by_object(detections: list[Detection], lost: list[LostTrack]) -> tuple[list[Detection], list[LostTrack]]:
    """A frame's detections and lost tracks named by object, with the view that matched: the stages work on
    enrolled views (record keys, :func:`~objrec.modeldb.records.view_key`), a result names objects."""
    out = []
    for d in detections:
        name, view = split_key(d.name)
        out.append(d if view == 0 and name == d.name else dataclasses.replace(d, name=name, view=view))
    return out, [dataclasses.replace(t, name=split_key(t.name)[0]) for t in lost]
