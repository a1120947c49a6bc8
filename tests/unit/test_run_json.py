"""run.json is written whatever its strings hold (engine/run/runrecord.write_summary)."""

from __future__ import annotations

import json
from pathlib import Path

from engine.run.runrecord import write_summary


def test_run_json_is_indented_json(tmp_path: Path) -> None:
    written = write_summary(tmp_path, {"state": "COMPLETED", "job": {"name": "naïve"}})
    text = written.read_text(encoding="utf-8")
    assert json.loads(text) == {"state": "COMPLETED", "job": {"name": "naïve"}}
    assert text.endswith("\n") and '\n  "state"' in text


def test_a_job_file_path_that_is_not_utf8_still_gets_its_run_json(tmp_path: Path) -> None:
    """A job file named in another encoding arrives as a lone surrogate (`caf\\udce9`):
    pydantic's encoder refuses it, and the run was left with no run.json at all."""
    summary = {"state": "FAILED", "job_file": "/home/u/caf\udce9.toml"}
    written = write_summary(tmp_path, summary)
    assert json.loads(written.read_text(encoding="utf-8")) == summary
