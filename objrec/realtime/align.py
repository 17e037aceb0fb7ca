"""A track's homography realigned with the object's enrolled image: drift and extrapolation taken out.

Optical flow from frame to frame follows the texture that was under each point in the previous frame, so a
track's outline inherits every frame's small error (drift), and a track anchored on a detection of a partly
visible object inherits that detection's extrapolation of the rest. Following the points from the model
instead corrects both: the model image is rendered into the frame through the track's homography, and
pyramidal Lucas-Kanade (OpenCV's ``calcOpticalFlowPyrLK``, forward and backward) finds where the rendered
model's strong corners really are in the frame; a robust refit of the homography to those positions is the
realigned track. Both images are normalised to the same mean and spread over the object, since a printed and
photographed object differs from its enrolled image in brightness and contrast, which Lucas-Kanade does not
tolerate.

:class:`ModelTemplates` keeps each tracked object's model image in gray, at most
:data:`TEMPLATE_SIDE` pixels on its long side (an object seldom covers more of a frame), so a realignment
reads the database once per object.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, cast

import cv2
import numpy as np

from objrec.boxes import inside_polygons
from objrec.geometry import forward_backward, map_points, model_corners, robust_homography, visible_part
from objrec.realtime.flow import seed_points

if TYPE_CHECKING:
    from objrec.realtime.tracker import Track, Tracker, TrackLike

__all__ = [
    "ModelTemplates",
    "realign",
    "due",
    "realign_in",
    "unsettled",
    "aligned_within",
    "AlignParams",
    "DEFAULT_ALIGN",
    "TEMPLATE_SIDE",
    "significant",
    "f_threshold",
    "F_THRESHOLDS",
    "seen_move",
]

#: Model images are kept at most this many pixels on their long side.
TEMPLATE_SIDE = 512
#: Corners found on each level of a template's pyramid, the candidates for the points a realignment follows.
CORNERS = 1000


@dataclass(frozen=True)
class AlignParams:
    """Settings of a track's realignment with its model (:func:`realign`), part of
    :class:`~objrec.realtime.tracker.TrackParams` (``realign``); how often it runs is
    ``TrackParams.realign_every_ms``.

    Attributes
    ----------
    points : int
        Corners of the rendered model followed into the frame.
    win_size, max_level : int
        Lucas-Kanade's window (odd, pixels) and pyramid levels: wide enough to converge over a drift of a few
        tens of pixels.
    fb_max_px : float
        A point whose backward flow returns further than this (pixels) from where it started is dropped.
    refit_px : float
        The refit's threshold (frame pixels) within which a point agrees with it.
    min_points, min_agree : int, float
        At least ``min_points`` points must agree with the refit, and at least ``min_agree`` of those followed.
    max_shift : float
        A realignment that moves a corner of the outline by more than this share of its side is not trusted:
        Lucas-Kanade's pyramid converges over smaller errors, and a larger move means it followed something
        else.
    margin : int
        Pixels around the outline that the rendered model and the frame crop keep.
    again_px : float
        A realignment that moves the outline where it is in view (:func:`seen_move`) by more than this (frame
        pixels) is repeated, in the same frame while it fits: Lucas-Kanade started that far off stops short of
        the object by a share of the distance, so a track anchored pixels off (by a search under a budget)
        needs more than one look, until a realignment finds it where it is.
    """

    points: int = 48
    win_size: int = 21
    max_level: int = 3
    fb_max_px: float = 1.0
    refit_px: float = 2.0
    min_points: int = 8
    min_agree: float = 0.5
    max_shift: float = 0.2
    margin: int = 16
    again_px: float = 1.0

    def __post_init__(self) -> None:
        if self.win_size < 5 or self.win_size % 2 == 0:
            raise ValueError(f"win_size: expected an odd number >= 5, got {self.win_size}")
        if not 4 <= self.min_points <= self.points:
            raise ValueError(f"min_points: expected 4..points ({self.points}), got {self.min_points}")
        for name in ("fb_max_px", "refit_px", "max_shift", "again_px", "min_agree"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: expected a number > 0, got {getattr(self, name)!r}")
        if self.max_level < 0 or self.margin < 0:
            raise ValueError(f"max_level, margin: expected >= 0, got {self.max_level}, {self.margin}")


#: The defaults (:class:`AlignParams`).
DEFAULT_ALIGN = AlignParams()
#: A refit replaces the track's homography only when it explains the followed points better than the track's
#: own homography by more than chance would at this significance (an F-test of the refit's 8 parameters,
#: :func:`significant`). Below it the track is already on the model within the points' noise, and moving it
#: would only add the refit's noise: the far corners of a homography fitted to points on part of an object
#: scatter by pixels from one refit to the next on an unmoving object. Strict, since the points' errors are
#: not independent (a printed object differs from its model in the same way under neighbouring windows).
SIGNIFICANCE = 0.999
#: ``fdtri(8, dof, SIGNIFICANCE)`` for ``dof`` = 1 .. ``2 * 48 - 8``: the F test's threshold for every refit
#: a realignment with the default ``AlignParams.points`` can make (at most 48 points, 8 parameters; more
#: points are looked up in SciPy), tabulated from SciPy so that a process (``objrec detect`` realigns the
#: objects it finds) starts without importing ``scipy.special``, whose import costs more than the rest of a
#: realignment; ``tests/realtime/test_align.py`` checks the table against SciPy.
F_THRESHOLDS = (
    598144.1562499513,
    999.3749218359119,
    130.61900876416817,
    48.99618876920976,
    27.64947537087648,
    19.030333119371,
    14.634006632332584,
    12.045541244154931,
    10.368000374264785,
    9.204149864855586,
    8.35478626222746,
    7.710352308534696,
    7.20614737696161,
    6.80173979551382,
    6.470676857843035,
    6.19498166298,
    5.962041027780945,
    5.7627611974176975,
    5.59043045364436,
    5.439993192872252,
    5.307572583708126,
    5.190148352523425,
    5.08533418537997,
    4.991220742559074,
    4.906262879377358,
    4.829197263449587,
    4.758981280658574,
    4.694747102079283,
    4.635766713528329,
    4.581424983225266,
    4.531198699164229,
    4.484640092676459,
    4.441363770323284,
    4.401036261567897,
    4.3633675929512945,
    4.328104446081843,
    4.295024563642347,
    4.263932146391028,
    4.234654042753988,
    4.207036576635085,
    4.1809428924247865,
    4.156250721666596,
    4.132850495448979,
    4.110643741794052,
    4.089541719182988,
    4.0694642466839595,
    4.0503386985220455,
    4.032099136794688,
    4.0146855607263845,
    3.998043254627162,
    3.9821222197671675,
    3.966876677854271,
    3.9522646358208537,
    3.938247503280635,
    3.9247897553779185,
    3.911858634877215,
    3.899423888274353,
    3.8874575314878155,
    3.8759336413383987,
    3.864828169570264,
    3.8541187766246816,
    3.8437846827647886,
    3.833806534477258,
    3.8241662843550857,
    3.814847082902619,
    3.805833180906427,
    3.797109841188965,
    3.7886632587107525,
    3.780480488115036,
    3.772549377919323,
    3.7648585106539496,
    3.757397148330586,
    3.750155182695733,
    3.743123089786896,
    3.736291888363898,
    3.7296531018355386,
    3.7231987233438186,
    3.7169211837046423,
    3.7108133219362744,
    3.7048683581353212,
    3.699079868485152,
    3.69344176220379,
    3.6879482602581968,
    3.6825938756890126,
    3.6773733954056085,
    3.6722818633248564,
    3.6673145647394656,
    3.662467011812574,
)


class Template:
    """One object's model image in gray for realignment: ``gray``, resized by ``scale`` (model pixels to
    template pixels), and its strong corners at each level of its pyramid, found once when first asked for
    (:meth:`corners`), so that a realignment maps them into the frame instead of searching the rendered model
    for corners in every frame."""

    __slots__ = ("gray", "scale", "_levels")

    def __init__(self, gray: np.ndarray, scale: float) -> None:
        self.gray = gray
        self.scale = scale
        self._levels: dict[int, np.ndarray] = {}

    def corners(self, level: int) -> np.ndarray:
        """Up to :data:`CORNERS` Shi-Tomasi corners of the template reduced ``level`` times by half, in template
        pixels (k, 2), the strongest first: the corners the template shows when rendered at about ``2**-level``
        of its size (finer texture blurs away there)."""
        if level not in self._levels:
            img = self.gray
            for _ in range(level):
                img = cv2.pyrDown(img)
            p = cv2.goodFeaturesToTrack(img, CORNERS, 0.001, 2.0, blockSize=5)
            pts = np.zeros((0, 2)) if p is None else p.reshape(-1, 2).astype(np.float64)
            self._levels[level] = (pts + 0.5) * 2.0**level - 0.5
        return self._levels[level]

    def level(self, k: float, win_size: int = DEFAULT_ALIGN.win_size) -> int:
        """The pyramid level whose corners a rendering at ``k`` times the template's size shows: the nearest
        in scale, and no coarser than a level of at least ``win_size`` pixels a side (the flow's window)."""
        top = int(np.log2(max(1, min(self.gray.shape[:2]) // win_size)))
        return int(np.clip(round(-np.log2(max(k, 1e-6))), 0, top))


class ModelTemplates:
    """Gray model images for realignment (:class:`Template`), read once per object through ``read(name) ->
    image`` (BGR or gray uint8) and kept for the ``capacity`` objects used most recently."""

    def __init__(self, read: Callable[[str], np.ndarray], capacity: int = 64) -> None:
        self.read = read
        self.capacity = capacity
        self._cache: OrderedDict[str, Template] = OrderedDict()

    def get(self, name: str) -> Template:
        if name in self._cache:
            self._cache.move_to_end(name)
            return self._cache[name]
        img = self.read(name)
        gray = img if img.ndim == 2 else cv2.cvtColor(img, cv2.COLOR_BGR2GRAY)
        scale = min(1.0, TEMPLATE_SIDE / max(gray.shape[:2]))
        if scale < 1.0:
            size = (max(1, round(gray.shape[1] * scale)), max(1, round(gray.shape[0] * scale)))
            gray = cv2.resize(gray, size, interpolation=cv2.INTER_AREA)
        self._cache[name] = Template(gray, scale)
        if len(self._cache) > self.capacity:
            self._cache.popitem(last=False)
        return self._cache[name]


def _normalised(img: np.ndarray, mask: np.ndarray) -> np.ndarray:
    """``img`` with its mean and spread over ``mask`` (uint8, nonzero inside) mapped to 128 and 40 (uint8)."""
    mu, sd = (float(v) for v in np.ravel(cv2.meanStdDev(img, mask=mask)))
    lut = np.clip(128.0 + 40.0 * (np.arange(256) - mu) / (sd + 1e-3), 0, 255).astype(np.uint8)
    return cv2.LUT(img, lut)


def _spread(pts: np.ndarray, spacing: float, n: int) -> np.ndarray:
    """The indices of up to ``n`` of ``pts`` (strongest first), at most one in each square of side ``spacing``:
    the strongest there, so that the points spread over the object."""
    cells = np.floor(pts / spacing).astype(np.int64)
    key = cells[:, 1] * (int(cells[:, 0].max()) + 1) + cells[:, 0]
    return np.sort(np.unique(key, return_index=True)[1])[:n]


def realign(
    frame_gray: np.ndarray,
    template: Template,
    H: np.ndarray,
    model_size: tuple[int, int],
    hidden: Sequence[np.ndarray] = (),
    p: AlignParams = DEFAULT_ALIGN,
) -> tuple[np.ndarray | None, int]:
    """``H`` (model pixels to frame pixels) realigned with the model, and the number of points that agree with
    it: the model, rendered through ``H`` (``template``: :meth:`ModelTemplates.get`), gives up to
    ``p.points`` strong corners (the template's own, :meth:`Template.corners`, at the rendering's scale;
    where fewer than that are in view, those the rendered view shows there), which are followed from it
    into ``frame_gray``; the homography is refitted to where they are. Parts inside
    the ``hidden`` outlines (objects in front) are not used; ``model_size`` is the model image's (width,
    height). ``(None, 0)`` when too few points agree or the
    outline would move by more than ``p.max_shift`` of its side (``p``: :class:`AlignParams`)."""
    w, h = model_size
    corners = map_points(H, model_corners(w, h))
    view = _rendered(frame_gray, template, H, corners, hidden, p)
    if view is None:
        return None, 0
    (x0, y0, x1, y1), M, rendered, inside = view
    crop = frame_gray[y0:y1, x0:x1]
    a, b = _normalised(rendered, inside), _normalised(crop, inside)
    # Around the object the rendered model shows the frame itself: windows reaching over the outline then
    # compare background with background, not with an empty border.
    a = cv2.copyTo(a, inside, b.copy())
    side = np.sqrt(max(cv2.contourArea(corners.astype(np.float32)), 1.0))
    points = _points_to_follow(template, M, rendered, inside, side / (np.sqrt(w * h) * template.scale), side, p)
    if points is None:
        return None, 0
    p0, src = points
    p1, good = forward_backward(a, b, p0, None, p.win_size, p.max_level, (30, 0.01), p.fb_max_px)
    if int(good.sum()) < p.min_points:
        return None, 0
    dst = p1[good].astype(np.float64) + [x0, y0]
    H2, keep = robust_homography(src[good], dst, p.refit_px, max_iters=500, sampler="ransac")
    n = int(keep.sum())
    if H2 is None or n < p.min_points or n < p.min_agree * int(good.sum()):
        return None, 0
    if np.linalg.norm(map_points(H2, model_corners(w, h)) - corners, axis=1).max() > p.max_shift * side:
        return None, 0
    if not significant(src[good][keep], dst[keep], H, H2):
        return np.asarray(H, np.float64), n
    return H2, n


def _rendered(
    frame_gray: np.ndarray,
    template: Template,
    H: np.ndarray,
    corners: np.ndarray,
    hidden: Sequence[np.ndarray],
    p: AlignParams,
) -> tuple[tuple[int, int, int, int], np.ndarray, np.ndarray, np.ndarray] | None:
    """The model rendered through ``H`` into the frame's crop around its outline ``corners`` (plus
    ``p.margin``): the crop's box ``(x0, y0, x1, y1)``, the template-to-crop homography, the rendering, and
    the mask of the outline less the ``hidden`` outlines (uint8, 255 inside); None when the crop or the mask
    is too small for a window of the flow."""
    gray, scale = template.gray, template.scale
    fh, fw = frame_gray.shape[:2]
    x0, y0 = np.maximum(np.floor(corners.min(axis=0)).astype(int) - p.margin, 0)
    x1, y1 = np.minimum(np.ceil(corners.max(axis=0)).astype(int) + p.margin, [fw, fh])
    if x1 - x0 < 2 * p.win_size or y1 - y0 < 2 * p.win_size:
        return None
    to_crop = np.array([[1.0, 0.0, -x0], [0.0, 1.0, -y0], [0.0, 0.0, 1.0]]) @ H
    M = to_crop @ np.diag([1.0 / scale, 1.0 / scale, 1.0])  # template pixels to crop pixels
    size = (int(x1 - x0), int(y1 - y0))
    rendered = cv2.warpPerspective(gray, M, size, flags=cv2.INTER_LINEAR)
    inside = np.zeros((size[1], size[0]), np.uint8)
    cv2.fillConvexPoly(inside, np.round(corners - [x0, y0]).astype(np.int32), 255)
    for q in hidden:
        poly = np.round(np.asarray(q, np.float64).reshape(-1, 2) - [x0, y0]).astype(np.int32)
        cv2.fillPoly(inside, [poly.reshape(-1, 1, 2)], 0)
    if cv2.countNonZero(inside) < p.win_size * p.win_size:
        return None
    return (x0, y0, x1, y1), M, rendered, inside


def _points_to_follow(
    template: Template, M: np.ndarray, rendered: np.ndarray, inside: np.ndarray, k: float, side: float, p: AlignParams
) -> tuple[np.ndarray, np.ndarray] | None:
    """The points a realignment follows from the ``rendered`` model (through ``M``, template to crop pixels;
    ``inside`` its mask; ``k`` its size against the template's; ``side`` the outline's in frame pixels): up to
    ``p.points`` of the template's corners where the rendering shows them, away from its border (a window
    there would hold the background too), spread over the object; where fewer are in view, the rendered view's
    own strongest corners there. Their positions in the crop ((n, 1, 2) float32) and on the model image; None
    when fewer than ``p.min_points`` are found."""
    inner = cv2.erode(inside, np.ones((p.win_size, p.win_size), np.uint8))
    size = (inside.shape[1], inside.shape[0])
    spacing = max(4.0, side / (2.0 * np.sqrt(p.points)))
    pts = template.corners(template.level(k, p.win_size))
    at = map_points(M, pts)
    xi, yi = np.round(at).astype(np.int64).T
    ok = (xi >= 0) & (yi >= 0) & (xi < size[0]) & (yi < size[1])
    ok[ok] = inner[yi[ok], xi[ok]] > 0
    pick = _spread(at[ok], spacing, p.points) if ok.any() else np.zeros(0, np.int64)
    if len(pick) >= p.points:
        return at[ok][pick].astype(np.float32).reshape(-1, 1, 2), pts[ok][pick] / template.scale
    found = cv2.goodFeaturesToTrack(rendered, p.points, 0.01, spacing, mask=inner, blockSize=5)
    if found is None or len(found) < p.min_points:
        return None
    p0 = found.astype(np.float32).reshape(-1, 1, 2)
    return p0, map_points(np.linalg.inv(M), p0.reshape(-1, 2).astype(np.float64)) / template.scale


def significant(src: np.ndarray, dst: np.ndarray, H: np.ndarray, H2: np.ndarray, level: float = SIGNIFICANCE) -> bool:
    """Whether the refit ``H2`` explains the points ``src -> dst`` (model to frame pixels, the refit's inliers)
    better than ``H`` by more than noise would: an F-test at ``level`` of the drop in the squared residuals
    per parameter against the refit's residual variance. ``H`` is taken for an estimate as precise as the
    refit (an earlier refit of the same kind, carried by the flow), not for the truth: the difference of two
    such estimates varies twice as much as one, so the drop is held against twice the refit's share."""
    m = len(src)
    dof = 2 * m - 8
    if dof <= 0:
        return True
    ssr0 = float(np.sum((dst - map_points(H, src)) ** 2))
    ssr1 = float(np.sum((dst - map_points(H2, src)) ** 2))
    if ssr1 <= 0.0:
        return ssr0 > 0.0
    return (ssr0 - ssr1) / 8.0 > 2.0 * f_threshold(dof, level) * ssr1 / dof


def f_threshold(dof: int, level: float = SIGNIFICANCE) -> float:
    """The F distribution's ``level`` quantile with 8 and ``dof`` degrees of freedom: from
    :data:`F_THRESHOLDS` at :data:`SIGNIFICANCE`, else from ``scipy.special.fdtri``."""
    if level == SIGNIFICANCE and 1 <= dof <= len(F_THRESHOLDS):
        return F_THRESHOLDS[dof - 1]
    from scipy.special import fdtri  # imported on first use: slow to import

    return float(fdtri(8, dof, level))


def due(tracker: Tracker, frame: int) -> Track | None:
    """The planar track of ``tracker`` (a :class:`~objrec.realtime.tracker.Tracker`) to realign in frame
    ``frame``: never realigned, or moved far by its last realignment (``AlignParams.again_px``; in the same frame too,
    where the budget allows), or realigned ``realign_every_ms`` of footage ago or more; in that order, the
    longest waiting first within each; None when there is none, or realignment is off or has no model images."""
    every = tracker.frames(tracker.params.realign_every_ms)
    if not tracker.enabled or not every or tracker.templates is None:
        return None
    # Planar tracks only: a solid track (no ``realigned``) is never realigned.
    planar = [cast("Track", t) for t in tracker.tracks if hasattr(t, "realigned")]
    waiting = [t for t in planar if _waits(t, frame, every)]
    return min(waiting, key=lambda t: (t.realigned >= 0, not unsettled(t), t.realigned)) if waiting else None


def unsettled(t: Track) -> bool:
    """Whether track ``t`` has not yet been realigned onto its model: never realigned, or moved far by its
    last realignment (``AlignParams.again_px``)."""
    return t.realigned < 0 or getattr(t, "again", False)


def _waits(t: Track, frame: int, every: int) -> bool:
    return unsettled(t) or frame - t.realigned >= every


def lost_points(t: TrackLike) -> np.ndarray:
    """Where track ``t`` lost points over the last frames (``lost_pts``, model pixels), in frame pixels through
    its homography: (k, 2), empty for a track that keeps no such record (a solid one)."""
    lost = getattr(t, "lost_pts", None)
    if not lost:
        return np.zeros((0, 2))
    assert t.homography is not None  # only a planar track keeps lost points
    return map_points(t.homography, np.concatenate(list(lost)))


def hiders(tracks: Sequence[TrackLike], outline: np.ndarray, skip: TrackLike | None = None) -> list[np.ndarray]:
    """The outlines of the ``tracks`` (but ``skip``) that may hide part of an object at ``outline``: all of them
    but those that lost points inside ``outline`` lately (:func:`lost_points`): the object is in front of those."""
    q = [np.asarray(outline, np.float32)]
    out = []
    for o in tracks:
        if o is skip:
            continue
        pts = lost_points(o)
        if len(pts) < 3 or int(inside_polygons(pts, q).sum()) < 3:
            out.append(o.corners)
    return out


def realign_in(tracker: Tracker, t: Track, gray: np.ndarray, frame: int) -> bool:
    """Realign ``tracker``'s planar track ``t`` in ``gray`` (frame number ``frame``) with the other tracks'
    outlines hidden (:func:`realign`); whether it was realigned. The tracker moves the track onto the realigned
    homography (:meth:`~objrec.realtime.tracker.Tracker.mark_realigned`). A realignment that moved the part of
    the outline inside the frame by more than ``again_px`` (:func:`seen_move`; the tracker's
    ``params.realign``) leaves the track due again,
    with new points (:func:`_reseed`)."""
    if tracker.templates is None:
        raise ValueError("realign_in: the tracker has no model images (templates) to realign with")
    hidden = hiders(tracker.tracks, t.corners, t)
    before, H0 = t.corners, t.homography
    p = tracker.params.realign
    H = realign(gray, tracker.templates.get(t.name), H0, t.model_size, hidden, p)[0]
    far = H is not None and seen_move(H0, H, before, t.model_size, gray.shape[:2]) > p.again_px
    tracker.mark_realigned(t, frame, H, far)
    if far:
        _reseed(tracker, t, gray, hidden)
    return H is not None


def seen_move(
    H0: np.ndarray, H1: np.ndarray, outline: np.ndarray, model_size: tuple[int, int], shape: tuple[int, int]
) -> float:
    """How far the change from ``H0`` to ``H1`` moves the part of ``outline`` (``H0``'s, frame pixels; of a
    model of ``model_size``) inside a frame of ``shape`` (rows, cols): the largest move of a vertex of the
    outline clipped to the frame (:func:`~objrec.geometry.visible_part`; the whole outline when it does
    not meet the frame). The corners of an object partly out of view are extrapolations from the points a
    realignment saw, which swing by pixels from one refit to the next with the points' noise: measured there,
    a track at the frame's edge would count as moved far at every realignment and be realigned in every
    frame."""
    part = visible_part(H0, outline, *model_size, shape)[0]
    pts = part if len(part) >= 3 else np.asarray(outline, np.float64).reshape(-1, 2)
    move = np.asarray(H1, np.float64) @ np.linalg.inv(np.asarray(H0, np.float64))
    return float(np.linalg.norm(map_points(move, pts) - pts, axis=1).max())


def _reseed(tracker: Tracker, t: Track, gray: np.ndarray, hidden: Sequence[np.ndarray]) -> None:
    """``tracker``'s track ``t`` given points chosen anew on the frame's strong corners inside its realigned
    outline (:meth:`~objrec.realtime.tracker.Tracker.reseed`). Its points were corners of the frame where the
    homography before put them; moved with the outline by pixels they sit beside those corners, on texture that
    Lucas-Kanade follows poorly, and the next frames' refits wander by as much. None is taken where the track
    lost its points lately (:func:`seed_points`). Kept as they are when too few corners are found."""
    params = tracker.params
    pts = seed_points(gray, t.corners, params.points, hidden=hidden, kept=t.pts, lost=lost_points(t))
    if len(pts) >= params.min_points:
        tracker.reseed(t, pts)


def aligned_within(t: TrackLike, frame: int, every: int) -> bool:
    """Whether track ``t`` was realigned with its model within the last ``every`` frames before frame number
    ``frame`` (``every`` 0: never is)."""
    last = getattr(t, "aligned", -1)
    return every > 0 and last >= 0 and frame - last <= every
