"""Feature detectors and descriptors: :class:`SIFT` (OpenCV on the CPU) and :class:`SURF` (our own)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from objrec.features.sift import SIFT

if TYPE_CHECKING:
    from objrec.features.surf import SURF

__all__ = ["SIFT", "SURF", "make_detector"]


def __getattr__(name: str) -> Any:
    if name == "SURF":
        from objrec.features.surf import SURF

        return SURF
    raise AttributeError(name)


def make_detector(kind: str, **params: Any) -> SIFT | SURF:
    """Build a detector by its kind name.

    Parameters
    ----------
    kind : {"sift", "surf"}
        Which detector.
    **params
        Passed to its constructor (``backend=...`` included).

    Returns
    -------
    SIFT or SURF
    """
    if kind == "sift":
        return SIFT(**params)
    if kind == "surf":
        from objrec.features.surf import SURF

        return SURF(**params)
    raise ValueError(f"detector: expected 'sift' or 'surf', got {kind!r}")
