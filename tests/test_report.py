"""What a person reads of an error: no terminal escapes, no harness or importlib frames, the
user's own path; and a run that stops at an error two cases in a row raised."""

from pathlib import Path

from hypothesis import assume, given, settings, strategies as st

import harness
from harness.judge.jobs import CRASH, ERROR, FAIL, NOT_RUN, PASS, TIMEOUT, CaseResult
from harness.judge.modes import RepeatedError, RunOptions
from harness.problems.shapes import parse_cases
from harness.results.worker_text import as_the_user_wrote_it, strip_ansi, visible_boundaries, without_hidden_frames

HARNESS = Path(harness.__file__).resolve().parent
RUNNER_COPY = Path("/tmp/nvfp4-harness-x1/runner-y2/submission.py")
USER_FILE = Path("kernels/mine.py")

WORKER_TRACEBACK = f'''Traceback (most recent call last):
  File "{HARNESS}/runner/worker.py", line 57, in serve
    message = (wire.REPLY, getattr(calls, operation)(*arguments), clock.replaced(true_clock))
                           ^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^^
  File "{HARNESS}/runner/files.py", line 40, in import_submission
    module = importlib.import_module("submission")
  File "<frozen importlib._bootstrap>", line 1204, in _gcd_import
  File "<frozen importlib._bootstrap_external>", line 936, in exec_module
  File "{RUNNER_COPY}", line 12, in <module>
    table = build_table()
  File "{RUNNER_COPY}", line 9, in build_table
    raise RuntimeError("\\x1b[1;31mtile 96x80\\x1b[0m is not supported")
RuntimeError: \\x1b[1;31mtile 96x80\\x1b[0m is not supported
'''


def test_escapes_are_stripped_and_the_text_kept():
    assert strip_ansi("\x1b[1;31merror\x1b[0m: \x1b]8;;https://x\x07link\x1b]8;;\x07 done") == "error: link done"


def test_harness_and_importlib_frames_are_left_out_and_the_submissions_kept():
    shown = without_hidden_frames(WORKER_TRACEBACK)
    assert str(HARNESS) not in shown and "importlib" not in shown and "getattr(calls" not in shown
    assert shown.splitlines()[0] == "Traceback (most recent call last):"
    assert shown.count(str(RUNNER_COPY)) == 2 and "table = build_table()" in shown and "raise RuntimeError" in shown
    assert shown.rstrip().endswith("is not supported")



@given(st.lists(st.sampled_from(["\n", "\r", "\r\n", "\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029",
                                 "check: pass"]) | st.text(max_size=5), max_size=12).map("".join))
def test_a_workers_text_ends_lines_at_newlines_alone(text):
    """Every line boundary str.splitlines knows but "\\n" shows as its escape ("\\r\\n" as "\\n"), so
    that the text's lines are its "\\n"-separated ones however the report is read."""
    shown = visible_boundaries(text)
    assert all(piece.splitlines() == ([piece] if piece else []) for piece in shown.split("\n"))
    assert shown.count("\n") == text.count("\n")

def test_the_runner_copy_is_named_by_the_users_path():
    shown = as_the_user_wrote_it(WORKER_TRACEBACK, RUNNER_COPY, USER_FILE)
    assert "runner-y2" not in shown and "\x1b" not in shown
    assert f'File "{USER_FILE}", line 9, in build_table' in shown
    syntax_error = as_the_user_wrote_it("SyntaxError: expected ':' (submission.py, line 2)", RUNNER_COPY, USER_FILE)
    assert syntax_error == f"SyntaxError: expected ':' ({USER_FILE}, line 2)"


CASES = parse_cases("m: 128; n: 256; k: 256; l: 1; seed: 1\nm: 128; n: 256; k: 256; l: 1; seed: 2\n"
                    "m: 256; n: 256; k: 256; l: 1; seed: 1\nm: 128; n: 512; k: 256; l: 1; seed: 1\n")


def _judge(results, official=False, device="cpu"):
    repeated = RepeatedError("test", CASES, RunOptions(submission=USER_FILE, device=device, official=official))
    seen = []
    for index, result in enumerate(results):
        seen.append(repeated.not_run() or result)
        repeated.judged(index, seen[-1])
    found = repeated.found
    stops = [(found.kind, found.first_index, found.result.message, found.cause == "needs_gpu")] if found else []
    return [result.status for result in seen], stops


