"""`swjob run --sync-every S` and `--attempts N`: checked before anything is rented."""

from __future__ import annotations

import pytest

from engine.cli.main import _parser


def test_sync_every_is_seconds() -> None:
    args = _parser().parse_args(["run", "job.toml", "--sync-every", "60"])
    assert args.sync_every == 60.0
    assert _parser().parse_args(["run", "job.toml"]).sync_every is None


@pytest.mark.parametrize("bad", ["-1", "soon", "nan", "1e9"])
def test_a_bad_sync_every_is_one_line_naming_the_option(bad: str, capsys) -> None:
    with pytest.raises(SystemExit):
        _parser().parse_args(["run", "job.toml", "--sync-every", bad])
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert "--sync-every" in err and bad in err


def test_attempts_is_a_whole_number_from_one_to_twenty(capsys) -> None:
    assert _parser().parse_args(["run", "j.toml", "--attempts", "3"]).attempts == 3
    for bad in ("0", "21", "2.5", "-1"):
        with pytest.raises(SystemExit):
            _parser().parse_args(["run", "j.toml", "--attempts", bad])
        assert "--attempts" in capsys.readouterr().err
