"""Retrieval: which enrolled objects a frame's features most likely show, in time sublinear in the catalogue.

An inverted-file index over every enrolled descriptor (FAISS ``IndexIVFScalarQuantizer``) answers the
``k`` approximate nearest neighbours of each query descriptor; each neighbour's label is the object it
belongs to, and every object found among a descriptor's neighbours gets one vote from it. Objects are
ranked by votes; the matcher then runs Lowe's ratio test and geometric verification against the top
candidates only.

Why this design
---------------
* Nearest-neighbour voting keeps the decision the matcher will make (a query descriptor supports the
  object that owns its nearest model descriptors), so retrieval and matching agree on what counts as
  evidence; a bag-of-words vocabulary (Nistér & Stewénius 2006) quantises both sides to visual words,
  which merges the distinctive descriptors of near-identical covers and needs a vocabulary trained per
  catalogue. With an inverted file the neighbour search visits ``n_probe`` of ``n_lists`` cells, so with
  ``n_lists`` growing as the square root of the number of descriptors the cost of a query grows as that
  square root, not linearly.
* The inverted file rather than a graph (HNSW): it supports removing an object's vectors in place
  (``remove_ids`` by label), which HNSW does not, so enrolment changes are applied incrementally; and
  its memory is the vectors themselves, while HNSW adds dozens of links per vector.
* Scalar quantisation matches how :mod:`objrec.modeldb` stores descriptors: SIFT's integer components
  are kept exactly as 8-bit codes (``QT_8bit_direct``, a quarter of the float32 memory, same distances),
  SURF's as float16. Product quantisation would cut memory further but changes which neighbour is
  nearest among the near-duplicates that decide a vote.
* Several neighbours (``k``) per query descriptor, one vote per object: a descriptor whose true match
  is second or third behind a look-alike on another cover still votes for the right object, which makes
  the ranking robust to the approximation (a true neighbour missed by the probed cells is usually
  replaced by another of the same object).
* FAISS is a well-kept library with CPU wheels on PyPI. Its index is saved in FAISS's own binary format
  (``faiss.write_index``, never pickle) with a sha256 and a JSON manifest, like every other objrec file,
  and read back with the inverted lists memory-mapped (``faiss.IO_FLAG_MMAP``): a catalogue's index opens
  without a copy, and memory holds only the lists that frames search.

Small indexes (fewer than :data:`IVF_MIN_DESCRIPTORS` descriptors) are searched exactly, where an
inverted file would save nothing. The index records the database id it was built for:
:meth:`RetrievalIndex.for_database` loads it, applies the objects added, replaced or removed since
(incrementally), rebuilds it when the catalogue has outgrown its cells, and saves it with the database.

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
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from objrec.fileio import atomic_write_json, atomic_write_via
from objrec.matching.index_files import (
    MANIFEST,
    RetrievalIndexError,
    StaleIndexError,
    checked_index_file,
    faiss_module,
    read_faiss_index,
    read_manifest,
)

if TYPE_CHECKING:
    from objrec.modeldb import ModelDB

__all__ = ["RetrievalIndex", "RetrievalParams", "RetrievalIndexError", "StaleIndexError", "vote"]

FORMAT = "objrec-retrieval-index"
SCHEMA_VERSION = 2
#: Below this many descriptors the index is exact (a flat scan); an inverted file would not pay off.
IVF_MIN_DESCRIPTORS = 20_000
#: Training points per inverted list (FAISS's k-means warns below 39) and k-means iterations: the cells
#: only need to spread the descriptors evenly, and training cost is points x lists x iterations.
TRAIN_PER_LIST = 50
TRAIN_ITERATIONS = 10
#: Rebuild (retrain the cells) once the index holds this many times the descriptors it was trained for.
REBUILD_GROWTH = 4.0
#: Descriptors read from the shards and added to the index at a time (64 MB as float32 SIFT).
CHUNK_ROWS = 131_072
#: Seconds between saves of a part-way index while :meth:`RetrievalIndex.for_database` builds or updates it:
#: each save writes the whole index, so saving after every chunk would cost quadratic writes.
CHECKPOINT_S = 60.0


@dataclass(frozen=True)
class RetrievalParams:
    """How the index is built and searched.

    Attributes
    ----------
    k : int
        Nearest neighbours per query descriptor; each object among them gets one vote.
    n_lists : int or None
        Inverted lists (cells); None: ``lists_per_sqrt`` times the square root of the descriptors.
    lists_per_sqrt : float
        See ``n_lists``. FAISS's guideline is 4 to 16 for billions of vectors; at catalogue sizes (up to
        about 10^7 descriptors) one keeps the k-means training to seconds while a query still scans
        only ``n_probe / n_lists`` of the index.
    n_probe : int
        Cells visited per query descriptor.
    exact_below : int
        Indexes of fewer descriptors are exact.
    seed : int
        Seed of the k-means that places the cells.
    """

    k: int = 5
    n_lists: int | None = None
    lists_per_sqrt: float = 1.0
    n_probe: int = 16
    exact_below: int = IVF_MIN_DESCRIPTORS
    seed: int = 1234

    def to_dict(self) -> dict[str, Any]:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


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


def _integral_u8(x: np.ndarray) -> bool:
    return bool(len(x)) and float(x.min()) >= 0 and float(x.max()) <= 255 and np.array_equal(np.rint(x), x)


def _n_lists(n: int, params: RetrievalParams) -> int:
    """Inverted lists for ``n`` descriptors (0: an exact index)."""
    if n < params.exact_below:
        return 0
    n_lists = params.n_lists or int(params.lists_per_sqrt * np.sqrt(n))
    return int(max(1, min(n_lists, n // TRAIN_PER_LIST)))


def _new_index(train: np.ndarray, kind: str, params: RetrievalParams, n: int | None = None) -> tuple[Any, str]:
    """An empty FAISS index for ``n`` descriptors (default: ``len(train)``) like ``train``, trained on (a sample
    of) ``train`` when it is an inverted file."""
    faiss = faiss_module()
    n = len(train) if n is None else int(n)
    d = train.shape[1]
    direct = kind == "sift" and _integral_u8(train[:100_000])
    qt = faiss.ScalarQuantizer.QT_8bit_direct if direct else faiss.ScalarQuantizer.QT_fp16
    codes = "8bit_direct" if direct else "fp16"
    n_lists = _n_lists(n, params)
    if not n_lists:
        return faiss.IndexIDMap(faiss.IndexScalarQuantizer(d, qt, faiss.METRIC_L2)), codes
    index = faiss.IndexIVFScalarQuantizer(faiss.IndexFlatL2(d), d, n_lists, qt, faiss.METRIC_L2)
    # Codes hold the descriptors themselves, not their offsets from the cell centre: 8-bit direct codes
    # are exact only for integers 0-255, which offsets are not.
    index.by_residual = False
    index.cp.seed = int(params.seed)
    index.cp.niter = TRAIN_ITERATIONS
    rng = np.random.default_rng(params.seed)
    m = len(train)
    sample = train if m <= n_lists * TRAIN_PER_LIST else train[rng.choice(m, n_lists * TRAIN_PER_LIST, replace=False)]
    index.train(np.ascontiguousarray(sample, dtype=np.float32))
    index.nprobe = int(params.n_probe)
    return index, codes


class RetrievalIndex:
    """Candidate objects for a frame's descriptors, by voting over approximate nearest neighbours.

    Build with :meth:`build` (arrays) or :meth:`for_database` (a :class:`~objrec.modeldb.ModelDB`, saved
    with it and kept in step with its content). See the module notes for the design.

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
        #: The file the index was read from or last saved to, and whether its lists are mapped from it.
        self.source: Path | None = None
        self.mapped = False

    def _writable(self) -> None:
        """Read a mapped index into memory before it is changed (its mapping is read-only)."""
        if self.mapped and self.source is not None:
            nprobe = self.index_.nprobe
            self.index_, self.mapped = faiss_module().read_index(str(self.source)), False
            self.index_.nprobe = nprobe

    def map_saved(self) -> None:
        """Map the inverted lists from the file just saved instead of holding them in memory (an inverted
        file only; no effect otherwise)."""
        if not self.mapped and not self.exact and self.source is not None and self.source.suffix == ".faiss":
            nprobe = self.index_.nprobe
            self.index_, self.mapped = read_faiss_index(self.source, mmap=True)
            self.index_.nprobe = nprobe

    @classmethod
    def build(cls, descriptors: Any, owner: Any, kind: str, params: RetrievalParams | None = None) -> RetrievalIndex:
        """An index over ``descriptors`` (N, D), row ``i`` belonging to object id ``owner[i]`` (>= 0)."""
        params = params or RetrievalParams()
        x = _as_f32(descriptors, None, "descriptors")
        own = np.asarray(owner, np.int64).reshape(-1)
        if len(own) != len(x) or (len(own) and own.min() < 0):
            raise ValueError(f"owner: expected {len(x)} object ids >= 0 (one per descriptor), got {len(own)}")
        index, codes = _new_index(x, kind, params)
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
            self._writable()
            self.index_.add_with_ids(x, own)

    def remove(self, object_ids: Any) -> int:
        """Remove every descriptor of the given objects; returns how many were removed."""
        ids = np.ascontiguousarray(np.unique(np.asarray(object_ids, np.int64)))
        if not len(ids):
            return 0
        self._writable()
        return int(self.index_.remove_ids(faiss_module().IDSelectorBatch(ids)))

    def candidates(self, query: Any, top: int = 10, n_probe: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The ``top`` objects with most votes from ``query`` descriptors (N, D), best first.

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
        """:meth:`candidates` as object names (an index of a database only)."""
        if self.objects is None:
            raise ValueError("candidate_names: this index was built from arrays, not from a ModelDB")
        ids, scores = self.candidates(query, top)
        return self.objects.names_of(ids), scores

    # -- a database's index -------------------------------------------------------------------------
    @classmethod
    def from_database(
        cls, db: ModelDB, kind: str, params: RetrievalParams | None = None, progress: Any = None, checkpoint: Any = None
    ) -> RetrievalIndex:
        """An index over every descriptor of ``kind`` enrolled in ``db`` (not saved; see :meth:`for_database`),
        built in bounded memory.

        The cells are trained on a uniform sample of the descriptors (:data:`TRAIN_PER_LIST` per list, read
        from the memory-mapped shards), then the descriptors are added in chunks of :data:`CHUNK_ROWS` (see
        :meth:`sync`): memory holds the sample, one chunk and the index's codes, never the descriptor table.
        ``progress`` and ``checkpoint`` are passed to :meth:`sync`.
        """
        params = params or RetrievalParams()
        n = sum(i.n_features.get(kind, 0) for i in db.infos())
        index, codes = _sample_trained_index(db, kind, params, n)
        out = cls(index, kind, params, codes, n, _Objects())
        out.sync(db, progress, checkpoint)
        return out

    def sync(self, db: ModelDB, progress: Any = None, checkpoint: Any = None) -> bool:
        """Apply the objects added, replaced or removed in ``db`` since the index was made; True if any.

        Changes are applied in place, reading only the new objects' descriptors, :data:`CHUNK_ROWS` rows at a
        time; when the index has outgrown the cells it was trained for (or an exact index has grown past
        ``exact_below``), it is rebuilt instead. Objects are added in the database's order and each keeps its
        label, so an interrupted update resumes with the objects not yet added. Until it completes
        :attr:`database_id` is None.

        Parameters
        ----------
        db : ModelDB
        progress : callable, optional
            Called with the number of descriptors added after each chunk.
        checkpoint : callable, optional
            Called with this index after each chunk (to save it part-way).
        """
        if self.objects is None:
            raise ValueError("sync: this index was built from arrays, not from a ModelDB")
        if self.database_id == db.database_id:
            return False
        target = db.database_id
        self.database_id = None
        current = {n: db.info(n).sha256 for n in db.records}
        table = self.objects.table
        gone = [n for n, (_, sha) in table.items() if current.get(n) != sha]
        self.remove([table.pop(n)[0] for n in gone])
        new = [n for n in current if n not in table]
        _add_objects(self, db, new, current, progress, checkpoint)
        self.database_id = target
        grown = len(self) > REBUILD_GROWTH * max(1, self.trained_for)
        if grown or (self.exact and len(self) >= self.params.exact_below):
            rebuilt = RetrievalIndex.from_database(db, self.kind, self.params, progress)
            self.__dict__.update(rebuilt.__dict__)
        return True

    @classmethod
    def for_database(
        cls,
        db: ModelDB,
        kind: str,
        params: RetrievalParams | None = None,
        save: bool = True,
        progress: bool = False,
        fresh: bool = False,
        checkpoint_s: float = CHECKPOINT_S,
    ) -> RetrievalIndex:
        """The index saved with ``db`` (``DB/index/<kind>/``), brought up to date with its content.

        Built when absent, when ``fresh`` or when ``params`` differ from the saved ones; updated incrementally
        when the database changed since it was saved (a part-way index continues where it stopped); saved
        again (atomically) whenever it changed. While it is built or updated, the part done is saved every
        ``checkpoint_s`` seconds (with no database id: stale to every reader until it completes), so an
        interrupted run resumes. ``progress`` shows a tqdm bar of the descriptors added on stderr.
        """
        folder = Path(db.path) / "index" / kind
        index = cls.load(folder) if (folder / MANIFEST).exists() and not fresh else None
        if index is not None and (index.kind != kind or index.objects is None):
            raise RetrievalIndexError(f"{folder / MANIFEST}: not a {kind!r} index of a model database")
        bar, tick, save_part = _progress(db, kind, index, progress, checkpoint_s if save else None)
        try:
            if index is None or (params is not None and params != index.params):
                index, changed = cls.from_database(db, kind, params, tick, save_part), True
            else:
                changed = index.sync(db, tick, save_part) or index.source is None or index.source.suffix != ".faiss"
        finally:
            bar.close()
        if changed and save and index.save_with(db) is not None:
            index.map_saved()
        return index

    def save_with(self, db: ModelDB) -> Path | None:
        """Save this index of ``db`` into ``DB/index/<kind>/`` holding the database's write lock, so two
        processes never interleave their files; nothing is written when another process changed the
        database since this index was brought up to date (it would be stale at once). Returns the manifest
        path, or None when nothing was written."""
        folder = Path(db.path) / "index" / self.kind
        with db.lock():
            if db.database_id != self.database_id:
                return None
            return self.save(folder)

    # -- files ----------------------------------------------------------------------------------------
    def save(self, folder: str | os.PathLike) -> Path:
        """Write ``folder/index.json`` and the FAISS index file (FAISS's own binary format, written by
        ``faiss.write_index``, never pickle) with its sha256, atomically.

        The index file is named by its hash and the manifest, written last, names it; older index files are
        deleted after. Returns the manifest path.
        """
        folder = Path(folder)
        faiss = faiss_module()
        # FAISS writes mapped lists as a reference to the file they are mapped from, which a later save deletes:
        # a mapped index is read into memory first, so that every saved file holds its lists.
        self._writable()
        final, digest = atomic_write_via(
            folder, lambda tmp: faiss.write_index(self.index_, tmp), lambda digest: f"index-{digest[:16]}.faiss"
        )
        self.source = final
        manifest = {
            "format": FORMAT,
            "schema_version": SCHEMA_VERSION,
            "kind": self.kind,
            "dim": self.dim,
            "codes": self.codes,
            "params": self.params.to_dict(),
            "trained_for": self.trained_for,
            "database_id": self.database_id,
            "array": {"file": final.name, "sha256": digest},
        }
        if self.objects is not None:
            manifest["objects"] = {n: list(v) for n, v in self.objects.table.items()}
            manifest["next_label"] = self.objects.next_label
        atomic_write_json(folder / MANIFEST, manifest)
        for old in folder.glob("index-*"):
            if old.name != final.name:
                old.unlink(missing_ok=True)
        return folder / MANIFEST

    @classmethod
    def load(cls, folder: str | os.PathLike, database_id: str | None = None, mmap: bool = True) -> RetrievalIndex:
        """Read an index written by :meth:`save`; never unpickles.

        The file's sha256 is checked first. With ``mmap`` an inverted file's lists stay in the file,
        memory-mapped read-only (``faiss.IO_FLAG_MMAP``): opening costs no copy and memory holds only the
        lists searched; the index is read into memory the first time it is changed.

        Raises
        ------
        RetrievalIndexError
            Naming the file that is missing, damaged, of another format or of a newer schema.
        StaleIndexError
            When ``database_id`` is given and the index was built for other content.
        """
        folder = Path(folder)
        m = read_manifest(folder, FORMAT, SCHEMA_VERSION, database_id)
        path = checked_index_file(folder, m)
        index, mapped = read_faiss_index(path, mmap)
        params = RetrievalParams(**m["params"])
        if getattr(index, "nprobe", None) is not None:
            index.nprobe = int(params.n_probe)
        objects = None
        if "objects" in m:
            table = {n: (int(v[0]), str(v[1])) for n, v in m["objects"].items()}
            objects = _Objects(table, int(m["next_label"]))
        out = cls(index, m["kind"], params, m["codes"], m["trained_for"], objects, m.get("database_id"))
        out.source, out.mapped = path, mapped
        return out


def _sample_trained_index(db: ModelDB, kind: str, params: RetrievalParams, n: int) -> tuple[Any, str]:
    """An empty FAISS index for the ``n`` descriptors of ``kind`` in ``db``, trained on a uniform sample of them
    read from the memory-mapped shards (:data:`TRAIN_PER_LIST` per list), and its codes."""
    n_lists = _n_lists(n, params)
    sample = db.sample_descriptors(kind, n_lists * TRAIN_PER_LIST if n_lists else 100_000, seed=params.seed)
    if not len(sample):
        sample = np.zeros((0, 128 if kind == "sift" else 64), np.float32)
    return _new_index(sample, kind, params, n)


def _add_objects(
    index: RetrievalIndex, db: ModelDB, names: list[str], shas: dict[str, str], progress: Any, checkpoint: Any
) -> None:
    """Add the descriptors of the records ``names`` of ``db`` to ``index``, :data:`CHUNK_ROWS` rows at a time,
    each record under the next free label (recorded with its sha256 from ``shas``); ``progress`` gets the rows
    of each chunk and ``checkpoint`` the index after it."""
    objects = index.objects
    for desc, keys, counts in db.iter_descriptor_chunks(index.kind, CHUNK_ROWS, names):
        labels = np.arange(objects.next_label, objects.next_label + len(keys), dtype=np.int64)
        index.add(desc, np.repeat(labels, counts))
        objects.next_label += len(keys)
        objects.table.update({k: (int(lab), shas[k]) for k, lab in zip(keys, labels, strict=True)})
        if progress is not None:
            progress(len(desc))
        if checkpoint is not None:
            checkpoint(index)


def _progress(db: ModelDB, kind: str, index: RetrievalIndex | None, show: bool, every: float | None) -> tuple:
    """A tqdm bar of the descriptors still to add, its per-chunk update, and a checkpoint that saves the index
    part-way every ``every`` seconds (None: never)."""
    import time

    from tqdm import tqdm

    total = sum(i.n_features.get(kind, 0) for i in db.infos())
    done = len(index) if index is not None and index.database_id != db.database_id else total
    bar = tqdm(total=max(0, total - done), unit="desc", unit_scale=True, desc=f"index {kind}", disable=not show)
    target, last = db.database_id, [time.monotonic()]

    def save_part(part: RetrievalIndex) -> None:
        if every is not None and time.monotonic() - last[0] >= every:
            with db.lock():  # saved only while the database holds the content the part is of
                if db.database_id == target:
                    part.save(Path(db.path) / "index" / kind)
            last[0] = time.monotonic()

    return bar, bar.update, save_part
