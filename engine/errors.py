"""Errors the engine's callers may catch, and how any error becomes one line for a user.

`ProviderError` is the provider-neutral face of a cloud API that failed for good (the
Vast.ai adapter raises a subclass): a console or CLI catches it without importing any
provider's SDK.
"""

from __future__ import annotations


class SwjobError(Exception):
    """What every error swjob means a user to read derives from: its message is one line,
    the one the CLI prints after `error:`. Python users catch this one type."""


class ProviderError(SwjobError):
    """A provider's API call failed for good; the message is one sanitized line."""


class UnusableDirError(SwjobError):
    """A directory swjob keeps its state or cache in, or a state file in it, cannot be used
    (a file in its way, a read-only disk, another process holding its lock); the message
    is one line naming it."""


def one_line(exc: BaseException) -> str:
    """The first line of what `exc` says, or its type when it says nothing: an
    AttributeError from deep in an SDK still names itself instead of vanishing."""
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    kind = type(exc).__name__
    if not text:
        return kind
    if isinstance(exc, ProviderError) or type(exc).__module__.startswith("engine"):
        return text
    return f"{kind}: {text}"
