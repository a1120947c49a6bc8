"""The headless CLI as a user runs it: a real `swjob` process, exit codes, plain piped output."""

from __future__ import annotations

import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

from engine.state.paths import cache_dir
from tests.support.cli import SWJOB, Cli, swjob
from tests.support.waiting import eventually

HELLO = Path(__file__).parents[2] / "examples" / "hello" / "job.toml"


def test_run_hello_prints_every_transition_and_exits_0(tmp_path: Path) -> None:
    done = swjob("run", str(HELLO), cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = done.stdout.splitlines()
    for needle in [
        "JobSubmitted → ProvisionNode",
        "NodeReady → MaterializeWorkspace",
        "WorkspaceMaterialized → RunJob",
        "run | hi",
        "JobExited → CollectOutputs",
        "OutputsCollected → TeardownNode",
        "COMPLETED exit code 0",
    ]:
        assert any(needle in line for line in lines), needle
    assert "\x1b[" not in done.stdout  # no colour codes when piped
    run_dir = next((tmp_path / "swjob-runs" / "hello").iterdir())
    assert (run_dir / "outputs" / "hello.txt").read_text() == "hi\n"

    listed = swjob("runs", cwd=tmp_path)
    assert listed.returncode == 0 and run_dir.name in listed.stdout
    assert listed.stdout.split("\t")[3] == "COMPLETED"
    logs = swjob("logs", run_dir.name[:17], cwd=tmp_path)
    assert logs.returncode == 0 and logs.stdout == "hi\n"


def test_a_failed_job_exits_1_with_its_reason(tmp_path: Path) -> None:
    (tmp_path / "job.toml").write_text('[job]\nname = "bad"\nrun = "exit 3"\n')
    done = swjob("run", "job.toml", cwd=tmp_path)
    assert done.returncode == 1
    assert "FAILED exit code 3 — run exited with code 3" in done.stdout


def test_ctrl_c_is_the_operators_stop(tmp_path: Path, clis: Callable[..., Cli]) -> None:
    (tmp_path / "job.toml").write_text('[job]\nname = "long"\nrun = "echo started; sleep 60"\n')
    cli = clis("run", "job.toml", cwd=tmp_path)
    eventually(lambda: cli.has_printed("run | started"), what="the job started")
    cli.signal(signal.SIGINT)
    assert cli.wait(30) == 1
    out = cli.output()
    assert "FAILED" in out and "stopped by operator" in out
    nodes = cache_dir() / "nodes"
    eventually(lambda: not any(nodes.iterdir()), 30, "the node dir removed")


def test_validate_gives_one_line_and_exit_codes(tmp_path: Path) -> None:
    assert swjob("validate", str(HELLO), cwd=tmp_path).returncode == 0
    (tmp_path / "bad.toml").write_text('[job]\nname = "x"\nrun = "true"\noutputs = ["/etc"]\n')
    done = swjob("validate", "bad.toml", cwd=tmp_path)
    assert done.returncode == 1
    assert done.stdout == "" and done.stderr.count("\n") == 1
    assert "bad.toml:4: job.outputs[0]" in done.stderr


def test_commands_naming_a_run_say_when_there_is_none(tmp_path: Path) -> None:
    """`logs`, `attach`, `shell` and `forward` give the same one line and exit 1 for a run
    that does not exist — and a reference holding markup is printed as typed."""
    ref = "nosuch[/]"
    for command in (["logs", ref], ["attach", ref], ["shell", ref], ["forward", ref, "8000"]):
        done = swjob(*command, cwd=tmp_path, timeout=30)
        assert done.returncode == 1, (command, done.stdout, done.stderr)
        assert f"no run {ref!r}" in done.stdout + done.stderr


def test_a_reader_gone_away_ends_swjob_quietly(tmp_path: Path) -> None:
    """`swjob runs | head -1` with more runs than that: swjob finds its pipe closed and
    ends without a traceback (exit 141, as a writer ended by SIGPIPE)."""
    assert swjob("run", str(HELLO), cwd=tmp_path).returncode == 0
    for command in (["validate", str(HELLO)], ["runs"], ["logs", "--step", "run", "2"]):
        proc = subprocess.Popen(
            [*SWJOB, *command], cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE
        )
        assert proc.stdout is not None
        proc.stdout.close()  # before swjob has printed a byte: every write finds no reader
        _, err = proc.communicate(timeout=60)
        assert err.decode() == "", (command, err.decode())
        assert proc.returncode == 141, command
