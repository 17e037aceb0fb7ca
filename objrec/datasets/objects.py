"""Generic recognition datasets: object images, scene images and ground truth in one JSON file.

Schema (``version`` 1)
----------------------
.. code-block:: json

    {
      "format": "objrec-objects",
      "version": 1,
      "objects": {"book": "objects/book.png", "box": "objects/box.png"},
      "scenes": [
        {
          "image": "scenes/0001.jpg",
          "objects": [
            {"name": "book", "homography": [[1.0, 0.0, 40.0], [0.0, 1.0, 25.0], [0.0, 0.0, 1.0]]}
          ],
          "tags": {"distortion": "blur", "level": 2}
        },
        {"image": "scenes/0002.jpg", "objects": []}
      ]
    }

- ``format`` and ``version`` are optional; when present they must be ``"objrec-objects"`` and ``1``.
- ``objects`` maps each object name to its model image. ``scenes`` lists the scene images.
- Paths are relative to the folder of the JSON file (absolute paths also work).
- Each scene lists the objects visible in it; ``homography`` (3x3, row-major) maps model-image pixels to
  scene pixels, as :class:`objrec.types.Detection` does. A scene with no objects is a negative example.
- ``tags`` is optional and free-form (strings, numbers, booleans), e.g. the distortion type and level.
- Unknown keys are ignored, so tools can carry extra information.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from objrec.datasets._common import DatasetError, load_image
from objrec.geometry import check_homography

__all__ = ["GroundTruthObject", "Scene", "ObjectsDataset", "load_objects_dataset", "FORMAT", "VERSION"]

FORMAT = "objrec-objects"
VERSION = 1


@dataclass(frozen=True, eq=False)
class GroundTruthObject:
    """An object placed in a scene: its name and the homography from its model image to the scene."""

    name: str
    homography: np.ndarray = field(repr=False)


@dataclass(frozen=True, eq=False)
class Scene:
    """One scene image and the objects it shows.

    Attributes
    ----------
    index : int
        Position in the ``scenes`` list.
    image_path : Path
    objects : tuple of GroundTruthObject
    tags : dict
    """

    index: int
    image_path: Path
    objects: tuple[GroundTruthObject, ...]
    tags: dict[str, Any] = field(default_factory=dict)

    def image(self, gray: bool = False) -> np.ndarray:
        return load_image(self.image_path, gray)


@dataclass(frozen=True, eq=False)
class ObjectsDataset:
    """Objects, scenes and ground truth, as loaded by :func:`load_objects_dataset`.

    Attributes
    ----------
    path : Path
        The JSON file.
    objects : dict
        Object name to model image path.
    scenes : list of Scene
    """

    path: Path
    objects: dict[str, Path]
    scenes: list[Scene]

    def object_image(self, name: str, gray: bool = False) -> np.ndarray:
        """The image of object ``name`` (BGR, or gray with ``gray``); KeyError for an unknown name."""
        if name not in self.objects:
            raise KeyError(f"{name!r}: not an object of {self.path}")
        return load_image(self.objects[name], gray)

    def to_json(self) -> dict[str, Any]:
        """The dataset as a JSON document (paths relative to the JSON file where possible)."""
        base = self.path.parent

        def rel(p: Path) -> str:
            try:
                return p.relative_to(base).as_posix()
            except ValueError:
                return str(p)

        return {
            "format": FORMAT,
            "version": VERSION,
            "objects": {k: rel(v) for k, v in self.objects.items()},
            "scenes": [
                {
                    "image": rel(s.image_path),
                    "objects": [{"name": o.name, "homography": o.homography.tolist()} for o in s.objects],
                    **({"tags": dict(s.tags)} if s.tags else {}),
                }
                for s in self.scenes
            ],
        }


def _path(base: Path, value: Any, where: str) -> Path:
    if not isinstance(value, str) or not value:
        raise DatasetError(f"{where}: expected a non-empty path string, got {value!r}")
    p = Path(value)
    p = p if p.is_absolute() else base / p
    if not p.is_file():
        raise DatasetError(f"{where}: image file {p} not found")
    return p


def _objects_in_list(value: Any, not_list: str, where: str, not_object: str) -> Iterator[tuple[int, str, dict]]:
    """The items of a JSON list that must hold JSON objects, as ``(index, location, item)``.

    Raises :class:`DatasetError` with the message ``not_list`` when ``value`` is not a list, and with
    ``location: not_object`` (``{type}`` replaced by the item's type name) for an item that is not an
    object; the location of item ``k`` is ``where[k]``.
    """
    if not isinstance(value, list):
        raise DatasetError(not_list)
    for k, item in enumerate(value):
        location = f"{where}[{k}]"
        if not isinstance(item, dict):
            raise DatasetError(f"{location}: {not_object.format(type=type(item).__name__)}")
        yield k, location, item


def load_objects_dataset(json_path: str | os.PathLike) -> ObjectsDataset:
    """Read and validate an objects + scenes + ground truth JSON file (schema in the module docstring).

    Every referenced file must exist; images are read only when asked for.

    Raises
    ------
    DatasetError
        Naming the JSON file and the offending entry (``scenes[3].objects[0].homography``...) for invalid
        JSON, a wrong schema, unknown object names, bad homographies or missing images.
    """
    p = Path(json_path)
    if not p.is_file():
        raise DatasetError(f"{p}: ground-truth JSON file not found")
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{p}: not valid JSON ({exc})") from None
    if not isinstance(doc, dict):
        raise DatasetError(f"{p}: expected a JSON object at the top level, got {type(doc).__name__}")
    if doc.get("format", FORMAT) != FORMAT:
        raise DatasetError(f"{p}: format {doc.get('format')!r} is not {FORMAT!r}")
    if doc.get("version", VERSION) != VERSION:
        raise DatasetError(f"{p}: version {doc.get('version')!r} is not supported (expected {VERSION})")
    base = p.parent

    objs = doc.get("objects")
    if not isinstance(objs, dict) or not objs:
        raise DatasetError(f"{p}: 'objects' must be a non-empty mapping of name to image path")
    objects = {}
    for name, value in objs.items():
        if not name:
            raise DatasetError(f"{p}: objects: empty object name")
        objects[name] = _path(base, value, f"{p}: objects[{name!r}]")

    scenes = []
    for k, where, s in _objects_in_list(
        doc.get("scenes"), f"{p}: 'scenes' must be a list", f"{p}: scenes", "expected an object, got {type}"
    ):
        image = _path(base, s.get("image"), f"{where}.image")
        entries = s.get("objects", [])
        placed = []
        for _, w, o in _objects_in_list(
            entries,
            f"{where}.objects: expected a list",
            f"{where}.objects",
            "expected an object with 'name' and 'homography'",
        ):
            name = o.get("name")
            if not isinstance(name, str) or name not in objects:
                raise DatasetError(f"{w}.name: {name!r} is not one of the objects {sorted(objects)}")
            if "homography" not in o:
                raise DatasetError(f"{w}.homography: missing")
            placed.append(
                GroundTruthObject(
                    name, check_homography(o["homography"], f"{w}.homography", normalise=True, error=DatasetError)
                )
            )
        tags = s.get("tags", {})
        if not isinstance(tags, dict):
            raise DatasetError(f"{where}.tags: expected an object")
        scenes.append(Scene(k, image, tuple(placed), dict(tags)))
    return ObjectsDataset(p, objects, scenes)
