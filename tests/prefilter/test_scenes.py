"""Training scenes: backgrounds from arrays, folders and videos; composed scenes and their cell labels."""

from __future__ import annotations

import cv2
import numpy as np
import pytest

from objrec.data import sample_objects
from objrec.imageio import InputError
from objrec.prefilter.features import cell_grid, work_shape
from objrec.prefilter.scenes import cell_fractions, default_backgrounds, generate_scenes, load_backgrounds


def test_cell_fractions_match_per_cell_means():
    rng = np.random.default_rng(0)
    for h, w, cell in [(120, 160, 16), (97, 131, 11), (20, 20, 32)]:
        mask = (rng.random((h, w)) < 0.3).astype(np.float32)
        g = cell_grid(h, w, cell)
        ref = [
            mask[g.ys[i] : g.ys[i + 1], g.xs[j] : g.xs[j + 1]].mean(dtype=np.float64)
            for i in range(g.shape[0])
            for j in range(g.shape[1])
        ]
        np.testing.assert_allclose(cell_fractions(mask, cell), ref, rtol=1e-12)


def test_generated_scenes_are_reproducible_and_labelled():
    objects = sample_objects()
    bgs = default_backgrounds(2)
    a = generate_scenes(objects, bgs, 6, 160, 16, (320, 240), empty_fraction=0.3, seed=7)
    b = generate_scenes(objects, bgs, 6, 160, 16, (320, 240), empty_fraction=0.3, seed=7)
    assert len(a.images) == len(a.masks) == len(a.fractions) == len(a.n_objects) == 6
    for i in range(6):
        np.testing.assert_array_equal(a.images[i], b.images[i])
        assert a.images[i].shape == (*work_shape(240, 320, 160), 3) and a.images[i].dtype == np.uint8
        assert 0 <= a.n_objects[i] <= 3
        assert (a.masks[i].sum() == 0) == (a.n_objects[i] == 0)
        np.testing.assert_allclose(a.fractions[i], cell_fractions(a.masks[i], 16))
    with pytest.raises(ValueError, match="objects"):
        generate_scenes({}, bgs, 2, 160, 16)
    with pytest.raises(ValueError, match="backgrounds"):
        generate_scenes(objects, [], 2, 160, 16)


def test_load_backgrounds_from_arrays_and_folders(tmp_path):
    gray = np.full((40, 50), 90, np.uint8)
    (out,) = load_backgrounds([gray])
    assert out.shape == (40, 50, 3) and np.all(out == 90)
    folder = tmp_path / "bg"
    folder.mkdir()
    for k in range(2):
        cv2.imwrite(str(folder / f"{k}.png"), np.full((30, 40, 3), 10 * k, np.uint8))
    (folder / "notes.txt").write_text("not an image")
    got = load_backgrounds([folder])
    assert [int(g[0, 0, 0]) for g in got] == [0, 10]
    with pytest.raises(InputError, match="nowhere"):
        load_backgrounds([tmp_path / "nowhere"])
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="empty.*no images"):
        load_backgrounds([tmp_path / "empty"])
    with pytest.raises(InputError, match="none given"):
        load_backgrounds([])
    with pytest.raises(ValueError, match="video_step"):
        load_backgrounds([gray], video_step=0)


def test_load_backgrounds_takes_every_nth_video_frame(shared_data):
    video = shared_data / "opencv_samples" / "vtest.avi"
    frames = load_backgrounds([video], video_step=5, max_video_frames=4)
    cap = cv2.VideoCapture(str(video))
    expect = []
    for i in range(16):
        ok, f = cap.read()
        assert ok
        if i % 5 == 0:
            expect.append(f)
    cap.release()
    assert len(frames) == 4
    for f, e in zip(frames, expect, strict=True):
        np.testing.assert_array_equal(f, e)


def test_generated_backgrounds_are_varied_and_reproducible():
    """Generated negatives cover many colours and have edges at many scales; a seed fixes them."""
    from objrec.prefilter.scenes import generated_background

    a = [generated_background(np.random.default_rng(s), (480, 270)) for s in range(6)]
    b = generated_background(np.random.default_rng(0), (480, 270))
    np.testing.assert_array_equal(a[0], b)
    for img in a:
        assert img.shape == (270, 480, 3) and img.dtype == np.uint8
        edges = cv2.Canny(cv2.cvtColor(img, cv2.COLOR_BGR2GRAY), 50, 150)
        assert 0.005 < (edges > 0).mean() < 0.5  # structure, neither flat nor pure noise
    hsv = cv2.cvtColor(np.concatenate(a), cv2.COLOR_BGR2HSV).reshape(-1, 3)
    hues = np.bincount(hsv[hsv[:, 1] > 40, 0] // 15, minlength=12)
    assert (hues > 0.01 * hues.sum()).sum() >= 10  # at least 10 of 12 hue sectors present
    assert np.median(hsv[:, 1]) < 128  # mostly unsaturated, as everyday scenes are
