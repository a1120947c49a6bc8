"""swjob.optuna on the local pool with real agents: each trial a run with its parameters in
env, its objective read from an output; failed runs failed trials, a pruned trial's run
stopped on its node; the study on Optuna's own SQLite storage, shared by two executors in
two processes."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import optuna
from optuna.trial import TrialState

import swjob.optuna as so
from tests.support.engines import QUICK, local_pools

OBJECTIVE = """\
import json, os, sys, time
x = float(os.environ["X"])
if x < 0:
    sys.exit(3)
if x > 10:  # reports a bad intermediate value, then runs on until stopped
    print("optuna-report 1 100", flush=True)
    for _ in range(600):
        time.sleep(0.1)
if x != 2:  # X=2 completes without its objective
    json.dump({"loss": (x - 1) ** 2}, open("m.json", "w"))
"""


def _job(tmp_path: Path) -> Path:
    project = tmp_path / "objective"
    project.mkdir()
    (project / "objective.py").write_text(OBJECTIVE)
    (project / "job.toml").write_text(
        '[job]\nname = "obj"\nrun = "python3 objective.py"\n'
        'workspace = { workdir = "." }\noutputs = ["m.json"]\n'
    )
    return project / "job.toml"


def _space(trial: optuna.Trial) -> dict[str, float]:
    return {"X": trial.suggest_float("X", -5.0, 20.0)}


def _completing(trial: optuna.Trial) -> dict[str, float]:
    return {"X": trial.suggest_float("X", 0.0, 2.0)}  # X=2.0 itself: as likely as any float


async def test_trials_complete_fail_and_prune_as_their_runs_do(tmp_path: Path) -> None:
    # in memory: a new SQLite file costs seconds of schema migration (the next test has one)
    study = so.create_study("s", None, pruner=optuna.pruners.ThresholdPruner(upper=50))
    for x in (0.5, -1.0, 2.0, 11.0):  # complete, run fails, no objective, pruned
        study.enqueue_trial({"X": x})
    async with swjob_session(tmp_path) as session:
        executor = so.Executor(session, study, _job(tmp_path), _space, objective="m.json:loss",
                               concurrency=4)  # fmt: skip
        outcomes = await executor.optimize(4)
        views = {v.run_id: v for v in session.runs()}
    by_x = {t.params["X"]: t for t in study.trials}
    assert by_x[0.5].state == TrialState.COMPLETE and by_x[0.5].value == 0.25
    assert by_x[-1.0].state == TrialState.FAIL
    assert by_x[-1.0].user_attrs["swjob_reason"] == "run exited with code 3"
    assert by_x[2.0].state == TrialState.FAIL
    assert by_x[2.0].user_attrs["swjob_reason"] == "objective: m.json not in the outputs"
    assert by_x[11.0].state == TrialState.PRUNED
    pruned = views[by_x[11.0].user_attrs["swjob_run"]]
    assert (pruned.state, pruned.reason) == ("FAILED", "pruned by Optuna at step 1")
    assert pruned.label == f"obj[#{by_x[11.0].number} X=11.0]"
    assert sorted(o.state.name for o in outcomes) == ["COMPLETE", "FAIL", "FAIL", "PRUNED"]


OTHER_OPERATOR = """\
import sys
import optuna
import swjob.optuna as so
from tests.support.engines import QUICK, local_pools
study = so.create_study("shared", sys.argv[1])
space = lambda t: {"X": t.suggest_float("X", 0.0, 2.0)}  # completes every time
outcomes = so.optimize(study, sys.argv[2], space, objective="m.json:loss", n_trials=3,
                       concurrency=3, pools=local_pools(), runs_dir=sys.argv[3], **QUICK)
print("states", sorted(o.state.name for o in outcomes))
"""


async def test_two_executors_in_two_processes_share_one_study(tmp_path: Path) -> None:
    storage = f"sqlite:///{tmp_path / 'shared.db'}"
    job = _job(tmp_path)
    study = so.create_study("shared", storage)  # made once; the other operator loads it
    other = subprocess.Popen(
        [sys.executable, "-c", textwrap.dedent(OTHER_OPERATOR), storage, str(job),
         str(tmp_path / "other-runs")],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )  # fmt: skip
    try:
        async with swjob_session(tmp_path) as session:
            executor = so.Executor(session, study, job, _completing, objective="m.json:loss",
                                   concurrency=3)  # fmt: skip
            mine = await executor.optimize(3)
        out, _ = other.communicate(timeout=90)
    finally:
        if other.poll() is None:
            other.kill()
            other.wait()
    assert other.returncode == 0, out
    assert "states ['COMPLETE', 'COMPLETE', 'COMPLETE']" in out, out
    trials = optuna.load_study(study_name="shared", storage=storage).trials
    assert len(trials) == 6 and len({t.number for t in trials}) == 6
    assert all(t.state == TrialState.COMPLETE for t in trials)
    assert len({t.user_attrs["swjob_run"] for t in trials}) == 6
    assert {o.state for o in mine} == {TrialState.COMPLETE}


def swjob_session(tmp_path: Path):
    import swjob

    return swjob.AsyncSession(local_pools(), runs_dir=tmp_path / "runs", **QUICK)
