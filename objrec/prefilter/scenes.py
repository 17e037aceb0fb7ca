"""Training scenes for the prefilter: enrolled objects composited into backgrounds, cells labelled by overlap.

Backgrounds come from images, folders and videos (:func:`load_backgrounds`) or need no files
(:func:`default_backgrounds`); :func:`generate_scenes` composes the objects into them with
:func:`objrec.scenes.compose_scene` and keeps, per scene, the working-resolution image, its object
coverage and the object fraction of every cell.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import cv2
import numpy as np

from objrec.imageio import InputError, check_frame, read_image, to_bgr
from objrec.prefilter.features import cell_grid, work_shape
from objrec.scenes import Distortion, compose_scene

__all__ = [
    "load_backgrounds",
    "default_backgrounds",
    "SceneSet",
    "generate_scenes",
    "cell_fractions",
    "VIDEO_EXTENSIONS",
]

VIDEO_EXTENSIONS = (".avi", ".mp4", ".mov", ".mkv", ".m4v", ".webm", ".mpg", ".mpeg")
_IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff", ".pgm", ".ppm", ".webp")


def _read_video(path: Path, step: int, max_frames: int | None) -> list[np.ndarray]:
    cap = cv2.VideoCapture(str(path))
    if not cap.isOpened():
        raise InputError(f"{path}: not a readable video")
    frames = []
    i = 0
    try:
        while max_frames is None or len(frames) < max_frames:
            ok, f = cap.read()
            if not ok:
                break
            if i % step == 0:
                frames.append(to_bgr(check_frame(f, f"{path} frame {i}")))
            i += 1
    finally:
        cap.release()
    if not frames:
        raise InputError(f"{path}: video has no readable frames")
    return frames


def load_backgrounds(
    sources: Iterable[str | os.PathLike | np.ndarray], video_step: int = 10, max_video_frames: int | None = None
) -> list[np.ndarray]:
    """Background images (BGR uint8) from arrays, image files, folders of images and videos.

    Videos contribute every ``video_step``-th frame (consecutive frames are near duplicates).
    Errors name the path that could not be used.
    """
    if video_step < 1:
        raise ValueError(f"video_step: expected an integer >= 1, got {video_step}")
    out: list[np.ndarray] = []
    for src in sources:
        if isinstance(src, np.ndarray):
            out.append(to_bgr(check_frame(src, "background")))
            continue
        p = Path(src)
        if not p.exists():
            raise InputError(f"{p}: background path does not exist")
        if p.is_dir():
            files = sorted(f for f in p.iterdir() if f.suffix.lower() in _IMAGE_EXTENSIONS + VIDEO_EXTENSIONS)
            if not files:
                raise InputError(f"{p}: folder holds no images or videos")
            out.extend(load_backgrounds(files, video_step, max_video_frames))
        elif p.suffix.lower() in VIDEO_EXTENSIONS:
            out.extend(_read_video(p, video_step, max_video_frames))
        else:
            out.append(to_bgr(read_image(p)))
    if not out:
        raise InputError("backgrounds: none given")
    return out


def default_backgrounds(n: int = 8) -> list[np.ndarray]:
    """Backgrounds that need no files: the embedded sample backgrounds plus smooth and noisy textures."""
    from objrec.data import sample_background

    out = [sample_background((960, 540), seed=s) for s in range(n)]
    rng = np.random.default_rng(12345)
    for _ in range(max(2, n // 2)):
        base = rng.integers(0, 256, (6, 8, 3)).astype(np.uint8)
        img = cv2.resize(base, (960, 540), interpolation=cv2.INTER_CUBIC)
        noise = cv2.GaussianBlur(rng.normal(0, 12, (540, 960)).astype(np.float32), (0, 0), 2.0)
        out.append(np.clip(img.astype(np.float32) + noise[:, :, None], 0, 255).astype(np.uint8))
    return out


@dataclass
class SceneSet:
    """Generated training scenes at working resolution.

    ``images``: BGR uint8 work-resolution frames; ``fractions``: per scene, object fraction of every cell
    (row-major, as the features); ``masks``: per scene, work-resolution object coverage (float32 0..1).
    """

    images: list[np.ndarray]
    fractions: list[np.ndarray]
    masks: list[np.ndarray]
    n_objects: list[int]


def cell_fractions(mask: np.ndarray, cell_size: int) -> np.ndarray:
    """Mean of ``mask`` over each cell of :func:`cell_grid` (row-major)."""
    h, w = mask.shape
    g = cell_grid(h, w, cell_size)
    sums = np.add.reduceat(np.add.reduceat(mask.astype(np.float64), g.ys[:-1], axis=0), g.xs[:-1], axis=1)
    area = np.diff(g.ys)[:, None] * np.diff(g.xs)[None, :]
    return (sums / area).ravel()


def _random_distortion(rng: np.random.Generator) -> Distortion:
    return Distortion(
        gain=float(rng.uniform(0.7, 1.3)),
        gamma=float(rng.uniform(0.8, 1.25)),
        blur_sigma=float(rng.choice([0.0, 0.0, rng.uniform(0.3, 1.5)])),
        motion_blur=int(rng.choice([0, 0, 0, rng.integers(3, 9)])),
        noise_sigma=float(rng.uniform(0.0, 5.0)),
        jpeg_quality=int(rng.integers(40, 95)) if rng.random() < 0.3 else None,
    )


def generate_scenes(
    objects: dict[str, np.ndarray],
    backgrounds: Sequence[np.ndarray],
    n_scenes: int,
    work_size: int,
    cell_size: int,
    frame_size: tuple[int, int] = (640, 480),
    area_fraction: tuple[float, float] = (0.03, 0.3),
    empty_fraction: float = 0.15,
    max_objects: int = 3,
    seed: int | None = 0,
    progress: Callable[[Iterable[Any]], Iterable[Any]] | None = None,
) -> SceneSet:
    """Compose ``n_scenes`` frames with :func:`objrec.scenes.compose_scene`: 0..``max_objects`` enrolled
    objects each (a share ``empty_fraction`` with none), random pose, partial visibility at the border,
    occlusion and photometric distortion; reduced to the working resolution."""
    if not objects:
        raise ValueError("objects: need at least one enrolled object to train a prefilter")
    if not backgrounds:
        raise ValueError("backgrounds: need at least one background image")
    rng = np.random.default_rng(seed)
    names = list(objects)
    fw, fh = frame_size
    wh, ww = work_shape(fh, fw, work_size)
    out = SceneSet([], [], [], [])
    it: Iterable[int] = range(n_scenes)
    if progress is not None:
        it = progress(it)
    for _ in it:
        bg = backgrounds[int(rng.integers(len(backgrounds)))]
        if rng.random() < empty_fraction:
            chosen: list[str] = []
        else:
            k = int(rng.integers(1, min(max_objects, len(names)) + 1))
            chosen = list(rng.choice(names, k, replace=False))
        scene = compose_scene(
            bg,
            {n: objects[n] for n in chosen},
            rng,
            frame_size=frame_size,
            area_fraction=area_fraction,
            max_rotation=60.0,
            max_tilt=0.2,
            inside=bool(rng.random() < 0.7),
            occlusion=float(rng.choice([0.0, 0.0, rng.uniform(0.05, 0.3)])),
            distortion=_random_distortion(rng),
        )
        img = cv2.resize(scene.image, (ww, wh), interpolation=cv2.INTER_AREA)
        mask = cv2.resize((scene.object_mask > 0).astype(np.float32), (ww, wh), interpolation=cv2.INTER_AREA)
        out.images.append(img)
        out.masks.append(mask)
        out.fractions.append(cell_fractions(mask, cell_size))
        out.n_objects.append(len(chosen))
    return out
