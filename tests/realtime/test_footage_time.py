"""Footage time: sources give each frame its time on the footage's timeline, and corner smoothing measures its
time steps by it, so a file gives the same corners however fast the machine processes it."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from objrec.realtime.scheduler import FakeClock
from objrec.realtime.smoothing import OneEuroFilter, SmoothParams
from objrec.realtime.sources import ArraySource, ImageDirSource, VideoSource, open_source


def test_video_file_frames_carry_its_timestamps(tmp_path):
    path = tmp_path / "clip.avi"
    w = cv2.VideoWriter(str(path), cv2.VideoWriter_fourcc(*"MJPG"), 12.5, (64, 48))
    assert w.isOpened()
    for i in range(5):
        w.write(np.full((48, 64, 3), 40 * i, np.uint8))
    w.release()
    frames = list(VideoSource(path))
    assert [f.index for f in frames] == [0, 1, 2, 3, 4]
    assert [f.footage_ms for f in frames] == pytest.approx([0, 80, 160, 240, 320])
    assert all(f.t_footage != f.t_capture for f in frames[1:])


def test_image_folder_takes_its_frame_rate(tmp_path):
    for i in range(3):
        cv2.imwrite(str(tmp_path / f"{i}.png"), np.zeros((16, 16), np.uint8))
    assert [f.footage_ms for f in ImageDirSource(tmp_path)] == pytest.approx([0, 1000 / 30, 2000 / 30])
    assert [f.footage_ms for f in open_source(str(tmp_path), fps=10)] == pytest.approx([0, 100, 200])
    with pytest.raises(ValueError, match="fps"):
        ImageDirSource(tmp_path, fps=0)


def test_array_source_with_and_without_rate():
    imgs = [np.zeros((4, 4), np.uint8)] * 3
    assert [f.footage_ms for f in ArraySource(imgs, fps=20)] == pytest.approx([0, 50, 100])
    f = list(ArraySource(imgs))
    assert all(x.t_footage is None and x.footage_ms == x.t_capture for x in f)


def test_run_fps_option_is_checked(tmp_path):
    from objrec.cli import main

    assert main(["run", "--db", str(tmp_path / "db"), "--source", str(tmp_path), "--fps", "0", "--no-display"]) == 2


class _Recording(OneEuroFilter):
    """A One-Euro filter that records the timestamps it is given."""

    seen: list[float] = []

    def __call__(self, x, t_ms):
        _Recording.seen.append(float(t_ms))
        return super().__call__(x, t_ms)


def _smoothing_steps(sample_db, monkeypatch, ms_per_frame: float) -> tuple[list[float], list[np.ndarray]]:
    """The timestamps the corner filter saw and the corners drawn for 8 frames of a still scene, processed
    under a budget on a fake clock that advances ``ms_per_frame`` per frame."""
    import objrec.realtime.smoothing as smoothing
    from objrec import Recognizer
    from objrec.data import sample_objects
    from objrec.scenes import compose_scene

    monkeypatch.setattr(smoothing, "OneEuroFilter", _Recording)
    _Recording.seen = []
    objects = sample_objects()
    name = sorted(objects)[0]
    rng = np.random.default_rng(3)
    bg = np.full((480, 640, 3), 90, np.uint8)
    scene = compose_scene(bg, {name: objects[name]}, rng, (640, 480), area_fraction=(0.2, 0.2)).image
    clock = FakeClock()
    rec = Recognizer(sample_db, budget_ms=1e6, prefilter=None, smooth=True, clock=clock)
    drawn = []
    for i in range(8):
        t0 = clock.now()
        r = rec.process(scene, t0=t0, t_frame=40.0 * i)
        clock.t += ms_per_frame
        drawn += [d.corners for d in r.detections]
    return list(_Recording.seen), drawn


def test_smoothing_steps_follow_footage_not_the_clock(sample_db, monkeypatch):
    slow_t, slow_c = _smoothing_steps(sample_db, monkeypatch, 90.0)
    fast_t, fast_c = _smoothing_steps(sample_db, monkeypatch, 7.0)
    assert slow_t and slow_t == fast_t
    assert np.diff(slow_t).tolist() == pytest.approx([40.0] * (len(slow_t) - 1))
    np.testing.assert_allclose(np.array(slow_c), np.array(fast_c))


def test_predicting_filter_follows_constant_speed_without_lag():
    t = np.arange(60) * 1000 / 30
    x = 2.0 * np.arange(60)  # 2 px per frame, 60 px/s
    plain = OneEuroFilter(SmoothParams(min_cutoff=1.0, beta=0.05, predict=False, deadband=0.0))
    pred = OneEuroFilter(SmoothParams(min_cutoff=1.0, beta=0.05, predict=True, deadband=0.0))
    lag_plain = [x[i] - plain(np.array([x[i]]), t[i])[0] for i in range(60)][-1]
    lag_pred = [x[i] - pred(np.array([x[i]]), t[i])[0] for i in range(60)][-1]
    # The plain filter trails by L = v tau = v / (2 pi fc), its speed estimate (x - x_hat) / dt = v + L / dt
    # setting the cutoff fc = 1 + 0.05 (60 + 30 L): 1.5 L^2 + 4 L - 60 / (2 pi) = 0.
    want = (-4 + np.sqrt(16 + 4 * 1.5 * 60 / (2 * np.pi))) / 3
    assert lag_plain == pytest.approx(want, rel=0.02)
    assert abs(lag_pred) < 0.05
    with pytest.raises(ValueError, match="predict"):
        SmoothParams(predict="yes")
    with pytest.raises(ValueError, match="deadband"):
        SmoothParams(deadband=-1.0)


def test_deadband_keeps_a_noisy_still_corner_steady():
    """White noise of 0.5 px on a still corner: the default filter (prediction with a dead band) lets no more of
    it through than the classic filter; without the dead band the prediction would carry the noise's speed."""
    rng = np.random.default_rng(0)
    x = rng.normal(0, 0.5, 300)
    t = np.arange(300) * 1000 / 30

    def spread(p):
        f = OneEuroFilter(p)
        return np.std([f(np.array([v]), ti)[0] for v, ti in zip(x, t, strict=True)][30:])

    classic = spread(SmoothParams(beta=0.05, predict=False, deadband=0.0))
    assert spread(SmoothParams()) <= classic * 1.05
    assert spread(SmoothParams(deadband=0.0)) > classic * 1.5
