"""A calibrated camera and the metric pose of a flat object from the homography that found it.

A detection's homography maps model-image pixels to frame pixels. Given the camera's intrinsics and the
object's physical width, the model plane becomes a metric plane (``width_m / model_width`` metres per model
pixel) and its pose follows from plane-based PnP: points of the model mapped through the homography are the
image points of known points on that plane, and OpenCV's IPPE solver returns the pose.
"""

from __future__ import annotations

import dataclasses
import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from objrec.fileio import FileFormatError, atomic_write_bytes
from objrec.geometry import map_homogeneous, map_points
from objrec.types import Detection, Pose

__all__ = ["Camera", "object_pose", "with_pose", "DIST_LENGTHS", "ASPECT_TOLERANCE", "GRID_POINTS"]

#: Lengths of distortion vectors OpenCV takes: none, (k1, k2, p1, p2), then k3; k4-k6; s1-s4; tau_x, tau_y.
DIST_LENGTHS = (0, 4, 5, 8, 12, 14)
#: Largest relative difference between a frame's aspect ratio and the calibration's for which
#: :meth:`Camera.for_frame` takes the frame as the whole calibrated image, resized.
ASPECT_TOLERANCE = 0.01
#: Model points per side of the grid mapped through the homography for PnP (corners included).
GRID_POINTS = 5

_SUFFIX_FORMATS = {".yml": "YAML", ".yaml": "YAML", ".xml": "XML", ".json": "JSON"}


def _image_size(value: Any, name: str) -> tuple[int, int]:
    """``value`` as a (width, height) pair of positive ints, or a ValueError naming ``name``."""
    try:
        w, h = value
    except (TypeError, ValueError):
        raise ValueError(f"{name}: expected (width, height), got {value!r}") from None
    ok = all(isinstance(v, int | np.integer) and not isinstance(v, bool) and v > 0 for v in (w, h))
    if not ok:
        raise ValueError(f"{name}: expected two positive integers (width, height), got {value!r}")
    return int(w), int(h)


