"""The orchestrator↔node control protocol: ALPNs, message models and framing.

Both sides import this one module, so the wire has one definition. Messages are
pydantic models in a discriminated union on `type`, sent as length-prefixed JSON
frames (4-byte big-endian length, then UTF-8 JSON) on one bidirectional stream of
the control connection. Bulk bytes never travel here; they use the transfer ALPN.

Direction of dialing: the agent dials the orchestrator (nodes may sit behind NAT),
opens the control stream and sends `Hello`; the orchestrator answers `Welcome` or
`Reject`. After that either side may send at any time.
"""

from __future__ import annotations

import asyncio
import math
import struct
from enum import StrEnum
from typing import Annotated, Any, Literal, Protocol

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, TypeAdapter

from agent.readsize import CEILING, ReadSize

CTL_ALPN = b"swjob/ctl/4"  # 2: Park (warm nodes, agent/warm.py); 3: the sink messages;
# 4: the host pre-flight (Preflight, PreflightDone: agent/preflight.py)
XFER_ALPN = b"swjob/xfer/5"  # 2: chunks carry a CRC-32; 3: held/adopt (warm nodes); 4: F frames;
# 5: `live` streams (shell, forwards: agent/live.py), which had their own swjob/live/1 connection
CODE_ALPN = b"swjob/code/1"
"""Served by the engine: a booting node fetches the operator's agent code here, with its
run's join token (agent/codefetch.py, engine/run/codeserve.py)."""
RESUME_ALPN = b"swjob/resume/1"
"""Served by the agent: an engine that adopts a run proves the run's re-attach credential
here and gives the node its own address to dial (agent/reattach.py)."""
WARM_ALPN = b"swjob/warm/1"
"""Served by a parked (warm) agent: an engine claims the idle node for its next run by
proving the node's warm key, and hands it that run's identity (agent/warm.py)."""

MAX_FRAME = 16 * 1024 * 1024
MAX_GPUS = 64  # per sample and per node: more is a hostile node (a fake nvidia-smi)
_HEADER = struct.Struct(">I")


class Step(StrEnum):
    """The two supervised commands a node runs for a job."""

    SETUP = "setup"
    RUN = "run"


class Stream(StrEnum):
    STDOUT = "stdout"
    STDERR = "stderr"


