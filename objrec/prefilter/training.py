"""Training a prefilter for a model database, and choosing its region threshold.

:func:`fit_to_database` composes the database's objects into backgrounds
(:func:`objrec.prefilter.scenes.generate_scenes`), learns the colour/texture back-projection tables on
half of the scenes (:func:`learn_appearance`), computes the cell features of every scene
(:func:`scene_features`), fits :class:`~objrec.prefilter.estimator.RegionPrefilter` with whole scenes
held out, and on those held-out scenes chooses the threshold whose *regions* keep ``target_recall`` of the
object area (:func:`calibrate_region_threshold`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from objrec.boxes import regions_to_mask
from objrec.prefilter.features import (
    N_COLOR_CODES,
    N_TEXTURE_CODES,
    FeatureParams,
    appearance_luts,
    cell_features,
    cell_grid,
    pixel_maps,
)
from objrec.prefilter.fitting import calibration_split
from objrec.prefilter.regions import cells_to_regions
from objrec.prefilter.scenes import SceneSet, default_backgrounds, generate_scenes, load_backgrounds

if TYPE_CHECKING:  # the estimator's ``train`` is built on this module: it imports this one, not the reverse
    from objrec.prefilter.estimator import RegionPrefilter

__all__ = [
    "fit_to_database",
    "learn_appearance",
    "scene_features",
    "SceneCells",
    "scene_region_masks",
    "calibrate_region_threshold",
    "region_report",
]


def learn_appearance(
    scenes: SceneSet, which: Sequence[int], params: FeatureParams | None = None, prior: float = 1e-3
) -> tuple[np.ndarray, np.ndarray]:
    """Colour and texture back-projection tables from object vs background pixels of ``scenes[which]``.

    A pixel counts as object where the scene's coverage mask is at least 0.5.
    ``scenes``: the generated scenes; ``which``: the scenes used; ``params``: the features' settings (default:
    :class:`~objrec.prefilter.features.FeatureParams`'s); ``prior``: as for
    :func:`~objrec.prefilter.features.appearance_luts`.
    """
    hc_o = np.zeros(N_COLOR_CODES)
    hc_b = np.zeros(N_COLOR_CODES)
    ht_o = np.zeros(N_TEXTURE_CODES)
    ht_b = np.zeros(N_TEXTURE_CODES)
    for i in which:
        _, cc, tc = pixel_maps(scenes.images[i], params=params)
        obj = scenes.masks[i] >= 0.5
        hc_o += np.bincount(cc[obj], minlength=N_COLOR_CODES)
        hc_b += np.bincount(cc[~obj], minlength=N_COLOR_CODES)
        ht_o += np.bincount(tc[obj], minlength=N_TEXTURE_CODES)
        ht_b += np.bincount(tc[~obj], minlength=N_TEXTURE_CODES)
    return appearance_luts(hc_o, hc_b, ht_o, ht_b, prior)


def scene_features(
    scenes: SceneSet, cell_size: int, color_lut: np.ndarray, texture_lut: np.ndarray, params: FeatureParams | None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Stacked cell features, object fraction per cell and scene index per cell, scene after scene.
    ``scenes``: the generated scenes; ``cell_size``: a cell's side in working pixels; ``color_lut``, ``texture_lut``:
    the appearance tables; ``params``: the features' settings."""
    xs, fr, gr = [], [], []
    for i, img in enumerate(scenes.images):
        X, _ = cell_features(img, cell_size, color_lut, texture_lut, params)
        xs.append(X)
        fr.append(scenes.fractions[i])
        gr.append(np.full(len(X), i, np.int64))
    return np.concatenate(xs), np.concatenate(fr), np.concatenate(gr)


@dataclass(frozen=True)
class SceneCells:
    """Generated scenes with their cell features: what the region threshold is calibrated and reported on.

    Attributes
    ----------
    scenes : SceneSet
    X : (n_cells, n_features) array
        Cell features of every scene, scene after scene (:func:`scene_features`).
    groups : (n_cells,) int64
        The scene index of every cell.
    frame_size : (int, int)
        The frames' (width, height): box margins are scaled from it to the working resolution.
    """

    scenes: SceneSet
    X: np.ndarray
    groups: np.ndarray
    frame_size: tuple[int, int]


