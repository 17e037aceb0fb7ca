"""Helpers shared by the SURF and SIFT kernels, written once as plain Python functions.

:func:`build` makes them for a target with :meth:`objrec.kernels.Target.device` (numba.njit on the CPU,
a ``numba.cuda.jit`` device function on the GPU), as each kernel module does with its own helpers; the
kernel modules take theirs from it. ``row_segment`` is the prologue of every 2-D row stage: the octave a
grid row belongs to and the columns a work item covers.
"""

from __future__ import annotations

__all__ = ["build", "find_octave", "fast_atan2", "extremum26", "segment"]

_ATAN_EPS = 2.220446049250313e-16  # (float)DBL_EPSILON: fastAtan2's guard against 0 / 0
# fastAtan2's polynomial in degrees: OpenCV's atan2_p1..p7 times 180 / pi (hal::fastAtan32f)
_ATAN_P1 = 57.283623713809675
_ATAN_P3 = -18.66744610461362
_ATAN_P5 = 8.914000133129813
_ATAN_P7 = -2.5397245532480937


def find_octave(v, oinfo, n_oct, col):
    """The octave whose block starts at or before ``v``: ``oinfo[o, col]`` are the blocks' ascending starts.
    ``n_oct``: the octaves; ``col``: the column of ``oinfo`` holding the starts."""
    o = 0
    while o + 1 < n_oct and v >= oinfo[o + 1, col]:
        o += 1
    return o


def fast_atan2(y, x):
    """OpenCV's ``fastAtan2``: ``atan2(y, x)`` in degrees, in [0, 360], about 0.01 degree error.

    The same rounding of angles as OpenCV's orientation histograms, and cheaper than libm's ``atan2``.
    Written with selects instead of branches: the quadrant of an image gradient is a coin toss for the
    branch predictor.
    ``y``, ``x``: the vector's components.
    """
    ax = abs(x)
    ay = abs(y)
    c = min(ax, ay) / (max(ax, ay) + _ATAN_EPS)
    c2 = c * c
    a = (((_ATAN_P7 * c2 + _ATAN_P5) * c2 + _ATAN_P3) * c2 + _ATAN_P1) * c
    a = 90.0 - a if ay > ax else a
    a = 180.0 - a if x < 0.0 else a
    a = 360.0 - a if y < 0.0 else a
    return a


def extremum26(a, c, cols, plane, v, strict):
    """Whether ``v = a[c]`` is an extremum of its 3x3x3 neighbourhood (26 samples, planes ``plane`` apart).

    A maximum when ``v > 0``, else a minimum. ``strict``: every neighbour must be beaten (SURF, OpenCV's
    ``val0 > N9[...]``); otherwise ties count as extrema (SIFT, OpenCV's ``val >= ...``). The same plane is
    tested first: most samples fail there.
    ``a``: the raveled response planes; ``c``: ``v``'s index in ``a``; ``cols``: a row's stride in ``a``.
    """
    s = 1.0 if v > 0.0 else -1.0
    sv = s * v
    for dl in range(3):
        lo = c + (1 - ((dl + 1) % 3)) * plane  # the centre plane, then the one below, then the one above
        for dy in range(-1, 2):
            for dx in range(-1, 2):
                if dl == 0 and dy == 0 and dx == 0:
                    continue
                n = s * a[lo + dy * cols + dx]
                if n > sv or (strict and n == sv):
                    return False
    return True


def segment(xc, chunk, cols):
    """Columns ``[j0, j1)`` of work item ``xc`` of a row stage: ``chunk`` columns from ``xc * chunk``, cut at
    ``cols`` (see :meth:`objrec.kernels.Target.row_chunk`)."""
    j0 = xc * chunk
    return j0, min(j0 + chunk, cols)


def build(t):
    """The helpers above built for target ``t``, and ``row_segment``; returns a dict by name.

    ``row_segment(y, xc, chunk, oinfo, n_oct, row0, rows, cols)`` places grid row ``y`` of the octaves'
    stacked rows: its octave ``o``, its row ``i`` in the octave, the octave's size and the columns ``[j0, j1)``
    of work item ``xc``, as ``(o, i, n_rows, n_cols, j0, j1)``; ``row0``, ``rows`` and ``cols`` are the
    columns of ``oinfo`` that hold an octave's first grid row and its size. The item has nothing to do when
    ``j0 >= n_cols or i >= n_rows``.
    """
    dev = t.device
    find = dev(find_octave)
    seg = dev(segment)

    def row_segment(y, xc, chunk, oinfo, n_oct, row0, rows, cols):
        o = find(y, oinfo, n_oct, row0)
        n_cols = oinfo[o, cols]
        j0, j1 = seg(xc, chunk, n_cols)
        return o, y - oinfo[o, row0], oinfo[o, rows], n_cols, j0, j1

    return {
        "find_octave": find,
        "fast_atan2": dev(fast_atan2),
        "extremum26": dev(extremum26),
        "segment": seg,
        "row_segment": dev(row_segment),
    }
