"""The catalogue-size benchmark's helpers: memory sampling, page-cache drops, distractor generation, the plan."""

from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from distractor_images import distractor, generated_cover, tiled_crops, write_distractors  # noqa: E402
from procmem import drop_page_cache, run_sampled  # noqa: E402

linux_only = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs Linux /proc")
MB = 1 << 20


@linux_only
def test_peak_counts_anonymous_memory_not_mapped_file_pages(tmp_path):
    # Reference: what each child holds, by construction: 200 MB of written anonymous pages, or 200 MB of a
    # file mapped and read through (resident, but file-backed).
    big = tmp_path / "big.bin"
    with open(big, "wb") as f:
        f.write(os.urandom(MB) * 200)
    anon = "import time; b = bytearray(200 << 20); b[::4096] = b'x' * len(b[::4096]); time.sleep(0.6)"
    mapped = (
        "import mmap, sys, time; f = open(sys.argv[1], 'rb'); m = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ); "
        "s = sum(m[i] for i in range(0, len(m), 4096)); time.sleep(0.6)"
    )
    a = run_sampled([sys.executable, "-c", anon])
    m = run_sampled([sys.executable, "-c", mapped, str(big)])
    assert a.returncode == 0 and m.returncode == 0
    assert a.peak_rss_anon_mb >= 195, a
    assert m.peak_rss_anon_mb < 60, m
    assert a.samples >= 5 and a.cpu_s > 0


def _resident_fraction(path: Path) -> float:
    """Share of the file's pages in the page cache, by ``mincore`` on a fresh mapping that faults nothing in."""
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_char_p]
    size = path.stat().st_size
    with open(path, "rb") as f, mmap.mmap(f.fileno(), size, access=mmap.ACCESS_COPY) as m:
        pages = (size + mmap.PAGESIZE - 1) // mmap.PAGESIZE
        vec = ctypes.create_string_buffer(pages)
        addr = ctypes.addressof(ctypes.c_char.from_buffer(m))
        assert libc.mincore(ctypes.c_void_p(addr), size, vec) == 0, ctypes.get_errno()
        resident = np.frombuffer(vec.raw, np.uint8) & 1
        del addr
        return float(resident.mean())


@linux_only
def test_drop_page_cache_evicts_the_files_pages(tmp_path):
    f = tmp_path / "shard.npy"
    f.write_bytes(os.urandom(8 * MB))
    f.read_bytes()
    if _resident_fraction(f) < 0.9:
        pytest.skip("the file system does not keep this file in the page cache")
    assert drop_page_cache([f]) == 8 * MB
    assert _resident_fraction(f) < 0.1


def _noise_photos(folder: Path, n: int) -> list[Path]:
    """``n`` PNG photos of seeded noise in ``folder``: sources for the generated distractors."""
    paths = []
    for i in range(n):
        p = folder / f"src{i}.png"
        cv2.imwrite(str(p), np.random.default_rng(i).integers(0, 256, (120, 160, 3), dtype=np.uint8))
        paths.append(p)
    return paths


def test_distractors_are_reproducible_and_resumed(tmp_path):
    sources = _noise_photos(tmp_path, 6)
    paths = write_distractors(tmp_path / "gen", 5, sources, seed=3)
    first = [p.read_bytes() for p in paths]
    paths[2].unlink()
    again = write_distractors(tmp_path / "gen", 5, sources, seed=3)
    assert [p.read_bytes() for p in again] == first
    assert np.array_equal(distractor(4, 3, sources), distractor(4, 3, sources))
    assert not np.array_equal(distractor(0, 3, sources), distractor(0, 4, sources))


def test_distractors_written_by_workers_are_those_written_here(tmp_path):
    sources = _noise_photos(tmp_path, 4)
    here = write_distractors(tmp_path / "here", 9, sources, seed=5, workers=1)
    there = write_distractors(tmp_path / "there", 9, sources, seed=5, workers=2)
    assert [p.name for p in here] == [p.name for p in there]
    assert [p.read_bytes() for p in here] == [p.read_bytes() for p in there]
    assert not list((tmp_path / "there").glob(".*"))  # no temporary file left


