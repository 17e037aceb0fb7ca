"""Matching against a catalogue whose descriptors stay on disk until retrieval names the objects to match.

A :class:`~objrec.matching.database.DatabaseMatcher` holds every enrolled descriptor of its kind in one
float32 matrix, which is what exact matching against every object needs. Behind a retrieval shortlist
only a few objects are matched per frame, so :class:`StoredMatcher` keeps only the object table (names,
sizes, feature counts, view tables) and reads the shortlisted objects' keypoints and descriptors from the
database's memory-mapped shards when a frame asks for them (:meth:`objrec.modeldb.ModelDB.get_kind`, which
checks an object's content sha256 the first time it is read), and keeps the most recently matched in memory. Memory
then stays flat in the number of enrolled objects, and opening a catalogue reads no descriptor.

Matching itself is the :class:`~objrec.matching.database.DatabaseMatcher` code on the shortlisted objects,
so the ratio test, the FGINN test for objects enrolled with views and guided matching behave exactly as
with every object in memory (``tests/matching/test_stored.py`` checks they give the same candidates).
"""

from __future__ import annotations

import dataclasses
import functools
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Any

import numpy as np

from objrec.matching.database import DatabaseMatcher
from objrec.modeldb.records import object_groups
from objrec.types import Candidate, Features

__all__ = ["StoredMatcher"]

#: Matchers over recent shortlists kept for reuse.
RECENT_MATCHERS = 4
#: Objects whose features stay in memory after they were matched (least recently matched dropped first).
CACHED_OBJECTS = 128


