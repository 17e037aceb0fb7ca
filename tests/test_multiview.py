"""Objects enrolled from several photos: one object, several views, in the database and in recognition."""

from __future__ import annotations

import json

import numpy as np
import pytest

from objrec import ModelDB, Recognizer
from objrec.data import sample_background, sample_objects, synthetic_cover
from objrec.modeldb import ModelDBError
from objrec.modeldb.records import split_key, view_key
from objrec.scenes import compose_scene, place_homography


@pytest.fixture()
def covers():
    return [synthetic_cover(s, (220, 280)) for s in (11, 12, 13)]


@pytest.fixture()
def db(tmp_path, covers):
    d = ModelDB.create(tmp_path / "db")
    d.enroll("box", covers[:2])
    return d


def test_view_keys_round_trip():
    assert view_key("a", 0) == "a" and view_key("a", 3) == "a#3"
    assert split_key("a#3") == ("a", 3) and split_key("a") == ("a", 0)


def test_a_list_enrols_one_object_with_its_views(db, covers, tmp_path, assert_stored_image):
    again = ModelDB.open(tmp_path / "db")
    assert again.names == ["box"] and len(again) == 1
    assert again.records == ["box", "box#1"]
    assert [again.info(k).view for k in again.records] == [0, 1]
    assert {again.info(k).object_name for k in again.records} == {"box"}
    assert_stored_image(again.image("box#1"), covers[1])
    assert_stored_image(again.image("box"), covers[0])  # an object's name reads its first view
    assert "box" in again and "box#1" in again and "box#2" not in again


def test_add_and_remove_views_keep_their_numbers(db, covers, assert_stored_image):
    assert db.add_view("box", covers[2]) == 2
    db.remove_view("box", 1)
    assert db.records == ["box", "box#2"]
    assert_stored_image(db.image("box#2"), covers[2])
    with pytest.raises(KeyError, match="no view 1"):
        db.remove_view("box", 1)
    db.remove_view("box", 0)
    assert db.names == ["box"] and db.records == ["box#2"]
    assert_stored_image(db.image("box"), covers[2])  # the first remaining view
    with pytest.raises(ModelDBError, match="only view"):
        db.remove_view("box", 2)
    assert db.add_view("box", covers[0]) == 3


def test_remove_rename_and_width_apply_to_every_view(db, covers):
    db.enroll("other", covers[2])
    db.rename("box", "crate")
    assert db.names == ["crate", "other"] and db.records == ["crate", "crate#1", "other"]
    db.set_width("crate", 0.3)
    assert [db.info(k).width_m for k in db.view_keys("crate")] == [0.3, 0.3]
    db.remove("crate")
    assert db.names == ["other"] and db.records == ["other"]


def test_replace_drops_views_it_does_not_bring_again(db, covers, assert_stored_image):
    with pytest.raises(ModelDBError, match="already enrolled"):
        db.enroll("box", covers[2])
    db.enroll("box", [covers[2]], replace=True)
    assert db.records == ["box"]
    assert_stored_image(db.image("box"), covers[2])


def test_enroll_many_takes_lists_and_resumes(tmp_path, covers):
    import cv2

    paths = []
    for i, c in enumerate(covers):
        p = tmp_path / f"c{i}.png"
        cv2.imwrite(str(p), c)
        paths.append(p)
    d = ModelDB.create(tmp_path / "many")
    report = d.enroll_many([("two", paths[:2]), ("one", paths[2])], progress=False)
    assert report.enrolled == ["two", "one"] and not report.failed
    assert d.records == ["two", "two#1", "one"]
    again = d.enroll_many([("two", paths[:2]), ("one", paths[2])], progress=False)
    assert again.skipped == ["two", "one"] and not again.enrolled
    changed = d.enroll_many([("two", [paths[1]])], progress=False)
    assert changed.failed and "already enrolled" in changed.failed[0].reason
    assert d.records == ["two", "two#1", "one"]  # nothing lost


