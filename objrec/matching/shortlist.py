"""Retrieval before matching: a frame is matched only against the objects its descriptors vote for.

For a catalogue, exact 2-NN against every enrolled descriptor costs time in proportion to the database.
:class:`ShortlistMatcher` puts a :class:`~objrec.matching.retrieval.RetrievalIndex` in front of a
:class:`~objrec.matching.database.DatabaseMatcher`: the index proposes the objects most of the frame's
descriptors vote for (a shortlist, best first), and the ratio test then runs against those objects'
descriptors only, so both the retrieval (an inverted file visiting a fixed number of cells) and the matching
(a fixed number of objects) stay nearly flat as the catalogue grows. Verification follows the shortlist's
order of votes.

:func:`make_matcher` chooses: databases with fewer than :data:`RETRIEVAL_MIN_DESCRIPTORS` descriptors of a
kind keep exact matching, where a shortlist would save less than the retrieval costs.
"""

from __future__ import annotations

import logging
from typing import Any

import numpy as np

from objrec.backend import to_numpy
from objrec.matching.database import DatabaseMatcher
from objrec.matching.retrieval import (
    IVF_MIN_DESCRIPTORS,
    DatabaseRetrieval,
    RetrievalIndex,
    RetrievalIndexError,
    RetrievalParams,
)
from objrec.matching.stored import StoredMatcher
from objrec.modeldb.records import object_groups
from objrec.types import Candidate, Features

__all__ = [
    "ShortlistMatcher",
    "make_matcher",
    "descriptor_count",
    "uses_retrieval",
    "prepare_indexes",
    "RETRIEVAL_MIN_DESCRIPTORS",
    "SHORTLIST_SIZE",
    "RETRIEVAL_QUERIES",
]

log = logging.getLogger("objrec")

#: Databases with at least this many descriptors of a kind go through retrieval. Retrieval pays once its
#: index is an inverted file: a smaller, flat index scans every descriptor as exact matching does, in slower
#: scalar-quantised code (``bench/bench_catalogue.py --sections crossover`` times both per database size).
RETRIEVAL_MIN_DESCRIPTORS = IVF_MIN_DESCRIPTORS
#: Objects retrieval proposes per frame: matched, then verified in order of votes while the budget allows. The
#: photographed object is nearly always among the first few by votes, and matching costs in proportion to the
#: shortlisted descriptors; fewer competitors in the ratio test also keep more of the object's own matches.
SHORTLIST_SIZE = 3
#: The frame's strongest descriptors (by detector response) that vote: a shortlist of a few objects needs a
#: few hundred votes, and the search costs in proportion to the voters.
RETRIEVAL_QUERIES = 300
#: Inverted-file cells visited per voting descriptor. A vote only needs one of the object's descriptors among
#: the neighbours, not the true nearest one, so few cells rank as well as many (``bench/bench_catalogue.py``).
RETRIEVAL_PROBES = 2


