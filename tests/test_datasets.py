"""Dataset loaders: the real Oxford and COIL-100 data, and malformed layouts built in tmp_path."""

from __future__ import annotations

import json
import shutil

import cv2
import numpy as np
import pytest

from objrec.datasets import (
    OXFORD_SEQUENCES,
    DatasetError,
    angle_difference,
    load_coil,
    load_dataset,
    load_hpatches,
    load_objects_dataset,
    load_oxford_affine,
    parse_dataset_spec,
    read_homography,
    view_pairs,
)

H_TEXT = "1.1 0.02 5\n-0.01 0.95 3\n1e-5 2e-5 1\n"


def _write_image(path, w=40, h=30, seed=0):
    img = (np.random.default_rng(seed).random((h, w)) * 255).astype(np.uint8)
    if path.suffix == ".ppm":  # PPM is colour only
        img = cv2.cvtColor(img, cv2.COLOR_GRAY2BGR)
    assert cv2.imwrite(str(path), img)
    return path


def _oxford_seq(folder, ext=".png"):
    folder.mkdir(parents=True)
    for n in range(1, 7):
        _write_image(folder / f"img{n}{ext}", seed=n)
    for n in range(2, 7):
        (folder / f"H1to{n}p").write_text(H_TEXT)
    return folder


# --- Oxford, real data ---------------------------------------------------------------------------------------


def test_all_eight_oxford_sequences_load(shared_data):
    pairs = load_oxford_affine(shared_data / "oxford_affine")
    assert len(pairs) == 40
    seqs = sorted({p.seq for p in pairs})
    assert seqs == sorted(OXFORD_SEQUENCES)
    for seq in seqs:
        mine = [p for p in pairs if p.seq == seq]
        assert [p.index for p in mine] == [2, 3, 4, 5, 6]
        assert {p.kind for p in mine} == {OXFORD_SEQUENCES[seq]}
        for p in mine:
            assert p.dataset == "oxford" and p.H.shape == (3, 3) and p.H[2, 2] == 1.0
            assert p.img1_path.name == "img1.png" and p.imgN_path.name == f"img{p.index}.png"
    assert {OXFORD_SEQUENCES[s] for s in seqs} == {"viewpoint", "zoom+rotation", "blur", "illumination", "jpeg"}
    ubc = [p for p in pairs if p.seq == "ubc"]
    assert all(np.allclose(p.H, np.eye(3)) for p in ubc)
    # leuven's files have H[2,2] != 1: the loader normalises them.
    raw = np.loadtxt(shared_data / "oxford_affine/leuven/H1to2p")
    leuven = next(p for p in pairs if p.seq == "leuven" and p.index == 2)
    assert raw[2, 2] != 1.0
    np.testing.assert_allclose(leuven.H, raw / raw[2, 2])


def test_oxford_images_are_read_lazily_and_in_their_own_sizes(shared_data):
    pairs = load_oxford_affine(shared_data / "oxford_affine", sequences=["wall", "boat"])
    assert [p.seq for p in pairs] == ["wall"] * 5 + ["boat"] * 5
    wall = pairs[0]
    img1, img2 = wall.images(gray=True)
    assert img1.shape == (700, 1000) and img2.shape == (680, 880)
    assert pairs[5].image1().ndim == 2  # boat is stored grayscale
    # A single sequence folder works as the root too.
    single = load_oxford_affine(shared_data / "oxford_affine" / "graf")
    assert [p.name for p in single] == [f"graf/1-{n}" for n in range(2, 7)]


