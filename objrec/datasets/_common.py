"""Shared pieces of the dataset loaders: the error type, homography parsing, image pairs."""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from objrec.geometry import check_homography
from objrec.imageio import InputError, read_image, to_gray

__all__ = [
    "DatasetError",
    "ImagePair",
    "read_homography",
    "find_image",
    "load_image",
    "image_files",
    "image_sizes",
    "object_name",
    "IMAGE_EXTENSIONS",
]

#: Image file extensions the loaders look for, in order of preference.
IMAGE_EXTENSIONS = (".png", ".ppm", ".pgm", ".jpg", ".jpeg", ".bmp", ".tif", ".tiff")


class DatasetError(ValueError):
    """A dataset file is missing or malformed; the message names the file and what was expected."""


def read_homography(path: str | os.PathLike) -> np.ndarray:
    """Read a plain-text 3x3 homography (``numpy.loadtxt`` format) and normalise it by ``H[2, 2]``.

    Java-style numbers (``4.08E-6``) and trailing spaces, as in some Oxford files, are fine.

    Raises
    ------
    DatasetError
        Naming the file when it is missing, unreadable, not numeric, not 3x3, non-finite or singular.
    """
    p = Path(path)
    if not p.is_file():
        raise DatasetError(f"{p}: homography file not found")
    try:
        H = np.loadtxt(p, dtype=np.float64, ndmin=2)
    except (ValueError, OSError, UnicodeDecodeError) as exc:
        first = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise DatasetError(f"{p}: not a plain-text 3x3 matrix ({first})") from None
    return check_homography(H, str(p), normalise=True, error=DatasetError)


def find_image(folder: Path, stem: str) -> Path:
    """``folder/stem.<ext>`` for the first extension of :data:`IMAGE_EXTENSIONS` that exists.
    ``folder``: the folder searched; ``stem``: the file name without extension."""
    for ext in IMAGE_EXTENSIONS:
        p = folder / f"{stem}{ext}"
        if p.is_file():
            return p
    raise DatasetError(f"{folder / stem}.*: image not found (tried {', '.join(IMAGE_EXTENSIONS)})")


def load_image(path: Path, gray: bool = False) -> np.ndarray:
    """Read an image (BGR, or gray as stored) lazily; errors are :class:`DatasetError` naming the file.
    ``path``: the image file; ``gray``: read it as gray."""
    try:
        img = read_image(path)
    except InputError as exc:
        raise DatasetError(str(exc)) from None
    return to_gray(img) if gray else img


def image_files(folder: Path) -> list[Path]:
    """The image files of ``folder`` (extensions of :data:`IMAGE_EXTENSIONS`, any case), sorted by path."""
    return sorted(p for p in folder.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS)


def image_sizes(paths: Sequence[Path | str]) -> dict[str, tuple[int, int]]:
    """Read every image once, so a damaged file fails before any work starts: ``{str(path): (width, height)}``.

    Raises
    ------
    DatasetError
        Naming the first file that cannot be read.
    """
    sizes = {}
    for p in dict.fromkeys(paths):
        img = load_image(Path(p))
        sizes[str(p)] = (int(img.shape[1]), int(img.shape[0]))
    return sizes


_NAME_OK = re.compile(r"[^A-Za-z0-9_.\-]")


def object_name(stem: str) -> str:
    """An object name a model database accepts, made from a file stem (other characters become ``_``)."""
    name = _NAME_OK.sub("_", stem).lstrip("_.-") or "object"
    return name[:100]


@dataclass(frozen=True, eq=False)
class ImagePair:
    """A reference image and a transformed one, with the homography between them.

    Attributes
    ----------
    dataset : str
        ``"oxford"`` or ``"hpatches"``.
    seq : str
        Sequence name (``"graf"``, ``"v_graffiti"``...).
    kind : str
        Distortion type (``"viewpoint"``, ``"zoom+rotation"``, ``"blur"``, ``"illumination"``, ``"jpeg"``).
    index : int
        Index of the second image, 2..6: the change grows with it.
    img1_path, imgN_path : Path
    H : (3, 3) float64
        Maps pixels of image 1 to image N (``x_N ~ H x_1``), ``H[2, 2] == 1``.

    Images are read only when asked for (:meth:`image1`, :meth:`imageN`, :meth:`images`).
    """

    dataset: str
    seq: str
    kind: str
    index: int
    img1_path: Path
    imgN_path: Path
    H: np.ndarray = field(repr=False)

    def image1(self, gray: bool = False) -> np.ndarray:
        return load_image(self.img1_path, gray)

    def imageN(self, gray: bool = False) -> np.ndarray:  # noqa: N802 (the field's notation)
        return load_image(self.imgN_path, gray)

    def images(self, gray: bool = False) -> tuple[np.ndarray, np.ndarray]:
        return self.image1(gray), self.imageN(gray)

    @property
    def name(self) -> str:
        """``"<seq>/1-<index>"``, a stable key for reports."""
        return f"{self.seq}/1-{self.index}"
