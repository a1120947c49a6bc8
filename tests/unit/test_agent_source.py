"""Which swjob a rented node installs: this very build, or what the pool says."""

from __future__ import annotations

import json
from importlib.metadata import version

import pytest

from agent import __version__
from engine.jobs.pools import Pool
from engine.providers.agent_source import agent_install_for, own_requirement, requirement_from
from engine.providers.base import ProvisionError

GIT = "https://github.com/example/swjob"


def direct_url(**info: object) -> str:
    return json.dumps(info)


@pytest.mark.parametrize(
    ("recorded", "expected"),
    [
        (None, "swjob==0.1.0"),  # from a package index: pip writes no direct_url.json
        (
            direct_url(
                url=GIT, vcs_info={"vcs": "git", "commit_id": "ab12", "requested_revision": "main"}
            ),
            f"swjob @ git+{GIT}@ab12",  # the exact commit, not the moving branch
        ),
        (
            direct_url(url=GIT, vcs_info={"vcs": "git", "commit_id": "ab12"}, subdirectory="py"),
            f"swjob @ git+{GIT}@ab12#subdirectory=py",
        ),
        (
            direct_url(url="https://example.org/swjob-0.1.0-py3-none-any.whl", archive_info={}),
            "swjob @ https://example.org/swjob-0.1.0-py3-none-any.whl",
        ),
        (direct_url(url="file:///home/me/swjob", dir_info={"editable": True}), None),
        (direct_url(url="file:///home/me/swjob", dir_info={}), None),
        (direct_url(url="file:///tmp/swjob-0.1.0.tar.gz", archive_info={}), None),
        (direct_url(url="https://hg.example.org/swjob", vcs_info={"vcs": "hg"}), None),
        (direct_url(url="http://example.org/swjob-0.1.0.tar.gz", archive_info={}), None),
        ("not json", None),
    ],
)
def test_requirement_reinstalls_this_build_or_nothing(recorded: str | None, expected) -> None:
    assert requirement_from("0.1.0", recorded) == expected


def test_this_checkout_is_out_of_a_nodes_reach() -> None:
    """The suite runs from a local directory install (editable or not)."""
    assert own_requirement() is None
    assert __version__ == version("swjob")


def test_a_pool_must_say_where_the_agent_comes_from_before_anything_is_rented() -> None:
    pool = Pool(name="gpu", provider="vastai", image="img")
    with pytest.raises(ProvisionError) as info:
        agent_install_for(pool)
    message = str(info.value)
    assert message.startswith("pool 'gpu': this swjob was installed from a local directory")
    assert "set agent_install in the pool" in message and "\n" not in message
    spec = "swjob @ git+https://example.org/swjob@ab12"
    assert agent_install_for(pool.model_copy(update={"agent_install": spec})) == spec
