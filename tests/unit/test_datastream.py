from __future__ import annotations

import asyncio
import random
from pathlib import Path

from agent.protocol import LogLine, Step, Stream
from engine.report import events as ev
from engine.report.datastream import Datastream, read_events


def _log(run_id: str, text: str) -> ev.Log:
    return ev.Log(run_id=run_id, step=Step.RUN, lines=[LogLine(stream=Stream.STDOUT, text=text)])


async def test_events_get_per_run_sequence_numbers_and_land_in_events_jsonl(
    tmp_path: Path,
) -> None:
    hub = Datastream()
    hub.open_run("a", tmp_path / "a.jsonl")
    hub.open_run("b", tmp_path / "b.jsonl")
    seqs = [hub.publish(_log(run, "x")).seq for run in ("a", "a", "b", "a")]
    hub.close()
    assert seqs == [1, 2, 1, 3]
    assert [e.seq for e in read_events(tmp_path / "a.jsonl")] == [1, 2, 3]


async def test_every_subscriber_sees_every_event_in_order(tmp_path: Path) -> None:
    hub = Datastream()
    subs = [hub.subscribe() for _ in range(3)]
    for i in range(5):
        hub.publish(_log("r", str(i)))
    hub.close()
    for sub in subs:
        texts = [e.lines[0].text async for e in sub]
        assert texts == ["0", "1", "2", "3", "4"]


async def test_a_slow_subscriber_never_blocks_publishing_and_is_marked_lagged() -> None:
    hub = Datastream()
    slow = hub.subscribe(maxsize=10)
    fast = hub.subscribe(maxsize=100_000)
    for i in range(5_000):  # 500 times what the slow one holds
        hub.publish(_log("r", str(i)))  # synchronous: would deadlock if it waited
    assert slow.lagged and slow.dropped == 5_000 - 10
    newest = [slow.get_nowait() for _ in range(10)]
    assert [e.lines[0].text for e in newest] == [str(i) for i in range(4_990, 5_000)]
    assert not fast.lagged


async def test_sequence_resumes_after_reopening_a_run(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    hub = Datastream()
    hub.open_run("r", path)
    hub.publish(_log("r", "before"))
    hub.close()
    with path.open("a") as handle:
        handle.write('{"torn": ')  # a crash mid-write leaves a partial line
    hub = Datastream()
    hub.open_run("r", path)
    assert hub.publish(_log("r", "after")).seq == 2
    hub.close()
    assert [e.lines[0].text for e in read_events(path)] == ["before", "after"]


async def test_close_ends_subscriptions() -> None:
    hub = Datastream()
    sub = hub.subscribe()
    hub.close()
    assert await asyncio.wait_for(anext(sub, None), 1) is None


async def test_subscribers_and_files_keep_the_publish_order_while_lifecycle_events_wait(
    tmp_path: Path,
) -> None:
    """Lifecycle events wait for their file before they are shown, the log lines after
    them (of any run) wait behind them: every subscriber still sees exactly the publish
    order, and each run's file holds its events in that order."""
    hub = Datastream()
    for run in ("a", "b"):
        hub.open_run(run, tmp_path / f"{run}.jsonl")
    sub = hub.subscribe()
    kinds = random.Random(7).choices(["log", "alert", "transition"], weights=[6, 1, 1], k=400)
    published = []
    for i, kind in enumerate(kinds):
        run = "ab"[i % 2] if i % 5 else ""  # every fifth an engine-wide alert: no file
        if kind == "log" and run:
            event: ev.Event = _log(run, str(i))
        elif kind == "transition" and run:
            event = ev.Transition(
                run_id=run, cause=str(i), from_state=None, to_state="RUNNING",
                from_phase="new", to_phase="provisioning",
            )  # fmt: skip
        else:
            event = ev.Alert(run_id=run, message=str(i))
        published.append(hub.publish(event))
        if i % 50 == 0:
            await asyncio.sleep(0)  # some handed to the writer, some written, in between
    for run in ("a", "b"):
        await hub.close_run(run)
    shown = [await anext(sub) for _ in published]
    assert [(e.run_id, e.seq) for e in shown] == [(e.run_id, e.seq) for e in published]
    for run in ("a", "b"):
        on_file = [e.seq for e in read_events(tmp_path / f"{run}.jsonl")]
        assert on_file == [e.seq for e in published if e.run_id == run]
    hub.close()
