"""The engine's durable run index (sqlite in the user's state dir).

It answers "what runs exist" for history (`swjob runs`, the board), "which runs
did not finish" for recovery after a crash, and "which attempt comes next" in a job's
chain of attempts (engine/run/attempts.py). Each write is its own transaction, so a
`kill -9` at any point leaves the last completed write: the end of an attempt and the
record of its successor are one write, so no crash can keep the one without the other.
The full truth of a run is its landing directory; this index only points at it and
caches its summary.
"""

from __future__ import annotations

import contextlib
import json
import logging
import sqlite3
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from engine.report.views import RunView
from engine.state import ownership, spill
from engine.state.locked import StateNotWritten, into_wal, not_written
from engine.state.paths import state_dir
from engine.state.planted import SQLITE_SIDECARS, refuse_planted

log = logging.getLogger("swjob.engine")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    run_id TEXT PRIMARY KEY,
    job_name TEXT NOT NULL,
    created TEXT NOT NULL,
    terminal INTEGER NOT NULL,
    view TEXT NOT NULL,
    recovery TEXT
);
CREATE INDEX IF NOT EXISTS runs_created ON runs(created);
CREATE TABLE IF NOT EXISTS next_attempts (
    previous TEXT PRIMARY KEY,
    run_id TEXT NOT NULL UNIQUE,
    attempt TEXT NOT NULL
);
"""


def _view(text: str) -> RunView | None:
    """A row's summary; None when it cannot be read (written by a broken or other swjob):
    one such row is skipped and said (`Store.unreadable`), never the end of every reader."""
    try:
        return RunView.model_validate_json(text)
    except ValueError:
        return None


_NOT_SUMMED = {"timeline", "transfers", "live"}
"""A view's fields its index row leaves out (engine/report/views.py gives their defaults)."""

WRITE_WAIT_S = 2.0
"""How long a write waits for another process's write lock (a normal write holds it for
milliseconds) before the row is kept for later and the failure said."""


@dataclass(frozen=True)
class _Row:
    """A save not yet in the index: the run's latest summary, its recovery facts and the
    attempt after it (kept across later saves of the run until written)."""

    view: RunView
    recovery: dict[str, Any] | None
    next_attempt: tuple[str, dict[str, Any]] | None

    def to_json(self) -> str:
        view = json.loads(self.view.model_dump_json())
        return json.dumps({"view": view, "recovery": self.recovery, "next": self.next_attempt})

    @classmethod
    def from_json(cls, text: str) -> _Row:
        row = json.loads(text)
        following = row["next"]
        if not isinstance(row["recovery"], dict | None) or not (
            following is None or (isinstance(following[0], str) and isinstance(following[1], dict))
        ):  # what the index holds of them, recovery and adoption read as these types
            raise TypeError("its recovery facts or next attempt are not a row's")
        return cls(
            RunView.model_validate(row["view"]),
            row["recovery"],
            (following[0], following[1]) if following else None,
        )


def _stale(kept: _Row, indexed: RunView | None) -> bool:
    """A kept row is stale once the index holds a later row of its run, or its end: a
    later owner carried the run on (from its landing dir) while the file could not be
    written in. Applied, it made an ended run unfinished again."""
    return indexed is not None and (
        indexed.finished is not None or indexed.updated > kept.view.updated
    )


_UNREADABLE = (ValueError, KeyError, TypeError, IndexError)
"""What reading a kept file that is not a row raises (spill.Unreadable is a ValueError)."""


def _kept_row(index: Path, run_id: str) -> _Row | None:
    """The run's row kept beside `index`, None when it has none (or it was written in
    meanwhile); one of _UNREADABLE when its file is not a row of that run."""
    text = spill.read(index, run_id)
    if text is None:
        return None
    row = _Row.from_json(text)
    if row.view.run_id != run_id:
        raise ValueError(f"it holds run {row.view.run_id}")
    return row


