"""Evaluation tasks: plain JSON specs, a stable id for each, and :func:`run_task` (spec → record).

A task is a pure function of its spec (paths, homographies, seeds, parameters), so it can run in this process
or on any Dask worker that sees the same files, and a rerun can skip every task whose id already has a record.
The id is ``<detector>/<label>#<hash>``, the hash being a digest of the canonical JSON of the spec: changing a
parameter (``--max-features``, ``--budget-ms``, a sweep level) gives new ids, so stale records are never reused.
"""

from __future__ import annotations

import hashlib
import json
import re
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from objrec.datasets import DatasetError
from objrec.evaluation._help import SWEEPS

__all__ = [
    "EvalConfig",
    "SWEEPS",
    "task_id",
    "run_task",
    "build_tasks",
    "FEATURE_KINDS",
    "RECOGNITION_KINDS",
]

FEATURE_KINDS = ("oxford", "hpatches")
RECOGNITION_KINDS = ("coil", "objects", "synthetic")
PAIR_KINDS = ("pairs",)
CATALOGUE_KINDS = ("catalogue",)
KINDS = FEATURE_KINDS + RECOGNITION_KINDS + PAIR_KINDS + CATALOGUE_KINDS

FRAME_SIZE = (640, 480)
BASE_AREA_FRACTION = 0.15


@dataclass
class EvalConfig:
    """Everything ``objrec eval`` was asked to do (stored in ``report.json`` under ``config``)."""

    kind: str
    path: str
    out: str
    detectors: list[str] | None = None
    budget_ms: float | None = None
    workers: int | None = None
    scheduler: str | None = None
    sequences: list[str] | None = None
    pairs: list[int] | None = None
    max_features: int = 0
    surf_reference: str | None = None
    objects: list[int] | None = None
    coil_scale: float = 2.0
    sweeps: list[str] | None = None
    repeats: int = 2
    seed: int = 0
    corner_tolerance: float = 10.0
    ratio: float = 0.8
    ransac_px: float = 3.0
    views: str | None = None
    progress: bool = True
    plots: bool = True
    distractors: list[str] | None = None
    query_side: int = 640
    without_query_objects: bool = False
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        d = dict(self.__dict__)
        d.pop("notes", None)
        return d


def _canonical(obj: Any) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), allow_nan=False)


def task_id(spec: dict[str, Any]) -> str:
    """``<detector>/<label>#<12 hex digits of sha1(canonical spec)>``."""
    body = {k: v for k, v in spec.items() if k != "id"}
    digest = hashlib.sha1(_canonical(body).encode()).hexdigest()[:12]
    return f"{spec['detector']}/{spec['label']}#{digest}"


def _finish(spec: dict[str, Any]) -> dict[str, Any]:
    spec["id"] = task_id(spec)
    return spec


def run_task(spec: dict[str, Any]) -> dict[str, Any]:
    """Run one task and return its record ``{"id", "type", "detector", "label", "meta", "result", "elapsed_s"}``.

    Pure: the same spec gives the same ``result`` (timings aside) in any process.
    """
    t0 = time.perf_counter()
    if spec["type"] == "pair":
        from objrec.evaluation.feature_eval import evaluate_pair

        result = evaluate_pair(spec)
    elif spec["type"] == "scene":
        from objrec.evaluation.recognition import evaluate_scene

        result = evaluate_scene(spec)
    elif spec["type"] == "annotated_pair":
        from objrec.evaluation.pairs import evaluate_annotated_pair

        result = evaluate_annotated_pair(spec)
    elif spec["type"] == "catalogue":
        from objrec.evaluation.catalogue import evaluate_query

        result = evaluate_query(spec)
    else:
        raise ValueError(f"task {spec.get('id')}: unknown task type {spec['type']!r}")
    return {
        "id": spec["id"],
        "type": spec["type"],
        "detector": spec["detector"],
        "label": spec["label"],
        "meta": spec["meta"],
        "result": result,
        "elapsed_s": round(time.perf_counter() - t0, 4),
    }


