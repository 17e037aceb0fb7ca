"""Filling a retrieval index on the workers of a Dask cluster (``objrec db reindex --workers N|--scheduler ADDRESS``).

What a build spends its time on after training is encoding: each descriptor's nearest cell of the inverted
file (the coarse quantiser) and its product-quantised code, what FAISS's ``add`` computes. Here this process
trains the codec (:func:`~objrec.modeldb.index_update.build_index`), sends it to every worker once (FAISS's
serialised bytes), and plans the chunks of :func:`~objrec.modeldb.index_update.chunk_plan` from the shards'
offsets. Each worker reads a chunk's descriptors from the database's memory-mapped shards itself (it must see
the database at the same path; with ``send_bytes`` this process reads them and sends them instead) and returns
their standalone codes (``sa_encode``: list number and code per descriptor). This process takes the results in
chunk order and adds the codes to a clone of the codec with their labels (``add_sa_codes``), which puts the
same entries in the same lists in the same order as ``add_with_ids``, so the segments written, their bytes,
the resumption and the progress are those of the threaded build. At most two chunks per worker thread are in
flight, so memory stays bounded.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from objrec.fileio import FileFormatError
from objrec.modeldb.enrolment import LOCAL_CLUSTER
from objrec.modeldb.index import DatabaseIndex
from objrec.modeldb.index_files import faiss_module
from objrec.modeldb.index_update import Chunks, ChunkSource, chunk_descriptors, chunk_plan, local_chunks
from objrec.modeldb.reader import ShardReader
from objrec.modeldb.records import ModelDBError

if TYPE_CHECKING:
    from objrec.modeldb.database import ModelDB

__all__ = ["encoding", "cluster_chunks", "encode_records", "encode_descriptors", "faiss_threads"]

_readers: dict[str, ShardReader] = {}
_readers_lock = threading.Lock()


@contextmanager
def faiss_threads(n: int | None) -> Iterator[None]:
    """FAISS's OpenMP threads set to ``n`` for the block (None: left as they are), restored after."""
    if n is None:
        yield
        return
    faiss = faiss_module()
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(int(n))
    try:
        yield
    finally:
        faiss.omp_set_num_threads(before)


@contextmanager
def encoding(
    workers: int | None = None, scheduler: Any = None, send_bytes: bool = False
) -> Iterator[ChunkSource | None]:
    """Where a build encodes, for the block: None (this process, FAISS's threads, ``workers`` of them when
    given), or the :func:`cluster_chunks` of a Dask client connected before anything is written
    (``scheduler="local"`` is :data:`~objrec.modeldb.enrolment.LOCAL_CLUSTER`).

    Parameters
    ----------
    workers : int, optional
        FAISS threads here; with ``scheduler="local"``, the local cluster's single-threaded worker processes
        (default: the usable cores).
    scheduler : str or dask.distributed.Client or cluster, optional
        ``"local"``, the address of a running scheduler, or a ``Client`` or cluster object (see
        :func:`objrec.cluster.dask_client`, whose ``ValueError`` names an address it cannot reach).
    send_bytes : bool
        Read the descriptors here and send them to the workers (for workers that cannot see the database).
    """
    if scheduler is None:
        with faiss_threads(workers):
            yield None
        return
    from objrec._threads import usable_cores
    from objrec.cluster import dask_client

    local = scheduler == LOCAL_CLUSTER
    n_local = max(1, int(workers or usable_cores())) if local else None
    with dask_client(n_local, None if local else scheduler) as (client, _):
        yield cluster_chunks(client, send_bytes)


def cluster_chunks(client: Any, send_bytes: bool = False) -> ChunkSource:
    """A :data:`~objrec.modeldb.index_update.ChunkSource` encoding on the workers of the Dask ``client``.
    With ``send_bytes``, the descriptors are read here and sent to the workers; otherwise each worker reads them from
    the database's shards by its path."""

    def chunks(db: ModelDB, index: DatabaseIndex, keys: list[str]) -> Chunks:
        return _cluster_chunks(client, send_bytes, db, index, keys)

    return chunks


