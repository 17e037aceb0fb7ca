"""Enrolment rates each view from the features it extracted, stores the rating, prints it, refuses below
--min-rating and lists the weakest images of a bulk enrolment."""

from __future__ import annotations

import json

import cv2
import numpy as np
import pytest

from objrec.cli import main
from objrec.data import sample_objects, sample_photos
from objrec.rating import RATING_VERSION, rate


@pytest.fixture(scope="module")
def images(tmp_path_factory):
    """A good cover, a good photo and a repetitive (tiled) image, as files."""
    root = tmp_path_factory.mktemp("enrol_rating")
    patch = np.ascontiguousarray(sample_photos()["china"][100:260, 200:360])
    imgs = {
        "cover": sample_objects()["cover"],
        "pagoda": sample_objects()["pagoda"],
        "tiled": np.tile(patch, (3, 3, 1)),
    }
    paths = {}
    for name, img in imgs.items():
        paths[name] = root / "src" / f"{name}.png"
        paths[name].parent.mkdir(exist_ok=True)
        cv2.imwrite(str(paths[name]), img)
    return paths


def test_enrolment_stores_the_rating_of_its_own_features(images, tmp_path, monkeypatch):
    """Enrolment rates each view from the features it extracted and its pixels (no rendered views, nothing
    extracted again, even for an image on its side); ``ModelDB.rate`` then writes back the full rating."""
    from objrec.imageio import read_image, to_gray
    from objrec.modeldb import ModelDB
    from objrec.rating import rater
    from objrec.rating.measures import quarter_turned, upright_turns

    tiled = read_image(images["tiled"])
    upright = quarter_turned(tiled, upright_turns(to_gray(tiled)))
    side = cv2.rotate(upright, cv2.ROTATE_90_CLOCKWISE)
    assert upright_turns(to_gray(side)) != 0
    quick, full = rate(side, views=False), rate(side)
    assert not quick.views and full.views and quick.score >= full.score
    assert np.isnan(quick.measures["hard_views"]) and "hard_views" not in quick.codes

    def no_second_extraction(*a, **k):
        raise AssertionError("the rating extracted features again")

    with monkeypatch.context() as m:
        m.setattr(rater, "extract_model_features", no_second_extraction)
        db = ModelDB.create(tmp_path / "db")
        db.enroll("tiled", side)
    info = ModelDB.open(tmp_path / "db").info("tiled")
    assert info.rating == quick.score < 40
    assert info.rating_version == RATING_VERSION + "+features"
    assert list(info.rating_reasons) == [r.text for r in quick.reasons]
    db_id = db.database_id
    rated = db.rate()
    assert list(rated) == ["tiled"] and db.rate() == {}  # rated once, then nothing left to rate
    again = ModelDB.open(tmp_path / "db")
    info = again.info("tiled")
    assert info.rating == rate(again.image("tiled")).score == rated["tiled"].score
    assert info.rating_version == RATING_VERSION and again.database_id == db_id


def test_an_image_enrolled_on_its_side_is_rated_as_it_would_be_upright(images, tmp_path):
    from objrec.imageio import read_image, to_gray
    from objrec.modeldb import ModelDB
    from objrec.rating.measures import quarter_turned, upright_turns

    cover = read_image(images["cover"])
    upright = quarter_turned(cover, upright_turns(to_gray(cover)))
    side = cv2.rotate(upright, cv2.ROTATE_90_CLOCKWISE)
    assert upright_turns(to_gray(side)) != 0  # its features as enrolled are not those of the upright image
    cv2.imwrite(str(tmp_path / "side.png"), side)
    db = ModelDB.create(tmp_path / "db")
    db.enroll("side", str(tmp_path / "side.png"))
    db.rate(["side"])
    assert ModelDB.open(tmp_path / "db").info("side").rating == rate(upright).score == rate(side).score


