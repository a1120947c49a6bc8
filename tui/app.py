"""swjob-tui: the operator's live console.

The engine runs in-process on this app's event loop. The app owns three loops of
its own: a worker that drains the engine's event subscription into the feed
(cheap bookkeeping only), a timer that tells the visible screen which runs
changed (10×/s), and workers for every engine call the user triggers.
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

from textual import on, work
from textual.app import App, SuspendNotSupported, SystemCommand
from textual.binding import Binding
from textual.command import CommandPalette
from textual.events import Event, Key
from textual.screen import ModalScreen, Screen
from textual.worker import Worker, WorkerState

from engine.api import JobSpec, LiveUnavailable, RunView, one_line
from engine.api import events as ev
from tui import calls, hangup, keys, live
from tui.api import Clock, EngineAPI, Subscription
from tui.commands import ActionCommands
from tui.feed import Feed, OrphanLine
from tui.messages import OpenRun, RunFinished, RunsUpdated
from tui.owners import Owner, owner
from tui.screens.board import BoardScreen
from tui.screens.detail import DetailScreen
from tui.screens.help import HelpScreen, help_table
from tui.screens.modals import ConfirmStopScreen, QuitScreen, WarmQuitScreen
from tui.screens.orphans import OrphansScreen
from tui.screens.outputs import OutputsScreen
from tui.screens.submit import SubmitScreen

if TYPE_CHECKING:
    from engine.api import Orphan, PoolSet

TICK_HZ = 10
KEYS_FIRST_S = 0.1
HELD_TICKS = 2
"""A key pressed within KEYS_FIRST_S holds the board's tick back, HELD_TICKS ticks in a
row at most (the board still refreshes three times a second while keys keep coming):
with a hundred live runs a tick's redraw is the loop's largest piece of work, and a key
that lands behind it waits for it (tests/bench/engine_load.py)."""
NODE_NICE = 10
"""Local nodes the console starts give way to it unless their pool sets `node_nice`: a
dozen starting at their full share (each a session, so a CPU group of its own) stalled
the console's loop up to 71 ms, at 10 at most 27 ms (docs/benchmarks.md)."""
LOG_FILE = "swjob-tui.log"
"""In the state dir: the engine's warnings while the console runs (engine/logsetup.py)."""
YIELD_EVERY = 256


def utc_clock() -> datetime:
    return datetime.now(UTC)


