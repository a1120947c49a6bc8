"""Output globs (agent/transfer/glob.py): the syntax, agreement with fnmatch on single
segments, and hostile patterns that made the old regex backtrack for ever."""

from __future__ import annotations

import fnmatch
import random
import time

import pytest

from agent.transfer.glob import Glob

HOSTILE = "*a*a*a*a*a*a*a*a*a*a*a*a*a*ab"


@pytest.mark.parametrize(
    ("pattern", "yes", "no"),
    [
        ("*.pt", ["a.pt", ".pt", "x.y.pt"], ["d/a.pt", "a.pth", "a.p"]),
        (
            "ckpt/**/*.bin",
            ["ckpt/a.bin", "ckpt/x/y/a.bin"],
            ["a.bin", "ckpt/a.txt", "x/ckpt/a.bin"],
        ),
        ("**/*.log", ["a.log", "x/y/a.log"], ["a.log/x"]),
        ("out/**", ["out/a", "out/a/b"], ["out", "outx/a"]),
        ("**", ["a", "a/b"], []),
        ("a/**/b/**/c", ["a/b/c", "a/x/b/y/z/c"], ["a/c", "a/b/x"]),
        ("f[0-9].txt", ["f3.txt"], ["fa.txt", "f33.txt"]),
        ("f[!0-9].txt", ["fa.txt"], ["f3.txt"]),
        ("f?.txt", ["f1.txt"], ["f.txt", "f12.txt"]),
        ("a*b*c", ["abc", "aXbYc", "abbc", "acbc"], ["ab", "acb", "a/b/c"]),
        ("[ab", ["[ab"], ["a"]),  # an unclosed class is a literal
        ("*", ["a"], ["a/b"]),
    ],
)
def test_syntax(pattern: str, yes: list[str], no: list[str]) -> None:
    glob = Glob(pattern)
    assert all(glob.match(p) for p in yes), [p for p in yes if not glob.match(p)]
    assert not any(glob.match(p) for p in no), [p for p in no if glob.match(p)]


def test_agrees_with_fnmatch_on_single_segments() -> None:
    """A differential check over random small patterns and names (fnmatch is the reference
    here: on one segment its `*` cannot cross a '/')."""
    rng = random.Random(13)
    atoms = ["a", "b", "*", "?", "[ab]", "[!a]", "[a-b]"]
    for _ in range(3000):
        pattern = "".join(rng.choice(atoms) for _ in range(rng.randint(1, 6)))
        name = "".join(rng.choice("abc") for _ in range(rng.randint(0, 7)))
        assert Glob(pattern).match(name) == fnmatch.fnmatchcase(name, pattern), (pattern, name)


@pytest.mark.parametrize(
    ("pattern", "names"),
    [
        (HOSTILE, 20_000),  # literal pieces: found with str.find
        (HOSTILE.replace("a", "[a]"), 1_000),  # class pieces: scanned, still no backtracking
        ("**/" * 12 + "x/b", 5_000),  # `**` groups placed leftmost, not tried in every split
    ],
)
def test_hostile_patterns_finish_fast(pattern: str, names: int) -> None:
    """The old regex took exponential time on ONE such name (the agent stopped heartbeating);
    here thousands of long names take well under the bound (generous for a loaded machine)."""
    long_name = "a" * 255
    deep = "/".join(["x"] * 40) + "/a"
    glob = Glob(pattern)
    started = time.perf_counter()
    for _ in range(names):
        assert not glob.match(long_name)
        assert not glob.match(deep)
    assert time.perf_counter() - started < 5.0
    assert Glob(HOSTILE).match("a" * 30 + "b")  # positive control: it does match when it should
