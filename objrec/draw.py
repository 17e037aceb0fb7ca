"""Annotated pictures of results: object outlines, names, scores, ground truth and frame statistics."""

from __future__ import annotations

import zlib
from collections.abc import Iterable, Sequence

import cv2
import numpy as np

from objrec.imageio import to_bgr
from objrec.types import Detection

__all__ = ["draw_detections", "color_for"]

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


def draw_detections(
    image: np.ndarray,
    detections: Iterable[Detection],
    truth_corners: Sequence[np.ndarray] = (),
    lines: Sequence[str] = (),
) -> np.ndarray:
    """A copy of ``image`` (BGR) with each detection's outline and label; ground truth dashed in white.

    ``lines`` (a title, frame statistics) are written on a darkened band across the top of the picture, and
    labels are placed below it and inside the picture, so no label covers them and white text stays readable
    over a white sky.
    """
    out = to_bgr(image).copy()
    scale = max(out.shape[:2]) / 800.0
    thick = max(1, round(2 * scale))
    band = min(out.shape[0], int(round((len(lines) * 22 + 10) * scale))) if len(lines) else 0
    for q in truth_corners:
        pts = np.asarray(q, np.float64)
        for i in range(4):
            a, b = pts[i], pts[(i + 1) % 4]
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
        color = color_for(d.name)
        pts = np.round(d.corners).astype(np.int32).reshape(-1, 1, 2)
        cv2.polylines(out, [pts], True, color, thick + 1, cv2.LINE_AA)
        label = f"{d.name} {d.score:.2f} ({d.inliers})"
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
