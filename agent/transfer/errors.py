"""The one failure type of the transfer service.

A `TransferError` is final: the client has already retried what can be retried
(dropped connections), so the run fails with "transfer failed: <message>". The
message is one line and names the file it is about.
"""

from __future__ import annotations


class TransferError(Exception):
    """A transfer cannot complete: bad path, hash mismatch, unreadable file, retries spent."""


class UnsafePath(TransferError):
    """A path or link target would leave the transfer root, or names a special file."""


class WireError(TransferError):
    """The peer sent bytes that are not valid transfer framing (here, not in `wire`, so the
    codec can say so without importing the stream machinery and asyncio: `swjob plan`
    compresses samples and starts faster without them)."""
