"""The plan cache shared by SURF and the SIFT runner: least-recently-used bound, reused scratch buffers."""

from __future__ import annotations

import numpy as np
import pytest

from objrec.features._plans import Plan, PlanCache, plan_key


def _build(key, log):
    def build():
        log.append(key)
        return Plan(key, np)

    return build


def test_cache_builds_once_and_drops_the_least_recently_used():
    log: list = []
    cache = PlanCache(maxsize=2)
    a, b, c = (plan_key((h, 64), (3,), np) for h in (32, 48, 64))
    pa = cache.get(a, _build(a, log))
    assert cache.get(a, _build(a, log)) is pa
    cache.get(b, _build(b, log))
    cache.get(a, _build(a, log))  # a is now the most recent
    cache.get(c, _build(c, log))  # drops b
    assert log == [a, b, c]
    assert a in cache and c in cache and b not in cache and len(cache) == 2
    cache.get(b, _build(b, log))
    assert log[-1] == b and a not in cache
    cache.clear()
    assert len(cache) == 0
    with pytest.raises(ValueError, match="maxsize"):
        PlanCache(0)


def test_key_separates_shape_parameters_and_array_module():
    assert plan_key((480, 640), (4, 3), np) == ((480, 640), (4, 3), "numpy")
    assert plan_key(np.array([480, 640]), (4, 3), np) == plan_key((480, 640), (4, 3), np)
    assert plan_key((480, 640), (4, 3), np) != plan_key((480, 640), (4, 2), np)


def test_scratch_grows_and_is_reused():
    p = Plan(("k",), np)
    a = p.scratch("xy", (10, 2), np.float32)
    assert a.shape == (10, 2) and a.dtype == np.float32
    b = p.scratch("xy", (60, 2), np.float32)  # within the first allocation (64 rows and half again)
    assert np.shares_memory(a, b)
    c = p.scratch("xy", (500, 2), np.float32)
    assert c.shape == (500, 2) and not np.shares_memory(b, c)
    assert np.shares_memory(c, p.scratch("xy", (100, 2), np.float32))
    assert p.scratch("xy", (5, 3), np.float32).shape == (5, 3)  # another row shape: a buffer of its own
    assert p.scratch("n", 7, np.int64).shape == (7,)
    assert p.memo("view", lambda: object()) is p.memo("view", lambda: object())
