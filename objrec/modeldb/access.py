"""The model database's read API (:class:`DatabaseReads`, the base of :class:`~objrec.modeldb.database.ModelDB`)."""

from __future__ import annotations

import copy
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

from objrec.modeldb.reader import (
    descriptor_table,
    descriptor_totals,
    iter_descriptor_chunks,
    live_columns,
    sample_descriptors,
)
from objrec.modeldb.records import ModelObject, ObjectInfo
from objrec.modeldb.store import ShardStore

__all__ = ["DatabaseReads"]


class DatabaseReads:
    """What a :class:`~objrec.modeldb.database.ModelDB` answers without writing: its id, detectors, objects and
    their views, and every view's arrays, read from the shards of the manifest it holds.

    Parameters
    ----------
    store : ShardStore
        The database's storage engine (:mod:`objrec.modeldb.store`).
    """

    def __init__(self, store: ShardStore) -> None:
        self.store = store
        self.path = store.path

    @property
    def database_id(self) -> str:
        """A hash of the content (detectors, object names and content hashes)."""
        return self.store.manifest["database_id"]

    @property
    def compatible_ids(self) -> list[str]:
        """Earlier ids of this database whose prefilter is still valid: the content changed since only by
        removals and renames (an enrolment or replacement empties the list)."""
        return list(self.store.manifest.get("compatible_ids", []))

    @property
    def detectors(self) -> dict[str, dict[str, Any]]:
        """The enrolled detector kinds and their parameters."""
        return {k: dict(v) for k, v in self.store.manifest["detectors"].items()}

    @property
    def manifest(self) -> dict[str, Any]:
        """A copy of the manifest this database's state comes from."""
        return copy.deepcopy(self.store.manifest)

    @property
    def names(self) -> list[str]:
        """Names of the enrolled objects, in the order they were enrolled."""
        return list(self.store.views)

    @property
    def records(self) -> list[str]:
        """Keys of every enrolled view (an object's view 0 under its name, view ``k`` under ``NAME#k``; see
        :func:`~objrec.modeldb.records.view_key`), in the order they were enrolled: what matchers and indexes
        hold, one entry per view."""
        return list(self.store.live)

    def view_keys(self, name: str) -> list[str]:
        """The record keys of object ``name``'s views, in view order (KeyError naming the known objects)."""
        if name not in self.store.views:
            self.store.locate(name)  # raises the KeyError naming the enrolled objects
            raise KeyError(f"{name!r} is a view's key in {self.path}, not an object name")
        return list(self.store.views[name])

    def __len__(self) -> int:
        return len(self.store.views)

    def __contains__(self, name: object) -> bool:
        """True for an enrolled object's name and for the key of an enrolled view."""
        try:
            return name in self.store.views or name in self.store.live
        except TypeError:
            return False

    def info(self, name: str) -> ObjectInfo:
        """What the object table records about a view (no array is read): ``name`` is a record key, or an
        object's name for its first view."""
        sh, row = self.store.locate(name)
        return ObjectInfo.from_entry(sh.objects[row])

    def infos(self) -> list[ObjectInfo]:
        """:meth:`info` of every enrolled view, in the order of :attr:`records` (no array is read)."""
        return self.store.infos()

    def columns(self, *fields: str) -> list[list[Any]]:
        """Fields of :meth:`infos` (:class:`ObjectInfo` attributes of the object table: ``"width"``,
        ``"view_table"``, ``"shape"``, ...) for every enrolled view, one list per field in the order of
        :attr:`records`, None where a view's entry lacks one (``shape`` is absent for flat objects); cheaper
        than :meth:`infos` at a large catalogue. Values are shared with the database's state: copy one before
        changing it."""
        return live_columns(self.store, *fields)

    def descriptor_counts(self) -> dict[str, int]:
        """The enrolled descriptors of each detector kind, over every view (no object table entry is read)."""
        return descriptor_totals(self.store)

    def thumbnail(self, name: str) -> np.ndarray:
        """The stored gray ``THUMB_SIZE`` x ``THUMB_SIZE`` thumbnail of ``name``'s model image (made from the
        image when its shard was written without thumbnails)."""
        return self.store.thumbnail(*self.store.locate(name))

    def get(self, name: str, with_image: bool = False) -> ModelObject:
        """An enrolled view: ``name`` is a record key, or an object's name for its first view (KeyError naming the
        known objects if absent); with ``with_image``, its model image too."""
        return self.store.cached_object(name, with_image)

    def get_kind(self, name: str, kind: str) -> ModelObject:
        """``name`` with the features of one detector kind only (no image), read from the shards each call:
        for a matcher that keeps its own cache of the objects it matches."""
        self._check_kind(kind)
        return self.store.model_object(name, [kind], False)

    def read_ahead(self, names: Iterable[str]) -> None:
        """Start reading the named records' rows (record keys, or objects' names for their first views) into the
        page cache without waiting for them: a :meth:`get_kind` of them a little later does not wait on the
        disk. Unknown names raise KeyError."""
        for name in names:
            self.store.read_ahead(name)

    def cache_files(self) -> list[Path]:
        """The database's files in the order :meth:`warm_page_cache` reads them into the page cache: every kind's
        retrieval index, then the rows of the shards that hold live objects (images, keypoints, descriptors)."""
        from objrec.modeldb.index import index_folder

        folders = [index_folder(self.path, k) for k in sorted(self.detectors)]
        index = [p for f in folders if f.is_dir() for p in sorted(f.iterdir()) if p.is_file()]
        return index + self.store.row_files()

    def warm_page_cache(self, max_bytes: int | None = None) -> Any:
        """Start reading :meth:`cache_files` into the page cache in a background thread, in order, as far as
        ``max_bytes`` (default: half of the memory available) allows, and return at once
        (:mod:`objrec.modeldb.warm`): reads of objects a little later find them in memory instead of waiting on
        the disk. Returns the thread, or None where the platform cannot."""
        from objrec.modeldb.warm import warm_in_background

        return warm_in_background(self.cache_files(), max_bytes)

    def _check_kind(self, kind: str) -> None:
        if kind not in self.store.manifest["detectors"]:
            raise ValueError(f"kind: {kind!r} is not enrolled in {self.path} (has {list(self.detectors)})")

    def objects(self, with_image: bool = False) -> list[ModelObject]:
        """:meth:`get` of every enrolled view, in the order of :attr:`records`."""
        return [self.get(n, with_image) for n in self.records]

    def image(self, name: str) -> np.ndarray:
        """The stored model image (BGR or gray uint8) of ``name``."""
        return self.store.image(*self.store.locate(name))

    def descriptor_table(self, kind: str) -> tuple[np.ndarray, np.ndarray]:
        """Every enrolled descriptor of ``kind``, decoded from its stored form, and the object of each row.

        Returns
        -------
        descriptors : (N, D) ndarray
            uint8 for SIFT, float16 for SURF (stored as int8, see :data:`DESCRIPTOR_STORAGE`); a copy out of the
            maps.
        owner : (N,) int64
            Index into :attr:`records` of the view each row belongs to.
        """
        self._check_kind(kind)
        return descriptor_table(self.store, kind)

    def iter_descriptor_chunks(
        self, kind: str, max_rows: int, names: list[str] | None = None
    ) -> Iterator[tuple[np.ndarray, list[str], np.ndarray]]:
        """The descriptors of ``kind`` of the records ``names`` (default: all, in the order of :attr:`records`)
        in chunks of whole records of at most ``max_rows`` rows, each a copy out of the maps: ``(descriptors,
        record keys, rows per record)`` (see :func:`~objrec.modeldb.reader.iter_descriptor_chunks`).
        Memory holds one chunk, whatever the size of the database."""
        self._check_kind(kind)
        return iter_descriptor_chunks(self.store, kind, max_rows, names)

    def sample_descriptors(self, kind: str, n: int, seed: int = 0) -> np.ndarray:
        """``n`` enrolled descriptors of ``kind`` drawn uniformly without replacement (all when fewer), decoded
        (uint8 for SIFT, float16 for SURF); only the drawn rows are read. ``seed`` seeds the draw."""
        self._check_kind(kind)
        return sample_descriptors(self.store, kind, n, seed)
