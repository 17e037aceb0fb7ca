"""The ``objrec`` command line: a thin layer over the library.

Exit codes: 0 success, 2 bad input (one-line error, no traceback), 1 unexpected internal error.
"""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import time
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any, TextIO

from objrec import __version__
from objrec._cliargs import (
    TILTS_HELP,
    add_deprecated_alias,
    add_json,
    add_no_progress,
    add_out_dir,
    add_recognition_options,
    print_json,
    recognizer_options,
)

EXIT_OK, EXIT_INTERNAL, EXIT_BAD_INPUT = 0, 1, 2


class CLIError(Exception):
    """Bad input found by the CLI itself."""


def _bad_input_types() -> tuple[type[BaseException], ...]:
    from objrec.backend import BackendError
    from objrec.fileio import FileFormatError
    from objrec.imageio import InputError

    return (CLIError, InputError, FileFormatError, BackendError, KeyError, ValueError, OSError)


def _quiet(*_: Any) -> None:
    """What a command says on stdout with ``--json``, where the document is all it prints: nothing."""


def _err_text(exc: BaseException) -> str:
    msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else str(exc)
    return " ".join(str(msg).split())


# --- detect ---------------------------------------------------------------------------------------
def cmd_detect(args: argparse.Namespace) -> int:
    from objrec.draw import draw_detections
    from objrec.imageio import read_image
    from objrec.modeldb import ModelDB
    from objrec.realtime.tilts import parse_tilts
    from objrec.recognizer import Recognizer

    options = recognizer_options(args)
    tilts = parse_tilts(args.tilts, args.budget_ms)
    db = ModelDB.open(args.db)
    rec = Recognizer(db, **options, tilts=tilts)
    results = []
    failed = False
    out = Path(args.out) if args.out else None
    if out:
        out.mkdir(parents=True, exist_ok=True)
    for path in args.images:
        try:
            img = read_image(path)
        except _bad_input_types() as exc:
            failed = True
            results.append({"image": path, "error": _err_text(exc)})
            if not args.json:
                print(f"{path}: error: {_err_text(exc)}", file=sys.stderr)
            continue
        rec.reset()  # unrelated still images: nothing to track from one to the next
        r = rec.process(img)
        results.append(
            {
                "image": path,
                "detections": [d.to_json() for d in r.detections],
                "timings_ms": {k: round(v, 3) for k, v in r.timings_ms.items()},
                "prefilter_boxes": r.prefilter_boxes,
            }
        )
        if args.explain:
            results[-1]["rejections"] = [dataclasses.asdict(x) for x in rec.last_rejections]
        if out:
            import cv2

            picture = out / (Path(path).stem + "_detections.png")
            cv2.imwrite(str(picture), draw_detections(img, r.detections))
            results[-1]["picture"] = str(picture)
        if not args.json:
            names = ", ".join(f"{d.name} (score {d.score:.2f}, {d.inliers} inliers)" for d in r.detections) or "none"
            print(f"{path}: {names}  [{r.latency_ms:.1f} ms]")
            for x in rec.last_rejections if args.explain else []:
                print(f"  rejected {x.name}: {x.reason} ({x.matches} matches) {x.detail}".rstrip())
    from objrec.memory import report as memory_report

    memory = memory_report()
    if args.json:
        print_json({"results": results, "memory": memory})
    elif memory["peak_rss_mb"] is not None:
        print(f"memory: peak resident {memory['peak_rss_mb']:.0f} MiB ({len(db)} object(s) enrolled)")
    return EXIT_BAD_INPUT if failed else EXIT_OK


# --- demo -----------------------------------------------------------------------------------------
def cmd_demo(args: argparse.Namespace) -> int:
    from objrec.demo import run_demo

    say = _quiet if args.json else print
    doc = run_demo(Path(args.out), args.seed, args.frames, args.budget_ms, args.backend, say=say)
    if args.json:
        print_json(doc)
    return EXIT_OK if doc["all_found"] else EXIT_INTERNAL


# --- run ------------------------------------------------------------------------------------------
def _smooth_arg(args: argparse.Namespace) -> Any:
    """``Recognizer``'s ``smooth``: False with --no-smooth, else the One-Euro parameters given."""
    from objrec.realtime.smoothing import SmoothParams

    given = {k: v for k, v in (("min_cutoff", args.smooth_cutoff), ("beta", args.smooth_beta)) if v is not None}
    if args.no_smooth:
        if given:
            raise CLIError("--smooth-cutoff, --smooth-beta: nothing to set with --no-smooth")
        return False
    if args.smooth_cutoff is not None and not args.smooth_cutoff > 0:
        raise CLIError(f"--smooth-cutoff: expected a positive frequency in Hz, got {args.smooth_cutoff}")
    if args.smooth_beta is not None and not args.smooth_beta >= 0:
        raise CLIError(f"--smooth-beta: expected a non-negative number, got {args.smooth_beta}")
    return SmoothParams(**given)


