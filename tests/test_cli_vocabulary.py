"""One vocabulary across the ``objrec`` commands: ``--out``, ``--json``, ``--no-progress``, ``--workers`` /
``--scheduler`` / ``--threads``, the recognition options ``detect`` and ``run`` share, and old spellings that
still parse with a note on stderr."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from contextlib import contextmanager

import cv2
import numpy as np
import pytest

from objrec._cliargs import (
    NO_PROGRESS_HELP,
    SCHEDULER_HELP,
    THREADS_HELP,
    WORKERS_HELP,
    DeprecatedAlias,
    add_deprecated_alias,
    add_recognition_options,
    recognizer_options,
)
from objrec.cli import build_parser, main
from objrec.data import sample_background, sample_objects
from objrec.scenes import compose_scene

#: The commands that can draw a progress bar: bulk enrolment and the prefilter training of --train-prefilter,
#: prefilter training, evaluation tasks, run's first-use prefilter training, index building and upgrades.
PROGRESS = {"enroll", "train-prefilter", "eval", "run", "db reindex", "db upgrade"}
#: The commands whose --out names a file, as the command-line contract fixes; every other --out is a folder.
OUT_FILE = {"run": "VIDEO", "train-prefilter": "PATH"}
#: The commands that run work on a Dask cluster.
CLUSTER = {"enroll", "eval", "db reindex"}


def _commands(parser: argparse.ArgumentParser, prefix: str = "") -> dict[str, argparse.ArgumentParser]:
    """Every leaf command of ``parser`` by its name (``"db reindex"``)."""
    out = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                full = f"{prefix} {name}".strip()
                nested = _commands(sub, full)
                out.update(nested or {full: sub})
    return out


def _options(p: argparse.ArgumentParser) -> dict[str, argparse.Action]:
    return {s: a for a in p._actions for s in a.option_strings}


COMMANDS = _commands(build_parser())


def test_the_walk_finds_every_command():
    assert {"enroll", "detect", "run", "demo", "rate", "eval", "train-prefilter", "cache"} <= set(COMMANDS)
    assert {"db list", "db info", "db reindex", "db upgrade", "db verify"} <= set(COMMANDS)


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_vocabulary_rules(name):
    opts = _options(COMMANDS[name])
    # Every command prints a result, so every one can print it as JSON.
    assert "--json" in opts and opts["--json"].nargs == 0, name
    if name in PROGRESS:
        assert "--no-progress" in opts, name
    if "--no-progress" in opts:
        assert opts["--no-progress"].help == NO_PROGRESS_HELP
    if "--out" in opts:
        assert opts["--out"].metavar == OUT_FILE.get(name, "DIR"), name
    assert ("--workers" in opts) == ("--scheduler" in opts) == (name in CLUSTER), name
    if "--workers" in opts:
        workers, scheduler = opts["--workers"], opts["--scheduler"]
        assert workers.help == WORKERS_HELP and workers.type is int and workers.metavar == "N"
        assert scheduler.help == SCHEDULER_HELP and scheduler.metavar == "ADDRESS"
        (group,) = [g for g in COMMANDS[name]._mutually_exclusive_groups if workers in g._group_actions]
        assert scheduler in group._group_actions
    if "--budget-ms" in opts:
        assert opts["--budget-ms"].metavar == "MS" and opts["--budget-ms"].type is float, name
    if "--detectors" in opts:
        assert opts["--detectors"].metavar == "LIST", name
    if "--threads" in opts:
        assert opts["--threads"].help.endswith(THREADS_HELP) and opts["--threads"].type is int
    # Old spellings parse but are not shown; --annotate is nothing else.
    for spelling, action in opts.items():
        if isinstance(action, DeprecatedAlias):
            assert action.help == argparse.SUPPRESS, (name, spelling)
    if "--annotate" in opts:
        assert isinstance(opts["--annotate"], DeprecatedAlias), name


def test_detect_and_run_share_their_recognition_options():
    """Every recognition option is in both commands with the same form and help; only the budget's default
    differs (none for still images, 33 ms for a stream)."""
    p = argparse.ArgumentParser()
    add_recognition_options(p, budget_ms=None)
    shared = [s for s in _options(p) if s not in ("-h", "--help")]
    assert {"--db", "--backend", "--budget-ms", "--detectors", "--ratio", "--exact-matching"} <= set(shared)
    assert {"--sample-step", "--no-prefilter"} <= set(shared)
    detect, run = _options(COMMANDS["detect"]), _options(COMMANDS["run"])
    for s in shared:
        d, r = detect[s], run[s]
        assert (d.dest, d.type, d.nargs, d.choices, d.required) == (r.dest, r.type, r.nargs, r.choices, r.required)
        if s != "--budget-ms":
            assert d.help == r.help and d.default == r.default, s
    assert detect["--budget-ms"].default is None and run["--budget-ms"].default == 33.0


def test_recognizer_options_are_read_the_same_in_detect_and_run():
    argv = ["--db", "x", "--detectors", "sift", "--ratio", "0.8", "--exact-matching", "--sample-step", "2"]
    parser = build_parser()
    d = parser.parse_args(["detect", *argv, "--no-prefilter", "img.png"])
    r = parser.parse_args(["run", *argv, "--no-prefilter", "--source", "0", "--budget-ms", "50"])
    want = {"backend": "auto", "detectors": ["sift"], "ratio": 0.8, "prefilter": None, "exact_matching": True}
    want["sample_step"] = 2
    assert recognizer_options(d) == {**want, "budget_ms": None}
    assert recognizer_options(r) == {**want, "budget_ms": 50.0}
    for bad, needle in ((["--ratio", "1.5"], "--ratio"), (["--budget-ms", "0"], "--budget-ms")):
        with pytest.raises(ValueError, match=needle):
            recognizer_options(parser.parse_args(["detect", "--db", "x", *bad, "img.png"]))
    with pytest.raises(ValueError, match="--detectors"):
        recognizer_options(parser.parse_args(["detect", "--db", "x", "--detectors", "orb", "img.png"]))


# --- old spellings --------------------------------------------------------------------------------------------------
def test_a_deprecated_alias_stores_as_the_new_spelling_and_says_so(capsys):
    p = argparse.ArgumentParser(prog="t")
    p.add_argument("--out", metavar="DIR", default="here")
    p.add_argument("--flag", action="store_true")
    add_deprecated_alias(p, "--annotate", "--out")
    add_deprecated_alias(p, "--old-flag", "--flag")
    assert vars(p.parse_args([])) == {"out": "here", "flag": False}
    assert capsys.readouterr().err == ""
    assert vars(p.parse_args(["--annotate", "x", "--old-flag"])) == {"out": "x", "flag": True}
    err = capsys.readouterr().err.splitlines()
    assert err == [
        "objrec: warning: --annotate is deprecated and will be removed in the next release; use --out DIR",
        "objrec: warning: --old-flag is deprecated and will be removed in the next release; use --flag",
    ]
    assert "--annotate" not in p.format_help() and "--old-flag" not in p.format_help()


def test_detect_annotate_parses_as_out(capsys):
    parser = build_parser()
    new = parser.parse_args(["detect", "--db", "d", "--out", "pics", "a.png"])
    assert capsys.readouterr().err == ""
    old = parser.parse_args(["detect", "--db", "d", "--annotate", "pics", "a.png"])
    assert old.out == new.out == "pics"
    err = capsys.readouterr().err.strip()
    assert err == "objrec: warning: --annotate is deprecated and will be removed in the next release; use --out DIR"


@pytest.mark.parametrize("command", [["enroll", "--db", "d", "--from", "f"], ["db", "reindex", "--db", "d"]])
def test_cluster_local_parses_with_a_note_and_threads_have_their_own_name(command, capsys):
    parser = build_parser()
    a = parser.parse_args([*command, "--workers", "3"])
    assert (a.workers, a.threads, a.scheduler, a.cluster) == (3, None, None, None)
    assert capsys.readouterr().err == ""
    a = parser.parse_args([*command, "--cluster", "local", "--workers", "3"])
    assert (a.workers, a.cluster) == (3, "local")
    err = capsys.readouterr().err
    assert "--cluster is deprecated" in err and "use --workers N" in err
    a = parser.parse_args([*command, "--threads", "2"])
    assert (a.workers, a.threads) == (None, 2)
    for clash in (["--threads", "2", "--workers", "2"], ["--workers", "2", "--scheduler", "tcp://h:1"]):
        with pytest.raises(SystemExit):
            parser.parse_args([*command, *clash])


# --- where the work runs: enroll and db reindex -------------------------------------------------------------------
@pytest.fixture
def images(tmp_path_factory):
    d = tmp_path_factory.mktemp("vocab")
    objs = sample_objects()
    folder = d / "folder"
    folder.mkdir()
    cv2.imwrite(str(folder / "cover.png"), objs["cover"])
    scene = compose_scene(
        sample_background((640, 480)), {"cover": objs["cover"]}, rng=1, frame_size=(640, 480),
        area_fraction=(0.12, 0.18),
    )  # fmt: skip
    cv2.imwrite(str(d / "scene.png"), scene.image)
    return {"dir": d, "folder": folder, "cover": folder / "cover.png", "scene": d / "scene.png"}


def test_enroll_workers_is_a_dask_cluster_and_threads_stay_here(images, tmp_path, monkeypatch, capsys):
    """--workers N starts a local Dask cluster of N processes, --cluster local (deprecated) one of --workers or
    the usable cores, --scheduler connects; --threads N is the extraction threads of this process."""
    pytest.importorskip("distributed", reason="--workers needs Dask (pip install 'objrec[dask]')")
    import objrec.cluster
    from objrec._threads import usable_cores
    from objrec.modeldb import ModelDB

    asked, handed = [], []

    @contextmanager
    def fake_client(workers=None, scheduler=None):
        asked.append((workers, scheduler))
        yield "client", "fake"

    def fake_enroll_many(self, items, **kwargs):
        from objrec.modeldb.records import EnrollReport

        handed.append((kwargs["workers"], kwargs["scheduler"], kwargs["progress"]))
        return EnrollReport()

    monkeypatch.setattr(objrec.cluster, "dask_client", fake_client)
    monkeypatch.setattr(ModelDB, "enroll_many", fake_enroll_many)
    argv = ["enroll", "--db", str(tmp_path / "db"), "--from", str(images["folder"]), "--no-progress"]
    assert main([*argv, "--workers", "3"]) == 0
    assert main([*argv, "--cluster", "local", "--workers", "2"]) == 0
    assert main([*argv, "--cluster", "local"]) == 0
    assert main([*argv, "--scheduler", "tcp://h:1"]) == 0
    assert main([*argv, "--threads", "2"]) == 0
    assert asked == [(3, None), (2, None), (usable_cores(), None), (None, "tcp://h:1")]
    assert handed == [(None, "client", False)] * 4 + [(2, None, False)]
    err = capsys.readouterr().err
    assert err.count("--cluster is deprecated") == 2
    assert main([*argv, "--threads", "0"]) == 2
    assert "--threads: expected a positive integer" in capsys.readouterr().err


def test_reindex_workers_threads_and_progress(sample_db, monkeypatch, capsys):
    import objrec.matching.shortlist as shortlist

    seen = []

    def fake_prepare(db, **kwargs):
        seen.append(kwargs)
        return []

    monkeypatch.setattr(shortlist, "prepare_indexes", fake_prepare)
    argv = ["db", "reindex", "--db", str(sample_db.path), "--json"]
    assert main([*argv, "--threads", "2", "--no-progress"]) == 0
    assert main([*argv, "--workers", "2"]) == 0
    assert main([*argv, "--scheduler", "tcp://h:1", "--send-bytes"]) == 0
    assert [(k["workers"], k["scheduler"], k["progress"], k["send_bytes"]) for k in seen] == [
        (2, None, False, False),
        (2, "local", True, False),
        (None, "tcp://h:1", True, True),
    ]


def test_eval_takes_the_same_cluster_options():
    from objrec.evaluation.cli import config_from_args

    parser = build_parser()
    cfg = config_from_args(parser.parse_args(["eval", "synthetic:demo", "--out", "o", "--workers", "2"]))
    assert (cfg.workers, cfg.scheduler) == (2, None)
    cfg = config_from_args(parser.parse_args(["eval", "synthetic:demo", "--out", "o", "--scheduler", "tcp://h:1"]))
    assert (cfg.workers, cfg.scheduler) == (None, "tcp://h:1")


# --- --out, --json and --no-progress at work --------------------------------------------------------------------
def test_detect_out_writes_annotated_images_and_annotate_still_works(images, tmp_path, capsys):
    db = str(tmp_path / "db")
    assert main(["enroll", "--db", db, f"cover={images['cover']}", "--json"]) == 0
    enrolled = json.loads(capsys.readouterr().out)
    assert [e["name"] for e in enrolled["enrolled"]] == ["cover"] and enrolled["objects"] == 1
    for option, folder in (("--out", tmp_path / "new"), ("--annotate", tmp_path / "old")):
        assert main(["detect", "--db", db, "--json", option, str(folder), str(images["scene"])]) == 0
        cap = capsys.readouterr()
        (res,) = json.loads(cap.out)["results"]
        assert [d["name"] for d in res["detections"]] == ["cover"]
        picture = folder / "scene_detections.png"
        assert res["picture"] == str(picture) and cv2.imread(str(picture)).shape == (480, 640, 3)
        assert ("--annotate is deprecated" in cap.err) == (option == "--annotate")


def test_json_is_the_only_thing_on_stdout(images, tmp_path, capsys):
    """enroll, db, detect, rate and run with --json print exactly one JSON document on stdout."""
    db = str(tmp_path / "db")
    frames = tmp_path / "frames"
    frames.mkdir()
    scene = cv2.imread(str(images["scene"]))
    for i in range(2):
        cv2.imwrite(str(frames / f"{i:03d}.png"), scene)
    runs = [
        ["enroll", "--db", db, "--from", str(images["folder"]), "--no-progress", "--json"],
        ["enroll", "--db", db, f"again={images['cover']}", "--json"],  # a look-alike: a warning in the document
        ["db", "list", "--db", db, "--json"],
        ["detect", "--db", db, "--json", str(images["scene"])],
        ["rate", "--json", str(images["cover"])],
        ["run", "--db", db, "--source", str(frames), "--no-display", "--no-adapt", "--budget-ms", "1000", "--json"],
    ]
    docs = []
    for argv in runs:
        assert main(argv) == 0, argv
        docs.append(json.loads(capsys.readouterr().out))  # the whole of stdout is one document
    assert docs[0]["from"]["enrolled"] == ["cover"] and docs[0]["objects"] == 1
    assert any("again looks like cover" in w for w in docs[1]["warnings"])
    assert docs[5]["frames"] == 2 and "per_frame" not in docs[5] and docs[5]["budget_ms"] == 1000.0


@pytest.mark.slow
def test_json_of_demo_eval_and_train_prefilter(sample_db, tmp_path, capsys):
    """The commands that write a folder or a file also print their result as one JSON document."""
    argv = ["demo", "--frames", "0", "--out", str(tmp_path / "demo"), "--json"]
    assert main(argv) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["all_found"] and {d["name"] for d in doc["detections"]} == {"pagoda", "dahlia", "cover"}
    assert str(tmp_path / "demo" / "demo_result.png") in doc["written"]
    argv = ["eval", "synthetic:demo", "--detectors", "orb", "--sweeps", "rotation", "--repeats", "1"]
    assert main([*argv, "--no-plots", "--no-progress", "--out", str(tmp_path / "eval"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["run"]["tasks"] > 0 and str(tmp_path / "eval" / "report.json") in doc["written"]
    out = tmp_path / "pf" / "prefilter"
    argv = ["train-prefilter", "--db", str(sample_db.path), "--scenes", "12", "--no-progress", "--out", str(out)]
    assert main([*argv, "--json"]) == 0
    cap = capsys.readouterr()
    doc = json.loads(cap.out)
    assert doc["database_id"] == sample_db.database_id and doc["written"] == [f"{out}.json", f"{out}.npz"]
    assert "composing scenes" not in cap.err  # --no-progress: no bar


def test_run_no_progress_reaches_the_first_use_prefilter_training(sample_db, monkeypatch):
    """Without a stored prefilter, run trains one before adapting it: with a bar unless --no-progress."""
    from objrec.cli import _run_prefilter
    from objrec.prefilter.estimator import RegionPrefilter

    seen = []
    monkeypatch.setattr(RegionPrefilter, "train", lambda self, db, bgs, progress=True: seen.append(progress) or self)
    parser = build_parser()
    base = ["run", "--db", str(sample_db.path), "--source", "0"]
    for extra, want in (([], True), (["--no-progress"], False)):
        pf, trained = _run_prefilter(sample_db, parser.parse_args([*base, *extra]))
        assert isinstance(pf, RegionPrefilter) and trained
        assert seen[-1] is want
    assert _run_prefilter(sample_db, parser.parse_args([*base, "--no-adapt"])) == ("auto", False)
    assert _run_prefilter(sample_db, parser.parse_args([*base, "--no-prefilter"])) == (None, False)


@pytest.mark.parametrize("command", ["run", "train-prefilter"])
def test_a_video_that_cannot_be_opened_shows_no_third_party_log(sample_db, tmp_path, command):
    """A truncated .mp4 (its index, FFmpeg's moov atom, cut off): objrec's one-line error naming the file, and no
    line of FFmpeg's or OpenCV's own log."""
    whole = tmp_path / "whole.mp4"
    writer = cv2.VideoWriter(str(whole), cv2.VideoWriter_fourcc(*"mp4v"), 30.0, (64, 48))
    for i in range(30):
        writer.write(np.full((48, 64, 3), 8 * i, np.uint8))
    writer.release()
    video = tmp_path / "clip.mp4"
    video.write_bytes(whole.read_bytes()[: whole.stat().st_size // 2])
    if command == "run":
        argv = ["run", "--db", str(sample_db.path), "--source", str(video), "--no-display"]
    else:
        argv = ["train-prefilter", "--db", str(sample_db.path), "--backgrounds", str(video), "--out", str(tmp_path)]
    r = subprocess.run([sys.executable, "-m", "objrec", *argv], capture_output=True, text=True, timeout=600)
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"objrec {command}: error: ") and "clip.mp4" in lines[0], r.stderr
    assert "[mov,mp4" not in r.stderr and "[ WARN" not in r.stderr and "[ERROR" not in r.stderr