# --- building task lists ---------------------------------------------------------------------------------
def _read_all(paths: list[Path]) -> dict[str, tuple[int, int]]:
    """Read every image once (errors name the file): ``{path: (width, height)}``."""
    from objrec.datasets._common import load_image

    sizes = {}
    for p in dict.fromkeys(paths):
        img = load_image(Path(p))
        sizes[str(p)] = (int(img.shape[1]), int(img.shape[0]))
    return sizes


def _seed(*parts: Any) -> int:
    return zlib.crc32("/".join(map(str, parts)).encode()) & 0x7FFFFFFF


def default_reference_dir(pairs: list[Any]) -> Path:
    """``<dataset root>/../reference/opencv_surf`` for Oxford pairs at ``<root>/<seq>/imgN``."""
    root = Path(pairs[0].img1_path).resolve().parent.parent
    return root.parent / "reference" / "opencv_surf"


def _feature_tasks(cfg: EvalConfig, detectors: list[str], status: dict[str, dict[str, Any]]) -> list[dict]:
    from objrec.datasets import load_hpatches, load_oxford_affine
    from objrec.evaluation.detectors import reference_path

    if cfg.kind == "oxford":
        pairs = load_oxford_affine(cfg.path, cfg.sequences)
    else:
        pairs = load_hpatches(cfg.path, cfg.sequences)
    if cfg.pairs:
        bad = sorted(set(cfg.pairs) - {p.index for p in pairs})
        if bad:
            raise ValueError(f"--pairs: no pair 1->{bad[0]} in {cfg.path} (have 2..{max(p.index for p in pairs)})")
        pairs = [p for p in pairs if p.index in set(cfg.pairs)]
    if not pairs:
        raise DatasetError(f"{cfg.path}: no image pairs selected")
    _read_all([p.img1_path for p in pairs] + [p.imgN_path for p in pairs])
    ref_dir = None
    if "opencv-surf-ref" in detectors:
        if cfg.kind != "oxford":
            status["opencv-surf-ref"] = {"available": False, "note": "reference files exist for the Oxford set only"}
        else:
            ref_dir = Path(cfg.surf_reference) if cfg.surf_reference else default_reference_dir(pairs)
            if not ref_dir.is_dir():
                raise DatasetError(f"{ref_dir}: OpenCV SURF reference folder not found (give --surf-reference DIR)")
            for p in pairs:
                for img in (p.img1_path, p.imgN_path):
                    rp = reference_path(ref_dir, img)
                    if not rp.is_file():
                        raise DatasetError(f"{rp}: OpenCV SURF reference file not found")
            status["opencv-surf-ref"]["note"] = f"precomputed, read from {ref_dir}"
    tasks = []
    for det in detectors:
        if not status[det]["available"]:
            continue
        for p in pairs:
            spec = {
                "type": "pair",
                "detector": det,
                "label": p.name,
                "img1": str(Path(p.img1_path).resolve()),
                "imgN": str(Path(p.imgN_path).resolve()),
                "H": p.H.tolist(),
                "max_features": int(cfg.max_features),
                "ratio": float(cfg.ratio),
                "ransac_px": float(cfg.ransac_px),
                "meta": {"dataset": p.dataset, "seq": p.seq, "kind": p.kind, "index": int(p.index)},
            }
            if det == "opencv-surf-ref":
                spec["reference_dir"] = str(ref_dir.resolve())
            tasks.append(_finish(spec))
    return tasks


_NAME_OK = re.compile(r"[^A-Za-z0-9_.\-]")


def _object_name(stem: str) -> str:
    name = _NAME_OK.sub("_", stem).lstrip("_.-") or "object"
    return name[:100]


def _synthetic_objects(path: str) -> list[tuple[str, str]]:
    if path == "demo":
        from objrec.data import sample_objects

        return [(n, f"demo:{n}") for n in sample_objects()]
    from objrec.datasets import IMAGE_EXTENSIONS

    root = Path(path)
    if not root.is_dir():
        raise DatasetError(f"{root}: object image folder not found (or use synthetic:demo)")
    files = sorted(p for p in root.iterdir() if p.is_file() and p.suffix.lower() in IMAGE_EXTENSIONS)
    if not files:
        raise DatasetError(f"{root}: no object images ({', '.join(IMAGE_EXTENSIONS)}) found")
    out, seen = [], set()
    for f in files:
        name = _object_name(f.stem)
        while name in seen:
            name += "_"
        seen.add(name)
        out.append((name, str(f.resolve())))
    return out


