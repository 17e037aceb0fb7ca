"""Real footage with ground-truth corners: the layouts of the planar-tracking benchmarks.

Three layouts are read (:func:`load_video_clips` detects which from the folder, or takes ``layout``):

- ``real_video``: one folder per clip (or the clip's folder itself) holding ``video.mp4`` (or another video
  file, or a ``frames/`` folder), ``reference.png`` and ``gt.txt``, one line per frame
  ``FRAME x1 y1 x2 y2 x3 y3 x4 y4`` (the reference's corners (0,0), (w,0), (w,h), (0,h) in that frame; ``nan``:
  not scored).
- ``pot`` (POT-210, Liang et al. 2018): clips ``Vxx_y/`` (image folders) or ``Vxx_y.avi`` (or ``.mp4``) with
  ``annotation/Vxx_y_gt_points.txt`` (eight numbers per line: the four corners) and, optionally,
  ``annotation/Vxx_y_flag.txt`` (one number per ground-truth line; non-zero: not scored). POT-210 annotates
  every other frame: when a clip has about twice as many frames as ground-truth lines, line ``k`` is frame
  ``2k``; with as many lines as frames, line ``k`` is frame ``k``. ``y`` is the challenge kind (1 scale change,
  2 rotation, 3 perspective distortion, 4 motion blur, 5 occlusion, 6 out of view, 7 unconstrained). POT-210
  gives no reference image: the reference is frame 0 rectified through its ground truth.
- ``poic`` (POIC, and TMT in the same form): ``sequences/NAME/`` frames, ``gt/NAME.txt`` with the frame's
  file name (or number) first and eight numbers after it, ``Templates/NAME.png`` (optional) the reference.

Ground truth is kept as ``(n_frames, 4, 2)`` float64 corners, NaN where a frame is not scored (no line, a
flag, or ``nan`` in the file). Where a clip has no reference image, :func:`rectified_reference` makes one
from frame 0.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import cv2
import numpy as np

from objrec.datasets._common import IMAGE_EXTENSIONS, DatasetError, image_files, load_image
from objrec.geometry import model_corners
from objrec.imageio import video_frames

__all__ = [
    "LAYOUTS",
    "POT_CHALLENGES",
    "VideoClip",
    "load_video_clips",
    "detect_layout",
    "read_corner_lines",
    "clip_frames",
    "rectified_reference",
    "reference_image",
]

LAYOUTS = ("real_video", "pot", "poic")
VIDEO_EXTENSIONS = (".mp4", ".avi", ".mov", ".mkv", ".m4v")
#: POT-210's challenge kinds by the clip name's suffix (``Vxx_y``).
POT_CHALLENGES = {
    "1": "scale",
    "2": "rotation",
    "3": "perspective",
    "4": "motion_blur",
    "5": "occlusion",
    "6": "out_of_view",
    "7": "unconstrained",
}
_POT_NAME = re.compile(r"^V\d+_(\d+)$")


@dataclass
class VideoClip:
    """One clip of real footage with ground truth.

    Attributes
    ----------
    name : str
        The clip's name (its folder or file stem).
    source : Path
        A video file or a folder of frames (in name order).
    gt : ndarray
        ``(n, 4, 2)`` float64 ground-truth corners per frame, NaN where a frame is not scored; ``n`` is the
        number of ground-truth frames (frames beyond it are not scored).
    reference : Path or None
        The reference image, whose corners (0,0), (w,0), (w,h), (0,h) the ground truth gives; None: frame 0
        rectified through its ground truth (:func:`rectified_reference`).
    challenge : str or None
        The challenge kind (POT-210's suffix), when the layout has one.
    fps : float
        The footage's frame rate (a video file's own; 30 for a folder of frames).
    layout : str
        One of :data:`LAYOUTS`.
    """

    name: str
    source: Path
    gt: np.ndarray
    reference: Path | None
    challenge: str | None
    fps: float
    layout: str

    @property
    def scored(self) -> np.ndarray:
        """Bool per ground-truth frame: scored (all eight numbers finite)."""
        return np.isfinite(self.gt).all(axis=(1, 2))


def read_corner_lines(path: Path, named: bool) -> tuple[list[str], np.ndarray]:
    """The lines of a corner file: ``(names, (n, 4, 2) corners)``; ``named``: each line starts with a frame name
    or number. Blank lines are skipped; ``nan`` reads as NaN; a line with another count of numbers is an error
    naming the file and line.
    ``path``: the corner file."""
    names, rows = [], []
    try:
        text = path.read_text(encoding="utf-8", errors="strict")
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot be read as a ground-truth text file ({exc})") from None
    for k, line in enumerate(text.splitlines(), 1):
        parts = line.replace(",", " ").split()
        if not parts:
            continue
        if named:
            names.append(parts[0])
            parts = parts[1:]
        if len(parts) != 8:
            raise DatasetError(f"{path}:{k}: expected {'a frame name and ' if named else ''}8 numbers, got {line!r}")
        try:
            rows.append([float(v) for v in parts])
        except ValueError:
            raise DatasetError(f"{path}:{k}: not a number in {line!r}") from None
    if not rows:
        raise DatasetError(f"{path}: no ground-truth line")
    return names, np.asarray(rows, np.float64).reshape(-1, 4, 2)


def _video_fps(path: Path) -> tuple[float, int]:
    cap = cv2.VideoCapture(str(path))
    try:
        if not cap.isOpened():
            raise DatasetError(f"{path}: cannot be opened as a video")
        fps = cap.get(cv2.CAP_PROP_FPS)
        n = int(cap.get(cv2.CAP_PROP_FRAME_COUNT))
    finally:
        cap.release()
    return (float(fps) if fps and fps > 0 else 30.0), n


def _frame_count(source: Path) -> tuple[float, int]:
    if source.is_dir():
        return 30.0, len(image_files(source))
    return _video_fps(source)


def _find_video(folder: Path) -> Path | None:
    for p in sorted(folder.iterdir()):
        if p.is_file() and p.suffix.lower() in VIDEO_EXTENSIONS:
            return p
    frames = folder / "frames"
    return frames if frames.is_dir() else None


def detect_layout(root: Path) -> str:
    """The layout of ``root`` (see the module docstring); a :class:`DatasetError` when none fits."""
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"{root}: video dataset folder not found")
    if (root / "annotation").is_dir():
        return "pot"
    if (root / "sequences").is_dir() and (root / "gt").is_dir():
        return "poic"
    if (root / "gt.txt").is_file() or any((d / "gt.txt").is_file() for d in root.iterdir() if d.is_dir()):
        return "real_video"
    raise DatasetError(
        f"{root}: not a video dataset: expected clip folders with gt.txt (real_video), annotation/ (POT-210) "
        f"or sequences/ and gt/ (POIC, TMT)"
    )


def _listing(root: Path, layout: str) -> dict[str, Path]:
    """Each clip's name and the file or folder that defines it (its ground truth), read from names alone."""
    if layout == "real_video":
        if (root / "gt.txt").is_file():
            return {root.name: root}
        return {d.name: d for d in sorted(root.iterdir()) if (d / "gt.txt").is_file()}
    if layout == "pot":
        ann = root / "annotation"
        found = {p.name[: -len("_gt_points.txt")]: p for p in sorted(ann.glob("*_gt_points.txt"))}
        if not found:
            raise DatasetError(f"{ann}: no *_gt_points.txt file")
        return found
    found = {p.stem: p for p in sorted((root / "gt").glob("*.txt"))}
    if not found:
        raise DatasetError(f"{root / 'gt'}: no ground-truth file")
    return found


