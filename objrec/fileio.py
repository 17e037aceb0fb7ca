"""Atomic, pickle-free storage: ``.npz`` arrays plus JSON manifests with sha256 per array file."""

from __future__ import annotations

import contextlib
import hashlib
import io
import json
import os
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

import numpy as np

__all__ = [
    "FileFormatError",
    "atomic_write_bytes",
    "atomic_write_json",
    "atomic_write_via",
    "file_sha256",
    "file_sha256_once",
    "npz_bytes",
    "sha256_bytes",
    "load_npz_verified",
    "read_json",
    "check_manifest_header",
]


class FileFormatError(ValueError):
    """A stored file is missing, damaged, tampered with or from an unknown/newer format; names the file."""


def sha256_bytes(data: bytes | bytearray | memoryview) -> str:
    return hashlib.sha256(data).hexdigest()


def _discard(tmp: str) -> None:
    """Remove a temporary file a failed write left behind (if it is there)."""
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)


def atomic_write_bytes(path: str | os.PathLike, data: bytes) -> None:
    """Write ``data`` to ``path`` so that readers see the old file or the new one, never half of it."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        _discard(tmp)
        raise


def atomic_write_via(
    folder: str | os.PathLike, write: Callable[[str], object], name: Callable[[str], str]
) -> tuple[Path, str]:
    """Let ``write(tmp_path)`` write a file in ``folder`` (for libraries that write to a path themselves),
    then move it, synced, to ``folder / name(sha256)``; returns the final path and the sha256.

    The sha256 is of the file as read back after it was synced, so it vouches for what is on disk. Readers
    see the finished file or none: the temporary name starts with a dot and is removed on error.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".write.", suffix=".tmp", dir=folder)
    os.close(fd)
    try:
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        digest = file_sha256(tmp)
        final = folder / name(digest)
        os.replace(tmp, final)
        return final, digest
    except BaseException:
        _discard(tmp)
        raise


def file_sha256(path: str | os.PathLike) -> str:
    """sha256 of a file's content, read in 4 MiB chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 22):
            h.update(chunk)
    return h.hexdigest()


#: sha256 of files this process has read, by (device, inode, size, modification time in ns).
_DIGESTS: dict[tuple[int, int, int, int], str] = {}


def file_sha256_once(path: str | os.PathLike) -> str:
    """:func:`file_sha256`, computed once per process for a file that has not changed since (same inode,
    size and modification time): a large read-only file (a catalogue's index) is checked when this process
    first touches it, not again each time it is opened."""
    st = os.stat(path)
    key = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
    if key not in _DIGESTS:
        _DIGESTS[key] = file_sha256(path)
    return _DIGESTS[key]


def atomic_write_json(path: str | os.PathLike, obj: Any) -> None:
    """Write ``obj`` as indented JSON with sorted keys to ``path``, atomically (:func:`atomic_write_bytes`)."""
    atomic_write_bytes(path, (json.dumps(obj, indent=2, sort_keys=True) + "\n").encode())


def npz_bytes(arrays: dict[str, np.ndarray]) -> bytes:
    """Serialise arrays as a compressed ``.npz`` in memory (object arrays are refused: no pickle)."""
    for k, v in arrays.items():
        if np.asarray(v).dtype == object:
            raise TypeError(f"array {k!r} has dtype object, which would need pickle")
    buf = io.BytesIO()
    # (cast: NumPy's stub would check every keyword array against savez_compressed's own allow_pickle flag)
    np.savez_compressed(buf, **cast("dict[str, Any]", arrays))
    return buf.getvalue()


def read_json(path: str | os.PathLike, what: str = "manifest") -> dict[str, Any]:
    """The JSON object in the file at ``path``; :class:`FileFormatError` naming the file and ``what`` it holds
    when it is missing, not JSON or not an object."""
    path = Path(path)
    if not path.exists():
        raise FileFormatError(f"{path}: {what} not found")
    try:
        obj = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise FileFormatError(f"{path}: {what} is not valid JSON ({exc})") from None
    if not isinstance(obj, dict):
        raise FileFormatError(f"{path}: {what} must be a JSON object, got {type(obj).__name__}")
    return obj


def load_npz_verified(path: str | os.PathLike, expected_sha256: str | None) -> dict[str, np.ndarray]:
    """Load every array of the ``.npz`` at ``path`` after checking its sha256 against ``expected_sha256``
    (None: not checked); never unpickles."""
    path = Path(path)
    if not path.exists():
        raise FileFormatError(f"{path}: array file not found")
    data = path.read_bytes()
    if expected_sha256 is not None and sha256_bytes(data) != expected_sha256:
        raise FileFormatError(f"{path}: sha256 mismatch (file damaged or modified after it was written)")
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise FileFormatError(f"{path}: not a readable .npz array file ({type(exc).__name__}: {exc})") from None


def check_manifest_header(
    path: Path, manifest: dict[str, Any], fmt: str, schema_version: int, what: str, error: type[Exception]
) -> None:
    """Raise ``error`` naming ``path`` (a ``what``) unless ``manifest`` is of format ``fmt`` and a schema this code
    reads (up to ``schema_version``)."""
    if manifest.get("format") != fmt:
        raise error(f"{path}: not an objrec {what} manifest (format={manifest.get('format')!r})")
    version = manifest.get("schema_version")
    if not isinstance(version, int):
        raise error(f"{path}: schema_version missing or not an integer")
    if version > schema_version:
        raise error(
            f"{path}: schema version {version} is newer than this objrec supports ({schema_version}); upgrade objrec"
        )
