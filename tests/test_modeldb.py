"""ModelDB: persistence, atomicity, and an error naming the file for every way a database can be bad."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from objrec import ModelDB
from objrec.data import synthetic_cover
from objrec.fileio import FileFormatError
from objrec.imageio import InputError
from objrec.modeldb import SCHEMA_VERSION, ModelDBError


@pytest.fixture()
def cover():
    return synthetic_cover(3, (200, 260))


@pytest.fixture()
def db(tmp_path, cover):
    d = ModelDB.create(tmp_path / "db")
    d.enroll("cover", cover)
    return d


def test_roundtrip_reopen_gives_identical_features(db, cover, tmp_path):
    again = ModelDB.open(tmp_path / "db")
    assert again.names == ["cover"]
    assert again.database_id == db.database_id
    a, b = db.get("cover").features["sift"], again.get("cover").features["sift"]
    assert len(a) > 50
    np.testing.assert_array_equal(a.descriptors, b.descriptors)
    np.testing.assert_array_equal(a.xy, b.xy)
    assert again.get("cover").width == 200 and again.get("cover").height == 260
    np.testing.assert_array_equal(again.image("cover"), cover)


def test_features_match_direct_extraction(db, cover):
    from objrec.features import SIFT

    direct = SIFT(backend="cpu").detect_and_compute(cover)
    stored = db.get("cover").features["sift"]
    np.testing.assert_allclose(stored.xy, direct.xy)
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
    assert len(list((db.path / "objects").iterdir())) == 1  # the replaced array file is gone


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


def test_tampered_and_truncated_array_files(db):
    entry = json.loads((db.path / "manifest.json").read_text())["objects"][0]
    f = db.path / entry["file"]
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
