"""The landing dir follows the node's listing (engine/run/reconcile.py): what the job
deleted or turned into another kind of thing since a live sync landed it goes; what it
still has as the same kind stays; links are removed, never followed."""

from __future__ import annotations

from pathlib import Path

from agent.transfer.walk import Entry
from engine.run.reconcile import reconcile


def test_deleted_and_retyped_paths_go_and_the_rest_stays(tmp_path: Path) -> None:
    landing, elsewhere = tmp_path / "outputs", tmp_path / "elsewhere"
    (landing / "was_dir").mkdir(parents=True)
    (landing / "was_dir" / "x").write_text("x")
    (landing / "was_file").write_text("f")
    (landing / "gone").write_text("g")
    (landing / "kept").mkdir()
    (landing / "kept" / "same").write_text("s")
    (landing / "kept" / ".same.swjob-part").write_text("partial")
    elsewhere.mkdir()
    (elsewhere / "precious").write_text("p")
    (landing / "link").symlink_to(elsewhere, target_is_directory=True)
    listing = [
        Entry("was_dir", "file", 1),
        Entry("was_file/inner", "file", 1),
        Entry("kept/same", "file", 1),
        Entry("link", "file", 1),
    ]
    removed = reconcile(landing, listing)
    assert sorted(removed) == ["gone", "link", "was_dir", "was_file"]
    assert sorted(str(p.relative_to(landing)) for p in landing.rglob("*")) == ["kept", "kept/same"]
    assert (elsewhere / "precious").read_text() == "p"  # the link was not followed


def test_nothing_to_do_on_a_missing_landing_dir(tmp_path: Path) -> None:
    assert reconcile(tmp_path / "none", [Entry("a", "file")]) == []


def test_the_manifest_says_when_outputs_keeps_an_earlier_synced_version(tmp_path: Path) -> None:
    """A file that did not land in the final pull while a live sync's copy of it is still
    in outputs/: the manifest says so, as it lists what is there."""
    from agent.transfer.receiver import Receiver
    from engine.run.manifest import manifest_entries

    (tmp_path / "synced").write_text("v1")
    receiver = Receiver(tmp_path, per_file=True)
    receiver.failed.update({"synced": "changed while read", "never": "vanished"})
    entries = [Entry("synced", "file", 2), Entry("never", "file", 2)]
    by_path = {e.path: e for e in manifest_entries(entries, receiver, str)}
    receiver.close()
    assert by_path["synced"].synced_earlier and not by_path["synced"].verified
    assert not by_path["never"].synced_earlier