def test_graf_homography_agrees_with_sift_matches(shared_data):
    pair = load_oxford_affine(shared_data / "oxford_affine", sequences=["graf"])[0]
    g1, g2 = pair.images(gray=True)
    sift = cv2.SIFT_create(nfeatures=1500)
    k1, d1 = sift.detectAndCompute(g1, None)
    k2, d2 = sift.detectAndCompute(g2, None)
    knn = cv2.BFMatcher(cv2.NORM_L2).knnMatch(d1, d2, k=2)
    good = [m for m, n in knn if m.distance < 0.8 * n.distance]
    assert len(good) > 300
    p1 = np.float64([k1[m.queryIdx].pt for m in good])
    p2 = np.float64([k2[m.trainIdx].pt for m in good])
    q = np.c_[p1, np.ones(len(p1))] @ pair.H.T
    err = np.linalg.norm(q[:, :2] / q[:, 2:] - p2, axis=1)
    assert np.mean(err < 3.0) > 0.75


# --- Oxford and HPatches, malformed layouts ---------------------------------------------------------------------


def test_oxford_layout_in_tmp_and_its_errors(tmp_path):
    root = tmp_path / "oxford"
    _oxford_seq(root / "graf", ".ppm")
    _oxford_seq(root / "mine", ".pgm")
    (root / "notes").mkdir()  # no img1: not a sequence
    pairs = load_oxford_affine(root)
    assert [(p.seq, p.kind) for p in pairs[::5]] == [("graf", "viewpoint"), ("mine", "unknown")]
    np.testing.assert_allclose(pairs[0].H, np.loadtxt(root / "graf/H1to2p"))

    (root / "graf/img4.ppm").unlink()
    with pytest.raises(DatasetError, match=r"graf/img4\.\*: image not found"):
        load_oxford_affine(root)
    _write_image(root / "graf/img4.ppm")

    (root / "graf/H1to3p").write_text("1 0 0\n0 one 0\n0 0 1\n")
    with pytest.raises(DatasetError, match=r"graf/H1to3p: not a plain-text 3x3 matrix"):
        load_oxford_affine(root)
    (root / "graf/H1to3p").write_text("1 0 0\n0 1 0\n")
    with pytest.raises(DatasetError, match=r"graf/H1to3p: expected a 3x3 homography, got shape \(2, 3\)"):
        load_oxford_affine(root)
    (root / "graf/H1to3p").write_text("1 0 0\n0 1 0\n0 0 0\n")
    with pytest.raises(DatasetError, match=r"H1to3p: homography has H\[2,2\]"):
        load_oxford_affine(root)
    (root / "graf/H1to3p").write_text("1 0 0\n0 nan 0\n0 0 1\n")
    with pytest.raises(DatasetError, match=r"H1to3p: homography has non-finite"):
        load_oxford_affine(root)
    (root / "graf/H1to3p").unlink()
    with pytest.raises(DatasetError, match=r"graf/H1to3p: homography file not found"):
        load_oxford_affine(root)
    with pytest.raises(DatasetError, match="nosuch: sequence folder not found"):
        load_oxford_affine(root, sequences=["nosuch"])
    with pytest.raises(DatasetError, match="dataset folder not found"):
        load_oxford_affine(tmp_path / "absent")
    with pytest.raises(DatasetError, match="no sequence folders"):
        load_oxford_affine(root / "notes")
    assert issubclass(DatasetError, ValueError)


def test_corrupt_image_fails_only_when_read(tmp_path):
    seq = _oxford_seq(tmp_path / "graf")
    (seq / "img2.png").write_bytes(b"\x89PNG garbage")
    pair = load_oxford_affine(tmp_path)[0]
    assert pair.image1().shape == (30, 40)
    with pytest.raises(DatasetError, match=r"img2\.png: not a readable image"):
        pair.imageN()


def test_java_style_homography_text(tmp_path):
    p = tmp_path / "H1to2p"
    p.write_text("0.70 0.43 -127.9  \n-0.42 0.69 201.2  \n4.083733373964227E-6 1.5E-5 2.0  \n")
    H = read_homography(p)
    assert H[2, 2] == 1.0 and H[0, 0] == pytest.approx(0.35)


