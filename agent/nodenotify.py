"""Tell the operator's notification targets what the node did on its own.

When its operator is gone the node acts alone — at its run's cap (agent/budget.py), at its
orphan timeout (agent/orphan.py), when a warm node's keep time passes (agent/warm.py) — and
each ends with the node releasing (on Vast, destroying) itself. Nobody may be watching the
operator's screen, so the node says it to the pools file's `notify` targets itself.

Only HTTP targets, with the standard library (the node's closure stays small): the
operator hands the node plain requests (engine/watch/nodetargets.py: a generic JSON
webhook, ntfy, Slack and Discord webhooks) as a secret (`credentials.NOTIFY_ENV`, moved off the
environment like the join token: agent/credentials.py). Each target is sent to in a thread
of its own; `tell` waits for them at most SEND_BOUND_S, then goes on to the destroy
whatever they did. The message carries the last lines of the job's output (its node log,
already redacted) and is masked with the node's secrets once more.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import threading
import time
import urllib.request
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent import credentials, orphan
from agent.redact import Redactor

if TYPE_CHECKING:
    from agent.node import AgentConfig

log = logging.getLogger("swjob.agent")

SEND_BOUND_S = 5.0
TAIL_BYTES = 2048
TAIL_LINES = 3


def encode(requests: list[dict[str, Any]]) -> str:
    """The node's secret for `requests`: JSON in URL-safe base64, so the value travels
    unquoted through every way a provider passes environment values (RunPod's SDK puts
    each one between quotes in its GraphQL, escaping nothing)."""
    return base64.urlsafe_b64encode(json.dumps(requests).encode()).decode() if requests else ""


def targets(spec: str | None = None) -> list[dict[str, Any]]:
    """The requests in `spec` (default: this node's secret); none when it has no target."""
    if spec is None:
        spec = credentials.kept_env().get(credentials.NOTIFY_ENV)
    try:
        found = json.loads(base64.urlsafe_b64decode(spec or "").decode() or "[]")
    except ValueError:
        return []
    if not isinstance(found, list):
        return []
    return [t for t in found if isinstance(t, dict) and isinstance(t.get("url"), str)]


def secrets(spec: str | None = None) -> list[str]:
    """The targets' URLs and credentials, and their encoded whole: masked in every step's
    output and message."""
    if spec is None:
        spec = credentials.kept_env().get(credentials.NOTIFY_ENV)
    found = [v for t in targets(spec) for v in (t["url"], *dict(t.get("headers") or {}).values())]
    return [spec, *found] if found and spec else found


async def tell(cfg: AgentConfig, what: str, *, alone: bool = True) -> int:
    """Say `what` the node did alone (e.g. "cap reached …: job stopped") and what it does
    now (destroying itself, or exiting) to every target, waiting at most SEND_BOUND_S;
    how many took it. Not `alone` (its operator is connected): nothing — the operator's
    own notifier tells of the run's end."""
    sent_to = targets() if alone else []
    if not sent_to:
        return 0
    action = "destroying node" if cfg.on_orphan in orphan.DESTROYS else "exiting"
    credential = orphan.container_credential()
    redact = Redactor([cfg.token, *(credential[1:] if credential else ()), *secrets()])
    title = redact(f"swjob run {cfg.run_id}: {what.split(':', 1)[0]}")
    body = redact(f"{what}; {action}" + _tail(cfg.logs_dir))
    done: list[bool] = []
    threads = [
        threading.Thread(target=_send, args=(t, title, body, done), daemon=True) for t in sent_to
    ]
    for thread in threads:
        thread.start()
    await asyncio.to_thread(_join, threads, time.monotonic() + SEND_BOUND_S)
    log.info("told %d of %d notification targets", len(done), len(sent_to))
    return len(done)


def payload(target: dict[str, Any], title: str, body: str) -> dict[str, Any]:
    """The JSON each kind of service takes."""
    kind = target.get("kind")
    if kind == "ntfy":
        return {"topic": target.get("topic", ""), "title": title, "message": body,
                "tags": ["warning"]}  # fmt: skip
    if kind == "slack":
        said = {"text": f"*{title}*\n{body}"}
        return {**said, "channel": target["channel"]} if target.get("channel") else said
    if kind == "discord":
        return {"content": f"**{title}**\n{body}"[:2000]}
    return {
        "version": "1.0",
        "title": title,
        "message": body,
        "attachments": [],
        "type": "warning",
    }  # fmt: skip  (Apprise's json:// body)


def _send(target: dict[str, Any], title: str, body: str, done: list[bool]) -> None:
    data = json.dumps(payload(target, title, body)).encode()
    headers = {"Content-Type": "application/json", **dict(target.get("headers") or {})}
    request = urllib.request.Request(target["url"], data=data, headers=headers, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=SEND_BOUND_S) as answer:
            if 200 <= answer.status < 300:
                done.append(True)
    except (OSError, ValueError) as exc:  # never the URL: it holds a token
        log.warning("a %s notification target did not take the message: %s",
                    target.get("kind"), type(exc).__name__)  # fmt: skip


def _join(threads: list[threading.Thread], deadline: float) -> None:
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))


def _tail(logs_dir: Path) -> str:
    """The last lines the job printed (its run step's log, else its setup's), if any."""
    for step in ("run", "setup"):
        try:
            with (logs_dir / f"{step}.log").open("rb") as log_file:
                log_file.seek(0, 2)
                log_file.seek(max(0, log_file.tell() - TAIL_BYTES))
                text = log_file.read().decode(errors="replace")
        except OSError:
            continue
        lines = [line for line in text.splitlines() if line.strip()][-TAIL_LINES:]
        if lines:
            return "\nlast output:\n" + "\n".join(lines)
    return ""
