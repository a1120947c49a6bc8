"""Engine-wide warnings reach the user of the headless CLI: they carry no
run id, and `swjob run` used to drop them."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.standin.server import StandIn

POOLS = """
[pools.gpu]
provider = "vastai"
image = "img"
agent_install = "swjob"
"""


def test_swjob_run_prints_the_start_up_orphan_warning(tmp_path: Path, api: StandIn) -> None:
    """An instance labelled for a run nobody knows bills on the account: the engine-wide
    warning (it has no run id) is printed by `swjob run`, which goes on with its job."""
    api.cloud.faults.never_start = True
    ghost = api.cloud.create(101, {"image": "img", "disk": 10, "env": {}, "onstart": None})
    assert ghost is not None
    ghost.label = "swjob:20250101-000000-deadbeef"
    (tmp_path / "pools.toml").write_text(POOLS)
    (tmp_path / "job.toml").write_text('[job]\nname = "hi"\nrun = "sleep 3; echo hi"\n')
    cli = subprocess.run(
        [sys.executable, "-m", "engine.cli.main", "run", "job.toml", "--pools", "pools.toml"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )  # fmt: skip  (the local pool: a Vast pool is configured, so the start-up check runs)
    out = cli.stdout
    api.cloud.destroy(ghost.id)
    assert cli.returncode == 0, out
    warned = [line for line in out.splitlines() if line.startswith("warning: orphaned node")]
    assert warned, out
    assert f"instance {ghost.id}" in warned[0] and "swjob gc" in warned[0]