class SwjobApp(App[None]):
    TITLE = "swjob"
    CSS_PATH = Path(__file__).with_name("app.tcss")
    COMMANDS = App.COMMANDS | {ActionCommands}
    BINDINGS = [
        Binding(
            "n", "submit", "Submit", tooltip="Submit a job file to a pool", id="swjob.app.submit"
        ),
        Binding(
            "s",
            "stop",
            "Stop",
            tooltip="Stop the selected job and tear its node down",
            id="swjob.app.stop",
        ),
        Binding(
            "a",
            "adopt",
            "Adopt",
            show=False,
            tooltip="Drive the selected run whose owner is gone, from this console",
            id="swjob.app.adopt",
        ),
        Binding(
            "o",
            "outputs",
            "Outputs",
            tooltip="Browse the run's landing directory",
            id="swjob.app.outputs",
        ),
        Binding(
            "exclamation_mark",
            "shell",
            "Shell",
            key_display="!",
            show=False,
            tooltip="A shell on the run's node, in its workdir with its env",
            id="swjob.app.shell",
        ),
        Binding(
            "p",
            "forward",
            "Forward port",
            show=False,
            tooltip="Forward a port of the run's node to 127.0.0.1 here",
            id="swjob.app.forward",
        ),
        Binding("question_mark,f1", "help", "Help", key_display="?", id="swjob.app.help"),
        Binding("q", "quit", "Quit", id="swjob.app.quit"),
        Binding("ctrl+q", "quit", "Quit", show=False, priority=True, id="swjob.app.quit_priority"),
    ]

    def __init__(
        self,
        engine: EngineAPI,
        *,
        jobs: Sequence[JobSpec] = (),
        pool: str = "local",
        clock: Clock = utc_clock,
        cwd: Path | None = None,
        log_cap: int = 5000,
    ) -> None:
        super().__init__()
        self.engine, self.clock, self.pool = engine, clock, pool
        self.cwd = cwd or Path.cwd()
        self.feed = Feed(log_cap)
        self.startup_jobs = list(jobs)
        self.booted = asyncio.Event()
        self._stop_on_close = True
        self._settled = asyncio.Event()  # set whenever a run finishes
        self._binding_state: tuple[object, ...] = ()
        self._key_at = 0.0  # when the last key came in (monotonic)
        self._held = 0  # ticks held back in a row for keys
        self._unhook_signals: Callable[[], None] = lambda: None

    # ---- engine plumbing -----------------------------------------------------------------

    def on_mount(self) -> None:
        self.board = BoardScreen(self.engine, self.clock, self.feed)
        self.push_screen(self.board)
        self._boot()
        self.set_interval(1 / TICK_HZ, self._tick, name="tick")
        if not self.is_headless:  # a real terminal, which can be closed under it
            self._unhook_signals = hangup.install(self.exit)

    @work(group="engine", exit_on_error=False, description="start the engine")
    async def _boot(self) -> None:
        try:
            await calls.call("start the engine", self.engine.start(), timeout=calls.START_TIMEOUT_S)
        except calls.CallError as exc:
            self.notify(str(exc), title="error", severity="error", timeout=3600)
            return
        sub = self.engine.subscribe()
        self._consume(sub)
        for job in self.startup_jobs:
            await self._submit_job(job)
        self.feed.mark({r.run_id for r in self.engine.runs()[:500]})
        self._freeze_heap()
        self.booted.set()

    @staticmethod
    def _freeze_heap() -> None:
        """Keep full garbage collections short. Everything alive after boot (Textual, the
        engine, iroh, pydantic schemas: ~0.5 M objects) lives as long as the app, yet a
        full collection walks all of it; under a log flood that walk stalled key handling
        for up to ~180 ms. Frozen, a full collection walks only what came after."""
        gc.collect()
        gc.freeze()

    async def _submit_job(self, job: JobSpec) -> None:
        submitting = self.engine.submit(job, self.pool)
        try:
            run_id = await calls.call(
                f"submit {job.name}", submitting, timeout=calls.SUBMIT_TIMEOUT_S
            )
        except calls.CallError as exc:
            self.notify(str(exc), title="submit failed", severity="error", timeout=30)
            return
        self.board.select_run(run_id)  # the run asked for at start-up is the one shown

    @work(group="feed", exit_on_error=False, description="engine events")
    async def _consume(self, sub: Subscription) -> None:
        count = 0
        try:
            async for event in sub:
                self.feed.ingest(event)
                if isinstance(event, ev.Finished):
                    self._finished(event)
                    self._settled.set()
                elif isinstance(event, ev.Alert):
                    self._alert(event)
                count += 1
                if count % YIELD_EVERY == 0:
                    await asyncio.sleep(0)  # a flood must not starve key handling
        finally:
            sub.close()

    def _alert(self, event: ev.Alert) -> None:
        """Every alert is a toast; a persistent one (a node that may still bill) lasts until
        dismissed, and the board keeps it in its banner besides."""
        run = self.engine.run(event.run_id) if event.run_id else None
        title = run.job_name if run else event.run_id or "engine"  # the job name leads
        if event.persistent:
            self.notify(event.message, title=title, severity="error", timeout=3600)
        else:
            self.notify(event.message, title=title, severity="warning")

    def _finished(self, event: ev.Finished) -> None:
        run = self.engine.run(event.run_id)
        name = run.job_name if run else event.run_id
        self.post_message(RunFinished(event.run_id, name, event.state, event.reason))

    async def on_event(self, event: Event) -> None:
        if isinstance(event, Key) and not event.is_forwarded:
            self._key_at = time.monotonic()
        await super().on_event(event)

    def _tick(self) -> None:
        if not self.screen_stack:
            return  # shutting down: the screens are gone before the timer is
        if time.monotonic() - self._key_at < KEYS_FIRST_S and self._held < HELD_TICKS:
            self._held += 1  # keys first: the board catches up on a later tick
        else:
            self._held = 0
            self.screen.post_message(RunsUpdated())
        state = (self.screen, self.target_id, self._target_terminal())
        if state != self._binding_state:
            self._binding_state = state
            self.refresh_bindings()

    @on(RunFinished)
    def _toast(self, message: RunFinished) -> None:
        """Led by the job's name (the id's random tail after it: sweep variants share
        names), short-lived: the row itself keeps the outcome and its reason."""
        title = f"{message.job_name} · {message.run_id.rsplit('-', 1)[-1]}"
        if message.state == "COMPLETED":
            self.notify("completed", title=title, timeout=3)
        else:
            why = f": {message.reason}" if message.reason else ""
            self.notify(f"failed{why}", title=title, severity="error", timeout=5)

    def on_worker_state_changed(self, event: Worker.StateChanged) -> None:
        """One place for every worker's failure: a toast, never a crash."""
        if event.state is WorkerState.ERROR and event.worker.error is not None:
            what = event.worker.description or event.worker.name
            self.notify(f"{what}: {event.worker.error}", title="error", severity="error")

    # ---- what the keys act on -----------------------------------------------------------

    @property
    def work_screen(self) -> Screen[object]:
        """The screen the user works in: the one under the command palette, if it is open."""
        stack = [s for s in self.screen_stack if not isinstance(s, CommandPalette)]
        return stack[-1] if stack else self.screen

    @property
    def target_id(self) -> str | None:
        return getattr(self.work_screen, "run_id", None)

    @property
    def target(self) -> RunView | None:
        run_id = self.target_id
        return self.engine.run(run_id) if run_id else None

    def _target_terminal(self) -> bool | None:
        run = self.target
        return None if run is None else run.terminal

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        modal_off = ("submit", "stop", "outputs", "help", "adopt", "shell", "forward")
        if action in modal_off and isinstance(self.work_screen, ModalScreen):
            return False
        if action in ("stop", "shell", "forward"):
            run = self.target
            return (run is not None and run.live and run.stoppable) or None
        if action == "outputs":
            return self.target is not None or None
        if action == "adopt":
            run = self.target
            return (run is not None and owner(run) is Owner.NOBODY) or None
        return True

    def on_key(self, event: Key) -> None:
        """A key bound here whose action does not apply now says why, in one line."""
        active = self.screen.active_bindings.get(event.key)
        if active is None or active.enabled:
            return
        action = active.binding.action.removeprefix("app.").split("(")[0]
        # a console key under a dialog (not the dialog's own key)
        in_dialog = isinstance(self.work_screen, ModalScreen) and active.node is self
        why = keys.why_not(action, active.binding.description, self.target, in_dialog)
        self.notify(why, title=f"{self.get_key_display(active.binding)}", timeout=3)

    # ---- actions ----------------------------------------------------------------------------

    @on(OpenRun)
    def _open(self, message: OpenRun) -> None:
        self.open_run(message.run_id, logs=message.logs)

    def open_run(self, run_id: str, logs: bool = False) -> None:
        if self.engine.run(run_id) is not None:
            self.push_screen(DetailScreen(self.engine, self.clock, self.feed, run_id, logs))

    def action_submit(self) -> None:
        self.push_screen(SubmitScreen(self.engine, self.pool, self.cwd), self._submitted)

    def _submitted(self, run_id: str | None) -> None:
        if run_id is not None:
            self.notify(f"submitted {run_id}", title="submit")
            self.board.select_run(run_id)

    def action_stop(self) -> None:
        run = self.target
        if run is not None and run.stoppable:
            self.push_screen(
                ConfirmStopScreen(run), lambda yes: self._stop(run.run_id) if yes else None
            )

    @work(group="engine", exit_on_error=False, description="stop")
    async def _stop(self, run_id: str) -> None:
        try:
            await calls.call(
                f"stop {run_id}", self.engine.stop(run_id), timeout=calls.STOP_TIMEOUT_S
            )
        except calls.CallError as exc:
            self.notify(str(exc), title="stop failed", severity="error")
            return
        self.notify(f"stopping {run_id}: tearing its node down", title="stop")

    def action_adopt(self) -> None:
        run = self.target
        if run is not None and owner(run) is Owner.NOBODY:
            self._adopt(run.run_id)

    @work(group="engine", exit_on_error=False, description="adopt")
    async def _adopt(self, run_id: str) -> None:
        adopting = self.engine.adopt(run_id)
        try:
            adopted = await calls.call(f"adopt {run_id}", adopting, timeout=calls.SUBMIT_TIMEOUT_S)
        except calls.CallError as exc:
            self.notify(str(exc), title="adopt failed", severity="error")
            return
        if adopted:
            self.notify(f"adopted {run_id}: this console drives it now", title="adopt")
        else:
            self.notify(f"{run_id}: another process drives it, or it has ended", title="adopt")

    @work(group="shell", exclusive=True, exit_on_error=False, description="shell")
    async def action_shell(self) -> None:
        run = self.target
        if run is None or run.terminal:
            return
        try:
            code = await live.run_shell(self, run.run_id)
        except SuspendNotSupported:
            self.notify("Cannot suspend the console here to open a shell", severity="warning")
            return
        severity = "information" if code == 0 else "warning"
        self.notify(f"shell on {run.run_id} exited with {code}", title="shell", severity=severity)

    def action_forward(self) -> None:
        run = self.target
        if run is not None and not run.terminal:
            self.push_screen(
                live.ForwardScreen(run),
                lambda ports: self._forward(run.run_id, *ports) if ports else None,
            )

    @work(group="engine", exit_on_error=False, description="forward")
    async def _forward(self, run_id: str, remote: int, local: int) -> None:
        try:
            forward = await self.engine.live.forward(run_id, remote, local)
        except (LiveUnavailable, OSError) as exc:
            self.notify(one_line(exc), title="forward failed", severity="error")
            return
        self.notify(forward.describe(), title="forwarding")

    def action_outputs(self) -> None:
        run = self.target
        if run is not None:
            self.push_screen(OutputsScreen(self.engine, run, self.engine.masker(run.run_id)))

    def action_collect(self) -> None:
        """List the nodes billing without a live run; destroy them if the operator agrees."""
        self.push_screen(OrphansScreen(self.engine.orphans), self._collect)

    def _collect(self, orphans: list[Orphan] | None) -> None:
        if orphans and any(o.collectable for o in orphans):
            self._destroy(orphans)

    @work(group="orphans", exclusive=True, exit_on_error=False, description="collect orphans")
    async def _destroy(self, orphans: list[Orphan]) -> None:
        """Destroy the listed orphans that are ours; the toast after says which went and
        which were left (another operator's, being destroyed) and why."""
        ours = sum(o.collectable for o in orphans)
        self.notify(f"destroying {ours} orphaned node(s)…", title="collect")
        collecting = self.engine.collect_orphans(orphans)
        try:
            done = await calls.call(
                "collect orphaned nodes", collecting, timeout=calls.COLLECT_TIMEOUT_S
            )
        except calls.CallError as exc:  # how many went is not known: the board rechecks
            self.notify(f"collect: {exc}", severity="error")
        else:
            severity = "error" if done.problems else "information"
            self.notify(done.report(), title="collect", severity=severity)
        await self._recheck_orphans()

    async def _recheck_orphans(self) -> None:
        """The banner shows what is still out there, not what was out there at start."""
        listing = self.engine.orphans()
        try:
            left = await calls.call(
                "re-check orphaned nodes", listing, timeout=calls.LIST_TIMEOUT_S
            )
        except calls.CallError as exc:
            self.notify(str(exc), severity="warning")
            return
        self.feed.orphans = [OrphanLine(o.describe(), o.collectable) for o in left]

    def action_help(self) -> None:
        bindings = self.screen.active_bindings
        keys = {key: self.get_key_display(active.binding) for key, active in bindings.items()}
        self.push_screen(HelpScreen(help_table(bindings, keys)))

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        """Textual's own palette entries, less those our keys already offer under the same
        name (its "Quit" beside ours): one entry per thing the user can do."""
        offered = {active.binding.description for active in screen.active_bindings.values()}
        for command in super().get_system_commands(screen):
            if command.title not in offered:
                yield command

    async def action_quit(self) -> None:
        running = self.engine.running()
        if not running:
            self._ask_warm(stop_running=False)
            return
        self.push_screen(QuitScreen(running), self._quit_answer)

    def _quit_answer(self, choice: str | None) -> None:
        if choice is not None:
            self._ask_warm(stop_running=choice == "stop")

    def _ask_warm(self, stop_running: bool) -> None:
        """With warm nodes kept, ask whether to keep them (the default) or release them."""
        kept = [n for n in self.engine.warm_nodes() if n.in_use_by is None]
        if not kept:
            self._quit_with(stop_running, release_warm=False)
            return

        def answered(choice: str | None) -> None:
            if choice is not None:
                self._quit_with(stop_running, release_warm=choice == "release")

        self.push_screen(WarmQuitScreen(kept), answered)

    def action_release_warm(self) -> None:
        """`W` on the board: release every parked warm node now."""
        self._release_warm()

    @work(group="warm", exclusive=True, exit_on_error=False, description="release warm nodes")
    async def _release_warm(self) -> None:
        kept = [n for n in self.engine.warm_nodes() if n.in_use_by is None]
        if not kept:
            self.notify("no warm nodes kept", title="warm nodes")
            return
        self.notify(f"releasing {len(kept)} warm node(s)…", title="warm nodes")
        problems = await self.engine.release_warm()
        for problem in problems:
            self.notify(problem, title="warm nodes", severity="error", timeout=20)
        if not problems:
            self.notify(f"released {len(kept)} warm node(s)", title="warm nodes")

    @work(group="shutdown", exclusive=True, exit_on_error=False, description="quit")
    async def _quit_with(self, stop_running: bool, release_warm: bool = False) -> None:
        """Stop-all waits here, with the console still up, until every run is terminal;
        the engine itself is closed on unmount, after the screens stopped reading it."""
        self._stop_on_close = stop_running
        if stop_running and self.engine.running():
            self.notify("stopping every job and tearing nodes down…", title="quit")
            await self.engine.stop_all()
            while self.engine.running():
                self._settled.clear()
                await self._settled.wait()
        if release_warm:
            self.notify("releasing the warm nodes…", title="quit")
            for problem in await self.engine.release_warm():
                self.notify(problem, title="warm nodes", severity="error", timeout=20)
        self.exit()

    async def on_unmount(self) -> None:
        """Also reached on a crash, a closed terminal or a `kill`: then live runs are
        stopped and their nodes torn down."""
        self._unhook_signals()
        await self.engine.close(stop_running=self._stop_on_close)
        gc.unfreeze()  # what the app held is collectable again (tests run many apps)


