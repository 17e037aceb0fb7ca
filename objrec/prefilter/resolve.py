"""The prefilter a recognizer uses: the database's own (loaded when present and current), one given, or none.

Kept apart from :mod:`objrec.prefilter.estimator` so that a recognizer of a database without a stored prefilter
starts without importing the estimator and scikit-learn with it.
"""

from __future__ import annotations

from typing import Any

from objrec.prefilter.storage import load_for
from objrec.types import Failure

__all__ = ["resolve_prefilter"]


def resolve_prefilter(db: Any, prefilter: Any = "auto") -> tuple[Any, str]:
    """The prefilter a recognizer uses and what became of the request.

    Parameters
    ----------
    db : ModelDB
        The database whose stored prefilter ``"auto"`` looks for.
    prefilter : "auto", object with ``propose(frame) -> Regions``, None or False
        ``"auto"``: the database's own, when present and current; an object: used as given; None/False: none.

    Returns
    -------
    (prefilter or None, status)
        ``status`` is ``"loaded"``, ``"given"``, ``"off"``, or the reason the database's was not used
        (``"absent"``, ``"stale"``).

    Notes
    -----
    The estimator (and scikit-learn with it) is imported only when a stored prefilter is loaded: a database
    without one, as ``objrec detect`` mostly meets, starts without that import.
    """
    if prefilter is None or prefilter is False:
        return None, "off"
    if not isinstance(prefilter, str):
        return prefilter, "given"
    if prefilter != "auto":
        raise ValueError(f"prefilter: expected 'auto', a prefilter or None, got {prefilter!r}")
    stored = load_for(db)
    if isinstance(stored, Failure):
        return None, stored.reason
    from objrec.prefilter.estimator import RegionPrefilter

    return RegionPrefilter.from_stored(stored), "loaded"
