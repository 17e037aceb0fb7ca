"""The verification unit: one candidate in, a detection or a rejection with its reason out.

Every path of the frame pipeline (tracked objects, the prefilter's regions, escalation, guided matching)
verifies through :class:`CandidateVerifier`; :meth:`CandidateVerifier.run` offers each candidate to the
frame's scheduler as a unit, so no verification runs outside the budget. Verification judges matches it is
given and never matches features itself (guided matching is a stage of its own,
:mod:`objrec.matching.second_chance`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterable
from typing import Any

import numpy as np

from objrec.matching.solid import SolidParams, SolidVerified, verify_solid
from objrec.matching.verdicts import FrameVerdicts
from objrec.matching.verify import VerifyParams, edge_agreement, verify_homography
from objrec.modeldb.views import covered_tilt
from objrec.types import Candidate, Detection, Failure, Rejection, SkipRecord, UnitScheduler

__all__ = ["CandidateVerifier", "aspect_limits", "tilt_limits"]


def aspect_limits(objects: Iterable[Any]) -> dict[str, float]:
    """Object name to the tilt its synthesised views cover (:func:`objrec.modeldb.views.covered_tilt`), for the
    objects enrolled with views: the limit of their aspect-ratio change and of their foreshortening
    (:meth:`CandidateVerifier.params_for`); objects without views keep the verifier's own limits."""
    objects = list(objects)
    return tilt_limits([o.name for o in objects], [getattr(o, "view_table", None) for o in objects])


def tilt_limits(names: list[str], view_tables: list[Any]) -> dict[str, float]:
    """:func:`aspect_limits` of objects given as their ``names`` and ``view_tables`` (None or empty: no views)."""
    return {n: covered_tilt(t) for n, t in zip(names, view_tables, strict=True) if t}


