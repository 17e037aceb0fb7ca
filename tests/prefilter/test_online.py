"""The adapting prefilter: what it harvests, how it refits, backs off and forgets."""

from __future__ import annotations

import os

import numpy as np
import pytest

from objrec import Recognizer
from objrec.data import sample_objects
from objrec.prefilter import regions_to_mask
from objrec.prefilter.online import AdaptParams, OnlinePrefilter, near_boxes
from objrec.prefilter.scenes import generated_background
from objrec.scenes import compose_scene


def _stream(seed: int, n: int, size=(640, 480)):
    """A slow pan over a generated scene the prefilter never saw (its seeds are not the built-in ones)."""
    big = generated_background(np.random.default_rng(seed), (size[0] + 2 * n, size[1]))
    return [np.ascontiguousarray(big[:, 2 * i : 2 * i + size[0]]) for i in range(n)]


def _rejected(pf, frames) -> float:
    return float(np.mean([1.0 - pf.propose(f).area_fraction(f.shape[1], f.shape[0]) for f in frames]))


def test_near_matches_a_brute_force_loop():
    cells = np.array([[x, y, x + 16, y + 16] for y in range(0, 160, 16) for x in range(0, 320, 16)], float)
    boxes = [(40.0, 30.0, 90.0, 70.0), (200.0, 100.0, 230.0, 150.0)]
    got = near_boxes(cells, boxes, 10.0)
    want = [
        any(c[0] < b[2] + 10 and c[2] > b[0] - 10 and c[1] < b[3] + 10 and c[3] > b[1] - 10 for b in boxes)
        for c in cells
    ]
    assert got.tolist() == want and 0 < got.sum() < len(cells)


def test_adapts_to_an_unseen_background_and_keeps_the_objects(db, trained):
    objects = sample_objects()
    params = AdaptParams(refit_every=10, min_negatives=300, safety_every=0)
    online = OnlinePrefilter(trained, objects, params)
    frames = _stream(7, 60)
    before = _rejected(trained, frames[40:])
    for f in frames[:40]:
        online.observe(f, online.propose(f))
        online.wait()
    online.propose(frames[0])  # swaps in the last refit
    st = online.status()
    assert st["refits"] >= 2 and st["negatives"] >= 300 and st["positives"] > 0
    after = _rejected(online.current, frames[40:])
    # Adaptation removes at least 40% of the empty area the trained model still kept.
    assert 1.0 - after <= 0.6 * (1.0 - before), (before, after)
    rng = np.random.default_rng(3)
    kept = total = 0
    for i in range(12):
        sc = compose_scene(frames[40 + i], {"cover": objects["cover"]}, rng, (640, 480), area_fraction=(0.08, 0.2))
        m, o = regions_to_mask(online.current.propose(sc.image), (480, 640)), sc.object_mask > 0
        kept, total = kept + int((m & o).sum()), total + int(o.sum())
    assert kept / total >= 0.97
    assert online.current.database_id_ == trained.database_id_  # saved with the database's id


def test_refit_is_swapped_in_only_between_frames(trained):
    online = OnlinePrefilter(trained, sample_objects(), AdaptParams(refit_every=1, min_negatives=40, safety_every=0))
    frames = _stream(8, 8)
    for f in frames:
        online.observe(f, online.propose(f))
        online.wait()
        if online.refits:
            break
    assert online.refits >= 1
    before = online.current
    online.wait()
    assert online.current is before  # finished, but waiting for the next frame
    online.propose(frames[0])
    assert online.current is not before


def _until_busy(online: OnlinePrefilter, frames) -> None:
    """Frames in turn until the worker has a refit in progress."""
    for f in frames:
        online.observe(f, online.propose(f))
        if online._worker is not None and online._worker.busy:
            return
    raise AssertionError("no refit started")