def test_tiles_are_crops_of_different_photos(tmp_path):
    # Reference: sources of one flat colour each, so a tile shows which photo it was cut from; each photo may
    # fill one rectangle of the object at most, and an object holds at least two.
    colours = [(30 * i % 256, 80 + 11 * i, 255 - 17 * i) for i in range(12)]
    sources = []
    for i, c in enumerate(colours):
        p = tmp_path / f"flat{i}.png"
        cv2.imwrite(str(p), np.full((90, 130, 3), c, np.uint8))
        sources.append(p)
    for seed in range(8):
        img = tiled_crops(np.random.default_rng(seed), sources)
        present = 0
        for c in colours:
            mask = np.all(img == c, axis=2)
            if mask.sum() < 50:
                continue
            present += 1
            ys, xs = np.nonzero(mask)
            box = (ys.max() - ys.min() + 1) * (xs.max() - xs.min() + 1)
            assert mask.sum() == box, f"seed {seed}: colour {c} is not one rectangle"
        assert present >= 2, f"seed {seed}: {present} photo(s) in the object"


def test_generated_covers_are_textured_and_differ():
    # Reference: OpenCV's SIFT finds enough keypoints to enrol each cover.
    sift = cv2.SIFT_create()
    covers = [generated_cover(np.random.default_rng([0, i])) for i in range(6)]
    for img in covers:
        assert 220 <= img.shape[1] <= 560 and img.dtype == np.uint8
        assert len(sift.detect(cv2.cvtColor(img, cv2.COLOR_BGR2GRAY), None)) >= 150
    assert len({c.shape for c in covers}) > 1


def test_catalogue_plan_extends_and_skips(shared_data, tmp_path):
    from catalogue_plan import catalogue_items, real_distractors

    from objrec.datasets import load_catalogue

    refs = load_catalogue(shared_data / "smvs_dvd").references
    real = real_distractors(shared_data, tmp_path, vtest_step=100)
    n_real = len(refs) + len(real)
    big = catalogue_items(shared_data, tmp_path, n_real + 4, vtest_step=100)
    assert [n for n, _ in big[: len(refs)]] == [n for n, _ in refs]
    assert len({n for n, _ in big}) == len(big) == n_real + 4
    assert all("smvs_dvd" not in p for _, p in big[len(refs) :])
    assert [n for n, _ in big[-4:]] == [f"gen_{i:06d}" for i in range(4)]
    assert catalogue_items(shared_data, tmp_path, 300, vtest_step=100) == big[:300]
    skipped = catalogue_items(shared_data, tmp_path, 300, vtest_step=100, skip={big[150][0]})
    assert skipped == big[:150] + big[151:301]
    assert any(n.startswith("vtest_") for n, _ in real) and any(n.startswith("coil_") for n, _ in real)


def test_without_vtest_no_object_draws_on_the_video(shared_data, tmp_path, monkeypatch):
    """``vtest_step=0``: neither the real distractors nor the generated objects (crops and tiles of the real ones)
    use a vtest.avi frame, and the generated series is kept apart from the one that does."""
    import catalogue_plan
    import distractor_images

    refs = catalogue_plan.load_catalogue(shared_data / "smvs_dvd").references
    real = catalogue_plan.real_distractors(shared_data, tmp_path, vtest_step=0)
    assert real and not any(n.startswith("vtest_") for n, _ in real)
    read = []
    real_imread = cv2.imread
    monkeypatch.setattr(distractor_images.cv2, "imread", lambda p, *a: read.append(str(p)) or real_imread(p, *a))
    items = catalogue_plan.catalogue_items(shared_data, tmp_path, len(refs) + len(real) + 10, vtest_step=0)
    assert [n for n, _ in items[-10:]] == [f"gen_{i:06d}" for i in range(10)]
    assert read and not any("vtest" in p for p in read)  # the tiles and warps read their sources
    assert all("novtest" in p for _, p in items[-10:])


