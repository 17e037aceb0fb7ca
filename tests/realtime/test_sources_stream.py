"""Sources (files frame by frame, paced newest-wins), the stream generator's ground truth, the run loop."""

from __future__ import annotations

import json
import threading
import time
from types import SimpleNamespace

import cv2
import numpy as np
import pytest

from objrec.data import sample_objects, synthetic_cover
from objrec.imageio import InputError
from objrec.realtime.sources import ArraySource, ImageDirSource, LatestFrameSlot, PacedSource, VideoSource, open_source
from objrec.realtime.stream import SceneStream, StreamScore


def test_latest_frame_slot_newest_wins_and_counts_drops():
    from objrec.realtime.sources import Frame

    slot = LatestFrameSlot()
    for i in range(5):
        slot.put(Frame(i, np.zeros((2, 2), np.uint8), 0.0))
    assert slot.get().index == 4 and slot.dropped == 4
    slot.close()
    assert slot.get() is None


def test_image_dir_source_in_order_and_errors(tmp_path):
    for i in (2, 0, 1):
        cv2.imwrite(str(tmp_path / f"f{i}.png"), np.full((20, 30), i * 50, np.uint8))
    (tmp_path / "notes.txt").write_text("ignored")
    frames = list(ImageDirSource(tmp_path))
    assert [f.index for f in frames] == [0, 1, 2]
    assert [int(f.image.mean()) for f in frames] == [0, 50, 100]
    (tmp_path / "f3.png").write_bytes(b"broken")
    with pytest.raises(InputError, match="f3.png: not a readable image"):
        list(ImageDirSource(tmp_path))
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InputError, match="no images"):
        ImageDirSource(empty)
    with pytest.raises(InputError, match="no such camera index, video file or image folder"):
        open_source(str(tmp_path / "nothing"))


def test_video_source_every_frame(tmp_path):
    p = tmp_path / "v.avi"
    w = cv2.VideoWriter(str(p), cv2.VideoWriter_fourcc(*"MJPG"), 25.0, (64, 48))
    for i in range(12):
        w.write(np.full((48, 64, 3), i * 20, np.uint8))
    w.release()
    src = VideoSource(p)
    assert src.fps == pytest.approx(25.0) and src.frame_shape == (48, 64)
    frames = list(src)
    assert len(frames) == 12 and [f.index for f in frames] == list(range(12))
    bad = tmp_path / "bad.avi"
    bad.write_bytes(b"not a video")
    with pytest.raises(InputError, match="bad.avi"):
        VideoSource(bad)


def test_paced_source_drops_when_consumer_is_slow():
    """A consumer busy while the source delivers its remaining frames gets only the newest of them: every
    other frame is counted as dropped, none is queued, and the order is kept (no timing involved: the consumer
    waits until the inner source is exhausted)."""
    frames = [np.full((8, 8), i, np.uint8) for i in range(30)]
    exhausted = threading.Event()

    class Inner(ArraySource):
        def __iter__(self):
            yield from super().__iter__()
            exhausted.set()

    src = PacedSource(Inner(frames), fps=10_000.0)
    got = []
    for f in src:
        got.append(f.index)
        assert exhausted.wait(timeout=60)  # the consumer is busy until every frame has been delivered
    # The first frame the consumer took, then only the newest: everything in between was dropped.
    assert got[-1] == 29 and len(got) <= 2 and got == sorted(got) and len(got) + src.dropped == 30
    assert not [t for t in threading.enumerate() if t.name == "objrec-paced-source" and t.is_alive()]


def test_stream_ground_truth_moves_enters_and_leaves():
    objs = {"a": synthetic_cover(1, (200, 260)), "b": synthetic_cover(2, (240, 180))}
    bgs = [np.full((480, 640, 3), v, np.uint8) for v in (30, 60)]
    s = SceneStream(objs, bgs, n_frames=400, seed=3, pass_frames=(60, 100), pause_frames=(5, 20))
    full, partial, absent = 0, 0, 0
    for i in range(0, 400, 4):
        f = s.frame(i)
        names = {o.name for o in f.objects}
        Hs = s.homographies(i)
        assert names <= set(Hs)
        absent += len(objs) - len(names)
        for o in f.objects:
            h = np.ptp(o.corners[:, 1])
            assert 0.15 * 480 < h < 0.75 * 480  # 20-50% of the frame height, grown by rotation/tilt
            full += o.visible_fraction > 0.95
            partial += 0 < o.visible_fraction < 0.9
    assert full > 10 and partial > 5 and absent > 5
    a, b = s.frame(17), s.frame(17)  # reproducible (OpenCV's threaded warp may differ on a few edge pixels)
    assert np.mean(a.image != b.image) < 1e-3
    for oa, ob in zip(a.objects, b.objects, strict=True):
        np.testing.assert_array_equal(oa.homography, ob.homography)


