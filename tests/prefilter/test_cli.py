"""The ``objrec train-prefilter`` subcommand, through its argparse registration."""

from __future__ import annotations

import argparse

import pytest

from objrec.prefilter import RegionPrefilter
from objrec.prefilter.cli import register


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="objrec")
    register(parser.add_subparsers(dest="command"))
    return parser


@pytest.mark.slow
def test_train_prefilter_writes_a_prefilter_for_the_database(db, tmp_path, capsys):
    out = tmp_path / "out" / "pf"
    args = _parser().parse_args(
        [
            "train-prefilter",
            "--db",
            str(db.path),
            "--scenes",
            "12",
            "--max-depth",
            "4",
            "--no-progress",
            "--out",
            str(out),
        ]
    )
    assert args.func(args) == 0
    printed = capsys.readouterr().out
    assert f"prefilter for database {db.database_id}" in printed and "wrote" in printed
    pf = RegionPrefilter.load(out, database_id=db.database_id)
    assert pf.get_params()["max_depth"] == 4 and pf.object_names_ == db.names


@pytest.mark.parametrize("size", ["10", "32x32", "axb"])
def test_frame_size_must_be_at_least_64_square(size):
    with pytest.raises(SystemExit):
        _parser().parse_args(["train-prefilter", "--db", "x", "--frame-size", size])