def _busy_online(trained, seed: int) -> OnlinePrefilter:
    """An adapting prefilter whose worker has a refit in progress."""
    online = OnlinePrefilter(trained, sample_objects(), AdaptParams(refit_every=1, min_negatives=40, safety_every=0))
    _until_busy(online, _stream(seed, 8))
    return online


@pytest.mark.skipif(not hasattr(os, "sched_getscheduler"), reason="needs os.sched_getscheduler")
def test_refit_worker_runs_on_idle_cpu_only(trained):
    online = _busy_online(trained, 10)
    worker = online._worker
    assert os.sched_getscheduler(worker.pid) == os.SCHED_IDLE
    online.wait()
    assert online.refits == 1 and not worker.busy
    online.close()
    assert not worker.alive


def test_a_stopped_worker_is_started_again_once_then_the_model_is_kept(trained, caplog):
    import signal

    online = OnlinePrefilter(trained, sample_objects(), AdaptParams(refit_every=1, min_negatives=40, safety_every=0))
    frames = iter(_stream(14, 40))
    _until_busy(online, frames)
    os.kill(online._worker.pid, signal.SIGKILL)
    online.wait()
    assert online.worker_stops == 1 and online.adapting and online._worker is None
    _until_busy(online, frames)  # another worker, which gets the stores as they are
    online.wait()
    assert online.refits == 1
    _until_busy(online, frames)
    kept = online.current
    os.kill(online._worker.pid, signal.SIGKILL)
    with caplog.at_level("WARNING", logger="objrec"):
        online.wait()
        for _ in range(4):
            f = next(frames)
            online.observe(f, online.propose(f))
    assert not online.adapting and online._worker is None and online.current is kept
    assert len(caplog.records) == 1 and "keeps its current model" in caplog.records[0].message


def test_change_of_scene_forgets_and_a_miss_backs_off(trained):
    online = OnlinePrefilter(trained, sample_objects(), AdaptParams(refit_every=5, min_negatives=50, safety_every=0))
    for f in _stream(9, 12):
        online.observe(f, online.propose(f))
        online.wait()
    assert online.negatives.n > 0
    threshold = online.current.threshold_
    online.report_miss((100.0, 100.0, 300.0, 260.0), online.propose(_stream(9, 1)[0]))
    assert online.current.threshold_ == pytest.approx(threshold * 0.5) and online.backoffs == 1
    assert online.negatives.n == 0 or all(r[1] < online.frame - 5 for r in online.negatives.rows)
    assert online.positives.n > 0
    for f in _stream(21, 6):  # another scene entirely
        online.observe(f, online.propose(f))
    assert online.scene_resets == 1 and online.current is trained


def test_an_object_coming_into_view_is_not_a_change_of_scene(trained):
    cover = sample_objects()["cover"]
    online = OnlinePrefilter(trained, sample_objects(), AdaptParams(refit_every=10**6, safety_every=0))
    frames = _stream(13, 30)
    h, w = cover.shape[:2]
    s = 0.9 * 480 / h  # the cover fills 90% of the frame's height: about a third of the frame
    for i, f in enumerate(frames):
        x = -w * s + (w * s + 40) * min(i / 10, 1.0)  # slides in from the left over 10 frames, then stays
        H = np.array([[s, 0, x], [0, s, 24], [0, 0, 1]])
        img = compose_scene(f, {"cover": cover}, 0, (640, 480), homographies={"cover": H}).image if i >= 5 else f
        online.observe(img, online.propose(img))  # not detected: nothing to keep away from
    assert online.scene_resets == 0
    for f in _stream(21, 6):  # the camera turned to another scene
        online.observe(f, online.propose(f))
    assert online.scene_resets == 1


