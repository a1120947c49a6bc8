"""A local user can read nothing of the operator's runs, and a local job sees
nothing of the operator's environment. Everything goes through `swjob` as a subprocess
started from a shell with the usual umask 022, so the engine must make its files private
itself."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import swjob_run

pytestmark = [pytest.mark.timeout(90)]

OPERATOR_SECRETS = {
    "VAST_API_KEY": "vast-operator-key-71c3e0",
    "AWS_SECRET_ACCESS_KEY": "aws-operator-secret-5d92ab",
}


def mode(path: Path) -> int:
    return stat.S_IMODE(path.lstat().st_mode)


def test_state_and_landing_are_private_and_local_job_env_is_minimal(
    tmp_path, make_job, record_fault
) -> None:
    job = make_job(env={"JOB_VAR": "job-value"}, run="env | sort; echo done > out.txt")
    state = Path(os.environ["SWJOB_STATE_DIR"])
    cache = Path(os.environ["SWJOB_CACHE_DIR"])
    assert not state.exists() and not cache.exists()  # fresh: the engine creates them
    code, printed = swjob_run(tmp_path, job.source, umask=0o022, **OPERATOR_SECRETS)
    assert code == 0, printed
    (run_dir,) = (tmp_path / "runs").glob("*/*")

    dirs = [state, cache, cache / "nodes", run_dir, run_dir / "logs"]
    files = [*state.iterdir(), *run_dir.glob("*.json*"), *(run_dir / "logs").iterdir()]
    assert any(p.name == "runs.sqlite" for p in files) and any(
        p.name.endswith(".port") for p in files
    )  # the token-holding index and the engine's port are among those checked
    assert {str(p): oct(mode(p)) for p in dirs if mode(p) != 0o700} == {}
    assert {str(p): oct(mode(p)) for p in files if mode(p) & 0o077} == {}

    # the job saw its own env (masked, as every job env value is) and not the operator's keys
    assert "JOB_VAR=***" in printed and "PATH=" in printed  # (job env values show masked)
    for name, value in OPERATOR_SECRETS.items():
        assert name not in printed and value not in printed
    record_fault(
        "local user reads state/landing; operator env holds API keys (`swjob run`, umask 022)",
        None,
        "state, cache, node and run dirs 0700, files 0600; job env lacks operator keys",
    )


def test_group_readable_state_dir_is_tightened_with_a_notice(tmp_path) -> None:
    state = Path(os.environ["SWJOB_STATE_DIR"])
    state.mkdir(mode=0o755)
    os.chmod(state, 0o755)
    done = subprocess.run(
        [sys.executable, "-m", "engine.cli.main", "runs"],
        capture_output=True, text=True, timeout=60, umask=0o022,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    notices = [line for line in done.stderr.splitlines() if str(state) in line]
    assert len(notices) == 1 and "now 0700" in notices[0], done.stderr
    assert mode(state) == 0o700
    assert {p.name: oct(mode(p)) for p in state.iterdir() if mode(p) & 0o077} == {}