class _Msg(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


def _megabytes(value: object) -> int | None:
    """A GPU's memory as the node says it: a whole number of MB a board can have, else
    absent (a hostile nvidia-smi says 1e308; such a hello must still be a hello)."""
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if 0 <= value <= 10**8 else None


class GpuInfo(_Msg):
    name: Annotated[
        str, BeforeValidator(lambda name: name[:200] if isinstance(name, str) else name)
    ]
    memory_mb: Annotated[int | None, BeforeValidator(_megabytes)] = None


class NodeFacts(_Msg):
    """What a node reports about itself when it joins; shown on the board and kept in run.json."""

    hostname: str
    os: str
    cpus: int
    memory_mb: int
    disk_free_mb: int
    gpus: Annotated[
        list[GpuInfo],
        BeforeValidator(lambda gpus: gpus[:MAX_GPUS] if isinstance(gpus, list) else gpus),
    ] = []
    python_version: str
    agent_version: str


class LogLine(_Msg):
    stream: Stream
    text: str


class BootReport(_Msg):
    """When the node's on-start command installed the agent, on the node's own clock (unix
    s), and the node's clock when it sent this: the orchestrator turns the install times
    into its own clock with that, so a node whose clock is off still shows a true install
    time. Empty on a node that installed nothing (the local pool)."""

    install_started: float | None = None
    install_ended: float | None = None
    sent_at: float


# ---- agent → orchestrator -------------------------------------------------------------


class Hello(_Msg):
    """First frame from the agent: proves it belongs to this run (single-use token)."""

    type: Literal["hello"] = "hello"
    run_id: str
    token: str
    facts: NodeFacts
    busy: bool = False  # a step is running right now (a rejoin after the operator was away)
    last_seq: int = 0  # the newest event in the node's journal: where a replay ends
    ticket: str | None = None  # the agent's own address: where an adopting engine reaches it
    boot: BootReport | None = None  # how this node's boot went, for the operator's timeline


class LogBatch(_Msg):
    """A batch of output lines of one step, already redacted by the agent."""

    type: Literal["log"] = "log"
    seq: int
    step: Step
    lines: list[LogLine]


class StepStarted(_Msg):
    type: Literal["step_started"] = "step_started"
    seq: int
    step: Step
    pid: int


class StepExited(_Msg):
    """A supervised command ended. `code` follows the shell: 128+N when killed by signal N."""

    type: Literal["step_exited"] = "step_exited"
    seq: int
    step: Step
    code: int
    signal: int | None = None
    stopped: bool = False  # True when it ended because the orchestrator asked it to stop


class NodeFault(_Msg):
    """The node could not do what it was asked (spawn failed, disk full, ...)."""

    type: Literal["fault"] = "fault"
    seq: int
    reason: str


def _reading(low: float, high: float) -> BeforeValidator:
    """A number from the node, untrusted (a job on Vast runs as root and can replace
    nvidia-smi): a finite value within [low, high], else absent — never an error, so a
    hostile sample cannot break the session, and never inf/nan, which would overflow the
    run's sums and be written to run.json as what no reader can parse."""

    def check(value: object) -> float | None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            return None
        number = float(value)
        return number if math.isfinite(number) and low <= number <= high else None

    return BeforeValidator(check)


class GpuSample(_Msg):
    """One GPU at one moment, as nvidia-smi reports it (None where it says [N/A], or says
    what no GPU can: non-finite, negative, beyond any board)."""

    index: int = Field(ge=0, lt=1024)
    util_pct: Annotated[float | None, _reading(0, 100)] = None
    mem_used_mb: Annotated[float | None, _reading(0, 1e8)] = None
    mem_total_mb: Annotated[float | None, _reading(0, 1e8)] = None
    power_w: Annotated[float | None, _reading(0, 1e5)] = None
    temp_c: Annotated[float | None, _reading(-100, 1000)] = None


def _first_gpus(value: object) -> object:
    """At most MAX_GPUS entries, and only those whose index is one (a hostile list of
    3000 GPUs grew events.jsonl by 0.5 GB/h and one index row to 1.9 MB)."""
    if not isinstance(value, list):
        return []
    valid = [g for g in value if isinstance(g, GpuSample) or _has_index(g)]
    return valid[:MAX_GPUS]


def _has_index(entry: object) -> bool:
    index = entry.get("index") if isinstance(entry, dict) else None
    return isinstance(index, int) and not isinstance(index, bool) and 0 <= index < 1024


class GpuMetrics(_Msg):
    """Every GPU of the node, sampled while a step runs (agent/gpu.py). `t` is the node's
    clock (unix s): GPU-hours and idle time are measured on it, so a replay counts right."""

    type: Literal["gpu"] = "gpu"
    seq: int
    t: Annotated[float, BeforeValidator(lambda t: t if _finite(t) else 0.0)]
    gpus: Annotated[list[GpuSample], BeforeValidator(_first_gpus)]


def _finite(value: object) -> bool:
    return isinstance(value, int | float) and math.isfinite(value)


class SinkDone(_Msg):
    """The node finished a piece of sink work (`sync` is its own live sync; id 0). `error`
    says why nothing could be done; `not_landed` names each file that did not, and why."""

    type: Literal["sink_done"] = "sink_done"
    seq: int
    op: Literal["upload", "seed", "sync", "final"]
    id: int = 0
    files: int = 0
    bytes: int = 0
    sent_files: int = 0
    sent_bytes: int = 0
    not_landed: dict[str, str] = {}
    complete: bool = False
    error: str | None = None


class SinkProgress(_Msg):
    """How far the node's upload for SinkWork `id` is (at most twice a second, only when it
    moved): the console's progress, and the collection's proof that bytes still move."""

    type: Literal["sink_progress"] = "sink_progress"
    seq: int
    id: int
    bytes_done: int
    bytes_total: int
    files_done: int
    files_total: int


class PreflightCheck(_Msg):
    """One check of the node's pre-flight: `name` is one of agent/preflight.py's CHECKS;
    `skipped`: the node had no way to run it (said in `detail`), which is no failure."""

    name: str = Field(max_length=20)
    ok: bool
    detail: Annotated[str, BeforeValidator(lambda d: d[:300] if isinstance(d, str) else d)]
    skipped: bool = False


class PreflightDone(_Msg):
    """The node's answer to Preflight: each check and what it found."""

    type: Literal["preflight_done"] = "preflight_done"
    seq: int
    checks: Annotated[
        list[PreflightCheck], BeforeValidator(lambda c: c[:16] if isinstance(c, list) else c)
    ]

    @property
    def failed(self) -> list[PreflightCheck]:
        return [check for check in self.checks if not check.ok]


# ---- orchestrator → agent -------------------------------------------------------------


class Welcome(_Msg):
    """The orchestrator admits the node. The agent resends journaled events after `replay_after`."""

    type: Literal["welcome"] = "welcome"
    replay_after: int = 0
    heartbeat_s: float = 1.0


class Reject(_Msg):
    type: Literal["reject"] = "reject"
    reason: str


class RunStep(_Msg):
    """Run one supervised command in the node's workdir with exactly this environment overlay."""

    type: Literal["run_step"] = "run_step"
    step: Step
    command: str
    env: dict[str, str] = {}


class StopStep(_Msg):
    """Stop the running step: TERM to its process group, `grace_s`, then KILL."""

    type: Literal["stop"] = "stop"
    grace_s: float = 10.0


class Preflight(_Msg):
    """Check the joined node against what its pool asked for before any of the run's
    files reach it (agent/preflight.py); answered by PreflightDone. `operator_time` is
    the operator's clock at sending: the node's clock is judged against it."""

    type: Literal["preflight"] = "preflight"
    gpu_count: int = Field(default=0, ge=0, le=MAX_GPUS)
    gpu_memory_mb: int | None = Field(default=None, ge=0)
    disk_mb: int | None = Field(default=None, ge=0)
    operator_time: float
    clock_skew_max_s: float = Field(default=120.0, gt=0)


class Shutdown(_Msg):
    """The run is over; the agent stops everything it started and exits."""

    type: Literal["shutdown"] = "shutdown"


class Park(_Msg):
    """The run is over and its node stays warm: the agent ends the run's session, cleans
    its room, and waits up to `keep_warm_s` for a claim signed by the warm key; then it
    releases itself as it would when orphaned (agent/warm.py). `warm_id` is the public half
    of a warm key pair (agent/reattach.py): the engine keeps the secret, so nothing a job
    reads on the node lets it claim the node."""

    type: Literal["park"] = "park"
    keep_warm_s: float = Field(gt=0)
    warm_id: str = Field(min_length=16)


class SinkTarget(_Msg):
    """Where this run's outputs go in an S3-compatible store, with the credentials to put
    them there (agent/sink/): `prefix` is the run's own (`<sink prefix>/<job>/<run id>`),
    the only place the node writes. The keys never reach the job's env, a log or a repr."""

    bucket: str
    prefix: str
    endpoint: str | None = None
    region: str | None = None
    access_key_id: str = Field(repr=False)
    secret_access_key: str = Field(repr=False)
    session_token: str | None = Field(default=None, repr=False)
    patterns: list[str] = []
    sync_every_s: float | None = None  # while `run` runs, put what changed this often


class UseSink(_Msg):
    """Sent once the node joined: from now on the node can put its outputs in the sink by
    itself — at collection, every `sync_every_s`, and before it gives itself up."""

    type: Literal["use_sink"] = "use_sink"
    target: SinkTarget


class SinkWork(_Msg):
    """Put the outputs in the sink now (`upload`, collection) or fill the workdir from an
    earlier run's outputs there (`seed`, a next attempt); answered by SinkDone `id`."""

    type: Literal["sink_work"] = "sink_work"
    id: int
    op: Literal["upload", "seed"]
    seed_prefix: str | None = None  # for `seed`: the earlier run's prefix in the same bucket


# ---- re-attach (RESUME_ALPN: the adopting engine dials the agent) ----------------------


class Challenge(_Msg):
    """First frame from the agent on a resume connection: a fresh nonce to sign."""

    type: Literal["challenge"] = "challenge"
    nonce: str


class Resume(_Msg):
    """An engine takes the run over: dial `ticket`, obey `orchestrator_id` (which must be
    the resume connection's own peer id). `proof` is the signature, by the run's
    re-attach secret, of the nonce and every other field."""

    type: Literal["resume"] = "resume"
    run_id: str
    orchestrator_id: str
    ticket: str
    proof: str


class Claim(_Msg):
    """An engine takes a warm node for run `run_id` (WARM_ALPN): the node then joins
    `orchestrator_id` at `ticket` with `token`, as a freshly started agent would. `proof`
    is the signature, by the warm key's secret half, of the nonce, the run id, the id and
    the ticket; `reattach_id` is the public half of the new run's re-attach key pair."""

    type: Literal["claim"] = "claim"
    run_id: str
    orchestrator_id: str
    ticket: str
    proof: str
    token: str
    reattach_id: str = ""


class Resumed(_Msg):
    """The agent accepted the new orchestrator and is dialing it."""

    type: Literal["resumed"] = "resumed"


# ---- both directions -------------------------------------------------------------------


class Heartbeat(_Msg):
    """Sent every `heartbeat_s` by both sides; silence past the deadline means the peer is lost."""

    type: Literal["heartbeat"] = "heartbeat"
    last_seq: int = 0  # from the orchestrator: the last event it stored (lets the agent trim)


AgentEvent = (
    LogBatch
    | StepStarted
    | StepExited
    | NodeFault
    | GpuMetrics
    | SinkDone
    | SinkProgress
    | PreflightDone
)
Message = Annotated[
    Hello
    | AgentEvent  # the union flattens: one discriminated union of every message
    | Welcome
    | Reject
    | RunStep
    | StopStep
    | Preflight
    | Shutdown
    | Park
    | UseSink
    | SinkWork
    | Heartbeat
    | Challenge
    | Resume
    | Claim
    | Resumed,
    Field(discriminator="type"),
]
_MESSAGE = TypeAdapter(Message)


class ProtocolError(Exception):
    """The peer sent something that is not a valid frame or message."""


class FrameTooLarge(ProtocolError):
    """A message of ours that no frame can hold; nothing of it was sent."""


def encode(msg: BaseModel) -> bytes:
    """One frame: length prefix and the message's JSON."""
    body = msg.model_dump_json().encode()
    if len(body) > MAX_FRAME:
        raise FrameTooLarge(f"frame of {len(body)} bytes exceeds {MAX_FRAME}")
    return _HEADER.pack(len(body)) + body


def stand_in_for(event: AgentEvent, problem: FrameTooLarge) -> AgentEvent:
    """What to send, under the same seq, for an event too large for any frame.

    Without it the event would be resent on every rejoin and never arrive: the node's
    stream would stall for good behind it. A log batch becomes one stderr line saying
    what was lost (the lines stay in the node's step log); anything else a fault."""
    if isinstance(event, LogBatch):
        note = f"[swjob] {len(event.lines)} log lines not sent: {problem}"
        line = LogLine(stream=Stream.STDERR, text=note)
        return LogBatch(seq=event.seq, step=event.step, lines=[line])
    return NodeFault(seq=event.seq, reason=f"{event.type} event not sent: {problem}")


def decode(body: bytes) -> Any:
    """Parse one frame body into its message model."""
    try:
        return _MESSAGE.validate_json(body)
    except ValueError as exc:
        raise ProtocolError(f"bad message: {str(exc).splitlines()[0]}") from None


class Readable(Protocol):
    async def read(self, size_limit: int) -> bytes: ...


class Writable(Protocol):
    async def write_all(self, buf: bytes) -> None: ...

    async def finish(self) -> None: ...


class FrameReader:
    """Reads length-prefixed frames, pulling large pieces from the stream to keep CPU low.

    `max_frame` is the largest frame accepted; it also bounds each read, so a reader
    held to a small limit (a peer not yet admitted) never buffers more than about twice
    that, whatever the peer sends."""

    def __init__(self, stream: Readable, max_frame: int = MAX_FRAME) -> None:
        self._stream = stream
        self._buf = bytearray()
        self.max_frame = max_frame  # sets the read size's ceiling too

    @property
    def max_frame(self) -> int:
        return self._max_frame

    @max_frame.setter
    def max_frame(self, value: int) -> None:
        """The largest frame accepted; it also bounds each read (see the class)."""
        self._max_frame = value
        self._size = ReadSize(min(CEILING, value + _HEADER.size))

    async def _fill(self, need: int) -> bool:
        while len(self._buf) < need:
            chunk = await self._stream.read(self._size.now)
            if not chunk:
                return False
            self._size.after(len(chunk))
            self._buf += chunk
        return True

    async def read_frame(self) -> bytes | None:
        """The next frame body, or None at a clean end of stream."""
        if not await self._fill(_HEADER.size):
            if self._buf:
                raise ProtocolError("stream ended inside a frame header")
            return None
        (size,) = _HEADER.unpack_from(self._buf)
        if size > self.max_frame:
            raise ProtocolError(f"frame of {size} bytes exceeds {self.max_frame}")
        if not await self._fill(_HEADER.size + size):
            raise ProtocolError("stream ended inside a frame")
        body = bytes(self._buf[_HEADER.size : _HEADER.size + size])
        del self._buf[: _HEADER.size + size]
        return body

    async def read_message(self) -> Any:
        body = await self.read_frame()
        return None if body is None else decode(body)


class Channel:
    """A message channel over one bidirectional stream; sends are serialized by a lock."""

    def __init__(self, recv: Readable, send: Writable, max_frame: int = MAX_FRAME) -> None:
        self._reader = FrameReader(recv, max_frame)
        self._send = send
        self._lock = asyncio.Lock()
        self._finished = False

    def allow_frames(self, max_frame: int) -> None:
        """Raise (or lower) the largest frame this channel accepts from now on."""
        self._reader.max_frame = max_frame

    async def send(self, msg: BaseModel) -> None:
        frame = encode(msg)
        async with self._lock:
            if self._finished:
                return  # this side said all it had to (`finish`): nothing more goes
            await self._send.write_all(frame)

    async def finish(self) -> None:
        """End this side of the stream after what was sent. A send after it is dropped,
        not failed: an agent finishing its last events saw a heartbeat sent meanwhile
        fail ("ClosedStream"), and the failed session closed the connection — dropping
        the last events, not yet acknowledged, with it."""
        async with self._lock:
            if not self._finished:
                self._finished = True
                await self._send.finish()

    async def recv(self) -> Any:
        """The next message, or None when the peer finished the stream."""
        return await self._reader.read_message()
