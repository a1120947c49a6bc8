"""A run another `swjob` process drives on a rented node shows its cost growing to whoever
follows it from the run index (a second console, `swjob runs`), not the cost it had when
its node joined."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from engine.state.store import Store
from tests.standin.server import StandIn
from tests.support.cli import Cli
from tests.support.runs import only_run_dir, waiting_job
from tests.support.waiting import eventually

POOLS = (
    '[pools.gpu]\nprovider = "vastai"\nimage = "img"\nagent_install = "swjob==0.1.0"\n'
    "[pools.gpu.resources]\ngpu_count = 1\n"
)


def _indexed_cost(run_id: str) -> float:
    store = Store()
    try:
        view = store.find(run_id)
    finally:
        store.close()
    assert view is not None
    return view.cost_dollars or 0.0


def test_the_index_follows_the_cost_of_a_run_driven_elsewhere(
    tmp_path: Path, api: StandIn, clis: Callable[..., Cli]
) -> None:
    pools = tmp_path / "pools.toml"
    pools.write_text(POOLS)
    release = tmp_path / "release"
    job = waiting_job(tmp_path / "job", "billing", release)
    cli = clis(
        "run", str(job), "--pool", "gpu", "--pools", str(pools),
        "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path,
    )  # fmt: skip
    run_dir = only_run_dir(tmp_path / "runs", "billing")
    eventually(lambda: cli.has_printed("run | line 3"), 60, "the job running")
    at_run = _indexed_cost(run_dir.name)
    # The driver publishes the cost every few seconds; the index must carry it on.
    eventually(lambda: _indexed_cost(run_dir.name) > at_run, 30, "the indexed cost grew")
    release.touch()
    assert cli.wait(60) == 0, cli.output()
