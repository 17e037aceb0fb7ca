"""Shared result types that flow between the pipeline stages.

Every type is a small dataclass of arrays, validated on construction (the style of supervision's
``Detections``): a stage that finds nothing returns ``X.empty()``, never ``None`` and never raises.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from objrec.backend import get_array_module
from objrec.boxes import union_area
from objrec.geometry import usable_homography

__all__ = [
    "Features",
    "Regions",
    "SearchPlan",
    "Candidate",
    "Rejection",
    "Detection",
    "FrameResult",
    "Failure",
    "SkipRecord",
    "UnitScheduler",
    "Pose",
    "LostTrack",
    "TRACK_STATES",
]

#: A detection's ``state``: found by the detector in this frame (or its track re-anchored to what the detector
#: found), or followed from the previous frame by the tracking stage.
TRACK_STATES = ("detected", "tracked")

_FEATURE_ARRAYS = ("xy", "size", "angle", "response", "octave", "laplacian", "descriptors")


def _as(name: str, a: Any, dtype: Any, shape_tail: tuple[int | None, ...], n: int | None) -> Any:
    """Return ``a`` as a contiguous array of ``dtype`` (NumPy, or CuPy for a CuPy input) or raise a
    ``ValueError`` that names ``name``."""
    xp = get_array_module(a)
    arr = xp.ascontiguousarray(xp.asarray(a), dtype=dtype)
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

    Notes
    -----
    The arrays are NumPy arrays, or all CuPy arrays for features computed on the GPU: they stay on the
    device until a stage asks for a compact host result (``to_host`` copies everything, which the frame
    loop avoids). ``xp`` is the array module of the arrays.
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
        if len({get_array_module(getattr(self, k)).__name__ for k in _FEATURE_ARRAYS}) != 1:
            raise ValueError("Features: arrays must all be NumPy or all CuPy arrays")
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
        """A valid result with no keypoints (the answer for a blank image or an empty mask), of descriptors of
        ``descriptor_size`` values and detector ``kind``."""
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

    @property
    def xp(self) -> Any:
        """The array module of the arrays (numpy or cupy)."""
        return get_array_module(self.xy)

    def replace(self, **changes: Any) -> Features:
        """A copy with some fields replaced (validated like a new instance)."""
        return dataclasses.replace(self, **changes)

    def subset(self, index: Any) -> Features:
        """Features selected by a boolean mask or an index array (of the same array module)."""
        return Features(**{k: getattr(self, k)[index] for k in _FEATURE_ARRAYS}, kind=self.kind)

    def shifted(self, dx: float, dy: float) -> Features:
        """The same features with positions translated by ``dx``, ``dy`` pixels (crop coordinates to frame
        coordinates)."""
        if not dx and not dy:
            return self
        return self.replace(xy=self.xy + self.xp.asarray([dx, dy], np.float32))

    def scaled(self, sx: float, sy: float | None = None) -> Features:
        """Positions multiplied by ``(sx, sy)`` and sizes by ``sx`` (an image resized by ``1/s`` back to the
        original's pixels: a keypoint's size follows the horizontal scale, as OpenCV's keypoints do); ``sy``
        None is ``sx``."""
        sy = sx if sy is None else sy
        if sx == 1.0 and sy == 1.0:
            return self
        return self.replace(xy=self.xy * self.xp.asarray([sx, sy], np.float32), size=self.size * np.float32(sx))

    def to_host(self) -> Features:
        """The same features with NumPy arrays (a copy from the device for CuPy features)."""
        if self.xp is np:
            return self
        from objrec.backend import to_numpy  # counted by objrec.backend.TransferCounter

        return Features(**{k: to_numpy(getattr(self, k)) for k in _FEATURE_ARRAYS}, kind=self.kind)

    @staticmethod
    def concatenate(parts: list[Features]) -> Features:
        if not parts:
            raise ValueError("concatenate: need at least one Features (use Features.empty())")
        kinds = {p.kind for p in parts}
        dims = {p.descriptor_size for p in parts}
        if len(kinds) != 1 or len(dims) != 1:
            raise ValueError(f"concatenate: mixed kinds {sorted(kinds)} or descriptor sizes {sorted(dims)}")
        cat = parts[0].xp.concatenate
        return Features(**{k: cat([getattr(p, k) for p in parts]) for k in _FEATURE_ARRAYS}, kind=parts[0].kind)

    def to_arrays(self, prefix: str = "") -> dict[str, np.ndarray]:
        """Plain host arrays for ``np.savez`` (the kind travels in the manifest)."""
        host = self.to_host()
        return {prefix + k: getattr(host, k) for k in _FEATURE_ARRAYS}

    @classmethod
    def from_arrays(cls, arrays: Any, prefix: str = "", kind: str = "unknown") -> Features:
        """The features :meth:`to_arrays` wrote: ``arrays`` maps names to arrays (an ``np.load`` of the ``.npz``),
        each name starting with ``prefix``; ``kind`` is the detector kind."""
        return cls(**{k: arrays[prefix + k] for k in _FEATURE_ARRAYS}, kind=kind)


@dataclass(frozen=True, eq=False)
class Regions:
    """Image regions proposed by the prefilter, best first.

    Attributes
    ----------
    boxes : (N, 4) int32
        ``(x0, y0, x1, y1)`` in pixels, x1/y1 exclusive.
    scores : (N,) float32
        Prefilter score of each box (higher is more likely to hold an object)."""

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
        """One region covering the whole frame of ``width`` x ``height`` pixels (what 'no prefilter' means)."""
        return cls(np.array([[0, 0, width, height]], np.int32), np.ones(1, np.float32))

    def __getitem__(self, index: Any) -> Regions:
        """The regions selected by a slice, boolean mask or index array (order kept)."""
        if isinstance(index, int | np.integer):
            index = slice(int(index), int(index) + 1)
        return Regions(self.boxes[index], self.scores[index])

    @classmethod
    def from_boxes(cls, boxes: Any, scores: Any = None) -> Regions:
        """Regions from a sequence of ``(x0, y0, x1, y1)`` boxes and their ``scores`` (default: 1 each)."""
        b = np.asarray(boxes, np.int32).reshape(-1, 4)
        s = np.ones(len(b), np.float32) if scores is None else scores
        return cls(b, s)

    def concat(self, other: Regions) -> Regions:
        """These regions followed by ``other``'s."""
        return Regions(np.concatenate([self.boxes, other.boxes]), np.concatenate([self.scores, other.scores]))

    def area_fraction(self, width: int, height: int) -> float:
        """Fraction of the frame of ``width`` x ``height`` pixels covered by the union of the boxes."""
        return union_area(self, (height, width)) / float(width * height) if width * height else 0.0


@dataclass(frozen=True, eq=False)
class SearchPlan:
    """Where and how a frame's primary features are extracted (the search plan stage's output).

    Attributes
    ----------
    regions : Regions or None
        The boxes to search, in priority order (tracking windows first, then the prefilter's regions);
        None searches the whole frame.
    scale : float
        Resolution scale of the extraction (1 = full resolution); features come back in full-resolution
        pixels whatever the scale.
    max_features : int or None
        At most this many of the strongest keypoints are described (None: the detector's own setting).
    pixels : int
        Full-resolution pixels searched.
    sample_step : {1, 2}
        SURF's first-octave sampling step (see :class:`~objrec.features.SURF`; other detectors ignore it).
    skipped : tuple of SkipRecord
        What the plan leaves out of the frame (regions beyond the count, full resolution, fine sampling).
    crop : tuple of int or None
        ``(x0, y0, x1, y1)``: a sweep tile, extracted alone (``regions`` inside it) with no margin around it.
    sweep_work : float
        For a frame's primary plan that searches a part of the sweep, the cost-model size of such a part (the
        round's largest tile at the plan's scale and step, or the coarse pass): the extraction the next frame's
        prefilter is weighed against (``SearchPlanner.prefilter_pays``); 0 otherwise.
    """

    regions: Regions | None
    scale: float = 1.0
    max_features: int | None = None
    pixels: int = 0
    sample_step: int = 1
    skipped: tuple[SkipRecord, ...] = ()
    crop: tuple[int, int, int, int] | None = None
    sweep_work: float = 0.0

    def __post_init__(self) -> None:
        if not 0.0 < self.scale <= 1.0:
            raise ValueError(f"scale: expected a value in (0, 1], got {self.scale}")
        if self.max_features is not None and self.max_features < 1:
            raise ValueError(f"max_features: expected a positive int or None, got {self.max_features}")
        if self.sample_step not in (1, 2):
            raise ValueError(f"sample_step: expected 1 or 2, got {self.sample_step!r}")

    @property
    def empty(self) -> bool:
        """True when there is nothing to search (no regions and not the whole frame)."""
        return self.regions is not None and len(self.regions) == 0


@dataclass(frozen=True, eq=False)
class Candidate:
    """Putative matches of one enrolled object in a frame (the matching stage's output), on the host.

    Attributes
    ----------
    object_index : int
        The object's row in the matcher's database.
    model_xy, scene_xy : (M, 2) float32
        Matched positions in model-image pixels and in frame pixels.
    ratio : (M,) float32
        Lowe's distance ratio of each match.
    name : str
        The object's name.
    model_size : (int, int)
        The model image's (width, height), whose corners the verified homography maps.
    model_frames, scene_frames : (M, 2) float32 or None
        (size, angle in degrees) of each match's keypoints (OpenCV's convention), which verification without a
        plane checks (:func:`~objrec.matching.solid.verify_solid`); None where the matcher did not record them.
    """

    object_index: int
    model_xy: np.ndarray
    scene_xy: np.ndarray
    ratio: np.ndarray
    name: str = ""
    model_size: tuple[int, int] = (0, 0)
    model_frames: np.ndarray | None = None
    scene_frames: np.ndarray | None = None

    def __len__(self) -> int:
        return int(len(self.model_xy))


@dataclass(frozen=True)
class Rejection:
    """A candidate that did not become a detection, and why (a key of ``objrec.matching.REASONS``).

    Attributes
    ----------
    name : str
        The candidate's object (or record key).
    reason : str
        Why it was rejected, a key of ``objrec.matching.REASONS``.
    matches : int
        Its putative matches (for one explained by another detection, its inliers).
    detail : str
        The figures behind the reason (``Failure.detail``), or "".
    """

    name: str
    reason: str
    matches: int
    detail: str = ""


@dataclass(frozen=True, eq=False)
class Pose:
    """An object's metric pose in the camera's frame (OpenCV's convention: x right, y down, z forward).

    Attributes
    ----------
    rvec : (3,) float64
        Rotation vector (Rodrigues) of the object frame: origin at the model image's top-left corner, x
        right, y down along the image, z into the object.
    tvec : (3,) float64
        Translation of the object frame's origin, in metres.
    """

    rvec: np.ndarray
    tvec: np.ndarray

    def __post_init__(self) -> None:
        for name in ("rvec", "tvec"):
            a = np.asarray(getattr(self, name), np.float64).reshape(-1)
            if a.shape != (3,) or not np.all(np.isfinite(a)):
                raise ValueError(f"{name}: expected 3 finite numbers, got {a.tolist()}")
            object.__setattr__(self, name, a)

    @property
    def distance_m(self) -> float:
        """Distance from the camera to the object frame's origin, in metres."""
        return float(np.linalg.norm(self.tvec))

    def to_json(self) -> dict[str, Any]:
        return {"rvec": [float(v) for v in self.rvec], "tvec": [float(v) for v in self.tvec]}


@dataclass(frozen=True)
class LostTrack:
    """A track ended in this frame, and why (``"support"``: too few of its points followed, ``"appearance"``:
    the appearance check failed, ``"visibility"``: too little of it left in the frame, ``"capacity"``: given
    way to a newer track beyond ``max_tracked``, ``"unconfirmed"``: a full-resolution search of its box did
    not find the object before any such search had confirmed the track).

    Attributes
    ----------
    track_id : int
        The track's number.
    name : str
        Its object's name.
    reason : str
        Why it ended (one of the above).
    """

    track_id: int
    name: str
    reason: str

    def to_json(self) -> dict[str, Any]:
        return {"track_id": self.track_id, "name": self.name, "reason": self.reason}


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
        Geometric inliers supporting the homography (or the test of an object verified without a plane).
    homography : (3, 3) float64 or None
        Maps model-image pixels to scene pixels, normalised so ``H[2, 2] == 1``; None for an object verified
        without a plane (enrolled as ``shape="solid"``), which ``outline`` describes instead.
    corners : (4, 2) float64
        The model's ``(0,0), (w,0), (w,h), (0,h)`` mapped into the scene, as (x, y); corners of an object
        partly outside the frame lie outside the image. Without a homography: the box around ``outline``.
    visible_fraction : float
        Share of the model's area that lies inside the frame, in [0, 1].
    inlier_xy : (n, 2) float ndarray or None
        Scene positions of the inliers (what the detection explains; not part of the JSON form).
    raw_corners : (4, 2) float64 or None
        The corners as verified in this frame when ``corners`` are smoothed over frames (see
        :class:`~objrec.realtime.smoothing.CornerSmoother`; ``homography`` then maps the model's outline onto the
        smoothed corners); None when they are not smoothed. In the JSON form as ``"raw_corners"`` when set.
    state : {"detected", "tracked"}
        ``"detected"`` when the detector found the object in this frame (or re-anchored its track),
        ``"tracked"`` when the tracking stage followed it from the previous frame.
    track_id : int or None
        The track that follows this object from frame to frame (None without tracking). Two copies of one
        object in view are two tracks.
    pose : Pose or None
        The object's metric pose, when the recognizer knows the camera and the object's physical width.
    view : int
        The enrolled view that matched (0 for one image): ``homography`` and ``corners`` refer to its image.
    outline : (n, 2) float64 or None
        The convex hull of the inliers of an object verified without a plane (None otherwise).
    """

    name: str
    score: float
    inliers: int
    homography: np.ndarray | None
    corners: np.ndarray
    visible_fraction: float = 1.0
    inlier_xy: np.ndarray | None = field(default=None, repr=False, compare=False)
    raw_corners: np.ndarray | None = field(default=None, repr=False, compare=False)
    state: str = "detected"
    track_id: int | None = None
    pose: Pose | None = None
    view: int = 0
    outline: np.ndarray | None = field(default=None, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.state not in TRACK_STATES:
            raise ValueError(f"state: expected one of {TRACK_STATES}, got {self.state!r}")
        if self.track_id is not None and not isinstance(self.track_id, int | np.integer):
            raise ValueError(f"track_id: expected an int or None, got {self.track_id!r}")
        if self.pose is not None and not isinstance(self.pose, Pose):
            raise ValueError(f"pose: expected a Pose or None, got {type(self.pose).__name__}")
        if not isinstance(self.name, str) or not self.name:
            raise ValueError(f"name: expected a non-empty str, got {self.name!r}")
        if isinstance(self.view, bool) or not isinstance(self.view, int | np.integer) or self.view < 0:
            raise ValueError(f"view: expected an int >= 0, got {self.view!r}")
        score = float(self.score)
        if not 0.0 <= score <= 1.0:
            raise ValueError(f"score: expected a value in [0, 1], got {score}")
        if self.homography is None:
            outline = np.asarray(self.outline if self.outline is not None else np.zeros((0, 2)), np.float64)
            if outline.ndim != 2 or outline.shape[0] < 3 or outline.shape[1] != 2 or not np.all(np.isfinite(outline)):
                raise ValueError(
                    f"outline: a detection without a homography needs (n >= 3, 2) points, got {outline.shape}"
                )
            object.__setattr__(self, "outline", outline)
        else:
            H = np.asarray(self.homography, np.float64)
            if H.shape != (3, 3) or not usable_homography(H):
                raise ValueError(f"homography: expected a finite 3x3 matrix with H[2,2] != 0, got shape {H.shape}")
            object.__setattr__(self, "homography", H / H[2, 2])
            if self.outline is not None:
                object.__setattr__(self, "outline", np.asarray(self.outline, np.float64))
        corners = np.asarray(self.corners, np.float64)
        if corners.shape != (4, 2):
            raise ValueError(f"corners: expected shape (4, 2), got {corners.shape}")
        visible = float(self.visible_fraction)
        if not 0.0 <= visible <= 1.0:
            raise ValueError(f"visible_fraction: expected a value in [0, 1], got {visible}")
        object.__setattr__(self, "visible_fraction", visible)
        object.__setattr__(self, "score", score)
        object.__setattr__(self, "inliers", int(self.inliers))
        object.__setattr__(self, "corners", corners)
        if self.raw_corners is not None:
            raw = np.asarray(self.raw_corners, np.float64)
            if raw.shape != (4, 2):
                raise ValueError(f"raw_corners: expected shape (4, 2) or None, got {raw.shape}")
            object.__setattr__(self, "raw_corners", raw)

    def to_json(self) -> dict[str, Any]:
        out = {
            "name": self.name,
            "score": round(self.score, 6),
            "inliers": self.inliers,
            "homography": None if self.homography is None else [[float(v) for v in row] for row in self.homography],
            "corners": [[float(v) for v in row] for row in self.corners],
            "visible_fraction": round(self.visible_fraction, 4),
            "state": self.state,
            "track_id": None if self.track_id is None else int(self.track_id),
            "pose": None if self.pose is None else self.pose.to_json(),
            "view": int(self.view),
        }
        if self.raw_corners is not None:
            out["raw_corners"] = [[float(v) for v in row] for row in self.raw_corners]
        if self.outline is not None:
            out["outline"] = [[float(v) for v in row] for row in self.outline]
        return out


@dataclass(frozen=True)
class SkipRecord:
    """Work of a frame that was not done, and why.

    Attributes
    ----------
    unit : str
        The kind of work ("verify", "escalate", "track", "region", "degrade", "full_resolution", "keypoints", ...).
    reason : str
        Why: ``"budget"`` (predicted not to fit what was left of the budget), ``"degrade"`` (left out by the
        degrade level in force), ...
    subject : str
        What the unit was for (an object name, a region index, a degrade level); empty when nothing.
    predicted_ms : float or None
        The cost model's prediction for the unit, when one was made.
    """

    unit: str
    reason: str
    subject: str = ""
    predicted_ms: float | None = None

    def to_json(self) -> dict[str, Any]:
        p = self.predicted_ms
        return {
            "unit": self.unit,
            "reason": self.reason,
            "subject": self.subject,
            "predicted_ms": None if p is None or not np.isfinite(p) else round(float(p), 3),
        }


class UnitScheduler(Protocol):
    """What a stage needs of the frame's scheduler (:class:`~objrec.realtime.scheduler.FrameScheduler`): a unit
    of work offered to it runs, returning ``fn(*args)``, or is left out, returning its :class:`SkipRecord`."""

    def run(
        self,
        unit: str,
        fn: Callable[..., Any],
        *args: Any,
        size: float = 1.0,
        mandatory: bool = False,
        stage: str | None = None,
        subject: str = "",
        timing: str | None = None,
        relearn: bool = False,
        after_ms: float = 0.0,
    ) -> Any:
        """Offer ``fn(*args)`` as a unit: see :meth:`~objrec.realtime.scheduler.FrameScheduler.run`.

        Parameters
        ----------
        unit : str
            The unit's name in the records.
        fn : callable
            Its work, called with ``args``.
        size : float
            Its size for the cost model (what its time grows with).
        mandatory : bool
            Run it whatever the time left.
        stage : str, optional
            The cost-model entry (default ``unit``).
        subject : str
            What it is for (an object name, a region), in the records.
        timing : str, optional
            The frame timings' entry its time is added to (default ``stage``).
        relearn : bool
            Run it where its typical time fits once it was left out for several frames in a row.
        after_ms : float
            Time of the work that must follow it, which must fit too.
        """
        ...


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
    skipped : list of SkipRecord
        Work that was not done to keep the budget.
    prefilter_boxes : list of [x0, y0, x1, y1] or None
        The boxes the prefilter kept in this frame (its own output, before tracking windows are added);
        None when the recognizer runs without a prefilter or left it out of this frame (see ``skipped``).
    prefilter_rejected : float or None
        The share of the frame's area outside ``prefilter_boxes``.
    lost : list of LostTrack
        The tracks that ended in this frame (their objects are no longer reported).
    """

    detections: list[Detection] = field(default_factory=list)
    latency_ms: float = 0.0
    deadline_met: bool = True
    timings_ms: dict[str, float] = field(default_factory=dict)
    skipped: list[SkipRecord] = field(default_factory=list)
    prefilter_boxes: list[list[int]] | None = None
    prefilter_rejected: float | None = None
    lost: list[LostTrack] = field(default_factory=list)

    def __post_init__(self) -> None:
        for d in self.detections:
            if not isinstance(d, Detection):
                raise TypeError(f"detections: expected Detection items, got {type(d).__name__}")
        for r in self.skipped:
            if not isinstance(r, SkipRecord):
                raise TypeError(f"skipped: expected SkipRecord items, got {type(r).__name__}")

    def to_json(self) -> dict[str, Any]:
        return {
            "detections": [d.to_json() for d in self.detections],
            "latency_ms": round(self.latency_ms, 3),
            "deadline_met": self.deadline_met,
            "timings_ms": {k: round(v, 3) for k, v in self.timings_ms.items()},
            "skipped": [r.to_json() for r in self.skipped],
            "prefilter_boxes": self.prefilter_boxes,
            "prefilter_rejected": None if self.prefilter_rejected is None else round(self.prefilter_rejected, 4),
            "lost": [t.to_json() for t in self.lost],
        }


class Failure:
    """A falsy value that carries why an estimation failed (scikit-image's ``FailedEstimation`` idea):
    ``reason`` is a short machine-readable code (e.g. ``"too_few_matches"``), ``detail`` a sentence."""

    __slots__ = ("reason", "detail")

    def __init__(self, reason: str, detail: str = "") -> None:
        self.reason = reason
        self.detail = detail

    def __bool__(self) -> bool:
        return False

    def __repr__(self) -> str:
        return f"Failure({self.reason!r}, {self.detail!r})"
