"""Scene generator: objects composited into backgrounds with known homographies and distortions.

Every later stage reuses it: prefilter training data, recognition tests, corruption sweeps and the
stream generator. Ground truth is exact: the homography used to warp each object, its corners and the
fraction of it left visible after cropping and occlusion.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import cv2
import numpy as np

from objrec.geometry import map_homogeneous, map_points, model_corners, outline_in_frame, polygon_area
from objrec.imageio import check_frame, to_bgr

__all__ = [
    "SceneObject",
    "Scene",
    "Distortion",
    "random_homography",
    "place_homography",
    "tilted_plane",
    "camera_view",
    "CAMERA_FOCAL_PX",
    "outside_fraction",
    "place_partly_outside",
    "warp_object",
    "compose_scene",
    "apply_photometric",
]


@dataclass(frozen=True)
class SceneObject:
    """Ground truth of one object placed in a scene.

    Attributes
    ----------
    name : str
        The object's name.
    homography : np.ndarray
        (3, 3) model pixels to scene pixels, ``H[2, 2] = 1``.
    corners : np.ndarray
        (4, 2) the model outline in the scene.
    model_size : tuple of int
        The model image's (w, h).
    visible_fraction : float
        The share of the object's scene area inside the frame and not occluded.
    area_fraction : float
        The object's visible area over the frame's.
    """

    name: str
    homography: np.ndarray  # model pixels -> scene pixels, H[2,2] = 1
    corners: np.ndarray  # (4, 2) model outline in the scene
    model_size: tuple[int, int]  # (w, h) of the model image
    visible_fraction: float  # of the object's scene area: inside the frame and not occluded
    area_fraction: float  # object area (visible) over frame area

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "homography": self.homography.tolist(),
            "corners": self.corners.tolist(),
            "model_size": list(self.model_size),
            "visible_fraction": self.visible_fraction,
            "area_fraction": self.area_fraction,
        }


@dataclass
class Scene:
    """A composited frame (BGR uint8) and its ground truth.

    Attributes
    ----------
    image : np.ndarray
        The frame, BGR uint8.
    objects : list of SceneObject
        The objects placed, in placement order.
    object_mask : np.ndarray
        (H, W) int16: index + 1 of the visible object at each pixel, 0 for background.
    params : dict
        The settings the scene was made with.
    """

    image: np.ndarray
    objects: list[SceneObject]
    object_mask: np.ndarray  # (H, W) int16: index+1 of the visible object per pixel, 0 = background
    params: dict[str, Any] = field(default_factory=dict)

    def truth(self, name: str) -> SceneObject | None:
        for o in self.objects:
            if o.name == name:
                return o
        return None


@dataclass(frozen=True)
class Distortion:
    """Photometric distortions applied to the whole composited frame, in this order.

    gain, gamma: illumination (``255 * (gain * I/255) ** gamma``); blur_sigma: Gaussian blur;
    motion_blur: length in px of a horizontal motion kernel; noise_sigma: additive Gaussian noise;
    jpeg_quality: JPEG round trip (None: off).
    """

    gain: float = 1.0
    gamma: float = 1.0
    blur_sigma: float = 0.0
    motion_blur: int = 0
    noise_sigma: float = 0.0
    jpeg_quality: int | None = None


def apply_photometric(img: np.ndarray, d: Distortion, rng: np.random.Generator) -> np.ndarray:
    """``img`` (uint8) with the distortions ``d`` applied in :class:`Distortion`'s order; ``rng`` draws the
    noise."""
    out = img
    if d.gain != 1.0 or d.gamma != 1.0:
        lut = np.clip(255.0 * np.clip(d.gain * np.arange(256) / 255.0, 0, None) ** d.gamma, 0, 255)
        out = cv2.LUT(out, lut.astype(np.uint8))
    if d.blur_sigma > 0:
        out = cv2.GaussianBlur(out, (0, 0), d.blur_sigma)
    if d.motion_blur > 1:
        k = np.zeros((d.motion_blur, d.motion_blur), np.float32)
        k[d.motion_blur // 2, :] = 1.0 / d.motion_blur
        out = cv2.filter2D(out, -1, k)
    if d.noise_sigma > 0:
        # OpenCV's generator, seeded from ``rng`` (reproducible, and several times faster than NumPy's
        # normal draws on a frame); its state is per thread, so other threads' draws are not disturbed.
        cv2.setRNGSeed(int(rng.integers(1 << 31)))
        # One channel: on a multi-channel array OpenCV would take the scalar sigma for the first channel only.
        noise = cv2.randn(  # type: ignore[call-overload]  # OpenCV takes scalars for both; its stub wants arrays
            np.empty((out.shape[0], out.size // out.shape[0]), np.float32), 0.0, float(d.noise_sigma)
        )
        out = cv2.add(out, noise.reshape(out.shape), dtype=cv2.CV_8U)  # rounded and saturated to 0..255
    if d.jpeg_quality is not None:
        ok, buf = cv2.imencode(".jpg", out, [cv2.IMWRITE_JPEG_QUALITY, int(d.jpeg_quality)])
        decoded = cv2.imdecode(buf, cv2.IMREAD_UNCHANGED)
        if decoded is None:
            raise RuntimeError(f"jpeg_quality={d.jpeg_quality}: the frame could not be encoded and decoded as JPEG")
        out = decoded
    return out


def tilted_plane(tilt_deg: float, axis: str, focal: float) -> np.ndarray:
    """The homography from a plane's centred coordinates to the image of a pinhole camera of focal length
    ``focal`` (px, principal point at the origin) that sees the plane at distance ``focal``, turned by
    ``tilt_deg`` about its ``axis`` (``"y"``: the vertical centre line, x foreshortened; ``"x"``: the
    horizontal one): ``K [r1 r2 t]`` with ``t = (0, 0, focal)``, so one plane unit at the centre images to one
    pixel (Hartley and Zisserman, *Multiple View Geometry*, 2nd ed., section 8.1.1: the homography induced by a
    world plane)."""
    a = np.deg2rad(tilt_deg)
    c, sn = np.cos(a), np.sin(a)
    if axis == "y":
        R = np.array([[c, 0, sn], [0, 1, 0], [-sn, 0, c]])
    elif axis == "x":
        R = np.array([[1, 0, 0], [0, c, -sn], [0, sn, c]])
    else:
        raise ValueError(f"axis: expected 'x' or 'y', got {axis!r}")
    K = np.array([[focal, 0, 0], [0, focal, 0], [0, 0, 1]], np.float64)
    return K @ np.column_stack([R[:, 0], R[:, 1], [0.0, 0.0, focal]])


#: Focal length in pixels of a phone's main camera at 640 px frame width (about 62 degrees of horizontal field
#: of view): the camera of the operating envelope and of the rating's hard views.
CAMERA_FOCAL_PX = 530.0


def camera_view(
    model_size: tuple[int, int],
    size_px: float,
    frame_size: tuple[int, int],
    focal: float,
    rotation_deg: float = 0.0,
    tilt_deg: float = 0.0,
    tilt_axis: str = "y",
) -> np.ndarray:
    """The model→frame homography of a planar object centred in a pinhole camera's frame, scaled, tilted, rotated.

    The model's plane is scaled to ``size_px`` on its longer side, put at distance ``focal`` in front of the
    camera (where one model unit images to one pixel), rotated about its centre by ``tilt_deg`` about the
    ``tilt_axis`` axis (:func:`tilted_plane`), imaged by ``K [r1 r2 t]`` and finally rotated in the image plane
    by ``rotation_deg`` (counter-clockwise as seen) about the frame's centre; the outline's centroid is then
    moved to the frame's centre.

    Parameters
    ----------
    model_size : (w, h)
        The model image's size in pixels.
    size_px : float
        The object's longer side in frame pixels before tilting.
    frame_size : (w, h)
    focal : float
        Focal length in pixels (principal point at the frame's centre).
    rotation_deg, tilt_deg : float
    tilt_axis : {"y", "x"}

    Returns
    -------
    (3, 3) float64 ndarray
        Maps model pixels to frame pixels, ``H[2, 2] = 1``.

    References
    ----------
    R. Hartley and A. Zisserman, *Multiple View Geometry in Computer Vision*, 2nd ed., Cambridge University
    Press, 2004, section 8.1.1 (the homography induced by a world plane). DOI: 10.1017/CBO9780511811685
    """
    w, h = model_size
    fw, fh = frame_size
    s = size_px / max(w, h)
    to_plane = np.array([[s, 0, -s * w / 2], [0, s, -s * h / 2], [0, 0, 1]], np.float64)
    to_frame = np.array([[1, 0, fw / 2], [0, 1, fh / 2], [0, 0, 1]], np.float64)  # the principal point
    # Counter-clockwise as seen in the image, whose y axis points down.
    rot = cv2.getRotationMatrix2D((fw / 2, fh / 2), rotation_deg, 1.0) if rotation_deg else np.eye(3)[:2]
    H = np.vstack([rot, [0, 0, 1]]) @ to_frame @ tilted_plane(tilt_deg, tilt_axis, focal) @ to_plane
    q = map_points(H, model_corners(w, h))
    shift = np.array([fw / 2, fh / 2]) - q.mean(axis=0)
    H = np.array([[1, 0, shift[0]], [0, 1, shift[1]], [0, 0, 1]]) @ H
    return H / H[2, 2]


def place_homography(
    model_size: tuple[int, int],
    center: tuple[float, float],
    scale: float,
    rotation_deg: float = 0.0,
    tilt: tuple[float, float] = (0.0, 0.0),
) -> np.ndarray:
    """Homography that puts the model's centre at ``center``, scaled by ``scale``, rotated by ``rotation_deg``
    degrees and tilted; ``model_size`` is the model image's (w, h).

    ``tilt`` (tx, ty) are perspective terms in units of the model's half-size: 0.2 makes one side about
    20% shorter than the opposite one (viewpoint change).
    """
    w, h = model_size
    to_center = np.array([[1, 0, -w / 2], [0, 1, -h / 2], [0, 0, 1]], np.float64)
    tx, ty = tilt
    persp = np.array([[1, 0, 0], [0, 1, 0], [tx / (w / 2), ty / (h / 2), 1]], np.float64)
    a = np.deg2rad(rotation_deg)
    c, s = np.cos(a), np.sin(a)
    rs = np.array([[scale * c, -scale * s, 0], [scale * s, scale * c, 0], [0, 0, 1]], np.float64)
    to_scene = np.array([[1, 0, center[0]], [0, 1, center[1]], [0, 0, 1]], np.float64)
    H = to_scene @ rs @ persp @ to_center
    # Perspective shrinks the model around its centre unevenly; re-centre so the outline's centroid is
    # where it was asked to be.
    q = map_points(H, model_corners(w, h))
    shift = np.array(center) - q.mean(axis=0)
    H = np.array([[1, 0, shift[0]], [0, 1, shift[1]], [0, 0, 1]]) @ H
    return H / H[2, 2]


def random_homography(
    model_size: tuple[int, int],
    frame_size: tuple[int, int],
    rng: np.random.Generator,
    area_fraction: tuple[float, float] = (0.05, 0.25),
    max_rotation: float = 45.0,
    max_tilt: float = 0.15,
    inside: bool = True,
    tries: int = 50,
) -> np.ndarray:
    """A random model→frame homography with the object covering ``area_fraction`` of the frame.

    Parameters
    ----------
    model_size, frame_size : tuple of int
        The model image's and the frame's (w, h).
    rng : np.random.Generator
        The random draws' source.
    area_fraction : (float, float)
        The range the object's area over the frame's is drawn from.
    max_rotation : float
        In-plane rotation drawn from ``±max_rotation`` degrees.
    max_tilt : float
        Each perspective term drawn from ``±max_tilt`` (see :func:`place_homography`).
    inside : bool
        The outline must lie inside the frame (slid in where it fits).
    tries : int
        Draws before giving up (a ValueError).
    """
    w, h = model_size
    fw, fh = frame_size
    H = np.eye(3)
    for _ in range(tries):
        af = rng.uniform(*area_fraction)
        scale = np.sqrt(af * fw * fh / (w * h))
        rot = rng.uniform(-max_rotation, max_rotation)
        tilt = tuple(rng.uniform(-max_tilt, max_tilt, 2))
        cx, cy = rng.uniform(0, fw), rng.uniform(0, fh)
        H = place_homography(model_size, (cx, cy), scale, rot, tilt)
        q = map_points(H, model_corners(w, h))
        # Perspective changes the area: rescale about the centroid to the area that was drawn.
        area = polygon_area(q)
        k = np.sqrt(af * fw * fh / max(area, 1e-9))
        c = q.mean(axis=0)
        H = np.array([[k, 0, c[0] * (1 - k)], [0, k, c[1] * (1 - k)], [0, 0, 1]]) @ H
        q = map_points(H, model_corners(w, h))
        lo, hi = q.min(axis=0), q.max(axis=0)
        if inside:
            if lo[0] < 0 or lo[1] < 0 or hi[0] > fw or hi[1] > fh:
                # Slide the object into the frame if it fits.
                dx = -lo[0] if lo[0] < 0 else min(0.0, fw - hi[0])
                dy = -lo[1] if lo[1] < 0 else min(0.0, fh - hi[1])
                H = np.array([[1, 0, dx], [0, 1, dy], [0, 0, 1]]) @ H
                q = map_points(H, model_corners(w, h))
                lo, hi = q.min(axis=0), q.max(axis=0)
                if lo[0] < -1e-6 or lo[1] < -1e-6 or hi[0] > fw + 1e-6 or hi[1] > fh + 1e-6:
                    continue
        return H / H[2, 2]
    raise ValueError(
        f"random_homography: no placement of a {w}x{h} model covering {area_fraction} of a {fw}x{fh} frame "
        f"fits inside it after {tries} tries (lower area_fraction or max_tilt, or pass inside=False)"
    )


def outside_fraction(H: np.ndarray, model_size: tuple[int, int], frame_size: tuple[int, int]) -> float:
    """Share of the model's area (``model_size``: w, h) that ``H`` maps outside a ``frame_size`` (w, h) frame
    (convex outline)."""
    q = map_points(np.asarray(H, np.float64), model_corners(*model_size)).astype(np.float32)
    area = polygon_area(q)
    if area <= 0:
        return 1.0
    inter, _ = outline_in_frame(q, *frame_size)
    return float(np.clip(1.0 - inter / area, 0.0, 1.0))


def place_partly_outside(
    model_size: tuple[int, int],
    frame_size: tuple[int, int],
    outside: float,
    rng: np.random.Generator,
    scale: tuple[float, float] = (0.8, 1.5),
    max_rotation: float = 180.0,
    max_tilt: float = 0.1,
    tries: int = 2000,
) -> np.ndarray:
    """A close-up placement with ``outside`` of the model's area beyond the frame's border.

    Scale is drawn from ``scale`` in units of the size at which the model just fits the frame
    (``min(fw / w, fh / h)``), rotation from ± ``max_rotation`` degrees, each tilt term from ± ``max_tilt`` (see
    :func:`place_homography`). A draw whose centred placement already leaves more than ``outside`` beyond the
    border is drawn again, so at small ``outside`` large objects come mostly unrotated. The centred object is
    then slid along a random direction until the share outside is ``outside`` (bisection on the distance).

    Raises ``ValueError`` when no draw of ``tries`` fits. ``model_size`` and ``frame_size`` are the model image's
    and the frame's (w, h); ``rng`` draws.
    """
    if not 0.0 <= outside < 1.0:
        raise ValueError(f"outside: expected a fraction in [0, 1), got {outside}")
    w, h = model_size
    fw, fh = frame_size
    fit = min(fw / w, fh / h)
    for _ in range(tries):
        s = fit * rng.uniform(*scale)
        rot = rng.uniform(-max_rotation, max_rotation)
        tilt = (float(rng.uniform(-max_tilt, max_tilt)), float(rng.uniform(-max_tilt, max_tilt)))
        H0 = place_homography(model_size, (fw / 2, fh / 2), s, rot, tilt)
        if outside_fraction(H0, model_size, frame_size) > outside:
            continue
        a = rng.uniform(0.0, 2.0 * np.pi)
        u = np.array([np.cos(a), np.sin(a)])
        q = map_points(H0, model_corners(w, h))
        lo, hi = 0.0, float(np.hypot(fw, fh) + np.ptp(q, axis=0).max())
        for _ in range(60):
            mid = 0.5 * (lo + hi)
            T = np.array([[1, 0, mid * u[0]], [0, 1, mid * u[1]], [0, 0, 1]], np.float64)
            if outside_fraction(T @ H0, model_size, frame_size) < outside:
                lo = mid
            else:
                hi = mid
        T = np.array([[1, 0, lo * u[0]], [0, 1, lo * u[1]], [0, 0, 1]], np.float64)
        H = T @ H0
        return H / H[2, 2]
    raise ValueError(
        f"place_partly_outside: no placement of a {w}x{h} model at scale {scale} (x fit) leaves {outside:.0%} "
        f"outside a {fw}x{fh} frame after {tries} tries"
    )


def warp_object(canvas: np.ndarray, obj: np.ndarray, H: np.ndarray, antialias: bool = False) -> np.ndarray:
    """Composite ``obj`` into ``canvas`` (in place) through ``H``; returns the boolean coverage mask.

    Only the part of the canvas inside the warped outline's bounding box is warped and blended: an object
    covering a small share of the frame costs that share.

    ``antialias``: an object that ``H`` shrinks (at its centre) is first reduced to that size by area
    averaging, as a camera's pixels integrate the light over their area, and then warped. Bilinear sampling
    of a shrunk texture skips most of its pixels: the result aliases, and in a stream the aliasing pattern
    moves differently from the object from one frame to the next (a tracker follows the pattern, not the
    object).
    """
    if antialias:
        obj, H = _reduced(obj, np.asarray(H, np.float64))
    fh, fw = canvas.shape[:2]
    cover = np.zeros((fh, fw), bool)
    h, w = obj.shape[:2]
    H = np.asarray(H, np.float64)
    behind = np.any(map_homogeneous(H, model_corners(w, h))[:, 2] <= 1e-9)
    if behind:  # part of the plane is behind the camera: the whole frame may be covered
        x0, y0, x1, y1 = 0, 0, fw, fh
    else:
        xy = map_points(H, model_corners(w, h))
        x0, y0 = (max(0, int(np.floor(v)) - 1) for v in xy.min(0))
        x1, y1 = min(fw, int(np.ceil(xy[:, 0].max())) + 2), min(fh, int(np.ceil(xy[:, 1].max())) + 2)
    if x1 <= x0 or y1 <= y0:
        return cover
    T = np.array([[1, 0, -x0], [0, 1, -y0], [0, 0, 1]], np.float64) @ H
    size = (x1 - x0, y1 - y0)
    warped = cv2.warpPerspective(obj, T, size, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT)
    alpha = cv2.warpPerspective(
        np.full(obj.shape[:2], 255, np.uint8), T, size, flags=cv2.INTER_LINEAR, borderMode=cv2.BORDER_CONSTANT
    )
    a = (alpha.astype(np.float32) / 255.0)[:, :, None]
    sub = canvas[y0:y1, x0:x1]
    sub[:] = (sub.astype(np.float32) * (1 - a) + warped.astype(np.float32) * a + 0.5).astype(np.uint8)
    cover[y0:y1, x0:x1] = alpha >= 128
    return cover


def _reduced(obj: np.ndarray, H: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``obj`` reduced by area averaging to the size ``H`` gives it at its centre (the square root of the
    Jacobian's determinant there), and the homography that maps the reduced image where ``H`` maps ``obj``;
    both unchanged where ``H`` does not shrink it."""
    h, w = obj.shape[:2]
    c = H @ np.array([w / 2.0, h / 2.0, 1.0])
    if abs(c[2]) < 1e-12:
        return obj, H
    J = (H[:2, :2] * c[2] - np.outer(c[:2], H[2, :2])) / c[2] ** 2
    s = float(np.sqrt(abs(np.linalg.det(J))))
    if not 0.0 < s < 1.0:
        return obj, H
    sw, sh = max(1, round(w * s)), max(1, round(h * s))
    if (sw, sh) == (w, h):
        return obj, H
    small = cv2.resize(obj, (sw, sh), interpolation=cv2.INTER_AREA)
    ax, ay = w / sw, h / sh
    # Pixel u of the reduced image covers the model's pixels around (u + 0.5) * a - 0.5.
    A = np.array([[ax, 0.0, 0.5 * ax - 0.5], [0.0, ay, 0.5 * ay - 0.5], [0.0, 0.0, 1.0]])
    return small, H @ A


def _fit_background(background: np.ndarray, frame_size: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
    fw, fh = frame_size
    bg = to_bgr(check_frame(background, "background"))
    bh, bw = bg.shape[:2]
    s = max(fw / bw, fh / bh)
    if s != 1.0:
        bg = cv2.resize(bg, (max(fw, round(bw * s)), max(fh, round(bh * s))), interpolation=cv2.INTER_AREA)
    bh, bw = bg.shape[:2]
    x0 = int(rng.integers(0, bw - fw + 1))
    y0 = int(rng.integers(0, bh - fh + 1))
    return bg[y0 : y0 + fh, x0 : x0 + fw].copy()  # never an alias of the caller's background


def _object_homography(
    name: str,
    model_size: tuple[int, int],
    frame_size: tuple[int, int],
    rng: np.random.Generator,
    homographies: Mapping[str, np.ndarray] | None,
    placement: dict[str, Any],
) -> np.ndarray:
    """The given homography of ``name`` scaled to ``H[2, 2] = 1``, or a random one drawn with ``placement``
    (the keyword arguments of :func:`random_homography`)."""
    if homographies is not None and name in homographies:
        H = np.asarray(homographies[name], np.float64)
        return H / H[2, 2]
    return random_homography(model_size, frame_size, rng, **placement)


def _occlude(
    canvas: np.ndarray,
    owner: np.ndarray,
    cover: np.ndarray,
    bg: np.ndarray,
    occlusion: float,
    rng: np.random.Generator,
) -> None:
    """Cover ``occlusion`` of the area of ``cover`` with a patch of ``bg`` (in place); its pixels go to no object."""
    ys, xs = np.nonzero(cover)
    if not len(xs):
        return
    x0, x1, y0, y1 = xs.min(), xs.max(), ys.min(), ys.max()
    side = np.sqrt(min(occlusion, 0.9) * cover.sum())
    ow = int(np.clip(side * rng.uniform(0.7, 1.4), 4, x1 - x0 + 1))
    oh = int(np.clip(side * side / max(ow, 1), 4, y1 - y0 + 1))
    ox = int(rng.integers(x0, max(x0 + 1, x1 - ow + 2)))
    oy = int(rng.integers(y0, max(y0 + 1, y1 - oh + 2)))
    patch = _fit_background(bg, (ow, oh), rng)
    canvas[oy : oy + oh, ox : ox + ow] = patch
    owner[oy : oy + oh, ox : ox + ow] = 0


def _ground_truth(
    placed: list[tuple[str, np.ndarray, np.ndarray, tuple[int, int]]], owner: np.ndarray
) -> list[SceneObject]:
    """Ground truth of the placed objects ``(name, H, corners, (w, h))``; object ``i`` owns pixels ``i + 1``."""
    fh, fw = owner.shape
    truths = []
    for i, (name, H, q, wh) in enumerate(placed):
        visible = float((owner == i + 1).sum())
        truths.append(
            SceneObject(
                name=name,
                homography=H,
                corners=q,
                model_size=wh,
                visible_fraction=float(min(1.0, visible / max(polygon_area(q), 1.0))),
                area_fraction=visible / float(fw * fh),
            )
        )
    return truths


def compose_scene(
    background: np.ndarray,
    objects: Mapping[str, np.ndarray],
    rng: np.random.Generator | int | None = None,
    frame_size: tuple[int, int] | None = None,
    homographies: Mapping[str, np.ndarray] | None = None,
    area_fraction: tuple[float, float] = (0.05, 0.25),
    max_rotation: float = 45.0,
    max_tilt: float = 0.15,
    inside: bool = True,
    occlusion: float = 0.0,
    distortion: Distortion | None = None,
    antialias: bool = False,
) -> Scene:
    """Composite ``objects`` (name → BGR/gray uint8 image) into ``background``.

    Parameters
    ----------
    background : image
        Resized to cover ``frame_size`` (default: its own size) and cropped at a random place.
    objects : mapping
        Objects to place, in drawing order (later ones may cover earlier ones).
    rng : Generator or seed
    homographies : mapping, optional
        Exact model→scene homographies per name; others are drawn with :func:`random_homography`.
    area_fraction, max_rotation, max_tilt, inside
        Ranges for random placement.
    occlusion : float
        Fraction of each object's area covered by an occluder (a patch of background), 0..0.9.
    distortion : Distortion, optional
        Photometric changes of the whole frame.
    antialias : bool
        Shrunk objects are reduced by area averaging before they are warped (:func:`warp_object`): what a
        camera sees, and what a stream of frames needs (the bilinear default aliases, and the aliasing moves
        from frame to frame unlike the object).

    Returns
    -------
    Scene
        ``objects`` lists ground truth for every placed object, with ``visible_fraction``.
    """
    rng = np.random.default_rng(rng)
    bg = to_bgr(check_frame(background, "background"))
    if frame_size is None:
        frame_size = (bg.shape[1], bg.shape[0])
    canvas = _fit_background(bg, frame_size, rng)
    fw, fh = frame_size
    owner = np.zeros((fh, fw), np.int16)
    placement = {
        "area_fraction": area_fraction,
        "max_rotation": max_rotation,
        "max_tilt": max_tilt,
        "inside": inside,
    }
    placed = []
    for i, (name, img) in enumerate(objects.items()):
        obj = to_bgr(check_frame(img, f"object {name!r}"))
        h, w = obj.shape[:2]
        H = _object_homography(name, (w, h), frame_size, rng, homographies, placement)
        cover = warp_object(canvas, obj, H, antialias)
        owner[cover] = i + 1
        placed.append((name, H, map_points(H, model_corners(w, h)), (w, h)))
        if occlusion > 0:
            _occlude(canvas, owner, cover, bg, occlusion, rng)
    d = distortion or Distortion()
    image = apply_photometric(canvas, d, rng)
    params = {
        "frame_size": list(frame_size),
        "occlusion": occlusion,
        "distortion": d.__dict__.copy(),
        "area_fraction": list(area_fraction),
        "max_rotation": max_rotation,
        "max_tilt": max_tilt,
    }
    return Scene(image, _ground_truth(placed, owner), owner, params)