def _frame_with(model, seed=3):
    h, w = model.shape[:2]
    H = place_homography((w, h), (320 + 10 * seed, 240), 220.0 / max(w, h), rotation_deg=15.0, tilt=(0.1, 0.0))
    scene = compose_scene(sample_background((640, 480)), {"x": model}, rng=seed, homographies={"x": H})
    return scene, H


@pytest.mark.parametrize("view", [0, 1])
def test_recognition_names_the_object_and_the_view_that_matched(tmp_path, view):
    objs = sample_objects()
    views = [objs["pagoda"], objs["dahlia"]]  # two unrelated looks: which one matched is unambiguous
    d = ModelDB.create(tmp_path / "rec")
    d.enroll("thing", views)
    d.enroll("cover", objs["cover"])
    scene, H = _frame_with(views[view])
    result = Recognizer(d, track=False, prefilter=None).process(scene.image)
    found = [det for det in result.detections if det.name == "thing"]
    assert len(found) == 1 and [det.name for det in result.detections] == ["thing"]
    det = found[0]
    assert det.view == view and json.loads(json.dumps(det.to_json()))["view"] == view
    truth = scene.truth("x").corners
    assert np.abs(det.corners - truth).max() < 4.0, (det.corners, truth)  # the homography maps that view


def test_identical_views_do_not_defeat_the_ratio_test(tmp_path):
    """The same photo enrolled twice as two views holds every descriptor twice: Lowe's second neighbour would
    be the copy (ratio 1, every match rejected). Views of one object never compete in the ratio test."""
    objs = sample_objects()
    d = ModelDB.create(tmp_path / "dup")
    d.enroll("cover", [objs["cover"], objs["cover"]])
    scene, _ = _frame_with(objs["cover"], seed=5)
    result = Recognizer(d, track=False, prefilter=None).process(scene.image)
    assert [det.name for det in result.detections] == ["cover"]
    assert result.detections[0].inliers >= 30


def test_cli_enrols_sub_folders_as_views_and_edits_views(tmp_path, covers, capsys):
    import cv2

    from objrec.cli import main

    src = tmp_path / "src"
    (src / "box").mkdir(parents=True)
    for i, c in enumerate(covers[:2]):
        cv2.imwrite(str(src / "box" / f"side{i}.png"), c)
    cv2.imwrite(str(src / "flat.png"), covers[2])
    (src / "notes").mkdir()  # a sub-folder without images is no object
    (src / "notes" / "readme.txt").write_text("not an image")
    dbp = tmp_path / "cli.db"
    assert main(["enroll", "--db", str(dbp), "--from", str(src), "--shape", "solid", "--no-progress"]) == 0
    d = ModelDB.open(dbp)
    assert d.names == ["box", "flat"] and d.records == ["box", "box#1", "flat"]
    assert {d.info(k).shape for k in d.records} == {"solid"}
    extra = tmp_path / "extra.png"
    cv2.imwrite(str(extra), synthetic_cover(21, (200, 240)))
    capsys.readouterr()
    assert main(["db", "add-view", "--db", str(dbp), "--json", "flat", str(extra)]) == 0
    assert json.loads(capsys.readouterr().out)["view"] == 1
    assert main(["db", "remove-view", "--db", str(dbp), "box", "0"]) == 0
    assert main(["db", "list", "--db", str(dbp), "--json"]) == 0
    capsys.readouterr()
    assert main(["db", "info", "--db", str(dbp), "--json", "box"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert [p["view"] for p in doc["photos"]] == [1] and doc["shape"] == "solid"
    assert main(["db", "remove-view", "--db", str(dbp), "box", "1"]) == 2  # its only view: an error, nothing lost
    assert ModelDB.open(dbp).records == ["box#1", "flat", "flat#1"]


def test_a_csv_repeating_a_name_lists_its_views(tmp_path):
    from objrec.modeldb.enrolment import items_from_csv

    (tmp_path / "list.csv").write_text("name,path\nmug,front.jpg\nbox,box.jpg\nmug,side.jpg\n")
    items = items_from_csv(tmp_path / "list.csv")
    assert items == [("mug", [tmp_path / "front.jpg", tmp_path / "side.jpg"]), ("box", tmp_path / "box.jpg")]
