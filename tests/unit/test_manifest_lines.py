"""manifest.json's file lines, rendered without json's encoder, read as json.dumps writes them."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from engine.run.manifest import ManifestEntry, PullResult, write_manifest

ENTRIES = [
    ManifestEntry("a/b.txt", 10, 0o644, "ab" * 32, True),
    ManifestEntry('q"uote\\back\tslash', 0, 0o600, None, False, "vanished \u00e9", True),
    ManifestEntry("caf\u00e9/\udcff\U0001f600", 1 << 40, 0o755, None, False, None, False),
]


def test_each_file_line_is_what_json_dumps_writes(tmp_path: Path) -> None:
    write_manifest(tmp_path, PullResult(ENTRIES, ["gone/*"], 10), lambda s: s.replace("b", "*"))
    text = (tmp_path / "manifest.json").read_text()
    expected = [
        json.dumps(dataclasses.asdict(e) | {"path": e.path.replace("b", "*")}) for e in ENTRIES
    ]
    assert [line.strip().rstrip(",") for line in text.splitlines()[3:6]] == expected
    body = json.loads(text)
    assert body["files"][1]["reason"] == "vanished \u00e9" and body["missing"] == ["gone/*"]
