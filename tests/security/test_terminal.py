"""Nothing from a peer or a job reaches the operator's terminal raw. A job
prints escape sequences (screen clear, OSC 52 clipboard write, bell, a fake status line)
and a stranger sends a hello whose run id holds the same; `swjob run` (a subprocess,
output captured) must print every one of them in caret notation and no ESC or BEL byte.
(The console draws job text through `printable`: tests/tui's hostile-output snapshot.)"""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from agent.protocol import CTL_ALPN, Channel, Hello, NodeFacts, Reject
from tests.security.helpers import (
    engine_addr,
    rogues,
    waiting_run,
)
from tests.support.waiting import eventually_async

pytestmark = [pytest.mark.timeout(90)]

HOSTILE_PRINT = r"printf '\033[2J\033]52;c;ZXZpbA==\007evil\a\nCOMPLETED fake\n'"
FACTS = NodeFacts(
    hostname="rogue", os="linux", cpus=1, memory_mb=1, disk_free_mb=1,
    python_version="3.11", agent_version="0",
)  # fmt: skip
ROGUE_RUN_ID = "x\x1b[2J\x1b]52;c;ZXZpbA==\x07\nCOMPLETED peer-fake"


async def test_job_output_and_peer_text_reach_the_terminal_visible(
    tmp_path, make_job, clis, record_fault
) -> None:
    go = tmp_path / "go"
    job = make_job(run=waiting_run(go, before=f"{HOSTILE_PRINT}; {HOSTILE_PRINT} >&2"))
    cli = clis("run", str(job.source), "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path)
    await eventually_async(lambda: cli.has_printed("evil"))
    async with rogues(1) as (ep,):
        conn = await ep.connect(engine_addr(Path(os.environ["SWJOB_STATE_DIR"])), CTL_ALPN)
        bi = await conn.open_bi()
        channel = Channel(bi.recv(), bi.send())
        await channel.send(Hello(run_id=ROGUE_RUN_ID, token="t", facts=FACTS))
        assert await asyncio.wait_for(channel.recv(), 30) == Reject(reason="unknown run")
    await eventually_async(lambda: cli.has_printed("peer-fake"))
    go.touch()
    code = await asyncio.to_thread(cli.wait, 60)
    printed = cli.out_path.read_bytes()
    assert code == 0, printed
    assert b"\x1b" not in printed and b"\x07" not in printed and b"\x9b" not in printed
    text = printed.decode()
    # the job's lines, stdout and stderr: every control drawn, nothing dropped
    assert text.count("^[[2J^[]52;c;ZXZpbA==^Gevil^G") == 2, text
    assert "| COMPLETED fake" in text and "! COMPLETED fake" in text  # marked as job output
    # the stranger's run id, in the engine's refusal on stderr: one line, controls shown
    (refusal,) = [line for line in text.splitlines() if "peer-fake" in line]
    assert "for run x^[[2J^[]52;c;ZXZpbA==^G^JCOMPLETED peer-fake: unknown run" in refusal
    record_fault(
        "job prints ESC/OSC 52/BEL and a fake status line; stranger's hello run id holds them",
        None,
        "`swjob run` printed them as ^[ ^G ^J, no ESC or BEL byte; run COMPLETED",
    )
