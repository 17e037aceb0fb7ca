"""Recognition task lists (``coil``, ``objects``, ``synthetic``): the scenes of a run, one task per detector.

A recognition scene is ``(label, scene spec, meta, match rule)``: the scene spec is what
:func:`~objrec.evaluation.recognition.build_scene` makes the image and its truth from, the match rule what
:func:`~objrec.evaluation.recognition.score_detections` judges a detection by.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from objrec.evaluation.config import EvalConfig, finish_task
from objrec.evaluation.detectors import check_some_task, requested_detectors

__all__ = [
    "FRAME_SIZE",
    "BASE_AREA_FRACTION",
    "RECOGNITION_DETECTORS",
    "SceneSpec",
    "ObjectList",
    "place",
    "build_scene_tasks",
]

#: Size (width, height) of composed scenes.
FRAME_SIZE = (640, 480)
#: Share of the frame an object covers at scale 1 in composed scenes.
BASE_AREA_FRACTION = 0.15
#: The detectors a recognition run compares unless ``--detectors`` names others.
RECOGNITION_DETECTORS = ("surf", "sift", "orb", "akaze")

#: A recognition scene: (label, scene spec, meta, match rule).
SceneSpec = tuple[str, dict[str, Any], dict[str, Any], str]
#: The objects of a recognition run: (name, image source) pairs.
ObjectList = list[tuple[str, str]]


def place(
    size: tuple[int, int],
    rng: np.random.Generator,
    scale: float = 1.0,
    rotation: float = 0.0,
    tilt: tuple[float, float] = (0.0, 0.0),
    absolute: bool = False,
) -> list[list[float]]:
    """Model->frame homography near the frame centre; ``scale`` is relative to the base size (the object
    covering :data:`BASE_AREA_FRACTION` of the frame) unless ``absolute``.
    ``size``: the model image's (width, height); ``rng``: draws the position near the centre; ``rotation``: in-plane
    rotation in degrees; ``tilt``: the perspective terms (see :func:`objrec.scenes.place_homography`)."""
    from objrec.scenes import place_homography

    w, h = size
    fw, fh = FRAME_SIZE
    s0 = 1.0 if absolute else np.sqrt(BASE_AREA_FRACTION * fw * fh / (w * h))
    cx = fw / 2 + rng.uniform(-0.08, 0.08) * fw
    cy = fh / 2 + rng.uniform(-0.08, 0.08) * fh
    return place_homography((w, h), (cx, cy), s0 * scale, rotation, tilt).tolist()


def build_scene_tasks(
    cfg: EvalConfig, scenes: Callable[[EvalConfig], tuple[ObjectList, list[SceneSpec]]]
) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """One ``scene`` task per available detector and scene of a recognition dataset.

    Parameters
    ----------
    cfg : EvalConfig
        The run configuration.
    scenes : callable
        ``scenes(cfg) -> (objects, scenes)``: the kind's objects and scenes.

    Returns
    -------
    tasks : list of dict
        The task specs, with their ids.
    status : dict
        Detector name -> ``{available, note}``; ``opencv-surf-ref`` is marked unavailable here.
    """
    detectors, status = requested_detectors(cfg, RECOGNITION_DETECTORS)
    objects, scene_list = scenes(cfg)
    tasks = []
    for det in detectors:
        if det == "opencv-surf-ref":
            status[det] = {"available": False, "note": "precomputed features of the Oxford images only"}
        if not status[det]["available"]:
            continue
        for label, scene, meta, match in scene_list:
            spec = {
                "type": "scene",
                "detector": det,
                "label": label,
                "objects": [list(o) for o in objects],
                "scene": scene,
                "match": match,
                "corner_tolerance": float(cfg.corner_tolerance),
                "budget_ms": cfg.budget_ms,
                "meta": meta,
            }
            tasks.append(finish_task(spec))
    check_some_task(tasks, status, cfg)
    return tasks, status
