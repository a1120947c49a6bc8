"""HTTP 429 from Vast.ai, through the real SDK against the stand-in.

Vast documents (docs.vast.ai, "Rate Limits and Errors") that it sets no Retry-After today
and often answers a 429 in plain text ("API requests too frequent"), so a client backs
off on its own: the adapter does, and says so with Vast's text. A Retry-After, when one
comes, is waited for. A daily search quota (`search_quota_exceeded`, as the SDK knows it)
resets only at UTC midnight: it is not retried, it fails at once with one line."""

from __future__ import annotations

import pytest

from engine.providers.vast_api import VastApi, VastApiError
from tests.standin.server import StandIn
from tests.support.vast import FAST

pytestmark = pytest.mark.timeout(60)


def vast_api(api: StandIn, alerts: list[str]) -> VastApi:
    """The adapter's API client (FAST policy: its own backoff is ~10 ms)."""
    return VastApi(api_key_env=None, server_url=api.url, policy=FAST, on_retry=alerts.append)


def gaps(api: StandIn) -> list[float]:
    """Seconds between consecutive requests the stand-in received."""
    return [b - a for a, b in zip(api.arrived, api.arrived[1:], strict=False)]


async def test_a_retry_after_is_waited_for(api: StandIn) -> None:
    api.cloud.faults.rate_limit_next = 1
    api.cloud.faults.retry_after_s = 1.0
    alerts: list[str] = []
    assert await vast_api(api, alerts).call("show instances", "show_instances") == []
    assert len(api.requests) == 2
    assert gaps(api)[0] >= 1.0, "asked again before the server's Retry-After"
    assert alerts == ["Vast.ai show instances: HTTP 429 (rate_limited); retry 1/3 in 1.0 s"]


async def test_a_429_as_vast_sends_it_is_backed_off_by_the_adapter(api: StandIn) -> None:
    """No Retry-After and a plain-text body: the policy's own backoff, and Vast's words."""
    api.cloud.faults.rate_limit_next = 2
    api.cloud.faults.retry_after_s = None
    api.cloud.faults.rate_limit_body = "API requests too frequent"
    alerts: list[str] = []
    assert await vast_api(api, alerts).call("show instances", "show_instances") == []
    assert len(api.requests) == 3
    assert alerts == [  # the policy's backoff chose the waits (FAST: a few ms each)
        f"Vast.ai show instances: HTTP 429 (API requests too frequent); retry {n}/3 in 0.0 s"
        for n in (1, 2)
    ]


async def test_a_daily_search_quota_is_not_retried(api: StandIn) -> None:
    api.cloud.faults.rate_limit_next = 5
    api.cloud.faults.rate_limit_body = {
        "success": False,
        "error": "search_quota_exceeded",
        "msg": "daily search quota exceeded",
    }
    alerts: list[str] = []
    with pytest.raises(VastApiError) as failure:
        await vast_api(api, alerts).call("search offers", "show_instances")
    assert str(failure.value) == "Vast.ai search offers: HTTP 429 (daily search quota exceeded)"
    assert len(api.requests) == 1 and alerts == []
