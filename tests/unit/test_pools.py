"""Pool designations: engine/jobs/pools.py on real files (config dir isolated per test
by conftest)."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.jobs.pools import BUILTIN_LOCAL, Caps, Pool, PoolFileError, PoolSet, load_pools
from engine.state import paths

EXAMPLE = Path(__file__).parents[2] / "examples" / "pools.toml"
VAST = '[pools.gpu]\nprovider = "vastai"\nimage = "pytorch/pytorch"\n'


def write(folder: Path, text: str) -> Path:
    path = folder / "pools.toml"
    path.write_text(text)
    return path


def error_of(folder: Path, text: str) -> PoolFileError:
    with pytest.raises(PoolFileError) as info:
        load_pools(write(folder, text))
    assert "\n" not in str(info.value)
    assert str(info.value).startswith(str(folder / "pools.toml"))
    return info.value


def test_builtin_local_pool_without_any_file() -> None:
    assert not paths.default_pools_file().exists()
    pools = load_pools()
    assert pools.names() == ["local"]
    local = pools.get("local")
    assert local is BUILTIN_LOCAL
    assert (local.provider, local.max_nodes, local.boot_timeout_s) == ("local", 4, 60.0)
    assert local.image is None and local.summary() == "this machine"


def test_default_file_is_used_when_present() -> None:
    default = paths.default_pools_file()
    default.parent.mkdir(parents=True)
    default.write_text(VAST)
    assert load_pools().names() == ["local", "gpu"]


def test_explicit_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(PoolFileError, match="file not found"):
        load_pools(tmp_path / "nope.toml")


def test_example_file_has_a_local_and_a_vastai_pool() -> None:
    pools = load_pools(EXAMPLE)
    assert pools.names() == ["local", "rtx4090", "rtx4090-spot"]
    assert pools.get("local").max_nodes == 2
    gpu = pools.get("rtx4090")
    assert gpu.provider == "vastai" and gpu.image and gpu.api_key_env == "VAST_API_KEY"
    assert gpu.resources.accelerator_kind == "RTX_4090" and gpu.caps.max_dollars == 3.0
    assert gpu.summary() == "1× RTX_4090 ≥24 GB · ≤$0.60/h · rel≥0.98"
    spot = pools.get("rtx4090-spot")
    assert spot.interruptible and spot.bid_fraction == 0.6 and not gpu.interruptible
    assert (spot.max_attempts, gpu.max_attempts, spot.sync_interval()) == (3, 1, 300.0)
    assert spot.summary() == "1× RTX_4090 ≥24 GB · ≤$0.30/h · rel≥0.98 · bid 60%"


def test_file_may_redefine_local(tmp_path: Path) -> None:
    pools = load_pools(write(tmp_path, '[pools.local]\nprovider = "local"\nmax_nodes = 1\n'))
    assert pools.names() == ["local"]
    assert pools.get("local").max_nodes == 1 and pools.get("local").boot_timeout_s == 60.0


def test_builtins_come_first_then_file_order(tmp_path: Path) -> None:
    text = VAST + '[pools.b]\nprovider = "local"\n[pools.a]\nprovider = "local"\n'
    pools = load_pools(write(tmp_path, text))
    assert pools.names() == ["local", "gpu", "b", "a"]
    assert [p.name for p in pools] == pools.names() and len(pools) == 4
    assert "gpu" in pools and "nope" not in pools


def test_unknown_pool_is_a_one_line_pool_file_error(tmp_path: Path) -> None:
    pools = load_pools(write(tmp_path, VAST))
    with pytest.raises(PoolFileError) as info:
        pools.get("a100")
    assert str(info.value) == f"{tmp_path / 'pools.toml'}: unknown pool 'a100' (known: local, gpu)"


def test_unknown_pool_without_a_file() -> None:
    with pytest.raises(PoolFileError, match=r"^unknown pool 'x' \(known: local\)$"):
        PoolSet({"local": BUILTIN_LOCAL}).get("x")


def test_vastai_defaults(tmp_path: Path) -> None:
    gpu = load_pools(write(tmp_path, VAST)).get("gpu")
    assert (gpu.max_nodes, gpu.boot_timeout_s) == (1, 900.0)
    assert gpu.agent_install is None  # this build, decided at rent time (agent_source)
    assert gpu.selection.verified_only is True and gpu.selection.order == "price"
    assert gpu.api_key_env is None


def test_agent_install_may_be_a_url_spec(tmp_path: Path) -> None:
    spec = "swjob @ git+https://example.invalid/swjob@main"
    gpu = load_pools(write(tmp_path, VAST + f'agent_install = "{spec}"\n')).get("gpu")
    assert gpu.agent_install == spec


def test_vastai_requires_an_image(tmp_path: Path) -> None:
    exc = error_of(tmp_path, '[pools.gpu]\nprovider = "vastai"\n')
    assert (exc.field, exc.line) == ("pools.gpu", 1) and "image" in exc.problem


def test_literal_api_key_is_refused_without_echoing_it(tmp_path: Path) -> None:
    exc = error_of(tmp_path, VAST + 'api_key = "vast_S3CR3T_KEY"\n')
    assert (exc.field, exc.line) == ("pools.gpu.api_key", 4)
    assert "api_key_env" in exc.problem and "S3CR3T" not in str(exc)


@pytest.mark.parametrize(
    ("extra", "field", "problem"),
    [
        ('api_key_env = "VAST-KEY"', "pools.gpu.api_key_env", "pattern"),
        ("max_nodes = 0", "pools.gpu.max_nodes", "greater than or equal to 1"),
        ("max_nodes = true", "pools.gpu.max_nodes", "expected an integer, got a boolean"),
        ("boot_timeout_s = -1", "pools.gpu.boot_timeout_s", "greater than 0"),
        ('agent_install = ""', "pools.gpu.agent_install", "pattern"),
        ('agent_install = "swjob\\nrm -rf /"', "pools.gpu.agent_install", "pattern"),
        ("gpus = 2", "pools.gpu.gpus", "unknown field (allowed: provider, max_nodes"),
        ('resources = { gpu_count = "1" }', "pools.gpu.resources.gpu_count", "an integer"),
        ("resources = { gpu_count = 1.5 }", "pools.gpu.resources.gpu_count", "got a float"),
        ("resources = { vram = 1 }", "pools.gpu.resources.vram", "allowed: gpu_count"),
        ("resources = { cpu_cores = 0 }", "pools.gpu.resources.cpu_cores", "greater than"),
        ('resources = { accelerator_kind = "a/b" }', "pools.gpu.resources.accelerator_kind", ""),
        ("selection = { reliability_min = 1.5 }", "pools.gpu.selection.reliability_min", "1"),
        ("selection = { max_price_per_hour = 0 }", "pools.gpu.selection.max_price_per_hour", ""),
        ('selection = { verified_only = "yes" }', "pools.gpu.selection.verified_only", "true"),
        ('selection = { order = "" }', "pools.gpu.selection.order", "pattern"),
        ("caps = { max_hours = -2 }", "pools.gpu.caps.max_hours", "greater than 0"),
        ("sync_every_s = -1", "pools.gpu.sync_every_s", "greater than or equal to 0"),
        ('caps = { max_dollars = "3" }', "pools.gpu.caps.max_dollars", "expected a number"),
    ],
)
def test_field_errors_name_the_field_and_line(
    tmp_path: Path, extra: str, field: str, problem: str
) -> None:
    exc = error_of(tmp_path, VAST + extra + "\n")
    assert (exc.field, exc.line) == (field, 4)
    assert problem in exc.problem


SPOT = VAST + "interruptible = true\n"


@pytest.mark.parametrize(
    ("text", "field", "line", "problem"),
    [
        (SPOT, "interruptible", 4, "needs one of `bid_per_hour`, `bid_fraction`"),
        (SPOT + "bid_per_hour = 0.2\nbid_fraction = 0.5\n", "interruptible", 4, "one of"),
        (VAST + "bid_per_hour = 0.2\n", "bid_per_hour", 4, "needs `interruptible = true`"),
        (VAST + "bid_fraction = 0.5\n", "bid_fraction", 4, "needs `interruptible = true`"),
        (SPOT + "bid_fraction = 1.5\n", "bid_fraction", 5, "less than or equal to 1"),
        (SPOT + "bid_fraction = 0\n", "bid_fraction", 5, "greater than 0"),
        (SPOT + "bid_per_hour = -1\n", "bid_per_hour", 5, "greater than 0"),
        (SPOT + 'bid_per_hour = "0.2"\n', "bid_per_hour", 5, "expected a number"),
        (
            SPOT + "bid_per_hour = 0.9\nselection = { max_price_per_hour = 0.6 }\n",
            "bid_per_hour",
            5,
            "above selection.max_price_per_hour (0.6)",
        ),
        (
            '[pools.cpu]\nprovider = "local"\ninterruptible = true\nbid_fraction = 0.5\n',
            "interruptible",
            3,
            "only a vastai or runpod pool",
        ),
    ],
)
def test_bad_bid_settings_are_one_line_naming_the_field(
    tmp_path: Path, text: str, field: str, line: int, problem: str
) -> None:
    exc = error_of(tmp_path, text)
    table = "pools.cpu" if "cpu" in text else "pools.gpu"
    assert (exc.field, exc.line) == (f"{table}.{field}", line)
    assert problem in exc.problem and "\n" not in str(exc)


@pytest.mark.parametrize(
    ("text", "every"),
    [
        (VAST, None),  # on demand: the final pull has the outputs
        (SPOT + "bid_fraction = 0.5\n", 300.0),  # a preempted node's files go with it
        (SPOT + "bid_fraction = 0.5\nsync_every_s = 0\n", None),
        (VAST + "sync_every_s = 30\n", 30.0),
    ],
)
def test_live_sync_is_on_for_interruptible_pools_unless_set(
    tmp_path: Path, text: str, every: float | None
) -> None:
    assert load_pools(write(tmp_path, text)).get("gpu").sync_interval() == every


def test_a_command_line_override_changes_one_pool(tmp_path: Path) -> None:
    pools = load_pools(write(tmp_path, VAST))
    tuned = pools.tuned("gpu", sync_every_s=5.0)
    assert tuned.get("gpu").sync_interval() == 5.0 and pools.get("gpu").sync_interval() is None
    assert tuned.names() == pools.names()


def test_an_interruptible_pool_loads_with_its_bid(tmp_path: Path) -> None:
    spot = load_pools(write(tmp_path, SPOT + "bid_fraction = 0.6\n")).get("gpu")
    assert spot.interruptible and spot.bid_fraction == 0.6 and spot.bid_per_hour is None


@pytest.mark.parametrize("image", ['""', '"a b"', '"img\\n"'])
def test_image_is_one_word(tmp_path: Path, image: str) -> None:
    exc = error_of(tmp_path, f'[pools.gpu]\nprovider = "vastai"\nimage = {image}\n')
    assert exc.field == "pools.gpu.image"


def test_dotted_table_errors_find_their_line(tmp_path: Path) -> None:
    text = VAST + "\n[pools.gpu.resources]\ngpu_count = 1\ndisk_mb = -5\n"
    exc = error_of(tmp_path, text)
    assert (exc.field, exc.line) == ("pools.gpu.resources.disk_mb", 7)


@pytest.mark.parametrize(
    ("text", "field", "problem"),
    [
        ('[pools.a]\nprovider = "aws"\n', "pools.a.provider", "'local', 'vastai' or 'runpod'"),
        ("[pools.a]\nmax_nodes = 2\n", "pools.a.provider", "required field is missing"),
        ('[pools.a]\nprovider = "local"\nfallback = ["b"]\n', "pools.a.fallback", "'b': no such"),
        (
            '[pools.a]\nprovider = "local"\nfallback = ["a"]\n',
            "pools.a.fallback",
            "the pool itself",
        ),
        ('[pools.a]\nprovider = "runpod"\n', "pools.a", "a runpod pool needs an `image`"),
        ('[pools."a b"]\nprovider = "local"\n', 'pools."a b"', "not a safe pool name"),
        ('[pools."../x"]\nprovider = "local"\n', 'pools."../x"', "not a safe pool name"),
        ("pools = 1\n", "pools", "expected a table, got an integer"),
        ("[pools]\na = 1\n", "pools.a", "expected a table, got an integer"),
        ('[pool.a]\nprovider = "local"\n', "pool", "unknown field (allowed: notify, pools)"),
        ("# comments only\n", "pools", "table is missing"),
    ],
)
def test_file_structure_errors(tmp_path: Path, text: str, field: str, problem: str) -> None:
    exc = error_of(tmp_path, text)
    assert exc.field == field and problem in exc.problem


def test_syntax_error_has_line(tmp_path: Path) -> None:
    exc = error_of(tmp_path, VAST + "max_nodes = 1\nmax_nodes = 2\n")
    assert exc.line == 5 and "duplicate key" in exc.problem


@pytest.mark.parametrize("order", ["price", "reliability", "performance", "value", "score-"])
def test_order_accepts_names_and_provider_syntax(tmp_path: Path, order: str) -> None:
    pools = load_pools(write(tmp_path, VAST + f'selection = {{ order = "{order}" }}\n'))
    assert pools.get("gpu").selection.order == order


@pytest.mark.parametrize(
    ("kwargs", "summary"),
    [
        ({"provider": "local"}, "this machine"),
        ({"provider": "vastai"}, "any offer"),
        ({"resources": {"gpu_count": 2}}, "2× GPU"),
        (
            {"resources": {"gpu_count": 1, "accelerator_kind": "A100", "gpu_memory_mb": 81920}},
            "1× A100 ≥80 GB",
        ),
        ({"resources": {"gpu_count": 1, "gpu_memory_mb": 24000}}, "1× GPU ≥24 GB"),
        ({"selection": {"max_price_per_hour": 1.5, "reliability_min": 0.9}}, "≤$1.50/h · rel≥0.9"),
    ],
)
def test_summary(kwargs: dict[str, object], summary: str) -> None:
    base: dict[str, object] = {"name": "p", "provider": "vastai", "image": "i"}
    base |= {"max_nodes": 1, "boot_timeout_s": 900.0}
    assert Pool.model_validate(base | kwargs).summary() == summary


def test_direct_construction_gets_provider_defaults() -> None:
    gpu = Pool(name="p", provider="vastai", image="img")
    assert (gpu.max_nodes, gpu.boot_timeout_s, gpu.agent_install) == (1, 900.0, None)
    local = Pool(name="l", provider="local")
    assert (local.max_nodes, local.boot_timeout_s, local.agent_install) == (4, 60.0, None)


def test_node_loss_and_collection_stall_are_judged_per_pool(tmp_path: Path) -> None:
    """Provider defaults (a relay may hiccup for tens of seconds on a rented node), and a
    pool's own values win."""
    assert (BUILTIN_LOCAL.node_lost_after_s, BUILTIN_LOCAL.collect_stall_s) == (10.0, 60.0)
    assert load_pools(write(tmp_path, VAST)).get("gpu").node_lost_after_s == 60.0
    text = VAST + "node_lost_after_s = 120\ncollect_stall_s = 5\n"
    gpu = load_pools(write(tmp_path, text)).get("gpu")
    assert (gpu.node_lost_after_s, gpu.collect_stall_s) == (120.0, 5.0)
    problem = "pools.gpu.node_lost_after_s"
    assert problem in str(error_of(tmp_path, VAST + "node_lost_after_s = 0\n"))
    too_short = str(error_of(tmp_path, VAST + "node_lost_after_s = 0.001\n"))
    assert problem in too_short and "greater than or equal to 0.5" in too_short, too_short


