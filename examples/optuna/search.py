"""Search LR × WIDTH for examples/optuna/train.py with Optuna, each trial a swjob run.

    pip install 'swjob[optuna]'
    python examples/optuna/search.py               # 8 trials, 4 at a time, on the local pool
    python examples/optuna/search.py --pool rtx4090 --storage postgresql://…/optuna

The study lives in Optuna's own storage (a SQLite file beside this script by default):
run this script on two machines against one RDB URL and both add trials to one study.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import optuna

import swjob.optuna as so

HERE = Path(__file__).resolve().parent


def space(trial: optuna.Trial) -> dict[str, object]:
    return {
        "LR": trial.suggest_float("LR", 1e-3, 1.0, log=True),
        "WIDTH": trial.suggest_int("WIDTH", 2, 64, log=True),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=8)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--pool", default="local")
    parser.add_argument("--storage", default=f"sqlite:///{HERE / 'study.db'}")
    parser.add_argument("--study", default="tiny-mlp")
    args = parser.parse_args()
    study = so.create_study(args.study, args.storage, direction="minimize",
                            pruner=optuna.pruners.MedianPruner(n_startup_trials=4))  # fmt: skip
    began = time.monotonic()
    outcomes = so.optimize(
        study, HERE / "job.toml", space, objective="final_metrics.json:val_loss",
        n_trials=args.trials, concurrency=args.concurrency, pool=args.pool,
        runs_dir=HERE / "swjob-runs",
    )  # fmt: skip
    for o in outcomes:
        value = f"{o.value:.5f}" if o.value is not None else o.reason
        print(f"trial {o.number:3d}  {o.state.name:8}  {value}  run {o.run_id}")
    best = study.best_trial
    run = best.user_attrs["swjob_run"]
    print(f"best: val_loss {best.value:.5f} with {best.params} (run {run})")
    print(f"{len(outcomes)} trials in {time.monotonic() - began:.1f} s")


if __name__ == "__main__":
    main()
