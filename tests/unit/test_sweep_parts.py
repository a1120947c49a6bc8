"""A sweep's pure parts: grids, parameter files, run names, metrics read from outputs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.sweep.grid import GridError, Variant, expand, load_params, parse_grid
from engine.sweep.metric import Metric
from engine.sweep.record import Member, SweepRecord


def test_the_grid_is_every_combination_the_last_name_fastest() -> None:
    grid = parse_grid(["LR=0.1, 0.01", "SEED=1,2,3"])
    variants = expand(grid)
    assert len(variants) == 6
    assert [v.label("train") for v in variants[:3]] == [
        "train[LR=0.1,SEED=1]", "train[LR=0.1,SEED=2]", "train[LR=0.1,SEED=3]",
    ]  # fmt: skip


@pytest.mark.parametrize(
    ("options", "problem"),
    [
        (["LR"], "expected NAME=V1,V2"),
        (["=1,2"], "expected NAME=V1,V2"),
        (["LR=1,,2"], "an empty value"),
        (["LR=1,1"], "listed twice"),
        (["LR=1", "LR=2"], "given twice"),
    ],
)
def test_a_bad_grid_is_one_line_naming_the_option(options: list[str], problem: str) -> None:
    with pytest.raises(GridError, match=problem) as caught:
        parse_grid(options)
    assert "\n" not in str(caught.value) and "--grid" in str(caught.value)


def test_a_grid_too_big_is_refused_before_anything_runs() -> None:
    with pytest.raises(GridError, match="at most"):
        expand({"A": [str(i) for i in range(200)], "B": [str(i) for i in range(200)]})


def test_a_parameter_file_is_one_run_per_object(tmp_path: Path) -> None:
    path = tmp_path / "params.json"
    path.write_text(json.dumps([{"LR": 0.1, "AMP": True}, {"LR": "3e-4", "AMP": False}]))
    assert [v.params for v in load_params(path)] == [
        {"LR": "0.1", "AMP": "1"}, {"LR": "3e-4", "AMP": "0"},
    ]  # fmt: skip
    path.write_text('[{"LR": [1]}]')
    with pytest.raises(GridError, match=r"params\.json: item 0: LR"):
        load_params(path)
    path.write_text("{}")
    with pytest.raises(GridError, match="non-empty JSON list"):
        load_params(path)


def test_a_bad_parameter_name_or_value_is_refused_by_the_job(make_job) -> None:
    job = make_job(run="true", env={"TOKEN": "abcd"})
    variant = job.with_params({"LR": "0.1"})
    assert variant.env == {"TOKEN": "abcd", "LR": "0.1"} and variant.params == {"LR": "0.1"}
    with pytest.raises(ValueError, match="parameter 1X: not a valid environment"):
        job.with_params({"1X": "1"})


@pytest.mark.parametrize("text", ["m.json", ":k", "/etc/passwd:k", "../m.json:k", "a/../../m:k"])
def test_a_metric_must_name_a_key_inside_the_outputs(text: str) -> None:
    with pytest.raises(ValueError, match="metric"):
        Metric.parse(text)


def test_a_metric_is_read_from_the_landed_outputs(tmp_path: Path) -> None:
    (tmp_path / "eval").mkdir()
    (tmp_path / "eval" / "m.json").write_text('{"val": {"loss": 0.25}, "s": "x", "n": NaN}')
    assert Metric.parse("eval/m.json:val.loss").read(tmp_path) == (0.25, None)
    assert Metric.parse("eval/m.json:s").read(tmp_path)[1] == "eval/m.json:s: not a finite number"
    assert Metric.parse("eval/m.json:n").read(tmp_path)[1] == "eval/m.json:n: not a finite number"
    assert Metric.parse("eval/m.json:nope").read(tmp_path)[1] == "eval/m.json: no key 'nope'"
    assert Metric.parse("gone.json:x").read(tmp_path)[1] == "gone.json not in the outputs"


def test_the_best_metric_is_the_lowest_unless_maximizing() -> None:
    members = [Member(label="a", metric=2.0), Member(label="b", metric=1.0), Member(label="c")]
    record = SweepRecord(sweep_id="s", job_name="j", pool="local", concurrency=1,
                         members=members)  # fmt: skip
    assert record.best() == ("b", 1.0)
    assert record.model_copy(update={"minimize": False}).best() == ("a", 2.0)
    assert Variant({"A": "1"}).label("j") == "j[A=1]"
