"""The `vastai` SDK behind one careful door: off the event loop, retried, sanitized.

Every SDK call blocks (requests), so it runs in a thread. The SDK's own retry is
turned off (`retry=1`): it retries only some statuses (429/502/503/504, not 500),
sleeps inside the thread and tells nobody. Here every transient failure (HTTP 429
but a daily search quota, any 5xx, connection errors, timeouts) is retried with
exponential backoff and jitter, honouring a Retry-After (Vast documents it sends none
today: then the backoff is ours), and each retry is reported through `on_retry` so the
engine can record it. Errors leave as `VastApiError` with one sanitized line: the
API key is never part of a message (it would only ever be in a request header, but
server text is redacted for it anyway, and exception chains are cut).

Instances are read from Vast's answers as they are, not through the SDK's
`show_instance(s)`: those compute a `duration` from `start_date`, which Vast sends as
null for an instance that has not started yet (created, loading), and raise TypeError
on it — every listing of the account failed while one of its instances was loading.
An answer the SDK cannot read (a search without `offers`, a body that is not JSON) is
said as such, with what it held, masked and cut to one line — not as the KeyError it
raised.
"""

from __future__ import annotations

import asyncio
import os
import random
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

import requests

from agent.redact import Redactor
from engine.errors import ProviderError
from engine.providers import vast_sdk

RETRY_AFTER_CAP_S = 60.0
DAILY_QUOTA = "search_quota_exceeded"
"""A 429 that is a daily search quota: it resets at UTC midnight, so retrying only burns
requests (the SDK does not retry it either)."""


BACKOFF_ENV = "SWJOB_VAST_BACKOFF_S"
BASE_S, MAX_S = 1.0, 30.0


def _base_s() -> float:
    """The first retry's delay: 1 s, or what SWJOB_VAST_BACKOFF_S says. Tests that drive a
    real `swjob` against a stand-in refusing on purpose set it small: the real back-off
    waited ~30 s for six refusals, in the suite's slowest test."""
    raw = os.environ.get(BACKOFF_ENV)
    if raw is None:
        return BASE_S
    try:
        base = float(raw)
    except ValueError:
        base = float("nan")
    if not 0 < base <= BASE_S:
        raise ValueError(f"{BACKOFF_ENV}: not a delay of seconds in (0, {BASE_S:g}]: {raw!r}")
    return base


def _max_s() -> float:
    return _base_s() * MAX_S / BASE_S


@dataclass(frozen=True)
class RetryPolicy:
    """How hard to try. Tests shrink the delays; real use keeps the defaults."""

    attempts: int = 6
    base_s: float = field(default_factory=_base_s)
    max_s: float = field(default_factory=_max_s)
    timeout_s: float = 30.0

    def delay(self, attempt: int, retry_after: float | None = None) -> float:
        if retry_after is not None:
            return min(retry_after, RETRY_AFTER_CAP_S)
        backoff = min(self.max_s, self.base_s * 2**attempt)
        return backoff * random.uniform(0.5, 1.5)


class VastApiError(ProviderError):
    """A Vast.ai call failed for good; `status` is the HTTP status when there was one and
    `code` Vast's own error word (`no_such_ask`, `auth_error`, ...) when it said one."""

    def __init__(
        self,
        message: str,
        *,
        status: int | None = None,
        transient: bool = False,
        code: str | None = None,
    ):
        super().__init__(message)
        self.status = status
        self.transient = transient
        self.code = code
        self.retry_after: float | None = None

    @property
    def gone(self) -> bool:
        """The instance asked about does not exist (any more). Vast answers a lookup of a
        destroyed instance with 404 or `{"instances": null}`; a 404 `auth_error` is a bad
        key, not a gone instance."""
        return self.status == 404 and self.code != "auth_error"


def _retry_after(response: requests.Response) -> float | None:
    try:
        return float(response.headers["Retry-After"])
    except (KeyError, TypeError, ValueError):
        return None


