"""A run named on the command line: a start of its id or its short id; an ambiguous one
lists what it matches; the short id `swjob runs` shows is never shared, nor cut."""

from __future__ import annotations

import io
from datetime import UTC, datetime
from pathlib import Path

import pytest
from rich.console import Console

from engine.cli.lookup import find_run, no_such_run
from engine.cli.main import main
from engine.cli.runlist import print_runs
from engine.core import runs as runs_module
from engine.engine import Engine
from engine.report.views import RunView
from engine.state.store import Store

IDS = ("20261204-061502-aaaa1111", "20261204-061503-aaaa2222", "20261205-000000-bbbb3333")


def _view(run_id: str) -> RunView:
    at = datetime(2026, 12, 4, 6, 15, tzinfo=UTC)
    return RunView(
        run_id=run_id, job_name="hello", pool="local", state="COMPLETED", phase="done",
        created=at, updated=at, finished=at, run_dir=Path("/runs"), exit_code=0,
    )  # fmt: skip


@pytest.fixture
def index() -> Store:
    store = Store()
    for run_id in IDS:
        store.save(_view(run_id), None, None)
    yield store
    store.close()


def test_a_start_or_a_short_id_names_one_run(index: Store) -> None:
    assert find_run("20261205").run_id == IDS[2]  # type: ignore[union-attr]
    assert find_run("aaaa2222").run_id == IDS[1]  # type: ignore[union-attr]
    assert find_run(IDS[0]).run_id == IDS[0]  # type: ignore[union-attr]


def test_an_ambiguous_start_lists_the_runs_it_matches(index: Store) -> None:
    assert find_run("20261204") is None
    said = no_such_run("20261204")
    assert said.startswith("'20261204' matches 2 runs: ")
    assert IDS[0] in said and IDS[1] in said and IDS[2] not in said
    assert no_such_run("nosuch") == "no run 'nosuch'"


def test_a_new_run_never_takes_a_short_id_in_use(
    index: Store, monkeypatch: pytest.MonkeyPatch
) -> None:
    drawn = iter(["20261206-000000-aaaa1111", "20261206-000000-cccc4444"])
    monkeypatch.setattr(runs_module, "new_run_id", lambda: next(drawn))
    table = Engine()._table
    table._store = index
    assert table._new_run_id() == "20261206-000000-cccc4444"


@pytest.mark.parametrize(("width", "whole"), [(80, False), (120, False), (200, True)])
def test_swjob_runs_never_cuts_an_id(index: Store, width: int, whole: bool) -> None:
    out = io.StringIO()
    print_runs(Console(file=out, width=width, force_terminal=True, color_system=None), 50)
    for run_id in IDS:
        assert (run_id if whole else run_id.rsplit("-", 1)[-1]) in out.getvalue()
        if not whole:
            assert run_id not in out.getvalue()


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as done:
        main(["--version"])
    assert done.value.code == 0
    assert capsys.readouterr().out.startswith("swjob 0.")


def test_the_engine_api_offers_every_verb_to_other_clients() -> None:
    """Each CLI verb's logic is reachable through engine.api (loaded when asked for)."""
    from engine import api

    for name in api.__all__:
        assert getattr(api, name) is not None, name
    for verb in ("stop_run", "follow_log", "list_offers", "check_pool", "short_id", "with_env"):
        assert verb in api.__all__
