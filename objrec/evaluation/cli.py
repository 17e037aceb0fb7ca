"""The ``objrec eval`` subcommand: :func:`register` adds it to the main parser's subparsers.

Bad input (an unknown dataset kind, a missing or damaged dataset file, an unknown detector, Dask missing)
raises ``ValueError`` subclasses (``DatasetError``, ``InputError``) whose message names the file or option;
the main CLI turns them into exit code 2 with a one-line error.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from objrec._cliargs import add_cluster_options, add_json, add_no_progress, add_out_dir, print_json
from objrec.evaluation._help import DETECTOR_HELP

__all__ = ["register", "cmd_eval", "config_from_args"]

_KINDS_HELP = (
    "oxford:ROOT (Oxford affine: <seq>/img1..6 + H1toNp), hpatches:ROOT (v_*/i_* with H_1_N), "
    "coil:DIR (obj<ID>__<deg>.png), objects:FILE.json (objects + scenes + ground truth), "
    "synthetic:DIR (object images; corruption sweeps) or synthetic:demo (embedded sample objects), "
    "pairs:ROOT (annotated planar pairs: NAMEA.png, NAMEB.png, NAME_pts.txt with lines 'x_A y_A 1 x_B y_B 1 "
    "[flag]', and extremeview/ with lines 'x_A y_A x_B y_B ... flag'; A enrolled, B recognised, median error "
    "on the flag-1 points, solved within 5 px), "
    "catalogue:DIR (reference images + labelled query photos: SMVS reference/ + queries/CAM_NAME.jpg, or "
    "references/NAME.ext + queries/LABEL/*.ext or queries.csv), "
    "ukbench:DIR (UKBench ukbenchNNNNN.jpg, images 4k..4k+3 = object k: Nister-Stewenius retrieval score of the "
    "index and of exact voting; recognition with 1 and 2 enrolled views against the find_obj anchor), "
    "video:DIR (real footage with ground-truth corners: real_video clip folders (video.mp4, reference.png, "
    "gt.txt), POT-210 (Vxx_y/ or Vxx_y.avi + annotation/), POIC/TMT (sequences/, gt/, Templates/): alignment "
    "error, precision and success plots, frames lost, against SIFT detection in every frame)"
)


def _int_list(text: str | None, what: str) -> list[int] | None:
    if text is None:
        return None
    try:
        return [int(s) for s in text.split(",") if s.strip()]
    except ValueError:
        raise ValueError(f"{what}: expected comma-separated integers, got {text!r}") from None


def _str_list(text: str | None) -> list[str] | None:
    if text is None:
        return None
    return [s.strip() for s in text.split(",") if s.strip()] or None


def config_from_args(args: argparse.Namespace) -> Any:
    """An :class:`~objrec.evaluation.config.EvalConfig` from parsed arguments (checks the dataset spec)."""
    from objrec.evaluation.config import EvalConfig
    from objrec.evaluation.kinds import KINDS

    kind, sep, path = args.dataset.partition(":")
    if not sep or not path or kind not in KINDS:
        raise ValueError(f"dataset: expected KIND:PATH with KIND one of {', '.join(KINDS)}, got {args.dataset!r}")
    views = getattr(args, "views", None)
    if views is not None and kind != "pairs":
        raise ValueError(f"--views: enrolment views apply to pairs:ROOT only, not {kind}")
    tilts = None
    if getattr(args, "tilts", None) is not None:
        if kind != "pairs":
            raise ValueError(f"--tilts: tilted views of the scene apply to pairs:ROOT only, not {kind}")
        from objrec.realtime.tilts import parse_tilts

        tilts = list(parse_tilts(args.tilts))  # pairs are recognised without a budget
    shape = getattr(args, "shape", None)
    if shape is not None and kind != "ukbench":
        raise ValueError(f"--shape: the shape to enrol with applies to ukbench:DIR only, not {kind}")
    video_only = {"protocol": args.protocol != "recognition", "layout": args.layout, "realtime": args.realtime}
    given = [k for k, v in video_only.items() if v]
    if given and kind != "video":
        raise ValueError(f"--{given[0]}: applies to video:PATH only, not {kind}")
    if args.budget_ms is not None and not args.budget_ms > 0:
        raise ValueError(f"--budget-ms: expected a positive number, got {args.budget_ms}")
    return EvalConfig(
        kind=kind,
        path=path,
        out=args.out,
        detectors=_str_list(args.detectors),
        budget_ms=args.budget_ms,
        workers=args.workers,
        scheduler=args.scheduler,
        sequences=_str_list(args.sequences),
        pairs=_int_list(args.pairs, "--pairs"),
        max_features=args.max_features,
        surf_reference=args.surf_reference,
        objects=_int_list(args.objects, "--objects"),
        coil_scale=args.coil_scale,
        sweeps=_str_list(args.sweeps),
        repeats=args.repeats,
        seed=args.seed,
        corner_tolerance=args.corner_tolerance,
        views=views,
        tilts=tilts,
        progress=not args.no_progress,
        plots=not args.no_plots,
        distractors=args.distractors,
        query_side=args.query_side,
        without_query_objects=args.without_query_objects,
        shape=shape,
        protocol=args.protocol,
        layout=args.layout,
        realtime=args.realtime,
    )


def cmd_eval(args: argparse.Namespace) -> int:
    from objrec.evaluation.runner import run_evaluation

    cfg = config_from_args(args)
    report = run_evaluation(cfg)
    run = report["run"]
    out = Path(cfg.out)
    if args.json:
        written = [str(out / name) for name in ("report.json", "report.md", "report.html")]
        print_json({"out": str(out), "run": run, "notes": report["notes"], "written": written})
    else:
        print(
            f"objrec eval: {run['tasks']} tasks ({run['ran']} run, {run['resumed']} resumed) in "
            f"{run['wall_s']:.1f} s [{run['mode']}]; report in {out}/report.md, report.html, report.json"
        )
    for n in report["notes"]:
        print(f"note: {n}", file=sys.stderr)
    return 0


def _add_pairs_arguments(p: argparse.ArgumentParser) -> None:
    """The options of ``pairs:ROOT`` runs only."""
    p.add_argument(
        "--views",
        metavar="NAME",
        help="pairs: enrol image A with ModelDB.enroll(..., views=NAME) (synthesised views, e.g. affine)",
    )
    p.add_argument(
        "--tilts",
        metavar="T1,T2",
        help="pairs: also search tilted views of scene B where candidates stay unsure (Recognizer(tilts=...); "
        "2,4 is ASIFT's every other tilt)",
    )


def _catalogue_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--distractors",
        action="append",
        metavar="DIR",
        help="catalogue: enrol every image of DIR too (repeatable)",
    )
    p.add_argument(
        "--query-side",
        type=int,
        default=640,
        metavar="PX",
        help="catalogue, ukbench: resize query photos to PX on the long side (0: as stored; default 640)",
    )
    p.add_argument(
        "--shape",
        choices=("flat", "solid"),
        help="ukbench: enrol every object with ModelDB.enroll(..., shape=SHAPE) (default: solid)",
    )
    p.add_argument(
        "--without-query-objects",
        action="store_true",
        help="catalogue: leave the labelled objects out of the database (every detection is wrong)",
    )


def _video_options(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--protocol",
        choices=("recognition", "tracking"),
        default="recognition",
        help="video: recognition (the reference enrolled, nothing given at frame 0; default) or tracking "
        "(frame 0 rectified through its ground truth enrolled, as the benchmarks initialise trackers)",
    )
    p.add_argument(
        "--layout", choices=("real_video", "pot", "poic"), help="video: the dataset's layout (default: detected)"
    )
    p.add_argument(
        "--realtime",
        action="store_true",
        help="video: hand frames over at the footage's rate, dropping those that come while busy",
    )


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``eval`` to ``subparsers`` (from ``ArgumentParser.add_subparsers``); sets ``func=cmd_eval``."""
    from objrec.evaluation._help import SWEEPS

    p = subparsers.add_parser(
        "eval",
        help="evaluate detectors and recognizers on datasets and corruption sweeps (reports and plots)",
        description="Evaluate feature detectors (repeatability, matching score, MMA, homography accuracy) on "
        "Oxford/HPatches image pairs, or recognition (precision, recall, corner error, latency) on COIL-100, "
        "an objects+scenes JSON set or synthetic corruption sweeps, or image A of annotated pairs found in "
        "image B (pairs). Writes report.json, report.md, report.html, "
        "plots/*.png and per-task records.jsonl into --out; a rerun skips the tasks already recorded.",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        epilog="dataset kinds: "
        + _KINDS_HELP
        + "\n\ndetectors: "
        + DETECTOR_HELP
        + "\n\nsynthetic sweeps: "
        + ", ".join(f"{k} {list(v)}" for k, v in SWEEPS.items()),
    )
    p.add_argument("dataset", metavar="KIND:PATH", help=_KINDS_HELP)
    add_out_dir(p, "the reports, plots and per-task records (reused to resume)", required=True)
    p.add_argument(
        "--detectors",
        metavar="LIST",
        help="comma-separated detector names (default: surf,sift,opencv-sift,orb,akaze,opencv-surf-ref on "
        "oxford; surf,sift,orb,akaze for recognition; objrec, the Recognizer with the database defaults, for pairs, "
        "which also take surf, sift and their GPU/Numba twins; objrec,findobj for catalogue, which also "
        "has objrec-coarse and objrec-exact; objrec,findobj for ukbench). " + DETECTOR_HELP,
    )
    p.add_argument(
        "--budget-ms",
        type=float,
        metavar="MS",
        help="per-frame budget given to the recognizer (recognition); "
        "for feature runs, detection times are also checked against it",
    )
    add_cluster_options(p)
    p.add_argument(
        "--sequences",
        metavar="LIST",
        help="oxford/hpatches: only these sequences (e.g. graf,leuven); pairs: only these sets or pairs "
        "(homogr, evd, graf, evd/graf); video: only these clips",
    )
    _add_pairs_arguments(p)
    p.add_argument("--pairs", metavar="LIST", help="oxford/hpatches: only pairs 1->N for these N (e.g. 2,4,6)")
    p.add_argument(
        "--max-features",
        type=int,
        default=0,
        metavar="N",
        help="keep the N strongest features per image (0: all; ORB then detects 2000)",
    )
    p.add_argument(
        "--surf-reference",
        metavar="DIR",
        help="OpenCV SURF reference .npz folder (default: <oxford root>/../reference/opencv_surf)",
    )
    p.add_argument(
        "--objects", metavar="LIST", help="coil: only these object ids; ukbench: one number N, the first N objects"
    )
    p.add_argument("--coil-scale", type=float, default=2.0, help="coil: scale of the views in the scene (default 2)")
    p.add_argument("--sweeps", metavar="LIST", help="synthetic: only these sweeps (" + ",".join(SWEEPS) + ")")
    p.add_argument("--repeats", type=int, default=2, help="synthetic: scenes per object and level (default 2)")
    p.add_argument("--seed", type=int, default=0, help="seed of scene placement and backgrounds")
    p.add_argument(
        "--corner-tolerance",
        type=float,
        default=10.0,
        metavar="PX",
        help="a detection is correct within this mean corner error (default 10 px)",
    )
    _catalogue_options(p)
    _video_options(p)
    add_no_progress(p)
    p.add_argument("--no-plots", action="store_true", help="no matplotlib plots")
    add_json(p, "the run's summary, notes and the report files written")
    p.set_defaults(func=cmd_eval)
    return p