def test_the_same_error_on_two_shapes_in_a_row_stops_the_run():
    error = CaseResult(ERROR, "RuntimeError: illegal tile configuration")
    statuses, stops = _judge([CaseResult(FAIL, "mismatch"), error, error, error])
    assert statuses == [FAIL, ERROR, ERROR, NOT_RUN]
    assert stops == [("test", 1, error.message, False)]


def test_a_first_error_naming_cuda_on_the_cpu_stops_the_run_at_once():
    error = CaseResult(ERROR, "ValueError: a must be on a CUDA device, got cpu")
    assert _judge([error] * 4) == ([ERROR, NOT_RUN, NOT_RUN, NOT_RUN], [("test", 0, error.message, True)])
    # Later, or on a GPU, it is an error like any other.
    assert _judge([CaseResult(FAIL, "mismatch"), error, CaseResult(FAIL, "mismatch"), error])[1] == []
    assert _judge([error, CaseResult(FAIL, "mismatch")] * 2, device="cuda")[1] == []


def test_an_error_repeated_on_the_same_shape_or_differing_or_under_official_goes_on():
    error = CaseResult(ERROR, "RuntimeError: out of memory")
    assert _judge([error, error, CaseResult(ERROR, "RuntimeError: other"), error]) == ([ERROR] * 4, [])
    assert _judge([error] * 4, official=True) == ([ERROR] * 4, [])
    assert _judge([CaseResult(FAIL, "custom_kernel modified its input(s): b"), CaseResult(FAIL, "custom_kernel modified its input(s): a"),
                   CaseResult(FAIL, "custom_kernel modified its input(s): b"), CaseResult(FAIL, "output shape")]) == ([FAIL] * 4, [])


def test_errors_of_one_type_through_one_line_stop_the_run_whatever_their_messages():
    def raised(shape, origin):
        return CaseResult(ERROR, f"ValueError: no tile for {shape}", origin=origin)
    statuses, stops = _judge([raised("a", "ValueError at submission.py:9"), raised("b", "ValueError at submission.py:9"),
                              raised("c", "ValueError at submission.py:9"), raised("d", "ValueError at submission.py:9")])
    assert statuses == [ERROR, ERROR, ERROR, NOT_RUN] and stops[0][:2] == ("test", 1)
    # Another line of the file, or another type, is another failure.
    assert _judge([raised(s, f"ValueError at submission.py:{9 + i}") for i, s in enumerate("abcd")])[1] == []
    assert _judge([raised(s, t) for s, t in zip("abcd", ["KeyError at submission.py:9", "ValueError at submission.py:9"] * 2)])[1] == []


def test_the_same_failure_on_two_shapes_in_a_row_stops_the_run():
    def dtype(m):
        return CaseResult(FAIL, f"custom_kernel returned a torch.float32 tensor of shape ({m}, 256, 1), expected a torch.float16 tensor")
    statuses, stops = _judge([dtype(128), dtype(128), dtype(256), dtype(128)])
    assert statuses == [FAIL, FAIL, FAIL, NOT_RUN] and stops == [("test", 1, dtype(256).message, False)]
    assert _judge([dtype(128)] * 4, official=True) == ([FAIL] * 4, [])
    # Wrong values go on, however alike their messages.
    mismatch = CaseResult(FAIL, "mismatch found! custom implementation doesn't match reference: Number of mismatched elements: 7")
    assert _judge([mismatch] * 4) == ([FAIL] * 4, [])


def test_timeouts_on_two_shapes_in_a_row_stop_the_run_and_under_official_go_on():
    """A file that hangs on every shape holds the judge for two cases' limits, not for all of them."""
    def timeout(seconds):
        return CaseResult(TIMEOUT, f"no result within the {seconds} s time limit; worker killed (raise it with --timeout)")
    statuses, stops = _judge([timeout(180), timeout(180), timeout(180), timeout(180)])
    assert statuses == [TIMEOUT, TIMEOUT, TIMEOUT, NOT_RUN] and stops == [("test", 1, timeout(180).message, False)]
    # Either way of running out of time (the batch's GPU work, the calls) is one failure repeated.
    gpu_work = CaseResult(TIMEOUT, "the batch's GPU work did not end within the 180 s time limit; worker killed")
    assert _judge([CaseResult(PASS), timeout(180), gpu_work, timeout(180)])[0] == [PASS, TIMEOUT, TIMEOUT, NOT_RUN]
    assert _judge([timeout(180)] * 4, official=True) == ([TIMEOUT] * 4, [])
    # Not in a row: a shape too large for the limit is that shape's.
    assert _judge([timeout(180), CaseResult(PASS), timeout(180), CaseResult(PASS)])[1] == []


