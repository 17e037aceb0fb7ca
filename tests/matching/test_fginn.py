"""FGINN (first geometrically inconsistent nearest neighbour) against a brute-force loop."""

from __future__ import annotations

import numpy as np
import pytest

from objrec.matching.knn import Fginn, ratio_match


def _data(seed: int, n_points: int = 40, copies: int = 4, n_query: int = 60):
    """Train rows: each of ``n_points`` model points seen ``copies`` times (near-duplicate descriptors at
    nearly the same position, as synthesised views give), owned by two objects; queries are noisy points."""
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(n_points, 16)).astype(np.float32)
    xy0 = rng.uniform(0, 200, size=(n_points, 2)).astype(np.float32)
    owner0 = rng.integers(0, 2, n_points)
    train = np.repeat(base, copies, axis=0) + 0.05 * rng.normal(size=(n_points * copies, 16)).astype(np.float32)
    xy = np.repeat(xy0, copies, axis=0) + rng.uniform(-3, 3, size=(n_points * copies, 2)).astype(np.float32)
    owner = np.repeat(owner0, copies)
    pick = rng.integers(0, n_points, n_query)
    query = base[pick] + 0.3 * rng.normal(size=(n_query, 16)).astype(np.float32)
    query[::5] = rng.normal(size=(len(query[::5]), 16))  # some queries match nothing in particular
    return query, train, xy, owner


def _ref(query, train, xy, owner, ratio, radius, k):
    """The loop: sort all train rows by distance; the competitor is the first of the next k - 1 that has
    another owner or lies farther than ``radius`` from the first's keypoint, else the k-th."""
    out = {}
    for i, q in enumerate(query.astype(np.float64)):
        d = np.sqrt(((train.astype(np.float64) - q) ** 2).sum(axis=1))
        order = np.argsort(d, kind="stable")[:k]
        first = order[0]
        comp = d[order[-1]]
        for j in order[1:]:
            if owner[j] != owner[first] or np.hypot(*(xy[j] - xy[first])) > radius:
                comp = d[j]
                break
        if d[first] < ratio * comp:
            out[i] = int(first)
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("k", [3, 8])
def test_fginn_equals_a_brute_force_loop(seed, k):
    query, train, xy, owner = _data(seed)
    m = ratio_match(query, train, 0.8, fginn=Fginn(xy, owner, radius=6.0, k=k))
    ref = _ref(query, train, xy, owner, 0.8, 6.0, k)
    got = dict(zip(m.query_idx.tolist(), m.train_idx.tolist(), strict=True))
    assert got == ref


def test_fginn_keeps_the_matches_near_duplicates_hide_from_lowes_test():
    query, train, xy, owner = _data(5)
    plain = ratio_match(query, train, 0.8)
    fg = ratio_match(query, train, 0.8, fginn=Fginn(xy, owner, radius=6.0, k=8))
    assert len(fg) > 3 * max(len(plain), 1)
    # With radius 0 only exact position copies count as the same point: nothing here is, so FGINN's
    # competitor is the second neighbour and the result is Lowe's.
    same = ratio_match(query, train, 0.8, fginn=Fginn(xy, owner, radius=0.0, k=8))
    np.testing.assert_array_equal(same.train_idx, plain.train_idx)
    np.testing.assert_array_equal(same.query_idx, plain.query_idx)


def test_fginn_with_laplacian_signs_and_bad_arguments():
    query, train, xy, owner = _data(3)
    rng = np.random.default_rng(0)
    ql, tl = rng.choice([-1, 1], len(query)).astype(np.int8), np.repeat(rng.choice([-1, 1], 40), 4).astype(np.int8)
    m = ratio_match(query, train, 0.8, query_laplacian=ql, train_laplacian=tl, fginn=Fginn(xy, owner, 6.0, 8))
    assert np.all(ql[m.query_idx] == tl[m.train_idx])
    with pytest.raises(ValueError, match="k"):
        Fginn(xy, owner, 6.0, 1)
    with pytest.raises(ValueError, match="xy, owner"):
        Fginn(xy[:-1], owner)
