"""``objrec db`` and the database under concurrent writers, readers and killed processes."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import cv2
import numpy as np
import pytest

from objrec import ModelDB, Recognizer
from objrec.cli import main
from objrec.data import synthetic_cover
from objrec.modeldb import ModelDBError

SIFT_ONLY = {"sift": {"n_features": 0}}


def _images(folder: Path, n: int, start: int = 100, size=(180, 220)) -> dict[str, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    out = {}
    for i in range(n):
        p = folder / f"c{start + i:03d}.png"
        cv2.imwrite(str(p), synthetic_cover(start + i, size))
        out[p.stem] = p
    return out


def _scene(img: np.ndarray) -> np.ndarray:
    """The object pasted at 80% size into a plain 480x360 frame, slightly rotated."""
    frame = np.full((360, 480, 3), 90, np.uint8)
    h, w = img.shape[:2]
    A = cv2.getRotationMatrix2D((w / 2, h / 2), 12, 0.8)
    A[:, 2] += (240 - w / 2, 180 - h / 2)
    return cv2.warpAffine(img, A, (480, 360), dst=frame, borderMode=cv2.BORDER_TRANSPARENT)


def _db_json(capsys, *argv) -> tuple[int, dict]:
    rc = main(["db", *argv, "--json"])
    out = capsys.readouterr().out
    return rc, json.loads(out) if out.strip() else {}


def _unnamed(path: Path) -> set[str]:
    """Independent listing of what no commit names: shard folders minus the manifest's and retired ones,
    plus temporary files."""
    m = json.loads((path / "manifest.json").read_text())
    keep = {s["id"] for s in m["shards"]} | {r["id"] for r in m.get("retired", [])}
    out = {str(p) for p in (path / "shards").iterdir() if p.name not in keep} if (path / "shards").exists() else set()
    return out | {str(p) for p in path.rglob("*.tmp")}


@pytest.fixture()
def db(tmp_path):
    d = ModelDB.create(tmp_path / "db", detectors=SIFT_ONLY)
    d.enroll_many(list(_images(tmp_path / "imgs", 3).items()), progress=False)
    return d


def test_list_info_rename_remove_compact(db, capsys):
    rc, doc = _db_json(capsys, "list", "--db", str(db.path))
    assert rc == 0 and [o["name"] for o in doc["objects"]] == db.names == ["c100", "c101", "c102"]
    assert doc["objects"][0]["n_features"]["sift"] == len(db.get("c100").features["sift"])
    assert doc["objects"][0]["source"].endswith("c100.png")
    rc, doc = _db_json(capsys, "info", "--db", str(db.path))
    assert rc == 0 and doc["objects"] == 3 and doc["database_id"] == db.database_id
    assert doc["prefilter"]["status"] == "absent" and doc["detectors"] == SIFT_ONLY
    before = db.get("c101").features["sift"].descriptors.copy()
    rc, doc = _db_json(capsys, "rename", "--db", str(db.path), "c101", "poster")
    assert rc == 0 and doc["database_id"] != db.database_id
    again = ModelDB.open(db.path)
    assert again.names == ["c100", "poster", "c102"] and again.database_id == doc["database_id"]
    np.testing.assert_array_equal(again.get("poster").features["sift"].descriptors, before)
    assert again.verify() == []
    rc, doc = _db_json(capsys, "remove", "--db", str(db.path), "c100", "c102")
    assert rc == 0 and ModelDB.open(db.path).names == ["poster"] and doc["objects"] == 1
    rc, doc = _db_json(capsys, "info", "--db", str(db.path), "poster")
    assert rc == 0 and doc["name"] == "poster" and doc["source"].endswith("c101.png")
    # The removal already rewrote its mostly dead shard: nothing is left to compact.
    rc, doc = _db_json(capsys, "compact", "--db", str(db.path))
    assert rc == 0 and doc["shards_rewritten"] == 0 and doc["objects"] == 1
    np.testing.assert_array_equal(ModelDB.open(db.path).get("poster").features["sift"].descriptors, before)
    assert ModelDB.open(db.path).verify() == []


def test_bad_names_are_refused_and_change_nothing(db, capsys):
    before = (db.path / "manifest.json").read_bytes()
    assert main(["db", "rename", "--db", str(db.path), "nope", "x"]) == 2
    assert "unknown object 'nope'" in capsys.readouterr().err
    assert main(["db", "rename", "--db", str(db.path), "c100", "c101"]) == 2
    assert "'c101' is already enrolled" in capsys.readouterr().err
    assert main(["db", "rename", "--db", str(db.path), "c100", "../x"]) == 2
    assert main(["db", "remove", "--db", str(db.path), "c100", "nope"]) == 2  # nothing removed
    assert (db.path / "manifest.json").read_bytes() == before
    assert main(["db", "list", "--db", str(db.path / "missing")]) == 2


def test_list_and_info_show_widths_and_set_width_records_one(db, capsys):
    db.set_width("c101", 0.135)
    rc, doc = _db_json(capsys, "list", "--db", str(db.path))
    assert rc == 0 and [o["width_m"] for o in doc["objects"]] == [None, 0.135, None]
    assert main(["db", "list", "--db", str(db.path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert "  width 0.135 m  " in lines[1] and "  width " not in lines[0] + lines[2]
    rc, doc = _db_json(capsys, "set-width", "--db", str(db.path), "c100", "0.25")
    assert rc == 0 and doc == {"name": "c100", "width_m": 0.25, "database_id": db.database_id}
    assert ModelDB.open(db.path).info("c100").width_m == 0.25
    rc, doc = _db_json(capsys, "info", "--db", str(db.path), "c100")
    assert rc == 0 and doc["width_m"] == 0.25
    assert main(["db", "info", "--db", str(db.path), "c100"]) == 0
    assert "physical width: 0.25 m" in capsys.readouterr().out
    before = (db.path / "manifest.json").read_bytes()
    for argv, needle in ((["c100", "-1"], "WIDTH_M"), (["nope", "0.1"], "unknown object 'nope'")):
        assert main(["db", "set-width", "--db", str(db.path), *argv]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err, err
    assert (db.path / "manifest.json").read_bytes() == before


def test_verify_names_damage_and_cleans_orphans(db, capsys):
    rc, doc = _db_json(capsys, "verify", "--db", str(db.path))
    assert rc == 0 and doc["ok"] and doc["orphans"] == [] and doc["problems"] == []
    orphan = db.path / "shards" / "s000777-0123abcd"
    orphan.mkdir()
    (orphan / "images.npy").write_bytes(b"half a write")
    (db.path / ".manifest.json.123.tmp").write_text("{")
    rc, doc = _db_json(capsys, "verify", "--db", str(db.path))
    assert rc == 0 and doc["ok"] and set(doc["orphans"]) == _unnamed(db.path) and len(doc["orphans"]) == 2
    rc, doc = _db_json(capsys, "verify", "--db", str(db.path), "--clean")
    assert rc == 0 and set(doc["cleaned"]) == set(doc["orphans"]) and not orphan.exists()
    assert _unnamed(db.path) == set()
    (shard,) = {p for p in (db.path / "shards").iterdir()}
    target = shard / "sift.descriptors.npy"
    data = bytearray(target.read_bytes())
    data[-5] ^= 0xFF
    target.write_bytes(bytes(data))
    rc, doc = _db_json(capsys, "verify", "--db", str(db.path))
    assert rc == 2 and not doc["ok"] and any("sift.descriptors.npy" in p and "sha256" in p for p in doc["problems"])


def test_a_stale_handle_sees_the_other_writers_name(db, tmp_path):
    """Two handles on one database: the second re-reads the manifest under the lock before it writes."""
    (p,) = _images(tmp_path / "more", 1, start=200).values()
    late = ModelDB.open(db.path)
    db.enroll("x", p)
    with pytest.raises(ModelDBError, match="'x' is already enrolled"):
        late.enroll("x", cv2.imread(str(_images(tmp_path / "other", 1, start=300)["c300"])))
    report = late.enroll_many([("x", p)], progress=False)  # the same source file: a resume skips it
    assert report.skipped == ["x"] and not report.failed
    assert ModelDB.open(db.path).names == ["c100", "c101", "c102", "x"]


_READER = textwrap.dedent("""
    import sys, os, traceback
    import cv2
    from objrec import ModelDB, Recognizer
    db_path, scene_path, stop = sys.argv[1:4]
    scene = cv2.imread(scene_path)
    n = 0
    try:
        while not os.path.exists(stop) or n < 3:
            db = ModelDB.open(db_path)
            found = [d.name for d in Recognizer(db, track=False, prefilter=None).process(scene).detections]
            assert found == ["c100"], found
            n += 1
    except Exception:
        traceback.print_exc()
        sys.exit(1)
    print(n)
