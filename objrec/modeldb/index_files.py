"""The files of a retrieval index: FAISS loaded on demand, the index file checked against its sha256 and read
(memory-mapped where it can be), and the errors that name the file at fault.

It lies below :mod:`objrec.modeldb` so that the database keeps its index current when it commits, and
:mod:`objrec.matching` reads the same files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from objrec.fileio import FileFormatError, file_sha256_once, read_json

__all__ = [
    "MANIFEST",
    "RetrievalIndexError",
    "StaleIndexError",
    "REINDEX_HINT",
    "faiss_module",
    "read_manifest",
    "manifest_header",
    "checked_index_file",
    "read_faiss_index",
]

#: The manifest of an index folder (written last; names the index file and its sha256).
MANIFEST = "index.json"
ARRAY = "index.npy"


class RetrievalIndexError(FileFormatError):
    """A retrieval index file is missing, damaged or of another format; the message names the file."""


#: What a stale or missing index of a database is fixed by (named in :class:`StaleIndexError` messages).
REINDEX_HINT = "run `objrec db reindex --db {db}`"


class StaleIndexError(RetrievalIndexError):
    """The index was built for other database content (its database id differs), is of an older version, or is
    missing where retrieval needs it; the message names the command that rebuilds it."""


def faiss_module() -> Any:
    """The ``faiss`` module, imported on first use (an ImportError naming the package when it is missing)."""
    try:
        import faiss
    except ImportError as exc:  # pragma: no cover - a dependency of objrec
        raise ImportError("objrec's retrieval index needs faiss-cpu (pip install faiss-cpu)") from exc
    return faiss


def manifest_header(fmt: str, schema_version: int, index: Any) -> dict[str, Any]:
    """The fields every retrieval-index manifest starts with: its format and schema, and what ``index`` (a
    database's segmented index or a single-file one) was built as and for.
    ``fmt``: the manifest's format name; ``schema_version``: its schema."""
    return {
        "format": fmt,
        "schema_version": schema_version,
        "kind": index.kind,
        "dim": index.dim,
        "codes": index.codes,
        "params": index.params.to_dict(),
        "trained_for": index.trained_for,
        "database_id": index.database_id,
    }


def read_manifest(folder: Path, fmt: str, schema_version: int, database_id: str | None = None) -> dict[str, Any]:
    """The manifest of the index in ``folder``, checked to be of format ``fmt`` and a schema up to
    ``schema_version``, and (when ``database_id`` is given) built for that database content.

    Raises
    ------
    RetrievalIndexError
        Naming the manifest that is missing, unreadable, of another format or of a newer schema.
    StaleIndexError
        When ``database_id`` is given and the index was built for other content.
    """
    mpath = folder / MANIFEST
    try:
        m = read_json(mpath, "retrieval index manifest")
    except FileFormatError as exc:
        raise RetrievalIndexError(str(exc)) from None
    if m.get("format") != fmt:
        raise RetrievalIndexError(f"{mpath}: not an objrec retrieval index (format={m.get('format')!r})")
    if not isinstance(m.get("schema_version"), int) or m["schema_version"] > schema_version:
        raise RetrievalIndexError(
            f"{mpath}: schema version {m.get('schema_version')!r} is not one this objrec reads "
            f"(up to {schema_version}); upgrade objrec or rebuild the index"
        )
    if database_id is not None and m.get("database_id") != database_id:
        raise StaleIndexError(
            f"{mpath}: built for database {m.get('database_id')}, not {database_id} (an interrupted enrolment or a "
            f"change made without index support); {REINDEX_HINT.format(db=folder.parent.parent)}"
        )
    return m


def checked_index_file(folder: Path, m: dict[str, Any]) -> Path:
    """The index file the manifest names, its sha256 checked.
    ``folder``: the index folder; ``m``: its manifest (as read)."""
    entry = m.get("array") or {}
    path = folder / str(entry.get("file", ARRAY))
    if not path.exists():
        raise RetrievalIndexError(f"{path}: index file not found")
    if file_sha256_once(path) != entry.get("sha256"):
        raise RetrievalIndexError(f"{path}: sha256 mismatch (file damaged or modified after it was written)")
    return path


def read_faiss_index(path: Path, mmap: bool) -> tuple[Any, bool]:
    """A FAISS index from ``path`` (a FAISS file, or a ``.npy`` uint8 array of one); True when it is mapped.
    With ``mmap``, an inverted file's lists are mapped from the file read-only rather than read into memory."""
    faiss = faiss_module()
    try:
        if path.suffix == ".npy":  # an index saved as a serialised byte array
            arr = np.load(path, allow_pickle=False)
            if arr.dtype != np.uint8 or arr.ndim != 1:
                raise RetrievalIndexError(f"{path}: expected a 1-d uint8 array, got {arr.dtype} {arr.shape}")
            return faiss.deserialize_index(arr), False
        # Product-quantised indexes are read without their table of precomputed distance terms (lists x 16 x
        # 256 floats, hundreds of MB at 10^4 lists, per file read): the terms are computed per probed list.
        skip = faiss.IO_FLAG_SKIP_PRECOMPUTE_TABLE
        if mmap:
            index = faiss.read_index(str(path), faiss.IO_FLAG_MMAP | faiss.IO_FLAG_READ_ONLY | skip)
            if hasattr(index, "invlists"):
                # FAISS's on-disk lists start threads to page in the probed lists before each search; the
                # mapped file is in the page cache once touched, and the threads would compete with the frame.
                faiss.downcast_InvertedLists(index.invlists).prefetch_nthread = 0
            return index, hasattr(index, "nprobe")
        return faiss.read_index(str(path), skip), False
    except (ValueError, OSError, EOFError) as exc:
        raise RetrievalIndexError(f"{path}: not a readable index file ({exc})") from None
    except RuntimeError as exc:
        raise RetrievalIndexError(f"{path}: FAISS could not read the index ({' '.join(str(exc).split())})") from None
