"""objrec: real-time hierarchical object recognition.

A decision-tree prefilter rejects most of the frame, SURF/SIFT features are extracted on the survivors
(GPU where there is one), matched against a model database with geometric verification, under a
deadline-aware scheduler.

The names below are imported on first use, so that ``import objrec`` (and the command line's ``--help``)
loads neither OpenCV, Numba, scikit-learn nor CuPy, and compiles nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from objrec._lazy import lazy_attributes

__version__ = "0.1.0"

_LAZY = {
    "ModelDB": "objrec.modeldb",
    "Recognizer": "objrec.recognizer",
    "Features": "objrec.types",
    "Regions": "objrec.types",
    "Detection": "objrec.types",
    "FrameResult": "objrec.types",
    "Camera": "objrec.pose",
}

if TYPE_CHECKING:
    from objrec.modeldb import ModelDB
    from objrec.pose import Camera
    from objrec.recognizer import Recognizer
    from objrec.types import Detection, Features, FrameResult, Regions

__all__ = ["ModelDB", "Recognizer", "Features", "Regions", "Detection", "FrameResult", "Camera", "__version__"]


__getattr__, __dir__ = lazy_attributes(globals(), _LAZY)
