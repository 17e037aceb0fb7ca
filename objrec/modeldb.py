"""The model database: enrolled objects, their images and features, stored as ``.npz`` + JSON manifest.

Layout of a database directory::

    DB/manifest.json              schema version, library version, database id, detectors, objects
    DB/objects/<name>-<h>.npz     per object: the model image (BGR uint8) and features per detector

Every write is atomic (temporary file, then rename; the manifest is replaced last), and nothing is
ever unpickled. The database id is a hash of the content (detector parameters, object names and
array hashes): a prefilter trained for another id is stale.
"""

from __future__ import annotations

import hashlib
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from objrec import __version__
from objrec.fileio import (
    FileFormatError,
    atomic_write_bytes,
    atomic_write_json,
    check_manifest_header,
    load_npz_verified,
    npz_bytes,
    read_json,
    sha256_bytes,
)
from objrec.imageio import InputError, check_frame, read_image, to_bgr, to_gray
from objrec.types import Features

__all__ = ["ModelDB", "ModelObject", "ModelDBError", "SCHEMA_VERSION", "DEFAULT_DETECTORS"]

SCHEMA_VERSION = 1
FORMAT = "objrec-modeldb"
MANIFEST = "manifest.json"
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
_NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.\-]{0,127}$")


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

    @property
    def corners(self) -> np.ndarray:
        w, h = self.width, self.height
        return np.array([[0, 0], [w, 0], [w, h], [0, h]], np.float64)


def _detector(kind: str, params: dict[str, Any]):
    from objrec.features import make_detector

    return make_detector(kind, backend="cpu", **params)


def _scaled(f: Features, scale: float) -> Features:
    """Features found at ``scale`` mapped back to full-resolution pixel coordinates."""
    if scale == 1.0 or not len(f):
        return f
    return Features(f.xy / scale, f.size / scale, f.angle, f.response, f.octave, f.laplacian, f.descriptors, f.kind)


