"""A folder of object images: one object per image file, named after the file."""

from __future__ import annotations

import os
from pathlib import Path

from objrec.datasets._common import IMAGE_EXTENSIONS, DatasetError, image_files, object_name

__all__ = ["load_object_folder"]


def load_object_folder(path: str | os.PathLike) -> list[tuple[str, str]]:
    """``(name, absolute path)`` of every image in ``path``, sorted by file name.

    Names come from the file stems (:func:`~objrec.datasets.object_name`); a name that two files share gets
    ``_`` appended until it is unique.

    Raises
    ------
    DatasetError
        When the folder does not exist or holds no image.
    """
    root = Path(path)
    if not root.is_dir():
        raise DatasetError(f"{root}: object image folder not found (or use synthetic:demo)")
    files = image_files(root)
    if not files:
        raise DatasetError(f"{root}: no object images ({', '.join(IMAGE_EXTENSIONS)}) found")
    out, seen = [], set()
    for f in files:
        name = object_name(f.stem)
        while name in seen:
            name += "_"
        seen.add(name)
        out.append((name, str(f.resolve())))
    return out
