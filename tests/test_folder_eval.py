"""`--official` on a problem folder: the folder's own eval run whole in a worker's sandbox
(harness/judge/folder_eval.py), what it writes read through the gate (harness/judge/claims.py
`eval_lines`, `eval_stats`) into the run's record. The settling of a run's results from the
eval's lines is tested here on lines as an eval, or a submission forging them, could write; the
runs themselves (a sandboxed process each) are e2e tests, on tests/fixtures/reference_kernels'
practice folder, whose small eval runs on the CPU."""

import base64
import functools
import array
import math
import os
import shutil
import signal
import socket
import threading
import time
from pathlib import Path

import click
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from harness import api
from harness.judge import claims, folder_eval
from harness.judge.exits import EXIT_EVAL_STOPPED, EXIT_FAIL, EXIT_INFRASTRUCTURE, EXIT_PASS
from harness.judge.jobs import CRASH, ERROR, FAIL, NOT_RUN, PASS, TIMEOUT
from harness.judge.record import RunRecord
from harness.problems import load_problem
from harness.problems.folder_task import cases_as_tests_file
from harness.problems.shapes import combine_seeds
from harness.shared.wire import UntrustedMessageError

ROOT = Path(__file__).resolve().parents[1]
FAMILY = ROOT / "tests" / "fixtures" / "reference_kernels" / "practice"
FOLDER = FAMILY / "running_sum_py"
CORRECT = FOLDER / "solutions" / "correct" / "fp32_cumsum.py"
WRONG = FOLDER / "solutions" / "wrong" / "exclusive.py"
STATUSES = {PASS, FAIL, ERROR, CRASH, TIMEOUT, NOT_RUN}


def _prepared(mode: str, submission: Path, **extra):
    return api.prepare(mode, None, str(submission), load_problem(FOLDER), "cpu", official=True, **extra)


def _record(mode: str = "test", cases: int = 3) -> RunRecord:
    problem = load_problem(FOLDER)
    all_cases = problem.cases("tests")
    options = api.modes.RunOptions(submission=CORRECT, problem=problem, device="cpu", official=True, timeout_s=60)
    return RunRecord(mode, (all_cases * 2)[:cases], options)


def _settled(text: str, ended=folder_eval.Ended(0), mode: str = "test", cases: int = 3, output: str = "",
             lines_cut: bool = False) -> RunRecord:
    record = _record(mode, cases)
    folder_eval.settle(record, text, {-1: ended.at - 1.0}, output, ended, lines_cut)
    return record


STATS_LINES = "".join(f"benchmark.{index}.{field}: {value}\n" for index in range(2) for field, value in (
    ("runs", 100), ("mean", 48331.2 + index), ("std", 812.5), ("err", 81.25), ("best", 46500.0), ("worst", 52010.7)))


# ---- the results the eval's lines make ------------------------------------------------------------

def test_a_tests_verdicts_and_messages_are_the_evals():
    record = _settled("test-count: 3\ntest.0.status: pass\ntest.1.status: fail\ntest.1.error: mismatch at 7: 1.0 2.0\n"
                      "test.2.status: pass\ncheck: fail\n", output="printed by the file\n")
    assert [(result.status, result.message) for result in record.results] == [
        (PASS, ""), (FAIL, "mismatch at 7: 1.0 2.0"), (PASS, "")]
    assert not record.passed and record.eval_stopped is None
    assert [result.output for result in record.results] == ["", "printed by the file\n", ""]  # beside the failure


def test_a_benchmarks_figures_are_the_ones_the_eval_wrote():
    record = _settled(STATS_LINES + "check: pass\n", mode="benchmark", cases=2)
    assert record.passed
    first = record.results[0].stats
    assert (first.runs, first.mean, first.std, first.err, first.best, first.worst) == (100, 48331.2, 812.5, 81.25, 46500.0, 52010.7)
    assert record.results[1].stats.mean == 48332.2
    assert record.results[0].judged_stats is None and record.results[0].worker_stats is None  # no clock of the judge's


