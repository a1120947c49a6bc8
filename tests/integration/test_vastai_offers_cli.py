"""`swjob offers` and `swjob pools` against the Vast stand-in through the real SDK: what a
pool would rent and whether its key works, before anything is rented."""

from __future__ import annotations

import json
from pathlib import Path

from tests.standin.server import StandIn
from tests.support.cli import swjob
from tests.support.vast import POOLS_FILE


def test_offers_lists_what_the_pool_would_rent_cheapest_first(tmp_path: Path, api: StandIn) -> None:
    (tmp_path / "pools.toml").write_text(POOLS_FILE)
    done = swjob("offers", "gpu", "--pools", "pools.toml", "--json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout)
    prices = [o["price_per_hour"] for o in found]
    assert found and prices == sorted(prices)
    assert [o["chosen"] for o in found].count(True) == 1
    assert {"offer_id", "gpu_name", "num_gpus", "gpu_ram_gb", "reliability", "location"} <= set(
        found[0]
    )
    table = swjob("offers", "gpu", "--pools", "pools.toml", cwd=tmp_path)
    chosen = next(o for o in found if o["chosen"])
    assert f"* swjob run would take offer {chosen['offer_id']} (" in table.stdout
    assert not api.cloud.instances  # nothing rented


def test_pools_checks_each_key_with_one_call(tmp_path: Path, api: StandIn) -> None:
    (tmp_path / "pools.toml").write_text(POOLS_FILE)
    good = swjob("pools", "--pools", "pools.toml", cwd=tmp_path)
    assert good.returncode == 0, good.stdout + good.stderr
    assert "gpu (vastai)" in good.stdout and "ok — API key works" in good.stdout
    bad = swjob("pools", "--pools", "pools.toml", cwd=tmp_path, env={"VAST_API_KEY": "wrong-key"})
    assert bad.returncode == 1
    assert (
        "gpu (vastai)" in bad.stdout
        and "FAILED — Vast.ai check the API key: HTTP 401" in bad.stdout
    )
    assert "wrong-key" not in bad.stdout + bad.stderr
