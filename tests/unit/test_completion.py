"""`swjob completion bash|zsh`: the script, made from the parser, completes commands,
flags and run ids in a real bash (and zsh, where installed)."""

from __future__ import annotations

import shutil
import subprocess
import sys

import pytest

from engine.cli.completion import script
from engine.cli.main import _parser


def _complete(words: str, runs: str = "") -> list[str]:
    """What bash completes for `words` (the last one being typed), with `swjob runs`
    answering `runs`."""
    fake = f"swjob() {{ printf '{runs}'; }}\n" if runs else ""
    code = (
        f"{script(_parser(), 'bash')}\n{fake}COMP_WORDS=({words}); "
        'COMP_CWORD=$((${#COMP_WORDS[@]} - 1)); _swjob; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    done = subprocess.run(["bash", "-c", code], capture_output=True, text=True, check=True)
    return done.stdout.split()


def test_bash_completes_commands_flags_and_run_ids() -> None:
    assert _complete("swjob lo") == ["logs"]
    assert set(_complete("swjob run --de")) == {"--detach"}
    assert "--follow" in _complete("swjob logs -")
    runs = "20261204-061502-aaaa1111\\tjob\\n20261205-000000-bbbb2222\\tjob\\n"
    assert _complete("swjob stop 2026120", runs) == [
        "20261204-061502-aaaa1111", "20261205-000000-bbbb2222",
    ]  # fmt: skip


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed")
def test_zsh_loads_the_script() -> None:
    code = f"{script(_parser(), 'zsh')}\nwhence -w _swjob"
    done = subprocess.run(["zsh", "-f", "-c", code], capture_output=True, text=True, check=False)
    assert "_swjob: function" in done.stdout, done.stderr


def test_the_command_prints_it() -> None:
    done = subprocess.run(
        [sys.executable, "-m", "engine.cli.main", "completion", "bash"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    assert done.stdout == script(_parser(), "bash")
