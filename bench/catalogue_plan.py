"""The ordered list of objects a catalogue benchmark enrols: the query covers, real distractors, generated ones.

The catalogue of size N is the first N objects of one fixed sequence, so a larger catalogue extends a smaller
one and one database can be grown through the sizes:

1. the 100 SMVS DVD references (``smvs_dvd/reference``, named as :func:`objrec.datasets.load_catalogue` names
   them, so the photos' labels are object names);
2. the real distractors, source by source (:data:`REAL_SOURCES`): the 234 ``dvd_covers``, the 1692
   ``ukbench_small`` web photos, the 480 real UKBench images (120 objects x 4 views), the 48 Oxford affine images,
   the 128 COIL-100 views and every ``vtest_step``-th frame of ``opencv_samples/vtest.avi`` (extracted once to
   JPEG files in the cache folder);
3. generated objects (:mod:`distractor_images`), drawn from every real distractor photo as sources (never an
   SMVS cover), written to the cache folder as they are needed.

Object names are ``<source>_<stem>`` (``gen_<index>`` for generated objects), unique across sources.

References
----------
.. [1] Chandrasekhar, V. et al. "The Stanford Mobile Visual Search data set." ACM MMSys 2011.
       https://doi.org/10.1145/1943552.1943568
.. [2] Nistér, D. and Stewénius, H. "Scalable recognition with a vocabulary tree." CVPR 2006.
       https://doi.org/10.1109/CVPR.2006.264
.. [3] Mikolajczyk, K. et al. "A comparison of affine region detectors." IJCV 65, 2005.
       https://doi.org/10.1007/s11263-005-3848-x
.. [4] Nene, S. A., Nayar, S. K. and Murase, H. "Columbia Object Image Library (COIL-100)." Technical report
       CUCS-006-96, Columbia University, 1996.
"""

from __future__ import annotations

from pathlib import Path

import cv2
from distractor_images import write_distractors

from objrec.datasets import load_catalogue

__all__ = ["REAL_SOURCES", "vtest_frames", "real_distractors", "catalogue_items"]

#: Real distractor sources in the order they are taken: (name, folder under the shared data, file pattern).
REAL_SOURCES = (
    ("dvd", "dvd_covers", "*.jpg"),
    ("ukbs", "ukbench_small", "*.jpg"),
    ("ukb", "ukbench", "*.jpg"),
    ("oxford", "oxford_affine", "*/img*.png"),
    ("coil", "objects/coil100", "*.png"),
)


def vtest_frames(data: Path, cache: Path, step: int) -> list[Path]:
    """Every ``step``-th frame of ``opencv_samples/vtest.avi`` as a JPEG file in ``cache/vtest_<step>`` (written
    once); empty when the video is absent or unreadable."""
    video = data / "opencv_samples" / "vtest.avi"
    out = cache / f"vtest_{step}"
    done = out / "done"
    if done.exists():
        return sorted(out.glob("frame*.jpg"))
    if not video.is_file():
        return []
    out.mkdir(parents=True, exist_ok=True)
    cap = cv2.VideoCapture(str(video))
    i = 0
    while True:
        ok, frame = cap.read()
        if not ok:
            break
        if i % step == 0:
            cv2.imwrite(str(out / f"frame{i:04d}.jpg"), frame, [cv2.IMWRITE_JPEG_QUALITY, 92])
        i += 1
    cap.release()
    done.write_text(f"{i} frames read\n")
    return sorted(out.glob("frame*.jpg"))


def real_distractors(data: Path, cache: Path, vtest_step: int = 5) -> list[tuple[str, Path]]:
    """(name, path) of every real distractor image, in :data:`REAL_SOURCES` order, then the vtest frames (none
    when ``vtest_step`` is 0)."""
    items = []
    for tag, folder, pattern in REAL_SOURCES:
        for p in sorted((data / folder).glob(pattern)):
            stem = f"{p.parent.name}_{p.stem}" if "/" in pattern else p.stem
            items.append((f"{tag}_{stem}", p))
    if vtest_step > 0:
        items += [(f"vtest_{p.stem}", p) for p in vtest_frames(data, cache, vtest_step)]
    return items


def catalogue_items(
    data: Path, cache: Path, n: int, seed: int = 0, vtest_step: int = 5, skip: set[str] | frozenset = frozenset()
) -> list[tuple[str, str]]:
    """The first ``n`` objects of the sequence as (name, image path); generated objects are written as needed.

    Parameters
    ----------
    data : Path
        The shared data folder.
    cache : Path
        Folder for the vtest frames and generated objects (``gen_<seed>``), reused by every call.
    n : int
        How many objects.
    seed : int
        The series of the generated objects.
    vtest_step : int
        Every ``vtest_step``-th frame of ``vtest.avi`` is a distractor.
    skip : set of str
        Names left out (images that could not be enrolled); the next objects take their places.

    Returns
    -------
    list of (str, str)
        Object name and image path, the catalogue of size ``n``; a prefix of that of any larger size.
    """
    refs = [(name, Path(path)) for name, path in load_catalogue(data / "smvs_dvd").references]
    real = real_distractors(data, cache, vtest_step)
    items = [(name, p) for name, p in refs + real if name not in skip][:n]
    short = n - len(items)
    if short > 0:
        sources = [p for _, p in real]
        k = short
        while True:  # generated objects, more when some of them are skipped
            # Generated objects draw on the real ones: without the vtest frames they are another series.
            folder = cache / (f"gen_{seed}" if vtest_step > 0 else f"gen_{seed}_novtest")
            gen = [(f"gen_{i:06d}", p) for i, p in enumerate(write_distractors(folder, k, sources, seed))]
            kept = [(name, p) for name, p in gen if name not in skip]
            if len(kept) >= short:
                break
            k += short - len(kept)
        items += kept[:short]
    return [(name, str(p)) for name, p in items]
