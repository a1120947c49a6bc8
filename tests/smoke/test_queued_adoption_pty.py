"""A run the real console queued for a slot of its pool (`max_nodes = 1`, the slot held by
another run) whose console is then killed -9: `swjob attach` starts it, it is not failed.
Nothing was rented for it, and the user queued it to run. Two attaches of it at once: one
adopts it, the other only follows. The pool's one node is still the other run's, whose
operator died with the console: the queued run waits for it (max_nodes counts it) until
that run too is attached and carried to its end. Every process is ended by its pid."""

from __future__ import annotations

import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest

from engine.run.recovery import QUEUED_RESTART, RECOVERED
from tests.smoke.test_tui_pty import console
from tests.support.cli import Cli
from tests.support.processes import node_dirs, pid_alive
from tests.support.runs import agent_pid, events, run_json, waiting_job
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(180)

FOLLOWING = "driven by another swjob process"


def _transitions(run_dir: Path) -> list[tuple[str, str]]:
    return [(e.cause, e.to_phase) for e in events(run_dir) if e.kind == "transition"]


def test_a_run_queued_when_its_console_was_killed_is_started_by_attach(
    tmp_path: Path, clis: Callable[..., Cli]
) -> None:
    release = tmp_path / "release"
    job = waiting_job(tmp_path / "job", "held", release)
    pools = tmp_path / "pools.toml"
    pools.write_text('[pools.one]\nprovider = "local"\nmax_nodes = 1\n')
    term = console(tmp_path, str(job), str(job), "--pool", "one", "--pools", str(pools))
    root = tmp_path / "runs" / "held"
    try:
        term.wait_for(lambda text: "RUNNING" in text and "queued" in text, timeout=60)
        runs = sorted(root.iterdir())
        assert len(runs) == 2

        def settled() -> bool:  # on disk: one run with its node, one queued (submitted)
            noded = [r for r in runs if any(e.kind == "node" for e in events(r))]
            return len(noded) == 1 and all(_transitions(r) for r in runs)

        eventually(settled, what="one run on the pool's node, the other queued on record")
        os.kill(term.child.pid, signal.SIGKILL)
        term.wait_exit()
    finally:
        term.kill()
    [first] = [r for r in runs if any(e.kind == "node" for e in events(r))]
    [queued] = [r for r in runs if r != first]
    assert _transitions(queued) == [("JobSubmitted", "provisioning")]
    assert not any(e.kind in ("boot", "node") for e in events(queued))  # nothing rented
    node = agent_pid(first)
    assert pid_alive(node), "the first run's node outlives its console"

    try:
        attaches = [
            clis("attach", queued.name, "--pools", str(pools), cwd=tmp_path) for _ in (1, 2)
        ]
        eventually(lambda: any(FOLLOWING in a.output() for a in attaches), 30, "one follows")
        follower, adopter = attaches if FOLLOWING in attaches[0].output() else attaches[::-1]
        eventually(lambda: adopter.has_printed(QUEUED_RESTART), 30, "the queued run adopted")
        # the pool's one node is still the first run's, whose operator died: the queued
        # run waits for it, saying whose it is and what ends it, and rents nothing beside it
        waits = f"by a run whose swjob process died ({first.name})"
        eventually(lambda: adopter.has_printed(waits), 30, "the queued run waiting")
        assert not adopter.has_printed("line 3") and len(node_dirs()) == 1

        other = clis("attach", first.name, "--pools", str(pools), cwd=tmp_path)
        eventually(lambda: other.has_printed(RECOVERED), 30, "the first run adopted")
        release.touch()  # both jobs end as soon as they run
        assert other.wait(60) == 0, other.output()
        assert QUEUED_RESTART not in other.output()
        assert run_json(first)["state"] == "COMPLETED"
        assert not pid_alive(node)

        assert adopter.wait(60) == 0, adopter.output()  # its node came once the first's went
        assert adopter.has_printed("line 3")
        assert follower.wait(60) == 0, follower.output()
        assert FOLLOWING not in adopter.output()
        assert "operator restarted before the node was provisioned" not in adopter.output()

        assert run_json(queued)["state"] == "COMPLETED"
        assert (queued / "outputs" / "out.txt").read_text() == "done\n"
        said = [e.message for e in events(queued) if e.kind == "alert"]
        assert said[0] == QUEUED_RESTART and all(waits in m for m in said[1:]), said
        assert [cause for cause, _ in _transitions(queued)][:3] == [
            "JobSubmitted",
            "QueuedRunAdopted",
            "NodeReady",
        ]
    except BaseException:  # both jobs may end, and the first run's node goes (by its pid)
        release.touch()
        if pid_alive(node):
            os.kill(node, signal.SIGTERM)  # the agent stops its step and exits
            eventually(lambda: not pid_alive(node), 30, "the first run's node ended")
        raise
    assert node_dirs() == []
