"""An object made ready for storage: its image read and encoded, features extracted (with synthesised views on
request), arrays in their stored form, thumbnail and content hash.

Everything here is thread-safe and writes nothing: :class:`PreparedObject` values are committed to a database
by its storage engine (:mod:`objrec.modeldb.store`).
"""

from __future__ import annotations

import functools
import hashlib
import io
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from objrec.features.model import AUTO_CAP, cap_features, extract_model_features
from objrec.fileio import sha256_bytes
from objrec.imageio import InputError, check_frame, decode_image, to_bgr, to_gray
from objrec.modeldb.records import (
    DESCRIPTOR_STORAGE,
    KEYPOINT_DTYPE,
    LEGACY_KEYPOINT_DTYPE,
    MODEL_IMAGE_EFFORT,
    MODEL_IMAGE_FORMAT,
    MODEL_IMAGE_QUALITY,
    POSITION_MARGIN,
    POSITION_STEPS,
    RESPONSE_LOG_OFFSET,
    RESPONSE_LOG_STEPS,
    SURF_INT8_SCALE,
    WIDE_KEYPOINT_DTYPE,
    check_name,
    check_shape,
    check_width_m,
    split_key,
)
from objrec.modeldb.views import add_view_features, check_views
from objrec.rating import rate
from objrec.types import Features

__all__ = [
    "THUMB_SIZE",
    "FileBytes",
    "PreparedObject",
    "prepare_object",
    "prepared_from_arrays",
    "encode_descriptors",
    "decode_descriptors",
    "keypoint_rows",
    "keypoint_columns",
    "stored_responses",
    "encode_model_image",
    "capped",
    "content_sha256",
    "source_sha256",
    "thumbnail",
    "thumb_sha256",
    "rating_entry",
]

#: Side of the square gray thumbnail stored per object for verification's appearance check.
THUMB_SIZE = 64


@dataclass(eq=False)
class PreparedObject:
    """An object ready to be written: stored-form arrays and its object-table entry.

    Attributes
    ----------
    entry : dict
        The object's entry in its shard's object table (name, size, content hash, source, counts).
    image : (n,) uint8 ndarray
        The encoded image bytes.
    keypoints : dict of kind -> ndarray
        :data:`~objrec.modeldb.records.KEYPOINT_DTYPE` rows.
    descriptors : dict of kind -> ndarray
        Descriptors in their stored dtype (:func:`encode_descriptors`).
    thumb : (THUMB_SIZE, THUMB_SIZE) uint8 ndarray
        The gray thumbnail (:func:`thumbnail`; ``entry["thumb_sha256"]`` its hash, :func:`thumb_sha256`).
    """

    entry: dict[str, Any]
    image: np.ndarray
    keypoints: dict[str, np.ndarray]
    descriptors: dict[str, np.ndarray]
    thumb: np.ndarray


@dataclass(frozen=True, eq=False)
class FileBytes:
    """An image file's path and bytes, read in one process for extraction in another that cannot see the file
    (a Dask worker on another machine); :func:`prepare_object` takes it exactly as the file at ``path``.

    Attributes
    ----------
    path : str
        The file's path where it was read (recorded as the object's source).
    data : bytes
        The file's bytes.
    """

    path: str
    data: bytes

    @classmethod
    def read(cls, path: str | Path) -> FileBytes:
        """Read the file at ``path``; a missing file or a folder is an :class:`~objrec.imageio.InputError`."""
        p = _image_file(path)
        return cls(str(p), p.read_bytes())


def _image_file(path: str | Path) -> Path:
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such file")
    if p.is_dir():
        raise InputError(f"{p}: is a directory, expected an image file")
    return p


def encode_descriptors(kind: str, descriptors: np.ndarray) -> np.ndarray:
    """Descriptors in their storage dtype (:data:`DESCRIPTOR_STORAGE`): uint8 only where that is exact; int8
    as ``round(d * SURF_INT8_SCALE)`` (clipped to [-127, 127]).
    ``kind``: the descriptor kind; ``descriptors``: (N, D) float descriptors."""
    d = np.asarray(descriptors, np.float32)
    want = DESCRIPTOR_STORAGE.get(kind, "float32")
    if want == "uint8":
        u8 = np.clip(np.rint(d), 0, 255).astype(np.uint8)
        return u8 if np.array_equal(u8, d) else d
    if want == "int8":
        return np.clip(np.rint(d * SURF_INT8_SCALE), -127, 127).astype(np.int8)
    return d.astype(want)


