"""No process of a step survives it, even one that left the step's process
group and scrubbed its environment (`setsid env -i`), so the step marker cannot find
it: the agent is the child subreaper, the orphan is reparented to it and ended with
the step (before the step's exit is reported). Through a real run on the local pool."""

from __future__ import annotations

import subprocess
from pathlib import Path

from engine.report import events as ev
from tests.support.engines import engine_with
from tests.support.processes import kill_quietly, pid_alive
from tests.support.tap import Tap, pids_in_logs

DAEMON = "setsid env -i /bin/sh -c 'echo pid=$$; exec sleep 1000 >/dev/null 2>&1' &"


def escapes_group_and_marker(pid: int, pgid: int) -> bool:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rfind(")") + 2 :].split()[2]) != pgid and (
        b"SWJOB_STEP_ID" not in Path(f"/proc/{pid}/environ").read_bytes()
    )


def test_control_the_daemon_outlives_a_plain_shell() -> None:
    """Positive control: without a subreaper the same line leaves a live daemon behind,
    outside the shell's process group and without any marker."""
    done = subprocess.run(
        ["/bin/sh", "-c", f"{DAEMON} sleep 0.2"],
        capture_output=True, text=True, timeout=10, start_new_session=True,
    )  # fmt: skip
    daemon = int(done.stdout.split("pid=")[1])
    try:
        assert pid_alive(daemon) and escapes_group_and_marker(daemon, pgid=-1)
    finally:
        kill_quietly(daemon)


async def test_a_scrubbed_setsid_daemon_dies_with_its_step(
    tmp_path, make_job, record_fault
) -> None:
    job = make_job(run=f"{DAEMON} sleep 0.5; echo step-done")
    async with engine_with(tmp_path / "runs") as engine:
        tap = Tap(engine)
        run_id = await engine.submit(job, "local")
        _, printed = await tap.until(lambda e: e.run_id == run_id and bool(pids_in_logs(e)))
        (daemon,) = pids_in_logs(printed)
        try:
            assert escapes_group_and_marker(daemon, pgid=-1)
            await tap.until(
                lambda e: (
                    e.run_id == run_id and isinstance(e, ev.Transition) and e.cause == "JobExited"
                )
            )
            alive_at_step_end = pid_alive(daemon)
            view = await engine.wait(run_id)
            tap.close()
        finally:
            kill_quietly(daemon)
    logged = [line.text for e in tap.events(run_id) if isinstance(e, ev.Log) for line in e.lines]
    assert not alive_at_step_end, f"daemon {daemon} outlived its step"
    assert view.state == "COMPLETED" and "step-done" in logged, view.reason
    record_fault(
        "job leaves `setsid env -i sleep 1000 &` (own session, no step marker)",
        None,
        "reparented to the agent (subreaper), killed before the step's exit was reported",
    )
