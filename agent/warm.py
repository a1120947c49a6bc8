"""A warm node: after its run the agent may stay, idle, for the next run of its pool.

Why: a kept node serves the next run in under a second (no rent, no boot, no install);
but a kept node bills, and its operator may forget it or die. So the node bounds itself:
once `keep_warm_s` passes without a claim it releases itself exactly as an orphaned node
does (agent/orphan.py: exit, remove its directory, or destroy its own Vast instance),
whoever is left to watch. Its clock runs here, on the node, not in any operator.

The run that leaves the node warm ends with `Park` (instead of `Shutdown`), carrying the
keep time and a fresh warm key. The agent ends that run's session at once (the engine
waits only seconds for it, engine/run/warm.py PARK_S), then puts in the sink what the
run's collection left out (bounded: agent/sinkhand.py BEFORE_PARK_UPLOAD_S; its time
counts against the keep time, which runs from the Park: a claim that comes meanwhile is
answered once it is done). The agent then cleans its room — the run's workspace,
outputs, step logs and journal go (`clean_room`); caches outside the node directory
(`~/.cache`, pip/uv/HF) stay, which is the point of keeping the node — and waits. An
engine claims it on WARM_ALPN: the node sends a nonce, the engine answers `Claim` with
the next run's identity and HMAC(warm key; nonce, run id, engine id, address) (the same
proof as re-attach, agent/reattach.py). The node then joins that engine with the new
run's token, as a freshly started agent would. One claim per park: a second is refused.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from agent import endpoint, nodenotify, orphan, restart
from agent.node import DIAL_ERRORS, AgentConfig, ExitCode, NodeAgent
from agent.protocol import RESUME_ALPN, WARM_ALPN, Claim, Park
from agent.reattach import ResumeService, verified
from agent.transfer import held

log = logging.getLogger("swjob.agent")

CLOSE_WAIT_S = 0.5
AGENT_LOG = "agent.log"  # the agent's own log (no job output, no secret): it stays


def clean_room(root: Path) -> None:
    """Clear what the previous run left in the node directory: its workspace and outputs
    (work/, moved to held/ — out of the next job's workdir — for the next push to link
    its unchanged files from: agent/transfer/held.py), its step logs (logs/, but the
    agent's own log, which this process holds open), its journal and step record
    (state/; but the node's endpoint key, agent/restart.py: a container restarted later comes
    back as this node). Nothing outside `root` is touched."""
    held.keep(root / "work")  # out of the next job's room; a delta push links from it
    _empty(root / "state", keep=restart.KEY_FILE)
    _empty(root / "logs", keep=AGENT_LOG)


def _empty(folder: Path, keep: str) -> None:
    """Remove everything in `folder` but the file named `keep`; links are removed, never
    followed."""
    for entry in folder.iterdir() if folder.is_dir() else ():
        if entry.name == keep and entry.is_file() and not entry.is_symlink():
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry, ignore_errors=True)
        else:
            entry.unlink(missing_ok=True)


class ClaimService(ResumeService):
    """Accepts one claim proving the warm key; refuses every other peer."""

    alpn = WARM_ALPN

    def __init__(self, warm_id: str) -> None:
        super().__init__("", warm_id, lambda _target: None)
        self.claimed: asyncio.Future[Claim] = asyncio.get_running_loop().create_future()

    def _accept(self, msg: Any) -> None:
        log.info("warm node claimed for run %s by %s", msg.run_id, msg.orchestrator_id[:16])
        self.claimed.set_result(msg)

    def _refusal(self, msg: object, nonce: str, remote: str) -> str | None:
        if not isinstance(msg, Claim):
            return "expected claim"
        if self.claimed.done():
            return "node already claimed"
        if msg.orchestrator_id != remote:
            return "endpoint id is not the peer's own"
        fields = (nonce, msg.run_id, msg.orchestrator_id, msg.ticket)
        if not verified(self._public, msg.proof, *fields):
            return "bad warm key proof"
        return None


def claimed_config(cfg: AgentConfig, claim: Claim) -> AgentConfig:
    """The configuration of the claiming run: its identity, the same node and limits. The
    node's own meter (agent/budget.py) starts again at the claim: a pool's caps are per
    run, and the same pool's next run has the same caps and price (warm nodes fit by pool)."""
    budget = cfg.budget and replace(cfg.budget, since=time.time(), reported=False)
    return replace(
        cfg,
        run_id=claim.run_id,
        ticket=claim.ticket,
        orchestrator_id=claim.orchestrator_id,
        token=claim.token,
        reattach_id=claim.reattach_id,
        installed=(None, None),
        budget=budget,
    )


class _Router(ResumeService):
    """The process's one accept loop: resume goes to the running agent, a claim to the
    parked node's claim service (open from the moment Park arrives, so a claim racing the
    end of the previous run's session is answered, not dropped)."""

    def __init__(self, life: NodeLife) -> None:
        super().__init__("", "", lambda _target: None)
        self._life = life

    def service_for(self, alpn: bytes) -> ResumeService | None:
        return self._life.service_for(alpn)


class NodeLife:
    """The agent process's life: one run, then more while its node is kept warm."""

    def __init__(self, cfg: AgentConfig) -> None:
        self.cfg = cfg
        self.stopping = asyncio.Event()
        self._agent: NodeAgent | None = None
        self._claims: ClaimService | None = None

    def stop(self) -> None:
        """SIGTERM/SIGINT: end the run (or the wait for one) and exit."""
        self.stopping.set()
        if self._agent is not None:
            self._agent.shutdown.set()

    def service_for(self, alpn: bytes) -> ResumeService | None:
        agent = self._agent
        if agent is None:
            return None
        if alpn == RESUME_ALPN and agent.parked is None:
            return agent.resume
        if alpn == WARM_ALPN and agent.parked is not None:
            return self._claims_of(agent.parked)
        return None

    def _claims_of(self, park: Park) -> ClaimService:
        if self._claims is None:
            self._claims = ClaimService(park.warm_id)
            log.info("node kept warm for %g s", park.keep_warm_s)
        return self._claims

    async def run(self) -> ExitCode:
        self.cfg.state_dir.mkdir(exist_ok=True)  # in the root its provider made
        key = restart.node_key(self.cfg.state_dir)  # the same node id after a restart
        ep = await endpoint.bind(accept=False, alpns=[RESUME_ALPN, WARM_ALPN], secret_key=key)
        router = asyncio.create_task(_Router(self).serve(ep))
        cfg = self.cfg
        try:
            while True:
                self._agent, self._claims = NodeAgent(cfg, ep), None
                if self.stopping.is_set():
                    self._agent.shutdown.set()
                code = await self._agent.run()
                park = self._agent.parked
                if park is None or self.stopping.is_set():
                    return code
                await self._agent.save_before_parking()  # before its outputs leave work/
                clean_room(cfg.root)
                claim = await self._await_claim(park)
                if claim is None:
                    return ExitCode.OK if self.stopping.is_set() else await self._expire(park)
                cfg = claimed_config(cfg, claim)
        finally:
            router.cancel()
            await asyncio.gather(router, return_exceptions=True)
            with contextlib.suppress(*DIAL_ERRORS):
                async with asyncio.timeout(CLOSE_WAIT_S):
                    await ep.close()

    async def _await_claim(self, park: Park) -> Claim | None:
        """The claim that comes within `keep_warm_s` of the Park (None: none came, or we
        are stopped)."""
        claims = self._claims_of(park)
        assert self._agent is not None
        left = self._agent.parked_at + park.keep_warm_s - time.monotonic()
        stopped = asyncio.create_task(self.stopping.wait())
        try:
            await asyncio.wait(
                {claims.claimed, stopped},
                timeout=max(0.0, left),
                return_when=asyncio.FIRST_COMPLETED,
            )
        finally:
            stopped.cancel()
            await asyncio.gather(stopped, return_exceptions=True)
        return claims.claimed.result() if claims.claimed.done() else None

    async def _expire(self, park: Park) -> ExitCode:
        """No claim within keep_warm_s: release the node as an orphan does (exit; the
        local pool's directory is removed by main; a Vast instance destroys itself)."""
        log.error("warm node idle for %g s: releasing it", park.keep_warm_s)
        await nodenotify.tell(self.cfg, f"warm node unclaimed for {park.keep_warm_s:g} s")
        if self.cfg.on_orphan in orphan.DESTROYS:
            cfg = self.cfg
            said = await asyncio.to_thread(
                orphan.destroy_own, cfg.on_orphan, cfg.vast_url, cfg.runpod_url
            )
            log.error("%s", said)
        return ExitCode.EXPIRED
