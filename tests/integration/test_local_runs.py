"""A job end to end on the built-in local pool: real agent processes, real iroh on loopback."""

from __future__ import annotations

import asyncio
import json
import re

from engine.report import events as ev
from engine.report.datastream import read_events
from engine.state.paths import cache_dir
from tests.support.processes import pid_alive
from tests.support.runs import run_json, run_to_end


async def test_completed_run_collects_outputs_with_a_verified_manifest(engine, make_job) -> None:
    job = make_job(
        files={"data/in.txt": "42\n"},
        setup="echo preparing",
        run="mkdir -p out && cp data/in.txt out/copy.txt && echo done | tee result.txt",
        workspace={"workdir": "."},
        outputs=["result.txt", "out/"],
    )
    view = await run_to_end(engine, job)
    assert view.state == "COMPLETED" and view.exit_code == 0 and view.reason is None
    assert (view.run_dir / "outputs/result.txt").read_text() == "done\n"
    assert (view.run_dir / "outputs/out/copy.txt").read_text() == "42\n"
    manifest = json.loads((view.run_dir / "manifest.json").read_text())
    entries = manifest["files"] if isinstance(manifest, dict) else manifest
    by_path = {e["path"]: e for e in entries}
    assert by_path["result.txt"]["verified"] is True
    assert len(by_path["result.txt"]["sha256"]) == 64
    summary = run_json(view.run_dir)
    assert summary["state"] == "COMPLETED" and summary["exit_code"] == 0
    assert summary["node"]["facts"]["cpus"] >= 1
    assert {"provisioning", "materializing", "setup", "run", "collecting"} <= set(
        summary["timestamps"]
    )
    assert "done" in (view.run_dir / "logs/run.log").read_text()
    assert "preparing" in (view.run_dir / "logs/setup.log").read_text()


async def test_every_transition_is_an_event_in_spec_vocabulary(engine, make_job) -> None:
    job = make_job(run="true", workspace={"workdir": "."}, setup="true")
    view = await run_to_end(engine, job)
    causes = [(t.cause, t.commands) for t in view.timeline]
    assert causes == [
        ("JobSubmitted", ["ProvisionNode"]),
        ("NodeReady", ["MaterializeWorkspace"]),
        ("WorkspaceMaterialized", ["RunSetup"]),
        ("SetupCompleted", ["RunJob"]),
        ("JobExited", ["CollectOutputs"]),
        ("OutputsCollected", ["TeardownNode"]),
        ("NodeTornDown", []),
    ]
    logged = [e for e in read_events(view.run_dir / "events.jsonl") if e.kind == "transition"]
    assert len(logged) == len(causes)


async def test_no_workspace_no_setup_runs_directly(engine, make_job) -> None:
    view = await run_to_end(engine, make_job(run="echo direct"))
    assert [t.cause for t in view.timeline][:3] == ["JobSubmitted", "NodeReady", "JobExited"]
    assert view.state == "COMPLETED"


async def test_nonzero_exit_fails_and_still_collects_outputs(engine, make_job) -> None:
    job = make_job(run="echo partial > part.txt; exit 3", outputs=["part.txt", "never.txt"])
    view = await run_to_end(engine, job)
    assert view.state == "FAILED" and view.exit_code == 3
    assert view.reason == "run exited with code 3"
    assert (view.run_dir / "outputs/part.txt").read_text() == "partial\n"
    summary = run_json(view.run_dir)
    assert summary["exit_code"] == 3 and summary["missing_outputs"] == ["never.txt"]


async def test_failing_setup_fails_and_run_never_starts(engine, make_job) -> None:
    job = make_job(setup="echo broken >&2; exit 5", run="echo SHOULD-NOT-RUN")
    view = await run_to_end(engine, job)
    assert view.state == "FAILED" and view.reason == "setup failed with code 5"
    assert not (view.run_dir / "logs/run.log").exists()
    events = read_events(view.run_dir / "events.jsonl")
    assert not any(e.kind == "log" and e.step.value == "run" for e in events)
    assert any(e.kind == "log" and e.lines[0].stream.value == "stderr" for e in events)


async def test_missing_outputs_do_not_change_the_outcome(engine, make_job) -> None:
    view = await run_to_end(engine, make_job(run="true", outputs=["nope.bin", "ckpt/*.pt"]))
    assert view.state == "COMPLETED"
    assert sorted(run_json(view.run_dir)["missing_outputs"]) == ["ckpt/*.pt", "nope.bin"]


async def test_excludes_are_honoured_anchored_and_unanchored(engine, make_job) -> None:
    files = {
        "keep.py": "x",
        "artifacts/big.bin": "x",  # excluded by the anchored /artifacts
        "src/artifacts/keep.txt": "x",  # not anchored at the root: kept
        "__pycache__/a.pyc": "x",
        "src/__pycache__/b.pyc": "x",  # unanchored: excluded anywhere
    }
    job = make_job(
        files=files,
        run="find . -type f ! -name job.toml > listing.txt",
        workspace={"workdir": ".", "exclude": ["/artifacts", "__pycache__"]},
        outputs=["listing.txt"],
    )
    view = await run_to_end(engine, job)
    listing = sorted((view.run_dir / "outputs/listing.txt").read_text().split())
    assert listing == ["./keep.py", "./listing.txt", "./src/artifacts/keep.txt"]


async def test_env_is_injected_and_its_values_are_redacted_everywhere(engine, make_job) -> None:
    secret = "s3cr3t-value-9f8e7d"
    job = make_job(
        run='echo "key=$API_KEY"; echo "$API_KEY" >&2; echo "$API_KEY" > seen.txt; exit 1',
        env={"API_KEY": secret},
        outputs=["seen.txt"],
    )
    view = await run_to_end(engine, job)
    assert (view.run_dir / "outputs/seen.txt").read_text() == secret + "\n"  # the job saw it
    for path in ["events.jsonl", "run.json", "logs/run.log"]:
        assert secret not in (view.run_dir / path).read_text(), path
    assert "key=***" in (view.run_dir / "logs/run.log").read_text()


async def test_stop_mid_run_kills_the_job_tree_and_removes_the_node(engine, make_job) -> None:
    job = make_job(
        run="sh -c 'trap \"\" TERM; sleep 300' & echo child $!; echo main $$; wait",
    )
    run_id = await engine.submit(job, "local")
    sub = engine.subscribe()
    pids: list[int] = []
    async for event in sub:
        if isinstance(event, ev.Log) and event.run_id == run_id:
            for line in event.lines:
                pids += [int(n) for n in re.findall(r"(?:child|main) (\d+)", line.text)]
            if len(pids) == 2:
                break
    sub.close()
    node = engine.run(run_id).node
    node_dir = cache_dir() / "nodes" / node.node_id
    assert node_dir.is_dir()
    assert all(pid_alive(p) for p in pids)
    await engine.stop(run_id)
    view = await asyncio.wait_for(engine.wait(run_id), 30)
    assert view.state == "FAILED" and view.reason == "stopped by operator"
    assert not any(pid_alive(p) for p in pids)
    assert not node_dir.exists()


async def test_stop_while_provisioning_fails_the_run_and_tears_down(engine, make_job) -> None:
    run_id = await engine.submit(make_job(run="sleep 30"), "local")
    await engine.stop(run_id)
    view = await asyncio.wait_for(engine.wait(run_id), 30)
    assert view.state == "FAILED" and view.reason == "stopped by operator"
    assert view.timeline[-1].cause == "NodeTornDown"