class CandidateVerifier:
    """Geometric verification of candidates (:func:`~objrec.matching.verify.verify_homography`).

    Parameters
    ----------
    params : VerifyParams, optional
    aspect_limits : dict of str -> float, optional
        Per object name, the tilt its synthesised views cover (:func:`objrec.modeldb.views.covered_tilt`): objects
        enrolled with views are meant to be found at tilts beyond the default limits, so it bounds their
        aspect-ratio change and their foreshortening instead (:meth:`params_for`), and their detections are
        refined by guided matching (:class:`~objrec.matching.second_chance.GuidedStage`).
    thumbnails : callable, optional
        Object name to its gray thumbnail (:meth:`objrec.modeldb.ModelDB.thumbnail`), for the appearance check
        (:func:`~objrec.matching.verify.edge_agreement`) of candidates verified with their frame; without it
        only the geometry is checked.
    solid : collection of str, optional
        Names of the objects enrolled as ``shape="solid"`` (objects with depth). Such a candidate is verified
        without a plane (:func:`~objrec.matching.solid.verify_solid`: keypoint frames that agree with their
        neighbours' and epipolar geometry, no appearance check), and its detection has no homography but the
        outline of its inliers. When one homography explains its support (a flat view, such as one face seen
        alone) or the test without a plane fails, it is verified as a flat object too, and a detection that
        passes that way keeps its homography.
    solid_params : SolidParams, optional
    """

    def __init__(
        self,
        params: VerifyParams | None = None,
        aspect_limits: dict[str, float] | None = None,
        thumbnails: Callable[[str], np.ndarray] | None = None,
        solid: Iterable[str] = (),
        solid_params: SolidParams | None = None,
    ) -> None:
        self.params = params or VerifyParams()
        self.aspect_limits = dict(aspect_limits or {})
        self.thumbnails = thumbnails
        self.solid = frozenset(solid)
        self.solid_params = solid_params or SolidParams()

    def params_for(self, candidate: Candidate) -> VerifyParams:
        """The verification parameters of the candidate's object: ``params``, with the limits of an object
        whose views cover a tilt ``T`` (``aspect_limits``) widened to what that tilt allows.

        A planar object at tilt ``T`` changes its aspect ratio by up to ``T``. Its opposite sides differ in
        length by the ratio of their depths (for sides parallel to the horizon, exactly: with
        ``H = K [r1 r2 t]`` the third coordinate of ``H x`` is the depth of model point ``x``), and the depth
        of a point of the plane is ``d · t(x) · cos α(x)``, where ``t(x)`` is the local tilt there, ``d`` the
        plane's distance and ``α(x)`` the ray's angle off the optical axis: so the far side is at most about
        ``T`` times shorter than the near one when no part of the object is seen at a tilt beyond ``T``.
        Hence ``max_aspect_change = T`` and ``max_perspective = 1 - 1/T``; a limit below the verifier's own
        never tightens it.
        """
        limit = self.aspect_limits.get(candidate.name)
        if limit is None:
            return self.params
        aspect = max(self.params.max_aspect_change, float(limit))
        perspective = max(self.params.max_perspective, 1.0 - 1.0 / max(float(limit), 1.0))
        if aspect == self.params.max_aspect_change and perspective == self.params.max_perspective:
            return self.params
        return dataclasses.replace(self.params, max_aspect_change=aspect, max_perspective=perspective)

    def verify(
        self, candidate: Candidate, frame_shape: tuple[int, int], verdicts: FrameVerdicts | None = None
    ) -> Detection | Rejection:
        """The candidate's detection, or its rejection with the reason code.

        With ``verdicts`` holding the frame (``gray``) and ``thumbnails`` given, a geometrically sound view
        must also pass the appearance check, away from the objects already found in front of it.

        Parameters
        ----------
        candidate : Candidate
            The candidate's matches and its object's model size.
        frame_shape : tuple of int
            The frame's (rows, cols).
        verdicts : FrameVerdicts, optional
            The frame's verdicts so far (its image and the objects found).
        """
        if candidate.name not in self.solid:
            return self.verify_flat(candidate, frame_shape, verdicts)
        c = candidate
        v = verify_solid(
            c.model_xy, c.scene_xy, c.model_size, frame_shape, self.solid_params, c.model_frames, c.scene_frames
        )
        # A flat view, or no consistency without a plane: a homography decides.
        if isinstance(v, Failure) or v.mode == "planar":
            flat = self.verify_flat(c, frame_shape, verdicts)
            if isinstance(flat, Detection):
                return flat
            if not isinstance(v, Failure):
                return self._solid_detection(c, v)
            return Rejection(c.name, v.reason, len(c), f"without a plane: {v.detail}; as flat: {flat.reason}")
        return self._solid_detection(c, v)

    @staticmethod
    def _solid_detection(c: Candidate, v: SolidVerified) -> Detection:
        """The detection of a candidate verified without a plane: its inliers' outline, the box around it."""
        x0, y0, x1, y1 = (float(b) for b in v.box)
        box = np.array([[x0, y0], [x1, y0], [x1, y1], [x0, y1]], np.float64)
        inlier_xy = np.asarray(c.scene_xy, np.float64)[v.inliers]
        return Detection(c.name, v.score, v.n_inliers, None, box, outline=v.outline, inlier_xy=inlier_xy)

    def verify_flat(
        self, candidate: Candidate, frame_shape: tuple[int, int], verdicts: FrameVerdicts | None = None
    ) -> Detection | Rejection:
        """Homography verification and the appearance check (see :meth:`verify`), for every object: what guided
        matching (matches sought around a homography) is verified with. ``candidate``, ``frame_shape`` and
        ``verdicts`` as in :meth:`verify`."""
        w, h = candidate.model_size
        p = self.params_for(candidate)
        v = verify_homography(candidate.model_xy, candidate.scene_xy, w, h, frame_shape, p)
        if isinstance(v, Failure):
            return Rejection(candidate.name, v.reason, len(candidate), v.detail)
        frame = verdicts.gray if verdicts is not None else None
        if (
            p.min_edge_agreement is not None
            and self.thumbnails is not None
            and verdicts is not None
            and frame is not None
        ):
            hidden = verdicts.in_front_of(candidate.name)
            share, n = edge_agreement(frame, self.thumbnails(candidate.name), v.homography, (w, h), hidden)
            if share < p.min_edge_agreement:  # NaN (too little in view to judge) passes
                detail = f"{share:.0%} of {n} strong model edges confirmed < {p.min_edge_agreement:.0%}"
                return Rejection(candidate.name, "appearance", len(candidate), detail)
        d = v.to_detection(candidate.name)
        return dataclasses.replace(d, inlier_xy=np.asarray(candidate.scene_xy, np.float64)[v.inliers])

    def appearance(
        self, gray: np.ndarray, name: str, H: np.ndarray, model_size: tuple[int, int], hidden: list
    ) -> float:
        """The appearance check of ``name`` seen through ``H`` in ``gray``: the share of its strong model edges
        the frame confirms (:func:`~objrec.matching.verify.edge_agreement`), away from the ``hidden`` outlines;
        NaN when too little is in view or there are no thumbnails. ``model_size``: the model image's (width,
        height)."""
        if self.thumbnails is None:
            return float("nan")
        return edge_agreement(gray, self.thumbnails(name), H, model_size, hidden)[0]

    def too_few(self, candidate: Candidate) -> Rejection | None:
        """The rejection of a candidate with fewer matches than any verification needs (the homography's
        minimum, which an object with depth falls back on too), None otherwise. Such a candidate is rejected
        at once, while one that is verified takes a homography search and the appearance check, several
        hundred times as long: timed together, the two would teach the cost model a line through neither."""
        least = max(4, self.params_for(candidate).min_matches)
        n = len(candidate)
        return None if n >= least else Rejection(candidate.name, "too_few_matches", n, f"{n} matches < {least}")

    def run(
        self, candidates: list[Candidate], verdicts: FrameVerdicts, sched: UnitScheduler, first_mandatory: bool
    ) -> None:
        """Verify ``candidates`` in order, each as a scheduler unit; objects already found are passed over.

        The first candidate is mandatory when ``first_mandatory`` (the frame's best candidate); the others
        run only while the scheduler ``sched`` predicts they fit. Each verdict goes to ``verdicts``, the
        frame's.
        """
        for j, c in enumerate(candidates):
            if c.name in verdicts.found:
                continue
            short = self.too_few(c)
            if short is not None:  # rejected without work: no unit, so the cost model learns real verifications
                verdicts.add(c, short)
                continue
            v = sched.run(
                "verify",
                self.verify,
                c,
                verdicts.shape,
                verdicts,
                size=len(c),
                mandatory=first_mandatory and j == 0,
                subject=c.name,
                timing="verification",
            )
            if isinstance(v, SkipRecord):  # not verified for lack of time: where it lies may be looked at again
                verdicts.left_out(c)
                continue
            verdicts.add(c, v)
            if verdicts.found.get(c.name) is v and c.name in self.aspect_limits:
                verdicts.queue_refine(c)
