"""The model database: enrolled objects, their images and features, in memory-mappable ``.npy`` shards.

Layout of a database directory (schema 2)::

    DB/manifest.json                     the commit point: schema and library version, database id,
                                         detectors, and the list of shards with the sha256 of each file
    DB/shards/<id>/objects.json          the shard's object table: name, size, content sha256, source
                                         (path and sha256 of the enrolled file), feature counts, image bytes
    DB/shards/<id>/images.npy            uint8: the objects' encoded model images, back to back
    DB/shards/<id>/thumbs.npy            uint8 (n, 64, 64): each model image in gray, resized to a square
                                         (the appearance check of verification reads these, not images.npy)
    DB/shards/<id>/<kind>.keypoints.npy  structured (xy, size, angle, response, octave, laplacian) per row
    DB/shards/<id>/<kind>.descriptors.npy  one row per keypoint: uint8 for SIFT (OpenCV's descriptors are
                                         integers 0-255), float16 for SURF (unit vectors, see
                                         :data:`DESCRIPTOR_STORAGE`), float32 otherwise

A shard holds the objects of one commit (one :meth:`ModelDB.enroll` or one batch of
:meth:`ModelDB.enroll_many`); it is immutable once the manifest names it. Removing or replacing an
object only marks its row dead in the manifest (a tombstone); a shard whose rows are mostly dead is
rewritten, and small shards are merged, so both stay cheap at any size. Opening reads the manifest and
the object tables only; arrays are memory-mapped and each file's sha256 is checked the first time it
is touched (:meth:`ModelDB.verify` checks everything). Every write is atomic (temporary file, then
rename; the manifest is replaced last), and nothing is ever unpickled. The database id is a hash of the
content (detector parameters, object names and content hashes): a prefilter or retrieval index built
for another id is stale.

Databases of schema 1 (one ``.npz`` per object) are not read directly: :meth:`ModelDB.upgrade`
converts one in place.
"""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import re
import secrets
import shutil
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from objrec import __version__
from objrec.fileio import (
    FileFormatError,
    atomic_write_bytes,
    atomic_write_json,
    check_manifest_header,
    file_sha256,
    read_json,
    sha256_bytes,
)
from objrec.imageio import InputError, check_frame, decode_image, to_bgr, to_gray
from objrec.types import Features

__all__ = [
    "ModelDB",
    "ModelObject",
    "ModelDBError",
    "ObjectInfo",
    "EnrollReport",
    "EnrollFailure",
    "SCHEMA_VERSION",
    "DEFAULT_DETECTORS",
    "DESCRIPTOR_STORAGE",
]

SCHEMA_VERSION = 2
FORMAT = "objrec-modeldb"
SHARD_FORMAT = "objrec-modeldb-shard"
MANIFEST = "manifest.json"
SHARDS = "shards"
THUMBS = "thumbs.npy"
#: Model images are scaled so their longer side is at most this (features keep full-resolution coordinates).
MAX_MODEL_SIDE = 1280
#: Relative scales at which model features are extracted (see :func:`extract_model_features`). Extra
#: levels (0.5) were measured to hurt: near-duplicate descriptors of one model point at two levels fail
#: Lowe's ratio test against each other (stream recall 1.0 -> 0.87 at full resolution).
MODEL_LEVELS = (1.0,)
#: Detectors enrolled by default, with their parameters: SURF is the fast primary level, SIFT the robust
#: escalation (hessian_threshold 400: the strong, repeatable blobs worth matching; OpenCV's default of 100
#: triples the keypoints for little gain in recognition).
DEFAULT_DETECTORS: dict[str, dict[str, Any]] = {"surf": {"hessian_threshold": 400.0}, "sift": {"n_features": 0}}
#: How descriptors are stored per kind. OpenCV's SIFT descriptors are integers 0-255 (stored exactly as
#: uint8, a quarter of float32; a descriptor that is not integral is stored as float32 instead). SURF's are
#: unit vectors whose float16 rounding (relative error 2**-11) leaves nearest neighbours and Lowe's ratio
#: decisions as they are except for ties closer than the rounding (see ``bench/bench_catalogue.py``).
DESCRIPTOR_STORAGE: dict[str, str] = {"sift": "uint8", "surf": "float16"}
#: Objects per :meth:`ModelDB.enroll_many` commit (one shard each): what a rerun after an interruption
#: may have to redo, against manifest writes that grow with the number of shards.
ENROLL_BATCH = 128
#: A shard is rewritten without its dead rows once at least this fraction of them is dead.
COMPACT_DEAD_FRACTION = 0.5
#: Shards of fewer objects than this are small; more than ``MAX_SMALL_SHARDS`` of them are merged.
SMALL_SHARD = 32
MAX_SMALL_SHARDS = 16
#: Seconds a shard dropped by a commit stays on disk, so that a reader which opened the manifest just
#: before the commit can still read it; it is deleted by the first write after that.
RETIRE_GRACE_S = 60.0
#: Earlier database ids remembered in ``compatible_ids`` (see :attr:`ModelDB.compatible_ids`).
MAX_COMPATIBLE_IDS = 32
KEYPOINT_DTYPE = np.dtype(
    [
        ("xy", "<f4", (2,)),
        ("size", "<f4"),
        ("angle", "<f4"),
        ("response", "<f4"),
        ("octave", "<i4"),
        ("laplacian", "i1"),
    ]
)
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")
_SHARD_ID_RE = re.compile(r"^s[0-9]{6}-[0-9a-f]{8}$")
# Our SURF kernels are Numba-parallel inside (they use every core) and the workqueue threading layer must
# not be entered from two threads at once; OpenCV's SIFT releases the GIL and runs in parallel threads.
_SERIAL_KINDS = {"surf"}
_serial_lock = threading.Lock()


class ModelDBError(FileFormatError):
    """A model database problem; the message names the file or object."""


@dataclass(frozen=True)
class ModelObject:
    """One enrolled object: its name, model image size and features per detector kind."""

    name: str
    width: int
    height: int
    features: dict[str, Features]
    image: np.ndarray | None = None
    views: str | None = None
    view_table: dict[str, Any] | None = None

    @property
    def corners(self) -> np.ndarray:
        w, h = self.width, self.height
        return np.array([[0, 0], [w, 0], [w, h], [0, h]], np.float64)


@dataclass(frozen=True)
class ObjectInfo:
    """What the object table records about an enrolled object (no arrays are read for it).

    Attributes
    ----------
    name, width, height
        The object's name and model image size in pixels.
    sha256 : str
        Hash of the stored content (image bytes, keypoints and descriptors): changes when it is replaced.
    source : dict or None
        ``{"path": str or None, "sha256": str}``: the enrolled file (or array content) and its hash, which
        lets a rerun of :meth:`ModelDB.enroll_many` skip what it already enrolled.
    n_features : dict
        Keypoints per detector kind.
    views : str or None
        The synthesised views enrolled with the object (see :mod:`objrec.views`); None for the image only.
    view_table : dict or None
        Where each view's keypoints lie among the object's rows (see :mod:`objrec.views`); None without views.
    """

    name: str
    width: int
    height: int
    sha256: str
    source: dict[str, Any] | None
    n_features: dict[str, int]
    views: str | None = None
    view_table: dict[str, Any] | None = None


