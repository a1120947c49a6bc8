"""`swjob sweep`'s options: kept apart from the command (engine/cli/sweep.py) so that building
the CLI's parser loads none of the engine (`swjob validate` does not pay for it)."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from engine.state.paths import DEFAULT_RUNS_DIR

if TYPE_CHECKING:
    from engine.sweep.metric import Metric


def add_parser(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    sweep = sub.add_parser("sweep", help="run a job once per variant of a parameter grid")
    sweep.add_argument("job", type=Path, nargs="?", help="the job file (not with --rerun)")
    sweep.add_argument(
        "--grid", action="append", default=[], metavar="NAME=V1,V2",
        help="a parameter and its values; several --grid make every combination",
    )  # fmt: skip
    sweep.add_argument(
        "--params",
        type=Path,
        metavar="FILE",
        help='a JSON list of parameter sets, one run each: [{"LR": 0.1}, …]',
    )
    sweep.add_argument(
        "--rerun", metavar="SWEEP", help="run again the variants of SWEEP that did not complete"
    )
    sweep.add_argument(
        "--concurrency",
        type=_positive,
        default=4,
        metavar="N",
        help="at most N runs at once (default 4)",
    )
    sweep.add_argument(
        "--max-dollars",
        type=_dollars,
        default=None,
        metavar="D",
        help="stop the sweep's running runs and start no more once they cost D",
    )
    sweep.add_argument(
        "--fail-fast",
        action="store_true",
        help="halt the sweep at the first run that does not complete",
    )
    sweep.add_argument(
        "--metric",
        type=_metric,
        default=None,
        metavar="FILE:KEY",
        help="a number the job writes into an output, e.g. metrics.json:val_loss",
    )
    sweep.add_argument(
        "--maximize", action="store_true", help="the highest metric is best (default: the lowest)"
    )
    sweep.add_argument("--pool", default="local", help="pool name (default: local)")
    sweep.add_argument("--pools", type=Path, default=None, help="pools TOML file")
    sweep.add_argument("--runs-dir", type=Path, default=DEFAULT_RUNS_DIR)  # fmt: skip


def _positive(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= 1000:
        raise argparse.ArgumentTypeError(f"must be a whole number from 1 to 1000: {text!r}")
    return int(text)


def _dollars(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of dollars: {text!r}") from None
    if not 0 < value < 1e9:
        raise argparse.ArgumentTypeError(f"must be more than 0: {text}")
    return value


def _metric(text: str) -> Metric:
    from engine.sweep.metric import Metric  # json: only a sweep pays for it

    try:
        return Metric.parse(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
