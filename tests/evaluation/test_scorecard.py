"""The whole-system scorecard (``bench/scorecard.py``): how figures combine and compare with their baseline, and
the CI subset against the landed baseline (``bench/scorecard_baseline.json``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"
sys.path.insert(0, str(BENCH))

from scorecard_core import (  # noqa: E402
    Figure,
    combine_runs,
    compare,
    count,
    cover_machine,
    load_figures,
    render_comparison,
    share,
)


def _found(value: int, **kw) -> Figure:
    return count(value, 100, "held_out", "smvs_dvd", unit="photos", gated=True, **kw)


def test_count_spread_is_at_least_one():
    assert _found(90).spread == 1
    assert _found(90, spread=3).spread == 3


def test_figure_rejects_unknown_fields():
    with pytest.raises(ValueError, match="split"):
        Figure(1.0, "px", "lower", "train", "x", "accuracy")
    with pytest.raises(ValueError, match="better"):
        Figure(1.0, "px", "up", "tuning", "x", "accuracy")
    with pytest.raises(ValueError, match="kind"):
        Figure(1.0, "px", "lower", "tuning", "x", "speed")


def test_deliberately_worsened_figure_is_flagged():
    base = {"smvs.found": _found(97), "pairs.solved": count(8, 9, "tuning", "pairs", gated=True)}
    worse = {"smvs.found": _found(95), "pairs.solved": count(8, 9, "tuning", "pairs", gated=True)}
    rows = {c.name: c for c in compare(worse, base)}
    assert rows["smvs.found"].flag == "worse" and rows["smvs.found"].failed
    assert rows["pairs.solved"].flag == "same" and not rows["pairs.solved"].failed
    assert "WORSE" in render_comparison(list(rows.values()))


def test_change_within_spread_is_not_flagged():
    base = {"smvs.found": _found(97)}
    assert compare({"smvs.found": _found(96)}, base)[0].flag == "same"
    assert compare({"smvs.found": _found(99)}, base)[0].flag == "better"


def test_lower_is_better_direction():
    base = {"false.n": count(0, 400, "held_out", "x", better="lower", gated=True)}
    assert compare({"false.n": count(2, 400, "held_out", "x", better="lower", gated=True)}, base)[0].flag == "worse"
    assert compare({"false.n": count(1, 400, "held_out", "x", better="lower", gated=True)}, base)[0].flag == "same"


def test_share_uses_the_larger_spread():
    base = {"r": share(0.50, "tuning", "x", spread=0.04)}
    assert compare({"r": share(0.47, "tuning", "x")}, base)[0].flag == "same"
    assert compare({"r": share(0.45, "tuning", "x")}, base)[0].flag == "worse"


def test_missing_and_undefined_figures_fail():
    base = {"smvs.found": _found(97), "smvs.other": _found(50), "pairs.x": _found(3)}
    rows = {c.name: c for c in compare({"smvs.found": _found(None)}, base, entries=["smvs"])}
    assert rows["smvs.found"].flag == "undefined" and rows["smvs.found"].failed
    assert rows["smvs.other"].flag == "missing" and rows["smvs.other"].failed
    assert "pairs.x" not in rows  # its entry did not run


def test_combine_runs_takes_median_and_range():
    runs = [{"a": share(v, "tuning", "x", floor=0.0)} for v in (0.80, 0.90, 0.86, 0.84, 0.88)]
    fig = combine_runs(runs)["a"]
    assert fig.value == pytest.approx(0.86)
    assert fig.spread == pytest.approx(0.10)
    assert fig.runs == [0.80, 0.90, 0.86, 0.84, 0.88]


def test_baseline_round_trips(tmp_path):
    figs = {"smvs.found": _found(97, note="n")}
    path = tmp_path / "b.json"
    path.write_text(json.dumps({"figures": {k: f.to_json() for k, f in figs.items()}}))
    back = load_figures(path)
    assert back["smvs.found"] == figs["smvs.found"]
    path.write_text("[]")
    with pytest.raises(ValueError, match="not a scorecard"):
        load_figures(path)


def test_landed_baseline_is_well_formed():
    figs = load_figures(BENCH / "scorecard_baseline.json")
    from scorecard_entries import CI_ENTRIES

    gated = [n for n, f in figs.items() if f.gated]
    assert {n.split(".")[0] for n in gated} <= set(CI_ENTRIES)
    for entry in CI_ENTRIES:
        assert any(n.startswith(entry + ".") for n in gated), f"no gated baseline figure for {entry}"
    for f in figs.values():
        assert f.value is None or f.spread >= f.floor


def test_gate_fails_on_a_worsened_figure_from_the_command_line(tmp_path):
    """``scorecard.py --from`` a scorecard with one gated figure made worse: exit 1, the figure flagged in
    ``compare.txt``, and the comparison drawn; the same scorecard without the drop passes."""
    base = {"smvs.found": _found(97), "still.jitter": Figure(0.03, "px", "lower", "tuning", "x", "accuracy")}
    (tmp_path / "base.json").write_text(json.dumps({"figures": {k: f.to_json() for k, f in base.items()}}))
    for value, rc in ((94, 1), (97, 0)):
        now = {"smvs.found": _found(value), "still.jitter": Figure(0.9, "px", "lower", "tuning", "x", "accuracy")}
        doc = {"entries": ["smvs", "still"], "figures": {k: f.to_json() for k, f in now.items()}}
        (tmp_path / "now.json").write_text(json.dumps(doc))
        out = tmp_path / f"out{value}"
        cmd = [sys.executable, str(BENCH / "scorecard.py"), "--from", str(tmp_path / "now.json"), "--compare",
               str(tmp_path / "base.json"), "--gate", "--out", str(out)]  # fmt: skip
        r = subprocess.run(cmd, capture_output=True, text=True)
        assert r.returncode == rc, r.stdout + r.stderr
        text = (out / "compare.txt").read_text()
        assert ("WORSE" in text.split("smvs.found")[1].splitlines()[0]) == (rc == 1)
        assert "WORSE (not gated)" in text.split("still.jitter")[1].splitlines()[0]  # worse, but not gated
    assert (tmp_path / "out94" / "compare.png").is_file()


@pytest.mark.slow
def test_ci_subset_holds_the_baseline(shared_data, tmp_path):
    """The untimed entries, run now, against the landed baseline: no gated figure worse than its spread."""
    env = dict(os.environ, OBJREC_SHARED_DATA=str(shared_data))
    cmd = [sys.executable, str(BENCH / "scorecard.py"), "--subset", "ci", "--out", str(tmp_path), "--compare", "--gate"]
    r = subprocess.run(cmd, env=env, capture_output=True, text=True)
    report = (tmp_path / "compare.txt").read_text() if (tmp_path / "compare.txt").exists() else r.stdout[-4000:]
    assert r.returncode == 0, f"scorecard CI subset failed:\n{report}\n{r.stderr[-3000:]}"


def test_speed_notes_name_a_slower_machine_and_other_libraries():
    """Two runs' machine facts: an anchor twice as slow and another OpenCV version are both named; facts within
    the tolerance and the same versions give no note; a baseline without facts says the timings may not compare."""
    from machine import SPEED_TOLERANCE, speed_notes

    before = {"sift_ms": 40.0, "python_ms": 5.0, "jitter": 1.1, "versions": {"opencv-contrib-python": "4.10.0"}}
    slower = {**before, "sift_ms": 80.0, "versions": {"opencv-contrib-python": "5.1.0"}}
    notes = speed_notes(slower, before)
    assert any("sift_ms" in n and "2.00x" in n for n in notes), notes
    assert any("opencv-contrib-python: 5.1.0 now, 4.10.0 before" in n for n in notes), notes
    assert not any("python_ms" in n or "jitter" in n for n in notes), notes
    close = {**before, "sift_ms": 40.0 * (SPEED_TOLERANCE - 0.01)}
    assert speed_notes(close, before) == []
    assert "not recorded" in speed_notes(before, "2 cores, x86_64")[0]


def test_comparison_names_the_machines_difference(tmp_path):
    """``--from`` with machine facts in both scorecards: compare.txt opens with the anchor that moved."""
    fig = {"smvs.found": _found(97).to_json()}
    base = {"machine": {"sift_ms": 40.0, "versions": {}}, "figures": fig}
    now = {"machine": {"sift_ms": 90.0, "versions": {}}, "entries": ["smvs"], "figures": fig}
    (tmp_path / "base.json").write_text(json.dumps(base))
    (tmp_path / "now.json").write_text(json.dumps(now))
    cmd = [sys.executable, str(BENCH / "scorecard.py"), "--from", str(tmp_path / "now.json"), "--compare",
           str(tmp_path / "base.json"), "--out", str(tmp_path / "out")]  # fmt: skip
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout + r.stderr
    first = (tmp_path / "out" / "compare.txt").read_text().splitlines()[0]
    assert first.startswith("note: anchor sift_ms: 90.00 now, 40.00 before (2.25x)"), first


def test_covering_another_machine_widens_only_what_it_found_worse():
    """A gated figure another machine measured worse gets a spread of exactly that difference (the gate then
    passes there, and fails one count further), with the value kept; a figure it measured better, or an
    ungated one, keeps its spread."""
    base = {
        "ukbench.2-view": _found(117),
        "rating.rho": share(0.379, "held_out", "smvs_dvd", unit="rho", floor=0.02, gated=True),
        "smvs.found": _found(98),
        "cli.detect_s": Figure(0.6, "s", "lower", "tuning", "x", "timing", spread=0.1),
    }
    other = {
        "ukbench.2-view": _found(115),
        "rating.rho": share(0.275, "held_out", "smvs_dvd", unit="rho", floor=0.02, gated=True),
        "smvs.found": _found(99),
        "cli.detect_s": Figure(1.4, "s", "lower", "tuning", "x", "timing"),
    }
    widened = cover_machine(base, other, "another machine")
    assert sorted(widened) == ["rating.rho", "ukbench.2-view"]
    assert base["ukbench.2-view"].value == 117 and base["ukbench.2-view"].spread == 2
    assert abs(base["rating.rho"].spread - 0.104) < 1e-9
    assert base["smvs.found"].spread == 1 and base["cli.detect_s"].spread == 0.1
    assert "115 on another machine" in base["ukbench.2-view"].note
    assert not [c.name for c in compare(other, base) if c.gated and c.failed]
    one_less = compare({"ukbench.2-view": _found(114)}, base, ["ukbench"])
    assert [c.name for c in one_less if c.failed] == ["ukbench.2-view"]


def test_a_new_baseline_keeps_the_spread_that_covers_another_machine():
    """``--write-baseline`` over a baseline whose gated figure covers another machine: the new run's narrower
    spread gives way to the covering one (noted); a figure no other machine needed keeps the new run's."""
    from scorecard import with_figures

    base = {
        "figures": {"ukbench.2": _found(117, spread=2).to_json(), "smvs.found": _found(98, spread=3).to_json()},
        "other_machines": [{"machine": {"cpu": "x"}, "widened": ["ukbench.2"]}],
    }
    new = with_figures(base, {"ukbench.2": _found(118), "smvs.found": _found(99)}, {"cpu": "y"})
    assert new["figures"]["ukbench.2"]["value"] == 118 and new["figures"]["ukbench.2"]["spread"] == 2
    assert "other_machines" in new["figures"]["ukbench.2"]["note"]
    assert new["figures"]["smvs.found"]["spread"] == 1 and new["machine"] == {"cpu": "y"}
    assert new["other_machines"] == base["other_machines"]