def _run_prefilter(db: Any, args: argparse.Namespace) -> tuple[Any, bool]:
    """The ``prefilter`` that ``run`` gives its recognizer, and whether it was trained now: with adaptation and
    no current prefilter stored with the database, one is trained on the built-in backgrounds first (with a
    progress bar unless ``--no-progress``)."""
    if args.no_prefilter or not args.adapt or not len(db):  # an empty database: the recognizer refuses it
        return None if args.no_prefilter else "auto", False
    from objrec.prefilter.resolve import resolve_prefilter

    stored, _ = resolve_prefilter(db, "auto")
    if stored is not None:
        return stored, False
    from objrec.prefilter.estimator import RegionPrefilter

    print(f"objrec: training a prefilter for {db.path} on the built-in backgrounds (first use)", file=sys.stderr)
    return RegionPrefilter().train(db, None, progress=not args.no_progress), True


def _check_run_args(args: argparse.Namespace) -> None:
    if args.max_frames is not None and args.max_frames < 1:
        raise CLIError(f"--max-frames: expected a positive integer, got {args.max_frames}")
    if args.save_prefilter and (not args.adapt or args.no_prefilter):
        raise CLIError("--save-prefilter: nothing is learned with --no-adapt or --no-prefilter")
    if args.fps is not None and not args.fps > 0:
        raise CLIError(f"--fps: expected a positive number of frames per second, got {args.fps}")


def cmd_run(args: argparse.Namespace) -> int:
    from objrec.modeldb import ModelDB
    from objrec.pose import Camera
    from objrec.realtime.loop import display_available, run_stream
    from objrec.realtime.sources import open_source
    from objrec.recognizer import Recognizer

    options = recognizer_options(args)
    _check_run_args(args)
    smooth = _smooth_arg(args)
    camera = Camera.load(args.camera) if args.camera else None
    db = ModelDB.open(args.db)
    source = open_source(args.source, realtime=args.realtime, fps=args.fps)  # a bad source fails before training
    shape = getattr(source, "frame_shape", None)
    if camera is not None and shape is not None:
        camera.for_frame(shape[1], shape[0])  # a frame the calibration cannot describe fails here
    options["prefilter"], trained = _run_prefilter(db, args)
    with_camera: dict[str, Any] = {"camera": camera} if camera is not None else {}
    rec = Recognizer(
        db,
        **options,
        adapt_prefilter=args.adapt and not args.no_prefilter,
        smooth=smooth,
        **with_camera,
    )
    say = _quiet if args.json else print
    written: dict[str, str] = {}
    if trained and rec.adapter is not None:
        from objrec.prefilter.storage import save_for

        written["prefilter"] = str(save_for(rec.adapter.base, db)[0])
        say(f"saved the prefilter trained on the built-in backgrounds with the database: {written['prefilter']}")
    display = not args.no_display and display_available()
    if not args.no_display and not display:
        print("objrec run: no display available; running headless (use --no-display to silence this)", file=sys.stderr)
    stats = run_stream(
        rec,
        source,
        max_frames=args.max_frames,
        display=display,
        out_video=args.out,
        warmup_shape=shape,
        camera=camera,
        widths_m={i.object_name: i.width_m for i in db.infos() if i.width_m},
    )
    say(stats.summary())
    if rec.adapter is not None:
        rec.adapter.wait()
        st = rec.adapter.status()
        say(
            f"prefilter adaptation: {st['refits']} refit(s), {st['negatives']} negative and {st['positives']} "
            f"positive cells, {st['backoffs']} back-off(s), {st['scene_resets']} change(s) of scene"
        )
        if args.save_prefilter:
            written["adapted_prefilter"] = str(rec.adapter.current.save(args.save_prefilter)[0])
            say(f"wrote the adapted prefilter to {written['adapted_prefilter']} (for database {db.database_id})")
    if args.stats:
        stats.write(args.stats)
        written["stats"] = str(args.stats)
        say(f"wrote {args.stats}")
    if args.out:
        written["video"] = str(args.out)
        say(f"wrote {args.out}")
    if args.json:
        doc = stats.to_json()
        del doc["per_frame"]  # every frame's result is what --stats writes
        print_json({**doc, "written": written})
    return EXIT_OK


