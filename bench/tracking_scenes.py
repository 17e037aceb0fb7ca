"""Live-stream scenes for the tracking benchmark: a shelf of printed covers filmed by a hand-held camera.

A shelf is a board holding ``n`` covers in a grid. Each cover is "printed and photographed" once per stream
(gamma, colour cast, slight blur, JPEG round trip of its texture) and scaled to its size on the shelf with
``INTER_AREA``. Every frame, one homography (the camera) maps the shelf plane into the frame, over a frame
of ``vtest.avi`` resized to the frame size (each shown for ``hold`` frames; the video behind the shelf does
not move with the camera); then motion blur along the shelf's motion when it moves fast, and sensor noise.

Scene kinds (:data:`SCENE_KINDS`), each named ``<kind><covers>`` (``shelf12``; the count may be left out
of the other kinds, :data:`DEFAULT_COVERS`):

- ``shelf``: hand-held shake all along, a sum of three low-frequency sinusoids on translation (a few
  pixels), rotation and scale;
- ``still``: no shake, sensor noise only;
- ``occlusion``: shake, and a hand (palm and forearm reaching up from the bottom edge) moving across the
  middle row of covers and out again;
- ``pan``: shake, and a quick swing of the camera (out and back within :data:`SWING_FRAMES` frames, motion
  blurred), then sharp again;
- ``leave``: shake, and a pan that takes the whole shelf out of the frame, holds it out, and brings it back.

Ground truth per frame and cover: its outline (the model image's ``(0,0), (w,0), (w,h), (0,h)`` mapped into
the frame) and its visible fraction (share of its area inside the frame and not under the hand).
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path

import cv2
import numpy as np

from objrec.geometry import map_points, model_corners, polygon_area
from objrec.scenes import Distortion, apply_photometric, warp_object

__all__ = [
    "SCENE_KINDS",
    "DEFAULT_COVERS",
    "SceneSpec",
    "CoverTruth",
    "ShelfFrame",
    "ShelfStream",
    "parse_scene",
    "shelf_cover_names",
    "load_backgrounds",
    "print_and_photograph",
]

SCENE_KINDS = ("shelf", "still", "occlusion", "pan", "leave")
#: Covers of a scene named without a count (``shelf`` needs one).
DEFAULT_COVERS = {"still": 12, "occlusion": 12, "pan": 12, "leave": 12}
#: The SMVS references a shelf draws its covers from (``001`` .. ``050``: the covers with phone photos).
SHELF_POOL = [f"{i:03d}" for i in range(1, 51)]
#: Frames of the quick swing of the ``pan`` scene (out and back).
SWING_FRAMES = 8
#: Frames of each pan of the ``leave`` scene, and frames the shelf stays out of view between them.
LEAVE_PAN_FRAMES = 60
LEAVE_OUT_FRAMES = 40
#: Frames the hand of the ``occlusion`` scene takes to cross the frame (at most 60% of the stream).
HAND_FRAMES = 180
#: Share of a frame period the shutter is open: the length of motion blur per pixel of motion.
EXPOSURE = 0.5
#: Grids (columns, rows) by cover count; other counts get the most nearly 16:9 grid that holds them.
GRIDS = {1: (1, 1), 2: (2, 1), 3: (3, 1), 4: (2, 2), 6: (3, 2), 12: (4, 3), 20: (5, 4)}
#: Gap between covers, in cover heights; the grid with its gaps fills this share of the frame height.
GAP = 0.1
FILL = 0.9
#: A single cover is at most this share of the frame height.
MAX_COVER_HEIGHT = 0.45


@dataclass(frozen=True)
class SceneSpec:
    """A scene: its kind (one of :data:`SCENE_KINDS`) and how many covers the shelf holds."""

    kind: str
    covers: int

    @property
    def name(self) -> str:
        return f"{self.kind}{self.covers}"


def parse_scene(text: str) -> SceneSpec:
    """``"shelf12"`` -> ``SceneSpec("shelf", 12)``; ``"still"`` -> ``SceneSpec("still", 12)``."""
    m = re.fullmatch(r"([a-z]+)(\d*)", text.strip())
    if m is None or m.group(1) not in SCENE_KINDS:
        raise ValueError(f"scene: expected <kind>[<covers>] with kind one of {SCENE_KINDS}, got {text!r}")
    kind, count = m.group(1), m.group(2)
    if not count and kind not in DEFAULT_COVERS:
        raise ValueError(f"scene: {kind!r} needs a cover count ({kind}1, {kind}3, {kind}12 ...), got {text!r}")
    n = int(count) if count else DEFAULT_COVERS[kind]
    if not 1 <= n <= len(SHELF_POOL):
        raise ValueError(f"scene: expected 1..{len(SHELF_POOL)} covers, got {n} in {text!r}")
    return SceneSpec(kind, n)


def _seed(spec: SceneSpec, seed: int, *more: int) -> list[int]:
    """A random generator's seed for ``spec`` under the run's ``seed`` (``more`` tells uses apart)."""
    return [seed, zlib.crc32(spec.kind.encode()), spec.covers, *more]


def shelf_cover_names(spec: SceneSpec, seed: int) -> list[str]:
    """The covers of ``spec``'s shelf: ``spec.covers`` of :data:`SHELF_POOL`, drawn by ``seed`` and the scene."""
    rng = np.random.default_rng(_seed(spec, seed))
    return [SHELF_POOL[i] for i in sorted(rng.choice(len(SHELF_POOL), spec.covers, replace=False))]


