"""Keeping a database's retrieval index current (:class:`~objrec.modeldb.index.DatabaseIndex`).

:func:`keep_indexes_current` runs after every commit of the database, with its write lock held: the records
the index lacks (by key and content hash) are added as one new segment per :data:`CHUNK_ROWS` codes, the
labels of records gone or replaced are tombstoned, and segments are merged log-structured: the newest is
merged into the one before it while that one holds at most :data:`MERGE_RATIO` times its codes, so segment
sizes fall geometrically from oldest to newest and there are about log2(N / codes per commit) of them, and
each code is rewritten about that many times over a bulk enrolment (linear-logarithmic writes, not the
quadratic ones of rewriting the index per commit). A segment stops growing at :data:`MAX_SEGMENT_BYTES`,
which bounds the memory of a merge (the two inputs and the output in memory) whatever the catalogue's size.

:func:`build_index` (``objrec db reindex``) trains a new codec on a uniform sample of the stored descriptors
and fills it the same way, resumably. The codec is retrained only there: by a reindex, and when a commit
finds the index holding :data:`REBUILD_GROWTH` times the codes its lists were sized for (a full rebuild;
rebuilds at geometrically spaced sizes cost a bounded multiple of the final build in total).

The records to add are read in chunks planned from the shards' offsets (:func:`chunk_plan`); a chunk's codes
are computed here (:func:`local_chunks`) or on the workers of a Dask cluster
(:mod:`objrec.modeldb.index_cluster`), and added and written here either way.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Iterator
from contextlib import closing
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np

from objrec.modeldb.index import DatabaseIndex, RetrievalParams, Segment, index_folder, new_codec
from objrec.modeldb.index_files import (
    MANIFEST,
    REINDEX_HINT,
    RetrievalIndexError,
    StaleIndexError,
    faiss_module,
    read_faiss_index,
)
from objrec.modeldb.preparation import decode_descriptors, stored_responses
from objrec.modeldb.reader import ShardReader, descriptor_spans

if TYPE_CHECKING:
    from objrec.modeldb.database import ModelDB

__all__ = [
    "keep_indexes_current",
    "build_index",
    "sync_index",
    "indexed_chunks",
    "chunk_plan",
    "chunk_descriptors",
    "local_chunks",
    "ChunkSource",
    "descriptor_total",
    "CHUNK_ROWS",
    "MERGE_RATIO",
    "MAX_SEGMENT_BYTES",
    "REBUILD_GROWTH",
    "AUTO_BUILD_MAX",
    "DEFAULT_PARAMS",
]

log = logging.getLogger("objrec")

#: Codes per new segment while records are added (64 MB of float32 SIFT read at a time).
CHUNK_ROWS = 131_072
#: The newest segment is merged into the one before it while that holds at most this many times its codes.
MERGE_RATIO = 2.0
#: Segments stop growing at this size: a merge holds its inputs and output in memory.
MAX_SEGMENT_BYTES = 256 << 20
#: A commit rebuilds (retrains) the index once it holds this many times the codes its codec was trained for.
REBUILD_GROWTH = 4.0
#: Tombstoned codes of a segment past this fraction get it rewritten without them.
DEAD_FRACTION = 0.5
#: A commit builds a missing (or older-schema) index itself only up to this many descriptors; a larger
#: database written without index support says ``objrec db reindex`` instead of stalling an enrolment.
AUTO_BUILD_MAX = 1_000_000
#: Parameters of an index a commit or a reindex builds afresh.
DEFAULT_PARAMS = RetrievalParams()


def descriptor_total(db: ModelDB, kind: str, cap: int | None = None) -> int:
    """Live descriptors of ``kind`` in ``db`` (each record's counted up to ``cap``), from the shards' offsets."""
    total = 0
    for sh in db.store.shards:
        counts = np.diff(np.asarray(sh.offsets.get(kind, [0]), np.int64))
        if sh.dead:
            counts[sorted(sh.dead)] = 0
        total += int(np.minimum(counts, cap).sum() if cap else counts.sum())
    return total


def _live_shas(db: ModelDB) -> dict[str, str]:
    store = db.store
    return {key: store.shards[si].column("sha256")[r] for key, (si, r) in store.live.items()}


def chunk_plan(
    reader: ShardReader, kind: str, keys: list[str], cap: int | None, max_rows: int | None = None
) -> Iterator[tuple[list[str], np.ndarray]]:
    """Records ``keys`` grouped as :func:`indexed_chunks` reads them, from the shards' offsets alone (no
    descriptor is read): ``(keys, rows per record)`` per chunk of whole records of at most ``max_rows`` rows
    (default :data:`CHUNK_ROWS`; a record with more comes alone), each record counted up to ``cap``.
    ``reader``: the database's shard reader; ``kind``: the descriptor kind."""
    max_rows = CHUNK_ROWS if max_rows is None else max_rows
    out_keys: list[str] = []
    counts: list[int] = []
    rows = 0
    for key, _, lo, hi in descriptor_spans(reader, kind, keys):
        n = min(hi - lo, cap) if cap else hi - lo
        if out_keys and rows + n > max_rows:
            yield out_keys, np.asarray(counts, np.int64)
            out_keys, counts, rows = [], [], 0
        out_keys.append(key)
        counts.append(n)
        rows += n
    if out_keys:
        yield out_keys, np.asarray(counts, np.int64)