@dataclass(frozen=True)
class EnrollFailure:
    """An item :meth:`ModelDB.enroll_many` could not enrol, and why."""

    name: str
    source: str
    reason: str


@dataclass
class EnrollReport:
    """Outcome of :meth:`ModelDB.enroll_many`: names enrolled, names skipped (already enrolled from the
    same content) and failures with their reason. True when nothing failed."""

    enrolled: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)
    failed: list[EnrollFailure] = field(default_factory=list)

    def __bool__(self) -> bool:
        return not self.failed


@dataclass(eq=False)
class _Prepared:
    """An object ready to be written: stored-form arrays and its object-table entry."""

    entry: dict[str, Any]
    image: np.ndarray  # encoded image bytes, uint8
    keypoints: dict[str, np.ndarray]  # kind -> KEYPOINT_DTYPE rows
    descriptors: dict[str, np.ndarray]  # kind -> stored dtype rows
    thumb: np.ndarray | None = None  # (THUMB_SIZE, THUMB_SIZE) uint8 gray


@dataclass(eq=False)
class _Shard:
    """A shard as the manifest names it, with its object table and row offsets."""

    entry: dict[str, Any]
    objects: list[dict[str, Any]]
    offsets: dict[str, np.ndarray]  # kind -> (n+1,) keypoint row offsets; "image" -> byte offsets

    @property
    def id(self) -> str:
        return self.entry["id"]

    @property
    def dead(self) -> set[int]:
        return set(self.entry.get("removed", []))


# -- feature extraction -------------------------------------------------------------------------------
def _detector(kind: str, params: dict[str, Any]):
    from objrec.features import make_detector

    return make_detector(kind, backend="cpu", **params)


def _scaled(f: Features, scale: float) -> Features:
    """Features found at ``scale`` mapped back to full-resolution pixel coordinates."""
    if scale == 1.0 or not len(f):
        return f
    return Features(f.xy / scale, f.size / scale, f.angle, f.response, f.octave, f.laplacian, f.descriptors, f.kind)


def _detect(kind: str, det: Any, gray: np.ndarray) -> Features:
    if kind in _SERIAL_KINDS:
        with _serial_lock:
            return det.detect_and_compute(gray)
    return det.detect_and_compute(gray)


def extract_model_features(
    image: np.ndarray, detectors: dict[str, dict[str, Any]], levels: tuple[float, ...] = MODEL_LEVELS
) -> dict[str, Features]:
    """Features of a model image for each detector, in full-resolution pixel coordinates.

    Besides the image itself, each extra level of ``levels`` (relative scales, e.g. 0.5) adds the features
    of a downscaled copy: a frame that sees the object small, or a recognizer that degrades resolution to
    keep its budget, then finds model features at the scales it can detect. Safe to call from several
    threads at once.
    """
    import cv2

    gray0 = to_gray(image)
    h, w = gray0.shape
    base = min(1.0, MAX_MODEL_SIDE / max(h, w))
    out = {}
    for kind, params in detectors.items():
        det = _detector(kind, params)
        parts = []
        for level in levels:
            scale = base * level
            if min(h, w) * scale < 32:
                break
            gray = (
                gray0
                if scale == 1.0
                else cv2.resize(gray0, (round(w * scale), round(h * scale)), interpolation=cv2.INTER_AREA)
            )
            parts.append(_scaled(_detect(kind, det, gray), scale))
        out[kind] = Features.concatenate(parts) if parts else Features.empty(det.descriptor_size, kind)
    return out


def stored_descriptors(kind: str, descriptors: np.ndarray) -> np.ndarray:
    """Descriptors in their storage dtype (:data:`DESCRIPTOR_STORAGE`); uint8 only where that is exact."""
    d = np.asarray(descriptors, np.float32)
    want = DESCRIPTOR_STORAGE.get(kind, "float32")
    if want == "uint8":
        u8 = np.clip(np.rint(d), 0, 255).astype(np.uint8)
        return u8 if np.array_equal(u8, d) else d
    return d.astype(want)


def _keypoint_rows(f: Features) -> np.ndarray:
    rows = np.empty(len(f), KEYPOINT_DTYPE)
    for k in KEYPOINT_DTYPE.names:
        rows[k] = getattr(f, k)
    return rows


def _content_sha256(image: np.ndarray, keypoints: dict[str, np.ndarray], descriptors: dict[str, np.ndarray]) -> str:
    h = hashlib.sha256(image.tobytes())
    for kind in sorted(keypoints):
        d = descriptors[kind]
        h.update(f"\0{kind}\0{d.dtype.str}\0{d.shape}\0".encode())
        h.update(keypoints[kind].tobytes())
        h.update(d.tobytes())
    return h.hexdigest()


def _load_source(name: str, image: Any) -> tuple[np.ndarray, np.ndarray, dict[str, Any]]:
    """(pixels, encoded bytes to store, source record) for a file path or an array."""
    import cv2

    if isinstance(image, np.ndarray) or image is None:
        img = check_frame(image, f"image for {name!r}")
        img = to_bgr(img) if img.ndim == 3 else img
        ok, png = cv2.imencode(".png", img, [cv2.IMWRITE_PNG_COMPRESSION, 3])
        if not ok:  # pragma: no cover - PNG takes every 8-bit gray or BGR image
            raise InputError(f"image for {name!r}: could not be encoded as PNG")
        h = hashlib.sha256(f"{img.shape}\0{img.dtype.str}\0".encode() + img.tobytes())
        return img, png.reshape(-1), {"path": None, "sha256": h.hexdigest()}
    path = Path(image)
    if not path.exists():
        raise InputError(f"{path}: no such file")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, expected an image file")
    data = np.fromfile(str(path), dtype=np.uint8)
    img = decode_image(data, str(path))
    # The file's own bytes are stored: they decode to exactly these pixels, usually in far fewer bytes.
    return (to_bgr(img) if img.ndim == 3 else img), data, {"path": str(path), "sha256": sha256_bytes(data.data)}


def source_sha256(image: Any) -> str:
    """The hash :class:`ObjectInfo` ``source`` records for a file path or an array (for resuming)."""
    if isinstance(image, np.ndarray):
        img = to_bgr(image) if image.ndim == 3 else image
        return hashlib.sha256(f"{img.shape}\0{img.dtype.str}\0".encode() + img.tobytes()).hexdigest()
    return sha256_bytes(Path(image).read_bytes())