def scene_region_masks(
    pf: RegionPrefilter, cells: SceneCells, which: Sequence[int], threshold: float, scores: dict | None = None
) -> list:
    """Boolean working-resolution masks of the regions ``pf`` proposes on scenes ``which`` at ``threshold``;
    ``scores`` (scene -> cell scores, filled here) spares a search over thresholds scoring cells again."""
    scenes, X, groups, frame_size = cells.scenes, cells.X, cells.groups, cells.frame_size
    scores = {} if scores is None else scores
    out = []
    for sidx in which:
        wh, ww = scenes.images[sidx].shape[:2]
        grid = cell_grid(wh, ww, pf.cell_size)
        if sidx not in scores:
            scores[sidx] = pf.cell_scores(X[groups == sidx]).reshape(grid.shape)
        margin = int(round(pf.margin * ww / frame_size[0]))
        regions = cells_to_regions(scores[sidx], grid, (wh, ww), threshold, int(pf.dilate), float(pf.min_fill), margin)
        out.append(regions_to_mask(regions, (wh, ww)))
    return out


def _region_recall(masks: list[np.ndarray], scenes: SceneSet, which: Sequence[int]) -> float:
    """Share of the object coverage of scenes ``which`` inside their region masks."""
    total = sum(float(scenes.masks[i].sum()) for i in which)
    kept = sum(float((m * scenes.masks[i]).sum()) for m, i in zip(masks, which, strict=True))
    return kept / max(total, 1e-12)


def calibrate_region_threshold(pf: RegionPrefilter, cells: SceneCells, which: Iterable[int]) -> float:
    """Largest threshold whose regions keep ``pf.target_recall`` of the object area on scenes ``which``.

    Thresholds are chosen where they matter, after dilation and grouping into boxes: a missed cell
    inside an object is covered by its group's box, so a threshold chosen on cells alone would keep
    more than needed. The candidates are 0 and the distinct positive cell scores of those scenes; the
    search is a bisection, as the kept area only shrinks when the threshold grows.
    ``pf``: the fitted prefilter; ``cells``: the generated scenes with their cell features (:class:`SceneCells`).

    Returns
    -------
    float
        ``pf.stage_thresholds_[-1]`` when none of the scenes holds an object.
    """
    scenes = cells.scenes
    which = [int(i) for i in which if scenes.n_objects[int(i)] > 0]
    if not which:
        return float(pf.stage_thresholds_[-1])
    cand = np.unique(pf.cell_scores(cells.X[np.isin(cells.groups, which)]))
    cand = np.concatenate([[0.0], cand[cand > 0]])

    scored: dict = {}

    def recall(t: float) -> float:
        return _region_recall(scene_region_masks(pf, cells, which, t, scored), scenes, which)

    lo, hi = 0, len(cand) - 1  # threshold 0 keeps every cell that reached the last stage
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if recall(float(cand[mid])) >= pf.target_recall:
            lo = mid
        else:
            hi = mid - 1
    return float(cand[lo])


def region_report(pf: RegionPrefilter, cells: SceneCells, which: Iterable[int]) -> dict[str, Any]:
    """Object area kept and empty-scene area rejected by ``pf``'s regions at ``pf.threshold_`` on ``which``.
    ``cells``: the generated scenes with their cell features (:class:`SceneCells`)."""
    scenes = cells.scenes
    which = [int(i) for i in which]
    masks = scene_region_masks(pf, cells, which, pf.threshold_)
    with_obj = [(m, i) for m, i in zip(masks, which, strict=True) if scenes.n_objects[i] > 0]
    empty = [m for m, i in zip(masks, which, strict=True) if scenes.n_objects[i] == 0]
    return {
        "calibration_scenes": len(which),
        "calibration_region_area_recall": (
            _region_recall([m for m, _ in with_obj], scenes, [i for _, i in with_obj]) if with_obj else None
        ),
        "calibration_empty_area_rejected": float(np.mean([1 - m.mean() for m in empty])) if empty else None,
        "threshold": pf.threshold_,
    }


