"""Regenerate screenshots/*.svg from a real run on the local pool.

    python scripts/screenshots.py [--out screenshots]

A small training-like job (a workspace to push, a run that logs to stdout and
stderr for a few seconds, outputs to pull) runs on the built-in local pool beside
eleven short jobs (a sweep's variants, and jobs that fail each their own way) while
the console is driven headless; the board (twelve runs) and the job detail are
captured mid-run, the outputs browser after it completed, the orphans dialog and the
submit modal on the job's folder. Each at 120×40 (`NAME.svg`) and 80×24
(`NAME-80x24.svg`).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

os.environ.setdefault("SWJOB_IROH_RELAY", "disabled")
os.environ.setdefault("SWJOB_IROH_BIND", "127.0.0.1:0")
_TMP = Path(tempfile.mkdtemp(prefix="swjob-shots-"))
for _name in ("STATE", "CACHE", "CONFIG"):
    os.environ[f"SWJOB_{_name}_DIR"] = str(_TMP / _name.lower())

from textual.pilot import Pilot  # noqa: E402

from engine.engine import Engine, EngineConfig  # noqa: E402
from engine.jobs.jobspec import load_job  # noqa: E402
from tui.app import SwjobApp, console_pools  # noqa: E402

TRAIN = """import json, random, sys, time
random.seed(7)
with open("metrics.jsonl", "w") as out:
    for epoch in range(1, 81):
        loss = 2.0 / epoch + random.random() * 0.05
        print(f"epoch {epoch:3d}  loss {loss:.4f}  lr 3e-4  {64 * epoch} samples/s", flush=True)
        if epoch % 7 == 0:
            print(f"warning: epoch {epoch}: gradient norm clipped", file=sys.stderr, flush=True)
        out.write(json.dumps({"epoch": epoch, "loss": round(loss, 4)}) + "\\n")
        time.sleep(0.15)
json.dump({"epochs": 80, "final_loss": round(loss, 4), "model": "tiny-mlp"},
          open("final_metrics.json", "w"), indent=None)
"""

JOB = """[job]
name = "tiny-train"
setup = "python3 -c 'print(\\"setup: nothing to install\\")'"
run = "python3 train.py"
workspace = { workdir = ".", exclude = ["/runs"] }
outputs = ["metrics.jsonl", "final_metrics.json"]
"""


def project() -> Path:
    """A demo project: code, a config and some data so the push has bytes to show."""
    root = _TMP / "demo"
    (root / "data").mkdir(parents=True)
    (root / "train.py").write_text(TRAIN)
    (root / "job.toml").write_text(JOB)
    for i in range(8):
        (root / "data" / f"shard-{i}.bin").write_bytes(os.urandom(4 << 20))
    return root


async def until(pilot: Pilot, condition: Callable[[], object], timeout: float = 60) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not condition():
        if loop.time() > deadline:
            raise TimeoutError(str(condition))
        await pilot.pause(0.05)


SHORT = [
    *((f"sweep-lr-3e-4-batch-{2 ** (4 + i % 4)}-seed-{i}", "echo ok", None) for i in range(6)),
    ("eval-checkpoint", "echo evaluating; exit 3", None),
    ("prep-data", "echo never", "echo installing; exit 1"),
    ("export-onnx", "echo exported", None),
    ("tokenize", "echo tokenized", None),
    ("smoke", "true", None),
]
"""The board's other runs: (name, run, setup); each ends its own way."""
SIZES = {"": (120, 40), "-80x24": (80, 24)}


def short_jobs() -> list[Path]:
    made = []
    for name, run, setup in SHORT:
        folder = _TMP / "jobs" / name
        folder.mkdir(parents=True)
        lines = ["[job]", f'name = "{name}"', f'run = "{run}"']
        lines += [f'setup = "{setup}"'] if setup else []
        (folder / "job.toml").write_text("\n".join(lines) + "\n")
        made.append(folder / "job.toml")
    return made


async def capture(pilot: Pilot, name: str, out: Path) -> None:
    """The screen as it is now, at each size."""
    for suffix, size in SIZES.items():
        await pilot.resize_terminal(*size)
        await pilot.pause(0.4)
        pilot.app.save_screenshot(f"{name}{suffix}.svg", path=str(out))
    await pilot.resize_terminal(*SIZES[""])
    await pilot.pause(0.2)


async def shoot(out: Path) -> None:
    root = project()
    pools = console_pools(None)
    local = pools.get("local").model_copy(update={"max_nodes": 16})  # all twelve at once
    every = type(pools)({p.name: p for p in (*pools, local)}, pools.source)
    engine = Engine(EngineConfig(runs_dir=_TMP / "runs", pools=every))
    app = SwjobApp(engine, cwd=root)
    async with app.run_test(size=SIZES[""]) as pilot:
        async with asyncio.timeout(30):
            await app.booted.wait()
        others = [await engine.submit(load_job(job), "local") for job in short_jobs()]
        run_id = await engine.submit(load_job(root / "job.toml"), "local")
        app.board.select_run(run_id)
        async with asyncio.timeout(120):
            for other in others:
                await engine.wait(other)
        await until(pilot, lambda: engine.run(run_id).phase == "run")
        await until(pilot, lambda: len(app.feed.log(run_id).lines) >= 12)
        await capture(pilot, "board", out)
        await pilot.press("enter")
        await until(pilot, lambda: len(app.feed.log(run_id).lines) >= 20)
        await capture(pilot, "job-detail", out)
        async with asyncio.timeout(90):
            await engine.wait(run_id)
        await pilot.press("o")
        await browse_to(pilot, "metrics.jsonl")
        await capture(pilot, "outputs", out)
        await pilot.press("escape", "escape", "x")
        await until(pilot, lambda: "no orphaned" in str(app.screen.query_one("#found").content))
        await capture(pilot, "orphans", out)
        await pilot.press("escape", "n", *"job.toml")
        await until(pilot, lambda: "push:" in str(app.screen.query_one("#plan").content))
        await capture(pilot, "submit", out)
        await pilot.press("escape", "q")


async def browse_to(pilot: Pilot, name: str) -> None:
    """The browser opens on the first file of outputs/; walk down to `name`."""
    screen = pilot.app.screen
    await until(pilot, lambda: getattr(screen, "path", None) is not None)
    while screen.path.name != name:  # type: ignore[attr-defined]
        before = screen.path  # type: ignore[attr-defined]
        await pilot.press("down")
        await until(pilot, lambda seen=before: screen.path != seen)  # type: ignore[attr-defined]
    await pilot.pause(0.3)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=Path(__file__).parents[1] / "screenshots")
    args = parser.parse_args()
    args.out.mkdir(exist_ok=True)
    try:
        asyncio.run(shoot(args.out))
    finally:
        shutil.rmtree(_TMP, ignore_errors=True)
    print(f"wrote {', '.join(sorted(p.name for p in args.out.glob('*.svg')))} to {args.out}")


if __name__ == "__main__":
    main()