def test_an_eval_that_ends_with_no_verdict_stopped_at_the_first_open_case():
    output = "Traceback (most recent call last):\n  File \"submission.py\", line 2\nValueError: nope\n"
    record = _settled("test.0.status: pass\n", folder_eval.Ended(1), output=output)
    assert [result.status for result in record.results] == [PASS, ERROR, NOT_RUN]
    assert record.results[1].message.endswith("before its verdict: ValueError: nope")
    assert record.eval_stopped is record.results[1] and record.results[1].output == output
    assert record.results[2].message == "not run: the folder's eval stopped at test 1"


@pytest.mark.parametrize("ended, status, words", [
    (folder_eval.Ended(-signal.SIGSEGV), CRASH, "killed by signal SIGSEGV"),
    (folder_eval.Ended(128 + signal.SIGKILL), CRASH, "killed by signal SIGKILL"),  # as bubblewrap reports it
    (folder_eval.Ended(None, timed_out=True), TIMEOUT, "past its time limit (60 s for the whole run"),
    (folder_eval.Ended(None, cancelled=True), NOT_RUN, "cancelled"),
    (folder_eval.Ended(None, wall_spent=True), NOT_RUN, "wall-time limit")])
def test_how_the_process_ended_settles_the_open_case(ended, status, words):
    record = _settled("", ended)
    assert record.results[0].status == status and words in record.results[0].message
    assert [result.status for result in record.results[1:]] == [NOT_RUN, NOT_RUN] and record.eval_stopped is None


def test_the_evals_check_holds_over_cases_that_passed():
    failed = _settled("test.0.status: pass\ntest.1.status: pass\ntest.2.status: pass\ncheck: fail\n")
    assert failed.results[-1].status == FAIL and "`check: fail`" in failed.results[-1].message
    exited = _settled("test.0.status: pass\ntest.1.status: pass\ntest.2.status: pass\ncheck: pass\n", folder_eval.Ended(3))
    assert exited.results[-1].status == FAIL and "exit status 3" in exited.results[-1].message
    assert _settled("test.0.status: pass\ntest.1.status: pass\ntest.2.status: pass\ncheck: pass\n").passed


def test_a_case_the_eval_left_out_before_its_check_is_not_run():
    record = _settled("benchmark.0.status: fail\nbenchmark.0.error: wrong\ncheck: fail\n", mode="leaderboard", cases=2)
    assert [result.status for result in record.results] == [FAIL, NOT_RUN]
    assert record.results[1].message == "not run: the folder's eval wrote no verdict for benchmark 1"
    silent = _settled("leaderboard.0.status: pass\ncheck: pass\n", mode="leaderboard", cases=1)  # an eval without the mode
    assert silent.results[0].status == NOT_RUN and "does it run mode `leaderboard`?" in silent.results[0].message


def test_lines_past_what_the_judge_reads_fail_the_open_case():
    record = _settled("test.0.status: pass\n", lines_cut=True)
    assert [result.status for result in record.results] == [PASS, FAIL, NOT_RUN]
    assert f"more than the {folder_eval.LINES_BYTES} bytes" in record.results[1].message


def test_figures_no_clock_reads_fail_their_case():
    forged = STATS_LINES.replace("benchmark.1.mean: 48332.2", "benchmark.1.mean: nan")
    record = _settled(forged + "check: pass\n", mode="benchmark", cases=2)
    assert [result.status for result in record.results] == [PASS, FAIL]
    assert "benchmark.1.mean as 'nan', which is no number" in record.results[1].message


