"""What a sweep keeps in the state dir, `sweeps/<id>.json`: its variants, which run each
became, their metrics, its cap and why it halted. Another process reads it — `swjob runs
--sweep`, the console's group row — and asks the sweep to stop by leaving
`sweeps/<id>.stop`, which the sweep's own process sees within a tick: the runs are that
process's to stop (engine/state/ownership.py)."""

from __future__ import annotations

import os
import secrets
import time
from pathlib import Path

from pydantic import BaseModel

from engine.state.paths import state_dir
from engine.state.private import private_dir


class Member(BaseModel):
    label: str
    params: dict[str, str] = {}
    run_id: str | None = None  # None: not started (queued, or held by a halt)
    metric: float | None = None
    metric_problem: str | None = None


class SweepRecord(BaseModel):
    sweep_id: str
    job_name: str
    job_file: str | None = None  # for `swjob sweep --rerun`
    pool: str
    concurrency: int
    max_dollars: float | None = None
    metric: str | None = None  # FILE:KEY (engine/sweep/metric.py)
    minimize: bool = True  # which end of the metric is best
    members: list[Member]
    halted: str | None = None  # why no more runs start (cap, fail-fast, stop)
    done: bool = False  # the sweep's process finished

    def best(self) -> tuple[str, float] | None:
        """(label, value) of the best metric so far."""
        found = [(m.label, m.metric) for m in self.members if m.metric is not None]
        if not found:
            return None
        pick = min if self.minimize else max
        return pick(found, key=lambda item: item[1])  # type: ignore[return-value,arg-type]


def new_sweep_id() -> str:
    return f"s{time.strftime('%Y%m%d-%H%M%S')}-{secrets.token_hex(3)}"


def sweeps_dir() -> Path:
    return private_dir(state_dir() / "sweeps")


def save(record: SweepRecord) -> None:
    """Written whole and renamed into place: a reader never sees half of it."""
    path = sweeps_dir() / f"{record.sweep_id}.json"
    tmp = path.with_suffix(f".tmp{os.getpid()}")
    tmp.write_text(record.model_dump_json(indent=1), encoding="utf-8")
    os.replace(tmp, path)


def load(sweep_ref: str) -> SweepRecord | None:
    """A sweep by id or a unique start of it; None when none (or several) match."""
    if "/" in sweep_ref or not sweep_ref or sweep_ref.startswith("."):
        return None
    found = sorted(sweeps_dir().glob(f"{sweep_ref}*.json"))
    if len(found) != 1:
        return None
    try:
        return SweepRecord.model_validate_json(found[0].read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def all_records() -> list[SweepRecord]:
    """Every sweep on record, newest first (the console's group rows)."""
    records = []
    for path in sorted(sweeps_dir().glob("s*.json"), reverse=True):
        try:
            records.append(SweepRecord.model_validate_json(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return records


def request_stop(sweep_id: str) -> None:
    (sweeps_dir() / f"{sweep_id}.stop").touch()


def stop_requested(sweep_id: str) -> bool:
    return (sweeps_dir() / f"{sweep_id}.stop").exists()