def test_crashes_by_one_signal_on_two_shapes_in_a_row_stop_the_run():
    def crash(signal, status):
        return CaseResult(CRASH, f"worker process died without a result: killed by signal {signal} (exit status {status})")
    statuses, stops = _judge([crash("SIGSEGV", -11), crash("SIGABRT", -6), crash("SIGABRT", -6), crash("SIGABRT", -6)])
    assert statuses == [CRASH, CRASH, CRASH, NOT_RUN] and stops == [("test", 1, crash("SIGABRT", -6).message, False)]
    assert _judge([crash("SIGSEGV", -11), crash("SIGABRT", -6)] * 2)[1] == []
    assert _judge([crash("SIGSEGV", -11)] * 4, official=True) == ([CRASH] * 4, [])


def test_the_stop_line_names_timeouts_and_crashes_for_what_they_are():
    from harness.judge.record import RepeatedFailure

    repeated = RepeatedError("test", CASES, RunOptions(submission=USER_FILE, device="cpu"))
    for index, result in enumerate([CaseResult(PASS), CaseResult(PASS), CaseResult(TIMEOUT, "no result"), CaseResult(TIMEOUT, "no result")]):
        repeated.judged(index, result)
    assert repeated.not_run().message == "not run: test 2 and test 3 ran out of time on different shapes"
    assert RepeatedFailure("test", 0, CaseResult(CRASH, "killed"), "alike").seen(str(USER_FILE)) == "test 0 and test 1 crashed alike"


def test_the_worker_names_the_type_and_the_submissions_line_an_exception_came_through(tmp_path):
    from harness.judge.isolation import _origin as judged_origin
    from harness.runner.worker import _origin as worker_origin

    def _origin(error):  # as the worker sends it and the judge reads it
        return judged_origin(worker_origin(error, str(tmp_path)))

    (tmp_path / "submission.py").write_text("def custom_kernel(data):\n    return helper(data)\n\ndef helper(data):\n    raise ValueError(data)\n")
    namespace = {}
    exec(compile((tmp_path / "submission.py").read_text(), str(tmp_path / "submission.py"), "exec"), namespace)
    try:
        namespace["custom_kernel"]("128x256")
    except ValueError as error:
        assert _origin(error) == "ValueError at submission.py:5"
    try:
        int("x")
    except ValueError as error:  # raised nowhere in the submission: the type alone
        assert _origin(error) == "ValueError"


def test_the_mismatch_numbers_are_named_in_what_the_judge_shows():
    from harness.results.worker_text import labelled_mismatches

    message = ("mismatch found! custom implementation doesn't match reference: Number of mismatched elements: 2 "
               "ERROR AT (0, 0, 0): -897.5 -949.5 ERROR AT (3, 1, 0): nan 2.0")
    shown = labelled_mismatches(message).splitlines()
    assert shown[1:] == ["ERROR AT (0, 0, 0): got -897.5, expected -949.5", "ERROR AT (3, 1, 0): got nan, expected 2.0"]
    assert labelled_mismatches("custom_kernel modified its input(s): b") == "custom_kernel modified its input(s): b"


def test_the_grouped_checks_group_is_named_and_its_reasons_read_as_the_others():
    from harness.results.worker_text import labelled_mismatches

    message = ("mismatch found! custom implementation doesn't match reference: 1 ['Number of mismatched elements: 7', "
               "'ERROR AT (0, 3, 0): -32768.0 15.5', 'ERROR AT (5, 7, 0): 1.0 2.0', '... and 5 more mismatched elements.']")
    assert labelled_mismatches(message).splitlines() == [
        "mismatch found! custom implementation doesn't match reference: group 1 (counting from 0): Number of mismatched elements: 7",
        "ERROR AT (0, 3, 0): got -32768.0, expected 15.5",
        "ERROR AT (5, 7, 0): got 1.0, expected 2.0 ... and 5 more mismatched elements."]


@settings(max_examples=200, deadline=None)
@given(group=st.integers(min_value=0, max_value=10**6), reasons=st.lists(st.text(max_size=40), max_size=6),
       tail=st.text(min_size=1, max_size=20))
