"""``objrec eval video:``: the footage layouts (built here from a real clip), the planar-tracking metrics against
their definitions, and the anchor's alignment errors against a direct OpenCV computation."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from objrec.datasets import DatasetError
from objrec.datasets.video import clip_frames, detect_layout, load_video_clips, read_corner_lines, rectified_reference
from objrec.metrics.alignment import (
    alignment_error,
    corners_homography,
    homography_discrepancy,
    precision_curve,
)

N_FRAMES = 12


@pytest.fixture(scope="module")
def bruegel(shared_data):
    """The first frames of ``real_video/visp_bruegel``, its ground truth and reference."""
    (clip,) = load_video_clips(shared_data / "real_video", names=["visp_bruegel"])
    frames = [img for i, img, _ in clip_frames(clip) if i < N_FRAMES]
    return clip, frames[:N_FRAMES], cv2.imread(str(clip.reference))


@pytest.fixture(scope="module")
def pot_root(bruegel, tmp_path_factory):
    """A POT-210 layout: ``V01_7/`` frames, ground truth every other frame, the frame-4 line flagged."""
    clip, frames, _ = bruegel
    root = tmp_path_factory.mktemp("pot")
    (root / "V01_7").mkdir()
    (root / "annotation").mkdir()
    for i, img in enumerate(frames):
        cv2.imwrite(str(root / "V01_7" / f"{i + 1:04d}.png"), img)
    lines = [" ".join(f"{v:.2f}" for v in clip.gt[i].ravel()) for i in range(0, N_FRAMES, 2)]
    (root / "annotation" / "V01_7_gt_points.txt").write_text("\n".join(lines) + "\n")
    flags = ["1" if i == 4 else "0" for i in range(0, N_FRAMES, 2)]
    (root / "annotation" / "V01_7_flag.txt").write_text("\n".join(flags) + "\n")
    return root


@pytest.fixture(scope="module")
def poic_root(bruegel, tmp_path_factory):
    """A POIC layout: ``sequences/bruegel/`` frames, ``gt/bruegel.txt`` named by frame, the template."""
    clip, frames, reference = bruegel
    root = tmp_path_factory.mktemp("poic")
    seq = root / "sequences" / "bruegel"
    seq.mkdir(parents=True)
    (root / "gt").mkdir()
    (root / "Templates").mkdir()
    lines = []
    for i, img in enumerate(frames):
        cv2.imwrite(str(seq / f"frame{i:05d}.png"), img)
        lines.append(f"frame{i:05d} " + " ".join(f"{v:.2f}" for v in clip.gt[i].ravel()))
    (root / "gt" / "bruegel.txt").write_text("\n".join(lines[1:]) + "\n")  # frame 0 without ground truth
    cv2.imwrite(str(root / "Templates" / "bruegel.png"), reference)
    return root


def test_real_video_layout(shared_data):
    clips = {c.name: c for c in load_video_clips(shared_data / "real_video")}
    assert set(clips) >= {"visp_postcard", "visp_bruegel", "visp_postcard_tracking"}
    tracking = clips["visp_postcard_tracking"]
    assert tracking.gt.shape == (67, 4, 2) and tracking.scored.sum() == 53  # 14 blurred frames are not scored
    assert tracking.fps == pytest.approx(25.0)
    times = [t for i, _, t in clip_frames(clips["visp_bruegel"]) if i < 3]
    assert times == pytest.approx([0.0, 40.0, 80.0])  # the file's own timestamps


def test_pot_layout(pot_root, bruegel):
    clip = bruegel[0]
    assert detect_layout(pot_root) == "pot"
    (c,) = load_video_clips(pot_root)
    assert c.name == "V01_7" and c.challenge == "unconstrained" and c.reference is None
    assert len(c.gt) == N_FRAMES - 1  # lines for frames 0, 2, ..., 10
    scored = np.flatnonzero(c.scored).tolist()
    assert scored == [0, 2, 6, 8, 10]  # every other frame, frame 4 flagged
    np.testing.assert_allclose(c.gt[2], clip.gt[2], atol=0.006)


def test_poic_layout(poic_root, bruegel):
    clip, _, reference = bruegel
    assert detect_layout(poic_root) == "poic"
    (c,) = load_video_clips(poic_root)
    assert c.reference is not None and cv2.imread(str(c.reference)).shape == reference.shape
    assert not c.scored[0] and c.scored[1:].all()
    np.testing.assert_allclose(c.gt[5], clip.gt[5], atol=0.006)


def test_layout_errors_name_the_file(tmp_path):
    with pytest.raises(DatasetError, match="not a video dataset"):
        detect_layout(tmp_path)
    bad = tmp_path / "gt.txt"
    bad.write_text("00000 1 2 3 4 5 6 7\n")
    with pytest.raises(DatasetError, match=r"gt.txt:1: expected a frame name and 8 numbers"):
        read_corner_lines(bad, named=True)
    clip = tmp_path / "c"
    (clip / "frames").mkdir(parents=True)
    cv2.imwrite(str(clip / "frames" / "0.png"), np.zeros((8, 8), np.uint8))
    (clip / "gt.txt").write_text("00000 " + " ".join(["1"] * 8) + "\n")
    with pytest.raises(DatasetError, match="no clip 'nope'"):
        load_video_clips(clip, names=["nope"])
    (clip / "video.mp4").write_bytes(b"")
    with pytest.raises(DatasetError, match=r"video.mp4: cannot be opened as a video"):
        load_video_clips(clip)


def test_rectified_reference_maps_corners_onto_its_frame(bruegel):
    clip, frames, _ = bruegel
    ref = rectified_reference(frames[0], clip.gt[0])
    h, w = ref.shape[:2]
    H = corners_homography(np.array([[0, 0], [w, 0], [w, h], [0, h]]), clip.gt[0])
    back = cv2.warpPerspective(ref, H, frames[0].shape[1::-1])
    mask = cv2.warpPerspective(np.full((h, w), 255, np.uint8), H, frames[0].shape[1::-1])
    inner = cv2.erode(mask, np.ones((9, 9), np.uint8)) > 0
    diff = np.abs(back.astype(int) - frames[0].astype(int))[inner]
    assert np.median(diff) < 12  # the rectified view warped back lies on the frame


def test_alignment_error_is_rms_of_corner_distances():
    rng = np.random.default_rng(0)
    for _ in range(20):
        c, g = rng.normal(size=(4, 2)) * 10, rng.normal(size=(4, 2)) * 10
        brute = np.sqrt(np.mean([np.hypot(*(c[i] - g[i])) ** 2 for i in range(4)]))
        assert alignment_error(c, g) == pytest.approx(brute)
    assert alignment_error(None, g) == np.inf


def test_precision_curve_counts_failures_everywhere():
    e = np.array([0.5, 3.0, 7.0, np.inf])
    curve = precision_curve(e, np.array([0, 1, 5, 10, 1e9]))
    assert curve.tolist() == [0.0, 0.25, 0.5, 0.75, 0.75]


def test_homography_discrepancy_zero_only_when_equal():
    unit = np.array([[0, 0], [1, 0], [1, 1], [0, 1]], float)
    g = np.array([[100, 100], [300, 110], [310, 260], [90, 250]], float)
    Hg = corners_homography(unit, g)
    assert homography_discrepancy(Hg, Hg) == pytest.approx(0.0, abs=1e-9)
    He = corners_homography(unit, g + [2.0, 0.0])
    assert homography_discrepancy(He, Hg) > 0
    assert homography_discrepancy(None, Hg) == np.inf


def _direct_anchor(reference: np.ndarray, frame: np.ndarray) -> np.ndarray | None:
    """find_obj.py by hand: OpenCV SIFT, brute-force 2-NN, ratio 0.75, RANSAC 5 px, the reference's corners."""
    sift = cv2.SIFT_create()
    g1, g2 = (cv2.cvtColor(x, cv2.COLOR_BGR2GRAY) for x in (reference, frame))
    k1, d1 = sift.detectAndCompute(g1, None)
    k2, d2 = sift.detectAndCompute(g2, None)
    good = [m[0] for m in cv2.BFMatcher(cv2.NORM_L2).knnMatch(d1, d2, k=2) if m[0].distance < 0.75 * m[1].distance]
    if len(good) < 4:
        return None
    p1 = np.float32([k1[m.queryIdx].pt for m in good])
    p2 = np.float32([k2[m.trainIdx].pt for m in good])
    H, mask = cv2.findHomography(p1, p2, cv2.RANSAC, 5.0)
    if H is None or mask.sum() < 4:
        return None
    h, w = g1.shape
    return cv2.perspectiveTransform(np.float64([[[0, 0], [w, 0], [w, h], [0, h]]]), H / H[2, 2])[0]


