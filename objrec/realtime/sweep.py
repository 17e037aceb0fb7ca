"""The sweep: under a budget too tight for the whole frame, the search for new objects covers it over frames.

Each frame searches one part of the sweep as a plan of its own, in turn: tiles of a grid over the frame at
full detail (the grid chosen as a round of tiles starts, the coarsest whose tiles fit), and after every
:data:`TILES_PER_COARSE` of them the coarse pass, the whole frame at :data:`COARSE_SWEEP_SCALE`, when it fits.
A tile at full detail finds an object that lies whole in it, and most objects of which half or more lie in it,
small ones included; an object much larger than a tile is found by the coarse pass, which sees it whole. At
half resolution the coarse pass loses the small objects, and at the fine sampling step it costs more than a
tile (at the coarse step about as much as one): taking turns with every tile, it would halve the pace at which
the tiles reach a new small object, for the few objects the tiles cannot find.

A tile that fits a frame's time left only below the sweep's least resolution (the frame's tracks took much of
it) is searched in two pieces instead, each at full detail in a part of its own (:func:`tile_piece`): at a low
resolution a tile loses most of the small objects, which a piece at full detail finds, for about the same time.

The sweep keeps its place from frame to frame; the :class:`~objrec.realtime.planner.SearchPlanner` asks it
for each frame's part and prices the part with its cost model (``planner.costs``: ``fitting_scale``, ``fits``).
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING, Any

import numpy as np

from objrec.boxes import clip_boxes, union_area
from objrec.types import Regions, SearchPlan, SkipRecord

if TYPE_CHECKING:  # the planner builds on the sweep: it imports this module, not the reverse
    from objrec.realtime.planner import SearchPlanner
    from objrec.realtime.scheduler import FrameScheduler

__all__ = [
    "Sweep",
    "sweep_tiles",
    "largest_tile",
    "whole_or_boxes",
    "SWEEP_GRIDS",
    "SWEEP_OVERLAP",
    "TILES_PER_COARSE",
    "COARSE_SWEEP_SCALE",
    "COARSE_SUBJECT",
]

#: The sweep's grids (columns, rows), coarsest first.
SWEEP_GRIDS = ((2, 1), (2, 2), (3, 2), (3, 3), (4, 3))
#: Tiles of the sweep overlap by this share of the frame's width (columns) and height (rows).
SWEEP_OVERLAP = 0.15
#: The coarse pass comes after every this many tiles of the sweep (see the module's description).
TILES_PER_COARSE = 3
#: The resolution of the sweep's coarse pass over the whole frame.
COARSE_SWEEP_SCALE = 0.5
#: The subject of the coarse pass's record (a tile's names the tile and its grid).
COARSE_SUBJECT = "whole frame"
#: A piece of a tile is recorded as the tile's subject and ``", piece K of 2"``.
PIECE_SUBJECT = "piece"


@functools.lru_cache(maxsize=64)
def sweep_tiles(w: int, h: int, cols: int, rows: int) -> tuple[tuple[int, int, int, int], ...]:
    """The tiles of a ``cols`` x ``rows`` grid over a ``w`` x ``h`` frame, each grown by half the overlap per
    side (clipped), in reading order. A stream's frames keep their size, so each grid is made once."""
    ox, oy = SWEEP_OVERLAP * w / 2, SWEEP_OVERLAP * h / 2
    out = []
    for r in range(rows):
        for c in range(cols):
            x0, x1 = w * c / cols - ox, w * (c + 1) / cols + ox
            y0, y1 = h * r / rows - oy, h * (r + 1) / rows + oy
            out.append((max(0, int(x0)), max(0, int(y0)), min(w, int(np.ceil(x1))), min(h, int(np.ceil(y1)))))
    return tuple(out)


@functools.lru_cache(maxsize=64)
def largest_tile(w: int, h: int, cols: int, rows: int) -> int:
    """The pixels of the largest tile of :func:`sweep_tiles`."""
    return max((t[2] - t[0]) * (t[3] - t[1]) for t in sweep_tiles(w, h, cols, rows))


