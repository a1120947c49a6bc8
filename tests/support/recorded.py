"""Runs recorded once (tests/tui/data/runs) made into a console's history: the board's
tests and the key benchmark show them without running anything."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timedelta
from pathlib import Path

from engine.engine import Engine
from engine.state.store import Store
from tui import history

RECORDED = Path(__file__).resolve().parents[1] / "tui" / "data" / "runs"
"""Two recorded runs, for console tests where a run's being live is no part of it."""


def with_history(engine: Engine, recorded: Path) -> Engine:
    """The engine with the runs recorded under `recorded` (landing dirs whose events say
    {RUN_DIR} for where they land) as its history: copied where a real engine finds them,
    their summaries in the run index."""
    runs_dir = engine.config.runs_dir
    shutil.copytree(recorded, runs_dir)
    store = Store()
    for events in sorted(runs_dir.glob("*/*/events.jsonl")):
        events.write_text(events.read_text().replace("{RUN_DIR}", str(events.parent)))
        view = history.load(events.parent, 10).view
        assert view is not None
        store.save(view)
    store.close()
    return engine


OUTCOMES = (
    (None, 0),
    ("run exited with code 3", 3),
    ("setup failed with code 1", None),
    ("cap reached: max_dollars $0.01 (spent $0.0100)", None),
    ("stopped by operator", None),
    ("node lost: agent process exited with code -9", None),
)
"""How the board's recorded runs end: completed, or failed for each kind of reason."""


def many_runs(recorded: Path, into: Path, count: int) -> Path:
    """`count` runs made from the recorded hello run under `recorded`, a minute apart,
    named as a sweep's variants (long names) and ending in every way OUTCOMES lists."""
    source = next((recorded / "hello").iterdir())
    for i in range(count):
        run_id = f"20260102-11{i:02d}00-{i:04d}"
        name = f"sweep-lr-3e-4-batch-{2 ** (i % 6 + 4)}-seed-{i}" if i % 3 else f"job-{i}"
        target = into / name / run_id
        shutil.copytree(source, target)
        reason, code = OUTCOMES[i % len(OUTCOMES)]
        lines = []
        for raw in (source / "events.jsonl").read_text().splitlines():
            event = json.loads(raw.replace(source.name, run_id))
            stamp = datetime.fromisoformat(event["ts"]) - timedelta(minutes=count - i)
            event["ts"] = stamp.isoformat().replace("+00:00", "Z")
            if event["kind"] == "submitted":
                event["job_name"] = name
            if reason and event["kind"] in ("transition", "finished"):
                failed = {k: "FAILED" for k in ("to_state", "from_state", "state") if
                          event.get(k) == "COMPLETED"}  # fmt: skip
                event |= failed
                if failed and event.get("to_state", event.get("state")) == "FAILED":
                    event |= {"reason": reason, "exit_code": code}
            lines.append(json.dumps(event))
        (target / "events.jsonl").write_text("\n".join(lines) + "\n")
    return into
