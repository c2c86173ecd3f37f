"""A benchmark run kept (harness/results/recording.py): its verdict and rows in the store, the same rows
appended to the CSV export, `compare` showing it from the store; the key the service would give
the same file. One test builds the run without judging; the e2e one runs the command."""

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path

import pandas
import pytest
from click.testing import CliRunner

from harness.judge.jobs import FAIL, PASS, CaseResult
from harness.judge.modes import RunOptions
from harness.judge.record import RunRecord
from harness.problems import PROBLEMS
from harness.problems.shapes import parse_cases
from harness.results.compare import compare_command, runs_table, stored_runs
from harness.results.recording import Recording, keep_run
from harness.results.store import verdict_key
from harness.shared.stats import calculate_stats

ROOT = Path(__file__).resolve().parent.parent
SUBMISSION = ROOT / "tests" / "fixtures" / "torch_submission.py"
TESTS = "m: 128; n: 256; k: 256; l: 1; seed: 1111\nm: 128; n: 512; k: 256; l: 1; seed: 2222\n"


def cpu_run(tmp_path) -> tuple[RunRecord, RunOptions, Path]:
    tests_file = tmp_path / "tiny.txt"
    tests_file.write_text(TESTS)
    options = RunOptions(submission=SUBMISSION, problem=PROBLEMS["nvfp4_gemm"], device="cpu", max_repeats=3)
    record = RunRecord("benchmark", parse_cases(TESTS), options, exit_status=112)
    record.results = [CaseResult(PASS, stats=calculate_stats([41000.0, 43000.0, 42000.0]), host_ns=40000.0, device_name="cpu"),
                      CaseResult(FAIL, "mismatch found! custom implementation doesn't match reference", device_name="cpu")]
    record.works = [PROBLEMS["nvfp4_gemm"].work(case.args) for case in record.cases]
    return record, options, tests_file


def compare_output(*args) -> str:
    result = CliRunner().invoke(compare_command, [*args, "--no-reference"], env={"COLUMNS": "250"})
    assert result.exit_code == 0, result.output
    return result.output


def test_a_kept_run_lands_in_the_store_and_the_export_and_compare_shows_it(tmp_path):
    record, options, tests_file = cpu_run(tmp_path)
    recording = Recording(store=tmp_path / "verdicts.sqlite", csv=tmp_path / "runs.csv")
    asked = {"official": False, "strict": False, "timeout_s": None, "max_repeats": 3, "baselines": False, "measure_ceilings": False}
    written = keep_run(recording, record, tests_file, asked, "fixed", {"command": "benchmark", "passed": False})
    assert written == [(recording.store, 2), (recording.csv, 2)]

    with sqlite3.connect(recording.store) as connection:
        (verdict,) = connection.execute("SELECT key, mode, device, passed, exit_status, options, submission FROM verdicts").fetchall()
    # The key the service gives the same file, cases and options: a run either made is the other's.
    service_key = verdict_key(SUBMISSION.read_text(), "nvfp4_gemm", "benchmark", TESTS, {"max_repeats": 3}, "fixed",
                              stored_runs(recording.store)[0][0]["commit"], "cpu")
    assert verdict[0] == service_key["key"]
    assert verdict[1:] == ("benchmark", "cpu", 0, 112, json.dumps({"max_repeats": 3}), str(SUBMISSION))

    (rows,) = stored_runs(recording.store)
    assert [row["status"] for row in rows] == ["pass", "fail"] and rows[0]["mean_ns"] == 42000.0
    assert runs_table([rows]).to_csv(index=False) == pandas.read_csv(recording.csv).to_csv(index=False)

    export = tmp_path / "export.csv"
    compare_output("--store", str(recording.store), "--export", str(export))
    assert export.read_text() == recording.csv.read_text()
    shown = compare_output("--store", str(recording.store))
    assert "nvfp4_gemm on cpu" in shown and "42.000 µs" in shown and "128x512x256" in shown and "fail" in shown


def test_no_record_and_a_run_that_reached_no_device_keep_nothing(tmp_path):
    record, options, tests_file = cpu_run(tmp_path)
    for result in record.results:
        result.device_name = ""
    recording = Recording(store=tmp_path / "verdicts.sqlite", csv=tmp_path / "runs.csv")
    assert keep_run(recording, record, tests_file, {}, "fixed", {}) == []
    assert not recording.store.exists() and not recording.csv.exists()


@pytest.mark.e2e
def test_a_cpu_benchmark_is_kept_and_compared(tmp_path):
    tests_file = tmp_path / "tiny.txt"
    tests_file.write_text(TESTS.splitlines()[0] + "\n")
    store, csv = tmp_path / "verdicts.sqlite", tmp_path / "runs.csv"
    env = {key: value for key, value in os.environ.items() if not key.startswith("POPCORN_")}

    def harness(*args):
        return subprocess.run([sys.executable, "-m", "harness", *args], cwd=ROOT, env=env, capture_output=True, text=True, timeout=600)

    result = harness("benchmark", str(tests_file), "--device", "cpu", "--max-repeats", "3", "--submission", str(SUBMISSION),
                     "--store", str(store), "--results", str(csv))
    assert result.returncode == 0, result.stdout + result.stderr
    assert f"run kept in {os.path.relpath(store, ROOT)} (1 row)" in result.stdout
    assert f"run kept in {os.path.relpath(csv, ROOT)} (1 row)" in result.stdout
    (rows,) = stored_runs(store)
    assert rows[0]["status"] == "pass" and rows[0]["device"] == "cpu" and rows[0]["mean_ns"] > 0
    assert runs_table([rows]).to_csv(index=False) == pandas.read_csv(csv).to_csv(index=False)
    shown = harness("compare", "--store", str(store), "--no-reference")
    assert shown.returncode == 0 and "nvfp4_gemm on cpu" in shown.stdout and "128x256x256" in shown.stdout


@pytest.mark.e2e
def test_the_services_timed_verdict_is_kept_with_its_rows(tmp_path):
    from harness.results.store import Store
    from harness.service.front import Service
    from harness.service.judges import LocalJudge

    service = Service([LocalJudge("cpu")], Store(tmp_path / "verdicts.sqlite"), candidate_dirs=[SUBMISSION.parent])
    service.start()
    try:
        candidate = service.submit(path=str(SUBMISSION), mode="benchmark", tests=TESTS.splitlines()[0] + "\n", max_repeats=3)
        done = service.get(candidate, wait_s=300)
    finally:
        service.close()
    assert done["state"] == "done" and done["passed"] is True, done["report"]
    (rows,) = stored_runs(tmp_path / "verdicts.sqlite")
    assert [(row["shape"], row["status"], row["submission"]) for row in rows] == [("128x256x256", "pass", SUBMISSION.name)]
    assert rows[0]["mean_ns"] == pytest.approx(done["document"]["cases"][0]["stats"]["mean_ns"])
