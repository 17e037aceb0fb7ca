"""What a model database holds and reports: its records, error type, file names, constants and name rule."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from objrec.features.model import DEFAULT_DETECTORS
from objrec.fileio import FileFormatError
from objrec.geometry import model_corners
from objrec.imageio import InputError
from objrec.types import Features

__all__ = [
    "ModelDBError",
    "ModelObject",
    "ObjectInfo",
    "EnrollFailure",
    "EnrollReport",
    "SCHEMA_VERSION",
    "FORMAT",
    "SHARD_FORMAT",
    "MANIFEST",
    "SHARDS",
    "THUMBS",
    "DEFAULT_DETECTORS",
    "DESCRIPTOR_STORAGE",
    "ENROLL_BATCH",
    "KEYPOINT_DTYPE",
    "WIDE_KEYPOINT_DTYPE",
    "KEYPOINT_ROW_TYPES",
    "LEGACY_KEYPOINT_DTYPE",
    "POSITION_STEPS",
    "POSITION_MARGIN",
    "RESPONSE_LOG_STEPS",
    "RESPONSE_LOG_OFFSET",
    "OLDEST_READ_SCHEMA",
    "SURF_INT8_SCALE",
    "MODEL_IMAGE_FORMAT",
    "MODEL_IMAGE_QUALITY",
    "MODEL_IMAGE_EFFORT",
    "FREE_SPACE_MARGIN",
    "NAME_RE",
    "SHARD_ID_RE",
    "check_name",
    "check_width_m",
    "check_shape",
    "VIEW_SEP",
    "SHAPES",
    "view_key",
    "split_key",
    "object_groups",
]

#: Schema 4 writes keypoints as :data:`KEYPOINT_DTYPE` rows; shards written under schema 3 keep their
#: :data:`WIDE_KEYPOINT_DTYPE` rows (each ``.npy`` file names its own row type), so a schema 3 database is read
#: as it is and grows with schema 4 shards (any write marks its manifest schema 4).
SCHEMA_VERSION = 4
#: The oldest schema read in place; older ones need ``objrec db upgrade``.
OLDEST_READ_SCHEMA = 3
FORMAT = "objrec-modeldb"
SHARD_FORMAT = "objrec-modeldb-shard"
MANIFEST = "manifest.json"
SHARDS = "shards"
THUMBS = "thumbs.npy"
#: How descriptors are stored per kind. OpenCV's SIFT descriptors are integers 0-255 (stored exactly as
#: uint8; a descriptor that is not integral is stored as float32 instead). SURF's are unit vectors, whose
#: components lie in [-1, 1]: stored as int8 at the fixed scale :data:`SURF_INT8_SCALE` (a step of 1/127,
#: a quarter of float32), which leaves Lowe's ratio decisions against float32 as they are except near the
#: threshold and near ties (``bench/bench_descriptor_storage.py`` measures it on the Oxford sequences).
DESCRIPTOR_STORAGE: dict[str, str] = {"sift": "uint8", "surf": "int8"}
#: int8 SURF descriptors hold ``round(d * SURF_INT8_SCALE)``: the whole range [-1, 1] of a unit vector's
#: components, so nothing is clipped; no scale is fitted to data, so every database decodes alike.
SURF_INT8_SCALE = 127.0
#: Objects per :meth:`ModelDB.enroll_many` commit (one shard each): what a rerun after an interruption
#: may have to redo, against manifest writes that grow with the number of shards.
ENROLL_BATCH = 128
#: A keypoint as a shard stores it (12 bytes). Positions are 16-bit fixed point over the model image's own
#: extent plus :data:`POSITION_MARGIN` on each side: ``round((x + margin) * POSITION_STEPS / (width + 2 margin))``,
#: and likewise y with the height, so the rounding error is at most ``(side + 2) / 131070`` pixels of the
#: stored image (0.01 px at 1280 px, 0.05 px for a 6000 px photo whose features were found at 1280 px: 0.01 px
#: there too), far below the detectors' own localisation noise. Size and angle are float16: rounded within
#: 2**-11 of their value (at most 0.125 degrees for angles in [0, 360)), far below the detectors' orientation
#: and scale noise that the verifiers' scale and angle frames tolerate. Responses are stored on a log scale,
#: ``round((log2(r) + RESPONSE_LOG_OFFSET) * RESPONSE_LOG_STEPS)``: SIFT's (around 0.01-0.1) and SURF's Hessian
#: responses (beyond float16's range) alike within a relative 0.034%, in an order that sorting the stored
#: integers keeps; they only rank features (the cap, the index's strongest per object), and a coarser rounding
#: would make ties where the ranks cut. ``octave`` keeps the octave number only (for SIFT, the signed
#: low byte of OpenCV's packed field; its layer bits are dropped): nothing reads more of a model keypoint's
#: octave. :func:`objrec.modeldb.preparation.keypoint_rows` writes them and
#: :func:`~objrec.modeldb.preparation.keypoint_columns` reads them back.
KEYPOINT_DTYPE = np.dtype(
    [
        ("xy", "<u2", (2,)),
        ("size", "<f2"),
        ("angle", "<f2"),
        ("response", "<u2"),
        ("octave", "i1"),
        ("laplacian", "i1"),
    ]
)
#: Stored response steps per doubling of the response, and the doublings below 1 the scale starts at (it
#: spans 2**-32 to 2**32; a response below it is stored as its lowest step).
RESPONSE_LOG_STEPS = 1024
RESPONSE_LOG_OFFSET = 32
#: Fixed-point steps of a stored position across the model image's side plus its margins.
POSITION_STEPS = 65535
#: Pixels beyond each edge of the model image a stored position can hold (keypoints lie inside it; the
#: margin keeps a sub-pixel position at the very edge from being clipped).
POSITION_MARGIN = 1.0
#: Keypoint rows of shards written under schema 3 (18 bytes: float32 positions and responses).
WIDE_KEYPOINT_DTYPE = np.dtype(
    [
        ("xy", "<f4", (2,)),
        ("size", "<f2"),
        ("angle", "<f2"),
        ("response", "<f4"),
        ("octave", "i1"),
        ("laplacian", "i1"),
    ]
)
#: The keypoint row types a shard of a schema read in place may hold.
KEYPOINT_ROW_TYPES = (KEYPOINT_DTYPE, WIDE_KEYPOINT_DTYPE)
#: Keypoint rows of schema 1 and 2 databases (read only by :meth:`ModelDB.upgrade`).
LEGACY_KEYPOINT_DTYPE = np.dtype(
    [
        ("xy", "<f4", (2,)),
        ("size", "<f4"),
        ("angle", "<f4"),
        ("response", "<f4"),
        ("octave", "<i4"),
        ("laplacian", "i1"),
    ]
)
#: Encoding of a stored model image, unless the enrolled file's own bytes are smaller. The stored image is
#: decoded only to compose training and warm-up scenes (the prefilter, the scheduler's cost model) and to
#: make a thumbnail for shards that lack one: nothing matches or verifies against its pixels (features and
#: thumbnails are made from the original pixels at enrolment), so a lossy encoding whose error is below a
#: camera's noise is enough.
MODEL_IMAGE_FORMAT = ".webp"
MODEL_IMAGE_QUALITY = 80
#: libwebp's effort (``method``, 0-6: speed against size) for the stored model image: 2 encodes faster than
#: OpenCV's fixed setting at nearly its size and error, and the encoding is a part of every object's enrolment
#: (``bench/bench_enrolment.py --profile`` times it).
MODEL_IMAGE_EFFORT = 2
#: Free space required before a shard is written: this many times its encoded size, plus 16 MiB for the
#: manifest and the file system's own needs (a write that still runs out raises the same error).
FREE_SPACE_MARGIN = 1.25
#: Valid object names: 1-128 characters from letters, digits, '_', '.', '-', starting with a letter or digit.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
#: Separates an object's name from its view number in the key of the view's record: view 0 of object ``NAME`` is
#: stored as ``NAME``, view 2 as ``NAME#2``. Names cannot hold '#', so a key never collides with a name.
VIEW_SEP = "#"
#: What verification assumes of an object: ``"flat"`` (a homography maps the model image to the frame) or
#: ``"solid"`` (an object with depth, verified by consistency that holds without a plane).
SHAPES = ("flat", "solid")
#: Shard folder names: a sequence number and a random part.
SHARD_ID_RE = re.compile(r"^s[0-9]{6}-[0-9a-f]{8}$")


class ModelDBError(FileFormatError):
    """A model database problem; the message names the file or object."""


def view_key(name: str, view: int) -> str:
    """The record key of view ``view`` of object ``name`` (see :data:`VIEW_SEP`)."""
    return name if int(view) == 0 else f"{name}{VIEW_SEP}{int(view)}"


def split_key(key: str) -> tuple[str, int]:
    """(object name, view number) of a record key (see :data:`VIEW_SEP`)."""
    name, sep, view = key.partition(VIEW_SEP)
    return (name, int(view)) if sep else (name, 0)


def object_groups(keys: list[str]) -> np.ndarray:
    """The object of each record key, numbered in order of first appearance: (n,) int64. Records of one
    object (its views) share a number; fewer numbers than keys means some object has several views."""
    if not any(VIEW_SEP in k for k in keys):  # one view each: every key is its own object
        return np.arange(len(keys), dtype=np.int64)
    number: dict[str, int] = {}
    objects = (number.setdefault(k.partition(VIEW_SEP)[0], len(number)) for k in keys)
    return np.fromiter(objects, np.int64, len(keys))


class _Keyed:
    """The object name and view number of a record whose ``name`` is its key."""

    name: str

    @property
    def object_name(self) -> str:
        """The object this record is a view of."""
        return split_key(self.name)[0]

    @property
    def view(self) -> int:
        """The record's view number within its object (0 for the first view)."""
        return split_key(self.name)[1]


