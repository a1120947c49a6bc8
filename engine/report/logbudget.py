"""Keeping a run's events.jsonl near the size of the output it records.

JSON spells a control character as six bytes (`\\u0001`) and wraps each line in its own
object, so a job printing 20 MB of `\\x01` (or binary, or a flood of short lines) made a
120 MB events.jsonl. A log event whose plain JSON would be much larger than the text it
carries is written packed instead: its lines as zstd-compressed JSON in base85 (a JSON-safe
alphabet), under `packed`, next to the usual envelope. Ordinary text stays plain and
greppable. Reading unpacks transparently (`unpack`, called by the Log model), so the
console, the CLI and recovery see the same lines either way.
"""

from __future__ import annotations

import base64
import json
from typing import TYPE_CHECKING, Any

import zstandard

if TYPE_CHECKING:
    from engine.report.events import Log

PACKED = "packed"
RATIO = 1.4  # plain JSON up to this × the text's bytes stays plain (budget: 1.5)
SLACK = 512  # the envelope (run id, seq, time, step): a small batch is never worth packing
_LEVEL = 3
MAX_UNPACKED = 256 << 20  # a packed batch never expands past this (a damaged file)
_UTF8, _LONE = "utf-8", "surrogatepass"  # a lone surrogate must not break the event log


def dump(event: Log) -> str:
    """The events.jsonl line (without newline) for a log event: plain, or packed when plain
    would blow up the text it carries (sizes in bytes as written: UTF-8)."""
    plain = event.model_dump_json()
    plain_bytes = len(plain.encode(_UTF8, _LONE))
    text_bytes = sum(len(line.text.encode(_UTF8, _LONE)) + 1 for line in event.lines)
    if plain_bytes <= RATIO * text_bytes + SLACK:
        return plain
    rows = [[line.stream.value, line.text] for line in event.lines]
    body = json.dumps(rows, ensure_ascii=False, separators=(",", ":")).encode(_UTF8, _LONE)
    packed = base64.b85encode(zstandard.ZstdCompressor(level=_LEVEL).compress(body)).decode()
    envelope = event.model_dump(mode="json", exclude={"lines"})
    record = {"kind": envelope.pop("kind"), PACKED: packed, **envelope}
    line = json.dumps(record, separators=(",", ":"))
    return line if len(line) < plain_bytes else plain


def unpack(data: Any) -> Any:
    """A parsed log record with its `packed` lines restored (anything else unchanged)."""
    if not isinstance(data, dict) or PACKED not in data:
        return data
    data = dict(data)
    raw = base64.b85decode(data.pop(PACKED))
    body = zstandard.ZstdDecompressor().decompress(raw, max_output_size=MAX_UNPACKED)
    data["lines"] = [{"stream": s, "text": t} for s, t in json.loads(body.decode(_UTF8, _LONE))]
    return data
