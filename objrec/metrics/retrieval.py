"""Retrieval metrics: the Nistér-Stewénius score of the University of Kentucky benchmark.

References
----------
.. [1] D. Nistér, H. Stewénius, "Scalable recognition with a vocabulary tree", CVPR 2006.
   DOI: 10.1109/CVPR.2006.264
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

__all__ = ["ns_score"]


def ns_score(ranked: Sequence[Sequence[int]], groups: Sequence[int], top: int = 4) -> float:
    """The Nistér-Stewénius score: the mean number of the query's group among its first ``top`` results.

    Parameters
    ----------
    ranked : sequence of sequences of int
        ``ranked[q]``: result image indices for query image ``q``, best first (the query itself among them
        when retrieval returns it, as the protocol counts it); shorter lists count what they hold.
    groups : sequence of int
        ``groups[i]``: the object (group) of image ``i``.
    top : int
        Results counted per query (4 in UKBench, the size of a group).

    Returns
    -------
    float
        In ``[0, top]``; ``top`` is perfect when every group holds ``top`` images. NaN without queries.

    Examples
    --------
    Two objects of two images each; the second image's search puts an image of the other object second:

    >>> ns_score([[0, 1], [1, 2], [2, 3], [3, 2]], [0, 0, 1, 1], top=2)
    1.75
    """
    g = np.asarray(groups)
    if len(ranked) != len(g):
        raise ValueError(f"ranked: expected one ranking per image ({len(g)}), got {len(ranked)}")
    if not len(g):
        return float("nan")
    return float(np.mean([np.sum(g[np.asarray(r[:top], np.int64)] == g[q]) for q, r in enumerate(ranked)]))