class ShortlistMatcher:
    """Candidates of a frame from a retrieval shortlist, matched exactly against the shortlisted objects.

    Parameters
    ----------
    matcher : DatabaseMatcher or StoredMatcher
        Every enrolled object's descriptors of one kind (its objects in database order), in memory or read
        from the database when shortlisted.
    index : RetrievalIndex or DatabaseRetrieval
        An index of the same database and kind (:meth:`RetrievalIndex.for_database`), whose labels are
        mapped to the matcher's objects by name.
    top : int
        Objects per shortlist.
    queries : int
        At most this many of the frame's descriptors vote (the strongest).
    n_probe : int
        Cells of the index's inverted file visited per voting descriptor.

    Notes
    -----
    The index votes with ``k`` approximate neighbours per descriptor (see :mod:`objrec.matching.retrieval`);
    the ratio test afterwards takes both nearest neighbours from the shortlisted objects only, so the
    second neighbour of a descriptor never comes from an object outside the shortlist.
    """

    def __init__(
        self,
        matcher: DatabaseMatcher | StoredMatcher,
        index: RetrievalIndex | DatabaseRetrieval,
        top: int = SHORTLIST_SIZE,
        queries: int = RETRIEVAL_QUERIES,
        n_probe: int = RETRIEVAL_PROBES,
    ) -> None:
        if index.objects is None:
            raise ValueError("ShortlistMatcher: the index must be a database's (RetrievalIndex.for_database)")
        if index.kind != matcher.kind:
            raise ValueError(f"ShortlistMatcher: a {index.kind!r} index for a {matcher.kind!r} matcher")
        if top < 1:
            raise ValueError(f"top: expected a positive integer, got {top}")
        self.matcher = matcher
        self.index = index
        self.top = int(top)
        self.queries = int(queries)
        self.n_probe = int(n_probe)
        position = {n: i for i, n in enumerate(matcher.names)}
        self._object_of = np.full(index.objects.next_label, -1, np.int64)
        for name, (label, _) in index.objects.table.items():
            if name not in position:
                raise ValueError(f"ShortlistMatcher: the index holds {name!r}, which the matcher does not")
            self._object_of[label] = position[name]
        if len(index.objects.table) != len(position):
            raise ValueError("ShortlistMatcher: the index and the matcher hold different objects")
        # An object enrolled from several photos has one matcher entry per view; votes are pooled per object.
        groups = getattr(matcher, "groups", None)  # (a stored matcher numbers them once)
        self._group = object_groups(matcher.names) if groups is None else groups
        counts = np.asarray(matcher.object_counts(), np.float64)
        cap = index.per_object_cap
        if cap is not None:
            counts = np.minimum(counts, cap)  # what the index holds of each object
        # The chance that an object is among a descriptor's k neighbours whatever it shows: an object with
        # many descriptors collects votes from every frame, so shortlists rank votes above this chance.
        self._chance = 1.0 - (1.0 - counts / max(1, counts.sum())) ** int(index.params.k)

    @property
    def kind(self) -> str:
        return self.matcher.kind

    def __len__(self) -> int:
        return len(self.matcher)

    def object_counts(self) -> np.ndarray:
        """Descriptors of each object (int64, in object order)."""
        return self.matcher.object_counts()

    def shortlist(self, scene: Features, queries: int | None = None) -> np.ndarray:
        """The matcher's entries the frame's descriptors vote for most beyond chance, best first: an entry's
        score is the share of voting descriptors with it among their neighbours, less the share expected from
        its number of descriptors alone, so a small model filling the frame is not outvoted by large models that
        are merely everywhere. Entries are enrolled views; an object's score is the sum of its views' scores,
        and the ``top`` objects come with all their views (each object's views best first). At most
        ``queries`` (default: the matcher's ``queries``) of the strongest descriptors vote. ``scene``: the
        frame's features."""
        if len(scene) == 0:
            return np.zeros(0, np.int64)
        desc = scene.descriptors
        queries = self.queries if queries is None else max(1, int(queries))
        if len(scene) > queries:
            # Chosen where the features are (host or device): only the voters go to the (CPU) index.
            desc = desc[scene.xp.argsort(-scene.response)[:queries]]
        labels, share = self.index.candidates(to_numpy(desc), top=None, n_probe=self.n_probe)
        objs = self._object_of[labels]
        keep = objs >= 0
        objs, excess = objs[keep], share[keep] - self._chance[objs[keep]]
        order = np.argsort(-excess, kind="stable")
        objs, excess = objs[order], excess[order]
        groups = self._group[objs]
        pooled = np.zeros(int(self._group.max()) + 1 if len(self._group) else 0)
        np.add.at(pooled, groups, excess)
        best = list(dict.fromkeys(groups[np.argsort(-pooled[groups], kind="stable")].tolist()))[: self.top]
        rank = {g: r for r, g in enumerate(best)}
        chosen = [i for i, g in enumerate(groups.tolist()) if g in rank]
        chosen.sort(key=lambda i: rank[int(groups[i])])  # stable: each object's views keep their order
        return objs[np.asarray(chosen, np.int64)] if chosen else np.zeros(0, np.int64)

    def unread(self, objects: Any) -> list[int]:
        """Of ``objects`` (indices), those a match must read from the database first (none when every object's
        descriptors are in memory)."""
        unread = getattr(self.matcher, "unread", None)
        return [] if unread is None else unread(objects)

    def read(self, objects: Any) -> None:
        """Read ``objects`` (indices) into memory (see :meth:`unread`)."""
        self._stored().read(objects)

    def read_ahead(self, objects: Any) -> None:
        """Have the kernel start reading ``objects`` (indices) without waiting (see :meth:`unread`)."""
        self._stored().read_ahead(objects)

    def read_ahead_before(self, i: int) -> bool:
        """Whether object ``i`` was read ahead and not read since (see :meth:`unread`)."""
        return self._stored().read_ahead_before(i)

    def _stored(self) -> StoredMatcher:
        if not isinstance(self.matcher, StoredMatcher):
            raise TypeError("ShortlistMatcher: its matcher holds every object in memory, so nothing is read")
        return self.matcher

    def candidates(self, scene: Features, shortlist: Any = None) -> list[Candidate]:
        """Ratio-test matches of ``scene`` (the frame's features) against the ``shortlist`` (matcher entries, best
        first; retrieved here when not given), in its order."""
        if shortlist is None:
            shortlist = self.shortlist(scene)
        return self.matcher.candidates(scene, among=shortlist)

    def guided(self, candidate: Candidate, scene: Features, H: np.ndarray, radius: float = 12.0) -> Candidate:
        """See :meth:`DatabaseMatcher.guided` (``candidate``, ``scene``, ``H``, ``radius`` as there): one object's
        matches, unaffected by retrieval."""
        return self.matcher.guided(candidate, scene, H, radius)


def _index_for(db: Any, kind: str, check: str = "now") -> DatabaseRetrieval:
    """The database's saved index, which its commits keep current. Opening never builds or updates one: a
    missing or stale index (an interrupted enrolment, an older version) is a :class:`StaleIndexError` naming
    ``objrec db reindex --db DB``. ``check`` as :meth:`DatabaseRetrieval.open`'s."""
    return DatabaseRetrieval.open(db, kind, check)