def _in_tile(
    windows: Regions, proposals: Regions, tile: tuple[int, int, int, int], shape: tuple[int, int]
) -> tuple[Regions, float]:
    """What the sweep searches in ``tile``: the ``windows`` and the ``proposals`` clipped to the tile (the whole
    tile when both are none), and the pixels they cover."""
    keep, clipped = clip_boxes(proposals.boxes, tile)
    part = windows.concat(Regions(clipped, proposals.scores[keep]))
    if not len(part):  # nothing proposed in the tile: the sweep searches all of it
        part = Regions.from_boxes([tile])
    return part, union_area(part, shape)


def whole_or_boxes(boxes: Regions, shape: tuple[int, int], fraction: float) -> tuple[Regions | None, float]:
    """``boxes`` and the pixels they cover, or None (the whole frame) and its pixels where they cover more than
    ``fraction`` of it or nothing: a pass over most of a frame costs as much as one over all of it.

    Parameters
    ----------
    boxes : Regions
        The boxes to search.
    shape : tuple of int
        The frame's (rows, cols).
    fraction : float
        The share of the frame above which the whole frame is searched.
    """
    h, w = shape
    pixels = union_area(boxes, shape) if len(boxes) else 0.0
    if not len(boxes) or pixels > fraction * h * w:
        return None, float(h * w)
    return boxes, float(pixels)


def tile_piece(tile: tuple[int, int, int, int], k: int, w: int, h: int) -> tuple[int, int, int, int]:
    """Piece ``k`` (0 or 1) of ``tile`` cut in two across its longer side, the pieces overlapping by half the
    tiles' overlap along that side (of a frame ``w`` x ``h``)."""
    x0, y0, x1, y1 = tile
    if x1 - x0 >= y1 - y0:
        half = (x1 - x0 + SWEEP_OVERLAP * w / 2) / 2
        return (x0, y0, int(np.ceil(x0 + half)), y1) if k == 0 else (int(x1 - half), y0, x1, y1)
    half = (y1 - y0 + SWEEP_OVERLAP * h / 2) / 2
    return (x0, y0, x1, int(np.ceil(y0 + half))) if k == 0 else (x0, int(y1 - half), x1, y1)


def _crop_of(part: Regions, tile: tuple[int, int, int, int]) -> tuple[int, int, int, int] | None:
    """``tile`` when all of ``part`` lies inside it: the tile is then searched as a crop of its own (its
    neighbours overlap it, so it needs no margin); None when a window reaches outside it."""
    b = part.boxes
    inside = bool((b[:, 0] >= tile[0]).all() and (b[:, 1] >= tile[1]).all())
    inside = inside and bool((b[:, 2] <= tile[2]).all() and (b[:, 3] <= tile[3]).all())
    return tile if inside else None


