"""The recognizer: frame in, verified detections out, within an optional per-frame budget.

A frame flows through the stages of the pipeline, each a unit of its own package:

    prefilter (``objrec.prefilter``)  ->  search plan (``objrec.realtime.planner``)
    ->  features (``objrec.features.extract``)  ->  retrieval, for a catalogue (``objrec.matching.shortlist``)
    ->  matching (``objrec.matching.database``)
    ->  verification (``objrec.matching.verifier``, with guided matching as a second chance)
    ->  escalation where unsure  ->  tracking

Every unit runs through the frame's scheduler (``objrec.realtime.scheduler``): the prefilter, the primary
extraction, retrieval, matching and the best candidate's verification are mandatory; the other candidates
and the escalation to the secondary detector run only while the cost model predicts they fit. This class
wires the stages together and owns no algorithm of its own.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from objrec.backend import resolve_backend
from objrec.features.extract import FeatureStage, detector_kinds
from objrec.imageio import check_frame, to_gray
from objrec.matching.shortlist import ShortlistMatcher, check_saved_indexes, make_matcher, uses_retrieval
from objrec.matching.verifier import CandidateVerifier, FrameVerdicts, aspect_limits
from objrec.matching.verify import VerifyParams
from objrec.modeldb import ModelDB
from objrec.realtime.degrade import DegradeController
from objrec.realtime.guard import collect_in_slack, frame_guard
from objrec.realtime.planner import SearchPlanner
from objrec.realtime.scheduler import CostModel, FrameScheduler, PerfClock
from objrec.realtime.tracker import Tracker
from objrec.types import FrameResult, Regions, Rejection, SearchPlan

__all__ = ["Recognizer"]


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
        Search last frame's objects first, in a window around them.
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
        bar), learns the stream's background between frames, and every few frames searches the whole frame
        as an optional unit to catch what it would have missed.
    adapt_params : AdaptParams, optional
        Settings of the adaptation.
    sample_step : {None, 1, 2}
        SURF's first-octave sampling step in frames (see :class:`~objrec.features.SURF`). 1 is the models'
        own layout (OpenCV's); 2 halves the detector's cost, the largest part of a frame's work, for a few
        of the smallest and weakest keypoints (fewer inliers on small objects). None: 1, unless a budget
        needs the saving (the degrade level in force, or the cost model predicting that step 1 does not fit).

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
        )
        self.verifier = CandidateVerifier(verify, aspect_limits(self.db.infos()), self.db.thumbnail)
        from objrec.prefilter.estimator import resolve_prefilter  # scikit-learn, only once a recognizer is made

        self.prefilter, self.prefilter_status = resolve_prefilter(self.db, prefilter)
        self.adapter = None
        if adapt_prefilter:
            from objrec.prefilter.online import adaptive_prefilter

            self.prefilter, self.prefilter_status = adaptive_prefilter(
                self.db, self.prefilter, self.prefilter_status, adapt_params
            )
            self.adapter = self.prefilter
        self.clock = clock or PerfClock()
        self.scheduler = FrameScheduler(budget_ms, CostModel(), self.clock, safety_ms=2.0)
        self.degrade = DegradeController(budget_ms)
        self.tracker = Tracker(enabled=track)
        self.last_rejections: list[Rejection] = []
        self._proposals: Regions | None = None  # the prefilter's output for the current frame
        self.frames = 0

    def warmup(self, frame_shape: tuple[int, int] = (480, 640), repeats: int = 3) -> None:
        """Compile and allocate for ``frame_shape`` and teach the cost model, before the first frame counts."""
        from objrec.realtime.warmup import warm_up

        warm_up(self, frame_shape, repeats)

    def process(self, frame: np.ndarray, t0: float | None = None) -> FrameResult:
        """Recognise objects in one frame (gray or BGR uint8).

        ``t0`` is when the frame was handed over (ms on the recognizer's clock; default: now), so latency
        includes time spent queued before this call.
        """
        sched = self.scheduler
        sched.start(t0)
        self._proposals = None
        return self._process(frame, sched)

    def _process(self, frame: np.ndarray, sched: FrameScheduler) -> FrameResult:
        with frame_guard():
            verdicts, mandatory_ms = self._recognize(frame, sched)
        latency = sched.elapsed()
        met = self.budget_ms is None or latency <= self.budget_ms
        result = FrameResult(verdicts.detections(), latency, met, dict(sched.timings), list(sched.skipped))
        if self.prefilter is not None and self._proposals is not None:
            h, w = frame.shape[:2]
            result.prefilter_boxes = [[int(v) for v in b] for b in self._proposals.boxes]
            result.prefilter_rejected = 1.0 - self._proposals.area_fraction(w, h)
        self.last_rejections = verdicts.rejections
        self.degrade.observe(latency if mandatory_ms is None else mandatory_ms)
        if self.adapter is not None:
            h, w = frame.shape[:2]
            avoid = [tuple(b) for b in self.tracker.windows(w, h).boxes] + list(verdicts.unsure)
            self.adapter.observe(frame, self._proposals, [d.corners for d in result.detections], avoid)
        collect_in_slack(sched.remaining())
        self.frames += 1
        return result

    def _recognize(self, frame: np.ndarray, sched: FrameScheduler) -> tuple[FrameVerdicts, float | None]:
        """The stages of one frame; returns the verdicts and the mandatory part's time (None if no search)."""
        gray = to_gray(check_frame(frame))
        h, w = gray.shape
        verdicts = FrameVerdicts((h, w), gray)
        self.features.begin_frame(gray)
        proposals = self._propose(frame, sched)
        plan = self.planner.plan((h, w), self.tracker.windows(w, h), proposals, self.degrade, sched)
        mandatory_ms = None
        if not plan.empty:
            stage = f"features_{self.primary}"
            run = sched.run
            _, feats = run("features", lambda: self.features.extract(self.primary, plan), plan.work, True, stage)
            self.planner.observe(plan, len(feats))
            cands = self._match(feats, sched)
            mandatory_ms = sched.elapsed()
            self.verifier.run(self.tracker.prioritise(cands), verdicts, sched, first_mandatory=True)
            self.verifier.second_chance(verdicts, self.matchers[self.primary], feats, sched)
        if self.adapter is not None and self.adapter.safety_due():
            self._safety_search(verdicts, sched, (h, w))
        self._escalate(verdicts, sched)
        self.tracker.update(verdicts.found)
        return verdicts, mandatory_ms

    def _match(self, feats: Any, sched: FrameScheduler) -> list:
        """The primary features' candidates: retrieval first for a catalogue, each a mandatory unit."""
        matcher = self.matchers[self.primary]
        if not isinstance(matcher, ShortlistMatcher):
            return sched.run("matching", lambda: matcher.candidates(feats), len(feats), True)[1]
        voters = self.planner.voters(len(feats), sched)
        _, shortlist = sched.run("retrieval", lambda: matcher.shortlist(feats, voters), voters, True)
        return sched.run("matching", lambda: matcher.candidates(feats, shortlist), len(feats), True)[1]

    def _propose(self, frame: np.ndarray, sched: FrameScheduler) -> Regions:
        """The prefilter's regions, best first (the whole frame without a prefilter)."""
        if self.prefilter is None:
            return Regions.full(frame.shape[1], frame.shape[0])
        self._proposals = sched.run("prefilter", lambda: self.prefilter.propose(frame), mandatory=True)[1]
        return self._proposals

    def _safety_search(self, verdicts: FrameVerdicts, sched: FrameScheduler, shape: tuple[int, int]) -> None:
        """The whole frame searched as an optional unit; what it finds outside the prefilter's regions is a
        miss the adapting prefilter backs off from (and a detection all the same)."""
        h, w = shape
        cap = self.planner.feature_cap if sched.budget_ms else None
        plan = SearchPlan(None, pixels=h * w, max_features=cap, sample_step=self.planner.last_step)
        kind = self.primary

        def unit():
            return self.matchers[kind].candidates(self.features.extract(kind, plan))

        ran, cands = sched.run("safety", unit, plan.work, stage=f"features_{kind}", timing="safety")
        if not ran:
            return
        known = set(verdicts.found)
        self.verifier.run([c for c in cands if c.name not in known], verdicts, sched, first_mandatory=False)
        new = [verdicts.found[name].corners for name in set(verdicts.found) - known]
        self.adapter.found_in_safety_search(self._proposals, new, (h, w))

    def _escalate(self, verdicts: FrameVerdicts, sched: FrameScheduler) -> None:
        """The secondary detectors on the boxes where candidates had too little evidence (outside the objects
        found), while they fit; their candidates with too little evidence get guided matching against the
        box's features, as the primary detector's do."""
        verdicts.retry = []  # the primary detector's retries had their chance with its own features
        for kind in self.kinds[1:]:
            for i, box in enumerate(verdicts.open_unsure()):
                plan = SearchPlan(Regions.from_boxes([box]), pixels=(box[2] - box[0]) * (box[3] - box[1]))

                def unit(kind=kind, plan=plan):
                    feats = self.features.extract(kind, plan)
                    return feats, self.matchers[kind].candidates(feats)

                ran, out = sched.run("escalate", unit, plan.work, stage=f"escalate_{kind}", subject=f"{kind}:{i}")
                if ran:
                    self.verifier.run(out[1], verdicts, sched, first_mandatory=False)
                    self.verifier.second_chance(verdicts, self.matchers[kind], out[0], sched)

    def reset(self) -> None:
        """Forget tracked objects (a new, unrelated sequence of frames follows)."""
        self.tracker.reset()
