"""Compact storage: the cap on stored features, packed keypoint rows, int8 SURF descriptors, schema 3
databases read and compacted as they are, the upgrade of schema 2 databases in place, a full disk, and
``objrec db upgrade`` / ``db info``."""

from __future__ import annotations

import errno
import hashlib
import io
import json
import warnings
from pathlib import Path

import cv2
import numpy as np
import pytest

from objrec import ModelDB
from objrec.cli import main
from objrec.data import synthetic_cover
from objrec.features.model import extract_model_features, model_feature_cap, strongest_spread
from objrec.modeldb import SCHEMA_VERSION, ModelDBError
from objrec.modeldb.records import KEYPOINT_DTYPE, LEGACY_KEYPOINT_DTYPE, SURF_INT8_SCALE, WIDE_KEYPOINT_DTYPE
from objrec.modeldb.shards import DiskFullError
from objrec.types import Features

DETECTORS = {"surf": {"hessian_threshold": 400.0}, "sift": {"n_features": 0}}
#: Half a step of the stored responses' log scale, relative (plus float32 rounding).
RESPONSE_RTOL = 2.0 ** (0.5 / 1024) - 1 + 2.0**-23


def _quota_then_strongest(xy, response, k, w, h, grid, spread):
    """Brute-force reference for :func:`strongest_spread`: each cell's ``floor(spread * k / grid**2)``
    strongest, then the strongest of the rest until ``k`` are taken."""
    cells: dict[tuple[int, int], list[int]] = {}
    for i in range(len(response)):
        c = (min(int(xy[i, 1] * grid / h), grid - 1), min(int(xy[i, 0] * grid / w), grid - 1))
        cells.setdefault(c, []).append(i)
    quota = int(spread * k) // (grid * grid)
    reserved = [i for v in cells.values() for i in sorted(v, key=lambda i: (-response[i], i))[:quota]]
    rest = sorted(set(range(len(response))) - set(reserved), key=lambda i: (-response[i], i))
    return sorted(reserved + rest[: k - len(reserved)])


@pytest.mark.parametrize("k", [0, 1, 7, 50, 199, 200, 500])
@pytest.mark.parametrize("spread", [0.0, 0.5, 1.0])
def test_strongest_spread_equals_a_brute_force_quota_then_strength(k, spread):
    rng = np.random.default_rng(k)
    n, w, h = 200, 320, 240
    # A busy corner (most keypoints, the strongest) and a sparse rest of the image.
    xy = np.r_[rng.random((150, 2)) * [60, 50], rng.random((50, 2)) * [w, h]].astype(np.float32)
    response = np.r_[rng.random(150) + 1.0, rng.random(50)].astype(np.float32)
    got = strongest_spread(xy, response, k, w, h, grid=4, spread=spread)
    assert got.tolist() == _quota_then_strongest(xy, response, min(k, n), w, h, 4, spread)


def test_the_cap_is_a_density_with_a_floor():
    """Features per megapixel at the extraction's resolution (longer side at most MAX_MODEL_SIDE), never
    fewer than the floor."""
    from objrec.features.model import MAX_MODEL_SIDE, MIN_MODEL_FEATURES, MODEL_FEATURES_PER_MEGAPIXEL

    for kind in ("surf", "sift"):
        density, floor = MODEL_FEATURES_PER_MEGAPIXEL[kind], MIN_MODEL_FEATURES[kind]
        assert model_feature_cap(kind, 100, 80) == floor
        assert model_feature_cap(kind, 1200, 900) == max(floor, round(density * 1.08))
        side = 2 * MAX_MODEL_SIDE  # extracted at half size: a quarter of the area
        assert model_feature_cap(kind, side, side) == round(density * MAX_MODEL_SIDE**2 / 1e6)


