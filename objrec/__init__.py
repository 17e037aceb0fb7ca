"""objrec: real-time hierarchical object recognition.

A decision-tree prefilter rejects most of the frame, SURF/SIFT features are extracted on the survivors
(GPU where there is one), matched against a model database with geometric verification, under a
deadline-aware scheduler.
"""

from __future__ import annotations

__version__ = "0.1.0"

from objrec.modeldb import ModelDB  # noqa: E402
from objrec.recognizer import Recognizer  # noqa: E402
from objrec.types import Detection, Features, FrameResult, Regions  # noqa: E402

__all__ = ["ModelDB", "Recognizer", "Features", "Regions", "Detection", "FrameResult", "__version__"]
