"""The verbs users of SkyPilot, dstack and the vastai CLI reach for first, each a real
`swjob` process: `stop` from another terminal, `run --env`, `run --detach`, `logs -f`."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from tests.support.cli import Cli, swjob
from tests.support.waiting import eventually


def _run_id(cli: Cli) -> str:
    found = re.search(r"run (\d{8}-\d{6}-[0-9a-f]{8}) ", cli.output())
    assert found, cli.output()
    return found.group(1)


def test_stop_from_another_terminal_is_the_operators_stop(
    tmp_path: Path, clis: Callable[..., Cli]
) -> None:
    (tmp_path / "job.toml").write_text('[job]\nname = "long"\nrun = "echo started; sleep 60"\n')
    cli = clis("run", "job.toml", cwd=tmp_path)
    eventually(lambda: cli.has_printed("run | started"), what="the job started")
    short = _run_id(cli).rsplit("-", 1)[1]
    stopped = swjob("stop", short, cwd=tmp_path, timeout=60)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "FAILED — stopped by operator" in stopped.stdout
    assert cli.wait(30) == 1 and "stopped by operator" in cli.output()
    again = swjob("stop", short, cwd=tmp_path)
    assert again.returncode == 0 and "already over: FAILED" in again.stdout