def decode_descriptors(kind: str, stored: np.ndarray) -> np.ndarray:
    """Stored descriptors as values: int8 rows scaled back by :data:`SURF_INT8_SCALE` (as float16, which holds
    each step exactly enough); every other dtype as it is.

    Parameters
    ----------
    kind : str
        The detector kind (the stored form is read from the dtype; the kind names the error).
    stored : (N, D) ndarray

    Returns
    -------
    (N, D) ndarray
        uint8 for SIFT, float16 for SURF, float32 otherwise.
    """
    if stored.dtype == np.int8:
        return (np.asarray(stored, np.float32) * np.float32(1.0 / SURF_INT8_SCALE)).astype(np.float16)
    return stored


def _position_scale(width: int, height: int) -> np.ndarray:
    """Fixed-point steps per pixel along x and y for a model image of ``width`` x ``height`` pixels."""
    extent = np.array([width, height], np.float64) + 2 * POSITION_MARGIN
    return POSITION_STEPS / extent


def keypoint_rows(f: Features, width: int, height: int) -> np.ndarray:
    """The keypoints of ``f`` as :data:`~objrec.modeldb.records.KEYPOINT_DTYPE` rows, as a shard stores them:
    positions in fixed point over the model image's extent, responses on a log scale, the octave number only
    (the signed low byte of the octave field).

    Parameters
    ----------
    f : Features
        Features of a model image, in its pixel coordinates.
    width, height : int
        The model image's size in pixels (the record's ``width`` and ``height``).

    Returns
    -------
    (N,) ndarray of KEYPOINT_DTYPE
    """
    rows = np.empty(len(f), KEYPOINT_DTYPE)
    xy = (np.asarray(f.xy, np.float64).reshape(-1, 2) + POSITION_MARGIN) * _position_scale(width, height)
    rows["xy"] = np.clip(np.rint(xy), 0, POSITION_STEPS).astype(np.uint16)
    rows["size"] = f.size
    rows["angle"] = f.angle
    with np.errstate(divide="ignore", invalid="ignore"):  # zero or negative (NaN here): the lowest step
        log = np.log2(np.asarray(f.response, np.float64))
    steps = np.rint((log + RESPONSE_LOG_OFFSET) * RESPONSE_LOG_STEPS)
    rows["response"] = np.clip(np.nan_to_num(steps, nan=0.0), 0, np.iinfo(np.uint16).max).astype(np.uint16)
    rows["octave"] = (np.asarray(f.octave, np.int64) & 0xFF).astype(np.uint8).view(np.int8)
    rows["laplacian"] = f.laplacian
    return rows


def keypoint_columns(rows: np.ndarray, width: int, height: int) -> dict[str, np.ndarray]:
    """Stored keypoint rows as :class:`~objrec.types.Features` columns (float32 positions, sizes, angles and
    responses; int octaves and laplacian signs), for each row type a shard may hold.

    Parameters
    ----------
    rows : (N,) ndarray
        :data:`~objrec.modeldb.records.KEYPOINT_DTYPE` rows, or the wide rows of schema 3 shards
        (:data:`~objrec.modeldb.records.WIDE_KEYPOINT_DTYPE`) or of schema 1 and 2 databases
        (:data:`~objrec.modeldb.records.LEGACY_KEYPOINT_DTYPE`).
    width, height : int
        The model image's size in pixels (used by packed positions only).

    Returns
    -------
    dict of str -> ndarray
        ``xy``, ``size``, ``angle``, ``response``, ``octave``, ``laplacian``.

    Raises
    ------
    ValueError
        For rows of another dtype.
    """
    names = ("xy", "size", "angle", "response", "octave", "laplacian")
    if rows.dtype in (WIDE_KEYPOINT_DTYPE, LEGACY_KEYPOINT_DTYPE):
        return {k: rows[k] for k in names}
    if rows.dtype != KEYPOINT_DTYPE:
        raise ValueError(f"keypoint rows of unknown dtype {rows.dtype}")
    out = {k: rows[k] for k in ("size", "angle", "octave", "laplacian")}
    xy = np.asarray(rows["xy"], np.float64) / _position_scale(width, height) - POSITION_MARGIN
    out["xy"] = xy.astype(np.float32).reshape(-1, 2)
    out["response"] = stored_responses(rows)
    return out


