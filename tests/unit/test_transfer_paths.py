"""Path safety, tree walking with gitignore excludes, and output resolution (real files)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agent.transfer import UnsafePath
from agent.transfer import walk as walk_module
from agent.transfer.glob import Glob
from agent.transfer.safety import Parents, check_link_target, check_relpath, open_for_read
from agent.transfer.walk import Entry, resolve_outputs, walk_tree


@pytest.mark.parametrize(
    "bad",
    [
        *["", "/etc/passwd", "../x", "a/../../x", "a//b", "./a", "a/.", "a/", "a\x00b", "a\nb"],
        *["a\rb", ".", "..", "/", "a/..", "a/./b", "a/../b", "//a"],
    ],
)
def test_unsafe_relpaths_are_refused(bad: str) -> None:
    with pytest.raises(UnsafePath):
        check_relpath(bad)


def test_safe_relpaths_pass() -> None:
    assert check_relpath("src/model.py") == "src/model.py"
    assert check_relpath("..hidden/x") == "..hidden/x"
    assert check_relpath("a/.../b..") == "a/.../b.."
    assert check_relpath("a/.b/c.") == "a/.b/c."


@pytest.mark.parametrize("target", ["../out", "/etc/passwd", "a/../../../b", "", "a\rb", "a\x00"])
def test_escaping_link_targets_are_refused(target: str) -> None:
    with pytest.raises(UnsafePath):
        check_link_target("dir/link", "../" + target if target == "../out" else target)


def test_link_targets_inside_root_pass() -> None:
    assert check_link_target("dir/link", "../other/file") == "../other/file"
    assert check_link_target("link", "dir/./file") == "dir/./file"


def _tree(root: Path) -> None:
    for rel in [
        "src/a.py",
        "src/__pycache__/a.pyc",
        "artifacts/big",
        "sub/artifacts/keep",
        "logs/x.log",
        "logs/keep.log",
        ".git/HEAD",
        ".env",
    ]:
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel)
    (root / "empty").mkdir()


def test_walk_applies_gitignore_semantics(tmp_path: Path) -> None:
    _tree(tmp_path)
    walk = walk_tree(tmp_path, ["/artifacts", "__pycache__", "*.log", "!keep.log"])
    paths = {e.path for e in walk.entries}
    assert "src/a.py" in paths and "empty" in paths and ".git/HEAD" in paths
    assert "sub/artifacts/keep" in paths  # `/artifacts` is anchored at the root
    assert "logs/keep.log" in paths and "logs/x.log" not in paths
    assert not any("__pycache__" in p or p.startswith("artifacts") for p in paths)
    assert ("artifacts", 0) in walk.excluded  # the directory itself, not each file below it


def test_walk_refuses_escaping_links_and_fifos(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("x")
    os.symlink("f", tmp_path / "inside")
    os.symlink("../../etc/passwd", tmp_path / "outside")
    os.mkfifo(tmp_path / "pipe")
    walk = walk_tree(tmp_path, [])
    kinds = {e.path: e.kind for e in walk.entries}
    assert kinds == {"f": "file", "inside": "link"}
    assert any("outside" in r for r in walk.refused) and any("fifo" in r for r in walk.refused)


def test_glob_syntax() -> None:
    assert Glob("*.pt").match("a.pt") and not Glob("*.pt").match("d/a.pt")
    assert Glob("ckpt/**/*.bin").match("ckpt/a.bin")
    assert Glob("ckpt/**/*.bin").match("ckpt/x/y/a.bin")
    assert Glob("f[0-9].txt").match("f3.txt") and not Glob("f[!0-9].txt").match("f3.txt")


def test_resolve_outputs_files_dirs_globs_missing(tmp_path: Path) -> None:
    for rel in [
        "metrics.jsonl",
        "a.pt",
        "b.pt",
        "ckpt/x/1.bin",
        "ckpt/2.bin",
        "ckpt/n.txt",
        "logs/run/out.txt",
    ]:
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(rel)
    os.symlink("../../etc", tmp_path / "escape")
    patterns = [
        "metrics.jsonl",
        "*.pt",
        "ckpt/**/*.bin",
        "logs",
        "nothing*.x",
        "gone.json",
        "escape",
        "../up",
        "logs/run/out.txt",  # listed already, under `logs`: there, not missing
    ]
    walk, missing = resolve_outputs(tmp_path, patterns)
    paths = {e.path for e in walk.entries}
    assert paths == {
        "metrics.jsonl",
        "a.pt",
        "b.pt",
        "ckpt/x/1.bin",
        "ckpt/2.bin",
        "logs",
        "logs/run",
        "logs/run/out.txt",
    }
    assert missing == ["nothing*.x", "gone.json"]
    assert len(walk.refused) == 2  # the escaping link and the `..` pattern


def test_resolve_outputs_hands_out_pages_while_it_walks(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The node sends a listing's pages as the walk finds them (agent/transfer/server.py):
    each page holds the entries found since the last, every entry once, in walk order,
    the last (partial) page before the walk returns."""
    monkeypatch.setattr(walk_module, "PAGE", 3)
    for i in range(8):
        (tmp_path / "out" / f"f{i}").parent.mkdir(exist_ok=True)
        (tmp_path / "out" / f"f{i}").write_text(str(i))
    pages: list[list[Entry]] = []
    seen_then: list[int] = []

    def on_page(entries: list[Entry]) -> None:
        pages.append(entries)
        seen_then.append(sum(len(p) for p in pages))

    walk, missing = resolve_outputs(tmp_path, ["out", "none"], on_page)
    assert [len(p) for p in pages] == [3, 3, 3]  # the directory and its 8 files, once each
    assert [e for page in pages for e in page] == walk.entries
    assert seen_then == [3, 6, 9] and missing == ["none"]
    assert resolve_outputs(tmp_path, ["none"], on_page)[0].entries == [] and len(pages) == 3


