"""Retrieval: which enrolled objects a frame's features most likely show, in time sublinear in the catalogue.

An inverted-file index over the enrolled descriptors (FAISS ``IndexIVFPQ``, or scalar codes) answers the
``k`` approximate nearest neighbours of each query descriptor; each neighbour's label is the object it
belongs to, and every object found among a descriptor's neighbours gets one vote from it. Objects are
ranked by votes; the matcher then runs Lowe's ratio test and geometric verification against the top
candidates only. This module is the voting layer: the index itself (codec, segments, files) lives in
:mod:`objrec.modeldb.index`, where the database keeps it current as it commits.

Why this design
---------------
* Nearest-neighbour voting keeps the decision the matcher will make (a query descriptor supports the
  object that owns its nearest model descriptors), so retrieval and matching agree on what counts as
  evidence; a bag-of-words vocabulary (Nistér & Stewénius 2006) quantises both sides to visual words,
  which merges the distinctive descriptors of near-identical covers and needs a vocabulary trained per
  catalogue. With an inverted file the neighbour search visits ``n_probe`` of ``n_lists`` cells, so with
  ``n_lists`` growing as the square root of the number of descriptors the cost of a query grows as that
  square root, not linearly.
* The inverted file rather than a graph (HNSW): it supports removing an object's vectors (``remove_ids``
  by label, or a tombstone filtered by an ``IDSelector``), which HNSW does not; and its memory is the
  codes themselves, while HNSW adds dozens of links per vector.
* Product-quantised codes (16 bytes for a SIFT or SURF descriptor): a vote only needs one of the object's
  descriptors among the ``k`` approximate neighbours, not the exact nearest one, and the shortlisted
  objects are matched exactly on their stored descriptors afterwards.
* Several neighbours (``k``) per query descriptor, one vote per object: a descriptor whose true match
  is second or third behind a look-alike on another cover still votes for the right object, which makes
  the ranking robust to the approximation (a true neighbour missed by the probed cells is usually
  replaced by another of the same object).
* FAISS is a well-kept library with CPU wheels on PyPI. Its index is saved in FAISS's own binary format
  (``faiss.write_index``, never pickle) with a sha256 and a JSON manifest, like every other objrec file,
  and read back with the inverted lists memory-mapped (``faiss.IO_FLAG_MMAP``): a catalogue's index opens
  without a copy, and memory holds only the lists that frames search.

:class:`RetrievalIndex` is an index built from arrays, held in memory (only a database's index is saved, in
one format: :mod:`objrec.modeldb.index`); small ones (fewer than :data:`IVF_MIN_DESCRIPTORS` descriptors) are
searched exactly. :class:`DatabaseRetrieval` votes over a
database's saved index (:meth:`RetrievalIndex.for_database`), which is never built when it is opened: a
missing or stale one is a :class:`StaleIndexError` naming ``objrec db reindex --db DB``.

References
----------
.. [1] J. Sivic, A. Zisserman, "Video Google: a text retrieval approach to object matching in videos",
   ICCV 2003. DOI: 10.1109/ICCV.2003.1238663
.. [2] D. Nistér, H. Stewénius, "Scalable recognition with a vocabulary tree", CVPR 2006.
   DOI: 10.1109/CVPR.2006.264
.. [3] H. Jégou, M. Douze, C. Schmid, "Product quantization for nearest neighbor search", IEEE TPAMI 33(1),
   2011. DOI: 10.1109/TPAMI.2010.57
.. [4] J. Johnson, M. Douze, H. Jégou, "Billion-scale similarity search with GPUs", IEEE Trans. Big Data,
   2019. DOI: 10.1109/TBDATA.2019.2921572

Examples
--------
>>> import numpy as np
>>> from objrec.matching.retrieval import RetrievalIndex
>>> rng = np.random.default_rng(0)
>>> desc = rng.integers(0, 256, (3000, 128)).astype(np.float32)
>>> owner = np.repeat(np.arange(30), 100)
>>> index = RetrievalIndex.build(desc, owner, "sift")
>>> ids, scores = index.candidates(desc[owner == 7][:40], top=3)
>>> int(ids[0])
7
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from objrec.modeldb.index import IVF_MIN_DESCRIPTORS, DatabaseIndex, RetrievalParams, index_folder, new_codec
from objrec.modeldb.index_files import MANIFEST, RetrievalIndexError, StaleIndexError, faiss_module

if TYPE_CHECKING:
    from objrec.modeldb import ModelDB

__all__ = [
    "RetrievalIndex",
    "DatabaseRetrieval",
    "RetrievalParams",
    "RetrievalIndexError",
    "StaleIndexError",
    "IVF_MIN_DESCRIPTORS",
    "MANIFEST",
    "vote",
]


def _as_f32(x: Any, dim: int | None, name: str) -> np.ndarray:
    a = np.ascontiguousarray(np.asarray(x), dtype=np.float32)
    if a.ndim != 2 or (dim is not None and a.shape[1] != dim):
        want = f"(N, {dim})" if dim is not None else "(N, D)"
        raise ValueError(f"{name}: expected a {want} array, got shape {a.shape}")
    return a


def vote(labels: np.ndarray, top: int | None = None) -> tuple[np.ndarray, np.ndarray]:
    """Objects ranked by votes: each row (one query descriptor's neighbours' objects) gives each object
    in it one vote; -1 entries are ignored.

    Returns
    -------
    object_ids : (M,) int64
        Best first (ties: the smaller id first).
    scores : (M,) float32
        Votes divided by the number of query descriptors, in [0, 1].

    Parameters
    ----------
    labels : np.ndarray
        (N, k) int: per query descriptor, its neighbours' object ids (-1: none).
    top : int or None
        Keep the ``top`` best objects (None: all).
    """
    lab = np.asarray(labels, np.int64)
    lab = np.sort(lab.reshape(len(lab), -1) if lab.size else lab.reshape(len(lab), 0), axis=1)
    keep = lab >= 0
    keep[:, 1:] &= lab[:, 1:] != lab[:, :-1]
    ids, counts = np.unique(lab[keep], return_counts=True)
    order = np.lexsort((ids, -counts))[: top if top is not None else None]
    return ids[order], (counts[order] / max(1, len(lab))).astype(np.float32)


@dataclass
class _Objects:
    """Names of the objects a database-tied index holds: name -> (label, content sha256)."""

    table: dict[str, tuple[int, str]] = field(default_factory=dict)
    next_label: int = 0

    def names_of(self, labels: np.ndarray) -> list[str]:
        by_label = {lab: name for name, (lab, _) in self.table.items()}
        return [by_label.get(int(x), "") for x in labels]


class RetrievalIndex:
    """Candidate objects for a frame's descriptors, by voting over approximate nearest neighbours.

    Build with :meth:`build` (arrays) or :meth:`for_database` (a :class:`~objrec.modeldb.ModelDB`, saved
    with it and kept in step with its content). See the module notes for the design.

    Parameters
    ----------
    index : faiss.Index
        The FAISS index (an ``IndexIDMap`` of scalar codes, or an inverted file).
    codes : str
        The name of its codes (``new_codec``'s: ``"pq<bytes>"``, ``"8bit_direct"``, ``"fp16"``, ...).
    trained_for : int
        The descriptors its lists were sized and trained for.
    objects : _Objects, optional
        The names of a database's objects (None for an index built from arrays).

    Attributes
    ----------
    kind : str
        Descriptor kind ("sift" or "surf").
    params : RetrievalParams
    database_id : str or None
        Id of the database content the index holds (None for an index built from arrays).
    """

    def __init__(
        self,
        index: Any,
        kind: str,
        params: RetrievalParams,
        codes: str,
        trained_for: int,
        objects: _Objects | None = None,
        database_id: str | None = None,
    ) -> None:
        self.index_ = index
        self.kind = kind
        self.params = params
        self.codes = codes
        self.trained_for = int(trained_for)
        self.objects = objects
        self.database_id = database_id
        #: Every descriptor given is indexed (see :attr:`DatabaseRetrieval.per_object_cap`).
        self.per_object_cap: int | None = None

    @classmethod
    def build(cls, descriptors: Any, owner: Any, kind: str, params: RetrievalParams | None = None) -> RetrievalIndex:
        """An index over ``descriptors`` (N, D), row ``i`` belonging to object id ``owner[i]`` (>= 0).

        Parameters
        ----------
        descriptors : array
            (N, D) descriptors.
        owner : array
            (N,) object id (>= 0) of each descriptor.
        kind : str
            Descriptor kind ("sift" or "surf").
        params : RetrievalParams, optional
            The index's settings (default: :class:`RetrievalParams`'s).
        """
        params = params or RetrievalParams()
        x = _as_f32(descriptors, None, "descriptors")
        own = np.asarray(owner, np.int64).reshape(-1)
        if len(own) != len(x) or (len(own) and own.min() < 0):
            raise ValueError(f"owner: expected {len(x)} object ids >= 0 (one per descriptor), got {len(own)}")
        index, codes = new_codec(x, kind, params)
        out = cls(index, kind, params, codes, len(x))
        out.add(x, own)
        return out

    @property
    def dim(self) -> int:
        return int(self.index_.d)

    def __len__(self) -> int:
        """Descriptors held."""
        return int(self.index_.ntotal)

    @property
    def exact(self) -> bool:
        """True for a flat (exact) index, False for an inverted file."""
        return not hasattr(self.index_, "nprobe")

    def add(self, descriptors: Any, owner: Any) -> None:
        """Add descriptors of objects (ids in ``owner``); FAISS keeps the ids as the vectors' labels."""
        x = _as_f32(descriptors, self.dim, "descriptors")
        own = np.ascontiguousarray(np.asarray(owner, np.int64).reshape(-1))
        if len(own) != len(x):
            raise ValueError(f"owner: expected {len(x)} object ids, got {len(own)}")
        if self.codes == "8bit_direct":
            x = np.clip(np.rint(x), 0, 255)  # the codes hold integers 0-255
        if len(x):
            self.index_.add_with_ids(x, own)

    def remove(self, object_ids: Any) -> int:
        """Remove every descriptor of the given objects; returns how many were removed."""
        ids = np.ascontiguousarray(np.unique(np.asarray(object_ids, np.int64)))
        if not len(ids):
            return 0
        return int(self.index_.remove_ids(faiss_module().IDSelectorBatch(ids)))

    def candidates(self, query: Any, top: int | None = 10, n_probe: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The ``top`` objects (None: all) with most votes from ``query`` descriptors (N, D), best first.

        ``n_probe`` overrides ``params.n_probe`` for this search (an inverted file only).

        Returns
        -------
        object_ids : (M,) int64, M <= top
        scores : (M,) float32
            Fraction of query descriptors with the object among their ``k`` neighbours.
        """
        q = _as_f32(query, self.dim, "query")
        if not len(q) or not len(self):
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        if n_probe is None or self.exact:
            _, labels = self.index_.search(q, int(self.params.k))
        else:
            probe = faiss_module().SearchParametersIVF(nprobe=int(n_probe))
            _, labels = self.index_.search(q, int(self.params.k), params=probe)
        return vote(labels, top)

    def candidate_names(self, query: Any, top: int = 10) -> tuple[list[str], np.ndarray]:
        """:meth:`candidates` as object names (an index of a database only).

        Parameters
        ----------
        query : array
            (N, D) query descriptors.
        top : int
            Objects returned at most.
        """
        if self.objects is None:
            raise ValueError("candidate_names: this index was built from arrays, not from a ModelDB")
        ids, scores = self.candidates(query, top)
        return self.objects.names_of(ids), scores

    # -- a database's index -------------------------------------------------------------------------
    @staticmethod
    def for_database(db: ModelDB, kind: str) -> DatabaseRetrieval:
        """The index saved with ``db`` for ``kind``, which its commits keep current (see
        :class:`DatabaseRetrieval`); StaleIndexError naming ``objrec db reindex`` when it is missing or stale."""
        return DatabaseRetrieval.open(db, kind)


class DatabaseRetrieval:
    """Voting over the saved index of a model database (:class:`~objrec.modeldb.index.DatabaseIndex`): the
    same answers as :class:`RetrievalIndex`, object labels named by the database's record keys.

    Parameters
    ----------
    core : DatabaseIndex
        The segmented index, read memory-mapped.

    Attributes
    ----------
    kind : str
    params : RetrievalParams
    objects : _Objects
        Record key -> (label, content sha256), and the next free label.
    database_id : str or None
    """

    def __init__(self, core: DatabaseIndex) -> None:
        self.core = core
        self.kind = core.kind
        self.params = core.params
        self.objects = _Objects(core.table(), core.next_label)
        self.database_id = core.database_id
        self.exact = False
        #: At most this many descriptors of each record are indexed (None: all).
        self.per_object_cap = core.params.max_per_object

    @classmethod
    def open(cls, db: ModelDB, kind: str, check: str = "now") -> DatabaseRetrieval:
        """The current index of ``kind`` saved with ``db``; never builds one. ``check``: when its files are
        checked against their sha256 (see :meth:`~objrec.modeldb.index.DatabaseIndex.load`).

        Raises
        ------
        StaleIndexError
            Missing, of an older version, or of other content (an interrupted enrolment): the message names
            ``objrec db reindex --db DB``.
        RetrievalIndexError
            A damaged file, named.
        """
        return cls(DatabaseIndex.load(index_folder(db.path, kind), database_id=db.database_id, check=check))

    @classmethod
    def load(cls, folder: str | os.PathLike) -> DatabaseRetrieval:
        """The index saved in ``folder``, whatever database content it holds."""
        return cls(DatabaseIndex.load(folder))

    def __len__(self) -> int:
        return len(self.core)

    def candidates(self, query: Any, top: int | None = 10, n_probe: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """As :meth:`RetrievalIndex.candidates`: the ``top`` labels with most votes, best first, and their
        shares of the query descriptors.

        Parameters
        ----------
        query : array
            (N, D) query descriptors.
        top : int or None
            Labels returned at most (None: all).
        n_probe : int, optional
            Inverted lists probed (default: the index's ``n_probe``).
        """
        q = _as_f32(query, self.core.dim, "query")
        if not len(q) or not len(self):
            return np.zeros(0, np.int64), np.zeros(0, np.float32)
        return vote(self.core.search(q, n_probe), top)

    def candidate_names(self, query: Any, top: int = 10) -> tuple[list[str], np.ndarray]:
        """:meth:`candidates` as record keys.

        Parameters
        ----------
        query : array
            (N, D) query descriptors.
        top : int
            Record keys returned at most.
        """
        ids, scores = self.candidates(query, top)
        return self.objects.names_of(ids), scores