def stored_responses(rows: np.ndarray) -> np.ndarray:
    """The detector responses of stored keypoint rows of any type
    :func:`keypoint_columns` reads, as float32 (what ranks features by strength).
    ``rows``: the stored rows."""
    if rows.dtype != KEYPOINT_DTYPE:
        return np.asarray(rows["response"], np.float32)
    steps = np.asarray(rows["response"], np.float64)
    return np.exp2(steps / RESPONSE_LOG_STEPS - RESPONSE_LOG_OFFSET).astype(np.float32)


def encode_model_image(img: np.ndarray, original: np.ndarray | None = None) -> np.ndarray:
    """The bytes a shard stores for a model image: :data:`MODEL_IMAGE_FORMAT` at :data:`MODEL_IMAGE_QUALITY`,
    or ``original`` (the enrolled file's own bytes, which decode to ``img`` exactly) when it is no larger.

    Pillow's WebP encoder at :data:`MODEL_IMAGE_EFFORT` encodes it; OpenCV's, whose effort is fixed at a slower
    setting, where Pillow is not installed (a machine set up with ``pip install --no-deps``) or was built without
    WebP.

    Parameters
    ----------
    img : ndarray
        The decoded image (gray or BGR uint8).
    original : (n,) uint8 ndarray, optional

    Returns
    -------
    (n,) uint8 ndarray
    """
    data = _webp(img)
    if original is not None and original.size <= data.size:
        return original
    return data


def _webp(img: np.ndarray) -> np.ndarray:
    """``img`` (gray or BGR uint8) as WebP at :data:`MODEL_IMAGE_QUALITY` (see :func:`encode_model_image`)."""
    if not _pillow_webp():
        return _webp_opencv(img)
    from PIL import Image

    pixels = img if img.ndim == 2 else img[:, :, 2::-1]  # Pillow takes RGB
    buf = io.BytesIO()
    Image.fromarray(np.ascontiguousarray(pixels)).save(
        buf, "WEBP", quality=MODEL_IMAGE_QUALITY, method=MODEL_IMAGE_EFFORT
    )
    return np.frombuffer(buf.getbuffer(), np.uint8).copy()


@functools.cache
def _pillow_webp() -> bool:
    """Whether Pillow is installed with its WebP codec (a Pillow built from source without libwebp has none)."""
    try:
        from PIL import features
    except ImportError:
        return False
    return bool(features.check("webp"))


def _webp_opencv(img: np.ndarray) -> np.ndarray:
    """``img`` as WebP by OpenCV's encoder (PNG in the unlikely case it refuses)."""
    import cv2

    ok, data = cv2.imencode(MODEL_IMAGE_FORMAT, img, [cv2.IMWRITE_WEBP_QUALITY, MODEL_IMAGE_QUALITY])
    if not ok:  # pragma: no cover - WebP takes every 8-bit gray or BGR image
        ok, data = cv2.imencode(".png", img, [cv2.IMWRITE_PNG_COMPRESSION, 3])
    return data.reshape(-1)


def capped(
    feats: dict[str, Features], width: int, height: int, max_features: int | dict[str, int] | str | None = AUTO_CAP
) -> dict[str, Features]:
    """Each kind's features reduced to at most ``max_features`` (strongest, spread over the image:
    :func:`objrec.features.model.cap_features`); None keeps them all.
    ``feats``: each kind's features of the model image; ``width``, ``height``: the image's size in pixels."""
    return {k: cap_features(f, max_features, width, height) for k, f in feats.items()}


