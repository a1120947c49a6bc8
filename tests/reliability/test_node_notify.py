"""The node tells the pools file's `notify` targets what it does alone (agent/nodenotify.py):
`swjob run` on the Vast stand-in is killed with -9 while its job runs; the node, its
operator gone for good, stops the job at its orphan timeout, says so to a real HTTP
receiver (Apprise's `json://` target, handed to the node as a secret) — once, with the
job's last output and every secret masked — and destroys its own instance. A target the
node cannot reach by itself is named in the operator's log at submit, never its URL."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tests.standin.server import StandIn
from tests.support.cli import Cli
from tests.support.receiver import Receiver
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(120)

SECRET = "hf-secret-node-notify-9d1e"
PASSWORD = "receiver-pass-77ab"  # in the target's URL: a credential like a token
SKIPPED = "tgram://123456789:AAH-telegram-bot-token/987654"


@pytest.fixture
def listening() -> Iterator[Receiver]:
    served = Receiver()
    try:
        yield served
    finally:
        served.close()


def test_an_orphaned_node_tells_the_targets_once_with_secrets_masked(
    tmp_path: Path,
    api: StandIn,
    clis: Callable[..., Cli],
    listening: Receiver,
    record_fault: Callable[..., None],
) -> None:
    target = listening.url.replace("json://", f"json://swjob:{PASSWORD}@")
    (tmp_path / "pools.toml").write_text(
        f'notify = ["{target}", "{SKIPPED}"]\n'
        '[pools.gpu]\nprovider = "vastai"\nimage = "img"\nagent_install = "swjob"\n'
        "orphan_timeout_s = 2\nnode_lost_after_s = 2\n[pools.gpu.resources]\ngpu_count = 1\n"
    )
    job = 'run = "echo token is $HF_TOKEN; sleep 300"'
    (tmp_path / "job.toml").write_text(
        f'[job]\nname = "alone"\n{job}\n[job.env]\nHF_TOKEN = "{SECRET}"\n'
    )
    cli = clis("run", "job.toml", "--pool", "gpu", "--pools", "pools.toml", cwd=tmp_path)
    eventually(lambda: cli.has_printed("token is ***"), timeout=60, what="the job started")
    cli.kill9()
    [inst] = api.cloud.instances.values()
    killed_at = time.monotonic()
    eventually(lambda: api.cloud.instances == {}, timeout=40, what="the node destroyed itself")
    destroyed_after = time.monotonic() - killed_at
    assert destroyed_after < 30
    [message] = listening.messages
    assert message["title"].startswith("swjob run ") and message["title"].endswith(
        ": orphaned for 2 s"
    )
    body = message["message"]
    assert body.startswith("orphaned for 2 s: job stopped; destroying node"), body
    assert "last output:\ntoken is ***" in body
    [run_dir] = (tmp_path / "swjob-runs" / "alone").iterdir()
    said = cli.output() + str(message) + (run_dir / "events.jsonl").read_text()
    assert SECRET not in said and PASSWORD not in said and "AAH-telegram" not in said
    assert "notify target tgram://… is not one its node can tell by itself" in cli.output()
    assert inst.id in api.cloud.destroyed
    record_fault(
        "operator kill -9 mid-run, never returns (notify = [json://…])",
        destroyed_after,
        "node told the receiver once (output masked), then destroyed its own instance",
        "the job's uncollected outputs",
    )