def _real_video(root: Path, name: str, d: Path) -> VideoClip:
    source = _find_video(d)
    if source is None:
        raise DatasetError(f"{d}: no video file ({', '.join(VIDEO_EXTENSIONS)}) or frames/ folder")
    frames, gt = read_corner_lines(d / "gt.txt", named=True)
    index = [int(n) if n.isdigit() else k for k, n in enumerate(frames)]
    full = np.full((max(index) + 1, 4, 2), np.nan)
    full[index] = gt
    ref = next((d / f"reference{e}" for e in IMAGE_EXTENSIONS if (d / f"reference{e}").is_file()), None)
    fps, _ = _frame_count(source)
    return VideoClip(name, source, full, ref, None, fps, "real_video")


def _pot(root: Path, name: str, gt_file: Path) -> VideoClip:
    candidates = [root / name] + [root / f"{name}{e}" for e in VIDEO_EXTENSIONS]
    source = next((c for c in candidates if c.exists()), None)
    if source is None:
        raise DatasetError(f"{gt_file}: no clip {name}/ or {name}.avi beside annotation/")
    _, gt = read_corner_lines(gt_file, named=False)
    flag_file = gt_file.parent / f"{name}_flag.txt"
    if flag_file.is_file():
        try:
            flags = [float(line.split()[0]) for line in flag_file.read_text().splitlines() if line.strip()]
        except ValueError:
            raise DatasetError(f"{flag_file}: expected one number per line") from None
        if len(flags) != len(gt):
            raise DatasetError(f"{flag_file}: {len(flags)} flags for {len(gt)} ground-truth lines")
        gt[np.array(flags) != 0] = np.nan
    fps, n_frames = _frame_count(source)
    step = 2 if n_frames >= 2 * len(gt) - 1 and n_frames > len(gt) else 1
    full = np.full(((len(gt) - 1) * step + 1, 4, 2), np.nan)
    full[::step] = gt
    m = _POT_NAME.match(name)
    challenge = POT_CHALLENGES.get(m.group(1), m.group(1)) if m else None
    return VideoClip(name, source, full, None, challenge, fps, "pot")


