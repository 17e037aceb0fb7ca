"""ModelDB: persistence, atomicity, and an error naming the file for every way a database can be bad."""

from __future__ import annotations

import hashlib
import json
import os

import numpy as np
import pytest

from objrec import ModelDB
from objrec.data import synthetic_cover
from objrec.features.model import AUTO_CAP, cap_features, model_feature_cap, strongest_spread
from objrec.fileio import FileFormatError
from objrec.imageio import InputError
from objrec.modeldb import SCHEMA_VERSION, ModelDBError
from objrec.modeldb.tables import ShardTable


def capped(direct, image):
    """What the database stores of features extracted from ``image``: capped as enrolment caps them."""
    return cap_features(direct, AUTO_CAP, image.shape[1], image.shape[0])


@pytest.fixture()
def cover():
    return synthetic_cover(3, (200, 260))


@pytest.fixture()
def db(tmp_path, cover):
    d = ModelDB.create(tmp_path / "db")
    d.enroll("cover", cover)
    return d


def test_roundtrip_reopen_gives_identical_features(db, cover, tmp_path, assert_stored_image):
    again = ModelDB.open(tmp_path / "db")
    assert again.names == ["cover"]
    assert again.database_id == db.database_id
    a, b = db.get("cover").features["sift"], again.get("cover").features["sift"]
    assert len(a) > 50
    np.testing.assert_array_equal(a.descriptors, b.descriptors)
    np.testing.assert_array_equal(a.xy, b.xy)
    assert again.get("cover").width == 200 and again.get("cover").height == 260
    assert_stored_image(again.image("cover"), cover)


def test_features_match_direct_extraction(db, cover, assert_stored_positions):
    from objrec.features import SIFT

    direct = capped(SIFT(backend="cpu").detect_and_compute(cover), cover)
    stored = db.get("cover").features["sift"]
    assert_stored_positions(stored.xy, direct.xy, cover.shape[1], cover.shape[0])
    np.testing.assert_allclose(stored.descriptors, direct.descriptors)


def test_large_model_images_are_downscaled_but_keep_full_resolution_coordinates(tmp_path):
    big = np.ascontiguousarray(np.kron(synthetic_cover(5, (400, 300)), np.ones((4, 4, 1), np.uint8)))  # 1600x1200
    d = ModelDB.create(tmp_path / "db")
    obj = d.enroll("big", big)
    xy = obj.features["sift"].xy
    assert obj.width == 1600 and obj.height == 1200
    assert xy[:, 0].max() > 1280 * 0.9  # not left in the downscaled frame
    assert xy[:, 0].max() <= 1600 and xy[:, 1].max() <= 1200


def test_database_id_changes_with_content(db, tmp_path):
    before = db.database_id
    db.enroll("other", synthetic_cover(4))
    assert db.database_id != before
    db.remove("other")
    assert db.database_id == before
    assert ModelDB.open(tmp_path / "db").database_id == before


def test_duplicate_name_is_refused_and_replace_works(db, cover):
    with pytest.raises(ModelDBError, match="'cover' is already enrolled"):
        db.enroll("cover", cover)
    old = db.database_id
    db.enroll("cover", synthetic_cover(9, (200, 260)), replace=True)
    assert db.names == ["cover"] and db.database_id != old
    m = json.loads((db.path / "manifest.json").read_text())
    (live,) = [sh["id"] for sh in m["shards"]]
    (retired,) = [r["id"] for r in m["retired"]]  # the replaced object's shard, kept for readers a while
    assert sorted(p.name for p in (db.path / "shards").iterdir()) == sorted([live, retired])
    assert db.orphans() == []


def test_retired_shards_are_deleted_after_the_grace_period(db, cover, monkeypatch):
    import objrec.modeldb.store as mdb

    db.enroll("cover", synthetic_cover(9, (200, 260)), replace=True)
    monkeypatch.setattr(mdb, "RETIRE_GRACE_S", 0.0)
    db.enroll("other", synthetic_cover(4))  # the next write collects it
    m = json.loads((db.path / "manifest.json").read_text())
    assert sorted(p.name for p in (db.path / "shards").iterdir()) == sorted(sh["id"] for sh in m["shards"])