@pytest.mark.timeout(5)
def test_a_fifo_put_where_a_file_was_is_refused_without_blocking(tmp_path: Path) -> None:
    """Opening a fifo for reading waits for a writer; the sender must never hang on one."""
    os.mkfifo(tmp_path / "out.txt")
    with pytest.raises(UnsafePath, match="not a regular file"):
        open_for_read(tmp_path, "out.txt")


def test_a_file_is_never_read_through_a_linked_parent(tmp_path: Path) -> None:
    """A directory swapped for a link after the walk must not lead the sender outside the
    root: O_NOFOLLOW guards only the last component, so each parent is checked."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "secret.txt").write_text("not yours")
    (root / "out").mkdir(parents=True)
    (root / "out" / "real").symlink_to(outside)
    with pytest.raises(UnsafePath, match="'real' is not a real directory"):
        open_for_read(root, "out/real/deep/secret.txt")
    (root / "out" / "deep").mkdir()
    (root / "out" / "deep" / "mine.txt").write_text("yours")
    fd = open_for_read(root, "out/deep/mine.txt")  # the same depth through real directories
    assert os.read(fd, 10) == b"yours"
    os.close(fd)


def test_files_read_through_held_parent_descriptors_never_follow_a_link(tmp_path: Path) -> None:
    """The sender's `Parents`: one openat a file, a linked parent refused like
    `open_for_read` refuses it, a missing one a FileNotFoundError (the file vanished)."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (outside / "deep").mkdir(parents=True)
    (outside / "deep" / "secret.txt").write_text("not yours")
    for rel in ("a/b/one", "a/b/two", "a/c/three", "top"):
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(rel)
    (root / "a" / "real").symlink_to(outside)
    parents = Parents(root)
    try:
        for rel in ("a/b/one", "a/c/three", "a/b/two", "top", "a/b/one"):
            fd = parents.open(rel)
            assert os.read(fd, 100) == rel.encode()
            os.close(fd)
        with pytest.raises(UnsafePath, match="'real' is not a real directory"):
            parents.open("a/real/deep/secret.txt")
        with pytest.raises(FileNotFoundError):
            parents.open("a/gone/x")
        with pytest.raises(UnsafePath):
            parents.open("a/../top")
    finally:
        parents.close()
