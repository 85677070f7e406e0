"""Build time and size of the evictd image: `make image` in a fresh clone of HEAD, cold and warm.

Cold: the Debian base (mmdebstrap) built again (IMAGE_REBUILD_BASE=1), as on a machine that never built it;
warm: the base kept, the image built again. Prints the machine, the load average, each build's wall time and
`make image`'s own summary (base, unpacked image size, OCI archive size). Needs root, buildah and mmdebstrap
(`make image-deps`), PyPI and a Debian mirror. Not in run_all.py (it measures the network as much as this code).

    .venv/bin/python bench/image_build.py
"""

from __future__ import annotations

import os
import platform
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from image_build import build_from_fresh_clone


def load() -> str:
    with open("/proc/loadavg", encoding="ascii") as loadavg:
        return " ".join(loadavg.read().split()[:3])


def main() -> None:
    print(f"machine: {platform.machine()}, {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
          f"{datetime.now(UTC):%Y-%m-%d %H:%M} UTC, load average at start {load()}")
    for run, rebuild_base in (("cold (Debian base built first)", "1"), ("warm (Debian base kept)", "0")):
        os.environ["IMAGE_REBUILD_BASE"] = rebuild_base  # read by deploy/build-image.sh
        with tempfile.TemporaryDirectory(prefix="evictd-image-bench-") as folder:
            started = time.monotonic()
            built = build_from_fresh_clone(Path(folder))
            print(f"\n{run}: {time.monotonic() - started:.0f} s, commit {built.commit[:12]}")
            print(built.summary.rstrip())
    print(f"\nload average at end {load()}")


if __name__ == "__main__":
    main()