def test_stream_truth_is_pixel_exact():
    """A marker drawn on the model lands where the frame's homography says."""
    obj = np.full((200, 200, 3), 40, np.uint8)
    cv2.circle(obj, (50, 60), 6, (255, 255, 255), -1)
    s = SceneStream(
        {"m": obj},
        [np.zeros((480, 640, 3), np.uint8)],
        n_frames=200,
        seed=0,
        blur_every=0,
        noise_sigma=0.0,
        pass_frames=(100, 101),
        pause_frames=(0, 1),
    )
    checked = 0
    for i in range(0, 200, 7):
        H = s.homographies(i).get("m")
        if H is None:
            continue
        p = H @ np.array([50.0, 60.0, 1.0])
        x, y = p[:2] / p[2]
        if not (10 < x < 630 and 10 < y < 470):
            continue
        img = s.frame(i).image[:, :, 0].astype(float)
        ys, xs = np.nonzero(img > 150)
        near = (np.abs(xs - x) < 15) & (np.abs(ys - y) < 15)
        assert near.sum() > 10
        assert abs(xs[near].mean() - x) < 1.0 and abs(ys[near].mean() - y) < 1.0
        checked += 1
    assert checked >= 5


def test_run_cli_on_image_folder_writes_stats(tmp_path):
    from objrec.cli import main
    from objrec.data import sample_background
    from objrec.scenes import compose_scene

    objs = sample_objects()
    cv2.imwrite(str(tmp_path / "cover.png"), objs["cover"])
    frames = tmp_path / "frames"
    frames.mkdir()
    for i in range(4):
        sc = compose_scene(
            sample_background((640, 480), seed=i),
            {"cover": objs["cover"]},
            rng=i,
            frame_size=(640, 480),
            area_fraction=(0.15, 0.2),
        )
        cv2.imwrite(str(frames / f"{i:03d}.png"), sc.image)
    assert main(["enroll", "--db", str(tmp_path / "db"), f"cover={tmp_path / 'cover.png'}"]) == 0
    stats = tmp_path / "stats.json"
    rc = main(
        [
            "run",
            "--db",
            str(tmp_path / "db"),
            "--source",
            str(frames),
            "--no-display",
            "--budget-ms",
            "1000",
            "--no-adapt",
            "--stats",
            str(stats),
            "--out",
            str(tmp_path / "out.mp4"),
        ]
    )
    assert rc == 0
    doc = json.loads(stats.read_text())
    assert {"frames", "budget_ms", "deadline_misses", "dropped", "latency_ms", "per_frame"} <= set(doc)
    assert doc["frames"] == 4 and doc["dropped"] == 0 and doc["budget_ms"] == 1000
    assert set(doc["latency_ms"]) == {"p50", "p90", "p99", "max"}
    for f in doc["per_frame"]:
        assert {"index", "latency_ms", "deadline_met", "detections"} <= set(f)
        assert f["deadline_met"] == (f["latency_ms"] <= 1000)
        assert f["prefilter_boxes"] is None and f["prefilter_rejected"] is None  # no prefilter trained
        assert [d["name"] for d in f["detections"]] == ["cover"]
        assert f["detections"][0]["state"] == "detected"  # each frame an unrelated scene: found anew
        assert "raw_corners" in f["detections"][0]  # objrec run smooths by default and records both
    # The cover jumps elsewhere in every frame: its track's points are not found again, the track is listed
    # as lost in the next frame, and the detection there starts a new track.
    assert doc["per_frame"][0]["lost"] == []
    for before, f in zip(doc["per_frame"][:-1], doc["per_frame"][1:], strict=True):
        assert [(t["name"], t["track_id"]) for t in f["lost"]] == [("cover", before["detections"][0]["track_id"])]
        assert f["detections"][0]["track_id"] != before["detections"][0]["track_id"]
    assert doc["memory"]["peak_rss_mb"] is None or doc["memory"]["peak_rss_mb"] > 10
    cap = cv2.VideoCapture(str(tmp_path / "out.mp4"))
    assert cap.isOpened() and int(cap.get(cv2.CAP_PROP_FRAME_COUNT)) == 4