def chunk_descriptors(reader: ShardReader, kind: str, keys: list[str], cap: int | None) -> np.ndarray:
    """The descriptors of records ``keys`` to index, float32, concatenated in their order: a record with more
    than ``cap`` descriptors gives its ``cap`` strongest by detector response (in stored order).
    ``reader``: the database's shard reader; ``kind``: the descriptor kind."""
    parts = []
    for _, sh, lo, hi in descriptor_spans(reader, kind, keys):
        d = decode_descriptors(kind, reader.array(sh, f"{kind}.descriptors.npy")[lo:hi])
        if cap and hi - lo > cap:
            response = stored_responses(reader.array(sh, f"{kind}.keypoints.npy")[lo:hi])
            d = d[np.sort(np.argsort(-response, kind="stable")[:cap])]
        parts.append(np.asarray(d))
    return np.concatenate(parts).astype(np.float32)


def indexed_chunks(
    db: ModelDB, kind: str, keys: list[str], cap: int | None, max_rows: int | None = None
) -> Iterator[tuple[np.ndarray, list[str], np.ndarray]]:
    """The descriptors of records ``keys`` to index, float32, in the chunks of :func:`chunk_plan`:
    ``(descriptors, keys, rows per record)`` (see :func:`chunk_descriptors`).
    ``db``: the database read; ``kind``: the descriptor kind; ``cap``: each record's most descriptors (None: all);
    ``max_rows``: a chunk's most rows (default :data:`CHUNK_ROWS`)."""
    for chunk, counts in chunk_plan(db.store, kind, keys, cap, max_rows):
        yield chunk_descriptors(db.store, kind, chunk, cap), chunk, counts


#: A chunk's codes added to an empty clone of the codec: ``fill(index, ids)``, ids one per descriptor.
Fill = Callable[[Any, np.ndarray], None]
#: Chunks of codes to add: ``(keys, rows per record, fill)`` per chunk of :func:`chunk_plan`, in order.
Chunks = Generator[tuple[list[str], np.ndarray, Fill], None, None]
#: Where the codes of records come from: ``chunks(db, index, keys)``; the generator is closed when the build
#: stops, so it can drop work still in flight.
ChunkSource = Callable[["ModelDB", DatabaseIndex, list[str]], Chunks]


def local_chunks(db: ModelDB, index: DatabaseIndex, keys: list[str]) -> Chunks:
    """The chunks of records ``keys``, encoded in this process by FAISS's ``add_with_ids`` (its OpenMP threads).
    ``db``: the database read; ``index``: the index the codes go into (its codec)."""
    for desc, chunk, counts in indexed_chunks(db, index.kind, keys, index.params.max_per_object):

        def fill(out: Any, ids: np.ndarray, desc: np.ndarray = desc) -> None:
            out.add_with_ids(desc, ids)

        yield chunk, counts, fill


