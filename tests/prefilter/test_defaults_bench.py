"""``bench/bench_prefilter_defaults.py --train-seeds N``: every set trained once per seed, each seed's figures
kept, and their summary computed from them (not from the first seed alone)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))

import bench_prefilter_defaults as bpd  # noqa: E402

PARTS = ("tuning", "hold-out")
SOURCES = ("video", "photos", "still")


def _fake_run(seed: int, set_name: str) -> dict:
    """Figures that differ by seed, set, part and source, so a mix-up between any of them shows."""
    out: dict = {"train_s": 1.0}
    for p, part in enumerate(PARTS):
        per = {
            src: {
                "empty_rejected": (seed * 7 + p * 3 + s + len(set_name)) % 10 / 10,
                "object_area_kept": 0.99 + s / 1000,
            }
            for s, src in enumerate(SOURCES)
        }
        r = {k: float(np.mean([v[k] for v in per.values()])) for k in ("empty_rejected", "object_area_kept")}
        out[part] = {**r, "sources": per}
    return out


def test_each_seed_is_trained_and_summarised(tmp_path, monkeypatch):
    calls = []

    def fake_train_and_measure(objects, parts, seed):
        name = next(iter(objects))
        calls.append((name, seed))
        return _fake_run(seed, name)

    monkeypatch.setattr(bpd, "find_data", lambda arg: tmp_path)
    monkeypatch.setattr(bpd, "background_parts", lambda data, n: {p: {s: [] for s in SOURCES} for p in PARTS})
    monkeypatch.setattr(bpd, "object_sets", lambda data, names: {n: {n: np.zeros((4, 4, 3), np.uint8)} for n in names})
    monkeypatch.setattr(bpd, "train_and_measure", fake_train_and_measure)
    out = tmp_path / "out.json"
    argv = ["bench_prefilter_defaults.py", "--sets", "a,bb", "--seed", "5", "--train-seeds", "3", "--json", str(out)]
    monkeypatch.setattr(sys, "argv", argv)
    assert bpd.main() == 0
    assert calls == [("a", 5), ("a", 6), ("a", 7), ("bb", 5), ("bb", 6), ("bb", 7)]
    res = json.loads(out.read_text())
    for name in ("a", "bb"):
        runs = [_fake_run(s, name) for s in (5, 6, 7)]
        assert res[name]["seed"] == 5
        assert res[name]["tuning"]["empty_rejected"] == pytest.approx(runs[0]["tuning"]["empty_rejected"])
        summary = res[name]["over_seeds"]
        assert summary["seeds"] == [5, 6, 7]
        for part in PARTS:
            video = np.array([r[part]["sources"]["video"]["empty_rejected"] for r in runs])
            mean3 = np.array([np.mean([r[part]["sources"][s]["empty_rejected"] for s in SOURCES]) for r in runs])
            got = summary[part]
            assert got["video_rejected"]["each"] == pytest.approx(list(video))
            assert got["video_rejected"]["mean"] == pytest.approx(video.mean())
            assert got["video_rejected"]["min"] == pytest.approx(video.min())
            assert got["video_rejected"]["range"] == pytest.approx(video.max() - video.min())
            assert got["rejected"]["each"] == pytest.approx(list(mean3))
            assert got["kept"]["min"] == pytest.approx(min(r[part]["object_area_kept"] for r in runs))


def test_one_seed_has_no_summary_and_zero_seeds_are_refused(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(bpd, "find_data", lambda arg: tmp_path)
    monkeypatch.setattr(bpd, "background_parts", lambda data, n: {p: {s: [] for s in SOURCES} for p in PARTS})
    monkeypatch.setattr(bpd, "object_sets", lambda data, names: {n: {n: np.zeros((4, 4, 3), np.uint8)} for n in names})
    monkeypatch.setattr(bpd, "train_and_measure", lambda objects, parts, seed: _fake_run(seed, "a"))
    out = tmp_path / "out.json"
    monkeypatch.setattr(sys, "argv", ["bench_prefilter_defaults.py", "--sets", "a", "--json", str(out)])
    assert bpd.main() == 0
    assert "over_seeds" not in json.loads(out.read_text())["a"]
    monkeypatch.setattr(sys, "argv", ["bench_prefilter_defaults.py", "--train-seeds", "0"])
    with pytest.raises(SystemExit) as e:
        bpd.main()
    assert e.value.code == 2
    assert "--train-seeds: expected at least 1, got 0" in capsys.readouterr().err