def _merge(rows: dict[str, _Row], row: _Row) -> None:
    """`row` in `rows` as the run's latest; the recovery facts and the next attempt of an
    earlier row of the run are kept when `row` has none."""
    kept = rows.get(row.view.run_id)
    if kept is not None:
        recovery = row.recovery if row.recovery is not None else kept.recovery
        row = _Row(row.view, recovery, row.next_attempt or kept.next_attempt)
    rows[row.view.run_id] = row


def run_unfinished(run_id: str, path: Path | None = None) -> bool:
    """Does the run index list `run_id` as not yet ended? Read-only, for another process's
    run (engine/providers/slots.py: may its node still exist?); True when the index cannot
    be read, since a node may then exist; False for a run it does not list.

    A run's row kept beside the index (engine/state/spill.py) counts when it is newer than
    the index's: a run left running while the index was held is known only by it, and
    its slot read free once its process had gone — a second node was rented beside it."""
    path = path or state_dir() / "runs.sqlite"
    uri = f"{path.absolute().as_uri()}?mode=ro"
    try:
        with contextlib.closing(sqlite3.connect(uri, WRITE_WAIT_S, uri=True)) as db:
            found = db.execute(
                "SELECT terminal, view FROM runs WHERE run_id = ?", (run_id,)
            ).fetchone()
    except sqlite3.Error:
        return path.exists()
    with contextlib.suppress(*_UNREADABLE):  # not a row (the index's opener says so)
        kept = _kept_row(path, run_id)
        if kept is not None:
            indexed = _view(found[1]) if found else None
            if not _stale(kept, indexed):
                return kept.view.finished is None
    return found is not None and not found[0]


