"""A node whose operator is gone for good releases itself.

The real agent, orphaned after a short `--orphan-timeout`: on the local pool it removes
its node directory; on Vast.ai it destroys its own instance with the container's scoped
key (or stops it when the destroy is refused), saying so in its log and journal. The
whole chain with real `swjob` processes (kill -9, never back) is in
tests/reliability/test_operator_gone.py.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agent import orphan
from agent.protocol import NodeFault
from tests.integration.agent_helpers import AgentProc, FakeOrchestrator, kill_leftover_group
from tests.standin.server import StandIn
from tests.support.vast import bootstrap, gpu_pool, provider
from tests.support.waiting import eventually_async

pytestmark = pytest.mark.timeout(90)
TOKEN = "join-token-orphan-5a1c"


async def _orphaned(root: Path, *args: str) -> AgentProc:
    """An agent that joined, then lost its orchestrator for good; returns once it exited."""
    orch = await FakeOrchestrator.start(TOKEN)
    node = await AgentProc.start(orch, root, "--orphan-timeout", "1", *args)
    try:
        # joined on the node's side too: closed mid-handshake, the node's join would wait
        # for a Welcome that never comes, in an iroh read that ignores its cancel until the
        # connection times out (30 s), past this test's wait
        await eventually_async(lambda: "joined; replaying" in node.stderr(), 30, "the join")
        await orch.close()
        assert await node.exit_code() == 5, node.stderr()
    finally:
        await node.kill()
        kill_leftover_group(root)
    return node


def _notes(root: Path) -> list[str]:
    path = root / "state" / "events.jsonl"
    events = [json.loads(line) for line in path.read_text().splitlines()]
    return [e["reason"] for e in events if e["type"] == NodeFault.model_fields["type"].default]


async def test_a_local_orphan_removes_its_node_directory(tmp_path: Path) -> None:
    root = tmp_path / "node"
    node = await _orphaned(root, "--on-orphan", "remove-root")
    assert not root.exists()
    assert f"removed the node directory {root}" in node.stderr()


async def test_without_an_action_the_orphan_only_exits(tmp_path: Path) -> None:
    """Positive control: the directory goes only when the provider asked for it."""
    root = tmp_path / "node"
    await _orphaned(root)
    assert (root / "state" / "events.jsonl").exists()


@pytest.mark.parametrize(
    ("refused", "said"),
    [(None, None), (403, "HTTP 403"), (200, "HTTP 200 without success"), (200, "stop too")],
    ids=["destroyed", "refused-so-stopped", "refused-in-a-200-so-stopped", "stop-refused-too"],
)
async def test_a_vast_orphan_destroys_its_own_instance_with_the_container_key(
    tmp_path: Path,
    api: StandIn,
    monkeypatch: pytest.MonkeyPatch,
    refused: int | None,
    said: str | None,
) -> None:
    """A refused destroy is followed by a stop — also one answered 200 without `success`
    (Vast's CLI reads it as refused), which is no destroy; nor is such a stop one."""
    api.cloud.faults.never_start = True
    vast = provider(api, gpu_pool(), [])
    mine, other = [await vast.provision(bootstrap(f"run-{n}")) for n in ("a", "b")]
    inst = api.cloud.instances[int(mine.node_id)]
    monkeypatch.setenv(orphan.ID_ENV, str(inst.id))  # as Vast sets them in the container
    monkeypatch.setenv(orphan.KEY_ENV, inst.container_key)
    api.cloud.faults.container_destroy_refused = refused == 403
    api.cloud.faults.destroy_refusals = int(refused == 200)
    api.cloud.faults.stop_refusals = int(said == "stop too")
    root = tmp_path / "node"
    node = await _orphaned(root, "--on-orphan", "destroy-instance", "--vast-url", api.url)
    notes = _notes(root)
    assert notes[0] == "orphaned for 1 s: job stopped, destroying node"
    if said == "stop too":
        assert api.cloud.instances[inst.id].status != "stopped"
        assert notes[1] == (
            f"could not destroy (HTTP 200 without success) or stop (HTTP 200) "
            f"own Vast.ai instance {inst.id}"
        )
    elif refused:
        assert api.cloud.instances[inst.id].status == "stopped"
        assert notes[1] == f"destroy of own Vast.ai instance {inst.id} refused ({said}); stopped it"
    else:
        assert inst.id not in api.cloud.instances and inst.id in api.cloud.destroyed
        assert notes[1] == f"destroyed own Vast.ai instance {inst.id}"
    assert notes[1] in node.stderr()
    assert int(other.node_id) in api.cloud.instances  # the key reached nothing else
    assert inst.container_key not in node.stderr() + "".join(notes)
    await vast.teardown(mine)
    await vast.teardown(other)