@dataclass(frozen=True)
class ModelObject(_Keyed):
    """One enrolled view of an object: its record key, model image size and features per detector kind.

    Attributes
    ----------
    name : str
        The record key: the object's name for its view 0, ``NAME#k`` for view ``k`` (see :data:`VIEW_SEP`;
        :attr:`object_name` and :attr:`view` split it).
    width, height : int
        Model image size in pixels.
    features : dict of kind -> Features
    image : ndarray or None
        The model image (BGR or gray uint8) when it was asked for.
    views, view_table
        The synthesised views enrolled with the object and where their keypoints lie (see
        :mod:`objrec.modeldb.views`); None without views.
    width_m : float or None
        The object's physical width (along the model image's x axis) in metres; None when unknown.
    shape : {"flat", "solid"}
        What verification assumes of the object (:data:`SHAPES`).
    """

    name: str
    width: int
    height: int
    features: dict[str, Features]
    image: np.ndarray | None = None
    views: str | None = None
    view_table: dict[str, Any] | None = None
    width_m: float | None = None
    shape: str = "flat"

    @property
    def corners(self) -> np.ndarray:
        """The model image's corners (0,0), (w,0), (w,h), (0,h) as a (4, 2) float64 array."""
        return model_corners(self.width, self.height)


@dataclass(frozen=True)
class ObjectInfo(_Keyed):
    """What the object table records about one enrolled view of an object (no arrays are read for it).

    Attributes
    ----------
    name, width, height
        The record key (the object's name for its view 0, ``NAME#k`` for view ``k``; :attr:`object_name` and
        :attr:`view` split it) and the view's image size in pixels.
    sha256 : str
        Hash of the stored content (image bytes, keypoints and descriptors): changes when it is replaced.
    source : dict or None
        ``{"path": str or None, "sha256": str}``: the enrolled file (or array content) and its hash, which
        lets a rerun of :meth:`ModelDB.enroll_many` skip what it already enrolled.
    n_features : dict
        Keypoints per detector kind.
    views : str or None
        The synthesised views enrolled with the object (see :mod:`objrec.modeldb.views`); None for the image only.
    view_table : dict or None
        Where each view's keypoints lie among the object's rows (see :mod:`objrec.modeldb.views`); None without
        views.
    width_m : float or None
        The object's physical width (along the model image's x axis) in metres, given at enrolment or by
        :meth:`ModelDB.set_width`; None when unknown (the key is optional in the object table).
    shape : {"flat", "solid"}
        What verification assumes of the object (:data:`SHAPES`; the key is optional, absent for flat).
    rating, rating_version, rating_reasons
        The view's rating 0-100 at enrolment (:func:`objrec.rating.rate`), the version of the rating that made
        it and its reasons' texts; None and () for views enrolled without a rating.
    """

    name: str
    width: int
    height: int
    sha256: str
    source: dict[str, Any] | None
    n_features: dict[str, int]
    views: str | None = None
    view_table: dict[str, Any] | None = None
    width_m: float | None = None
    shape: str = "flat"
    rating: int | None = None
    rating_version: str | None = None
    rating_reasons: tuple[str, ...] = ()

    @classmethod
    def from_entry(cls, o: dict[str, Any]) -> ObjectInfo:
        """The info of an object-table entry ``o``."""
        return cls(
            o["name"],
            o["width"],
            o["height"],
            o["sha256"],
            o.get("source"),
            dict(o["n_features"]),
            o.get("views"),
            o.get("view_table"),
            o.get("width_m"),
            o.get("shape", "flat"),
            o.get("rating"),
            o.get("rating_version"),
            tuple(o.get("rating_reasons", ())),
        )


