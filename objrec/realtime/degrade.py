"""Degrade levels: how much of the mandatory search a frame may do when the machine is loaded.

A feedback controller on the mandatory part's share of the budget (frame start to the end of matching;
optional work only fills slack, so it says nothing about the load) moves one level up after a frame whose
share exceeded ``high``, and one level down after ``calm`` frames in a row under ``low``: when another
process takes the cores, mandatory work shrinks instead of every frame being late. ``high`` leaves the
first verification and the scheduler's reserve their time; ``low`` sits close under it, since the search
planner already sizes each frame's extraction to the time left and the levels only answer for the tail.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

__all__ = ["DegradeLevel", "DEGRADE_LEVELS", "SCALE_LEVELS", "DegradeController", "fit_scale"]


@dataclass(frozen=True)
class DegradeLevel:
    """What the mandatory search may do at one level.

    Attributes
    ----------
    regions : int
        Prefilter regions searched (tracking windows come on top).
    feature_share : float
        Fraction of the scene feature cap that is described.
    scale : float
        Resolution scale of the extraction.
    """

    regions: int
    feature_share: float
    scale: float


#: Lightest first. Above level 0 SURF also samples frames at its coarse step (see ``SearchPlanner``).
DEGRADE_LEVELS = (
    DegradeLevel(8, 1.0, 1.0),
    DegradeLevel(4, 0.6, 1.0),
    DegradeLevel(2, 0.4, 1.0),
    DegradeLevel(1, 0.3, 1.0),
    DegradeLevel(1, 0.15, 0.75),
)
#: Resolution scales the budget may push mandatory extraction down to (cost ~ pixels). A few fixed
#: levels, so per-size buffers and tables are reused from frame to frame; below 0.75 SURF loses the
#: smaller objects of a 640x480 frame.
SCALE_LEVELS = (1.0, 0.75)


class DegradeController:
    """Moves the degrade level from the mandatory part's share of the budget (see the module docstring).

    Parameters
    ----------
    budget_ms : float or None
        Without a budget the level stays 0.
    levels : sequence of DegradeLevel
        Lightest first.
    high, low : float
        Shares of the budget above which the level goes up at once, and below which it may go down.
    calm : int
        Frames in a row under ``low`` before one level down.
    """

    def __init__(
        self,
        budget_ms: float | None,
        levels: Sequence[DegradeLevel] = DEGRADE_LEVELS,
        high: float = 0.85,
        low: float = 0.75,
        calm: int = 5,
    ) -> None:
        if not 0.0 < low < high:
            raise ValueError(f"low, high: expected 0 < low < high, got {low}, {high}")
        self.budget_ms = budget_ms
        self.levels = tuple(levels)
        self.high, self.low, self.calm = high, low, calm
        self.level = 0
        self._calm = 0

    @property
    def current(self) -> DegradeLevel:
        return self.levels[self.level]

    def observe(self, mandatory_ms: float) -> None:
        """Take one frame's mandatory time into account."""
        if self.budget_ms is None:
            self.level = 0
            return
        use = mandatory_ms / self.budget_ms
        if use > self.high:
            self.level = min(self.level + 1, len(self.levels) - 1)
            self._calm = 0
        elif use < self.low and self.level > 0:
            self._calm += 1
            if self._calm >= self.calm:
                self.level -= 1
                self._calm = 0
        else:
            self._calm = 0

    def reset(self) -> None:
        self.level, self._calm = 0, 0


def fit_scale(cost_at: Callable[[float], float], share_ms: float, scales: Sequence[float] = SCALE_LEVELS) -> float:
    """The largest of ``scales`` at which the predicted cost ``cost_at`` (ms at a scale) fits ``share_ms``; the smallest
    when none fits. Work predicted to cost nothing keeps full resolution, even when the frame is late."""
    for s in scales:
        cost = cost_at(s)
        if cost <= 0.0 or cost <= share_ms:
            return float(s)
    return float(scales[-1])
