"""Warm-up before the first frame that counts: kernels compiled, buffers allocated, costs learned."""

from __future__ import annotations

from typing import Any

import numpy as np

from objrec.realtime.guard import collect_in_slack

__all__ = ["warm_up"]


def warm_up(recognizer: Any, frame_shape: tuple[int, int] = (480, 640), repeats: int = 3) -> None:
    """Run ``recognizer`` without a budget on generated frames of ``frame_shape`` (rows, cols): scenes of up
    to two of its enrolled objects over a generated cover, and the cover alone.

    A first pass, at both SURF sampling steps when the planner may choose the coarse one, compiles kernels,
    imports what the units import on first use and allocates buffers; the cost model then forgets it (a
    first call's time says nothing about the next ones, and a unit that seldom runs would keep a compilation
    as its typical time for a long while). ``repeats`` passes follow that teach the cost model, the last at
    the coarse step. Afterwards nothing of the warm-up remains but what should: no tracks, degrade level 0
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
    try:
        for i, s in enumerate(first + teach):
            if i == len(first):
                recognizer.scheduler.cost.clear()
            scene = compose_scene(bg, objs, rng, frame_size=(w, h), area_fraction=(0.1, 0.2)).image
            recognizer.process_with(scene, None, None, s)
            recognizer.process_with(bg, None, None, s)
    finally:
        recognizer.tracker.reset()
        recognizer.degrade.reset()
        if getattr(recognizer, "adapter", None) is not None:
            recognizer.adapter.reset()  # the generated frames are not the camera's scene
    collect_in_slack(float("inf"))
