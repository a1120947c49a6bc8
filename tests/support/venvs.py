"""A Python without swjob: what a rented node's image has, or a fresh venv a built wheel is
installed into."""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path


def venv_without_swjob(root: Path) -> Path:
    """A venv at `root` that sees this venv's third-party packages (pip, iroh, pydantic…,
    each as pinned here: an install of them finds them satisfied, offline) but not swjob:
    this venv's editable finder is a `.pth` of its site dir, and a path listed in another
    `.pth` has its own `.pth` files left unrun. Returns its `bin` directory."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True)
    purelib = Path(sysconfig.get_path("purelib", vars={"base": str(root), "platbase": str(root)}))
    (purelib / "host.pth").write_text(sysconfig.get_path("purelib") + "\n")
    return root / "bin"
