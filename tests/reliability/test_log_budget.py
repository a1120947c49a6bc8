"""Bounded logs through real runs: a job flooding its output with control
characters, binary or short lines leaves an events.jsonl at most 1.5× the bytes it printed,
and the lines read back from it (what the CLI replays and the console shows for a past run)
are exactly the ones in logs/run.log."""

from __future__ import annotations

import asyncio

import pytest

from engine.report import events as ev
from engine.report.datastream import read_events
from tests.support.engines import engine_with

pytestmark = [pytest.mark.timeout(120)]

MB = 1 << 20
FLOODS = {
    # what the job prints → how many bytes that is
    "control chars": (f"head -c {4 * MB} /dev/zero | tr '\\0' '\\1'", 4 * MB),
    "binary": (f"head -c {4 * MB} /dev/urandom", 4 * MB),
    "short lines": ("seq 1 50000", sum(len(str(i)) + 1 for i in range(1, 50_001))),
}


@pytest.mark.parametrize("kind", list(FLOODS))
async def test_a_flood_leaves_events_jsonl_within_budget(
    tmp_path, make_job, record_fault, kind: str
) -> None:
    command, printed = FLOODS[kind]
    async with engine_with(tmp_path / "runs") as engine:
        run_id = await engine.submit(make_job(run=command), "local")
        view = await asyncio.wait_for(engine.wait(run_id), 90)
    assert view.state == "COMPLETED", view
    size = (view.run_dir / "events.jsonl").stat().st_size
    assert size <= 1.5 * printed, (size, printed)
    logs = [e for e in read_events(view.run_dir / "events.jsonl") if isinstance(e, ev.Log)]
    replayed = "".join(line.text + "\n" for e in logs for line in e.lines)
    # newline="": a line a lone CR ended keeps it (agent/lines.py), which universal
    # newlines would read as a line break of its own
    with (view.run_dir / "logs" / "run.log").open(encoding="utf-8", newline="") as handle:
        assert replayed == handle.read()
    assert replayed  # positive control: the lines are there
    record_fault(
        f"job prints {printed / MB:.1f} MB of {kind}",
        None,
        f"COMPLETED, events.jsonl {size / printed:.3f}x the output",
    )