# ---- command line ----------------------------------------------------------------------


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="swjob-tui", description="swjob's live console")
    parser.add_argument("jobs", nargs="*", type=Path, metavar="JOB.toml", help="submit at start")
    parser.add_argument("--pool", default="local", help="pool name (default: local)")
    parser.add_argument("--pools", type=Path, default=None, help="pools TOML file")
    parser.add_argument("--runs-dir", type=Path, default=None, help="landing directories root")
    return parser


def console_pools(path: Path | None) -> PoolSet:
    """The pools as the console has them: `path`'s (or the default file's), its local
    nodes giving way to it (NODE_NICE)."""
    from engine.api import load_pools

    return load_pools(path).giving_way(NODE_NICE)


def main(argv: list[str] | None = None) -> int:
    from engine.api import (
        DEFAULT_RUNS_DIR,
        ConfigFileError,
        Engine,
        EngineConfig,
        UnusableDirError,
        load_job,
        log_to_file,
    )

    args = _parser().parse_args(argv)
    try:
        jobs = [load_job(path) for path in args.jobs]
        pools = console_pools(args.pools)
        local = pools.get(args.pool).provider == "local"
        config = EngineConfig(
            runs_dir=args.runs_dir or DEFAULT_RUNS_DIR,
            pools=pools,
            adopt_orphans=True,
            warm_agents=local,  # a local run then starts with its agent's imports done
        )
        engine = Engine(config)  # makes its state and cache dirs: they may be unusable
        warnings = log_to_file(LOG_FILE)  # the screen is the app's: warnings go there
    except (ConfigFileError, UnusableDirError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    app = SwjobApp(engine, jobs=jobs, pool=args.pool)
    hangup.tolerate_closed_terminal()
    app.run()
    # said at close, while the app still held the terminal; the note is in the log as well
    for line in (engine.closing_note, warnings.summary()):
        if line:
            print(f"swjob-tui: {line}", file=sys.stderr)
    return app.return_code or 0  # a crash is not a success
