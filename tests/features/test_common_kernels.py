"""The helpers SURF's and SIFT's kernels share, built on their own for the CPU."""

from __future__ import annotations

import numpy as np

from objrec.features import _common_kernels as common
from objrec.kernels import Target


def test_row_segment_places_stacked_octave_rows():
    """Each grid row of the octaves' stacked rows lands in its octave, at its row there, with the columns of
    its work item cut at the octave's width (and nothing to do past the octave's rows or columns)."""
    t = Target("cpu", parallel=False)
    row_segment = common.build(t)["row_segment"]
    # columns: first grid row, rows, cols (as a kernel module's oinfo names them)
    oinfo = np.array([[0, 5, 12], [5, 3, 6], [8, 2, 3]], np.int32)

    def body(y, xc, oinfo, n_oct, chunk, out):
        o, i, rows, cols, j0, j1 = row_segment(y, xc, chunk, oinfo, n_oct, 0, 1, 2)
        out[y, xc, 0] = o
        out[y, xc, 1] = i
        out[y, xc, 2] = j0
        out[y, xc, 3] = j1
        out[y, xc, 4] = j0 >= cols or i >= rows

    chunk = 5
    out = np.zeros((11, 3, 5), np.int64)
    t.grid2d(body, nargs=4)(11, 3, oinfo, 3, chunk, out)
    for y in range(11):
        o = int(np.searchsorted(oinfo[:, 0], y, side="right") - 1)
        for xc in range(3):
            j0 = xc * chunk
            j1 = min(j0 + chunk, oinfo[o, 2])
            idle = j0 >= oinfo[o, 2] or y - oinfo[o, 0] >= oinfo[o, 1]
            assert out[y, xc].tolist() == [o, y - oinfo[o, 0], j0, j1, idle], (y, xc)