def _max_codes(index: DatabaseIndex) -> int:
    return MAX_SEGMENT_BYTES // (int(index.codec.code_size) + 8)


def _rewrite(index: DatabaseIndex, segs: list[Segment]) -> Segment:
    """One segment with the live codes of ``segs`` (in their order), written; their tombstones dropped."""
    faiss = faiss_module()
    out = faiss.clone_index(index.codec)
    for s in segs:
        out.merge_from(read_faiss_index(index.folder / s.file, mmap=False)[0], 0)  # in memory: merge_from empties it
    labels = np.concatenate([s.labels for s in segs])
    dead = np.asarray(sorted(index.removed.intersection(labels.tolist())), np.int64)
    if len(dead):
        out.remove_ids(faiss.IDSelectorBatch(dead))
    alive = ~np.isin(labels, dead)
    keys = [k for s in segs for k in s.keys]
    shas = [h for s in segs for h in s.shas]
    merged = Segment.write(
        index.folder,
        out,
        [k for k, a in zip(keys, alive, strict=True) if a],
        labels[alive],
        [h for h, a in zip(shas, alive, strict=True) if a],
    )
    index.removed.difference_update(dead.tolist())
    _map(index, merged)
    return merged


def _map(index: DatabaseIndex, seg: Segment) -> None:
    """Let ``seg`` read its codes from its file, memory-mapped, instead of holding them."""
    seg.index, _ = read_faiss_index(index.folder / seg.file, mmap=True)


def merge_segments(index: DatabaseIndex) -> None:
    """Merge the newest segments log-structured (see the module notes) and rewrite tombstone-heavy ones."""
    segs, cap = index.segments, _max_codes(index)
    while len(segs) >= 2 and segs[-2].n <= MERGE_RATIO * segs[-1].n and segs[-2].n + segs[-1].n <= cap:
        segs[-2:] = [_rewrite(index, segs[-2:])]
    for i, s in enumerate(segs):
        dead = np.isin(s.labels, np.fromiter(index.removed, np.int64)).sum() if index.removed else 0
        if dead and dead >= DEAD_FRACTION * max(1, len(s.labels)):
            segs[i] = _rewrite(index, [s])
    segs[:] = [s for s in segs if s.keys]  # a segment whose objects are all gone


def sync_index(
    db: ModelDB,
    index: DatabaseIndex,
    progress: Callable[[int], Any] | None = None,
    chunks: ChunkSource | None = None,
) -> bool:
    """Bring ``index`` to the content of ``db``: tombstone the labels of records gone or replaced, add the
    records it lacks as new segments (merged as they come), save; True when anything changed. ``chunks``
    encodes them (default :func:`local_chunks`; :func:`objrec.modeldb.index_cluster.cluster_chunks` on Dask
    workers): whichever does, the codes of a chunk and the segments written are the same.

    The manifest is saved after each segment with no database id (stale to every reader), and with the
    database's id once complete, so an interrupted update leaves a stale index that the next commit or a
    reindex completes. Call with the database's write lock held.
    ``progress``: called with the descriptors added after each chunk (None: no report).
    """
    live = _live_shas(db)
    table = index.table()
    gone = [lab for key, (lab, sha) in table.items() if live.get(key) != sha]
    new = [key for key, sha in live.items() if key not in table or table[key][1] != sha]
    if not gone and not new and index.database_id == db.database_id:
        return False
    index.database_id = None
    index.removed.update(gone)
    faiss = faiss_module()
    with closing((chunks or local_chunks)(db, index, new)) as source:
        for keys, counts, fill in source:
            labels = np.arange(index.next_label, index.next_label + len(keys), dtype=np.int64)
            codes = faiss.clone_index(index.codec)
            n = int(counts.sum())
            if n:
                fill(codes, np.repeat(labels, counts))
            seg = Segment.write(index.folder, codes, keys, labels, [live[k] for k in keys])
            _map(index, seg)
            index.segments.append(seg)
            index.next_label += len(keys)
            merge_segments(index)
            index.save_manifest()
            if progress is not None:
                progress(n)
    merge_segments(index)
    index.database_id = db.database_id
    index.save_manifest()
    return True