def test_a_rating_figure_moves_by_one_photo_within_its_floor():
    """A rating correlation's floor is the most that one photo found or missed moves it: the largest change of
    any single photo's verdict flipped (the correlation recomputed from the verdicts with SciPy), which the
    comparison does not flag; an undefined correlation moves by nothing."""
    import numpy as np
    from scipy.stats import spearmanr
    from scorecard_entries import RATING_FLOOR, one_photo_move

    rng = np.random.default_rng(5)
    scores = rng.integers(0, 101, 40).astype(float)
    verdicts = (rng.random((40, 3)) < np.clip(scores / 100 + 0.2, 0, 1)[:, None]).astype(float)
    found = verdicts.mean(1)
    rho = spearmanr(scores, found).statistic
    floor = one_photo_move(scores, found, [3] * 40)
    moves = []
    for i in range(40):
        for j in range(3):
            v = verdicts.copy()
            v[i, j] = 1 - v[i, j]
            moves.append(abs(spearmanr(scores, v.mean(1)).statistic - rho))
    assert floor == pytest.approx(max(moves), abs=1e-12)
    assert floor > RATING_FLOOR  # 40 objects of 3 photos: one photo moves the correlation more than 0.02
    base = share(rho, "held_out", "ukbench", unit="rho", floor=floor, gated=True)
    one = share(rho - floor, "held_out", "ukbench", unit="rho", floor=floor, gated=True)
    (c,) = compare({"rating.rho": one}, {"rating.rho": base})
    assert c.flag == "same"
    assert one_photo_move([1, 2, 3], [1.0, 1.0, 1.0], [4, 4, 4]) == 0.0  # undefined correlation
