"""The sink's pure parts: pool keys and URLs, a run's place (no key in its record), a
hostile manifest, where a run's outputs live, store errors in one line."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from agent.sink.layout import Manifest, parse_url, run_prefix
from agent.sink.store import describe
from agent.transfer.errors import TransferError
from engine.jobs.pools import BUILTIN_LOCAL, PoolFileError, load_pools
from engine.report.views import RunView
from engine.report.where import outputs_where
from engine.sink.check import check_job_env
from engine.sink.place import SinkError, place_for


def test_urls_and_prefixes() -> None:
    assert parse_url("s3://my-bucket") == ("my-bucket", "")
    assert parse_url("s3://my-bucket/a/b/") == ("my-bucket", "a/b")
    for bad in ("s3://B/x", "http://bucket/x", "s3://bucket/../x", "s3://bucket/a//b"):
        with pytest.raises(ValueError):
            parse_url(bad)
    assert run_prefix("", "job", "r1") == "job/r1"


def test_a_pool_with_a_bad_sink_is_one_line_naming_the_file(tmp_path: Path) -> None:
    pools = tmp_path / "pools.toml"
    pools.write_text('[pools.p]\nprovider = "local"\nsink = "s3://bkt/../y"\n')
    with pytest.raises(PoolFileError, match=r"pools\.toml:1: pools\.p: unsafe prefix"):
        load_pools(pools)
    pools.write_text('[pools.p]\nprovider = "local"\nsink_endpoint = "http://h:9000"\n')
    with pytest.raises(PoolFileError, match="need a `sink`"):
        load_pools(pools)


def test_a_place_records_names_of_keys_never_keys() -> None:
    pool = BUILTIN_LOCAL.model_copy(update={"sink": "s3://bkt/res", "sink_secret_key_env": "S"})
    place = place_for(pool, "job", "r1")
    assert place is not None and place.url == "s3://bkt/res/job/r1"
    assert place.sibling("r0").prefix == "res/job/r0"
    with pytest.raises(SinkError, match="set AWS_ACCESS_KEY_ID and S in the environment"):
        place.target({})
    target = place.target({"AWS_ACCESS_KEY_ID": "AKID", "S": "very-secret"})
    assert "very-secret" not in repr(target) and "very-secret" not in str(place.record())
    assert place_for(BUILTIN_LOCAL, "job", "r1") is None


def test_a_job_asks_for_the_sinks_keys_by_name_only_where_there_is_a_sink(make_job) -> None:
    job = make_job(run="true", env={"K": "@sink:secret_access_key", "X": "plain"})
    with pytest.raises(SinkError, match="env K asks for the sink's secret_access_key, but pool"):
        check_job_env(job, BUILTIN_LOCAL)
    with_sink = BUILTIN_LOCAL.model_copy(update={"sink": "s3://bkt/res"})
    check_job_env(job, with_sink)
    odd = make_job(run="true", env={"K": "@sink:password"})
    with pytest.raises(SinkError, match="env K: no sink field 'password'"):
        check_job_env(odd, with_sink)


def test_a_hostile_manifest_is_refused() -> None:
    good = Manifest(files={"a/b": (1, "0" * 64)}, links={"l": "a/b"}, complete=True)
    assert Manifest.decode(good.encode()).files == good.files
    big = Manifest(files={"w": (1 << 30, "0" * 64)}, parts={"w": 16 << 20})
    assert Manifest.decode(big.encode()).parts == {"w": 16 << 20}
    row = b'{"complete": true, "links": {}, "files": {"w": {"size": 1073741824, "sha256": "'
    for body in (
        row + b"0" * 64 + b'", "part_size": 0}}}',
        row + b"0" * 64 + b'", "part_size": 1024}}}',  # a million requests for one file
        b'{"complete": true, "files": {"../x": {"size": 1, "sha256": "' + b"0" * 64 + b'"}}, '
        b'"links": {}}',
        b'{"complete": true, "files": {}, "links": {"l": "../../etc/passwd"}}',
        b'{"complete": true, "files": {"a": {"size": -1, "sha256": "x"}}, "links": {}}',
        b"not json",
    ):
        with pytest.raises(TransferError, match="bad manifest"):
            Manifest.decode(body)


def test_where_a_runs_outputs_live(tmp_path: Path) -> None:
    now = "2026-01-01T00:00:00Z"
    view = RunView.model_validate(
        {
            "run_id": "r",
            "job_name": "j",
            "pool": "p",
            "state": "COMPLETED",
            "phase": "done",
            "created": now,
            "updated": now,
            "run_dir": str(tmp_path),
        }
    )
    assert outputs_where(view) == ""
    assert outputs_where(view.model_copy(update={"sink": "s3://b/j/r"})) == "sink"
    (tmp_path / "outputs").mkdir()
    (tmp_path / "outputs" / "f").write_text("x")
    assert outputs_where(view) == "laptop"
    assert outputs_where(view.model_copy(update={"sink": "s3://b/j/r"})) == "both"


def test_store_errors_say_what_to_check() -> None:
    xml = "status code: 403 Forbidden: <Error><Code>SignatureDoesNotMatch</Code></Error>"
    assert describe(Exception(xml)).startswith("access denied (SignatureDoesNotMatch)")
    long = Exception("weird failure at https://host/b/k?X-Amz-Signature=abc " + "x" * 300)
    said = describe(long)
    assert "X-Amz-Signature" not in said and len(said) <= 201


def test_docs_list_every_sink_key_of_a_pool() -> None:
    page = (Path(__file__).resolve().parents[2] / "docs" / "sink.md").read_text()
    keys = [name for name in type(BUILTIN_LOCAL).model_fields if name.startswith("sink")]
    assert len(keys) == 6
    assert all(f"| `{key}` |" in page for key in keys)


def test_nothing_without_a_sink_loads_the_store_client() -> None:
    """obstore is loaded by the first run that has a sink: a node, an engine or `swjob run`
    without one does not pay for it."""
    code = "import sys, agent.node, engine.engine, engine.api; sys.exit('obstore' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], timeout=60).returncode == 0
