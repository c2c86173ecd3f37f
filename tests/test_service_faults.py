"""Whose fault a judge's reply is (harness/service/faults.py): a run the judge stopped without a
verdict on the file is never a verdict, whatever cases ran before it stopped."""

from harness.judge.exits import EXIT_FAIL, EXIT_INFRASTRUCTURE, EXIT_REJECTED
from harness.service.faults import INFRASTRUCTURE, REJECTED, VERDICT, classify

PASSED = {"index": 0, "status": "pass", "phases_s": {"start": 1.0, "import": 0.5, "calls": 0.1}}
NOT_RUN = {"index": 1, "status": "not run", "phases_s": {}}


def reply(status, cases):
    return {"exit_status": status, "document": {"cases": cases, "error": None}}


def test_a_worker_that_did_not_start_after_a_passing_case_is_the_machines_fault():
    kind, why = classify(reply(EXIT_INFRASTRUCTURE, [PASSED, NOT_RUN]))
    assert kind == INFRASTRUCTURE and str(EXIT_INFRASTRUCTURE) in why


def test_a_file_over_the_size_limit_is_a_rejected_request():
    assert classify(reply(EXIT_REJECTED, []))[0] == REJECTED


def test_a_failed_case_after_the_file_was_imported_is_a_verdict():
    failed = dict(PASSED, status="fail")
    assert classify(reply(EXIT_FAIL, [failed])) == (VERDICT, None)