""")


def test_four_writers_and_a_reader(db, tmp_path):
    """4 processes enrol 5 objects each (one commit per object) while a fifth detects in a loop."""
    scene = tmp_path / "scene.png"
    cv2.imwrite(str(scene), _scene(db.image("c100")))
    stop = tmp_path / "stop"
    env = dict(os.environ, PYTHONWARNINGS="ignore")
    reader = subprocess.Popen(
        [sys.executable, "-c", _READER, str(db.path), str(scene), str(stop)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    writers = []
    for w in range(4):
        imgs = _images(tmp_path / f"w{w}", 5, start=400 + 10 * w)
        pairs = [f"{n}={p}" for n, p in imgs.items()]
        cmd = [sys.executable, "-m", "objrec", "enroll", "--db", str(db.path), *pairs]
        writers.append(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env))
    outs = [w.communicate(timeout=600) for w in writers]
    stop.touch()
    r_out, r_err = reader.communicate(timeout=600)
    for w, (out, err) in zip(writers, outs, strict=True):
        assert w.returncode == 0, err
        assert out.count("enrolled ") == 5
    assert reader.returncode == 0, r_err
    assert int(r_out.split()[-1]) >= 3
    final = ModelDB.open(db.path)
    expected = {f"c{400 + 10 * w + i:03d}" for w in range(4) for i in range(5)} | {"c100", "c101", "c102"}
    assert set(final.names) == expected and final.verify() == []
    assert main(["db", "verify", "--db", str(db.path)]) == 0


_BULK = textwrap.dedent("""
    import sys
    from objrec import ModelDB
    from objrec.modeldb.enrolment import items_from_dir
    db = ModelDB.open(sys.argv[1])
    print("started", flush=True)
    db.enroll_many(items_from_dir(sys.argv[2]), batch_size=2, workers=1, progress=False)
    print("done", flush=True)