def descriptor_count(db: Any, kind: str) -> int:
    """Descriptors of ``kind`` enrolled in ``db``, from its shards' row offsets (no array is read)."""
    return int(db.descriptor_counts().get(kind, 0))


def uses_retrieval(db: Any, kind: str, retrieval: bool | None = None) -> bool:
    """Whether :func:`make_matcher` puts a retrieval index in front of ``kind``'s matcher for ``db`` (``retrieval``
    as there)."""
    n = descriptor_count(db, kind)
    return n > 0 and (n >= RETRIEVAL_MIN_DESCRIPTORS if retrieval is None else bool(retrieval))


def make_matcher(
    db: Any,
    kind: str,
    retrieval: bool | None = None,
    params: RetrievalParams | None = None,
    top: int = SHORTLIST_SIZE,
    check_index: str = "now",
    **matcher_args: Any,
) -> DatabaseMatcher | ShortlistMatcher:
    """The matcher of one detector kind of ``db``.

    Without retrieval, a :class:`DatabaseMatcher` with every object's descriptors in memory; with it, a
    :class:`ShortlistMatcher` of the database's retrieval index in front of a
    :class:`~objrec.matching.stored.StoredMatcher`, which reads only the shortlisted objects' descriptors
    from the database's memory-mapped shards, so memory does not grow with the catalogue.

    Parameters
    ----------
    db : ModelDB
    retrieval : bool, optional
        None: retrieval from :data:`RETRIEVAL_MIN_DESCRIPTORS` descriptors of ``kind`` on; True/False: always
        or never.
    params : RetrievalParams, optional
        Unused: the database's saved index carries its own (kept for callers).
    top : int
        Objects per shortlist.
    check_index : {"now", "background"}
        When the index's files are checked against their sha256: before it is returned, or its codes in a
        low-priority thread while it already answers (a damaged file is then raised by a later search; see
        :meth:`~objrec.modeldb.index.DatabaseIndex.load`).
    **matcher_args
        ``ratio``, ``mutual``, ``xp`` (both matchers) and ``exact`` (:class:`DatabaseMatcher` only).
    """
    if not uses_retrieval(db, kind, retrieval):
        return DatabaseMatcher(db.objects(), kind, **matcher_args)
    stored_args = {k: v for k, v in matcher_args.items() if k != "exact"}
    return ShortlistMatcher(StoredMatcher(db, kind, **stored_args), _index_for(db, kind, check_index), top)


def prepare_indexes(
    db: Any,
    params: RetrievalParams | None = None,
    progress: bool = False,
    rebuild: bool = True,
    kinds: list[str] | None = None,
    workers: int | None = None,
    scheduler: Any = None,
    send_bytes: bool = False,
) -> list[str]:
    """Build afresh (a new codec trained on a uniform sample of the stored descriptors) and save the retrieval
    index of each of ``db``'s detector kinds that :func:`make_matcher` searches through one (or of ``kinds``,
    whatever their size: for a matcher made with ``retrieval=True``); returns those kinds. What
    ``objrec db reindex`` runs. The database's commits keep an index current once it exists. ``params`` are the
    indexes' settings (default: :class:`~objrec.matching.retrieval.RetrievalParams`'s).

    With ``rebuild`` False an index already current is kept (what an evaluation runs before it opens many
    recognizers). Each build holds the database's write lock, reads the shards in chunks (bounded memory) and
    saves its segments as it goes; a build interrupted with the same parameters continues where it stopped
    (:func:`~objrec.modeldb.index_update.build_index`). ``progress`` shows a tqdm bar of the descriptors added.

    The chunks are encoded here by FAISS's threads (``workers`` of them when given), or on Dask workers
    (``pip install "objrec[dask]"``) with ``scheduler``: the address of a running scheduler, a ``Client`` or
    cluster object, or ``"local"`` for a local cluster of ``workers`` processes, connected before anything is
    written. The workers read the shards by the database's path unless ``send_bytes``; this process trains the
    codec and writes the segments, which are those of the threads (:mod:`objrec.modeldb.index_cluster`).
    """
    from tqdm import tqdm

    from objrec.modeldb.index_cluster import encoding
    from objrec.modeldb.index_update import DEFAULT_PARAMS, build_index, descriptor_total

    if kinds is None:
        kinds = [k for k in db.detectors if descriptor_count(db, k) >= RETRIEVAL_MIN_DESCRIPTORS]
    with encoding(workers, scheduler, send_bytes) as chunks:
        for kind in kinds:
            with db.lock():
                if not rebuild:
                    try:
                        DatabaseRetrieval.open(db, kind)
                        continue
                    except RetrievalIndexError:
                        pass
                total = descriptor_total(db, kind, (params or DEFAULT_PARAMS).max_per_object)
                bar = tqdm(total=total, unit="desc", unit_scale=True, desc=f"index {kind}", disable=not progress)
                with bar:
                    build_index(db, kind, params, bar.update, chunks)
    return kinds
