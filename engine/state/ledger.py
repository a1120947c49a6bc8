"""The instance ledger: a durable trace of every rented node, so none can leak unseen.

A provider writes its *intent* to create an instance before the create call and the
instance id right after, so a crash at any point leaves a row that `swjob gc` can
follow: an open row with an id names an instance to destroy; an open row without
one says "an instance labelled for this run may exist". Rows are closed when the
instance is confirmed destroyed. A destroy the API accepted but has not yet confirmed
(Vast's destroy is eventually consistent) is marked `destroy_requested_at` and the row
stays open until the instance is seen gone. The row's created/destroyed times and
price are the durable truth of what a node cost: cost survives any engine restart.
`created_at` is when the instance began to bill, by the rule the node's own meter keeps
too (agent/budget.billing_start): the provider's reported start, else the intent's time.
Every write is its own committed transaction (sqlite in autocommit mode), and a
connection is opened per call, so the ledger is safe across threads and across
processes (the TUI and a `swjob gc` at once). A write waits at most WRITE_WAIT_S for
another process's lock, then raises StateNotWritten naming the file: a provider must not
create an instance it could not record, and must not lose one it created.
"""

from __future__ import annotations

import sqlite3
import time
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path

from engine.state.locked import into_wal, not_written
from engine.state.paths import state_dir
from engine.state.planted import SQLITE_SIDECARS, refuse_planted

_SCHEMA = """
CREATE TABLE IF NOT EXISTS instances (
    entry INTEGER PRIMARY KEY AUTOINCREMENT,
    run_id TEXT NOT NULL,
    provider TEXT NOT NULL,
    pool TEXT,
    label TEXT NOT NULL,
    instance_id TEXT,
    intent_at REAL NOT NULL,
    created_at REAL,
    destroyed_at REAL,
    price_per_hour REAL,
    destroy_requested_at REAL
)
"""
WRITE_WAIT_S = 2.0
"""How long a write waits for another process's write lock (its writes take milliseconds):
a rental not yet recorded fails after it, and a teardown (quitting) waits no longer."""
_ADDED_COLUMNS = {"price_per_hour": "REAL", "destroy_requested_at": "REAL"}  # since v0.1


@dataclass(frozen=True)
class LedgerEntry:
    entry: int
    run_id: str
    provider: str
    pool: str | None
    label: str
    instance_id: str | None
    intent_at: float
    created_at: float | None
    destroyed_at: float | None
    price_per_hour: float | None = None
    destroy_requested_at: float | None = None


_COLUMNS = (
    "entry, run_id, provider, pool, label, instance_id, intent_at, created_at, destroyed_at,"
    " price_per_hour, destroy_requested_at"
)


def billed_from(start: float | None, entry: LedgerEntry) -> float | None:
    """A node's billing start, given `start` (what its handle says) and its ledger row: the
    row's when the handle has none or still the intent's (the row takes the provider's
    reported start first: a handle saved a moment before may lag), else the handle's own
    (a warm claim counts from the claim)."""
    if start in (None, entry.intent_at) and entry.created_at is not None:
        return entry.created_at
    return start


class Ledger:
    def __init__(self, path: Path | None = None) -> None:
        self.path = path or state_dir() / "ledger.sqlite"
        refuse_planted(self.path, SQLITE_SIDECARS)
        try:
            with closing(self._connect()) as db:
                into_wal(db, WRITE_WAIT_S)
                db.execute(_SCHEMA)
                have = {row[1] for row in db.execute("PRAGMA table_info(instances)")}
                for column, kind in _ADDED_COLUMNS.items():
                    if column not in have:  # a ledger written by an older swjob
                        db.execute(f"ALTER TABLE instances ADD COLUMN {column} {kind}")
        except sqlite3.Error as exc:  # not yet in WAL mode and held, or its disk full
            raise not_written(self.path, exc) from None

    def _connect(self) -> sqlite3.Connection:
        # isolation_level=None: autocommit, each statement is durable on return.
        return sqlite3.connect(self.path, timeout=WRITE_WAIT_S, isolation_level=None)

    def _write(self, sql: str, args: tuple[object, ...]) -> int:
        refuse_planted(self.path, SQLITE_SIDECARS)  # before each write: opened per call
        try:
            with closing(self._connect()) as db:
                cursor = db.execute(sql, args)
                return int(cursor.lastrowid or 0)
        except sqlite3.Error as exc:
            raise not_written(self.path, exc) from None

    def record_intent(
        self,
        run_id: str,
        provider: str,
        label: str,
        *,
        pool: str | None = None,
        at: float | None = None,
    ) -> int:
        """Before the create call (at epoch `at`, now by default: the pre-create time a
        node's meter counts from until its provider reports a start of its own). Returns
        the entry to complete with `record_created`."""
        return self._write(
            "INSERT INTO instances (run_id, provider, pool, label, intent_at) VALUES (?,?,?,?,?)",
            (run_id, provider, pool, label, time.time() if at is None else at),
        )

    def record_created(
        self, entry: int, instance_id: str, *, price_per_hour: float | None = None
    ) -> float:
        """The instance exists. Its `created_at` is when it began to bill by the one rule
        both meters keep (agent/budget.billing_start): its intent's time, the moment before
        its create was sent, until its provider reports its own start (`record_started`).
        Returns that time (epoch seconds)."""
        self._write(
            "UPDATE instances SET instance_id=?, created_at=intent_at, price_per_hour=?"
            " WHERE entry=?",
            (instance_id, price_per_hour, entry),
        )
        with closing(self._connect()) as db:
            query = "SELECT created_at FROM instances WHERE entry=?"
            (born,) = db.execute(query, (entry,)).fetchone()
        return float(born)

    def record_started(self, entry: int, at: float) -> None:
        """The provider reported when the instance started (Vast's `start_date`): it bills,
        for both meters, from then."""
        self._write("UPDATE instances SET created_at=? WHERE entry=?", (at, entry))

    def record_destroy_requested(self, entry: int) -> None:
        """The API accepted the destroy; the row stays open until the instance is gone."""
        self._write(
            "UPDATE instances SET destroy_requested_at=COALESCE(destroy_requested_at, ?)"
            " WHERE entry=?",
            (time.time(), entry),
        )

    def record_destroyed(self, entry: int) -> None:
        self._write("UPDATE instances SET destroyed_at=? WHERE entry=?", (time.time(), entry))

    def open_entries(self) -> list[LedgerEntry]:
        """Rows whose instance is not known to be destroyed, oldest first."""
        with closing(self._connect()) as db:
            rows = db.execute(
                f"SELECT {_COLUMNS} FROM instances WHERE destroyed_at IS NULL ORDER BY entry"
            ).fetchall()
        return [LedgerEntry(*row) for row in rows]

    def asked_for(self, run_id: str, pool: str) -> bool:
        """Whether a node was ever asked for `run_id` on `pool` (a row, open or closed: every
        create is preceded by its intent here; a row of no recorded pool counts). The rows
        of a pool the run fell over from (engine/run/fallover.py) do not."""
        return any(e.pool in (pool, None) for e in self.entries_of(run_id))

    def entries_of(self, run_id: str) -> list[LedgerEntry]:
        """Every row of one run, open or closed, oldest first (what its nodes cost)."""
        with closing(self._connect()) as db:
            rows = db.execute(
                f"SELECT {_COLUMNS} FROM instances WHERE run_id=? ORDER BY entry", (run_id,)
            ).fetchall()
        return [LedgerEntry(*row) for row in rows]
