"""The adapting prefilter: what it harvests, how it refits, backs off and forgets."""

from __future__ import annotations

import os

import numpy as np
import pytest

from objrec import Recognizer
from objrec.data import sample_objects
from objrec.prefilter import regions_to_mask
from objrec.prefilter.online import AdaptParams, OnlinePrefilter, _near
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
    got = _near(cells, boxes, 10.0)
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
        online.propose(f)
        online.observe(f, [])
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
        online.propose(f)
        online.observe(f, [])
        online.wait()
        if online.refits:
            break
    assert online.refits >= 1
    before = online.current
    online.wait()
    assert online.current is before  # finished, but waiting for the next frame
    online.propose(frames[0])
    assert online.current is not before


def _stopped(pid: int) -> bool:
    """Whether the process is stopped, read from /proc (the signal's effect may take a moment to show)."""
    import time

    for _ in range(100):
        state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        if state in "tT":
            return True
        time.sleep(0.01)
    return False


@pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="needs /proc to read the worker's state")
def test_refit_worker_is_stopped_while_a_frame_runs(trained):
    online = OnlinePrefilter(trained, sample_objects(), AdaptParams(refit_every=1, min_negatives=40, safety_every=0))
    frames = _stream(10, 8)
    for f in frames:
        online.hold()
        online.propose(f)
        online.observe(f, [])
        online.release()
        if online._worker is not None and online._worker.busy:
            break
    worker = online._worker
    assert worker is not None and worker.busy
    pid = worker.pid
    online.hold()  # a frame starts
    assert _stopped(pid)
    online.release()
    state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
    assert state not in "tT"
    online.wait()
    assert online.refits == 1 and not worker.busy
    online.close()
    assert not worker.alive


def test_change_of_scene_forgets_and_a_miss_backs_off(trained):
    online = OnlinePrefilter(trained, sample_objects(), AdaptParams(refit_every=5, min_negatives=50, safety_every=0))
    for f in _stream(9, 12):
        online.propose(f)
        online.observe(f, [])
        online.wait()
    assert online.negatives.n > 0
    threshold = online.current.threshold_
    online.report_miss((100.0, 100.0, 300.0, 260.0))
    assert online.current.threshold_ == pytest.approx(threshold * 0.5) and online.backoffs == 1
    assert online.negatives.n == 0 or all(r[2] < online.frame - 5 for r in online.negatives.rows)
    for f in _stream(21, 6):  # another scene entirely
        online.propose(f)
        online.observe(f, [])
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
        online.propose(img)
        online.observe(img, [])  # not detected: nothing to keep away from
    assert online.scene_resets == 0
    for f in _stream(21, 6):  # the camera turned to another scene
        online.propose(f)
        online.observe(f, [])
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


class _Capture:
    """A stand-in refit worker that keeps the jobs it is given."""

    busy, alive = False, True

    def __init__(self) -> None:
        self.jobs: list = []

    def submit(self, job) -> None:
        self.jobs.append(job)


def test_a_refit_fits_on_a_sample_of_the_store(trained):
    params = AdaptParams(refit_every=5, min_negatives=100, fit_negatives=150, per_frame=48, safety_every=0)
    online = OnlinePrefilter(trained, sample_objects(), params)
    online._worker = worker = _Capture()
    for f in _stream(17, 16):
        online.propose(f)
        online.observe(f, [])
    assert online.negatives.n > 150 and worker.jobs
    Xn = worker.jobs[-1][4]
    store = np.concatenate([r[0] for r in online.negatives.rows])
    assert len(Xn) == 150
    # Rows of the store, not a copy of its first rows.
    rows = {r.tobytes() for r in store}
    assert all(r.tobytes() in rows for r in Xn)
    assert not np.array_equal(Xn, store[:150])
