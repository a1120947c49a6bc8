"""The engine's public surface: everything a console (tui/) may use, and nothing else.

The console imports only this module — no other engine module, nothing of `agent` —
so the engine's rooms can be rearranged without touching it, and a test
(tests/unit/test_layering.py) keeps it so. Orphan collection and the operations of
engine/ops (the CLI's verbs: stop, offers, …) are re-exported lazily: a console on local
pools never pays for loading them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from agent.inflight import is_in_flight
from agent.protocol import LogLine, Stream
from engine.engine import Engine, EngineConfig, SubmitError
from engine.errors import ProviderError, SwjobError, UnusableDirError, one_line
from engine.jobs.envargs import with_env
from engine.jobs.fileerror import ConfigFileError
from engine.jobs.jobspec import JobFileError, JobSpec, load_job
from engine.jobs.plan import Plan, plan_workspace
from engine.jobs.pools import PoolFileError, PoolSet, load_pools
from engine.logsetup import log_to_file
from engine.report import events
from engine.report.boot import boot_timeline, provisioning_start
from engine.report.chains import Chain, chains
from engine.report.events import Event, TransferProgress, Transition
from engine.report.money import cost_split, money
from engine.report.printable import printable
from engine.report.runbook import fold
from engine.report.views import GpuView, NodeView, PoolView, RunView, WarmNodeView, short_id
from engine.report.where import outputs_where
from engine.run.forward import Forward
from engine.run.liveops import LiveUnavailable
from engine.state.ownership import has_live_owner
from engine.state.paths import DEFAULT_RUNS_DIR, state_dir
from engine.sweep.grid import GridError, Variant, expand, load_params, parse_grid
from engine.sweep.metric import Metric
from engine.sweep.record import SweepRecord, all_records, request_stop
from engine.sweep.record import load as load_sweep
from engine.sweep.runner import NOT_STARTED, Sweep, SweepRow

if TYPE_CHECKING:
    from engine.ops.logs import Unowned, follow_log
    from engine.ops.offers import OffersError, OfferView, list_offers
    from engine.ops.poolcheck import PoolCheck, check_pool
    from engine.ops.stop import StopError, stop_run
    from engine.providers.gc import GONE, Collection, Orphan

__all__ = [
    "DEFAULT_RUNS_DIR",
    "GONE",
    "NOT_STARTED",
    "Chain",
    "Collection",
    "ConfigFileError",
    "Engine",
    "EngineConfig",
    "Event",
    "Forward",
    "GpuView",
    "GridError",
    "JobFileError",
    "JobSpec",
    "LiveUnavailable",
    "LogLine",
    "Metric",
    "NodeView",
    "OfferView",
    "OffersError",
    "Orphan",
    "Plan",
    "PoolCheck",
    "PoolFileError",
    "PoolSet",
    "PoolView",
    "ProviderError",
    "RunView",
    "StopError",
    "Stream",
    "SubmitError",
    "Sweep",
    "SweepRecord",
    "SweepRow",
    "SwjobError",
    "TransferProgress",
    "Transition",
    "Unowned",
    "UnusableDirError",
    "Variant",
    "WarmNodeView",
    "all_records",
    "boot_timeline",
    "chains",
    "check_pool",
    "cost_split",
    "events",
    "expand",
    "fold",
    "follow_log",
    "has_live_owner",
    "is_in_flight",
    "list_offers",
    "load_job",
    "load_params",
    "load_pools",
    "load_sweep",
    "log_to_file",
    "money",
    "one_line",
    "outputs_where",
    "parse_grid",
    "plan_workspace",
    "printable",
    "provisioning_start",
    "request_stop",
    "short_id",
    "state_dir",
    "stop_run",
    "with_env",
]

_LAZY = {  # name → the module that has it, loaded only when asked for
    "Collection": "engine.providers.gc",
    "Orphan": "engine.providers.gc",
    "GONE": "engine.providers.gc",
    "StopError": "engine.ops.stop",
    "OfferView": "engine.ops.offers",
    "OffersError": "engine.ops.offers",
    "PoolCheck": "engine.ops.poolcheck",
    "check_pool": "engine.ops.poolcheck",
    "list_offers": "engine.ops.offers",
    "Unowned": "engine.ops.logs",
    "follow_log": "engine.ops.logs",
    "stop_run": "engine.ops.stop",
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'engine.api' has no attribute {name!r}")
