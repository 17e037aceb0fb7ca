"""objrec: real-time hierarchical object recognition.

A decision-tree prefilter rejects most of the frame, SURF/SIFT features are extracted on the survivors
(GPU where there is one), matched against a model database with geometric verification, under a
deadline-aware scheduler.

The names below are imported on first use, so that ``import objrec`` (and the command line's ``--help``)
loads neither OpenCV, Numba, scikit-learn nor CuPy, and compiles nothing.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

_LAZY = {
    "ModelDB": "objrec.modeldb",
    "Recognizer": "objrec.recognizer",
    "Features": "objrec.types",
    "Regions": "objrec.types",
    "Detection": "objrec.types",
    "FrameResult": "objrec.types",
}

if TYPE_CHECKING:
    from objrec.modeldb import ModelDB
    from objrec.recognizer import Recognizer
    from objrec.types import Detection, Features, FrameResult, Regions

__all__ = ["ModelDB", "Recognizer", "Features", "Regions", "Detection", "FrameResult", "__version__"]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'objrec' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later look-ups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