def test_hpatches_layout(tmp_path):
    root = tmp_path / "hpatches-sequences-release"
    for seq in ("v_graffiti", "i_ajuntament"):
        (root / seq).mkdir(parents=True)
        for n in range(1, 7):
            _write_image(root / seq / f"{n}.ppm", seed=n)
        for n in range(2, 7):
            (root / seq / f"H_1_{n}").write_text(H_TEXT)
    (root / "README").mkdir()
    pairs = load_hpatches(root)
    assert len(pairs) == 10
    assert {(p.seq, p.kind) for p in pairs} == {("i_ajuntament", "illumination"), ("v_graffiti", "viewpoint")}
    assert all(p.dataset == "hpatches" for p in pairs)
    assert pairs[0].imageN(gray=True).shape == (30, 40)
    assert {p.seq for p in load_hpatches(root, kinds=["viewpoint"])} == {"v_graffiti"}
    with pytest.raises(ValueError, match="kinds"):
        load_hpatches(root, kinds=["blur"])
    (root / "v_graffiti/H_1_5").write_text("1 2 3 4 5 6 7 8 9 10 11 12\n")
    with pytest.raises(DatasetError, match=r"v_graffiti/H_1_5: expected a 3x3 homography"):
        load_hpatches(root)
    (root / "v_graffiti/H_1_5").write_text(H_TEXT)
    (root / "i_ajuntament/6.ppm").unlink()
    with pytest.raises(DatasetError, match=r"i_ajuntament/6\.\*: image not found"):
        load_hpatches(root)


# --- COIL-100 ---------------------------------------------------------------------------------------------------


def test_coil_real_folder(shared_data):
    views = load_coil(shared_data / "objects/coil100")
    assert len(views) == 128
    ids = sorted({v.object_id for v in views})
    assert len(ids) == 16
    for oid in ids:
        assert [v.angle for v in views if v.object_id == oid] == list(range(0, 360, 45))
    assert views[0].name == f"obj{ids[0]}" and views[0].image().shape == (128, 128, 3)
    pairs = view_pairs(views)
    assert len(pairs) == 16 * 7
    assert sorted({d for _, _, d in pairs}) == [45, 90, 135, 180]
    assert angle_difference(315, 0) == 45 and angle_difference(10, 350) == 20


def test_coil_errors(tmp_path):
    with pytest.raises(DatasetError, match="no obj<ID>__<deg> images"):
        load_coil(tmp_path)
    _write_image(tmp_path / "obj3__0.png")
    _write_image(tmp_path / "obj3__90.png")
    (tmp_path / "readme.txt").write_text("ignored")
    assert [(v.object_id, v.angle) for v in load_coil(tmp_path)] == [(3, 0), (3, 90)]
    with pytest.raises(DatasetError, match=r"objects \[4\] not found"):
        load_coil(tmp_path, objects=[3, 4])
    _write_image(tmp_path / "obj3__400.png")
    with pytest.raises(DatasetError, match=r"obj3__400\.png: angle 400"):
        load_coil(tmp_path)


# --- objects + scenes + ground truth JSON -----------------------------------------------------------------------


def _objects_dataset(tmp_path):
    (tmp_path / "objects").mkdir()
    (tmp_path / "scenes").mkdir()
    _write_image(tmp_path / "objects/book.png")
    _write_image(tmp_path / "objects/box.png", seed=1)
    _write_image(tmp_path / "scenes/0.png", 80, 60, seed=2)
    _write_image(tmp_path / "scenes/1.png", 80, 60, seed=3)
    doc = {
        "format": "objrec-objects",
        "version": 1,
        "objects": {"book": "objects/book.png", "box": str(tmp_path / "objects/box.png")},
        "scenes": [
            {
                "image": "scenes/0.png",
                "objects": [{"name": "book", "homography": [[2, 0, 10], [0, 2, 5], [0, 0, 2]]}],
                "tags": {"distortion": "blur", "level": 2},
            },
            {"image": "scenes/1.png", "objects": []},
        ],
    }
    path = tmp_path / "gt.json"
    path.write_text(json.dumps(doc))
    return path, doc


