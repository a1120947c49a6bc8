"""Engine-wide warnings reach the user of the headless CLI: they carry no
run id, and `swjob run` used to drop them."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from engine.state.paths import state_dir
from tests.standin.server import StandIn
from tests.support.cli import Cli, swjob
from tests.support.vast import POOLS_FILE
from tests.support.waiting import eventually

POOLS = """
[pools.gpu]
provider = "vastai"
image = "img"
agent_install = "swjob"
"""
JSON_ERROR = "Expecting value: line 1 column 1 (char 0)"


def test_swjob_run_prints_the_start_up_orphan_warning(
    tmp_path: Path, api: StandIn, clis: Callable[..., Cli]
) -> None:
    """An instance labelled for a run nobody knows bills on the account: the engine-wide
    warning (it has no run id) is printed by `swjob run`, which goes on with its job (on
    the local pool; a Vast pool is configured, so the start-up check runs)."""
    api.cloud.faults.never_start = True
    ghost = api.cloud.create(101, {"image": "img", "disk": 10, "env": {}, "onstart": None})
    assert ghost is not None
    ghost.label = "swjob:20250101-000000-deadbeef"
    (tmp_path / "pools.toml").write_text(POOLS)
    release = tmp_path / "release"
    run = f"while [ ! -e {release} ]; do sleep 0.05; done; echo hi"
    (tmp_path / "job.toml").write_text(f'[job]\nname = "hi"\nrun = "{run}"\n')
    cli = clis("run", "job.toml", "--pools", "pools.toml", cwd=tmp_path)
    eventually(lambda: cli.has_printed("warning: orphaned node"), what="the orphan warning")
    release.touch()  # the job ends only once the warning is out: it came while the run ran
    code = cli.wait(60)
    out = cli.output()
    api.cloud.destroy(ghost.id)
    assert code == 0, out
    assert "run | hi" in out
    warned = [line for line in out.splitlines() if line.startswith("warning: orphaned node")]
    assert warned, out
    assert f"instance {ghost.id}" in warned[0] and "swjob gc" in warned[0]


def test_an_engine_warning_is_one_swjob_line_said_once(tmp_path: Path) -> None:
    """A kept index row that cannot be read is warned of by every open of the index —
    `swjob attach` opens it twice — through logging's last resort: bare, and twice. It is
    one `swjob:` line on stderr, and nothing else went there."""
    kept = state_dir() / "unindexed" / "20250101-000000-deadbeef.json"
    kept.parent.mkdir(parents=True)
    kept.write_text("not a row")
    done = swjob("attach", "20250101-000000-deadbeef", cwd=tmp_path)
    warned = [line for line in done.stderr.splitlines() if "unreadable" in line]
    assert warned == [f"swjob: {kept}: unreadable, left as it is: {JSON_ERROR}"], done.stderr
    assert done.stderr.splitlines() == warned, done.stderr  # stdout says `no run …`
    assert kept.exists()  # left as it is


def test_a_teardown_never_confirmed_is_warned_of_once(
    tmp_path: Path, api: StandIn, clis: Callable[..., Cli]
) -> None:
    """Every destroy is refused, so the instance stays listed: `swjob run` says once that
    it could not confirm the node destroyed. The provider used to say it twice — as an
    alert, and as the teardown error the run then raised as its persistent alert."""
    api.cloud.faults.destroy_refusals = 1_000
    (tmp_path / "pools.toml").write_text(POOLS_FILE)
    (tmp_path / "job.toml").write_text('[job]\nname = "hi"\nrun = "echo hi"\n')
    cli = clis("run", "job.toml", "--pool", "gpu", "--pools", "pools.toml", cwd=tmp_path)
    cli.wait(100)
    out = cli.output()
    api.cloud.faults.destroy_refusals = 0
    for instance in list(api.cloud.instances):
        api.cloud.destroy(instance)
    warned = [line for line in out.splitlines() if "could not confirm" in line]
    assert len(warned) == 1 and "may still be billing" in warned[0], out