@dataclass(frozen=True)
class EnrollFailure:
    """An item :meth:`ModelDB.enroll_many` could not enrol, and why.

    Attributes
    ----------
    name : str
        The item's object name.
    source : str
        Where its image came from (a path, or ``"<array>"``).
    reason : str
        Why it failed, in words.
    """

    name: str
    source: str
    reason: str


@dataclass
class EnrollReport:
    """Outcome of :meth:`ModelDB.enroll_many`: names enrolled, names skipped (already enrolled from the
    same content) and failures with their reason. True when nothing failed.

    Attributes
    ----------
    enrolled, skipped : list of str
        The object names enrolled; those skipped.
    failed : list of EnrollFailure
        The items that failed.
    """

    enrolled: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[EnrollFailure] = field(default_factory=list)

    def __bool__(self) -> bool:
        return not self.failed


def check_name(name: Any) -> None:
    """Raise :class:`InputError` unless ``name`` is a valid object name (see :data:`NAME_RE`)."""
    if not isinstance(name, str) or not NAME_RE.match(name):
        raise InputError(
            f"object name {name!r}: use 1-128 characters from letters, digits, '_', '.', '-', "
            "starting with a letter or digit"
        )


def check_width_m(width_m: Any) -> float | None:
    """``width_m`` as a float, None for None; a ValueError naming ``width_m`` unless it is a positive, finite
    number of metres."""
    if width_m is None:
        return None
    ok = isinstance(width_m, int | float | np.integer | np.floating) and not isinstance(width_m, bool)
    if not ok or not (math.isfinite(width_m) and width_m > 0):
        raise ValueError(f"width_m: expected a positive, finite width in metres or None, got {width_m!r}")
    return float(width_m)


def check_shape(shape: Any) -> str:
    """``shape`` if it is one of :data:`SHAPES`, else a ValueError naming ``shape``."""
    if shape not in SHAPES:
        raise ValueError(f"shape: expected one of {', '.join(SHAPES)}, got {shape!r}")
    return str(shape)
