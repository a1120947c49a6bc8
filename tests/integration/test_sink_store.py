"""The sink's two halves against a real S3 server (SeaweedFS): the node's upload of the
declared outputs (changed files only, resumable, verified, manifest last) and the
download every reader uses, which checks each file against the manifest. An upload cut
mid-file resumes: tests/integration/test_sink_resume.py."""

from __future__ import annotations

import os
from pathlib import Path

import obstore
import pytest

from agent.sink import upload as up
from agent.sink.download import download, read_manifest
from agent.sink.parts import PARTS, part_key
from agent.sink.store import describe, open_store
from agent.sink.upload import Uploader
from agent.transfer.safety import open_for_read
from tests.support.s3 import Bucket


def tree(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.is_symlink()
    }


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    work = tmp_path / "work"
    (work / "ckpt").mkdir(parents=True)
    (work / "metrics.jsonl").write_text('{"loss": 1}\n')
    (work / "ckpt" / "step_1.pt").write_bytes(os.urandom(6 * 1024 * 1024 + 17))
    (work / "ckpt" / "latest.pt").symlink_to("step_1.pt")
    (work / "empty.txt").write_bytes(b"")
    return work


async def test_outputs_land_whole_and_only_changes_go_again(
    s3: Bucket, workdir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(up, "SMALL", 1024 * 1024)  # the checkpoint goes in parts
    monkeypatch.setattr(up, "PART", 5 * 1024 * 1024)
    target = s3.target(patterns=["metrics.jsonl", "ckpt", "empty.txt", "absent.bin"])
    uploader = Uploader(target, workdir)
    report = await uploader.upload(final=True)
    assert report.manifest.complete and report.manifest.missing == ["absent.bin"]
    assert report.sent_files == 3 and report.manifest.links == {"ckpt/latest.pt": "step_1.pt"}
    meter = uploader.meter  # parts counted as read, each file once when done
    assert (
        (meter.files_done, meter.bytes_done)
        == (3, meter.bytes_total)
        == (3, 6 * 1024 * 1024 + 17 + 12)
    )

    store = open_store(target)
    manifest = await read_manifest(store)
    assert manifest is not None and manifest.complete
    landed = tmp_path / "landed"
    assert await download(store, manifest, landed) == {}
    assert tree(landed) == tree(workdir)
    assert os.readlink(landed / "ckpt" / "latest.pt") == "step_1.pt"

    assert (await uploader.upload(final=True)).sent_files == 0  # nothing changed
    (workdir / "metrics.jsonl").write_text('{"loss": 0.5}\n')
    again = await Uploader(target, workdir).upload(final=True)  # a new agent: resumes
    assert again.sent_files == 1  # the changed file: the big one's parts are all held
    assert again.manifest.parts == {"ckpt/step_1.pt": up.PART}

    (workdir / "ckpt" / "step_1.pt").write_bytes(os.urandom(3 * 1024 * 1024))  # shorter
    await Uploader(target, workdir).upload(final=True)
    parts = await obstore.list(store, PARTS + "/").collect_async()
    assert [m["path"] for m in parts] == [part_key("ckpt/step_1.pt", 0)]  # its old tail went
    manifest = await read_manifest(store)
    assert manifest is not None and await download(store, manifest, tmp_path / "again") == {}
    assert tree(tmp_path / "again") == tree(workdir)


async def test_a_file_that_is_not_the_manifests_is_refused(
    s3: Bucket, workdir: Path, tmp_path: Path
) -> None:
    target = s3.target(patterns=["metrics.jsonl"])
    await Uploader(target, workdir).upload(final=True)
    store = open_store(target)
    await obstore.put_async(store, "outputs/metrics.jsonl", b"tampered\n")
    manifest = await read_manifest(store)
    assert manifest is not None
    failed = await download(store, manifest, tmp_path / "landed")
    assert "verification failed" in failed["metrics.jsonl"]
    assert not (tmp_path / "landed" / "metrics.jsonl").exists()


async def test_a_file_that_will_not_go_is_named_with_its_reason_the_rest_goes(
    s3: Bucket, workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A log the job writes to each time the node opens it (the worst moment) is tried
    again at its new size, then named in the manifest's not_landed; the manifest is not
    complete; every other file landed."""
    monkeypatch.setattr(up, "BACKOFF_S", 0.01)
    busy = workdir / "live.log"
    busy.write_text("start\n")

    def open_while_written(root: Path, path: str) -> int:
        fd = open_for_read(root, path)
        if path == "live.log":
            with busy.open("a") as log:
                log.write("more\n")
        return fd

    monkeypatch.setattr(up, "open_for_read", open_while_written)
    (workdir / "escape").symlink_to("/etc/passwd")  # a link out of the workdir: refused
    target = s3.target(patterns=["live.log", "metrics.jsonl", "escape"])
    report = await Uploader(target, workdir).upload(final=True)
    manifest = report.manifest
    assert manifest.not_landed == {"live.log": up.CHANGED} and not manifest.complete
    assert set(manifest.files) == {"metrics.jsonl"} and manifest.links == {}
    [refused] = manifest.refused
    assert "'escape'" in refused and "leaves the root" in refused
    assert busy.read_text().count("more") == up.TRIES  # each try saw the file anew


async def test_store_errors_are_one_clear_line(s3: Bucket) -> None:
    wrong = s3.target().model_copy(update={"secret_access_key": "not-the-key"})
    with pytest.raises(Exception) as denied:
        await obstore.head_async(open_store(wrong, retries=0), "x")
    assert describe(denied.value).startswith("access denied")
    assert "not-the-key" not in describe(denied.value)
    nowhere = s3.target().model_copy(update={"bucket": "no-such-bucket"})
    with pytest.raises(Exception) as missing:
        await obstore.list(open_store(nowhere, retries=0)).collect_async()
    assert describe(missing.value, "no-such-bucket") == (
        "no such bucket 'no-such-bucket' at the sink's endpoint"
    )
    down = s3.target().model_copy(update={"endpoint": "http://127.0.0.1:9"})
    with pytest.raises(Exception) as unreachable:
        await obstore.head_async(open_store(down, retries=0), "x")
    assert describe(unreachable.value) == "sink endpoint unreachable (connection failed)"
