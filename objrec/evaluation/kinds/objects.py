"""``objects:FILE.json``: recognition on an objects+scenes set with ground-truth homographies.

Each scene image is recognised as stored; a detection counts when its mean corner error is within the
tolerance (match rule ``"corners"``); distortion and level come from the scene's tags.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from objrec.datasets import image_sizes, load_objects_dataset
from objrec.evaluation.config import EvalConfig
from objrec.evaluation.kinds.families import scene_kind
from objrec.evaluation.scene_tasks import ObjectList, SceneSpec, build_scene_tasks

__all__ = ["KIND", "objects_file_scenes", "build"]


def objects_file_scenes(cfg: EvalConfig) -> tuple[ObjectList, list[SceneSpec]]:
    """The objects (by absolute path) and scenes of an objects+scenes JSON set: each scene image with its
    ground truth, meta from its tags, match rule ``"corners"``."""
    ds = load_objects_dataset(cfg.path)
    sizes = image_sizes(list(ds.objects.values()) + [s.image_path for s in ds.scenes])
    objects = [(n, str(Path(p).resolve())) for n, p in ds.objects.items()]
    scenes: list[SceneSpec] = []
    for s in ds.scenes:
        scene = {
            "mode": "file",
            "image": str(Path(s.image_path).resolve()),
            "truth": [
                {"name": o.name, "H": o.homography.tolist(), "size": list(sizes[str(ds.objects[o.name])])}
                for o in s.objects
            ],
        }
        tags = s.tags or {}
        meta = {
            "distortion": str(tags.get("distortion", "all")),
            "level": tags.get("level", 0),
            "image": Path(s.image_path).name,
        }
        scenes.append((f"scene{s.index:05d}", scene, meta, "corners"))
    return objects, scenes


def build(cfg: EvalConfig) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """One ``scene`` task per detector and scene of the set."""
    return build_scene_tasks(cfg, objects_file_scenes)


KIND = scene_kind("objects", build)