def _poic(root: Path, name: str, gt_file: Path) -> VideoClip:
    seq = root / "sequences" / name
    if not seq.is_dir():
        raise DatasetError(f"{gt_file}: no frames folder {seq}")
    frames = image_files(seq)
    if not frames:
        raise DatasetError(f"{seq}: no frames ({', '.join(IMAGE_EXTENSIONS)})")
    names, gt = read_corner_lines(gt_file, named=True)
    by_name = {p.stem: k for k, p in enumerate(frames)} | {p.name: k for k, p in enumerate(frames)}
    full = np.full((len(frames), 4, 2), np.nan)
    for n, corners in zip(names, gt, strict=True):
        k = by_name.get(n)
        if k is None and n.isdigit() and int(n) < len(frames):
            k = int(n)
        if k is None:
            raise DatasetError(f"{gt_file}: frame {n!r} is not in {seq}")
        full[k] = corners
    template = next((root / "Templates" / f"{name}{e}" for e in IMAGE_EXTENSIONS
                     if (root / "Templates" / f"{name}{e}").is_file()), None)  # fmt: skip
    return VideoClip(name, seq, full, template, None, 30.0, "poic")


_BUILDERS = {"real_video": _real_video, "pot": _pot, "poic": _poic}


def load_video_clips(
    root: str | os.PathLike, layout: str | None = None, names: list[str] | None = None
) -> list[VideoClip]:
    """The clips of a video dataset folder (layout detected unless given; ``names`` keeps only those clips,
    and only they are read).
    ``root``: the dataset's folder; ``layout``: its layout (None: detected).

    Raises
    ------
    DatasetError
        Naming the file or folder when the layout does not fit, a file is malformed, or a named clip is absent.
    """
    root = Path(root)
    layout = layout or detect_layout(root)
    if layout not in LAYOUTS:
        raise DatasetError(f"--layout: expected one of {', '.join(LAYOUTS)}, got {layout!r}")
    listing = _listing(root, layout)
    missing = [n for n in names or [] if n not in listing]
    if missing:
        raise DatasetError(f"{root}: no clip {missing[0]!r} (clips: {', '.join(listing)})")
    chosen = [n for n in listing if not names or n in names]
    return [_BUILDERS[layout](root, n, listing[n]) for n in chosen]


def clip_frames(clip: VideoClip) -> Iterator[tuple[int, np.ndarray, float]]:
    """``(index, BGR frame, footage time in ms)`` of each frame of ``clip``, in order (a video file's own
    timestamps, or the index over the frame rate)."""
    if clip.source.is_dir():
        for i, p in enumerate(image_files(clip.source)):
            yield i, load_image(p), 1000.0 * i / clip.fps
        return
    cap = cv2.VideoCapture(str(clip.source))
    if not cap.isOpened():
        raise DatasetError(f"{clip.source}: cannot be opened as a video")
    try:
        for i, (img, t) in enumerate(video_frames(cap, clip.fps)):
            yield i, img, t
    finally:
        cap.release()


def rectified_reference(frame: np.ndarray, corners: np.ndarray, max_side: int = 640) -> np.ndarray:
    """``frame`` rectified through ``corners`` (its (0,0), (w,0), (w,h), (0,h) in the frame) into an upright
    image whose sides are the quadrilateral's mean opposite side lengths (the longer at most ``max_side``):
    the reference a tracker is initialised with."""
    c = np.asarray(corners, np.float64).reshape(4, 2)
    if not np.all(np.isfinite(c)):
        raise DatasetError("rectified_reference: frame 0 has no ground truth to rectify")
    side_w = 0.5 * float(np.linalg.norm(c[1] - c[0]) + np.linalg.norm(c[2] - c[3]))
    side_h = 0.5 * float(np.linalg.norm(c[3] - c[0]) + np.linalg.norm(c[2] - c[1]))
    s = min(1.0, max_side / max(side_w, side_h))
    w, h = max(8, int(round(side_w * s))), max(8, int(round(side_h * s)))
    dst = model_corners(w, h).astype(np.float32)
    M = cv2.getPerspectiveTransform(c.astype(np.float32), dst)
    return cv2.warpPerspective(frame, M, (w, h), flags=cv2.INTER_AREA)


def reference_image(clip: VideoClip, first_frame: np.ndarray | None = None) -> np.ndarray:
    """The clip's reference image, or frame 0 rectified through its ground truth where it has none.
    ``clip``: the clip; ``first_frame``: its frame 0 when already read (None: read here)."""
    if clip.reference is not None:
        return load_image(clip.reference)
    if first_frame is None:
        first_frame = next(clip_frames(clip))[1]
    return rectified_reference(first_frame, clip.gt[0])
