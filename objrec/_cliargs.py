"""The ``objrec`` command line's shared vocabulary: each option that several commands take is added by one
function here, so that its name, form and meaning are the same in every command.

- ``--out DIR``: the folder a command writes its files into (annotated images, pictures, reports). Two commands
  name a file instead, as the command-line contract fixes: ``run --out VIDEO`` and ``train-prefilter --out PATH``.
- ``--json``: print the result as one JSON document on stdout, and nothing else there.
- ``--no-progress``: no progress bar (bars are drawn on stderr).
- ``--workers N`` / ``--scheduler ADDRESS``: run the work on a local Dask cluster of ``N`` single-threaded worker
  processes, or on the workers of a running Dask scheduler; ``--threads N``: threads in this process.
- ``detect`` and ``run`` recognise with the same options (:func:`add_recognition_options`), read by one function
  (:func:`recognizer_options`).

An old spelling of an option is kept for one release by :class:`DeprecatedAlias`: it is parsed as the new
spelling is and says, in one line on stderr, which spelling to use. This module imports nothing beyond the
standard library, so every command's parser, the lower layers' included, can use it.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Sequence
from typing import Any

__all__ = [
    "DeprecatedAlias",
    "add_deprecated_alias",
    "add_deprecated_option",
    "add_json",
    "add_no_progress",
    "add_out_dir",
    "add_cluster_options",
    "cluster_choice",
    "add_recognition_options",
    "recognizer_options",
    "detectors_arg",
    "print_json",
    "JSON_HELP",
    "NO_PROGRESS_HELP",
    "WORKERS_HELP",
    "SCHEDULER_HELP",
    "THREADS_HELP",
]

JSON_HELP = "print the result as one JSON document on stdout, and nothing else there"
NO_PROGRESS_HELP = "no progress bar (bars are drawn on stderr)"
WORKERS_HELP = "run the work on a local Dask cluster of N single-threaded worker processes (pip install 'objrec[dask]')"
SCHEDULER_HELP = "run the work on the workers of a running Dask scheduler (tcp://host:8786)"
THREADS_HELP = "threads in this process (default: the usable cores)"


# --- old spellings --------------------------------------------------------------------------------------------------
class DeprecatedAlias(argparse.Action):
    """An old spelling of an option: stores what the new spelling stores, in the same ``dest``, and prints one
    line on stderr naming the spelling to use. Hidden from ``--help``.

    Parameters
    ----------
    option_strings : sequence of str
        The old spellings (argparse passes them).
    dest : str
        Where the value is stored: the new spelling's ``dest``.
    replacement : str
        The spelling to use instead, as the note shows it (``"--out DIR"``).
    nargs, const, type, choices, metavar
        As for the option it stands for; ``nargs=0`` stores ``const``.
    """

    def __init__(self, option_strings: Sequence[str], dest: str, replacement: str, **kwargs: Any) -> None:
        kwargs["help"] = argparse.SUPPRESS
        kwargs.setdefault("default", argparse.SUPPRESS)  # the new spelling's default stands
        super().__init__(option_strings, dest, **kwargs)
        self.replacement = replacement

    def __call__(
        self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any, option_string: Any = None
    ) -> None:
        print(
            f"objrec: warning: {option_string} is deprecated and will be removed in the next release; "
            f"use {self.replacement}",
            file=sys.stderr,
        )
        setattr(namespace, self.dest, self.const if self.nargs == 0 else values)


def _option(parser: argparse.ArgumentParser, spelling: str) -> argparse.Action:
    for action in parser._actions:
        if spelling in action.option_strings:
            return action
    raise KeyError(f"{parser.prog}: no option {spelling}")


def add_deprecated_alias(parser: argparse.ArgumentParser, old: str, new: str) -> argparse.Action:
    """Accept ``old`` as an old spelling of the option ``new`` of ``parser`` (added before): same destination,
    type and form, with the note of :class:`DeprecatedAlias`."""
    target = _option(parser, new)
    form = {"nargs": target.nargs, "const": target.const, "type": target.type, "choices": target.choices}
    shown = f"{new} {target.metavar or target.dest.upper()}" if target.nargs != 0 else new
    return parser.add_argument(
        old, action=DeprecatedAlias, dest=target.dest, replacement=shown, metavar=target.metavar, **form
    )


def add_deprecated_option(
    parser: argparse.ArgumentParser, old: str, replacement: str, **kwargs: Any
) -> argparse.Action:
    """Accept ``old``, an option the command no longer has a spelling for, into its own ``dest`` (None when not
    given); the command reads it as ``replacement`` (how the note of :class:`DeprecatedAlias` names it).
    ``parser`` is the command's parser; ``kwargs`` go to ``add_argument``."""
    return parser.add_argument(old, action=DeprecatedAlias, replacement=replacement, default=None, **kwargs)


