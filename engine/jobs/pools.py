"""Pool designations (DESIGN.md §4): named capacity a job is submitted to, kept out of the job.

A pool says where and on what a job runs: the provider, the hardware it asks for,
the image, how offers are chosen and what a run may cost. Pools live in their own
TOML file (`[pools.<name>]`); a built-in `local` pool exists without any file so
a first job needs no configuration. Provider API keys never live in the file:
only the NAME of the environment variable holding one.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Annotated, Any, Literal, NoReturn

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from agent.sink.layout import parse_url
from engine.jobs.modelerror import validation_error
from engine.jobs.tomlload import (
    SAFE_NAME,
    SAFE_NAME_RULE,
    ConfigFileError,
    located_error,
    read_toml,
)
from engine.state import paths

_ENV_NAME = r"^[A-Za-z_][A-Za-z0-9_]{0,254}$"
NotifyUrl = Annotated[str, Field(pattern=r"^[A-Za-z][A-Za-z0-9+.-]{0,31}://\S{1,2048}$")]
"""An Apprise URL (ntfy://…, slack://…, json://…): what each service needs is Apprise's
business; `swjob notify --test` says whether Apprise understands it (docs/notifications.md)."""
NotifyTargets = Annotated[list[NotifyUrl], Field(max_length=32)]
_API_KEY_IN_FILE = (
    "never put the key in this file; set `api_key_env` to the name of an environment "
    "variable holding it"
)
_Kind = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9_ .,-]{0,127}$")]
_PoolName = Annotated[str, Field(pattern=f"^{SAFE_NAME.pattern}$")]
_GpuType = Annotated[str, Field(pattern=r"^[A-Za-z0-9][A-Za-z0-9 _.-]{0,63}$")]
_Order = Annotated[str, Field(pattern=r"^[A-Za-z0-9_][A-Za-z0-9_ .,+-]{0,199}$")]
_DEFAULTS = {  # provider → defaults that differ by provider
    "local": {"max_nodes": 4, "boot_timeout_s": 60.0, "node_lost_after_s": 10.0},
    # a rented node's control link may hop through a relay that hiccups for tens of seconds
    "vastai": {"max_nodes": 1, "boot_timeout_s": 900.0, "node_lost_after_s": 60.0},
    "runpod": {"max_nodes": 1, "boot_timeout_s": 900.0, "node_lost_after_s": 60.0},
}
RENTED = ("vastai", "runpod")  # providers that rent a node from a marketplace


INTERRUPTIBLE_SYNC_S = 300.0
MIN_NODE_LOST_S = 0.5
RUN_CHOICES = ("sync_every_s", "max_attempts")


class PoolFileError(ConfigFileError):
    """A pools file problem (or an unknown pool name), one line like JobFileError."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False)


class Resources(_Strict):
    """The hardware a node must have; each provider translates it into its own filters."""

    gpu_count: Annotated[int, Field(ge=0, le=64)] = 0
    gpu_memory_mb: Annotated[int, Field(ge=0)] | None = None
    accelerator_kind: _Kind | None = None  # e.g. "RTX_4090", "A100", "RTX_4090,RTX_3090"
    cpu_cores: Annotated[int, Field(ge=1)] | None = None
    memory_mb: Annotated[int, Field(ge=0)] | None = None
    disk_mb: Annotated[int, Field(ge=0)] | None = None


class Selection(_Strict):
    """How to choose among offers that meet the resources."""

    max_price_per_hour: Annotated[float, Field(gt=0)] | None = None
    reliability_min: Annotated[float, Field(ge=0, le=1)] | None = None
    verified_only: bool = True
    order: _Order = "price"
    """A friendly name ("price", "reliability", "performance", "value") or the provider's
    own order syntax, passed through (e.g. Vast's "dlperf_usd-,reliability-")."""


class Caps(_Strict):
    """Spending limits for one run on this pool; the orchestrator stops a run past them."""

    max_hours: Annotated[float, Field(gt=0)] | None = None
    max_dollars: Annotated[float, Field(gt=0)] | None = None

    def tightened_by(self, other: Caps) -> Caps:
        """These caps, lowered where `other` is lower. A run keeps the caps it was started
        with (its node keeps them too: agent/budget.py); a pools file changed while the
        operator was away may tighten them, never lift them."""
        return Caps(
            max_hours=_lower(self.max_hours, other.max_hours),
            max_dollars=_lower(self.max_dollars, other.max_dollars),
        )


def _lower(a: float | None, b: float | None) -> float | None:
    return b if a is None else a if b is None else min(a, b)


class _PoolTable(_Strict):
    """One `[pools.<name>]` table."""

    provider: Literal["local", "vastai", "runpod"]
    max_nodes: Annotated[int, Field(ge=1, le=1000)]
    boot_timeout_s: Annotated[float, Field(gt=0, le=86400)]
    node_lost_after_s: Annotated[float, Field(ge=MIN_NODE_LOST_S, le=3600)]
    """Silence from a joined node (no heartbeat, no reconnect) after which it is lost. At
    least half a second: below that, a healthy node's scheduling hiccup would lose it."""
    collect_stall_s: Annotated[float, Field(gt=0, le=86400)] = 60.0
    """Output collection that moves no byte for this long gives up; the node is torn down."""
    resources: Resources = Resources()
    image: Annotated[str, Field(pattern=r"^\S{1,512}$")] | None = None
    selection: Selection = Selection()
    caps: Caps = Caps()
    agent_install: Annotated[str, Field(pattern=r"^[^\x00-\x1f\x7f]{1,2048}$")] | None = None
    """pip requirement the node installs the agent from; default: this build (agent_source)."""
    api_key_env: Annotated[str, Field(pattern=_ENV_NAME)] | None = None
    idle_gpu_alert_s: Annotated[float, Field(gt=0, le=7 * 86400)] = 600.0
    """Alert when every GPU stays under `idle_gpu_util_pct` this long while `run` runs."""
    idle_gpu_stop_s: Annotated[float, Field(gt=0, le=30 * 86400)] | None = None
    """Stop the run, FAILED "GPU idle for 20 min" after its outputs are collected, when
    every GPU stays under `idle_gpu_util_pct` this long while `run` runs (None: never)."""
    idle_gpu_util_pct: Annotated[float, Field(ge=0, le=100)] = 5.0
    """The utilisation under which a GPU counts as idle, for the alert and the stop."""
    orphan_timeout_s: Annotated[float, Field(gt=0, le=30 * 86400)] = 1800.0
    """A node whose operator has been silent this long stops its job and releases itself
    (a Vast instance destroys itself; a local node exits and removes its directory)."""
    keep_warm_s: Annotated[float, Field(ge=0, le=7 * 86400)] = 0.0
    """Keep a run's healthy node this long after the run, idle and billing, for the next
    run of this pool (which then starts in about a second); the node destroys itself when
    the time passes unclaimed. 0: every node is destroyed at its run's end
    (docs/warm-nodes.md)."""
    interruptible: bool = False
    """Rent interruptible (bid) instances: about half the price, but Vast stops the node
    when a higher bid comes; the run then ends FAILED "preempted" (docs/vastai.md)."""
    bid_per_hour: Annotated[float, Field(gt=0, le=1000)] | None = None
    """The bid in $/h for the whole machine; offers whose minimum bid is higher are skipped."""
    bid_fraction: Annotated[float, Field(gt=0, le=1)] | None = None
    """The bid as a fraction of each offer's on-demand price (e.g. 0.6)."""
    cloud_type: Literal["secure", "community", "all"] = "all"
    """RunPod: rent in its Secure Cloud (data centres), Community Cloud (hosts) or either."""
    gpu_types: Annotated[tuple[_GpuType, ...], Field(strict=False, max_length=32)] = ()
    """RunPod: the GPU type ids a pod may have (e.g. "NVIDIA GeForce RTX 4090"), cheapest
    first; none: every type meeting `resources` (docs/runpod.md)."""
    data_center: Annotated[str, Field(pattern=r"^[A-Za-z0-9-]{1,32}$")] | None = None
    """RunPod: the data centre id a pod must be in (e.g. "EU-RO-1"); none: any."""
    volume_gb: Annotated[int, Field(ge=0, le=10_000)] = 0
    """RunPod: the pod's volume (kept while the pod is stopped; swjob never stops one)."""
    container_disk_gb: Annotated[int, Field(ge=1, le=10_000)] = 20
    """RunPod: the pod's container disk, where the job's workspace lives."""
    fallback: Annotated[tuple[_PoolName, ...], Field(strict=False, max_length=8)] = ()
    """Pools (of any provider) a run moves to, in order, when this one has nothing left
    for it while it provisions (docs/pools.md#fall-over, engine/run/fallover.py)."""
    bad_host_ttl_h: Annotated[float, Field(ge=0, le=8760)] = 72.0
    """A host whose node never joined, was lost or failed its pre-flight is left out of this
    pool's offer selection this many hours (0: never remembered; `swjob hosts`)."""
    max_offers_tried: Annotated[int, Field(ge=1, le=20)] = 3
    """A rented node that fails its host pre-flight (agent/preflight.py) is destroyed and
    the next offer rented, up to this many offers for one run."""
    node_nice: Annotated[int, Field(ge=0, le=19)] | None = None
    """A local pool's nodes (agent and steps) leave the CPU to the operator's console and
    engine first: their nice value, 0 (each its session's share) to 19 (agent/priority.py).
    None: the program's choice (`PoolSet.giving_way`) — 0 for the engine and the CLI, whose
    tests lost nodes with short node_lost_after_s to starved heartbeats on a loaded
    machine; 10 for the console, whose loop stalled past 50 ms while a dozen local nodes
    started at their full share. Rented: not settable."""
    max_attempts: Annotated[int, Field(ge=1, le=20)] = 1
    """A run FAILED "preempted" or "node lost" is run again on a new node, up to this many
    attempts in all, carrying its last synced outputs (engine/run/attempts.py)."""
    sink: Annotated[str, Field(pattern=r"^s3://\S{3,1024}$")] | None = None
    """An S3-compatible bucket (`s3://bucket/prefix`) the node puts the outputs in by
    itself, under `<prefix>/<job>/<run id>/` with a manifest.json (docs/sink.md)."""
    notify: Annotated[NotifyTargets, Field(exclude=True)] = []
    """Where this pool's runs are told about (Apprise URLs), besides the file's top-level
    `notify` targets (docs/notifications.md). Never serialised: the URLs hold tokens, and
    a run's record keeps its pool."""
    sink_endpoint: Annotated[str, Field(pattern=r"^https?://[^\s/]{1,255}/?$")] | None = None
    """The store's endpoint for R2, B2, MinIO, SeaweedFS…; none: AWS S3 itself."""
    sink_region: Annotated[str, Field(pattern=r"^[a-z0-9-]{1,64}$")] | None = None
    sink_access_key_env: Annotated[str, Field(pattern=_ENV_NAME)] = "AWS_ACCESS_KEY_ID"
    sink_secret_key_env: Annotated[str, Field(pattern=_ENV_NAME)] = "AWS_SECRET_ACCESS_KEY"
    sink_session_token_env: Annotated[str, Field(pattern=_ENV_NAME)] = "AWS_SESSION_TOKEN"
    """The names of the operator's environment variables holding the sink's credentials
    (never the keys themselves: the node gets them as secrets, never in the job's env)."""
    sync_every_s: Annotated[float, Field(ge=0, le=86400)] | None = None
    """While `run` runs, pull the declared outputs that changed this often (0: never).
    Default: every 300 s on an interruptible pool (a preempted node's files are lost with
    it), never on demand (the final pull has them)."""

    @model_validator(mode="before")
    @classmethod
    def _provider_defaults(cls, data: Any) -> Any:
        """Fill what depends on the provider before field validation sees it."""
        if isinstance(data, dict) and data.get("provider") in _DEFAULTS:
            data = _DEFAULTS[data["provider"]] | data
        return data

    @model_validator(mode="after")
    def _sink_is_a_bucket(self) -> _PoolTable:
        if self.sink is not None:
            parse_url(self.sink)  # its ValueError names what is wrong
        elif self.sink_endpoint is not None or self.sink_region is not None:
            raise ValueError("`sink_endpoint` and `sink_region` need a `sink` (s3://bucket/…)")
        return self

    @model_validator(mode="after")
    def _nice_is_local(self) -> _PoolTable:
        if self.provider in RENTED and self.node_nice:
            raise ValueError("`node_nice` is for a local pool: a rented node is the job's own")
        return self

    @model_validator(mode="after")
    def _rented_needs_image(self) -> _PoolTable:
        if self.provider in RENTED and self.image is None:
            raise ValueError(f"a {self.provider} pool needs an `image` (e.g. a pytorch/cuda image)")
        return self


class Pool(_PoolTable):
    """A named pool designation."""

    name: str

    def run_choices(self) -> dict[str, Any]:
        """The settings `swjob run` may choose for one run (--sync-every, --attempts): an
        adopted run keeps its own, whatever the pools file says now."""
        return {name: getattr(self, name) for name in RUN_CHOICES}

    def nodes_nice(self) -> int:
        """The nice its local nodes run at: `node_nice`, 0 where the program left it to
        (the engine and the CLI; the console sets it, `PoolSet.giving_way`)."""
        return self.node_nice or 0

    def sync_interval(self) -> float | None:
        """Seconds between live output syncs, or None when the pool does not sync."""
        every = self.sync_every_s
        if every is None:
            every = INTERRUPTIBLE_SYNC_S if self.interruptible else 0
        return every or None

    def summary(self) -> str:
        """One line for the board, e.g. `1× RTX_4090 ≥24 GB · ≤$0.60/h · rel≥0.98`."""
        r, s = self.resources, self.selection
        parts = [] if self.provider != "local" else ["this machine"]
        if r.gpu_count:
            gpu = f"{r.gpu_count}× {r.accelerator_kind or 'GPU'}"
            parts.append(gpu + (f" ≥{_gb(r.gpu_memory_mb)} GB" if r.gpu_memory_mb else ""))
        if s.max_price_per_hour is not None:
            parts.append(f"≤${s.max_price_per_hour:.2f}/h")
        if s.reliability_min is not None:
            parts.append(f"rel≥{s.reliability_min:g}")
        if self.bid_per_hour is not None:
            parts.append(f"bid ${self.bid_per_hour:.2f}/h")
        elif self.bid_fraction is not None:
            parts.append(f"bid {self.bid_fraction:.0%}")
        return " · ".join(parts) or "any offer"


def _gb(mb: int) -> str:
    """Vast counts GPU memory in 1000s; users often write GiB multiples. Show either as GB."""
    return f"{mb / 1024 if mb % 1024 == 0 else mb / 1000:.3g}"


BUILTIN_LOCAL = Pool(name="local", **_DEFAULTS["local"], provider="local")


class PoolSet:
    """The pools one can submit to, by name, in file order (builtins first)."""

    def __init__(
        self, pools: dict[str, Pool], source: Path | None = None, notify: list[str] | None = None
    ) -> None:
        self._pools = pools
        self.source = source
        self.notify = notify or []
        """The file's top-level notification targets: told about every pool's runs."""

    def targets(self, pool: str | None) -> list[str]:
        """Where a run of `pool` is told about (None: only the top-level targets)."""
        own = self._pools[pool].notify if pool in self._pools else []
        return list(dict.fromkeys([*self.notify, *own]))

    def get(self, name: str) -> Pool:
        try:
            return self._pools[name]
        except KeyError:
            known = ", ".join(self._pools)
            raise PoolFileError(self.source, f"unknown pool '{name}' (known: {known})") from None

    def names(self) -> list[str]:
        return list(self._pools)

    def tuned(self, name: str, **changes: Any) -> PoolSet:
        """A copy with pool `name` changed: a command-line override of a pool setting
        (the run records the pool it ran on, override included)."""
        pools = dict(self._pools)
        pools[name] = self.get(name).model_copy(update=changes)
        return PoolSet(pools, self.source, self.notify)

    def giving_way(self, nice: int) -> PoolSet:
        """A copy whose local pools that do not choose a `node_nice` run their nodes at
        `nice`: the console's, so that nodes starting by the dozen do not stall its loop."""
        pools = {
            name: pool.model_copy(update={"node_nice": nice})
            if pool.provider == "local" and pool.node_nice is None
            else pool
            for name, pool in self._pools.items()
        }
        return PoolSet(pools, self.source, self.notify)

    def __iter__(self) -> Iterator[Pool]:
        return iter(self._pools.values())

    def __len__(self) -> int:
        return len(self._pools)

    def __contains__(self, name: object) -> bool:
        return name in self._pools


class _PoolsFile(_Strict):
    notify: NotifyTargets = []
    pools: Annotated[dict[str, _PoolTable], Field(max_length=1000)]


def load_pools(path: Path | None = None) -> PoolSet:
    """Pools from `path`, or from the default pools file if it exists, plus the builtins.

    An explicit `path` must exist; the default file is optional. A file may redefine
    `local` (e.g. to change `max_nodes`).
    """
    if path is None:
        path = paths.default_pools_file()
        if not path.exists():
            return PoolSet({"local": BUILTIN_LOCAL})
    source = Path(path).absolute()
    text, data = read_toml(source, PoolFileError)
    _check_tables(text, data, source)
    try:
        parsed = _PoolsFile.model_validate(data)
    except ValidationError as exc:
        raise validation_error(exc, text, source, _PoolsFile, PoolFileError) from None
    pools = {"local": BUILTIN_LOCAL}
    for name, table in parsed.pools.items():
        _check_bid(text, source, name, table)
        pools[name] = Pool(**dict(table), name=name)
    for name, table in parsed.pools.items():
        for other in table.fallback:
            if other == name or other not in pools:
                what = "the pool itself" if other == name else "no such pool"
                _raise(text, source, ("pools", name, "fallback"), f"{other!r}: {what}")
    return PoolSet(pools, source, parsed.notify)


def bid_problem(table: _PoolTable) -> tuple[str, str] | None:
    """(field, problem) when the interruptible settings do not fit together."""
    bids = [f for f in ("bid_per_hour", "bid_fraction") if getattr(table, f) is not None]
    if not table.interruptible:
        return (bids[0], "a bid needs `interruptible = true`") if bids else None
    if table.provider not in RENTED:
        return "interruptible", "only a vastai or runpod pool can be interruptible"
    if len(bids) != 1:
        return "interruptible", "an interruptible pool needs one of `bid_per_hour`, `bid_fraction`"
    cap = table.selection.max_price_per_hour
    if table.bid_per_hour is not None and cap is not None and table.bid_per_hour > cap:
        return "bid_per_hour", f"the bid is above selection.max_price_per_hour ({cap:g})"
    return None


def _check_bid(text: str, source: Path, name: str, table: _PoolTable) -> None:
    problem = bid_problem(table)
    if problem is not None:
        field, words = problem
        _raise(text, source, ("pools", name, field), words)


def _check_tables(text: str, data: dict[str, Any], source: Path) -> None:
    """What pydantic cannot say well: bad pool names, and a literal `api_key` — a leaked
    secret waiting to happen, refused with a pointer to `api_key_env`."""
    pools = data.get("pools")
    for name, table in pools.items() if isinstance(pools, dict) else ():
        if not SAFE_NAME.fullmatch(name):
            _raise(text, source, ("pools", name), f"not a safe pool name: {SAFE_NAME_RULE}")
        if isinstance(table, dict) and "api_key" in table:
            _raise(text, source, ("pools", name, "api_key"), _API_KEY_IN_FILE)


def _raise(text: str, source: Path, loc: tuple[str, ...], problem: str) -> NoReturn:
    raise located_error(PoolFileError, text, source, loc, problem)
