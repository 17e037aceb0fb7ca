"""``objrec db reindex`` on a Dask cluster against the threaded reindex as the reference: the same codec and
segments byte for byte (file names are their hashes), the same search results, the same resumption after an
interruption; and the command line's cluster options, their errors and the error without Dask."""

from __future__ import annotations

import json
import shutil
import sys

import numpy as np
import pytest

from objrec import ModelDB
from objrec.cli import main
from objrec.data import synthetic_cover
from objrec.matching import shortlist
from objrec.modeldb import index as index_module
from objrec.modeldb import index_update
from objrec.modeldb.index import DatabaseIndex, RetrievalParams
from objrec.modeldb.index_cluster import cluster_chunks, encode_records
from objrec.modeldb.index_files import MANIFEST, faiss_module
from objrec.modeldb.records import ModelDBError

pytestmark = pytest.mark.dask

SIFT_ONLY = {"sift": {"n_features": 0}}
#: Small thresholds so that a few synthetic covers need an index of several chunks, segments and a cap.
PARAMS = RetrievalParams(exact_below=500, max_per_object=150, n_lists=8)
#: Codecs to compare: scalar codes, product-quantised codes, and product-quantised under an HNSW quantiser.
CODECS = {
    "sq": RetrievalParams(**{**PARAMS.to_dict(), "codes": "sq"}),
    "pq": PARAMS,
    "pq-hnsw": RetrievalParams(**{**PARAMS.to_dict(), "hnsw_lists": 4}),
}


@pytest.fixture(autouse=True)
def small_catalogue(monkeypatch):
    monkeypatch.setattr(index_update, "DEFAULT_PARAMS", PARAMS)
    monkeypatch.setattr(index_update, "CHUNK_ROWS", 400)
    monkeypatch.setattr(shortlist, "RETRIEVAL_MIN_DESCRIPTORS", 100)
    # Code books of a few hundred points instead of 10,240, so that a small database has product-quantised codes.
    monkeypatch.setattr(index_module, "PQ_TRAIN", 512)


@pytest.fixture(scope="module")
def covers_dir(tmp_path_factory):
    """Eight covers (about 2,000 SIFT descriptors, 150 of each indexed: four chunks of 400 rows), to copy."""
    path = tmp_path_factory.mktemp("covers") / "db"
    covers = [(f"c{i}", synthetic_cover(100 + i, (200, 260))) for i in range(8)]
    ModelDB.create(path, detectors=SIFT_ONLY).enroll_many(covers, progress=False, batch_size=4)
    return path


@pytest.fixture
def copies(covers_dir, tmp_path):
    """Fresh copies of the database, without an index."""

    def copy(name: str) -> ModelDB:
        shutil.copytree(covers_dir, tmp_path / name)
        shutil.rmtree(tmp_path / name / "index", ignore_errors=True)
        return ModelDB.open(tmp_path / name)

    return copy


@pytest.fixture(scope="module")
def client():
    """Two in-process workers of one thread each."""
    pytest.importorskip("distributed", reason="a reindex on a cluster needs Dask (pip install 'objrec[dask]')")
    from dask.distributed import Client, LocalCluster

    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        with Client(cluster) as c:
            yield c


def _files(db: ModelDB) -> dict[str, bytes]:
    folder = db.path / "index" / "sift"
    return {f.name: f.read_bytes() for f in sorted(folder.iterdir())}


def _searches(db: ModelDB) -> list[np.ndarray]:
    index = DatabaseIndex.load(db.path / "index" / "sift", database_id=db.database_id)
    out = []
    for key in db.records:
        q = np.ascontiguousarray(db.get(key).features["sift"].descriptors[:80], np.float32)
        out += [index.search(q, probe) for probe in (1, 3, 8)]
    return out


def _assert_same_index(ref: ModelDB, got: ModelDB) -> None:
    want, have = _files(ref), _files(got)
    assert sorted(have) == sorted(want)
    assert all(have[name] == want[name] for name in want), [n for n in want if have[n] != want[n]]
    for a, b in zip(_searches(ref), _searches(got), strict=True):
        assert np.array_equal(a, b)


def _encoded_on_workers(task_stream) -> int:
    return sum(1 for t in task_stream.data if str(t["key"]).startswith(("encode_records", "encode_descriptors")))


@pytest.mark.parametrize("codec", list(CODECS))
def test_a_reindex_on_workers_writes_the_threaded_index(copies, client, codec):
    """Two workers reading the shards, and two sent the descriptors: codec and segments byte-identical to the
    threads', so searches answer the same; each chunk was encoded on a worker."""
    from dask.distributed import get_task_stream

    params = CODECS[codec]
    ref = copies("threads")
    shortlist.prepare_indexes(ref, params, kinds=["sift"])
    saved = DatabaseIndex.load(ref.path / "index" / "sift")
    assert len(saved.segments) >= 2 and saved.codes == ("8bit_direct" if codec == "sq" else "pq16")
    for send_bytes in (False, True):
        db = copies(f"dask{send_bytes}")
        with get_task_stream(client) as ts:
            shortlist.prepare_indexes(db, params, kinds=["sift"], scheduler=client, send_bytes=send_bytes)
        assert _encoded_on_workers(ts) == 4  # 1,200 rows in chunks of 400
        _assert_same_index(ref, db)