FIELDS = ("runs", "mean", "std", "err", "best", "worst")
VALUES = st.one_of(st.integers(-10**30, 10**30).map(str), st.floats(allow_nan=True, allow_infinity=True).map(repr),
                   st.text(max_size=80), st.sampled_from(["1e400", "-0.0", "0", "1_000", "0x10", " 5", "5 ", "nan", "inf"]))


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(st.sampled_from(FIELDS), VALUES))
def test_any_figures_make_stats_in_range_or_are_refused_by_name(values):
    lines = {f"benchmark.0.{field}": value for field, value in values.items()}
    try:
        found = claims.eval_stats(lines, "benchmark.0")
    except UntrustedMessageError as error:
        assert "benchmark.0." in str(error)
        return
    assert set(values) == set(FIELDS)
    assert 1 <= found.runs <= claims.MOST_ROUNDS and claims.SHORTEST_NS <= found.mean <= claims.LONGEST_NS
    assert all(math.isfinite(value) and 0 <= value <= claims.LONGEST_NS
               for value in (found.std, found.err, found.best, found.worst))


LINE_KEYS = st.sampled_from(["check", "test-count", "benchmark-count", *(f"{kind}.{index}.{field}" for kind in ("test", "benchmark")
                                                                         for index in (0, 1, 2, 7, -1)
                                                                         for field in ("spec", "status", "error", "report", *FIELDS))])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.one_of(st.tuples(LINE_KEYS, VALUES).map(lambda pair: f"{pair[0]}: {pair[1]}"), st.text(max_size=60))),
       st.sampled_from(["test", "benchmark", "leaderboard", "profile"]),
       st.sampled_from([folder_eval.Ended(0), folder_eval.Ended(1), folder_eval.Ended(-9), folder_eval.Ended(None, timed_out=True)]),
       st.booleans())
def test_whatever_the_eval_writes_every_case_gets_one_known_status(lines, mode, ended, cut):
    record = _settled("\n".join(lines), ended, mode=mode, cases=3, lines_cut=cut)
    assert len(record.results) == 3 and {result.status for result in record.results} <= STATUSES
    for result in record.results:
        assert result.stats is None or (result.passed and result.stats.mean >= claims.SHORTEST_NS)
    assert record.eval_stopped is None or record.eval_stopped.status == ERROR


@settings(max_examples=200, deadline=None)
@example("\u00e9" * 4)  # past ASCII: base64's ValueError, not binascii.Error, ended the judge with a traceback
@example("aGVsbG8=")
@given(st.one_of(st.text(max_size=80), st.binary(max_size=60).map(lambda raw: base64.b64encode(raw).decode())))
def test_a_profiles_report_of_any_text_is_its_table_or_fails_its_case(report):
    record = _settled(f"benchmark.0.report: {report}\ncheck: pass\n", mode="profile", cases=1)
    result = record.results[0]
    assert result.status == PASS and isinstance(result.report, str) or \
        result.status == FAIL and result.message.startswith("the judge could not read the eval's figures")


def _drained(records: list[bytes]) -> folder_eval._Drained:
    """The judge's reader of the eval's lines, given `records` one read each (a packet socket's
    reads end at each record, as a pipe's do where the writer pauses between writes)."""
    ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    reader = folder_eval._Drained(ours.detach(), folder_eval.LINES_BYTES, head=True)
    reader.start()
    with theirs:
        for record in records:
            theirs.send(record)
    reader.join()
    return reader


@settings(max_examples=50, deadline=None)
@example("1" * 5000)  # past int()'s 4300 digits: a ValueError ended the judge with a traceback
@given(st.text(alphabet="0123456789\u0663\U0001d7d9", min_size=1, max_size=6000))
def test_a_case_index_of_any_digits_never_stops_the_judge(digits):
    reader = _drained([f"test.{digits}.status: pass\n".encode(), b"test.1.status: pass\n"])
    ends = folder_eval._case_ends(reader, "test", 0.0)
    assert set(ends) <= {-1, 1} | ({int(digits)} if digits.isascii() and len(digits) <= 9 else set())
    assert ends[1] >= ends[-1]


