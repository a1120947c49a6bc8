"""Start-up benchmark: how long the commands a user waits on take, whole process, wall clock.

Each command runs N times, interleaved with the others so a machine's load falls on all
of them alike, and the median is printed beside two baselines measured in the same run
(wall time, and CPU time — user + sys of the process and the children it waited for,
e.g. `run`'s agent — which a loaded machine disturbs less):
a bare interpreter (`python -c pass`, the floor of any Python CLI) and importing
pydantic's BaseModel (what `swjob validate` paid before it stopped using pydantic).
With `--before DIR` (a checkout of another swjob version) validate, plan and runs also
run from that tree, for a before → after table from one run (not `run`: the local pool
starts the installed agent, which must match the engine).

State, cache, config and runs live in a temp dir removed afterwards; bytecode is kept
where Python keeps it (__pycache__/), as an installed swjob has it.

    python -m tests.bench.startup [-n 10] [--before DIR] [--no-run]
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
JOB = REPO / "examples" / "hello" / "job.toml"
GOALS = {"validate": 0.15, "run": 0.6}
BASELINES = {
    "python -c pass": ["-c", "pass"],
    "python -c 'from pydantic import BaseModel'": ["-c", "from pydantic import BaseModel"],
}


def _commands(runs_dir: Path, with_run: bool) -> dict[str, list[str]]:
    """The swjob commands measured, as arguments to the interpreter."""
    commands = {
        "validate": ["-m", "engine.cli", "validate", str(JOB)],
        "plan": ["-m", "engine.cli", "plan", str(JOB)],
        "runs": ["-m", "engine.cli", "runs"],
        # what a local node's agent imports before it can dial (most of its start)
        "agent imports": ["-c", "import agent.main"],
    }
    if with_run:
        commands["run"] = ["-m", "engine.cli", "run", str(JOB), "--runs-dir", str(runs_dir)]
    return commands


def _env(root: Path, tree: Path) -> dict[str, str]:
    env = {**os.environ, "SWJOB_IROH_RELAY": "disabled", "SWJOB_IROH_BIND": "127.0.0.1:0"}
    # An installed swjob has its bytecode; a source tree under PYTHONDONTWRITEBYTECODE would
    # compile every module on every start. A first round, not counted, writes what is
    # missing (beside the sources: a cache dir of its own would compile every installed
    # library too, seconds of a smoke run).
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    for name in ("STATE", "CACHE", "CONFIG"):
        env[f"SWJOB_{name}_DIR"] = str(root / name.lower())
    env["PYTHONPATH"] = str(tree)  # found before any installed swjob
    return env


def _cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _once(args: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """Wall and CPU seconds of one command."""
    cpu, started = _cpu_of_children(), time.perf_counter()
    done = subprocess.run(
        [sys.executable, *args], env=env, cwd=cwd, capture_output=True, text=True, check=False
    )
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(args)} failed:\n{done.stdout}\n{done.stderr}")
    return elapsed, _cpu_of_children() - cpu


def measure(runs: int, before: Path | None, with_run: bool) -> dict[str, list[tuple[float, float]]]:
    """Wall and CPU seconds of every case, N each, interleaved round by round."""
    times: dict[str, list[tuple[float, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="swjob-startup-") as tmp:
        root = Path(tmp)
        trees = {"after": REPO, **({"before": before} if before else {})}
        cases = {name: (args, _env(root, REPO)) for name, args in BASELINES.items()}
        for label, tree in trees.items():
            env = _env(root, tree)
            runs_dir = root / f"runs-{label}"
            # a local node's agent is the installed swjob, whatever the tree: only "after"
            # can run a job
            for name, args in _commands(runs_dir, with_run and label == "after").items():
                cases[f"{name} ({label})"] = (args, env)
        for args, env in cases.values():  # the bytecode round
            _once(args, env, root)
        for _ in range(runs):
            for name, (args, env) in cases.items():
                times.setdefault(name, []).append(_once(args, env, root))
    return times


def report(times: dict[str, list[tuple[float, float]]], runs: int, command: str) -> None:
    floor = statistics.median(wall for wall, _ in times["python -c pass"])
    print(f"start-up, medians of {runs} interleaved runs "
          "(wall s; + over `python -c pass`; CPU s)")  # fmt: skip
    for name, values in times.items():
        median = statistics.median(wall for wall, _ in values)
        cpu = statistics.median(cpu for _, cpu in values)
        goal = GOALS.get(name.split(" (")[0]) if name.endswith("(after)") else None
        note = f"  goal ≤ {goal:.2f} s" if goal else ""
        print(f"  {name:<44} {median:6.3f}  +{median - floor:6.3f}  cpu {cpu:6.3f}{note}")
    print(f"reproduce: {command}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-n", type=int, default=10, help="runs of each command")
    parser.add_argument("--before", type=Path, help="another swjob source tree to compare")
    parser.add_argument("--no-run", action="store_true", help="skip `swjob run` (no agent)")
    args = parser.parse_args()
    before = args.before.resolve() if args.before else None
    times = measure(args.n, before, not args.no_run)
    report(times, args.n, "python -m tests.bench.startup " + " ".join(sys.argv[1:]))


if __name__ == "__main__":
    main()
