"""What a node is told of its operator's `notify` targets (engine/watch/nodetargets.py):
Apprise reads each URL, the node gets plain HTTP requests for the webhook, ntfy, Slack and
Discord ones and nothing of the others; each service's body (agent/nodenotify.py)."""

from __future__ import annotations

import base64
import socket
import time
from pathlib import Path

import pytest

from agent import credentials, nodenotify
from agent.node import AgentConfig
from engine.watch.nodetargets import for_urls
from tests.support.receiver import Receiver


def test_the_node_gets_plain_requests_for_the_http_targets_only() -> None:
    told = for_urls(
        [
            "ntfys://tk_secret@ntfy.example.org/alerts",
            "ntfy://mytopic",
            "slack://T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ/#ops",
            "https://discord.com/api/webhooks/1234567/abcdefTOKEN",
            "mailto://user:pass@example.org",
        ]
    )
    requests = nodenotify.targets(told.spec)
    assert [(r["kind"], r["url"]) for r in requests] == [
        ("ntfy", "https://ntfy.example.org/"),
        ("ntfy", "https://ntfy.sh/"),
        ("slack", "https://hooks.slack.com/services/T1JJ3T3L2/A1BRTD4JD/TIiajkdnlazkcOXrIdevi7FQ"),
        ("discord", "https://discord.com/api/webhooks/1234567/abcdefTOKEN"),
    ]
    assert requests[0]["headers"] == {"Authorization": "Bearer tk_secret"}
    assert requests[0]["topic"] == "alerts" and requests[2]["channel"] == "#ops"
    assert told.skipped == ("mailto://user:pass@example.org",)


def test_each_service_gets_its_own_body_and_the_secrets_are_known() -> None:
    spec = nodenotify.encode(
        [{"kind": "json", "url": "http://h/x", "headers": {"Authorization": "Basic YTpi"}}]
    )
    assert nodenotify.secrets(spec) == [spec, "http://h/x", "Basic YTpi"]
    assert nodenotify.targets("not base64!") == [] and nodenotify.targets("bm90IGpzb24=") == []
    assert nodenotify.targets(base64.urlsafe_b64encode(b'{"url": 1}').decode()) == []
    ntfy = nodenotify.payload({"kind": "ntfy", "topic": "alerts"}, "T", "B")
    assert ntfy["topic"] == "alerts" and ntfy["message"] == "B"
    assert nodenotify.payload({"kind": "slack", "channel": "#ops"}, "T", "B") == {
        "text": "*T*\nB", "channel": "#ops",
    }  # fmt: skip
    assert nodenotify.payload({"kind": "discord"}, "T", "B" * 3000)["content"].startswith("**T**")
    assert nodenotify.payload({"kind": "json"}, "T", "B")["title"] == "T"


async def test_a_hung_target_delays_the_node_only_by_the_bound(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """One target never answers, another takes the message: `tell` is back within the
    bound (the destroy goes on), the good target told, the join token masked."""
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen()  # connects, never answers
    served = Receiver()
    try:
        spec = [
            {"kind": "json", "url": f"http://127.0.0.1:{hung.getsockname()[1]}/", "headers": {}},
            {"kind": "json", "url": served.url.replace("json://", "http://"), "headers": {}},
        ]
        monkeypatch.setenv(credentials.NOTIFY_ENV, nodenotify.encode(spec))
        monkeypatch.setattr(nodenotify, "SEND_BOUND_S", 0.5)
        (tmp_path / "logs").mkdir()
        (tmp_path / "logs" / "run.log").write_text("step 9\nsaw join-token-xyz\n")
        cfg = AgentConfig("r1", "ticket", "o" * 64, tmp_path, "join-token-xyz")
        started = time.monotonic()
        assert await nodenotify.tell(cfg, "cap reached: max_hours 1: job stopped") == 1
        assert time.monotonic() - started < 3
        assert await nodenotify.tell(cfg, "cap reached", alone=False) == 0  # operator's turn
        [message] = served.messages
        assert message["title"] == "swjob run r1: cap reached"
        assert message["message"] == (
            "cap reached: max_hours 1: job stopped; exiting\nlast output:\nstep 9\nsaw ***"
        )
    finally:
        served.close()
        hung.close()