class StoredMatcher:
    """One detector kind's descriptors of every object in a :class:`~objrec.modeldb.ModelDB`, read on demand.

    Parameters
    ----------
    db : ModelDB
    kind : str
        Detector kind ("sift" or "surf").
    ratio, mutual, xp
        As for :class:`~objrec.matching.database.DatabaseMatcher`.
    fginn : bool, optional
        FGINN ratio test; by default on when any object of the database was enrolled with synthesised views
        or several photos (as the in-memory matcher decides over all its objects).

    Notes
    -----
    Entries are the database's enrolled views, in its order (:attr:`ModelDB.records` when the matcher was
    made), like a :class:`DatabaseMatcher` made from ``db.objects()``.
    """

    def __init__(
        self, db: Any, kind: str, ratio: float = 0.75, mutual: bool = False, xp: Any = np, fginn: bool | None = None
    ) -> None:
        if kind not in db.detectors:
            raise ValueError(f"kind: {kind!r} is not enrolled in {db.path} (has {list(db.detectors)})")
        self.db = db
        self.kind = kind
        self.ratio = ratio
        self.mutual = mutual
        self.xp = xp
        self.names = db.records
        widths, heights, self.view_tables, n_features = db.columns("width", "height", "view_table", "n_features")
        self.sizes = list(zip(widths, heights, strict=True))
        self.counts = np.array([n.get(kind, 0) for n in n_features], np.int64)
        #: The object of each entry (its views share one number; see :func:`object_groups`).
        self.groups = object_groups(self.names)
        multi_view = (int(self.groups.max()) + 1 if len(self.groups) else 0) < len(self.names)
        self.fginn = (multi_view or any(t for t in self.view_tables)) if fginn is None else bool(fginn)
        # Kept for the next frames: a video's shortlist seldom changes from one frame to the next, a matcher
        # costs its descriptors' copy and norms to make, and an object its read and float32 conversion.
        self._matcher_of = functools.lru_cache(RECENT_MATCHERS)(self._make_matcher)
        self._read: OrderedDict[int, Any] = OrderedDict()  # object index -> its features, least recent first
        self._ahead: OrderedDict[int, None] = OrderedDict()  # objects read ahead and not read since, oldest first
        self._advisor: ThreadPoolExecutor | None = None  # gives the read-ahead advice (made on first use)
        self._advised: list[Future] = []  # its pending advice

    def __len__(self) -> int:
        return int(self.counts.sum())

    def object_counts(self) -> np.ndarray:
        """Descriptors of each object (int64, in object order)."""
        return self.counts

    def _model(self, i: int) -> Any:
        """Object ``i`` with its features of the matcher's kind, read from the database unless in memory (the
        :data:`CACHED_OBJECTS` most recently used stay)."""
        m = self._read.get(i)
        if m is None:
            m = self._read[i] = self.db.get_kind(self.names[i], self.kind)
            self._ahead.pop(i, None)
            if len(self._read) > CACHED_OBJECTS:
                self._read.popitem(last=False)
        self._read.move_to_end(i)
        return m

    def unread(self, objects: Any) -> list[int]:
        """Of ``objects`` (indices), those whose features are not in memory: matching them reads them first."""
        return [int(i) for i in np.asarray(objects, np.int64).reshape(-1) if int(i) not in self._read]

    def read(self, objects: Any) -> None:
        """Read ``objects`` (indices) into memory, each checked against its content hash on its first read."""
        for i in np.asarray(objects, np.int64).reshape(-1):
            self._model(int(i))

    def read_ahead(self, objects: Any) -> None:
        """Have the kernel start reading ``objects`` (indices) from disk (:meth:`objrec.modeldb.ModelDB.read_ahead`)
        so that a read of them a little later is quick. The advice is given by a thread of its own and this
        returns at once: giving it maps a shard file not mapped yet, which reads the file's header from the
        disk."""
        objects = [int(i) for i in np.asarray(objects, np.int64).reshape(-1)]
        if self._advisor is None:
            self._advisor = ThreadPoolExecutor(1, thread_name_prefix="objrec-read-ahead")
        self._advised.append(self._advisor.submit(self.db.read_ahead, [self.names[i] for i in objects]))
        self._advised = [f for f in self._advised if not f.done()]
        for i in objects:
            self._ahead[i] = None
            self._ahead.move_to_end(i)
        while len(self._ahead) > CACHED_OBJECTS:
            self._ahead.popitem(last=False)

    def settle(self) -> None:
        """Wait until the advice of every :meth:`read_ahead` so far has been given (its errors raised here)."""
        for f in self._advised:
            f.result()
        self._advised = []

    def read_ahead_before(self, i: int) -> bool:
        """Whether object ``i`` was read ahead (:meth:`read_ahead`) and not read since: its pages are then likely
        in memory, and its read is quick."""
        return int(i) in self._ahead

    def _make_matcher(self, objects: tuple[int, ...]) -> DatabaseMatcher:
        models = [self._model(i) for i in objects]
        return DatabaseMatcher(models, self.kind, self.ratio, self.mutual, self.xp, exact=True, fginn=self.fginn)

    def _matcher(self, objects: np.ndarray) -> DatabaseMatcher:
        """A matcher over ``objects`` (indices), from the matchers of the most recent shortlists."""
        return self._matcher_of(tuple(int(i) for i in objects))

    def candidates(self, scene: Features, among: Any = None) -> list[Candidate]:
        """Ratio-test matches of ``scene`` against the objects ``among`` (indices, best first), in that order.

        Without ``among`` every object is read and matched, as a :class:`DatabaseMatcher` would.
        """
        objects = np.arange(len(self.names)) if among is None else np.asarray(among, np.int64).reshape(-1)
        if len(scene) == 0 or not len(objects) or not self.counts[objects].sum():
            return []
        sub = self._matcher(objects)
        # Both neighbours of the ratio test come from the matcher's objects, which are the ones asked for.
        out = sub.candidates(scene)
        if among is not None:
            out.sort(key=lambda c: c.object_index)  # the order of ``among``
        return [dataclasses.replace(c, object_index=int(objects[c.object_index])) for c in out]

    def guided(self, candidate: Candidate, scene: Features, H: np.ndarray, radius: float = 12.0) -> Candidate:
        """See :meth:`DatabaseMatcher.guided` (``candidate``, ``scene``, ``H``, ``radius`` as there; the candidate's
        object alone is read)."""
        oi = int(candidate.object_index)
        sub = self._matcher(np.array([oi]))
        g = sub.guided(dataclasses.replace(candidate, object_index=0), scene, H, radius)
        return dataclasses.replace(g, object_index=oi)
