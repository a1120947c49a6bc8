"""Start-up stays light: a user without rented pools never pays for importing the Vast.ai SDK
(over a second), and the engine starts and closes cleanly in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

HELLO = Path(__file__).parents[2] / "examples" / "hello" / "job.toml"
CODE = """
import asyncio, sys
from engine.engine import Engine, EngineConfig
from engine.jobs.pools import load_pools

async def main():
    engine = Engine(EngineConfig(pools=load_pools(None)))
    await engine.start()
    await asyncio.wait_for(engine._orphan_check, 30)  # the start-up check has run
    await engine.close()

asyncio.run(main())
print(sorted(m for m in sys.modules if m.split(".")[0] == "vastai"))
"""


def test_engine_with_local_pools_never_imports_the_vast_sdk() -> None:
    out = subprocess.run(
        [sys.executable, "-c", CODE], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


HEAVY = (
    "asyncio", "iroh", "platformdirs", "pydantic", "rich", "textual", "tomlkit", "vastai",
    "zstandard",
)  # fmt: skip
LOADED = """
import sys
from engine.cli.main import main
sys.argv = ["swjob", *{args!r}]
code = main()
heavy = sorted({{m.split(".")[0] for m in sys.modules}} & {heavy!r})
print("LOADED", ",".join(heavy), code)
"""


def loaded_by(*args: str) -> tuple[str, str]:
    """The heavy packages a subcommand imported, and its exit code."""
    code = LOADED.format(args=list(args), heavy=set(HEAVY))
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    heavy, exit_code = out.stdout.splitlines()[-1].split(" ")[1:]
    return heavy, exit_code


def test_validate_and_runs_import_only_what_they_use(tmp_path) -> None:
    """`swjob validate` needs the job's schema and nothing of the run machinery (not even
    pydantic, which alone takes longer than validate may); `swjob runs` prints a table
    (rich) but neither connects nor rents."""
    job = tmp_path / "job.toml"
    job.write_text('[job]\nname = "light"\nrun = "true"\n')
    assert loaded_by("validate", str(job)) == ("", "0")
    heavy, code = loaded_by("runs")
    assert code == "0" and "rich" in heavy
    assert not {"iroh", "textual", "vastai"} & set(heavy.split(","))
    heavy, _ = loaded_by("plan", str(job))  # control: plan draws with rich, so it shows up
    assert "rich" in heavy


def test_only_a_broken_toml_file_loads_tomlkit(tmp_path) -> None:
    """The standard library parses a valid file; tomlkit only words a syntax error."""
    job = tmp_path / "job.toml"
    job.write_text('[job]\nname = "light"\nrun = "true"\nrun = "again"\n')
    assert loaded_by("validate", str(job)) == ("tomlkit", "1")


RUN_LOADED = """
import sys
from engine.cli.main import _command, _parser
code = _command(_parser().parse_args({args!r}))
print("LOADED", ",".join(sorted(m for m in {modules!r} if m in sys.modules)), code)
"""


def test_a_piped_run_loads_neither_transfer_bars_nor_tomlkit(tmp_path) -> None:
    """`swjob run` to a pipe prints lines, not bars; its files are valid TOML. (Run
    through the command's handler: `main` ends a run without the interpreter's exit.)"""
    args = ["run", str(HELLO), "--runs-dir", str(tmp_path / "runs")]
    modules = ("engine.engine", "rich.console", "rich.progress", "tomlkit")
    code = RUN_LOADED.format(args=args, modules=modules)
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.splitlines()[-1] == "LOADED engine.engine,rich.console 0", out.stdout
