"""The recognizer's stages built from its settings: the settings checked and resolved against the database (its
detectors, its retrieval indexes, its trained prefilter), and each stage made with what it needs.

:class:`~objrec.recognizer.Recognizer` calls these in its constructor and wires the stages together; each
function builds one stage, or checks one group of settings, and raises ``ValueError`` naming the setting that is
wrong.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from objrec.matching.shortlist import ShortlistMatcher, make_matcher
from objrec.matching.verifier import CandidateVerifier, tilt_limits
from objrec.pose import Camera
from objrec.realtime.planner import SearchPlanner
from objrec.realtime.scheduler import LATE_RESERVE_START, CostModel, FrameScheduler
from objrec.realtime.smoothing import CornerSmoother, SmoothParams

if TYPE_CHECKING:
    from collections.abc import Callable

    from objrec.matching.verify import VerifyParams
    from objrec.modeldb import ModelDB

__all__ = [
    "FIRST_RUN_TEACHES",
    "check_database",
    "check_camera",
    "make_matchers",
    "reads_objects",
    "start_warming",
    "make_planner",
    "make_verifier",
    "make_prefilter",
    "make_scheduler",
    "make_smoother",
    "model_sizes",
]

#: Units whose costs are learned from their first runs (their prior admits the first): a confirmation, a
#: realignment, a re-acquisition, a read of shortlisted objects (from the disk, or once read ahead), and the
#: planning of a sweep's next part.
FIRST_RUN_TEACHES = ("confirm", "realign", "reacquire", "read", "read_ahead", "plan_tile")


def check_database(db: ModelDB, budget_ms: float | None) -> None:
    """ValueError for a budget that is not a positive number (or None), or a database with no object.

    Parameters
    ----------
    db : ModelDB
        The model database.
    budget_ms : float or None
        The frame budget in ms (None: none).
    """
    if budget_ms is not None and not budget_ms > 0:
        raise ValueError(f"budget_ms: expected a positive number or None, got {budget_ms}")
    if len(db) == 0:
        raise ValueError(f"{db.path}: the model database is empty; enroll objects first")


def check_camera(camera: Any) -> Camera | None:
    """``camera`` when it is an :class:`~objrec.pose.Camera` or None; ValueError otherwise."""
    if camera is not None and not isinstance(camera, Camera):
        raise ValueError(f"camera: expected an objrec.pose.Camera or None, got {type(camera).__name__}")
    return camera


def make_matchers(
    db: ModelDB,
    kinds: list[str],
    backend: str,
    retrieval: bool | None,
    exact: bool,
    ratio: float,
    mutual: bool,
) -> dict[str, Any]:
    """A matcher per detector kind of ``kinds`` (:func:`~objrec.matching.shortlist.make_matcher`), its
    descriptors on the GPU for ``backend="gpu"``. ``retrieval`` None is off with ``exact`` matching, else the
    database's size decides. The saved retrieval indexes' codes are checked against their sha256 in a
    low-priority thread while the recognizer runs (a damaged file is raised by the next frame's retrieval).

    Parameters
    ----------
    db : ModelDB
        The model database.
    kinds : list of str
        The detector kinds, the primary first.
    backend : str
        ``"gpu"`` keeps the descriptors on the GPU (CuPy), any other value on the CPU.
    retrieval : bool or None
        Shortlist by retrieval before matching (None: as above).
    exact : bool
        Exact brute-force nearest neighbours for every database size (see
        :class:`~objrec.matching.database.DatabaseMatcher`).
    ratio : float
        Lowe's ratio-test threshold.
    mutual : bool
        Keep only mutual nearest neighbours.
    """
    xp = __import__("cupy") if backend == "gpu" else np
    if retrieval is None and exact:
        retrieval = False
    return {
        k: make_matcher(db, k, retrieval, check_index="background", ratio=ratio, mutual=mutual, xp=xp, exact=exact)
        for k in kinds
    }


def reads_objects(matcher: Any) -> bool:
    """Whether ``matcher`` reads shortlisted objects' rows from the database as frames need them."""
    return isinstance(matcher, ShortlistMatcher) and hasattr(matcher.matcher, "unread")


def start_warming(db: ModelDB, matchers: dict[str, Any], warm: bool | int) -> Any:
    """With ``warm``, when one of the ``matchers`` reads shortlisted objects from the database as frames need them
    (:func:`reads_objects`), the thread reading ``db``'s files into the page cache
    (:meth:`~objrec.modeldb.ModelDB.warm_page_cache`; ``warm`` an int: at most that many bytes, True: as much
    as half of the available memory); None otherwise."""
    if isinstance(warm, bool) or warm is None:
        limit = None
    elif isinstance(warm, int) and warm > 0:
        limit = int(warm)
    else:
        raise ValueError(f"warm_cache: expected True, False or a positive number of bytes, got {warm!r}")
    if warm and any(reads_objects(m) for m in matchers.values()):
        return db.warm_page_cache(limit)
    return None


def make_planner(
    db: ModelDB,
    kind: str,
    matcher: Any,
    budget_ms: float | None,
    max_regions: int,
    scene_max_features: int | None,
    sample_step: int | None,
    sweep: bool,
) -> SearchPlanner:
    """The search planner of the primary detector ``kind`` (whose matcher is ``matcher``): under a budget its
    features capped at the detector's ``max_features`` (else ``scene_max_features``), the retrieval's voters
    those of a shortlisting matcher, SURF's sampling step as given (other detectors have one).

    Parameters
    ----------
    db : ModelDB
        The model database (its detectors' settings).
    kind : str
        The primary detector kind.
    matcher : matcher
        The primary kind's matcher.
    budget_ms : float or None
        The frame budget in ms (None: none, no feature cap).
    max_regions : int
        At most this many prefilter regions are searched.
    scene_max_features : int or None
        The feature cap when the detector's settings give none.
    sample_step : int or None
        SURF's sampling step (None: chosen per frame).
    sweep : bool
        Under a budget, search the frame in tiles over several frames.
    """
    cap = db.detectors[kind].get("max_features") or scene_max_features
    voters = matcher.queries if isinstance(matcher, ShortlistMatcher) else 0
    return SearchPlanner(
        kind,
        max_regions,
        cap if budget_ms is not None else None,
        retrieval_voters=voters,
        sample_step=sample_step if kind == "surf" else 1,
        sweep=sweep,
    )


def make_verifier(db: ModelDB, verify: VerifyParams | None) -> CandidateVerifier:
    """The candidates' verifier: ``verify``'s parameters, the objects' aspect limits (their views), their
    thumbnails for the appearance check, and those enrolled as solid verified without a plane.

    Parameters
    ----------
    db : ModelDB
        The model database.
    verify : VerifyParams or None
        Verification settings (None: the defaults).
    """
    names = db.records
    shapes, view_tables = db.columns("shape", "view_table")
    solid = [n for n, shape in zip(names, shapes, strict=True) if shape == "solid"]
    return CandidateVerifier(verify, tilt_limits(names, view_tables), db.thumbnail, solid)


def make_prefilter(db: ModelDB, prefilter: Any, adapt: bool, adapt_params: Any) -> tuple[Any, str, Any]:
    """The prefilter stage (:func:`~objrec.prefilter.resolve.resolve_prefilter`: ``"auto"``, one given, or None),
    its status, and with ``adapt`` the adapting prefilter, which is then the stage too (else None).

    Parameters
    ----------
    db : ModelDB
        The model database (its stored prefilter).
    prefilter : object
        ``"auto"``, a prefilter, or None.
    adapt : bool
        Adapt the prefilter to the scene.
    adapt_params : AdaptParams or None
        The adaptation's settings (None: the defaults).
    """
    from objrec.prefilter.resolve import resolve_prefilter  # scikit-learn only when a stored one is loaded

    stage, status = resolve_prefilter(db, prefilter)
    if not adapt:
        return stage, status, None
    from objrec.prefilter.online import adaptive_prefilter

    stage, status = adaptive_prefilter(db, stage, status, adapt_params)
    return stage, status, stage


def make_scheduler(budget_ms: float | None, clock: Any) -> FrameScheduler:
    """The frame scheduler of ``budget_ms`` on ``clock``: the units of :data:`FIRST_RUN_TEACHES` admitted until
    their first runs teach their costs, 2 ms kept for the frame's end, the late reserve from
    :data:`~objrec.realtime.scheduler.LATE_RESERVE_START`."""
    cost = CostModel(prior_ms=dict.fromkeys(FIRST_RUN_TEACHES, 0.0))
    return FrameScheduler(budget_ms, cost, clock, safety_ms=2.0, late_start=LATE_RESERVE_START)


def make_smoother(smooth: Any, track: bool, model_size: Callable[[str], tuple[int, int]]) -> CornerSmoother | None:
    """The corner smoother ``smooth`` asks for (True: :class:`SmoothParams`'s defaults; False: none), or None
    without tracking; ValueError when ``smooth`` is neither a bool nor a :class:`SmoothParams`.

    Parameters
    ----------
    smooth : bool or SmoothParams
        The corner smoothing asked for.
    track : bool
        Tracking is on (the smoother follows tracks).
    model_size : callable
        An object's name to its model image's (width, height).
    """
    if not isinstance(smooth, bool | SmoothParams):
        raise ValueError(f"smooth: expected a bool or SmoothParams, got {smooth!r}")
    params = SmoothParams() if smooth is True else smooth or None
    return CornerSmoother(params, model_size=model_size) if params and track else None


def model_sizes(db: ModelDB) -> Callable[[str], tuple[int, int]]:
    """A function from an object's name to the (width, height) of its model image in ``db``."""

    def size(name: str) -> tuple[int, int]:
        info = db.info(name)
        return info.width, info.height

    return size
