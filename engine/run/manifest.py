"""What a pull leaves for the operator: one entry per listed output file, verified or not
(then with its reason), and `manifest.json`, written atomically.

Reasons quote names the job chose, so they pass through the run's redactor.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from json.encoder import encode_basestring_ascii
from pathlib import Path
from typing import Any

from agent.transfer.receiver import Receiver
from agent.transfer.sender import CHANGED
from agent.transfer.walk import Entry
from engine.state.wholefile import replace_whole


class LandingFailed(Exception):
    """The operator's own disk refused what landed (full, read-only): the outputs are not
    collected, yet the node did nothing wrong, so the run keeps its exit code's verdict."""


@contextlib.contextmanager
def landing(path: Path) -> Iterator[None]:
    """An OSError while writing `path` on the operator's disk becomes LandingFailed naming it."""
    try:
        yield
    except OSError as exc:
        raise LandingFailed(f"cannot write {path}: {exc.strerror or exc}") from None


class ManifestNotWritten(LandingFailed):
    """Every output was pulled, and those `result` marks verified lie whole in outputs/,
    but manifest.json could not be written: they are collected all the same."""

    def __init__(self, why: str, result: PullResult) -> None:
        super().__init__(why)
        self.result = result


# Not frozen: a frozen dataclass sets each field through object.__setattr__, and a pull
# of 100,000 outputs makes 100,000 of these (0.8 s of CPU, against 0.2 s); never changed
# once made (hashable as when frozen). Slots: no __dict__, one object a file.
@dataclass(slots=True, unsafe_hash=True)
class ManifestEntry:
    path: str
    size: int
    mode: int
    sha256: str | None
    verified: bool
    reason: str | None = None  # why it did not land (vanished, unreadable, refused, changed)
    synced_earlier: bool = False  # not landed now, but outputs/ holds what a live sync landed


@dataclass(frozen=True)
class PullResult:
    files: list[ManifestEntry]
    missing: list[str]
    bytes: int
    refused: list[str] = field(default_factory=list)
    attempts: int = 1
    pruned: list[str] = field(default_factory=list)  # synced earlier, gone from the node since

    @property
    def not_landed(self) -> list[ManifestEntry]:
        """Listed files that did not land, each with its reason."""
        return [e for e in self.files if not e.verified]

    def cut_short(self, why: str) -> PullResult:
        """This result of a collection stopped before its end (the operator, a cap, the
        node lost): each file that did not land and has no reason of its own gets `why`."""
        files = [e if e.verified or e.reason else replace(e, reason=why) for e in self.files]
        return replace(self, files=files)


def worth_another_pass(reason: str) -> bool:
    """A file read mid-rewrite or damaged on the way may move whole next time; a vanished,
    unreadable or refused one will not."""
    return reason.startswith(CHANGED) or reason.startswith("verification failed")


def manifest_entries(
    entries: list[Entry], receiver: Receiver, redact: Callable[[str], str]
) -> list[ManifestEntry]:
    out = []
    for entry in entries:
        if entry.kind != "file":
            continue
        landed = receiver.verified.get(entry.path)
        if landed is not None:
            out.append(ManifestEntry(entry.path, landed.size, entry.mode, landed.sha256, True))
            continue
        reason = receiver.failed.get(entry.path)
        reason = None if reason is None else redact(reason)
        earlier = (receiver.root / entry.path).is_file()  # reconciled: a file, if anything
        out.append(ManifestEntry(entry.path, entry.size, entry.mode, None, False, reason, earlier))
    return out


def write_manifest(
    run_dir: Path,
    result: PullResult,
    redact: Callable[[str], str],
    *,
    complete: bool = True,
    cut_short: str | None = None,
) -> None:
    """`complete` is False when the pull failed: the files marked verified landed whole,
    the others did not land at all (`cut_short`: why the collection was stopped). A path
    holding a secret is written masked (the file itself lands under its real name).
    LandingFailed when the disk refuses it: then no manifest is left, never a half-written
    one."""
    files = [_line(e, redact) for e in result.files]
    body: dict[str, Any] = {"complete": complete, "files": files}
    if cut_short is not None:
        body["cut_short"] = redact(cut_short)
    body |= {"missing": [redact(m) for m in result.missing], "refused": result.refused}
    if result.pruned:  # a live sync had landed them; the job deleted or replaced them since
        body["removed_since_sync"] = [redact(p) for p in result.pruned]
    final = run_dir / "manifest.json"
    with landing(final):
        replace_whole(final, _render(body))


def _json(value: str | bool | None) -> str:
    """A string, a bool or null as `json.dumps` writes it (ASCII, escaped: its C helper)."""
    if isinstance(value, str):
        return encode_basestring_ascii(value)
    return "null" if value is None else "true" if value else "false"


def _line(e: ManifestEntry, redact: Callable[[str], str]) -> str:
    """One file's line in manifest.json, exactly as `json.dumps` of its fields would write
    it, at a sixth of the CPU: a dict and the encoder a file cost ~0.35 s per 100,000
    outputs, at the end of a pull, when nothing else overlaps it."""
    return (
        f'{{"path": {_json(redact(e.path))}, "size": {int(e.size)}, "mode": {int(e.mode)}, '
        f'"sha256": {_json(e.sha256)}, "verified": {_json(e.verified)}, '
        f'"reason": {_json(e.reason)}, "synced_earlier": {_json(e.synced_earlier)}}}'
    )


def _render(body: dict[str, Any]) -> str:
    """The manifest as indented JSON with one line a file (`files` holds them rendered:
    `_line`). `json.dumps(indent=2)` runs json's pure-Python encoder (0.65 s of CPU for
    100,000 outputs); a line a file costs a tenth of that, and reads as well."""
    parts = []
    for key, value in body.items():
        if key == "files" and value:
            rows = ",\n".join(f"    {line}" for line in value)
            parts.append(f'  "files": [\n{rows}\n  ]')
        else:
            parts.append(
                f"  {json.dumps(key)}: " + json.dumps(value, indent=2).replace("\n", "\n  ")
            )
    return "{\n" + ",\n".join(parts) + "\n}\n"
