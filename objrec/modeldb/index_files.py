"""The files of a retrieval index: FAISS loaded on demand, the index file checked against its sha256 and read
(memory-mapped where it can be), and the errors that name the file at fault.

It lies below :mod:`objrec.modeldb` so that the database keeps its index current when it commits, and
:mod:`objrec.matching` reads the same files."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import Any

from objrec.fileio import FileFormatError, file_sha256_once

__all__ = [
    "MANIFEST",
    "RetrievalIndexError",
    "StaleIndexError",
    "REINDEX_HINT",
    "faiss_module",
    "manifest_header",
    "read_faiss_index",
    "BackgroundCheck",
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


class BackgroundCheck:
    """The sha256 of index files checked in a daemon thread of the lowest scheduling priority (on Linux),
    while the index already answers searches: at a large catalogue hashing the codes takes a second or more,
    which a recognizer would otherwise wait for before its first frame. A damaged file found is raised, naming
    it, by the index's next search (:meth:`raise_if_damaged`). Until then a damaged file can only cost
    shortlists: every detection is still verified against the database's rows, each checked on its first
    read.

    Parameters
    ----------
    files : list of (Path, str)
        The files and their expected sha256, checked in order.
    hint : str
        Appended to the error (what fixes it: the reindex command).
    """

    def __init__(self, files: list[tuple[Path, str]], hint: str) -> None:
        self.files = list(files)
        self.hint = hint
        #: The first damage found (a message naming the file), None while none is.
        self.error: str | None = None
        self._thread = threading.Thread(target=self._run, name="objrec-index-check", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        if sys.platform.startswith("linux"):  # there a thread's own id sets its priority, not the process's
            try:
                os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
            except OSError:
                pass
        for path, sha in self.files:
            try:
                ok = file_sha256_once(path) == sha
            except OSError as exc:
                self.error = f"{path}: index file unreadable ({exc.strerror or exc})"
                return
            if not ok:
                self.error = f"{path}: sha256 mismatch (file damaged or modified after it was written)"
                return

    def wait(self, timeout: float | None = None) -> bool:
        """Wait for the check to end (at most ``timeout`` seconds); True once it has."""
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def raise_if_damaged(self) -> None:
        """:class:`RetrievalIndexError` naming the damaged file, once the check has found one."""
        if self.error is not None:
            raise RetrievalIndexError(f"{self.error}; {self.hint}")