def test_the_cap_spreads_features_beyond_a_busy_corner():
    """With most and strongest keypoints in one corner, a response-only cap keeps the corner alone; the
    stored selection keeps keypoints in every cell that has any."""
    rng = np.random.default_rng(0)
    w = h = 400
    xy = np.r_[rng.random((900, 2)) * 50, rng.random((100, 2)) * 400].astype(np.float32)
    response = np.r_[rng.random(900) + 10.0, rng.random(100)].astype(np.float32)
    keep = strongest_spread(xy, response, 300, w, h)
    cell = lambda p: set(map(tuple, (p * 8 // 400).astype(int)))  # noqa: E731
    assert len(keep) == 300 and cell(xy[keep]) == cell(xy)
    assert cell(xy[np.argsort(-response)[:300]]) == {(0, 0)}
    assert np.isin(np.argsort(-response)[:150], keep).all()  # the strongest half is kept whatever its place


@pytest.mark.parametrize("gray", [False, True])
def test_the_model_image_is_a_webp_as_small_and_close_as_opencvs(gray):
    """The stored model image against OpenCV's WebP encoder at the same quality (the independent reference):
    decoded by OpenCV to the same shape, within a tenth of its bytes and half a dB of its gray PSNR; the
    enrolled file's own bytes are kept when they are no larger, and only then."""
    from objrec.modeldb.preparation import encode_model_image
    from objrec.modeldb.records import MODEL_IMAGE_QUALITY

    img = np.ascontiguousarray(synthetic_cover(3, (320, 240)))
    blurred = cv2.GaussianBlur(img, (0, 0), 1.0)  # a camera's softness: WebP's own blocks are what differ
    if gray:
        blurred = cv2.cvtColor(blurred, cv2.COLOR_BGR2GRAY)
    data = encode_model_image(blurred)
    ok, ref = cv2.imencode(".webp", blurred, [cv2.IMWRITE_WEBP_QUALITY, MODEL_IMAGE_QUALITY])
    assert ok and bytes(data[:4]) == b"RIFF" and bytes(data[8:12]) == b"WEBP"
    assert data.size <= 1.1 * ref.size

    def psnr(enc):
        out = cv2.imdecode(enc, cv2.IMREAD_GRAYSCALE)
        assert out.shape == blurred.shape[:2]
        return cv2.PSNR(out, blurred if gray else cv2.cvtColor(blurred, cv2.COLOR_BGR2GRAY))

    assert psnr(data) >= psnr(ref) - 0.5
    smaller, larger = ref[: data.size // 2].reshape(-1), np.zeros(data.size + 1, np.uint8)
    assert encode_model_image(blurred, smaller) is smaller
    assert np.array_equal(encode_model_image(blurred, larger), data)


@pytest.mark.parametrize("missing", ["pillow", "pillow_webp"])
def test_without_pillows_webp_the_model_image_is_opencvs_webp(monkeypatch, missing):
    """Where Pillow is not installed, or was built without WebP, the stored model image is OpenCV's WebP at the
    same quality, byte for byte."""
    import sys

    from objrec.modeldb import preparation
    from objrec.modeldb.preparation import encode_model_image
    from objrec.modeldb.records import MODEL_IMAGE_QUALITY

    img = np.ascontiguousarray(synthetic_cover(5, (200, 150)))
    if missing == "pillow":
        monkeypatch.setitem(sys.modules, "PIL", None)  # import PIL raises ImportError
    else:
        from PIL import features

        real_check = features.check
        monkeypatch.setattr(features, "check", lambda name: False if name == "webp" else real_check(name))
    preparation._pillow_webp.cache_clear()
    try:
        ok, ref = cv2.imencode(".webp", img, [cv2.IMWRITE_WEBP_QUALITY, MODEL_IMAGE_QUALITY])
        assert ok and np.array_equal(encode_model_image(img), ref.reshape(-1))
    finally:
        monkeypatch.undo()
        preparation._pillow_webp.cache_clear()
    assert not np.array_equal(encode_model_image(img), ref.reshape(-1))  # Pillow's own encoder again


def test_surf_descriptors_are_stored_as_int8_within_half_a_step(tmp_path, assert_stored_positions):
    img = synthetic_cover(7, (240, 300))
    db = ModelDB.create(tmp_path / "db", detectors={"surf": DETECTORS["surf"]})
    db.enroll("c", img)
    direct = extract_model_features(img, {"surf": DETECTORS["surf"]})["surf"]
    keep = strongest_spread(direct.xy, direct.response, model_feature_cap("surf", 240, 300), 240, 300)
    (shard,) = (tmp_path / "db" / "shards").iterdir()
    stored = np.load(shard / "surf.descriptors.npy")
    assert stored.dtype == np.int8 and len(stored) == len(keep) > 50
    np.testing.assert_array_equal(stored, np.rint(direct.descriptors[keep] * SURF_INT8_SCALE))
    got = db.get("c").features["surf"]
    np.testing.assert_allclose(got.descriptors, direct.descriptors[keep], atol=0.5 / SURF_INT8_SCALE + 1e-3)
    assert_stored_positions(got.xy, direct.xy[keep], 240, 300)
    np.testing.assert_allclose(got.response, direct.response[keep], rtol=RESPONSE_RTOL)
    np.testing.assert_array_equal(got.laplacian, direct.laplacian[keep])
    assert np.load(shard / "surf.keypoints.npy").dtype == KEYPOINT_DTYPE and KEYPOINT_DTYPE.itemsize == 12
    table, owner = db.descriptor_table("surf")  # decoded for the retrieval index
    assert table.dtype == np.float16 and np.abs(table.astype(np.float32) - got.descriptors).max() < 1e-3


@pytest.mark.parametrize("size", [(1, 1), (33, 17), (640, 480), (6000, 4000)])
def test_packed_keypoint_rows_round_trip_within_their_steps(size, assert_stored_positions):
    """Positions anywhere in the image and a pixel beyond it, responses over SURF's and SIFT's whole range:
    decoded within half a position step and within half a step of the responses' log scale; sizes and
    angles as float16; octave numbers and signs exact."""
    from objrec.modeldb.preparation import keypoint_columns, keypoint_rows

    w, h = size
    rng = np.random.default_rng(w)
    n = 2000
    xy = np.c_[rng.uniform(-1, w + 1, n), rng.uniform(-1, h + 1, n)].astype(np.float32)
    xy[:4] = [[-1, -1], [w + 1, h + 1], [0, h], [w, 0]]  # the extent's corners
    response = np.float32(10.0 ** rng.uniform(-6, 9, n))  # SIFT's ~1e-2 to SURF's Hessians beyond float16
    octave = rng.integers(-1, 8, n) | (rng.integers(0, 4, n) << 8)  # SIFT's layer bits above the octave
    desc = np.zeros((n, 8), np.float32)
    f = Features(xy, rng.uniform(1, 300, n), rng.uniform(0, 360, n), response, octave, rng.choice([-1, 1], n), desc)
    rows = keypoint_rows(f, w, h)
    assert rows.dtype == KEYPOINT_DTYPE and rows.dtype.itemsize == 12
    got = Features(**keypoint_columns(rows, w, h), descriptors=desc)
    assert_stored_positions(got.xy, f.xy, w, h)
    np.testing.assert_allclose(got.response, f.response, rtol=RESPONSE_RTOL)
    # Sorting the stored integers ranks as the responses do, but for those within a step of each other.
    order = np.argsort(rows["response"], kind="stable")
    assert (np.diff(f.response[order]) >= -f.response[order][1:] * 2 * RESPONSE_RTOL).all()
    np.testing.assert_array_equal(got.size, f.size.astype(np.float16))
    np.testing.assert_array_equal(got.angle, f.angle.astype(np.float16))
    np.testing.assert_array_equal(got.octave, (octave & 0xFF).astype(np.uint8).view(np.int8))
    np.testing.assert_array_equal(got.laplacian, f.laplacian)
    with pytest.raises(ValueError, match="unknown dtype"):
        keypoint_columns(np.zeros(3, [("xy", "<f8", (2,))]), w, h)
    f.response[:3] = [0.0, -1.0, 2.0**-40]  # below the scale: its lowest step, without a warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert keypoint_rows(f, w, h)["response"][:3].tolist() == [0, 0, 0]


def _wide_rows(f: Features, width: int, height: int) -> np.ndarray:
    """Keypoint rows as schema 3 wrote them (float32 positions and responses)."""
    rows = np.empty(len(f), WIDE_KEYPOINT_DTYPE)
    for k in ("xy", "size", "angle", "response", "laplacian"):
        rows[k] = getattr(f, k)
    rows["octave"] = (np.asarray(f.octave, np.int64) & 0xFF).astype(np.uint8).view(np.int8)
    return rows


def test_a_schema3_database_is_read_and_compacted_as_it_is(tmp_path, monkeypatch):
    """A database written by schema 3 (18-byte rows) opens without an upgrade and gives its stored float32
    positions exactly. What is enrolled into it is written in packed rows (schema 4), and a compaction that
    merges old and new shards keeps each object's rows as stored: same content hashes, same database id."""
    import objrec.modeldb.preparation as preparation
    import objrec.modeldb.store as store

    path = tmp_path / "db"
    covers = {f"c{i}": synthetic_cover(20 + i, (150, 190)) for i in range(4)}
    with monkeypatch.context() as m:
        m.setattr(preparation, "keypoint_rows", _wide_rows)
        m.setattr(store, "SCHEMA_VERSION", 3)
        old = ModelDB.create(path, detectors=DETECTORS)
        for name in list(covers)[:3]:
            old.enroll(name, covers[name])  # one shard each
    db = ModelDB.open(path)
    assert db.manifest["schema_version"] == 3
    for name in list(covers)[:3]:
        for kind, f in extract_model_features(covers[name], DETECTORS).items():
            keep = strongest_spread(f.xy, f.response, model_feature_cap(kind, 150, 190), 150, 190)
            got = db.get(name).features[kind]
            np.testing.assert_array_equal(got.xy, f.xy[keep])  # float32 as schema 3 stored them
            np.testing.assert_array_equal(got.response, f.response[keep])
    before = {n: db.get(n).features for n in list(covers)[:3]}
    db.enroll("c3", covers["c3"])
    assert db.manifest["schema_version"] == SCHEMA_VERSION
    db.remove("c0")
    content = (db.database_id, {n: db.info(n).sha256 for n in db.names})
    assert db.compact() == 3  # the dead row's shard and the small ones
    dtypes = sorted(
        str(np.load(path / "shards" / e["id"] / f"{k}.keypoints.npy", mmap_mode="r").dtype)
        for e in db.manifest["shards"]
        for k in DETECTORS
    )
    assert dtypes == sorted([str(WIDE_KEYPOINT_DTYPE)] * 2 + [str(KEYPOINT_DTYPE)] * 2)  # a shard per row type
    again = ModelDB.open(path)
    assert again.verify() == [] and (again.database_id, {n: again.info(n).sha256 for n in again.names}) == content
    for name in ("c1", "c2"):
        for kind, f in before[name].items():
            np.testing.assert_array_equal(again.get(name).features[kind].xy, f.xy)
            np.testing.assert_array_equal(again.get(name).features[kind].descriptors, f.descriptors)


# -- schema 2 databases: written here as the previous objrec wrote them --------------------------------------


def _npy(a: np.ndarray) -> bytes:
    buf = io.BytesIO()
    np.save(buf, a, allow_pickle=False)
    return buf.getvalue()


def _legacy_rows(f: Features) -> np.ndarray:
    rows = np.empty(len(f), LEGACY_KEYPOINT_DTYPE)
    for k in LEGACY_KEYPOINT_DTYPE.names:
        rows[k] = getattr(f, k)
    return rows


def _write_schema2(path: Path, images: dict[str, np.ndarray], per_shard: int = 2) -> dict[str, dict]:
    """A schema 2 database as objrec wrote it (every feature, 25-byte keypoints, float16 SURF, PNG images);
    returns each object's stored features for comparison."""
    from objrec.modeldb.preparation import content_sha256, thumb_sha256, thumbnail

    names = list(images)
    shards, feats_by_name = [], {}
    for si in range(0, len(names), per_shard):
        sid = f"s{si // per_shard:06d}-{si:08x}"
        folder = path / "shards" / sid
        folder.mkdir(parents=True)
        entries, imgs, thumbs = [], [], []
        kps: dict[str, list] = {k: [] for k in DETECTORS}
        descs: dict[str, list] = {k: [] for k in DETECTORS}
        for seq, name in enumerate(names[si : si + per_shard], start=si):
            img = images[name]
            feats = extract_model_features(img, DETECTORS)
            feats_by_name[name] = feats
            png = cv2.imencode(".png", img)[1].reshape(-1)
            k = {kind: _legacy_rows(f) for kind, f in feats.items()}
            d = {
                "surf": feats["surf"].descriptors.astype(np.float16),
                "sift": feats["sift"].descriptors.astype(np.uint8),
            }
            thumb = thumbnail(img)
            entries.append(
                {
                    "name": name, "width": img.shape[1], "height": img.shape[0], "seq": seq,
                    "sha256": content_sha256(png, k, d), "source": None, "image_bytes": int(png.size),
                    "n_features": {kind: len(f) for kind, f in feats.items()}, "thumb_sha256": thumb_sha256(thumb),
                }
            )  # fmt: skip
            imgs.append(png)
            thumbs.append(thumb)
            for kind in DETECTORS:
                kps[kind].append(k[kind])
                descs[kind].append(d[kind])
        files = {"images.npy": _npy(np.concatenate(imgs)), "thumbs.npy": _npy(np.stack(thumbs))}
        for kind in DETECTORS:
            files[f"{kind}.keypoints.npy"] = _npy(np.concatenate(kps[kind]))
            files[f"{kind}.descriptors.npy"] = _npy(np.concatenate(descs[kind]))
        files["objects.json"] = json.dumps({"format": "objrec-modeldb-shard", "objects": entries}).encode()
        for fname, data in files.items():
            (folder / fname).write_bytes(data)
        digests = {fname: hashlib.sha256(data).hexdigest() for fname, data in files.items()}
        shards.append({"id": sid, "n_objects": len(entries), "removed": [], "files": digests})
    manifest = {
        "format": "objrec-modeldb", "schema_version": 2, "library_version": "0.1.0", "detectors": DETECTORS,
        "descriptor_storage": {"sift": "uint8", "surf": "float16"}, "shards": shards, "next_seq": len(names),
        "next_shard": len(shards), "database_id": "0123456789abcdef", "compatible_ids": [], "retired": [],
    }  # fmt: skip
    (path / "manifest.json").write_text(json.dumps(manifest))
    return feats_by_name


@pytest.fixture()
def schema2(tmp_path):
    images = {f"c{i}": synthetic_cover(60 + i, (200, 240)) for i in range(5)}
    path = tmp_path / "old"
    feats = _write_schema2(path, images)
    return path, images, feats


def _snapshot(path: Path) -> dict[str, str]:
    """Every file of the database (but its lock file) with its sha256."""
    files = [p for p in path.rglob("*") if p.is_file() and p.name != ".lock"]
    return {str(p.relative_to(path)): hashlib.sha256(p.read_bytes()).hexdigest() for p in files}


def test_a_schema2_database_is_refused_naming_the_upgrade_command(schema2):
    path, _, _ = schema2
    with pytest.raises(ModelDBError, match=rf"schema 2 model database.*objrec db upgrade --db {path}"):
        ModelDB.open(path)


def test_upgrade_converts_in_place_capping_and_reencoding_what_is_stored(
    schema2, assert_stored_image, assert_stored_positions
):
    path, images, feats = schema2
    old_shards = {p.name for p in (path / "shards").iterdir()}
    db = ModelDB.upgrade(path)
    assert db.manifest["schema_version"] == SCHEMA_VERSION == 4 and db.names == list(images)
    assert db.verify() == [] and not old_shards & {p.name for p in (path / "shards").iterdir()}
    assert "0123456789abcdef" in db.compatible_ids  # the prefilter stays valid
    assert max(len(fs["sift"]) for fs in feats.values()) > model_feature_cap("sift", 200, 240)  # the cap applies
    for name, img in images.items():
        for kind, f in feats[name].items():
            cap = model_feature_cap(kind, img.shape[1], img.shape[0])
            keep = strongest_spread(f.xy, f.response, cap, img.shape[1], img.shape[0])
            got = db.get(name).features[kind]
            assert len(got) == min(len(f), cap)
            assert_stored_positions(got.xy, f.xy[keep], img.shape[1], img.shape[0])
            tol = 0.5 / SURF_INT8_SCALE + 2e-3 if kind == "surf" else 0
            np.testing.assert_allclose(got.descriptors, f.descriptors[keep], atol=tol)
        assert_stored_image(db.image(name), img)
    assert ModelDB.upgrade(path).database_id == db.database_id  # a current database is only opened


@pytest.mark.parametrize("where", ["second shard", "manifest"])
def test_an_interrupted_upgrade_leaves_the_old_database_as_it_was(schema2, monkeypatch, where):
    import objrec.modeldb.store as store
    import objrec.modeldb.upgrade as upgrade

    path, images, _ = schema2
    before = _snapshot(path)
    monkeypatch.setattr(upgrade, "ENROLL_BATCH", 2)
    calls = []

    def failing(*args, **kwargs):
        calls.append(1)
        if where == "manifest" or len(calls) == 2:
            raise KeyboardInterrupt("killed")
        return real(*args, **kwargs)

    name = "atomic_write_json" if where == "manifest" else "write_shard"
    real = getattr(store, name)
    monkeypatch.setattr(store, name, failing)
    with pytest.raises(KeyboardInterrupt):
        ModelDB.upgrade(path)
    assert _snapshot(path) == before
    with pytest.raises(ModelDBError, match="objrec db upgrade"):
        ModelDB.open(path)
    monkeypatch.undo()
    assert ModelDB.upgrade(path).names == list(images)


# -- a full disk -----------------------------------------------------------------------------------------


def _free(monkeypatch, free_bytes):
    import shutil as real_shutil

    import objrec.modeldb.shards as shards

    usage = real_shutil.disk_usage("/")
    monkeypatch.setattr(shards.shutil, "disk_usage", lambda p: usage._replace(free=free_bytes))


def test_too_little_free_space_refuses_a_batch_before_writing(tmp_path, monkeypatch):
    db = ModelDB.create(tmp_path / "db", detectors={"sift": DETECTORS["sift"]})
    db.enroll("a", synthetic_cover(1, (160, 200)))
    before = _snapshot(db.path)
    _free(monkeypatch, 1 << 20)
    with pytest.raises(DiskFullError, match="not enough free disk space"):
        db.enroll("b", synthetic_cover(2, (160, 200)))
    with pytest.raises(DiskFullError, match="not enough free disk space"):
        db.enroll_many([("c", synthetic_cover(3, (160, 200)))], progress=False)
    assert _snapshot(db.path) == before
    assert ModelDB.open(db.path).names == ["a"]


@pytest.mark.parametrize("target", ["shard file", "manifest"])
def test_a_disk_filling_up_while_writing_is_a_clear_error_and_undone(tmp_path, monkeypatch, target):
    import objrec.modeldb.shards as shards
    import objrec.modeldb.store as store

    db = ModelDB.create(tmp_path / "db", detectors={"sift": DETECTORS["sift"]})
    db.enroll("a", synthetic_cover(1, (160, 200)))
    before = _snapshot(db.path)
    module, name = (shards, "atomic_write_bytes") if target == "shard file" else (store, "atomic_write_json")
    real = getattr(module, name)
    calls = []

    def filling(path, data):
        calls.append(path)
        if len(calls) == 3 or target == "manifest":
            raise OSError(errno.ENOSPC, "No space left on device", str(path))
        return real(path, data)

    monkeypatch.setattr(module, name, filling)
    with pytest.raises(DiskFullError, match="disk is full"):
        db.enroll("b", synthetic_cover(2, (160, 200)))
    assert _snapshot(db.path) == before  # no shard, no .tmp left
    monkeypatch.undo()
    assert ModelDB.open(db.path).names == ["a"]
    db.enroll("b", synthetic_cover(2, (160, 200)))
    assert ModelDB.open(db.path).names == ["a", "b"]


def test_an_upgrade_without_room_leaves_the_old_database(schema2, monkeypatch):
    path, _, _ = schema2
    before = _snapshot(path)
    _free(monkeypatch, 1 << 20)
    with pytest.raises(DiskFullError):
        ModelDB.upgrade(path)
    assert _snapshot(path) == before


# -- the command line ------------------------------------------------------------------------------------


def test_db_upgrade_and_info_report_bytes_per_object(schema2, capsys):
    path, images, _ = schema2
    assert main(["db", "upgrade", "--db", str(path), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["upgraded_from"] == 2 and doc["schema_version"] == 4 and doc["objects"] == len(images)
    assert doc["disk_bytes"] < doc["disk_bytes_before"]
    assert main(["db", "info", "--db", str(path), "--json"]) == 0
    info = json.loads(capsys.readouterr().out)
    total = sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    assert info["disk_bytes"] == total and info["disk_bytes_per_object"] == round(total / len(images))
    assert main(["db", "upgrade", "--db", str(path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["upgraded_from"] is None


def test_the_upgrade_caps_an_objects_own_features_and_keeps_its_views_rows(assert_stored_positions):
    """An object enrolled with synthesised views: its own rows (first in the view table) are capped, the views'
    rows follow unchanged and the table's counts say so. The second view's rows here are another image's
    features: the conversion reads only the table."""
    from objrec.modeldb.preparation import keypoint_columns
    from objrec.modeldb.upgrade import convert_object

    sift = {"sift": DETECTORS["sift"]}
    img = synthetic_cover(9, (160, 200))
    own = extract_model_features(img, sift)["sift"]
    view = extract_model_features(synthetic_cover(10, (160, 200)), sift)["sift"]
    f = Features.concatenate([own, view])
    n_own = len(own)
    table = {"views": [[1.0, 0.0], [2.0, 0.0]], "n_features": {"sift": [n_own, len(view)]}}
    png = cv2.imencode(".png", img)[1].reshape(-1)
    entry = {"name": "v", "width": 160, "height": 200, "seq": 0, "views": "affine", "view_table": table}
    cap = n_own // 3
    p = convert_object(entry, png, {"sift": _legacy_rows(f)}, {"sift": f.descriptors.astype(np.uint8)}, None, cap)
    keep = strongest_spread(own.xy, own.response, cap, 160, 200)
    rows = p.keypoints["sift"]
    assert p.entry["view_table"]["n_features"]["sift"] == [cap, len(view)]
    assert p.entry["n_features"]["sift"] == len(rows) == cap + len(view)
    xy = keypoint_columns(rows, 160, 200)["xy"]
    assert_stored_positions(xy[:cap], own.xy[keep], 160, 200)
    assert_stored_positions(xy[cap:], view.xy, 160, 200)
    np.testing.assert_array_equal(p.descriptors["sift"][cap:], view.descriptors)
