"""Enrolment on a Dask cluster against the threaded enrolment as the reference: the same records in the same
order, byte-identical stored features, the same shards (batch boundaries), report and shortlists."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from objrec.cli import main
from objrec.data import sample_background, sample_objects
from objrec.modeldb import ModelDB
from objrec.modeldb.enrolment import items_from_dir
from objrec.scenes import compose_scene

pytest.importorskip("distributed", reason="enrolment on a cluster needs Dask (pip install 'objrec[dask]')")

pytestmark = pytest.mark.dask


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Six single-image objects (the samples and rotated/cropped copies), one object of two views in a
    sub-folder, and two images that fail (not an image; no features)."""
    d = tmp_path_factory.mktemp("covers")
    objs = sample_objects()
    for name, img in objs.items():
        cv2.imwrite(str(d / f"{name}.png"), img)
        cv2.imwrite(str(d / f"{name}_rot.jpg"), cv2.rotate(img, cv2.ROTATE_90_CLOCKWISE))
    views = d / "pagoda_views"
    views.mkdir()
    h, w = objs["pagoda"].shape[:2]
    cv2.imwrite(str(views / "a.png"), objs["pagoda"][: h * 2 // 3])
    cv2.imwrite(str(views / "b.png"), objs["pagoda"][h // 3 :, : w * 3 // 4])
    (d / "broken.png").write_bytes(b"\x89PNG not really")
    cv2.imwrite(str(d / "blank.png"), np.full((64, 64), 90, np.uint8))
    return d


def _items(folder):
    items = items_from_dir(folder)
    return [*items, ("dahlia_array", sample_objects()["dahlia"][::2, ::2].copy())]


def _batches(monkeypatch) -> list[list[str]]:
    """The record keys of every batch committed from now on, in commit order."""
    seen: list[list[str]] = []
    commit = ModelDB.commit_batch

    def spy(self, batch, replace):
        seen.append([p.entry["name"] for p in batch])
        return commit(self, batch, replace)

    monkeypatch.setattr(ModelDB, "commit_batch", spy)
    return seen


@pytest.fixture(scope="module")
def threaded(folder, tmp_path_factory):
    with pytest.MonkeyPatch.context() as mp:
        batches = _batches(mp)
        db = ModelDB.create(tmp_path_factory.mktemp("ref") / "db")
        report = db.enroll_many(_items(folder), batch_size=3, workers=2, progress=False)
    return db, report, batches


def _query_features(db):
    """SURF features of two composed scenes, each holding one of the enrolled covers."""
    from objrec.features.model import extract_model_features

    objs = sample_objects()
    out = []
    for i, name in enumerate(("cover", "dahlia")):
        scene = compose_scene(sample_background((640, 480)), {name: objs[name]}, rng=i, frame_size=(640, 480))
        out.append(extract_model_features(scene.image, {"surf": db.detectors["surf"]})["surf"])
    return out


def assert_same_database(a: ModelDB, b: ModelDB) -> None:
    assert b.records == a.records and b.names == a.names
    assert [s["files"] for s in b.manifest["shards"]] == [s["files"] for s in a.manifest["shards"]]  # sha256s
    for key in a.records:
        ia, ib = a.info(key), b.info(key)
        assert (ib.sha256, ib.source, ib.n_features) == (ia.sha256, ia.source, ia.n_features)
        fa, fb = a.get(key, with_image=True), b.get(key, with_image=True)
        np.testing.assert_array_equal(fb.image, fa.image)
        for kind in a.detectors:
            for field in ("xy", "size", "angle", "response", "octave", "laplacian", "descriptors"):
                got, want = getattr(fb.features[kind], field), getattr(fa.features[kind], field)
                assert got.dtype == want.dtype and got.tobytes() == want.tobytes(), (key, kind, field)
    for kind in a.detectors:
        (da, oa), (dbb, ob) = a.descriptor_table(kind), b.descriptor_table(kind)
        assert da.dtype == dbb.dtype and da.tobytes() == dbb.tobytes() and np.array_equal(oa, ob)


def test_local_cluster_gives_the_threaded_database(threaded, folder, tmp_path, monkeypatch):
    """Two in-process workers, once reading the files by path and once sent their bytes: records, features,
    shards, report and shortlists equal the threads'; a rerun skips everything."""
    from dask.distributed import Client, LocalCluster

    from objrec.matching.shortlist import make_matcher, prepare_indexes

    ref, ref_report, ref_batches = threaded
    assert len(ref_report.enrolled) == 8 and len(ref_report.failed) == 2  # the reference itself is not empty
    assert len(ref_batches) > 2
    queries = _query_features(ref)
    prepare_indexes(ref, kinds=["surf"])  # small: retrieval is forced, on an index made once
    want = [make_matcher(ref, "surf", retrieval=True).shortlist(q) for q in queries]
    assert all(len(w) for w in want)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        with Client(cluster) as client:
            for send_bytes in (False, True):
                batches = _batches(monkeypatch)
                db = ModelDB.create(tmp_path / f"db{send_bytes}")
                report = db.enroll_many(
                    _items(folder), batch_size=3, progress=False, scheduler=client, send_bytes=send_bytes
                )
                assert (report.enrolled, report.skipped) == (ref_report.enrolled, ref_report.skipped)
                assert [(f.name, f.source) for f in report.failed] == [(f.name, f.source) for f in ref_report.failed]
                assert batches == ref_batches
                assert_same_database(ref, db)
                prepare_indexes(db, kinds=["surf"])
                got = [make_matcher(db, "surf", retrieval=True).shortlist(q) for q in queries]
                assert [g.tolist() for g in got] == [w.tolist() for w in want]
            again = ModelDB.open(db.path).enroll_many(_items(folder), progress=False, scheduler=client)
    assert again.enrolled == [] and sorted(again.skipped) == sorted(ref_report.enrolled)
    assert len(again.failed) == 2


def test_cli_scheduler_of_a_running_cluster(threaded, folder, tmp_path, capsys):
    """objrec enroll --from DIR --scheduler ADDRESS with worker processes reading the files: the threads'
    database; a rerun resumes (skips every object)."""
    from dask.distributed import LocalCluster

    ref, _, _ = threaded
    db = tmp_path / "db"
    argv = ["enroll", "--db", str(db), "--from", str(folder), "--no-progress"]
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        assert main([*argv, "--scheduler", cluster.scheduler_address]) == 2  # the two bad images
        out = capsys.readouterr()
        assert "enrolled 7, skipped 0" in out.out and "failed 2" in out.out
        assert main([*argv, "--scheduler", cluster.scheduler_address]) == 2
        assert "enrolled 0, skipped 7" in capsys.readouterr().out
    got = ModelDB.open(db)
    want_keys = [k for k in ref.records if not k.startswith("dahlia_array")]
    assert got.records == want_keys
    for key in want_keys:
        assert got.info(key).sha256 == ref.info(key).sha256  # the hash of image bytes, keypoints, descriptors


def test_cli_bad_scheduler_is_one_line_and_writes_nothing(folder, tmp_path, capsys):
    db = tmp_path / "db"
    assert main(["enroll", "--db", str(db), "--from", str(folder), "--scheduler", "bogus://nowhere"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "--scheduler: cannot connect to bogus://nowhere" in err[0]
    assert not db.exists()
    assert main(["enroll", "--db", str(db), f"cover={folder / 'cover.png'}", "--scheduler", "tcp://127.0.0.1:1"]) == 2
    assert "apply to --from" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        main(["enroll", "--db", str(db), "--from", str(folder), "--scheduler", "x", "--workers", "2"])
    assert exc.value.code == 2 and "not allowed with argument --scheduler" in capsys.readouterr().err
    assert not db.exists()


def test_unreachable_scheduler_names_address_and_reason():
    from objrec.cluster import dask_client

    with pytest.raises(ValueError, match=r"cannot connect to tcp://127\.0\.0\.1:1 \(.*"):
        with dask_client(scheduler="tcp://127.0.0.1:1", timeout="0.5s"):
            pass


def test_one_extraction_thread_gives_the_two_threads_database(threaded, folder, tmp_path):
    """Two extraction threads (each SURF on its own Numba thread, concurrently where Numba's threading layer
    allows it) enrol exactly what one thread does (SURF's kernels parallel inside): features, images, shards."""
    import numba

    from objrec.features import model

    db = ModelDB.create(tmp_path / "db")
    report = db.enroll_many(_items(folder), batch_size=3, workers=1, progress=False)
    assert report.enrolled == threaded[1].enrolled
    assert_same_database(threaded[0], db)
    # after a parallel launch the layer is known: SURF holds the lock only where the layer is not thread safe
    assert model._serialised("surf") == (numba.threading_layer() not in ("omp", "tbb"))
    assert not model._serialised("sift")
