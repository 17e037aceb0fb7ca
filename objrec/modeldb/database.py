"""The model database's read and write API: :class:`ModelDB`."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from objrec.features.model import AUTO_CAP
from objrec.imageio import InputError
from objrec.modeldb import maintenance
from objrec.modeldb.enrolment import run_enrolment
from objrec.modeldb.index_update import keep_indexes_current
from objrec.modeldb.preparation import PreparedObject, prepare_object
from objrec.modeldb.ratings import DatabaseRatings
from objrec.modeldb.records import (
    DEFAULT_DETECTORS,
    ENROLL_BATCH,
    MANIFEST,
    EnrollReport,
    ModelDBError,
    ModelObject,
    check_name,
    check_shape,
    check_width_m,
    split_key,
    view_key,
)
from objrec.modeldb.store import ShardStore
from objrec.modeldb.upgrade import split_row_tables, upgrade_database
from objrec.modeldb.upkeep import DatabaseUpkeep
from objrec.modeldb.views import check_views

__all__ = ["ModelDB"]


class ModelDB(DatabaseRatings, DatabaseUpkeep):
    """A directory of enrolled objects. Use :meth:`create` or :meth:`open`; every change is saved at once.

    Reading is cheap at any size: opening reads the manifest and the shards' object tables, and an
    object's arrays are sliced out of memory-mapped files when it is asked for. Writers take an exclusive
    lock on ``DB/.lock``; a reader sees the content of the manifest it opened.

    Parameters
    ----------
    store : ShardStore
        The database's storage engine (:mod:`objrec.modeldb.store`).

    Attributes
    ----------
    path : Path
        The database directory.
    store : ShardStore

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

    # -- construction -------------------------------------------------------------------------------
    @classmethod
    def create(
        cls,
        path: str | os.PathLike,
        detectors: dict[str, dict[str, Any]] | None = None,
        exist_ok: bool = False,
    ) -> ModelDB:
        """Create an empty database at ``path`` (a directory) for ``detectors`` (kind -> its settings; default:
        :data:`DEFAULT_DETECTORS`). With ``exist_ok``, open an existing one."""
        path = Path(path)
        if (path / MANIFEST).exists() and exist_ok:
            return cls.open(path)
        return cls(ShardStore.create(path, detectors or DEFAULT_DETECTORS))

    @classmethod
    def open(cls, path: str | os.PathLike) -> ModelDB:
        """Open an existing database; errors name the file that is missing, damaged or too new."""
        return cls(ShardStore.open(path))

    @classmethod
    def upgrade(cls, path: str | os.PathLike, max_features: Any = AUTO_CAP, progress: bool = False) -> ModelDB:
        """Convert the schema 1 or 2 database at ``path`` in place to the current layout and open it (a current
        one has only its row-oriented shard tables split, :func:`~objrec.modeldb.upgrade.split_row_tables`),
        atomically: features re-capped to ``max_features`` per kind (an int, a dict of kind -> int,
        "auto": :func:`~objrec.features.model.model_feature_cap`, None: all kept) and re-encoded from what is
        stored (:func:`~objrec.modeldb.upgrade.upgrade_database` says what is lost), a progress bar on stderr
        with ``progress``. The database id changes: its prefilter stays valid, its retrieval index is rebuilt
        as a commit builds it (beyond :data:`~objrec.modeldb.index_update.AUTO_BUILD_MAX` descriptors, by
        ``objrec db reindex``)."""
        upgraded = upgrade_database(path, max_features, progress) is not None
        split_row_tables(path, progress)
        db = cls.open(path)
        if upgraded:
            with db.store.writing():
                keep_indexes_current(db)
        return db

    # -- writes -------------------------------------------------------------------------------------
    def _commit(self, add: list[PreparedObject], drop: set[str]) -> None:
        """One commit (write lock held), then compaction; the retrieval indexes follow the new content."""
        self.store.commit(add, drop)
        maintenance.maintain(self.store)
        keep_indexes_current(self)

    @contextlib.contextmanager
    def lock(self) -> Iterator[ModelDB]:
        """Hold the database's write lock (``DB/.lock``) on its current state: for files kept beside the
        database (prefilter, retrieval index) whose write must not interleave with another writer's."""
        with self.store.writing():
            yield self

    def enroll(
        self,
        name: str,
        image: str | os.PathLike | np.ndarray | Sequence[str | os.PathLike | np.ndarray],
        replace: bool = False,
        views: str | None = None,
        width_m: float | None = None,
        shape: str = "flat",
        min_rating: int | None = None,
        full_rating: bool = False,
    ) -> ModelObject:
        """Add object ``name`` from an image file or array (gray or BGR uint8), or from a list of them: several
        views of one object (photos from different sides), which retrieval and matching treat as one object;
        a detection names the object and the view that matched. Saved atomically at once; returns view 0.

        ``views="affine"`` also enrols the features of affine-warped copies of each image (ASIFT's tilts and
        rotations, :mod:`objrec.modeldb.views`), for recognition under strong viewpoint change; None (or "none")
        enrols the images' own features only. ``width_m`` is the object's physical width in metres (along the
        model image's x axis; a positive, finite number), which a metric pose needs; None when unknown.
        ``shape`` "solid" marks an object with depth, verified without assuming a plane
        (:mod:`objrec.matching.solid`); "flat" (the default) is verified by a homography. ``replace`` replaces
        every view of an enrolled object of that name. ``min_rating`` refuses (an
        :class:`~objrec.imageio.InputError` naming the reasons, nothing written) when a view rates below it.
        Each view's entry records its rating: from the features extracted and the pixels, or with
        ``full_rating`` (or ``min_rating``) the full rating with its rendered views (:func:`objrec.rating.rate`;
        most of its cost is the views, so bulk enrolment leaves them to :meth:`rate`).
        """
        images = list(image) if isinstance(image, list | tuple) else [image]
        check_name(name)
        check_views(views)
        check_width_m(width_m)
        check_shape(shape)
        if not images:
            raise InputError(f"image for {name!r}: expected an image or a non-empty list of views")
        if name in self.store.views and not replace:
            raise ModelDBError(f"{self.path / MANIFEST}: object {name!r} is already enrolled (use replace=True)")
        prepared = [
            prepare_object(
                view_key(name, k), img, self.detectors, views, width_m, shape, min_rating, full_rating=full_rating
            )
            for k, img in enumerate(images)
        ]
        if self.commit_batch(prepared, replace):
            raise ModelDBError(f"{self.path / MANIFEST}: object {name!r} is already enrolled (use replace=True)")
        return self.get(name)

    def add_view(
        self,
        name: str,
        image: str | os.PathLike | np.ndarray,
        min_rating: int | None = None,
        full_rating: bool = False,
    ) -> int:
        """Add a view (another photo of the object) to the enrolled object ``name``, with the object's views
        setting, width and shape; returns its view number (one more than the highest). Saved atomically.
        ``min_rating`` refuses an image rated below it (InputError naming the reasons; nothing is written);
        ``full_rating`` records the full rating as :meth:`enroll` does."""
        first = self.info(self.view_keys(name)[0])
        with self.store.writing():
            keys = self.view_keys(name)
            view = split_key(keys[-1])[1] + 1
            p = prepare_object(
                view_key(name, view),
                image,
                self.detectors,
                first.views,
                first.width_m,
                first.shape,
                min_rating,
                full_rating=full_rating,
            )
            self._commit([p], set())
        return view

    def remove_view(self, name: str, view: int) -> None:
        """Remove view ``view`` of object ``name`` (KeyError naming its views if it has no such view;
        ModelDBError for its only view: remove the object instead). The other views keep their numbers."""
        with self.store.writing():
            keys = self.view_keys(name)
            key = view_key(name, view)
            if key not in keys:
                have = ", ".join(str(split_key(k)[1]) for k in keys)
                raise KeyError(f"object {name!r} in {self.path} has no view {view} (views: {have})")
            if len(keys) == 1:
                only = f"view {view} is the only view of {name!r}; remove the object"
                raise ModelDBError(f"{self.path / MANIFEST}: {only}")
            self._commit([], {key})

    def enroll_many(
        self,
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
        """Enrol many objects: features extracted in parallel threads or on a Dask cluster, committed in batches
        from this process, resumable.

        Parameters
        ----------
        items : iterable of (name, image)
            Object names with an image file path or array, or a list of them (the object's views, as for
            :meth:`enroll`); read lazily, so a generator over a large
            folder is fine.
        replace : bool
            Re-enrol names already enrolled from different content (otherwise they are failures).
        workers : int, optional
            Extraction threads (default: the usable cores). OpenCV's SIFT releases the GIL; SURF, which is
            parallel inside, runs one image at a time. With ``scheduler="local"``: the local cluster's worker
            processes.
        batch_size : int
            Objects per commit (one shard each). A rerun after an interruption skips every name already
            enrolled from the same content (file hash), so at most one batch is redone.
        progress : bool
            Show a tqdm progress bar on stderr.
        views : str, optional
            Synthesised views enrolled with every object (as for :meth:`enroll`). A rerun skips a name only
            when it was enrolled from the same content with the same views.
        width_m : float, optional
            The physical width in metres of every object of this call (as for :meth:`enroll`). A rerun with a
            width skips a name only when it was enrolled with that width (otherwise it needs ``replace``, or
            :meth:`set_width` without re-extraction); a rerun without one keeps the enrolled widths.
        shape : {"flat", "solid"}
            What verification assumes of every object of this call (as for :meth:`enroll`).
        scheduler : str or dask.distributed.Client, optional
            Extract on Dask workers (``pip install "objrec[dask]"``): the address of a running scheduler, a
            ``Client`` or cluster object, or ``"local"`` for a local cluster of ``workers`` processes. The same
            extraction runs there, and the database, batches and report are those of the threads.
        send_bytes : bool
            Read every image file here and send its bytes to the extraction (for Dask workers that cannot see
            the files); the objects are the same as from the paths.
        min_rating : int, optional
            An object with a view rated below this is a failure (its reason names the rating's reasons).

        Returns
        -------
        EnrollReport
            Enrolled and skipped names and the failures (unreadable image, no features, bad or repeated
            name, already enrolled from other content) with their reasons; the others are enrolled.
        """
        return run_enrolment(
            self,
            items,
            replace,
            workers,
            batch_size,
            progress,
            views,
            width_m,
            shape,
            scheduler,
            send_bytes,
            min_rating,
        )

    def commit_batch(self, batch: list[PreparedObject], replace: bool) -> list[PreparedObject]:
        """Commit the views of objects from :func:`~objrec.modeldb.preparation.prepare_object` as one shard,
        then compact; returns those refused because their object is already enrolled. With ``replace``, an
        enrolled object of the same name loses every view the batch does not bring again."""
        with self.store.writing():
            objects = {split_key(p.entry["name"])[0] for p in batch}
            taken = {n for n in objects if n in self.store.views}
            refused = [] if replace else [p for p in batch if split_key(p.entry["name"])[0] in taken]
            keep = [p for p in batch if p not in refused]
            if keep:
                new = {p.entry["name"] for p in keep}
                stale = {k for n in taken for k in self.store.views[n] if k not in new} if replace else set()
                self.store.commit(keep, stale)
                maintenance.maintain(self.store)
            keep_indexes_current(self)
        return refused

    def remove(self, name: str | Iterable[str]) -> None:
        """Remove an enrolled object with all its views, or several in one commit (KeyError naming the first
        unknown one, and nothing removed). The database id changes; its prefilter stays valid."""
        names = [name] if isinstance(name, str) else list(name)
        with self.store.writing():
            keys = {k for n in names for k in self.view_keys(n)}
            self._commit([], keys)

    def rename(self, old: str, new: str) -> None:
        """Rename an enrolled object (all its views) in one commit (KeyError if ``old`` is unknown, ModelDBError
        if ``new`` is taken). Nothing is re-extracted; the database id changes and its prefilter stays valid."""
        check_name(new)
        with self.store.writing():
            keys = self.view_keys(old)  # raises the KeyError naming the enrolled objects
            if new in self.store.views:
                raise ModelDBError(f"{self.path / MANIFEST}: object {new!r} is already enrolled")
            self.store.rename([(k, view_key(new, split_key(k)[1])) for k in keys])
            keep_indexes_current(self)

    def set_width(self, name: str, width_m: float | None) -> None:
        """Record the physical width of an enrolled object (every view) in metres (None: unknown) in one commit
        (KeyError if ``name`` is unknown, ValueError naming ``width_m`` unless it is a positive, finite number).
        Nothing is re-extracted, and the database id stays the same: the width is not part of the content a
        prefilter or index is built from."""
        width_m = check_width_m(width_m)
        with self.store.writing():
            self.store.set_width(self.view_keys(name), width_m)

    def __repr__(self) -> str:
        shown = self.names[:5] + (["..."] if len(self) > 5 else [])
        return f"ModelDB({str(self.path)!r}, objects={len(self)} {shown}, id={self.database_id})"