def _server_says(response: requests.Response) -> tuple[str, str | None]:
    """Vast's message and error word from an error body (either may be missing). Some
    errors come as plain text (a 429's "API requests too frequent"): its first line."""
    try:
        body = response.json()
    except ValueError:
        plain = response.headers.get("Content-Type", "").startswith("text/plain")
        lines = response.text.strip().splitlines() if plain else []
        return (lines[0] if lines else ""), None
    if not isinstance(body, dict):
        return "", None
    error = body.get("error")
    code = str(error)[:64] if error else None  # a word to classify by, never shown
    return str(body.get("msg") or error or ""), code  # shown: redacted before it is cut


def resolve_key(api_key_env: str | None) -> str | None:
    """The pool's key variable if it names one; None lets the SDK resolve its own
    (VAST_API_KEY, then its config files)."""
    if api_key_env:
        value = os.environ.get(api_key_env)
        if not value:
            raise VastApiError(f"the pool's API key variable {api_key_env} is not set")
        return value
    return None


class NotUnderstood(Exception):
    """Vast answered, and the answer is not what the SDK reads (its `response`)."""

    def __init__(self, response: requests.Response) -> None:
        super().__init__(f"HTTP {response.status_code}")
        self.response = response


PAGE_LIMIT = 25  # the v1 instance list's page size (the SDK's own)


class _Sdk:
    """The SDK client, with the instance lookups that tolerate what Vast sends (above);
    every other call is the SDK's own."""

    def __init__(self, sdk: Any) -> None:
        self._sdk = sdk
        self._answers = threading.local()  # each call runs in a thread of its own
        client = sdk.client
        for verb in ("get", "post", "put", "delete"):
            setattr(client, verb, self._kept(getattr(client, verb)))

    def __getattr__(self, name: str) -> Any:
        return getattr(self._sdk, name)

    def _kept(self, send: Callable[..., requests.Response]) -> Callable[..., requests.Response]:
        def kept(*args: Any, **kwargs: Any) -> requests.Response:
            response = send(*args, **kwargs)
            self._answers.last = response
            return response

        return kept

    def answer(self, method: str, *args: Any, **kwargs: Any) -> Any:
        """The SDK's `method`. When Vast answered and reading that answer failed (a key
        the SDK expects is missing, a body that is not JSON), `NotUnderstood` holds it."""
        self._answers.last = None
        try:
            return getattr(self, method)(*args, **kwargs)
        except (requests.HTTPError, requests.ConnectionError, requests.Timeout):
            raise
        except Exception as exc:
            if self._answers.last is None:
                raise
            raise NotUnderstood(self._answers.last) from exc

    def show_instances(self) -> list[dict[str, Any]]:
        """Every instance of the account: the v1 list, paged by `next_token` as the SDK's
        `show_instances` pages it, rows as Vast sent them."""
        params: dict[str, Any] = {
            "select_filters": {},
            "order_by": [{"col": "id", "dir": "asc"}],
            "limit": PAGE_LIMIT,
        }
        rows: list[dict[str, Any]] = []
        while True:
            page = self._sdk.show_instances_v1(dict(params))
            rows.extend(_stripped(row) for row in page.get("instances") or [])
            if not page.get("next_token"):
                return rows
            params["after_token"] = page["next_token"]

    def show_instance(self, instance_id: int) -> dict[str, Any] | None:
        """One instance, None when Vast says it is gone: `{"instances": null}` or an empty
        `{"instances": []}` (a list holds the instance's row, if it is still there)."""
        response = self._sdk.client.get(f"/instances/{instance_id}/", query_args={"owner": "me"})
        response.raise_for_status()
        row = response.json()["instances"]
        if isinstance(row, list):
            if not row:
                return None
            # a listing that does not hold this instance says nothing of it: gone is only
            # what Vast says is gone, or a teardown could confirm a node still billing
            matching = (
                r for r in row if isinstance(r, dict) and str(r.get("id")) == str(instance_id)
            )
            row = next(matching, None)
            if row is None:
                raise NotUnderstood(response)
        return None if row is None else _stripped(row)


def _stripped(row: dict[str, Any]) -> dict[str, Any]:
    """A row's text values without surrounding blanks, as the SDK hands them out."""
    return {k: v.strip() if isinstance(v, str) else v for k, v in row.items()}