def test_a_run_keeps_its_caps_a_changed_pools_file_may_tighten_never_lift() -> None:
    """An adopter reads the pools file as it is now: a cap removed while the operator was
    away stays (the run's node keeps it anyway), a lower one applies."""
    started = Caps(max_dollars=2.0)
    assert started.tightened_by(Caps()) == started  # removed from the file: kept
    assert started.tightened_by(Caps(max_dollars=5.0, max_hours=1.0)) == Caps(
        max_dollars=2.0, max_hours=1.0
    )
    assert Caps().tightened_by(Caps(max_dollars=0.5)) == Caps(max_dollars=0.5)


def test_a_local_pools_nodes_may_give_way_and_a_rented_pools_cannot(tmp_path: Path) -> None:
    assert BUILTIN_LOCAL.node_nice is None  # the program's choice: 0, the console's 10
    mine = load_pools(write(tmp_path, '[pools.mine]\nprovider = "local"\nnode_nice = 10\n'))
    assert mine.get("mine").node_nice == 10
    assert load_pools(write(tmp_path, VAST)).get("gpu").node_nice is None
    assert "node_nice" in str(error_of(tmp_path, VAST + "node_nice = 5\n"))
    assert "node_nice" in str(error_of(tmp_path, '[pools.l]\nprovider = "local"\nnode_nice = 20\n'))


def test_the_console_s_local_nodes_give_way_unless_their_pool_chose(tmp_path: Path) -> None:
    text = '[pools.mine]\nprovider = "local"\n[pools.own]\nprovider = "local"\nnode_nice = 0\n'
    given = load_pools(write(tmp_path, text + VAST)).giving_way(10)
    assert given.get("local").node_nice == 10 and given.get("mine").node_nice == 10
    assert given.get("own").node_nice == 0  # chosen in the file: kept
    assert given.get("gpu").node_nice is None  # rented: the job's own machine
