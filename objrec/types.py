"""Shared result types that flow between the pipeline stages.

Every type is a small dataclass of arrays, validated on construction (the style of supervision's
``Detections``): a stage that finds nothing returns ``X.empty()``, never ``None`` and never raises.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["Features", "Regions", "Detection", "FrameResult", "Failure"]


def _as(name: str, a: Any, dtype: Any, shape_tail: tuple[int | None, ...], n: int | None) -> np.ndarray:
    """Return ``a`` as a contiguous array of ``dtype`` or raise a ``ValueError`` that names ``name``."""
    arr = np.ascontiguousarray(np.asarray(a), dtype=dtype)
    want_ndim = 1 + len(shape_tail)
    if arr.ndim != want_ndim:
        raise ValueError(f"{name}: expected {want_ndim}-d array, got shape {arr.shape}")
    if n is not None and arr.shape[0] != n:
        raise ValueError(f"{name}: expected {n} rows (one per keypoint/box), got {arr.shape[0]}")
    for axis, want in enumerate(shape_tail, start=1):
        if want is not None and arr.shape[axis] != want:
            raise ValueError(f"{name}: expected shape (N, {', '.join(str(s) for s in shape_tail)}), got {arr.shape}")
    return arr


@dataclass(frozen=True, eq=False)
class Features:
    """Keypoints and descriptors as a struct of arrays, in the convention OpenCV uses for the detector.

    Attributes
    ----------
    xy : (N, 2) float32
        Keypoint position (x, y) in pixels of the full image.
    size : (N,) float32
        Keypoint diameter in pixels (OpenCV ``KeyPoint.size``).
    angle : (N,) float32
        Orientation in degrees, 0..360 (OpenCV ``KeyPoint.angle``; -1 where undefined).
    response : (N,) float32
        Detector response (OpenCV ``KeyPoint.response``).
    octave : (N,) int32
        OpenCV's packed octave field.
    laplacian : (N,) int8
        Sign of the Hessian trace (+1/-1) for SURF, 0 where undefined (SIFT).
    descriptors : (N, D) float32
        One descriptor per keypoint.
    kind : str
        Which descriptor family ("sift", "surf", ...): descriptors of different kinds never match.
    """

    xy: np.ndarray
    size: np.ndarray
    angle: np.ndarray
    response: np.ndarray
    octave: np.ndarray
    laplacian: np.ndarray
    descriptors: np.ndarray
    kind: str = "unknown"

    def __post_init__(self) -> None:
        xy = _as("xy", self.xy, np.float32, (2,), None)
        n = xy.shape[0]
        set_ = object.__setattr__
        set_(self, "xy", xy)
        set_(self, "size", _as("size", self.size, np.float32, (), n))
        set_(self, "angle", _as("angle", self.angle, np.float32, (), n))
        set_(self, "response", _as("response", self.response, np.float32, (), n))
        set_(self, "octave", _as("octave", self.octave, np.int32, (), n))
        set_(self, "laplacian", _as("laplacian", self.laplacian, np.int8, (), n))
        set_(self, "descriptors", _as("descriptors", self.descriptors, np.float32, (None,), n))
        if not isinstance(self.kind, str) or not self.kind:
            raise ValueError(f"kind: expected a non-empty str, got {self.kind!r}")

    def __len__(self) -> int:
        return int(self.xy.shape[0])

    @property
    def descriptor_size(self) -> int:
        return int(self.descriptors.shape[1])

    @classmethod
    def empty(cls, descriptor_size: int = 128, kind: str = "unknown") -> Features:
        """A valid result with no keypoints (the answer for a blank image or an empty mask)."""
        z = np.zeros(0, np.float32)
        return cls(
            xy=np.zeros((0, 2), np.float32),
            size=z,
            angle=z,
            response=z,
            octave=np.zeros(0, np.int32),
            laplacian=np.zeros(0, np.int8),
            descriptors=np.zeros((0, descriptor_size), np.float32),
            kind=kind,
        )

    def subset(self, index: np.ndarray) -> Features:
        """Features selected by a boolean mask or an index array."""
        return Features(
            self.xy[index],
            self.size[index],
            self.angle[index],
            self.response[index],
            self.octave[index],
            self.laplacian[index],
            self.descriptors[index],
            self.kind,
        )

    def shifted(self, dx: float, dy: float) -> Features:
        """The same features with positions translated (crop coordinates to frame coordinates)."""
        return Features(
            self.xy + np.float32([dx, dy]),
            self.size,
            self.angle,
            self.response,
            self.octave,
            self.laplacian,
            self.descriptors,
            self.kind,
        )

    @staticmethod
    def concatenate(parts: list[Features]) -> Features:
        if not parts:
            raise ValueError("concatenate: need at least one Features (use Features.empty())")
        kinds = {p.kind for p in parts}
        dims = {p.descriptor_size for p in parts}
        if len(kinds) != 1 or len(dims) != 1:
            raise ValueError(f"concatenate: mixed kinds {sorted(kinds)} or descriptor sizes {sorted(dims)}")
        cat = np.concatenate
        return Features(
            cat([p.xy for p in parts]),
            cat([p.size for p in parts]),
            cat([p.angle for p in parts]),
            cat([p.response for p in parts]),
            cat([p.octave for p in parts]),
            cat([p.laplacian for p in parts]),
            cat([p.descriptors for p in parts]),
            parts[0].kind,
        )

    def to_arrays(self, prefix: str = "") -> dict[str, np.ndarray]:
        """Plain arrays for ``np.savez`` (the kind travels in the manifest)."""
        names = ("xy", "size", "angle", "response", "octave", "laplacian", "descriptors")
        return {prefix + k: getattr(self, k) for k in names}

    @classmethod
    def from_arrays(cls, arrays: Any, prefix: str = "", kind: str = "unknown") -> Features:
        names = ("xy", "size", "angle", "response", "octave", "laplacian", "descriptors")
        return cls(*(arrays[prefix + k] for k in names), kind=kind)


@dataclass(frozen=True, eq=False)
class Regions:
    """Image regions proposed by the prefilter, best first.

    Attributes
    ----------
    boxes : (N, 4) int32
        ``(x0, y0, x1, y1)`` in pixels, x1/y1 exclusive.
    scores : (N,) float32
        Prefilter score of each box (higher is more likely to hold an object).
    """

    boxes: np.ndarray
    scores: np.ndarray

    def __post_init__(self) -> None:
        boxes = _as("boxes", self.boxes, np.int32, (4,), None)
        scores = _as("scores", self.scores, np.float32, (), boxes.shape[0])
        if boxes.size and (np.any(boxes[:, 2] <= boxes[:, 0]) or np.any(boxes[:, 3] <= boxes[:, 1])):
            raise ValueError("boxes: every box needs x1 > x0 and y1 > y0")
        object.__setattr__(self, "boxes", boxes)
        object.__setattr__(self, "scores", scores)

    def __len__(self) -> int:
        return int(self.boxes.shape[0])

    @classmethod
    def empty(cls) -> Regions:
        return cls(np.zeros((0, 4), np.int32), np.zeros(0, np.float32))

    @classmethod
    def full(cls, width: int, height: int) -> Regions:
        """One region covering the whole frame (what 'no prefilter' means)."""
        return cls(np.array([[0, 0, width, height]], np.int32), np.ones(1, np.float32))

    def area_fraction(self, width: int, height: int) -> float:
        """Fraction of the frame covered by the union of the boxes."""
        cover = np.zeros((height, width), bool)
        for x0, y0, x1, y1 in self.boxes:
            cover[max(y0, 0) : max(y1, 0), max(x0, 0) : max(x1, 0)] = True
        return float(cover.mean()) if cover.size else 0.0


@dataclass(frozen=True, eq=False)
class Detection:
    """One recognised object.

    Attributes
    ----------
    name : str
        The enrolled object's name.
    score : float
        Confidence in [0, 1].
    inliers : int
        Geometric inliers supporting the homography.
    homography : (3, 3) float64
        Maps model-image pixels to scene pixels, normalised so ``H[2, 2] == 1``.
    corners : (4, 2) float64
        The model's ``(0,0), (w,0), (w,h), (0,h)`` mapped into the scene, as (x, y).
    """

    name: str
    score: float
    inliers: int
    homography: np.ndarray
    corners: np.ndarray

    def __post_init__(self) -> None:
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name: expected a non-empty str, got {self.name!r}")
        score = float(self.score)
        if not 0.0 <= score <= 1.0:
            raise ValueError(f"score: expected a value in [0, 1], got {score}")
        H = np.asarray(self.homography, np.float64)
        if H.shape != (3, 3) or not np.all(np.isfinite(H)) or abs(H[2, 2]) < 1e-12:
            raise ValueError(f"homography: expected a finite 3x3 matrix with H[2,2] != 0, got shape {H.shape}")
        corners = np.asarray(self.corners, np.float64)
        if corners.shape != (4, 2):
            raise ValueError(f"corners: expected shape (4, 2), got {corners.shape}")
        object.__setattr__(self, "score", score)
        object.__setattr__(self, "inliers", int(self.inliers))
        object.__setattr__(self, "homography", H / H[2, 2])
        object.__setattr__(self, "corners", corners)

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "score": round(self.score, 6),
            "inliers": self.inliers,
            "homography": [[float(v) for v in row] for row in self.homography],
            "corners": [[float(v) for v in row] for row in self.corners],
        }


@dataclass(eq=False)
class FrameResult:
    """What the recognizer returns for one frame.

    Attributes
    ----------
    detections : list of Detection
    latency_ms : float
        From the moment the frame was handed over to the result.
    deadline_met : bool
        ``latency_ms <= budget_ms``; True when there is no budget.
    timings_ms : dict
        Stage name to milliseconds.
    skipped : list of str
        Optional work that was not done to keep the budget.
    """

    detections: list[Detection] = field(default_factory=list)
    latency_ms: float = 0.0
    deadline_met: bool = True
    timings_ms: dict[str, float] = field(default_factory=dict)
    skipped: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        for d in self.detections:
            if not isinstance(d, Detection):
                raise TypeError(f"detections: expected Detection items, got {type(d).__name__}")

    def to_json(self) -> dict[str, Any]:
        return {
            "detections": [d.to_json() for d in self.detections],
            "latency_ms": round(self.latency_ms, 3),
            "deadline_met": self.deadline_met,
            "timings_ms": {k: round(v, 3) for k, v in self.timings_ms.items()},
            "skipped": list(self.skipped),
        }


class Failure:
    """A falsy value that carries why an estimation failed (scikit-image's ``FailedEstimation`` idea).

    ``reason`` is a short machine-readable code (e.g. ``"too_few_matches"``), ``detail`` a sentence.
    """

    __slots__ = ("reason", "detail")

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"Failure({self.reason!r}, {self.detail!r})"
