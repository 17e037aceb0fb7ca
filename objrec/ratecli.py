"""``objrec rate``: rate reference images before enrolling them (score 0-100 and the reasons), optionally with a
picture per image (``--out``) and the operating envelope (``--envelope``).

A file that cannot be rated gets a one-line error naming it; the others are still rated and the exit code is 2.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
from pathlib import Path
from typing import Any

from objrec._cliargs import add_json, add_out_dir, print_json

__all__ = ["register", "cmd_rate", "picture_name"]


def picture_name(path: str) -> str:
    """The ``--out`` file name of an image's picture: its stem and a short hash of its full path, so images of
    the same name in different folders do not overwrite each other."""
    full = str(Path(path).expanduser().resolve())
    return f"{Path(path).stem}_{hashlib.sha256(full.encode()).hexdigest()[:8]}_rating.png"


def _detectors(db: str | None) -> dict[str, dict[str, Any]] | None:
    if db is None:
        return None
    from objrec.modeldb import ModelDB

    return ModelDB.open(db).detectors


def _write_picture(out: Path, path: str, img: Any, rating: Any) -> Path:
    import cv2

    from objrec.fileio import atomic_write_bytes
    from objrec.rating.picture import draw_rating

    ok, png = cv2.imencode(".png", draw_rating(img, rating))
    if not ok:  # pragma: no cover - PNG takes every BGR image
        raise ValueError(f"{path}: its picture could not be encoded as PNG")
    target = out / picture_name(path)
    atomic_write_bytes(target, png.tobytes())
    return target


def _envelope_function() -> Any:
    """:func:`objrec.envelope.measure_envelope`, or a clear error where this installation lacks it."""
    import objrec.envelope as envelope

    measure = getattr(envelope, "measure_envelope", None)
    if measure is None:
        raise ValueError("--envelope: this installation has no objrec.envelope.measure_envelope")
    return measure


def _rate_one(path: str, args: argparse.Namespace, detectors: Any, bad: tuple) -> dict[str, Any]:
    from objrec.rating import rate, read_reference

    try:
        img = read_reference(path)
        rating = rate(img, detectors=detectors, shape=args.shape)
    except bad as exc:
        return {"image": path, "error": " ".join(str(exc).split())}
    doc = {"image": path, **rating.to_json()}
    if args.out:
        doc["picture"] = str(_write_picture(Path(args.out), path, img, rating))
    doc["_summary"] = rating.summary()
    if args.envelope:
        env = args.envelope(img, detectors=detectors, runs=args.envelope_runs)
        doc["envelope"] = env.to_dict()
        doc["_summary"] += "\n  " + envelope_line(env)
        if args.out:
            name = picture_name(path).replace("_rating.png", "_envelope.png")
            doc["envelope_plot"] = str(env.plot(Path(args.out) / name))
    return doc


def envelope_line(env: Any) -> str:
    """One line of an operating envelope's figures."""
    if env.error:
        return f"envelope: not measured ({env.error})"

    def num(v: float | None, unit: str) -> str:
        return "never" if v is None else f"{v:g}{unit}"

    runs = f" ({env.runs} runs each)" if env.runs > 1 else ""
    return (
        f"envelope: found in {100 * env.found_share:.0f}% of {len(env.views)} views{runs}; smallest width "
        f"{num(None if env.smallest_width_px is None else round(env.smallest_width_px), ' px')}, steepest tilt "
        f"{num(env.steepest_tilt_deg, ' deg')}, strongest blur sigma {num(env.strongest_blur_sigma, '')}"
    )


def cmd_rate(args: argparse.Namespace) -> int:
    from objrec.imageio import InputError

    detectors = _detectors(args.db)
    args.envelope = _envelope_function() if args.envelope else None  # a missing one fails before any rating
    if args.envelope_runs is not None and args.envelope is None:
        raise ValueError("--envelope-runs: only with --envelope (it sets how often each envelope view is rendered)")
    if args.envelope_runs is not None and args.envelope_runs < 1:
        raise ValueError(f"--envelope-runs: expected a whole number >= 1, got {args.envelope_runs}")
    if args.envelope is not None and args.envelope_runs is None:
        from objrec.envelope import ENVELOPE_RUNS

        args.envelope_runs = ENVELOPE_RUNS
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
    results = []
    for path in args.images:
        doc = _rate_one(path, args, detectors, (InputError, OSError))
        summary = doc.pop("_summary", None)
        results.append(doc)
        if args.json:
            continue
        if "error" in doc:
            print(f"objrec rate: error: {doc['error']}", file=sys.stderr)
        else:
            print(f"{path}: {summary}")
            for key in ("picture", "envelope_plot"):
                if key in doc:
                    print(f"  wrote {doc[key]}")
    if args.json:
        print_json({"results": results})
        for doc in results:
            if "error" in doc:
                print(f"objrec rate: error: {doc['error']}", file=sys.stderr)
    return 2 if any("error" in d for d in results) else 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``rate`` command to the ``objrec`` parser's subcommands."""
    r = sub.add_parser(
        "rate",
        help="rate reference images 0-100 (how well they will be recognised) and say why",
        description="Rate each image as enrolment would store it: a score 0-100 (75 or more is a good reference, "
        "under 40 a poor one) and the reasons that lowered it, each with its number.",
    )
    r.add_argument("images", nargs="+", metavar="IMAGE", help="image files")
    add_json(r, '{"results": [{"image", "score", "reasons", ...}]}')
    add_out_dir(
        r,
        "a picture per image (features coloured by distinctiveness, weak areas shaded, score and reasons), and "
        "with --envelope its plot",
    )
    r.add_argument("--db", help="rate with this model database's detectors (default: the default detectors)")
    r.add_argument(
        "--shape",
        choices=("flat", "solid"),
        default="flat",
        help="what the images show, as enrolment's --shape: flat (a cover, a poster, a box face: scored by how the "
        "image survives being seen small, tilted and blurred) or solid (an object with depth: scored by what real "
        "photos of such objects keep, its features on corner-like structure rather than on outlines and shading "
        "edges) (default: flat)",
    )
    r.add_argument(
        "--envelope",
        action="store_true",
        help="also measure the operating envelope: the image rendered as a camera would see it in a fixed grid of "
        "60 views (sizes, tilts, rotations, blur, noise, gamma, JPEG; see objrec.envelope) and recognised; the "
        "found share, smallest width, steepest tilt and strongest blur, and a plot with --out (seconds per image)",
    )
    r.add_argument(
        "--envelope-runs",
        type=int,
        metavar="N",
        help="render every view of the envelope this many times over new clutter and noise: the found share of "
        "all of them, a view counting as found when it was in most of its runs (default: "
        "objrec.envelope.ENVELOPE_RUNS, 4; 1 is quickest, more is steadier)",
    )
    r.set_defaults(func=cmd_rate)
