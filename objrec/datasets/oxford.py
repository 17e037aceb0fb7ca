"""The Oxford affine covariant regions dataset (Mikolajczyk et al. 2005) and HPatches image sequences.

Layouts
-------
Oxford: ``<root>/<seq>/img1..img6.(png|ppm|pgm)`` and ``<root>/<seq>/H1to2p .. H1to6p`` (plain-text 3x3).
HPatches: ``<root>/v_<name>/`` and ``<root>/i_<name>/`` with ``1.ppm .. 6.ppm`` and ``H_1_2 .. H_1_6``.
In both, each homography maps pixels of image 1 to image N.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path

from objrec.datasets._common import DatasetError, ImagePair, find_image, read_homography

__all__ = ["OXFORD_SEQUENCES", "load_oxford_affine", "load_hpatches", "hpatches_kind"]

#: The eight Oxford sequences and the change each one shows.
OXFORD_SEQUENCES: dict[str, str] = {
    "graf": "viewpoint",
    "wall": "viewpoint",
    "boat": "zoom+rotation",
    "bark": "zoom+rotation",
    "bikes": "blur",
    "trees": "blur",
    "leuven": "illumination",
    "ubc": "jpeg",
}


def _oxford_h_file(folder: Path, n: int) -> Path:
    for name in (f"H1to{n}p", f"H1to{n}"):
        if (folder / name).is_file():
            return folder / name
    raise DatasetError(f"{folder / f'H1to{n}p'}: homography file not found")


def _sequence_names(root: Path, sequences: Iterable[str] | None, is_seq: Callable[[Path], bool]) -> list[str]:
    if sequences is not None:
        names = list(sequences)
        for s in names:
            if not (root / s).is_dir():
                raise DatasetError(f"{root / s}: sequence folder not found")
        return names
    names = sorted(p.name for p in root.iterdir() if p.is_dir() and is_seq(p))
    if not names:
        raise DatasetError(f"{root}: no sequence folders found")
    return names


def load_oxford_affine(
    root: str | os.PathLike, sequences: Iterable[str] | None = None, n_images: int = 6
) -> list[ImagePair]:
    """Image pairs ``img1 -> imgN`` (N = 2..6) of the Oxford affine sequences.

    Parameters
    ----------
    root : path
        The folder holding the sequence folders (``graf/``, ``boat/``...), or one sequence folder.
    sequences : iterable of str, optional
        Sequence names to load (default: every subfolder that has an ``img1`` image).
    n_images : int
        Images per sequence (6 in the dataset).

    Returns
    -------
    list of ImagePair
        Sorted by sequence then index; ``kind`` from :data:`OXFORD_SEQUENCES` (``"unknown"`` for other names).
        Homographies are read and checked now, images only when asked for.

    Raises
    ------
    DatasetError
        Naming the missing or malformed file (image, homography text, non-3x3 matrix).

    References
    ----------
    K. Mikolajczyk et al., "A comparison of affine region detectors", IJCV 65(1/2):43-72, 2005.
    doi:10.1007/s11263-005-3848-x
    """
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"{root}: dataset folder not found")
    if sequences is None and _has_image(root, "img1"):
        root, sequences = root.parent, [root.name]
    names = _sequence_names(root, sequences, lambda p: _has_image(p, "img1"))
    pairs = []
    for seq in names:
        folder = root / seq
        img1 = find_image(folder, "img1")
        for n in range(2, n_images + 1):
            pairs.append(
                ImagePair(
                    "oxford",
                    seq,
                    OXFORD_SEQUENCES.get(seq, "unknown"),
                    n,
                    img1,
                    find_image(folder, f"img{n}"),
                    read_homography(_oxford_h_file(folder, n)),
                )
            )
    return pairs


def _has_image(folder: Path, stem: str) -> bool:
    try:
        find_image(folder, stem)
    except DatasetError:
        return False
    return True


def hpatches_kind(seq: str) -> str:
    """``"viewpoint"`` for ``v_*`` sequences, ``"illumination"`` for ``i_*``."""
    if seq.startswith("v_"):
        return "viewpoint"
    if seq.startswith("i_"):
        return "illumination"
    raise DatasetError(f"{seq}: HPatches sequence names start with 'v_' or 'i_'")


def load_hpatches(
    root: str | os.PathLike,
    sequences: Iterable[str] | None = None,
    kinds: Iterable[str] = ("viewpoint", "illumination"),
    n_images: int = 6,
) -> list[ImagePair]:
    """Image pairs ``1 -> N`` (N = 2..6) of the HPatches full-image sequences.

    Parameters
    ----------
    root : path
        ``hpatches-sequences-release/`` (holding ``v_*`` and ``i_*`` folders).
    sequences : iterable of str, optional
        Sequence names (default: every ``v_*`` and ``i_*`` folder).
    kinds : iterable of str
        Keep ``"viewpoint"`` and/or ``"illumination"`` sequences.
    n_images : int
        Images per sequence (6 in the dataset).

    Returns
    -------
    list of ImagePair

    Raises
    ------
    DatasetError
        Naming the missing or malformed file.

    References
    ----------
    V. Balntas, K. Lenc, A. Vedaldi, K. Mikolajczyk, "HPatches: A benchmark and evaluation of handcrafted
    and learned local descriptors", CVPR 2017. doi:10.1109/CVPR.2017.410
    """
    root = Path(root)
    if not root.is_dir():
        raise DatasetError(f"{root}: dataset folder not found")
    kinds = set(kinds)
    unknown = kinds - {"viewpoint", "illumination"}
    if unknown:
        raise ValueError(f"kinds: expected 'viewpoint' and/or 'illumination', got {sorted(unknown)}")
    names = _sequence_names(root, sequences, lambda p: p.name[:2] in ("v_", "i_"))
    pairs = []
    for seq in names:
        kind = hpatches_kind(seq)
        if kind not in kinds:
            continue
        folder = root / seq
        img1 = find_image(folder, "1")
        for n in range(2, n_images + 1):
            pairs.append(
                ImagePair(
                    "hpatches", seq, kind, n, img1, find_image(folder, str(n)), read_homography(folder / f"H_1_{n}")
                )
            )
    return pairs