def prepare_object(name: str, image: Any, detectors: dict[str, dict[str, Any]], views: str | None = None) -> _Prepared:
    """Read or check an image, extract its features and put everything in stored form (thread-safe).

    With ``views`` (see :mod:`objrec.views`), the features of synthesised views of the image follow its own,
    in model coordinates, and the object's entry records the setting.

    Raises
    ------
    InputError
        For a bad name, an unreadable image or one without features; the message says which and why.
    """
    from objrec.views import add_view_features, check_views

    check_name(name)
    views = check_views(views)
    img, encoded, source = _load_source(name, image)
    feats = extract_model_features(img, detectors)
    if all(len(f) == 0 for f in feats.values()):
        raise InputError(f"image for {name!r}: no features found (blank or textureless image cannot be enrolled)")
    if views is None:
        return _prepared(name, img, encoded, feats, source)
    feats, table = add_view_features(img, feats, detectors, views)
    p = _prepared(name, img, encoded, feats, source)
    p.entry.update(views=views, view_table=table)
    return p


def _prepared(name: str, img: np.ndarray, encoded: np.ndarray, feats: dict[str, Features], source: Any) -> _Prepared:
    """An object's entry and arrays in stored form: keypoint rows, compact descriptors, content hash."""
    kps = {k: _keypoint_rows(f) for k, f in feats.items()}
    descs = {k: stored_descriptors(k, f.descriptors) for k, f in feats.items()}
    h, w = img.shape[:2]
    entry = {
        "name": name,
        "width": int(w),
        "height": int(h),
        "sha256": _content_sha256(encoded, kps, descs),
        "source": source,
        "n_features": {k: len(v) for k, v in kps.items()},
        "image_bytes": int(encoded.size),
    }
    thumb = thumbnail(img)
    entry["thumb_sha256"] = thumb_sha256(thumb)
    return _Prepared(entry, encoded, kps, descs, thumb)


#: Side of the square gray thumbnail stored per object for verification's appearance check.
THUMB_SIZE = 64


def thumbnail(img: np.ndarray) -> np.ndarray:
    """The stored thumbnail of a model image: gray, area-averaged to ``THUMB_SIZE`` x ``THUMB_SIZE`` (each
    axis scaled on its own, so the thumbnail's pixel grid is a fixed grid over the model's outline)."""
    import cv2

    return cv2.resize(to_gray(img), (THUMB_SIZE, THUMB_SIZE), interpolation=cv2.INTER_AREA)


def thumb_sha256(thumb: np.ndarray) -> str:
    """The hash an object's entry records for its thumbnail rows (checked when they are first read)."""
    return sha256_bytes(thumb.tobytes())


def check_name(name: Any) -> None:
    """Raise :class:`InputError` unless ``name`` is a valid object name."""
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise InputError(
            f"object name {name!r}: use 1-128 characters from letters, digits, '_', '.', '-', "
            "starting with a letter or digit"
        )


