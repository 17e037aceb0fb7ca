"""FGINN (first geometrically inconsistent nearest neighbour) against a brute-force loop."""

from __future__ import annotations

import numpy as np
import pytest

from objrec.knn import Fginn, ratio_match


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


def _neighbours(query, train, k):
    """Per query: its index, the distances to every train row, and the ``k`` nearest rows in order."""
    for i, q in enumerate(query.astype(np.float64)):
        d = np.sqrt(((train.astype(np.float64) - q) ** 2).sum(axis=1))
        yield i, d, np.argsort(d, kind="stable")[:k]


def _ref(query, train, xy, owner, ratio, radius, k):
    """The loop: sort all train rows by distance; the competitor is the first of the next k - 1 that has
    another owner or lies farther than ``radius`` from the first's keypoint, else the k-th."""
    out = {}
    for i, d, order in _neighbours(query, train, k):
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


def _views_data(seed: int, n_points: int = 30, n_objects: int = 3, n_query: int = 80):
    """Objects of two enrolled views: each model point has a descriptor in each view (the second a noisy copy
    of the first, at another position), views numbered apart (``owner``) and grouped by object (``group``)."""
    rng = np.random.default_rng(seed)
    base = rng.normal(size=(n_objects * n_points, 16)).astype(np.float32)
    obj = np.repeat(np.arange(n_objects), n_points)
    train = np.concatenate([base, base + 0.15 * rng.normal(size=base.shape).astype(np.float32)])
    xy = rng.uniform(0, 200, size=(len(train), 2)).astype(np.float32)
    group = np.concatenate([obj, obj])
    owner = np.concatenate([2 * obj, 2 * obj + 1])
    query = base[rng.integers(0, len(base), n_query)] + 0.3 * rng.normal(size=(n_query, 16)).astype(np.float32)
    query[::6] = rng.normal(size=(len(query[::6]), 16))
    return query, train, xy, owner, group


def _ref_views(query, train, xy, owner, group, ratio, radius, k):
    """The loop for objects of several views: FGINN's match of the nearest neighbour (a neighbour in another
    view of its object is never its competitor), and for a kept one, the first neighbour among the k in each
    other view of that object, kept when it beats the ratio against the nearest neighbour of another object
    (the k-th distance when none is among the k)."""
    out = set()
    for i, d, order in _neighbours(query, train, k):
        first = order[0]
        comp = d[order[-1]]
        for j in order[1:]:
            same_point = owner[j] == owner[first] and np.hypot(*(xy[j] - xy[first])) <= radius
            other_view = group[j] == group[first] and owner[j] != owner[first]
            if not (same_point or other_view):
                comp = d[j]
                break
        if not d[first] < ratio * comp:
            continue
        out.add((i, int(first)))
        others = [j for j in order if group[j] != group[first]]
        comp_other = d[others[0]] if others else d[order[-1]]
        seen = {owner[first]}
        for j in order[1:]:
            if group[j] == group[first] and owner[j] not in seen:
                seen.add(owner[j])
                if d[j] < ratio * comp_other:
                    out.add((i, int(j)))
    return out


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_objects_of_several_views_are_matched_in_each_view_as_a_brute_force_loop(seed):
    query, train, xy, owner, group = _views_data(seed)
    m = ratio_match(query, train, 0.8, fginn=Fginn(xy, owner, radius=6.0, k=8, group=group))
    got = set(zip(m.query_idx.tolist(), m.train_idx.tolist(), strict=True))
    assert got == _ref_views(query, train, xy, owner, group, 0.8, 6.0, 8)
    # The point: queries matched in both views of their object, which the nearest neighbour alone never gives.
    per_query = np.bincount(m.query_idx, minlength=len(query))
    assert (per_query == 2).sum() >= len(query) // 4
    for i in np.flatnonzero(per_query == 2):
        rows = m.train_idx[m.query_idx == i]
        assert group[rows[0]] == group[rows[1]] and owner[rows[0]] != owner[rows[1]]
    # A mutual check keeps one match per query (the nearest neighbour's).
    mm = ratio_match(query, train, 0.8, mutual=True, fginn=Fginn(xy, owner, radius=6.0, k=8, group=group))
    assert len(np.unique(mm.query_idx)) == len(mm)