def test_anchor_reproduces_direct_opencv(pot_root, tmp_path):
    from objrec.evaluation.config import EvalConfig
    from objrec.evaluation.runner import run_evaluation

    out = tmp_path / "out"
    report = run_evaluation(
        EvalConfig(kind="video", path=str(pot_root), out=str(out), detectors=["findobj"], protocol="tracking",
                   progress=False)
    )  # fmt: skip
    (row,) = report["video"]["clips"]
    (c,) = load_video_clips(pot_root)
    frames = [img for _, img, _ in clip_frames(c)]
    ref = rectified_reference(frames[0], c.gt[0])
    want = [alignment_error(_direct_anchor(ref, frames[i]), c.gt[i]) for i in np.flatnonzero(c.scored)]
    got = [np.inf if e is None else e for e in row["errors"]]
    np.testing.assert_allclose(got, want, atol=2e-3)
    assert (out / "plots" / "video_precision_success.png").is_file()
    assert (out / "videos" / "findobj_V01_7.mp4").is_file()
    assert "Real footage" in (out / "report.md").read_text()


@pytest.mark.slow
def test_objrec_finds_the_painting_in_poic_layout(poic_root, tmp_path):
    from objrec.evaluation.config import EvalConfig
    from objrec.evaluation.runner import run_evaluation

    report = run_evaluation(
        EvalConfig(kind="video", path=str(poic_root), out=str(tmp_path), detectors=["objrec-plain"], progress=False,
                   plots=False)
    )  # fmt: skip
    (row,) = report["video"]["clips"]
    assert row["scored"] == N_FRAMES - 1
    assert row["found_fraction"] == 1.0 and row["misplaced"] == 0
    assert row["raw_error_median"] < 2.0  # the ground truth's own uncertainty is about a pixel
    records = [json.loads(line) for line in (tmp_path / "records.jsonl").read_text().splitlines()]
    assert [f["t_ms"] for f in records[0]["result"]["frames"][:3]] == pytest.approx(
        [0.0, 1000 / 30, 2000 / 30], abs=1e-3
    )


