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


class OnePool:
    """`swjob run`s of waiting jobs on one local pool of one node, in one runs dir; the
    first is running its job when made."""

    def __init__(self, tmp_path: Path, clis: Callable[..., Cli]) -> None:
        self.tmp, self.clis = tmp_path, clis
        self.pools, self.runs = tmp_path / "pools.toml", tmp_path / "runs"
        self.pools.write_text(POOLS)
        self.first = self.run("first")
        self.first_dir = only_run_dir(self.runs, "first")
        log = self.first_dir / "logs" / "run.log"
        eventually(lambda: log.exists() and "line 3" in log.read_text(), 60, "first runs")

    def release(self, name: str) -> Path:
        return self.tmp / f"release-{name}"

    def run(self, name: str) -> Cli:
        job = waiting_job(self.tmp / name, name, self.release(name))
        argv = ("run", str(job), "--pools", str(self.pools), "--runs-dir", str(self.runs))
        return self.clis(*argv, cwd=self.tmp)


def test_a_second_swjob_run_waits_for_the_one_node_another_process_holds(
    tmp_path: Path, clis: Callable[..., Cli]
) -> None:
    pool = OnePool(tmp_path, clis)
    pool.release("second").touch()  # the second run ends as soon as it gets a node
    second = pool.run("second")
    second_dir = only_run_dir(pool.runs, "second")
    eventually(
        lambda: HELD in second.output() or (second_dir / "logs" / "run.log").exists(),
        60, "the second run waiting, or running",
    )  # fmt: skip
    assert HELD in second.output(), f"two nodes of a one-node pool:\n{second.output()}"
    first = pool.first
    assert len(node_dirs()) == 1 and first.proc.poll() is None and second.proc.poll() is None

    pool.release("first").touch()
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
    pool = OnePool(tmp_path, clis)
    pool.first.kill9()  # its node (the agent process) runs on, alone
    pool.release("second").touch()
    second = pool.run("second")
    second_dir = only_run_dir(pool.runs, "second")
    said = f"by a run whose swjob process died ({pool.first_dir.name})"
    eventually(
        lambda: said in second.output() or (second_dir / "logs" / "run.log").exists(),
        60, "the second run waiting, or running",
    )  # fmt: skip
    assert said in second.output(), f"a second node beside a dead operator's:\n{second.output()}"
    assert "`swjob attach RUN` carries it to its end" in second.output()
    assert len(node_dirs()) == 1 and second.proc.poll() is None

    attach = clis("attach", pool.first_dir.name, "--pools", str(pool.pools), cwd=tmp_path)
    eventually(lambda: "line 3" in attach.output(), 60, "the first run adopted")
    assert len(node_dirs()) == 1 and second.proc.poll() is None  # the adopter holds the slot
    pool.release("first").touch()
    assert attach.wait(60) == 0, attach.output()
    assert run_json(pool.first_dir)["state"] == "COMPLETED"
    assert second.wait(60) == 0, second.output()
    assert run_json(second_dir)["state"] == "COMPLETED"
    assert node_dirs() == []
