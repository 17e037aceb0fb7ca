"""The files of a retrieval index: FAISS loaded on demand, the index file checked against its sha256 and read
(memory-mapped where it can be), and the errors that name the file at fault.

It lies below :mod:`objrec.modeldb` so that the database keeps its index current when it commits, and
:mod:`objrec.matching` reads the same files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from objrec.fileio import FileFormatError

__all__ = [
    "MANIFEST",
    "RetrievalIndexError",
    "StaleIndexError",
    "REINDEX_HINT",
    "faiss_module",
    "manifest_header",
    "read_faiss_index",
]

#: The manifest of an index folder (written last; names the index file and its sha256).
MANIFEST = "index.json"


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
    database's segmented index) was built as and for.
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


def read_faiss_index(path: Path, mmap: bool) -> tuple[Any, bool]:
    """A FAISS index from the FAISS file ``path``; True when it is mapped. With ``mmap``, an inverted file's
    lists are mapped from the file read-only rather than read into memory."""
    faiss = faiss_module()
    try:
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
