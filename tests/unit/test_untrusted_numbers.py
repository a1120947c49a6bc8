"""Numbers from the node are untrusted: GPU readings parse as finite values in range or
as absent, no sample holds more than MAX_GPUS GPUs, and a message never fails for them
(agent/protocol.py, agent/gpu.py); one unreadable run-index row is skipped and said,
never the end of a listing or a lookup (engine/state/store.py)."""

from __future__ import annotations

import json
import sqlite3

import pytest

from agent import gpu
from agent.protocol import MAX_GPUS, GpuMetrics, NodeFacts, decode
from engine.report import events as ev
from engine.report.gpu import fold_gpus, gpu_summary
from engine.state.store import Store
from tests.support.runs import unfinished_run


@pytest.mark.parametrize(
    "text",
    [
        "0, 1e308, 1e308, 1e308, 1e308, 1e308",
        "0, nan, inf, -inf, NaN, -1e400",
        "0, -3, -1, -1, -9, -400",
    ],
)
def test_readings_out_of_range_or_not_finite_are_absent(text: str) -> None:
    (sample,) = gpu.parse(text)
    assert sample.index == 0
    assert (sample.util_pct, sample.mem_used_mb, sample.mem_total_mb, sample.power_w) == (None,) * 4


def test_no_more_than_max_gpus_and_no_garbage() -> None:
    many = "\n".join(f"{i}, 50, 1000, 2000, 100, 60" for i in range(3000))
    assert len(gpu.parse(many)) == MAX_GPUS
    assert gpu.parse("\x01\xff,,,\n-1, 5, 5, 5, 5, 5\n99999999999, 1, 1, 1, 1, 1\n0, 7") == []


def test_a_hostile_message_is_cut_down_not_refused() -> None:
    body = {
        "type": "gpu", "seq": 1, "t": 1e400,
        "gpus": [{"index": i, "util_pct": 1e308} for i in range(3000)] + ["x", {"index": -1}],
    }  # fmt: skip
    msg = decode(json.dumps(body).encode())
    assert isinstance(msg, GpuMetrics) and len(msg.gpus) == MAX_GPUS
    assert msg.t == 0.0 and msg.gpus[0].util_pct is None
    facts = {
        "type": "hello", "hostname": "h", "os": "o", "cpus": 1, "memory_mb": 1,
        "disk_free_mb": 1, "python_version": "3", "agent_version": "1",
        "gpus": [{"name": "x" * 10_000} for _ in range(3000)],
    }  # fmt: skip
    node = NodeFacts.model_validate({k: v for k, v in facts.items() if k != "type"})
    assert len(node.gpus) == MAX_GPUS and len(node.gpus[0].name) == 200


def test_the_summary_of_huge_readings_is_finite() -> None:
    views: list = []
    for t in range(1, 5):
        sample = GpuMetrics(seq=t, t=float(t), gpus=gpu.parse("0, 1e308, 1e308, 1e308, 1e308, 1"))
        views = fold_gpus(views, ev.GpuMetrics(run_id="r", t=sample.t, gpus=sample.gpus))
    json.dumps(gpu_summary(views), allow_nan=False)  # raises on inf or nan


def test_an_unreadable_index_row_is_skipped_and_said(tmp_path) -> None:
    good = unfinished_run(tmp_path / "runs", "20261206-000001-aaaaaaaa")
    unfinished_run(tmp_path / "runs", "20261206-000002-bbbbbbbb")
    store = Store()
    with sqlite3.connect(store.path) as db:
        db.execute("UPDATE runs SET view = ? WHERE run_id LIKE '%bbbb'", ('{"util_sum": null}',))
    assert [v.run_id for v in store.views()] == [good.name]
    assert store.unreadable == ["20261206-000002-bbbbbbbb"]
    assert store.find(good.name) is not None and store.find("bbbbbbbb") is None
    assert [v.run_id for v, _ in store.unfinished()] == [good.name]
    store.close()


def test_a_hello_with_hostile_gpu_facts_is_still_a_hello() -> None:
    from agent.facts import parse_nvidia_smi

    gpus = parse_nvidia_smi("A100, 1e308\nB, inf\nC, nan\nD, 81920\n" + "E, 1\n" * 3000)
    assert [g.memory_mb for g in gpus[:4]] == [None, None, None, 81920]
    assert len(gpus) == MAX_GPUS