class Store:
    def __init__(self, path: Path | None = None, *, any_thread: bool = False) -> None:
        """`any_thread`: used by a thread other than the one opening it (never by two)."""
        self.path = path or state_dir() / "runs.sqlite"
        refuse_planted(self.path, SQLITE_SIDECARS)
        self._db = sqlite3.connect(
            self.path, WRITE_WAIT_S, isolation_level=None, check_same_thread=not any_thread
        )
        try:
            into_wal(self._db, WRITE_WAIT_S)
            # no fsync per commit (the console's loop waited on it behind a busy disk): in
            # WAL mode a commit survives the process being killed however it dies, and only
            # a power loss can take back the last ones (SQLite: "synchronous=NORMAL")
            self._db.execute("PRAGMA synchronous=NORMAL")
            self._db.executescript(_SCHEMA)
        except sqlite3.Error as exc:  # not yet in WAL mode and held, or its disk full
            self._db.close()
            raise not_written(self.path, exc) from None
        self._pending: dict[str, _Row] = {}  # saves not yet written, by run
        self._queued: dict[str, _Row] = {}  # saves not yet tried (`queue`), by run
        self._pending_lock = threading.Lock()  # `unwritten` is asked from another thread
        self.failing = False  # the last write failed: saves do not wait until one succeeds
        self._parsed: dict[str, RunView] = {}  # the last read's summaries → views, in order
        self.unreadable: list[str] = []  # run ids of the rows the last `views` could not read
        self._views_key: tuple[int, int, int] | None = None
        with contextlib.suppress(StateNotWritten):  # still held: the next open, or scan
            self.write_in_kept()

    def close(self) -> None:
        self._db.close()

    def save(
        self,
        view: RunView,
        recovery: dict[str, Any] | None = None,
        next_attempt: tuple[str, dict[str, Any]] | None = None,
    ) -> None:
        """Record the run's latest summary (timeline left out: it lives in events.jsonl)
        and, with `next_attempt` (its run id and attempt record), the attempt that follows
        it, in the same transaction.

        A run is over once it has finished (its teardown done), not when its verdict is
        known: a FAILED run still tearing down its node when its owner died is adopted.

        The wait is bounded: when another process holds the write lock past WRITE_WAIT_S
        (a `swjob` mid-write, a backup, a sqlite3 shell left in a transaction) or the
        write fails (a full disk), the row is kept and StateNotWritten raised; `retry`,
        or the next save, writes it. Waiting for good held up the writer thread and every
        file behind it: no run could act, end or be quit. Once a write has failed, saves
        do not wait again until one succeeds: each would hold up its caller anew."""
        self.queue(view, recovery, next_attempt)
        self.commit_queued()

    def queue(
        self,
        view: RunView,
        recovery: dict[str, Any] | None = None,
        next_attempt: tuple[str, dict[str, Any]] | None = None,
    ) -> None:
        """`save`'s first half: the row is queued, not written; `commit_queued` writes every
        row queued since in one transaction (the writer thread's saves of one batch: a
        hundred runs at once saved ~16 rows each, one commit apiece). A queued row is not
        `unwritten`: nothing failed to write it yet."""
        with self._pending_lock:
            _merge(self._queued, _Row(view, recovery, next_attempt))

    def commit_queued(self) -> None:
        """`save`'s second half, for every row queued since the last: see `save`."""
        with self._pending_lock:
            for row in self._queued.values():
                _merge(self._pending, row)
            self._queued.clear()
        self.retry(0.0 if self.failing else None)

    def retry(self, wait_s: float | None = None) -> None:
        """Write the rows kept by failed saves, in one transaction, waiting at most
        `wait_s` (WRITE_WAIT_S) for another process's lock; raises StateNotWritten if
        they still cannot be written."""
        with self._pending_lock:
            rows = list(self._pending.values())
        if not rows:
            return
        try:
            self._commit(rows, WRITE_WAIT_S if wait_s is None else wait_s)
        except StateNotWritten:
            self.failing = True
            raise
        self.failing = False
        with self._pending_lock:
            for row in rows:
                if self._pending.get(row.view.run_id) is row:
                    del self._pending[row.view.run_id]

    def unwritten(self) -> list[str]:
        """The runs whose latest summary is kept, not yet in the index."""
        with self._pending_lock:
            return list(self._pending)

    def keep_unwritten(self) -> Path:
        """The rows still kept, written to files beside the index for the next process
        that opens it (engine/state/spill.py): this one is ending. Returns their folder."""
        with self._pending_lock:
            rows = {run_id: row.to_json() for run_id, row in self._pending.items()}
        return spill.keep(self.path, rows)

    def write_in_kept(self) -> None:
        """Write in the rows an earlier process kept beside the index, each under its
        run's lease (a run with a live owner is left: that owner wrote its row in before
        it could drive it). A file older than the run's row, or kept of a run the index
        shows ended, is stale and removed unapplied: its run was adopted from the index
        while the file could not be written in (the index held), and carried on. Raises
        StateNotWritten while the index is held: the files stay for the next try."""
        for run_id in spill.kept(self.path):
            try:
                lease = ownership.acquire(run_id)
            except OSError as exc:  # no lock file can be made (its disk full): left for later
                log.warning("run %s: its kept index row waits: %s", run_id, exc)
                continue
            if lease is None:
                continue
            ended = False
            try:
                if (row := self._kept_row(run_id)) is None:
                    continue
                if _stale(row, indexed := self._indexed(run_id)):
                    spill.remove(self.path, run_id)  # a later owner carried it on since
                    ended = indexed is not None and indexed.finished is not None
                    continue
                self._commit([row], 0.0)
                spill.remove(self.path, run_id)
                ended = row.view.finished is not None
            finally:
                lease.release(finished=ended)  # an ended run's lock file goes, as at its end

    def adoptable_run(self, run_id: str) -> tuple[RunView, dict[str, Any]] | None:
        """For the holder of the run's lease: its summary and recovery facts as its last
        owner left them, if it has not finished. That is its kept row when the index could
        not take it (held as the owner ended: it holds an older row, or none): adopted from
        the index's row, a step the kept row says had started was sent again (the job run
        twice), and the node's handle and re-attach facts were an older owner's."""
        indexed, saved = self._indexed(run_id), self.recovery(run_id) or {}
        kept = self._kept_row(run_id)
        if kept is not None and not _stale(kept, indexed):
            indexed, saved = kept.view, kept.recovery if kept.recovery is not None else saved
        if indexed is None or indexed.finished is not None:
            return None
        return indexed, saved

    def kept_view(self, run_id: str) -> RunView | None:
        """A run known only by its kept row (the index held since it was kept), by its
        exact id: `swjob attach` carries such a run on, as the closing note tells."""
        row = self._kept_row(run_id) if run_id in spill.kept(self.path) else None
        return row.view if row is not None else None

    def _kept_row(self, run_id: str) -> _Row | None:
        """The run's kept row, None when it has none or it is unreadable (said, left)."""
        try:
            return _kept_row(self.path, run_id)
        except _UNREADABLE as exc:
            where = spill.folder(self.path) / f"{run_id}{spill.SUFFIX}"
            log.warning("%s: unreadable, left as it is: %s", where, exc)
            return None

    def _indexed(self, run_id: str) -> RunView | None:
        """The run's summary as the index holds it now."""
        found = self._db.execute("SELECT view FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return _view(found[0]) if found else None

    def _commit(self, rows: list[_Row], wait_s: float) -> None:
        """Write `rows` in one transaction, waiting at most `wait_s` for another process's
        write lock; StateNotWritten (naming the file) if they cannot be written. The
        connection's reads wait as long as ever afterwards (a write's short wait left them
        failing at once on a moment's lock)."""
        self._db.execute(f"PRAGMA busy_timeout = {int(wait_s * 1000)}")
        try:
            with self._db:
                self._db.execute("BEGIN IMMEDIATE")
                for row in rows:
                    self._write(row)
        except sqlite3.Error as exc:
            raise not_written(self.path, exc) from None
        finally:
            self._db.execute(f"PRAGMA busy_timeout = {int(WRITE_WAIT_S * 1000)}")

    def _write(self, row: _Row) -> None:
        if row.next_attempt is not None:
            run_id, attempt = row.next_attempt
            self._db.execute(
                "INSERT OR IGNORE INTO next_attempts(previous, run_id, attempt) VALUES (?, ?, ?)",
                (row.view.run_id, run_id, json.dumps(attempt)),
            )
        self._upsert(row.view, row.recovery)

    def _upsert(self, view: RunView, recovery: dict[str, Any] | None) -> None:
        """The run's row: its summary is the view without what only its live copy or its
        events.jsonl carry (the timeline, transfers, `live`: read back as their defaults)."""
        self._db.execute(
            "INSERT INTO runs(run_id, job_name, created, terminal, view, recovery) "
            "VALUES (?, ?, ?, ?, ?, ?) ON CONFLICT(run_id) DO UPDATE SET "
            "terminal=excluded.terminal, view=excluded.view, "
            "recovery=COALESCE(excluded.recovery, runs.recovery)",
            (
                view.run_id,
                view.job_name,
                view.created.isoformat(),
                int(view.finished is not None),
                view.model_dump_json(exclude=_NOT_SUMMED),
                json.dumps(recovery) if recovery is not None else None,
            ),
        )

    def views(self, limit: int = 500) -> list[RunView]:
        """The newest `limit` runs. The console asks ten times a second; with 500 runs,
        reading them took ~5 ms and parsing them ~37 ms each time. So nothing is read
        while the index is unchanged (no write of ours, sqlite's `data_version` for any
        other process's), and a summary whose text is unchanged is not parsed again
        (views are frozen: sharing one is safe). A row that cannot be read is left out,
        its run id in `unreadable`."""
        (version,) = self._db.execute("PRAGMA data_version").fetchone()
        key = (limit, version, self._db.total_changes)
        if key != self._views_key:
            rows = self._db.execute(
                "SELECT run_id, view FROM runs ORDER BY created DESC LIMIT ?", (limit,)
            ).fetchall()
            known, self._parsed = self._parsed, {}
            unreadable = []
            for run_id, text in rows:
                if (view := known.get(text) or _view(text)) is None:
                    unreadable.append(run_id)
                else:
                    self._parsed[text] = view
            self._note_unreadable(unreadable)
            self._views_key = key
        return list(self._parsed.values())

    def _note_unreadable(self, run_ids: list[str]) -> None:
        new = [r for r in run_ids if r not in self.unreadable]
        if new:
            log.warning("run index: unreadable rows skipped: %s", ", ".join(new))
        self.unreadable = run_ids

    def find(self, run_ref: str) -> RunView | None:
        """A run by id, by a unique start of it, or by the unique random part that ends it,
        which is what the console's id column shows (`6e80cbe3` of `20261204-061502-6e80cbe3`):
        a user copies the id they see. None when no run, or more than one, matches."""
        found = self.matching(run_ref)
        exact = [v for v in found if v.run_id == run_ref]
        chosen = exact or (found if len(found) == 1 else [])
        return chosen[0] if chosen else None

    def matching(self, run_ref: str) -> list[RunView]:
        """Every run `run_ref` may name, newest first: those whose id starts with it, else
        those whose random part ends it. More than one is what an ambiguous reference is
        told it matches."""
        found = self._where("substr(run_id, 1, ?) = ?", (len(run_ref), run_ref))
        if not found and run_ref:
            found = self._where("substr(run_id, ?) = ?", (-len(run_ref) - 1, f"-{run_ref}"))
        return found

    def short_id_taken(self, short_id: str) -> bool:
        """Whether a run's id already ends in `-short_id`: a new run never shares the
        short id the console and `swjob runs` show, so that id always names one run."""
        ending = (-len(short_id) - 1, f"-{short_id}")
        return bool(
            self._db.execute("SELECT 1 FROM runs WHERE substr(run_id, ?) = ?", ending).fetchone()
        )

    def _where(self, where: str, args: tuple[Any, ...]) -> list[RunView]:
        rows = self._db.execute(
            f"SELECT view FROM runs WHERE {where} ORDER BY created DESC", args
        ).fetchall()
        return [v for (text,) in rows if (v := _view(text)) is not None]  # unreadable: none

    def recovery(self, run_id: str) -> dict[str, Any] | None:
        """The recovery facts recorded for one run (None when it has none)."""
        row = self._db.execute("SELECT recovery FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return json.loads(row[0]) if row and row[0] else None

    def unfinished(self) -> list[tuple[RunView, dict[str, Any]]]:
        rows = self._db.execute(
            "SELECT view, recovery FROM runs WHERE terminal = 0 ORDER BY created"
        ).fetchall()
        return [(v, json.loads(r or "{}")) for text, r in rows if (v := _view(text)) is not None]

    def unfinished_run(self, run_id: str) -> tuple[RunView, dict[str, Any]] | None:
        """The run's summary and recovery facts, if it exists and has not finished."""
        row = self._db.execute(
            "SELECT view, recovery FROM runs WHERE run_id = ? AND terminal = 0", (run_id,)
        ).fetchone()
        view = _view(row[0]) if row is not None else None
        return None if view is None else (view, json.loads(row[1] or "{}"))

    def next_run(self, previous: str) -> str | None:
        """The run id recorded for the attempt after `previous` (started or not)."""
        row = self._db.execute(
            "SELECT run_id FROM next_attempts WHERE previous = ?", (previous,)
        ).fetchone()
        return row[0] if row else None

    def not_started(self) -> list[str]:
        """Next attempts recorded but not started (their owner died in between)."""
        rows = self._db.execute(
            "SELECT run_id FROM next_attempts WHERE run_id NOT IN (SELECT run_id FROM runs)"
        ).fetchall()
        return [row[0] for row in rows]

    def recorded_attempt(
        self, run_id: str
    ) -> tuple[RunView, dict[str, Any], dict[str, Any]] | None:
        """For a next attempt recorded but not started: the attempt before it (summary and
        recovery facts) and the record of the attempt to start; None when it has started."""
        row = self._db.execute(
            "SELECT r.view, r.recovery, n.attempt FROM next_attempts n "
            "JOIN runs r ON r.run_id = n.previous WHERE n.run_id = ? "
            "AND NOT EXISTS (SELECT 1 FROM runs s WHERE s.run_id = n.run_id)",
            (run_id,),
        ).fetchone()
        view = _view(row[0]) if row is not None else None
        if row is None or view is None:
            return None
        return view, json.loads(row[1] or "{}"), json.loads(row[2])
