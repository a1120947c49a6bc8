"""The Vast.ai retry back-off: the real one unless SWJOB_VAST_BACKOFF_S shrinks it (as the
tests against the stand-in do), in proportion, and a bad value said in one line."""

from __future__ import annotations

import pytest

from engine.providers.vast_api import BACKOFF_ENV, RetryPolicy


def test_the_real_back_off_doubles_from_1_s_to_30_s(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BACKOFF_ENV, raising=False)
    policy = RetryPolicy()
    assert (policy.base_s, policy.max_s, policy.attempts) == (1.0, 30.0, 6)
    assert 0.5 <= policy.delay(0) <= 1.5 and 15.0 <= policy.delay(10) <= 45.0


def test_the_variable_shrinks_the_first_delay_and_the_cap_alike(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(BACKOFF_ENV, "0.01")
    policy = RetryPolicy()
    assert (policy.base_s, policy.max_s, policy.attempts) == (0.01, pytest.approx(0.3), 6)
    assert RetryPolicy(base_s=2.0).base_s == 2.0  # a policy given outright is kept


@pytest.mark.parametrize("raw", ["soon", "0", "-1", "nan", "5"])
def test_a_bad_value_is_one_line_naming_the_variable(
    monkeypatch: pytest.MonkeyPatch, raw: str
) -> None:
    monkeypatch.setenv(BACKOFF_ENV, raw)
    with pytest.raises(ValueError, match=f"^{BACKOFF_ENV}: not a delay of seconds in"):
        RetryPolicy()
