"""Catalogue folders: reference images of objects and labelled query photos.

Layouts of a catalogue folder (found by what it holds):

- SMVS (Stanford Mobile Visual Search, e.g. ``smvs_dvd``): ``reference/NAME.jpg`` and
  ``queries/<CAMERA>_<NAME>.jpg``; a photo's label is the part of its name after the last ``_`` and its
  group the camera.
- generic: ``references/NAME.<ext>`` (one image per object, the name is the stem) and either
  ``queries/LABEL/<any>.<ext>`` (the folder names the object shown; a folder ``none`` holds photos of no
  enrolled object), or ``queries.csv`` with columns ``image,label[,group]`` (image relative to the folder,
  empty label: no object). Groups default to the label's folder (``all`` for a CSV without them).
"""

from __future__ import annotations

import csv
from pathlib import Path

from objrec.datasets._common import DatasetError, image_files

__all__ = ["NO_OBJECT", "CatalogueSet", "load_catalogue"]

#: The query folder of photos that show no enrolled object (generic layout).
NO_OBJECT = "none"


class CatalogueSet:
    """References and labelled query photos of a catalogue folder.

    Attributes
    ----------
    layout : str
        ``"smvs"`` or ``"generic"``.
    references : list of (str, str)
        Object name and absolute image path.
    queries : list of (str, str or None, str)
        Absolute image path, label (an object name, None for no object) and group.
    """

    def __init__(self, layout: str, references: list[tuple[str, str]], queries: list[tuple[str, str | None, str]]):
        self.layout = layout
        self.references = references
        self.queries = queries


def _smvs(root: Path) -> CatalogueSet:
    refs = [(p.stem, str(p.resolve())) for p in image_files(root / "reference")]
    queries: list[tuple[str, str | None, str]] = []
    for p in image_files(root / "queries"):
        group, sep, label = p.stem.rpartition("_")
        if not sep or not group:
            raise DatasetError(f"{p}: expected a query named <CAMERA>_<NAME>{p.suffix}")
        queries.append((str(p.resolve()), label, group))
    return CatalogueSet("smvs", refs, queries)


def _csv_queries(root: Path, table: Path) -> list[tuple[str, str | None, str]]:
    queries: list[tuple[str, str | None, str]] = []
    with open(table, newline="", encoding="utf-8") as f:
        for i, row in enumerate(csv.DictReader(f), start=2):
            if not row.get("image"):
                raise DatasetError(f"{table}: line {i}: expected columns image,label[,group]")
            path = (root / row["image"]).resolve()
            if not path.is_file():
                raise DatasetError(f"{path}: query image not found ({table}, line {i})")
            label = (row.get("label") or "").strip() or None
            queries.append((str(path), label, (row.get("group") or "").strip() or "all"))
    return queries


def _generic(root: Path) -> CatalogueSet:
    refs = [(p.stem, str(p.resolve())) for p in image_files(root / "references")]
    queries: list[tuple[str, str | None, str]] = []
    table = root / "queries.csv"
    if table.is_file():
        queries = _csv_queries(root, table)
    elif (root / "queries").is_dir():
        for folder in sorted(d for d in (root / "queries").iterdir() if d.is_dir()):
            label = None if folder.name == NO_OBJECT else folder.name
            queries += [(str(p.resolve()), label, folder.name) for p in image_files(folder)]
    else:
        raise DatasetError(f"{root}: expected queries/LABEL/ folders or queries.csv beside references/")
    return CatalogueSet("generic", refs, queries)


def load_catalogue(path: str | Path) -> CatalogueSet:
    """Read a catalogue folder (layouts in the module notes); errors name the file or folder."""
    root = Path(path)
    if not root.is_dir():
        raise DatasetError(f"{root}: catalogue folder not found")
    if (root / "reference").is_dir() and (root / "queries").is_dir():
        cat = _smvs(root)
    elif (root / "references").is_dir():
        cat = _generic(root)
    else:
        raise DatasetError(f"{root}: expected reference/ + queries/ (SMVS) or references/ + queries (generic)")
    if not cat.references:
        raise DatasetError(f"{root}: no reference images found")
    if not cat.queries:
        raise DatasetError(f"{root}: no query images found")
    names = {n for n, _ in cat.references}
    unknown = sorted({lab for _, lab, _ in cat.queries if lab is not None and lab not in names})
    if unknown:
        raise DatasetError(f"{root}: queries labelled {unknown[0]!r}, which has no reference image")
    return cat
