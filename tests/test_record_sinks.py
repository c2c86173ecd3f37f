"""One record, many sinks: the POPCORN lines and the people's report, told of a run as it goes,
and the --json document, made from its record once it is over, agree on every case's verdict
and the run's, whatever the messages a submission made its cases fail with."""

import io
import json
import os
import re
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from harness.judge.exits import EXIT_FAIL, EXIT_PASS
from harness.judge.jobs import CRASH, ERROR, FAIL, NOT_RUN, PASS, TIMEOUT, CaseResult
from harness.judge.modes import RunOptions
from harness.judge.record import Listeners, RunRecord
from harness.problems.shapes import parse_cases
from harness.results.console import Reporter
from harness.results.document import run_document
from harness.results.popcorn import PopcornLines, PopcornLog

SUBMISSION = Path(__file__).resolve().parent / "fixtures" / "torch_submission.py"
CASES = parse_cases("m: 128; n: 256; k: 256; l: 1; seed: 1\nm: 256; n: 256; k: 256; l: 1; seed: 2\n"
                    "m: 128; n: 512; k: 256; l: 1; seed: 3\n")
LINE = re.compile(r"[\w.-]+: .*")


def run_through_the_sinks(results: list[CaseResult], official: bool) -> tuple[list[str], str, dict]:
    """The events of a test run with `results` told to the POPCORN lines and the report, then the
    record's document: (the lines, the report's text, the document)."""
    record = RunRecord("test", CASES[:len(results)], RunOptions(submission=SUBMISSION, device="cpu", official=official))
    console = Console(file=io.StringIO(), width=200, color_system=None)
    with tempfile.TemporaryFile("w+", encoding="utf-8") as lines_file:
        log = PopcornLog(os.dup(lines_file.fileno()))
        listener = Listeners(PopcornLines(log), Reporter(console=console))
        listener.run_started(record)
        for index, (case, result) in enumerate(zip(record.cases, results)):
            listener.case_started(index, case)
            record.results.append(result)
            listener.case_judged(index, case, result)
        record.exit_status = EXIT_PASS if record.passed else EXIT_FAIL
        listener.run_ended(record)
        log.close()
        lines_file.seek(0)
        lines = lines_file.read().splitlines()
    return lines, console.file.getvalue(), run_document(record)


statuses = st.sampled_from([PASS, FAIL, ERROR, CRASH, TIMEOUT, NOT_RUN])


@settings(max_examples=60, deadline=None)
@given(verdicts=st.lists(st.tuples(statuses, st.text(max_size=80)), min_size=1, max_size=len(CASES)),
       official=st.booleans())
def test_the_lines_the_report_and_the_document_of_one_record_agree(verdicts, official):
    results = [CaseResult(status, "" if status == PASS else message) for status, message in verdicts]
    lines, report, document = run_through_the_sinks(results, official)

    assert all(LINE.fullmatch(line) for line in lines), lines
    values = dict(line.split(": ", 1) for line in lines)
    passed = all(status == PASS for status, _ in verdicts)
    assert values["test-count"] == str(len(verdicts)) and values["check"] == ("pass" if passed else "fail")
    assert document["passed"] is passed and document["exit_status"] == (EXIT_PASS if passed else EXIT_FAIL)
    assert f"check: {'pass' if passed else 'fail'}" in report
    for index, (status, message) in enumerate(verdicts):
        entry = document["cases"][index]
        assert entry["status"] == status and entry["competition_message"] == results[index].message
        assert values[f"test.{index}.spec"] == CASES[index].spec
        assert values[f"test.{index}.status"] == ("pass" if status == PASS else "fail")
        assert (f"test.{index}.error" in values) is (status != PASS)
    assert document["stop_reason"] == (next((message for status, message in verdicts if status == NOT_RUN), "") or None)


@pytest.mark.e2e
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="no CUDA device: a timed run's figures on a GPU need one")
def test_a_gpu_benchmarks_lines_document_and_stored_rows_are_one_records(tmp_path):
    """A benchmark on the GPU with POPCORN_FD, --json and a store: each case's mean is the same
    number in the POPCORN lines, the document and the stored row, and the document has the
    ceilings and the sandbox the run had."""
    cases = tmp_path / "bench.txt"
    cases.write_text("m: 128; n: 4096; k: 7168; l: 1; seed: 1111\nm: 128; n: 7168; k: 2048; l: 1; seed: 1111\n")
    store, export = tmp_path / "verdicts.sqlite", tmp_path / "runs.csv"
    read_end, write_end = os.pipe()
    process = subprocess.Popen([sys.executable, "-m", "harness", "benchmark", str(cases), "--max-repeats", "5", "--json",
                                "--store", str(store), "--results", str(export), "--submission", str(SUBMISSION)],
                               cwd=SUBMISSION.parents[2], env={**os.environ, "POPCORN_FD": str(write_end)},
                               pass_fds=(write_end,), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    os.close(write_end)
    with os.fdopen(read_end) as reader:
        values = dict(line.split(": ", 1) for line in reader.read().splitlines())
    stdout, stderr = process.communicate(timeout=600)
    assert process.returncode == 0, stderr
    document = json.loads(stdout)
    assert document["passed"] is True and values["check"] == "pass" and document["ceilings"] is not None
    assert document["sandbox"] and document["device_name"] != "cpu"
    with sqlite3.connect(store) as connection:
        rows = [json.loads(row) for (row,) in connection.execute("SELECT row FROM case_rows ORDER BY position")]
        (stored,) = [json.loads(text) for (text,) in connection.execute("SELECT document FROM verdicts")]
    assert stored == document
    for index, case in enumerate(document["cases"]):
        mean_ns = case["stats"]["mean_ns"]
        assert float(values[f"benchmark.{index}.mean"]) == mean_ns == rows[index]["mean_ns"]
        assert case["sol_ns"] == rows[index]["sol_ns"]
