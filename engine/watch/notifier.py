"""Deliver notices (engine/watch/notices.py) through Apprise to the pools file's `notify`
targets: a subscriber to the engine's datastream, so it never holds a run up.

Each target is sent to in a thread (Apprise's HTTP is blocking), retried RETRIES times a
few seconds apart, then the failure is logged — naming the service, never the URL, which
holds its token. A run is never failed or delayed by a notification: the engine's close
waits at most CLOSE_WAIT_S for the ones still on their way (its last run's end among them).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Iterable

from engine.jobs.pools import Caps, PoolSet
from engine.report.datastream import Subscription
from engine.report.views import RunView
from engine.watch.notices import Notice, Notices

RETRIES = 3
RETRY_AFTER_S = (1.0, 3.0)  # the waits between tries (the last repeated)
CLOSE_WAIT_S = 15.0

log = logging.getLogger("swjob.engine")


def service(url: str) -> str:
    """A target as it may be shown: its scheme only (`ntfy://…`)."""
    return url.split("://", 1)[0] + "://…"


def send_once(url: str, title: str, body: str) -> bool:
    """One try at one target (blocking). False when Apprise does not understand the URL
    or the service did not take the message."""
    import apprise  # ~0.3 s of imports: paid only by an engine with targets, in a thread

    quiet = logging.getLogger("apprise")  # its warnings name hosts: ours say what failed
    quiet.propagate = False
    sender = apprise.Apprise()
    if not sender.add(url):
        return False
    return bool(sender.notify(title=title, body=body))


class Notifier:
    """Reads a subscription, says each notice to its targets, each delivery its own task."""

    def __init__(
        self,
        sub: Subscription,
        notices: Notices,
        targets: Callable[[str | None], list[str]],
        masker: Callable[[str], Callable[[str], str]],
    ) -> None:
        self._sub = sub
        self._notices = notices
        self._targets = targets  # pool name (None: the engine's) → Apprise URLs
        self._masker = masker  # run id → its redaction
        self._sends: set[asyncio.Task[None]] = set()
        self._task = asyncio.create_task(self._read())

    async def _read(self) -> None:
        async for event in self._sub:
            try:
                notices = self._notices.see(event)
            except Exception:  # a notice gone wrong must not end the notifications
                log.exception("notifications: cannot read event %s", event.kind)
                continue
            for notice in notices:
                self._say(notice)

    def _say(self, notice: Notice) -> None:
        mask = self._masker(notice.run_id) if notice.run_id else _same
        title, body = mask(notice.title), mask(notice.body)
        for url in self._targets(notice.pool):
            task = asyncio.create_task(_deliver(url, title, body))
            self._sends.add(task)
            task.add_done_callback(self._sends.discard)

    def tell(self, pool: str | None, title: str, body: str) -> None:
        """A notice of the engine's own (a sweep's end), to `pool`'s targets."""
        self._say(Notice("", pool, "engine", title, body))

    async def close(self) -> None:
        """Once the subscription has ended: wait for the last notices, a bounded while."""
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(CLOSE_WAIT_S):
                await self._drain()
        for task in (self._task, *self._sends):
            task.cancel()
        await asyncio.gather(self._task, *self._sends, return_exceptions=True)

    async def _drain(self) -> None:
        await self._task
        while self._sends:
            await asyncio.gather(*self._sends, return_exceptions=True)


async def _deliver(url: str, title: str, body: str) -> None:
    for attempt in range(RETRIES):
        try:
            if await asyncio.to_thread(send_once, url, title, body):
                return
        except Exception as exc:  # Apprise's or a plugin's bug: logged like a refusal
            log.debug("notification to %s raised %s", service(url), type(exc).__name__)
        if attempt + 1 < RETRIES:
            await asyncio.sleep(RETRY_AFTER_S[min(attempt, len(RETRY_AFTER_S) - 1)])
    log.warning("notification to %s failed %d times: %s", service(url), RETRIES, title)


def for_engine(
    pools: PoolSet,
    subscribe: Callable[[], Subscription],
    view_of: Callable[[str], RunView | None],
    masker: Callable[[str], Callable[[str], str]],
) -> Notifier | None:
    """The engine's notifier, or None when its pools file names no target."""
    if not all_targets([pools.notify, *(pool.notify for pool in pools)]):
        return None

    def caps_of(name: str) -> Caps | None:
        return pools.get(name).caps if name in pools else None

    return Notifier(subscribe(), Notices(caps_of, view_of), pools.targets, masker)


def _same(text: str) -> str:
    return text


def all_targets(targets: Iterable[list[str]]) -> list[str]:
    """Every target of the pools file, each once, in file order."""
    return list(dict.fromkeys(url for group in targets for url in group))