def test_video_options_belong_to_video(tmp_path):
    import argparse

    from objrec.evaluation.cli import config_from_args, register

    ap = argparse.ArgumentParser()
    register(ap.add_subparsers())
    args = ap.parse_args(["eval", "pairs:x", "--out", str(tmp_path), "--protocol", "tracking"])
    with pytest.raises(ValueError, match="--protocol: applies to video:PATH only"):
        config_from_args(args)
    args = ap.parse_args(["eval", f"video:{Path('x')}", "--out", str(tmp_path), "--layout", "pot", "--realtime"])
    cfg = config_from_args(args)
    assert cfg.layout == "pot" and cfg.realtime and cfg.protocol == "recognition"


@pytest.mark.slow
@pytest.mark.skipif(
    shutil.which("taskset") is None or len(os.sched_getaffinity(0)) < 2, reason="needs taskset, 2 cores"
)
def test_one_core_and_two_give_the_same_corners(poic_root, tmp_path):
    """Without a budget a file gives the same raw and drawn corners on one core as on two: nothing the corners
    depend on reads the clock."""
    runs = {}
    for label, prefix in (("one", ["taskset", "-c", "0"]), ("two", [])):
        out = tmp_path / label
        cmd = [*prefix, sys.executable, "-m", "objrec", "eval", f"video:{poic_root}", "--detectors", "objrec-plain",
               "--out", str(out), "--no-plots", "--no-progress"]  # fmt: skip
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == 0, r.stderr[-2000:]
        (rec,) = [json.loads(line) for line in (out / "records.jsonl").read_text().splitlines()]
        runs[label] = [(f["corners"], f["raw_corners"]) for f in rec["result"]["frames"]]
    assert runs["one"] == runs["two"]


def test_found_again_counts_scored_frames_after_each_unscored_stretch():
    from objrec.evaluation.kinds.video import _found_again

    scored = np.array([0, 1, 1, 0, 0, 1, 1, 1, 0, 1, 0], bool)  # stretches at 0 (start), 3-4, 8, 10 (end)
    found = np.array([1, 1, 0, 0, 1, 0], bool)  # per scored frame: 1, 2 | 5, 6, 7 | 9
    assert _found_again(scored, found) == [3, None]
    assert _found_again(scored, np.ones(6, bool)) == [1, 1]
