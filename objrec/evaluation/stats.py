"""Summary statistics of report sections, where ``None`` marks an undefined value (rounded for the JSON)."""

from __future__ import annotations

import math

import numpy as np

__all__ = ["mean_defined", "percentile_defined", "median_with_failures"]


def mean_defined(xs: list[float | None]) -> float | None:
    """Mean of the values that are not None (6 decimals); None when there is none."""
    v = [x for x in xs if x is not None]
    return round(float(np.mean(v)), 6) if v else None


def percentile_defined(xs: list[float | None], q: float) -> float | None:
    """The ``q``-th percentile of the values that are not None (3 decimals); None when there is none.
    ``xs``: the values."""
    v = [x for x in xs if x is not None]
    return round(float(np.percentile(v, q)), 3) if v else None


def median_with_failures(xs: list[float | None]) -> float | None:
    """Median where ``None`` means a failed estimate (infinite error); None when at least half failed."""
    if not xs:
        return None
    v = np.array([math.inf if x is None else x for x in xs], np.float64)
    m = float(np.median(v))
    return round(m, 4) if math.isfinite(m) else None