# --- output -----------------------------------------------------------------------------------------------------
def add_json(parser: argparse.ArgumentParser, document: str | None = None) -> None:
    """``--json`` on the command's ``parser``; ``document`` describes its fields in the help."""
    parser.add_argument("--json", action="store_true", help=JSON_HELP + (f": {document}" if document else ""))


def print_json(doc: Any) -> None:
    """``doc`` as the one JSON document of a command's stdout."""
    json.dump(doc, sys.stdout, indent=2)
    sys.stdout.write("\n")


def add_no_progress(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--no-progress", action="store_true", help=NO_PROGRESS_HELP)


def add_out_dir(
    parser: argparse.ArgumentParser, what: str, *, required: bool = False, default: str | None = None
) -> argparse.Action:
    """``--out DIR`` on the command's ``parser``: the folder (created) the command writes ``what`` into;
    ``required`` makes it compulsory, ``default`` is the folder without it (shown in the help)."""
    shown = f" (default {default})" if default else ""
    return parser.add_argument(
        "--out", metavar="DIR", required=required, default=default, help=f"folder to write {what} into{shown}"
    )


# --- where the work runs ------------------------------------------------------------------------------------------
def add_cluster_options(parser: argparse.ArgumentParser, threads: str | None = None) -> None:
    """``--workers N | --scheduler ADDRESS`` on the command's ``parser``, and ``--threads N`` beside them when the
    work also runs in this process's threads (``threads`` says what those threads do)."""
    where = parser.add_mutually_exclusive_group()
    if threads is not None:
        where.add_argument("--threads", type=int, metavar="N", help=f"{threads}: {THREADS_HELP}")
    where.add_argument("--workers", type=int, metavar="N", help=WORKERS_HELP)
    where.add_argument("--scheduler", metavar="ADDRESS", help=SCHEDULER_HELP)


def cluster_choice(args: argparse.Namespace) -> tuple[int | None, str | None]:
    """``(workers, scheduler)`` of ``--workers N`` / ``--scheduler ADDRESS`` (None, None: this process), checked
    before anything is started or written. The deprecated ``--cluster local`` (parsed into ``args.cluster``) is
    ``--workers`` of the usable cores unless ``--workers`` is given."""
    workers, scheduler = getattr(args, "workers", None), getattr(args, "scheduler", None)
    threads = getattr(args, "threads", None)
    if getattr(args, "cluster", None):
        if scheduler is not None:
            raise ValueError("--cluster local and --scheduler: give one or the other")
        if workers is None:
            from objrec._threads import usable_cores

            workers = usable_cores()
    if threads is not None and threads < 1:
        raise ValueError(f"--threads: expected a positive integer, got {threads}")
    if threads is not None and (workers is not None or scheduler is not None):
        raise ValueError("--threads: the work runs on the Dask workers with --workers or --scheduler")
    from objrec.cluster import check_workers

    check_workers(workers, scheduler)
    if (workers is not None or scheduler is not None) and importlib.util.find_spec("distributed") is None:
        what = "--workers" if workers is not None else "--scheduler"
        also = "; --threads N runs the work in this process" if "threads" in args else ""
        raise ValueError(f"{what}: a Dask cluster needs Dask: pip install 'objrec[dask]'{also}")
    return workers, scheduler


# --- recognition (detect, run) ------------------------------------------------------------------------------------
TILTS_HELP = (
    "also search tilted views of an image where a candidate stays unsure, for objects seen far from head-on: the "
    "tilts, comma-separated numbers above 1 (2,4: 60 and 75 degrees from the normal; such an image then costs "
    "about 15 more searches of that region; default: none; only without a budget)"
)
SAMPLE_STEP_HELP = (
    "SURF's sampling step in frames: 1 as the enrolled models (OpenCV's), 2 about half the detector's time for a "
    "few of the smallest keypoints (default: 1, and 2 when a budget needs it)"
)


def add_recognition_options(parser: argparse.ArgumentParser, budget_ms: float | None) -> None:
    """The options of a command that recognises objects with a :class:`~objrec.recognizer.Recognizer`
    (``detect``, ``run``), on the command's ``parser``; :func:`recognizer_options` reads them. ``budget_ms`` is
    the command's default budget (None: none)."""
    parser.add_argument("--db", required=True, help="model database directory")
    parser.add_argument(
        "--backend",
        default="auto",
        choices=["auto", "cpu", "gpu"],
        help="compute backend (default auto: the GPU when one is usable, else the CPU)",
    )
    default = f"default {budget_ms:g}" if budget_ms is not None else "default: none, every frame searched in full"
    parser.add_argument(
        "--budget-ms",
        type=float,
        default=budget_ms,
        metavar="MS",
        help=f"per-frame latency budget in ms: optional work is admitted only while predicted to fit ({default})",
    )
    parser.add_argument(
        "--detectors",
        metavar="LIST",
        help="a subset of the database's detectors, comma-separated (sift, surf; default: all it has)",
    )
    parser.add_argument("--ratio", type=float, default=0.75, help="Lowe's ratio-test threshold (default 0.75)")
    parser.add_argument(
        "--exact-matching",
        action="store_true",
        help="exact brute-force 2-NN against every object for every database size (default: a spill-tree index "
        "for SIFT databases of 2048+ descriptors, about half the work, and a retrieval shortlist for catalogues)",
    )
    parser.add_argument("--sample-step", type=int, choices=(1, 2), help=SAMPLE_STEP_HELP)
    parser.add_argument(
        "--no-prefilter", action="store_true", help="search whole frames, even where the database has a prefilter"
    )


def detectors_arg(text: str | None) -> list[str] | None:
    """The detector kinds of a ``--detectors sift,surf`` option (None when not given)."""
    if text is None:
        return None
    kinds = [k.strip() for k in text.split(",") if k.strip()]
    for k in kinds:
        if k not in ("sift", "surf"):
            raise ValueError(f"--detectors: unknown detector {k!r} (choose from sift, surf)")
    return kinds


def recognizer_options(args: argparse.Namespace) -> dict[str, Any]:
    """The :class:`~objrec.recognizer.Recognizer` keyword arguments of :func:`add_recognition_options`'s
    options, checked (a ``ValueError`` naming the option)."""
    if args.budget_ms is not None and not args.budget_ms > 0:
        raise ValueError(f"--budget-ms: expected a positive number, got {args.budget_ms}")
    if not 0 < args.ratio <= 1:
        raise ValueError(f"--ratio: expected a number in (0, 1], got {args.ratio}")
    return {
        "budget_ms": args.budget_ms,
        "backend": args.backend,
        "detectors": detectors_arg(args.detectors),
        "ratio": args.ratio,
        "prefilter": None if args.no_prefilter else "auto",
        "exact_matching": args.exact_matching,
        "sample_step": args.sample_step,
    }