def test_an_interrupted_reindex_on_workers_resumes(copies, client):
    """Interrupted after two of the four chunks (the chunks in flight dropped): a rerun on the workers encodes
    only the rest, with the codec of the interrupted build, and writes the threads' index."""
    ref = copies("threads")
    shortlist.prepare_indexes(ref, PARAMS, kinds=["sift"])
    db = copies("dask")
    real_build = index_update.build_index
    added = []

    def stop_after_two(*args):
        added.append(args[0])
        if len(added) == 2:
            raise KeyboardInterrupt

    def interrupted(db, kind, params, progress, chunks):
        return real_build(db, kind, params, stop_after_two, chunks)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(index_update, "build_index", interrupted)
        with pytest.raises(KeyboardInterrupt):
            shortlist.prepare_indexes(db, PARAMS, kinds=["sift"], scheduler=client)
    part = DatabaseIndex.load(db.path / "index" / "sift")
    assert part.building and part.database_id is None and len(part) == sum(added)
    resumed = []
    with db.lock():
        done = index_update.build_index(db, "sift", PARAMS, resumed.append, cluster_chunks(client))
    assert done.codec_file == part.codec_file and sum(resumed) == len(done) - len(part)
    _assert_same_index(ref, db)


def test_cli_reindex_on_a_running_scheduler(copies, capsys):
    """objrec db reindex --scheduler ADDRESS with worker processes reading the shards: the threads' index;
    --threads N sets the threads and gives it too."""
    pytest.importorskip("distributed", reason="a reindex on a cluster needs Dask (pip install 'objrec[dask]')")
    from dask.distributed import LocalCluster

    ref, threads, db = copies("ref"), copies("threads"), copies("dask")
    shortlist.prepare_indexes(ref, kinds=["sift"])
    assert main(["db", "reindex", "--db", str(threads.path), "--threads", "1", "--json"]) == 0
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        assert main(["db", "reindex", "--db", str(db.path), "--scheduler", cluster.scheduler_address, "--json"]) == 0
    out = capsys.readouterr().out
    doc = json.loads(out[out.rindex('{\n  "database_id"') :])
    assert doc["kinds"] == ["sift"] and doc["indexes"]["sift"]["status"] == "current"
    _assert_same_index(ref, threads)
    _assert_same_index(ref, db)


def test_cli_cluster_errors_are_one_line_and_write_nothing(copies, capsys):
    """A scheduler that cannot be reached, --workers 0, --threads beside a cluster, and Dask missing: each one
    line, exit 2, no index written; --workers with --scheduler is a usage error."""
    db = copies("db")
    argv = ["db", "reindex", "--db", str(db.path)]
    pytest.importorskip("distributed", reason="connecting needs Dask (pip install 'objrec[dask]')")
    assert main([*argv, "--scheduler", "bogus://nowhere"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--scheduler: cannot connect to bogus://nowhere" in err[0]
    with pytest.raises(SystemExit) as exc:
        main([*argv, "--scheduler", "x", "--workers", "2"])
    assert exc.value.code == 2 and "not allowed with argument --scheduler" in capsys.readouterr().err
    assert main([*argv, "--workers", "0"]) == 2
    assert main([*argv, "--cluster", "local", "--threads", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 3 and "expected a positive integer, got 0" in err[0]
    assert "--cluster is deprecated" in err[1] and "--threads: the work runs on the Dask workers" in err[2]
    assert not (db.path / "index" / "sift" / MANIFEST).exists()


def test_cli_cluster_without_dask_is_one_line(copies, capsys, monkeypatch):
    db = copies("db")
    monkeypatch.setitem(sys.modules, "dask.distributed", None)  # import dask.distributed fails
    assert main(["db", "reindex", "--db", str(db.path), "--workers", "2"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "a Dask cluster needs Dask: pip install 'objrec[dask]'" in err[0]
    assert not (db.path / "index" / "sift" / MANIFEST).exists()


def test_a_worker_that_cannot_see_the_database_says_so(copies, tmp_path):
    """What a worker raises when the database is not at the path it was given, or holds other content there."""
    db = copies("db")
    shortlist.prepare_indexes(db, PARAMS, kinds=["sift"])
    codec = faiss_module().serialize_index(DatabaseIndex.load(db.path / "index" / "sift").codec)
    keys = db.records[:2]
    codes = encode_records(codec, str(db.path), db.database_id, "sift", keys, PARAMS.max_per_object)
    assert codes.dtype == np.uint8 and len(codes) == 2 * PARAMS.max_per_object
    with pytest.raises(ModelDBError, match=r"a Dask worker cannot read the database .*nowhere.*same path"):
        encode_records(codec, str(tmp_path / "nowhere"), db.database_id, "sift", keys, None)
    with pytest.raises(ModelDBError, match=r"a Dask worker sees database \w+, not 0123"):
        encode_records(codec, str(db.path), "0123", "sift", keys, None)
