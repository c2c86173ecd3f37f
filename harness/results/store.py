"""Every verdict, in SQLite (embedded, one file), keyed by what decides it: the file's content
hash, the problem, the mode, the cases (the tests file's own hash, or the problem's default set),
the run's options and seed policy, the kit's commit and the device. A candidate already judged
under the same key is answered from here by the service unless a re-run is asked for. A timed
run's verdict holds its rows (`case_rows`, one per case, results/runs.csv's columns): what
`compare` reads.

Written by the judge's process only: a one-shot benchmark or leaderboard command's
(harness/results/recording.py), or the service's front, which its judges send their replies to. Never a
worker (its file system is read-only).
"""

import hashlib
import json
import sqlite3
import threading
import time
from pathlib import Path

from harness.shared.paths import RESULTS_DIR

DEFAULT_PATH = RESULTS_DIR / "verdicts.sqlite"
SCHEMA = """
CREATE TABLE IF NOT EXISTS verdicts (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL,
    time TEXT NOT NULL,
    submission_sha256 TEXT NOT NULL,
    submission TEXT,
    problem TEXT NOT NULL,
    mode TEXT NOT NULL,
    cases_sha256 TEXT NOT NULL,
    seed_policy TEXT NOT NULL,
    options TEXT NOT NULL,
    commit_id TEXT NOT NULL,
    device TEXT NOT NULL,
    passed INTEGER NOT NULL,
    exit_status INTEGER NOT NULL,
    score_ns REAL,
    document TEXT NOT NULL
);
CREATE INDEX IF NOT EXISTS verdicts_key ON verdicts (key);
CREATE INDEX IF NOT EXISTS verdicts_submission ON verdicts (submission_sha256);
CREATE TABLE IF NOT EXISTS case_rows (
    verdict_id INTEGER NOT NULL REFERENCES verdicts (id),
    position INTEGER NOT NULL,
    row TEXT NOT NULL,
    PRIMARY KEY (verdict_id, position)
);
"""


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def verdict_key(source: str, problem: str, mode: str, tests: str | None, options: dict, seed_policy: str,
                commit: str, device: str) -> dict:
    """The fields that decide a verdict, and `key`, their hash. Options left at their default
    (None or False) are not among them: a run that names one decides as one that does not."""
    options = {name: value for name, value in options.items() if value is not None and value is not False}
    fields = {"submission_sha256": sha256(source), "problem": problem, "mode": mode,
              "cases_sha256": sha256(tests) if tests else f"default:{mode}", "seed_policy": seed_policy,
              "options": json.dumps(options, sort_keys=True), "commit_id": commit, "device": device}
    return {**fields, "key": sha256(json.dumps(fields, sort_keys=True))}


class Store:
    def __init__(self, path: Path = DEFAULT_PATH):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._connection = sqlite3.connect(self.path, check_same_thread=False)
        self._connection.executescript(SCHEMA)
        self._lock = threading.Lock()

    def find(self, key: str) -> dict | None:
        """The latest verdict stored under `key`, as the judge's reply held it."""
        with self._lock:
            row = self._connection.execute("SELECT document, exit_status, time FROM verdicts WHERE key = ? ORDER BY id DESC LIMIT 1",
                                           (key,)).fetchone()
        if row is None:
            return None
        return {"document": json.loads(row[0]), "exit_status": row[1], "stored_at": row[2]}

    def add(self, fields: dict, submission: str, document: dict, exit_status: int, rows: list[dict] = ()) -> None:
        """One verdict; `rows`, a timed run's rows (results.rows_for_run), kept in their order."""
        with self._lock, self._connection:
            cursor = self._connection.execute(
                "INSERT INTO verdicts (key, time, submission_sha256, submission, problem, mode, cases_sha256, seed_policy, options,"
                " commit_id, device, passed, exit_status, score_ns, document) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (fields["key"], time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), fields["submission_sha256"], submission,
                 fields["problem"], fields["mode"], fields["cases_sha256"], fields["seed_policy"], fields["options"],
                 fields["commit_id"], fields["device"], int(bool(document.get("passed"))), exit_status,
                 document.get("score_ns"), json.dumps(document, default=str)))
            self._connection.executemany("INSERT INTO case_rows (verdict_id, position, row) VALUES (?, ?, ?)",
                                         [(cursor.lastrowid, position, json.dumps(row, default=str)) for position, row in enumerate(rows)])

    def rows(self, mode: str | None = None) -> list[dict]:
        """Every stored verdict, oldest first (for compare and exports)."""
        query = "SELECT time, submission_sha256, submission, problem, mode, commit_id, device, passed, exit_status, score_ns, document FROM verdicts"
        with self._lock:
            cursor = self._connection.execute(query + (" WHERE mode = ?" if mode else "") + " ORDER BY id", (mode,) if mode else ())
            names = [column[0] for column in cursor.description]
            return [dict(zip(names, row)) for row in cursor.fetchall()]

    def runs(self) -> list[list[dict]]:
        """Each timed run's rows, a list per verdict, oldest first: what `compare` shows and
        exports."""
        with self._lock:
            found = self._connection.execute("SELECT verdict_id, row FROM case_rows ORDER BY verdict_id, position").fetchall()
        runs: dict[int, list[dict]] = {}
        for verdict_id, row in found:
            runs.setdefault(verdict_id, []).append(json.loads(row))
        return list(runs.values())

    def close(self) -> None:
        self._connection.close()
