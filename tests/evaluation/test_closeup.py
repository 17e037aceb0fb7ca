"""The ``outside`` sweep: close-ups partly beyond the frame, scored on the model points inside it."""

from __future__ import annotations

import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from objrec.evaluation.recognition import VISIBLE_GRID, score_detections, visible_grid_error
from objrec.types import Detection

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))


def _T(dx: float, dy: float) -> np.ndarray:
    return np.array([[1.0, 0, dx], [0, 1, dy], [0, 0, 1]])


def test_visible_grid_error_by_hand():
    truth = {"H": _T(-100, 0), "model_size": (200, 100), "frame_size": (640, 480)}
    assert visible_grid_error(_T(-97, -4), truth) == pytest.approx(5.0)
    # Entirely outside: nothing to measure.
    assert visible_grid_error(np.eye(3), {**truth, "H": _T(-300, 0)}) is None


def test_visible_grid_error_counts_only_points_inside_the_frame():
    # Half the model beyond the left border; the found homography also scales about the frame's origin, so
    # the grid points outside would add larger errors if they were counted. Reference: a plain loop.
    w, h = 300, 200
    H_true = np.array([[1.2, 0.1, -180.0], [-0.05, 1.1, 60.0], [1e-4, 0, 1]])
    H_found = np.diag([1.02, 1.02, 1.0]) @ H_true
    truth = {"H": H_true, "model_size": (w, h), "frame_size": (640, 480)}
    errs = []
    for j in range(VISIBLE_GRID):
        for i in range(VISIBLE_GRID):
            p = np.array([[[(i + 0.5) * w / VISIBLE_GRID, (j + 0.5) * h / VISIBLE_GRID]]])
            t = cv2.perspectiveTransform(p, H_true)[0, 0]
            if 0 <= t[0] < 640 and 0 <= t[1] < 480:
                errs.append(np.linalg.norm(cv2.perspectiveTransform(p, H_found)[0, 0] - t))
    assert 0 < len(errs) < VISIBLE_GRID**2
    assert visible_grid_error(H_found, truth) == pytest.approx(np.mean(errs), rel=1e-9)


def test_visible_match_rule_judges_the_inside_not_the_corners():
    # A small rotation about a point inside the frame: the in-frame points move little, the far corners a lot.
    w, h = 1000, 800
    H_true = _T(-300, -200)
    c, s = np.cos(np.deg2rad(0.5)), np.sin(np.deg2rad(0.5))
    R = _T(320, 240) @ np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]]) @ _T(-320, -240)
    H_found = R @ H_true
    corners = cv2.perspectiveTransform(np.array([[[0, 0], [w, 0], [w, h], [0, h]]], np.float64), H_found)[0]
    det = Detection("o", 0.9, 50, H_found, corners)
    true_corners = cv2.perspectiveTransform(np.array([[[0, 0], [w, 0], [w, h], [0, h]]], np.float64), H_true)[0]
    truth = [{"name": "o", "H": H_true, "corners": true_corners, "model_size": (w, h), "frame_size": (640, 480)}]
    by_corners = score_detections([det], truth, "corners", 3.0)
    by_inside = score_detections([det], truth, "visible", 3.0)
    assert by_corners["tp"] == 0 and by_corners["detections"][0]["corner_error"] > 4
    assert by_inside["tp"] == 1 and by_inside["corner_errors"][0] < 3


@pytest.mark.slow
def test_closeups_partly_outside_meet_the_targets(shared_data, tmp_path):
    """Recall >= 95/90/80% with 20/40/60% of the object outside the frame, mean in-frame error <= 3 px."""
    from bench_closeup import MAX_MEAN_ERROR, TARGETS, link_objects

    from objrec.evaluation import EvalConfig, run_evaluation

    link_objects(shared_data, tmp_path / "objects", dvds=3)
    cfg = EvalConfig(
        kind="synthetic",
        path=str(tmp_path / "objects"),
        out=str(tmp_path / "out"),
        detectors=["surf"],
        sweeps=["outside"],
        repeats=3,
        progress=False,
        plots=False,
    )
    rep = run_evaluation(cfg)
    groups = {g["level"]: g for g in rep["recognition"]["groups"] if g["distortion"] == "outside"}
    assert sorted(groups) == sorted(TARGETS)
    for level, target in TARGETS.items():
        g = groups[level]
        assert g["n_objects"] >= 30
        assert g["recall"] >= target, (level, g["recall"])
        assert g["corner_error_mean"] <= MAX_MEAN_ERROR, (level, g["corner_error_mean"])
    assert rep["recognition"]["summary"]["surf"]["fp"] == 0