""")


def _bulk(db_path: Path, folder: Path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", _BULK, str(db_path), str(folder)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.slow
def test_sigkill_during_bulk_enrolment(tmp_path, capsys):
    """SIGKILL at random moments of a bulk enrolment (10 trials): the database opens, every listed object is
    intact (features equal to an uninterrupted enrolment's) and detected, and verify --clean removes what the
    killed writer left."""
    folder = tmp_path / "imgs"
    images = _images(folder, 12, start=500, size=(300, 360))
    ref = ModelDB.create(tmp_path / "ref", detectors=SIFT_ONLY)
    p = _bulk(ref.path, folder)
    p.stdout.readline()
    t0 = time.perf_counter()
    assert p.wait(timeout=600) == 0, p.stderr.read()
    span = time.perf_counter() - t0
    ref = ModelDB.open(ref.path)
    assert sorted(ref.names) == sorted(images)
    rng = np.random.default_rng(7)
    partial = 0
    for trial in range(10):
        path = tmp_path / f"db{trial}"
        ModelDB.create(path, detectors=SIFT_ONLY)
        p = _bulk(path, folder)
        assert p.stdout.readline().strip() == "started"
        time.sleep(float(rng.uniform(0, span)))
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=60)
        db = ModelDB.open(path)
        assert db.verify() == [] and set(db.names) <= set(images)
        partial += 0 < len(db) < len(images)
        for name in db.names:
            np.testing.assert_array_equal(
                db.get(name).features["sift"].descriptors, ref.get(name).features["sift"].descriptors
            )
        if db.names:
            name = db.names[-1]
            found = Recognizer(db, track=False, prefilter=None).process(_scene(db.image(name))).detections
            assert [d.name for d in found] == [name]
        rc, doc = _db_json(capsys, "verify", "--db", str(path))
        assert rc == 0 and set(doc["orphans"]) == _unnamed(path)
        rc, doc = _db_json(capsys, "verify", "--db", str(path), "--clean")
        assert rc == 0 and _unnamed(path) == set()
    print(f"{partial} of 10 kills landed mid-enrolment")
