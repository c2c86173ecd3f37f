"""Every number a worker sends passes one gate (harness/judge/claims.py): any claim, and any mix of
claims across rounds, gives figures that the statistics, the stopping rule, the progress line,
the verdicts, the report and the --json document all take, or the case's `fail` naming the claim;
never a traceback."""

import io
import json
import math
import os
import statistics
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from rich.console import Console

from harness.judge import claims
from harness.judge.jobs import PASS, CaseResult
from harness.judge.modes import RunOptions
from harness.judge.record import RunRecord
from harness.judge.verdicts import claimed_figures_problem, figures_problem
from harness.problems import PROBLEMS
from harness.problems.shapes import parse_cases
from harness.problems.sol import Ceilings
from harness.results.console import Reporter
from harness.results.document import run_document
from harness.shared.stats import StoppingRule, calculate_stats
from harness.shared.wire import UntrustedMessageError

ROOT = Path(__file__).resolve().parent.parent
GEMM = PROBLEMS["nvfp4_gemm"]
CASE = parse_cases("m: 128; n: 256; k: 256; l: 1; seed: 1111")[0]

# What a worker may send where a number belongs: any float (nan, infinities, -0.0, subnormals,
# 1e300), the edges of every range, ints no float holds, and values of other types.
ANY_CLAIM = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True, allow_subnormal=True),
    st.sampled_from([0.0, -0.0, 1e-300, 5e-324, 1e300, -1.0, math.inf, -math.inf, math.nan, 0.999, 1.0, 1e15,
                     1e15 * (1 + 1e-15), 1e22, 1e23]),
    st.integers(min_value=-10**30, max_value=10**30), st.just(10**400),
    st.booleans(), st.none(), st.text(max_size=4), st.lists(st.floats(), max_size=2), st.tuples(st.floats()),
)
# Times an honest worker reports, in ns, mixed in so that most examples get past the gate.
HONEST_NS = st.floats(min_value=1.0, max_value=1e10)
TIME = st.one_of(ANY_CLAIM, HONEST_NS, HONEST_NS, st.just(0.0))
RATE = st.one_of(ANY_CLAIM, st.floats(min_value=1e9, max_value=1e16))


@settings(max_examples=500)
@given(ANY_CLAIM)
def test_each_kind_takes_its_range_and_refuses_the_rest_naming_the_claim(value):
    for read, low, high in ((claims.batch_ns, claims.SHORTEST_NS, claims.LONGEST_NS),
                            (claims.call_ns, claims.SHORTEST_NS, claims.LONGEST_NS),
                            (claims.rate, claims.LEAST_RATE, claims.MOST_RATE)):
        try:
            number = read(value, "the claim under test")
        except UntrustedMessageError as refused:
            assert "the claim under test" in str(refused)
            continue
        assert type(number) is float and type(value) in (int, float)
        assert number == 0.0 and read is claims.batch_ns or low <= number <= high


def _report(result: CaseResult, official: bool, ceilings: Ceilings | None) -> str:
    """The report and the --json document of a benchmark run of one case with `result`, as
    harness/judge/modes.py makes them (ceilings held by what the case reached)."""
    console = Console(file=io.StringIO(), width=160, color_system=None)
    reporter = Reporter(console=console)
    options = RunOptions(submission=ROOT / "tests" / "fixtures" / "torch_submission.py", problem=GEMM, device="cpu",
                         official=official)
    record = RunRecord("benchmark", [CASE], options)
    reporter.run_started(record)
    record.results.append(result)
    reporter.case_judged(0, CASE, result)
    work = GEMM.work(CASE.args)
    if ceilings is not None and result.passed:
        ceilings = ceilings.held_by([(CASE.label, work, result.stats.mean / 1e9)])
    record.ceilings, record.ceilings_note, record.floor, record.works = ceilings, "measured", ceilings, [work]
    reporter.run_ended(record)
    json.dumps(run_document(record), allow_nan=False)  # every figure finite
    return console.file.getvalue()


def _example(batches, official=True) -> dict:
    return dict(rounds=[(batch, 5000.0) for batch in batches], calls=15, judged_ns=1000.0, official=official,
                baseline=[800.0, 810.0], peak=2e15, bandwidth=8e12)


