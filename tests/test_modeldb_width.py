"""ModelDB: an object's physical width, optional in the object table, stored at enrolment or set later."""

from __future__ import annotations

import json

import cv2
import pytest

from objrec import ModelDB
from objrec.data import synthetic_cover
from objrec.modeldb import ModelDBError

SIFT_ONLY = {"sift": {"n_features": 0}}


def _covers(n, size=(120, 150), start=20):
    return {f"c{i:02d}": synthetic_cover(start + i, size) for i in range(n)}


def _write_images(folder, images):
    folder.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, img in images.items():
        paths[name] = folder / f"{name}.png"
        cv2.imwrite(str(paths[name]), img)
    return paths


@pytest.fixture()
def sift_db(tmp_path):
    return ModelDB.create(tmp_path / "sdb", detectors=SIFT_ONLY)


@pytest.fixture()
def cover():
    return synthetic_cover(3, (200, 260))


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
    tables = [json.loads(p.read_text())["objects"] for p in sorted((sift_db.path / "shards").glob("*/objects.json"))]
    assert {o["name"]: o["width_m"] for t in tables for o in t if "width_m" in o} == {
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
