"""Event-loop stall benchmark (not CI): does file I/O ever hold up the console's loop?

The console runs the engine on its own event loop, so everything either does there —
the engine appending events.jsonl and the step logs, the console reading files for its
previews — delays every key press and every heartbeat behind it. This runs the real
swjob-tui headless with a real engine on the local pool and, at once:

- the outputs browser open on a finished run whose landed outputs are a text file and a
  JSONL file of `--mib` MiB each (1 GiB by default), the cursor moving between them every
  250 ms so each is previewed again and again;
- a job flooding its log (`--lines` lines as fast as it can print them).

A probe task sleeps 5 ms in a loop and records how late it wakes: the loop's stalls.
Prints the max, p99 and the count over 50 ms, and the CPU the loop's thread used between
two of the probe's turns (thread CPU time: what a loaded machine does not stretch, the
work that held the loop). `--attribute` samples the loop thread's stack while it is
stalled and names where it was, and names the callbacks that used the most CPU in one
go. The same probe runs meanwhile on a bare asyncio loop in a sibling process that does
nothing else (the control): on a busy machine an idle loop stalls too, waiting for a
core, and a figure of swjob's means something only beside it. The control also times a
fixed unit of Python work each turn: on a busy machine the same work takes more CPU time
too (shared caches and cores), and how much more says what a CPU figure is worth.

    python tests/bench/loop_stall.py [--mib 1024] [--lines 200000] [--attribute]
"""

from __future__ import annotations

import argparse
import asyncio
import gc
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import traceback
from collections import Counter
from pathlib import Path

TICK_S = 0.005
UNIT = 2000  # squares summed: ~0.1-0.2 ms of CPU on an idle machine
STALL_S = 0.05
FLOOD = """import sys
w = sys.stdout.write
for i in range(int(sys.argv[1])):
    w(f"flood line {i} lorem ipsum dolor sit amet, consectetur adipiscing elit\\n")
"""
OUTPUTS = ("big.txt", "big.jsonl")
WAITING = {"wait", "get", "select", "poll", "acquire", "sleep", "_worker", "_do_waitpid", "_run"}
"""Innermost Python functions of a thread blocked in a C call (a lock, a queue, a waitpid),
not running Python: an idle pool worker, the writer thread between batches."""


def job(tmp: Path, name: str, run: str, outputs: tuple[str, ...] = ()) -> Path:
    folder = tmp / name
    folder.mkdir()
    (folder / "flood.py").write_text(FLOOD)
    listed = ", ".join(f'"{o}"' for o in outputs)
    folder.joinpath("job.toml").write_text(
        f'[job]\nname = "{name}"\nrun = "{run}"\nworkspace = {{ workdir = "." }}\n'
        f"outputs = [{listed}]\n"
    )
    return folder / "job.toml"