def build_index(
    db: ModelDB,
    kind: str,
    params: RetrievalParams | None = None,
    progress: Callable[[int], Any] | None = None,
    chunks: ChunkSource | None = None,
) -> DatabaseIndex:
    """Build the index of ``kind`` of ``db`` afresh: a codec trained on a uniform sample of the stored
    descriptors, filled from the shards in chunks (bounded memory; encoded by ``chunks``, see
    :func:`sync_index`), saved in ``DB/index/<kind>``.

    Resumable: a build interrupted with the same parameters continues with the records it lacks (its codec
    is kept). Call with the database's write lock held.
    ``params``: the index's settings (default: :class:`~objrec.matching.retrieval.RetrievalParams`'s); ``progress``:
    called with the descriptors added after each chunk (None: no report).
    """
    folder = index_folder(db.path, kind)
    params = params or DEFAULT_PARAMS
    try:
        old = DatabaseIndex.load(folder)
    except RetrievalIndexError:
        old = None
    if old is not None and old.building and old.params == params:
        sync_index(db, old, progress, chunks)
        old.building = False
        old.save_manifest()
        return old
    folder.mkdir(parents=True, exist_ok=True)
    n = descriptor_total(db, kind, params.max_per_object)
    dim = 128 if kind == "sift" else 64
    sample = db.sample_descriptors(kind, max(_train_size(n, params), 1), seed=params.seed).astype(np.float32)
    codec, codes = new_codec(sample.reshape(-1, dim), kind, replace(params, exact_below=0), max(n, 1))
    index = DatabaseIndex(folder, kind, params, codec, codes, n)
    index.save_codec()
    # Read back without the precomputed-table memory that training left (every segment is cloned from it).
    index.codec, _ = read_faiss_index(folder / index.codec_file, mmap=False)
    index.building = True
    index.save_manifest()
    sync_index(db, index, progress, chunks)
    index.building = False
    index.save_manifest()
    return index


def _train_size(n: int, params: RetrievalParams) -> int:
    from objrec.modeldb.index import PQ_TRAIN, TRAIN_MAX, TRAIN_PER_LIST, n_lists_for

    return min(max(n_lists_for(n, replace(params, exact_below=0)) * TRAIN_PER_LIST, PQ_TRAIN), TRAIN_MAX)


def _update(db: ModelDB, kind: str) -> None:
    folder = index_folder(db.path, kind)
    try:
        index = DatabaseIndex.load(folder)
    except StaleIndexError:
        index = None  # missing, or of an older schema
    if index is None:
        total = descriptor_total(db, kind)
        if DEFAULT_PARAMS.exact_below <= total <= AUTO_BUILD_MAX:
            build_index(db, kind)
        elif total > AUTO_BUILD_MAX and (folder / MANIFEST).exists():
            log.warning("%s: the retrieval index is stale; %s", folder, REINDEX_HINT.format(db=db.path))
        return
    sync_index(db, index)
    if len(index) > REBUILD_GROWTH * max(1, index.trained_for):
        log.info("%s: %d codes, trained for %d: retraining the retrieval index", folder, len(index), index.trained_for)
        build_index(db, kind, index.params)


def keep_indexes_current(db: ModelDB) -> None:
    """After a commit of ``db`` (write lock held): update each detector kind's saved index to the new content
    (building it when the database has just grown past ``exact_below`` descriptors of the kind, rebuilding
    it when it outgrew its codec). A failure (a damaged index file, a full disk) leaves the index stale, which
    the recognizer reports with the command that rebuilds it; the commit itself stands."""
    for kind in db.detectors:
        try:
            _update(db, kind)
        except (RetrievalIndexError, OSError) as exc:
            log.warning("%s; the retrieval index of %r is stale: %s", exc, kind, REINDEX_HINT.format(db=db.path))
