"""Dataset loaders for evaluation: Oxford affine, HPatches sequences, COIL-100 style folders, objects JSON,
annotated planar pairs, catalogue folders and folders of object images.

Each loader checks the layout and reads ground truth (homographies) when called, and returns plain
dataclasses whose images are read only when asked for. A missing or malformed file raises
:class:`DatasetError` (a ``ValueError``) naming the file. How to obtain each dataset: ``datasets/README.md``
at the top of the repository.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from objrec.datasets._common import (
    IMAGE_EXTENSIONS,
    DatasetError,
    ImagePair,
    image_files,
    image_sizes,
    load_image,
    object_name,
    read_homography,
)
from objrec.datasets.catalogue import NO_OBJECT, CatalogueSet, load_catalogue
from objrec.datasets.coil import ObjectView, angle_difference, load_coil, view_pairs
from objrec.datasets.folder import load_object_folder
from objrec.datasets.objects import GroundTruthObject, ObjectsDataset, Scene, load_objects_dataset
from objrec.datasets.oxford import OXFORD_SEQUENCES, hpatches_kind, load_hpatches, load_oxford_affine
from objrec.datasets.pairs import AnnotatedPair, load_annotated_pairs, read_points

__all__ = [
    "DatasetError",
    "ImagePair",
    "ObjectView",
    "GroundTruthObject",
    "Scene",
    "ObjectsDataset",
    "OXFORD_SEQUENCES",
    "IMAGE_EXTENSIONS",
    "load_oxford_affine",
    "load_hpatches",
    "load_coil",
    "load_objects_dataset",
    "load_dataset",
    "parse_dataset_spec",
    "read_homography",
    "hpatches_kind",
    "view_pairs",
    "angle_difference",
    "load_image",
    "image_files",
    "image_sizes",
    "object_name",
    "NO_OBJECT",
    "CatalogueSet",
    "load_catalogue",
    "load_object_folder",
    "AnnotatedPair",
    "load_annotated_pairs",
    "read_points",
]

_LOADERS: dict[str, Callable[[str | os.PathLike], Any]] = {
    "oxford": load_oxford_affine,
    "hpatches": load_hpatches,
    "coil": load_coil,
    "objects": load_objects_dataset,
}


def parse_dataset_spec(spec: str) -> tuple[str, str]:
    """Split ``"KIND:PATH"`` (as given to ``objrec eval``) into its kind and path."""
    kind, sep, path = spec.partition(":")
    if not sep or not path or kind not in _LOADERS:
        raise ValueError(f"dataset: expected KIND:PATH with KIND one of {sorted(_LOADERS)}, got {spec!r}")
    return kind, path


def load_dataset(kind: str, path: str | os.PathLike) -> Any:
    """Load a dataset by kind: ``"oxford"``, ``"hpatches"``, ``"coil"`` or ``"objects"``.

    Returns what the kind's loader returns: a list of :class:`ImagePair` (oxford, hpatches), a list of
    :class:`ObjectView` (coil) or an :class:`ObjectsDataset` (objects).
    ``path``: the dataset's folder.
    """
    if kind not in _LOADERS:
        raise ValueError(f"kind: expected one of {sorted(_LOADERS)}, got {kind!r}")
    return _LOADERS[kind](path)
