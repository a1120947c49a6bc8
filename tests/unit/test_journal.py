"""The journal: seq numbering, persistence, replay from memory and from the file, bounds."""

from __future__ import annotations

from pathlib import Path

from agent.journal import Journal
from agent.protocol import LogBatch, LogLine, NodeFault, Step, StepStarted, Stream, decode
from tests.support.disks import Disk


def batch(n: int, width: int = 100) -> LogBatch:
    lines = [LogLine(stream=Stream.STDOUT, text=f"{i:0{width}d}") for i in range(n)]
    return LogBatch(seq=0, step=Step.RUN, lines=lines)


def test_assigns_seq_and_persists_each_event(tmp_path: Path) -> None:
    j = Journal(tmp_path / "state" / "events.jsonl")
    first = j.append(StepStarted(seq=0, step=Step.SETUP, pid=42))
    second = j.append(NodeFault(seq=0, reason="disk full"))
    assert (first.seq, second.seq, j.last_seq) == (1, 2, 2)
    on_disk = [
        decode(line) for line in (tmp_path / "state" / "events.jsonl").read_bytes().splitlines()
    ]
    assert on_disk == [first, second]
    assert j.events_after(0) == [first, second]
    assert j.events_after(1) == [second]
    assert j.events_after(2) == []
    j.close()


def test_listener_called_after_each_append(tmp_path: Path) -> None:
    j = Journal(tmp_path / "events.jsonl")
    seen: list[int] = []
    j.subscribe(lambda: seen.append(j.last_seq))
    j.append(NodeFault(seq=0, reason="a"))
    j.append(NodeFault(seq=0, reason="b"))
    assert seen == [1, 2]
    j.close()


def test_ack_drops_memory_but_replay_still_reads_the_file(tmp_path: Path) -> None:
    j = Journal(tmp_path / "events.jsonl")
    events = [j.append(NodeFault(seq=0, reason=f"r{i}")) for i in range(10)]
    j.ack(7)
    assert j.memory_bytes == sum(len(e.model_dump_json()) + 1 for e in events[7:])
    assert j.events_after(2) == events[2:]  # from the file, then memory
    assert j.events_after(2, limit=3) == events[2:5]
    j.close()


BATCHES = 60


def test_memory_stays_bounded_under_a_flood(tmp_path: Path) -> None:
    """60 batches of 1000 lines (a 60k-line flood, ~6 MB) with a 512 KiB memory budget: a
    flood over ten times the budget (the budget is scaled down, not the ratio)."""
    budget = 512 * 1024
    j = Journal(tmp_path / "events.jsonl", memory_budget=budget)
    for _ in range(BATCHES):
        j.append(batch(1000))
        assert j.memory_bytes <= budget
    assert (tmp_path / "events.jsonl").stat().st_size > 10 * budget
    replay = []
    while chunk := j.events_after(replay[-1].seq if replay else 0, limit=64):
        replay.extend(chunk)
    assert [e.seq for e in replay] == list(range(1, BATCHES + 1))
    assert all(len(e.lines) == 1000 for e in replay)
    j.close()


def test_reopen_continues_seq_and_cuts_a_torn_line(tmp_path: Path) -> None:
    path = tmp_path / "events.jsonl"
    j = Journal(path)
    kept = [j.append(NodeFault(seq=0, reason=f"r{i}")) for i in range(3)]
    j.close()
    with path.open("ab") as f:
        f.write(b'{"type": "fault", "seq": 4, "rea')  # the agent died mid-write
    j2 = Journal(path)
    assert j2.last_seq == 3
    assert j2.events_after(0) == kept
    nxt = j2.append(NodeFault(seq=0, reason="after restart"))
    assert nxt.seq == 4
    assert [decode(x).seq for x in path.read_bytes().splitlines()] == [1, 2, 3, 4]
    j2.close()


def test_a_full_disk_keeps_events_in_memory_and_in_order(small_disk: Disk) -> None:
    """A job filled the node's disk: appends go on, nothing is dropped before it is acked."""
    path = small_disk.path / "events.jsonl"
    j = Journal(path, memory_budget=4096)
    durable = [j.append(NodeFault(seq=0, reason=f"r{i}")) for i in range(3)]
    small_disk.fill()
    kept = [j.append(batch(50)) for _ in range(20)]  # ~100 kB, far past the budget
    assert [e.seq for e in kept] == list(range(4, 24)) and j.last_seq == 23
    assert j.memory_bytes > 4096  # unwritten events are never dropped by the budget
    assert j.events_after(0, limit=100) == durable + kept
    assert j.events_after(10, limit=3) == kept[7:10]
    assert [decode(x) for x in path.read_bytes().splitlines()] == durable  # no torn line
    j.ack(23)
    assert j.memory_bytes == 0
    j.close()
    small_disk.free_up()
    again = Journal(path)  # a restarted agent continues after what reached the file
    assert again.last_seq == 3 and again.append(NodeFault(seq=0, reason="x")).seq == 4
    again.close()