def load_backgrounds(path: Path, count: int) -> list[np.ndarray]:
    """The first ``count`` frames of the video at ``path`` (all it has when fewer), at their own size."""
    cap = cv2.VideoCapture(str(path))
    if not cap.isOpened():
        raise ValueError(f"{path}: cannot be opened as a video")
    out = []
    while len(out) < count:
        ok, img = cap.read()
        if not ok:
            break
        out.append(img)
    cap.release()
    if not out:
        raise ValueError(f"{path}: no frames could be read")
    return out


def print_and_photograph(image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    """``image`` as a printed cover looks to a camera: gamma, colour cast, slight blur, JPEG round trip."""
    gamma = rng.uniform(0.8, 1.25)
    cast = rng.uniform(0.9, 1.1, 3)
    lut = np.clip(255.0 * (np.arange(256) / 255.0)[:, None] ** gamma * cast[None, :], 0, 255).astype(np.uint8)
    out = cv2.merge([cv2.LUT(c, lut[:, k]) for k, c in enumerate(cv2.split(image))])
    out = cv2.GaussianBlur(out, (0, 0), rng.uniform(0.4, 0.9))
    ok, buf = cv2.imencode(".jpg", out, [cv2.IMWRITE_JPEG_QUALITY, int(rng.integers(60, 86))])
    return cv2.imdecode(buf, cv2.IMREAD_COLOR)


def _grid(n: int) -> tuple[int, int]:
    if n in GRIDS:
        return GRIDS[n]
    rows = max(1, round(np.sqrt(n * 9 / 16)))
    return int(np.ceil(n / rows)), rows


def _scale_matrix(sx: float, sy: float) -> np.ndarray:
    """Model pixels to the pixels of the model resized by ``(sx, sy)`` with ``INTER_AREA`` (pixel centres at
    integers: a resized pixel's centre is the centre of the model area it averages)."""
    return np.array([[sx, 0, 0.5 * sx - 0.5], [0, sy, 0.5 * sy - 0.5], [0, 0, 1]], np.float64)


def _board(rng: np.random.Generator, w: float, h: float) -> np.ndarray:
    """A ``w`` x ``h`` grey-brown board with a faint low-frequency grain."""
    bw, bh = max(2, int(round(w))), max(2, int(round(h)))
    base = rng.uniform([70, 80, 95], [110, 120, 140])
    grain = cv2.resize(rng.normal(0, 1, (8, 12)).astype(np.float32), (bw, bh), interpolation=cv2.INTER_CUBIC)
    return np.clip(base[None, None, :] * (1 + 0.08 * grain[:, :, None]), 0, 255).astype(np.uint8)


def _translation(dx: float, dy: float) -> np.ndarray:
    return np.array([[1, 0, dx], [0, 1, dy], [0, 0, 1]], np.float64)


def _motion_blur(img: np.ndarray, v: np.ndarray) -> np.ndarray:
    """``img`` blurred along the image motion ``v`` (px per frame) over the exposure."""
    length = EXPOSURE * float(np.hypot(*v))
    if length < 1.5:
        return img
    k = int(np.ceil(length)) | 1
    kernel = np.zeros((k, k), np.float32)
    c = (k - 1) / 2
    u = v / np.hypot(*v) * (length - 1) / 2
    cv2.line(kernel, (round(c - u[0]), round(c - u[1])), (round(c + u[0]), round(c + u[1])), 1.0, 1, cv2.LINE_AA)
    return cv2.filter2D(img, -1, kernel / kernel.sum())


def _paint_hand(canvas: np.ndarray, mask: np.ndarray) -> None:
    """A skin-coloured hand where ``mask`` is set, with soft shading across it (little texture to match on)."""
    ys, xs = np.nonzero(mask)
    if not len(xs):
        return
    skin = np.array([120.0, 150.0, 200.0])
    shade = 0.85 + 0.25 * np.cos((xs - xs.mean()) / max(1.0, float(np.ptp(xs))) * np.pi)
    canvas[ys, xs] = np.clip(skin[None, :] * shade[:, None], 0, 255).astype(np.uint8)


@dataclass(frozen=True)
class CoverTruth:
    """One cover in one frame: its outline in the frame and the share of it in view."""

    name: str
    corners: np.ndarray  # (4, 2) the model's (0,0), (w,0), (w,h), (0,h) mapped into the frame
    visible: float  # of its area, inside the frame and not under the hand


@dataclass
class ShelfFrame:
    index: int
    image: np.ndarray
    truth: list[CoverTruth]
    hand: np.ndarray | None = None  # (H, W) bool where the hand covers the frame


@dataclass
class _Layout:
    place: dict[str, np.ndarray]  # model pixels -> shelf plane (= frame pixels of the camera at rest)
    textures: dict[str, tuple[np.ndarray, np.ndarray]]  # printed texture and texture pixels -> shelf plane
    board: np.ndarray
    board_H: np.ndarray  # board pixels -> shelf plane
    cover_size: tuple[float, float]
    extent: tuple[float, float, float, float]  # the board's x0, y0, x1, y1 on the shelf plane
    middle_row_y: float  # the centre of the middle row of covers on the shelf plane


@dataclass
class ShelfStream:
    """A deterministic stream of one scene (see the module notes).

    Parameters
    ----------
    spec : SceneSpec
    covers : mapping name -> image
        The model images of the shelf's covers (as enrolled).
    backgrounds : list of images
        Video frames, each shown for ``hold`` frames, resized to ``frame_size``.
    n_frames : int
    frame_size : (w, h)
    seed : int
    noise_sigma : float
        Sensor noise (Gaussian, grey levels).
    """

    spec: SceneSpec
    covers: dict[str, np.ndarray]
    backgrounds: list[np.ndarray]
    n_frames: int
    frame_size: tuple[int, int] = (1280, 720)
    seed: int = 0
    hold: int = 3
    noise_sigma: float = 3.0
    _layout: _Layout = field(init=False, repr=False)
    _shake: np.ndarray = field(init=False, repr=False)

    def __post_init__(self) -> None:
        rng = np.random.default_rng(_seed(self.spec, self.seed, 1))
        self._layout = self._lay_out(rng)
        # Per component (dx, dy, rotation, scale): three sinusoids of (amplitude, Hz, phase).
        fw = self.frame_size[0]
        amps = np.array([2.5 * fw / 640, 2.0 * fw / 640, 0.3, 0.003])
        weights = np.array([0.55, 0.3, 0.15])
        hz = rng.uniform([0.2, 0.6, 1.2], [0.5, 1.1, 2.0], (4, 3))
        self._shake = np.stack([amps[:, None] * weights, hz, rng.uniform(0, 2 * np.pi, (4, 3))], axis=-1)

    def __len__(self) -> int:
        return self.n_frames

    # -- layout ------------------------------------------------------------------------------------------------
    def _lay_out(self, rng: np.random.Generator) -> _Layout:
        fw, fh = self.frame_size
        names = list(self.covers)
        cols, rows = _grid(len(names))
        mw, mh = max(im.shape[1] for im in self.covers.values()), max(im.shape[0] for im in self.covers.values())
        aspect = mw / mh
        ch = min(FILL * fh / (rows + GAP * (rows + 1)), FILL * fw / (cols * aspect + GAP * (cols + 1)))
        ch = min(ch, MAX_COVER_HEIGHT * fh)
        cw, gap = ch * aspect, GAP * ch
        x0 = (fw - cols * cw - (cols - 1) * gap) / 2
        y0 = (fh - rows * ch - (rows - 1) * gap) / 2
        place, textures = {}, {}
        for i, name in enumerate(names):
            img = self.covers[name]
            h, w = img.shape[:2]
            r, c = divmod(i, cols)
            s = min(cw / w, ch / h)
            ox = x0 + c * (cw + gap) + (cw - s * w) / 2
            oy = y0 + r * (ch + gap) + (ch - s * h) / 2
            H = _translation(ox, oy) @ np.diag([s, s, 1.0])
            place[name] = H
            printed = print_and_photograph(cv2.cvtColor(img, cv2.COLOR_GRAY2BGR) if img.ndim == 2 else img, rng)
            tw, th = max(1, round(w * s)), max(1, round(h * s))
            tex = cv2.resize(printed, (tw, th), interpolation=cv2.INTER_AREA)
            textures[name] = (tex, H @ np.linalg.inv(_scale_matrix(tw / w, th / h)))
        extent = (x0 - gap, y0 - gap, x0 + cols * (cw + gap), y0 + rows * (ch + gap))
        board = _board(rng, extent[2] - extent[0], extent[3] - extent[1])
        middle = y0 + (rows // 2) * (ch + gap) + ch / 2
        return _Layout(place, textures, board, _translation(*extent[:2]), (cw, ch), extent, middle)

    # -- camera ------------------------------------------------------------------------------------------------
    def _shake_at(self, t: float) -> np.ndarray:
        """(dx, dy, rotation in degrees, relative scale) of the hand-held shake at ``t`` frames."""
        if self.spec.kind == "still":
            return np.zeros(4)
        a, hz, ph = self._shake[..., 0], self._shake[..., 1], self._shake[..., 2]
        return (a * np.sin(2 * np.pi * hz * t / 30.0 + ph)).sum(axis=1)

    @property
    def swing_start(self) -> int:
        """First frame of the ``pan`` scene's swing."""
        return max(1, self.n_frames // 2 - SWING_FRAMES // 2)

    @property
    def sharp_from(self) -> int | None:
        """First sharp frame after the ``pan`` scene's swing (None for other kinds)."""
        return self.swing_start + SWING_FRAMES if self.spec.kind == "pan" else None

    def leave_phases(self) -> tuple[int, int, int, int]:
        """The ``leave`` scene's frames: the pan out starts, the shelf is out, the pan back starts, it is back.

        Each pan takes :data:`LEAVE_PAN_FRAMES` and the shelf stays out :data:`LEAVE_OUT_FRAMES`, or less in a
        stream too short for them (the same shares of it as in a 400-frame stream).
        """
        n = self.n_frames
        pan, out = min(LEAVE_PAN_FRAMES, round(0.15 * n)), min(LEAVE_OUT_FRAMES, round(0.1 * n))
        go = round(0.25 * n)
        return go, go + pan, go + pan + out, go + 2 * pan + out

    def _pan_at(self, t: float) -> np.ndarray:
        """The shelf's displacement (px) at ``t`` frames from the scene's pans."""
        fw = self.frame_size[0]
        if self.spec.kind == "pan":
            a = (t - self.swing_start) / SWING_FRAMES
            if 0.0 < a < 1.0:
                return np.array([0.2 * fw, 0.03 * fw]) * np.sin(np.pi * a)
        elif self.spec.kind == "leave":
            go, out, back, home = self.leave_phases()
            x0, _, x1, _ = self._layout.extent
            far = -(x1 + 0.05 * fw)  # the board's right edge past the frame's left edge

            def ramp(a: float) -> float:
                return 0.5 - 0.5 * np.cos(np.pi * float(np.clip(a, 0.0, 1.0)))

            if t < out:
                return np.array([far * ramp((t - go) / max(1, out - go)), 0.0])
            return np.array([far * (1.0 - ramp((t - back) / max(1, home - back))), 0.0])
        return np.zeros(2)

    def camera(self, t: float) -> np.ndarray:
        """Shelf plane -> frame homography at ``t`` frames (shake about the frame centre, then the pans)."""
        fw, fh = self.frame_size
        dx, dy, rot, scale = self._shake_at(t)
        px, py = self._pan_at(t)
        a = np.deg2rad(rot)
        c, s = (1 + scale) * np.cos(a), (1 + scale) * np.sin(a)
        R = np.array([[c, -s, 0], [s, c, 0], [0, 0, 1]], np.float64)
        return _translation(fw / 2 + dx + px, fh / 2 + dy + py) @ R @ _translation(-fw / 2, -fh / 2)

    def motion(self, index: int) -> np.ndarray:
        """Image motion (px per frame) of the shelf's centre at frame ``index`` (central difference)."""
        fw, fh = self.frame_size
        c = np.array([[fw / 2, fh / 2]])
        return (map_points(self.camera(index + 0.5), c) - map_points(self.camera(index - 0.5), c))[0]

    # -- the hand ----------------------------------------------------------------------------------------------
    @property
    def hand_span(self) -> tuple[int, int]:
        """The ``occlusion`` scene's frames with the hand in view (first, past the last)."""
        start = round(0.2 * self.n_frames)
        return start, start + min(HAND_FRAMES, round(0.6 * self.n_frames))

    def hand_mask(self, index: int) -> np.ndarray | None:
        """Where the hand covers the frame at ``index`` (``occlusion`` scenes while it crosses), else None."""
        if self.spec.kind != "occlusion":
            return None
        start, end = self.hand_span
        if not start <= index < end:
            return None
        fw, fh = self.frame_size
        cw, ch = self._layout.cover_size
        # Palm half-axes: a centred cover is hidden but for its corners (about 7% of it), and the palm stays
        # within the gaps above and below its row.
        ax, ay = 0.62 * cw, 0.55 * ch
        cy = self._layout.middle_row_y
        a = (index - start) / max(1, end - start - 1)
        cx = -ax + a * (fw + 2 * ax)
        mask = np.zeros((fh, fw), np.uint8)
        cv2.ellipse(mask, (round(cx), round(cy)), (round(ax), round(ay)), 0, 0, 360, 255, -1, cv2.LINE_AA)
        arm = 0.55 * ax
        cv2.rectangle(mask, (round(cx - arm), round(cy)), (round(cx + arm), fh), 255, -1)
        return mask >= 128

    # -- frames ------------------------------------------------------------------------------------------------
    def frame(self, index: int) -> ShelfFrame:
        """Frame ``index`` and its ground truth."""
        fw, fh = self.frame_size
        bg = self.backgrounds[(index // self.hold) % len(self.backgrounds)]
        canvas = cv2.resize(bg, (fw, fh), interpolation=cv2.INTER_LINEAR if bg.shape[1] < fw else cv2.INTER_AREA)
        C = self.camera(index)
        warp_object(canvas, self._layout.board, C @ self._layout.board_H)
        covered = {}
        for name, (tex, T) in self._layout.textures.items():
            covered[name] = warp_object(canvas, tex, C @ T)
        hand = self.hand_mask(index)
        if hand is not None:
            _paint_hand(canvas, hand)
        rng = np.random.default_rng(_seed(self.spec, self.seed, 2, index))
        image = apply_photometric(
            _motion_blur(canvas, self.motion(index)), Distortion(noise_sigma=self.noise_sigma), rng
        )
        truth = []
        for name, img in self.covers.items():
            h, w = img.shape[:2]
            q = map_points(C @ self._layout.place[name], model_corners(w, h))
            seen = covered[name] if hand is None else covered[name] & ~hand
            truth.append(CoverTruth(name, q, float(min(1.0, seen.sum() / max(polygon_area(q), 1.0)))))
        return ShelfFrame(index, image, truth, hand)

    def __iter__(self):
        for i in range(self.n_frames):
            yield self.frame(i)
