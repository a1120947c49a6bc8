"""The verbs users of SkyPilot, dstack and the vastai CLI reach for first, each a real
`swjob` process: `stop` from another terminal (and of a run whose swjob died), `run --env`,
`run --detach`, `logs -f`."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import psutil

from tests.support.cli import Cli, swjob
from tests.support.processes import kill_quietly, pid_alive
from tests.support.runs import agent_pid, only_run_dir
from tests.support.waiting import eventually


def _run_id(cli: Cli) -> str:
    found = re.search(r"run (\d{8}-\d{6}-[0-9a-f]{8}) ", cli.output())
    assert found, cli.output()
    return found.group(1)


def test_stop_from_another_terminal_is_the_operators_stop_and_logs_f_follows_to_the_end(
    tmp_path: Path, clis: Callable[..., Cli]
) -> None:
    (tmp_path / "job.toml").write_text(
        '[job]\nname = "long"\nsetup = "echo setting up"\nrun = "echo started; sleep 60"\n'
    )
    cli = clis("run", "job.toml", cwd=tmp_path)
    eventually(lambda: cli.has_printed("run | started"), what="the job started")
    short = _run_id(cli).rsplit("-", 1)[1]
    follower = clis("logs", "-f", short, cwd=tmp_path)
    eventually(lambda: follower.has_printed("started"), what="the follower caught up")
    stopped = swjob("stop", short, cwd=tmp_path, timeout=60)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "FAILED — stopped by operator" in stopped.stdout
    assert cli.wait(30) == 1 and "stopped by operator" in cli.output()
    assert follower.wait(30) == 0  # the follow ends with the run
    assert follower.output() == "setting up\nstarted\n"  # each step's log, in order, once
    again = swjob("stop", short, cwd=tmp_path)
    assert again.returncode == 0 and "already over: FAILED" in again.stdout


def test_stop_takes_over_a_run_whose_swjob_died_and_stops_it(
    tmp_path: Path, clis: Callable[..., Cli]
) -> None:
    (tmp_path / "job.toml").write_text('[job]\nname = "orphan"\nrun = "echo started; sleep 60"\n')
    cli = clis("run", "job.toml", cwd=tmp_path)
    eventually(lambda: cli.has_printed("run | started"), what="the job started")
    run_dir = only_run_dir(tmp_path / "swjob-runs", "orphan")
    node = agent_pid(run_dir)
    cli.kill9()  # nobody drives the run now; its node goes on
    stopped = swjob("stop", run_dir.name, cwd=tmp_path, timeout=90)
    assert stopped.returncode == 0, stopped.stdout + stopped.stderr
    assert "FAILED — stopped by operator" in stopped.stdout
    eventually(lambda: not pid_alive(node), 10, "the node's agent ended")


def test_run_env_takes_a_secret_from_the_local_environment(tmp_path: Path) -> None:
    secret = "hf_0123456789abcdef"
    (tmp_path / "job.toml").write_text('[job]\nname = "env"\nrun = "echo token=$HF_TOKEN s=$S"\n')
    done = swjob(
        "run", "job.toml", "--env", "HF_TOKEN", "--env", "S=seven", cwd=tmp_path,
        env={"HF_TOKEN": secret},
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr
    assert "token=*** s=***" in done.stdout
    assert secret not in done.stdout + done.stderr
    assert secret not in "".join(p.read_text() for p in tmp_path.rglob("*.log"))
    missing = swjob("run", "job.toml", "--env", "NOT_SET_HERE", cwd=tmp_path)
    assert missing.returncode == 1
    assert missing.stderr == "error: --env NOT_SET_HERE: not set in your environment\n"


def test_run_detach_returns_and_a_background_swjob_drives_the_run(
    tmp_path: Path, clis: Callable[..., Cli]
) -> None:
    release = tmp_path / "release"
    run = f"echo token=$T; while [ ! -e {release} ]; do sleep 0.05; done"
    (tmp_path / "job.toml").write_text(f'[job]\nname = "bg"\nrun = "{run}"\n')
    done = swjob("run", "job.toml", "--detach", "--env", "T=s3cret-value", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    run_id = done.stdout.split()[1]
    background = int(done.stdout.split("(pid ")[1].split(")")[0])
    try:
        assert "s3cret-value" not in " ".join(psutil.Process(background).cmdline())
        follower = clis("logs", "-f", run_id, cwd=tmp_path)
        eventually(lambda: follower.has_printed("token=***"), what="the run's log")
        release.touch()
        assert follower.wait(30) == 0
        eventually(lambda: not pid_alive(background), 30, "the background swjob ended")
    finally:
        kill_quietly(background)
    assert "COMPLETED" in swjob("runs", cwd=tmp_path).stdout