def _cluster_chunks(client: Any, send_bytes: bool, db: ModelDB, index: DatabaseIndex, keys: list[str]) -> Chunks:
    """Chunks submitted in plan order, at most two per worker thread pending, taken in that order; the
    pending ones are cancelled when the build stops early."""
    from objrec.cluster import cluster_threads

    faiss = faiss_module()
    if not isinstance(index.codec, faiss.IndexIVF):  # add_sa_codes needs one; build_index always trains one
        yield from local_chunks(db, index, keys)
        return
    kind, cap, store = index.kind, index.params.max_per_object, db.store
    path = str(Path(db.path).resolve())  # workers have working directories of their own
    codec = client.scatter(faiss.serialize_index(index.codec), broadcast=True, hash=False)
    in_flight = 2 * cluster_threads(client)
    pending: deque[tuple[list[str], np.ndarray, Any]] = deque()
    try:
        for chunk, counts in chunk_plan(store, kind, keys, cap):
            if send_bytes:
                desc = client.scatter(chunk_descriptors(store, kind, chunk, cap), hash=False)
                job = client.submit(encode_descriptors, codec, desc, pure=False)
            else:
                job = client.submit(encode_records, codec, path, db.database_id, kind, chunk, cap, pure=False)
            pending.append((chunk, counts, job))
            while len(pending) >= in_flight:
                yield _taken(pending)
        while pending:
            yield _taken(pending)
    finally:
        if pending:
            client.cancel([job for _, _, job in pending])


def _taken(pending: deque[tuple[list[str], np.ndarray, Any]]) -> tuple[list[str], np.ndarray, Any]:
    """The first pending chunk with the ``fill`` of its codes, taken off ``pending`` once they are back (so a
    wait that is interrupted leaves it to be cancelled with the others)."""
    chunk, counts, job = pending[0]
    codes = job.result()
    pending.popleft()

    def fill(out: Any, ids: np.ndarray) -> None:
        out.add_sa_codes(codes, ids)

    return chunk, counts, fill


def encode_descriptors(codec: np.ndarray, descriptors: np.ndarray) -> np.ndarray:
    """The standalone codes (``sa_encode``: list number, then code; uint8, one row per descriptor) of
    ``descriptors`` under the serialised, trained ``codec``. Runs on a worker."""
    faiss = faiss_module()
    reader = faiss.VectorIOReader()
    faiss.copy_array_to_vector(np.ascontiguousarray(codec, np.uint8), reader.data)
    # Without the table of precomputed distance terms, which encoding does not use.
    index = faiss.read_index(reader, faiss.IO_FLAG_SKIP_PRECOMPUTE_TABLE)
    return index.sa_encode(np.ascontiguousarray(descriptors, np.float32))


def encode_records(
    codec: np.ndarray, path: str, database_id: str, kind: str, keys: list[str], cap: int | None
) -> np.ndarray:
    """:func:`encode_descriptors` of the descriptors of records ``keys`` of the database at ``path``, read
    here from its shards (as :func:`~objrec.modeldb.index_update.chunk_descriptors`). Runs on a worker,
    which keeps the database open between chunks.
    ``codec``: the serialised, trained codec (``faiss.serialize_index``); ``kind``: the descriptor kind; ``cap``: each
    record's most descriptors indexed (None: all).

    Raises
    ------
    ModelDBError
        When the database cannot be read here, or holds other content than ``database_id``.
    """
    reader = _reader(path, database_id)
    return encode_descriptors(codec, chunk_descriptors(reader, kind, keys, cap))


def _reader(path: str, database_id: str) -> ShardReader:
    """The database at ``path`` as of ``database_id``, opened once per process."""
    hint = "the workers must see it at the same path, or be sent the descriptors (send_bytes)"
    with _readers_lock:
        reader = _readers.get(path)
        try:
            if reader is None:
                reader = ShardReader.open(path)
            else:
                reader.refresh()
        except (FileFormatError, OSError) as exc:
            raise ModelDBError(f"a Dask worker cannot read the database {path} ({exc}); {hint}") from None
        got = reader.manifest.get("database_id")
        if got != database_id:
            raise ModelDBError(f"{path}: a Dask worker sees database {got}, not {database_id}; {hint}")
        _readers.clear()
        _readers[path] = reader
    return reader
