"""Local/distributed parity (DESIGN §5): the same job gives the same outputs — byte for byte,
by the manifests' SHA-256 — on the built-in local pool and on a rented (stand-in) node."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from engine.engine import Engine
from tests.standin.server import StandIn
from tests.support.engines import EngineFactory
from tests.support.vast import gpu_pool

pytestmark = pytest.mark.timeout(90)


@pytest.fixture
async def engine(api: StandIn, make_engine: EngineFactory) -> Engine:
    return await make_engine(gpu_pool())


def manifest(run_dir: Path) -> dict[str, tuple[int, str]]:
    entries = json.loads((run_dir / "manifest.json").read_text())["files"]
    return {e["path"]: (e["size"], e["sha256"]) for e in entries if e["verified"]}


async def test_same_job_same_outputs_on_local_and_rented_nodes(engine, make_job) -> None:
    job = make_job(
        files={"gen.py": GEN, "data/seed.txt": "7\n"},
        setup="python3 -c 'print(1)'",
        run="python3 gen.py",
        workspace={"workdir": ".", "exclude": ["/out"]},
        outputs=["out/", "summary.json"],
    )
    local, rented = await asyncio.gather(engine.submit(job, "local"), engine.submit(job, "gpu"))
    views = [await asyncio.wait_for(engine.wait(r), 60) for r in (local, rented)]
    assert [v.state for v in views] == ["COMPLETED", "COMPLETED"]
    assert [v.node.provider for v in views if v.node] == ["local", "vastai"]
    on_local, on_rented = (manifest(v.run_dir) for v in views)
    assert on_local == on_rented and len(on_local) == 4


GEN = """
import hashlib, json, os, random
seed = int(open("data/seed.txt").read())
rng = random.Random(seed)
os.makedirs("out/shards", exist_ok=True)
digest = hashlib.sha256()
for i in range(3):
    blob = bytes(rng.randrange(256) for _ in range(100_000))
    open(f"out/shards/{i}.bin", "wb").write(blob)
    digest.update(blob)
json.dump({"seed": seed, "sha256": digest.hexdigest()}, open("summary.json", "w"), sort_keys=True)
"""