@settings(max_examples=200, deadline=None)
# The claims that ended the judge with a traceback (0, 1e-300, 1e300, every round), and mixes.
@example(**_example([0.0] * 3))
@example(**_example([1e-300] * 3))
@example(**_example([1e300] * 3))
@example(**_example([1e9, 0.0, 1.0, 1e15], official=False))
@given(rounds=st.lists(st.tuples(TIME, TIME), min_size=1, max_size=12), calls=st.integers(1, 16),
       judged_ns=st.floats(min_value=1.0, max_value=1e10), official=st.booleans(),
       baseline=st.lists(TIME, min_size=2, max_size=3), peak=RATE, bandwidth=RATE)
def test_any_claims_across_rounds_give_figures_or_a_fail_naming_them(rounds, calls, judged_ns, official, baseline,
                                                                    peak, bandwidth):
    try:
        worker_ns = [claims.batch_ns(batch, "the batch's time") / calls for batch, _ in rounds]
        host_ns = [claims.batch_ns(host, "its host time") / calls for _, host in rounds]
    except UntrustedMessageError as refused:
        assert "the batch's time" in str(refused) or "its host time" in str(refused)
        return
    rule = StoppingRule(max_repeats=1000, max_time_ns=30e9, clock=lambda: 2 * 10**8)
    for count in range(1, len(worker_ns) + 1):  # the rule and the progress line after every round
        rule.should_stop(worker_ns[:count], 0)
        assert rule.progress(worker_ns[:count], 0).startswith(f"round {count} of at most 1000, ")
    problem = claimed_figures_problem(worker_ns)
    if problem:
        assert problem.startswith("the worker reported the batch's time as 0 ns")
        return
    figures = worker_ns * 3  # the stopping rule lets no case end before three rounds
    claimed, judged = calculate_stats(figures), calculate_stats([judged_ns] * len(figures))
    figures_problem(figures, [judged_ns] * len(figures), tolerance_ns=50.0)
    result = CaseResult(PASS, stats=claimed if official else judged, worker_stats=claimed, judged_stats=judged,
                        host_ns=statistics.fmean(host_ns), device_name="cpu")
    try:
        result.baselines = {"cublas_bf16": calculate_stats([claims.call_ns(value, "a time of cublas_bf16") for value in baseline]),
                            "torch_dequant_matmul": judged}
    except UntrustedMessageError as refused:
        assert "a time of cublas_bf16" in str(refused)
    try:
        ceilings = Ceilings("cpu", claims.rate(peak, "its peak"), claims.rate(bandwidth, "its bandwidth"), "measured")
    except UntrustedMessageError as refused:
        assert "its peak" in str(refused) or "its bandwidth" in str(refused)
        ceilings = None
    assert "check: pass" in _report(result, official, ceilings)


def test_a_line_number_is_an_int_of_a_file():
    assert claims.line_number(12) == 12
    for value in (True, -1, 10**400, 12.0, "12"):
        with pytest.raises(UntrustedMessageError, match="the line it raised at"):
            claims.line_number(value)


def test_activity_records_are_strings_and_64_bit_timestamps():
    assert claims.activity([("kernel", "stream 7", 10, 20)]) == [("kernel", "stream 7", 10, 20)]
    assert claims.activity(None) is None
    for records in ([("kernel", "stream 7", -1, 20)], [("kernel", "stream 7", 10, 2**64)], [("kernel", 7, 10, 20)],
                    [("kernel", "stream 7", 10.0, 20)], "records", [("kernel", "stream 7", True, 20)]):
        with pytest.raises(UntrustedMessageError, match="GPU activity"):
            claims.activity(records)


CLAIMING = '''from harness.runner import calls

from reference import ref_kernel

_batch_time = calls.Calls.batch_time


def _claimed(self):
    _, activity = _batch_time(self)
    return {claim}, activity


calls.Calls.batch_time = _claimed


def custom_kernel(data):
    return ref_kernel(data)
'''


