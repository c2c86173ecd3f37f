"""A one-shot benchmark or leaderboard run kept, by the judge's process once its cases are over:
its verdict and its rows in the store (harness/results/store.py), under the key the service would give
the same file, cases and options, and the same rows appended to the CSV export
(results/runs.csv by default)."""

import dataclasses
from pathlib import Path

from harness.judge import judge_user
from harness.judge.record import RunRecord
from harness.results.rows import append_rows, rows_for_run
from harness.results.store import Store, verdict_key


@dataclasses.dataclass(frozen=True)
class Recording:
    """Where a run is kept: the store, and the CSV its rows are appended to (None: none)."""

    store: Path | None
    csv: Path | None


def run_rows(record: RunRecord) -> list[dict]:
    """The timed run's rows (results/runs.csv's columns), none where no case reached a device or
    the official eval stopped."""
    if record.eval_stopped is not None or not any(result.device_name for result in record.results):
        return []
    options = record.options
    return rows_for_run(record.cases, record.results, record.works, record.mode, options.submission, record.ceilings, record.ceilings_note,
                        record.floor, options.problem, options.official)


def keep_run(recording: Recording, record: RunRecord, tests_file: Path | None, asked: dict, seed_policy: str,
             document: dict) -> list[tuple[Path, int]]:
    """`record`'s verdict, its --json `document` and its rows kept as `recording` says; `asked`:
    the run's options as the command line gave them (the service's names). The (path, rows)
    written."""
    rows = run_rows(record)
    if not rows:
        return []
    with judge_user.files_of_root():  # the kit's files root's, as they were, under a judge of its own user
        return _keep(recording, record, rows, tests_file, asked, seed_policy, document)


def _keep(recording: Recording, record: RunRecord, rows: list[dict], tests_file: Path | None, asked: dict, seed_policy: str,
          document: dict) -> list[tuple[Path, int]]:
    options = record.options
    written = []
    if recording.store is not None:
        fields = verdict_key(Path(options.submission).read_text(errors="replace"), options.problem.name, record.mode,
                             Path(tests_file).read_text() if tests_file else None, asked, seed_policy, rows[0]["commit"], rows[0]["device"])
        store = Store(recording.store)
        try:
            store.add(fields, str(options.submission), {**document, "exit_status": record.exit_status}, record.exit_status, rows)
        finally:
            store.close()
        written.append((recording.store, len(rows)))
    if recording.csv is not None:
        written.append((append_rows(rows, recording.csv), len(rows)))
    return written
