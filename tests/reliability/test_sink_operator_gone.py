"""The operator dies for good (kill -9 of a real `swjob run`) on a pool with a sink: the
orphaned node stops its job, puts every output in the sink, writes the manifest and
releases itself; later `swjob pull RUN` lands every output, verified. Outputs that used
to be lost with the node ("the job's uncollected outputs") are not."""

from __future__ import annotations

import hashlib
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cli import Cli, swjob
from tests.support.processes import node_dirs
from tests.support.s3 import Bucket
from tests.support.waiting import eventually

pytestmark = pytest.mark.timeout(120)
JOB = """[job]
name = "lonely"
run = "mkdir -p out && head -c 3000000 /dev/urandom > out/w.bin && echo 7 > out/n.txt \
&& echo started && sleep 300"
outputs = ["out/"]
"""


def test_an_orphaned_node_saves_to_the_sink_and_swjob_pull_lands_it_all(
    tmp_path: Path, s3: Bucket, clis: Callable[..., Cli], record_fault: Callable[..., None]
) -> None:
    (tmp_path / "pools.toml").write_text(
        f'[pools.lp]\nprovider = "local"\norphan_timeout_s = 2\nnode_lost_after_s = 2\n'
        f'sink = "{s3.url}"\nsink_endpoint = "{s3.server.endpoint}"\n'
    )
    (tmp_path / "job.toml").write_text(JOB)
    cli = clis("run", "job.toml", "--pool", "lp", "--pools", "pools.toml", cwd=tmp_path)
    eventually(lambda: cli.has_printed("run | started"), timeout=60, what="the job started")
    [run_dir] = (tmp_path / "swjob-runs" / "lonely").iterdir()
    node = next(Path(p) for p in (tmp_path / "swjob-cache" / "nodes").iterdir())
    weights = hashlib.sha256((node / "work/out/w.bin").read_bytes()).hexdigest()
    cli.kill9()
    killed_at = time.monotonic()
    eventually(lambda: node_dirs() == [], timeout=60, what="the orphan released itself")
    released_after = time.monotonic() - killed_at

    pulled = swjob("pull", run_dir.name, cwd=tmp_path)
    assert pulled.returncode == 0, pulled.stderr
    assert "2 file(s)" in pulled.stdout and "verified against the run's manifest" in pulled.stdout
    outputs = run_dir / "outputs"
    assert hashlib.sha256((outputs / "out/w.bin").read_bytes()).hexdigest() == weights
    assert (outputs / "out/n.txt").read_text() == "7\n"
    assert '"complete": true' in (run_dir / "manifest.json").read_text()
    secret = s3.server.secret_key.encode()
    assert not [p for p in tmp_path.rglob("*") if p.is_file() and secret in p.read_bytes()]
    record_fault(
        "operator kill -9 mid-run on a pool with a sink, never returns (orphan_timeout_s = 2)",
        released_after,
        "node stopped the job, put its outputs and manifest in the sink, released itself; "
        "`swjob pull` landed all, verified",
    )
