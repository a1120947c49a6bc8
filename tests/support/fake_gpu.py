"""A fake `nvidia-smi` for the node: replays frames from tests/data/nvidia-smi in a loop.

It is a real executable on the agent's PATH, so the agent's real sampler runs it as it
would the real tool; it records its arguments so a test can check the query asked for.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

DATA = Path(__file__).resolve().parents[1] / "data" / "nvidia-smi"
SAMPLE_S = "0.2"

_SCRIPT = """#!/bin/sh
here="$(dirname "$0")"
echo "$@" > "$here/args"
n=$(cat "$here/count" 2>/dev/null || echo 0)
echo $((n + 1)) > "$here/count"
frames=$(ls "$here"/frame-* | wc -l)
cat "$here/frame-$((n % frames))"
"""


def install(recording: str, bin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put a fake nvidia-smi replaying `recording` first on PATH, sampling every 0.2 s."""
    frames = (DATA / recording).read_text().split("---\n")
    return install_frames(frames, bin_dir, monkeypatch)


def install_frames(frames: list[str], bin_dir: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Put a fake nvidia-smi printing `frames` in turn first on PATH, sampling every 0.2 s."""
    bin_dir.mkdir(parents=True, exist_ok=True)
    for i, text in enumerate(frames):
        (bin_dir / f"frame-{i}").write_text(text.strip() + "\n")
    exe = bin_dir / "nvidia-smi"
    exe.write_text(_SCRIPT)
    exe.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv("SWJOB_GPU_SAMPLE_S", SAMPLE_S)
    return bin_dir
