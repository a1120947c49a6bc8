"""Which of the pools file's `notify` targets a node can tell by itself, and how.

A node acts alone when its operator is gone (its cap, its orphan timeout, a warm node's
expiry: each ends with it destroying itself) and says so to the same targets
(agent/nodenotify.py). Its closure stays small: it speaks HTTP with the standard library,
so only HTTP targets go to it — a generic webhook (Apprise's `json://`, `jsons://`), ntfy
(`ntfy://`, `ntfys://`, https://ntfy.sh/…), Slack and Discord webhooks (their Apprise
forms or their https webhook URLs). Apprise itself reads each URL (its own parsing, real),
here, on the operator; the node gets plain requests: `{kind, url, headers, topic?}` as
one JSON secret (never the job's env). Other targets are skipped, said once per submit
in the operator's log, naming the service only.
"""

from __future__ import annotations

import base64
import logging
from dataclasses import dataclass
from typing import Any

from agent import nodenotify
from engine.jobs.pools import PoolSet
from engine.watch.notifier import service

log = logging.getLogger("swjob.engine")

NTFY_CLOUD = "https://ntfy.sh"
SLACK_HOOKS = "https://hooks.slack.com/services"
DISCORD_HOOKS = "https://discord.com/api/webhooks"


@dataclass(frozen=True)
class NodeTargets:
    """One pool's targets as the node gets them (`spec`: nodenotify.encode's, "" for none) and the
    targets it cannot tell."""

    spec: str = ""
    skipped: tuple[str, ...] = ()

    def say_skipped(self, run_id: str) -> None:
        for url in self.skipped:
            log.warning(
                "run %s: notify target %s is not one its node can tell by itself (webhook, "
                "ntfy, Slack, Discord): the node's own events go to the others",
                run_id,
                service(url),
            )


def for_pools(pools: PoolSet | None) -> dict[str, NodeTargets]:
    """Each pool's node targets (blocking: Apprise's imports, ~0.3 s; run it in a thread)."""
    if pools is None:
        return {}
    return {pool.name: for_urls(pools.targets(pool.name)) for pool in pools}


def for_urls(urls: list[str]) -> NodeTargets:
    if not urls:
        return NodeTargets()
    import apprise  # the operator's own notification library reads each URL

    specs: list[dict[str, Any]] = []
    skipped: list[str] = []
    for url in urls:
        found = request_of(apprise.Apprise.instantiate(url, suppress_exceptions=True))
        if found:
            specs += found
        else:
            skipped.append(url)
    return NodeTargets(nodenotify.encode(specs), tuple(skipped))


def request_of(plugin: Any) -> list[dict[str, Any]]:
    """The plain HTTP requests a node makes for one Apprise target; [] when it cannot."""
    kind = type(plugin).__name__
    if kind == "NotifyJSON":
        return [_target("json", _origin(plugin) + (plugin.fullpath or "/"), _auth(plugin),
                        plugin.headers)]  # fmt: skip
    if kind == "NotifyNtfy":
        cloud = plugin.mode == "cloud"
        base = NTFY_CLOUD if cloud else _origin(plugin)
        auth = (
            {} if cloud else _auth(plugin, token=plugin.token if plugin.auth == "token" else None)
        )
        return [_target("ntfy", base + "/", auth, {}, topic=t) for t in plugin.topics]
    if kind == "NotifySlack" and plugin.mode == "hook":
        url = f"{SLACK_HOOKS}/{plugin.token_a}/{plugin.token_b}/{plugin.token_c}"
        channel = next((c for c in plugin.channels if c), None)
        return [_target("slack", url, {}, {}, channel=channel)]
    if kind == "NotifyDiscord":
        return [_target("discord", f"{DISCORD_HOOKS}/{plugin.webhook_id}/{plugin.webhook_token}",
                        {}, {})]  # fmt: skip
    return []


def _target(
    kind: str, url: str, auth: dict[str, str], headers: dict[str, str], **extra: Any
) -> dict[str, Any]:
    return {
        "kind": kind,
        "url": url,
        "headers": {**headers, **auth},
        **{k: v for k, v in extra.items() if v},
    }


def _origin(plugin: Any) -> str:
    port = f":{plugin.port}" if plugin.port else ""
    return f"{'https' if plugin.secure else 'http'}://{plugin.host}{port}"


def _auth(plugin: Any, token: str | None = None) -> dict[str, str]:
    if token:
        return {"Authorization": f"Bearer {token}"}
    if plugin.user:
        pair = f"{plugin.user}:{plugin.password or ''}".encode()
        return {"Authorization": "Basic " + base64.b64encode(pair).decode()}
    return {}
