"""How `swjob run` / `swjob attach` print a run's datastream.

On a terminal: colours, and a live progress bar for transfers. Piped: plain lines,
one per event worth reading, so `swjob run job.toml | tee run.txt` stays greppable.
Text that came from a node or a job (output lines, host facts, reasons, alerts) goes
through `shown`: Rich markup escaped and control characters drawn visible (`^[`), so
it can neither drive the terminal nor pose as a line of ours.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.console import Console
from rich.markup import escape

from agent.protocol import Stream
from engine.report import events as ev
from engine.report.boot import boot_timeline, took
from engine.report.money import cost_split, money
from engine.report.printable import visible

if TYPE_CHECKING:
    from rich.progress import Progress, TaskID

STATE_STYLE = {"PENDING": "yellow", "RUNNING": "cyan", "COMPLETED": "green", "FAILED": "red"}


def shown(text: str) -> str:
    """Foreign text, safe to hand to `Console.print` with markup on."""
    return escape(visible(text))


class RunPrinter:
    def __init__(self, console: Console) -> None:
        self.console = console
        self._progress: Progress | None = None
        self._bars: dict[str, TaskID] = {}
        self._cost: ev.Cost | None = None
        self._phases: list[str] = []  # in the order the run took them, for the cost split
        self._boot_start: ev.Transition | None = None  # entering provisioning starts the boot
        self._boot: list[ev.Boot] = []
        self._unconfirmed = False  # the provider could not confirm the node gone

    def __call__(self, event: ev.Event) -> None:
        match event:
            case ev.Transition():
                self._transition(event)
            case ev.Log():
                self._log(event)
            case ev.TransferProgress():
                self._transfer(event)
            case ev.Boot():
                self._boot_step(event)
            case ev.Node(state=ev.NodeState.READY, facts=facts) if facts is not None:
                gpus = ", ".join(g.name for g in facts.gpus) or "no GPU"
                self._line(
                    f"node {event.node_id} joined: {facts.hostname}, {facts.cpus} CPUs, {gpus}"
                )  # _line shows it visible: the facts are the node's word
            case ev.Node(state=ev.NodeState.UNCONFIRMED):
                self._unconfirmed = True
            case ev.Node(state=ev.NodeState.WARM):
                self._line(
                    f"node {event.node_id} kept warm for the pool's next run "
                    "(keep_warm_s; `swjob nodes` lists it, `swjob nodes release` ends it)"
                )
            case ev.Alert():
                self.console.print(f"[bold red]warning:[/] {shown(event.message)}")
            case ev.Cost():
                self._cost = event
            case ev.Finished():
                self._finished(event)

    def _line(self, text: str) -> None:
        self.console.print(f"[dim]{shown(text)}[/]")

    def _transition(self, event: ev.Transition) -> None:
        self._phases.append(event.to_phase)
        if event.to_phase == "provisioning" and self._boot_start is None:
            self._boot_start = event
        style = STATE_STYLE.get(event.to_state, "")
        arrow = " → " + ", ".join(event.commands) if event.commands else ""
        when = event.ts.astimezone().strftime("%H:%M:%S")
        cause = event.cause
        if cause == "NodeTornDown" and self._unconfirmed:  # the run ends; the node may not
            cause = "teardown not confirmed: the node may still be billing"
        self.console.print(
            f"[dim]{when}[/] [{style}]{event.to_state:<9}[/] {cause}{arrow}"
            f" [dim]({event.to_phase})[/]"
        )

    def _boot_step(self, event: ev.Boot) -> None:
        """One boot step as it is reached, with how long reaching it took; the join ends
        the boot with its total and the steps this node never showed."""
        self._boot.append(event)
        if event.phase is ev.BootPhase.SLOT_TAKEN:
            return  # where the boot's clock starts, not a step
        start = self._boot_start.ts if self._boot_start else None
        timeline = boot_timeline(start, self._boot)
        step = timeline.step(event.phase)
        when = event.at.astimezone().strftime("%H:%M:%S")
        detail = f" [dim]{shown(step.detail)}[/]" if step.detail else ""
        self.console.print(
            f"[dim]{when}[/] [magenta]{'boot':<9}[/] {step.label} ({step.took}){detail}"
        )
        if event.phase is ev.BootPhase.AGENT_JOINED:
            missing = ", ".join(s.label for s in timeline.not_seen)
            warm = timeline.seen[0].phase is ev.BootPhase.WARM_REUSED
            self._line(
                f"{'warm node ready' if warm else 'node booted'} in {took(timeline.total_s)}"
                + (f"; not seen: {missing}" if missing else "")
            )

    def _log(self, event: ev.Log) -> None:
        for line in event.lines:
            mark = "!" if line.stream is Stream.STDERR else "|"
            style = "red" if line.stream is Stream.STDERR else "default"
            self.console.print(
                # a line a lone CR ended (a progress update, agent/lines.py) is printed
                # as a line of its own, as before: its CR is no control to draw
                f"[dim]{event.step.value:>5} {mark}[/] "
                f"[{style}]{shown(line.text.removesuffix(chr(13)))}[/]",
                highlight=False,
                soft_wrap=True,
            )

    def _transfer(self, event: ev.TransferProgress) -> None:
        label = "push workspace" if event.direction is ev.TransferDirection.PUSH else "pull outputs"
        if not self.console.is_terminal:
            if event.done:
                self._line(f"{label}: {event.files_done} files, {event.bytes_done / 1e6:.1f} MB")
            return
        if self._progress is None:
            self._progress = _bars(self.console)
            self._progress.start()
        key = event.direction.value
        if key not in self._bars:
            self._bars[key] = self._progress.add_task(label, total=event.bytes_total or None)
        desc = f"{label} {event.files_done}/{event.files_total}"
        self._progress.update(
            self._bars[key], completed=event.bytes_done, total=event.bytes_total, description=desc
        )
        if event.done:
            self._progress.stop_task(self._bars[key])
            self._close_progress_if_done()

    def _close_progress_if_done(self) -> None:
        assert self._progress is not None
        if all(task.finished or not task.started for task in self._progress.tasks):
            self._progress.stop()
            self._progress = None
            self._bars.clear()

    def _finished(self, event: ev.Finished) -> None:
        style = STATE_STYLE.get(event.state, "")
        text = f"[bold {style}]{event.state}[/]"
        if event.exit_code is not None:
            text += f" exit code {event.exit_code}"
        if event.reason:
            text += f" — {shown(event.reason)}"
        self.console.print(text)
        if event.missing_outputs:
            missing = ", ".join(event.missing_outputs)
            self.console.print(f"[yellow]missing outputs:[/] {shown(missing)}")
        if event.outputs_note:
            self.console.print(f"[yellow]{shown(event.outputs_note)}[/]")
        if self._cost is not None:
            split = cost_split(self._cost.by_phase, self._phases)
            self.console.print(
                f"cost {money(self._cost.dollars)}" + (f" ({split})" if split else "")
            )


def _bars(console: Console) -> Progress:
    """Transfer bars, drawn only on a terminal: piped output never imports them."""
    from rich.progress import (
        BarColumn,
        DownloadColumn,
        Progress,
        TextColumn,
        TimeRemainingColumn,
        TransferSpeedColumn,
    )

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        DownloadColumn(),
        TransferSpeedColumn(),
        TimeRemainingColumn(),
        console=console,
        transient=False,
    )
