"""The push preview: counts, estimate, rule explanations and warnings, on real files."""

from __future__ import annotations

import os
from pathlib import Path

from rich.console import Console

from engine.jobs.plan import plan_workspace, render_plan


def _workspace(root: Path) -> None:
    files = {
        "src/train.py": b"import torch\n" * 4000,
        "src/__pycache__/train.cpython-311.pyc": b"x" * 100,
        "artifacts/model.pt": os.urandom(1000),
        ".env": b"HF_TOKEN=abc",
        "keys/id_rsa": b"-----BEGIN",
        "conf/credentials-prod.json": b"{}",
        "data/blob.bin": os.urandom(50_000),
        "logs/keep.log": b"ok",
        "logs/noise.log": b"no",
    }
    for rel, data in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_bytes(data)


def test_plan_counts_explains_and_warns(tmp_path: Path) -> None:
    _workspace(tmp_path)
    exclude = ["/artifacts", "__pycache__", "*.log", "!keep.log"]
    plan = plan_workspace(tmp_path, exclude)
    assert plan.files == 6
    assert plan.largest[0][0] == "src/train.py"
    assert plan.compressed_estimate < plan.bytes * 0.7  # source compresses, random does not
    why = dict(plan.explanations)
    assert why["artifacts"] == "excluded by '/artifacts'"
    assert why["src/__pycache__"] == "excluded by '__pycache__'"
    assert why["logs/noise.log"] == "excluded by '*.log'"
    assert why["logs/keep.log"] == "kept (re-included by '!keep.log')"
    assert why["src/train.py"] == "kept"
    secrets = [w for w in plan.warnings if "secret" in w]
    assert len(secrets) == 3 and any(".env" in w for w in secrets)


def test_render_plan_prints_summary_and_rules(tmp_path: Path) -> None:
    _workspace(tmp_path)
    console = Console(record=True, width=120)
    render_plan(plan_workspace(tmp_path, ["/artifacts"]), explain=True, console=console)
    text = console.export_text()
    assert "files" in text and "largest files" in text and "looks like a secret: .env" in text
    assert "excluded by '/artifacts'" in text