def _progress_bar(enabled: bool) -> Callable[[Iterable[Any]], Iterable[Any]] | None:
    if not enabled:
        return None
    from tqdm import tqdm

    def bar(it: Iterable[Any]) -> Iterable[Any]:
        return tqdm(it, desc="composing scenes", unit="scene")

    return bar


def fit_to_database(
    pf: RegionPrefilter,
    db: Any,
    backgrounds: Any = None,
    n_scenes: int = 400,
    frame_size: tuple[int, int] = (640, 480),
    seed: int | None = 0,
    progress: bool = False,
    video_step: int = 10,
) -> RegionPrefilter:
    """Fit a prefilter on scenes generated from a database's enrolled objects and ``backgrounds``.

    Parameters
    ----------
    pf : RegionPrefilter
        The estimator to fit, in place, with its parameters.
    db : ModelDB
        Its objects' images are composited into the backgrounds (:func:`objrec.scenes.compose_scene`).
    backgrounds : sequence of arrays or paths (images, folders, videos), optional
        Default: :func:`objrec.prefilter.scenes.default_backgrounds` (embedded, no files).
    n_scenes : int
        Scenes to generate; the even-numbered half also estimate the appearance tables, so the trees
        see their effect on scenes they were not estimated from, as on a new background.
    frame_size : (w, h)
    seed : int or None
        Seed of the scene generator (the trees use ``pf.random_state``).
    progress : bool
        Show a tqdm progress bar.
    video_step : int
        Every ``video_step``-th frame of a background video is used.

    Returns
    -------
    RegionPrefilter
        ``pf``, fitted, with ``database_id_``, ``object_names_`` and a ``training_report_``; with
        ``threshold="auto"`` its ``threshold_`` is the one :func:`calibrate_region_threshold` chose.
    """
    pf.validate_params()
    if not isinstance(n_scenes, (int, np.integer)) or n_scenes < 4:
        raise ValueError(f"n_scenes: expected an integer >= 4, got {n_scenes!r}")
    names = list(db.records)  # every view of every object
    if not names:
        raise ValueError(f"{db.path}: the database has no enrolled objects; enroll some before training")
    objects = {n: db.image(n) for n in names}
    bgs = default_backgrounds() if backgrounds is None else load_backgrounds(backgrounds, video_step)
    scenes = generate_scenes(
        objects, bgs, n_scenes, pf.work_size, pf.cell_size, frame_size, seed=seed, progress=_progress_bar(progress)
    )
    fp = FeatureParams()
    cl, tl = learn_appearance(scenes, range(0, n_scenes, 2), fp)
    X, frac, groups = scene_features(scenes, pf.cell_size, cl, tl, fp)
    y = (frac >= pf.label_overlap).astype(np.int64)
    _, cal = calibration_split(len(X), pf.calibration_fraction, groups, pf.random_state)
    pf.fit(X, y, groups=groups, recall_weight=frac, calibration=cal, color_lut=cl, texture_lut=tl, feature_params=fp)
    cal_scenes = np.unique(groups[cal])
    cells = SceneCells(scenes, X, groups, frame_size)
    threshold = calibrate_region_threshold(pf, cells, cal_scenes) if pf.threshold == "auto" else pf.threshold_
    pf.set_fitted(
        pf.cascade_,
        threshold,
        pf.n_features_in_,
        pf.color_lut_,
        pf.texture_lut_,
        pf.feature_params_,
        pf.estimators_,
        database_id=str(db.database_id),
        object_names=names,
        training_report=pf.training_report_,
    )
    pf.training_report_.update(region_report(pf, cells, cal_scenes))
    pf.training_report_.update(
        {"n_scenes": int(n_scenes), "n_backgrounds": len(bgs), "frame_size": list(frame_size), "seed": seed}
    )
    return pf
