"""Bulk enrolment into a :class:`~objrec.modeldb.database.ModelDB`: parallel extraction, batched commits, resumption.

Items are read lazily and handed to a pool of threads, or to the workers of a Dask cluster
(:func:`objrec.cluster.dask_client`), at most two per extraction thread in flight, so memory stays bounded for
any number of images. Both run the same :func:`~objrec.modeldb.preparation.prepare_object`; Dask workers read
the image files themselves, or get their bytes from this process (``send_bytes``) where they cannot see them.
Results are taken in input order and committed every ``batch_size`` objects as one shard (one manifest write
each, so the total work grows linearly with the images), so the database is the same whichever runs them. An
object records the sha256 of the file it came from: a rerun over the same items skips names already
enrolled from identical content, which makes an interrupted enrolment resumable from its last commit.
"""

from __future__ import annotations

import csv
import os
import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sized
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager, nullcontext
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from objrec.fileio import FileFormatError
from objrec.imageio import InputError
from objrec.modeldb.preparation import FileBytes, PreparedObject, prepare_object, source_sha256
from objrec.modeldb.records import (
    ENROLL_BATCH,
    EnrollFailure,
    EnrollReport,
    check_name,
    check_shape,
    check_width_m,
    split_key,
    view_key,
)
from objrec.modeldb.views import check_views

if TYPE_CHECKING:
    from objrec.modeldb.database import ModelDB

__all__ = ["run_enrolment", "items_from_dir", "items_from_csv", "IMAGE_SUFFIXES", "LOCAL_CLUSTER"]

#: File name suffixes taken as images when enrolling a folder (others, such as notes, are ignored).
IMAGE_SUFFIXES = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".tif", ".tiff", ".webp", ".pgm", ".ppm", ".jp2"})
_SKIP = "skip"
#: The errors of one item (its image or name), reported as its failure; any other error ends the enrolment.
_ITEM_ERRORS = (InputError, FileFormatError, OSError, ValueError)


class _AlreadyEnrolled(InputError):
    """The name is enrolled from other content and ``replace`` is off."""


def _label(image: Any) -> str:
    if isinstance(image, list | tuple):
        return ", ".join(_label(i) for i in image)
    return "<array>" if hasattr(image, "shape") else str(image)


def _work(
    name: str,
    images: list[Any],
    detectors: dict,
    known: list[dict] | None,
    replace: bool,
    views: str | None = None,
    width_m: float | None = None,
    shape: str = "flat",
    min_rating: int | None = None,
) -> list[PreparedObject] | str:
    """In a worker thread: skip an object enrolled from the same content of the same views (and views
    setting, shape and width, when one is given), else prepare its views."""
    if known is not None:
        same = len(known) == len(images) and all(
            k.get("sha256") == source_sha256(img) and k.get("views") == views and k.get("shape") == shape
            for k, img in zip(known, images, strict=True)
        )
        if same and width_m in (None, known[0].get("width_m")):
            return _SKIP
        if not replace:
            raise _AlreadyEnrolled(
                f"object {name!r} is already enrolled from other content, views, shape or width (use replace)"
            )
    return [
        prepare_object(view_key(name, k), img, detectors, views, width_m, shape, min_rating)
        for k, img in enumerate(images)
    ]


def _attempt(*args: Any) -> list[PreparedObject] | str | Exception:
    """:func:`_work`, with the failures that mean a bad item (unreadable image, no features, ...) returned
    rather than raised: they are reported with the item, so a Dask worker does not log them as crashes."""
    try:
        return _work(*args)
    except _ITEM_ERRORS as exc:
        return exc


def _known(db: ModelDB, name: str) -> list[dict] | None:
    """What the enrolled views of object ``name`` were made from, for the skip test of :func:`_work`; None for
    an object not enrolled (or enrolled without a source record)."""
    if name not in db.store.views:  # a dict lookup: the list of names grows with the catalogue
        return None
    known = []
    for i in [db.info(k) for k in db.view_keys(name)]:
        if i.source is None:
            return None
        known.append({**i.source, "views": i.views, "width_m": i.width_m, "shape": i.shape})
    return known