# --- cache ----------------------------------------------------------------------------------------
def _size_text(n: float) -> str:
    for unit in ("B", "KiB", "MiB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} GiB"


def cmd_cache(args: argparse.Namespace) -> int:
    from objrec import kernel_cache

    if args.action == "clear":
        out = kernel_cache.clear(stale_only=args.stale)
        if args.json:
            print_json(out)
            return EXIT_OK
        what = "stale " if args.stale else ""
        size = _size_text(out["bytes"])
        print(f"removed {len(out['removed'])} {what}kernel cache folder(s), {size}, from {out['root']}")
        return EXIT_OK
    doc = kernel_cache.info()
    if args.json:
        print_json(doc)
        return EXIT_OK
    print(f"kernel cache: {doc['root']} (set {doc['env_var']} to move it)")
    print(f"this installation's key: {doc['current_key']}")
    if not doc["entries"]:
        print("  empty: kernels are compiled on first use and kept here")
    for e in doc["entries"]:
        mark = "current" if e["current"] else "stale"
        size = _size_text(e["bytes"])
        print(f"  {e['key']}  {mark:7s}  {e['files']:4d} files  {size:>10s}  numba {e['numba']}, {e['cpu']}")
    return EXIT_OK


def _add_cache_parser(sub: argparse._SubParsersAction) -> None:
    c = sub.add_parser(
        "cache",
        help="show or clear the compiled-kernel cache",
        description="Compiled Numba kernels are kept in a private per-user cache directory "
        "(OBJREC_CACHE_DIR, else $XDG_CACHE_HOME/objrec or ~/.cache/objrec), one folder per key "
        "(kernel sources, Numba version, CPU). 'info' lists the folders, 'clear' removes them.",
    )
    c.add_argument("action", choices=["info", "clear"], help="info: list cached kernels; clear: remove them")
    add_json(c)
    c.add_argument("--stale", action="store_true", help="clear: keep this installation's kernels")
    c.set_defaults(func=cmd_cache)


# --- parser ---------------------------------------------------------------------------------------
def _add_detect_parser(sub: Any) -> None:
    d = sub.add_parser(
        "detect",
        help="find enrolled objects in images",
        description="Find enrolled objects in images. With --json, print one JSON document "
        "{results: [{image, detections: [{name, score, inliers, homography, corners, visible_fraction}], "
        "timings_ms}]}; an unreadable image gets {image, error} and the exit code is 2.",
    )
    add_recognition_options(d, budget_ms=None)
    d.add_argument("--tilts", metavar="LIST", help=TILTS_HELP)
    add_json(d)
    add_out_dir(d, "an annotated copy of each image (NAME_detections.png)")
    add_deprecated_alias(d, "--annotate", "--out")
    d.add_argument(
        "--explain",
        action="store_true",
        help="also report every rejected candidate with its reason code (with --json: a 'rejections' list)",
    )
    d.add_argument("images", nargs="+", metavar="IMAGE")
    d.set_defaults(func=cmd_detect)


def _add_run_parser(sub: Any) -> None:
    r = sub.add_parser(
        "run",
        help="recognise objects in a camera, video or image folder stream within a frame budget",
        description="Process a stream frame by frame within a per-frame budget. A video or folder is processed "
        "frame by frame, nothing dropped, unless --realtime paces it like a camera (newest frame wins, drops "
        "counted). Latency runs from capture to result; warm-up happens before the first frame.",
    )
    add_recognition_options(r, budget_ms=33.0)
    r.add_argument("--source", required=True, help="camera index, video file or image folder")
    r.add_argument("--realtime", action="store_true", help="pace a file like a camera at its frame rate")
    r.add_argument(
        "--fps",
        type=float,
        help="an image folder's frame rate (default 30): the footage time that corner smoothing reasons with; "
        "with --realtime, also the pace of a video file (default: the file's own rate)",
    )
    r.add_argument("--no-display", action="store_true", help="run headless (no window)")
    r.add_argument("--out", metavar="VIDEO", help="write the annotated video (.mp4)")
    r.add_argument("--stats", metavar="FILE.json", help="write run statistics as JSON")
    add_json(r, "the run's statistics as --stats writes them, without per_frame, and the files written")
    add_no_progress(r)
    r.add_argument("--max-frames", type=int, help="stop after N frames")
    r.add_argument(
        "--camera",
        metavar="CALIB.yml",
        help="the camera's calibration (OpenCV FileStorage YAML/XML with camera_matrix, distortion_coefficients, "
        "image_width, image_height, as OpenCV's calibration sample writes): detections of objects enrolled with "
        "a width get a metric pose, drawn as axes",
    )
    r.add_argument(
        "--no-adapt",
        dest="adapt",
        action="store_false",
        help="keep the prefilter as trained (by default it learns the stream's background as it runs; without a "
        "trained prefilter one is first trained on the built-in backgrounds and saved with the database)",
    )
    r.add_argument("--adapt", dest="adapt", action="store_true", help=argparse.SUPPRESS)
    r.add_argument("--save-prefilter", metavar="PATH", help="write the adapted prefilter here at the end")
    r.add_argument(
        "--no-smooth",
        action="store_true",
        help="draw and record each frame's corners as detected (by default each object's corners are smoothed "
        "over frames with the One-Euro filter, time steps from the capture times, and --stats records the "
        "detected ones beside them as raw_corners)",
    )
    r.add_argument(
        "--smooth-cutoff",
        type=float,
        metavar="HZ",
        help="the One-Euro filter's cutoff frequency for a still object: lower is steadier but lags more when "
        "motion starts (default 1)",
    )
    r.add_argument(
        "--smooth-beta",
        type=float,
        metavar="B",
        help="how fast the cutoff rises with a corner's speed, in Hz per px/s: higher follows changes of motion "
        "sooner and lets more jitter through while moving (default 1; the filter also predicts each corner by "
        "its filtered speed, so a steady motion does not lag)",
    )
    r.set_defaults(func=cmd_run)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="objrec",
        description="Real-time hierarchical object recognition: enroll pictures of objects, find them in images.",
    )
    p.add_argument("--version", action="version", version=f"objrec {__version__}")
    p.add_argument(
        "--debug",
        action="store_true",
        help="show tracebacks for unexpected errors, and OpenCV's and FFmpeg's own log lines",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND", required=True)

    from objrec.enrolcli import register as register_enroll

    register_enroll(sub)

    from objrec.ratecli import register as register_rate

    register_rate(sub)

    _add_detect_parser(sub)
    _add_run_parser(sub)

    m = sub.add_parser(
        "demo",
        help="run the recognizer on embedded sample data (no files needed)",
        description="Compose a scene from embedded sample images, enroll three objects, detect them, "
        "print the detections with their corner error against ground truth and write an annotated PNG.",
    )
    add_out_dir(m, "the scene, its annotated copy and the stream demo's video and statistics", default="objrec-demo")
    m.add_argument("--seed", type=int, default=0, help="scene seed")
    m.add_argument("--frames", type=int, default=90, help="frames of the stream demo (0: still image only)")
    m.add_argument(
        "--budget-ms", type=float, default=33.0, metavar="MS", help="frame budget of the stream demo (default 33)"
    )
    m.add_argument("--backend", default="auto", choices=["auto", "cpu", "gpu"], help="compute backend")
    add_json(m, "the detections with their corner errors, the files written and the stream's statistics")
    m.set_defaults(func=cmd_demo)

    from objrec.dbcli import register as register_db
    from objrec.evaluation.cli import register as register_eval
    from objrec.prefilter.cli import register as register_prefilter

    register_prefilter(sub)
    register_eval(sub)
    register_db(sub)
    _add_cache_parser(sub)
    return p


def _one_line_warning(
    message: Warning | str,
    category: type[Warning],
    filename: str,
    lineno: int,
    file: TextIO | None = None,
    line: str | None = None,
) -> None:
    print(f"objrec: warning: {' '.join(str(message).split())}", file=sys.stderr)


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="objrec: %(message)s")
    warnings.showwarning = _one_line_warning
    from objrec import _startup, kernel_cache

    _startup.numba_without_scipy_linalg()
    if not args.debug:
        _startup.quiet_video_backends()

    kernel_cache.announce_compilation(sys.stderr)
    t0 = time.perf_counter()
    try:
        try:
            return int(args.func(args) or 0)
        finally:
            kernel_cache.finish_announcement()  # ends its line before any error message
    except _bad_input_types() as exc:
        print(f"objrec {args.command}: error: {_err_text(exc)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"objrec {args.command}: interrupted after {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the CLI promises one line, not a traceback
        if args.debug:
            raise
        print(
            f"objrec {args.command}: internal error: {type(exc).__name__}: {_err_text(exc)} "
            "(rerun with --debug for a traceback)",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


if __name__ == "__main__":
    sys.exit(main())
