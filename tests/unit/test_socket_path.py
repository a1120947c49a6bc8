"""A local socket goes where an address can name it: the private dir when it fits, else a
fresh private dir in the user's runtime dir (so a killed engine's socket dirs are not
left piling up in /tmp), else one in the temp dir; `remove_socket` takes the fresh dir
away with the socket."""

from __future__ import annotations

import shutil
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from engine.run.localsock import SUN_PATH_MAX, remove_socket, socket_path


def deep(root: Path) -> Path:
    path = root / ("d" * (SUN_PATH_MAX + 1))
    path.mkdir(parents=True)
    return path


@pytest.fixture
def short() -> Iterator[Path]:
    """A dir whose path is short enough for a socket address (tmp_path may not be)."""
    folder = Path(tempfile.mkdtemp(prefix="s-", dir="/tmp"))  # TMPDIR may be deep too
    yield folder
    shutil.rmtree(folder)


def test_a_socket_that_fits_stays_in_the_private_dir(short: Path) -> None:
    assert socket_path(short, "engine.sock") == short / "engine.sock"


@pytest.mark.parametrize("variable", ["SWJOB_RUNTIME_DIR", "XDG_RUNTIME_DIR"])
def test_a_deep_private_dir_sends_the_socket_to_a_private_dir_in_the_runtime_dir(
    tmp_path: Path, short: Path, monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    monkeypatch.delenv("SWJOB_RUNTIME_DIR", raising=False)
    monkeypatch.setenv(variable, str(short))
    runtime = short if variable == "SWJOB_RUNTIME_DIR" else short / "swjob"
    private = deep(tmp_path)
    sock = socket_path(private, "engine.sock")
    assert sock.parent.parent == runtime and sock.name == "engine.sock"
    assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
    remove_socket(sock, private)
    assert not sock.parent.exists()


@pytest.mark.parametrize("why", ["unusable", "too deep", "none"])
def test_without_a_runtime_dir_to_use_the_socket_goes_to_the_temp_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, why: str
) -> None:
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    if why == "unusable":
        (tmp_path / "file").write_text("in the way")
        monkeypatch.setenv("SWJOB_RUNTIME_DIR", str(tmp_path / "file" / "swjob"))
    elif why == "too deep":
        monkeypatch.setenv("SWJOB_RUNTIME_DIR", str(deep(tmp_path / "rt")))
    else:  # no runtime dir at all (macOS; a login without one): not /tmp/runtime-<uid>
        monkeypatch.delenv("SWJOB_RUNTIME_DIR", raising=False)
    sock = socket_path(deep(tmp_path / "private"), "engine.sock")
    assert sock.parent.parent == Path(tempfile.gettempdir())
    assert stat.S_IMODE(sock.parent.stat().st_mode) == 0o700
    remove_socket(sock, tmp_path)
    assert not sock.parent.exists()