def _place(
    size: tuple[int, int],
    rng: np.random.Generator,
    scale: float = 1.0,
    rotation: float = 0.0,
    tilt: tuple[float, float] = (0.0, 0.0),
    absolute: bool = False,
) -> list[list[float]]:
    """Model->frame homography near the frame centre; ``scale`` is relative to the base size (the object
    covering :data:`BASE_AREA_FRACTION` of the frame) unless ``absolute``."""
    from objrec.scenes import place_homography

    w, h = size
    fw, fh = FRAME_SIZE
    s0 = 1.0 if absolute else np.sqrt(BASE_AREA_FRACTION * fw * fh / (w * h))
    cx = fw / 2 + rng.uniform(-0.08, 0.08) * fw
    cy = fh / 2 + rng.uniform(-0.08, 0.08) * fh
    return place_homography((w, h), (cx, cy), s0 * scale, rotation, tilt).tolist()


# Sweep -> (key of the scene's ``distortion`` dict, type of its value) for the photometric sweeps.
_DISTORTION_PARAMS: dict[str, tuple[str, type]] = {
    "blur": ("blur_sigma", float),
    "motion_blur": ("motion_blur", int),
    "illumination": ("gain", float),
    "gamma": ("gamma", float),
    "noise": ("noise_sigma", float),
    "jpeg": ("jpeg_quality", int),
}


def _sweep_scene(sweep: str, level: float, size: tuple[int, int], rng: np.random.Generator) -> dict[str, Any]:
    """Placement and distortion of one object for one sweep level."""
    geo: dict[str, Any] = {}
    dist: dict[str, Any] = {}
    occ = 0.0
    if sweep in ("rotation", "scale"):
        geo[sweep] = float(level)
    elif sweep == "viewpoint":
        sign = rng.choice([-1.0, 1.0])
        geo["tilt"] = (float(sign * level), 0.0)
    elif sweep == "occlusion":
        occ = float(level)
    elif sweep == "outside":
        from objrec.scenes import place_partly_outside

        H = place_partly_outside(size, FRAME_SIZE, float(level), rng)
        return {"H": H.tolist(), "distortion": dist, "occlusion": occ}
    elif sweep in _DISTORTION_PARAMS:
        key, cast = _DISTORTION_PARAMS[sweep]
        dist[key] = cast(level)
    return {"H": _place(size, rng, **geo), "distortion": dist, "occlusion": occ}


# A recognition scene: (label, scene spec, meta, match rule); the scene builders below return
# (objects, scenes) or scenes.
_Scene = tuple[str, dict[str, Any], dict[str, Any], str]
# The objects of a recognition run: (name, image source) pairs.
_Objects = list[tuple[str, str]]


def _coil_scenes(cfg: EvalConfig) -> tuple[_Objects, list[_Scene]]:
    """The objects (the 0-degree view of each, by absolute path) and scenes of a COIL run: each view
    composed into a background, match rule ``"centre"``."""
    from objrec.datasets import load_coil
    from objrec.datasets.coil import angle_difference

    views = load_coil(cfg.path, cfg.objects)
    refs = {v.object_id: v for v in views if v.angle == 0}
    missing = sorted({v.object_id for v in views} - set(refs))
    if missing:
        raise DatasetError(f"{Path(cfg.path) / f'obj{missing[0]}__0.png'}: reference view (0 degrees) not found")
    sizes = _read_all([v.path for v in views])
    objects = [(refs[k].name, str(Path(refs[k].path).resolve())) for k in sorted(refs)]
    scenes: list[_Scene] = []
    for v in views:
        rng = np.random.default_rng(_seed(cfg.seed, "coil", v.object_id, v.angle))
        size = sizes[str(v.path)]
        H = _place(size, rng, scale=cfg.coil_scale, absolute=True)
        diff = angle_difference(v.angle, 0)
        diff = int(diff) if float(diff).is_integer() else diff
        scene = {
            "mode": "compose",
            "background_seed": int(rng.integers(0, 8)),
            "rng_seed": _seed(cfg.seed, "coil-scene", v.object_id, v.angle),
            "frame_size": list(FRAME_SIZE),
            "place": [{"name": v.name, "source": str(Path(v.path).resolve()), "H": H}],
        }
        meta = {"distortion": "view_angle", "level": diff, "object": v.name, "angle": v.angle}
        scenes.append((f"{v.name}@{v.angle}", scene, meta, "centre"))
    return objects, scenes