def test_recognizer_adapts_and_runs_the_safety_search(db, trained):
    objects = sample_objects()
    rec = Recognizer(db, prefilter=trained, adapt_prefilter=True, adapt_params=AdaptParams(safety_every=3), track=False)
    assert rec.adapter is not None and rec.prefilter_status == "given, adapting"
    rng = np.random.default_rng(5)
    frames = _stream(11, 6)
    found = 0
    for f in frames:
        sc = compose_scene(f, {"dahlia": objects["dahlia"]}, rng, (640, 480), area_fraction=(0.15, 0.2))
        r = rec.process(sc.image)
        found += [d.name for d in r.detections] == ["dahlia"]
        assert r.prefilter_boxes is not None
    assert found == len(frames)
    assert any(u.unit == "safety" for u in rec.scheduler.records) or any(s.unit == "safety" for s in r.skipped)
    assert rec.adapter.frame == len(frames)


def test_run_command_adapts_reports_and_saves(db, trained, tmp_path):
    import json
    import shutil

    import cv2

    from objrec.cli import main
    from objrec.prefilter import RegionPrefilter

    copy = tmp_path / "db"
    shutil.copytree(db.path, copy)
    trained.save(copy / "prefilter.json")
    frames = tmp_path / "frames"
    frames.mkdir()
    for i, f in enumerate(_stream(12, 10)):
        cv2.imwrite(str(frames / f"{i:03d}.png"), f)
    stats, out = tmp_path / "stats.json", tmp_path / "adapted"
    argv = ["run", "--db", str(copy), "--source", str(frames), "--no-display", "--budget-ms", "1000"]
    assert main([*argv, "--no-adapt", "--save-prefilter", str(out)]) == 2  # nothing would be learned
    assert main([*argv, "--stats", str(stats), "--save-prefilter", str(out)]) == 0  # adapts by default
    doc = json.loads(stats.read_text())
    assert doc["prefilter_adaptation"]["negatives"] > 0
    for f in doc["per_frame"]:
        assert f["prefilter_boxes"] is not None and 0.0 <= f["prefilter_rejected"] <= 1.0
    saved = RegionPrefilter.load(out.with_suffix(".json"), database_id=db.database_id)
    assert saved.n_features_in_ == trained.n_features_in_


def test_a_refit_fits_on_a_sample_of_the_store(trained):
    params = AdaptParams(refit_every=5, min_negatives=100, fit_negatives=150, per_frame=48, safety_every=0)
    online = OnlinePrefilter(trained, sample_objects(), params)
    for f in _stream(17, 16):
        online.observe(f, online.propose(f))
    online.wait()
    assert online.negatives.n > 150 and online.refits >= 1
    store = online.negatives.array(trained.n_features_in_)
    Xn = online.negatives.sample(trained.n_features_in_, 150, np.random.default_rng(0))
    assert len(Xn) == 150
    # Rows of the store, not a copy of its first rows.
    rows = {r.tobytes() for r in store}
    assert all(r.tobytes() in rows for r in Xn)
    assert not np.array_equal(Xn, store[:150])


def test_the_worker_mirrors_the_stores_from_the_changes_it_is_sent(trained):
    from objrec.prefilter.refit import RefitSession
    from objrec.prefilter.storage import prefilter_state

    params = AdaptParams(refit_every=10**6, min_negatives=10**6, safety_every=0, store_size=500)
    online = OnlinePrefilter(trained, sample_objects(), params)
    manifest, arrays = prefilter_state(trained)
    session = RefitSession(manifest, arrays, sample_objects(), params.store_size, params.live_frames)
    frames = _stream(18, 30)
    for i, f in enumerate(frames):
        proposals = online.propose(f)
        online.observe(f, proposals)
        if i == 12:
            online.report_miss((100.0, 100.0, 300.0, 260.0), proposals)
        if i % 7 == 0:
            session.apply(online._outbox)
            online._outbox = []
    session.apply(online._outbox)
    dim = trained.n_features_in_
    for ours, theirs in ((online.negatives, session.negatives), (online.positives, session.positives)):
        assert ours.n == theirs.n and np.array_equal(ours.array(dim), theirs.array(dim))
    assert len(session.live) == len(online.live) and all(a is b for a, b in zip(session.live, online.live, strict=True))
