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

import json
import sqlite3
from pathlib import Path
from typing import Any

from engine.report.views import RunView
from engine.state.paths import state_dir

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


class Store:
    def __init__(self, path: Path | None = None, *, any_thread: bool = False) -> None:
        """`any_thread`: used by a thread other than the one opening it (never by two)."""
        self.path = path or state_dir() / "runs.sqlite"
        self._db = sqlite3.connect(
            self.path, isolation_level=None, check_same_thread=not any_thread
        )
        self._db.execute("PRAGMA journal_mode=WAL")
        # no fsync per commit (the console's loop waited on it behind a busy disk): in WAL
        # mode a commit survives the process being killed however it dies, and only a
        # power loss can take back the last ones (SQLite: "synchronous=NORMAL")
        self._db.execute("PRAGMA synchronous=NORMAL")
        self._db.executescript(_SCHEMA)
        self._parsed: dict[str, RunView] = {}  # the last read's summaries → views, in order
        self._views_key: tuple[int, int, int] | None = None

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
        known: a FAILED run still tearing down its node when its owner died is adopted."""
        summary = view.model_copy(update={"timeline": [], "transfers": {}, "live": False})
        while not self._saved(view, summary, recovery, next_attempt):
            pass  # another process held the lock past the busy timeout: wait again

    def _saved(
        self,
        view: RunView,
        summary: RunView,
        recovery: dict[str, Any] | None,
        next_attempt: tuple[str, dict[str, Any]] | None,
    ) -> bool:
        """One try at the write; False when another process's write lock outlasted the busy
        timeout (a long `swjob` write, a backup, a sqlite3 shell). The write is never
        dropped for that: a run whose end is missing from the index looks unfinished to
        every adopter, and the writer thread raising it left the run without its driver."""
        try:
            with self._db:
                self._db.execute("BEGIN IMMEDIATE")
                if next_attempt is not None:
                    run_id, attempt = next_attempt
                    self._db.execute(
                        "INSERT OR IGNORE INTO next_attempts(previous, run_id, attempt) "
                        "VALUES (?, ?, ?)",
                        (view.run_id, run_id, json.dumps(attempt)),
                    )
                self._upsert(view, summary, recovery)
        except sqlite3.OperationalError as exc:
            if exc.sqlite_errorcode & 0xFF != sqlite3.SQLITE_BUSY:
                raise
            return False
        return True

    def _upsert(self, view: RunView, summary: RunView, recovery: dict[str, Any] | None) -> None:
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
                summary.model_dump_json(),
                json.dumps(recovery) if recovery is not None else None,
            ),
        )

    def views(self, limit: int = 500) -> list[RunView]:
        """The newest `limit` runs. The console asks ten times a second; with 500 runs,
        reading them took ~5 ms and parsing them ~37 ms each time. So nothing is read
        while the index is unchanged (no write of ours, sqlite's `data_version` for any
        other process's), and a summary whose text is unchanged is not parsed again
        (views are frozen: sharing one is safe)."""
        (version,) = self._db.execute("PRAGMA data_version").fetchone()
        key = (limit, version, self._db.total_changes)
        if key != self._views_key:
            rows = self._db.execute(
                "SELECT view FROM runs ORDER BY created DESC LIMIT ?", (limit,)
            ).fetchall()
            known, self._parsed = self._parsed, {}
            for (text,) in rows:
                self._parsed[text] = known.get(text) or RunView.model_validate_json(text)
            self._views_key = key
        return list(self._parsed.values())

    def find(self, run_ref: str) -> RunView | None:
        """A run by id or unique id prefix."""
        rows = self._db.execute(
            "SELECT view FROM runs WHERE substr(run_id, 1, ?) = ? ORDER BY created DESC",
            (len(run_ref), run_ref),
        ).fetchall()
        exact = [r for r in rows if RunView.model_validate_json(r[0]).run_id == run_ref]
        chosen = exact or (rows if len(rows) == 1 else [])
        return RunView.model_validate_json(chosen[0][0]) if chosen else None

    def recovery(self, run_id: str) -> dict[str, Any] | None:
        """The recovery facts recorded for one run (None when it has none)."""
        row = self._db.execute("SELECT recovery FROM runs WHERE run_id = ?", (run_id,)).fetchone()
        return json.loads(row[0]) if row and row[0] else None

    def unfinished(self) -> list[tuple[RunView, dict[str, Any]]]:
        rows = self._db.execute(
            "SELECT view, recovery FROM runs WHERE terminal = 0 ORDER BY created"
        ).fetchall()
        return [(RunView.model_validate_json(v), json.loads(r or "{}")) for v, r in rows]

    def unfinished_run(self, run_id: str) -> tuple[RunView, dict[str, Any]] | None:
        """The run's summary and recovery facts, if it exists and has not finished."""
        row = self._db.execute(
            "SELECT view, recovery FROM runs WHERE run_id = ? AND terminal = 0", (run_id,)
        ).fetchone()
        if row is None:
            return None
        return RunView.model_validate_json(row[0]), json.loads(row[1] or "{}")

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
        if row is None:
            return None
        view, recovery, attempt = row
        return RunView.model_validate_json(view), json.loads(recovery or "{}"), json.loads(attempt)