@pytest.mark.parametrize("bad", ["", "a/b", "../x", "-x", "x" * 200, "a b"])
def test_bad_object_names(db, cover, bad):
    with pytest.raises(InputError, match="object name"):
        db.enroll(bad, cover)


def test_unknown_object_name_lists_known(db):
    with pytest.raises(KeyError, match="unknown object 'nope'.*cover"):
        db.get("nope")


def test_unreadable_and_empty_images(db, tmp_path):
    missing = tmp_path / "missing.png"
    with pytest.raises(InputError, match="missing.png: no such file"):
        db.enroll("x", missing)
    empty = tmp_path / "empty.png"
    empty.write_bytes(b"")
    with pytest.raises(InputError, match="empty.png: file is empty"):
        db.enroll("x", empty)
    junk = tmp_path / "junk.png"
    junk.write_bytes(b"this is not an image at all")
    with pytest.raises(InputError, match="junk.png: not a readable image"):
        db.enroll("x", junk)
    with pytest.raises(InputError, match="no features found"):
        db.enroll("blank", np.full((100, 100), 128, np.uint8))
    with pytest.raises(InputError, match="got None"):
        db.enroll("none", None)
    assert db.names == ["cover"]


def test_16bit_image_file_is_refused(db, tmp_path):
    import cv2

    p = tmp_path / "deep.png"
    cv2.imwrite(str(p), (np.arange(64 * 64, dtype=np.uint16).reshape(64, 64) * 7))
    with pytest.raises(InputError, match="deep.png: uint16 image"):
        db.enroll("deep", p)


