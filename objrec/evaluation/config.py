"""What an ``objrec eval`` run was asked to do, and the identity of its tasks.

A task is a plain JSON spec (paths, homographies, seeds, parameters) and a pure function of it, so it can run
in this process or on any Dask worker that sees the same files, and a rerun can skip every task whose id
already has a record. The id is ``<detector>/<label>#<hash>``, the hash being a digest of the canonical JSON of
the spec: changing a parameter (``--max-features``, ``--budget-ms``, a sweep level) gives new ids, so stale
records are never reused.
"""

from __future__ import annotations

import hashlib
import json
import zlib
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EvalConfig", "task_id", "finish_task", "task_seed"]


@dataclass
class EvalConfig:
    """Everything ``objrec eval`` was asked to do (stored in ``report.json`` under ``config``).

    Attributes
    ----------
    kind : str
        The dataset kind (``oxford``, ``hpatches``, ``coil``, ``synthetic``, ``pairs``, ``catalogue``, ``ukbench``,
        ``video``, ...).
    path : str
        The dataset's folder or file.
    out : str
        The report folder.
    detectors : list of str or None
        The recognizers (detector names) evaluated (None: the kind's default).
    budget_ms : float or None
        The frame budget in ms (None: none).
    workers, scheduler : int or None, str or None
        Local Dask worker processes; the address of a running Dask scheduler (both None: in this process).
    sequences : list of str or None
        oxford/hpatches: only these sequences; pairs: only these sets or pairs; video: only these clips.
    pairs : list of int or None
        oxford/hpatches: only pairs 1->N for these N.
    max_features : int
        Keep the N strongest features per image (0: all).
    surf_reference : str or None
        The folder of OpenCV SURF reference ``.npz`` files (None: beside the Oxford root).
    objects : list of int or None
        coil: only these object ids; ukbench: one number N, the first N objects.
    coil_scale : float
        coil: the views' scale in the scene.
    sweeps : list of str or None
        synthetic: only these sweeps.
    repeats : int
        synthetic: scenes per object and level.
    seed : int
        Seed of scene placement and backgrounds.
    corner_tolerance : float
        A detection is correct within this mean corner error in pixels.
    ratio : float
        Lowe's ratio-test threshold.
    ransac_px : float
        RANSAC's inlier threshold in pixels for the feature evaluation's homographies.
    views : str or None
        pairs: the synthesised views image A is enrolled with.
    tilts : list of float or None
        pairs: the tilted views of image B searched where candidates stay unsure (``Recognizer(tilts=...)``).
    progress, plots : bool
        Show progress bars; draw the report's plots.
    distractors : list of str or None
        catalogue: folders whose every image is enrolled too.
    query_side : int
        catalogue, ukbench: query photos resized to this long side in pixels (0: as stored).
    without_query_objects : bool
        catalogue: the labelled objects are left out of the database.
    shape : str or None
        ukbench: the shape every object is enrolled with (None: solid).
    protocol : str
        video: ``recognition`` or ``tracking`` (frame 0 rectified through its ground truth enrolled).
    layout : str or None
        video: the dataset's layout (None: detected).
    realtime : bool
        video: frames handed over at the footage's rate, those that come while busy dropped.
    notes : list of str
        Notes gathered while building the tasks.
    """

    kind: str
    path: str
    out: str
    detectors: list[str] | None = None
    budget_ms: float | None = None
    workers: int | None = None
    scheduler: str | None = None
    sequences: list[str] | None = None
    pairs: list[int] | None = None
    max_features: int = 0
    surf_reference: str | None = None
    objects: list[int] | None = None
    coil_scale: float = 2.0
    sweeps: list[str] | None = None
    repeats: int = 2
    seed: int = 0
    corner_tolerance: float = 10.0
    ratio: float = 0.8
    ransac_px: float = 3.0
    views: str | None = None
    tilts: list[float] | None = None
    progress: bool = True
    plots: bool = True
    distractors: list[str] | None = None
    query_side: int = 640
    without_query_objects: bool = False
    shape: str | None = None
    protocol: str = "recognition"
    layout: str | None = None
    realtime: bool = False
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """Every option as a JSON-ready dict (the notes gathered while building tasks left out)."""
        d = dict(self.__dict__)
        d.pop("notes", None)
        return d


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


def task_id(spec: dict[str, Any]) -> str:
    """``<detector>/<label>#<12 hex digits of sha1(canonical spec)>``."""
    body = {k: v for k, v in spec.items() if k != "id"}
    digest = hashlib.sha1(_canonical(body).encode()).hexdigest()[:12]
    return f"{spec['detector']}/{spec['label']}#{digest}"


def finish_task(spec: dict[str, Any]) -> dict[str, Any]:
    """``spec`` with its :func:`task_id` stored under ``"id"`` (the spec itself, changed in place)."""
    spec["id"] = task_id(spec)
    return spec


def task_seed(*parts: Any) -> int:
    """A 31-bit seed that is a pure function of ``parts`` (CRC-32 of their ``/``-joined text)."""
    return zlib.crc32("/".join(map(str, parts)).encode()) & 0x7FFFFFFF
