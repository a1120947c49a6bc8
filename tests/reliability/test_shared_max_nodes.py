"""A pool's `max_nodes` holds across swjob processes: two `swjob run` in two terminals on a
one-node pool. Before, each process counted only its own nodes, and both ran at once (two
Vast.ai instances rented on a `max_nodes = 1` pool). Now the second waits, says why, and
gets the node once the first run's is gone. Real `swjob` processes, real agents."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.support.cli import Cli
from tests.support.processes import node_dirs
from tests.support.runs import only_run_dir, run_json, waiting_job
from tests.support.waiting import eventually

POOLS = '[pools.local]\nprovider = "local"\nmax_nodes = 1\n'
HELD = "pool local: all 1 of its nodes (max_nodes) are held by other swjob processes"


def test_a_second_swjob_run_waits_for_the_one_node_another_process_holds(
    tmp_path: Path, clis: Callable[..., Cli]
) -> None:
    pools = tmp_path / "pools.toml"
    pools.write_text(POOLS)
    runs = tmp_path / "runs"

    def run(name: str, release: Path) -> Cli:
        job = waiting_job(tmp_path / name, name, release)
        return clis("run", str(job), "--pools", str(pools), "--runs-dir", str(runs), cwd=tmp_path)

    first_release, second_release = tmp_path / "release-first", tmp_path / "release-second"
    first = run("first", first_release)
    first_log = only_run_dir(runs, "first") / "logs" / "run.log"
    eventually(lambda: first_log.exists() and "line 3" in first_log.read_text(), 60, "first runs")
    second_release.touch()  # the second run ends as soon as it gets a node
    second = run("second", second_release)
    second_dir = only_run_dir(runs, "second")
    eventually(
        lambda: HELD in second.output() or (second_dir / "logs" / "run.log").exists(),
        60, "the second run waiting, or running",
    )  # fmt: skip
    assert HELD in second.output(), f"two nodes of a one-node pool:\n{second.output()}"
    assert len(node_dirs()) == 1 and first.proc.poll() is None and second.proc.poll() is None

    first_release.touch()
    assert first.wait(60) == 0, first.output()
    assert second.wait(60) == 0, second.output()
    assert run_json(second_dir)["state"] == "COMPLETED"
    assert node_dirs() == []


def test_a_dead_operators_node_keeps_its_slot_until_its_run_is_carried_to_its_end(
    tmp_path: Path, clis: Callable[..., Cli]
) -> None:
    """`kill -9` of the `swjob run` whose node holds the one slot: the OS drops its lock,
    but its node runs on. Another `swjob run` must not start a second node beside it: it
    waits, naming the abandoned run and what ends it, and gets the slot once `swjob attach`
    has carried that run to its end."""
    pools = tmp_path / "pools.toml"
    pools.write_text(POOLS)
    runs = tmp_path / "runs"

    def run(name: str, release: Path) -> Cli:
        job = waiting_job(tmp_path / name, name, release)
        return clis("run", str(job), "--pools", str(pools), "--runs-dir", str(runs), cwd=tmp_path)

    first_release, second_release = tmp_path / "release-first", tmp_path / "release-second"
    first = run("first", first_release)
    first_dir = only_run_dir(runs, "first")
    first_log = first_dir / "logs" / "run.log"
    eventually(lambda: first_log.exists() and "line 3" in first_log.read_text(), 60, "first runs")
    first.kill9()  # its node (the agent process) runs on, alone
    second_release.touch()
    second = run("second", second_release)
    second_dir = only_run_dir(runs, "second")
    said = f"by a run whose swjob process died ({first_dir.name})"
    eventually(
        lambda: said in second.output() or (second_dir / "logs" / "run.log").exists(),
        60, "the second run waiting, or running",
    )  # fmt: skip
    assert said in second.output(), f"a second node beside a dead operator's:\n{second.output()}"
    assert "`swjob attach RUN` carries it to its end" in second.output()
    assert len(node_dirs()) == 1 and second.proc.poll() is None

    attach = clis("attach", first_dir.name, "--pools", str(pools), cwd=tmp_path)
    eventually(lambda: "line 3" in attach.output(), 60, "the first run adopted")
    assert len(node_dirs()) == 1 and second.proc.poll() is None  # the adopter holds the slot
    first_release.touch()
    assert attach.wait(60) == 0, attach.output()
    assert run_json(first_dir)["state"] == "COMPLETED"
    assert second.wait(60) == 0, second.output()
    assert run_json(second_dir)["state"] == "COMPLETED"
    assert node_dirs() == []