@dataclass(frozen=True, eq=False)
class Camera:
    """A calibrated pinhole camera with lens distortion, in OpenCV's model.

    Parameters
    ----------
    K : (3, 3) array_like
        Intrinsic matrix ``[[fx, s, cx], [0, fy, cy], [0, 0, 1]]`` in pixels of the calibration images, with
        pixel centres at integer coordinates (OpenCV's convention).
    dist : array_like
        Distortion coefficients as OpenCV orders them (:data:`DIST_LENGTHS` entries); empty for none.
    size : (int, int)
        ``(width, height)`` of the calibration images.

    Notes
    -----
    :meth:`load` reads the file OpenCV's calibration sample (``samples/cpp/calibration.cpp``) writes.

    Examples
    --------
    >>> cam = Camera([[800, 0, 319.5], [0, 800, 239.5], [0, 0, 1]], [], (640, 480))
    >>> cam.for_frame(320, 240)[0].tolist()
    [400.0, 0.0, 159.5]
    """

    K: np.ndarray
    dist: np.ndarray
    size: tuple[int, int]

    def __post_init__(self) -> None:
        K = np.array(self.K, np.float64)
        if K.shape != (3, 3) or not np.all(np.isfinite(K)):
            raise ValueError(f"K: expected a finite 3x3 matrix, got shape {K.shape}")
        if K[1, 0] != 0 or not np.array_equal(K[2], [0.0, 0.0, 1.0]) or not (K[0, 0] > 0 and K[1, 1] > 0):
            raise ValueError(f"K: expected [[fx, s, cx], [0, fy, cy], [0, 0, 1]] with fx, fy > 0, got {K.tolist()}")
        dist = np.array(self.dist, np.float64).reshape(-1)
        if dist.size not in DIST_LENGTHS or not np.all(np.isfinite(dist)):
            raise ValueError(f"dist: expected {'/'.join(map(str, DIST_LENGTHS))} finite coefficients, got {dist}")
        K.flags.writeable = dist.flags.writeable = False
        object.__setattr__(self, "K", K)
        object.__setattr__(self, "dist", dist)
        object.__setattr__(self, "size", _image_size(self.size, "size"))

    def __repr__(self) -> str:
        fx, fy, cx, cy = self.K[0, 0], self.K[1, 1], self.K[0, 2], self.K[1, 2]
        return f"Camera(fx={fx:g}, fy={fy:g}, cx={cx:g}, cy={cy:g}, dist={self.dist.tolist()}, size={self.size})"

    def for_frame(self, width: int, height: int) -> np.ndarray:
        """``K`` for frames of ``width`` x ``height`` pixels.

        The frame is taken as the whole calibrated image resized (what a camera delivering a smaller
        resolution of the same sensor area does), with pixel centres kept aligned as ``cv2.resize`` aligns
        them: ``fx`` and the skew scale by ``width / size[0]``, ``fy`` by ``height / size[1]``, and
        ``c' = (c + 0.5) * scale - 0.5``. The distortion coefficients act on normalised coordinates, so they
        hold for every such frame.

        Raises
        ------
        ValueError
            When the frame's aspect ratio differs from the calibration's by more than
            :data:`ASPECT_TOLERANCE`: such a frame is a crop of the sensor, whose offset is unknown (calibrate
            the camera at that resolution).
        """
        w, h = _image_size((width, height), "frame size")
        W, H = self.size
        if (w, h) == (W, H):
            return self.K.copy()
        if abs((w / h) / (W / H) - 1.0) > ASPECT_TOLERANCE:
            raise ValueError(
                f"frame size {w}x{h}: aspect ratio {w / h:.4f} differs from the calibration's {W}x{H} "
                f"({W / H:.4f}); a cropped frame cannot be described by this calibration (calibrate at {w}x{h})"
            )
        sx, sy = w / W, h / H
        K = self.K.copy()
        K[0, :2] *= sx
        K[1, 1] *= sy
        K[0, 2] = (K[0, 2] + 0.5) * sx - 0.5
        K[1, 2] = (K[1, 2] + 0.5) * sy - 0.5
        return K

    @classmethod
    def load(cls, path: str | os.PathLike) -> Camera:
        """Read a camera from an OpenCV FileStorage file (YAML, XML or JSON).

        The file holds ``camera_matrix`` (3x3), ``distortion_coefficients`` (a matrix of
        :data:`DIST_LENGTHS` entries; zeros for none), ``image_width`` and ``image_height`` (ints), as
        OpenCV's calibration sample writes them; other keys are ignored.

        Raises
        ------
        FileFormatError
            When the file is missing, unreadable, or lacks a key or has one of the wrong form; the message
            names the file and the key.
        """
        path = Path(path)
        fs = _read_storage(path)
        K = _matrix(fs, "camera_matrix", path)
        dist = _matrix(fs, "distortion_coefficients", path)
        size = (_int(fs, "image_width", path), _int(fs, "image_height", path))
        if K.shape != (3, 3):
            raise FileFormatError(f"{path}: camera_matrix: expected a 3x3 matrix, got {K.shape[0]}x{K.shape[1]}")
        if 1 not in dist.shape and dist.size:
            raise FileFormatError(f"{path}: distortion_coefficients: expected a row or column, got {dist.shape}")
        try:
            return cls(K, dist, size)
        except ValueError as exc:
            arg, _, why = str(exc).partition(": ")
            key = {"K": "camera_matrix", "dist": "distortion_coefficients"}.get(arg, arg)
            raise FileFormatError(f"{path}: {key}: {why}") from None

    def save(self, path: str | os.PathLike) -> None:
        """Write the camera as :meth:`load` reads it, atomically; the format follows the suffix
        (``.yml``/``.yaml``, ``.xml`` or ``.json``)."""
        import cv2

        path = Path(path)
        fmt = _SUFFIX_FORMATS.get(path.suffix.lower())
        if fmt is None:
            raise ValueError(f"path: {path}: expected a .yml, .yaml, .xml or .json file name")
        flags = cv2.FILE_STORAGE_WRITE | cv2.FILE_STORAGE_MEMORY | getattr(cv2, f"FILE_STORAGE_FORMAT_{fmt}")
        fs = cv2.FileStorage(path.name, flags)
        fs.write("image_width", self.size[0])
        fs.write("image_height", self.size[1])
        fs.write("camera_matrix", self.K)
        fs.write("distortion_coefficients", self.dist.reshape(-1, 1))
        atomic_write_bytes(path, fs.releaseAndGetString().encode())


