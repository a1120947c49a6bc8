"""A parked warm node obeys only its own operator: a stranger who reaches its address
(with or without the run's other facts) cannot claim it — a guessed key and a claim made
in another endpoint's name are both refused — and the node stays parked, claimable by its
operator's next run."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from agent.protocol import WARM_ALPN, Claim
from agent.reattach import new_key, proof
from engine.jobs.jobspec import JobSpec
from engine.run.reclaim import ReclaimRefused, handshake
from engine.state import warmnodes
from tests.security.helpers import rogues
from tests.support.engines import EngineFactory
from tests.support.runs import agent_pid, run_to_end

pytestmark = pytest.mark.timeout(90)


def _claim(key: str, claimed_for: str | None = None) -> Callable[[str, str, str], Claim]:
    def answer(nonce: str, me: str, ticket: str) -> Claim:
        by = claimed_for or me
        signed = proof(key, nonce, "evil-run", by, ticket)
        return Claim(run_id="evil-run", orchestrator_id=by, ticket=ticket, proof=signed, token="t")

    return answer


async def test_a_stranger_cannot_claim_a_warm_node(
    make_engine: EngineFactory, make_job: Callable[..., JobSpec], record_fault
) -> None:
    engine = await make_engine(local={"keep_warm_s": 60})
    one = await run_to_end(engine, make_job(run="echo hi"))
    (parked,) = warmnodes.listing()
    async with rogues(1) as (rogue,):
        with pytest.raises(ReclaimRefused, match="bad warm key proof"):
            await handshake(
                rogue, parked.agent_ticket, WARM_ALPN, _claim(new_key())
            )  # not the warm secret
        in_its_name = _claim(parked.warm_key, claimed_for=parked.agent_id)  # key leaked, even
        with pytest.raises(ReclaimRefused, match="endpoint id is not the peer's own"):
            await handshake(rogue, parked.agent_ticket, WARM_ALPN, in_its_name)
    two = await run_to_end(engine, make_job(run="echo again", folder="again"))
    assert two.state == "COMPLETED" and agent_pid(two.run_dir) == agent_pid(one.run_dir)
    assert await engine.release_warm() == []
    record_fault(
        "stranger claims a parked warm node (guessed key; another endpoint's name)",
        None,
        "both refused; the operator's next run took the node",
    )