def extract_model_features(
    image: np.ndarray, detectors: dict[str, dict[str, Any]], levels: tuple[float, ...] = MODEL_LEVELS
) -> dict[str, Features]:
    """Features of a model image for each detector, in full-resolution pixel coordinates.

    Besides the image itself, each extra level of ``levels`` (relative scales, e.g. 0.5) adds the features
    of a downscaled copy: a frame that sees the object small, or a recognizer that degrades resolution to
    keep its budget, then finds model features at the scales it can detect.
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
            parts.append(_scaled(det.detect_and_compute(gray), scale))
        out[kind] = Features.concatenate(parts) if parts else Features.empty(det.descriptor_size, kind)
    return out


class ModelDB:
    """A directory of enrolled objects. Use :meth:`create` or :meth:`open`; every change is saved at once.

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

    def __init__(self, path: Path, manifest: dict[str, Any]) -> None:
        self.path = path
        self._manifest = manifest
        self._cache: dict[str, ModelObject] = {}

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
            "objects": [],
        }
        manifest["database_id"] = cls._content_id(manifest)
        path.mkdir(parents=True, exist_ok=True)
        atomic_write_json(path / MANIFEST, manifest)
        return cls(path, manifest)

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
        check_manifest_header(mpath, manifest, FORMAT, SCHEMA_VERSION, "model database", ModelDBError)
        objs = manifest.get("objects")
        if not isinstance(objs, list) or not isinstance(manifest.get("detectors"), dict):
            raise ModelDBError(f"{mpath}: manifest lacks 'objects' list or 'detectors' table")
        for o in objs:
            if not isinstance(o, dict) or not {"name", "file", "sha256", "width", "height"} <= set(o):
                raise ModelDBError(f"{mpath}: malformed object entry {o!r}")
        return cls(path, manifest)

    # -- read access --------------------------------------------------------------------------------
    @property
    def database_id(self) -> str:
        return self._manifest["database_id"]

    @property
    def detectors(self) -> dict[str, dict[str, Any]]:
        return {k: dict(v) for k, v in self._manifest["detectors"].items()}

    @property
    def names(self) -> list[str]:
        return [o["name"] for o in self._manifest["objects"]]

    def __len__(self) -> int:
        return len(self._manifest["objects"])

    def __contains__(self, name: str) -> bool:
        return name in self.names

    def _entry(self, name: str) -> dict[str, Any]:
        for o in self._manifest["objects"]:
            if o["name"] == name:
                return o
        known = ", ".join(self.names) or "none"
        raise KeyError(f"unknown object {name!r} in {self.path} (enrolled: {known})")

    def get(self, name: str, with_image: bool = False) -> ModelObject:
        """The enrolled object ``name`` (KeyError naming the known objects if absent)."""
        key = name + ("#img" if with_image else "")
        if key in self._cache:
            return self._cache[key]
        e = self._entry(name)
        arrays = load_npz_verified(self.path / e["file"], e["sha256"])
        try:
            feats = {kind: Features.from_arrays(arrays, prefix=f"{kind}__", kind=kind) for kind in self.detectors}
        except (KeyError, ValueError) as exc:
            raise ModelDBError(f"{self.path / e['file']}: arrays missing or malformed ({exc})") from None
        image = arrays.get("image") if with_image else None
        obj = ModelObject(e["name"], int(e["width"]), int(e["height"]), feats, image)
        self._cache[key] = obj
        return obj

    def objects(self, with_image: bool = False) -> list[ModelObject]:
        return [self.get(n, with_image) for n in self.names]

    def image(self, name: str) -> np.ndarray:
        """The stored model image (BGR or gray uint8) of ``name``."""
        img = self.get(name, with_image=True).image
        if img is None:
            raise ModelDBError(f"{self.path}: object {name!r} has no stored image")
        return img

    # -- writes -------------------------------------------------------------------------------------
    def enroll(self, name: str, image: str | os.PathLike | np.ndarray, replace: bool = False) -> ModelObject:
        """Add an object from an image file or array (gray or BGR uint8). Saved atomically at once."""
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise InputError(
                f"object name {name!r}: use 1-128 characters from letters, digits, '_', '.', '-', "
                "starting with a letter or digit"
            )
        if name in self.names and not replace:
            raise ModelDBError(f"{self.path / MANIFEST}: object {name!r} is already enrolled (use replace=True)")
        if isinstance(image, np.ndarray) or image is None:
            img = check_frame(image, f"image for {name!r}")
        else:
            img = read_image(image)
        if img.ndim == 3:
            img = to_bgr(img)
        feats = extract_model_features(img, self.detectors)
        if all(len(f) == 0 for f in feats.values()):
            raise InputError(f"image for {name!r}: no features found (blank or textureless image cannot be enrolled)")
        arrays: dict[str, np.ndarray] = {"image": img}
        for kind, f in feats.items():
            arrays.update(f.to_arrays(prefix=f"{kind}__"))
        data = npz_bytes(arrays)
        digest = sha256_bytes(data)
        rel = f"objects/{name}-{digest[:12]}.npz"
        atomic_write_bytes(self.path / rel, data)
        h, w = img.shape[:2]
        entry = {
            "name": name,
            "file": rel,
            "sha256": digest,
            "width": int(w),
            "height": int(h),
            "n_features": {k: len(f) for k, f in feats.items()},
        }
        objs = [o for o in self._manifest["objects"] if o["name"] != name]
        old = [o for o in self._manifest["objects"] if o["name"] == name]
        objs.append(entry)
        self._commit(objs)
        for o in old:
            if o["file"] != rel:
                (self.path / o["file"]).unlink(missing_ok=True)
        return self.get(name)

    def remove(self, name: str) -> None:
        """Remove an enrolled object (KeyError if unknown)."""
        e = self._entry(name)
        self._commit([o for o in self._manifest["objects"] if o["name"] != name])
        (self.path / e["file"]).unlink(missing_ok=True)

    def _commit(self, objects: list[dict[str, Any]]) -> None:
        manifest = dict(self._manifest)
        manifest["objects"] = objects
        manifest["library_version"] = __version__
        manifest["database_id"] = self._content_id(manifest)
        atomic_write_json(self.path / MANIFEST, manifest)
        self._manifest = manifest
        self._cache.clear()

    @staticmethod
    def _content_id(manifest: dict[str, Any]) -> str:
        h = hashlib.sha256()
        h.update(repr(sorted((k, sorted(v.items())) for k, v in manifest["detectors"].items())).encode())
        for o in sorted(manifest["objects"], key=lambda o: o["name"]):
            h.update(f"{o['name']}\0{o['sha256']}\0".encode())
        return h.hexdigest()[:16]

    def __repr__(self) -> str:
        return f"ModelDB({str(self.path)!r}, objects={self.names}, id={self.database_id})"
