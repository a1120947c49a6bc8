"""Which of Vast's status messages end a boot at once (engine/providers/vast_status.py):
docker saying the image cannot be pulled or its container cannot be made, while the
instance has not started — not a registry or network that was only slow or busy, which
Vast's host tries again by itself."""

from __future__ import annotations

import pytest

from engine.providers.vast_status import BootWatch


def _said(status: str | None, message: str) -> str | None:
    return BootWatch().start_failed({"actual_status": status, "status_msg": message})


@pytest.mark.parametrize(
    "message",
    [
        "Error response from daemon: pull access denied for nosuch/image, repository does "
        "not exist or may require 'docker login'",
        "Error response from daemon: manifest for img:latest not found: manifest unknown",
        "Error response from daemon: OCI runtime create failed: runc create failed",
    ],
)
def test_an_image_that_will_not_run_ends_the_boot(message: str) -> None:
    assert _said("loading", message) == message
    assert _said(None, message) == message


@pytest.mark.parametrize(
    "message",
    [
        "Error response from daemon: toomanyrequests: You have reached your pull rate limit",
        'Error response from daemon: Get "https://registry-1.docker.io/v2/": net/http: '
        "TLS handshake timeout",
        'Error response from daemon: Head "https://ghcr.io/v2/x/manifests/1": '
        "dial tcp: i/o timeout",
        "Error response from daemon: received unexpected HTTP status: 503 Service Unavailable",
    ],
)
def test_a_registry_only_slow_or_busy_does_not(message: str) -> None:
    assert _said("loading", message) is None


def test_a_started_instance_is_not_judged_by_it() -> None:
    said = "Error response from daemon: pull access denied for x"
    assert _said("running", said) is None and _said("exited", said) is None
    assert _said("loading", "pulling fs layer") is None
