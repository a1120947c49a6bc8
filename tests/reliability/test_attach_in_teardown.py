"""`swjob attach` of a run whose operator was killed while it tore its node down: the
adopter finishes the teardown, quietly (no Python warning on the user's terminal)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.standin.server import StandIn
from tests.support.cli import Cli
from tests.support.runs import only_run_dir, run_json, waiting_job
from tests.support.waiting import eventually

POOLS = (
    '[pools.gpu]\nprovider = "vastai"\nimage = "img"\nagent_install = "swjob==0.1.0"\n'
    "[pools.gpu.resources]\ngpu_count = 1\n"
)


def test_attach_finishes_a_teardown_its_killed_operator_began(
    tmp_path: Path, api: StandIn, clis: Callable[..., Cli], record_fault: Callable[..., None]
) -> None:
    pools = tmp_path / "pools.toml"
    pools.write_text(POOLS)
    release = tmp_path / "release"
    release.touch()
    job = waiting_job(tmp_path / "job", "torn", release)
    api.cloud.faults.destroy_failures = 3  # the teardown retries: the kill lands inside it
    run = clis(
        "run", str(job), "--pool", "gpu", "--pools", str(pools),
        "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path,
    )  # fmt: skip
    eventually(lambda: any(r[0] == "DELETE" for r in api.requests), 90, "a destroy asked")
    run.kill9()
    run_dir = only_run_dir(tmp_path / "runs", "torn")
    assert api.cloud.instances, "the node was destroyed before the kill"

    attach = clis("attach", run_dir.name, "--pools", str(pools), cwd=tmp_path)
    assert attach.wait(90) == 0, attach.output()
    said = attach.output()
    assert "recovered after operator restart" in said and "NodeTornDown" in said
    assert "Warning" not in said and "never awaited" not in said, said
    assert run_json(run_dir)["state"] == "COMPLETED"
    assert api.cloud.instances == {}
    record_fault(
        "kill -9 of `swjob run` on Vast while its teardown retried a refused destroy; "
        "`swjob attach`",
        None,
        "the adopter finished the teardown: COMPLETED, instance destroyed, no warning printed",
    )
