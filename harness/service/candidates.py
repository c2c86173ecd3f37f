"""The service's candidates in SQLite: every candidate, its request, state and reply, from the
moment the front accepts it, in the same file as the verdicts (harness/results/store.py) and in WAL mode
so that a reader never waits for the front's writes.

What this table gives the front (harness/service/front.py):

- ids that are never reused: `c<N>`, N an AUTOINCREMENT key, which SQLite never hands out twice
  in a file, across restarts included;
- a queue that survives the front: a candidate is `queued` until a judge takes it (`take`),
  `running` while it runs and `done` or `cancelled` once it ends; a front started again on the
  same file takes the queued ones in their order and puts the running ones back in the queue
  (`recover`), noting it in their replies;
- a source kept only while it may still be judged: a candidate that ends loses it (`finish`).
"""

import json
import re
import sqlite3
import threading
import time
from pathlib import Path

QUEUED, RUNNING, DONE, CANCELLED = "queued", "running", "done", "cancelled"
ENDED = (DONE, CANCELLED)
STATES = (QUEUED, RUNNING, DONE, CANCELLED)
PAGE_MAX = 1000
REQUEST_FIELDS = ("submission_sha256", "problem", "mode", "cases_sha256", "options")
# `c` and the table's key as candidate_id writes it: ASCII digits without a leading zero, and
# fewer than 19 of them, so that it fits SQLite's 64-bit INTEGER.
ID_PATTERN = re.compile(r"c[1-9][0-9]{0,17}")

SCHEMA = """
CREATE TABLE IF NOT EXISTS candidates (
    number INTEGER PRIMARY KEY AUTOINCREMENT,
    idempotency_key TEXT UNIQUE,
    verdict_key TEXT NOT NULL,
    sha256 TEXT NOT NULL,
    name TEXT NOT NULL,
    problem TEXT NOT NULL,
    mode TEXT NOT NULL,
    state TEXT NOT NULL,
    request TEXT,
    fields TEXT NOT NULL,
    submitted_at REAL NOT NULL,
    started_at REAL,
    finished_at REAL,
    judge TEXT,
    cached INTEGER NOT NULL DEFAULT 0,
    attempts INTEGER NOT NULL DEFAULT 0,
    notes TEXT NOT NULL DEFAULT '[]',
    error_class TEXT,
    reply TEXT
);
CREATE INDEX IF NOT EXISTS candidates_state ON candidates (state, number);
CREATE INDEX IF NOT EXISTS candidates_sha256 ON candidates (sha256);
CREATE INDEX IF NOT EXISTS candidates_verdict_key ON candidates (verdict_key, state);
"""
COLUMNS = ("number", "idempotency_key", "verdict_key", "sha256", "name", "problem", "mode", "state", "request", "fields",
           "submitted_at", "started_at", "finished_at", "judge", "cached", "attempts", "notes", "error_class", "reply")


class KeyTaken(ValueError):
    """An entry's idempotency key names another request: `index`, the entry's place in its batch."""

    def __init__(self, index: int, message: str):
        self.index = index
        super().__init__(message)


def same_request(fields: dict, other: dict) -> bool:
    """Whether two candidates' key fields (harness/results/store.py verdict_key) ask for the same run: the
    same file, problem, mode, cases and options. The front's commit, device and seed policy are
    not the request's: a request sent again to a front started again on another commit is the
    same request."""
    return all(fields.get(name) == other.get(name) for name in REQUEST_FIELDS)


def candidate_id(number: int) -> str:
    return f"c{number}"


def number_of(identifier: str) -> int | None:
    """The table's key of an id `c<N>` as candidate_id writes it; None for any other text (another
    spelling of the same number included: `c01`, other scripts' digits)."""
    if not ID_PATTERN.fullmatch(identifier):
        return None
    return int(identifier[1:])