def _judged_claim(tmp_path, claim: str, official: bool, device: str) -> dict:
    """The --json case of a benchmark run of a worker that reports every batch at `claim`."""
    submission, cases = tmp_path / "claims.py", tmp_path / "bench.txt"
    submission.write_text(CLAIMING.format(claim=claim))
    cases.write_text(CASE.spec + "\n")
    result = subprocess.run([sys.executable, "-m", "harness", "benchmark", str(cases), "--device", device, "--max-repeats", "5",
                             "--json", "--submission", str(submission), *(["--official"] if official else [])],
                            cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert result.returncode == 112, result.stderr
    return json.loads(result.stdout)["cases"][0]


@pytest.mark.e2e
@pytest.mark.parametrize("claim, official, message", [
    ("0.0", False, "the worker reported the batch's time as 0 ns"),
    ("0.0", True, "the worker reported the batch's time as 0 ns"),
    ("1e-300", False, "the worker reported the batch's time as 1e-300 ns"),
    ("1e300", True, "the worker reported the batch's time as 1e+300 ns"),
])
def test_a_claimed_time_fails_its_case_through_the_judge(tmp_path, claim, official, message):
    """A worker that reports every batch at `claim`: the one-shot judge gives the case its `fail`
    naming the claim (a traceback with no verdict before, or a pass at an absurd score)."""
    case = _judged_claim(tmp_path, claim, official, "cpu")
    assert case["status"] == "fail" and case["message"].startswith(message), case["message"]


@pytest.mark.e2e
@pytest.mark.gpu
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device: a GPU batch's time is its events'")
@pytest.mark.parametrize("claim, official", [("0.0", True), ("1e-300", False), ("1e300", True)])
def test_a_claimed_time_fails_its_case_on_the_gpu(tmp_path, claim, official):
    """As on the CPU, where the worker's figure is its CUDA events' and the calibration partner's
    batches, which do no work, pass the same gate."""
    case = _judged_claim(tmp_path, claim, official, "cuda")
    assert case["status"] == "fail" and case["message"].startswith("the worker reported the batch's time as "), case["message"]

@pytest.mark.e2e
def test_through_the_service_a_claim_fails_its_candidate_and_the_secret_seed_stays_in_the_judge():
    """A service judge under a secret seed: a candidate that claims 0 ns a batch gets its case's
    `fail` naming the claim (exit 2, the judge ended, before the gate), one that raises every long
    number it sees finds no secret, and the judge lives on to pass the next."""
    import secrets

    from harness.service.judges import LocalJudge

    secret = str(secrets.randbelow(10**9) + 10**9)
    judge = LocalJudge("cpu", environment={**os.environ, "POPCORN_SEED": secret})
    judge.start()
    try:
        claimed = judge.judge({"id": "claims", "source": CLAIMING.format(claim="0.0"), "mode": "benchmark",
                               "tests": CASE.spec + "\n", "options": {"max_repeats": 5}})
        case = claimed["document"]["cases"][0]
        assert claimed["exit_status"] == 112 and case["status"] == "fail", claimed
        assert case["message"].startswith("the worker reported the batch's time as 0 ns"), case
        peeking = judge.judge({"id": "peeks", "source": (ROOT / "tests" / "fixtures" / "cheat_reads_the_secret_seed.py").read_text(),
                               "mode": "test", "tests": CASE.spec + "\n", "options": {}})
        assert "seen by the worker: initial_seed=" in peeking["document"]["cases"][0]["message"], peeking
        assert secret not in json.dumps(peeking) and secret not in json.dumps(claimed)
        # Under --official a problem folder's own eval is handed a seed, where the file reads it: not the secret.
        folder = ROOT / "tests" / "fixtures" / "reference_kernels" / "practice" / "running_sum_py"
        official = judge.judge({"id": "peeks-officially", "problem": str(folder), "mode": "test", "options": {"official": True},
                                "source": (ROOT / "tests" / "fixtures" / "cheat_reads_the_secret_seed.py").read_text()})
        assert official["document"]["cases"][0]["status"] == "error" and secret not in json.dumps(official), official
        passed = judge.judge({"id": "next", "source": (ROOT / "tests" / "fixtures" / "torch_submission.py").read_text(),
                              "mode": "test", "tests": CASE.spec + "\n", "options": {}})
        assert passed["exit_status"] == 0, passed
    finally:
        judge.close()
