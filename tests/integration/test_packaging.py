"""swjob installs as users expect: `python -m build` makes an sdist from the checkout and a
wheel from that sdist (its default: so the sdist holds what a build needs), the wheel
carries the packages, the console's stylesheet and the three commands, and installed into a
fresh venv it runs with nothing of the checkout on its path."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

from tests.support.venvs import venv_without_swjob

REPO = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.timeout(300)


def _tracked(into: Path) -> Path:
    """The checkout's tracked files (what a clone has), copied to `into`."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=REPO, capture_output=True, check=False)
    if listed.returncode != 0:
        pytest.skip("not a git checkout: no tracked files to build from")
    for name in listed.stdout.decode().split("\0"):
        if name and (REPO / name).is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(REPO / name, into / name)
    return into


def _build(source: Path, out: Path) -> tuple[Path, Path]:
    """The sdist of `source` and the wheel built from that sdist, in one `build` (one
    start of the frontend and its backend where two separate builds took two)."""
    done = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(source)],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    assert "Building wheel from sdist" in done.stderr, done.stderr[-3000:]  # its progress
    (sdist,), (wheel,) = out.glob("*.tar.gz"), out.glob("*.whl")
    return sdist, wheel


def _build_tools() -> None:
    """`build` and a setuptools that reads the SPDX `license` (77+): the test extras have
    both; a venv made before they joined them skips, saying how to get them."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        version("build")
        new_enough = int(version("setuptools").split(".")[0]) >= 77
    except PackageNotFoundError:
        new_enough = False
    if not new_enough:
        pytest.skip("needs the test extras' build and setuptools>=77: pip install '.[test]'")


def test_the_sdist_builds_a_wheel_that_installs_and_runs(tmp_path: Path) -> None:
    _build_tools()
    checkout = _tracked(tmp_path / "checkout")
    sdist, wheel = _build(checkout, tmp_path / "dist")
    with tarfile.open(sdist) as archive:
        names = {n.split("/", 1)[1] for n in archive.getnames() if "/" in n}
    for needed in ("agent/codefetch.py", "tui/app.tcss", "LICENSE", "README.md",
                   "docs/jobs.md", "examples/hello/job.toml", "tests/conftest.py"):  # fmt: skip
        assert needed in names, needed
    assert not any("__pycache__" in n for n in names)
    with zipfile.ZipFile(wheel) as archive:
        files = set(archive.namelist())
        info = next(n for n in files if n.endswith(".dist-info/METADATA"))
        metadata = archive.read(info).decode()
        scripts = archive.read(info.replace("METADATA", "entry_points.txt")).decode()
    assert {"agent/codefetch.py", "engine/cli/main.py", "tui/app.tcss"} <= files
    assert not any(n.startswith("tests/") for n in files)
    for field in ("Summary: Run one command job", "License-Expression: MIT", "Requires-Python"):
        assert field in metadata, field
    for command in ("swjob = ", "swjob-tui = ", "swjob-agent = "):
        assert command in scripts, command

    bin_dir = venv_without_swjob(tmp_path / "venv")
    install = [bin_dir / "python", "-m", "pip", "install", "-q", "--no-deps", "--no-index"]
    subprocess.run([*install, str(wheel)], check=True, cwd=tmp_path)
    version = subprocess.run(
        [bin_dir / "swjob", "--version"], capture_output=True, text=True, check=True, cwd=tmp_path
    )
    assert version.stdout == "swjob 0.1.0\n"
    hello = checkout / "examples/hello/job.toml"
    checked = subprocess.run(
        [bin_dir / "swjob", "validate", str(hello)], capture_output=True, text=True, cwd=tmp_path
    )
    assert checked.returncode == 0, checked.stderr
    where = subprocess.run(
        [bin_dir / "python", "-P", "-c", "import agent, tui; print(agent.__file__, tui.__file__)"],
        capture_output=True, text=True, check=True, cwd=tmp_path,
    )  # fmt: skip
    assert str(REPO) not in where.stdout and str(tmp_path / "venv") in where.stdout
