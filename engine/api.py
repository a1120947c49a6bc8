"""The engine's public surface: everything a console (tui/) may use, and nothing else.

The console imports only this module — no other engine module, nothing of `agent` —
so the engine's rooms can be rearranged without touching it, and a test
(tests/unit/test_layering.py) keeps it so. Orphan collection lives with the providers
and is re-exported lazily: a console on local pools never pays for loading it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent.protocol import LogLine, Stream
from agent.transfer.landing import is_in_flight
from engine.engine import Engine, EngineConfig, SubmitError
from engine.errors import ProviderError, UnusableDirError, one_line
from engine.jobs.fileerror import ConfigFileError
from engine.jobs.jobspec import JobFileError, JobSpec, load_job
from engine.jobs.plan import Plan, plan_workspace
from engine.jobs.pools import PoolFileError, load_pools
from engine.logsetup import log_to_file
from engine.report import events
from engine.report.boot import boot_timeline, provisioning_start
from engine.report.chains import Chain, chains
from engine.report.events import Event, TransferProgress, Transition
from engine.report.money import cost_split, money
from engine.report.printable import printable
from engine.report.runbook import fold
from engine.report.views import GpuView, NodeView, PoolView, RunView
from engine.report.where import outputs_where
from engine.run.forward import Forward
from engine.run.liveops import LiveUnavailable
from engine.state.ownership import has_live_owner
from engine.state.paths import DEFAULT_RUNS_DIR

if TYPE_CHECKING:
    from engine.providers.gc import GONE, Collection, Orphan

__all__ = [
    "DEFAULT_RUNS_DIR",
    "GONE",
    "Chain",
    "Collection",
    "ConfigFileError",
    "Engine",
    "EngineConfig",
    "Event",
    "Forward",
    "GpuView",
    "JobFileError",
    "JobSpec",
    "LiveUnavailable",
    "LogLine",
    "NodeView",
    "Orphan",
    "Plan",
    "PoolFileError",
    "PoolView",
    "ProviderError",
    "RunView",
    "Stream",
    "SubmitError",
    "TransferProgress",
    "Transition",
    "UnusableDirError",
    "boot_timeline",
    "chains",
    "cost_split",
    "events",
    "fold",
    "has_live_owner",
    "is_in_flight",
    "load_job",
    "load_pools",
    "log_to_file",
    "money",
    "one_line",
    "outputs_where",
    "plan_workspace",
    "printable",
    "provisioning_start",
]

_LAZY = {"Collection", "Orphan", "GONE"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from engine.providers import gc

        return getattr(gc, name)
    raise AttributeError(f"module 'engine.api' has no attribute {name!r}")
