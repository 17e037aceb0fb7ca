"""The retrieval index saved with a database: kept current by its commits, in segments sharing one codec, never
built when a recognizer opens the database, rebuilt by ``objrec db reindex``."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from objrec import ModelDB
from objrec.cli import main
from objrec.data import synthetic_cover
from objrec.features.model import extract_model_features
from objrec.matching import shortlist
from objrec.matching.retrieval import MANIFEST, DatabaseRetrieval, RetrievalIndexError, StaleIndexError, vote
from objrec.modeldb import index_update
from objrec.modeldb.index import DatabaseIndex, RetrievalParams, Segment
from objrec.modeldb.preparation import capped

SIFT_ONLY = {"sift": {"n_features": 0}}
#: Small thresholds so that a few synthetic covers need an index, several segments and a cap.
PARAMS = RetrievalParams(exact_below=500, max_per_object=150, n_lists=8)


@pytest.fixture(autouse=True)
def small_catalogue(monkeypatch):
    monkeypatch.setattr(index_update, "DEFAULT_PARAMS", PARAMS)
    monkeypatch.setattr(index_update, "CHUNK_ROWS", 400)
    monkeypatch.setattr(shortlist, "RETRIEVAL_MIN_DESCRIPTORS", 100)


COVERS = [(f"c{i}", synthetic_cover(100 + i, (200, 260))) for i in range(8)]


@pytest.fixture(scope="module")
def covers_dir(tmp_path_factory):
    """A database of the covers, enrolled two per commit (its index kept by the commits), to copy."""
    path = tmp_path_factory.mktemp("idx") / "db"
    mp = pytest.MonkeyPatch()
    mp.setattr(index_update, "DEFAULT_PARAMS", PARAMS)
    mp.setattr(index_update, "CHUNK_ROWS", 400)
    try:
        ModelDB.create(path, detectors=SIFT_ONLY).enroll_many(COVERS, progress=False, batch_size=2)
    finally:
        mp.undo()
    return path


@pytest.fixture
def db(covers_dir, tmp_path):
    shutil.copytree(covers_dir, tmp_path / "db")
    return ModelDB.open(tmp_path / "db")


def _no_builds(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("opening the database built or updated its index")

    monkeypatch.setattr(index_update, "build_index", refuse)
    monkeypatch.setattr(index_update, "sync_index", refuse)
    monkeypatch.setattr(Segment, "write", refuse)


def _frame(db, name):
    """An object's own descriptors as a frame's features (what a shortlist reads)."""
    return db.get(name).features["sift"]


def test_commits_keep_the_index_current_and_opening_never_builds(db, monkeypatch):
    folder = db.path / "index" / "sift"
    assert json.loads((folder / MANIFEST).read_text())["database_id"] == db.database_id
    db.enroll("extra", synthetic_cover(300, (200, 260)))
    db.remove("c3")
    db.enroll("c0", synthetic_cover(301, (200, 260)), replace=True)
    saved = DatabaseIndex.load(folder, database_id=db.database_id)  # StaleIndexError if a commit skipped it
    assert sorted(saved.table()) == sorted(db.records)
    _no_builds(monkeypatch)
    matcher = shortlist.make_matcher(ModelDB.open(db.path), "sift")
    assert isinstance(matcher, shortlist.ShortlistMatcher)
    for name in ("extra", "c0", "c5"):
        got = [matcher.matcher.names[i] for i in matcher.shortlist(_frame(db, name))]
        assert got[0] == name
    short = [matcher.matcher.names[i] for i in matcher.shortlist(_frame(db, "c2"))]
    assert "c3" not in short and "c3" not in matcher.index.objects.table


def test_per_object_cap_keeps_the_strongest_descriptors(db):
    index = DatabaseIndex.load(db.path / "index" / "sift")
    kps = {n: db.get(n).features["sift"] for n in db.records}
    assert len(index) == sum(min(len(f), PARAMS.max_per_object) for f in kps.values())
    chunks = list(index_update.indexed_chunks(db, "sift", ["c1"], PARAMS.max_per_object))
    f = kps["c1"]
    strongest = np.sort(np.argsort(-f.response, kind="stable")[: PARAMS.max_per_object])
    assert np.array_equal(chunks[0][0], f.descriptors[strongest].astype(np.float32))
    # Against the extracted float32 responses (stored on a log scale): the same selection, but for keypoints
    # within a stored step of the weakest one kept.
    direct = capped(extract_model_features(dict(COVERS)["c1"], SIFT_ONLY), 200, 260)["sift"]
    assert np.array_equal(direct.descriptors, f.descriptors)
    cut = np.sort(direct.response)[::-1][PARAMS.max_per_object - 1]
    near = np.abs(direct.response / cut - 1) < 2 * (2.0 ** (0.5 / 1024) - 1)
    want = direct.response >= cut
    assert (want | near)[strongest].all() and np.isin(np.flatnonzero(want & ~near), strongest).all()
    assert near.sum() < 10  # the exemption is a few keypoints, not the selection


@pytest.mark.parametrize("coarse", ["flat", "hnsw"])
def test_segments_are_few_and_vote_as_one_index_of_the_same_codes(db, coarse):
    """Eight covers in four commits of two and chunks of 400 codes: merged log-structured into few segments,
    whose stacked lists answer exactly as one FAISS index filled with the same codes from the same codec (with
    a flat or an HNSW coarse quantiser)."""
    import faiss

    if coarse == "hnsw":
        with db.lock():
            index_update.build_index(db, "sift", RetrievalParams(**{**PARAMS.to_dict(), "hnsw_lists": 4}))
    index = DatabaseIndex.load(db.path / "index" / "sift")
    quantizer = faiss.downcast_index(index.codec.quantizer)
    assert isinstance(quantizer, faiss.IndexHNSWFlat if coarse == "hnsw" else faiss.IndexFlatL2)
    n_codes = [s.n for s in index.segments]
    assert 1 <= len(n_codes) <= int(np.log2(len(index) / 150)) + 2
    assert all(a > index_update.MERGE_RATIO * b for a, b in zip(n_codes, n_codes[1:], strict=False))
    one = faiss.clone_index(index.codec)
    for desc, keys, counts in index_update.indexed_chunks(db, "sift", db.records, PARAMS.max_per_object):
        labels = [index.table()[k][0] for k in keys]
        one.add_with_ids(desc, np.repeat(np.asarray(labels, np.int64), counts))
    for name in db.records:
        q = np.ascontiguousarray(_frame(db, name).descriptors[:80], np.float32)
        for probe in (1, 3, 8):
            ref = one.search(q, PARAMS.k, params=faiss.SearchParametersIVF(nprobe=probe))[1]
            got = index.search(q, probe)
            ids, scores = vote(got)
            ref_ids, ref_scores = vote(ref)
            assert np.array_equal(ids, ref_ids) and np.array_equal(scores, ref_scores)


def test_many_commits_stay_few_segments_and_write_each_code_a_few_times(tmp_path, monkeypatch):
    """Twenty-two commits: about log2(commits) segments, and each code written about as many times (a merge
    rewrites the merged codes), not once per commit as a rewrite of the whole index would."""
    real_write = Segment.write
    written = []

    def count(folder, index, *args):
        written.append(int(index.ntotal))
        return real_write(folder, index, *args)

    monkeypatch.setattr(Segment, "write", count)
    monkeypatch.setattr(index_update, "REBUILD_GROWTH", 1e9)  # the merges alone (no retraining as it grows)
    db = ModelDB.create(tmp_path / "db", detectors=SIFT_ONLY)
    extra = [(f"d{i}", synthetic_cover(200 + i, (160, 200))) for i in range(8)]
    db.enroll_many(COVERS + extra, progress=False, batch_size=1)
    for i in range(6):
        db.enroll(f"e{i}", synthetic_cover(400 + i, (160, 200)))
    index = DatabaseIndex.load(db.path / "index" / "sift", database_id=db.database_id)
    commits = len(COVERS) + len(extra) + 6
    assert len(index.segments) <= int(np.log2(commits)) + 2
    assert sum(written) <= len(index) * (np.log2(commits) + 2)
    assert sorted(index.table()) == sorted(db.records)
    files = {f.name for f in (db.path / "index" / "sift").iterdir()}
    named = {MANIFEST, index.codec_file} | {s.file for s in index.segments} | {s.table for s in index.segments}
    assert files == named  # merged segments' files deleted


def test_a_commit_retrains_an_index_that_outgrew_its_codec(db, monkeypatch):
    monkeypatch.setattr(index_update, "REBUILD_GROWTH", 1.2)
    before = DatabaseIndex.load(db.path / "index" / "sift")
    db.enroll_many([(f"n{i}", synthetic_cover(600 + i, (200, 260))) for i in range(3)], progress=False)
    after = DatabaseIndex.load(db.path / "index" / "sift", database_id=db.database_id)
    assert after.codec_file != before.codec_file and after.trained_for == len(after) > before.trained_for
    assert sorted(after.table()) == sorted(db.records)


def test_an_interrupted_enrolment_says_reindex_and_reindex_fixes_it(db, monkeypatch, capsys):
    real_write = Segment.write

    def crash(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(Segment, "write", crash)
    with pytest.raises(KeyboardInterrupt):
        db.enroll("late", synthetic_cover(500, (200, 260)))
    assert "late" in ModelDB.open(db.path)  # the commit stands
    with pytest.raises(StaleIndexError, match=r"objrec db reindex --db .*db"):
        shortlist.make_matcher(ModelDB.open(db.path), "sift")
    monkeypatch.setattr(Segment, "write", real_write)
    old_codec = DatabaseIndex.load(db.path / "index" / "sift").codec_file
    assert main(["db", "reindex", "--db", str(db.path), "--json"]) == 0
    capsys.readouterr()
    fresh = DatabaseRetrieval.open(ModelDB.open(db.path), "sift")
    assert fresh.core.codec_file != old_codec or fresh.core.trained_for != 0  # a new codec was trained
    assert sorted(fresh.objects.table) == sorted(db.records) and not fresh.core.building
    matcher = shortlist.make_matcher(ModelDB.open(db.path), "sift")
    assert [matcher.matcher.names[i] for i in matcher.shortlist(_frame(db, "late"))][0] == "late"


def test_an_interrupted_reindex_resumes(db, monkeypatch):
    real_write = Segment.write
    calls = []

    def crash_third(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real_write(*args, **kwargs)

    monkeypatch.setattr(Segment, "write", crash_third)
    with pytest.raises(KeyboardInterrupt), db.lock():
        index_update.build_index(db, "sift", PARAMS)
    part = DatabaseIndex.load(db.path / "index" / "sift")
    assert part.building and part.database_id is None and len(part.table()) > 0
    monkeypatch.setattr(Segment, "write", real_write)
    added = []
    with db.lock():
        done = index_update.build_index(db, "sift", PARAMS, progress=added.append)
    assert done.codec_file == part.codec_file  # continued with the codec of the interrupted build
    assert sum(added) == len(done) - len(part)  # only what the interrupted build had not added
    assert sorted(done.table()) == sorted(db.records) and done.database_id == db.database_id


def test_an_index_of_an_older_version_or_none_says_reindex(db):
    folder = db.path / "index" / "sift"
    m = json.loads((folder / MANIFEST).read_text())
    (folder / MANIFEST).write_text(json.dumps({**m, "schema_version": 2}))
    with pytest.raises(StaleIndexError, match="older version.*objrec db reindex"):
        shortlist.make_matcher(db, "sift")
    shutil.rmtree(db.path / "index")
    with pytest.raises(StaleIndexError, match="no retrieval index.*objrec db reindex"):
        shortlist.make_matcher(db, "sift")
    # small databases searched exactly need no index
    monkey = pytest.MonkeyPatch()
    monkey.setattr(shortlist, "RETRIEVAL_MIN_DESCRIPTORS", 10**9)
    try:
        assert not isinstance(shortlist.make_matcher(db, "sift"), shortlist.ShortlistMatcher)
    finally:
        monkey.undo()


def test_damaged_index_files_are_named_and_the_cli_reports_them(db, capsys):
    """A segment whose bytes changed, a missing one, a newer schema and an unreadable manifest each raise
    RetrievalIndexError naming the file; ``objrec db check``'s index status says damaged, or stale for an
    older version."""
    from objrec.dbcli import index_status

    folder = db.path / "index" / "sift"
    mpath = folder / MANIFEST
    m = json.loads(mpath.read_text())
    assert DatabaseRetrieval.load(folder).database_id == db.database_id
    assert index_status(db)["sift"]["status"] == "current"
    seg = folder / m["segments"][0]["file"]
    data = seg.read_bytes()
    seg.write_bytes(data[: len(data) // 2])
    with pytest.raises(RetrievalIndexError, match=f"{seg.name}: sha256 mismatch"):
        DatabaseRetrieval.load(folder)
    assert index_status(db)["sift"]["status"] == "damaged"
    seg.unlink()
    with pytest.raises(RetrievalIndexError, match=f"{seg.name}: index segment not found"):
        DatabaseRetrieval.load(folder)
    mpath.write_text(json.dumps({**m, "schema_version": 99}))
    with pytest.raises(RetrievalIndexError, match="index.json: schema version 99"):
        DatabaseRetrieval.load(folder)
    mpath.write_text(json.dumps({**m, "schema_version": 1}))
    assert index_status(db)["sift"]["status"] == "stale"
    mpath.write_text("{")
    with pytest.raises(RetrievalIndexError, match="index.json: retrieval index manifest is not valid JSON"):
        DatabaseRetrieval.load(folder)
