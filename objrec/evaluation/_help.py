"""What ``objrec eval --help`` shows (detector names, synthetic sweeps), importable without OpenCV or SciPy."""

from __future__ import annotations

DETECTOR_HELP = (
    "surf (objrec SURF, CPU/Numba, hessian 400), surf-gpu, sift (objrec SIFT, backend cpu = OpenCV), sift-numba, "
    "sift-gpu, opencv-sift (cv2.SIFT_create), orb (cv2.ORB_create, Hamming), akaze (cv2.AKAZE_create or "
    "cv2.xfeatures2d.AKAZE_create, Hamming), opencv-surf-ref (OpenCV's own SURF(400), precomputed, Oxford only); "
    "'all' = every available one"
)

#: Synthetic corruption sweeps: distortion type -> levels (the first is the clean reference where it exists).
#: rotation: degrees in the image plane; scale: factor on the base size (object ~15% of a 640x480 frame);
#: viewpoint: perspective tilt of :func:`objrec.scenes.place_homography` (0.3 ~ one side 30% shorter);
#: blur: Gaussian sigma (px); motion_blur: horizontal kernel length (px); illumination: gain;
#: gamma: gamma exponent; noise: Gaussian sigma (grey levels); jpeg: quality; occlusion: covered fraction;
#: outside: close-ups with this share of the object's area beyond the frame's border
#: (:func:`objrec.scenes.place_partly_outside`: 0.8-1.5x the size that just fits the frame, any rotation, tilt up
#: to 0.1), scored on the object's points inside the frame (mean error of a model grid, true vs found homography).
SWEEPS: dict[str, tuple[float, ...]] = {
    "rotation": (0, 30, 60, 90, 135, 180),
    "scale": (1.0, 0.6, 0.4, 0.25, 1.6),
    "viewpoint": (0.0, 0.1, 0.2, 0.3, 0.4, 0.5),
    "blur": (0.0, 1.0, 2.0, 4.0, 6.0),
    "motion_blur": (0, 5, 9, 15, 25),
    "illumination": (1.0, 0.6, 0.35, 0.2, 1.6),
    "gamma": (1.0, 0.5, 0.33, 2.0, 3.0),
    "noise": (0.0, 5.0, 10.0, 20.0, 40.0),
    "jpeg": (95, 50, 25, 10, 5),
    "occlusion": (0.0, 0.2, 0.4, 0.6, 0.8),
    "outside": (0.2, 0.4, 0.6),
}