# -- shard files ----------------------------------------------------------------------------------------
def _npy_bytes(array: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.lib.format.write_array(buf, np.ascontiguousarray(array), allow_pickle=False)
    return buf.getvalue()


def _write_checked(path: Path, data: bytes) -> str:
    """Write ``data`` atomically, read it back and return its sha256 (a short or damaged write raises)."""
    digest = sha256_bytes(data)
    atomic_write_bytes(path, data)
    if file_sha256(path) != digest:
        raise ModelDBError(f"{path}: read back differs from what was written (disk or file system error)")
    return digest


def _write_shard(shard_dir: Path, kinds: Iterable[str], objects: list[_Prepared]) -> dict[str, str]:
    """Write one shard's files; returns {file name: sha256} for the manifest."""
    files: dict[str, bytes] = {}
    empty = np.zeros(0, np.uint8)
    files["images.npy"] = _npy_bytes(np.concatenate([o.image for o in objects]) if objects else empty)
    thumbs = [o.thumb for o in objects]
    files["thumbs.npy"] = _npy_bytes(np.stack(thumbs) if thumbs else np.zeros((0, THUMB_SIZE, THUMB_SIZE), np.uint8))
    for kind in kinds:
        kps = [o.keypoints[kind] for o in objects]
        descs = [o.descriptors[kind] for o in objects]
        dtypes = {d.dtype for d in descs if len(d)}
        dtype = dtypes.pop() if len(dtypes) == 1 else np.dtype(np.float32)
        dim = max((d.shape[1] for d in descs), default=128)
        files[f"{kind}.keypoints.npy"] = _npy_bytes(np.concatenate(kps) if kps else np.zeros(0, KEYPOINT_DTYPE))
        desc = np.concatenate([d.astype(dtype, copy=False) for d in descs]) if descs else np.zeros((0, dim), dtype)
        files[f"{kind}.descriptors.npy"] = _npy_bytes(desc)
    table = {"format": SHARD_FORMAT, "objects": [o.entry for o in objects]}
    files["objects.json"] = (json.dumps(table, sort_keys=True) + "\n").encode()
    return {fname: _write_checked(shard_dir / fname, data) for fname, data in files.items()}


def _offsets(objects: list[dict[str, Any]], kinds: Iterable[str]) -> dict[str, np.ndarray]:
    out = {k: np.concatenate([[0], np.cumsum([o["n_features"].get(k, 0) for o in objects])]) for k in kinds}
    out["image"] = np.concatenate([[0], np.cumsum([o["image_bytes"] for o in objects])])
    return {k: v.astype(np.int64) for k, v in out.items()}


def _read_table(shard_dir: Path, entry: dict[str, Any], kinds: Iterable[str]) -> _Shard:
    path = shard_dir / "objects.json"
    if not path.exists():
        raise ModelDBError(f"{path}: object table not found")
    data = path.read_bytes()
    if sha256_bytes(data) != entry["files"].get("objects.json"):
        raise ModelDBError(f"{path}: sha256 mismatch (file damaged or modified after it was written)")
    try:
        table = json.loads(data)
        objects = table["objects"]
        if table.get("format") != SHARD_FORMAT or not isinstance(objects, list):
            raise ValueError("not an objrec shard object table")
        need = {"name", "width", "height", "sha256", "n_features", "image_bytes", "seq"}
        for o in objects:
            if not need <= set(o):
                raise ValueError(f"object entry lacks {sorted(need - set(o))}")
    except (ValueError, TypeError, KeyError) as exc:
        raise ModelDBError(f"{path}: malformed object table ({exc})") from None
    if len(objects) != entry.get("n_objects"):
        raise ModelDBError(f"{path}: holds {len(objects)} objects, the manifest says {entry.get('n_objects')}")
    return _Shard(entry, _renamed(objects, entry), _offsets(objects, kinds))


def _renamed(objects: list[dict[str, Any]], entry: dict[str, Any]) -> list[dict[str, Any]]:
    """The object table with the manifest's renames applied (a shard's files never change after it is
    written, so a rename is recorded in the shard's manifest entry: ``"renamed": {row: new name}``)."""
    renamed = entry.get("renamed") or {}
    if not renamed:
        return objects
    return [dict(o, name=renamed[str(r)]) if str(r) in renamed else o for r, o in enumerate(objects)]


def _prepared_from_arrays(name: str, img: np.ndarray, feats: dict[str, Features], source: Any) -> _Prepared:
    """A :class:`_Prepared` for features that were extracted elsewhere (an upgrade from schema 1)."""
    import cv2

    ok, png = cv2.imencode(".png", img, [cv2.IMWRITE_PNG_COMPRESSION, 3])
    if not ok:  # pragma: no cover - PNG takes every 8-bit gray or BGR image
        raise ModelDBError(f"object {name!r}: its image could not be encoded as PNG")
    return _prepared(name, img, png.reshape(-1), feats, source)


def _content_id(detectors: dict[str, dict[str, Any]], objects: Iterable[tuple[str, str]]) -> str:
    h = hashlib.sha256()
    h.update(repr(sorted((k, sorted(v.items())) for k, v in detectors.items())).encode())
    for name, digest in sorted(objects):
        h.update(f"{name}\0{digest}\0".encode())
    return h.hexdigest()[:16]


@contextlib.contextmanager
def _file_lock(path: Path, blocking: bool = True) -> Iterator[bool]:
    """An exclusive advisory lock on ``path`` (one writer per database at a time; a no-op without fcntl).

    Yields True when the lock is held; with ``blocking=False`` it yields False at once if another process
    holds it.
    """
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not POSIX
        yield True
        return
    with open(path, "a+b") as f:
        try:
            fcntl.flock(f.fileno(), fcntl.LOCK_EX | (0 if blocking else fcntl.LOCK_NB))
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(f.fileno(), fcntl.LOCK_UN)


def _stat_signature(path: Path) -> tuple[int, int, int] | None:
    """Changes whenever the manifest is replaced (a new inode) or rewritten."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return (st.st_ino, st.st_mtime_ns, st.st_size)


def _check_manifest(mpath: Path, manifest: dict[str, Any]) -> None:
    if manifest.get("format") == FORMAT and manifest.get("schema_version") == 1:
        raise ModelDBError(
            f"{mpath}: schema 1 model database (one .npz per object), which this objrec no longer reads; "
            f"convert it once, in place, with objrec.ModelDB.upgrade({str(mpath.parent)!r})"
        )
    check_manifest_header(mpath, manifest, FORMAT, SCHEMA_VERSION, "model database", ModelDBError)
    shards = manifest.get("shards")
    if not isinstance(shards, list) or not isinstance(manifest.get("detectors"), dict):
        raise ModelDBError(f"{mpath}: manifest lacks 'shards' list or 'detectors' table")
    for s in shards:
        ok = (
            isinstance(s, dict)
            and isinstance(s.get("id"), str)
            and _SHARD_ID_RE.match(s["id"])
            and isinstance(s.get("n_objects"), int)
            and isinstance(s.get("files"), dict)
            and isinstance(s.get("removed", []), list)
            and isinstance(s.get("renamed", {}), dict)
            and all(isinstance(v, str) and _NAME_RE.match(v) for v in s.get("renamed", {}).values())
        )
        if not ok:
            raise ModelDBError(f"{mpath}: malformed shard entry {s!r}")
    for key in ("next_seq", "next_shard"):
        if not isinstance(manifest.get(key), int):
            raise ModelDBError(f"{mpath}: manifest lacks the integer {key!r}")


class ModelDB:
    """A directory of enrolled objects. Use :meth:`create` or :meth:`open`; every change is saved at once.

    Reading is cheap at any size: opening reads the manifest and the shards' object tables, and an
    object's arrays are sliced out of memory-mapped files when it is asked for. Writers take an exclusive
    lock on ``DB/.lock``; a reader sees the content of the manifest it opened.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> from objrec import ModelDB
    >>> rng = np.random.default_rng(1)
    >>> img = (rng.random((120, 160)) * 255).astype(np.uint8)
    >>> db = ModelDB.create(os.path.join(tempfile.mkdtemp(), "db"))
    >>> db.enroll("noise", img).name
    'noise'
    >>> db.names
    ['noise']
    """

    #: Objects whose features stay cached after :meth:`get` (the rest are re-read from the memory maps).
    CACHE_OBJECTS = 64

    def __init__(self, path: Path, manifest: dict[str, Any], shards: list[_Shard]) -> None:
        self.path = Path(path)
        self._arrays: dict[tuple[str, str], np.ndarray] = {}
        self._checked: set[tuple[str, str]] = set()  # shard files whose sha256 was checked
        # Objects (shard, row) whose content sha256 was checked; (shard, ~row) for their thumbnails.
        self._verified: set[tuple[str, int]] = set()
        self._cache: dict[tuple[str, bool], ModelObject] = {}
        self._thumbs: dict[str, np.ndarray] = {}  # made from images, for shards written without thumbnails
        self._set_state(manifest, shards)

    # -- construction -------------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        path: str | os.PathLike,
        detectors: dict[str, dict[str, Any]] | None = None,
        exist_ok: bool = False,
    ) -> ModelDB:
        """Create an empty database at ``path`` (a directory). With ``exist_ok``, open an existing one."""
        path = Path(path)
        if (path / MANIFEST).exists():
            if exist_ok:
                return cls.open(path)
            raise ModelDBError(f"{path / MANIFEST}: a database already exists here (use ModelDB.open)")
        if path.exists() and not path.is_dir():
            raise ModelDBError(f"{path}: exists and is not a directory")
        if path.is_dir() and any(path.iterdir()):
            raise ModelDBError(f"{path}: directory is not empty and holds no {MANIFEST}; refusing to use it")
        dets = {k: dict(v) for k, v in (detectors or DEFAULT_DETECTORS).items()}
        for kind in dets:
            if kind not in ("sift", "surf"):
                raise ValueError(f"detectors: unknown detector {kind!r} (expected 'sift' or 'surf')")
        manifest = {
            "format": FORMAT,
            "schema_version": SCHEMA_VERSION,
            "library_version": __version__,
            "detectors": dets,
            "descriptor_storage": {k: DESCRIPTOR_STORAGE.get(k, "float32") for k in dets},
            "shards": [],
            "next_seq": 0,
            "next_shard": 0,
            "database_id": _content_id(dets, []),
        }
        path.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path / MANIFEST, manifest)
        return cls(path, manifest, [])

    @classmethod
    def open(cls, path: str | os.PathLike) -> ModelDB:
        """Open an existing database; errors name the file that is missing, damaged or too new."""
        path = Path(path)
        mpath = path / MANIFEST
        if not path.exists():
            raise ModelDBError(f"{path}: no such model database")
        if not mpath.exists():
            raise ModelDBError(f"{mpath}: not found ({path} is not an objrec model database)")
        try:
            manifest = read_json(mpath)
        except FileFormatError as exc:
            raise ModelDBError(str(exc)) from None
        _check_manifest(mpath, manifest)
        kinds = list(manifest["detectors"])
        shards = [_read_table(path / SHARDS / e["id"], e, kinds) for e in manifest["shards"]]
        db = cls(path, manifest, shards)
        db._signature = _stat_signature(mpath)
        return db

    def _set_state(self, manifest: dict[str, Any], shards: list[_Shard]) -> None:
        live = []
        for si, sh in enumerate(shards):
            dead = sh.dead
            live += [(o["seq"], o["name"], si, r) for r, o in enumerate(sh.objects) if r not in dead]
        live.sort()
        index = {name: (si, r) for _, name, si, r in live}
        if len(index) != len(live):
            raise ModelDBError(f"{self.path / MANIFEST}: an object name is live in two shards")
        self._manifest = manifest
        self._shards = shards
        self._live = index
        ids = {s.id for s in shards}
        self._arrays = {k: v for k, v in self._arrays.items() if k[0] in ids}
        self._cache.clear()
        self._thumbs.clear()
        self._infos: list[ObjectInfo] | None = None
        self._signature = _stat_signature(self.path / MANIFEST)

    # -- read access --------------------------------------------------------------------------------
    @property
    def database_id(self) -> str:
        return self._manifest["database_id"]

    @property
    def compatible_ids(self) -> list[str]:
        """Earlier ids of this database whose prefilter is still valid: the content changed since only by
        removals and renames (an enrolment or replacement empties the list)."""
        return list(self._manifest.get("compatible_ids", []))

    @property
    def detectors(self) -> dict[str, dict[str, Any]]:
        return {k: dict(v) for k, v in self._manifest["detectors"].items()}

    @property
    def names(self) -> list[str]:
        """Names of the enrolled objects, in the order they were enrolled."""
        return list(self._live)

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, name: object) -> bool:
        return name in self._live

    def _locate(self, name: str) -> tuple[_Shard, int]:
        try:
            si, row = self._live[name]
        except (KeyError, TypeError):
            shown = self.names[:20]
            known = ", ".join(shown) + (f", ... ({len(self)} in all)" if len(self) > len(shown) else "")
            raise KeyError(f"unknown object {name!r} in {self.path} (enrolled: {known or 'none'})") from None
        return self._shards[si], row

    def info(self, name: str) -> ObjectInfo:
        """What the object table records about ``name`` (no array is read)."""
        sh, row = self._locate(name)
        o = sh.objects[row]
        return ObjectInfo(
            o["name"],
            o["width"],
            o["height"],
            o["sha256"],
            o.get("source"),
            dict(o["n_features"]),
            o.get("views"),
            o.get("view_table"),
        )

    def infos(self) -> list[ObjectInfo]:
        """:meth:`info` of every enrolled object, in the order of :attr:`names` (no array is read)."""
        if self._infos is None:
            self._infos = [self.info(n) for n in self._live]
        return list(self._infos)

    def _array(self, shard: _Shard, fname: str, check: bool = True) -> np.ndarray:
        """A shard file, memory-mapped.

        With ``check`` its sha256 is checked the first time this database touches it. Reads of single
        objects pass ``check=False`` and check the object's own rows instead (:meth:`_verify_object`),
        which costs in proportion to what is read; a file that cannot even be mapped is then hashed, so
        the error names it as damaged.
        """
        key = (shard.id, fname)
        arr = self._arrays.get(key)
        if arr is not None and (not check or key in self._checked):
            return arr
        path = self.path / SHARDS / shard.id / fname
        if shard.entry["files"].get(fname) is None:
            raise ModelDBError(f"{self.path / MANIFEST}: shard {shard.id} lists no file {fname}")
        if not path.exists():
            raise ModelDBError(f"{path}: array file not found" + self._changed_note())
        if check:
            self._check_file(shard, fname)
        if arr is None:
            try:
                arr = np.load(path, mmap_mode="r", allow_pickle=False)
            except (ValueError, OSError, EOFError) as exc:
                self._check_file(shard, fname)
                raise ModelDBError(f"{path}: not a readable .npy array file ({type(exc).__name__}: {exc})") from None
            kind = "image" if fname == "images.npy" else fname.split(".")[0]
            rows = len(shard.objects) if fname == THUMBS else shard.offsets[kind][-1]
            if arr.shape[0] != rows or (fname.endswith("keypoints.npy") and arr.dtype != KEYPOINT_DTYPE):
                self._check_file(shard, fname)
                raise ModelDBError(f"{path}: shape {arr.shape} / dtype {arr.dtype} disagree with the object table")
            self._arrays[key] = arr
        return arr

    def _check_file(self, shard: _Shard, fname: str) -> None:
        """The shard file's sha256 against the manifest (once per database); ModelDBError naming it if not."""
        key = (shard.id, fname)
        if key in self._checked:
            return
        path = self.path / SHARDS / shard.id / fname
        if file_sha256(path) != shard.entry["files"].get(fname):
            raise ModelDBError(f"{path}: sha256 mismatch (file damaged or modified after it was written)")
        self._checked.add(key)

    def _verify_object(self, shard: _Shard, row: int) -> None:
        """An object's rows against its content sha256 (image bytes, keypoints and descriptors of every kind),
        once per database. On a mismatch the shard's files are hashed whole: a damaged one raises naming the
        file; when all match the manifest the rows are as written and the object is accepted."""
        if (shard.id, row) in self._verified:
            return
        kinds = sorted(self._manifest["detectors"])
        a, b = (int(x) for x in shard.offsets["image"][row : row + 2])
        image = self._array(shard, "images.npy", check=False)[a:b]
        kps, descs = {}, {}
        for kind in kinds:
            lo, hi = (int(x) for x in shard.offsets[kind][row : row + 2])
            kps[kind] = self._array(shard, f"{kind}.keypoints.npy", check=False)[lo:hi]
            descs[kind] = self._array(shard, f"{kind}.descriptors.npy", check=False)[lo:hi]
        if _content_sha256(image, kps, descs) != shard.objects[row]["sha256"]:
            for fname in sorted(shard.entry["files"]):
                if fname != "objects.json":
                    self._array(shard, fname, check=True)
        self._verified.add((shard.id, row))

    def _changed_note(self) -> str:
        if _stat_signature(self.path / MANIFEST) != self._signature:
            return " (another process changed the database since it was opened here; open it again)"
        return ""

    def _features(self, shard: _Shard, row: int, kind: str) -> Features:
        self._verify_object(shard, row)
        a, b = (int(x) for x in shard.offsets[kind][row : row + 2])
        kp = self._array(shard, f"{kind}.keypoints.npy", check=False)[a:b]
        desc = self._array(shard, f"{kind}.descriptors.npy", check=False)[a:b]
        # Features converts to its own dtypes: uint8/float16 descriptors become float32 copies here.
        return Features(kp["xy"], kp["size"], kp["angle"], kp["response"], kp["octave"], kp["laplacian"], desc, kind)

    def _image(self, shard: _Shard, row: int) -> np.ndarray:
        self._verify_object(shard, row)
        a, b = (int(x) for x in shard.offsets["image"][row : row + 2])
        data = np.array(self._array(shard, "images.npy", check=False)[a:b])
        img = decode_image(
            data, f"{self.path / SHARDS / shard.id / 'images.npy'} (object {shard.objects[row]['name']})"
        )
        return to_bgr(img) if img.ndim == 3 else img

    def thumbnail(self, name: str) -> np.ndarray:
        """The stored gray ``THUMB_SIZE`` x ``THUMB_SIZE`` thumbnail of ``name``'s model image (made from the
        image when its shard was written without thumbnails)."""
        sh, row = self._locate(name)
        if THUMBS in sh.entry["files"]:
            thumb = np.array(self._array(sh, THUMBS, check=False)[row])
            if (sh.id, ~row) not in self._verified:  # the thumbnail's rows against its own sha256, once
                if thumb_sha256(thumb) != sh.objects[row].get("thumb_sha256"):
                    self._check_file(sh, THUMBS)  # a damaged file raises, naming it
                self._verified.add((sh.id, ~row))
            return thumb
        if name not in self._thumbs:
            if len(self._thumbs) >= self.CACHE_OBJECTS:
                self._thumbs.pop(next(iter(self._thumbs)))
            self._thumbs[name] = thumbnail(self._image(sh, row))
        return self._thumbs[name]

    def get(self, name: str, with_image: bool = False) -> ModelObject:
        """The enrolled object ``name`` (KeyError naming the known objects if absent)."""
        key = (name, with_image)
        if key in self._cache:
            return self._cache[key]
        obj = self._model_object(name, list(self._manifest["detectors"]), with_image)
        if len(self._cache) >= self.CACHE_OBJECTS:
            self._cache.pop(next(iter(self._cache)))
        self._cache[key] = obj
        return obj

    def get_kind(self, name: str, kind: str) -> ModelObject:
        """``name`` with the features of one detector kind only (no image), read from the shards each call:
        for a matcher that keeps its own cache of the objects it matches."""
        if kind not in self._manifest["detectors"]:
            raise ValueError(f"kind: {kind!r} is not enrolled in {self.path} (has {list(self.detectors)})")
        return self._model_object(name, [kind], False)

    def _model_object(self, name: str, kinds: list[str], with_image: bool) -> ModelObject:
        sh, row = self._locate(name)
        o = sh.objects[row]
        feats = {kind: self._features(sh, row, kind) for kind in kinds}
        image = self._image(sh, row) if with_image else None
        w, h = int(o["width"]), int(o["height"])
        return ModelObject(o["name"], w, h, feats, image, o.get("views"), o.get("view_table"))

    def objects(self, with_image: bool = False) -> list[ModelObject]:
        return [self.get(n, with_image) for n in self.names]

    def image(self, name: str) -> np.ndarray:
        """The stored model image (BGR or gray uint8) of ``name``."""
        sh, row = self._locate(name)
        return self._image(sh, row)

    def descriptor_table(self, kind: str) -> tuple[np.ndarray, np.ndarray]:
        """Every enrolled descriptor of ``kind`` in its stored dtype, and the object of each row.

        Returns
        -------
        descriptors : (N, D) ndarray
            uint8 for SIFT, float16 for SURF (see :data:`DESCRIPTOR_STORAGE`); a copy out of the maps.
        owner : (N,) int64
            Index into :attr:`names` of the object each row belongs to.
        """
        if kind not in self._manifest["detectors"]:
            raise ValueError(f"kind: {kind!r} is not enrolled in {self.path} (has {list(self.detectors)})")
        order = {n: i for i, n in enumerate(self._live)}
        parts, owners = [], []
        for sh in self._shards:
            dead = sh.dead
            rows = [r for r in range(len(sh.objects)) if r not in dead]
            if not rows:
                continue
            off = sh.offsets[kind]
            desc = self._array(sh, f"{kind}.descriptors.npy")
            parts += [desc[off[r] : off[r + 1]] for r in rows]
            owners += [np.full(off[r + 1] - off[r], order[sh.objects[r]["name"]], np.int64) for r in rows]
        if not parts:
            return np.zeros((0, 128 if kind == "sift" else 64), np.float32), np.zeros(0, np.int64)
        dtypes = {p.dtype for p in parts}
        dtype = dtypes.pop() if len(dtypes) == 1 else np.dtype(np.float32)
        return np.concatenate([p.astype(dtype, copy=False) for p in parts]), np.concatenate(owners)

    # -- writes -------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def _writing(self) -> Iterator[None]:
        """Hold the write lock, on a state refreshed if another writer committed since we read it."""
        with _file_lock(self.path / ".lock"):
            detectors = self.detectors
            if self.refresh() and self.detectors != detectors:
                raise ModelDBError(f"{self.path / MANIFEST}: detectors changed under this open database")
            yield

    @contextlib.contextmanager
    def lock(self) -> Iterator[ModelDB]:
        """Hold the database's write lock (``DB/.lock``) on its current state: for files kept beside the
        database (prefilter, retrieval index) whose write must not interleave with another writer's."""
        with self._writing():
            yield self

    def enroll(
        self, name: str, image: str | os.PathLike | np.ndarray, replace: bool = False, views: str | None = None
    ) -> ModelObject:
        """Add an object from an image file or array (gray or BGR uint8). Saved atomically at once.

        ``views="affine"`` also enrols the features of affine-warped views of the image (ASIFT's tilts and
        rotations, :mod:`objrec.views`), for recognition under strong viewpoint change; None (or "none")
        enrols the image's own features only.
        """
        from objrec.views import check_views

        check_name(name)
        check_views(views)
        if name in self and not replace:
            raise ModelDBError(f"{self.path / MANIFEST}: object {name!r} is already enrolled (use replace=True)")
        refused = self._commit_batch([prepare_object(name, image, self.detectors, views)], replace)
        if refused:
            raise ModelDBError(f"{self.path / MANIFEST}: object {name!r} is already enrolled (use replace=True)")
        return self.get(name)

    def enroll_many(
        self,
        items: Iterable[tuple[str, str | os.PathLike | np.ndarray]],
        replace: bool = False,
        workers: int | None = None,
        batch_size: int = ENROLL_BATCH,
        progress: bool = True,
        views: str | None = None,
    ) -> EnrollReport:
        """Enrol many objects: features extracted in parallel threads, committed in batches, resumable.

        Parameters
        ----------
        items : iterable of (name, image)
            Object names with an image file path or array; read lazily, so a generator over a large
            folder is fine.
        replace : bool
            Re-enrol names already enrolled from different content (otherwise they are failures).
        workers : int, optional
            Extraction threads (default: the usable cores). OpenCV's SIFT releases the GIL; SURF, which is
            parallel inside, runs one image at a time.
        batch_size : int
            Objects per commit (one shard each). A rerun after an interruption skips every name already
            enrolled from the same content (file hash), so at most one batch is redone.
        progress : bool
            Show a tqdm progress bar on stderr.
        views : str, optional
            Synthesised views enrolled with every object (as for :meth:`enroll`). A rerun skips a name only
            when it was enrolled from the same content with the same views.

        Returns
        -------
        EnrollReport
            Enrolled and skipped names and the failures (unreadable image, no features, bad or repeated
            name, already enrolled from other content) with their reasons; the others are enrolled.
        """
        from objrec.enrolment import run_enrolment

        return run_enrolment(self, items, replace, workers, batch_size, progress, views)

    def remove(self, name: str | Iterable[str]) -> None:
        """Remove an enrolled object, or several in one commit (KeyError naming the first unknown one,
        and nothing removed). The database id changes; its prefilter stays valid."""
        names = [name] if isinstance(name, str) else list(name)
        with self._writing():
            for n in names:
                self._locate(n)
            self._commit([], set(names))
            self._maintain()

    def rename(self, old: str, new: str) -> None:
        """Rename an enrolled object in one commit (KeyError if ``old`` is unknown, ModelDBError if ``new``
        is taken). Nothing is re-extracted; the database id changes and its prefilter stays valid."""
        check_name(new)
        with self._writing():
            si, row = self._live.get(old, (None, None)) if isinstance(old, str) else (None, None)
            if si is None:
                self._locate(old)  # raises the KeyError naming the enrolled objects
            if new in self._live:
                raise ModelDBError(f"{self.path / MANIFEST}: object {new!r} is already enrolled")
            shards = list(self._shards)
            sh = shards[si]
            entry = dict(sh.entry, renamed={**sh.entry.get("renamed", {}), str(row): new})
            shards[si] = _Shard(entry, _renamed(sh.objects, {"renamed": {str(row): new}}), sh.offsets)
            self._publish(dict(self._manifest), shards, keeps_dependents=True)

    def _commit_batch(self, batch: list[_Prepared], replace: bool) -> list[_Prepared]:
        """Commit ``batch`` as one shard; returns the objects refused because their name is enrolled."""
        with self._writing():
            refused = [p for p in batch if p.entry["name"] in self._live and not replace]
            keep = [p for p in batch if p not in refused]
            if keep:
                self._commit(keep, set())
                self._maintain()
        return refused

    def _commit(self, add: list[_Prepared], drop: set[str]) -> None:
        """Write a shard for ``add``, tombstone ``drop`` and the names ``add`` replaces, then the manifest."""
        manifest = dict(self._manifest)
        kinds = list(manifest["detectors"])
        shards = list(self._shards)
        dead: dict[int, set[int]] = {}
        for name in drop | {p.entry["name"] for p in add if p.entry["name"] in self._live}:
            si, row = self._live[name]
            dead.setdefault(si, set()).add(row)
        for si, rows in dead.items():
            entry = dict(shards[si].entry, removed=sorted(shards[si].dead | rows))
            shards[si] = _Shard(entry, shards[si].objects, shards[si].offsets)
        if add:
            for i, p in enumerate(add):
                p.entry["seq"] = manifest["next_seq"] + i
            shards.append(self._new_shard(manifest, kinds, add))
            manifest["next_seq"] += len(add)
        self._publish(manifest, [s for s in shards if len(s.dead) < len(s.objects)], keeps_dependents=not add)

    def _new_shard(self, manifest: dict[str, Any], kinds: list[str], objects: list[_Prepared]) -> _Shard:
        # The random part keeps a shard left unreferenced by a crashed writer from being overwritten.
        sid = f"s{manifest['next_shard'] % 1_000_000:06d}-{secrets.token_hex(4)}"
        manifest["next_shard"] += 1
        files = _write_shard(self.path / SHARDS / sid, kinds, objects)
        entry = {"id": sid, "n_objects": len(objects), "removed": [], "files": files}
        tables = [p.entry for p in objects]
        return _Shard(entry, tables, _offsets(tables, kinds))

    def _publish(self, manifest: dict[str, Any], shards: list[_Shard], keeps_dependents: bool = False) -> None:
        """Replace the manifest (the commit point) and take the new state.

        ``keeps_dependents``: the change only removes or renames objects, so a prefilter trained for the
        previous content is still valid; the previous id joins ``compatible_ids`` in this same commit.
        Shards this commit drops are listed as retired (kept on disk for readers for a grace period).
        """
        import time

        manifest["shards"] = [s.entry for s in shards]
        manifest["library_version"] = __version__
        live = [(o["name"], o["sha256"]) for s in shards for r, o in enumerate(s.objects) if r not in s.dead]
        previous = self._manifest.get("database_id")
        manifest["database_id"] = _content_id(manifest["detectors"], live)
        compatible = list(self._manifest.get("compatible_ids", [])) + [previous] if keeps_dependents else []
        compatible = [c for c in dict.fromkeys(compatible) if c and c != manifest["database_id"]]
        manifest["compatible_ids"] = compatible[-MAX_COMPATIBLE_IDS:]
        now, named = time.time(), {s.id for s in shards}
        retired = [r for r in self._manifest.get("retired", []) if now - r["at"] < RETIRE_GRACE_S]
        retired += [{"id": s.id, "at": now} for s in self._shards if s.id not in named]
        manifest["retired"] = [r for r in retired if r["id"] not in named]
        atomic_write_json(self.path / MANIFEST, manifest)
        self._set_state(manifest, shards)

    def _maintain(self) -> None:
        """Rewrite mostly-dead shards, merge small ones and delete files no manifest names (lock held)."""
        victims = [s for s in self._shards if s.dead and len(s.dead) >= COMPACT_DEAD_FRACTION * len(s.objects)]
        small = [s for s in self._shards if len(s.objects) - len(s.dead) < SMALL_SHARD]
        if len(small) > MAX_SMALL_SHARDS:
            victims += [s for s in small if s not in victims]
        if victims:
            self._rewrite(victims)
        self._collect_garbage()

    def _rewrite(self, victims: list[_Shard]) -> None:
        """Copy the live objects of ``victims`` (arrays as stored, nothing re-extracted) into one shard."""
        kinds = list(self._manifest["detectors"])
        moved: list[_Prepared] = []
        for sh in victims:
            images = self._array(sh, "images.npy")
            thumbs = self._array(sh, THUMBS) if THUMBS in sh.entry["files"] else None
            arrays = {
                k: (self._array(sh, f"{k}.keypoints.npy"), self._array(sh, f"{k}.descriptors.npy")) for k in kinds
            }
            for r, o in enumerate(sh.objects):
                if r in sh.dead:
                    continue
                a, b = sh.offsets["image"][r : r + 2]
                rows = {k: slice(sh.offsets[k][r], sh.offsets[k][r + 1]) for k in kinds}
                kps = {k: np.array(arrays[k][0][rows[k]]) for k in kinds}
                descs = {k: np.array(arrays[k][1][rows[k]]) for k in kinds}
                entry = dict(o)
                if thumbs is not None:
                    thumb = np.array(thumbs[r])
                else:
                    thumb = thumbnail(self._image(sh, r))
                    entry["thumb_sha256"] = thumb_sha256(thumb)
                moved.append(_Prepared(entry, np.array(images[a:b]), kps, descs, thumb))
        manifest = dict(self._manifest)
        keep = [s for s in self._shards if s not in victims]
        if moved:
            moved.sort(key=lambda p: p.entry["seq"])
            keep.append(self._new_shard(manifest, kinds, moved))
        self._publish(manifest, keep, keeps_dependents=True)  # same content, same id

    def compact(self) -> int:
        """Rewrite every shard with dead rows or without thumbnails (``thumbs.npy``, made then from the stored
        images) and merge all small shards; returns the shards rewritten."""
        with self._writing():
            old = [s for s in self._shards if s.dead or THUMBS not in s.entry["files"]]
            victims = old + [s for s in self._shards if len(s.objects) < SMALL_SHARD and s not in old]
            if len(victims) > 1 or old:
                self._rewrite(victims)
            else:
                victims = []
            self._collect_garbage()
        return len(victims)

    def _retired(self) -> set[str]:
        """Shards dropped by a recent commit, still kept on disk for readers of the previous manifest."""
        import time

        now = time.time()
        return {r["id"] for r in self._manifest.get("retired", []) if now - r["at"] < RETIRE_GRACE_S}

    def _unnamed_files(self, newer_than: float | None = None) -> list[Path]:
        """Shard folders no manifest names and temporary files a killed writer left (retired shards still
        in their grace period excluded; with ``newer_than``, files modified after it too)."""
        keep = {s.id for s in self._shards} | self._retired()
        root = self.path / SHARDS
        found = []
        if root.is_dir():
            found += [
                d for d in root.iterdir() if d.name not in keep and (_SHARD_ID_RE.match(d.name) or ".tmp" in d.name)
            ]
        found += list(self.path.glob(".*.tmp"))
        found += [t for d in (self.path, self.path / "index") if d.is_dir() for t in d.rglob("*.tmp") if t not in found]
        if newer_than is not None:
            found = [f for f in found if f.exists() and f.stat().st_mtime <= newer_than]
        return sorted(set(found))

    def _collect_garbage(self) -> None:
        """Delete what :meth:`_unnamed_files` lists (called with the write lock held, so no write is in
        progress)."""
        for f in self._unnamed_files():
            shutil.rmtree(f, ignore_errors=True) if f.is_dir() else f.unlink(missing_ok=True)

    def orphans(self) -> list[Path]:
        """Files of this database that no commit names (left by a killed writer), without locking.

        While another process holds the write lock, files newer than the manifest are left out: they may
        belong to the write in progress.
        """
        self.refresh()
        with _file_lock(self.path / ".lock", blocking=False) as free:
            cutoff = None if free else (self.path / MANIFEST).stat().st_mtime
            return self._unnamed_files(newer_than=cutoff)

    def clean(self) -> list[Path]:
        """Delete the orphan files, holding the write lock (so never a write in progress); returns them."""
        with self._writing():
            found = self._unnamed_files()
            self._collect_garbage()
        return found

    def refresh(self) -> bool:
        """Take the current manifest if another process committed since this database read it."""
        if _stat_signature(self.path / MANIFEST) == self._signature:
            return False
        fresh = ModelDB.open(self.path)
        self._set_state(fresh._manifest, fresh._shards)
        return True

    # -- checks and format upgrades -----------------------------------------------------------------
    def verify(self) -> list[str]:
        """Check every file of every shard (sha256, array headers, row counts against the object tables).

        Returns
        -------
        list of str
            One line per problem, each naming the file; empty when the database is sound.
        """
        problems = []
        for sh in self._shards:
            try:
                _read_table(self.path / SHARDS / sh.id, sh.entry, self._manifest["detectors"])
            except ModelDBError as exc:
                problems.append(str(exc))
                continue
            for fname in sh.entry["files"]:
                if fname == "objects.json":
                    continue
                self._arrays.pop((sh.id, fname), None)  # forces the sha256 check again
                self._checked.discard((sh.id, fname))
                try:
                    self._array(sh, fname)
                except ModelDBError as exc:
                    problems.append(str(exc))
        return problems

    @classmethod
    def upgrade(cls, path: str | os.PathLike) -> ModelDB:
        """Convert a schema 1 database (one ``.npz`` per object) in place to the current layout.

        Features and images are carried over as stored (nothing is re-extracted), each array file checked
        against its sha256 first. The new manifest replaces the old one in one step, after which the old
        ``objects/`` folder is deleted; an interrupted upgrade leaves the old database as it was. Content
        hashes are those of the new layout, so the database id changes (retrain its prefilter).
        """
        from objrec.fileio import load_npz_verified

        path = Path(path)
        mpath = path / MANIFEST
        old = read_json(mpath) if mpath.exists() else {}
        if old.get("schema_version") != 1 or old.get("format") != FORMAT:
            return cls.open(path)
        kinds = list(old["detectors"])
        with _file_lock(path / ".lock"):
            prepared = []
            for seq, e in enumerate(old["objects"]):
                arrays = load_npz_verified(path / e["file"], e["sha256"])
                try:
                    feats = {k: Features.from_arrays(arrays, prefix=f"{k}__", kind=k) for k in kinds}
                    img = arrays["image"]
                except (KeyError, ValueError) as exc:
                    raise ModelDBError(f"{path / e['file']}: arrays missing or malformed ({exc})") from None
                p = _prepared_from_arrays(e["name"], img, feats, None)
                p.entry["seq"] = seq
                prepared.append(p)
            new = cls(path, {**old, "shards": [], "next_seq": len(prepared), "next_shard": 0}, [])
            manifest = {k: v for k, v in old.items() if k != "objects"}
            manifest.update(schema_version=SCHEMA_VERSION, next_seq=len(prepared), next_shard=0)
            manifest["descriptor_storage"] = {k: DESCRIPTOR_STORAGE.get(k, "float32") for k in kinds}
            shards = [
                new._new_shard(manifest, kinds, prepared[i : i + ENROLL_BATCH])
                for i in range(0, len(prepared), ENROLL_BATCH)
            ]
            new._publish(manifest, shards)
            shutil.rmtree(path / "objects", ignore_errors=True)
        return cls.open(path)

    def __repr__(self) -> str:
        shown = self.names[:5] + (["..."] if len(self) > 5 else [])
        return f"ModelDB({str(self.path)!r}, objects={len(self)} {shown}, id={self.database_id})"