class VastApi:
    def __init__(
        self,
        *,
        api_key_env: str | None,
        server_url: str | None,
        policy: RetryPolicy,
        on_retry: Callable[[str], None],
    ) -> None:
        try:
            sdk = vast_sdk.sdk_class()(
                api_key=resolve_key(api_key_env), server_url=server_url, retry=1
            )
        except RuntimeError:
            raise VastApiError("no Vast.ai API key (set VAST_API_KEY or the pool's key)") from None
        sdk.client.timeout = policy.timeout_s
        self._sdk = _Sdk(sdk)
        self._hidden = [sdk.client.api_key or ""]
        self._redact = Redactor(self._hidden)
        self._policy = policy
        self._on_retry = on_retry

    def hide(self, secrets: Iterable[str]) -> None:
        """Mask `secrets` too in every message from now on: a run's join token and re-attach
        key travel in its instance's env, which Vast lists with the instance and may echo
        in an error about the request that carried them."""
        fresh = [s for s in secrets if s and s not in self._hidden]
        if fresh:
            self._hidden.extend(fresh)
            self._redact = Redactor(self._hidden)

    def _classify(self, what: str, exc: Exception) -> VastApiError:
        if isinstance(exc, requests.HTTPError) and exc.response is not None:
            status = exc.response.status_code
            said, code = _server_says(exc.response)
            said = self._redact(said)[:200]  # redact, then cut
            message = f"Vast.ai {what}: HTTP {status}" + (f" ({said})" if said else "")
            transient = (status == 429 and code != DAILY_QUOTA) or status >= 500
            error = VastApiError(message, status=status, transient=transient, code=code)
            if status == 429:
                error.retry_after = _retry_after(exc.response)
            return error
        if isinstance(exc, NotUnderstood):
            return self._not_understood(what, exc.response)
        if isinstance(exc, requests.ConnectionError | requests.Timeout):
            kind = "timed out" if isinstance(exc, requests.Timeout) else "could not connect"
            return VastApiError(f"Vast.ai {what}: {kind}", transient=True)
        said = self._redact(" ".join(str(exc).split()))[:200]  # redact, then cut
        return VastApiError(f"Vast.ai {what}: {type(exc).__name__}" + (f": {said}" if said else ""))

    def _not_understood(self, what: str, response: requests.Response) -> VastApiError:
        """An answer the SDK could not read: Vast's refusal if it is one (`success: false`
        in a 200), else what it held, on one line, the key masked."""
        try:
            refused = self.refusal(what, response.json())
        except ValueError:
            refused = None
        if refused is not None:
            return refused
        held = self._redact(" ".join(response.text.split()))[:200] or "nothing"  # then cut
        status = response.status_code
        return VastApiError(f"Vast.ai {what}: answer not understood (HTTP {status}: {held})")

    def refusal(self, what: str, answer: Any) -> VastApiError | None:
        """A 200 whose body says `success: false` (Vast's own async client checks it): the
        refusal as an error with Vast's message, else None."""
        if not isinstance(answer, dict) or answer.get("success") is not False:
            return None
        error = answer.get("error")
        said = self._redact(str(answer.get("msg") or error or ""))[:200]
        message = f"Vast.ai {what}: refused" + (f" ({said})" if said else "")
        return VastApiError(message, code=str(error)[:64] if error else None)

    async def once(self, what: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """One attempt; failures leave as VastApiError (with `transient` set)."""
        try:
            return await asyncio.to_thread(self._sdk.answer, method, *args, **kwargs)
        except Exception as exc:
            raise self._classify(what, exc) from None

    async def call(self, what: str, method: str, *args: Any, **kwargs: Any) -> Any:
        """The call, retried on transient failures; each retry is reported."""
        retries = self._policy.attempts - 1
        for attempt in range(retries):
            try:
                return await self.once(what, method, *args, **kwargs)
            except VastApiError as error:
                if not error.transient:
                    raise
                await self.backoff(error, attempt)
        return await self.once(what, method, *args, **kwargs)

    async def backoff(self, error: VastApiError, attempt: int) -> None:
        """Report a transient failure and wait before the next attempt."""
        wait = self._policy.delay(attempt, error.retry_after)
        retries = self._policy.attempts - 1
        self._on_retry(f"{error}; retry {attempt + 1}/{retries} in {wait:.1f} s")
        await asyncio.sleep(wait)