def _objects_file_scenes(cfg: EvalConfig) -> tuple[_Objects, list[_Scene]]:
    """The objects (by absolute path) and scenes of an objects+scenes JSON set: each scene image with its
    ground truth, meta from its tags, match rule ``"corners"``."""
    from objrec.datasets import load_objects_dataset

    ds = load_objects_dataset(cfg.path)
    sizes = _read_all(list(ds.objects.values()) + [s.image_path for s in ds.scenes])
    objects = [(n, str(Path(p).resolve())) for n, p in ds.objects.items()]
    scenes: list[_Scene] = []
    for s in ds.scenes:
        scene = {
            "mode": "file",
            "image": str(Path(s.image_path).resolve()),
            "truth": [
                {"name": o.name, "H": o.homography.tolist(), "size": list(sizes[str(ds.objects[o.name])])}
                for o in s.objects
            ],
        }
        tags = s.tags or {}
        meta = {
            "distortion": str(tags.get("distortion", "all")),
            "level": tags.get("level", 0),
            "image": Path(s.image_path).name,
        }
        scenes.append((f"scene{s.index:05d}", scene, meta, "corners"))
    return objects, scenes


def _sweep_scenes(cfg: EvalConfig, objects: _Objects, sizes: dict[str, tuple[int, int]]) -> list[_Scene]:
    """One scene per sweep, level, repeat and object of a synthetic run.

    Parameters
    ----------
    cfg : EvalConfig
        The run configuration (``kind == "synthetic"``); ``sweeps`` and ``repeats`` are checked here.
    objects : _Objects
        The objects to place.
    sizes : dict
        Object name -> image size (width, height).

    Returns
    -------
    list of _Scene
        In the order sweep, level, repeat, object; match rule ``"corners"`` (``"visible"`` for ``outside``).
    """
    sweeps = cfg.sweeps or list(SWEEPS)
    for sw in sweeps:
        if sw not in SWEEPS:
            raise ValueError(f"--sweeps: unknown sweep {sw!r} (choose from {', '.join(SWEEPS)})")
    if cfg.repeats < 1:
        raise ValueError(f"--repeats: expected a positive integer, got {cfg.repeats}")
    scenes: list[_Scene] = []
    for sw in sweeps:
        for level in SWEEPS[sw]:
            for r in range(cfg.repeats):
                for name, src in objects:
                    rng = np.random.default_rng(_seed(cfg.seed, sw, level, r, name))
                    g = _sweep_scene(sw, level, sizes[name], rng)
                    scene = {
                        "mode": "compose",
                        "background_seed": int(rng.integers(0, 8)),
                        "rng_seed": _seed(cfg.seed, "scene", sw, level, r, name),
                        "frame_size": list(FRAME_SIZE),
                        "place": [{"name": name, "source": src, "H": g["H"]}],
                        "occlusion": g["occlusion"],
                        "distortion": g["distortion"],
                    }
                    meta = {"distortion": sw, "level": level, "object": name, "repeat": r}
                    match = "visible" if sw == "outside" else "corners"
                    scenes.append((f"{sw}={level:g}/{name}/r{r}", scene, meta, match))
    return scenes


def _negative_scenes(cfg: EvalConfig) -> list[_Scene]:
    """The ``2 * cfg.repeats`` background-only scenes of a synthetic run (meta distortion ``"negative"``)."""
    scenes: list[_Scene] = []
    for r in range(2 * cfg.repeats):
        scene = {
            "mode": "compose",
            "background_seed": r % 8,
            "rng_seed": _seed(cfg.seed, "negative", r),
            "frame_size": list(FRAME_SIZE),
            "place": [],
        }
        scenes.append((f"negative/r{r}", scene, {"distortion": "negative", "level": 0, "repeat": r}, "corners"))
    return scenes


