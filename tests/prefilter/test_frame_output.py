"""What a recognizer reports of its prefilter per frame: the prefilter's own boxes and the share rejected."""

from __future__ import annotations

import numpy as np

from objrec import Recognizer
from objrec.data import sample_background, sample_objects
from objrec.prefilter import regions_to_mask
from objrec.scenes import compose_scene


def test_frame_result_carries_the_prefilters_boxes_and_rejected_share(db, trained):
    rng = np.random.default_rng(3)
    scene = compose_scene(sample_background((640, 480), seed=4), {"cover": sample_objects()["cover"]}, rng, (640, 480))
    rec = Recognizer(db, prefilter=trained, track=False)
    r = rec.process(scene.image)
    own = trained.propose(scene.image)
    assert r.prefilter_boxes == [[int(v) for v in b] for b in own.boxes] and r.prefilter_boxes
    kept = regions_to_mask(own, (480, 640)).mean()  # independent: a rasterised union of the boxes
    assert abs(r.prefilter_rejected - (1.0 - kept)) < 1e-6
    j = r.to_json()
    assert j["prefilter_boxes"] == r.prefilter_boxes and 0.0 <= j["prefilter_rejected"] < 1.0
    assert Recognizer(db, prefilter=None, track=False).process(scene.image).prefilter_boxes is None
