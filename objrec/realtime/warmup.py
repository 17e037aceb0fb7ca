"""Warm-up before the first frame that counts: kernels compiled, buffers allocated, costs learned."""

from __future__ import annotations

from typing import Any

import numpy as np

from objrec.realtime.guard import collect_in_slack

__all__ = ["warm_up"]


def warm_up(recognizer: Any, frame_shape: tuple[int, int] = (480, 640), repeats: int = 3) -> None:
    """Run ``recognizer`` without a budget on generated frames of ``frame_shape`` (rows, cols): scenes of up
    to two of its enrolled objects over a generated cover, and the cover alone.

    The last repeat runs at SURF's coarse sampling step when the planner may choose it, so its buffers
    exist and the cost model has seen both steps. Afterwards nothing of the warm-up remains but what
    should: no tracks, degrade level 0 (compilation says nothing about the machine's load), the cost
    model's observations kept.
    """
    from objrec.data import synthetic_cover
    from objrec.scenes import compose_scene

    h, w = frame_shape[:2]
    bg = synthetic_cover(99, (w, h))
    db = recognizer.db
    objs = {n: db.image(n) for n in db.names[:2]}
    rng = np.random.default_rng(0)
    sched = recognizer.scheduler
    planner = recognizer.planner
    budget, sched.budget_ms = sched.budget_ms, None
    step = planner.sample_step
    try:
        for i in range(repeats):
            if step is None and i == repeats - 1:
                planner.sample_step = 2
            recognizer.process(compose_scene(bg, objs, rng, frame_size=(w, h), area_fraction=(0.1, 0.2)).image)
            recognizer.process(bg)
    finally:
        planner.sample_step = step
        sched.budget_ms = budget
        recognizer.tracker.reset()
        recognizer.degrade.reset()
        if getattr(recognizer, "adapter", None) is not None:
            recognizer.adapter.reset()  # the generated frames are not the camera's scene
    collect_in_slack(float("inf"))
