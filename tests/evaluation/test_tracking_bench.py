"""The tracking benchmark's scenes and scores: ground truth against the rendered frames, scores by hand."""

from __future__ import annotations

import sys
from pathlib import Path

import cv2
import numpy as np
import pytest

from objrec.geometry import map_points, model_corners

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

from tracking_metrics import Det, FrameLog, scene_metrics  # noqa: E402
from tracking_scenes import SceneSpec, ShelfStream, parse_scene  # noqa: E402

MARKERS = {(2, 0, 1): (40, 40), (1, 0, 2): (160, 40), (0, 1, 2): (160, 260)}  # (strong, weak, weak) BGR channels


def _marked_cover() -> np.ndarray:
    """A grey 200x300 cover with a red, a green and a blue 30x30 square (centres in :data:`MARKERS`)."""
    img = np.full((300, 200, 3), 128, np.uint8)
    for (strong, _, _), (cx, cy) in MARKERS.items():
        img[cy - 15 : cy + 15, cx - 15 : cx + 15] = 0
        img[cy - 15 : cy + 15, cx - 15 : cx + 15, strong] = 255
    return img


def _centroid(image: np.ndarray, strong: int, weak: tuple[int, int]) -> np.ndarray:
    c = image.astype(np.float64)
    w = np.clip(c[:, :, strong] - np.maximum(c[:, :, weak[0]], c[:, :, weak[1]]) - 100, 0, None)
    ys, xs = np.indices(w.shape)
    return np.array([(w * xs).sum(), (w * ys).sum()]) / w.sum()


@pytest.mark.parametrize("kind,index", [("still", 0), ("shelf", 17)])
def test_truth_corners_put_the_model_where_the_frame_shows_it(kind, index):
    # Reference: coloured squares painted on the model, found by their centroids in the rendered frame,
    # against the squares' centres mapped by the homography that takes the model outline to the truth corners.
    bg = np.full((480, 640, 3), 90, np.uint8)
    stream = ShelfStream(SceneSpec(kind, 1), {"m": _marked_cover()}, [bg], 30, (640, 480), seed=3, noise_sigma=0)
    frame = stream.frame(index)
    (truth,) = frame.truth
    H = cv2.getPerspectiveTransform(model_corners(200, 300).astype(np.float32), truth.corners.astype(np.float32))
    for (strong, *weak), centre in MARKERS.items():
        expected = map_points(H, np.array([centre], np.float64) - 0.5)[0]  # a 30-px square's centre: +14.5
        assert np.linalg.norm(_centroid(frame.image, strong, tuple(weak)) - expected) < 0.15
    assert truth.visible > 0.97


def test_visible_fraction_follows_the_shelf_out_of_the_frame_and_under_the_hand():
    bg = np.full((480, 640, 3), 90, np.uint8)
    covers = {f"c{i}": _marked_cover() for i in range(6)}
    leave = ShelfStream(parse_scene("leave6"), covers, [bg], 100, (640, 480), noise_sigma=0)
    go, out, back, home = leave.leave_phases()
    assert all(t.visible > 0.97 for t in leave.frame(go - 1).truth)
    assert all(t.visible == 0.0 for t in leave.frame((out + back) // 2).truth)
    assert all(t.visible > 0.97 for t in leave.frame(home + 1).truth)
    occl = ShelfStream(parse_scene("occlusion6"), covers, [bg], 100, (640, 480), noise_sigma=0)
    start, end = occl.hand_span
    least = {n: 1.0 for n in covers}
    for i in range(start, end, 2):
        for t in occl.frame(i).truth:
            least[t.name] = min(least[t.name], t.visible)
    # 3x2 grid: the hand crosses the lower row (rows // 2), hiding each of its covers for a while.
    assert sorted(least.values())[:3] == pytest.approx([0.0] * 3, abs=0.25)
    assert min(sorted(least.values())[3:]) > 0.97


def _truth(vis: list[dict[str, float]]) -> list[dict]:
    q = model_corners(100, 100) + 50
    return [{n: (q, v) for n, v in frame.items()} for frame in vis]


def test_scores_by_hand():
    q = model_corners(100, 100) + 50
    vis = [{"a": 1.0, "b": 1.0}] * 3 + [{"a": 0.1, "b": 1.0}] * 3 + [{"a": 1.0, "b": 1.0}] * 4
    truths = _truth(vis)
    logs = []
    for i in range(10):
        dets = [Det("b", q + [5.0, 0.0])]  # found at 10 px, not at 3 px
        if i < 4 or i >= 8:
            dets.append(Det("a", q + 1.0))  # reported one frame into hiding, found again 2 frames after
        if i == 9:
            dets.append(Det("z", q))  # not on the shelf
        logs.append(FrameLog(i, dets, 10.0 + i, i == 9))
    m = scene_metrics(logs, truths, "leave", 10)
    f = m["found"]
    assert f["object_frames"] == 17
    assert f["found_3px"] == 5 and f["found_10px"] == 5 + 10
    assert f["corner_error_px"]["n"] == 15
    assert m["false"]["false"] == 1 and m["false"]["drawn_while_hidden"] == 1
    assert m["lost"] == {"events": 1, "median": 1.0, "max": 1, "kept": 0}
    assert m["reacquire"] == {"events": 1, "median": 2.0, "max": 2, "never": 0}
    assert m["latency"]["late"] == 1 and m["latency"]["p50_ms"] == pytest.approx(14.5)
    assert m["latency"]["late_frames"] == [9] and m["latency"]["late_settled"] == 0  # SETTLE is frame 30
    # Skipped frames: no lost or re-acquired frames.
    assert scene_metrics(logs[::2], truths, "leave", 10)["lost"] is None


def test_a_late_frame_is_put_down_to_what_ran_furthest_over():
    from tracking_metrics import OUTSIDE_UNITS, late_cause, late_causes

    units = [("features", 6.0, 7.0, True), ("read", 1.0, 9.0, False), ("verify", 0.5, 3.0, True)]
    assert late_cause(units, outside_ms=3.0, typical_outside_ms=2.5) == "read"  # 8 ms over, vs 2.5 and 1
    assert late_cause(units[2:], outside_ms=3.0, typical_outside_ms=2.5) == "verify (mandatory)"
    assert late_cause(units, outside_ms=40.0, typical_outside_ms=2.5) == OUTSIDE_UNITS  # a stall between units
    assert late_cause([], outside_ms=1.0, typical_outside_ms=2.5) == OUTSIDE_UNITS
    logs = [
        FrameLog(i, [], 40.0, late, cause=c)
        for i, (late, c) in enumerate([(True, "read"), (False, None), (True, "read"), (True, OUTSIDE_UNITS)])
    ]
    assert late_causes(logs) == {"read": 2, OUTSIDE_UNITS: 1}
    assert list(late_causes(logs)) == ["read", OUTSIDE_UNITS]
