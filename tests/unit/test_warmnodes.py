"""The pure parts of warm nodes: the records a run claims a node by (one winner per node,
fit, expiry), what the node accepts as a claim, its clean room and the held files a delta
push links, and the boot timeline of a run that took a warm node."""

from __future__ import annotations

import asyncio
import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from agent.protocol import Claim, Resume
from agent.reattach import new_key, proof, public_of
from agent.transfer import held
from agent.warm import ClaimService, clean_room
from engine.jobs.pools import BUILTIN_LOCAL
from engine.report.boot import boot_timeline
from engine.report.events import Boot, BootPhase
from engine.state import warmnodes
from engine.state.warmnodes import WarmNode

KEY = new_key()  # the warm key pair's secret half, the engine's


def _node(node_id: str = "n1", **changes: object) -> WarmNode:
    fields: dict[str, object] = {
        "node_id": node_id,
        "provider": "local",
        "pool": "local",
        "fits": warmnodes.fits_key(BUILTIN_LOCAL),
        "handle": {"provider": "local", "node_id": node_id},
        "agent_ticket": "ticket",
        "agent_id": "agent",
        "warm_key": KEY,
        "keep_warm_s": 60.0,
        "parked_at": time.time(),
        "last_run": "run-1",
        "price_per_hour": 0.36,
    }
    return WarmNode(**{**fields, **changes})  # type: ignore[arg-type]


def test_a_parked_node_is_claimed_once() -> None:
    warmnodes.park(_node())
    fits = warmnodes.fits_key(BUILTIN_LOCAL)
    first = warmnodes.claim(fits, "run-2")
    assert first is not None and first.in_use_by == "run-2"
    assert warmnodes.claim(fits, "run-3") is None  # one run per node
    assert warmnodes.parked_in("local") == 0
    # its Vast label names run-1: owned while run-2 is driven, an orphan once nobody drives it
    assert warmnodes.holding_runs({"run-2"}) == {"run-1"}
    assert warmnodes.holding_runs(set()) == set()
    warmnodes.drop("n1")
    assert warmnodes.listing() == []


def test_only_a_fitting_node_with_time_left_is_claimed() -> None:
    other = BUILTIN_LOCAL.model_copy(update={"image": "another"})
    warmnodes.park(_node("fits-not", fits=warmnodes.fits_key(other)))
    warmnodes.park(_node("ending", parked_at=time.time() - 59.5))  # about to release itself
    assert warmnodes.claim(warmnodes.fits_key(BUILTIN_LOCAL), "run-2") is None
    assert warmnodes.parked_in("local") == 2
    # a pool's caps and timers are the run's: they do not change what fits
    capped = BUILTIN_LOCAL.model_copy(update={"keep_warm_s": 5.0, "max_nodes": 9})
    assert warmnodes.fits_key(capped) == warmnodes.fits_key(BUILTIN_LOCAL)
    # a local node kept by `swjob run` (nice 0) does not serve the console's (nice 10)
    niced = BUILTIN_LOCAL.model_copy(update={"node_nice": 10})
    assert warmnodes.fits_key(niced) != warmnodes.fits_key(BUILTIN_LOCAL)
    unset_is_0 = BUILTIN_LOCAL.model_copy(update={"node_nice": 0})
    assert warmnodes.fits_key(unset_is_0) == warmnodes.fits_key(BUILTIN_LOCAL)


def test_a_record_long_past_its_keep_time_is_dropped() -> None:
    warmnodes.park(_node(parked_at=time.time() - 60 - warmnodes.STALE_AFTER_S - 1))
    assert warmnodes.listing() == []


def test_the_view_of_a_warm_node_bills_its_idle_time_and_hides_its_key() -> None:
    shown = warmnodes.view(_node(parked_at=1000.0), now=1000.0 + 600)
    assert shown.idle_s == 600 and shown.expires_in_s == 0
    assert shown.billed == pytest.approx(0.36 * 60 / 3600)  # billed at most its keep time
    assert KEY not in shown.model_dump_json() and "ticket" not in shown.model_dump_json()


def _refusal(service: ClaimService, msg: object, remote: str = "me") -> str | None:
    return service._refusal(msg, "nonce", remote)


def _claim(key: str = KEY, me: str = "me") -> Claim:
    signed = proof(key, "nonce", "run-2", me, "addr")
    return Claim(run_id="run-2", orchestrator_id=me, ticket="addr", proof=signed, token="t")


async def test_a_parked_node_takes_one_claim_proving_its_key() -> None:
    service = ClaimService(public_of(KEY))  # on a running loop: its claim is a future
    assert _refusal(service, _claim(new_key())) == "bad warm key proof"
    assert _refusal(service, _claim(), remote="someone else") is not None
    assert _refusal(service, Resume(run_id="r", orchestrator_id="me", ticket="a", proof="p"))
    assert _refusal(service, _claim()) is None
    service._accept(_claim())
    assert (await asyncio.wait_for(service.claimed, 1)).run_id == "run-2"
    assert _refusal(service, _claim()) == "node already claimed"


def test_the_clean_room_keeps_only_the_agents_log_and_holds_the_workdir(tmp_path: Path) -> None:
    for rel in ("work/a.txt", "work/out/o.bin", "logs/run.log", "logs/agent.log", "state/j"):
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    clean_room(tmp_path)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["held", "logs", "state"]
    assert not any((tmp_path / "state").iterdir())
    assert [p.name for p in (tmp_path / "logs").iterdir()] == ["agent.log"]
    assert (tmp_path / "held" / "a.txt").read_text() == "work/a.txt"


def test_a_held_file_is_linked_only_when_it_is_still_the_one_named(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (tmp_path / "held" / "d").mkdir(parents=True)
    (tmp_path / "held" / "d" / "f.txt").write_text("same")
    os.symlink("/etc/passwd", tmp_path / "held" / "link")
    work.mkdir()
    (row,) = [r for r in held.held_files(work) if r[0] == "d/f.txt"]
    assert held.adopt(work, [*row[:2], row[2] + 1, row[3]]) is False  # changed since
    assert held.adopt(work, ["../held/d/f.txt", *row[1:]]) is False  # outside the room
    assert held.adopt(work, ["link", 11, 0, 0o777]) is False  # not a regular file
    assert held.adopt(work, row) is True
    assert (work / "d" / "f.txt").read_text() == "same"


def test_a_warm_runs_boot_is_one_step_then_the_join() -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    marks = [
        Boot(run_id="r", phase=BootPhase.WARM_REUSED, at=start + timedelta(seconds=0.05)),
        Boot(run_id="r", phase=BootPhase.AGENT_JOINED, at=start + timedelta(seconds=0.2)),
    ]
    timeline = boot_timeline(start, marks)
    assert [s.phase for s in timeline.seen] == [BootPhase.WARM_REUSED, BootPhase.AGENT_JOINED]
    assert timeline.not_seen == [] and timeline.total_s == pytest.approx(0.2)
    assert timeline.step(BootPhase.AGENT_JOINED).seconds == pytest.approx(0.15)
