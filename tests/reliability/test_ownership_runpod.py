"""Ownership on the RunPod stand-in, with real `swjob` processes: a `swjob run` killed -9
while its job runs on a pod leaves the pod billing and nobody driving it; `swjob attach`
adopts the run (its handle from the run index, the pod's price from the ledger), the
agent rejoins, and the run completes with its outputs and its pod terminated. Without an
attach, the pod's agent gives up after `orphan_timeout_s` and terminates its own pod with
the pod-scoped key RunPod put in its environment."""

from __future__ import annotations

import base64
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from engine.state.ledger import Ledger
from tests.standin.runpod_server import RunPodStandIn
from tests.support.cli import Cli
from tests.support.runpod import standin
from tests.support.runs import only_run_dir, run_json, waiting_job
from tests.support.waiting import eventually

POOLS = (
    '[pools.pod]\nprovider = "runpod"\nimage = "img"\nagent_install = "swjob==0.1.0"\n'
    "[pools.pod.resources]\ngpu_count = 1\n"
)


@pytest.fixture
def rp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RunPodStandIn]:
    yield from standin(tmp_path, monkeypatch)


def test_attach_carries_a_killed_run_on_its_pod_to_the_end(
    tmp_path: Path, rp: RunPodStandIn, clis: Callable[..., Cli], record_fault: Callable[..., None]
) -> None:
    pools = tmp_path / "pools.toml"
    pools.write_text(POOLS)
    release = tmp_path / "release"
    job = waiting_job(tmp_path / "alpha", "alpha", release)
    run = clis(
        "run", str(job), "--pool", "pod", "--pools", str(pools),
        "--runs-dir", str(tmp_path / "runs"), cwd=tmp_path,
    )  # fmt: skip
    run_dir = only_run_dir(tmp_path / "runs", "alpha")
    log = run_dir / "logs" / "run.log"
    eventually(lambda: log.exists() and "line 3" in log.read_text(), 60, "the job runs")
    [pod] = rp.pods.values()
    run.kill9()  # the pod bills on with nobody driving it
    assert pod.status == "RUNNING" and len(Ledger().open_entries()) == 1
    release.touch()
    attach = clis("attach", run_dir.name, "--pools", str(pools), cwd=tmp_path)
    assert attach.wait(90) == 0, attach.output()
    summary = run_json(run_dir)
    assert summary["state"] == "COMPLETED", summary.get("reason")
    assert (run_dir / "outputs" / "out.txt").read_text() == "done\n"
    assert rp.live() == [] and rp.terminated == [pod.id] and Ledger().open_entries() == []
    record_fault(
        "kill -9 of `swjob run` on RunPod, then `swjob attach`",
        None,
        "node rejoined the adopter; COMPLETED with outputs; pod terminated",
    )


def test_a_pod_whose_operator_never_returns_terminates_itself(
    tmp_path: Path, rp: RunPodStandIn, clis: Callable[..., Cli], record_fault: Callable[..., None]
) -> None:
    pools = tmp_path / "pools.toml"
    pools.write_text(
        POOLS.replace(
            "[pools.pod.resources]",
            "orphan_timeout_s = 2\nnode_lost_after_s = 2\n[pools.pod.resources]",
        )
    )
    (tmp_path / "job.toml").write_text('[job]\nname = "lonely"\nrun = "echo started; sleep 300"\n')
    cli = clis("run", "job.toml", "--pool", "pod", "--pools", str(pools), cwd=tmp_path)
    eventually(lambda: cli.has_printed("run | started"), timeout=60, what="the job started")
    cli.kill9()
    [pod] = rp.pods.values()
    assert "--on-orphan terminate-pod --runpod-url" in _boot_script(pod.fields["dockerArgs"])
    killed_at = time.monotonic()
    eventually(lambda: rp.live() == [], timeout=40, what="the pod terminated itself")
    terminated_after = time.monotonic() - killed_at
    assert rp.terminated == [pod.id]
    [row] = Ledger().open_entries()  # gc closes it later: the pod is gone
    assert row.instance_id == pod.id
    record_fault(
        "operator kill -9 mid-run on RunPod, never returns (orphan_timeout_s = 2)",
        terminated_after,
        "agent stopped the job and terminated its own pod (pod-scoped RUNPOD_API_KEY); "
        "ledger row left open for gc",
        "the job's uncollected outputs",
    )


def _boot_script(docker_args: str) -> str:
    """The boot inside a pod's start command (base64, engine/providers/runpod_provider.py)."""
    return base64.b64decode(docker_args.split("echo ", 1)[1].split(" ", 1)[0]).decode()
