"""Where a run's objects lie in its sink, and what its manifest says.

`<prefix>/<job>/<run id>/outputs/<path>` holds each output file under the path the job
wrote it at; `<prefix>/<job>/<run id>/manifest.json` is written after every file it
lists, so a reader that finds `"complete": true` knows the set is whole. A big file
lies in part objects instead (agent/sink/parts.py); its manifest row names their size. A live sync
writes `synced.json` of the same shape (never complete: the job still runs), which is
what a next attempt resumes from when no manifest was written.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from typing import Any

from agent.sink.parts import MOST_PARTS, part_count
from agent.transfer.errors import TransferError
from agent.transfer.safety import check_link_target, check_relpath

OUTPUTS = "outputs"
MANIFEST = "manifest.json"
SYNCED = "synced.json"
_URL = re.compile(r"^s3://([a-z0-9][a-z0-9.-]{1,61}[a-z0-9])(?:/(.*))?$")
_SEGMENT = re.compile(r"^[A-Za-z0-9!_.*'()-][A-Za-z0-9!_.*'() -]{0,255}$")


def parse_url(url: str) -> tuple[str, str]:
    """`s3://bucket/some/prefix` → ("bucket", "some/prefix"); ValueError saying what is wrong."""
    found = _URL.fullmatch(url)
    if found is None:
        raise ValueError(f"not an s3:// URL of a bucket (s3://bucket/prefix): {url!r}")
    prefix = (found.group(2) or "").strip("/")
    if prefix and not all(
        _SEGMENT.fullmatch(s) and s not in (".", "..") for s in prefix.split("/")
    ):
        raise ValueError(f"unsafe prefix in {url!r}: letters, digits and -_.!*'() only")
    return found.group(1), prefix


def run_prefix(prefix: str, job: str, run_id: str) -> str:
    """The one prefix a run's node writes under."""
    return "/".join(p for p in (prefix, job, run_id) if p)


def output_key(path: str) -> str:
    """An output's key under the run's prefix; refuses a path that would leave it."""
    return f"{OUTPUTS}/{check_relpath(path)}"


@dataclass
class Manifest:
    """What a run's prefix holds: each file's size and SHA-256, its links, what did not land."""

    files: dict[str, tuple[int, str]] = field(default_factory=dict)  # path → (size, sha256)
    parts: dict[str, int] = field(default_factory=dict)  # path → part size: a big file's
    links: dict[str, str] = field(default_factory=dict)
    not_landed: dict[str, str] = field(default_factory=dict)
    missing: list[str] = field(default_factory=list)
    refused: list[str] = field(default_factory=list)  # left out: escaping links, special files
    complete: bool = False
    written_at: float = 0.0

    @property
    def bytes(self) -> int:
        return sum(size for size, _ in self.files.values())

    def encode(self) -> bytes:
        body = {
            "complete": self.complete,
            "written_at": time.time(),
            "files": {p: self._row(p) for p in sorted(self.files)},
            "links": dict(sorted(self.links.items())),
            "not_landed": dict(sorted(self.not_landed.items())),
            "missing": self.missing,
            "refused": self.refused,
        }
        return json.dumps(body, indent=1).encode() + b"\n"

    def _row(self, path: str) -> dict[str, Any]:
        size, sha = self.files[path]
        row: dict[str, Any] = {"size": size, "sha256": sha}
        if path in self.parts:
            row["part_size"] = self.parts[path]
        return row

    @classmethod
    def decode(cls, data: bytes) -> Manifest:
        """Parse a manifest read from the store, checked as if a stranger wrote it."""
        try:
            body: Any = json.loads(data)
            files = {
                check_relpath(p): (_size(row["size"]), _digest(row["sha256"]))
                for p, row in body["files"].items()
            }
            parts = {
                p: _part_size(row["part_size"], files[p][0])
                for p, row in body["files"].items()
                if "part_size" in row
            }
            links = {check_relpath(p): check_link_target(p, t) for p, t in body["links"].items()}
            return cls(
                files=files,
                parts=parts,
                links=links,
                not_landed={str(p): str(r) for p, r in body.get("not_landed", {}).items()},
                missing=[str(m) for m in body.get("missing", [])],
                refused=[str(r) for r in body.get("refused", [])],
                complete=body["complete"] is True,
                written_at=float(body.get("written_at", 0.0)),
            )
        except (ValueError, KeyError, TypeError, AttributeError, TransferError) as exc:
            raise TransferError(f"bad manifest in the sink: {exc}") from None


def _size(value: Any) -> int:
    if not isinstance(value, int) or value < 0:
        raise ValueError(f"bad size {value!r}")
    return value


def _part_size(value: Any, size: int) -> int:
    if not isinstance(value, int) or value < 1 or part_count(size, value) > MOST_PARTS:
        raise ValueError(f"bad part_size {value!r}")
    return value


def _digest(value: Any) -> str:
    if not isinstance(value, str) or not re.fullmatch(r"[0-9a-f]{64}", value):
        raise ValueError(f"bad sha256 {value!r}")
    return value
