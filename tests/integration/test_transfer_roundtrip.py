"""Push and pull round trips over real iroh endpoints on loopback, byte-exact, and resume."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from agent.transfer import Progress, TransferError
from agent.transfer.schedule import LARGE_MIN
from agent.transfer.server import _sessions
from engine.run.transfer import pull_outputs, push_workspace
from tests.integration.transfer_harness import loopback_pair, snapshot

pytestmark = pytest.mark.timeout(60)


def make_large(root: Path) -> None:
    for i, size in enumerate([LARGE_MIN + 1, 3 * LARGE_MIN // 2, 1_000_000]):
        (root / f"blob{i}.bin").write_bytes(os.urandom(size))


def make_small(root: Path, count: int = 2000) -> None:
    for i in range(count):
        d = root / f"d{i % 40:02}"
        d.mkdir(exist_ok=True)
        (d / f"f{i}.txt").write_bytes(os.urandom(64) + b"x" * (i % 700))


def make_source(root: Path) -> None:
    (root / "pkg" / "sub").mkdir(parents=True)
    (root / "pkg" / "__init__.py").write_text("from .core import run\n" * 20)
    (root / "pkg" / "sub" / "core.py").write_text("def run():\n    return 42\n" * 500)
    (root / "run.sh").write_text("#!/bin/sh\necho hi\n")
    (root / "run.sh").chmod(0o755)
    (root / "secret.cfg").write_text("private")
    (root / "secret.cfg").chmod(0o600)
    (root / "empty" / "deeper").mkdir(parents=True)
    (root / "empty.txt").write_bytes(b"")
    os.symlink("pkg/sub/core.py", root / "core_link")
    os.symlink("../__init__.py", root / "pkg" / "sub" / "up_link")
    os.symlink("pkg", root / "dir_link")


@pytest.mark.parametrize("shape", [make_large, make_small, make_source])
async def test_push_then_pull_round_trip_is_exact(tmp_path: Path, shape) -> None:
    src, node, run_dir = tmp_path / "src", tmp_path / "node", tmp_path / "run"
    src.mkdir()
    shape(src)
    seen: list[Progress] = []
    async with loopback_pair(node) as link:
        pushed = await push_workspace(link, src, [], seen.append)
        assert snapshot(node) == snapshot(src)
        pulled = await pull_outputs(link, sorted(os.listdir(src)), run_dir, lambda p: None)
    assert snapshot(run_dir / "outputs") == snapshot(src)
    assert pushed.attempts == 1 and pushed.refused == []
    assert seen[-1].done and seen[-1].bytes_done == seen[-1].bytes_total == pushed.bytes
    assert all(f.verified and f.sha256 for f in pulled.files) and pulled.missing == []
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert {f["path"] for f in manifest["files"]} == {
        p for p, v in snapshot(src).items() if v[0] == "file"
    }


async def test_push_excludes_and_reports_refused(tmp_path: Path) -> None:
    src, node = tmp_path / "src", tmp_path / "node"
    (src / "artifacts").mkdir(parents=True)
    (src / "artifacts" / "x").write_text("x")
    (src / "keep.py").write_text("x")
    os.symlink("/etc/passwd", src / "abs_link")
    async with loopback_pair(node) as link:
        result = await push_workspace(link, src, ["/artifacts"], lambda p: None)
    assert sorted(os.listdir(node)) == ["keep.py"]
    assert len(result.refused) == 1 and "abs_link" in result.refused[0]


async def test_pull_globs_directories_missing_and_links(tmp_path: Path) -> None:
    node, run_dir = tmp_path / "node", tmp_path / "run"
    for rel in ["ckpt/a/1.bin", "ckpt/2.bin", "ckpt/skip.txt", "m.jsonl", "logs/x/y.txt"]:
        (node / rel).parent.mkdir(parents=True, exist_ok=True)
        (node / rel).write_text(rel)
    os.symlink("m.jsonl", node / "latest")
    os.symlink("../../../etc/passwd", node / "logs" / "evil")
    patterns = ["ckpt/**/*.bin", "m.jsonl", "logs", "latest", "final_metrics.json", "*.pt"]
    async with loopback_pair(node) as link:
        result = await pull_outputs(link, patterns, run_dir, lambda p: None)
    out = run_dir / "outputs"
    assert {f.path for f in result.files} == {
        "ckpt/a/1.bin",
        "ckpt/2.bin",
        "m.jsonl",
        "logs/x/y.txt",
    }
    assert os.readlink(out / "latest") == "m.jsonl"
    assert not (out / "ckpt" / "skip.txt").exists() and not (out / "logs" / "evil").exists()
    assert result.missing == ["final_metrics.json", "*.pt"]
    assert len(result.refused) == 1 and "logs/evil" in result.refused[0]
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["missing"] == result.missing


async def test_push_resumes_after_connection_cut_mid_file(tmp_path: Path) -> None:
    src, node = tmp_path / "src", tmp_path / "node"
    src.mkdir()
    for i in range(20):
        (src / f"small{i}.txt").write_text(f"{i}" * 1000)
    for i in range(2):
        (src / f"big{i}.bin").write_bytes(os.urandom(5 * LARGE_MIN))
    cut = []

    def on_progress(p: Progress) -> None:
        receiver = next(iter(_sessions.values()), None) if _sessions else None
        held = receiver.chunks_held() if receiver else {}
        if not cut and receiver and len(receiver.verified) >= 20 and any(held.values()):
            cut.append(p.bytes_done)
            link.cut()

    async with loopback_pair(node) as link:
        _sessions.clear()
        result = await push_workspace(link, src, [], on_progress)
        connections = link.connections
    assert cut and connections == 2 and result.attempts == 2
    assert result.resumed_files >= 20  # verified small files were not sent again
    assert result.resumed_bytes > 20 * 1000  # nor were the verified chunks of the big files
    assert snapshot(node) == snapshot(src)


async def test_a_pull_that_keeps_losing_the_node_fails_and_says_what_landed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("engine.run.transfer.BACKOFF_S", 0.01)
    node, run_dir = tmp_path / "node", tmp_path / "run"
    node.mkdir()
    (node / "metrics.json").write_text('{"loss": 0.1}')
    (node / "model.bin").write_bytes(os.urandom(16 * LARGE_MIN))

    def on_progress(p: Progress) -> None:
        if p.bytes_done and not p.done:
            link.cut()  # every attempt loses the node as soon as bytes flow

    async with loopback_pair(node) as link:
        with pytest.raises(TransferError, match="connection to the node lost 5 times"):
            await pull_outputs(link, ["metrics.json", "model.bin"], run_dir, on_progress)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["complete"] is False
    verified = {e["path"]: e["verified"] for e in manifest["files"]}
    assert verified.keys() == {"metrics.json", "model.bin"} and not verified["model.bin"]
    out = run_dir / "outputs"
    assert not (out / "model.bin").exists()
    assert not [p for p in out.rglob("*") if "swjob-" in p.name], "temporary files left behind"
    if verified["metrics.json"]:
        assert (out / "metrics.json").read_text() == '{"loss": 0.1}'


async def test_a_pull_cut_mid_way_resumes_into_its_stage_and_shows_each_output_once(
    tmp_path: Path,
) -> None:
    """New directories of outputs land unseen until the pull ends; the connection lost
    after the first batch, the retry lands the rest beside them, and all go into place."""
    src, run_dir = tmp_path / "node" / "out", tmp_path / "run"
    for i in range(240):
        (src / f"d{i % 6}").mkdir(parents=True, exist_ok=True)
        (src / f"d{i % 6}" / f"f{i}.bin").write_bytes(os.urandom(48 * 1024))
    cut: list[int] = []

    def on_progress(p: Progress) -> None:
        if not cut and p.files_done and not p.done:
            cut.append(p.files_done)
            assert not (run_dir / "outputs" / "out").exists()  # nothing shown mid-pull
            link.cut()

    async with loopback_pair(src.parent) as link:
        result = await pull_outputs(link, ["out"], run_dir, on_progress)
    assert cut and result.attempts == 2 and len(result.files) == 240
    assert all(f.verified for f in result.files)
    out = run_dir / "outputs"
    assert snapshot(out / "out") == snapshot(src)
    assert not [p for p in out.rglob("*") if "swjob-" in p.name], "a stage left behind"
