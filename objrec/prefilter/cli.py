"""The ``objrec train-prefilter`` subcommand (wired into :mod:`objrec.cli` through :func:`register`)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from objrec._cliargs import add_json, add_no_progress, print_json

__all__ = ["register", "cmd_train_prefilter"]


def _frame_size(text: str) -> tuple[int, int]:
    w, sep, h = text.lower().partition("x")
    try:
        size = (int(w), int(h))
    except ValueError:
        size = (0, 0)
    if not sep or size[0] < 64 or size[1] < 64:
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT of at least 64x64, got {text!r}")
    return size


def cmd_train_prefilter(args: argparse.Namespace) -> int:
    """Train a prefilter for ``--db`` and store it (default: with the database)."""
    from objrec.modeldb import ModelDB
    from objrec.prefilter.estimator import RegionPrefilter

    db = ModelDB.open(args.db)
    out = Path(args.out) if args.out else RegionPrefilter.default_path(db)
    pf = RegionPrefilter(
        cell_size=args.cell_size,
        target_recall=args.target_recall,
        cascade=args.cascade,
        max_depth=args.max_depth,
        random_state=args.seed,
    )
    pf.train(
        db,
        args.backgrounds or None,
        n_scenes=args.scenes,
        frame_size=args.frame_size,
        seed=args.seed,
        progress=not args.no_progress,
        video_step=args.video_step,
    )
    from objrec.prefilter.storage import save_for

    jpath, npath = save_for(pf, db, out)
    r: dict[str, Any] = pf.training_report_
    recall = r.get("calibration_region_area_recall")
    rejected = r.get("calibration_empty_area_rejected")
    if args.json:
        print_json(
            {
                "database_id": db.database_id,
                "objects": len(db),
                "scenes": r.get("n_scenes"),
                "cells": r.get("n_samples"),
                "threshold": float(pf.threshold_),
                "held_out_area_kept": recall,
                "held_out_empty_area_rejected": rejected,
                "written": [str(jpath), str(npath)],
            }
        )
        return 0
    print(
        f"prefilter for database {db.database_id} ({len(db)} object(s)): {r.get('n_scenes')} scenes, "
        f"{r.get('n_samples')} cells, threshold {pf.threshold_:.3f}"
    )
    if recall is not None:
        extra = f", empty-frame area rejected {rejected:.1%}" if rejected is not None else ""
        print(f"held-out training scenes: object area kept {recall:.2%}{extra}")
    print(f"wrote {jpath} and {npath}")
    return 0


def register(subparsers: Any) -> argparse.ArgumentParser:
    """Add ``train-prefilter`` to an ``argparse`` sub-parser collection; returns the new parser."""
    p = subparsers.add_parser(
        "train-prefilter",
        help="train the region prefilter for a model database",
        description="Train the decision-tree region prefilter for a model database: the enrolled objects are "
        "composited into background images and video frames, cells are labelled by their overlap with "
        "the objects, and a tree on cheap cell features learns which cells to reject. The threshold is "
        "chosen on held-out scenes to keep --target-recall of the object area. Stored with the database "
        "(DB/prefilter.json + DB/prefilter.npz) unless --out is given; enrolling more objects makes it "
        "stale until retrained.",
    )
    p.add_argument("--db", required=True, help="model database directory")
    p.add_argument(
        "--backgrounds",
        nargs="+",
        metavar="PATH",
        help="background images, folders of images, or videos (every --video-step-th frame); "
        "default: embedded sample backgrounds (no files needed)",
    )
    p.add_argument("--out", metavar="PATH", help="output stem or .json/.npz path (default: DB/prefilter)")
    p.add_argument("--scenes", type=int, default=400, help="training scenes to compose (default 400)")
    p.add_argument(
        "--frame-size", type=_frame_size, default=(640, 480), metavar="WxH", help="scene size (default 640x480)"
    )
    p.add_argument("--video-step", type=int, default=10, help="use every N-th video frame (default 10)")
    p.add_argument("--cell-size", type=int, default=16, help="cell side at the working resolution (default 16)")
    p.add_argument(
        "--target-recall",
        type=float,
        default=0.99,
        help="share of object area the regions keep on held-out scenes; higher keeps more frame (default 0.99)",
    )
    p.add_argument("--cascade", type=int, default=2, help="number of tree stages (default 2)")
    p.add_argument("--max-depth", type=int, default=8, help="depth of each tree (default 8)")
    p.add_argument("--seed", type=int, default=0, help="random seed for scenes and trees")
    add_no_progress(p)
    add_json(p, "the database's id, the training's figures and the files written")
    p.set_defaults(func=cmd_train_prefilter)
    return p
