"""The retrieval index built in chunks from the database's shards, brought up to date when used, and reindexed."""

from __future__ import annotations

import json

import numpy as np
import pytest

from objrec import ModelDB
from objrec.cli import main
from objrec.data import synthetic_cover
from objrec.matching import retrieval, shortlist
from objrec.matching.retrieval import MANIFEST, RetrievalIndex, RetrievalParams, StaleIndexError
from objrec.modeldb.access import DatabaseReads

SIFT_ONLY = {"sift": {"n_features": 0}}


@pytest.fixture(scope="module")
def covers_db(tmp_path_factory):
    db = ModelDB.create(tmp_path_factory.mktemp("idx") / "db", detectors=SIFT_ONLY)
    db.enroll_many([(f"c{i}", synthetic_cover(100 + i, (200, 260))) for i in range(8)], progress=False)
    return db


def _copy(db, tmp_path):
    import shutil

    shutil.copytree(db.path, tmp_path / "db", ignore=shutil.ignore_patterns("index"))
    return ModelDB.open(tmp_path / "db")


def test_descriptor_chunks_and_sample_agree_with_the_table(covers_db):
    table, owner = covers_db.descriptor_table("sift")
    chunks = list(covers_db.iter_descriptor_chunks("sift", 700))
    assert np.array_equal(np.concatenate([c[0] for c in chunks]), table)
    keys = [k for c in chunks for k in c[1]]
    assert keys == covers_db.records
    counts = np.concatenate([c[2] for c in chunks])
    assert np.array_equal(counts, np.bincount(owner, minlength=len(keys)))
    assert all(len(d) <= 700 or len(k) == 1 for d, k, _ in chunks)
    sample = covers_db.sample_descriptors("sift", 300, seed=3)
    assert sample.shape == (300, 128) and sample.dtype == table.dtype
    rows = {r.tobytes(): i for i, r in enumerate(table)}
    assert all(r.tobytes() in rows for r in sample)  # drawn from the table
    assert len(np.unique(sample, axis=0)) == len(np.unique(table[[rows[r.tobytes()] for r in sample]], axis=0))
    assert np.array_equal(covers_db.sample_descriptors("sift", 10**7), table)


@pytest.mark.parametrize("exact_below", [10**9, 500])
def test_chunked_build_votes_as_the_whole_table_build(covers_db, monkeypatch, exact_below):
    """Same descriptors, same labels; searched exhaustively (every cell), the same votes as a build from the
    whole descriptor table (a flat index, and an inverted file trained on a different sample)."""
    monkeypatch.setattr(retrieval, "CHUNK_ROWS", 500)
    params = RetrievalParams(exact_below=exact_below)
    chunked = RetrievalIndex.from_database(covers_db, "sift", params)
    table, owner = covers_db.descriptor_table("sift")
    whole = RetrievalIndex.build(table, owner, "sift", params)
    assert len(chunked) == len(whole) == len(table) and chunked.exact == whole.exact == (exact_below > len(table))
    assert chunked.database_id == covers_db.database_id
    assert {n: lab for n, (lab, _) in chunked.objects.table.items()} == {n: i for i, n in enumerate(covers_db.records)}
    lists = None if chunked.exact else int(chunked.index_.nlist)
    for name in covers_db.records:
        q = covers_db.get(name).features["sift"].descriptors[:60]
        got, ref = chunked.candidates(q, top=4, n_probe=lists), whole.candidates(q, top=4, n_probe=lists)
        assert np.array_equal(got[0], ref[0]) and np.allclose(got[1], ref[1])


def test_recognizer_builds_an_absent_index_in_chunks_and_updates_a_stale_one(covers_db, tmp_path, monkeypatch):
    """Opening a matcher builds the absent index from chunks (never the whole descriptor table) and saves it;
    commits leave the saved index as it was, and the next matcher adds only the new object's descriptors."""
    monkeypatch.setattr(shortlist, "RETRIEVAL_MIN_DESCRIPTORS", 100)  # the catalogue needs an index
    monkeypatch.setattr(retrieval, "CHUNK_ROWS", 400)
    db = _copy(covers_db, tmp_path)
    added: list[int] = []
    real_add = RetrievalIndex.add
    monkeypatch.setattr(RetrievalIndex, "add", lambda self, d, o: (added.append(len(d)), real_add(self, d, o)))

    def whole_table(self, kind):
        raise AssertionError("the index build read the whole descriptor table")

    monkeypatch.setattr(DatabaseReads, "descriptor_table", whole_table)
    matcher = shortlist.make_matcher(db, "sift")
    total = sum(i.n_features["sift"] for i in db.infos())
    assert matcher.index.database_id == db.database_id and len(matcher.index) == sum(added) == total
    assert len(added) > 1 and max(added) <= max(400, *(i.n_features["sift"] for i in db.infos()))
    folder = db.path / "index" / "sift"
    assert json.loads((folder / MANIFEST).read_text())["database_id"] == db.database_id  # saved
    db.enroll("extra", synthetic_cover(300, (200, 260)))
    assert json.loads((folder / MANIFEST).read_text())["database_id"] != db.database_id  # the commit left it
    added.clear()
    matcher = shortlist.make_matcher(ModelDB.open(db.path), "sift")
    assert sum(added) == db.info("extra").n_features["sift"]  # incremental: only the new object
    assert matcher.index.database_id == db.database_id
    assert sorted(matcher.index.objects.table) == sorted(db.records)
    saved = RetrievalIndex.load(folder, database_id=db.database_id)  # StaleIndexError if not saved again
    assert len(saved) == total + sum(added)
    db.remove("c3")
    assert main(["db", "reindex", "--db", str(db.path), "--json"]) == 0  # the explicit update
    saved = RetrievalIndex.load(folder, database_id=db.database_id)
    assert sorted(saved.objects.table) == sorted(db.records)


def test_reindex_resumes_from_the_objects_already_added(covers_db, tmp_path, monkeypatch):
    db = _copy(covers_db, tmp_path)
    monkeypatch.setattr(retrieval, "CHUNK_ROWS", 400)
    params = RetrievalParams(exact_below=500)
    added: list[int] = []
    real_add = RetrievalIndex.add

    def interrupted(self, descriptors, owner):
        if len(added) == 3:
            raise KeyboardInterrupt
        added.append(len(descriptors))
        real_add(self, descriptors, owner)

    monkeypatch.setattr(RetrievalIndex, "add", interrupted)
    with pytest.raises(KeyboardInterrupt):
        RetrievalIndex.for_database(db, "sift", params, checkpoint_s=0)
    part = RetrievalIndex.load(db.path / "index" / "sift")
    assert part.database_id is None and len(part) == sum(added) > 0  # saved part-way, stale to readers
    with pytest.raises(StaleIndexError):
        RetrievalIndex.load(db.path / "index" / "sift", database_id=db.database_id)
    monkeypatch.setattr(RetrievalIndex, "add", lambda self, d, o: (added.append(len(d)), real_add(self, d, o)))
    done = RetrievalIndex.for_database(db, "sift", params, checkpoint_s=0)
    total = sum(i.n_features["sift"] for i in db.infos())
    assert sum(added) == total  # the rerun added only what the first run had not
    assert done.database_id == db.database_id and len(done) == total
    assert {n: lab for n, (lab, _) in done.objects.table.items()} == {n: i for i, n in enumerate(db.records)}