def test_scale_section_commits_its_synthetic_objects(capsys):
    """The ``scale`` section's synthetic objects go through the batch commit and the database opens, reads and
    removes them: every object a shard stores has its thumbnail (``thumbs.npy`` holds one per object)."""
    from types import SimpleNamespace

    import bench_catalogue

    bench_catalogue.section_scale(SimpleNamespace(scale_objects=3, scale_features=20))
    out = capsys.readouterr().out
    assert "scale: 3 objects x 20 SIFT rows in 1 commits" in out and "remove" in out


def test_limited_passes_drop_every_file_outside_the_warmed_part(tmp_path, monkeypatch):
    """``recognise`` with a warming bound: before each pass, every database file except the leading files of
    ``ModelDB.cache_files`` that fit the bound (summed here, file by file) is dropped from the page cache."""
    import json

    import sizes_children

    from objrec import ModelDB
    from objrec.data import synthetic_cover
    from objrec.matching.shortlist import prepare_indexes

    db = ModelDB.create(tmp_path / "db", detectors={"sift": {"n_features": 0}})
    photos = []
    for s in range(4):
        img = synthetic_cover(s, (300, 400))
        db.enroll(f"cover{s}", img)
        cv2.imwrite(str(tmp_path / f"p{s}.png"), img)
        photos.append((str(tmp_path / f"p{s}.png"), f"cover{s}"))
    prepare_indexes(db, rebuild=False, kinds=["sift"])
    files = db.cache_files()
    limit = sum(f.stat().st_size for f in files[:3]) + files[3].stat().st_size // 2
    dropped = []
    real_drop = sizes_children.drop_page_cache
    monkeypatch.setattr(sizes_children, "drop_page_cache", lambda ps: dropped.append(list(ps)) or real_drop(ps))
    result = tmp_path / "out.json"
    sizes_children.recognise(db.path, photos, 400, None, result, False, warm_limit=limit)
    doc = json.loads(result.read_text())
    every = sorted(p.resolve() for p in db.path.rglob("*") if p.is_file())
    others = sorted(set(every) - {f.resolve() for f in files[:3]})
    assert sorted(p.resolve() for p in dropped[0]) == every  # cold: the whole database first
    assert [sorted(p.resolve() for p in d) for d in dropped[1:]] == [others, others]  # then before each pass
    assert doc["warmed_bytes"] == sum(f.stat().st_size for f in files[:3]) <= limit == doc["warm_limit_bytes"]
    assert doc["cold"]["found"] == doc["warm"]["found"] == 4


def test_without_removes_the_covers_from_a_copy_only(tmp_path):
    """``without``: the photos' covers removed from a linked copy, where a recognizer finds none of them; the
    measured database keeps every object and the very files it had (same inodes), and the copy goes."""
    import json

    import sizes_children

    from objrec import ModelDB
    from objrec.data import synthetic_cover
    from objrec.matching.shortlist import prepare_indexes

    db = ModelDB.create(tmp_path / "db", detectors={"sift": {"n_features": 0}})
    photos = []
    for s in range(5):
        img = synthetic_cover(s, (300, 400))
        db.enroll(f"cover{s}", img)
        if s < 2:
            cv2.imwrite(str(tmp_path / f"p{s}.png"), img)
            photos.append((str(tmp_path / f"p{s}.png"), f"cover{s}"))
    prepare_indexes(db, rebuild=False, kinds=["sift"])
    before = {p: p.stat().st_ino for p in db.path.rglob("*") if p.is_file()}
    result = tmp_path / "out.json"
    sizes_children.without(db.path, photos, 400, ["cover0", "cover1"], result)
    doc = json.loads(result.read_text())
    assert doc["objects"] == 3 and doc["removed"] == 2
    assert doc["warm"]["found"] == 0 and doc["warm"]["photos"] == 2
    assert {p: p.stat().st_ino for p in db.path.rglob("*") if p.is_file()} == before
    assert len(ModelDB.open(db.path)) == 5 and not (tmp_path / "db-without").exists()
