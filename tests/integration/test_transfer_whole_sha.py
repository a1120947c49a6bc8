"""A large output travels in CRC-checked chunks; before it takes its name it is also checked
whole against the SHA-256 the node computed when it listed the outputs: a file whose
landed bytes are not the node's never lands as verified (real iroh on loopback)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest

from agent.transfer.schedule import CHUNK, LARGE_MIN
from engine.run.transfer import pull_outputs
from tests.integration.transfer_harness import loopback_pair

pytestmark = pytest.mark.timeout(90)


class RewriteAfterListing:
    """The engine's link, rewriting `victim` on the node (same size, other bytes) once the
    listing, with its digests, is done: every chunk then agrees with the others and with
    its CRC, but the file is not the one the node vouched for."""

    def __init__(self, link: Any, victim: Path, content: bytes) -> None:
        self._link, self._victim, self._content, self.streams = link, victim, content, 0

    async def open_bi(self) -> Any:
        self.streams += 1
        if self.streams == 2:
            self._victim.write_bytes(self._content)
        return await self._link.open_bi()


async def test_a_large_output_is_checked_whole_against_the_nodes_sha256(tmp_path: Path) -> None:
    node, run_dir = tmp_path / "node", tmp_path / "run"
    node.mkdir()
    size = LARGE_MIN + CHUNK + 7
    (node / "big.bin").write_bytes(os.urandom(size))
    later = os.urandom(size)
    async with loopback_pair(node) as link:
        hooked = RewriteAfterListing(link, node / "big.bin", later)
        result = await pull_outputs(hooked, ["big.bin"], run_dir, lambda p: None)
    assert result.attempts == 2  # the first landing failed the whole-file check
    assert result.not_landed == []
    assert (run_dir / "outputs" / "big.bin").read_bytes() == later  # the listed-again version
    files = json.loads((run_dir / "manifest.json").read_text())["files"]
    assert [(f["path"], f["verified"]) for f in files] == [("big.bin", True)]