def content_sha256(image: np.ndarray, keypoints: dict[str, np.ndarray], descriptors: dict[str, np.ndarray]) -> str:
    """The hash an object's entry records for its content: image bytes, then keypoint rows and descriptors
    of each kind in name order (with each descriptor array's dtype and shape).
    ``image``: the model image; ``keypoints`` and ``descriptors``: each kind's arrays."""
    h = hashlib.sha256(image.tobytes())
    for kind in sorted(keypoints):
        d = descriptors[kind]
        h.update(f"\0{kind}\0{d.dtype.str}\0{d.shape}\0".encode())
        h.update(keypoints[kind].tobytes())
        h.update(d.tobytes())
    return h.hexdigest()


def thumbnail(img: np.ndarray) -> np.ndarray:
    """The stored thumbnail of a model image: gray, area-averaged to ``THUMB_SIZE`` x ``THUMB_SIZE`` (each
    axis scaled on its own, so the thumbnail's pixel grid is a fixed grid over the model's outline)."""
    import cv2

    return cv2.resize(to_gray(img), (THUMB_SIZE, THUMB_SIZE), interpolation=cv2.INTER_AREA)


def thumb_sha256(thumb: np.ndarray) -> str:
    """The hash an object's entry records for its thumbnail rows (checked when they are first read)."""
    return sha256_bytes(thumb.tobytes())


def _array_sha256(img: np.ndarray) -> str:
    return hashlib.sha256(f"{img.shape}\0{img.dtype.str}\0".encode() + img.tobytes()).hexdigest()


def _load_source(name: str, image: Any) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """(pixels, encoded bytes to store, source record) for a file path or an array."""

    if isinstance(image, np.ndarray) or image is None:
        img = check_frame(image, f"image for {name!r}")
        img = to_bgr(img) if img.ndim == 3 else img
        return img, encode_model_image(img), {"path": None, "sha256": _array_sha256(img)}
    path: str | Path
    if isinstance(image, FileBytes):
        path, data = image.path, np.frombuffer(image.data, np.uint8)
    else:
        path = _image_file(image)
        data = np.fromfile(str(path), dtype=np.uint8)
    img = decode_image(data, str(path))
    img = to_bgr(img) if img.ndim == 3 else img
    return img, encode_model_image(img, data), {"path": str(path), "sha256": sha256_bytes(data.data)}


def source_sha256(image: Any) -> str:
    """The hash :class:`~objrec.modeldb.records.ObjectInfo` ``source`` records for a file path or an array
    (for resuming)."""
    if isinstance(image, np.ndarray):
        return _array_sha256(to_bgr(image) if image.ndim == 3 else image)
    if isinstance(image, FileBytes):
        return sha256_bytes(image.data)
    return sha256_bytes(Path(image).read_bytes())


