"""COIL-100 style object folders: ``obj<ID>__<deg>.png``, one image per object and turntable angle.

References
----------
S. A. Nene, S. K. Nayar, H. Murase, "Columbia Object Image Library (COIL-100)", Technical Report
CUCS-006-96, Columbia University, 1996.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from objrec.datasets._common import IMAGE_EXTENSIONS, DatasetError, load_image

__all__ = ["ObjectView", "load_coil", "view_pairs", "angle_difference"]

_NAME = re.compile(r"^obj(\d+)__(\d+)$")


@dataclass(frozen=True)
class ObjectView:
    """One view of one object.

    Attributes
    ----------
    object_id : int
        The ``<ID>`` of ``obj<ID>__<deg>``.
    angle : int
        Turntable angle in degrees, 0..359.
    path : Path
    """

    object_id: int
    angle: int
    path: Path

    @property
    def name(self) -> str:
        """``"obj<ID>"``, the object's name (as enrolled in a model database)."""
        return f"obj{self.object_id}"

    def image(self, gray: bool = False) -> np.ndarray:
        return load_image(self.path, gray)


def angle_difference(a: float, b: float) -> float:
    """Smallest absolute difference of two angles in degrees (0..180).
    ``a``, ``b``: the angles in degrees."""
    d = abs(a - b) % 360
    return float(min(d, 360 - d))


def load_coil(root: str | os.PathLike, objects: list[int] | None = None) -> list[ObjectView]:
    """Views in a COIL-100 style folder, sorted by object then angle.

    Parameters
    ----------
    root : path
        Folder holding ``obj<ID>__<deg>.<ext>`` files (other files are ignored).
    objects : list of int, optional
        Keep only these object ids.

    Returns
    -------
    list of ObjectView

    Raises
    ------
    DatasetError
        When the folder is missing, holds no views, a file name has an angle outside 0..359, an object id
        asked for is absent, or two files give the same object and angle.
    """
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"{root}: dataset folder not found")
    views: dict[tuple[int, int], Path] = {}
    for p in sorted(root.iterdir()):
        if not p.is_file() or p.suffix.lower() not in IMAGE_EXTENSIONS:
            continue
        m = _NAME.match(p.stem)
        if m is None:
            continue
        oid, angle = int(m.group(1)), int(m.group(2))
        if not 0 <= angle < 360:
            raise DatasetError(f"{p}: angle {angle} outside 0..359 degrees")
        if (oid, angle) in views:
            raise DatasetError(f"{p}: duplicate view of obj{oid} at {angle} degrees (also {views[(oid, angle)]})")
        views[(oid, angle)] = p
    if not views:
        raise DatasetError(f"{root}: no obj<ID>__<deg> images found")
    if objects is not None:
        present = {k[0] for k in views}
        missing = sorted(set(objects) - present)
        if missing:
            raise DatasetError(f"{root}: objects {missing} not found")
        views = {k: v for k, v in views.items() if k[0] in set(objects)}
    return [ObjectView(oid, angle, p) for (oid, angle), p in sorted(views.items())]


def view_pairs(views: list[ObjectView], reference_angle: int = 0) -> list[tuple[ObjectView, ObjectView, float]]:
    """``(reference view, other view, angle difference)`` for every object that has the reference angle.

    The reference view is what gets enrolled; the others are the queries of a recognition-vs-view-angle
    curve.
    ``views``: the dataset's views; ``reference_angle``: the enrolled view's angle in degrees.
    """
    ref = {v.object_id: v for v in views if v.angle == reference_angle}
    return [
        (ref[v.object_id], v, angle_difference(v.angle, reference_angle))
        for v in views
        if v.object_id in ref and v.angle != reference_angle
    ]
