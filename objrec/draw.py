"""Annotated pictures of results: object outlines, names, scores, poses, ground truth and frame statistics."""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING

import cv2
import numpy as np

from objrec.imageio import to_bgr
from objrec.types import Detection, Pose

if TYPE_CHECKING:
    from objrec.pose import Camera

__all__ = ["draw_detections", "draw_axes", "label_text", "color_for", "TRACKED_MARK"]

#: What a label adds after the name of an object that tracking followed from the previous frame.
TRACKED_MARK = " (tracked)"

# Tableau-like colours (BGR), distinct from each other and readable with black text.
_PALETTE = [
    (232, 163, 78),
    (43, 142, 242),
    (89, 87, 225),
    (178, 183, 118),
    (79, 161, 89),
    (72, 201, 237),
    (161, 122, 176),
    (167, 157, 255),
    (95, 117, 156),
    (176, 171, 186),
]


def color_for(name: str) -> tuple[int, int, int]:
    """A stable, saturated BGR colour per object name."""
    return _PALETTE[zlib.crc32(name.encode()) % len(_PALETTE)]


def label_text(d: Detection) -> str:
    """A detection's label: its name (with :data:`TRACKED_MARK` when tracking followed it), score and inliers."""
    mark = TRACKED_MARK if d.state == "tracked" else ""
    return f"{d.name}{mark} {d.score:.2f} ({d.inliers})"


def draw_axes(image: np.ndarray, pose: Pose, camera: Camera, length_m: float) -> np.ndarray:
    """Draw the object frame of ``pose`` into ``image`` (in place, as ``cv2.drawFrameAxes`` does) and return it.

    x is red, y green, z (into the object) blue, each ``length_m`` metres long, projected with the camera's
    ``K`` for the image's size (:meth:`~objrec.pose.Camera.for_frame`) and its distortion. Nothing is drawn
    when an axis tip lies behind the camera or projects absurdly far outside the image.
    """
    h, w = image.shape[:2]
    K = camera.for_frame(w, h)
    R = cv2.Rodrigues(pose.rvec)[0]
    tips = np.vstack([np.zeros(3), np.eye(3) * length_m])
    if np.any((tips @ R.T + pose.tvec)[:, 2] <= 0):
        return image
    xy = cv2.projectPoints(tips, pose.rvec, pose.tvec, K, camera.dist)[0].reshape(-1, 2)
    if not np.all(np.isfinite(xy)) or np.abs(xy).max() > 16 * max(w, h):
        return image
    thick = max(1, round(2 * max(h, w) / 800.0))
    cv2.drawFrameAxes(image, K, camera.dist, pose.rvec, pose.tvec, float(length_m), thick)
    return image


def draw_detections(
    image: np.ndarray,
    detections: Iterable[Detection],
    truth_corners: Sequence[np.ndarray] = (),
    lines: Sequence[str] = (),
    camera: Camera | None = None,
    widths_m: Mapping[str, float] | None = None,
) -> np.ndarray:
    """A copy of ``image`` (BGR) with the outline and label of each of ``detections``; ground truth
    (``truth_corners``, (4, 2) corners per object) dashed in white.

    ``lines`` (a title, frame statistics) are written on a darkened band across the top of the picture, and
    labels are placed below it and inside the picture, so no label covers them and white text stays readable
    over a white sky. With ``camera``, a detection with a pose whose object has a width in ``widths_m``
    (name -> metres) also shows its axes (:func:`draw_axes`), half the object's width long.
    """
    detections = list(detections)
    out = to_bgr(image).copy()
    scale = max(out.shape[:2]) / 800.0
    thick = max(1, round(2 * scale))
    band = min(out.shape[0], int(round((len(lines) * 22 + 10) * scale))) if len(lines) else 0
    for q in truth_corners:
        truth = np.asarray(q, np.float64)
        for i in range(4):
            a, b = truth[i], truth[(i + 1) % 4]
            n = max(2, int(np.linalg.norm(b - a) / (8 * scale)))
            for k in range(0, n, 2):
                p0 = a + (b - a) * k / n
                p1 = a + (b - a) * min(k + 1, n) / n
                cv2.line(
                    out,
                    tuple(np.round(p0).astype(int)),
                    tuple(np.round(p1).astype(int)),
                    (255, 255, 255),
                    thick,
                    cv2.LINE_AA,
                )
    for d in detections:
        # An object verified without a plane is drawn by the hull of its inliers, not a mapped rectangle.
        shape = d.corners if d.outline is None else d.outline
        pts = np.round(shape).astype(np.int32).reshape(-1, 1, 2)
        cv2.polylines(out, [pts], True, color_for(d.name), thick + 1, cv2.LINE_AA)
        width_m = (widths_m or {}).get(d.name)
        if camera is not None and d.pose is not None and width_m:
            draw_axes(out, d.pose, camera, width_m / 2)
    for d in detections:
        color = color_for(d.name)
        pts = np.round(d.corners).astype(np.int32).reshape(-1, 1, 2)
        label = label_text(d)
        fs = 0.6 * scale
        (tw, th), _ = cv2.getTextSize(label, cv2.FONT_HERSHEY_SIMPLEX, fs, thick)
        x = int(np.clip(pts[:, 0, 0].min(), 0, max(0, out.shape[1] - tw - 4)))
        y = int(np.clip(pts[:, 0, 1].min() - 6, band + th + 4, max(band + th + 4, out.shape[0] - 4)))
        cv2.rectangle(out, (int(x), y - th - 4), (int(x) + tw + 4, y + 4), color, -1)
        cv2.putText(out, label, (int(x) + 2, y), cv2.FONT_HERSHEY_SIMPLEX, fs, (0, 0, 0), thick, cv2.LINE_AA)
    if band:
        out[:band] = (to_bgr(image)[:band].astype(np.float32) * 0.3).astype(np.uint8)  # outlines stop at the band
    for i, text in enumerate(lines):
        y = int((22 + 22 * i) * scale)
        cv2.putText(out, text, (8, y), cv2.FONT_HERSHEY_SIMPLEX, 0.6 * scale, (255, 255, 255), thick, cv2.LINE_AA)
    return out
