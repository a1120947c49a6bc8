"""GPU telemetry's pure parts: nvidia-smi's CSV, folding samples, the idle alarm."""

from __future__ import annotations

from agent.gpu import parse
from agent.protocol import GpuSample
from engine.report import events as ev
from engine.report.gpu import MAX_GAP_S, WINDOW, IdleGpuWatch, fold_gpus, gpu_summary


def sample(t: float, *utils: float) -> ev.GpuMetrics:
    gpus = [
        GpuSample(index=i, util_pct=u, mem_used_mb=100.0 * (i + 1)) for i, u in enumerate(utils)
    ]
    return ev.GpuMetrics(run_id="r", t=t, gpus=gpus)


def test_parse_reads_every_gpu_and_keeps_not_available_as_none() -> None:
    text = "0, 87, 18234, 24564, 312.45, 71\n1, 3, 1024, 24564, [N/A], 40\ngarbage line\n"
    gpus = parse(text)
    assert [g.index for g in gpus] == [0, 1]
    assert gpus[0].util_pct == 87 and gpus[0].mem_total_mb == 24564 and gpus[0].power_w == 312.45
    assert gpus[1].power_w is None and gpus[1].temp_c == 40


def test_fold_counts_node_time_skips_gaps_and_replays() -> None:
    gpus = fold_gpus([], sample(100.0, 50, 10))
    gpus = fold_gpus(gpus, sample(102.0, 70, 20))
    gpus = fold_gpus(gpus, sample(102.0, 99, 99))  # the same sample again: ignored
    gpus = fold_gpus(gpus, sample(102.0 + MAX_GAP_S + 1, 30, 30))  # after a gap: not GPU time
    assert [g.samples for g in gpus] == [3, 3]
    assert gpus[0].seconds == 2.0 and gpus[0].util_peak == 70
    summary = gpu_summary(gpus)
    assert summary is not None
    assert summary["gpus"][0]["util_mean_pct"] == 50.0
    assert summary["gpu_hours"] == round(4.0 / 3600, 4)
    assert gpu_summary([]) is None


def test_fold_keeps_a_bounded_window_for_sparklines() -> None:
    gpus: list = []
    for i in range(WINDOW + 25):
        gpus = fold_gpus(gpus, sample(float(i), float(i)))
    assert len(gpus[0].util_recent) == WINDOW
    assert gpus[0].util_recent[-1] == WINDOW + 24


def test_idle_alarm_needs_the_whole_stretch_while_running_and_rings_once() -> None:
    watch = IdleGpuWatch(after_s=10)
    assert watch.observe(sample(0, 1, 2), running=True) is None
    assert watch.observe(sample(9, 1, 2), running=True) is None
    assert "GPUs idle" in (watch.observe(sample(10, 1, 2), running=True) or "")
    assert watch.observe(sample(20, 1, 2), running=True) is None  # once per stretch
    assert watch.observe(sample(21, 1, 60), running=True) is None  # one busy GPU ends it
    assert watch.observe(sample(22, 0, 0), running=True) is None
    assert watch.observe(sample(40, 0, 0), running=False) is None  # setup: not the job
    assert watch.observe(sample(41, 0, 0), running=True) is None
    assert watch.observe(sample(51, 0, 0), running=True) is not None
