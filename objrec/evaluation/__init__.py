"""Robustness evaluation: ``objrec eval KIND:PATH`` on standard datasets and synthetic corruption sweeps.

Three kinds of evaluation:

- feature level (``oxford``, ``hpatches``): for every detector and image pair ``1 -> N``, repeatability and
  matching score (Mikolajczyk et al. 2005: overlap error < 0.4 at a 30 px normalised radius, one-to-one),
  mean matching accuracy at 1..10 px (mutual nearest neighbours, HPatches/D2-Net style), homography accuracy
  (``cv2.findHomography`` RANSAC 3 px on ratio-test matches at 0.8, mean corner error within 1/3/5 px), and
  detection time per image;
- recognition (``coil``, ``objects``, ``synthetic``): precision, recall and corner error of detected objects per
  distortion type and level, with latency percentiles. ``coil``: view 0 of each object enrolled, every view
  (0 included, as a control) composited into an embedded background; level = view-angle difference.
  ``synthetic:PATH`` (a folder of object images, or ``synthetic:demo`` for :func:`objrec.data.sample_objects`):
  sweeps built on :func:`objrec.scenes.compose_scene` with exact ground truth (see
  :data:`objrec.evaluation._help.SWEEPS`), plus object-free negative scenes;
- annotated pairs (``pairs``, :mod:`objrec.evaluation.kinds.pairs`): image A of each pair enrolled, recognised
  in image B, the median error of the annotated points under the found homography, pairs solved within 5 px
  per set.
- catalogue (``catalogue``): reference images (plus ``--distractors``) enrolled, real labelled photos
  recognised one by one: found, top-1, wrong detections, latency and stage times
  (:mod:`objrec.evaluation.kinds.catalogue`).

Each kind is a plug-in, ``objrec/evaluation/kinds/<kind>.py``, registered in
:data:`objrec.evaluation.kinds.KINDS`: it builds the tasks of a run, runs one task, summarises the records into
its report section and renders that section. Dataset loaders are in :mod:`objrec.datasets`; the find_obj-style
anchor is :class:`objrec.evaluation.baseline.FindObjBaseline`.

Work is split into tasks, each a pure function of a JSON spec with a stable id
(:mod:`objrec.evaluation.config`); they run in this process or on Dask (``--workers N`` local cluster,
``--scheduler ADDRESS``), and every finished task is a line of ``records.jsonl``, so an interrupted run resumes
where it stopped.

References
----------
The feature protocol's papers (Mikolajczyk et al., IJCV 2005; Balntas et al., HPatches, CVPR 2017) are
cited in :mod:`objrec.metrics`.

report.json schema
------------------
Files in ``--out DIR``: ``report.json``, ``report.md``, ``report.html``, ``plots/*.png``, ``records.jsonl``.

report.json (``schema`` = "objrec-eval/1"; ``null`` marks an undefined number: no detections for a precision,
a failed homography for a corner error)::

    schema, objrec_version
    dataset      {kind, path}
    config       every option of the run (detectors, budget_ms, max_features, sweeps, ...)
    detectors    {name: {available: bool, note: str}}   (unavailable ones are listed, not run)
    features     null, or (oxford/hpatches):
      summary    {detector: {n_pairs, n_features_mean, repeatability, matching_score, mma: [MMA@1..10],
                  homography_accuracy: {"1","3","5": fraction of pairs}, corner_error_median,
                  detect_ms: {p50, p90, max}, detect_within_budget (with --budget-ms)}}   means over pairs
      by_kind    {kind: {detector: same as summary}}   kind: viewpoint, zoom+rotation, blur, ...
      sequences  {seq: {kind, detectors: {detector: {index: [2..6], repeatability: [...], matching_score,
                  mma3, corner_error, n_features: [[n1, nN], ...]}}}}
      pairs      [{detector, seq, kind, index, pair, n_features: [n1, nN], repeatability, matching_score,
                  n_correspondences, n_correct_matches, n_visible: [n1, n2], mma: [10], n_mutual_matches,
                  homography: {n_ratio_matches, n_inliers, corner_error, correct: {"1","3","5": bool}},
                  time_ms: {detect_1, detect_N}}]
    recognition  null, or (coil/objects/synthetic):
      summary    {detector: STATS}
      groups     [{distortion, level, detector, **STATS}]   in sweep order
      scenes     [{detector, scene, distortion, level, n_truth, tp, fp, fn, latency_ms}]
      STATS =    {n_scenes, n_objects, tp, fp, fn, precision, recall, corner_error_mean, corner_error_median,
                  latency_ms: {p50, p90, p99, max}, deadline_met_fraction (with --budget-ms)}
    pairs        null, or (pairs):
      solved_px  5
      summary    {detector: {set: {n_pairs, found, solved, solved_fraction, error_median, latency_ms: {p50, max}}}}
      pairs      [{detector, set, pair, found, solved, error, n_points, inliers, score, visible_fraction,
                  rejections: [{reason, matches, detail}], latency_ms, timings_ms}]
    catalogue    null, or (catalogue):
      summary    {recognizer: CSTATS}
      groups     [{group, detector, **CSTATS}]   group: the camera (SMVS) or the query folder
      queries    [{detector, query, truth, found, top1, wrong, latency_ms, deadline_met, detections}]
      CSTATS =   {n_queries, n_labelled, found, top1, found_fraction, top1_fraction, wrong, queries_with_wrong,
                  latency_ms: {p50, p90, p99, max}, stage_ms_mean: {stage: ms}, deadline_misses and
                  deadline_met_fraction (with --budget-ms)}
    video        null, or (video):
      found_px, misplaced_px, precision_thresholds, success_thresholds
      summary    {recognizer: {all: POOLED, by_challenge: {challenge: POOLED}}}
      clips      [{detector, clip, challenge, frames, scored, found, found_fraction, p_at_5, p_at_15,
                  error_median, error_p90, raw_error_median, raw_error_p90, misplaced, lost, longest_lost,
                  found_again: [scored frames until found after each unscored stretch], late, processed,
                  latency_ms: {p50, p99}, precision, raw_precision, success, errors: [e_AL per scored frame]}]
      POOLED =   {clips, scored, found_fraction, p_at_5, p_at_15, error_median, misplaced, lost, late,
                  processed, precision, raw_precision, success, thresholds}
    run          {mode, workers, tasks, ran, resumed, dropped_lines, wall_s, total_s, finished}
    environment  {python, platform, cpu_count, opencv, numpy, opencv_threads}
    notes        [str]   (unavailable detectors, missing matplotlib, parallel timings)
    plots        [relative PNG paths]

records.jsonl: one JSON object per finished task: {id, type ("pair" | "scene" | "annotated_pair"), detector,
label, meta, result, elapsed_s}; ``result`` is a ``features.pairs`` row (features), {n_truth, tp, fp, fn,
detections: [{name, score, inliers, corner_error, correct}], corner_errors, visible_fraction, latency_ms,
deadline_met, timings_ms} (recognition; for the ``outside`` sweep ``corner_error`` is the mean error of the
model's grid points inside the frame) or a ``pairs.pairs`` row without detector, set and pair (pairs). The id
is ``<detector>/<label>#<hash of the task spec>``.
"""

