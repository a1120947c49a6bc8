"""Links resolved, not read: a chain of links that looks harmless lexically
(`ln -s . d; ln -s d/d/d/../../.. e`) is refused by the walk that sends it, and removed
by the receiver that landed it, whatever order the links arrived in."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.transfer import wire
from agent.transfer.receiver import Receiver
from agent.transfer.safety import check_link_target, link_stays_inside
from agent.transfer.walk import walk_tree
from tests.support.bytestream import BytesStream
from tests.support.hostile import CHAIN
from tests.unit.test_transfer_receiver import _file


def tree(root: Path, links: dict[str, str]) -> Path:
    (root / "sub").mkdir(parents=True)
    (root / "sub" / "f").write_text("x")
    for path, target in links.items():
        os.symlink(target, root / path)
    return root


@pytest.mark.parametrize(
    ("links", "probe", "inside"),
    [
        ({"d": "."}, "e", False),  # e -> d/d/d/../../..: the root's grandparent
        ({}, "e", True),  # without d the same text is lexical, and harmless
        ({"d": "sub"}, "e", True),  # d a real subdir: d/d/d/../../.. = sub/d/d/../../.. inside
        ({"d": "./././."}, "e", False),
        ({"d": "d"}, "e", False),  # a loop: refused, as the kernel would give up
    ],
)
def test_resolution_through_the_links_in_the_tree(tmp_path, links, probe, inside) -> None:
    root = tree(tmp_path / "root", links)
    assert check_link_target(probe, CHAIN) == CHAIN  # lexically every case looks fine
    assert link_stays_inside(root, probe, CHAIN) is inside


def test_the_walk_refuses_the_chain_and_keeps_inside_links(tmp_path) -> None:
    """The sending side (a push's workspace, a pull's outputs on the node)."""
    root = tree(tmp_path / "root", {"d": ".", "e": CHAIN, "ok": "sub/f", "up": "d/sub/../sub"})
    found = walk_tree(root, [])
    assert {e.path for e in found.entries if e.kind == "link"} == {"d", "ok", "up"}
    assert any("'e'" in line and "resolves outside" in line for line in found.refused)


@pytest.mark.parametrize("order", [("e", "d"), ("d", "e")])
async def test_the_receiver_drops_a_chain_whatever_the_order(tmp_path, order) -> None:
    links = {"d": ".", "e": CHAIN, "ok": "f"}
    records = _file("f", b"data") + b"".join(
        wire.record({"t": "link", "p": p, "to": links[p]}) for p in [*order, "ok"]
    )
    root = tmp_path / "landing"
    root.mkdir()
    receiver = Receiver(root)
    body = wire.frame(wire.BATCH, records) + wire.record({"t": "end"})
    await receiver.receive(wire.FrameReader(BytesStream(body)), lambda n, f, c: None)
    assert os.path.islink(root / "e")  # landed: each link alone passed the lexical check
    receiver.close()
    assert not os.path.lexists(root / "e") and os.readlink(root / "d") == "."
    assert os.readlink(root / "ok") == "f" and (root / "f").read_bytes() == b"data"
    assert receiver.refused == [f"e: symlink to {CHAIN} resolves outside the landing dir"]