def prepare_object(
    name: str,
    image: Any,
    detectors: dict[str, dict[str, Any]],
    views: str | None = None,
    width_m: float | None = None,
    shape: str = "flat",
    min_rating: int | None = None,
    full_rating: bool = False,
) -> PreparedObject:
    """Read or check an image, extract its features and put everything in stored form (thread-safe).

    With ``views`` (see :mod:`objrec.modeldb.views`), the features of synthesised views of the image follow its
    own, in model coordinates, and the object's entry records the setting.

    Parameters
    ----------
    name : str
        The record key: the object's name (:func:`~objrec.modeldb.records.check_name`), or ``NAME#k`` for its
        view ``k`` (:func:`~objrec.modeldb.records.view_key`).
    image : path or FileBytes or ndarray
        An image file (or its bytes, read elsewhere) or a gray or BGR uint8 array.
    detectors : dict of kind -> parameters
        The database's detectors.
    views : str, optional
        Synthesised views to enrol with the image.
    width_m : float, optional
        The object's physical width in metres (:func:`~objrec.modeldb.records.check_width_m`), recorded in its
        entry when given.
    shape : {"flat", "solid"}
        What verification assumes of the object (:data:`~objrec.modeldb.records.SHAPES`), recorded in its entry
        when solid.
    min_rating : int, optional
        Refuse an image whose full rating is below this (the score bands the minimum is meant for are those
        of the full rating).
    full_rating : bool
        The entry records a rating (:func:`objrec.rating.rate`) as ``rating``, ``rating_version`` and
        ``rating_reasons``: by default the rating from the features extracted here and the pixels, without
        rendered views (version ``...+features``; most of a full rating's cost is its views); with this or
        ``min_rating``, the full rating.

    Returns
    -------
    PreparedObject

    Raises
    ------
    InputError
        For a bad name, an unreadable image, one without features or one rated below ``min_rating``; the
        message says which and why.
    """
    check_name(split_key(name)[0])
    views = check_views(views)
    width_m = check_width_m(width_m)
    shape = check_shape(shape)
    img, encoded, source = _load_source(name, image)
    feats = extract_model_features(img, detectors)
    if all(len(f) == 0 for f in feats.values()):
        raise InputError(f"image for {name!r}: no features found (blank or textureless image cannot be enrolled)")
    rating = rate(img, detectors=detectors, features=feats, views=full_rating or min_rating is not None, shape=shape)
    if min_rating is not None and rating.score < min_rating:
        why = "; ".join(r.text for r in rating.reasons) or "no reason above the report threshold"
        raise InputError(f"image for {name!r}: rating {rating.score} is below the minimum {min_rating} ({why})")
    table = None
    feats = capped(feats, img.shape[1], img.shape[0])
    if views is not None:
        feats, table = add_view_features(img, feats, detectors, views)
    p = _prepared(name, img, encoded, feats, source)
    if views is not None:
        p.entry.update(views=views, view_table=table)
    if width_m is not None:
        p.entry["width_m"] = width_m
    if shape != "flat":
        p.entry["shape"] = shape
    p.entry.update(rating_entry(rating))
    return p


def rating_entry(rating: Any) -> dict[str, Any]:
    """The object-table fields that record a :class:`~objrec.rating.Rating`: ``rating`` (the score),
    ``rating_version`` (:attr:`~objrec.rating.Rating.stored_version`) and ``rating_reasons`` (their texts)."""
    return {
        "rating": rating.score,
        "rating_version": rating.stored_version,
        "rating_reasons": [r.text for r in rating.reasons],
    }


def _prepared(
    name: str, img: np.ndarray, encoded: np.ndarray, feats: dict[str, Features], source: Any
) -> PreparedObject:
    """An object's entry and arrays in stored form: keypoint rows, compact descriptors, content hash."""
    h, w = img.shape[:2]
    kps = {k: keypoint_rows(f, w, h) for k, f in feats.items()}
    descs = {k: encode_descriptors(k, f.descriptors) for k, f in feats.items()}
    entry = {
        "name": name,
        "width": int(w),
        "height": int(h),
        "sha256": content_sha256(encoded, kps, descs),
        "source": source,
        "n_features": {k: len(v) for k, v in kps.items()},
        "image_bytes": int(encoded.size),
    }
    thumb = thumbnail(img)
    entry["thumb_sha256"] = thumb_sha256(thumb)
    return PreparedObject(entry, encoded, kps, descs, thumb)


def prepared_from_arrays(
    name: str,
    img: np.ndarray,
    feats: dict[str, Features],
    source: Any,
    max_features: int | dict[str, int] | str | None = AUTO_CAP,
) -> PreparedObject:
    """A :class:`PreparedObject` for features that were extracted elsewhere (a schema upgrade): capped to
    ``max_features`` per kind (:func:`capped`), the image encoded by :func:`encode_model_image`.

    Parameters
    ----------
    name : str
    img : ndarray
        The model image (gray or BGR uint8).
    feats : dict of kind -> Features
    source : dict or None
        The source record for the object's entry.
    max_features : int, dict of kind -> int, "auto" or None
        The cap per kind (None: every feature kept).

    Returns
    -------
    PreparedObject
    """
    h, w = img.shape[:2]
    return _prepared(name, img, encode_model_image(img), capped(feats, w, h, max_features), source)