from __future__ import annotations

from objrec._lazy import lazy_attributes

# Imported on first use: the command line registers ``eval`` from the ``cli`` submodule without loading
# SciPy, OpenCV and the detectors.
_LAZY = {
    "SCHEMA": "objrec.evaluation.report",
    "build_report": "objrec.evaluation.report",
    "numbers_only": "objrec.evaluation.report",
    "write_reports": "objrec.evaluation.report",
    "RecordStore": "objrec.evaluation.runner",
    "build_tasks": "objrec.evaluation.runner",
    "execute": "objrec.evaluation.runner",
    "run_evaluation": "objrec.evaluation.runner",
    "run_task": "objrec.evaluation.runner",
    "SWEEPS": "objrec.evaluation._help",
    "EvalConfig": "objrec.evaluation.config",
    "task_id": "objrec.evaluation.config",
    "FindObjBaseline": "objrec.evaluation.baseline",
    "KINDS": "objrec.evaluation.kinds",
}

__all__ = [
    "SCHEMA",
    "KINDS",
    "FindObjBaseline",
    "SWEEPS",
    "EvalConfig",
    "RecordStore",
    "build_tasks",
    "build_report",
    "execute",
    "numbers_only",
    "run_evaluation",
    "run_task",
    "task_id",
    "write_reports",
]


__getattr__, __dir__ = lazy_attributes(globals(), _LAZY)
