"""Per-resolution plans of the feature extractors: tables and buffers kept while frames keep their size.

A :class:`Plan` holds what one image size needs (layout tables, pyramid or response planes, scratch space
for a variable number of keypoints) on one array module; a :class:`PlanCache` keeps the few most recently
used plans. SURF and the SIFT runner both keep their buffers this way, so a frame of a size seen before
allocates nothing but its results.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Iterator
from types import ModuleType
from typing import Any, Generic, SupportsInt, TypeVar, cast

import numpy as np

__all__ = ["Plan", "PlanCache", "plan_key"]

#: Plans kept per extractor. A frame loop sees the frame size and, when it extracts from crops (the sweep's
#: tiles, a track's confirmation, each with sides snapped to a coarse grid), a few crop sizes; more than that
#: would hold memory for sizes that are not coming back.
MAX_PLANS = 8

_MIN_ROWS = 64


def plan_key(shape: tuple[int, ...], params: tuple, xp: ModuleType) -> tuple:
    """The cache key of a plan: image shape, the parameters that change the layout, and the array module.
    ``shape``: the image's shape; ``params``: the layout parameters; ``xp``: the array module."""
    return (tuple(int(v) for v in shape), tuple(params), xp.__name__)


class Plan(dict):
    """Named tables and buffers for one image size on one array module.

    A plan is a mapping (``plan["det"]``) to which subclasses may add attributes for their layout. Buffers
    whose length depends on the number of keypoints come from :meth:`scratch`.

    Parameters
    ----------
    key : tuple
        The key the plan is cached under (see :func:`plan_key`).
    xp : module
        ``numpy`` or ``cupy``: where the buffers live.
    """

    def __init__(self, key: tuple, xp: ModuleType) -> None:
        super().__init__()
        self.key = key
        self.xp = xp
        self._scratch: dict[Hashable, Any] = {}

    def scratch(self, name: Hashable, shape: tuple[int, ...] | int, dtype: Any) -> Any:
        """A buffer of ``shape`` and ``dtype``, reused from call to call; its contents are undefined.

        The buffer is allocated with room for more rows than asked (at least 64, then 1.5 times what is
        needed when it grows), so a keypoint count that varies from frame to frame rarely reallocates. The
        result is a view of the first ``shape[0]`` rows: anything returned to a caller must be a copy.
        ``name``: the buffer's key within the plan.
        """
        if np.isscalar(shape):
            shape = (int(cast(SupportsInt, shape)),)
        else:
            shape = tuple(int(v) for v in cast(Iterable[SupportsInt], shape))
        n, tail = shape[0], shape[1:]
        dtype = np.dtype(dtype)
        buf = self._scratch.get(name)
        if buf is None or buf.shape[0] < n or buf.shape[1:] != tail or buf.dtype != dtype:
            rows = max(n, _MIN_ROWS) * 3 // 2
            buf = self._scratch[name] = self.xp.empty((rows,) + tail, dtype)
        return buf[:n]

    def memo(self, name: Hashable, make: Callable[[], Any]) -> Any:
        """``make()`` once per plan and ``name`` (views of the plan's buffers that are costly to build).
        ``name``: the value's key within the plan; ``make``: builds it."""
        key = ("memo", name)
        v = self._scratch.get(key)
        if v is None:
            v = self._scratch[key] = make()
        return v


P = TypeVar("P", bound=Plan)


class PlanCache(Generic[P]):
    """A bounded least-recently-used cache of :class:`Plan` objects (of one subclass, ``P``).

    Parameters
    ----------
    maxsize : int
        Plans kept; the least recently used is dropped when a new one would exceed it.
    """

    def __init__(self, maxsize: int = MAX_PLANS) -> None:
        if maxsize < 1:
            raise ValueError(f"maxsize: expected an int >= 1, got {maxsize!r}")
        self.maxsize = maxsize
        self._plans: OrderedDict[tuple, P] = OrderedDict()

    def get(self, key: tuple, build: Callable[[], P]) -> P:
        """The plan for ``key``, built by ``build()`` on first use.
        ``key``: the plan's key (:func:`plan_key`); ``build``: makes the plan."""
        plan = self._plans.get(key)
        if plan is None:
            plan = build()
            self._plans[key] = plan
            while len(self._plans) > self.maxsize:
                self._plans.popitem(last=False)
        else:
            self._plans.move_to_end(key)
        return plan

    def __len__(self) -> int:
        return len(self._plans)

    def __contains__(self, key: object) -> bool:
        return key in self._plans

    def values(self) -> Iterator[P]:
        """The cached plans, least recently used first."""
        return iter(list(self._plans.values()))

    def clear(self) -> None:
        """Drop every plan (and its buffers)."""
        self._plans.clear()