def _reason(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.filename is not None:
        return f"{exc.filename}: {exc.strerror or exc}"
    return " ".join(str(exc).split())


class _Run:
    """State of one :func:`run_enrolment` call."""

    def __init__(self, db: ModelDB, replace: bool, batch_size: int, bar: Any) -> None:
        self.db, self.replace, self.batch_size, self.bar = db, replace, max(1, int(batch_size)), bar
        self.report = EnrollReport()
        self.batch: list[PreparedObject] = []
        self.seen: set[str] = set()

    def fail(self, name: str, source: str, reason: str) -> None:
        self.report.failed.append(EnrollFailure(name, source, reason))
        self.bar.set_postfix(failed=len(self.report.failed), refresh=False)
        self.bar.update(1)

    def precheck(self, name: Any, image: Any) -> str | None:
        """Why an item cannot even be submitted (bad or repeated name), or None."""
        try:
            check_name(name)
        except InputError as exc:
            return str(exc)
        if name in self.seen:
            return f"object name {name!r} given twice in this enrolment (the first one is kept)"
        self.seen.add(name)
        return None

    def collect(self, name: str, source: str, fut: Any) -> None:
        out = fut.result()
        if isinstance(out, Exception):
            self.fail(name, source, _reason(out))
            return
        if isinstance(out, str):
            self.report.skipped.append(name)
        else:
            self.batch += out
            if len(self.batch) >= self.batch_size:
                self.flush()
        self.bar.update(1)

    def salvage(self, pending: deque[tuple[str, str, Any]]) -> None:
        """After an interruption: finish and commit the images in flight (at most two per worker), so
        everything taken from ``items`` before it is kept and a rerun resumes after it."""
        try:
            while pending:
                self.collect(*pending.popleft())
        finally:
            self.flush()

    def flush(self) -> None:
        if not self.batch:
            return
        batch, self.batch = self.batch, []
        refused = self.db.commit_batch(batch, self.replace)
        gone = {id(p) for p in refused}
        self.report.enrolled += list(dict.fromkeys(split_key(p.entry["name"])[0] for p in batch if id(p) not in gone))
        for p in refused:
            name, view = split_key(p.entry["name"])
            if view == 0:
                src = (p.entry.get("source") or {}).get("path") or "<array>"
                self.report.failed.append(EnrollFailure(name, src, "already enrolled (use replace)"))


#: The ``scheduler`` of :func:`run_enrolment` that starts a local Dask cluster for the call.
LOCAL_CLUSTER = "local"


def _one_numba_thread() -> None:
    """A worker thread's initializer: this thread's parallel Numba kernels run on it alone."""
    import numba

    numba.set_num_threads(1)


@contextmanager
def _executor(workers: int | None, scheduler: Any) -> Iterator[tuple[Callable[..., Any], int]]:
    """``(submit, in_flight)``: a function submitting ``fn(*args)`` and returning its future, and how many
    futures may be pending: two per extraction thread, so memory stays bounded as results wait to be taken in
    input order."""
    from objrec._threads import one_blas_thread, usable_cores

    if scheduler is None:
        n = max(1, int(workers or usable_cores()))
        # As many images in flight as cores: each thread's Numba kernels run on that thread alone (Numba's
        # thread count is per thread), so the threads do not oversubscribe the cores the images already share.
        # BLAS on one thread too while the pool runs: its spinning worker threads would take the cores from
        # the other images (:func:`~objrec._threads.one_blas_thread`).
        whole_cores = n >= usable_cores()
        init = _one_numba_thread if whole_cores else None
        pool = ThreadPoolExecutor(n, thread_name_prefix="objrec-enrol", initializer=init)
        try:
            with one_blas_thread() if whole_cores else nullcontext():
                yield pool.submit, 2 * n
        finally:
            pool.shutdown(wait=True, cancel_futures=True)
        return
    from objrec.cluster import cluster_threads, dask_client

    local = scheduler == LOCAL_CLUSTER
    n_local = max(1, int(workers or usable_cores())) if local else None
    with dask_client(n_local, None if local else scheduler) as (client, _):

        def submit(fn: Callable[..., Any], *args: Any) -> Any:
            return client.submit(fn, *args, pure=False)

        yield submit, 2 * cluster_threads(client)


def _as_bytes(images: list[Any]) -> list[Any]:
    """The views with every file path replaced by the file's bytes (:class:`FileBytes`), read here."""
    return [img if isinstance(img, np.ndarray | FileBytes) else FileBytes.read(img) for img in images]


def _feed(
    run: _Run,
    items: Iterable[tuple[str, Any]],
    submit: Callable[..., Any],
    in_flight: int,
    send_bytes: bool,
    **opts: Any,
) -> None:
    """Submit every item's extraction and collect the results in input order, at most ``in_flight`` pending;
    after an interruption, what was submitted is still committed (:meth:`_Run.salvage`). ``opts`` are the
    ``views``, ``width_m``, ``shape`` and ``min_rating`` of every object."""
    settings = (opts["views"], opts["width_m"], opts["shape"], opts["min_rating"])
    pending: deque[tuple[str, str, Any]] = deque()
    try:
        for name, image in items:
            reason = run.precheck(name, image)
            if reason is not None:
                run.fail(str(name), _label(image), reason)
                continue
            images = list(image) if isinstance(image, list | tuple) else [image]
            if not images:
                run.fail(name, "", "no images given for its views")
                continue
            try:
                images = _as_bytes(images) if send_bytes else images
            except _ITEM_ERRORS as exc:
                run.fail(name, _label(image), _reason(exc))
                continue
            job = submit(_attempt, name, images, run.db.detectors, _known(run.db, name), run.replace, *settings)
            pending.append((name, _label(image), job))
            while len(pending) >= in_flight:
                run.collect(*pending.popleft())
        while pending:
            run.collect(*pending.popleft())
        run.flush()
    except BaseException:
        run.salvage(pending)
        raise


def run_enrolment(
    db: ModelDB,
    items: Iterable[tuple[str, Any]],
    replace: bool = False,
    workers: int | None = None,
    batch_size: int = ENROLL_BATCH,
    progress: bool = True,
    views: str | None = None,
    width_m: float | None = None,
    shape: str = "flat",
    scheduler: Any = None,
    send_bytes: bool = False,
    min_rating: int | None = None,
) -> EnrollReport:
    """The engine of :meth:`ModelDB.enroll_many`: enrol ``items`` into ``db``; the report of what was enrolled,
    skipped and failed.

    Parameters
    ----------
    db : ModelDB
        The database written.
    items, replace, workers, batch_size, progress, views, width_m, shape, scheduler, send_bytes, min_rating
        As for :meth:`ModelDB.enroll_many`.
    """
    from tqdm import tqdm

    opts = {"views": check_views(views), "width_m": check_width_m(width_m), "shape": check_shape(shape)}
    opts["min_rating"] = min_rating
    total = len(items) if isinstance(items, Sized) else None
    bar = tqdm(total=total, unit="image", desc="enrol", disable=not progress, file=sys.stderr, dynamic_ncols=True)
    run = _Run(db, replace, batch_size, bar)
    try:
        with _executor(workers, scheduler) as (submit, in_flight):
            _feed(run, items, submit, in_flight, send_bytes, **opts)
    finally:
        bar.close()
    return run.report


def items_from_dir(folder: str | os.PathLike) -> list[tuple[str, Path | list[Path]]]:
    """The objects of a folder, sorted by name: ``(file stem, path)`` for every image file directly in
    ``folder`` (by suffix), and ``(sub-folder name, [paths])`` for every sub-folder holding image files: one
    object whose views are its images, in file-name order."""
    folder = Path(folder)
    if not folder.is_dir():
        raise InputError(f"{folder}: no such folder")
    out: list[tuple[str, Path | list[Path]]] = []
    for p in sorted(folder.iterdir()):
        if p.is_file() and p.suffix.lower() in IMAGE_SUFFIXES:
            out.append((p.stem, p))
        elif p.is_dir():
            views = sorted(f for f in p.iterdir() if f.is_file() and f.suffix.lower() in IMAGE_SUFFIXES)
            if views:
                out.append((p.name, views))
    return sorted(out, key=lambda item: item[0])


def items_from_csv(path: str | os.PathLike) -> list[tuple[str, Path | list[Path]]]:
    """(name, path) rows of a ``name,path`` CSV file; relative paths are taken from the file's folder. Rows
    that repeat a name are further views of that object (``(name, [paths])`` in row order).

    Blank lines, lines starting with ``#`` and a first row ``name,path`` (a header) are skipped; any other
    row without exactly two non-empty fields is an :class:`InputError` naming the line.
    """
    path = Path(path)
    if not path.is_file():
        raise InputError(f"{path}: no such file")
    with open(path, newline="", encoding="utf-8") as f:
        rows = list(csv.reader(f))
    views: dict[str, list[Path]] = {}
    for lineno, row in enumerate(rows, start=1):
        cells = [c.strip() for c in row]
        if not any(cells) or cells[0].startswith("#"):
            continue
        if lineno == 1 and [c.lower() for c in cells] == ["name", "path"]:
            continue
        if len(cells) != 2 or not all(cells):
            raise InputError(f"{path}:{lineno}: expected 'name,path', got {','.join(row)!r}")
        p = Path(cells[1])
        views.setdefault(cells[0], []).append(p if p.is_absolute() else path.parent / p)
    return [(name, ps[0] if len(ps) == 1 else ps) for name, ps in views.items()]
