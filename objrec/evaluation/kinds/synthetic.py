"""``synthetic:DIR`` or ``synthetic:demo``: recognition under synthetic corruption sweeps.

The objects are the images of a folder (or, for ``synthetic:demo``, :func:`objrec.data.sample_objects`); each
sweep of :data:`~objrec.evaluation._help.SWEEPS` places every object at every level in composed scenes with
exact ground truth (:func:`objrec.scenes.compose_scene`), ``--repeats`` times, and object-free negative scenes
follow.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from objrec.datasets import load_object_folder
from objrec.evaluation._help import SWEEPS
from objrec.evaluation.config import EvalConfig, task_seed
from objrec.evaluation.kinds.families import scene_kind
from objrec.evaluation.recognition import load_source
from objrec.evaluation.scene_tasks import FRAME_SIZE, ObjectList, SceneSpec, build_scene_tasks, place

__all__ = ["KIND", "synthetic_objects", "synthetic_scenes", "sweep_scene", "sweep_scenes", "negative_scenes", "build"]


def synthetic_objects(path: str) -> ObjectList:
    """``(name, source)`` of the objects: ``demo:<name>`` sources for ``demo``, else the folder's images."""
    if path == "demo":
        from objrec.data import sample_objects

        return [(n, f"demo:{n}") for n in sample_objects()]
    return load_object_folder(path)


# Sweep -> (key of the scene's ``distortion`` dict, type of its value) for the photometric sweeps.
_DISTORTION_PARAMS: dict[str, tuple[str, type]] = {
    "blur": ("blur_sigma", float),
    "motion_blur": ("motion_blur", int),
    "illumination": ("gain", float),
    "gamma": ("gamma", float),
    "noise": ("noise_sigma", float),
    "jpeg": ("jpeg_quality", int),
}


def sweep_scene(sweep: str, level: float, size: tuple[int, int], rng: np.random.Generator) -> dict[str, Any]:
    """Placement and distortion of one object for one sweep level.
    ``sweep``: the sweep's name; ``level``: its level; ``size``: the model image's (width, height); ``rng``: the draws'
    source."""
    geo: dict[str, Any] = {}
    dist: dict[str, Any] = {}
    occ = 0.0
    if sweep in ("rotation", "scale"):
        geo[sweep] = float(level)
    elif sweep == "viewpoint":
        sign = rng.choice([-1.0, 1.0])
        geo["tilt"] = (float(sign * level), 0.0)
    elif sweep == "occlusion":
        occ = float(level)
    elif sweep == "outside":
        from objrec.scenes import place_partly_outside

        H = place_partly_outside(size, FRAME_SIZE, float(level), rng)
        return {"H": H.tolist(), "distortion": dist, "occlusion": occ}
    elif sweep in _DISTORTION_PARAMS:
        key, cast = _DISTORTION_PARAMS[sweep]
        dist[key] = cast(level)
    return {"H": place(size, rng, **geo), "distortion": dist, "occlusion": occ}


def sweep_scenes(cfg: EvalConfig, objects: ObjectList, sizes: dict[str, tuple[int, int]]) -> list[SceneSpec]:
    """One scene per sweep, level, repeat and object of a synthetic run.

    Parameters
    ----------
    cfg : EvalConfig
        The run configuration (``kind == "synthetic"``); ``sweeps`` and ``repeats`` are checked here.
    objects : ObjectList
        The objects to place.
    sizes : dict
        Object name -> image size (width, height).

    Returns
    -------
    list of SceneSpec
        In the order sweep, level, repeat, object; match rule ``"corners"`` (``"visible"`` for ``outside``).
    """
    sweeps = cfg.sweeps or list(SWEEPS)
    for sw in sweeps:
        if sw not in SWEEPS:
            raise ValueError(f"--sweeps: unknown sweep {sw!r} (choose from {', '.join(SWEEPS)})")
    if cfg.repeats < 1:
        raise ValueError(f"--repeats: expected a positive integer, got {cfg.repeats}")
    scenes: list[SceneSpec] = []
    for sw in sweeps:
        for level in SWEEPS[sw]:
            for r in range(cfg.repeats):
                for name, src in objects:
                    rng = np.random.default_rng(task_seed(cfg.seed, sw, level, r, name))
                    g = sweep_scene(sw, level, sizes[name], rng)
                    scene = {
                        "mode": "compose",
                        "background_seed": int(rng.integers(0, 8)),
                        "rng_seed": task_seed(cfg.seed, "scene", sw, level, r, name),
                        "frame_size": list(FRAME_SIZE),
                        "place": [{"name": name, "source": src, "H": g["H"]}],
                        "occlusion": g["occlusion"],
                        "distortion": g["distortion"],
                    }
                    meta = {"distortion": sw, "level": level, "object": name, "repeat": r}
                    match = "visible" if sw == "outside" else "corners"
                    scenes.append((f"{sw}={level:g}/{name}/r{r}", scene, meta, match))
    return scenes


def negative_scenes(cfg: EvalConfig) -> list[SceneSpec]:
    """The ``2 * cfg.repeats`` background-only scenes of a synthetic run (meta distortion ``"negative"``)."""
    scenes: list[SceneSpec] = []
    for r in range(2 * cfg.repeats):
        scene = {
            "mode": "compose",
            "background_seed": r % 8,
            "rng_seed": task_seed(cfg.seed, "negative", r),
            "frame_size": list(FRAME_SIZE),
            "place": [],
        }
        scenes.append((f"negative/r{r}", scene, {"distortion": "negative", "level": 0, "repeat": r}, "corners"))
    return scenes


def synthetic_scenes(cfg: EvalConfig) -> tuple[ObjectList, list[SceneSpec]]:
    """The objects of a synthetic run (for ``synthetic:demo``, the embedded samples) and its scenes: the
    sweep scenes (:func:`sweep_scenes`), then the negative scenes."""
    objects = synthetic_objects(cfg.path)
    sizes = {}
    for name, src in objects:
        img = load_source(src)
        sizes[name] = (int(img.shape[1]), int(img.shape[0]))
    return objects, sweep_scenes(cfg, objects, sizes) + negative_scenes(cfg)


def build(cfg: EvalConfig) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """One ``scene`` task per detector and sweep scene, then per negative scene."""
    return build_scene_tasks(cfg, synthetic_scenes)


KIND = scene_kind("synthetic", build)
