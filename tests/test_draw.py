"""Annotated pictures: the statistics band is never covered, labels stay inside the picture."""

from __future__ import annotations

import cv2
import numpy as np

from objrec.draw import TRACKED_MARK, color_for, draw_axes, draw_detections, label_text
from objrec.pose import Camera
from objrec.types import Detection, Pose


def _detection(name: str, corners) -> Detection:
    return Detection(name, 0.9, 40, np.eye(3), np.asarray(corners, np.float64))


def test_statistics_band_is_not_covered_and_labels_stay_inside():
    """A white frame (a white sky) with one object at the very top and one partly beyond the left edge: the
    title band is dark with only white text in it (no label colour, no outline), and every label's colour is
    inside the picture, below the band."""
    img = np.full((480, 640, 3), 255, np.uint8)
    top = _detection("cover", [[200, 2], [400, 2], [400, 200], [200, 200]])
    left = _detection("poster", [[-150, 250], [100, 250], [100, 450], [-150, 450]])
    out = draw_detections(img, [top, left], lines=["objrec run: 2 found", "p50 12 ms"])
    band = out[:30]
    assert band.shape[0] == 30
    grey = (band[..., 0] == band[..., 1]) & (band[..., 1] == band[..., 2])
    assert grey.all()  # dark band and white (anti-aliased grey) text only: no label colour, no outline
    assert (band < 128).mean() > 0.7  # mostly dark: white text stays readable
    for d in (top, left):
        c = np.array(color_for(d.name), np.uint8)
        ys, xs = np.nonzero((out == c).all(axis=2))
        assert len(ys) > 50 and ys.min() >= 30 and xs.min() >= 0
    assert (draw_detections(img, [top]) == color_for("cover")).all(axis=2)[:30].any()  # without lines, no band


def _label_box_width(out: np.ndarray, name: str, below: int) -> int:
    """Width of the label's filled box: pixels of the object's colour in the rows above its outline."""
    ys, xs = np.nonzero((out[:below] == np.array(color_for(name), np.uint8)).all(axis=2))
    return int(xs.max() - xs.min() + 1)


def test_tracked_objects_are_labelled_as_tracked():
    corners = [[100, 200], [400, 200], [400, 400], [100, 400]]
    detected = _detection("cover", corners)
    tracked = Detection("cover", 0.9, 40, np.eye(3), np.asarray(corners, np.float64), state="tracked")
    assert label_text(detected) == "cover 0.90 (40)"
    assert label_text(tracked) == f"cover{TRACKED_MARK} 0.90 (40)" == "cover (tracked) 0.90 (40)"
    img = np.full((480, 640, 3), 255, np.uint8)
    widths = [_label_box_width(draw_detections(img, [d]), "cover", 195) for d in (detected, tracked)]
    scale, thick = 640 / 800.0, 2
    text = [
        cv2.getTextSize(label_text(d), cv2.FONT_HERSHEY_SIMPLEX, 0.6 * scale, thick)[0][0] for d in (detected, tracked)
    ]
    assert widths[1] - widths[0] == text[1] - text[0] > 40  # the marker is in the drawn label


def _posed_view():
    """A camera, the pose of an object about 0.6 m away, tilted, and its origin and 0.1 m axis tips projected."""
    camera = Camera([[800.0, 0, 319.5], [0, 800.0, 239.5], [0, 0, 1]], [], (640, 480))
    pose = Pose([0.5, 0.1, 0.2], [-0.1, -0.05, 0.6])
    tips = np.vstack([np.zeros(3), np.eye(3) * 0.1])
    xy = cv2.projectPoints(tips, pose.rvec, pose.tvec, camera.K, camera.dist)[0].reshape(-1, 2)
    return camera, pose, xy


def _colour_near(img: np.ndarray, xy: np.ndarray, bgr) -> bool:
    x, y = np.round(xy).astype(int)
    patch = img[y - 2 : y + 3, x - 2 : x + 3].reshape(-1, 3).astype(int)
    return bool((np.abs(patch - np.array(bgr)).sum(axis=1) < 60).any())


def test_draw_axes_draws_each_axis_in_its_colour_at_the_frame_s_scale():
    camera, pose, xy = _posed_view()
    img = np.zeros((480, 640, 3), np.uint8)
    assert draw_axes(img, pose, camera, 0.1) is img
    for tip, bgr in zip(xy[1:], [(0, 0, 255), (0, 255, 0), (255, 0, 0)], strict=True):
        assert _colour_near(img, (xy[0] + tip) / 2, bgr)  # the middle of each axis
    half = draw_axes(np.zeros((240, 320, 3), np.uint8), pose, camera, 0.1)  # K rescaled to the frame
    assert _colour_near(half, ((xy[0] + xy[1]) / 2 + 0.5) / 2 - 0.5, (0, 0, 255))
    behind = Pose(pose.rvec, -pose.tvec)
    assert not draw_axes(np.zeros((480, 640, 3), np.uint8), behind, camera, 0.1).any()


def test_draw_detections_shows_axes_where_pose_camera_and_width_are_known():
    camera, pose, xy = _posed_view()
    corners = [[300, 250], [500, 250], [500, 400], [300, 400]]
    d = Detection("cover", 0.9, 40, np.eye(3), np.asarray(corners, np.float64), pose=pose)
    img = np.zeros((480, 640, 3), np.uint8)
    middle = (xy[0] + xy[1]) / 2
    assert _colour_near(draw_detections(img, [d], camera=camera, widths_m={"cover": 0.2}), middle, (0, 0, 255))
    for kwargs in ({}, {"camera": camera}, {"camera": camera, "widths_m": {"other": 0.2}}):
        assert not _colour_near(draw_detections(img, [d], **kwargs), middle, (0, 0, 255))
