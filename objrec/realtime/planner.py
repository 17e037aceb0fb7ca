"""The search plans of a frame: which boxes each detector's features are extracted from, at what resolution
and sampling step, and how many of them are described, so that the mandatory part fits the budget.

The planner makes every plan of a frame: the primary search, the whole-frame safety search of an adapting
prefilter, and the escalation of the secondary detector to an unsure box. It reads the frame's scheduler
(cost model, time left) and changes nothing of it: what a plan leaves out travels with the plan
(``SearchPlan.skipped``) for the orchestrator to record. What a plan costs is
:class:`~objrec.realtime.plan_cost.PlanCosts`'s to predict (``SearchPlanner.costs``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from objrec.boxes import inner_boxes, outline_box, subtract_boxes, union_area
from objrec.realtime.degrade import SCALE_LEVELS, DegradeController, fit_scale
from objrec.realtime.plan_cost import (
    COARSE_SAMPLING_COST,
    FIRST_VERIFY_MATCHES,
    FIRST_VERIFY_SHARE,
    HINT_MATCHING,
    PLANNED_VOTERS,
    PlanCosts,
    plan_work,
)
from objrec.realtime.sweep import (
    COARSE_SUBJECT,
    COARSE_SWEEP_SCALE,
    SWEEP_GRIDS,
    Sweep,
    largest_tile,
    whole_or_boxes,
)
from objrec.types import Regions, SearchPlan, SkipRecord

if TYPE_CHECKING:
    from objrec.realtime.scheduler import FrameScheduler

# The plan's costs (objrec.realtime.plan_cost) are named here too, where the plans are made.
__all__ = [
    "SearchPlanner",
    "plan_work",
    "escalation_plan",
    "COARSE_SAMPLING_COST",
    "ESCALATION_PIXELS",
    "FIRST_VERIFY_MATCHES",
    "FIRST_VERIFY_SHARE",
    "HINT_MATCHING",
    "PLANNED_VOTERS",
]

#: Under a budget, an escalation searches its box at a resolution that keeps at least this many pixels
#: (about 160 a side, twice that in SIFT's first octave, which doubles its input): the bound a track's
#: confirmation keeps too (``objrec.realtime.searches.CONFIRM_PIXELS``).
ESCALATION_PIXELS = 25_000

#: Under a budget, a search without a sweep describes at least this many keypoints per pixel searched before
#: its resolution drops (:meth:`SearchPlanner._fewer_features`): about 300 in a 640x480 frame, enough for the
#: few objects such a frame holds.
MIN_FEATURE_DENSITY = 1e-3


def tracked_holes(tracked: Any, w: int, h: int, covered: Any = ()) -> list[tuple[int, int, int, int]]:
    """The insides of the ``tracked`` outlines (a few boxes each, :func:`inner_boxes`: a rotated object's bounding
    box holds much of its neighbours, which the search must still see), less the bounding boxes of the
    ``covered`` parts of them (where another object may be in front)."""
    holes = [b for q in tracked for b in inner_boxes(np.asarray(q), w, h)]
    if holes and len(covered):
        keep = [outline_box(np.asarray(c), 0.0, w, h) for c in covered]
        cut, _ = subtract_boxes(np.array(holes), [b for b in keep if b is not None])
        holes = [tuple(b) for b in cut.tolist()]
    return holes


def _less_holes(proposals: Regions, holes: list[tuple[int, int, int, int]]) -> Regions:
    """``proposals`` less the ``holes`` (:func:`tracked_holes`)."""
    if not holes or not len(proposals):
        return proposals
    pieces, parent = subtract_boxes(proposals.boxes, holes)
    return Regions(pieces, proposals.scores[parent])


def escalation_plan(
    box: tuple[int, int, int, int], sched: FrameScheduler | None = None, stage: str = "", after_ms: float = 0.0
) -> SearchPlan:
    """One unsure box searched by a secondary detector whose extraction is the cost model's ``stage``.

    Without a budget (or ``sched``), at full resolution. Under one, at the largest resolution whose
    predicted cost fits the time left less ``after_ms`` (the work that follows the extraction in the same
    frame), but never below :data:`ESCALATION_PIXELS` (a smaller box keeps full resolution): a large
    object keeps its detail at a lower resolution, and a box that does not fit even there is left to the
    scheduler to skip. A lower resolution is recorded in the plan's ``skipped``.
    """
    px = (box[2] - box[0]) * (box[3] - box[1])
    scale = 1.0
    if sched is not None and sched.budget_ms is not None and px > 0:
        floor = min(1.0, float(np.sqrt(ESCALATION_PIXELS / px)))
        fit = float(np.sqrt(sched.cost.largest_size(stage, sched.remaining() - after_ms) / px))
        # Two decimals: crops of nearly the same size from frame to frame resize to the same shapes.
        scale = max(floor, np.floor(min(1.0, fit) * 100.0) / 100.0)
    skipped = () if scale >= 1.0 else (SkipRecord("full_resolution", "budget", f"{scale:.2f}"),)
    return SearchPlan(Regions.from_boxes([box]), scale=float(scale), pixels=px, skipped=skipped)


def fitting_windows(
    planner: SearchPlanner, windows: Regions, shape: tuple[int, int], sched: FrameScheduler
) -> tuple[Regions, int]:
    """The most recent of the ``windows`` (first ones) whose union, searched at the lowest resolution and the
    coarse step, is predicted to fit the time left with the units after it, at least one; and how many
    were left out. After many tracks end at once (a quick swing of the camera) their windows together
    would cost more than the frame has; the objects still lost are looked for in later frames."""
    cost = sched.cost
    if cost.samples(planner.stage) < cost.min_samples:
        return windows, 0
    for k in range(len(windows), 1, -1):
        costs = planner.costs
        if costs.fits(sched, costs.frame_cap(sched), union_area(windows[:k], shape), SCALE_LEVELS[-1], 2):
            return windows[:k], len(windows) - k
    return windows[:1], len(windows) - 1


class SearchPlanner:
    """Turns tracking windows and prefilter regions into a :class:`~objrec.types.SearchPlan`.

    Parameters
    ----------
    kind : str
        The primary detector kind (its extraction's cost-model stage is ``features_<kind>``).
    max_regions : int
        At most this many prefilter regions are searched (fewer at higher degrade levels).
    feature_cap : int or None
        Under a budget, the strongest keypoints described at degrade level 0 (a share of it at higher
        levels); None leaves the detector's own setting.
    whole_frame_fraction : float
        When the boxes cover more than this fraction of the frame, the whole frame is searched: a masked
        pass also builds and tests the boxes' mask, and its non-maximum suppression visits the whole grid,
        so from about three quarters of the frame on it costs as much as one pass without a mask, or more
        where the features gather in the boxes (``bench/bench_surf.py --coverage`` times both).
    min_features : int
        The feature cap never goes below this.
    retrieval_voters : int
        At most this many of the features vote in the retrieval unit (the size its cost is learned at);
        0 when the recognizer has no retrieval stage.
    sample_step : {None, 1, 2}
        SURF's first-octave sampling step. None: 1, or 2 under a budget when the degrade level is above 0
        or the cost model predicts that step 1 does not fit; resolution drops only after that (coarser
        sampling keeps the objects' large and medium scales, a lower resolution loses the small objects).
    sweep : bool
        Under a budget, when the search would otherwise drop below ``min_sweep_scale``, search one part of
        the sweep per frame instead (:mod:`objrec.realtime.sweep`: tiles in turn, and after every few of them
        the whole frame at a low resolution; tracking windows are searched in every frame). Off, every frame's
        plan covers all of the search by itself and owes nothing to the frames before (no tracking).
    min_sweep_scale : float
        The resolution below which the sweep takes over.
    """

    def __init__(
        self,
        kind: str,
        max_regions: int = 8,
        feature_cap: int | None = None,
        whole_frame_fraction: float = 0.75,
        min_features: int = 100,
        retrieval_voters: int = 0,
        sample_step: int | None = None,
        sweep: bool = False,
        min_sweep_scale: float = 0.85,
    ) -> None:
        if sample_step not in (None, 1, 2):
            raise ValueError(f"sample_step: expected None, 1 or 2, got {sample_step!r}")
        self.kind = kind
        self.stage = f"features_{kind}"
        self.max_regions = max_regions
        self.whole_frame_fraction = whole_frame_fraction
        self.sample_step = sample_step
        self.sweep = sweep
        self.min_sweep_scale = min_sweep_scale
        self.costs = PlanCosts(self.stage, feature_cap, min_features, retrieval_voters)
        self.rounds = Sweep(min_sweep_scale)  # where the sweep stands
        self._holes: tuple | None = None  # the last outlines, covered parts and frame size asked about, and holes

    def plan(
        self,
        shape: tuple[int, int],
        windows: Regions,
        proposals: Regions,
        degrade: DegradeController,
        sched: FrameScheduler,
        sample_step: int | None = None,
        tracked: list[np.ndarray] | tuple = (),
        covered: list[np.ndarray] | tuple = (),
    ) -> SearchPlan:
        """The primary search's plan for a frame of ``shape`` (rows, cols).

        ``windows`` (tracking) come first and are always searched; ``proposals`` (the prefilter's regions,
        best first) are cut to the level's count. Under a budget the sampling step, then the resolution,
        drop to what the cost model predicts fits the time left after retrieval (for a catalogue), matching
        and the first verification, but only then: both lose small objects. Without a sweep, the units after
        extraction are sized at the feature cap, and the cap drops before the resolution
        (:meth:`_fewer_features`). ``degrade`` (a :class:`DegradeController`) gives the level's region count,
        feature share and resolution; ``sched`` (a
        :class:`FrameScheduler`) supplies the cost model and the time left; what the plan leaves out is in
        its ``skipped``. ``sample_step`` fixes the step for this frame (default: the planner's own setting).
        Boxes inside the ``tracked`` outlines (frame pixels) are cut out of the proposals, the tracking stage
        follows those objects, except where they may be ``covered`` by others (:func:`tracked_holes`). A plan
        that searches a part of the sweep carries that part's cost-model size (``SearchPlan.sweep_work``).
        """
        h, w = shape[:2]
        fixed = self.sample_step if sample_step is None else sample_step
        level = degrade.current
        skipped = []
        if degrade.level:
            skipped.append(SkipRecord("degrade_level", "load", str(degrade.level)))
        n = min(self.max_regions, level.regions)
        if len(proposals) > n:
            why = "degrade" if n < self.max_regions else "max_regions"
            skipped.append(SkipRecord("region", why, f"{len(proposals) - n} of {len(proposals)}"))
        if sched.budget_ms is not None and len(windows) > 1:
            windows, cut = fitting_windows(self, windows, (h, w), sched)
            if cut:
                skipped.append(SkipRecord("window", "budget", f"{cut} of {cut + len(windows)}"))
        boxes = windows.concat(_less_holes(proposals[:n], self._holes_of(tracked, w, h, covered)))
        if not len(boxes):
            return SearchPlan(Regions.empty(), skipped=tuple(skipped))
        regions, pixels = whole_or_boxes(boxes, (h, w), self.whole_frame_fraction)
        cap = self.costs.frame_cap(sched, level.feature_share)
        step = fixed or (2 if sched.budget_ms is not None and degrade.level else 1)
        scale = level.scale
        sweep_work = 0.0
        crop = None
        if sched.budget_ms is not None and sched.cost.samples(self.stage) >= sched.cost.min_samples:
            cost = sched.cost
            worst = not self.sweep
            left, margin = self.costs.left(sched, cap, pixels, step, worst=worst)
            if fixed is None and step == 1 and cost.expected(self.stage, pixels) + margin > left:
                step = 2
                left, margin = self.costs.left(sched, cap, pixels, step, worst=worst)
            work = plan_work(SearchPlan(None, pixels=int(pixels), sample_step=step))
            scale = min(scale, fit_scale(lambda s: cost.expected(self.stage, work * s * s) + margin, left))
            if not self.sweep and cap and scale < level.scale:
                full_cap = cap
                cap, scale = self._fewer_features(sched, cap, pixels, step, level.scale)
                if cap < full_cap:
                    skipped.append(SkipRecord("keypoints", "budget", f"{cap} of {full_cap}"))
            if self.sweep and (scale < self.min_sweep_scale or step != (fixed or 1)):
                args = (boxes, len(windows), (h, w), sched, cap, sorted({fixed or 1, step}), level.scale)
                regions, pixels, scale, step, crop, record, sweep_work = self._sweep_part(*args, (regions, pixels))
                skipped.append(record)
        if step == 2 and fixed is None:
            skipped.append(SkipRecord("fine_sampling", "degrade", "2"))
        if scale < 1.0:
            skipped.append(SkipRecord("full_resolution", "degrade", f"{scale:g}"))
        return SearchPlan(regions, scale, cap, int(pixels), step, tuple(skipped), crop, sweep_work=sweep_work)

    def _fewer_features(
        self, sched: FrameScheduler, cap: int, pixels: float, step: int, top: float
    ) -> tuple[int, float]:
        """The feature cap and resolution of a search without a sweep that does not fit at resolution ``top``
        with ``cap``: the largest resolution of :data:`~objrec.realtime.degrade.SCALE_LEVELS` up to ``top``,
        and at it the largest cap of ``cap`` times powers of 2/3, down to :data:`MIN_FEATURE_DENSITY` of the
        ``pixels`` (at least ``min_features``), that fit; the least cap and resolution when none does.

        The units after extraction (retrieval, matching, verification) cost in proportion to the keypoints
        described, and describing only the strongest keeps every object's large and well-contrasted
        structure at full resolution, while a lower resolution drops every object's fine scales: with a
        frame's search all in one plan, fewer keypoints lose less than less resolution.
        """
        floor = min(cap, max(self.costs.min_features, int(MIN_FEATURE_DENSITY * pixels)))
        work = plan_work(SearchPlan(None, pixels=int(pixels), sample_step=step))
        scales = [s for s in SCALE_LEVELS if s <= top]  # the degrade levels' scales are among them
        for scale in scales:
            fewer = cap
            while True:
                left, margin = self.costs.left(sched, fewer, pixels, step, worst=True)
                if sched.cost.expected(self.stage, work * scale * scale) + margin <= left:
                    return fewer, scale
                if fewer <= floor:
                    break
                fewer = max(floor, int(fewer * 2 / 3))
        return floor, scales[-1]

    def _sweep_part(
        self,
        boxes: Regions,
        n_windows: int,
        shape: tuple[int, int],
        sched: FrameScheduler,
        cap: int | None,
        steps: list[int],
        top: float,
        whole: tuple[Regions | None, float],
    ) -> tuple[Regions | None, float, float, int, tuple[int, int, int, int] | None, SkipRecord, float]:
        """This frame's part of the sweep (:class:`~objrec.realtime.sweep.Sweep`): the coarse pass over ``boxes``
        when it is due and fits, else the windows plus the round's next tile at a resolution up to ``top``, at
        the finer of ``steps`` first (what a sweep finds is followed for many frames with the accuracy it was
        found at; the coarse step only when the tile does not fit). ``whole`` is :func:`whole_or_boxes` of
        ``boxes``, the coarse pass's regions and pixels. Returns the regions, pixels, scale, step, crop, the
        part's record and its cost-model size (a tile: the round's largest, at the part's scale and step; or
        the coarse pass)."""
        h, w = shape
        rounds = self.rounds
        coarse = None
        if rounds.coarse_due:  # the coarse pass's regions are only needed when it is due
            regions, pixels = whole
            coarse = rounds.coarse_step(self, sched, cap, pixels, steps)
        if coarse is not None:
            rounds.step, s = coarse, COARSE_SWEEP_SCALE
            work = plan_work(SearchPlan(None, s, pixels=int(pixels), sample_step=coarse))
            return regions, pixels, s, coarse, None, SkipRecord("region", "sweep", f"{COARSE_SUBJECT} at {s:g}"), work
        for tile_step in steps:
            part, pixels, scale, subject, crop = rounds.tile(self, boxes, n_windows, shape, sched, cap, tile_step, top)
            if scale >= self.min_sweep_scale:
                break
        else:
            if not rounds.piece:  # the tile fits only at a low resolution: a piece of it at full detail, if that fits
                first = rounds.tile(self, boxes, n_windows, shape, sched, cap, tile_step, top, piece=True)
                if first[2] >= self.min_sweep_scale:
                    part, pixels, scale, subject, crop = first
        rounds.step = tile_step
        assert rounds.grid is not None  # rounds.tile() set the round's grid
        largest = largest_tile(w, h, *rounds.grid)
        work = plan_work(SearchPlan(None, scale, pixels=largest, sample_step=tile_step))
        return part, pixels, scale, tile_step, crop, SkipRecord("region", "sweep", subject), work

    def next_tile(
        self,
        shape: tuple[int, int],
        proposals: Regions,
        sched: FrameScheduler,
        step: int,
        tracked: Any = (),
        covered: Any = (),
        reserve: float = 0.0,
    ) -> SearchPlan | None:
        """The sweep's next part as a plan of its own (:meth:`~objrec.realtime.sweep.Sweep.next_plan`) for the
        time a frame has left once its search is done, less ``reserve``: ``proposals`` less the boxes inside
        the ``tracked`` outlines (but their ``covered`` parts); None without a sweep under way or when it does
        not fit. ``shape``: the frame's (rows, cols); ``sched``: its scheduler; ``step``: SURF's sampling step."""
        if not self.sweep or sched.budget_ms is None:
            return None
        h, w = shape[:2]
        rest = _less_holes(proposals, self._holes_of(tracked, w, h, covered))
        return self.rounds.next_plan(self, (h, w), rest, sched, self.costs.frame_cap(sched), step, reserve)

    def _holes_of(self, tracked: Any, w: int, h: int, covered: Any) -> list[tuple[int, int, int, int]]:
        """:func:`tracked_holes`, kept while the same outlines are asked about: a frame's plan and its extra
        sweep parts are given the frame's outlines and covered parts (the same lists)."""
        last = self._holes
        if last is None or last[0] is not tracked or last[1] is not covered or last[2] != (w, h):
            last = self._holes = (tracked, covered, (w, h), tracked_holes(tracked, w, h, covered))
        return last[3]

    def least_ms(self, shape: tuple[int, int], sched: FrameScheduler, tile_work: float = 0.0) -> float:
        """The predicted time of the least primary search a frame of ``shape`` (rows, cols) can make: the
        prefilter (once learned, while it pays for the sweep's last part of ``tile_work``:
        :meth:`prefilter_pays`), the plan, the extraction of the largest tile of the sweep's
        finest grid (the whole frame without a sweep) at the lowest resolution and the coarse step, and the
        mandatory units after it, with the margin a plan keeps for its tail. 0 without a budget or before the
        cost model has learned the extraction. Once begun, the search runs at least this much whatever the
        time left. ``sched``: the frame's scheduler (its budget and cost model)."""
        cost = sched.cost
        if sched.budget_ms is None or cost.samples(self.stage) < cost.min_samples:
            return 0.0
        h, w = shape[:2]
        px = float(largest_tile(w, h, *SWEEP_GRIDS[-1]) if self.sweep else w * h)
        least = cost.predict("plan") + self.costs.need(
            sched, self.costs.frame_cap(sched), px, SCALE_LEVELS[-1], self.sample_step or 2
        )
        if cost.samples("prefilter") >= cost.min_samples and self.prefilter_pays(sched, tile_work):
            least += cost.predict("prefilter")
        return least

    def waits(self, shape: tuple[int, int], sched: FrameScheduler, upkeep_ms: float, tile_work: float = 0.0) -> bool:
        """Whether a frame's primary search waits for the next frame: the tracks' optional upkeep before it
        (re-acquisitions of lost tracks, realignments of new ones) took ``upkeep_ms`` of the frame and the
        search's least part (:meth:`least_ms`; ``tile_work`` as there) no longer fits the time left. Objects
        found again where they were and new tracks settled on their models are worth more to a frame than that
        part, and the upkeep is over within a frame or a few; without upkeep the search runs whatever the time
        left (it must, or a frame whose tracking alone fills the budget would never find a new object).
        ``shape``: the frame's (rows, cols); ``sched``: its scheduler."""
        return upkeep_ms > 0.0 and sched.remaining() < self.least_ms(shape, sched, tile_work)

    def prefilter_pays(self, sched: FrameScheduler, tile_work: float = 0.0) -> bool:
        """Whether the prefilter is worth running before this frame's plan: always, except under a budget while
        the sweep is under way and the prefilter's typical time is at least the extraction time it could save
        (that of the sweep's last part, ``tile_work``: the ``sweep_work`` of the last plan that searched
        something, 0 when that plan searched no part of the sweep; less that of nothing): the part is then
        cheaper to search whole; once the search no longer sweeps, the prefilter runs again. ``sched``: the
        frame's scheduler (its budget and cost model)."""
        if not (self.sweep and tile_work > 0.0 and sched.budget_ms is not None):
            return True
        cost = sched.cost
        if cost.samples("prefilter") < cost.min_samples or cost.samples(self.stage) < cost.min_samples:
            return True
        saving = cost.expected(self.stage, tile_work) - cost.expected(self.stage, 0.0)
        return cost.expected("prefilter") < saving

    def safety_plan(self, shape: tuple[int, int], primary: SearchPlan | None, sched: FrameScheduler) -> SearchPlan:
        """The whole frame of ``shape`` (rows, cols) at full resolution, at the primary plan's sampling step
        and the budget's feature cap: the adapting prefilter's safety search. ``primary``: the frame's primary
        plan (None when there was none); ``sched``: the frame's scheduler."""
        h, w = shape[:2]
        step = primary.sample_step if primary is not None and not primary.empty else (self.sample_step or 1)
        return SearchPlan(None, pixels=h * w, max_features=self.costs.frame_cap(sched), sample_step=step)

    escalation_plan = staticmethod(escalation_plan)  # the module's function, where a planner is at hand

    def observe(self, plan: SearchPlan, n_features: int) -> None:
        """Learn the ``n_features`` keypoints ``plan``'s extraction gave (:meth:`PlanCosts.observe`)."""
        self.costs.observe(plan, n_features)
