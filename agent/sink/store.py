"""An obstore S3 client for one run's prefix, and store errors said in one line.

The store is rooted at the run's prefix (obstore's `prefix`), so every key this code
makes lies under it: a job's output path can name no other run's objects. Credentials
come only from the SinkTarget — never from the node's environment, which is the job's.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import TYPE_CHECKING, Any

from agent.protocol import SinkTarget

if TYPE_CHECKING:
    from obstore.store import S3Store

RETRIES = 3
REQUEST_TIMEOUT = "300s"  # one request (a part of a big file) may take this long
CONNECT_TIMEOUT = "10s"


def open_store(target: SinkTarget, prefix: str | None = None, retries: int = RETRIES) -> S3Store:
    """A client for `prefix` (default: the run's own) in the target's bucket. obstore is
    imported here, by the first run that has a sink: a node or a `swjob run` without one
    does not pay for loading it."""
    from obstore.store import S3Store

    config: dict[str, Any] = {
        "access_key_id": target.access_key_id,
        "secret_access_key": target.secret_access_key,
        "region": target.region or "us-east-1",
    }
    if target.session_token:
        config["token"] = target.session_token
    if target.endpoint:
        config["endpoint"] = target.endpoint
    options: dict[str, Any] = {"timeout": REQUEST_TIMEOUT, "connect_timeout": CONNECT_TIMEOUT}
    if (target.endpoint or "").startswith("http://"):
        options["allow_http"] = True
    retry = {"max_retries": retries, "retry_timeout": timedelta(seconds=60)}
    return S3Store(
        target.bucket,
        prefix=target.prefix if prefix is None else prefix,
        config=config,
        client_options=options,
        retry_config=retry,
    )


_CODE = re.compile(r"<Code>([^<]{1,64})</Code>")
_STATUS = re.compile(r"status code: (\d{3})")
_DENIED = ("AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch", "ExpiredToken")


def describe(exc: BaseException, bucket: str = "") -> str:
    """One line for a store error: what went wrong and what to check, no XML, no URL query."""
    text = str(exc)
    code = found.group(1) if (found := _CODE.search(text)) else ""
    status = found.group(1) if (found := _STATUS.search(text)) else ""
    if code == "NoSuchBucket":
        return f"no such bucket {bucket!r} at the sink's endpoint"
    if (
        code in _DENIED
        or status in ("401", "403")
        or type(exc).__name__
        in (
            "PermissionDeniedError",
            "UnauthenticatedError",
        )
    ):
        return f"access denied ({code or status}): check the sink's credentials and their scope"
    if "error sending request" in text or ("connect" in text.lower() and not status):
        return "sink endpoint unreachable (connection failed)"
    first = text.splitlines()[0] if text else type(exc).__name__
    first = re.sub(r"https?://\S+", "<endpoint>", first)
    return first[:200] + ("…" if len(first) > 200 else "")
