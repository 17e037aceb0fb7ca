"""Check `objrec run` with a display: under Xvfb, screenshot the window, look for the overlay.

    python scripts/check_run_display.py [--keep DIR]

Installs Xvfb (Debian: xvfb, x11-apps) when missing and apt-get is usable. Passes when the screenshot
shows the detected object's outline colour and the white latency text drawn by the overlay.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import cv2
import numpy as np


def ensure_tools() -> None:
    if shutil.which("Xvfb") and shutil.which("xwd"):
        return
    if shutil.which("apt-get") is None:
        sys.exit("Xvfb/xwd missing and apt-get unavailable: install an X virtual framebuffer first")
    subprocess.run(["apt-get", "install", "-y", "-q", "xvfb", "x11-apps"], check=False, capture_output=True)
    if not shutil.which("Xvfb"):
        subprocess.run(["apt-get", "update", "-q"], check=False, capture_output=True)
        subprocess.run(["apt-get", "install", "-y", "-q", "xvfb", "x11-apps"], check=True, capture_output=True)


def read_xwd(data: bytes) -> np.ndarray:
    """Decode an X window dump (ZPixmap, 24/32 bpp, as Xvfb -screen WxHx24 writes) to BGR."""
    hdr = np.frombuffer(data[:100], ">u4")
    header_size, width, height = int(hdr[0]), int(hdr[4]), int(hdr[5])
    bpp, bytes_per_line, ncolors = int(hdr[11]), int(hdr[12]), int(hdr[19])
    off = header_size + 12 * ncolors
    px = np.frombuffer(data[off : off + bytes_per_line * height], np.uint8).reshape(height, bytes_per_line)
    px = px[:, : width * bpp // 8].reshape(height, width, bpp // 8)
    return np.ascontiguousarray(px[:, :, :3])  # little-endian BGRX


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--keep", help="directory to keep the screenshot in")
    args = ap.parse_args()
    ensure_tools()
    from objrec.data import sample_background, sample_objects
    from objrec.draw import color_for
    from objrec.scenes import compose_scene

    tmp = Path(tempfile.mkdtemp(prefix="objrec-display-"))
    obj = sample_objects()["cover"]
    cv2.imwrite(str(tmp / "cover.png"), obj)
    frames = tmp / "frames"
    frames.mkdir()
    for i in range(40):
        s = compose_scene(
            sample_background((640, 480), seed=i % 3),
            {"cover": obj},
            rng=i,
            frame_size=(640, 480),
            area_fraction=(0.15, 0.2),
            max_rotation=20,
        )
        cv2.imwrite(str(frames / f"{i:03d}.png"), s.image)
    objrec = [sys.executable, "-m", "objrec"]
    subprocess.run(objrec + ["enroll", "--db", str(tmp / "db"), f"cover={tmp / 'cover.png'}"], check=True)
    display = ":97"
    xvfb = subprocess.Popen(
        ["Xvfb", display, "-screen", "0", "1024x768x24", "-nolisten", "tcp"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    env = dict(os.environ, DISPLAY=display, QT_QPA_PLATFORM="xcb")
    try:
        time.sleep(1.5)
        run = subprocess.Popen(
            objrec + ["run", "--db", str(tmp / "db"), "--source", str(frames), "--realtime", "--budget-ms", "200"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        shot = None
        for _ in range(60):  # wait until the window shows something, then take the screenshot
            time.sleep(0.5)
            dump = subprocess.run(["xwd", "-root", "-silent", "-display", display], capture_output=True)
            if dump.returncode == 0:
                img = read_xwd(dump.stdout)
                if img.max() > 0 and (img == color_for("cover")).all(axis=2).sum() > 50:
                    shot = img
                    break
            if run.poll() is not None:
                break
        out, err = run.communicate(timeout=120)
    finally:
        xvfb.terminate()
    if args.keep and shot is not None:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
        cv2.imwrite(str(Path(args.keep) / "run_display.png"), shot)
    if run.returncode != 0:
        print(f"objrec run failed ({run.returncode}): {err.strip()}")
        return 1
    if shot is None:
        print("FAIL: no screenshot showed the overlay's outline colour for 'cover'")
        return 1
    outline = int((shot == color_for("cover")).all(axis=2).sum())
    white = int((shot == 255).all(axis=2).sum())
    ok = outline > 50 and white > 50
    print(
        f"{'PASS' if ok else 'FAIL'}: screenshot {shot.shape[1]}x{shot.shape[0]}, {outline} outline pixels of "
        f"'cover', {white} white overlay-text pixels; run: {out.strip().splitlines()[-1] if out.strip() else ''}"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