def test_a_line_a_read_makes_its_times_in_linear_time():
    # One line a read, as a writer that pauses between lines makes them: a scan of every read per
    # line took the judge minutes past the eval's end for a megabyte of them.
    records = [b"test.0.a\n"] * 30000 + [b"test.1.status: pass\n"]
    reader = _drained(records)
    looked_at = []

    class Counted(array.array):  # every read's end the search looks at, counted
        def __getitem__(self, index):
            looked_at.append(index)
            return super().__getitem__(index)

    reader._read_ends = Counted("q", reader._read_ends)
    ends = folder_eval._case_ends(reader, "test", 0.0)
    assert set(ends) == {-1, 0, 1} and ends[0] <= ends[1]
    assert looked_at and len(looked_at) <= len(records) * 2 * math.ceil(math.log2(len(records)))  # a scan would look at ~450 million


@functools.lru_cache
def _prepared_once(mode: str):
    return _prepared(mode, CORRECT)


def _run_with_sinks(mode: str, lines: str, output: str, ended: folder_eval.Ended) -> tuple[list, str, str, dict]:
    """folder_eval.run on an eval's `lines` (one read each), its `output` and how it `ended`, with
    the sinks a run's record goes to: the report, the POPCORN lines, the --json document and, in a
    timed mode, the store and its CSV. (the cases, the report, the POPCORN lines, the document)."""
    import io
    import json
    import tempfile

    from rich.console import Console

    from harness.judge.record import Listeners
    from harness.results.console import Reporter
    from harness.results.document import run_document
    from harness.results.popcorn import PopcornLines, PopcornLog
    from harness.results.recording import Recording, keep_run

    class NoSandbox:
        refused, layers = [], {}

        def __init__(self, *args, **kwargs):
            pass

        def close(self):
            pass

    reader = _drained([line.encode("utf-8", "surrogateescape") for line in lines.splitlines(keepends=True)])
    cases, options = _prepared_once(mode)
    report = io.StringIO()
    with pytest.MonkeyPatch.context() as monkeypatch, tempfile.TemporaryDirectory() as folder, \
            open(f"{folder}/popcorn", "w+") as popcorn:
        monkeypatch.setattr(folder_eval, "Sandbox", NoSandbox)
        monkeypatch.setattr(folder_eval, "protect_the_judge", lambda: [])
        monkeypatch.setattr(folder_eval, "_run_eval", lambda *args: (reader, output, ended))
        console = Console(file=report, highlight=False, width=132)  # as the service's judge makes it
        record = api.run(mode, cases, options, Listeners(PopcornLines(PopcornLog(os.dup(popcorn.fileno()))),
                                                         Reporter(console=console)))
        document = json.loads(json.dumps(run_document(record), allow_nan=False))
        if mode in ("benchmark", "leaderboard"):  # the timed modes keep their rows
            keep_run(Recording(Path(folder, "verdicts.sqlite"), Path(folder, "runs.csv")), record, None, {}, "fixed", document)
        popcorn.seek(0)
        return cases, report.getvalue(), popcorn.read(), document


@settings(max_examples=100, deadline=None)
@example(["test.0.error: \x1bc\x1b[2J"], "test", "\x1bc", folder_eval.Ended(1))  # a lone ESC passed the report's stripping
@example(["benchmark.0.report: \u00e9"], "profile", "", folder_eval.Ended(0))
@example([f"test.{'9' * 5000}.status: pass"], "test", "", folder_eval.Ended(0))
@given(st.lists(st.one_of(st.tuples(LINE_KEYS, VALUES).map(lambda pair: f"{pair[0]}: {pair[1]}"), st.text(max_size=60)),
                max_size=20),
       st.sampled_from(["test", "benchmark", "leaderboard", "profile"]), st.text(max_size=200),
       st.sampled_from([folder_eval.Ended(0), folder_eval.Ended(1), folder_eval.Ended(-9), folder_eval.Ended(None, timed_out=True)]))
def test_whatever_the_eval_writes_every_sink_takes_the_runs_record(lines, mode, output, ended):
    cases, report, popcorn, document = _run_with_sinks(mode, "\n".join(lines) + "\n", output, ended)
    assert len(document["cases"]) == len(cases) and "\x1b" not in report
    kind = "test" if mode == "test" else "benchmark"
    popcorn_lines = popcorn.splitlines()
    assert popcorn_lines[0] == f"{kind}-count: {len(cases)}"
    assert all(line.partition(": ")[0].startswith((f"{kind}.", "check")) for line in popcorn_lines[1:]), popcorn


