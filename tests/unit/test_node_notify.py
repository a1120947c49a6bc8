"""What a node is told of its operator's `notify` targets (engine/watch/nodetargets.py):
Apprise reads each URL, the node gets plain HTTP requests for the webhook, ntfy, Slack and
Discord ones and nothing of the others; each service's body (agent/nodenotify.py)."""

from __future__ import annotations

import json

from agent import nodenotify
from engine.watch.nodetargets import for_urls


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
    requests = json.loads(told.spec)
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
    spec = json.dumps(
        [{"kind": "json", "url": "http://h/x", "headers": {"Authorization": "Basic YTpi"}}]
    )
    assert nodenotify.secrets(spec) == ["http://h/x", "Basic YTpi"]
    assert nodenotify.targets("not json") == [] and nodenotify.targets('{"url": 1}') == []
    ntfy = nodenotify.payload({"kind": "ntfy", "topic": "alerts"}, "T", "B")
    assert ntfy["topic"] == "alerts" and ntfy["message"] == "B"
    assert nodenotify.payload({"kind": "slack", "channel": "#ops"}, "T", "B") == {
        "text": "*T*\nB", "channel": "#ops",
    }  # fmt: skip
    assert nodenotify.payload({"kind": "discord"}, "T", "B" * 3000)["content"].startswith("**T**")
    assert nodenotify.payload({"kind": "json"}, "T", "B")["title"] == "T"