def test_a_grouped_message_of_any_reasons_is_named_or_left_as_it_is(group, reasons, tail):
    """Whatever text the reasons hold (their numbers come from a submission's output), the group
    is named and the reasons follow it whole; a message not of that form (text after the list) is
    shown as it was. Nothing raises."""
    from harness.results.worker_text import labelled_mismatches

    assume(not any("ERROR AT" in text for text in (*reasons, tail)))
    prefix = "mismatch found! custom implementation doesn't match reference: "
    message = f"{prefix}{group} {reasons!r}"
    assert labelled_mismatches(message) == f"{prefix}group {group} (counting from 0): " + " ".join(reasons)
    untouched = f"{message} {tail}!"
    assert labelled_mismatches(untouched) == untouched


def test_a_copy_of_the_file_is_reported_under_the_name_it_was_given(tmp_path):
    """The service judges a copy in its own folder: the report names the request's name."""
    import io

    from rich.console import Console

    from harness.judge.modes import RunOptions
    from harness.judge.record import RunRecord
    from harness.results.console import Reporter
    from harness.problems.shapes import parse_cases

    copy = tmp_path / "nvfp4-judge-x" / "mine.py"
    console = Console(file=io.StringIO(), width=120, color_system=None)
    reporter = Reporter(console=console)
    options = RunOptions(submission=copy, device="cpu", shown_as="mine.py")
    reporter.run_started(RunRecord("test", parse_cases("m: 128; n: 256; k: 256; l: 1; seed: 1\n"), options))
    text = console.file.getvalue()
    assert "test mine.py for nvfp4_gemm on cpu" in text and "nvfp4-judge-x" not in text
    assert RunOptions(submission=copy).submission_name == str(copy)


def test_the_stop_line_says_what_was_seen_and_no_lint_for_a_runtime_error():
    """test 0 failed, test 1 and test 2 raised one error: the line names those two, claims
    nothing of test 0, and offers no `lint` (it does not run the file)."""
    import io

    from rich.console import Console

    from harness.judge.record import RepeatedFailure, RunRecord
    from harness.results.console import Reporter

    console = Console(file=io.StringIO(), width=200, color_system=None)
    reporter = Reporter(console=console)
    error = CaseResult(ERROR, "ValueError: no tile for 256", origin="ValueError at submission.py:9")
    options = RunOptions(submission=USER_FILE, device="cpu")
    repeated = RepeatedError("test", CASES, options)
    seen = []
    for index, result in enumerate([CaseResult(FAIL, "mismatch"), error, error, error]):
        seen.append(repeated.not_run() or result)
        repeated.judged(index, seen[-1])
    reason = seen[-1].message
    assert reason == "not run: test 1 and test 2 raised the same error (ValueError at kernels/mine.py:9) on different shapes"
    reporter.run_ended(RunRecord("test", CASES, options, results=seen, repeated=repeated.found))
    after = console.file.getvalue().split("check: fail", 1)[1]
    assert "every case" not in after and "lint" not in after and "test 1 and test 2 raised the same error" in after
    failed = CaseResult(FAIL, "output dtype torch.float32, expected torch.float16")
    assert RepeatedFailure("test", 0, failed, "alike").seen(str(USER_FILE)) == "test 0 and test 1 failed alike"


def test_a_failure_repeated_by_the_last_two_cases_claims_no_cases_after_them():
    import io

    from rich.console import Console

    from harness.judge.record import RunRecord
    from harness.results.console import Reporter

    error = CaseResult(ERROR, "ValueError: no tile for 256", origin="ValueError at submission.py:9")
    options = RunOptions(submission=USER_FILE, device="cpu")
    for results, claims_more in (([CaseResult(FAIL, "mismatch"), CaseResult(PASS), error, error], False),
                                 ([CaseResult(PASS), error, error, CaseResult(NOT_RUN, "not run")], True)):
        repeated = RepeatedError("test", CASES, options)
        for index, result in enumerate(results[:3] if claims_more else results):
            repeated.judged(index, result)
        console = Console(file=io.StringIO(), width=200, color_system=None)
        Reporter(console=console).run_ended(RunRecord("test", CASES, options, results=results, repeated=repeated.found))
        said = console.file.getvalue()
        assert "raised the same error" in said and ("the cases after them would meet it too" in said) == claims_more
