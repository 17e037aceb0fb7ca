"""The frame record and the stream record: one frame's data as it passes from stage to stage of the recognizer,
and what one frame leaves for the next.

Stages hold configuration (detectors, the cost model, the database's matchers); everything that belongs to
one frame lives in its :class:`FrameState`, is written by the orchestrator from the stages' results and read by
the next stage, and is gone with the frame. What a frame leaves for later frames of the stream, the frame index
among it, lives in the recognizer's :class:`StreamState`, written by the orchestrator from the stages' results
too and passed to the stages that read it. The state long-lived stages keep between frames (the tracks, the
sweep's place, what the cost model learned) is listed in ``docs/tracking.md`` ("Stateful attributes").
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from objrec.features.extract import FrameImage
from objrec.matching.verdicts import FrameVerdicts
from objrec.modeldb.records import split_key
from objrec.types import Candidate, Detection, Features, LostTrack, Regions, SearchPlan

if TYPE_CHECKING:
    from objrec.realtime.tracker import TrackLike

__all__ = ["FrameState", "StreamState", "HINT_TRIES"]

#: An object whose hints were searched in vain in this many frames in a row is not hinted again until a frame
#: leaves it no hint (:meth:`StreamState.keep_hints`).
HINT_TRIES = 3


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
        (:func:`objrec.realtime.primary.explained`), taken once the tracks are settled for the search.
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

    def moved(self, tracks: Iterable[TrackLike]) -> None:
        """The frame's detections (tracked and final) of ``tracks`` replaced by where those tracks are now (after
        a realignment moved them), each keeping its ``state``."""
        for t in tracks:
            self.tracked = [t.detection(d.state) if d.track_id == t.track_id else d for d in self.tracked]
            self.detections = [t.detection(d.state) if d.track_id == t.track_id else d for d in self.detections]


@dataclass(eq=False)
class StreamState:
    """What the frames of one stream leave for the next ones, owned by the recognizer.

    The recognizer writes it from the stages' results and passes what a stage reads to it. :meth:`forget`
    clears what the frames found in the scene (a new, unrelated sequence of frames follows); the frame index
    and the sweep's last part stay: the cadences counted in frames (every other frame for the tracks under a
    budget, an adapting prefilter's, which learns across such a sequence) and the sweep run on.

    Attributes
    ----------
    index : int
        The frame index: the stream's frames processed before this one, so the number of the frame in progress
        (0 for the first). Every stage that counts frames is given it: the tracking stage's cadences (appearance
        checks, realignment, confirmation, windows, re-acquisition), the frame given to the tracks (odd ones),
        an adapting prefilter's safety search, live frames and refits.
    tile_work : float
        The cost-model size of the sweep's last part (the ``sweep_work`` of the last primary plan that searched
        something; 0 when that plan searched no part of the sweep): the next frame's prefilter runs only where
        its typical time is less than the extraction it could save on such a part
        (:meth:`~objrec.realtime.planner.SearchPlanner.prefilter_pays`).
    hints : list of (str, (x0, y0, x1, y1))
        Record keys and boxes where the last frame's unverified candidates placed their objects: the next frame
        searches them first (:meth:`~objrec.realtime.searches.SecondLooks.hinted`).
    hint_tries : dict of str -> int
        Per object, the frames in a row its hints were searched in vain (:meth:`keep_hints`).
    sought : dict of str -> int
        Per object, the frame its lost track's object was last looked for: re-acquisition tries the least
        recently looked for first and spaces its retries (:func:`~objrec.realtime.reacquire.waiting`).
    """

    index: int = 0
    tile_work: float = 0.0
    hints: list[tuple[str, tuple[int, int, int, int]]] = field(default_factory=list)
    hint_tries: dict[str, int] = field(default_factory=dict)
    sought: dict[str, int] = field(default_factory=dict)

    def forget(self) -> None:
        """Forget what the frames found: hints, their tries, the objects looked for."""
        self.hints, self.hint_tries, self.sought = [], {}, {}

    def keep_hints(self, hints: list[tuple[str, tuple[int, int, int, int]]], shown: Sequence[Detection]) -> None:
        """The ``hints`` this frame leaves (record key and box) kept for the next frame, but those of objects whose
        hints were searched in vain in each of the last :data:`HINT_TRIES` frames (``shown``: the frame's
        detections). A hint's own search leaves a hint when what it finds is not verified; an object whose hints
        keep failing (a wrong place, a view too poor) would otherwise take a search in every frame. It is
        hinted again once a frame leaves it no hint."""
        hinted = {split_key(k)[0] for k, _ in self.hints}
        found = {split_key(d.name)[0] for d in shown}
        still = {split_key(k)[0] for k, _ in hints} - found
        tries = {n: c for n, c in self.hint_tries.items() if n in still}
        for n in hinted & still:
            tries[n] = tries.get(n, 0) + 1
        self.hint_tries = tries
        self.hints = [(k, b) for k, b in hints if tries.get(split_key(k)[0], 0) < HINT_TRIES]
