"""``coil:DIR``: recognition of COIL-100 style views (``obj<ID>__<deg>.png``).

View 0 of each object is enrolled; every view (0 included, as a control) is composed into a background, and
a detection counts when its outline's centre lies inside the true outline (match rule ``"centre"``); the
level of a scene is the view-angle difference.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from objrec.datasets import DatasetError, angle_difference, image_sizes, load_coil
from objrec.evaluation.config import EvalConfig, task_seed
from objrec.evaluation.kinds.families import scene_kind
from objrec.evaluation.scene_tasks import FRAME_SIZE, ObjectList, SceneSpec, build_scene_tasks, place

__all__ = ["KIND", "coil_scenes", "build"]


def coil_scenes(cfg: EvalConfig) -> tuple[ObjectList, list[SceneSpec]]:
    """The objects (the 0-degree view of each, by absolute path) and scenes of a COIL run: each view
    composed into a background, match rule ``"centre"``."""
    views = load_coil(cfg.path, cfg.objects)
    refs = {v.object_id: v for v in views if v.angle == 0}
    missing = sorted({v.object_id for v in views} - set(refs))
    if missing:
        raise DatasetError(f"{Path(cfg.path) / f'obj{missing[0]}__0.png'}: reference view (0 degrees) not found")
    sizes = image_sizes([v.path for v in views])
    objects = [(refs[k].name, str(Path(refs[k].path).resolve())) for k in sorted(refs)]
    scenes: list[SceneSpec] = []
    for v in views:
        rng = np.random.default_rng(task_seed(cfg.seed, "coil", v.object_id, v.angle))
        size = sizes[str(v.path)]
        H = place(size, rng, scale=cfg.coil_scale, absolute=True)
        diff = angle_difference(v.angle, 0)
        diff = int(diff) if float(diff).is_integer() else diff
        scene = {
            "mode": "compose",
            "background_seed": int(rng.integers(0, 8)),
            "rng_seed": task_seed(cfg.seed, "coil-scene", v.object_id, v.angle),
            "frame_size": list(FRAME_SIZE),
            "place": [{"name": v.name, "source": str(Path(v.path).resolve()), "H": H}],
        }
        meta = {"distortion": "view_angle", "level": diff, "object": v.name, "angle": v.angle}
        scenes.append((f"{v.name}@{v.angle}", scene, meta, "centre"))
    return objects, scenes


def build(cfg: EvalConfig) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """One ``scene`` task per detector and view."""
    return build_scene_tasks(cfg, coil_scenes)


KIND = scene_kind("coil", build)
