"""Annotated planar image pairs (MAGSAC's ``data/homography`` layout): two views and their correspondences.

Layout of a root folder:

- ``NAMEA.<ext>``, ``NAMEB.<ext>``, ``NAME_pts.txt`` at the top level (set ``homogr``): one correspondence per
  line, ``x_A y_A 1 x_B y_B 1 [flag]``; with a seventh column only the lines whose flag is 1 are used, without
  one every line;
- the same names in ``extremeview/`` (set ``evd``, the EVD pairs of Mishkin et al. 2015): one correspondence
  per line, ``x_A y_A x_B y_B ... flag``, the last column 1 for a verified correspondence (only those are used).

References
----------
Lebeda, Matas, Chum, "Fixing the locally optimized RANSAC", BMVC 2012 (the ``homogr`` pairs).
Mishkin, Matas, Perdoch, "MODS: Fast and robust method for two-view matching", CVIU 141, 2015,
doi:10.1016/j.cviu.2015.08.005 (the EVD pairs).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from objrec.datasets._common import IMAGE_EXTENSIONS, DatasetError

__all__ = ["SETS", "AnnotatedPair", "read_points", "load_annotated_pairs"]

#: Set name -> sub-folder of the root and point-file format.
SETS: dict[str, tuple[str, str]] = {"homogr": (".", "homogr"), "evd": ("extremeview", "evd")}


@dataclass(frozen=True, eq=False)
class AnnotatedPair:
    """Two views of a planar scene with annotated correspondences.

    Attributes
    ----------
    set : str
        ``"homogr"`` or ``"evd"``.
    name : str
        The pair's name (``NAME`` of ``NAMEA.png``).
    path_a, path_b : Path
        The images; A is enrolled, B is the scene.
    points_a, points_b : (N, 2) float64
        The used correspondences (x, y) in A and in B.
    """

    set: str
    name: str
    path_a: Path
    path_b: Path
    points_a: np.ndarray = field(repr=False)
    points_b: np.ndarray = field(repr=False)

    @property
    def label(self) -> str:
        """``"<set>/<name>"``, a stable key for reports."""
        return f"{self.set}/{self.name}"


def _point_row(r: list[str], fmt: str) -> tuple[tuple[float, float], tuple[float, float]] | None:
    """The correspondence of one split line of a point file, None for a line not flagged as used."""
    if fmt == "homogr":
        if len(r) not in (6, 7):
            raise ValueError(f"expected 6 or 7 columns (x_A y_A 1 x_B y_B 1 [flag]), got {len(r)}")
        if len(r) == 7 and float(r[6]) != 1:
            return None
        return (float(r[0]), float(r[1])), (float(r[3]), float(r[4]))
    if len(r) < 5:
        raise ValueError(f"expected x_A y_A x_B y_B ... flag, got {len(r)} columns")
    if r[-1] != "1":
        return None
    return (float(r[0]), float(r[1])), (float(r[2]), float(r[3]))


def read_points(path: Path, fmt: str) -> tuple[np.ndarray, np.ndarray]:
    """The used correspondences of a point file in the ``homogr`` or ``evd`` format (see the module notes).
    ``path``: the point file; ``fmt``: ``"homogr"`` or ``"evd"``."""
    if not path.is_file():
        raise DatasetError(f"{path}: point file not found")
    try:
        rows = [ln.split() for ln in path.read_text().splitlines() if ln.strip() and not ln.lstrip().startswith("#")]
    except (OSError, UnicodeDecodeError) as exc:
        raise DatasetError(f"{path}: cannot read the point file ({exc})") from None
    pa, pb = [], []
    for i, r in enumerate(rows, 1):
        try:
            ab = _point_row(r, fmt)
        except ValueError as exc:
            raise DatasetError(f"{path}: line {i}: {exc}") from None
        if ab is not None:
            pa.append(ab[0])
            pb.append(ab[1])
    if not pa:
        raise DatasetError(f"{path}: no verified correspondences (flag 1)")
    a, b = np.array(pa, np.float64), np.array(pb, np.float64)
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        raise DatasetError(f"{path}: non-finite coordinates")
    return a, b


def _image_b(folder: Path, name: str) -> Path:
    for ext in IMAGE_EXTENSIONS:
        p = folder / f"{name}B{ext}"
        if p.is_file():
            return p
    raise DatasetError(f"{folder / name}B.*: image B of pair {name!r} not found")


def load_annotated_pairs(root: str | Path, sets: list[str] | None = None) -> list[AnnotatedPair]:
    """The pairs under ``root`` (every set whose folder exists, or ``sets``), sorted by set and name.

    Raises :class:`~objrec.datasets.DatasetError` naming the file when an image B or a point file is missing
    or a point file is malformed, and when no pair is found.
    """
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"{root}: annotated pair folder not found")
    for s in sets or ():
        if s not in SETS:
            raise ValueError(f"pairs: unknown set {s!r} (choose from {', '.join(SETS)})")
    out = []
    for set_name, (sub, fmt) in SETS.items():
        folder = root / sub
        if (sets and set_name not in sets) or not folder.is_dir():
            continue
        a_files = sorted(p for p in folder.iterdir() if p.suffix.lower() in IMAGE_EXTENSIONS and p.stem.endswith("A"))
        for a in a_files:
            name = a.stem[:-1]
            pa, pb = read_points(folder / f"{name}_pts.txt", fmt)
            out.append(AnnotatedPair(set_name, name, a, _image_b(folder, name), pa, pb))
    if not out:
        raise DatasetError(f"{root}: no annotated pairs (NAMEA.png, NAMEB.png, NAME_pts.txt) found")
    return out