# ---- what --official hands the eval ---------------------------------------------------------------

def test_under_official_the_eval_gets_the_cases_as_written_and_the_secret_as_its_seed():
    cases, options = _prepared("test", CORRECT, secret=77)
    assert [case.args["seed"] for case in cases] == [4101, 4102, 4103] and options.eval_seed == 77
    judged, own = api.prepare("test", None, str(CORRECT), load_problem(FOLDER), "cpu", official=False, secret=77)
    assert [case.args["seed"] for case in judged] == [combine_seeds(seed, 77) for seed in (4101, 4102, 4103)]
    assert own.eval_seed is None


def test_a_folder_without_the_eval_its_task_runs_refuses_official(tmp_path):
    shutil.copytree(FAMILY, tmp_path / "practice")
    (tmp_path / "practice" / "eval.py").unlink()
    problem = load_problem(tmp_path / "practice" / FOLDER.name)
    assert problem.eval_main == "" and "which its folder lacks" in problem.official_refused
    with pytest.raises(click.UsageError, match="which its folder lacks"):
        api.prepare("test", None, str(CORRECT), problem, "cpu", official=True)
    assert load_problem(FOLDER).eval_main == "eval.py" and not load_problem(FOLDER).official_refused


# ---- the eval run whole -------------------------------------------------------------------------

def _run(mode: str, submission: Path, **extra) -> RunRecord:
    cases, options = _prepared(mode, submission, **extra)
    return api.run(mode, cases, options)


def _submission(tmp_path: Path, body: str) -> Path:
    path = tmp_path / "submission.py"
    path.write_text(body)
    return path


@pytest.mark.e2e
def test_the_folders_eval_passes_the_correct_solution_and_fails_the_wrong_one_with_its_own_message():
    passed = _run("test", CORRECT)
    assert passed.exit_status == EXIT_PASS and [result.status for result in passed.results] == [PASS] * 3
    assert passed.sandbox is not None and passed.sandbox["checked"]  # the sandbox's layers, as its check found them
    failed = _run("test", WRONG)
    assert failed.exit_status == EXIT_FAIL and [result.status for result in failed.results] == [FAIL] * 3
    assert failed.results[0].message.startswith("mismatch: 998 elements off; at (0,): 0.0 for ")


@pytest.mark.e2e
def test_a_benchmark_reports_the_evals_own_times():
    record = _run("benchmark", CORRECT)
    assert record.exit_status == EXIT_PASS
    stats = record.results[0].stats
    assert stats.runs == 1 and stats.mean == stats.best == stats.worst > 0  # the fixture's eval times one call


@pytest.mark.e2e
def test_an_exception_the_eval_does_not_catch_stops_it(tmp_path):
    record = _run("test", _submission(tmp_path, "def custom_kernel(data):\n    raise ValueError('no kernel yet')\n"))
    assert record.exit_status == EXIT_EVAL_STOPPED and record.eval_stopped is record.results[0]
    assert record.results[0].message.endswith("ValueError: no kernel yet")
    assert "submission.py\", line 2, in custom_kernel" in record.results[0].output


@pytest.mark.e2e
@pytest.mark.parametrize("body, status", [
    ("import os, signal\ndef custom_kernel(data):\n    os.kill(os.getpid(), signal.SIGSEGV)\n", CRASH),
    ("import time\ndef custom_kernel(data):\n    time.sleep(600)\n", TIMEOUT)])
def test_a_crash_or_a_hang_ends_the_eval_with_its_status(tmp_path, body, status):
    began = time.monotonic()
    record = _run("test", _submission(tmp_path, body), timeout_s=8)
    assert [result.status for result in record.results] == [status, NOT_RUN, NOT_RUN]
    assert time.monotonic() - began < 60


