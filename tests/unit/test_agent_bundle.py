"""The agent's code as the operator ships it (engine/providers/agent_source.py) and as a
node checks it before running a line (agent/codefetch.py)."""

from __future__ import annotations

import ast
import hashlib
import io
import zipfile
from pathlib import Path

import pytest

from agent import codefetch, credentials, protocol
from engine.providers.agent_source import agent_bundle
from engine.run.control import NodeSession


def test_the_bundle_is_the_agent_package_and_its_digest() -> None:
    data, digest = agent_bundle()
    assert hashlib.sha256(data).hexdigest() == digest
    names = zipfile.ZipFile(io.BytesIO(data)).namelist()
    assert "agent/main.py" in names and "agent/transfer/wire.py" in names
    assert all(n.startswith("agent/") and n.endswith(".py") for n in names)
    assert len(data) < 200 * 1024  # a boot's worth of bytes, not a wheel's closure


def test_codefetch_runs_before_swjob_is_on_the_node() -> None:
    """Only the standard library and iroh: nothing of `agent` exists on the node yet."""
    tree = ast.parse(Path(codefetch.__file__).read_text())
    imported = {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    imported |= {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    assert not {m for m in imported if m and m.split(".")[0] == "agent"}
    assert codefetch.CODE_ALPN == protocol.CODE_ALPN
    assert codefetch.TOKEN_ENV == credentials.TOKEN_ENV


def test_code_that_does_not_match_the_boot_command_is_never_unpacked(tmp_path: Path) -> None:
    data, digest = agent_bundle()
    with pytest.raises(SystemExit, match=r"not the \w+ the boot command names"):
        codefetch.unpack(data + b"x", digest, tmp_path)
    assert list(tmp_path.iterdir()) == []
    home = codefetch.unpack(data, digest, tmp_path)
    assert home == tmp_path / digest and (home / "agent" / "main.py").is_file()


def test_only_the_runs_token_fetches_code_and_only_before_its_agent_joined() -> None:
    session = NodeSession(
        "run-1", "tok", heartbeat_s=1, deadline_s=4, on_event=lambda _: None,
        on_lost=lambda _: None,
    )  # fmt: skip
    assert session.may_fetch_code("tok") and not session.may_fetch_code("other")
    session.endpoint_id = "joined-node"
    assert not session.may_fetch_code("tok")
