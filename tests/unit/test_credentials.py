"""The node's credentials file and the environment a step gets (agent/credentials.py)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent import credentials
from agent.credentials import CredentialError, read_secrets, scrubbed, write_secrets


def test_the_secrets_file_is_read_once_and_gone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the secrets it keeps are the process's: a fresh store, so no later test in this
    # worker finds "ck" as its container key (a node-cap test did, when it ran after)
    monkeypatch.setattr(credentials, "_KEPT", {})
    path = write_secrets(tmp_path / "s", "tok", {"CONTAINER_API_KEY": "ck"})
    assert path.stat().st_mode & 0o777 == 0o600
    assert read_secrets(path) == "tok"
    assert not path.exists()
    assert credentials.kept_env()["CONTAINER_API_KEY"] == "ck"


@pytest.mark.parametrize("mode", [0o640, 0o604])
def test_a_secrets_file_others_can_read_is_refused_and_removed(tmp_path: Path, mode: int) -> None:
    path = write_secrets(tmp_path / "s", "tok")
    os.chmod(path, mode)
    with pytest.raises(CredentialError, match="readable by others"):
        read_secrets(path)
    assert not path.exists()


def test_a_link_is_not_followed(tmp_path: Path) -> None:
    target = write_secrets(tmp_path / "real", "tok")
    (tmp_path / "link").symlink_to(target)
    with pytest.raises(CredentialError):
        read_secrets(tmp_path / "link")


def test_a_steps_environment_never_holds_the_nodes_secrets() -> None:
    env = {name: "secret" for name in credentials.SECRET_NAMES} | {"PATH": "/bin"}
    assert scrubbed(env) == {"PATH": "/bin"}