class Sweep:
    """Where the sweep stands: the round's grid, its next tile, whether the coarse pass is due.

    Parameters
    ----------
    min_scale : float
        A round's grid is the coarsest whose largest tile fits at this resolution or better.
    """

    def __init__(self, min_scale: float) -> None:
        self.min_scale = min_scale
        self.tile_index = 0  # the round's next tile
        self.grid: tuple[int, int] | None = None  # the grid of the round under way
        self.coarse_due = False  # the coarse pass comes next (after every TILES_PER_COARSE tiles)
        self.tiles_since_coarse = 0  # tiles searched since the last coarse pass
        self.step = 1  # the sampling step of the last part planned
        self.piece = 0  # 1: the first piece of the round's next tile was searched, the second is next
        # The last tile's contents: (boxes, n_windows, region, shape) and (part, pixels). A plan asks for one tile
        # at each sampling step it tries, and what lies in the tile does not depend on the step.
        self._last_part: tuple[tuple[Any, ...], tuple[Regions, float]] | None = None

    def tile(
        self,
        planner: SearchPlanner,
        boxes: Regions,
        n_windows: int,
        shape: tuple[int, int],
        sched: FrameScheduler,
        cap: int | None,
        step: int,
        level_scale: float,
        piece: bool = False,
    ) -> tuple[Regions, float, float, str, tuple[int, int, int, int] | None]:
        """The windows (the first ``n_windows`` of ``boxes``) plus this frame's tile (or a piece of it:
        :meth:`_region`), the rest of ``boxes`` clipped to it: the regions, their pixels, the resolution that
        fits (at most ``level_scale``), the record's subject and the crop. ``piece`` asks for the tile's first
        piece, for a tile that fits only below :attr:`min_scale`. The grid is chosen when a round starts;
        within a round the tiles come in turn, so that it covers the frame whatever the time left does
        meanwhile. Tiles overlap by :data:`SWEEP_OVERLAP` of the frame, so an object of that size lies whole
        in one.

        Parameters
        ----------
        planner : SearchPlanner
            The planner, whose plan costs size the tile.
        boxes : Regions
            The frame's windows, then its proposals.
        n_windows : int
            How many of ``boxes`` are tracking windows.
        shape : tuple of int
            The frame's (rows, cols).
        sched : FrameScheduler
            The frame's scheduler (its cost model and the time left).
        cap : int or None
            The plan's feature cap (None: uncapped).
        step : int
            SURF's sampling step.
        level_scale : float
            The degrade level's resolution, the most the tile is searched at.
        piece : bool
            Search the tile's first piece rather than the whole tile.
        """
        h, w = shape
        windows = Regions(boxes.boxes[:n_windows], boxes.scores[:n_windows])
        new_round = self.grid is None or self.tile_index % (self.grid[0] * self.grid[1]) == 0
        if new_round and not self.piece:  # (a tile's second piece belongs to the round under way)
            win_px = union_area(windows, (h, w))
            for cols, rows in SWEEP_GRIDS:
                fit = planner.costs.fitting_scale(sched, cap, largest_tile(w, h, cols, rows) + win_px, step)
                if min(level_scale, fit) >= self.min_scale:
                    break
            self.grid, self.tile_index = (cols, rows), 0
        assert self.grid is not None  # set above, or by the round whose tile's second piece comes next
        cols, rows = self.grid
        region, subject = self._region(sweep_tiles(w, h, cols, rows)[self.tile_index % (cols * rows)], piece, w, h)
        part, pixels = self._part_in(boxes, n_windows, windows, region, (h, w))
        scale = min(level_scale, planner.costs.fitting_scale(sched, cap, pixels, step))
        return part, pixels, scale, subject, _crop_of(part, region)

    def _part_in(
        self,
        boxes: Regions,
        n_windows: int,
        windows: Regions,
        region: tuple[int, int, int, int],
        shape: tuple[int, int],
    ) -> tuple[Regions, float]:
        """:func:`_in_tile` of the windows (the first ``n_windows`` of ``boxes``) and the proposals (the rest) in
        ``region``, kept for the next call with the same ``boxes`` object and arguments."""
        key = (n_windows, region, shape)
        last = self._last_part
        if last is not None and last[0][0] is boxes and last[0][1:] == key:
            return last[1]
        proposed = Regions(boxes.boxes[n_windows:], boxes.scores[n_windows:])
        out = _in_tile(windows, proposed, region, shape)
        self._last_part = ((boxes, *key), out)
        return out

    def _region(
        self, tile: tuple[int, int, int, int], piece: bool, w: int, h: int
    ) -> tuple[tuple[int, int, int, int], str]:
        """What of ``tile`` to search and its record's subject: its second piece when the first was searched
        (:func:`tile_piece`), its first piece when ``piece`` is asked, else the whole tile."""
        assert self.grid is not None  # a tile (or its piece) is asked for only once a round has its grid
        cols, rows = self.grid
        name = f"tile {tile} of {cols}x{rows}"
        k = 1 if self.piece else 0 if piece else None
        if k is None:
            return tile, name
        return tile_piece(tile, k, w, h), f"{name}, {PIECE_SUBJECT} {k + 1} of 2"

    def coarse_step(
        self, planner: SearchPlanner, sched: FrameScheduler, cap: int | None, pixels: float, steps: list[int]
    ) -> int | None:
        """The finest of ``steps`` at which the coarse pass over ``pixels`` is predicted to fit the time left with
        the mandatory units after it, when the coarse pass is due; None otherwise.

        Parameters
        ----------
        planner : SearchPlanner
            The planner, whose plan costs size the pass.
        sched : FrameScheduler
            The frame's scheduler.
        cap : int or None
            The plan's feature cap (None: uncapped).
        pixels : float
            The full-resolution pixels of the pass's regions.
        steps : list of int
            The sampling steps to try, finest first.
        """
        if not self.coarse_due:
            return None
        for step in steps:
            if planner.costs.fits(sched, cap, pixels, COARSE_SWEEP_SCALE, step):
                return step
        return None

    def next_plan(
        self,
        planner: SearchPlanner,
        shape: tuple[int, int],
        rest: Regions,
        sched: FrameScheduler,
        cap: int | None,
        step: int,
        reserve: float,
    ) -> SearchPlan | None:
        """The sweep's next part over ``rest`` (the search's regions less the tracked objects) as a plan of its own
        at ``step``, for the time a frame has left once its search is done, less ``reserve`` (its verification
        is optional, as every verification after the frame's first): the coarse pass when due and it fits, else
        the next tile at the largest resolution that fits. None when that fits at none, or no round is under
        way.

        Parameters
        ----------
        planner : SearchPlanner
            The planner, whose plan costs size the part.
        shape : tuple of int
            The frame's (rows, cols).
        rest : Regions
            The search's regions less the tracked objects.
        sched : FrameScheduler
            The frame's scheduler (the time left).
        cap : int or None
            The plan's feature cap (None: uncapped).
        step : int
            SURF's sampling step.
        reserve : float
            Time in ms kept for the units after this part.
        """
        if self.grid is None or not planner.costs.fits(sched, cap, 0.0, 1.0, step, verify=False, reserve=reserve):
            return None  # (the time needed grows with the pixels: without time for none, no part fits)
        h, w = shape
        if self.coarse_due:
            regions, pixels = whole_or_boxes(rest, shape, planner.whole_frame_fraction)
            s = COARSE_SWEEP_SCALE
            if planner.costs.fits(sched, cap, pixels, s, step, verify=False, reserve=reserve):
                record = SkipRecord("region", "sweep", f"{COARSE_SUBJECT} at {s:g}")
                return SearchPlan(regions, s, cap, int(pixels), step, (record,))
        cols, rows = self.grid
        tile = sweep_tiles(w, h, cols, rows)[self.tile_index % (cols * rows)]

        def part_of(piece: bool) -> tuple[Regions, float, float, str, tuple[int, int, int, int] | None]:
            region, subject = self._region(tile, piece, w, h)
            part, pixels = _in_tile(Regions.empty(), rest, region, (h, w))
            scale = planner.costs.fitting_scale(sched, cap, pixels, step, verify=False, reserve=reserve)
            return part, pixels, scale, subject, _crop_of(part, region)

        part, pixels, scale, subject, crop = part_of(False)
        if scale < self.min_scale and not self.piece:  # a piece at full detail, where that fits (see tile_piece)
            first = part_of(True)
            if first[2] >= self.min_scale:
                part, pixels, scale, subject, crop = first
        if not planner.costs.fits(sched, cap, pixels, scale, step, verify=False, reserve=reserve):
            return None
        skipped = (SkipRecord("region", "sweep", subject),)
        return SearchPlan(part, scale, cap, int(pixels), step, skipped, crop)

    def advance(self, plan: SearchPlan) -> None:
        """The sweep moves on once a plan that searched part of it was carried out: after a tile the next tile,
        or the coarse pass once :data:`TILES_PER_COARSE` tiles were searched since the last; after the coarse
        pass the next tile."""
        for r in plan.skipped:
            if r.unit == "region" and r.reason == "sweep":
                coarse = r.subject.startswith(COARSE_SUBJECT)
                if r.subject.endswith(f"{PIECE_SUBJECT} 1 of 2"):  # the tile's second piece comes next
                    self.piece = 1
                    return
                self.piece = 0
                self.tile_index += 0 if coarse else 1
                self.tiles_since_coarse = 0 if coarse else self.tiles_since_coarse + 1
                self.coarse_due = self.tiles_since_coarse >= TILES_PER_COARSE
                return