def test_enroll_prints_ratings_and_warns_below_40(images, tmp_path, capsys):
    db = str(tmp_path / "db")
    assert main(["enroll", "--db", db, f"cover={images['cover']}", f"tiled={images['tiled']}"]) == 0
    out = capsys.readouterr().out
    cover_line = out.split("enrolled cover")[1].splitlines()[1]
    tiled_line = out.split("enrolled tiled")[1].splitlines()[1]
    assert f"rating {rate(images['cover']).score}/100" in cover_line and "warning" not in cover_line
    assert "warning" in tiled_line and "repetitive" in tiled_line
    assert main(["db", "list", "--db", db]) == 0
    listed = capsys.readouterr().out
    assert f"rating {rate(images['tiled']).score}" in listed
    assert main(["db", "list", "--db", db, "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    rows = doc["objects"] if isinstance(doc, dict) else doc
    assert {r["name"]: r["rating"] for r in rows}["cover"] == rate(images["cover"]).score


def test_min_rating_refuses_before_anything_is_written(images, tmp_path, capsys):
    db = tmp_path / "db"
    argv = ["enroll", "--db", str(db), "--min-rating", "50", f"cover={images['cover']}", f"tiled={images['tiled']}"]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "tiled" in err and "below --min-rating 50" in err and "repetitive" in err
    from objrec.modeldb import ModelDB

    if db.exists():
        assert len(ModelDB.open(db)) == 0


def test_enroll_from_lists_the_weakest_and_min_rating_fails_items(images, tmp_path, capsys):
    folder = images["cover"].parent
    assert main(["enroll", "--db", str(tmp_path / "a"), "--from", str(folder), "--no-progress"]) == 0
    out = capsys.readouterr().out
    weakest = out.split("weakest images")[1].splitlines()[1:4]
    assert "tiled" in weakest[0] and "warning" in weakest[0]
    argv = ["enroll", "--db", str(tmp_path / "b"), "--from", str(folder), "--no-progress", "--min-rating", "50"]
    assert main(argv) == 2
    cap = capsys.readouterr()
    assert "failed tiled" in cap.err and "below the minimum 50" in cap.err
    assert "enrolled 2" in cap.out


def test_enroll_warns_when_a_new_image_looks_like_an_object_already_enrolled(images, tmp_path, capsys):
    """A photo of the enrolled cover (rotated, rescaled, noisy) under a new name is flagged as that cover; the
    pagoda, a different picture, is not, nor is the cover re-enrolled under its own name with --replace."""
    db = str(tmp_path / "db")
    assert main(["enroll", "--db", db, f"cover={images['cover']}"]) == 0
    assert main(["enroll", "--db", db, "--replace", f"cover={images['cover']}"]) == 0
    assert "looks like" not in capsys.readouterr().out  # itself, under its own name
    cover = cv2.imread(str(images["cover"]))
    h, w = cover.shape[:2]
    A = cv2.getRotationMatrix2D((w / 2, h / 2), 25.0, 0.8)
    photo = cv2.warpAffine(cover, A, (w, h), borderValue=(90, 120, 140))
    photo = np.clip(photo + np.random.default_rng(0).normal(0, 4, photo.shape), 0, 255).astype(np.uint8)
    path = tmp_path / "photo.png"
    cv2.imwrite(str(path), photo)
    assert main(["enroll", "--db", db, f"again={path}", f"pagoda={images['pagoda']}"]) == 0
    out = capsys.readouterr().out
    assert "again looks like cover" in out
    assert "pagoda looks like" not in out


def test_enroll_from_warns_about_look_alikes_already_enrolled(images, tmp_path, capsys):
    db = str(tmp_path / "db")
    assert main(["enroll", "--db", db, f"cover={images['cover']}"]) == 0
    src = tmp_path / "from"
    src.mkdir()
    cover = cv2.imread(str(images["cover"]))
    cv2.imwrite(str(src / "twin.png"), cv2.resize(cover, None, fx=0.7, fy=0.7, interpolation=cv2.INTER_AREA))
    cv2.imwrite(str(src / "pagoda.png"), cv2.imread(str(images["pagoda"])))
    capsys.readouterr()
    assert main(["enroll", "--db", db, "--from", str(src), "--no-progress"]) == 0
    out = capsys.readouterr().out
    assert "twin looks like cover" in out
    assert "pagoda looks like" not in out


def test_add_view_rates_the_view_and_min_rating_refuses_a_weak_one(images, tmp_path, capsys):
    db = str(tmp_path / "db")
    assert main(["enroll", "--db", db, f"cover={images['cover']}"]) == 0
    capsys.readouterr()
    assert main(["db", "add-view", "--db", db, "--json", "cover", str(images["pagoda"])]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["view"] == 1 and doc["rating"] == rate(images["pagoda"]).score
    assert main(["db", "add-view", "--db", db, "--min-rating", "40", "cover", str(images["tiled"])]) == 2
    assert "below the minimum 40" in capsys.readouterr().err
    from objrec.modeldb import ModelDB

    assert len(ModelDB.open(db).view_keys("cover")) == 2  # the refused view left nothing behind


def test_db_info_rating_writes_back_the_full_rating(images, tmp_path, capsys):
    """``enroll --from`` stores the ratings of the images' own features and says so; ``db info --rating``
    computes the full ones from the source files (the stored copies are lossy) and keeps them."""
    from objrec.modeldb import ModelDB

    db = str(tmp_path / "db")
    assert main(["enroll", "--db", db, "--from", str(images["cover"].parent), "--no-progress"]) == 0
    assert "from their own features" in capsys.readouterr().out
    assert ModelDB.open(db).info("cover").rating == rate(images["cover"], views=False).score
    assert main(["db", "info", "--db", db, "--rating", "--json", "cover"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["rating"] == rate(images["cover"]).score and doc["rating_version"] == RATING_VERSION
    again = ModelDB.open(db)
    assert again.info("cover").rating_version == RATING_VERSION
    assert again.info("tiled").rating_version == RATING_VERSION + "+features"  # only the object asked for
    assert main(["db", "info", "--db", db, "cover"]) == 0
    assert f"rating: {rate(images['cover']).score}/100" in capsys.readouterr().out