def _read_storage(path: Path) -> Any:
    """The FileStorage of the file at ``path``, parsed from memory (so OpenCV logs nothing of its own)."""
    import cv2

    if not path.is_file():
        raise FileFormatError(f"{path}: camera calibration file not found")
    try:
        text = path.read_bytes().decode("utf-8")
        fs = cv2.FileStorage(text, cv2.FILE_STORAGE_READ | cv2.FILE_STORAGE_MEMORY)
    except (UnicodeDecodeError, cv2.error, SystemError) as exc:
        # A parse error reaches Python as a SystemError whose cause is OpenCV's error.
        why = " ".join(str(exc.__cause__ or exc).split())
        raise FileFormatError(f"{path}: not a readable OpenCV YAML, XML or JSON file ({why})") from None
    if not fs.isOpened() or not fs.root().isMap():
        raise FileFormatError(f"{path}: not an OpenCV FileStorage file with named entries")
    return fs


def _node(fs: Any, key: str, path: Path) -> Any:
    node = fs.getNode(key)
    if node.isNone():
        raise FileFormatError(f"{path}: no {key!r} in this camera calibration file")
    return node


def _matrix(fs: Any, key: str, path: Path) -> np.ndarray:
    """The matrix stored under ``key`` (an ``opencv-matrix``, or a plain list of numbers as a row)."""
    import cv2

    node = _node(fs, key, path)
    if node.isSeq() and all(node.at(i).isInt() or node.at(i).isReal() for i in range(node.size())):
        return np.array([[node.at(i).real() for i in range(node.size())]], np.float64).reshape(1, -1)
    if not node.isMap():
        raise FileFormatError(f"{path}: {key}: expected a matrix")
    try:
        m = node.mat()
    except cv2.error as exc:
        raise FileFormatError(f"{path}: {key}: not a readable matrix ({' '.join(str(exc).split())})") from None
    if m is None:  # OpenCV reads an empty matrix as None
        rows = node.getNode("rows")
        if rows.isInt() and rows.real() == 0:
            return np.zeros((0, 1), np.float64)
        raise FileFormatError(f"{path}: {key}: expected a matrix")
    return np.asarray(m, np.float64).reshape(m.shape[0], -1)


def _int(fs: Any, key: str, path: Path) -> int:
    node = _node(fs, key, path)
    if not node.isInt() or node.real() <= 0:
        raise FileFormatError(f"{path}: {key}: expected a positive integer")
    return int(node.real())


def _check_width_m(width_m: Any) -> float:
    try:
        value = float(width_m)
    except (TypeError, ValueError):
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"width_m: expected a positive, finite width in metres, got {width_m!r}")
    return value


def _model_grid(width: int, height: int) -> np.ndarray:
    """A :data:`GRID_POINTS` x :data:`GRID_POINTS` grid over the model image, corners included, (n, 2)."""
    u, v = np.meshgrid(np.linspace(0, width, GRID_POINTS), np.linspace(0, height, GRID_POINTS))
    return np.column_stack([u.ravel(), v.ravel()])


def _mapped(H: np.ndarray, xy: np.ndarray) -> np.ndarray | None:
    """``xy`` mapped through ``H``, or None when some of them lie behind the camera and others in front
    (the plane crosses the camera's focal plane inside the object) or at infinity."""
    w = map_homogeneous(H, xy)[:, 2]
    if not (np.all(w > 0) or np.all(w < 0)) or np.min(np.abs(w)) < 1e-9 * np.max(np.abs(w)):
        return None
    out = map_points(H, xy)
    return out if np.all(np.isfinite(out)) else None


