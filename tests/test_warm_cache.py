"""Warming the page cache with a database's files: what is asked of the kernel, within what bound, and when a
recognizer asks."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from objrec import ModelDB, Recognizer
from objrec.data import synthetic_cover
from objrec.matching.shortlist import prepare_indexes
from objrec.modeldb import warm

SIFT_ONLY = {"sift": {"n_features": 0}}

needs_fadvise = pytest.mark.skipif(not hasattr(os, "posix_fadvise"), reason="the platform has no posix_fadvise")


@pytest.fixture
def advised(monkeypatch):
    """Every ``posix_fadvise`` call as (path, offset, length, advice), the call itself kept."""
    calls = []
    real = os.posix_fadvise

    def record(fd, offset, length, advice):
        calls.append((os.readlink(f"/proc/self/fd/{fd}"), offset, length, advice))
        return real(fd, offset, length, advice)

    monkeypatch.setattr(os, "posix_fadvise", record)
    return calls


def _db(path: Path, seeds) -> ModelDB:
    db = ModelDB.create(path, detectors=SIFT_ONLY)
    for s in seeds:
        db.enroll(f"cover{s}", synthetic_cover(s, (300, 400)))
    return db


def test_mem_available_reads_meminfo_and_is_none_without_it(tmp_path):
    f = tmp_path / "meminfo"
    f.write_text("MemTotal:       24000000 kB\nMemFree:         1000 kB\nMemAvailable:   16000000 kB\n")
    assert warm.mem_available(f) == 16_000_000 * 1024
    f.write_text("MemTotal:       24000000 kB\n")
    assert warm.mem_available(f) is None
    assert warm.mem_available(tmp_path / "absent") is None


@needs_fadvise
def test_warm_files_asks_for_whole_files_in_order_until_the_bound(tmp_path, advised):
    sizes = [1000, 3000, 500, 10]
    paths = []
    for i, n in enumerate(sizes):
        p = tmp_path / f"f{i}"
        p.write_bytes(b"x" * n)
        paths.append(p)
    gone = tmp_path / "gone"
    # 1000 + 3000 fit 4200; the third would pass it, so it and everything after are left.
    assert warm.warm_files([paths[0], gone, paths[1], paths[2], paths[3]], 4200) == 4000
    assert [(Path(c[0]).name, c[1], c[2], c[3]) for c in advised] == [
        ("f0", 0, 1000, os.POSIX_FADV_WILLNEED),
        ("f1", 0, 3000, os.POSIX_FADV_WILLNEED),
    ]
    advised.clear()
    assert warm.warm_files(paths, 0) == 0 and advised == []


@needs_fadvise
def test_database_warms_its_index_then_the_rows_of_live_shards(tmp_path, advised):
    db = _db(tmp_path / "db", range(3))  # enrolled one by one: three shards
    db.remove("cover1")  # its shard leaves the manifest; any file of it left on disk is not the database's
    prepare_indexes(db, rebuild=False, kinds=["sift"])
    t = db.warm_page_cache(max_bytes=1 << 40)
    assert t is not None
    t.join(10)
    got = [Path(c[0]) for c in advised]
    index = sorted(p for p in (db.path / "index").rglob("*") if p.is_file())
    live_shards = {db.store.shards[si].id for si, _ in db.store.live.values()}
    rows = sorted(p for s in live_shards for p in (db.path / "shards" / s).glob("*.npy") if p.name != "thumbs.npy")
    assert index and got[: len(index)] == index
    assert sorted(got[len(index) :]) == rows
    assert all(c[2] == Path(c[0]).stat().st_size for c in advised)


@needs_fadvise
def test_recognizer_warms_only_when_it_reads_objects_from_the_database(tmp_path, advised):
    db = _db(tmp_path / "db", range(3))
    prepare_indexes(db, rebuild=False, kinds=["sift"])
    Recognizer(ModelDB.open(db.path), retrieval=False, prefilter=None, track=False)
    assert advised == []  # every descriptor is in memory
    rec = Recognizer(ModelDB.open(db.path), retrieval=True, prefilter=None, track=False, warm_cache=False)
    assert rec.warming is None and advised == []
    rec = Recognizer(ModelDB.open(db.path), retrieval=True, prefilter=None, track=False)
    assert rec.warming is not None
    rec.warming.join(10)
    assert {Path(c[0]) for c in advised} >= set(db.store.row_files())


def test_files_within_is_the_leading_files_that_fit(tmp_path):
    paths = []
    for i, n in enumerate([1000, 3000, 500]):
        p = tmp_path / f"f{i}"
        p.write_bytes(b"x" * n)
        paths.append(p)
    gone = tmp_path / "gone"
    assert warm.files_within([paths[0], gone, *paths[1:]], 4499) == paths[:2]
    assert warm.files_within(paths, 4500) == paths
    assert warm.files_within(paths, 999) == []


@needs_fadvise
def test_recognizer_warm_cache_in_bytes_bounds_what_it_asks_for(tmp_path, advised):
    db = _db(tmp_path / "db", range(4))
    prepare_indexes(db, rebuild=False, kinds=["sift"])
    files = db.cache_files()
    sizes = [f.stat().st_size for f in files]
    # A bound that ends inside the rows: the index and the first row files only, whole files, in order.
    bound = sum(sizes[: len(sizes) // 2]) + sizes[len(sizes) // 2] // 2
    rec = Recognizer(ModelDB.open(db.path), retrieval=True, prefilter=None, track=False, warm_cache=bound)
    assert rec.warming is not None
    rec.warming.join(10)
    assert [Path(c[0]) for c in advised] == files[: len(sizes) // 2]
    assert sum(c[2] for c in advised) <= bound
    for bad in (0, -1, 1.5e9, "2G"):
        with pytest.raises(ValueError, match="warm_cache"):
            Recognizer(ModelDB.open(db.path), retrieval=True, prefilter=None, track=False, warm_cache=bad)
