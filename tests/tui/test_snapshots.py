"""SVG snapshots of the main screens, built from recorded runs of the real local pool.

`data/runs` holds two runs recorded on the local pool (ids, times and host facts
normalised). They are put where a real engine finds its history — the landing dirs
under `runs_dir`, their summaries in the run index — and the app runs on that engine
with a fixed clock, so nothing on screen depends on when or where the test runs.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Input

from engine.engine import Engine
from engine.state.store import Store
from tests.tui.conftest import (
    SIZE,
    booted,
    fixed_clock,
    many_runs,
    screen_text,
    toasts,
    until,
    with_history,
)
from tui import history
from tui.app import SwjobApp
from tui.screens.detail import DetailScreen
from tui.screens.modals import QuitScreen
from tui.screens.orphans import OrphansScreen

DATA = Path(__file__).parent / "data"
HELLO_ID = "20260102-110000-0011"


pytestmark = pytest.mark.usefixtures("utc")


@pytest.fixture
def recorded(engine: Engine) -> Engine:
    """The engine with the recorded runs as its history."""
    return with_history(engine, DATA / "runs")


@pytest.fixture
def recorded_chain(engine: Engine) -> Engine:
    """The engine with a job that took two attempts as its history (recorded on the local
    pool: attempt 1's node killed after a live sync, attempt 2 resumed from it)."""
    return with_history(engine, DATA / "chain")


LEAK = (
    "could not confirm that Vast.ai instance 4242 is destroyed (HTTP 500); "
    "it may still be billing: run `swjob gc`"
)


async def test_a_leaked_node_stays_in_view_on_the_board_and_in_the_detail(recorded) -> None:
    """A teardown that finally failed: the row is marked, the banner names the instance
    until someone acts, and the run's detail says it too."""
    from engine.report.events import Alert

    run_dir = next(recorded.config.runs_dir.glob("trainer/*"))
    alert = Alert(run_id=run_dir.name, seq=99, message=LEAK, persistent=True)
    with (run_dir / "events.jsonl").open("a") as handle:
        handle.write(alert.model_dump_json() + "\n")
    view = history.load(run_dir, 10).view
    Store().save(view)

    app = app_on(recorded)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        await until(pilot, lambda: "⚠ could not confirm that Vast.ai instance 4242" in shown(app))
        assert f"(trainer · {run_dir.name})" in banner_text(app)
        # the banner's text is set before a frame draws it: wait for the screen itself
        await until(pilot, lambda: "⚠ trainer" in screen_text(app))  # the row's marker
        assert "⚠ hello" not in screen_text(app)
        await pilot.press("enter")
        await until(pilot, lambda: isinstance(app.screen, DetailScreen))
        summary = str(app.screen.query_one("#summary").render())
        assert "⚠ could not confirm that Vast.ai instance 4242" in summary


async def test_engine_wide_alerts_are_toasts_and_orphans_a_banner(recorded) -> None:
    from engine.report.events import Alert

    app = app_on(recorded)
    async with app.run_test(size=SIZE) as pilot:
        await booted(pilot)
        recorded.alert("Vast.ai show instances: HTTP 503, retrying in 1.0 s")
        orphan = "instance 77 (pool gpu, run r1, running): billing for 2.00 h at $0.220/h, ≈ $0.44"
        recorded.alert(f"orphaned node: {orphan} — run `swjob gc`", orphan=orphan)
        await until(pilot, lambda: len(toasts(app)) == 2)
        assert [n.severity for n in app._notifications] == ["warning", "warning"]
        assert "HTTP 503" in toasts(app)[0]
        await until(pilot, lambda: "⚠ orphaned node: instance 77" in screen_text(app))
        assert "x to collect" in screen_text(app) and "HTTP 503, retrying" not in banner_text(app)

        leak = Alert(run_id="", message="Vast.ai instance 9 may still be billing", persistent=True)
        recorded.stream.publish(leak)  # a persistent one is an error toast that stays
        await until(pilot, lambda: len(toasts(app)) == 3)
        note = list(app._notifications)[-1]
        assert note.severity == "error" and note.timeout >= 600


def shown(app: SwjobApp) -> str:
    """The screen's text with wrapped lines joined (long warnings wrap at 130 columns)."""
    return " ".join(line.strip(" │") for line in screen_text(app).splitlines())


def banner_text(app: SwjobApp) -> str:
    return str(app.screen.query_one("#banner").content)


def app_on(engine: Engine, cwd: Path | None = None) -> SwjobApp:
    return SwjobApp(engine, clock=fixed_clock, cwd=cwd)


async def no_blink(pilot: Pilot) -> None:
    for field in pilot.app.screen.query(Input):
        field.cursor_blink = False


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_board(snap_compare, recorded: Engine, size) -> None:
    """The runs table over the preview of the selected run (its summary, the GPU slot and
    its log's tail, read from its files); at 80×24 elapsed, exit and cost stay on screen."""

    async def ready(pilot: Pilot) -> None:
        await booted(pilot)
        await until(
            pilot, lambda: "trainer" in str(pilot.app.screen.query_one("#jobs").get_row_at(0))
        )
        log = pilot.app.screen.query_one("#run-preview").query_one("#log")
        await until(pilot, lambda: log.line_count == 3)
        await until(pilot, lambda: log.is_vertical_scroll_end)
        await pilot.pause(0.2)

    assert snap_compare(app_on(recorded), terminal_size=size, run_before=ready)


@pytest.mark.parametrize("size", [(80, 24), (200, 50)], ids=["80x24", "200x50"])
def test_board_with_twelve_runs(snap_compare, engine: Engine, tmp_path: Path, size) -> None:
    """Ten rows and more at 80×24 beside the preview; a wide terminal's extra columns;
    on each row why its run ended."""
    twelve = with_history(engine, many_runs(DATA / "runs", tmp_path / "recorded", 12))

    async def ready(pilot: Pilot) -> None:
        await booted(pilot)
        await until(pilot, lambda: pilot.app.screen.query_one("#jobs").row_count == 12)
        log = pilot.app.screen.query_one("#run-preview").query_one("#log")
        await until(pilot, lambda: log.line_count == 1)
        await pilot.pause(0.2)

    assert snap_compare(app_on(twelve), terminal_size=size, run_before=ready)


def test_job_detail(snap_compare, recorded: Engine) -> None:
    async def ready(pilot: Pilot) -> None:
        await booted(pilot)
        await pilot.press("enter")
        await until(pilot, lambda: pilot.app.screen.query_one("#log").line_count == 3)

    assert snap_compare(app_on(recorded), terminal_size=SIZE, run_before=ready)


def test_board_with_a_retried_job(snap_compare, recorded_chain: Engine) -> None:
    """A job that took two attempts is one row: its latest attempt's, `done 2/2`."""

    async def ready(pilot: Pilot) -> None:
        await booted(pilot)
        await until(pilot, lambda: pilot.app.screen.query_one("#jobs").row_count == 1)
        log = pilot.app.screen.query_one("#run-preview").query_one("#log")
        await until(pilot, lambda: log.line_count == 1)
        await pilot.pause(0.2)

    assert snap_compare(app_on(recorded_chain), terminal_size=(120, 30), run_before=ready)


def test_job_detail_of_a_retried_job(snap_compare, recorded_chain: Engine) -> None:
    """The detail of the latest attempt lists both attempts, why the first ended."""

    async def ready(pilot: Pilot) -> None:
        await booted(pilot)
        await pilot.press("enter")
        await until(pilot, lambda: pilot.app.screen.query_one("#log").line_count == 1)
        await until(pilot, lambda: pilot.app.screen.query_one("#attempts").display)
        await pilot.pause(0.2)

    assert snap_compare(app_on(recorded_chain), terminal_size=SIZE, run_before=ready)


def test_job_detail_with_transfers(snap_compare, recorded: Engine) -> None:
    async def ready(pilot: Pilot) -> None:
        await booted(pilot)
        await pilot.press("G", "enter")
        await until(pilot, lambda: pilot.app.screen.query_one("#log").line_count == 1)
        await until(pilot, lambda: pilot.app.screen.query("#transfer-pull"))
        await pilot.pause(0.2)

    assert snap_compare(app_on(recorded), terminal_size=SIZE, run_before=ready)


def test_outputs_browser(snap_compare, recorded: Engine) -> None:
    """It opens on outputs/ expanded with the first file selected and previewed."""

    async def ready(pilot: Pilot) -> None:
        await booted(pilot)
        await pilot.press("G", "o")
        await until(
            pilot,
            lambda: (
                getattr(pilot.app.screen, "path", None)
                and pilot.app.screen.path.name == "hello.txt"
            ),
        )
        await until(pilot, lambda: "sha256" in screen_text(pilot.app))
        await pilot.pause(0.2)

    assert snap_compare(app_on(recorded), terminal_size=SIZE, run_before=ready)


@pytest.mark.parametrize("size", [SIZE, (80, 24)], ids=["130x40", "80x24"])
def test_submit_modal(snap_compare, recorded: Engine, size) -> None:
    """At 80×24 the dialog drops its spacing so the file tree keeps rows."""

    async def ready(pilot: Pilot) -> None:
        await booted(pilot)
        await pilot.press("n", *"smoke.toml")
        await until(pilot, lambda: "smoke" in str(pilot.app.screen.query_one("#plan").content))
        await no_blink(pilot)

    app = app_on(recorded, cwd=DATA / "jobs")
    assert snap_compare(app, terminal_size=size, run_before=ready)


def test_quit_modal(snap_compare, recorded: Engine) -> None:
    async def ready(pilot: Pilot) -> None:
        await booted(pilot)
        pilot.app.push_screen(QuitScreen(recorded.runs()[:1]))
        await pilot.pause()

    assert snap_compare(app_on(recorded), terminal_size=SIZE, run_before=ready)


def test_orphans_modal(snap_compare, recorded: Engine) -> None:
    from engine.providers.gc import GONE, Orphan

    found = [
        Orphan("gpu", "20260102-090000-4f2a9c1e", "1000123", "running", 7380.0, 0.22, (1,)),
        Orphan("gpu", "20260102-100000-77aa01b3", "1000456", "loading", 600.0, 0.41),
        Orphan("gpu", "20260102-110000-0b0b0b0b", None, GONE, 30.0, None, (3,)),
    ]

    async def find() -> list[Orphan]:
        return found

    async def ready(pilot: Pilot) -> None:
        await booted(pilot)
        screen = OrphansScreen(find)
        pilot.app.push_screen(screen)
        await until(pilot, lambda: screen.found is not None)
        await pilot.pause()

    assert snap_compare(app_on(recorded), terminal_size=SIZE, run_before=ready)


HOSTILE = [
    "\x1b[2J\x1b[Hcleared the screen?",
    "\x1b[31mred\x1b[0m and \x1b[1;32mbold green\x1b[0m colour codes",
    "\x1b]52;c;ZXZpbA==\x07an OSC 52 clipboard write came before this",
    "\x1b]0;new title\x1b\\a title change came before this",
    "wide: 漢字漢字漢字 ✓ é\ttab",
    "\x1b[?1049h\x1b[10;10Hcursor moved \x1b[Kerased \x1b7saved\x1b8",
]


def with_hostile_output(engine: Engine) -> Engine:
    """The hello run, as if its job had printed escape sequences (pip, tqdm, rich, or
    a hostile job): the detail's log pane must draw them as text."""
    from engine.report.events import Log

    run_dir = engine.config.runs_dir / "hello" / HELLO_ID
    lines = [{"stream": "stdout", "text": text} for text in HOSTILE]
    log = Log(run_id=HELLO_ID, seq=98, step="run", lines=lines, node_seq=9)
    events = (run_dir / "events.jsonl").read_text().splitlines()
    events.insert(-3, log.model_dump_json())
    (run_dir / "events.jsonl").write_text("\n".join(events) + "\n")
    return engine


@pytest.mark.parametrize("size", [(80, 24), (120, 40)], ids=["80x24", "120x40"])
def test_job_detail_with_hostile_output(snap_compare, recorded: Engine, size) -> None:
    async def ready(pilot: Pilot) -> None:
        await booted(pilot)
        await pilot.press("G", "enter")
        log = pilot.app.screen.query_one("#log")
        await until(pilot, lambda: log.line_count == 1 + len(HOSTILE))
        assert not any(c in line for line in log.lines for c in "\x1b\x07\x9b\x9d")
        assert any("cleared the screen?" in line for line in log.lines)
        await until(pilot, lambda: log.is_vertical_scroll_end)
        await pilot.pause(0.2)

    app = app_on(with_hostile_output(recorded))
    assert snap_compare(app, terminal_size=size, run_before=ready)