def test_open_errors_name_the_file(tmp_path, db):
    with pytest.raises(ModelDBError, match="no such model database"):
        ModelDB.open(tmp_path / "nothing")
    (tmp_path / "plain").mkdir()
    with pytest.raises(ModelDBError, match="manifest.json: not found"):
        ModelDB.open(tmp_path / "plain")
    m = db.path / "manifest.json"
    good = m.read_text()
    m.write_text(good[: len(good) // 2])  # truncated manifest
    with pytest.raises(ModelDBError, match="manifest.json: manifest is not valid JSON"):
        ModelDB.open(db.path)
    m.write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(ModelDBError, match="not an objrec model database"):
        ModelDB.open(db.path)
    newer = json.loads(good)
    newer["schema_version"] = SCHEMA_VERSION + 1
    m.write_text(json.dumps(newer))
    with pytest.raises(ModelDBError, match=f"schema version {SCHEMA_VERSION + 1} is newer"):
        ModelDB.open(db.path)


def _shard_file(db, name):
    (shard,) = json.loads((db.path / "manifest.json").read_text())["shards"]
    return db.path / "shards" / shard["id"] / name


def test_tampered_and_truncated_array_files(db):
    f = _shard_file(db, "sift.descriptors.npy")
    data = f.read_bytes()
    f.write_bytes(data[:-1] + bytes([data[-1] ^ 1]))
    with pytest.raises(FileFormatError, match=f"{f.name}: sha256 mismatch"):
        ModelDB.open(db.path).get("cover")
    f.write_bytes(data[: len(data) // 3])
    with pytest.raises(FileFormatError, match=f"{f.name}: sha256 mismatch"):
        ModelDB.open(db.path).get("cover")
    f.unlink()
    with pytest.raises(FileFormatError, match=f"{f.name}: array file not found"):
        ModelDB.open(db.path).get("cover")


def test_pickled_arrays_never_load(db, tmp_path):
    """An .npz holding an object array (which would need pickle) fails even with a matching hash."""
    from objrec.fileio import load_npz_verified, sha256_bytes

    p = tmp_path / "evil.npz"
    np.savez(p, x=np.array([{"a": 1}], dtype=object))
    with pytest.raises(FileFormatError, match="evil.npz: not a readable .npz"):
        load_npz_verified(p, sha256_bytes(p.read_bytes()))


def test_failed_write_leaves_database_intact(db, monkeypatch):
    """A crash during the manifest write (after the array file is written) loses nothing."""
    before = (db.path / "manifest.json").read_text()
    real_replace = os.replace

    def boom(src, dst):
        if str(dst).endswith("manifest.json"):
            raise OSError("disk full (simulated)")
        return real_replace(src, dst)

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="simulated"):
        db.enroll("second", synthetic_cover(11))
    monkeypatch.setattr(os, "replace", real_replace)
    assert (db.path / "manifest.json").read_text() == before
    again = ModelDB.open(db.path)
    assert again.names == ["cover"]
    assert not [p for p in db.path.rglob("*.tmp")]


def test_create_refuses_foreign_directory_and_existing_db(tmp_path, db):
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(ModelDBError, match="not empty"):
        ModelDB.create(other)
    with pytest.raises(ModelDBError, match="already exists"):
        ModelDB.create(db.path)
    assert ModelDB.create(db.path, exist_ok=True).names == ["cover"]


# -- schema 2: shards, compact storage, bulk enrolment ------------------------------------------------
SIFT_ONLY = {"sift": {"n_features": 0}}


def _covers(n, size=(120, 150), start=20):
    return {f"c{i:02d}": synthetic_cover(start + i, size) for i in range(n)}


@pytest.fixture()
def sift_db(tmp_path):
    return ModelDB.create(tmp_path / "sdb", detectors=SIFT_ONLY)


def _write_images(folder, images):
    import cv2

    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, img in images.items():
        paths[name] = folder / f"{name}.png"
        cv2.imwrite(str(paths[name]), img)
    return paths


def test_sift_stored_as_uint8_equals_opencv_exactly(sift_db, cover, assert_stored_positions):
    import cv2

    sift_db.enroll("cover", cover)
    kps, ref = cv2.SIFT_create().detectAndCompute(cv2.cvtColor(cover, cv2.COLOR_BGR2GRAY), None)
    cap = model_feature_cap("sift", cover.shape[1], cover.shape[0])
    if len(kps) > cap:  # the stored features are the capped ones (the cap itself: test_modeldb_storage.py)
        keep = strongest_spread(
            np.float32([k.pt for k in kps]),
            np.float32([k.response for k in kps]),
            cap,
            cover.shape[1],
            cover.shape[0],
        )
        kps, ref = [kps[i] for i in keep], ref[keep]
    stored = np.load(_shard_file(sift_db, "sift.descriptors.npy"), allow_pickle=False)
    assert stored.dtype == np.uint8 and ref.dtype == np.float32
    np.testing.assert_array_equal(stored, ref)  # exact: OpenCV's descriptors are integers 0-255
    got = ModelDB.open(sift_db.path).get("cover").features["sift"]
    assert got.descriptors.dtype == np.float32
    np.testing.assert_array_equal(got.descriptors, ref)
    assert_stored_positions(got.xy, [k.pt for k in kps], cover.shape[1], cover.shape[0])
    # The octave number only: the signed low byte of OpenCV's packed field.
    np.testing.assert_array_equal(got.octave, [np.int8(np.uint8(k.octave & 0xFF)) for k in kps])
    np.testing.assert_allclose(got.size, [k.size for k in kps], rtol=2**-11)
    np.testing.assert_allclose(got.angle, [k.angle for k in kps], rtol=2**-11, atol=2**-11)
    np.testing.assert_allclose(got.response, [k.response for k in kps], rtol=3.5e-4)  # half a step of the log scale


def test_enroll_many_round_trip_from_files_and_arrays(sift_db, tmp_path, assert_stored_image, assert_stored_positions):
    import cv2

    from objrec.features import SIFT

    images = _covers(5)
    paths = _write_images(tmp_path / "imgs", dict(list(images.items())[:3]))
    items = [(n, paths[n]) for n in paths] + [(n, images[n]) for n in list(images)[3:]]
    report = sift_db.enroll_many(items, batch_size=2, workers=2, progress=False)
    assert report and sorted(report.enrolled) == sorted(images) and not report.skipped
    again = ModelDB.open(sift_db.path)
    assert again.names == list(images)  # enrolment order, across three shards
    assert len(json.loads((sift_db.path / "manifest.json").read_text())["shards"]) == 3
    for name, img in images.items():
        direct = capped(SIFT(backend="cpu").detect_and_compute(img), img)
        got = again.get(name).features["sift"]
        np.testing.assert_array_equal(got.descriptors, direct.descriptors)
        assert_stored_positions(got.xy, direct.xy, img.shape[1], img.shape[0])
        assert_stored_image(again.image(name), img)
        assert (again.get(name).width, again.get(name).height) == (120, 150)
    src = again.info("c00").source
    assert src["path"] == str(paths["c00"])
    assert src["sha256"] == hashlib.sha256(paths["c00"].read_bytes()).hexdigest()
    assert_stored_image(again.image("c00"), cv2.imread(str(paths["c00"])))
    assert again.verify() == []


def test_enroll_many_lists_failures_and_enrols_the_rest(sift_db, tmp_path):
    paths = _write_images(tmp_path / "imgs", _covers(2))
    (tmp_path / "junk.png").write_bytes(b"not an image")
    import cv2

    cv2.imwrite(str(tmp_path / "blank.png"), np.full((80, 80), 128, np.uint8))
    items = [
        ("c00", paths["c00"]),
        ("missing", tmp_path / "missing.png"),
        ("junk", tmp_path / "junk.png"),
        ("blank", tmp_path / "blank.png"),
        ("bad name", paths["c01"]),
        ("c01", paths["c01"]),
        ("c01", paths["c00"]),
    ]
    report = sift_db.enroll_many(items, progress=False)
    assert not report and report.enrolled == ["c00", "c01"]
    reasons = {f.name: f.reason for f in report.failed}
    assert set(reasons) == {"missing", "junk", "blank", "bad name", "c01"}
    assert "missing.png: no such file" in reasons["missing"]
    assert "junk.png: not a readable image" in reasons["junk"]
    assert "no features found" in reasons["blank"]
    assert "object name" in reasons["bad name"]
    assert "given twice" in reasons["c01"]
    assert ModelDB.open(sift_db.path).names == ["c00", "c01"]


def _reference_id(tmp_path, items):
    ref = ModelDB.create(tmp_path / "reference", detectors=SIFT_ONLY)
    ref.enroll_many(items, progress=False)
    return ref.database_id


def test_interrupted_enrolment_resumes_where_it_stopped(sift_db, tmp_path):
    paths = _write_images(tmp_path / "imgs", _covers(7))
    items = list(paths.items())

    def interrupted():
        for i, item in enumerate(items):
            if i == 5:
                raise KeyboardInterrupt
            yield item

    with pytest.raises(KeyboardInterrupt):
        sift_db.enroll_many(interrupted(), batch_size=2, progress=False)
    done = ModelDB.open(sift_db.path).names
    assert done == [n for n, _ in items[:5]]  # finished work is committed before the interrupt propagates
    report = ModelDB.open(sift_db.path).enroll_many(items, batch_size=2, progress=False)
    assert report.skipped == done and report.enrolled == ["c05", "c06"] and not report.failed
    assert ModelDB.open(sift_db.path).database_id == _reference_id(tmp_path, items)


def test_killed_enrolment_resumes(sift_db, tmp_path):
    """A process killed without any cleanup (os._exit) keeps its committed batches; a rerun completes."""
    import subprocess
    import sys
    import textwrap

    paths = _write_images(tmp_path / "imgs", _covers(6))
    listing = tmp_path / "list.csv"
    listing.write_text("name,path\n" + "".join(f"{n},{p}\n" for n, p in paths.items()))
    code = textwrap.dedent(f"""
        import os
        from objrec import ModelDB
        from objrec.modeldb.enrolment import items_from_csv
        def items():
            for i, item in enumerate(items_from_csv({str(listing)!r})):
                if i == 5:
                    os._exit(9)
                yield item
        ModelDB.open({str(sift_db.path)!r}).enroll_many(items(), batch_size=2, workers=1, progress=False)
    """)
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert r.returncode == 9, r.stderr
    partial = ModelDB.open(sift_db.path)
    committed = partial.names
    assert 2 <= len(committed) < 6 and partial.verify() == []
    report = partial.enroll_many(list(paths.items()), progress=False)
    assert report.skipped == committed and sorted(report.skipped + report.enrolled) == sorted(paths)
    assert ModelDB.open(sift_db.path).database_id == _reference_id(tmp_path, list(paths.items()))


def test_changed_source_file_is_not_skipped(sift_db, tmp_path, assert_stored_image):
    import cv2

    (p,) = _write_images(tmp_path / "imgs", {"x": synthetic_cover(40, (120, 150))}).values()
    sift_db.enroll_many([("x", p)], progress=False)
    before = sift_db.info("x").sha256
    cv2.imwrite(str(p), synthetic_cover(41, (120, 150)))
    report = sift_db.enroll_many([("x", p)], progress=False)
    assert [f.name for f in report.failed] == ["x"] and "other content" in report.failed[0].reason
    report = sift_db.enroll_many([("x", p)], replace=True, progress=False)
    assert report.enrolled == ["x"] and sift_db.info("x").sha256 != before
    assert_stored_image(sift_db.image("x"), cv2.imread(str(p)))


def test_remove_and_replace_tombstone_then_compact(sift_db, tmp_path):
    """Dead rows are dropped and small shards merged, and the content (hence the id) is unchanged by it."""
    from objrec.modeldb import MAX_SMALL_SHARDS

    images = _covers(MAX_SMALL_SHARDS + 3, size=(96, 96))
    for name, img in images.items():
        sift_db.enroll(name, img)
    shards = json.loads((sift_db.path / "manifest.json").read_text())["shards"]
    assert len(shards) <= MAX_SMALL_SHARDS  # single-object shards were merged
    before = {n: sift_db.get(n).features["sift"].descriptors for n in images}
    removed = list(images)[::2]
    for n in removed:
        sift_db.remove(n)
    sift_db.enroll("c01", images["c03"], replace=True)
    survivors = {n: img for n, img in images.items() if n not in removed}
    survivors["c01"] = images["c03"]
    assert sift_db.compact() >= 1
    m = json.loads((sift_db.path / "manifest.json").read_text())
    assert all(not s["removed"] for s in m["shards"]) and len(m["shards"]) == 1
    on_disk = {p.name for p in (sift_db.path / "shards").iterdir()}
    assert on_disk == {m["shards"][0]["id"]} | {r["id"] for r in m["retired"]}  # retired: kept for readers
    again = ModelDB.open(sift_db.path)
    assert sorted(again.names) == sorted(survivors) and again.verify() == []
    for n in survivors:
        want = before["c03"] if n == "c01" else before[n]
        np.testing.assert_array_equal(again.get(n).features["sift"].descriptors, want)
    ref = ModelDB.create(tmp_path / "ref", detectors=SIFT_ONLY)
    ref.enroll_many(list(survivors.items()), progress=False)
    assert again.database_id == ref.database_id


def test_descriptor_counts_and_columns_agree_with_the_objects_read_whole(sift_db):
    """``descriptor_counts`` (from the shards' row offsets) and ``column`` (one field of the object table) equal
    what the objects themselves hold, with several views, removals and a replacement still tombstoned."""
    images = _covers(6, size=(96, 128))
    sift_db.enroll_many(list(images.items()), progress=False)  # one shard, which keeps its tombstones below
    sift_db.add_view("c00", images["c05"])
    sift_db.remove("c02")
    sift_db.enroll("c03", images["c01"], replace=True)
    m = json.loads((sift_db.path / "manifest.json").read_text())
    assert any(s.get("removed") for s in m["shards"])  # the tombstones are there to be left out
    db = ModelDB.open(sift_db.path)
    objects = [db.get(k) for k in db.records]
    assert db.descriptor_counts() == {"sift": sum(len(o.features["sift"]) for o in objects)}
    widths, heights, shapes, n_features = db.columns("width", "height", "shape", "n_features")
    assert widths == [o.width for o in objects] and heights == [o.height for o in objects]
    infos = db.infos()
    assert shapes == [None] * len(objects) and [i.shape for i in infos] == ["flat"] * len(objects)
    assert n_features == [i.n_features for i in infos]
    assert [i.name for i in infos] == db.records and "c00#1" in db.records and "c02" not in db.records


def test_open_reads_no_arrays_and_verify_names_bad_files(sift_db, cover):
    sift_db.enroll("cover", cover)
    f = _shard_file(sift_db, "sift.keypoints.npy")
    f.write_bytes(f.read_bytes()[:-7])  # truncated
    again = ModelDB.open(sift_db.path)  # the object table is enough to open
    assert again.names == ["cover"] and again.info("cover").n_features["sift"] > 50
    (problem,) = again.verify()
    assert str(f) in problem and "sha256 mismatch" in problem
    with pytest.raises(ModelDBError, match="sift.keypoints.npy: sha256 mismatch"):
        again.get("cover")


def test_damaged_object_table_fails_open_naming_it(sift_db, cover):
    sift_db.enroll("cover", cover)
    t = _shard_file(sift_db, "columns.json")
    data = t.read_bytes()
    t.write_bytes(data[:-20])
    with pytest.raises(ModelDBError, match="columns.json: sha256 mismatch"):
        ModelDB.open(sift_db.path)
    t.unlink()
    with pytest.raises(ModelDBError, match="columns.json: object table not found"):
        ModelDB.open(sift_db.path)
    t.write_bytes(data)
    assert ModelDB.open(sift_db.path).names == ["cover"]


def test_damaged_details_table_is_named_when_first_needed(sift_db, cover):
    """Opening and recognising read only a shard's columns; a damaged details table is named by the first
    read that needs it (an object's source or rating) and by verify."""
    sift_db.enroll("cover", cover)
    t = _shard_file(sift_db, "details.json")
    t.write_bytes(t.read_bytes().replace(b'"objects"', b'"object5"'))
    again = ModelDB.open(sift_db.path)
    assert again.names == ["cover"] and len(again.get("cover").features["sift"]) > 50
    with pytest.raises(ModelDBError, match="details.json: sha256 mismatch"):
        again.info("cover")
    (problem,) = ModelDB.open(sift_db.path).verify()
    assert str(t) in problem and "sha256 mismatch" in problem


def test_pickled_shard_array_is_refused_even_with_matching_hash(sift_db, cover):
    sift_db.enroll("cover", cover)
    f = _shard_file(sift_db, "sift.descriptors.npy")
    np.save(f, np.array([{"a": 1}], dtype=object), allow_pickle=True)
    m = json.loads((sift_db.path / "manifest.json").read_text())
    m["shards"][0]["files"]["sift.descriptors.npy"] = hashlib.sha256(f.read_bytes()).hexdigest()
    (sift_db.path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ModelDBError, match="sift.descriptors.npy: not a readable .npy"):
        ModelDB.open(sift_db.path).get("cover")


def _write_schema1(path, objects):
    """A schema 1 database as objrec wrote it: one .npz per object and every object in the manifest."""
    from objrec.fileio import npz_bytes, sha256_bytes
    from objrec.modeldb import extract_model_features

    (path / "objects").mkdir(parents=True)
    entries = []
    for name, img in objects.items():
        arrays = {"image": img}
        for kind, f in extract_model_features(img, SIFT_ONLY).items():
            arrays.update(f.to_arrays(prefix=f"{kind}__"))
        data = npz_bytes(arrays)
        rel = f"objects/{name}-{sha256_bytes(data)[:12]}.npz"
        (path / rel).write_bytes(data)
        h, w = img.shape[:2]
        entries.append({"name": name, "file": rel, "sha256": sha256_bytes(data), "width": w, "height": h})
    manifest = {"format": "objrec-modeldb", "schema_version": 1, "library_version": "0.1.0"}
    manifest.update(detectors=SIFT_ONLY, objects=entries, database_id="0123456789abcdef")
    (path / "manifest.json").write_text(json.dumps(manifest))


def test_schema1_database_gives_upgrade_hint_then_upgrades(tmp_path, assert_stored_image):
    from objrec.features import SIFT

    old = tmp_path / "old"
    images = _covers(3)
    _write_schema1(old, images)
    with pytest.raises(ModelDBError, match=r"manifest.json: schema 1 .*objrec db upgrade --db"):
        ModelDB.open(old)
    db = ModelDB.upgrade(old)
    assert db.names == list(images) and not (old / "objects").exists() and db.verify() == []
    for name, img in images.items():
        assert_stored_image(db.image(name), img)
        direct = capped(SIFT(backend="cpu").detect_and_compute(img), img)
        np.testing.assert_array_equal(db.get(name).features["sift"].descriptors, direct.descriptors)
    assert ModelDB.open(old).database_id == db.database_id


def test_reading_an_object_checks_its_own_rows_not_whole_files(sift_db, cover, monkeypatch):
    """A read checks the object's content sha256 over its own rows: no shard file is hashed whole when the
    rows are sound, and damage inside one object's rows is reported, naming the file, when that object is
    read, while the other object of the same shard still reads."""
    import objrec.modeldb.reader as modeldb

    sift_db.enroll_many([("a", cover), ("b", np.ascontiguousarray(cover[:, ::-1]))], progress=False)
    want = {n: sift_db.get(n).features["sift"].descriptors.copy() for n in ("a", "b")}
    hashed = []
    real = modeldb.file_sha256
    monkeypatch.setattr(modeldb, "file_sha256", lambda p: hashed.append(p) or real(p))
    fresh = ModelDB.open(sift_db.path)
    np.testing.assert_array_equal(fresh.get("a").features["sift"].descriptors, want["a"])
    assert hashed == []
    f = _shard_file(sift_db, "sift.descriptors.npy")
    data = bytearray(f.read_bytes())
    data[-1] ^= 0xFF  # the last row belongs to "b", enrolled second
    f.write_bytes(bytes(data))
    damaged = ModelDB.open(sift_db.path)
    np.testing.assert_array_equal(damaged.get("a").features["sift"].descriptors, want["a"])
    with pytest.raises(ModelDBError, match="sift.descriptors.npy: sha256 mismatch"):
        damaged.get("b")


def test_thumbnails_are_stored_checked_and_kept_by_compaction(sift_db):
    """Each object's thumbnail is its image in gray area-averaged to THUMB_SIZE (OpenCV's resize is the
    reference); a flipped byte in it is reported naming thumbs.npy when it is read; compaction carries it."""
    import cv2

    from objrec.modeldb import THUMB_SIZE

    covers = _covers(3)
    sift_db.enroll_many(list(covers.items()), progress=False)
    for name, img in covers.items():
        want = cv2.resize(cv2.cvtColor(img, cv2.COLOR_BGR2GRAY), (THUMB_SIZE, THUMB_SIZE), interpolation=cv2.INTER_AREA)
        np.testing.assert_array_equal(sift_db.thumbnail(name), want)
    sift_db.remove("c00")
    assert sift_db.compact() == 1
    again = ModelDB.open(sift_db.path)
    got = again.thumbnail("c02")
    np.testing.assert_array_equal(got, sift_db.thumbnail("c02"))
    f = _shard_file(again, "thumbs.npy")
    data = bytearray(f.read_bytes())
    data[-1] ^= 0xFF  # the last object's last thumbnail pixel
    f.write_bytes(bytes(data))
    fresh = ModelDB.open(sift_db.path)
    with pytest.raises(FileFormatError, match="thumbs.npy: sha256 mismatch"):
        fresh.thumbnail("c02")


def test_a_shard_written_without_thumbnails_reads_them_from_images_until_compacted(sift_db):
    """A shard as an earlier version wrote it (no thumbs.npy): thumbnails are made from the stored images; a
    compaction rewrites it with them, contents and database id unchanged."""
    import cv2

    from objrec.modeldb import THUMB_SIZE

    covers = _covers(2)
    sift_db.enroll_many(list(covers.items()), progress=False)
    before_id = sift_db.database_id
    manifest = json.loads((sift_db.path / "manifest.json").read_text())
    (shard,) = manifest["shards"]
    del shard["files"]["thumbs.npy"]
    (sift_db.path / "shards" / shard["id"] / "thumbs.npy").unlink()
    (sift_db.path / "manifest.json").write_text(json.dumps(manifest))
    old = ModelDB.open(sift_db.path)
    for name in covers:
        stored = cv2.cvtColor(old.image(name), cv2.COLOR_BGR2GRAY)  # what is stored: the thumbnail's source
        want = cv2.resize(stored, (THUMB_SIZE, THUMB_SIZE), interpolation=cv2.INTER_AREA)
        np.testing.assert_array_equal(old.thumbnail(name), want)
    assert old.compact() == 1
    again = ModelDB.open(sift_db.path)
    (shard,) = json.loads((sift_db.path / "manifest.json").read_text())["shards"]
    assert "thumbs.npy" in shard["files"] and again.database_id == before_id
    for name in covers:
        np.testing.assert_array_equal(again.thumbnail(name), old.thumbnail(name))
    assert again.compact() == 0  # nothing left to rewrite


# -- an object's physical width: optional in the object table, stored at enrolment or set later -----------------


def test_width_m_is_stored_read_back_and_optional(sift_db, tmp_path):
    """A width given at enrolment (single or bulk) is read back after reopening; objects without one, and
    object tables written before the key existed, read as None; the width is not content (same id)."""
    images = _covers(4)
    sift_db.enroll("c00", images["c00"], width_m=0.135)
    sift_db.enroll("c01", images["c01"])
    paths = _write_images(tmp_path / "imgs", {n: images[n] for n in ("c02", "c03")})
    assert sift_db.enroll_many(list(paths.items()), width_m=0.2, progress=False)
    again = ModelDB.open(sift_db.path)
    assert [again.info(n).width_m for n in images] == [0.135, None, 0.2, 0.2]
    assert again.get("c00").width_m == 0.135 and again.get("c01").width_m is None
    tables = [json.loads(p.read_text()) for p in sorted((sift_db.path / "shards").glob("*/columns.json"))]
    rows = [ShardTable(t["n"], t["dense"], t["sparse"], details=[{}] * t["n"]).rows() for t in tables]
    assert {o["name"]: o["width_m"] for t in rows for o in t if "width_m" in o} == {
        "c00": 0.135,
        "c02": 0.2,
        "c03": 0.2,
    }
    ref = ModelDB.create(tmp_path / "ref", detectors=SIFT_ONLY)  # the same content without widths
    ref.enroll_many([("c00", images["c00"]), ("c01", images["c01"]), *paths.items()], progress=False)
    assert again.database_id == ref.database_id


def test_set_width_commits_atomically_and_survives_compaction(sift_db):
    images = _covers(3)
    for name, img in images.items():
        sift_db.enroll(name, img)
    before = sift_db.database_id
    sift_db.set_width("c01", 0.25)
    sift_db.set_width("c02", 0.3)
    sift_db.set_width("c02", None)  # unknown again
    assert sift_db.database_id == before
    assert [ModelDB.open(sift_db.path).info(n).width_m for n in images] == [None, 0.25, None]
    assert not list(sift_db.path.rglob("*.tmp"))
    sift_db.rename("c01", "renamed")
    sift_db.compact()  # rewrites the shards: the widths move into the new object table
    again = ModelDB.open(sift_db.path)
    assert again.info("renamed").width_m == 0.25 and again.info("c00").width_m is None
    assert all("width_m" not in s for s in again.manifest["shards"]) and again.verify() == []
    with pytest.raises(KeyError, match="nope"):
        sift_db.set_width("nope", 0.1)


@pytest.mark.parametrize("bad", [0, -0.1, float("inf"), float("nan"), "0.1", True])
def test_bad_widths_are_value_errors_naming_width_m(sift_db, bad):
    img = _covers(1)["c00"]
    for call in (
        lambda: sift_db.enroll("c00", img, width_m=bad),
        lambda: sift_db.enroll_many([("c00", img)], width_m=bad, progress=False),
    ):
        with pytest.raises(ValueError, match="^width_m:"):
            call()
    assert len(sift_db) == 0
    sift_db.enroll("c00", img)
    with pytest.raises(ValueError, match="^width_m:"):
        sift_db.set_width("c00", bad)


def test_rerun_with_a_width_skips_only_the_same_width(sift_db, tmp_path):
    paths = _write_images(tmp_path / "imgs", _covers(2))
    sift_db.enroll_many(list(paths.items()), width_m=0.1, progress=False)
    assert sorted(sift_db.enroll_many(list(paths.items()), progress=False).skipped) == ["c00", "c01"]
    assert sorted(sift_db.enroll_many(list(paths.items()), width_m=0.1, progress=False).skipped) == ["c00", "c01"]
    report = sift_db.enroll_many(list(paths.items()), width_m=0.2, progress=False)
    assert sorted(f.name for f in report.failed) == ["c00", "c01"] and "width" in report.failed[0].reason
    report = sift_db.enroll_many(list(paths.items()), width_m=0.2, replace=True, progress=False)
    assert sorted(report.enrolled) == ["c00", "c01"] and sift_db.info("c00").width_m == 0.2


def test_malformed_widths_in_the_files_are_named(sift_db, cover):
    sift_db.enroll("cover", cover)
    m = json.loads((sift_db.path / "manifest.json").read_text())
    m["shards"][0]["width_m"] = {"0": -1}
    (sift_db.path / "manifest.json").write_text(json.dumps(m))
    with pytest.raises(ModelDBError, match="manifest.json: shard .*width_m"):
        ModelDB.open(sift_db.path)
