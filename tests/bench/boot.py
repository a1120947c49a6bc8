"""Boot benchmark: what a rented node spends installing the agent (not part of CI's figures).

Builds this checkout's wheel, then in two fresh venvs runs (a) the exact install command
a Vast.ai instance's on-start runs (engine/providers/vast_boot.py: swjob with --no-deps,
then the agent's pinned closure; uv when on PATH, else pip) and (b) the baseline it
replaced, `pip install <wheel>` with all of swjob's dependencies. No download cache
(PIP_NO_CACHE_DIR, UV_NO_CACHE), the machine's configured index. Prints seconds,
packages and MB per way, checks `swjob-agent --help` runs from (a), and removes its
temp dir.

    python -m tests.bench.boot [--tiny]

`--tiny` only builds the wheel and prints the command (CI smoke).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from engine.providers.agent_source import agent_closure
from engine.providers.vast_boot import install_command

REPO = Path(__file__).resolve().parents[2]
NOT_PACKAGES = {"pip", "setuptools", "wheel"}


def build_wheel(out: Path) -> Path:
    """Build from a copy: setuptools leaves build/ and *.egg-info in the tree it builds."""
    source = out.parent / "source"
    skip = shutil.ignore_patterns(".*", "build", "dist", "*.egg-info", "__pycache__", "swjob-runs")
    shutil.copytree(REPO, source, ignore=skip)
    # with this venv's setuptools (the test extras'), as the packaging test builds: an
    # isolated build fetched setuptools from the index on every run (~10 s, and network)
    wheel = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation"]
    subprocess.run([*wheel, "-w", str(out), str(source)], check=True)
    return next(out.glob("swjob-*.whl"))


def fresh_venv(path: Path) -> dict[str, str]:
    subprocess.run([sys.executable, "-m", "venv", str(path)], check=True)
    env = {**os.environ, "PIP_NO_CACHE_DIR": "1", "UV_NO_CACHE": "1"}
    env["PATH"] = f"{path / 'bin'}{os.pathsep}{env['PATH']}"
    env.pop("VIRTUAL_ENV", None)
    env.pop("PYTHONPATH", None)
    return env


def measure(venv: Path, env: dict[str, str], command: str) -> dict[str, float]:
    started = time.perf_counter()
    subprocess.run(["bash", "-c", command], env=env, check=True, cwd=venv)
    seconds = time.perf_counter() - started
    listed = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "list", "--format", "json"],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    packages = [p for p in json.loads(listed.stdout) if p["name"].lower() not in NOT_PACKAGES]
    site = next((venv / "lib").glob("python3*/site-packages"))
    size = sum(f.stat().st_size for f in site.rglob("*") if f.is_file() and not f.is_symlink())
    pip_share = sum(
        f.stat().st_size for d in site.glob("pip*") for f in d.rglob("*") if f.is_file()
    )
    return {"seconds": seconds, "packages": len(packages), "mb": (size - pip_share) / 2**20}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tiny", action="store_true", help="build the wheel, print the command")
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="swjob-boot-"))
    try:
        wheel = build_wheel(root / "dist")
        command = install_command([str(wheel), *agent_closure()])
        print(f"node install command:\n  {command}\n")
        if args.tiny:
            return
        env = fresh_venv(root / "closure")
        closure = measure(root / "closure", env, command)
        subprocess.run(["swjob-agent", "--help"], env=env, check=True, capture_output=True)
        full_env = fresh_venv(root / "full")
        full = measure(root / "full", full_env, f"python3 -m pip install -q {wheel}")
        installer = "uv" if shutil.which("uv", path=env["PATH"]) else "pip"
        print(f"| install ({installer}, no cache) | seconds | packages | MB |")
        print("|---|---|---|---|")
        for name, row in (("agent closure (on-start)", closure), ("all of swjob (before)", full)):
            print(f"| {name} | {row['seconds']:.1f} | {row['packages']} | {row['mb']:.0f} |")
        print(f"\nratio: {closure['seconds'] / full['seconds']:.2f}x the time of the full install")
        print("reproduce: python -m tests.bench.boot")
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