class Candidates:
    """The table, through one connection guarded by a lock (the front's threads share it)."""

    def __init__(self, path: Path | str):
        if str(path) != ":memory:":
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._connection = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None)
        self._connection.execute("PRAGMA journal_mode=WAL")
        self._connection.execute("PRAGMA busy_timeout=10000")
        self._connection.executescript(SCHEMA)
        self._lock = threading.Lock()

    def close(self) -> None:
        with self._lock:
            self._connection.close()

    def _rows(self, query: str, arguments=()) -> list[dict]:
        with self._lock:
            cursor = self._connection.execute(query, arguments)
            return [_decoded(dict(zip(COLUMNS, row))) for row in cursor.fetchall()]

    def _write(self, query: str, arguments=()) -> int:
        with self._lock:
            return self._connection.execute(query, arguments).rowcount

    # -- in ------------------------------------------------------------------------------------
    def add(self, entries: list[dict]) -> list[str]:
        """Every entry in one transaction, or none of them: their ids, in order. An entry holds
        `request`, `fields` (the store's key fields), and, for one answered at once, `state`,
        `cached`, `reply` and `error_class`. An entry whose `idempotency_key` is already taken
        gets the earlier candidate's id and adds nothing; one taken by another request (an earlier
        entry of the same batch, or a request the front accepted meanwhile) raises KeyTaken and
        adds none."""
        now = time.time()
        ids = []
        in_batch = {}  # idempotency key -> (index, fields) of the entry this batch adds under it
        with self._lock:
            self._connection.execute("BEGIN IMMEDIATE")
            try:
                for entry in entries:
                    request, fields = entry["request"], entry["fields"]
                    key = entry.get("idempotency_key")
                    if key is not None and key in in_batch:
                        earlier, earlier_fields = in_batch[key]
                        if not same_request(earlier_fields, fields):
                            raise KeyTaken(len(ids), f"idempotency key {key!r} names item {earlier} of this batch, another request")
                        ids.append(ids[earlier])
                        continue
                    if key is not None:
                        found = self._connection.execute("SELECT number, fields FROM candidates WHERE idempotency_key = ?",
                                                         (key,)).fetchone()
                        if found is not None and not same_request(json.loads(found[1]), fields):
                            raise KeyTaken(len(ids), f"idempotency key {key!r} names {candidate_id(found[0])}, another request")
                        if found is not None:
                            ids.append(candidate_id(found[0]))
                            continue
                        in_batch[key] = (len(ids), fields)
                    state = entry.get("state", QUEUED)
                    cursor = self._connection.execute(
                        "INSERT INTO candidates (idempotency_key, verdict_key, sha256, name, problem, mode, state, request, fields,"
                        " submitted_at, finished_at, cached, error_class, reply) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (key, fields["key"], fields["submission_sha256"], request["name"], request["problem"], request["mode"], state,
                         None if state in ENDED else json.dumps(request), json.dumps(fields), now,
                         now if state in ENDED else None, int(bool(entry.get("cached"))), entry.get("error_class"),
                         json.dumps(entry["reply"], default=str) if entry.get("reply") is not None else None))
                    ids.append(candidate_id(cursor.lastrowid))
                self._connection.execute("COMMIT")
            except BaseException:
                self._connection.execute("ROLLBACK")
                raise
        return ids

    # -- judging -------------------------------------------------------------------------------
    def take(self, judge: str, modes: tuple[str, ...] | None = None) -> dict | None:
        """The oldest queued candidate (of `modes`, where given), now `running` on `judge`."""
        where = "state = 'queued'" + (f" AND mode IN ({', '.join('?' * len(modes))})" if modes else "")
        with self._lock:
            self._connection.execute("BEGIN IMMEDIATE")
            try:
                row = self._connection.execute(f"SELECT number FROM candidates WHERE {where} ORDER BY number LIMIT 1",
                                               tuple(modes or ())).fetchone()
                if row is not None:
                    self._connection.execute("UPDATE candidates SET state = 'running', started_at = ?, judge = ?, attempts = attempts + 1"
                                             " WHERE number = ?", (time.time(), judge, row[0]))
                self._connection.execute("COMMIT")
            except BaseException:
                self._connection.execute("ROLLBACK")
                raise
        return None if row is None else self.get(candidate_id(row[0]))

    def began(self, identifier: str) -> None:
        """A running candidate's run began on its judge now (it may wait for its device after
        it is taken: harness/service/lanes.py)."""
        self._write("UPDATE candidates SET started_at = ? WHERE number = ? AND state = 'running'", (time.time(), number_of(identifier)))

    def finish(self, identifier: str, state: str, reply: dict, error_class: str) -> bool:
        """The candidate ended (`done` or `cancelled`) with `reply`; its source let go. False
        where it had ended already (cancelled while it ran, say)."""
        return self._write("UPDATE candidates SET state = ?, reply = ?, error_class = ?, finished_at = ?, request = NULL"
                           " WHERE number = ? AND state NOT IN ('done', 'cancelled')",
                           (state, json.dumps(reply, default=str), error_class, time.time(), number_of(identifier))) == 1

    def requeue(self, identifier: str, note: str) -> bool:
        """A running candidate back in the queue, in its place (the oldest first), `note` kept."""
        with self._lock:
            row = self._connection.execute("SELECT notes FROM candidates WHERE number = ? AND state = 'running'",
                                           (number_of(identifier),)).fetchone()
            if row is None:
                return False
            notes = json.dumps([*json.loads(row[0]), note])
            self._connection.execute("UPDATE candidates SET state = 'queued', judge = NULL, started_at = NULL, notes = ?"
                                     " WHERE number = ?", (notes, number_of(identifier)))
        return True

    def recover(self, note: str) -> int:
        """Every candidate left running by a front that ended, queued again: how many."""
        running = self._rows("SELECT * FROM candidates WHERE state = 'running'")
        return sum(self.requeue(candidate_id(row["number"]), note) for row in running)

    # -- out -----------------------------------------------------------------------------------
    def get(self, identifier: str) -> dict | None:
        number = number_of(identifier)
        if number is None:
            return None
        found = self._rows("SELECT * FROM candidates WHERE number = ?", (number,))
        return found[0] if found else None

    def page(self, state: str | None = None, since: str | None = None, sha256: str | None = None,
             limit: int = 100) -> list[dict]:
        """Candidates after the id `since` (all from the first without it), oldest first, of
        `state` and of the file `sha256` where given; `limit` at most."""
        conditions, arguments = ["number > ?"], [number_of(since) or 0 if since else 0]
        if state is not None:
            conditions.append("state = ?")
            arguments.append(state)
        if sha256 is not None:
            conditions.append("sha256 = ?")
            arguments.append(sha256)
        arguments.append(min(max(limit, 1), PAGE_MAX))
        return self._rows(f"SELECT * FROM candidates WHERE {' AND '.join(conditions)} ORDER BY number LIMIT ?", arguments)

    def latest_reply(self, verdict_key: str) -> dict | None:
        """The reply of the last candidate judged (not answered from the store) to a verdict
        under `verdict_key`: where a cached answer's report comes from."""
        found = self._rows("SELECT * FROM candidates WHERE verdict_key = ? AND state = 'done' AND cached = 0"
                           " AND error_class = 'verdict' ORDER BY number DESC LIMIT 1", (verdict_key,))
        return found[0] if found else None

    def counts(self) -> dict[str, int]:
        with self._lock:
            found = dict(self._connection.execute("SELECT state, count(*) FROM candidates GROUP BY state").fetchall())
        return {state: found.get(state, 0) for state in STATES}

    def counts_by_class(self) -> dict[str, int]:
        with self._lock:
            return dict(self._connection.execute("SELECT error_class, count(*) FROM candidates WHERE error_class IS NOT NULL"
                                                 " GROUP BY error_class").fetchall())


def _decoded(row: dict) -> dict:
    row["id"] = candidate_id(row["number"])
    for column in ("request", "fields", "reply", "notes"):
        if row[column] is not None:
            row[column] = json.loads(row[column])
    row["cached"] = bool(row["cached"])
    return row
