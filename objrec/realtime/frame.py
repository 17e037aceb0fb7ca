"""The frame record: one frame's data as it passes from stage to stage of the recognizer.

Stages hold configuration (detectors, the cost model, the database's matchers); everything that belongs to
one frame lives here, is written by the orchestrator from the stages' results and read by the next stage, and
is gone with the frame.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from objrec.features.extract import FrameImage
from objrec.matching.verdicts import FrameVerdicts
from objrec.types import Candidate, Detection, Features, LostTrack, Regions, SearchPlan

__all__ = ["FrameState"]


@dataclass(eq=False)
class FrameState:
    """One frame on its way through the pipeline.

    Attributes
    ----------
    frame : ndarray
        The frame as handed over (gray or BGR uint8), for the prefilter.
    image : FrameImage
        Its gray image, for the feature stage (uploaded to the device once when a GPU detector reads it).
    budget_ms : float or None
        This frame's budget.
    sample_step : {None, 1, 2}
        SURF's sampling step fixed for this frame (None: the planner chooses).
    verdicts : FrameVerdicts
        What verification decided so far.
    proposals : Regions or None
        The prefilter's regions (None without a prefilter).
    plan : SearchPlan or None
        The primary search's plan.
    features : dict of str -> Features
        The primary search's features, per detector kind.
    candidates : list of Candidate
        The primary features' candidates, in the order they are verified.
    mandatory_ms : float or None
        Time from hand-over to the end of the mandatory units (None when nothing was searched): what the
        degrade controller learns the frame's load from.
    tracked : list of Detection
        The objects the tracking stage followed into this frame (``state="tracked"``).
    detections : list of Detection
        The frame's detections: the tracked ones and the detector's, met with the tracks.
    lost : list of LostTrack
        The tracks that ended in this frame.
    explained : tuple of (list, list)
        The tracked outlines the search leaves out and the parts of them others may cover
        (``objrec.recognizer.explained``), taken once the tracks are settled for the search.
    upkeep_ms : float
        Time the tracks' optional upkeep before the search took in this frame (re-acquisitions of lost tracks,
        realignments of new ones): the search yields to it when its least part no longer fits after it.
    t_frame : float or None
        The frame's time on the footage's timeline, in ms (None: its hand-over time on the recognizer's
        clock): what corner smoothing measures its time steps by.
    """

    frame: np.ndarray
    image: FrameImage
    budget_ms: float | None = None
    sample_step: int | None = None
    verdicts: FrameVerdicts = field(init=False)
    proposals: Regions | None = None
    plan: SearchPlan | None = None
    features: dict[str, Features] = field(default_factory=dict)
    candidates: list[Candidate] = field(default_factory=list)
    mandatory_ms: float | None = None
    tracked: list[Detection] = field(default_factory=list)
    detections: list[Detection] = field(default_factory=list)
    lost: list[LostTrack] = field(default_factory=list)
    explained: tuple[list[np.ndarray], list[np.ndarray]] = field(default_factory=lambda: ([], []))
    upkeep_ms: float = 0.0
    t_frame: float | None = None

    def __post_init__(self) -> None:
        self.verdicts = FrameVerdicts(self.shape, self.image.host)

    @property
    def shape(self) -> tuple[int, int]:
        """The frame's (rows, cols)."""
        h, w = self.image.host.shape[:2]
        return int(h), int(w)
