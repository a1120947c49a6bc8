"""A Python without swjob: what a rented node's image has, or a fresh venv a built wheel is
installed into."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

SWJOB_OWN = {"agent", "engine", "tui", "swjob"}
"""The distribution's top-level packages: what a Python without swjob must not find."""


def venv_without_swjob(root: Path) -> Path:
    """A venv at `root` that sees this venv's third-party packages (pip, iroh, pydantic…,
    each as pinned here: an install of them finds them satisfied, offline) but not swjob.
    They are seen through a folder of links to this venv's site dir's entries, swjob's own
    left out: swjob is there as packages when installed from a wheel (`pip install .`, as
    CI does), as a finder `.pth` when editable; a path listed in another `.pth` has its own
    `.pth` files left unrun. Returns its `bin` directory."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(root), "platbase": str(root)}))
    host = root / "host-site-packages"
    host.mkdir()
    for entry in Path(sysconfig.get_path("purelib")).iterdir():
        if not _swjobs(entry.name):
            (host / entry.name).symlink_to(entry)
    (purelib / "host.pth").write_text(f"{host}\n")
    return root / "bin"


def _swjobs(name: str) -> bool:
    """Whether a site dir entry is swjob's: a package of it, its dist-info, its finder."""
    lowered = name.lower()
    return (
        name in SWJOB_OWN
        or lowered.startswith("swjob-")
        or (lowered.startswith("__editable__") and "swjob" in lowered)
    )
