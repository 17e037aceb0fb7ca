"""Warm-up before the first frame that counts: kernels compiled, buffers allocated, costs learned."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING

import numpy as np

from objrec.geometry import model_corners
from objrec.imageio import to_gray
from objrec.matching.shortlist import SHORTLIST_SIZE
from objrec.realtime.frame import FrameState, StreamState
from objrec.realtime.guard import collect_in_slack
from objrec.realtime.planner import SearchPlanner, plan_work
from objrec.realtime.searches import confirm_box
from objrec.realtime.sweep import COARSE_SWEEP_SCALE, SWEEP_GRIDS, sweep_tiles
from objrec.realtime.tracker import fit_homography
from objrec.types import Regions, SearchPlan

if TYPE_CHECKING:  # the recognizer warms itself up with this module: it imports it, not the reverse
    from objrec.features.extract import FrameImage
    from objrec.recognizer import Recognizer

__all__ = ["warm_up", "ESCALATION_SHARES", "ESCALATION_SCALES"]

#: The escalation is taught at boxes of these shares of the frame's area (centred): from about the smallest
#: box a budget searches it at (``ESCALATION_PIXELS`` of a 640x480 frame) to a large object's, so that its
#: cost line is learned across the sizes it is asked to predict.
ESCALATION_SHARES = (0.08, 0.2, 0.4)
#: ... each at these resolutions: under a budget a box is searched at the resolution that fits the time left
#: (``objrec.realtime.planner.escalation_plan``), most often well below full resolution, where its cost is
#: mostly the detector's and the matching's fixed part.
ESCALATION_SCALES = (1.0, 0.5)


def warm_up(recognizer: Recognizer, frame_shape: tuple[int, int] = (480, 640), repeats: int = 3) -> None:
    """Run ``recognizer`` without a budget on generated frames of ``frame_shape`` (rows, cols): scenes of up
    to two of its enrolled objects over a generated cover, and the cover alone.

    Each pass also runs the escalation (the secondary detectors, see ``objrec.realtime.searches``) on
    centred boxes of :data:`ESCALATION_SHARES` of the frame: a unit that under a budget runs only when its
    predicted cost fits would otherwise never be learned, the frames' own escalations being few.

    A first pass, at both SURF sampling steps when the planner may choose the coarse one, compiles kernels,
    imports what the units import on first use and allocates buffers; the cost model then forgets it (a
    first call's time says nothing about the next ones, and a unit that seldom runs would keep a compilation
    as its typical time for a long while). ``repeats`` passes follow that teach the cost model, the last at
    the coarse step. With a budget and tracking, a last scene's tracks are then confirmed as a budget confirms
    them (:func:`_confirm_tracks`), in place of the passes' whole-box confirmations. Afterwards nothing of the
    warm-up remains but what should: no tracks, a fresh stream
    record (:class:`~objrec.realtime.frame.StreamState`: the stream's first frame is frame 0), degrade level 0
    (compilation says nothing about the machine's load), the cost model's observations of those passes.
    """
    from objrec.data import synthetic_cover
    from objrec.scenes import compose_scene

    h, w = frame_shape[:2]
    bg = synthetic_cover(99, (w, h))
    db = recognizer.db
    objs = {n: db.image(n) for n in db.names[:2]}
    rng = np.random.default_rng(0)
    step = recognizer.planner.sample_step
    first = [1, 2] if step is None else [step]
    teach = [step] * (repeats - 1) + [2 if step is None else step]
    # The tracks' refit is compiled (or loaded from the kernel cache) here: the warm-up's generated frames
    # need not leave a track that a next frame follows, and a stream's first tracked frame would pay for it.
    fit_homography(model_corners(w, h), model_corners(w, h) * 0.5 + 10.0)
    try:
        for i, s in enumerate(first + teach):
            if i == len(first):
                recognizer.scheduler.cost.clear()
            scene = compose_scene(bg, objs, rng, frame_size=(w, h), area_fraction=(0.1, 0.2)).image
            recognizer.process_with(scene, None, None, s)
            recognizer.process_with(bg, None, None, s)
            image = recognizer.features.frame_image(to_gray(scene))
            _escalate_boxes(recognizer, image)
            _sweep_tiles(recognizer, image, s)
        last: np.ndarray | None = None
        if recognizer.budget_ms is not None and recognizer.tracker.enabled:  # a last scene for its tracks
            last = compose_scene(bg, objs, rng, frame_size=(w, h), area_fraction=(0.1, 0.2)).image
            recognizer.process_with(last, None, None, teach[-1])
        # The passes' confirmations searched whole boxes at full resolution, which a budget never asks for: their
        # times are replaced by confirmations as a budget runs them.
        recognizer.scheduler.cost.forget("confirm")
        if last is not None:
            _confirm_tracks(recognizer, last, teach[-1], repeats)
    finally:
        # Its reads of shortlisted objects came from wherever the database's pages were; the frames' own reads
        # teach the unit (its prior admits the first).
        recognizer.scheduler.cost.forget("read")
        # The generated frames are no part of the stream: its tracks, smoothed corners and record start afresh
        # (the stream's first frame is frame 0), and an adapting prefilter starts from the camera's scene.
        recognizer.reset()
        recognizer.stream = StreamState()
        recognizer.degrade.reset()
        adapter = getattr(recognizer, "adapter", None)
        if adapter is not None:
            adapter.reset()
    collect_in_slack(float("inf"))


def _confirm_tracks(recognizer: Recognizer, scene: np.ndarray, step: int | None, repeats: int) -> None:
    """Each track the last pass started, confirmed ``repeats`` times in its ``scene`` as a budget confirms it (its
    box at the budget's resolution, :data:`~objrec.realtime.searches.CONFIRM_PIXELS`), each a scheduler unit of
    a frame without a budget: the cost model then starts the stream from a few confirmations at the sizes it
    predicts. Learned only from the stream's own runs, the first of which pay for what the stream does for the
    first time, a unit predicted from two or three slow runs would not be admitted again (its typical time, by
    which a unit left out is tried again, is set by those runs too). ``step``: SURF's sampling step of the pass."""
    tracker, sched = recognizer.tracker, recognizer.scheduler
    image = recognizer.features.frame_image(to_gray(scene))
    state = FrameState(scene, image, recognizer.budget_ms, step)
    frame = recognizer.stream.index
    for _ in range(repeats):
        for t in list(tracker.tracks):
            box, scale, size = confirm_box(state, t)
            if box is not None:
                sched.start(None, None)
                sched.run("confirm", recognizer.looks.confirmed, state, box, t, scale, tracker, frame, size=size)


def _sweep_tiles(recognizer: Recognizer, image: FrameImage, step: int | None) -> None:
    """The primary extraction on one tile of each grid of the sweep (``SWEEP_GRIDS``, searched as the sweep
    searches them, each a crop of its own) and on the sweep's coarse pass at sampling ``step``, each a scheduler
    unit of a frame without a budget: the cost model learns the extraction across the sizes the sweep asks it
    to predict, not at the whole frame's size alone (with objects tracked, a search predicted not to fit is
    left out, so a prediction learned at one size only would never be corrected)."""
    sched, primary = recognizer.scheduler, recognizer.primary
    h, w = image.host.shape[:2]
    tiles = [sweep_tiles(w, h, cols, rows)[0] for cols, rows in SWEEP_GRIDS]
    plans = [
        SearchPlan(Regions.from_boxes([t]), pixels=(t[2] - t[0]) * (t[3] - t[1]), sample_step=step or 1, crop=t)
        for t in tiles
    ]
    plans.append(SearchPlan(None, COARSE_SWEEP_SCALE, pixels=w * h, sample_step=step or 1))
    for plan in plans:
        sched.start(None, None)
        sched.run(
            "features", recognizer.features.extract, image, primary, plan,
            size=plan_work(plan), stage=f"features_{primary}",
        )  # fmt: skip


def _escalate_boxes(recognizer: Recognizer, image: FrameImage) -> None:
    """The escalation of each secondary detector kind on centred boxes of :data:`ESCALATION_SHARES` of the
    frame ``image`` (a :class:`~objrec.features.extract.FrameImage`) at each of :data:`ESCALATION_SCALES`, each
    a scheduler unit of a frame without a budget (the cost model learns it), matched as a frame's escalation
    matches, against a few objects (:meth:`~objrec.realtime.searches.SecondLooks.suspects`)."""
    looks, sched = recognizer.looks, recognizer.scheduler
    h, w = image.host.shape[:2]
    among = looks.views_of(list(recognizer.db.names[:SHORTLIST_SIZE])) or None
    for kind in looks.kinds[1:]:
        stage = f"escalate_{kind}"
        for share in ESCALATION_SHARES:
            bw, bh = int(w * np.sqrt(share)), int(h * np.sqrt(share))
            x0, y0 = (w - bw) // 2, (h - bh) // 2
            full = SearchPlanner.escalation_plan((x0, y0, x0 + bw, y0 + bh))
            for scale in ESCALATION_SCALES:
                plan = dataclasses.replace(full, scale=scale)
                sched.start(None, None)
                sched.run("escalate", looks.search, image, kind, plan, among, size=plan_work(plan), stage=stage)