def _synthetic_scenes(cfg: EvalConfig) -> tuple[_Objects, list[_Scene]]:
    """The objects of a synthetic run (for ``synthetic:demo``, the embedded samples) and its scenes: the
    sweep scenes (:func:`_sweep_scenes`), then the negative scenes."""
    from objrec.evaluation.recognition import load_source

    objects = _synthetic_objects(cfg.path)
    sizes = {}
    for name, src in objects:
        img = load_source(src)
        sizes[name] = (int(img.shape[1]), int(img.shape[0]))
    return objects, _sweep_scenes(cfg, objects, sizes) + _negative_scenes(cfg)


def _recognition_tasks(cfg: EvalConfig, detectors: list[str], status: dict[str, dict[str, Any]]) -> list[dict]:
    """One ``scene`` task per available detector and scene of a recognition dataset.

    Parameters
    ----------
    cfg : EvalConfig
        The run configuration (``kind`` ``coil``, ``objects`` or ``synthetic``).
    detectors : list of str
        The requested detector names.
    status : dict
        Detector name -> ``{available, note}``; ``opencv-surf-ref`` is marked unavailable here.

    Returns
    -------
    list of dict
        The task specs, with their ids.
    """
    if cfg.kind == "coil":
        objects, scenes = _coil_scenes(cfg)
    elif cfg.kind == "objects":
        objects, scenes = _objects_file_scenes(cfg)
    else:
        objects, scenes = _synthetic_scenes(cfg)
    tasks = []
    for det in detectors:
        if det == "opencv-surf-ref":
            status[det] = {"available": False, "note": "precomputed features of the Oxford images only"}
        if not status[det]["available"]:
            continue
        for label, scene, meta, match in scenes:
            spec = {
                "type": "scene",
                "detector": det,
                "label": label,
                "objects": [list(o) for o in objects],
                "scene": scene,
                "match": match,
                "corner_tolerance": float(cfg.corner_tolerance),
                "budget_ms": cfg.budget_ms,
                "meta": meta,
            }
            tasks.append(_finish(spec))
    return tasks


def default_detectors(kind: str) -> tuple[str, ...]:
    if kind == "oxford":
        return ("surf", "sift", "opencv-sift", "orb", "akaze", "opencv-surf-ref")
    if kind == "hpatches":
        return ("surf", "sift", "opencv-sift", "orb", "akaze")
    return ("surf", "sift", "orb", "akaze")


def build_tasks(cfg: EvalConfig) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
    """The task list of a run and the status of each requested detector (``{name: {available, note}}``).

    Reads every image once and checks every ground-truth file first, so a damaged dataset fails before any
    work starts, with an error naming the file.
    """
    from objrec.evaluation.detectors import detector_status, parse_detectors

    if cfg.kind not in KINDS:
        raise ValueError(f"dataset: expected KIND:PATH with KIND one of {', '.join(KINDS)}, got {cfg.kind!r}")
    if cfg.kind in PAIR_KINDS:
        from objrec.evaluation.pairs import pair_tasks

        return pair_tasks(cfg)
    if cfg.kind in CATALOGUE_KINDS:
        from objrec.evaluation.catalogue import build_catalogue_tasks

        return build_catalogue_tasks(cfg)
    names = parse_detectors(",".join(cfg.detectors) if cfg.detectors else None, default_detectors(cfg.kind))
    status = {n: detector_status(n).to_json() for n in names}
    if cfg.max_features < 0:
        raise ValueError(f"--max-features: expected 0 (all) or a positive integer, got {cfg.max_features}")
    if cfg.kind in FEATURE_KINDS:
        tasks = _feature_tasks(cfg, names, status)
    else:
        tasks = _recognition_tasks(cfg, names, status)
    if not tasks:
        why = "; ".join(f"{n}: {s['note']}" for n, s in status.items() if not s["available"])
        raise ValueError(f"no detector can run on {cfg.kind}:{cfg.path} ({why})")
    return tasks, status