def grow(path: Path, mib: int) -> None:
    """Replace a landed output with `mib` MiB of text lines (JSON lines for .jsonl)."""
    line = '{"step": 1, "loss": 0.25, "note": "lorem ipsum dolor sit amet"}\n'
    if path.suffix != ".jsonl":
        line = "lorem ipsum dolor sit amet, consectetur adipiscing elit, sed do eiusmod\n"
    block = line * ((1 << 20) // len(line))  # whole lines, just under 1 MiB
    with path.open("w") as handle:
        for _ in range(mib):
            handle.write(block)


class Probe:
    """How late a 5 ms sleep wakes, over and over: the loop's stalls. With `attribute`, a
    watchdog thread samples the loop thread's stack while it is stalled past 50 ms."""

    def __init__(self, attribute: bool) -> None:
        self.lags: list[float] = []
        self.busy: list[float] = []  # per probe: CPU the loop thread itself used meanwhile
        self.others: list[float] = []  # per probe: CPU the process's other threads used
        self.samples: Counter[str] = Counter()
        self.beside: Counter[str] = Counter()  # other threads running Python meanwhile
        self._task: asyncio.Task[None] | None = None
        self._woke = time.perf_counter()
        self._loop_thread = threading.get_ident()
        self.cpu = (0.0, 0.0)
        self.collections: list[tuple[int, float, str]] = []  # generation, seconds, thread
        self._gc_started = 0.0
        self._watching = attribute
        self.tracked = (0, 0)  # objects a full collection walks, and those frozen at boot
        self.callbacks = Callbacks() if attribute else None

    def start(self) -> None:
        self.cpu = (time.thread_time(), time.process_time())
        self._task = asyncio.create_task(self._run())
        if self._watching:
            threading.Thread(target=self._watch, daemon=True).start()
            gc.callbacks.append(self._collected)
        if self.callbacks is not None:
            self.callbacks.start()

    def _collected(self, phase: str, info: dict[str, int]) -> None:
        """Garbage collections: which generation, how long, and on which thread."""
        if phase == "start":
            self._gc_started = time.perf_counter()
            return
        on = "loop" if threading.get_ident() == self._loop_thread else "other"
        self.collections.append((info["generation"], time.perf_counter() - self._gc_started, on))

    async def _run(self) -> None:
        while True:
            started, cpu, process = time.perf_counter(), time.thread_time(), time.process_time()
            await asyncio.sleep(TICK_S)
            self._woke = time.perf_counter()
            self.lags.append(max(0.0, self._woke - started - TICK_S))
            self.busy.append(time.thread_time() - cpu)
            self.others.append(time.process_time() - process - self.busy[-1])

    def _watch(self) -> None:
        while self._watching:
            time.sleep(0.01)
            if time.perf_counter() - self._woke > STALL_S + TICK_S:
                frames = sys._current_frames()
                frame = frames.pop(self._loop_thread, None)
                self.samples[_where(traceback.extract_stack(frame))] += 1
                frames.pop(threading.get_ident(), None)
                for other in frames.values():
                    if other.f_code.co_name not in WAITING:
                        self.beside[_where(traceback.extract_stack(other))] += 1

    async def stop(self) -> None:
        loop_s, process_s = time.thread_time() - self.cpu[0], time.process_time() - self.cpu[1]
        self.cpu = (loop_s, process_s - loop_s)  # from start: the loop thread's, the others'
        if self.callbacks is not None:
            self.callbacks.stop()
        if self._watching:
            gc.callbacks.remove(self._collected)
            # what a full collection walks: the objects the console made after its boot
            # freeze (the frozen ones it skips)
            self.tracked = (len(gc.get_objects()), gc.get_freeze_count())
        self._watching = False
        assert self._task is not None
        self._task.cancel()
        await asyncio.gather(self._task, return_exceptions=True)


class Callbacks:
    """The thread CPU each callback of the loop used in one go, by name (a task's name
    and coroutine, or the function): which of them held the loop, whatever the machine's
    load. Times every callback the loop runs (`Handle._run`) while started."""

    def __init__(self) -> None:
        self.by_name: dict[str, list[float]] = {}  # name: [count, total s, max s]
        self._run = asyncio.events.Handle._run

    def start(self) -> None:
        timed, by_name = self._run, self.by_name

        def run(handle: asyncio.events.Handle) -> None:
            began = time.thread_time()
            try:
                timed(handle)
            finally:
                cpu = time.thread_time() - began
                seen = by_name.setdefault(_callback_name(handle), [0, 0.0, 0.0])
                seen[0] += 1
                seen[1] += cpu
                seen[2] = max(seen[2], cpu)

        asyncio.events.Handle._run = run  # type: ignore[method-assign]

    def stop(self) -> None:
        asyncio.events.Handle._run = self._run  # type: ignore[method-assign]

    def report(self, top: int = 8) -> None:
        costliest = sorted(self.by_name.items(), key=lambda item: -item[1][2])[:top]
        for name, (count, total, longest) in costliest:
            print(f"  callback using the most CPU in one go: {longest * 1000:.1f} ms ", end="")
            print(f"(× {count:.0f}, {total * 1000:.0f} ms in all): {name}")


def _callback_name(handle: asyncio.events.Handle) -> str:
    callback = handle._callback  # type: ignore[attr-defined]
    task = getattr(callback, "__self__", None)
    if isinstance(task, asyncio.Task):
        coro = task.get_coro()
        return f"task {task.get_name()!r} {getattr(coro, '__qualname__', coro)}"
    return getattr(callback, "__qualname__", repr(callback))


def _where(stack: traceback.StackSummary) -> str:
    """The innermost frame of swjob's own code, and the innermost frames of all."""
    ours = [f for f in stack if Path(f.filename).parent.parent.name in ("engine", "tui", "agent")]
    ours = ours or [f for f in stack if Path(f.filename).parent.name in ("engine", "tui", "agent")]
    mine = f"{Path(ours[-1].filename).name}:{ours[-1].lineno} {ours[-1].name}" if ours else "?"
    inner = " < ".join(f"{Path(f.filename).name}:{f.lineno} {f.name}" for f in stack[-2:])
    return f"{mine}  ...  {inner}"


class Control:
    """The same probe on a bare asyncio loop in a sibling process (this script with
    `--control`): no threads, no work, only the machine's own delays."""

    def __init__(self) -> None:
        self._process: asyncio.subprocess.Process | None = None
        self.busy: list[float] = []  # its loop thread's CPU between two turns, once stopped
        self.units: list[float] = []  # the CPU each of its fixed units of work took

    async def start(self) -> None:
        self._process = await asyncio.create_subprocess_exec(
            sys.executable, __file__, "--control",
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        assert self._process.stdout is not None
        await self._process.stdout.readline()  # probing

    async def stop(self) -> list[float]:
        """Its lags (s), once it has stopped (closing its stdin tells it to)."""
        assert self._process is not None and self._process.stdin is not None
        self._process.stdin.close()
        out, _ = await self._process.communicate()
        probed = json.loads(out)
        self.busy, self.units = probed["busy"], probed["units"]
        return probed["lags"]


async def control() -> None:
    """The control's side: probe until stdin closes, then print the lags as JSON."""
    loop, stdin = asyncio.get_running_loop(), sys.stdin.fileno()
    closed = asyncio.Event()

    def readable() -> None:
        if not os.read(stdin, 4096):
            loop.remove_reader(stdin)
            closed.set()

    loop.add_reader(stdin, readable)
    probe = Probe(attribute=False)
    probe.start()
    units: list[float] = []
    worker = asyncio.create_task(_units(units))
    print("probing", flush=True)
    await closed.wait()
    worker.cancel()
    await probe.stop()
    print(json.dumps({"lags": probe.lags, "busy": probe.busy, "units": units}))


async def _units(units: list[float]) -> None:
    """A fixed unit of Python work every tick, its thread CPU time noted: on a loaded
    machine the same work costs more CPU time (caches and the core shared with other
    processes), and its spread says how much of a CPU figure the machine added."""
    while True:
        began = time.thread_time()
        sum(i * i for i in range(UNIT))
        units.append(time.thread_time() - began)
        await asyncio.sleep(TICK_S)


async def bench(tmp: Path, mib: int, lines: int, attribute: bool) -> None:
    from engine.engine import Engine, EngineConfig
    from engine.jobs.jobspec import load_job
    from engine.jobs.pools import load_pools
    from tui.app import SwjobApp
    from tui.screens.outputs import OutputsScreen
    from tui.widgets.preview_pane import PreviewPane

    engine = Engine(EngineConfig(runs_dir=tmp / "runs", pools=load_pools(None)))
    app = SwjobApp(engine)
    async with app.run_test(size=(130, 40)) as pilot:
        await asyncio.wait_for(app.booted.wait(), 60)
        made = "for f in " + " ".join(OUTPUTS) + "; do echo x > $f; done"
        past = await engine.submit(load_job(job(tmp, "past", made, OUTPUTS)), "local")
        view = await asyncio.wait_for(engine.wait(past), 60)
        started = time.perf_counter()
        for name in OUTPUTS:
            grow(view.run_dir / "outputs" / name, mib)
        written = time.perf_counter() - started
        screen = OutputsScreen(engine, view, engine.masker(past))
        await app.push_screen(screen)
        pane = screen.query_one(PreviewPane)
        while screen.path is None or pane.virtual_size.height <= 1:
            await pilot.pause(0.05)  # the first big output is previewed
        control = Control()
        await control.start()
        probe = Probe(attribute)
        probe.start()
        load = os.getloadavg()[0]
        started = time.perf_counter()
        flood_job = load_job(job(tmp, "flood", f"python3 flood.py {lines}"))
        flood = await engine.submit(flood_job, "local")
        waiter = asyncio.ensure_future(engine.wait(flood))
        previews = 0
        while not waiter.done():
            await pilot.press("down" if previews % 2 == 0 else "up")
            previews += 1
            await asyncio.sleep(0.25)
        elapsed = time.perf_counter() - started
        await probe.stop()
        idle = await control.stop()
        run = engine.run(flood)
        assert run is not None
    print(f"command : python {' '.join(sys.argv)}")
    print(f"outputs : 2 × {mib} MiB landed ({written:.1f} s to write), previewed {previews} times")
    print(f"flood   : {lines} lines, submit to finish {elapsed:.1f} s, run {run.state}")
    now = os.getloadavg()[0]
    print(f"machine : {os.cpu_count()} CPUs, load average {load:.2f} → {now:.2f} (1 min)")
    report(probe)
    print("control : " + lags("a bare asyncio loop in a sibling process, same probe:", idle))
    print("          " + cpu("its", control.busy))
    print("          " + inflation(control.units))


def lags(what: str, values: list[float]) -> str:
    """One line of figures for a list of probe lags (s)."""
    ms = sorted(lag * 1000 for lag in values)
    if not ms:
        return f"{what} no probes"
    p99 = ms[max(0, int(len(ms) * 0.99) - 1)]
    over = sum(1 for lag in ms if lag > STALL_S * 1000)
    return (
        f"{what} {len(ms)} probes of {TICK_S * 1000:.0f} ms: lag median "
        f"{statistics.median(ms):.1f} ms, p99 {p99:.1f} ms, max {ms[-1]:.1f} ms, "
        f"{over} over {STALL_S * 1000:.0f} ms"
    )


def cpu(whose: str, busy: list[float]) -> str:
    """One line of figures for the CPU a loop's thread used between two probe turns (s)."""
    ms = sorted(b * 1000 for b in busy)
    if not ms:
        return f"{whose} CPU between two turns: no probes"
    p99 = ms[max(0, int(len(ms) * 0.99) - 1)]
    top = ", ".join(f"{b:.1f}" for b in reversed(ms[-3:]))
    return f"{whose} CPU between two turns: p99 {p99:.1f} ms, max {top} ms"


def inflation(units: list[float]) -> str:
    """How much more CPU time the control's fixed unit of work took than at its cheapest."""
    if not units:
        return "no units of work"
    ms = sorted(u * 1000 for u in units)
    least, p99 = max(ms[0], 1e-6), ms[max(0, int(len(ms) * 0.99) - 1)]
    return (
        f"its fixed unit of work took {ms[0]:.2f} ms of CPU at least, median "
        f"×{statistics.median(ms) / least:.1f}, p99 ×{p99 / least:.1f}, "
        f"max ×{ms[-1] / least:.1f} (the machine's stretch of a CPU figure)"
    )


def report(probe: Probe) -> None:
    print("loop    : " + lags("swjob-tui's loop:", probe.lags))
    print("          " + cpu("the loop thread's", probe.busy))
    print(
        f"          CPU meanwhile: the loop thread {probe.cpu[0]:.1f} s, its other threads ", end=""
    )
    print(f"{probe.cpu[1]:.1f} s (preview workers, the writer, iroh's)")
    if any(lag > STALL_S for lag in probe.lags):
        # the loop thread on the CPU for most of a stall: our code held it; for little of
        # it: the thread waited (for a core on a busy machine, or for the GIL, which the
        # process's other threads then held: their CPU time says how much they ran)
        held = [i for i, lag in enumerate(probe.lags) if lag > STALL_S]
        spent = sum(probe.lags[i] + TICK_S for i in held)
        ran = sum(probe.busy[i] for i in held) / spent
        others = sum(probe.others[i] for i in held) / spent
        longest = max(probe.busy[i] for i in held) * 1000
        print(
            f"          in those stalls the loop thread ran on a CPU {ran:.0%} of the time", end=""
        )
        print(f" (at most {longest:.0f} ms in one), the process's other threads {others:.0%}")
    if probe.callbacks is not None:
        probe.callbacks.report()
    for where, count in probe.samples.most_common(8):
        print(f"  stalled in ({count} × 10 ms samples): {where}")
    for where, count in probe.beside.most_common(5):
        print(f"  meanwhile another thread in ({count} samples): {where}")
    if probe.tracked[0]:
        walked, frozen = probe.tracked
        print(f"  tracked objects at the end: {walked} walked by a full collection, ", end="")
        print(f"{frozen} frozen at boot")
    for generation in sorted({g for g, _, _ in probe.collections}):
        took = [(s * 1000, on) for g, s, on in probe.collections if g == generation]
        on_loop = sum(1 for _, on in took if on == "loop")
        longest, total = max(ms for ms, _ in took), sum(ms for ms, _ in took)
        print(f"  garbage collections of generation {generation}: {len(took)} ", end="")
        print(f"({on_loop} on the loop), max {longest:.1f} ms, total {total:.0f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mib", type=int, default=1024, help="size of each landed output")
    parser.add_argument("--lines", type=int, default=200_000, help="lines the job prints")
    parser.add_argument("--attribute", action="store_true", help="sample where the loop stalls")
    parser.add_argument("--control", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.control:
        asyncio.run(control())
        return
    os.environ.setdefault("SWJOB_IROH_RELAY", "disabled")
    os.environ.setdefault("SWJOB_IROH_BIND", "127.0.0.1:0")
    tmp = Path(tempfile.mkdtemp(prefix="swjob-stall-"))
    for name in ("STATE", "CACHE", "CONFIG"):
        os.environ[f"SWJOB_{name}_DIR"] = str(tmp / name.lower())
    try:
        asyncio.run(bench(tmp, args.mib, args.lines, args.attribute))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
