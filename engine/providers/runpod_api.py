"""The `runpod` SDK behind one careful door: off the event loop, retried, sanitized.

The SDK (runpod 1.11.0: the same GraphQL layer as 1.12.0, which needs cryptography ≥ 50
while vastai 1.9.1 pins 49 — docs/runpod.md) speaks GraphQL to `$RUNPOD_API_BASE_URL`
(`https://api.runpod.io` by default; the stand-in in tests) with the module-global
`runpod.api_key`. Every call blocks (requests), so it runs in a thread, under one lock:
the key is the SDK's global, set for the call. Errors leave as `RunPodApiError`, one
line with the key masked; a refused request (no capacity, a bad bid) is not retried,
a transport failure or a 5xx is, with the Vast provider's back-off policy.

Where the SDK has no call this module sends its own GraphQL through the SDK's own
transport (`run_graphql_query`): the GPU type listing with every price at once (the SDK's
`get_gpus` has none, and `get_gpu` one type per request) and the spot pod
(`podRentInterruptable`: 1.11/1.12's `create_pod` has no bid).
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
from collections.abc import Callable
from typing import Any

from agent.redact import Redactor
from engine.errors import ProviderError
from engine.providers.vast_api import RetryPolicy

KEY_ENV = "RUNPOD_API_KEY"
URL_ENV = "RUNPOD_API_BASE_URL"  # the SDK's own: where it sends its GraphQL
MESSAGE_MAX = 300
# RunPod's words when a create finds no machine (docs and users' reports say them so)
NO_CAPACITY = ("no longer any instances available", "not enough free", "no instances")
_LOCK = threading.Lock()  # the SDK's key is a module global
Sdk = Callable[..., Any] | str

GPU_TYPES_QUERY = """
query GpuTypes {
  gpuTypes {
    id
    displayName
    memoryInGb
    secureCloud
    communityCloud
    securePrice
    communityPrice
    secureSpotPrice
    communitySpotPrice
    maxGpuCount
  }
}
"""


class RunPodApiError(ProviderError):
    """A RunPod call failed for good. `no_capacity`: RunPod has no machine for the request
    (the next GPU type or cloud may have one); `auth`: the key was refused."""

    def __init__(self, message: str, *, transient: bool = False, auth: bool = False) -> None:
        super().__init__(message)
        self.transient = transient
        self.auth = auth

    @property
    def no_capacity(self) -> bool:
        return any(words in str(self).lower() for words in NO_CAPACITY)


def _gql_string(value: str) -> str:
    """A GraphQL string literal. The SDK puts values between quotes as they are; swjob's
    own mutation escapes them (json's escapes are GraphQL's)."""
    return json.dumps(value)


def spot_mutation(fields: dict[str, Any], env: dict[str, str]) -> str:
    """`podRentInterruptable`, which the SDK has no call for: a spot pod with a bid per GPU."""
    parts = [
        f"{k}: {_gql_string(v) if isinstance(v, str) else json.dumps(v)}" for k, v in fields.items()
    ]
    pairs = ", ".join(
        f"{{ key: {_gql_string(k)}, value: {_gql_string(v)} }}" for k, v in env.items()
    )
    parts.append(f"env: [{pairs}]")
    return (
        "mutation { podRentInterruptable(input: { "
        + ", ".join(parts)
        + " }) { id imageName machineId costPerHr } }"
    )


class RunPodApi:
    """The account's client: the key from the pool's variable (RUNPOD_API_KEY by default)."""

    def __init__(
        self,
        api_key_env: str | None,
        *,
        policy: RetryPolicy | None = None,
        on_retry: Callable[[str], None] | None = None,
    ) -> None:
        name = api_key_env or KEY_ENV
        key = os.environ.get(name)
        if not key:
            raise RunPodApiError(f"RunPod: set {name} to the account's API key")
        self._key = key
        self._policy = policy or RetryPolicy()
        self._on_retry = on_retry or (lambda _message: None)
        self._redact = Redactor([key])

    def hide(self, secrets: list[str]) -> None:
        """Values the answers may echo (the pod's env) that must never be shown."""
        self._redact = Redactor([self._key, *secrets])

    async def call(self, what: str, fn: Sdk, *args: Any, **kwargs: Any) -> Any:
        """`fn` (an SDK function, or its name in `runpod`: the SDK is imported in the
        call's thread, ~1 s never spent on the event loop) with the key, retried on
        transient failures."""
        for attempt in range(self._policy.attempts):
            try:
                return await asyncio.to_thread(self._once, what, fn, *args, **kwargs)
            except RunPodApiError as error:
                if not error.transient or attempt == self._policy.attempts - 1:
                    raise
                self._on_retry(f"{error}; retrying")
                await asyncio.sleep(self._policy.delay(attempt))
        raise AssertionError("unreachable")

    async def once(self, what: str, fn: Sdk, *args: Any, **kwargs: Any) -> Any:
        """`fn` once: for a create, whose lost answer may have made a pod."""
        return await asyncio.to_thread(self._once, what, fn, *args, **kwargs)

    def _once(self, what: str, fn: Sdk, *args: Any, **kwargs: Any) -> Any:
        import requests
        import runpod
        from runpod import error as sdk_error

        call = getattr(runpod, fn) if isinstance(fn, str) else fn
        with _LOCK:
            runpod.api_key = self._key
            try:
                return call(*args, **kwargs)
            except sdk_error.AuthenticationError:
                raise RunPodApiError(
                    f"RunPod {what}: the API key was refused (check RUNPOD_API_KEY)", auth=True
                ) from None
            except sdk_error.QueryError as exc:
                raise RunPodApiError(self._line(what, str(exc))) from None
            except requests.RequestException as exc:
                raise RunPodApiError(self._line(what, str(exc)), transient=True) from None
            except (ValueError, KeyError, TypeError) as exc:  # 5xx bodies the SDK cannot read
                raise RunPodApiError(self._line(what, repr(exc)), transient=True) from None
            finally:
                runpod.api_key = None

    def _line(self, what: str, said: str) -> str:
        one = " ".join(self._redact(said).split())[:MESSAGE_MAX]
        return f"RunPod {what}: {one}"


def gpu_types() -> list[dict[str, Any]]:
    """Every GPU type with its prices (one request; see the module's docstring)."""
    from runpod.api.graphql import run_graphql_query

    return run_graphql_query(GPU_TYPES_QUERY)["data"]["gpuTypes"] or []


def rent_spot(fields: dict[str, Any], env: dict[str, str]) -> dict[str, Any]:
    from runpod.api.graphql import run_graphql_query

    return run_graphql_query(spot_mutation(fields, env))["data"]["podRentInterruptable"]