class _FakeCamera:
    """A cv2.VideoCapture stand-in: the first open yields 3 frames, a reconnect 2 more, later opens fail."""

    opens = 0

    def __init__(self, index):
        type(self).opens += 1
        self.left = {1: 3, 2: 2}.get(type(self).opens, 0)
        self.is_open = type(self).opens <= 2
        self.start = 0 if type(self).opens == 1 else 100

    def isOpened(self):  # noqa: N802 - cv2's name
        return self.is_open

    def get(self, prop):
        return {cv2.CAP_PROP_FPS: 25.0, cv2.CAP_PROP_FRAME_WIDTH: 8, cv2.CAP_PROP_FRAME_HEIGHT: 6}.get(prop, 0.0)

    def set(self, prop, value):
        return True

    def read(self):
        if not self.is_open or self.left == 0:
            return False, None
        self.left -= 1
        value = self.start + self.left
        return True, np.full((6, 8, 3), value, np.uint8)

    def release(self):
        self.is_open = False


def test_camera_source_reconnects_after_a_lost_camera_then_ends_cleanly(monkeypatch):
    from objrec.realtime.sources import CameraSource

    monkeypatch.setattr(_FakeCamera, "opens", 0)
    monkeypatch.setattr(cv2, "VideoCapture", _FakeCamera)
    src = CameraSource(0, retries=2)
    assert src.fps == 25.0 and src.frame_shape == (6, 8)
    got = []
    for f in src:
        got.append((f.index, int(f.image[0, 0, 0])))
        time.sleep(0.01)  # a consumer slower than the camera: older frames are dropped, not queued
    # 5 frames in all (3, then 2 after the one reconnect); what the consumer missed is counted as dropped.
    assert src.reconnects == 1
    assert len(got) + src.dropped == 5
    assert [i for i, _ in got] == sorted({i for i, _ in got}) and got[-1][0] == 4
    assert got[-1][1] == 100  # the newest frame of the reconnected camera
    assert _FakeCamera.opens == 4  # the first open, the reconnect, and two failed reopens before giving up


def test_camera_source_that_cannot_open_names_the_camera(monkeypatch):
    from objrec.realtime.sources import CameraSource

    monkeypatch.setattr(_FakeCamera, "opens", 2)  # every open fails from here on
    monkeypatch.setattr(cv2, "VideoCapture", _FakeCamera)
    with pytest.raises(InputError, match="camera 7: cannot be opened"):
        CameraSource(7)


def test_stream_score_entries_count_frames_until_found_per_entry_into_full_view():
    """Against a per-object scan of random visibility and detection sequences: each run of frames in which an
    object is fully visible is one entry, with the frames before its first detection within tolerance (a
    detection far off does not count) or None when it was never found, and the run's length."""
    rng = np.random.default_rng(5)
    names = ["a", "b", "c"]
    n = 400
    vis = {k: np.clip(np.cumsum(rng.normal(0, 0.15, n)) % 2.0, 0, 1) for k in names}  # wanders in and out of view
    hit = {k: rng.random(n) < 0.3 for k in names}
    off = {k: rng.random(n) < 0.1 for k in names}  # detected, but 30 px off
    corners = np.array([[0, 0], [10, 0], [10, 10], [0, 10]], np.float64)
    score = StreamScore()
    for i in range(n):
        truth = [SimpleNamespace(name=k, visible_fraction=float(v[i]), corners=corners) for k, v in vis.items()]
        truth = [o for o in truth if o.visible_fraction > 0]
        dets = [SimpleNamespace(name=k, corners=corners + (30.0 if off[k][i] else 0.0)) for k in names if hit[k][i]]
        score.add(dets, truth)
    expected = []
    for k in names:  # one object at a time, frame by frame
        runs, start = [], None
        for i in range(n + 1):
            full = i < n and vis[k][i] >= 0.95
            if full and start is None:
                start = i
            if not full and start is not None:
                runs.append((start, i))
                start = None
        for a, b in runs:
            found = [i - a for i in range(a, b) if hit[k][i] and not off[k][i]]
            expected.append((found[0] if found else None, b - a))
    assert sorted(score.entries, key=str) == sorted(expected, key=str) and len(expected) > 20
    firsts = [f for f, _ in expected]
    assert None in firsts and 0 in firsts and any(f and f > 0 for f in firsts)  # each kind of entry occurs
    summary = score.entry_summary()
    assert summary["entries"] == len(expected) and summary["never_found"] == sum(f is None for f, _ in expected)
    assert summary["max_frames"] == max(s if f is None else f for f, s in expected)
    assert json.loads(json.dumps(score.to_json()))["entries"] == summary  # the benchmark writes it as JSON