@pytest.mark.e2e
def test_a_flood_of_lines_and_output_is_read_as_far_as_the_judge_reads(tmp_path):
    flood = ("import os, sys\ndef custom_kernel(data):\n"
             "    os.write(int(os.environ['POPCORN_FD']), b'test.0.status: pass\\n' * 200000)\n"
             "    sys.stdout.write('x' * (8 << 20)); sys.stdout.flush()\n"
             "    raise SystemExit(0)\n")
    record = _run("test", _submission(tmp_path, flood))
    assert record.results[0].status == FAIL and "bytes of lines the judge reads" in record.results[0].message
    marker = "(its earlier output left out)\n"
    assert record.results[0].output.startswith(marker) and len(record.results[0].output) <= folder_eval.OUTPUT_BYTES + len(marker)


@pytest.mark.e2e
def test_a_cancel_ends_the_eval_at_once(tmp_path):
    cancelled = threading.Event()
    threading.Timer(4, cancelled.set).start()
    began = time.monotonic()
    record = _run("test", _submission(tmp_path, "import time\ndef custom_kernel(data):\n    time.sleep(600)\n"),
                  cancelled=cancelled)
    assert record.results[0].status == NOT_RUN and "cancelled" in record.results[0].message
    assert time.monotonic() - began < 30


@pytest.mark.e2e
def test_the_time_limit_counts_from_the_evals_start_not_the_sandboxs(monkeypatch):
    """A start slower than the whole limit (here made so) costs the file nothing."""
    monkeypatch.setattr(folder_eval.runner, "PROGRAM", "import time; time.sleep(12); " + folder_eval.runner.PROGRAM)
    record = _run("test", CORRECT, timeout_s=10)
    assert [result.status for result in record.results] == [PASS] * 3


@pytest.mark.e2e
def test_a_process_that_ends_before_the_eval_begins_is_the_machines_failure(monkeypatch):
    monkeypatch.setattr(folder_eval.runner, "PROGRAM", "import sys; sys.exit(3)")
    with pytest.raises(api.Stopped) as stopped:
        _run("test", CORRECT)
    assert stopped.value.status == EXIT_INFRASTRUCTURE and "ended before it began (exit status 3)" in stopped.value.message


@pytest.mark.e2e
def test_an_eval_that_never_begins_is_the_machines_failure_whatever_its_time_limit(monkeypatch):
    monkeypatch.setattr(folder_eval, "STARTED_LIMIT_S", 3)
    monkeypatch.setattr(folder_eval.runner, "PROGRAM", "import time; time.sleep(600)")
    with pytest.raises(api.Stopped) as stopped:
        _run("test", CORRECT, timeout_s=1)
    assert stopped.value.status == EXIT_INFRASTRUCTURE


ORPHAN = """import os, signal, time
def custom_kernel(data):
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
            time.sleep(600)
        os._exit(0)
    os._exit(0)
"""


@pytest.mark.e2e
@pytest.mark.parametrize("layers_off", ["", "bubblewrap,cgroup"])
def test_an_orphan_holding_the_evals_pipes_keeps_the_judge_no_longer_than_the_eval(monkeypatch, tmp_path, layers_off):
    from harness.judge.layers import LAYERS_OFF_ENV

    monkeypatch.setenv(LAYERS_OFF_ENV, layers_off)
    began = time.monotonic()
    record = _run("test", _submission(tmp_path, ORPHAN))
    assert record.results[0].status == ERROR and "exit status 0" in record.results[0].message
    assert time.monotonic() - began < folder_eval.ENDED_LIMIT_S


