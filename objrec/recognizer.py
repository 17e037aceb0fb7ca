"""The recognizer: frame in, verified detections out, within an optional per-frame budget.

A frame travels as one record (:class:`~objrec.realtime.frame.FrameState`) through the stages of the
pipeline, each a unit of its own package, and what it leaves for the next frames (the frame index among it)
in the stream's record (:class:`~objrec.realtime.frame.StreamState`):

    tracking of the objects already found (``objrec.realtime.tracker``)
    ->  the places the last frame's unverified candidates gave their objects (``objrec.realtime.searches``)
    ->  prefilter (``objrec.prefilter``)  ->  search plan (``objrec.realtime.planner``)
    ->  features (``objrec.features.extract``, run by ``objrec.realtime.primary``)
    ->  retrieval, for a catalogue (``objrec.matching.shortlist``)
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

from objrec.backend import resolve_backend
from objrec.boxes import outline_box
from objrec.features.extract import FeatureStage, detector_kinds
from objrec.imageio import check_frame, to_gray
from objrec.matching.second_chance import GuidedStage
from objrec.matching.verify import VerifyParams
from objrec.modeldb import ModelDB
from objrec.modeldb.records import split_key
from objrec.pose import Camera, with_pose
from objrec.realtime.align import ModelTemplates
from objrec.realtime.degrade import DegradeController
from objrec.realtime.frame import HINT_TRIES as HINT_TRIES
from objrec.realtime.frame import FrameState, StreamState
from objrec.realtime.guard import collect_in_slack, frame_guard
from objrec.realtime.primary import MAX_EXTRA_TILES as MAX_EXTRA_TILES
from objrec.realtime.primary import PrimarySearch, explained
from objrec.realtime.primary import read_shortlist as read_shortlist
from objrec.realtime.primary import unexplained as unexplained
from objrec.realtime.scheduler import FrameScheduler, PerfClock
from objrec.realtime.searches import SecondLooks
from objrec.realtime.smoothing import SmoothParams
from objrec.realtime.stages import FIRST_RUN_TEACHES as FIRST_RUN_TEACHES
from objrec.realtime.stages import (
    check_camera,
    check_database,
    make_matchers,
    make_planner,
    make_prefilter,
    make_scheduler,
    make_smoother,
    make_verifier,
    model_sizes,
    start_warming,
)
from objrec.realtime.stages import reads_objects as reads_objects
from objrec.realtime.tilts import check_tilts
from objrec.realtime.tracker import Tracker, TrackParams
from objrec.types import Detection, FrameResult, LostTrack, Regions, Rejection

# HINT_TRIES, MAX_EXTRA_TILES, FIRST_RUN_TEACHES, read_shortlist, unexplained and reads_objects are imported
# above under their own names (``import x as x``) so that callers may import them from here too; each is defined
# with its stage.
__all__ = ["Recognizer"]

#: At most this many boxes where the last frame's unverified candidates placed their objects are looked at in a
#: frame (each costs about a small search and a verification); an object whose hints keep failing is held back
#: (:data:`~objrec.realtime.frame.HINT_TRIES`, :meth:`~objrec.realtime.frame.StreamState.keep_hints`).
MAX_HINTS = 2


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
    warm_cache : bool or int
        When frames read shortlisted objects from the database (descriptors not all in memory), read its files
        into the page cache in the background at once (:meth:`ModelDB.warm_page_cache`), as far as half of the
        available memory or an int's bytes (``2 << 30``: 2 GiB) allow: on a cold page cache a frame's reads of
        several objects would each wait on the disk. False leaves the page cache alone.
    tilts : bool or sequence of float
        Without a budget, where candidates stay unsure, also search tilted views of their region for objects seen
        far from head-on (:mod:`~objrec.realtime.tilts`): True for tilts 2 and 4 (60 and 75 degrees from the
        normal), or the tilts to search. Off by default: each such frame costs a search per view (15 for True).

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
        warm_cache: bool | int = True,
        tilts: bool | Sequence[float] = False,
    ) -> None:
        self.db = db if isinstance(db, ModelDB) else ModelDB.open(db)
        check_database(self.db, budget_ms)
        self.budget_ms = budget_ms
        self.backend = resolve_backend(backend, "Recognizer")
        self.kinds = detector_kinds(self.db, detectors)
        self.primary = self.kinds[0]
        self.matchers = make_matchers(self.db, self.kinds, self.backend, retrieval, exact_matching, ratio, mutual)
        self.warming = start_warming(self.db, self.matchers, warm_cache)  # reading the files ahead, if it does
        self.features = FeatureStage({k: self.db.detectors[k] for k in self.kinds}, backend)
        primary = self.matchers[self.primary]
        args = (max_regions, scene_max_features, sample_step, track)
        self.planner = make_planner(self.db, self.primary, primary, budget_ms, *args)
        self.verifier = make_verifier(self.db, verify)
        self.guided = GuidedStage(self.verifier)
        looks = (self.features, self.matchers, self.verifier, self.guided, self.planner, self.kinds, self.db.records)
        self.looks = SecondLooks(*looks, check_tilts(tilts, budget_ms))
        self.prefilter, self.prefilter_status, self.adapter = make_prefilter(
            self.db, prefilter, adapt_prefilter, adapt_params
        )
        self.clock = clock or PerfClock()
        self.scheduler = make_scheduler(budget_ms, self.clock)
        self.degrade = DegradeController(budget_ms)
        self.tracker = Tracker(track, track_params, self.verifier.appearance, ModelTemplates(self.db.image))
        self._model_size = model_sizes(self.db)
        self.smoother = make_smoother(smooth, track, self._model_size)
        self.camera = check_camera(camera)
        self.search = PrimarySearch(
            self.primary, self.features, primary, self.planner, self.verifier, self.guided, self.tracker,
            self.prefilter, adapts=self.adapter is not None,
        )  # fmt: skip
        self.stream = StreamState()  # what the frames leave for the next ones, the frame index among it
        self.last_rejections: list[Rejection] = []

    @property
    def frames(self) -> int:
        """The frames of the stream processed so far (the stream's frame index, :class:`StreamState`)."""
        return self.stream.index

    def warmup(self, frame_shape: tuple[int, int] = (480, 640), repeats: int = 3) -> None:
        """Compile and allocate for ``frame_shape`` and teach the cost model (``repeats`` passes:
        :func:`~objrec.realtime.warmup.warm_up`), before the first frame counts; the
        stream starts afterwards, at frame 0 (the generated frames are no part of it)."""
        from objrec.realtime.warmup import warm_up

        warm_up(self, frame_shape, repeats)

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
        """:meth:`process` (``t0``, ``t_frame`` as there) with the frame's ``budget_ms`` and SURF ``sample_step``
        given (None: the planner's); the result is made
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
        tracker, looks, stream, frame = self.tracker, self.looks, self.stream, self.stream.index
        if tracker.tracks:
            state.tracked, state.lost = sched.run(
                "track", tracker.step, state.image.host, frame, size=tracker.n_points, mandatory=True
            )
        # Lost objects looked for where they were first, faster than the search finds them (while they are found);
        # and the tracks found last frame realigned: a search under a budget places corners a few pixels off.
        before = sched.unit_ms
        found, lost, looked = looks.reacquire(state, sched, tracker, frame, stream.sought)
        state.tracked, state.lost = state.tracked + found, state.lost + lost
        stream.sought.update(dict.fromkeys(looked, frame))
        state.moved(looks.realign(state, sched, tracker, frame, new_only=True))
        state.verdicts.follow(state.tracked)
        if stream.hints:  # objects the last frame's sweep saw in part, looked for where their matches place them
            looks.hinted(state, sched, stream.hints)
        state.upkeep_ms = sched.unit_ms - before
        # Under a budget, every other frame goes to the tracks when a confirmation is due, instead of the search
        # for new objects: realignment, then the confirmation (both fit a frame's budget, seldom with a search).
        # A frame in which neither is predicted to fit searches as any other: the tracks would not use it.
        turn = state.budget_ms is not None and frame % 2 == 1 and tracker.confirmation_due(frame)
        reserve = looks.turn_reserve(state, sched, tracker, frame) if turn else 0.0
        if reserve <= 0.0:
            self._detect(state, sched)
        elif tracker.tracks and self.planner.sweep:  # the sweep's next parts in the time the tracks leave
            state.explained = explained(tracker)
            self.search.more_tiles(state, sched, Regions.full(*state.shape[::-1]), self.planner.rounds.step, reserve)
        if self.adapter is not None and self.adapter.safety_due(frame):
            new = looks.safety(state, sched)
            if new is not None:  # the adapting prefilter learns what it missed
                self.adapter.found_in_safety_search(state.proposals, new, state.shape)
        state.verdicts.take_retry()  # the primary detector's retries had their chance with its own features
        looks.escalate(state, sched)
        found = state.verdicts.detections()
        state.detections, lost = sched.run(
            "absorb", tracker.absorb, found, state.tracked, state.image.host, frame, self._model_size,
            state.budget_ms is None, size=len(found), mandatory=True,
        )  # fmt: skip
        state.lost += lost
        # Realignment first: cheaper than a confirmation, and more accurate (dense, at full resolution).
        state.moved(looks.realign(state, sched, tracker, frame))
        state.detections, lost = looks.confirm(state, sched, tracker, frame)
        state.lost += lost

    def _detect(self, state: FrameState, sched: FrameScheduler) -> None:
        """The primary search: the planner's plan (boxes inside tracked objects cut out; under a budget one part
        of the sweep sized to the time left), features, retrieval and matching, verification, guided matching."""
        (h, w), tracker, search, stream = state.shape, self.tracker, self.search, self.stream
        waits = search.waits(state, sched, stream.tile_work)
        if waits is not None:
            return sched.record([waits])
        proposals, state.proposals = search.propose(state, sched, stream.tile_work)
        state.explained = explained(tracker)
        args = (state.shape, tracker.windows(w, h), proposals, self.degrade, sched, state.sample_step)
        plan = state.plan = sched.run("plan", self.planner.plan, *args, *state.explained, mandatory=True)
        sched.record(plan.skipped)
        if plan.empty:  # nothing to search: the sweep's last part stays what the prefilter is weighed against
            return
        stream.tile_work = plan.sweep_work
        feats = state.features[self.primary] = search.extract(state, sched, plan)
        state.candidates = tracker.prioritise(search.match(feats, sched))
        state.mandatory_ms = sched.elapsed()
        self.verifier.run(state.candidates, state.verdicts, sched, first_mandatory=True)
        self.guided.run(state.verdicts, search.matcher, feats, sched)
        if any(r.reason == "sweep" for r in plan.skipped):  # the rest of the budget goes to more of the sweep
            search.more_tiles(state, sched, proposals, plan.sample_step)

    def _finish(self, state: FrameState, sched: FrameScheduler) -> FrameResult:
        """The frame's result, its corners smoothed when asked for; the stream's state, the degrade controller
        and an adapting prefilter learn from the frame (from the corners as verified)."""
        found = reportable(self.tracker, state.detections, state.budget_ms)
        assert state.t_frame is not None  # process_with sets it before the frame's stages
        shown = found if self.smoother is None else self.smoother.update(found, state.t_frame)
        if self.camera is not None:
            shown = [with_pose(d, self.db.info(d.name), self.camera, state.shape[::-1]) for d in shown]
        latency = sched.finish()
        result = frame_result(state, *by_object(shown, state.lost), latency, sched)
        self.last_rejections = state.verdicts.rejections
        # Only a sweep searches part of a frame at a time; without one, every frame's search sees the whole of it.
        # An object less in view than a track needs would be found again in every frame: it is left to the search.
        sweeping = self.planner.sweep and state.budget_ms is not None
        least = self.tracker.params.min_anchor_visible
        self.stream.keep_hints(state.verdicts.open_hints(MAX_HINTS, least) if sweeping else [], state.detections)
        self.degrade.observe(latency if state.mandatory_ms is None else state.mandatory_ms)
        if self.adapter is not None:
            avoid = kept_away(self.tracker, state.verdicts.unsure, state.shape)
            self.adapter.observe(state.frame, state.proposals, [d.corners for d in found], avoid, self.stream.index)
        collect_in_slack(sched.remaining())
        self.stream.index += 1
        return result

    def reset(self) -> None:
        """Forget tracked objects, their smoothed corners and what the frames found (hints, objects looked for):
        a new, unrelated sequence of frames follows (:meth:`StreamState.forget`)."""
        self.tracker.reset()
        self.stream.forget()
        if self.smoother is not None:
            self.smoother.reset()


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


def frame_result(
    state: FrameState, shown: list[Detection], lost: list[LostTrack], latency: float, sched: FrameScheduler
) -> FrameResult:
    """The frame's result: the ``shown`` detections and the ``lost`` tracks, its ``latency`` against its budget,
    the scheduler's timings and the work it left out, and the prefilter's boxes when it ran."""
    met = state.budget_ms is None or latency <= state.budget_ms
    result = FrameResult(shown, latency, met, dict(sched.timings), list(sched.skipped), lost=lost)
    if state.proposals is not None:
        h, w = state.shape
        result.prefilter_boxes = [[int(v) for v in b] for b in state.proposals.boxes]
        result.prefilter_rejected = 1.0 - state.proposals.area_fraction(w, h)
    return result


def kept_away(tracker: Tracker, unsure: list, shape: tuple[int, int]) -> list[tuple]:
    """The boxes an adapting prefilter keeps away from when it learns the scene from a frame of ``shape`` (rows,
    cols): the windows of the tracks lost lately, the ``unsure`` boxes and the tracked outlines' boxes (the
    frame's detections' own are added by the prefilter)."""
    h, w = shape
    avoid = [tuple(b) for b in tracker.windows(w, h).boxes] + list(unsure)
    return avoid + [b for b in (outline_box(q, 0.0, w, h) for q in tracker.outlines()) if b is not None]


def by_object(detections: list[Detection], lost: list[LostTrack]) -> tuple[list[Detection], list[LostTrack]]:
    """A frame's detections and lost tracks named by object, with the view that matched: the stages work on
    enrolled views (record keys, :func:`~objrec.modeldb.records.view_key`), a result names objects."""
    out = []
    for d in detections:
        name, view = split_key(d.name)
        out.append(d if view == 0 and name == d.name else dataclasses.replace(d, name=name, view=view))
    return out, [dataclasses.replace(t, name=split_key(t.name)[0]) for t in lost]