def object_pose(
    homography: np.ndarray,
    model_size: tuple[int, int],
    width_m: float,
    camera: Camera,
    frame_size: tuple[int, int],
) -> Pose | None:
    """The metric pose of a flat object from the homography that maps its model image into a frame.

    The object frame has its origin at the model image's top-left corner, x right and y down along the
    image, z into the object (z = 0 on its face), in metres: ``width_m / model_size[0]`` per model pixel.
    A grid of model points (:data:`GRID_POINTS` per side, corners included) mapped through ``homography``
    gives the image points; ``cv2.solvePnPGeneric`` with ``SOLVEPNP_IPPE`` (Collins and Bartoli 2014)
    returns the two poses a plane admits, and the one of smaller reprojection error is kept. The camera's
    distortion is applied, so ``homography`` is taken in the frame's pixels as captured.

    Parameters
    ----------
    homography : (3, 3) array_like
        Maps model-image pixels to frame pixels (any scale).
    model_size : (int, int)
        The model image's (width, height) in pixels.
    width_m : float
        The object's physical width (along the model image's x axis), in metres.
    camera : Camera
        The camera that took the frame.
    frame_size : (int, int)
        The frame's (width, height); ``K`` is rescaled to it (:meth:`Camera.for_frame`).

    Returns
    -------
    Pose or None
        None when the homography is singular or not finite, maps part of the object behind the camera,
        shows the object's back (a mirrored view), or when PnP finds no pose in front of the camera.

    Raises
    ------
    ValueError
        For a ``homography`` that is not 3x3, a bad ``model_size``, ``frame_size`` or ``width_m``, or a
        frame the calibration does not describe (:meth:`Camera.for_frame`).

    References
    ----------
    T. Collins and A. Bartoli, "Infinitesimal Plane-Based Pose Estimation", IJCV 109(3):252-286, 2014,
    https://doi.org/10.1007/s11263-014-0725-5
    """
    import cv2

    H = np.asarray(homography, np.float64)
    if H.shape != (3, 3):
        raise ValueError(f"homography: expected a 3x3 matrix, got shape {H.shape}")
    w, h = _image_size(model_size, "model_size")
    scale = _check_width_m(width_m) / w
    K = camera.for_frame(*_image_size(frame_size, "frame_size"))
    if not np.all(np.isfinite(H)):
        return None
    model = _model_grid(w, h)
    image = _mapped(H, model)
    if image is None or abs(cv2.contourArea(image[[0, GRID_POINTS - 1, -1, -GRID_POINTS]].astype(np.float32))) < 1:
        return None
    obj = np.column_stack([model * scale, np.zeros(len(model))])
    try:
        _, rvecs, tvecs, errors = cv2.solvePnPGeneric(obj, image, K, camera.dist, flags=cv2.SOLVEPNP_IPPE)
    except cv2.error:
        return None
    best = None
    for rvec, tvec, err in zip(rvecs, tvecs, np.asarray(errors).reshape(-1), strict=True):
        r, t = np.asarray(rvec, np.float64).reshape(3), np.asarray(tvec, np.float64).reshape(3)
        if not (np.all(np.isfinite(r)) and np.all(np.isfinite(t)) and np.isfinite(err)):
            continue
        normal = cv2.Rodrigues(r)[0][:, 2]
        # The camera sees the object's face only when the object's z axis (into it) points away from it.
        if t[2] > 0 and normal @ t > 0 and (best is None or err < best[2]):
            best = (r, t, err)
    return None if best is None else Pose(best[0], best[1])


def with_pose(d: Detection, info: Any, camera: Camera, frame_size: tuple[int, int]) -> Detection:
    """Detection ``d`` with its metric pose (:func:`object_pose`, seen by ``camera`` in a frame of ``frame_size``
    (w, h)) when its object's ``info`` (:class:`~objrec.modeldb.ObjectInfo`) has a physical width and a pose is
    found; ``d`` as it is otherwise (also for an object verified without a plane: no homography, no pose)."""
    if getattr(info, "width_m", None) is None or d.homography is None:  # no plane, no pose from it
        return d
    pose = object_pose(d.homography, (info.width, info.height), info.width_m, camera, frame_size)
    return d if pose is None else dataclasses.replace(d, pose=pose)