def test_objects_json_loads_and_round_trips(tmp_path):
    path, doc = _objects_dataset(tmp_path)
    ds = load_objects_dataset(path)
    assert sorted(ds.objects) == ["book", "box"]
    assert ds.objects["book"] == tmp_path / "objects/book.png"
    assert len(ds.scenes) == 2 and ds.scenes[1].objects == ()
    gt = ds.scenes[0].objects[0]
    assert gt.name == "book"
    np.testing.assert_allclose(gt.homography, [[1, 0, 5], [0, 1, 2.5], [0, 0, 1]])
    assert ds.scenes[0].tags == {"distortion": "blur", "level": 2}
    assert ds.scenes[0].image().shape == (60, 80) and ds.object_image("box").shape == (30, 40)
    again = tmp_path / "again.json"
    again.write_text(json.dumps(ds.to_json()))
    ds2 = load_objects_dataset(again)
    assert ds2.objects == ds.objects
    np.testing.assert_allclose(ds2.scenes[0].objects[0].homography, gt.homography)
    kind, p = parse_dataset_spec(f"objects:{path}")
    assert kind == "objects" and len(load_dataset(kind, p).scenes) == 2


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda d: d["scenes"][0]["objects"][0].update(name="lamp"), r"scenes\[0\]\.objects\[0\]\.name: 'lamp'"),
        (
            lambda d: d["scenes"][0]["objects"][0].update(homography=[[1, 0], [0, 1]]),
            r"scenes\[0\]\.objects\[0\]\.homography: expected a 3x3",
        ),
        (
            lambda d: d["scenes"][0]["objects"][0].update(homography=[[1, 0, 0], [0, 1], [0, 0, 1]]),
            r"scenes\[0\]\.objects\[0\]\.homography: homography is not numeric",
        ),
        (lambda d: d["scenes"][0]["objects"][0].pop("homography"), r"homography: missing"),
        (lambda d: d["scenes"][1].update(image="scenes/9.png"), r"scenes\[1\]\.image: image file .*9\.png not found"),
        (lambda d: d["objects"].update(cup="objects/cup.png"), r"objects\['cup'\]: image file .*cup\.png"),
        (lambda d: d.update(version=2), "version 2 is not supported"),
        (lambda d: d.update(objects={}), "'objects' must be a non-empty mapping"),
        (lambda d: d.update(scenes={}), "'scenes' must be a list"),
    ],
)
def test_objects_json_errors_name_file_and_entry(tmp_path, edit, message):
    path, doc = _objects_dataset(tmp_path)
    edit(doc)
    path.write_text(json.dumps(doc))
    with pytest.raises(DatasetError, match=message) as info:
        load_objects_dataset(path)
    assert str(path) in str(info.value)


def test_objects_json_unreadable(tmp_path):
    with pytest.raises(DatasetError, match="gt.json: ground-truth JSON file not found"):
        load_objects_dataset(tmp_path / "gt.json")
    (tmp_path / "gt.json").write_text("{not json")
    with pytest.raises(DatasetError, match="gt.json: not valid JSON"):
        load_objects_dataset(tmp_path / "gt.json")


def test_dataset_spec_parsing(shared_data, tmp_path):
    assert parse_dataset_spec("oxford:/data/ox") == ("oxford", "/data/ox")
    with pytest.raises(ValueError, match="KIND:PATH"):
        parse_dataset_spec("flickr:/x")
    with pytest.raises(ValueError, match="KIND:PATH"):
        parse_dataset_spec("oxford")
    assert len(load_dataset("coil", shared_data / "objects/coil100")) == 128
    shutil.copytree(shared_data / "oxford_affine/ubc", tmp_path / "ubc")
    assert len(load_dataset("oxford", tmp_path)) == 5