@pytest.mark.e2e
def test_an_eval_the_system_cannot_start_is_the_machines_failure_and_leaves_no_descriptor(monkeypatch):
    def refused(*args, **kwargs):
        raise OSError(24, "Too many open files")

    _run("test", CORRECT)  # the sandbox's check, made once per process, holds none after it
    cases, options = _prepared("test", CORRECT)
    before = set(os.listdir("/proc/self/fd"))
    monkeypatch.setattr(folder_eval.subprocess, "Popen", refused)
    with pytest.raises(api.Stopped) as stopped:
        api.run("test", cases, options)
    assert stopped.value.status == EXIT_INFRASTRUCTURE and "could not start" in stopped.value.message
    assert set(os.listdir("/proc/self/fd")) <= before


# An eval as pmpp_v2's measures: in a spawned pool, whose result is a class of the eval's __main__.
# Its figure tells how it ran: no new privileges (1000), the system-call filter (200), its own
# cases file read from its folder (the file's length).
CONFINED_EVAL = '''
import dataclasses, multiprocessing, os, sys


@dataclasses.dataclass
class Stats:
    mean: float


def measure(no_new_privs: str, seccomp: str) -> Stats:
    return Stats(float(no_new_privs) * 1000 + float(seccomp) * 100 + len(open(sys.argv[2]).read()))


if __name__ == "__main__":
    status = dict(line.split(":", 1) for line in open("/proc/self/status").read().splitlines() if ":" in line)
    with multiprocessing.get_context("spawn").Pool(1) as pool:
        stats = pool.apply(measure, (status["NoNewPrivs"].strip(), status["Seccomp"].strip()))
    with os.fdopen(int(os.environ["POPCORN_FD"]), "w") as popcorn:
        for field, value in (("runs", 2), ("mean", stats.mean), ("std", 0.0), ("err", 0.0), ("best", stats.mean),
                             ("worst", stats.mean)):
            popcorn.write(f"benchmark.0.{field}: {value}\\n")
        popcorn.write(f"check: {'pass' if sys.argv[1] == 'benchmark' else 'fail'}\\n")
'''


@pytest.mark.e2e
@pytest.mark.parametrize("layers_off, seccomp_mode", [("", 2), ("seccomp", 0)])  # 2: filtered
def test_the_eval_runs_confined_and_its_spawned_pool_answers(monkeypatch, tmp_path, layers_off, seccomp_mode):
    from harness.judge.layers import LAYERS_OFF_ENV
    from harness.judge.sandbox import Sandbox

    if Sandbox("cpu").refused:
        pytest.skip("this system lacks sandbox layers: the figure tells the whole sandbox's")
    monkeypatch.setenv(LAYERS_OFF_ENV, layers_off)
    shutil.copytree(FAMILY, tmp_path / "practice")
    (tmp_path / "practice" / "eval.py").write_text(CONFINED_EVAL)
    problem = load_problem(tmp_path / "practice" / FOLDER.name)
    cases, options = api.prepare("benchmark", None, str(CORRECT), problem, "cpu", official=True)
    record = api.run("benchmark", cases, options)
    written = len(cases_as_tests_file([case.args for case in cases]))
    assert record.exit_status == EXIT_PASS and record.results[0].stats.mean == 1000 + seccomp_mode * 100 + written, \
        record.results[0].output


# ---- through the service --------------------------------------------------------------------------

def _official_candidate(candidate_id: str, source: str) -> dict:
    return {"id": candidate_id, "source": source, "mode": "test", "problem": str(FOLDER), "options": {"official": True}}


HOARDS_MEMORY = "def custom_kernel(data):\n    hoard = b'x' * (1 << 30)\n    return data[1]\n"


@pytest.mark.e2e
def test_through_the_service_a_folders_eval_is_held_to_the_workers_memory_limit():
    from harness.service.judges import LocalJudge

    judge = LocalJudge("cpu", memory_limit_mib=256)
    judge.start()
    try:
        reply = judge.judge(_official_candidate("hoards", HOARDS_MEMORY))
        case = reply["document"]["cases"][0]
        assert case["status"] == "crash" and "SIGKILL" in case["message"], reply
        passed = judge.judge(_official_candidate("next", CORRECT.read_text()))
        assert passed["exit_status"] == EXIT_PASS, passed
    finally:
        judge.close()
